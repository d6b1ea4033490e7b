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
/// Bytes of a file's locator (a platform URL or key).
pub const MAX_LOCATOR_BYTES: usize = 2048;

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
        .filter_map(|message| within(channel, message))
        .collect()
}

/// A channel's answer to `history`: its newest `limit` messages (at most
/// [`MAX_MESSAGES`]), each within the bounds of a delivered message.
pub fn bounded_past(
    channel: &str,
    mut past: Vec<api::PastMessage>,
    limit: u32,
) -> Vec<api::PastMessage> {
    let keep = usize::try_from(limit)
        .unwrap_or(usize::MAX)
        .min(MAX_MESSAGES);
    if past.len() > keep {
        tracing::warn!(
            %channel,
            "the channel plugin returned {} earlier messages for {keep} asked; the oldest were dropped",
            past.len()
        );
        past.drain(..past.len() - keep);
    }
    past.into_iter()
        .filter_map(|p| {
            Some(api::PastMessage {
                message: within(channel, p.message)?,
                by_app: p.by_app,
            })
        })
        .collect()
}

/// `message` within the bounds, or `None` when its ids are unusable.
fn within(channel: &str, mut message: api::Message) -> Option<api::Message> {
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
    let files = message.files.len();
    message.files.retain(|f| {
        !bad_ids(&[Some(&f.id), f.media_type.as_ref()])
            && !f.locator.is_empty()
            && f.locator.len() <= MAX_LOCATOR_BYTES
    });
    if message.files.len() < files {
        tracing::warn!(%channel, id = %message.id, "{} file(s) with an unusable id, type or locator were dropped", files - message.files.len());
    }
    for file in &mut message.files {
        cut(&mut file.name, MAX_ID_BYTES, "");
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
    text.truncate(text.floor_char_boundary(max));
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

    fn file(id: &str, name: &str, locator: &str) -> api::Attachment {
        api::Attachment {
            id: id.into(),
            name: name.into(),
            media_type: None,
            size: None,
            locator: locator.into(),
        }
    }

    #[test]
    fn files_with_unusable_ids_or_locators_are_dropped_and_names_cut() {
        let mut m = message("1", "");
        m.files = vec![
            file("F1", &"n".repeat(10_000), "https://files.slack.com/x"),
            file("", "a", "x"),
            file("F3", "a", ""),
            file("F4", "a", &"u".repeat(MAX_LOCATOR_BYTES + 1)),
        ];
        m.files
            .extend((0..20).map(|i| file(&format!("G{i}"), "b", "l")));
        let kept = &bounded("c", vec![m])[0].files;
        assert_eq!(kept.len(), MAX_FILES - 3, "{kept:?}");
        assert_eq!(kept[0].name.len(), MAX_ID_BYTES);
    }

    #[test]
    fn a_history_answer_keeps_the_newest_asked_and_bounds_each() {
        let past: Vec<_> = (0..500)
            .map(|i| api::PastMessage {
                message: message(
                    &i.to_string(),
                    &"x".repeat(if i == 499 { MAX_TEXT_BYTES * 2 } else { 1 }),
                ),
                by_app: false,
            })
            .collect();
        let kept = bounded_past("c", past.clone(), 30);
        assert_eq!(kept.len(), 30);
        assert_eq!(kept[0].message.id, "470", "the newest kept");
        assert!(kept[29].message.text.len() < MAX_TEXT_BYTES + 64);
        assert_eq!(bounded_past("c", past, u32::MAX).len(), MAX_MESSAGES);
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
