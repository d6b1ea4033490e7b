//! What a channel plugin may hand the host in one delivery. A plugin is
//! untrusted: a broken or hostile one could return a flood of messages (each
//! stored and each a turn) or huge texts and ids (stored forever). Messages
//! past [`MAX_MESSAGES`] are dropped, texts are cut to [`MAX_TEXT_BYTES`]
//! (saying so in the text), and a message whose id, conversation, thread or
//! sender is empty or longer than [`MAX_ID_BYTES`] is dropped; all of it is
//! logged.

use crate::plugins::api;

/// Messages one delivery (a frame, a webhook request) may carry.
pub const MAX_MESSAGES: usize = 100;
/// Bytes of one message's text (Slack's own limit is 40,000 characters;
/// Feishu's 150 KB of post JSON).
pub const MAX_TEXT_BYTES: usize = 64 * 1024;
/// Bytes of a message id, conversation, thread, sender or sender name.
pub const MAX_ID_BYTES: usize = 256;
/// Files one message may carry (Slack allows 10 per message).
pub const MAX_FILES: usize = 10;

/// `messages` within the bounds above.
pub fn bounded(channel: &str, messages: Vec<api::Message>) -> Vec<api::Message> {
    let total = messages.len();
    if total > MAX_MESSAGES {
        tracing::warn!(
            %channel,
            "the channel plugin returned {total} messages in one delivery; the {} past {MAX_MESSAGES} were dropped",
            total - MAX_MESSAGES
        );
    }
    messages
        .into_iter()
        .take(MAX_MESSAGES)
        .filter_map(|mut message| {
            if bad_ids(&[
                Some(&message.id),
                Some(&message.conversation),
                Some(&message.sender),
                message.thread.as_ref(),
            ]) {
                tracing::warn!(
                    %channel,
                    "a message with an empty id or one over {MAX_ID_BYTES} bytes was dropped"
                );
                return None;
            }
            if let Some(name) = &mut message.sender_name {
                cut(name, MAX_ID_BYTES, "");
            }
            if message.files.len() > MAX_FILES {
                tracing::warn!(%channel, id = %message.id, "a message with {} files kept its first {MAX_FILES}", message.files.len());
                message.files.truncate(MAX_FILES);
            }
            if message.text.len() > MAX_TEXT_BYTES {
                let len = message.text.len();
                tracing::warn!(%channel, id = %message.id, "a message of {len} bytes was cut to {MAX_TEXT_BYTES}");
                cut(
                    &mut message.text,
                    MAX_TEXT_BYTES,
                    &format!("\n[… cut by pincer: the message had {len} bytes]"),
                );
            }
            Some(message)
        })
        .collect()
}

/// Clicks one delivery may carry.
pub const MAX_INTERACTIONS: usize = 20;

/// `interactions` within the bounds of ids: at most [`MAX_INTERACTIONS`],
/// and none whose id, action, conversation, thread, message or user is
/// empty or longer than [`MAX_ID_BYTES`] (an action id pincer wrote is far
/// shorter, so nothing real is dropped).
pub fn bounded_interactions(
    channel: &str,
    interactions: Vec<api::Interaction>,
) -> Vec<api::Interaction> {
    if interactions.len() > MAX_INTERACTIONS {
        tracing::warn!(
            %channel,
            "the channel plugin returned {} clicks in one delivery; the ones past {MAX_INTERACTIONS} were dropped",
            interactions.len()
        );
    }
    interactions
        .into_iter()
        .take(MAX_INTERACTIONS)
        .filter_map(|mut click| {
            if bad_ids(&[
                Some(&click.id),
                Some(&click.action),
                Some(&click.conversation),
                Some(&click.message),
                Some(&click.user),
                click.thread.as_ref(),
            ]) {
                tracing::warn!(
                    %channel,
                    "a click with an empty id or one over {MAX_ID_BYTES} bytes was dropped"
                );
                return None;
            }
            if let Some(name) = &mut click.user_name {
                cut(name, MAX_ID_BYTES, "");
            }
            Some(click)
        })
        .collect()
}

/// Whether one of `ids` (absent ones aside) is empty or over [`MAX_ID_BYTES`].
fn bad_ids(ids: &[Option<&String>]) -> bool {
    ids.iter()
        .flatten()
        .any(|id| id.is_empty() || id.len() > MAX_ID_BYTES)
}

/// Cuts `text` to at most `max` bytes (at a character boundary), then
/// appends `note`.
fn cut(text: &mut String, max: usize, note: &str) {
    if text.len() <= max {
        return;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str(note);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, text: &str) -> api::Message {
        api::Message {
            id: id.into(),
            conversation: "C1".into(),
            thread: None,
            sender: "U1".into(),
            sender_name: None,
            text: text.into(),
            timestamp_ms: 0,
            files: Vec::new(),
        }
    }

    #[test]
    fn a_flood_huge_texts_and_bad_ids_are_bounded() {
        let flood: Vec<_> = (0..1000).map(|i| message(&i.to_string(), "hi")).collect();
        assert_eq!(bounded("c", flood).len(), MAX_MESSAGES);

        let huge = "好".repeat(MAX_TEXT_BYTES); // 3 bytes each
        let kept = bounded("c", vec![message("1", &huge)]);
        let text = &kept[0].text;
        assert!(text.len() <= MAX_TEXT_BYTES + 64, "{}", text.len());
        assert!(text.starts_with("好好"));
        assert!(text.ends_with(&format!(
            "[… cut by pincer: the message had {} bytes]",
            huge.len()
        )));

        let long_id = "x".repeat(MAX_ID_BYTES + 1);
        let mut no_sender = message("3", "hi");
        no_sender.sender.clear();
        let kept = bounded(
            "c",
            vec![
                message(&long_id, "hi"),
                message("", "hi"),
                no_sender,
                message("ok", "hi"),
            ],
        );
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].id, "ok");
    }

    fn click(id: &str, action: &str) -> api::Interaction {
        api::Interaction {
            id: id.into(),
            action: action.into(),
            conversation: "C1".into(),
            thread: None,
            message: "1.2".into(),
            user: "U1".into(),
            user_name: Some("n".repeat(MAX_ID_BYTES * 2)),
            timestamp_ms: 0,
        }
    }

    #[test]
    fn a_flood_of_clicks_and_bad_ids_are_bounded() {
        let flood: Vec<_> = (0..500).map(|i| click(&i.to_string(), "a")).collect();
        assert_eq!(bounded_interactions("c", flood).len(), MAX_INTERACTIONS);
        let kept = bounded_interactions(
            "c",
            vec![
                click("1", ""),
                click("2", &"a".repeat(MAX_ID_BYTES + 1)),
                click("", "a"),
                click("3", "pincer:apr_1:once"),
            ],
        );
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].id, "3");
        assert!(
            kept[0]
                .user_name
                .as_ref()
                .is_some_and(|n| n.len() == MAX_ID_BYTES)
        );
    }
}
