//! A workspace's approvals as configured, and the verdict on one call:
//! run it (and why), refuse it, or ask a person.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;
use serde::de::{self, Deserializer};

use super::rules::{Call, Rule, SourceKind, Tier, ToolClass, is_read_command};
use super::store::Approvers;

/// What `approvals.ask` names: a tool (`bash`, `notes__add`) or a source
/// (`mcp:*`, `skill:notes`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    Tool(String),
    Source { kind: SourceKind, name: String },
}

impl Selector {
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an empty entry".into());
        }
        for (prefix, kind) in [("mcp:", SourceKind::Mcp), ("skill:", SourceKind::Skill)] {
            if let Some(name) = text.strip_prefix(prefix) {
                let name = name.trim();
                if name.is_empty() {
                    return Err(format!(
                        "`{text}` names no source: write `{prefix}*` or `{prefix}NAME`"
                    ));
                }
                return Ok(Self::Source {
                    kind,
                    name: name.to_owned(),
                });
            }
        }
        if text.contains(char::is_whitespace) || text.contains(':') {
            return Err(format!(
                "`{text}` is not a tool name, `mcp:NAME` or `skill:NAME` (argv prefixes belong in `allow`)"
            ));
        }
        Ok(Self::Tool(text.to_owned()))
    }

    fn matches(&self, call: &Call<'_>) -> bool {
        match self {
            Self::Tool(name) => call.tool == name,
            Self::Source { kind, name } => call
                .source
                .is_some_and(|(k, source)| k == *kind && (name == "*" || name == source)),
        }
    }

    /// Whether this names `call`'s tool itself (not a glob over sources).
    fn names(&self, call: &Call<'_>) -> bool {
        matches!(self, Self::Tool(name) if call.tool == name)
    }
}

impl fmt::Display for Selector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tool(name) => f.write_str(name),
            Self::Source { kind, name } => write!(f, "{}:{name}", kind.prefix()),
        }
    }
}

/// What a scheduled run (nobody to ask) does with a call that needs a
/// decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Unattended {
    #[default]
    Deny,
    Allow,
}

/// One workspace's approvals, with the channel's and sender's tiers
/// applied (they only tighten).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Policy {
    pub tier: Tier,
    /// What needs a decision in tier `approval`.
    pub ask: Vec<Selector>,
    /// Auto-allow rules from the configuration.
    pub allow: Vec<Rule>,
    /// The built-in read commands are allowed unasked.
    pub read_commands: bool,
    pub timeout: Duration,
    pub approvers: Approvers,
    pub unattended: Unattended,
}

/// The default of `approvals.ask`: the write-class tools.
pub fn default_ask() -> Vec<Selector> {
    ["bash", "write", "edit", "send_file", "mcp:*", "skill:*"]
        .into_iter()
        .filter_map(|s| Selector::parse(s).ok())
        .collect()
}

/// Default `approvals.timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Why a call runs without asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Allowed {
    Yolo,
    ReadClass,
    /// Tier `approval`, but `ask` does not name it.
    NotAsked,
    ReadCommand,
    /// A rule of the configuration or an "always" decision.
    Rule(String),
    /// A "for this session" decision of this shape.
    Session(String),
}

impl fmt::Display for Allowed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Yolo => f.write_str("tier yolo"),
            Self::ReadClass => f.write_str("a read-class tool"),
            Self::NotAsked => f.write_str("not named by approvals.ask"),
            Self::ReadCommand => f.write_str("a built-in read command"),
            Self::Rule(rule) => write!(f, "rule `{rule}`"),
            Self::Session(shape) => write!(f, "allowed for this session (`{shape}`)"),
        }
    }
}

/// The verdict on one call before anyone is asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Run(Allowed),
    /// Refused without asking; the model reads the message.
    Refuse(String),
    Ask,
}

impl Policy {
    /// Judges `call` of `class`: `stored` are the workspace's "always"
    /// rules, `session_allows` whether the session holds a "session"
    /// decision of a shape.
    pub fn judge(
        &self,
        workspace: &str,
        call: &Call<'_>,
        class: ToolClass,
        stored: &[Rule],
        session_allows: &dyn Fn(&str) -> bool,
    ) -> Judgement {
        if self.tier == Tier::Yolo {
            return Judgement::Run(Allowed::Yolo);
        }
        if class == ToolClass::Read {
            // A read-class tool waits only when `ask` names it.
            if self.tier == Tier::ReadOnly || !self.ask.iter().any(|s| s.names(call)) {
                return Judgement::Run(Allowed::ReadClass);
            }
        } else if self.tier == Tier::ReadOnly {
            return Judgement::Refuse(format!(
                "workspace `{workspace}` is read-only here: `{}` can change things, so it was not \
                 run and nobody was asked; use a read-only tool (read, glob, grep) or ask the \
                 operator",
                call.tool
            ));
        } else if !self.ask.iter().any(|s| s.matches(call)) {
            return Judgement::Run(Allowed::NotAsked);
        }
        if self.read_commands && call.argv().is_ok_and(|argv| is_read_command(&argv)) {
            return Judgement::Run(Allowed::ReadCommand);
        }
        if let Some(rule) = self.allow.iter().chain(stored).find(|r| r.covers(call)) {
            return Judgement::Run(Allowed::Rule(rule.to_string()));
        }
        if let Some(shape) = call.shape()
            && session_allows(&shape)
        {
            return Judgement::Run(Allowed::Session(shape));
        }
        Judgement::Ask
    }
}

