//! A thread's or a conversation's earlier messages, for the host to give
//! the model as quoted context: `conversations.replies`
//! (https://docs.slack.dev/reference/methods/conversations.replies) and
//! `conversations.history`
//! (https://docs.slack.dev/reference/methods/conversations.history).

use pincer_plugin_sdk::channel::{HistoryRequest, PastMessage};
use pincer_plugin_sdk::types::Message;
use serde::Deserialize;
use serde_json::Value;

use crate::inbound::{plain_text, ts_to_ms};

/// The most `conversations.replies` returns in one page; a longer thread's
/// newest messages are its last page's, so the page is read whole and its
/// end kept.
const REPLIES_PAGE: u32 = 1000;

/// The Web API method and its form fields for `request`.
pub fn call(request: &HistoryRequest) -> (&'static str, Vec<(&'static str, String)>) {
    let mut fields = vec![
        ("channel", request.conversation.clone()),
        ("latest", request.before.clone()),
        ("inclusive", "false".to_string()),
    ];
    match &request.thread {
        Some(thread) => {
            fields.push(("ts", thread.clone()));
            fields.push(("limit", REPLIES_PAGE.to_string()));
            ("conversations.replies", fields)
        }
        None => {
            fields.push(("limit", request.limit.clamp(1, 999).to_string()));
            ("conversations.history", fields)
        }
    }
}

#[derive(Debug, Deserialize)]
struct Past {
    #[serde(default)]
    ts: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    bot_id: Option<String>,
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    text: String,
    #[serde(default)]
    thread_ts: Option<String>,
}

/// Subtypes that are people's (or apps') words; joins, topic changes and
/// the like are left out.
fn is_said(subtype: Option<&str>) -> bool {
    matches!(
        subtype,
        None | Some("bot_message" | "file_share" | "thread_broadcast" | "me_message")
    )
}

/// The answer's messages, oldest first, the newest `request.limit` of them
/// that are older than `request.before`; `own_bot`: this app's `bot_id`.
pub fn messages(
    answer: &Value,
    request: &HistoryRequest,
    own_bot: Option<&str>,
) -> Vec<PastMessage> {
    let listed: Vec<Past> = answer
        .get("messages")
        .and_then(|m| serde_json::from_value(m.clone()).ok())
        .unwrap_or_default();
    let before = ts_to_ms(&request.before);
    let mut out: Vec<PastMessage> = listed
        .into_iter()
        .filter(|m| is_said(m.subtype.as_deref()) && !m.ts.is_empty() && m.ts != request.before)
        .filter_map(|m| {
            let at = ts_to_ms(&m.ts)?;
            // Slack's `latest` is exclusive already; this guards a platform
            // that ignores it.
            if before.is_some_and(|b| at > b) {
                return None;
            }
            let by_app = own_bot.is_some_and(|own| m.bot_id.as_deref() == Some(own));
            let sender = m.user.or(m.bot_id).unwrap_or_else(|| "unknown".into());
            Some(PastMessage {
                message: Message {
                    id: m.ts,
                    conversation: request.conversation.clone(),
                    thread: m.thread_ts,
                    sender,
                    sender_name: None,
                    text: plain_text(&m.text),
                    timestamp_ms: at,
                    files: Vec::new(),
                },
                by_app,
            })
        })
        .collect();
    out.sort_by_key(|m| m.message.timestamp_ms);
    let keep = request.limit as usize;
    if out.len() > keep {
        out.drain(..out.len() - keep);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(thread: Option<&str>, limit: u32) -> HistoryRequest {
        HistoryRequest {
            conversation: "C123ABC456".into(),
            thread: thread.map(str::to_string),
            before: "1700000010.000000".into(),
            limit,
        }
    }

    #[test]
    fn a_thread_is_read_with_replies_and_a_channel_with_history() {
        let (method, fields) = call(&request(Some("1700000000.000100"), 30));
        assert_eq!(method, "conversations.replies");
        assert!(fields.contains(&("ts", "1700000000.000100".into())));
        assert!(fields.contains(&("latest", "1700000010.000000".into())));
        assert!(fields.contains(&("inclusive", "false".into())));
        let (method, fields) = call(&request(None, 5));
        assert_eq!(method, "conversations.history");
        assert!(fields.contains(&("limit", "5".into())));
    }

    /// The shape of conversations.replies' documented example answer.
    #[test]
    fn replies_become_past_messages_oldest_first_newest_kept() {
        let answer = json!({
            "messages": [
                { "type": "message", "user": "U061F7AUR", "text": "island", "thread_ts": "1700000000.000100",
                  "reply_count": 3, "ts": "1700000000.000100" },
                { "type": "message", "user": "U061F7AUR", "text": "one &amp; two", "thread_ts": "1700000000.000100",
                  "parent_user_id": "U061F7AUR", "ts": "1700000001.000100" },
                { "type": "message", "subtype": "channel_join", "user": "U9", "text": "joined", "ts": "1700000002.000100" },
                { "type": "message", "bot_id": "B0BOT", "text": "my answer", "thread_ts": "1700000000.000100", "ts": "1700000003.000100" },
                { "type": "message", "bot_id": "B0OTHER", "subtype": "bot_message", "text": "other bot", "ts": "1700000004.000100" },
                { "type": "message", "user": "U1", "text": "the mention itself", "ts": "1700000010.000000" }
            ],
            "has_more": false, "ok": true
        });
        let all = messages(
            &answer,
            &request(Some("1700000000.000100"), 30),
            Some("B0BOT"),
        );
        let texts: Vec<&str> = all.iter().map(|m| m.message.text.as_str()).collect();
        assert_eq!(texts, ["island", "one & two", "my answer", "other bot"]);
        assert!(all[2].by_app && !all[3].by_app && !all[0].by_app);
        assert_eq!(all[3].message.sender, "B0OTHER");
        let newest = messages(
            &answer,
            &request(Some("1700000000.000100"), 2),
            Some("B0BOT"),
        );
        assert_eq!(newest.len(), 2);
        assert_eq!(newest[1].message.text, "other bot");
    }
}
