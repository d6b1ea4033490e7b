//! `pincer message` (one turn) and `pincer chat` (a terminal conversation).
//! With a `pincer start` daemon running they hand turns to it over its
//! control socket; otherwise they bring up in this process what a turn
//! needs — the gateway on the workspace's socket (unless another pincer
//! process serves it), the container, the session store. Either way they
//! print the turn's events the same way.

use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use pincer_runner_protocol::TurnEvent;

use super::approvals::{Inline, answer_inline};
use super::{Context, ExitStatus};
use crate::approvals::Approvals;
use crate::audit::AuditLog;
use crate::sessions::{SessionKey, TurnStatus};
use crate::turn::control::{self, ControlRequest};
use crate::turn::{Agent, AgentEvent, HostEvent, Inbound, TurnSummary};

/// The channel name of turns started from the terminal.
pub const CLI_CHANNEL: &str = "cli";

pub struct MessageArgs {
    pub workspace: String,
    pub text: String,
    pub conversation: String,
    pub json: bool,
    /// How a request this turn asks is decided.
    pub approve: super::approvals::Inline,
}

/// How long a finishing command waits for its observers.
const OBSERVER_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Where turns run: a daemon, or this process.
enum Runner {
    Daemon,
    Local(Box<Agent>),
}

impl Runner {
    async fn new(ctx: &Context) -> anyhow::Result<Self> {
        if control::connect(&ctx.home).await.is_some() {
            return Ok(Runner::Daemon);
        }
        Ok(Runner::Local(Box::new(
            crate::daemon::build::agent(ctx).await?,
        )))
    }

    /// Where this command decides the requests its turns ask: the turn
    /// engine's own approvals (which wake the waiting turn at once), or
    /// pincer.db's (which the daemon reads).
    fn approvals(&self, ctx: &Context) -> anyhow::Result<Arc<Approvals>> {
        Ok(match self {
            Runner::Local(agent) => agent.gateway().approvals().clone(),
            Runner::Daemon => Arc::new(ctx.approvals()?),
        })
    }

    /// Gives this process's observers a moment to deliver queued events.
    async fn close(&self) {
        if let Runner::Local(agent) = self {
            agent.close(OBSERVER_GRACE).await;
        }
    }

    async fn turn(
        &self,
        ctx: &Context,
        inbound: Inbound,
        printer: &Printer,
    ) -> anyhow::Result<TurnSummary> {
        let show = |event: AgentEvent| printer.show(&event);
        match self {
            Runner::Local(agent) => {
                run_here(ctx, &inbound.key.workspace)?;
                Ok(agent.turn(inbound, &show, cancelled()).await?)
            }
            Runner::Daemon => {
                let stream = control::connect(&ctx.home).await.ok_or_else(|| {
                    anyhow::anyhow!("the pincer daemon stopped; run the command again")
                })?;
                let request = ControlRequest {
                    channel: inbound.key.channel,
                    conversation: inbound.key.conversation,
                    workspace: inbound.key.workspace,
                    text: inbound.text,
                };
                // Ctrl-C drops the connection, which cancels the turn.
                tokio::select! {
                    summary = control::remote_turn(stream, &request, &show) => summary,
                    () = cancelled() => anyhow::bail!("the turn was cancelled"),
                }
            }
        }
    }
}

/// Refuses a turn of a workspace that a daemon of another home runs now
/// (its lease, on a state several daemons share): the turn belongs in that
/// daemon's container, not in one this process would start.
fn run_here(ctx: &Context, workspace: &str) -> anyhow::Result<()> {
    let leases = crate::cluster::Leases::open(&ctx.state()?)?;
    let ours = format!("{}:", crate::containers::instance_id(&ctx.home)?);
    let (what, now) = (format!("workspace:{workspace}"), crate::db::now_ms());
    if let Some(holder) = leases
        .holders()?
        .into_iter()
        .find(|h| h.what == what && h.expires_ms > now && !h.owner.starts_with(&ours))
    {
        anyhow::bail!(
            "workspace `{workspace}` runs on the pincer daemon {} of this cluster, in its \
             container (`pincer status` shows where): send the message through that daemon's \
             home",
            holder.owner
        );
    }
    Ok(())
}

/// `pincer message`: one turn; prints the reply (or every event with
/// `--json`); exits non-zero when the turn fails.
pub async fn message(config_flag: Option<&Path>, args: MessageArgs) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    ctx.check_workspace(&args.workspace)?;
    let runner = Runner::new(&ctx).await?;
    let decider = InlineDecider {
        approvals: runner.approvals(&ctx)?,
        audit: ctx.audit_log()?,
        how: if args.json && args.approve == Inline::Ask {
            Inline::Deny
        } else {
            args.approve
        },
    };
    let printer = Printer::new(args.json, decider);
    let inbound = Inbound {
        key: SessionKey {
            channel: CLI_CHANNEL.into(),
            conversation: args.conversation,
            workspace: args.workspace,
        },
        text: args.text,
        origin: None,
        presence: crate::turn::Presence::Person,
        quoted: None,
        images: Vec::new(),
    };
    let summary = runner.turn(&ctx, inbound, &printer).await?;
    printer.finish();
    runner.close().await;
    match summary.status {
        TurnStatus::Done => Ok(()),
        _ => {
            if !args.json {
                eprintln!(
                    "pincer: {}",
                    summary.error.as_deref().unwrap_or("the turn failed")
                );
            }
            Err(ExitStatus(1).into())
        }
    }
}

