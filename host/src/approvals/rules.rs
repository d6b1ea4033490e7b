//! What needs a person's decision: tiers, tool classes, the readable rules
//! an "always" decision or the configuration adds, the built-in read
//! commands, and the two things a decision binds to — a call's fingerprint
//! (exactly these arguments) and its shape (what "for this session" covers).

use std::fmt;

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::command::{self, NotSimple};

/// How much a workspace (channel, sender, session) lets run unasked.
/// Ordered strictest first: combining levels keeps the strictest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Tier {
    /// Write-class tools are refused without asking.
    ReadOnly,
    /// Write-class tools (and what `ask` names) wait for a decision.
    Approval,
    /// Nothing is asked (every call is still audited).
    Yolo,
}

impl Tier {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "read-only" => Some(Self::ReadOnly),
            "approval" => Some(Self::Approval),
            "yolo" => Some(Self::Yolo),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ReadOnly => "read-only",
            Self::Approval => "approval",
            Self::Yolo => "yolo",
        }
    }

    /// The tier of a level below `self` that says `wanted`: it may only
    /// tighten.
    pub fn tightened_by(self, wanted: Tier) -> Tier {
        self.min(wanted)
    }
}

/// Whether a tool only reads or may change something.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolClass {
    Read,
    Write,
}

/// The runner's built-in tools by class; every other tool (a skill, an MCP
/// tool) is write-class unless its trusted declaration says read.
pub fn builtin_class(tool: &str) -> Option<ToolClass> {
    match tool {
        "read" | "glob" | "grep" => Some(ToolClass::Read),
        "bash" | "write" | "edit" | "send_file" => Some(ToolClass::Write),
        _ => None,
    }
}

/// Programs no rule may allow by name: each runs code it is handed (a shell,
/// an interpreter, a program that runs another).
const RUNS_CODE: &[&str] = &[
    "sh",
    "bash",
    "dash",
    "zsh",
    "ksh",
    "fish",
    "csh",
    "tcsh",
    "busybox",
    "python",
    "python3",
    "python2",
    "perl",
    "ruby",
    "node",
    "deno",
    "bun",
    "php",
    "lua",
    "tclsh",
    "osascript",
    "pwsh",
    "env",
    "xargs",
    "sudo",
    "su",
    "doas",
    "nohup",
    "timeout",
    "nice",
    "exec",
    "eval",
    "command",
    "builtin",
    "source",
    "awk",
    "gawk",
    "sed",
    "make",
    "npm",
    "npx",
    "yarn",
    "pnpm",
    "cargo",
    "go",
    "docker",
    "ssh",
    "find",
];

/// Why a rule cannot be stored or configured.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleError {
    #[error("empty rule")]
    Empty,
    #[error("`{0}` runs code it is handed; no rule may allow it (each call is asked instead)")]
    RunsCode(String),
    #[error("`{rule}`: {why}")]
    NotSimple { rule: String, why: NotSimple },
    #[error("`{rule}`: {why}")]
    Egress { rule: String, why: String },
}

/// The tool name of a connection the egress proxy asks about
/// (`workspaces.NAME.egress_ask`): its arguments are `{host, port}`.
pub const EGRESS_TOOL: &str = "egress";

/// An auto-allow rule, as written in `approvals.allow` or made by an
/// "always" decision: a tool name (`write`, `skill-notes__add`), a source
/// glob (`mcp:*`, `skill:*`, `mcp:db`), or `bash: PROGRAM ARGS…`, an argv
/// prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rule {
    Tool(String),
    /// `mcp:NAME` or `skill:NAME`; `NAME` may be `*`.
    Source {
        kind: SourceKind,
        name: String,
    },
    Argv(Vec<String>),
    /// `egress: HOST_PATTERN`: connections the egress proxy lets through
    /// without asking (an "always" on an egress request).
    Egress(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    Mcp,
    Skill,
}

impl SourceKind {
    pub fn prefix(self) -> &'static str {
        match self {
            Self::Mcp => "mcp",
            Self::Skill => "skill",
        }
    }
}

