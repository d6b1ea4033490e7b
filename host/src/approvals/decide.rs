//! What a person asks for when they decide: the words of a chat command
//! (`/approve ID [once|session|always [RULE]]`, `/deny ID [REASON]`) or of
//! the CLI, turned into a [`Decision`] on a stored request.

use super::rules::Rule;
use super::store::{Decision, Request};

/// A decision as asked for, before it meets its request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Wanted {
    Once,
    Session,
    /// With the rule written, or the default one for the request.
    Always(Option<String>),
    Deny(Option<String>),
}

/// A chat command deciding request `id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatDecision {
    pub id: String,
    pub wanted: Wanted,
}

/// `text` as a decision command: `None` when it is not one (an ordinary
/// message), `Err` with what to write when it is one written wrong.
pub fn parse_chat(text: &str) -> Option<Result<ChatDecision, String>> {
    let text = text.trim();
    let (verb, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let approve = match verb {
        "/approve" => true,
        "/deny" => false,
        _ => return None,
    };
    let rest = rest.trim();
    let (id, rest) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
    let rest = rest.trim();
    if !id.starts_with("apr_") {
        return Some(Err(format!(
            "write `{verb} apr_…` with the id of the request{}",
            if approve {
                " and `once`, `session` or `always [RULE]`"
            } else {
                " and an optional reason"
            }
        )));
    }
    let optional = |t: &str| (!t.is_empty()).then(|| t.to_owned());
    let wanted = if approve {
        let (how, rule) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
        match how {
            "" | "once" => Wanted::Once,
            "session" => Wanted::Session,
            "always" => Wanted::Always(optional(rule.trim())),
            other => {
                return Some(Err(format!(
                    "`{other}`: approve `once`, `session` or `always [RULE]`"
                )));
            }
        }
    } else {
        Wanted::Deny(optional(rest))
    };
    Some(Ok(ChatDecision {
        id: id.to_owned(),
        wanted,
    }))
}

impl Wanted {
    /// The decision on `request`. "Always" without a rule allows exactly
    /// this command (as an argv prefix) or this tool.
    pub fn decision(self, request: &Request) -> Result<Decision, String> {
        Ok(match self {
            Wanted::Once => Decision::Once,
            Wanted::Session => Decision::Session,
            Wanted::Deny(reason) => Decision::Deny { reason },
            Wanted::Always(rule) => {
                let text = rule.unwrap_or_else(|| default_rule(request));
                Decision::Always(Rule::parse(&text).map_err(|e| {
                    format!("no \"always\" rule can be made of `{text}`: {e}; decide once instead")
                })?)
            }
        })
    }
}

fn default_rule(request: &Request) -> String {
    if request.tool == "bash" {
        format!("bash: {}", request.preview)
    } else {
        request.tool.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_commands_parse_or_say_what_to_write() {
        assert_eq!(parse_chat("hello"), None);
        assert_eq!(parse_chat("/approved apr_1"), None);
        assert_eq!(
            parse_chat("/approve apr_1"),
            Some(Ok(ChatDecision {
                id: "apr_1".into(),
                wanted: Wanted::Once
            }))
        );
        assert_eq!(
            parse_chat("/approve apr_1 always bash: npm test"),
            Some(Ok(ChatDecision {
                id: "apr_1".into(),
                wanted: Wanted::Always(Some("bash: npm test".into()))
            }))
        );
        assert_eq!(
            parse_chat(" /deny apr_1 not on a Friday "),
            Some(Ok(ChatDecision {
                id: "apr_1".into(),
                wanted: Wanted::Deny(Some("not on a Friday".into()))
            }))
        );
        assert!(matches!(parse_chat("/approve"), Some(Err(_))));
        assert!(matches!(parse_chat("/approve apr_1 forever"), Some(Err(_))));
    }
}
