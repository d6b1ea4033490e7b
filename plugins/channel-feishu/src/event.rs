//! Inbound events: `im.message.receive_v1` (schema 2.0) into pincer messages.
//!
//! Shape from Feishu's docs, "接收消息 / Receive message"
//! (https://open.feishu.cn/document/uAjLw4CM/ukTMukTMukTM/reference/im-v1/message/events/receive):
//! `{"schema":"2.0","header":{"event_id","event_type","create_time","token",
//! "app_id","tenant_key"},"event":{"sender":{"sender_id":{"open_id",…},
//! "sender_type","tenant_key"},"message":{"message_id","root_id","parent_id",
//! "create_time","chat_id","thread_id","chat_type","message_type","content",
//! "mentions":[{"key":"@_user_1","id":{"open_id",…},"name",…}]}}}`.
//! `content` is a JSON string whose shape depends on `message_type`
//! (https://open.feishu.cn/document/uAjLw4CM/ukTMukTMukTM/im-v1/message/events/message_content).

use pincer_plugin_sdk::types::Message;
use serde::Deserialize;
use serde_json::Value;

pub const MESSAGE_RECEIVE: &str = "im.message.receive_v1";

#[derive(Debug, Deserialize)]
pub struct Envelope {
    #[serde(default)]
    pub header: Option<EventHeader>,
    #[serde(default)]
    pub event: Option<Value>,
    /// Schema 1.0 (and `url_verification`) keep these at the top.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    #[serde(default)]
    pub token: Option<String>,
    #[serde(default)]
    pub challenge: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
pub struct EventHeader {
    #[serde(default)]
    pub event_id: String,
    #[serde(default)]
    pub event_type: String,
    #[serde(default)]
    pub token: String,
    /// Milliseconds since the epoch, as a string.
    #[serde(default)]
    pub create_time: String,
}

impl Envelope {
    /// The verification token the event carries: `header.token` in schema
    /// 2.0, `token` in 1.0.
    pub fn token(&self) -> Option<&str> {
        self.header
            .as_ref()
            .map(|h| h.token.as_str())
            .filter(|t| !t.is_empty())
            .or(self.token.as_deref())
    }

    pub fn event_type(&self) -> &str {
        match &self.header {
            Some(h) => &h.event_type,
            None => self
                .event
                .as_ref()
                .and_then(|e| e.get("type"))
                .and_then(Value::as_str)
                .unwrap_or(""),
        }
    }
}

#[derive(Debug, Deserialize)]
struct ReceiveEvent {
    sender: Sender,
    message: EventMessage,
}

#[derive(Debug, Deserialize)]
struct Sender {
    #[serde(default)]
    sender_id: Ids,
    #[serde(default)]
    sender_type: String,
}

#[derive(Debug, Default, Deserialize)]
struct Ids {
    #[serde(default)]
    open_id: String,
}

#[derive(Debug, Deserialize)]
struct EventMessage {
    message_id: String,
    #[serde(default)]
    root_id: String,
    #[serde(default)]
    thread_id: String,
    #[serde(default)]
    create_time: String,
    chat_id: String,
    #[serde(default)]
    chat_type: String,
    #[serde(default)]
    message_type: String,
    #[serde(default)]
    content: String,
    #[serde(default)]
    mentions: Vec<Mention>,
}

#[derive(Debug, Deserialize)]
struct Mention {
    #[serde(default)]
    key: String,
    #[serde(default)]
    id: Ids,
    #[serde(default)]
    name: String,
}

/// Parses an event envelope.
pub fn envelope(body: &[u8]) -> Result<Envelope, String> {
    serde_json::from_slice(body).map_err(|err| format!("the event is not a JSON object: {err}"))
}

/// The pincer message of an `im.message.receive_v1` event, or why the
/// event is not one for the agent. `bot_open_id` is the bot's own open_id
/// (from `bot/v3/info`), when known.
pub fn message(event: &Value, bot_open_id: Option<&str>) -> Result<Message, String> {
    let event: ReceiveEvent = serde_json::from_value(event.clone())
        .map_err(|err| format!("malformed {MESSAGE_RECEIVE}: {err}"))?;
    let msg = event.message;
    if event.sender.sender_type == "app"
        || bot_open_id.is_some_and(|id| id == event.sender.sender_id.open_id)
    {
        return Err("the message is from an app (or this bot)".into());
    }
    let bot_key = bot_mention_key(&msg.mentions, bot_open_id);
    let group = msg.chat_type != "p2p";
    if group && bot_key.is_none() {
        return Err(format!(
            "a {} chat message that does not mention the bot",
            if msg.chat_type.is_empty() {
                "group"
            } else {
                &msg.chat_type
            }
        ));
    }
    let mut files = Vec::new();
    let text = match msg.message_type.as_str() {
        "text" => text_content(&msg.content, &msg.mentions, bot_key)?,
        "post" => post_content(&msg.content, &msg.mentions, bot_key)?,
        kind @ ("file" | "image") => {
            files.extend(crate::files::attachment(kind, &msg.content));
            if files.is_empty() {
                return Err(format!("a {kind} message without a usable key"));
            }
            String::new()
        }
        other => {
            return Err(format!(
                "a message of type {other:?} (only text, post, file and image are read)"
            ));
        }
    };
    if text.trim().is_empty() && files.is_empty() {
        return Err("a message without text".into());
    }
    let thread = [&msg.root_id, &msg.thread_id]
        .into_iter()
        .find(|t| !t.is_empty())
        .cloned()
        .or_else(|| group.then(|| msg.message_id.clone()));
    Ok(Message {
        id: msg.message_id,
        conversation: msg.chat_id,
        thread,
        sender: event.sender.sender_id.open_id,
        sender_name: None,
        text,
        timestamp_ms: msg.create_time.parse().unwrap_or(0),
        files,
    })
}

/// The text of a stored message's `body.content` (as the list-messages API
/// returns it), for the `text` and `post` types; mentions stay as their
/// placeholders.
pub fn stored_text(msg_type: &str, content: &str) -> Option<String> {
    match msg_type {
        "text" => text_content(content, &[], None).ok(),
        "post" => post_content(content, &[], None).ok(),
        _ => None,
    }
}

/// The placeholder key (`@_user_N`) of the bot's mention. When the bot's
/// open_id is unknown (bot/v3/info failed), the first mention counts: Feishu
/// only delivers group messages that @-mention the bot unless the app has
/// the read-all-group-messages permission.
fn bot_mention_key<'a>(mentions: &'a [Mention], bot_open_id: Option<&str>) -> Option<&'a str> {
    match bot_open_id {
        Some(id) => mentions.iter().find(|m| m.id.open_id == id),
        None => mentions.first(),
    }
    .map(|m| m.key.as_str())
}