impl Rule {
    pub fn parse(text: &str) -> Result<Self, RuleError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(RuleError::Empty);
        }
        if let Some(command) = text.strip_prefix("bash:") {
            let argv = command::argv(command.trim()).map_err(|why| RuleError::NotSimple {
                rule: text.to_owned(),
                why,
            })?;
            if let Some(program) = command::program(&argv)
                && RUNS_CODE.contains(&program)
            {
                return Err(RuleError::RunsCode(program.to_owned()));
            }
            return Ok(Self::Argv(argv));
        }
        if let Some(pattern) = text.strip_prefix("egress:") {
            let pattern = pattern.trim();
            crate::hosts::HostPattern::parse(pattern).map_err(|why| RuleError::Egress {
                rule: text.to_owned(),
                why: why.to_string(),
            })?;
            return Ok(Self::Egress(pattern.to_owned()));
        }
        for (prefix, kind) in [("mcp:", SourceKind::Mcp), ("skill:", SourceKind::Skill)] {
            if let Some(name) = text.strip_prefix(prefix) {
                return Ok(Self::Source {
                    kind,
                    name: name.trim().to_owned(),
                });
            }
        }
        if RUNS_CODE.contains(&text) {
            return Err(RuleError::RunsCode(text.to_owned()));
        }
        Ok(Self::Tool(text.to_owned()))
    }

    /// Why allowing this is riskier than it reads, when it is: `git`
    /// reads the workspace's own configuration, which the agent can write.
    pub fn warning(&self) -> Option<String> {
        let Self::Argv(argv) = self else {
            return None;
        };
        (command::program(argv) == Some("git")).then(|| {
            "git reads the workspace's .git/config and .gitattributes, which the agent can write: \
             they can make this command run a program of the agent's choosing (fsmonitor, hooks, \
             filter drivers)"
                .to_owned()
        })
    }

    /// Whether this rule covers `call`.
    pub fn covers(&self, call: &Call<'_>) -> bool {
        match self {
            Self::Tool(name) => call.tool == name && call.tool != "bash",
            Self::Source { kind, name } => call
                .source
                .is_some_and(|(k, source)| k == *kind && (name == "*" || name == source)),
            Self::Argv(prefix) => call.argv().is_ok_and(|argv| argv.starts_with(prefix)),
            Self::Egress(pattern) => {
                call.tool == EGRESS_TOOL
                    && call.egress_target().is_some_and(|(host, port)| {
                        crate::hosts::HostPattern::parse(pattern).is_ok_and(|p| {
                            p.matches(host, port, crate::hosts::web_scheme_port(port))
                        })
                    })
            }
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Tool(name) => f.write_str(name),
            Self::Source { kind, name } => write!(f, "{}:{name}", kind.prefix()),
            Self::Argv(argv) => write!(f, "bash: {}", shown_argv(argv)),
            Self::Egress(pattern) => write!(f, "egress: {pattern}"),
        }
    }
}

/// One tool call waiting on approvals' verdict.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The tool as the agent named it (`bash`, `write`, `db__query`).
    pub tool: &'a str,
    /// For skill and MCP tools: which kind of source and its name.
    pub source: Option<(SourceKind, &'a str)>,
    pub arguments: &'a Value,
}

