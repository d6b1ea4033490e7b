//! `pincer pairing`: the codes strangers got from a channel with
//! `refusal: pair`, approving or denying them as the operator of this
//! `PINCER_HOME`, and the senders pairing allowed (removable again).

use clap::Subcommand;

use super::{Context, JsonFlag};
use crate::audit::{Action, Actor};
use crate::channels::{InboundState, Reply};
use crate::pairing::{PairingStore, Request};

#[derive(Debug, Subcommand)]
pub enum PairingCommand {
    /// Pending codes, one per line: code, channel, sender, name, expiry
    List {
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Allow the code's sender on its channel from their next message on
    Approve { code: String },
    /// Refuse the code; the sender may ask for a new one
    Deny { code: String },
    /// Senders pairing allowed, with who approved them
    Allowed {
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Take a paired sender out again (of every channel, or of --channel)
    Remove {
        sender: String,
        #[arg(long)]
        channel: Option<String>,
    },
}

pub fn run(config_flag: Option<&std::path::Path>, command: PairingCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let store = ctx.pairing_store()?;
    let audit = ctx.audit_log()?;
    let operator = operator();
    match command {
        PairingCommand::List { json } => {
            let pending = store.pending()?;
            if json.json {
                println!("{}", serde_json::to_string_pretty(&pending)?);
            } else {
                let now = crate::db::now_ms();
                for r in &pending {
                    println!(
                        "{}  {}  {}  {}  expires in {} min",
                        r.code,
                        r.channel,
                        r.sender,
                        r.sender_name.as_deref().unwrap_or("-"),
                        (r.expires_ms - now).max(0) / 60_000
                    );
                }
            }
            Ok(())
        }
        PairingCommand::Approve { code } => {
            let request = decided(&store, store.approve(&code, &operator), &code)?;
            audit.record(
                Actor::Cli(Some(&operator)),
                None,
                Action::ChannelPairingApproved,
                &format!(
                    "pairing {}: sender `{}`{} allowed on channel {} by {operator}",
                    request.code,
                    request.sender,
                    named(&request),
                    request.channel
                ),
            );
            tell(
                &ctx,
                &request,
                "Your pairing code was approved: you can use this assistant now.",
            );
            println!(
                "approved {}: sender {}{} may use channel {} from their next message on",
                request.code,
                request.sender,
                named(&request),
                request.channel
            );
            Ok(())
        }
        PairingCommand::Deny { code } => {
            let request = decided(&store, store.deny(&code, &operator), &code)?;
            audit.record(
                Actor::Cli(Some(&operator)),
                None,
                Action::ChannelPairingDenied,
                &format!(
                    "pairing {}: sender `{}`{} on channel {} denied by {operator}",
                    request.code,
                    request.sender,
                    named(&request),
                    request.channel
                ),
            );
            println!(
                "denied {}: sender {}{} on channel {}",
                request.code,
                request.sender,
                named(&request),
                request.channel
            );
            Ok(())
        }
        PairingCommand::Allowed { json } => {
            let allowed = store.allowed()?;
            if json.json {
                println!("{}", serde_json::to_string_pretty(&allowed)?);
            } else {
                for a in &allowed {
                    println!(
                        "{}  {}  {}  {} ({})",
                        a.channel,
                        a.sender,
                        a.sender_name.as_deref().unwrap_or("-"),
                        a.origin,
                        crate::db::utc_text(a.added_ms)
                    );
                }
            }
            Ok(())
        }
        PairingCommand::Remove { sender, channel } => {
            let removed = store.remove(channel.as_deref(), &sender)?;
            if removed.is_empty() {
                anyhow::bail!(
                    "sender `{sender}` was not allowed by pairing{} (see `pincer pairing allowed`)",
                    channel
                        .map(|c| format!(" on channel {c}"))
                        .unwrap_or_default()
                );
            }
            for a in &removed {
                audit.record(
                    Actor::Cli(Some(&operator)),
                    None,
                    Action::ChannelPairingRemoved,
                    &format!(
                        "sender `{}` removed from channel {} by {operator} (was: {})",
                        a.sender, a.channel, a.origin
                    ),
                );
                println!("removed sender {} from channel {}", a.sender, a.channel);
            }
            Ok(())
        }
    }
}

/// The decided request, or an error naming the code's sender when there is one.
fn decided(
    store: &PairingStore,
    outcome: Result<Request, crate::pairing::PairingError>,
    code: &str,
) -> anyhow::Result<Request> {
    outcome.map_err(|e| {
        let sender = store
            .find(code)
            .ok()
            .flatten()
            .map(|r| {
                format!(
                    " (sender {}{} on channel {})",
                    r.sender,
                    named(&r),
                    r.channel
                )
            })
            .unwrap_or_default();
        anyhow::anyhow!("{e}{sender}")
    })
}

fn named(request: &Request) -> String {
    request
        .sender_name
        .as_deref()
        .map(|n| format!(" ({n})"))
        .unwrap_or_default()
}

/// Queues a direct message to the request's sender (the daemon's outbox
/// delivers it); a failure is said, not fatal: the approval holds.
fn tell(ctx: &Context, request: &Request, text: &str) {
    let queued = ctx.channel_store().and_then(|store| {
        let reply = Reply {
            channel: request.channel.clone(),
            conversation: request.sender.clone(),
            thread: None,
            reply_to: None,
            parts: vec![text.to_string()],
            actions: Vec::new(),
            visible_to: None,
            replaces: None,
            file: None,
        };
        Ok(store.finish(None, InboundState::Done, &reply)?)
    });
    if let Err(e) = queued {
        eprintln!("warning: the sender could not be told ({e}); they are allowed all the same");
    }
}

/// Who runs this command, for the audit log.
fn operator() -> String {
    std::env::var("USER")
        .ok()
        .filter(|u| !u.is_empty())
        .unwrap_or_else(|| "operator".into())
}
