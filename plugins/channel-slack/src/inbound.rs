//! Slack's inbound shapes (the Events API `event_callback`, slash commands)
//! turned into pincer messages, and Slack's message text turned into plain
//! text.

use pincer_plugin_sdk::types::Message;
use serde::Deserialize;
use serde_json::Value;

/// The Events API wrapper (`event_callback`), as far as this channel reads it.
#[derive(Debug, Default, Deserialize)]
pub struct Callback {
    #[serde(default)]
    pub event: Option<Value>,
    #[serde(default)]
    pub authorizations: Vec<Authorization>,
    #[serde(default)]
    pub authed_users: Vec<String>,
}

#[derive(Debug, Deserialize)]
pub struct Authorization {
    #[serde(default)]
    pub user_id: Option<String>,
    #[serde(default)]
    pub is_bot: bool,
}

/// The inner `event` of a callback, as far as this channel reads it.
#[derive(Debug, Deserialize)]
struct Event {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    subtype: Option<String>,
    #[serde(default)]
    bot_id: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    ts: Option<String>,
    #[serde(default)]
    thread_ts: Option<String>,
    #[serde(default)]
    channel: Option<String>,
    #[serde(default)]
    channel_type: Option<String>,
    #[serde(default)]
    files: Vec<Value>,
}

/// Why an event produced no message (for debug logs).
#[derive(Debug, PartialEq, Eq)]
pub enum Skip {
    NoEvent,
    Malformed(String),
    /// Not a `message` or `app_mention` event.
    OtherType(String),
    /// Edits, deletions, joins, bot messages…
    Subtype(String),
    FromBot,
    /// The bot's own message.
    OwnMessage,
    /// A `message` outside a DM; the `app_mention` event covers those.
    NotDirect,
    MissingField(&'static str),
    EmptyText,
}

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Skip::NoEvent => write!(f, "the callback has no event"),
            Skip::Malformed(why) => write!(f, "the event is malformed: {why}"),
            Skip::OtherType(kind) => write!(f, "`{kind}` events are not messages"),
            Skip::Subtype(subtype) => write!(f, "`{subtype}` messages are ignored"),
            Skip::FromBot => write!(f, "messages from bots are ignored"),
            Skip::OwnMessage => write!(f, "the bot's own message"),
            Skip::NotDirect => write!(
                f,
                "channel messages arrive as app_mention; only DMs are taken from `message`"
            ),
            Skip::MissingField(field) => write!(f, "the event has no `{field}`"),
            Skip::EmptyText => write!(f, "nothing but the mention"),
        }
    }
}

impl Callback {
    /// The app's own user ids: bot authorizations, or else `authed_users`.
    pub fn own_ids(&self) -> Vec<String> {
        let bots: Vec<String> = self
            .authorizations
            .iter()
            .filter(|a| a.is_bot)
            .filter_map(|a| a.user_id.clone())
            .filter(|id| !id.is_empty())
            .collect();
        if bots.is_empty() {
            self.authed_users.clone()
        } else {
            bots
        }
    }

    /// The message this callback carries for the agent, if any.
    pub fn message(&self, now_ms: u64) -> Result<Message, Skip> {
        let event = self.event.as_ref().ok_or(Skip::NoEvent)?;
        let event: Event = serde_json::from_value(event.clone())
            .map_err(|err| Skip::Malformed(err.to_string()))?;
        let own = self.own_ids();
        let mention = match event.kind.as_str() {
            "app_mention" => true,
            "message" => false,
            other => return Err(Skip::OtherType(other.to_string())),
        };
        // A message with files is a `file_share`; other subtypes are edits,
        // deletions, joins and the like.
        if let Some(subtype) = event.subtype.filter(|s| !s.is_empty() && s != "file_share") {
            return Err(Skip::Subtype(subtype));
        }
        if event.bot_id.is_some_and(|id| !id.is_empty()) {
            return Err(Skip::FromBot);
        }
        let user = event
            .user
            .filter(|u| !u.is_empty())
            .ok_or(Skip::MissingField("user"))?;
        if own.contains(&user) {
            return Err(Skip::OwnMessage);
        }
        if !mention && event.channel_type.as_deref() != Some("im") {
            return Err(Skip::NotDirect);
        }
        let channel = event
            .channel
            .filter(|c| !c.is_empty())
            .ok_or(Skip::MissingField("channel"))?;
        let ts = event
            .ts
            .filter(|t| !t.is_empty())
            .ok_or(Skip::MissingField("ts"))?;
        let thread = match event.thread_ts.filter(|t| !t.is_empty()) {
            Some(thread) => Some(thread),
            // Answer a channel mention in its own thread; a DM in the DM.
            None if mention => Some(ts.clone()),
            None => None,
        };
        let text = strip_mentions(event.text.as_deref().unwrap_or(""), &own);
        let text = plain_text(&text);
        let files = crate::files::attachments(&event.files);
        if text.is_empty() && files.is_empty() {
            return Err(Skip::EmptyText);
        }
        Ok(Message {
            timestamp_ms: ts_to_ms(&ts).unwrap_or(now_ms),
            id: ts,
            conversation: channel,
            thread,
            sender: user,
            sender_name: None,
            text,
            files,
        })
    }
}

