//! What a person asks for when they decide: the words of a chat command
//! (`/approve ID [once|session|always [RULE]]`, `/deny ID [REASON]`), a
//! button of the request's message, or the CLI, turned into a [`Decision`]
//! on a stored request.

use super::rules::{Rule, Tier};
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

/// `text` as a `/tier` command: `None` when it is not one, `Some(Ok(None))`
/// to show the tier, `Some(Ok(Some(tier)))` to set it, `Err` with what to
/// write.
pub fn parse_tier(text: &str) -> Option<Result<Option<Tier>, String>> {
    let text = text.trim();
    let rest = text.strip_prefix("/tier")?;
    if !rest.is_empty() && !rest.starts_with(char::is_whitespace) {
        return None;
    }
    let wanted = rest.trim();
    if wanted.is_empty() {
        return Some(Ok(None));
    }
    Some(Tier::parse(wanted).map(Some).ok_or_else(|| {
        format!(
            "`{wanted}` is not a tier: write `/tier read-only`, `/tier approval` or `/tier yolo`"
        )
    }))
}

/// What the buttons of a request's message report when clicked:
/// `pincer-approval:ID:CHOICE`.
const BUTTON_PREFIX: &str = "pincer-approval:";

/// The buttons' choices, in the order they are shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    Once,
    Session,
    Always,
    Deny,
}

impl Choice {
    const ALL: [Choice; 4] = [Choice::Once, Choice::Session, Choice::Always, Choice::Deny];

    fn word(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Session => "session",
            Self::Always => "always",
            Self::Deny => "deny",
        }
    }

    fn wanted(self) -> Wanted {
        match self {
            Self::Once => Wanted::Once,
            Self::Session => Wanted::Session,
            Self::Always => Wanted::Always(None),
            Self::Deny => Wanted::Deny(None),
        }
    }

    /// What the button says.
    pub fn label(self) -> &'static str {
        match self {
            Self::Once => "Approve once",
            Self::Session => "This session",
            Self::Always => "Always",
            Self::Deny => "Deny",
        }
    }
}

/// The choices a request's message offers, each with the id its button
/// reports: "this session" only where a session decision can cover the
/// call, "always" only where a rule can be made of it (never for a
/// shell), deny always.
pub fn buttons(request: &Request) -> Vec<(Choice, String)> {
    Choice::ALL
        .into_iter()
        .filter(|choice| match choice {
            Choice::Session => request.shape.is_some(),
            Choice::Always => Rule::parse(&default_rule(request)).is_ok(),
            Choice::Once | Choice::Deny => true,
        })
        .map(|choice| (choice, button_id(&request.id, choice)))
        .collect()
}

/// The prefix every button of request `id` reports.
pub fn button_prefix(id: &str) -> String {
    format!("{BUTTON_PREFIX}{id}:")
}

fn button_id(id: &str, choice: Choice) -> String {
    format!("{}{}", button_prefix(id), choice.word())
}

/// A clicked button's id as a decision; `None` for one pincer's
/// approvals did not make.
pub fn parse_button(action: &str) -> Option<ChatDecision> {
    let (id, word) = action.strip_prefix(BUTTON_PREFIX)?.rsplit_once(':')?;
    if !id.starts_with("apr_") || id.contains(':') {
        return None;
    }
    let choice = Choice::ALL.into_iter().find(|c| c.word() == word)?;
    Some(ChatDecision {
        id: id.to_owned(),
        wanted: choice.wanted(),
    })
}

/// The rule an "always" without a rule of its own stores for `request`.
pub fn default_always_rule(request: &Request) -> Option<Rule> {
    Rule::parse(&default_rule(request)).ok()
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
    if request.tool == super::EGRESS_TOOL {
        let target = request
            .preview
            .strip_prefix(super::policy::EGRESS_PREVIEW)
            .and_then(|rest| rest.split(' ').next())
            .unwrap_or_default();
        format!("egress: {target}")
    } else if request.tool == "bash" {
        format!("bash: {}", request.preview)
    } else {
        request.tool.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(tool: &str, preview: &str, shape: Option<&str>) -> Request {
        Request {
            id: "apr_0123abcd".into(),
            workspace: "w".into(),
            session: "s".into(),
            turn_id: "t".into(),
            call_id: "c".into(),
            channel: "slack".into(),
            conversation: "D1".into(),
            originator: Some("U1".into()),
            approvers: None,
            scheduled_task: None,
            tool: tool.into(),
            fingerprint: "f".into(),
            shape: shape.map(str::to_owned),
            preview: preview.into(),
            created_ms: 0,
            expires_ms: 1,
            state: super::super::store::State::Pending,
            decision: None,
            decided_by: None,
            reason: None,
            applied: false,
        }
    }

    #[test]
    fn tier_commands_parse_or_say_what_to_write() {
        assert_eq!(parse_tier("hello"), None);
        assert_eq!(parse_tier("/tiers"), None);
        assert_eq!(parse_tier("/tier"), Some(Ok(None)));
        assert_eq!(
            parse_tier(" /tier read-only "),
            Some(Ok(Some(Tier::ReadOnly)))
        );
        assert_eq!(parse_tier("/tier yolo"), Some(Ok(Some(Tier::Yolo))));
        let err = parse_tier("/tier off")
            .and_then(Result::err)
            .unwrap_or_default();
        assert!(err.contains("`off` is not a tier"), "{err}");
    }

    #[test]
    fn buttons_offer_only_what_can_be_decided_and_read_back_exactly() {
        let rm = request("bash", "rm -rf /workspace/x", Some("bash: rm"));
        let offered: Vec<_> = buttons(&rm).into_iter().map(|(c, _)| c).collect();
        assert_eq!(
            offered,
            [Choice::Once, Choice::Session, Choice::Always, Choice::Deny]
        );
        for (choice, id) in buttons(&rm) {
            assert!(
                id.len() <= 200
                    && id
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || b":_.-".contains(&b)),
                "{id}"
            );
            let parsed = parse_button(&id).expect("a button pincer made");
            assert_eq!(parsed.id, rm.id);
            assert_eq!(parsed.wanted, choice.wanted());
        }
        // A shell has no "always" (no rule can allow it), and a compound
        // command no "this session".
        let shell = request("bash", "sh -c 'curl x | sh'", None);
        let offered: Vec<_> = buttons(&shell).into_iter().map(|(c, _)| c).collect();
        assert_eq!(offered, [Choice::Once, Choice::Deny]);
        assert_eq!(
            default_always_rule(&rm).map(|r| r.to_string()).as_deref(),
            Some("bash: rm -rf /workspace/x")
        );
        for forged in [
            "pincer-approval:apr_1:yes",
            "pincer-approval:apr_1",
            "pincer-approval:x:once",
            "pincer-approval:apr_1:x:once",
            "other:apr_1:once",
            "",
        ] {
            assert_eq!(parse_button(forged), None, "{forged}");
        }
    }

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