/// `@_user_1` → `@Name`; the bot's own mention goes.
fn replace_mentions(text: &str, mentions: &[Mention], bot_key: Option<&str>) -> String {
    let mut out = text.to_string();
    // Longest keys first, so `@_user_1` does not eat into `@_user_10`.
    let mut sorted: Vec<&Mention> = mentions.iter().filter(|m| !m.key.is_empty()).collect();
    sorted.sort_by_key(|m| std::cmp::Reverse(m.key.len()));
    for m in sorted {
        let with = if Some(m.key.as_str()) == bot_key {
            String::new()
        } else {
            format!("@{}", m.name)
        };
        out = out.replace(&m.key, &with);
    }
    tidy(&out)
}

/// Collapses the runs of spaces a removed mention leaves, per line.
fn tidy(text: &str) -> String {
    text.lines()
        .map(|line| {
            line.split(' ')
                .filter(|w| !w.is_empty())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

fn content_json(content: &str) -> Result<Value, String> {
    serde_json::from_str(content).map_err(|err| format!("message content is not JSON: {err}"))
}

/// `text`: `{"text": "@_user_1 hello"}`.
fn text_content(
    content: &str,
    mentions: &[Mention],
    bot_key: Option<&str>,
) -> Result<String, String> {
    let value = content_json(content)?;
    let text = value
        .get("text")
        .and_then(Value::as_str)
        .ok_or("text content without `text`")?;
    Ok(replace_mentions(text, mentions, bot_key))
}

/// `post`: `{"title": "…", "content": [[{"tag": "text", "text": "…"}, …], …]}`
/// (received posts have no locale level; sent ones do, so both are read).
fn post_content(
    content: &str,
    mentions: &[Mention],
    bot_key: Option<&str>,
) -> Result<String, String> {
    let value = content_json(content)?;
    let post = if value.get("content").is_some() {
        &value
    } else {
        value
            .as_object()
            .and_then(|o| o.values().find(|v| v.get("content").is_some()))
            .ok_or("post content without `content`")?
    };
    let mut lines = Vec::new();
    if let Some(title) = post
        .get("title")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
    {
        lines.push(title.to_string());
    }
    for paragraph in post["content"].as_array().into_iter().flatten() {
        let mut line = String::new();
        for el in paragraph.as_array().into_iter().flatten() {
            let field = |name: &str| el.get(name).and_then(Value::as_str).unwrap_or("");
            match field("tag") {
                "text" | "md" => line.push_str(field("text")),
                "a" => {
                    let (text, href) = (field("text"), field("href"));
                    if text.is_empty() || text == href {
                        line.push_str(href);
                    } else {
                        line.push_str(&format!("[{text}]({href})"));
                    }
                }
                "at" => {
                    let key = field("user_id");
                    if Some(key) != bot_key {
                        let name = mentions
                            .iter()
                            .find(|m| m.key == key)
                            .map(|m| m.name.as_str())
                            .unwrap_or_else(|| field("user_name"));
                        line.push('@');
                        line.push_str(if name.is_empty() { key } else { name });
                    }
                }
                "code_block" => {
                    line.push_str(&format!(
                        "```{}\n{}\n```",
                        field("language").to_lowercase(),
                        field("text").trim_end()
                    ));
                }
                "emotion" => line.push_str(&format!(":{}:", field("emoji_type"))),
                "img" => line.push_str("[image]"),
                "media" => line.push_str("[video]"),
                "hr" => line.push_str("---"),
                _ => line.push_str(field("text")),
            }
        }
        lines.push(line);
    }
    // The bot's own placeholder may still be in text elements.
    Ok(replace_mentions(&lines.join("\n"), mentions, bot_key))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BOT: &str = "ou_bot";

    /// The example of Feishu's "Receive message" page, with its envelope.
    fn receive(chat_type: &str, message_type: &str, content: &str, mentions: Value) -> Value {
        json!({
            "schema": "2.0",
            "header": {
                "event_id": "5e3702a84e847582be8db7fb73283c02",
                "event_type": "im.message.receive_v1",
                "create_time": "1608725989000",
                "token": "rvaYgkND1GOiu5MM0E1rncYC6PLtF7JV",
                "app_id": "cli_9f5343c580712544",
                "tenant_key": "2ca1d211f64f6438"
            },
            "event": {
                "sender": {
                    "sender_id": {
                        "union_id": "on_8ed6aa67826108097d9ee143816345",
                        "user_id": "e33ggbyz",
                        "open_id": "ou_84aad35d084aa403a838cf73ee18467"
                    },
                    "sender_type": "user",
                    "tenant_key": "736588c9260f175e"
                },
                "message": {
                    "message_id": "om_5ce6d572455d361153b7cb51da133945",
                    "root_id": "",
                    "parent_id": "",
                    "create_time": "1609073151345",
                    "update_time": "1687343654666",
                    "chat_id": "oc_5ce6d572455d361153b7xx51da133945",
                    "thread_id": "",
                    "chat_type": chat_type,
                    "message_type": message_type,
                    "content": content,
                    "mentions": mentions,
                    "user_agent": "Mozilla/5.0"
                }
            }
        })
    }

    fn mention(key: &str, open_id: &str, name: &str) -> Value {
        json!({
            "key": key,
            "id": { "union_id": "on_x", "user_id": "u", "open_id": open_id },
            "name": name,
            "tenant_key": "736588c9260f175e"
        })
    }

    fn map(v: &Value, bot: Option<&str>) -> Result<Message, String> {
        let env = envelope(v.to_string().as_bytes()).expect("envelope");
        assert_eq!(env.event_type(), MESSAGE_RECEIVE);
        assert_eq!(env.token(), Some("rvaYgkND1GOiu5MM0E1rncYC6PLtF7JV"));
        message(env.event.as_ref().expect("event"), bot)
    }

    #[test]
    fn p2p_text() {
        let v = receive(
            "p2p",
            "text",
            r#"{"text":"你好，帮我看看这段代码"}"#,
            json!([]),
        );
        let m = map(&v, Some(BOT)).expect("message");
        assert_eq!(m.id, "om_5ce6d572455d361153b7cb51da133945");
        assert_eq!(m.conversation, "oc_5ce6d572455d361153b7xx51da133945");
        assert_eq!(m.sender, "ou_84aad35d084aa403a838cf73ee18467");
        assert_eq!(m.text, "你好，帮我看看这段代码");
        assert_eq!(m.thread, None);
        assert_eq!(m.timestamp_ms, 1_609_073_151_345);
    }

    #[test]
    fn group_text_needs_the_bots_mention() {
        let mentions = json!([
            mention("@_user_1", BOT, "pincer"),
            mention("@_user_2", "ou_tom", "Tom")
        ]);
        let v = receive(
            "group",
            "text",
            r#"{"text":"@_user_1 ask @_user_2 about it"}"#,
            mentions,
        );
        let m = map(&v, Some(BOT)).expect("message");
        assert_eq!(m.text, "ask @Tom about it");
        // No thread yet: reply under the message itself.
        assert_eq!(
            m.thread.as_deref(),
            Some("om_5ce6d572455d361153b7cb51da133945")
        );

        // Mentions someone else only: not for the bot.
        let v = receive(
            "group",
            "text",
            r#"{"text":"@_user_1 hi"}"#,
            json!([mention("@_user_1", "ou_tom", "Tom")]),
        );
        assert!(map(&v, Some(BOT)).is_err());
        // Bot id unknown: the first mention stands for it.
        let m = map(&v, None).expect("message");
        assert_eq!(m.text, "hi");
        // No mention at all.
        let v = receive("group", "text", r#"{"text":"hello"}"#, json!([]));
        assert!(map(&v, None).is_err());
    }

    #[test]
    fn threads_and_skips() {
        let mut v = receive(
            "group",
            "text",
            r#"{"text":"@_user_1 more"}"#,
            json!([mention("@_user_1", BOT, "pincer")]),
        );
        v["event"]["message"]["root_id"] = json!("om_root");
        v["event"]["message"]["thread_id"] = json!("omt_1");
        assert_eq!(
            map(&v, Some(BOT)).expect("m").thread.as_deref(),
            Some("om_root")
        );
        v["event"]["message"]["root_id"] = json!("");
        assert_eq!(
            map(&v, Some(BOT)).expect("m").thread.as_deref(),
            Some("omt_1")
        );

        let mut v = receive("p2p", "text", r#"{"text":"echo"}"#, json!([]));
        v["event"]["sender"]["sender_type"] = json!("app");
        assert!(map(&v, Some(BOT)).is_err());
        // An image is a message with a file and no text; a sticker is skipped.
        let v = receive("p2p", "image", r#"{"image_key":"img_1"}"#, json!([]));
        let m = map(&v, Some(BOT)).expect("an image message");
        assert_eq!((m.text.as_str(), m.files.len()), ("", 1));
        assert_eq!(m.files[0].locator, "image:img_1");
        let v = receive("p2p", "sticker", r#"{"file_key":"k"}"#, json!([]));
        assert!(map(&v, Some(BOT)).is_err());
        let v = receive("p2p", "image", r#"{"image_key":"../x"}"#, json!([]));
        assert!(map(&v, Some(BOT)).is_err());
        let v = receive("p2p", "text", r#"not json"#, json!([]));
        assert!(map(&v, Some(BOT)).is_err());
        let v = receive(
            "group",
            "text",
            r#"{"text":"@_user_1"}"#,
            json!([mention("@_user_1", BOT, "pincer")]),
        );
        assert!(map(&v, Some(BOT)).is_err(), "nothing but the mention");
    }

    #[test]
    fn mention_keys_do_not_overlap() {
        let mentions: Vec<Mention> = serde_json::from_value(json!([
            mention("@_user_1", BOT, "bot"),
            mention("@_user_10", "ou_10", "Ten"),
        ]))
        .expect("mentions");
        assert_eq!(
            replace_mentions("@_user_10 and @_user_1 x", &mentions, Some("@_user_1")),
            "@Ten and x"
        );
    }

    #[test]
    fn post_is_flattened() {
        // Received post content, as the message-content page shows it.
        let content = json!({
            "title": "日报",
            "content": [
                [
                    {"tag": "at", "user_id": "@_user_1", "user_name": "pincer"},
                    {"tag": "text", "text": " 请总结：", "style": ["bold"]},
                    {"tag": "a", "href": "https://open.feishu.cn", "text": "文档"}
                ],
                [{"tag": "img", "image_key": "img_v2_1", "width": 300, "height": 300}],
                [{"tag": "code_block", "language": "RUST", "text": "fn main() {}\n"}],
                [{"tag": "at", "user_id": "@_user_2", "user_name": "Tom"}, {"tag": "emotion", "emoji_type": "OK"}]
            ]
        })
        .to_string();
        let mentions = json!([
            mention("@_user_1", BOT, "pincer"),
            mention("@_user_2", "ou_tom", "Tom")
        ]);
        let v = receive("group", "post", &content, mentions);
        let m = map(&v, Some(BOT)).expect("message");
        assert_eq!(
            m.text,
            "日报\n请总结：[文档](https://open.feishu.cn)\n[image]\n```rust\nfn main() {}\n```\n@Tom:OK:"
        );
        // A sent post (with a locale level) reads the same way.
        let content = json!({"zh_cn": {"title": "", "content": [[{"tag": "text", "text": "hi"}]]}})
            .to_string();
        let v = receive("p2p", "post", &content, json!([]));
        assert_eq!(map(&v, Some(BOT)).expect("m").text, "hi");
    }

    #[test]
    fn schema_one_tokens() {
        let env = envelope(br#"{"uuid":"u","token":"tok","ts":"1","type":"event_callback","event":{"type":"message"}}"#)
            .expect("env");
        assert_eq!(env.token(), Some("tok"));
        assert_eq!(env.event_type(), "message");
        let env = envelope(br#"{"challenge":"c1","token":"tok","type":"url_verification"}"#)
            .expect("env");
        assert_eq!(env.kind.as_deref(), Some("url_verification"));
        assert_eq!(env.challenge.as_deref(), Some("c1"));
        assert!(envelope(b"[1]").is_err());
    }
}