/// A slash command's payload (Socket Mode `slash_commands`).
#[derive(Debug, Deserialize)]
struct Command {
    #[serde(default)]
    command: Option<String>,
    #[serde(default)]
    text: Option<String>,
    channel_id: String,
    user_id: String,
    trigger_id: String,
}

/// The subcommands of the app's command (`/pincer new`) that become
/// pincer's own `/word` commands; anything else after it is a prompt.
const SUBCOMMANDS: [&str; 4] = ["new", "status", "tier", "help"];

/// The message a slash command asks the agent; the text is what followed the
/// command (the command itself when nothing did). A subcommand (`/pincer
/// status`) becomes pincer's command (`/status`): Slack reserves `/status`
/// and friends, so they reach the app only behind its own command.
pub fn command_message(payload: &Value, now_ms: u64) -> Result<Message, String> {
    let command: Command =
        serde_json::from_value(payload.clone()).map_err(|err| err.to_string())?;
    for (field, value) in [
        ("channel_id", &command.channel_id),
        ("user_id", &command.user_id),
        ("trigger_id", &command.trigger_id),
    ] {
        if value.is_empty() {
            return Err(format!("`{field}` is empty"));
        }
    }
    let mut text = plain_text(command.text.as_deref().unwrap_or(""));
    let first = text.split_whitespace().next().unwrap_or("");
    if SUBCOMMANDS.contains(&first.to_ascii_lowercase().as_str()) {
        text = format!(
            "/{}{}",
            first.to_ascii_lowercase(),
            &text.trim_start()[first.len()..]
        );
    }
    if text.is_empty() {
        text = command.command.unwrap_or_default().trim().to_string();
    }
    if text.is_empty() {
        return Err("the command has no text".into());
    }
    Ok(Message {
        id: command.trigger_id,
        conversation: command.channel_id,
        thread: None,
        sender: command.user_id,
        sender_name: None,
        text,
        timestamp_ms: now_ms,
        files: Vec::new(),
    })
}

/// Slack's `ts` (`"1515449522.000016"`, seconds and microseconds) in
/// milliseconds.
pub fn ts_to_ms(ts: &str) -> Option<u64> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, ""));
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs: u64 = secs.parse().ok()?;
    let millis: u64 = format!("{:0<3}", frac.get(..3).unwrap_or(frac))
        .parse()
        .ok()?;
    secs.checked_mul(1000)?.checked_add(millis)
}

/// Whether `value` looks like a Slack message timestamp (what reactions need).
pub fn is_ts(value: &str) -> bool {
    matches!(value.split_once('.'), Some((secs, frac))
        if !secs.is_empty() && !frac.is_empty()
            && secs.bytes().all(|b| b.is_ascii_digit())
            && frac.bytes().all(|b| b.is_ascii_digit()))
}

/// Removes mentions of the app's own users (`<@UBOT>`, `<@UBOT|name>`).
pub fn strip_mentions(text: &str, own: &[String]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("<@") {
        let Some(len) = rest[start..].find('>') else {
            break;
        };
        let inner = &rest[start + 2..start + len];
        let id = inner.split('|').next().unwrap_or(inner);
        out.push_str(&rest[..start]);
        if own.iter().any(|own| own == id) {
            // Drop one of the spaces around the mention.
            if out.ends_with(' ') && rest[start + len + 1..].starts_with(' ') {
                out.pop();
            }
        } else {
            out.push_str(&rest[start..=start + len]);
        }
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    out.trim().to_string()
}

/// Slack message text as plain text: links `<https://x|label>` become
/// `label (https://x)` (`<https://x>` the URL), the entities `&amp;`, `&lt;`
/// and `&gt;` are decoded; user, channel and special mentions (`<@U1>`,
/// `<#C1|general>`, `<!here>`) stay as they are.
pub fn plain_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find('<') {
        out.push_str(&decode(&rest[..start]));
        let Some(len) = rest[start..].find('>') else {
            out.push_str(&decode(&rest[start..]));
            rest = "";
            break;
        };
        let token = &rest[start..=start + len];
        out.push_str(&link_token(&token[1..token.len() - 1]).unwrap_or_else(|| token.to_string()));
        rest = &rest[start + len + 1..];
    }
    out.push_str(&decode(rest));
    out.trim().to_string()
}