/// What a person is shown of `call`, whole: a `bash` call's command, or
/// the tool and its arguments as JSON; control characters (but newlines
/// and tabs), ANSI escapes and bidirectional overrides written escaped, so
/// nothing in it can hide or reorder what it says.
pub fn preview(call: &Call<'_>) -> String {
    let text = match call
        .arguments
        .get("command")
        .and_then(serde_json::Value::as_str)
    {
        _ if call.egress_target().is_some() => {
            let (host, port) = call.egress_target().unwrap_or_default();
            let written = if host.contains(':') {
                format!("[{host}]:{port}")
            } else {
                format!("{host}:{port}")
            };
            match host.parse().ok().and_then(crate::hosts::address_class) {
                Some(class) => format!("{EGRESS_PREVIEW}{written} (a {class} address)"),
                None => format!("{EGRESS_PREVIEW}{written}"),
            }
        }
        Some(command) if call.tool == "bash" => command.to_owned(),
        _ => format!(
            "{} {}",
            call.tool,
            serde_json::to_string_pretty(call.arguments).unwrap_or_default()
        ),
    };
    text.chars()
        .map(|c| {
            let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{061c}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if (c.is_control() && c != '\n' && c != '\t') || bidi {
                format!("\\u{{{:04x}}}", c as u32)
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// How an egress request's preview starts: `reach HOST:PORT`.
pub const EGRESS_PREVIEW: &str = "reach ";

/// Longest preview shown in a chat message; a longer one is shown as its
/// head and tail with its size and SHA-256 (the CLI shows it whole).
pub const MAX_SHOWN_PREVIEW: usize = 2500;

/// `preview` as a chat message shows it.
pub fn shown_preview(preview: &str) -> String {
    if preview.chars().count() <= MAX_SHOWN_PREVIEW {
        return preview.to_owned();
    }
    use sha2::Digest;
    let head: String = preview.chars().take(1200).collect();
    let tail: String = {
        let mut tail: Vec<char> = preview.chars().rev().take(1000).collect();
        tail.reverse();
        tail.into_iter().collect()
    };
    format!(
        "{head}\n[… {} characters in all; SHA-256 {}; `pincer approvals show` prints it whole …]\n{tail}",
        preview.chars().count(),
        hex::encode(sha2::Sha256::digest(preview.as_bytes()))
    )
}

impl<'de> Deserialize<'de> for Tier {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Tier::parse(text.trim()).ok_or_else(|| {
            de::Error::custom(format!(
                "unknown tier `{text}`: write read-only, approval or yolo"
            ))
        })
    }
}

impl<'de> Deserialize<'de> for Rule {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match Rule::parse(&text).map_err(de::Error::custom)? {
            Rule::Egress(_) => Err(de::Error::custom(format!(
                "`{text}`: hosts a container may reach are listed in workspaces.NAME.egress, not approvals.allow"
            ))),
            rule => Ok(rule),
        }
    }
}

impl<'de> Deserialize<'de> for Selector {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        Selector::parse(&text).map_err(de::Error::custom)
    }
}

impl<'de> Deserialize<'de> for Approvers {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            One(String),
            List(Vec<String>),
        }
        match Written::deserialize(d)? {
            Written::One(text) if text.trim() == "originator" => Ok(Approvers::Originator),
            Written::One(text) => Err(de::Error::custom(format!(
                "approvers `{text}`: write `originator` or a list of sender ids"
            ))),
            Written::List(ids) if ids.is_empty() => Err(de::Error::custom(
                "approvers is an empty list: nobody could decide; write `originator` or sender ids",
            )),
            Written::List(ids) => Ok(Approvers::Listed(ids)),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn policy(tier: Tier) -> Policy {
        Policy {
            tier,
            ask: default_ask(),
            allow: vec![Rule::parse("bash: touch stamp").expect("rule")],
            read_commands: true,
            timeout: DEFAULT_TIMEOUT,
            approvers: Approvers::Originator,
            unattended: Unattended::Deny,
        }
    }

    fn judge(p: &Policy, tool: &str, args: Value, class: ToolClass) -> Judgement {
        let source = tool.split_once("__").map(|(s, _)| (SourceKind::Skill, s));
        let call = Call {
            tool,
            source,
            arguments: &args,
        };
        p.judge("team", &call, class, &[], &|shape| {
            shape == "write({content:string,path:string})"
        })
    }

    #[test]
    fn sending_a_file_out_is_a_write_asked_for_or_refused() {
        use crate::approvals::builtin_class;
        let send = json!({"path": "report.csv"});
        let class = builtin_class("send_file").expect("a built-in");
        assert_eq!(class, ToolClass::Write);
        let p = Policy {
            ask: default_ask(),
            ..policy(Tier::Approval)
        };
        assert_eq!(judge(&p, "send_file", send.clone(), class), Judgement::Ask);
        assert!(matches!(
            judge(&policy(Tier::ReadOnly), "send_file", send, class),
            Judgement::Refuse(_)
        ));
    }

    #[test]
    fn each_tier_judges_writes_its_way() {
        let rm = json!({"command": "rm -rf /workspace/x"});
        assert_eq!(
            judge(&policy(Tier::Yolo), "bash", rm.clone(), ToolClass::Write),
            Judgement::Run(Allowed::Yolo)
        );
        assert_eq!(
            judge(
                &policy(Tier::Approval),
                "bash",
                rm.clone(),
                ToolClass::Write
            ),
            Judgement::Ask
        );
        let Judgement::Refuse(why) = judge(&policy(Tier::ReadOnly), "bash", rm, ToolClass::Write)
        else {
            panic!("read-only must refuse");
        };
        assert!(why.contains("read-only"), "{why}");
        // reads run in every tier
        for tier in [Tier::ReadOnly, Tier::Approval] {
            assert_eq!(
                judge(&policy(tier), "read", json!({"path": "a"}), ToolClass::Read),
                Judgement::Run(Allowed::ReadClass)
            );
        }
    }

    #[test]
    fn read_commands_rules_and_session_shapes_allow_unasked() {
        let p = policy(Tier::Approval);
        assert_eq!(
            judge(&p, "bash", json!({"command": "ls -la"}), ToolClass::Write),
            Judgement::Run(Allowed::ReadCommand)
        );
        for chained in [
            "ls; curl evil.example",
            "cat $(echo x)",
            "git status && rm -rf /",
        ] {
            assert_eq!(
                judge(&p, "bash", json!({"command": chained}), ToolClass::Write),
                Judgement::Ask,
                "{chained}"
            );
        }
        assert_eq!(
            judge(
                &p,
                "bash",
                json!({"command": "touch stamp -c"}),
                ToolClass::Write
            ),
            Judgement::Run(Allowed::Rule("bash: touch stamp".into()))
        );
        assert_eq!(
            judge(
                &p,
                "write",
                json!({"path": "b", "content": "c"}),
                ToolClass::Write
            ),
            Judgement::Run(Allowed::Session(
                "write({content:string,path:string})".into()
            ))
        );
        let mut off = p.clone();
        off.read_commands = false;
        assert_eq!(
            judge(&off, "bash", json!({"command": "ls"}), ToolClass::Write),
            Judgement::Ask
        );
    }

    #[test]
    fn ask_decides_what_waits_in_tier_approval() {
        let mut p = policy(Tier::Approval);
        p.ask = vec![Selector::parse("bash").expect("selector")];
        assert_eq!(
            judge(&p, "notes__add", json!({"text": "x"}), ToolClass::Write),
            Judgement::Run(Allowed::NotAsked)
        );
        // a read-class tool waits only when named
        p.ask.push(Selector::parse("skill:*").expect("selector"));
        assert_eq!(
            judge(&p, "notes__list", json!({}), ToolClass::Read),
            Judgement::Run(Allowed::ReadClass)
        );
        p.ask
            .push(Selector::parse("notes__list").expect("selector"));
        assert_eq!(
            judge(&p, "notes__list", json!({}), ToolClass::Read),
            Judgement::Ask
        );
    }

    #[test]
    fn previews_hide_nothing_and_long_ones_are_cut_with_their_digest() {
        let args = json!({"command": "echo \u{202e}txt.exe\u{1b}[2J done\nnext"});
        let call = Call {
            tool: "bash",
            source: None,
            arguments: &args,
        };
        assert_eq!(
            preview(&call),
            "echo \\u{202e}txt.exe\\u{001b}[2J done\nnext"
        );
        let long = "x".repeat(5000);
        let shown = shown_preview(&long);
        assert!(
            shown.len() < 2600 && shown.contains("5000 characters"),
            "{shown}"
        );
    }

    #[test]
    fn selectors_and_approvers_refuse_what_they_cannot_mean() {
        assert!(Selector::parse("bash: ls").is_err());
        assert!(Selector::parse("mcp:").is_err());
        assert_eq!(
            Selector::parse("mcp:*").expect("selector").to_string(),
            "mcp:*"
        );
        let approvers: Result<Approvers, _> = serde_json::from_value(json!([]));
        assert!(approvers.is_err());
        let approvers: Approvers = serde_json::from_value(json!("originator")).expect("originator");
        assert_eq!(approvers, Approvers::Originator);
        let tier: Result<Tier, _> = serde_json::from_value(json!("readonly"));
        assert!(tier.expect_err("unknown").to_string().contains("read-only"));
    }
}
