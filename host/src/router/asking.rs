//! Asking a person in a conversation: the approval request posted where it
//! is decided (with buttons where the channel shows them, else the chat
//! commands), and its outcome afterwards. Both drivers use it: a channel
//! turn asks in its own conversation, a scheduled run in the one its task
//! names (`approvals.ask_in`).

use crate::approvals::{ApprovalStore, Choice};
use crate::channels::{Address, Button, ButtonStyle, ChannelHost, Post};

/// A request as the turn announced it.
pub(super) struct Asked<'a> {
    pub request: &'a str,
    pub tool: &'a str,
    pub preview: &'a str,
    /// Who may decide, in words.
    pub approvers: &'a str,
    /// A "for this session" decision can cover the call.
    pub session: bool,
    pub expires_ms: i64,
}

/// Posts `asked` at `to`: with buttons where the channel shows them, else
/// the chat commands. A failure is logged: the request is stored, and an
/// operator can still decide it (`pincer approvals`).
pub(super) fn post_request(
    channels: &ChannelHost,
    store: &ApprovalStore,
    to: &Address<'_>,
    asked: &Asked<'_>,
) {
    let Asked {
        request,
        tool,
        preview,
        approvers,
        session,
        expires_ms,
    } = *asked;
    let stored = channels
        .interactive(to.channel)
        .then(|| store.get(request))
        .and_then(|read| {
            read.inspect_err(|e| tracing::warn!(%request, "cannot read the request back: {e}"))
                .ok()
                .flatten()
        });
    let minutes = ((expires_ms - crate::db::now_ms()).max(0) / 60_000).max(1);
    let shown = fenced_preview(preview);
    let head = format!(
        "🔐 Approval needed (`{request}`): the assistant wants to run `{tool}`:\n```\n{shown}\n```\nOnly {approvers} can decide."
    );
    let (text, post) = match stored {
        Some(stored) => {
            let always = crate::approvals::default_always_rule(&stored)
                .map(|rule| format!(" *Always* adds the rule `{rule}` (`pincer approvals revoke` takes it back)."))
                .unwrap_or_default();
            let actions = crate::approvals::buttons(&stored)
                .into_iter()
                .map(|(choice, id)| Button {
                    id,
                    label: choice.label().to_string(),
                    style: match choice {
                        Choice::Once => ButtonStyle::Primary,
                        Choice::Deny => ButtonStyle::Danger,
                        _ => ButtonStyle::Plain,
                    },
                })
                .collect();
            (
                format!(
                    "{head}{always} Nobody deciding within {minutes} min denies it; `/deny {request} REASON` tells the assistant why."
                ),
                Post {
                    actions,
                    ..Default::default()
                },
            )
        }
        None => {
            let session = if session {
                format!(
                    "\n• `/approve {request} session`: calls like it, for the rest of this session"
                )
            } else {
                String::new()
            };
            (
                format!(
                    "{head} Reply with:\n• `/approve {request}`: this call, once{session}\n• `/approve {request} always`: from now on (a rule you can revoke)\n• `/deny {request} [reason]`\nNobody deciding within {minutes} min denies it."
                ),
                Post::default(),
            )
        }
    };
    if let Err(e) = channels.post(to, &text, post) {
        tracing::error!(channel = to.channel, %request, "cannot post the approval request: {e}");
    }
}

/// Tells `to` how `request` ended: its message with buttons is replaced by
/// the outcome (buttons gone); without one, a message says it, unless the
/// person who decided was answered already (`announce` false).
pub(super) fn post_decided(
    channels: &ChannelHost,
    store: &ApprovalStore,
    to: &Address<'_>,
    request: &str,
    outcome: &str,
    announce: bool,
) {
    let asked = if channels.interactive(to.channel) {
        channels
            .store()
            .with_action_prefix(to.channel, &crate::approvals::button_prefix(request))
            .unwrap_or_else(|e| {
                tracing::warn!(%request, "cannot find the request's message: {e}");
                None
            })
    } else {
        None
    };
    let (text, post) = match asked {
        Some(message) => {
            let what = match store.get(request) {
                Ok(Some(stored)) => format!(
                    "`{}`:\n```\n{}\n```",
                    stored.tool,
                    fenced_preview(&stored.preview)
                ),
                _ => "the call".to_string(),
            };
            (
                format!("🔐 `{request}` {what}\n{}.", capitalized(outcome)),
                Post {
                    replaces: Some(message.id),
                    ..Default::default()
                },
            )
        }
        None if announce => (format!("🔐 `{request}`: {outcome}."), Post::default()),
        None => return,
    };
    if let Err(e) = channels.post(to, &text, post) {
        tracing::warn!(channel = to.channel, %request, "cannot post the decision: {e}");
    }
}

/// A request's preview as chat shows it, safe inside a ``` fence (a fence
/// in it cannot end the block early).
fn fenced_preview(preview: &str) -> String {
    crate::approvals::shown_preview(preview).replace("```", "`\u{200b}``")
}

fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}