/// A link token's inner text rendered, or `None` when it is not a link.
fn link_token(inner: &str) -> Option<String> {
    if inner.starts_with(['@', '#', '!']) {
        return None;
    }
    let (url, label) = match inner.split_once('|') {
        Some((url, label)) => (url, Some(label)),
        None => (inner, None),
    };
    let scheme = url.split_once(':')?.0;
    if scheme.is_empty()
        || !scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    {
        return None;
    }
    let url = decode(url);
    let shown = url.strip_prefix("mailto:").unwrap_or(&url).to_string();
    match label.map(decode).filter(|l| !l.is_empty()) {
        Some(label) if label != url && label != shown => Some(format!("{label} ({url})")),
        Some(_) if url.starts_with("mailto:") => Some(shown),
        _ => Some(url),
    }
}

/// Decodes the three entities Slack escapes.
pub fn decode(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BOT: &str = "U0LAN0Z89";

    fn callback(event: Value) -> Callback {
        serde_json::from_value(json!({
            "token": "ZZZZZZWSxiZZZ2yIvs3peJ",
            "team_id": "T061EG9R6",
            "api_app_id": "A0MDYCDME",
            "event": event,
            "type": "event_callback",
            "event_id": "Ev0MDYHUEL",
            "event_time": 1515449483,
            "authorizations": [
                { "enterprise_id": null, "team_id": "T061EG9R6", "user_id": BOT,
                  "is_bot": true, "is_enterprise_install": false }
            ]
        }))
        .expect("callback")
    }

    #[test]
    fn app_mention_from_slacks_docs() {
        // https://api.slack.com/events/app_mention
        let cb = callback(json!({
            "type": "app_mention",
            "user": "U061F7AUR",
            "text": "<@U0LAN0Z89> is it everything a river should be?",
            "ts": "1515449522.000016",
            "channel": "C0LAN2Q65",
            "event_ts": "1515449522000016"
        }));
        let message = cb.message(7).expect("message");
        assert_eq!(message.id, "1515449522.000016");
        assert_eq!(message.conversation, "C0LAN2Q65");
        assert_eq!(message.thread.as_deref(), Some("1515449522.000016"));
        assert_eq!(message.sender, "U061F7AUR");
        assert_eq!(message.sender_name, None);
        assert_eq!(message.text, "is it everything a river should be?");
        assert_eq!(message.timestamp_ms, 1_515_449_522_000);
    }

    #[test]
    fn mention_in_a_thread_keeps_the_thread() {
        let cb = callback(json!({
            "type": "app_mention", "user": "U1", "text": "thanks <@U0LAN0Z89>!",
            "ts": "1700000001.000200", "thread_ts": "1700000000.000100", "channel": "C1"
        }));
        let message = cb.message(0).expect("message");
        assert_eq!(message.thread.as_deref(), Some("1700000000.000100"));
        assert_eq!(message.text, "thanks !");
    }

    #[test]
    fn direct_message_from_slacks_docs() {
        // https://api.slack.com/events/message.im
        let cb = callback(json!({
            "type": "message",
            "channel": "D024BE91L",
            "user": "U2147483697",
            "text": "Hello hello can you hear me?",
            "ts": "1355517523.000005",
            "event_ts": "1355517523.000005",
            "channel_type": "im"
        }));
        let message = cb.message(0).expect("message");
        assert_eq!(message.conversation, "D024BE91L");
        assert_eq!(message.thread, None);
        assert_eq!(message.text, "Hello hello can you hear me?");
        assert_eq!(message.timestamp_ms, 1_355_517_523_000);
    }

    #[test]
    fn direct_message_in_a_thread() {
        let cb = callback(json!({
            "type": "message", "channel": "D1", "user": "U1", "text": "more",
            "ts": "2.000002", "thread_ts": "1.000001", "channel_type": "im"
        }));
        assert_eq!(
            cb.message(0).expect("message").thread.as_deref(),
            Some("1.000001")
        );
    }

    #[test]
    fn filtered_events() {
        let skip = |event: Value| callback(event).message(0).expect_err("skipped");
        // Edits and deletions.
        assert_eq!(
            skip(json!({
                "type": "message", "subtype": "message_changed", "channel": "D1",
                "channel_type": "im", "ts": "1.1",
                "message": { "type": "message", "user": "U1", "text": "edited", "ts": "1.0" },
                "previous_message": { "type": "message", "user": "U1", "text": "orig", "ts": "1.0" }
            })),
            Skip::Subtype("message_changed".into())
        );
        assert_eq!(
            skip(json!({
                "type": "message", "subtype": "message_deleted", "channel": "D1",
                "channel_type": "im", "ts": "1.1", "deleted_ts": "1.0"
            })),
            Skip::Subtype("message_deleted".into())
        );
        assert_eq!(
            skip(json!({
                "type": "message", "subtype": "channel_join", "user": "U1",
                "text": "<@U1> has joined the channel", "channel": "C1", "ts": "1.1"
            })),
            Skip::Subtype("channel_join".into())
        );
        // Other bots, with and without the bot_message subtype.
        assert_eq!(
            skip(json!({
                "type": "message", "subtype": "bot_message", "bot_id": "B1",
                "text": "beep", "channel": "D1", "channel_type": "im", "ts": "1.1"
            })),
            Skip::Subtype("bot_message".into())
        );
        assert_eq!(
            skip(json!({
                "type": "message", "bot_id": "B1", "user": "U9", "text": "beep",
                "channel": "D1", "channel_type": "im", "ts": "1.1"
            })),
            Skip::FromBot
        );
        // The bot's own reply echoed back.
        assert_eq!(
            skip(json!({
                "type": "message", "user": BOT, "text": "my reply",
                "channel": "D1", "channel_type": "im", "ts": "1.1"
            })),
            Skip::OwnMessage
        );
        // Channel chatter: the app_mention event covers mentions.
        assert_eq!(
            skip(json!({
                "type": "message", "user": "U1", "text": "<@U0LAN0Z89> hi",
                "channel": "C1", "channel_type": "channel", "ts": "1.1"
            })),
            Skip::NotDirect
        );
        assert_eq!(
            skip(json!({ "type": "reaction_added", "user": "U1" })),
            Skip::OtherType("reaction_added".into())
        );
        assert_eq!(
            skip(
                json!({ "type": "app_mention", "user": "U1", "text": "<@U0LAN0Z89>",
                         "channel": "C1", "ts": "1.1" })
            ),
            Skip::EmptyText
        );
        assert_eq!(
            skip(json!({ "type": "app_mention", "text": "hi", "channel": "C1", "ts": "1.1" })),
            Skip::MissingField("user")
        );
        assert!(matches!(
            skip(json!({ "type": "message", "user": 5 })),
            Skip::Malformed(_)
        ));
        assert!(matches!(skip(json!("text")), Skip::Malformed(_)));
        let empty: Callback = serde_json::from_value(json!({})).expect("empty callback");
        assert_eq!(empty.message(0).expect_err("none"), Skip::NoEvent);
    }

    #[test]
    fn own_ids_fall_back_to_authed_users() {
        let cb: Callback = serde_json::from_value(json!({
            "authed_users": ["UBOT"],
            "event": { "type": "message", "user": "UBOT", "text": "x",
                       "channel": "D1", "channel_type": "im", "ts": "1.1" }
        }))
        .expect("callback");
        assert_eq!(cb.own_ids(), vec!["UBOT".to_string()]);
        assert_eq!(cb.message(0).expect_err("own"), Skip::OwnMessage);
        // Bot authorizations win over authed_users; non-bot ones are not "self".
        let cb: Callback = serde_json::from_value(json!({
            "authed_users": ["UHUMAN"],
            "authorizations": [
                { "user_id": "UHUMAN", "is_bot": false },
                { "user_id": "UBOT", "is_bot": true }
            ]
        }))
        .expect("callback");
        assert_eq!(cb.own_ids(), vec!["UBOT".to_string()]);
    }

    #[test]
    fn mention_stripping() {
        let own = [BOT.to_string()];
        assert_eq!(strip_mentions("<@U0LAN0Z89> hi", &own), "hi");
        assert_eq!(strip_mentions("hi <@U0LAN0Z89>", &own), "hi");
        assert_eq!(
            strip_mentions("ask <@U0LAN0Z89> about <@U123>", &own),
            "ask about <@U123>"
        );
        assert_eq!(strip_mentions("<@U0LAN0Z89|pincer>: go", &own), ": go");
        assert_eq!(strip_mentions("<@U0LAN0Z89><@U0LAN0Z89>", &own), "");
        assert_eq!(strip_mentions("broken <@U0LAN", &own), "broken <@U0LAN");
        assert_eq!(strip_mentions("no mention", &[]), "no mention");
    }

    #[test]
    fn slack_text_to_plain_text() {
        assert_eq!(plain_text("a &lt; b &amp;&amp; c &gt; d"), "a < b && c > d");
        assert_eq!(plain_text("&amp;lt;"), "&lt;");
        assert_eq!(
            plain_text("see <https://example.com|the site> now"),
            "see the site (https://example.com) now"
        );
        assert_eq!(
            plain_text("<https://example.com/a?b=1&amp;c=2>"),
            "https://example.com/a?b=1&c=2"
        );
        assert_eq!(
            plain_text("<https://example.com|https://example.com>"),
            "https://example.com"
        );
        assert_eq!(
            plain_text("<mailto:bob@example.com|bob@example.com>"),
            "bob@example.com"
        );
        assert_eq!(
            plain_text("hi <@U123> and <@U9|bob>"),
            "hi <@U123> and <@U9|bob>"
        );
        assert_eq!(
            plain_text("in <#C123|general> <!here>"),
            "in <#C123|general> <!here>"
        );
        assert_eq!(plain_text("unclosed <https://x"), "unclosed <https://x");
        assert_eq!(plain_text("中文 &lt;测试&gt;"), "中文 <测试>");
    }

    #[test]
    fn timestamps() {
        assert_eq!(ts_to_ms("1515449522.000016"), Some(1_515_449_522_000));
        assert_eq!(ts_to_ms("1515449522.123456"), Some(1_515_449_522_123));
        assert_eq!(ts_to_ms("1515449522.5"), Some(1_515_449_522_500));
        assert_eq!(ts_to_ms("1515449522"), Some(1_515_449_522_000));
        assert_eq!(ts_to_ms("x.1"), None);
        assert_eq!(ts_to_ms(""), None);
        assert_eq!(ts_to_ms("99999999999999999999.1"), None);
        assert!(is_ts("1515449522.000016"));
        assert!(!is_ts(
            "37053613634.26768298162.440952c06ef4de2653466a48fe495f93"
        ));
        assert!(!is_ts("1515449522"));
    }

    #[test]
    fn slash_command_from_slacks_docs() {
        // https://docs.slack.dev/apis/events-api/using-socket-mode#command
        let payload = json!({
            "token": "bHKJ2n9AW6Ju3MjciOHfbA1b",
            "team_id": "T123ABC456",
            "team_domain": "maria",
            "channel_id": "C123ABC456",
            "channel_name": "general",
            "user_id": "U123ABC456",
            "user_name": "rainer",
            "command": "/randorilke",
            "text": "",
            "response_url": "https://rilke.slack.com/commands/T0SNL8S4S/37053613554/YMB2ZESDLNjNLqSFZ1quhNAh",
            "trigger_id": "37053613634.26768298162.440952c06ef4de2653466a48fe495f93"
        });
        let message = command_message(&payload, 42).expect("message");
        assert_eq!(
            message.id,
            "37053613634.26768298162.440952c06ef4de2653466a48fe495f93"
        );
        assert_eq!(message.conversation, "C123ABC456");
        assert_eq!(message.sender, "U123ABC456");
        assert_eq!(message.thread, None);
        assert_eq!(message.text, "/randorilke");
        assert_eq!(message.timestamp_ms, 42);

        let mut with_text = payload.clone();
        with_text["text"] = json!("what is 2 &amp; 2?");
        assert_eq!(
            command_message(&with_text, 0).expect("message").text,
            "what is 2 & 2?"
        );
        assert!(command_message(&json!({ "text": "x" }), 0).is_err());

        // The app's command with a subcommand becomes pincer's command.
        let sub = |text: &str| {
            let mut p = payload.clone();
            p["command"] = json!("/pincer");
            p["text"] = json!(text);
            command_message(&p, 0).expect("message").text
        };
        assert_eq!(sub("status"), "/status");
        assert_eq!(sub("  Tier read-only"), "/tier read-only");
        assert_eq!(sub("new what is new?"), "/new what is new?");
        assert_eq!(sub("help"), "/help");
        assert_eq!(sub("newspaper headlines"), "newspaper headlines");
        assert_eq!(sub("what is the status"), "what is the status");
    }
}
