//! The `/word` commands a person may type wherever text reaches pincer
//! (Slack, Feishu, `pincer chat`): each is answered by the host, never by
//! a turn, except `/new`, which starts a fresh session (and a turn when
//! text follows it). An unknown `/word` gets a short answer and no turn.

/// What a message that is a command asks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatCommand {
    Help,
    Status,
    /// A `/word` pincer does not know.
    Unknown(String),
}

/// Commands the host answers elsewhere (`/new` in the turn, `/tier`,
/// `/approve` and `/deny` by the approvals code), so [`parse`] leaves them.
const HANDLED_ELSEWHERE: [&str; 4] = ["new", "tier", "approve", "deny"];

/// The command `text` is, if it is one: `/` and a word of letters, digits,
/// `-` or `_`, alone or followed by a space (`/usr/bin/env` and `/ 2` are
/// not commands).
pub fn parse(text: &str) -> Option<ChatCommand> {
    let word = command_word(text)?;
    Some(match word {
        "help" => ChatCommand::Help,
        "status" => ChatCommand::Status,
        w if HANDLED_ELSEWHERE.contains(&w) => return None,
        other => ChatCommand::Unknown(other.to_string()),
    })
}

fn command_word(text: &str) -> Option<&str> {
    let rest = text.trim_start().strip_prefix('/')?;
    let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
    let word = &rest[..end];
    let is_word = !word.is_empty()
        && word.len() <= 32
        && word.starts_with(|c: char| c.is_ascii_alphabetic())
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    is_word.then_some(word)
}

/// What `/help` answers.
pub const HELP: &str = "Commands:\n\
• `/new` starts a fresh session in this conversation (text after it is sent in it)\n\
• `/status` shows the workspace, model, approvals tier, container and queue\n\
• `/tier read-only|approval` tightens approvals for this conversation (`/tier` shows it)\n\
• `/approve ID` and `/deny ID` decide a waiting approval request\n\
• `/help` shows this\n\
On Slack, type them after the app's command: `/pincer new`, `/pincer status`.";

/// What an unknown command answers.
pub fn unknown(word: &str) -> String {
    format!(
        "`/{word}` is not a command here; `/help` lists them. Nothing was sent to the assistant."
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_a_slash_and_one_word() {
        assert_eq!(parse("/help"), Some(ChatCommand::Help));
        assert_eq!(parse("  /status  "), Some(ChatCommand::Status));
        assert_eq!(parse("/status please"), Some(ChatCommand::Status));
        assert_eq!(
            parse("/frobnicate x"),
            Some(ChatCommand::Unknown("frobnicate".into()))
        );
        for left in [
            "/new",
            "/new hello",
            "/tier read-only",
            "/approve apr_1",
            "/deny apr_1",
        ] {
            assert_eq!(parse(left), None, "{left}");
        }
        for text in [
            "hello /help",
            "/usr/bin/env is missing",
            "/ 2",
            "/",
            "//x",
            "/1abc",
            "/状态",
        ] {
            assert_eq!(parse(text), None, "{text}");
        }
    }
}
