//! `pincer approvals`: the requests waiting for a decision, deciding them
//! as the operator of this `PINCER_HOME` (audited as `operator:cli`), and
//! the workspaces' "always" rules. Also the inline decision of `pincer
//! message` and `pincer chat`.

use std::sync::Arc;

use clap::Subcommand;

use super::{Context, JsonFlag};
use crate::approvals::{Approvals, Wanted};
use crate::audit::AuditLog;
use crate::operator::{Operator, as_json, decide, revoke};

#[derive(Debug, Subcommand)]
pub enum ApprovalsCommand {
    /// Requests waiting for a decision, oldest first
    List {
        #[command(flatten)]
        json: JsonFlag,
    },
    /// One request, its whole preview included
    Show { id: String },
    /// Approve a request: once (default), for its session, or always
    Approve {
        id: String,
        /// Calls of the same shape for the rest of the request's session
        #[arg(long, conflicts_with = "always")]
        session: bool,
        /// From now on: RULE (a tool name or `bash: PROGRAM ARGS…`), or
        /// exactly this call when RULE is left out
        #[arg(long, num_args = 0..=1, default_missing_value = "")]
        always: Option<String>,
    },
    /// Deny a request; the model reads the reason
    Deny {
        id: String,
        #[arg(long)]
        reason: Option<String>,
    },
    /// The "always" rules of a workspace
    Rules {
        #[arg(long, short, default_value = "default")]
        workspace: String,
    },
    /// Remove an "always" rule
    Revoke {
        rule: String,
        #[arg(long, short, default_value = "default")]
        workspace: String,
    },
}

pub fn run(config_flag: Option<&std::path::Path>, command: ApprovalsCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let approvals = ctx.approvals()?;
    let audit = ctx.audit_log()?;
    match command {
        ApprovalsCommand::List { json } => {
            let pending = approvals.store().pending(crate::db::now_ms())?;
            if json.json {
                let rows: Vec<_> = pending.iter().map(as_json).collect();
                println!("{}", serde_json::to_string_pretty(&rows)?);
            } else if pending.is_empty() {
                println!("no approval request is waiting");
            } else {
                for r in &pending {
                    println!(
                        "{}  {}  {}  session {}  expires in {} s\n    {}",
                        r.id,
                        r.workspace,
                        r.tool,
                        r.session,
                        (r.expires_ms - crate::db::now_ms()).max(0) / 1000,
                        first_line(&r.preview)
                    );
                }
            }
            Ok(())
        }
        ApprovalsCommand::Show { id } => {
            let request = approvals
                .store()
                .get(&id)?
                .ok_or_else(|| anyhow::anyhow!("no approval request `{id}`"))?;
            println!("{}", serde_json::to_string_pretty(&as_json(&request))?);
            Ok(())
        }
        ApprovalsCommand::Approve {
            id,
            session,
            always,
        } => {
            let wanted = match (session, always) {
                (true, _) => Wanted::Session,
                (false, Some(rule)) => Wanted::Always((!rule.trim().is_empty()).then_some(rule)),
                (false, None) => Wanted::Once,
            };
            println!(
                "{}",
                decide(&approvals, &audit, &id, wanted, Operator::Cli)?
            );
            Ok(())
        }
        ApprovalsCommand::Deny { id, reason } => {
            println!(
                "{}",
                decide(&approvals, &audit, &id, Wanted::Deny(reason), Operator::Cli)?
            );
            Ok(())
        }
        ApprovalsCommand::Rules { workspace } => {
            ctx.check_workspace(&workspace)?;
            let rules = approvals.store().rules(&workspace)?;
            if rules.is_empty() {
                println!("workspace `{workspace}` has no \"always\" rules");
            }
            for rule in rules {
                println!("{rule}");
            }
            Ok(())
        }
        ApprovalsCommand::Revoke { rule, workspace } => {
            ctx.check_workspace(&workspace)?;
            println!(
                "{}",
                revoke(&approvals, &audit, &workspace, &rule, Operator::Cli)?
            );
            Ok(())
        }
    }
}

/// How `pincer message` and `pincer chat` answer a request their own turn
/// asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Inline {
    /// Ask on the terminal: [o]nce [s]ession [a]lways [d]eny
    Ask,
    Once,
    Session,
    Always,
    Deny,
}

impl Inline {
    /// `--approve` as given, else: ask on a terminal, deny without one.
    pub fn or_default(given: Option<Inline>) -> Inline {
        use std::io::IsTerminal;
        given.unwrap_or(
            if std::io::stdin().is_terminal() && std::io::stderr().is_terminal() {
                Inline::Ask
            } else {
                Inline::Deny
            },
        )
    }
}

/// Decides a request the CLI's own turn asks, on a thread of its own (the
/// turn waits for it; a prompt blocks).
pub fn answer_inline(
    approvals: Arc<Approvals>,
    audit: Arc<AuditLog>,
    how: Inline,
    id: String,
    preview: String,
    session: bool,
) {
    std::thread::spawn(move || {
        let wanted = match how {
            Inline::Ask => match prompt(&id, &preview, session) {
                Some(wanted) => wanted,
                None => return,
            },
            Inline::Once => Wanted::Once,
            Inline::Session if session => Wanted::Session,
            Inline::Session => Wanted::Once,
            Inline::Always => Wanted::Always(None),
            Inline::Deny => Wanted::Deny(Some(
                "nobody at a terminal could be asked (pass --approve to decide)".into(),
            )),
        };
        match decide(&approvals, &audit, &id, wanted, Operator::Cli) {
            Ok(done) => eprintln!("  {done}"),
            Err(e) => eprintln!("  ! {e}"),
        }
    });
}

fn prompt(id: &str, preview: &str, session: bool) -> Option<Wanted> {
    use std::io::Write;
    eprintln!("\n  approval needed ({id}):\n{}", indent(preview));
    loop {
        eprint!(
            "  [o]nce{} [a]lways [d]eny? ",
            if session { " [s]ession" } else { "" }
        );
        let _ = std::io::stderr().flush();
        let mut line = String::new();
        if std::io::stdin().read_line(&mut line).ok()? == 0 {
            return Some(Wanted::Deny(Some("the terminal closed".into())));
        }
        match line.trim() {
            "o" | "once" => return Some(Wanted::Once),
            "s" | "session" if session => return Some(Wanted::Session),
            "a" | "always" => return Some(Wanted::Always(None)),
            "d" | "deny" => return Some(Wanted::Deny(None)),
            _ => {}
        }
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    if line.chars().count() > 100 || text.contains('\n') {
        format!("{}…", line.chars().take(100).collect::<String>())
    } else {
        line.to_owned()
    }
}