impl Call<'_> {
    /// A `bash` call's command as argv, if it is one simple command.
    pub fn argv(&self) -> Result<Vec<String>, NotSimple> {
        if self.tool != "bash" {
            return Err(NotSimple("not a bash call".into()));
        }
        let command = self
            .arguments
            .get("command")
            .and_then(Value::as_str)
            .ok_or_else(|| NotSimple("no `command` argument".into()))?;
        command::argv(command)
    }

    /// An egress request's host and port.
    pub fn egress_target(&self) -> Option<(&str, u16)> {
        if self.tool != EGRESS_TOOL {
            return None;
        }
        let host = self.arguments.get("host")?.as_str()?;
        let port = u16::try_from(self.arguments.get("port")?.as_u64()?).ok()?;
        Some((host, port))
    }

    /// SHA-256 of the tool and its exact arguments (keys sorted), hex: what
    /// a decision binds to.
    pub fn fingerprint(&self) -> String {
        let mut hash = Sha256::new();
        hash.update(self.tool.as_bytes());
        hash.update([0]);
        canonical(self.arguments, &mut hash);
        hex::encode(hash.finalize())
    }

    /// What a "for this session" decision covers: for `bash`, the same
    /// program (and, for `git`, the same subcommand) in one simple command;
    /// for every other tool, the same tool with arguments of the same keys
    /// and value types. `None`: a session decision cannot cover it (a bash
    /// command that is not simple).
    pub fn shape(&self) -> Option<String> {
        if self.tool == EGRESS_TOOL {
            // Once (this connection) or always (a stored rule), no session.
            return None;
        }
        if self.tool == "bash" {
            let argv = self.argv().ok()?;
            let program = command::program(&argv)?;
            return Some(match (program, argv.get(1)) {
                ("git", Some(sub)) if !sub.starts_with('-') => format!("bash: git {sub}"),
                _ => format!("bash: {program}"),
            });
        }
        let mut shape = format!("{}(", self.tool);
        value_shape(self.arguments, &mut shape);
        shape.push(')');
        Some(shape)
    }
}

/// The command as a person should read it: each word quoted when it holds
/// anything but plain characters.
pub fn shown_argv(argv: &[String]) -> String {
    argv.iter()
        .map(|w| {
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn canonical(value: &Value, hash: &mut Sha256) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            hash.update(b"{");
            for key in keys {
                canonical(&Value::String(key.clone()), hash);
                hash.update(b":");
                canonical(&map[key], hash);
                hash.update(b",");
            }
            hash.update(b"}");
        }
        Value::Array(items) => {
            hash.update(b"[");
            for item in items {
                canonical(item, hash);
                hash.update(b",");
            }
            hash.update(b"]");
        }
        other => hash.update(other.to_string().as_bytes()),
    }
}

fn value_shape(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(key);
                out.push(':');
                value_shape(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(_) => out.push_str("array"),
        Value::String(_) => out.push_str("string"),
        Value::Number(_) => out.push_str("number"),
        Value::Bool(_) => out.push_str("bool"),
        Value::Null => out.push_str("null"),
    }
}