/// `pincer chat`: a conversation in the terminal. Ctrl-C cancels the turn
/// in progress (not the session); at the prompt it leaves.
pub async fn chat(
    config_flag: Option<&Path>,
    workspace: String,
    conversation: String,
) -> anyhow::Result<()> {
    use tokio::io::AsyncBufReadExt;

    let ctx = Context::load(config_flag)?;
    ctx.check_workspace(&workspace)?;
    let runner = Runner::new(&ctx).await?;
    let approvals = runner.approvals(&ctx)?;
    let audit = ctx.audit_log()?;
    let key = SessionKey {
        channel: CLI_CHANNEL.into(),
        conversation,
        workspace: workspace.clone(),
    };
    eprintln!(
        "pincer chat with workspace `{workspace}`: /new starts a fresh session, /exit or Ctrl-D leaves, Ctrl-C cancels a running turn"
    );
    let mut lines = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    loop {
        eprint!("\n{workspace}> ");
        let _ = std::io::stderr().flush();
        let line = tokio::select! {
            line = lines.next_line() => line?,
            _ = tokio::signal::ctrl_c() => None,
        };
        let text = line.as_deref().map(str::trim).unwrap_or("/exit");
        if text.is_empty() {
            continue;
        }
        if text == "/exit" || text == "/quit" {
            runner.close().await;
            return Ok(());
        }
        let printer = Printer::new(
            false,
            InlineDecider {
                approvals: approvals.clone(),
                audit: audit.clone(),
                how: Inline::or_default(None),
            },
        );
        let inbound = Inbound {
            key: key.clone(),
            text: text.to_string(),
            origin: None,
            presence: crate::turn::Presence::Person,
            quoted: None,
            images: Vec::new(),
        };
        match runner.turn(&ctx, inbound, &printer).await {
            Ok(summary) => {
                printer.finish();
                if let Some(error) = summary.error {
                    eprintln!("! {error}");
                }
            }
            Err(e) => eprintln!("! {e}"),
        }
    }
}

/// Resolves on Ctrl-C.
async fn cancelled() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Prints a turn's events: the reply streamed to stdout and tool activity
/// compactly to stderr, or every event as one JSON line.
struct Printer {
    json: bool,
    streamed: std::sync::atomic::AtomicBool,
    decider: InlineDecider,
}

/// How the CLI answers the approval requests of its own turns.
struct InlineDecider {
    approvals: Arc<Approvals>,
    audit: Arc<AuditLog>,
    how: Inline,
}

impl Printer {
    fn new(json: bool, decider: InlineDecider) -> Self {
        Printer {
            json,
            streamed: Default::default(),
            decider,
        }
    }

    fn show(&self, event: &AgentEvent) {
        use std::sync::atomic::Ordering;
        if let AgentEvent::Host(HostEvent::Approval {
            request,
            preview,
            session,
            ..
        }) = event
        {
            self.end_line();
            answer_inline(
                self.decider.approvals.clone(),
                self.decider.audit.clone(),
                self.decider.how,
                request.clone(),
                preview.clone(),
                *session,
            );
        }
        if self.json {
            if let Ok(line) = serde_json::to_string(event) {
                println!("{line}");
            }
            return;
        }
        match event {
            AgentEvent::Turn(TurnEvent::TextDelta { text }) => {
                self.streamed.store(true, Ordering::Relaxed);
                print!("{text}");
                let _ = std::io::stdout().flush();
            }
            AgentEvent::Turn(TurnEvent::ToolStart {
                name, arguments, ..
            }) => {
                self.end_line();
                eprintln!("  → {name} {}", compact(arguments, 100));
            }
            AgentEvent::Turn(TurnEvent::ToolEnd {
                name,
                ok,
                output_bytes,
                truncated,
                duration_ms,
                ..
            }) => eprintln!(
                "  {} {name}: {output_bytes} bytes{} in {duration_ms} ms",
                if *ok { "✓" } else { "✗" },
                if *truncated { " (truncated)" } else { "" }
            ),
            AgentEvent::Host(HostEvent::Decided {
                request, outcome, ..
            }) => {
                eprintln!("  {request}: {outcome}");
            }
            AgentEvent::Turn(TurnEvent::Notice { message }) => {
                self.end_line();
                eprintln!("  note: {message}");
            }
            AgentEvent::Turn(TurnEvent::Done { reply, .. }) => {
                // A reply that was not streamed (a command like /new).
                if !self.streamed.swap(false, Ordering::Relaxed) && !reply.is_empty() {
                    print!("{reply}");
                }
                self.end_line_always();
            }
            AgentEvent::Host(HostEvent::Container {
                name,
                started: true,
                replaced,
                ready_ms,
            }) => {
                let why = replaced
                    .as_deref()
                    .map(|w| format!(" ({w})"))
                    .unwrap_or_default();
                eprintln!("  started container {name} in {ready_ms} ms{why}");
            }
            _ => {}
        }
    }

    fn end_line(&self) {
        if self
            .streamed
            .swap(false, std::sync::atomic::Ordering::Relaxed)
        {
            println!();
        }
    }

    fn end_line_always(&self) {
        println!();
        let _ = std::io::stdout().flush();
    }

    fn finish(&self) {
        let _ = std::io::stdout().flush();
    }
}

/// One line of at most `max` characters.
fn compact(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() <= max {
        return flat;
    }
    let cut: String = flat.chars().take(max).collect();
    format!("{cut}…")
}