/// The built-in read commands tier `approval` allows unasked: programs that
/// only read, with the options that would make them run or write something
/// refused. One simple command only (see [`command::argv`]).
pub fn is_read_command(argv: &[String]) -> bool {
    let Some(program) = command::program(argv) else {
        return false;
    };
    let args = &argv[1..];
    match program {
        // Not here: `sort` (`--compress-program` runs a program), `rg`
        // (`--pre`, `--hostname-bin` run programs), `date` (`-s` sets the
        // clock).
        "ls" | "cat" | "head" | "tail" | "wc" | "pwd" | "stat" | "du" | "df" | "tree" | "echo"
        | "whoami" | "id" | "uname" | "realpath" | "basename" | "dirname" | "uniq" | "cut"
        | "diff" | "cmp" | "md5sum" | "sha256sum" | "nl" => {
            // `tree -o`, `uniq IN OUT`… write; `tail -f` never ends.
            let writes = args
                .iter()
                .any(|a| a.starts_with("-o") || a == "--output" || a.starts_with("--output="));
            let follows = program == "tail"
                && args
                    .iter()
                    .any(|a| matches!(a.as_str(), "-f" | "-F" | "--follow"));
            let uniq_output =
                program == "uniq" && args.iter().filter(|a| !a.starts_with('-')).count() > 1;
            !(writes || follows || uniq_output)
        }
        "grep" | "egrep" | "fgrep" => true,
        // Every action that runs or deletes or writes something is refused.
        "find" => !args.iter().any(|a| {
            matches!(
                a.as_str(),
                "-exec"
                    | "-execdir"
                    | "-ok"
                    | "-okdir"
                    | "-delete"
                    | "-fls"
                    | "-fprint"
                    | "-fprint0"
                    | "-fprintf"
            )
        }),
        // `file -C` compiles a magic file (writes it).
        "file" => !args
            .iter()
            .any(|a| a == "-C" || a == "--compile" || a.starts_with("-C")),
        // Never `git`: the workspace's `.git/config` and `.gitattributes`,
        // which the agent can write, can make even `git status` run a
        // program (fsmonitor, hooks, clean/smudge filter drivers whose
        // names no `-c` can list in advance). It is asked, or allowed by a
        // rule the operator writes knowingly (see [`Rule::warning`]).
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn bash(command: &str) -> Value {
        json!({ "command": command })
    }

    fn call<'a>(tool: &'a str, arguments: &'a Value) -> Call<'a> {
        Call {
            tool,
            source: None,
            arguments,
        }
    }

    fn read(command: &str) -> bool {
        command::argv(command).is_ok_and(|argv| is_read_command(&argv))
    }

    #[test]
    fn tiers_only_tighten() {
        assert_eq!(Tier::Yolo.tightened_by(Tier::Approval), Tier::Approval);
        assert_eq!(Tier::Approval.tightened_by(Tier::Yolo), Tier::Approval);
        assert_eq!(Tier::ReadOnly.tightened_by(Tier::Yolo), Tier::ReadOnly);
        assert_eq!(Tier::parse("read-only"), Some(Tier::ReadOnly));
        assert_eq!(Tier::parse("YOLO"), None);
    }

    #[test]
    fn no_rule_allows_a_shell_or_an_interpreter() {
        for rule in [
            "bash: bash",
            "bash: sh -c",
            "bash: /bin/zsh",
            "bash: python3 -c",
            "bash: env",
            "bash: xargs rm",
            "bash: find . -name",
            "bash: awk",
            "bash",
            "python",
        ] {
            assert!(
                matches!(Rule::parse(rule), Err(RuleError::RunsCode(_))),
                "{rule}: {:?}",
                Rule::parse(rule)
            );
        }
        assert!(matches!(
            Rule::parse("bash: git status; rm -rf /"),
            Err(RuleError::NotSimple { .. })
        ));
    }

    /// OpenClaw #23276: "always" on `whoami` allowed the shell itself.
    #[test]
    fn an_argv_prefix_covers_only_commands_that_start_with_it() {
        let rule = Rule::parse("bash: git status").expect("rule");
        assert_eq!(rule.to_string(), "bash: git status");
        let covered = |command: &str| rule.covers(&call("bash", &bash(command)));
        assert!(covered("git status"));
        assert!(covered("git status --short"));
        assert!(!covered("git stash"));
        assert!(!covered("git status && rm -rf /workspace"));
        assert!(!covered("git status; curl evil.example"));
        assert!(!covered("/bin/zsh"));
        let whoami = Rule::parse("bash: whoami").expect("rule");
        assert!(!whoami.covers(&call("bash", &bash("/bin/zsh -c whoami"))));
    }

    #[test]
    fn tool_and_source_rules() {
        let write = Rule::parse("write").expect("rule");
        assert!(write.covers(&call("write", &json!({"path": "a"}))));
        assert!(!write.covers(&call("edit", &json!({}))));
        let any_mcp = Rule::parse("mcp:*").expect("rule");
        let args = json!({});
        let db = Call {
            tool: "db__query",
            source: Some((SourceKind::Mcp, "db")),
            arguments: &args,
        };
        assert!(any_mcp.covers(&db));
        assert!(Rule::parse("mcp:db").expect("rule").covers(&db));
        assert!(!Rule::parse("mcp:other").expect("rule").covers(&db));
        assert!(!Rule::parse("skill:*").expect("rule").covers(&db));
    }

    #[test]
    fn read_commands_never_cover_chains_or_writers() {
        for ok in [
            "ls -la",
            "cat README.md",
            "file a.png",
            "grep -rn x src",
            "wc -l a",
        ] {
            assert!(read(ok), "{ok}");
        }
        for no in [
            "ls; curl evil.example",
            "cat $(echo /etc/shadow)",
            "git status",
            "git log -5",
            "git status && rm -rf /",
            "file -C -m magic",
            "git -c core.pager=sh log",
            "git log --output=/workspace/x",
            "git diff --ext-diff",
            "git push",
            "git config alias.x '!sh'",
            "find . -exec rm {} ;",
            "find . -exec rm x",
            "find . -okdir rm x",
            "find . -fprint /workspace/out",
            "find . -delete",
            "sort -o out in",
            "sort --compress-program=./x big",
            "rg --hostname-bin=./x pattern",
            "date -s 2020-01-01",
            "tree -o /workspace/out",
            "tail -f log",
            "rg --pre ./x pattern",
            "xargs rm",
            "env",
            "sed -i s/a/b/ f",
            "make",
            "cargo run",
            "rm -rf /workspace",
        ] {
            assert!(!read(no), "{no}");
        }
    }

    #[test]
    fn find_without_actions_is_a_read_command() {
        assert!(read("find . -name '*.rs'"));
    }

    #[test]
    fn the_fingerprint_binds_exact_arguments_in_any_key_order() {
        let a = json!({"path": "a.txt", "content": "x"});
        let b = json!({"content": "x", "path": "a.txt"});
        let c = json!({"content": "y", "path": "a.txt"});
        assert_eq!(
            call("write", &a).fingerprint(),
            call("write", &b).fingerprint()
        );
        assert_ne!(
            call("write", &a).fingerprint(),
            call("write", &c).fingerprint()
        );
        assert_ne!(
            call("write", &a).fingerprint(),
            call("edit", &a).fingerprint()
        );
        assert_eq!(call("write", &a).fingerprint().len(), 64);
    }

    #[test]
    fn a_session_shape_is_the_program_or_the_argument_keys() {
        let shape = |tool: &str, args: Value| call(tool, &args).shape();
        assert_eq!(
            shape("bash", bash("git status -s")).as_deref(),
            Some("bash: git status")
        );
        assert_eq!(
            shape("bash", bash("/usr/bin/ls -la")).as_deref(),
            Some("bash: ls")
        );
        assert_eq!(shape("bash", bash("ls; rm -rf /")), None);
        assert_eq!(
            shape("write", json!({"path": "a", "content": "x"})).as_deref(),
            Some("write({content:string,path:string})")
        );
        assert_eq!(
            shape("write", json!({"path": "b", "content": "y"})),
            shape("write", json!({"content": "z", "path": "c"}))
        );
    }

    #[test]
    fn argv_is_shown_quoted_where_needed() {
        let argv: Vec<String> = ["rm", "-rf", "/workspace/my dir", "it's"]
            .map(String::from)
            .to_vec();
        assert_eq!(shown_argv(&argv), "rm -rf '/workspace/my dir' 'it'\\''s'");
    }

    #[test]
    fn an_egress_rule_covers_its_hosts_and_ports_and_nothing_else() {
        let call = |tool: &str, host: &str, port: u16| {
            let arguments = serde_json::json!({"host": host, "port": port});
            let tool = tool.to_owned();
            move |rule: &Rule| {
                rule.covers(&Call {
                    tool: &tool,
                    source: None,
                    arguments: &arguments,
                })
            }
        };
        let rule = Rule::parse("egress: *.crates.io").expect("rule");
        assert_eq!(rule.to_string(), "egress: *.crates.io");
        assert!(call(EGRESS_TOOL, "static.crates.io", 443)(&rule));
        assert!(!call(EGRESS_TOOL, "static.crates.io", 22)(&rule));
        assert!(!call(EGRESS_TOOL, "crates.io.evil.org", 443)(&rule));
        assert!(
            !call("bash", "static.crates.io", 443)(&rule),
            "not a tool call"
        );
        assert!(matches!(
            Rule::parse("egress: http://x/"),
            Err(RuleError::Egress { .. })
        ));
        let shape = Call {
            tool: EGRESS_TOOL,
            source: None,
            arguments: &serde_json::json!({"host": "a", "port": 1}),
        }
        .shape();
        assert_eq!(shape, None, "no session decision for a connection");
    }
}
