//! Socket Mode: the envelopes Slack sends on the websocket
//! (https://docs.slack.dev/apis/events-api/using-socket-mode).

use crate::inbound::{self, Callback};
use crate::interactive;
use pincer_plugin_sdk::types::{Interaction, Message};
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

/// What one frame asks of the host, before it becomes a `frame-outcome`.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Text frames to send back (acks).
    pub replies: Vec<String>,
    pub messages: Vec<Message>,
    /// Clicks on the channel's buttons.
    pub interactions: Vec<Interaction>,
    pub reconnect: bool,
    /// Lines for the plugin's log.
    pub logs: Vec<(Level, String)>,
}

impl Outcome {
    fn log(&mut self, level: Level, line: impl Into<String>) {
        self.logs.push((level, line.into()));
    }
}

/// Handles one text frame. Only text that is not a JSON object is an error;
/// every envelope with an `envelope_id` is acknowledged first, whatever its
/// payload.
pub fn frame(text: &str, now_ms: u64) -> Result<Outcome, String> {
    let value: Value = serde_json::from_str(text)
        .map_err(|err| format!("Socket Mode frame is not JSON: {err}"))?;
    let Value::Object(envelope) = value else {
        return Err("Socket Mode frame is not a JSON object".into());
    };
    let mut outcome = Outcome::default();
    if let Some(id) = envelope.get("envelope_id").and_then(Value::as_str)
        && !id.is_empty()
    {
        outcome
            .replies
            .push(json!({ "envelope_id": id }).to_string());
    }
    let kind = envelope.get("type").and_then(Value::as_str).unwrap_or("");
    let payload = envelope.get("payload");
    match kind {
        "hello" => {
            let connections = envelope
                .get("num_connections")
                .and_then(Value::as_u64)
                .map_or_else(|| "?".to_string(), |n| n.to_string());
            outcome.log(
                Level::Info,
                format!("Socket Mode connected ({connections} connection(s) open)"),
            );
        }
        "disconnect" => {
            let reason = envelope
                .get("reason")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            outcome.reconnect = true;
            if reason == "link_disabled" {
                outcome.log(
                    Level::Error,
                    "Slack closed the Socket Mode connection: link_disabled (Socket Mode was \
                     turned off in the app settings; turn it back on, or remove `app_token` \
                     and use the Events API)",
                );
            } else {
                outcome.log(
                    Level::Info,
                    format!("Slack asked to reconnect the Socket Mode connection: {reason}"),
                );
            }
        }
        "events_api" => match payload {
            Some(payload) => events_api(payload, now_ms, &mut outcome),
            None => outcome.log(Level::Warn, "events_api envelope without a payload"),
        },
        "slash_commands" => match payload.map(|p| inbound::command_message(p, now_ms)) {
            Some(Ok(message)) => outcome.messages.push(message),
            Some(Err(why)) => outcome.log(Level::Warn, format!("slash command ignored: {why}")),
            None => outcome.log(Level::Warn, "slash_commands envelope without a payload"),
        },
        "interactive" => match payload.map(|p| interactive::clicks(p, now_ms)) {
            Some(Ok(clicks)) => outcome.interactions.extend(clicks),
            Some(Err(why)) => outcome.log(Level::Debug, why),
            None => outcome.log(Level::Warn, "interactive envelope without a payload"),
        },
        other => outcome.log(
            Level::Debug,
            format!("Socket Mode envelope of type {other:?} ignored"),
        ),
    }
    if outcome.replies.is_empty() && matches!(kind, "events_api" | "slash_commands" | "interactive")
    {
        outcome.log(
            Level::Warn,
            format!("{kind} envelope without an envelope_id: cannot acknowledge it"),
        );
    }
    Ok(outcome)
}

fn events_api(payload: &Value, now_ms: u64, outcome: &mut Outcome) {
    let kind = payload.get("type").and_then(Value::as_str).unwrap_or("");
    if kind != "event_callback" {
        outcome.log(
            Level::Debug,
            format!("events_api payload of type {kind:?} ignored"),
        );
        return;
    }
    match serde_json::from_value::<Callback>(payload.clone()) {
        Ok(callback) => match callback.message(now_ms) {
            Ok(message) => outcome.messages.push(message),
            Err(skip) => outcome.log(Level::Debug, format!("event ignored: {skip}")),
        },
        Err(err) => outcome.log(Level::Warn, format!("malformed event_callback: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The envelopes as Slack's Socket Mode page shows them. Its `hello`
    // example lacks a colon after "started" (not valid JSON); it is fixed here.
    const HELLO: &str = r#"{  "type": "hello",  "connection_info": {    "app_id": "A1234"  },  "num_connections": 1,  "debug_info": {    "host": "applink-….",    "started": "2020-10-11 12:12:12.120",    "build_number": 54,    "approximate_connection_time": 3600  }}"#;
    const LINK_DISABLED: &str = r#"{ "type": "disconnect", "reason": "link_disabled", "debug_info": {  "host": "wss-111.slack.com" }}"#;
    const WARNING: &str = r#"{ "type": "disconnect", "reason": "warning", "debug_info": {  "host": "wss-111.slack.com" }}"#;
    const REFRESH: &str = r#"{ "type" : "disconnect", "reason": "refresh_requested", "debug_info": {  "host": "wss-111.slack.com" }}"#;
    const BUTTON: &str = r#"{ "payload": {  "type": "block_actions",  "team": {   "id": "T123ABC456",   "domain": "Duino"  },  "user": {   "id": "U123ABC456",   "username": "RMR",   "team_id": "T123ABC456"  },  "api_app_id": "AABA1ABCD",  "token": "9s8d9as89d8as9d8as989",  "trigger_id": "12321423423.333649436676.d8c1bb837935619ccad0f624c448ffb3",  "channel": {   "id": "C123ABC456",   "name": "review-updates"  },  "response_url": "https://hooks.slack.com/actions/AABA1ABCD/1232321423432/D09sSasdasdAS9091209",  "actions": [{   "action_id": "WaXA",   "block_id": "=qXel",   "value": "click_me_123",   "type": "button",   "action_ts": "1548426417.840180"  }] }, "envelope_id": "dbdd0ef3-1543-4f94-bfb4-133d0e6c1545", "type": "interactive", "accepts_response_payload": true}"#;
    const COMMAND: &str = r#"{ "payload": {  "token": "bHKJ2n9AW6Ju3MjciOHfbA1b",  "team_id": "T123ABC456",  "team_domain": "maria",  "channel_id": "C123ABC456",  "channel_name": "general",  "user_id": "U123ABC456",  "user_name": "rainer",  "command": "/randorilke",  "text": "tell me a poem",  "response_url": "https://rilke.slack.com/commands/T0SNL8S4S/37053613554/YMB2ZESDLNjNLqSFZ1quhNAh",  "trigger_id": "37053613634.26768298162.440952c06ef4de2653466a48fe495f93" }, "envelope_id": "dbdd0ef3-1543-4f94-bfb4-133d0e6c1545", "type": "slash_commands", "accepts_response_payload": true}"#;

    /// An `events_api` envelope around an Events API callback, in the shape
    /// Slack's SDK test fixtures record.
    fn events_envelope(event: &str) -> String {
        format!(
            r#"{{"envelope_id":"cda4159a-72a5-4744-aba3-4d66eb52682b","payload":{{"token":"verification-token","team_id":"T111","api_app_id":"A111","event":{event},"type":"event_callback","event_id":"Ev111","event_time":1610241741,"authorizations":[{{"enterprise_id":null,"team_id":"T111","user_id":"U111","is_bot":true,"is_enterprise_install":false}}],"is_ext_shared_channel":false,"event_context":"1-app_mention-T111-C111"}},"type":"events_api","accepts_response_payload":false,"retry_attempt":0,"retry_reason":""}}"#
        )
    }

    const ACK: &str = r#"{"envelope_id":"cda4159a-72a5-4744-aba3-4d66eb52682b"}"#;

    #[test]
    fn hello_needs_nothing() {
        let outcome = frame(HELLO, 0).expect("hello");
        assert!(outcome.replies.is_empty());
        assert!(outcome.messages.is_empty());
        assert!(!outcome.reconnect);
        assert_eq!(outcome.logs[0].0, Level::Info);
    }

    #[test]
    fn the_docs_hello_as_printed_is_not_json() {
        let printed = HELLO.replace("\"started\":", "\"started\"");
        assert!(frame(&printed, 0).is_err());
    }

    #[test]
    fn disconnects_reconnect() {
        for (text, level) in [
            (WARNING, Level::Info),
            (REFRESH, Level::Info),
            (LINK_DISABLED, Level::Error),
        ] {
            let outcome = frame(text, 0).expect("disconnect");
            assert!(outcome.reconnect, "{text}");
            assert!(outcome.replies.is_empty());
            assert_eq!(outcome.logs[0].0, level, "{text}");
        }
        let outcome = frame(REFRESH, 0).expect("disconnect");
        assert!(outcome.logs[0].1.contains("refresh_requested"));
    }

    #[test]
    fn app_mention_is_acked_and_delivered() {
        let envelope = events_envelope(
            r#"{"client_msg_id":"f0582a78-72db-4feb-b2f3-1e47d66365c8","type":"app_mention","text":"<@U111> summarize &lt;this&gt;","user":"U222","ts":"1610241741.000200","team":"T111","blocks":[],"channel":"C111","event_ts":"1610241741.000200"}"#,
        );
        let outcome = frame(&envelope, 0).expect("events_api");
        assert_eq!(outcome.replies, vec![ACK.to_string()]);
        assert!(!outcome.reconnect);
        assert_eq!(outcome.messages.len(), 1);
        let message = &outcome.messages[0];
        assert_eq!(message.id, "1610241741.000200");
        assert_eq!(message.conversation, "C111");
        assert_eq!(message.thread.as_deref(), Some("1610241741.000200"));
        assert_eq!(message.sender, "U222");
        assert_eq!(message.text, "summarize <this>");
        assert_eq!(message.timestamp_ms, 1_610_241_741_000);
    }

    #[test]
    fn direct_message_is_acked_and_delivered() {
        let envelope = events_envelope(
            r#"{"client_msg_id":"f0582a78","type":"message","text":"Hi here!","user":"U222","ts":"1610241741.000200","team":"T111","channel":"D111","event_ts":"1610241741.000200","channel_type":"im"}"#,
        );
        let outcome = frame(&envelope, 0).expect("events_api");
        assert_eq!(outcome.replies, vec![ACK.to_string()]);
        assert_eq!(outcome.messages[0].conversation, "D111");
        assert_eq!(outcome.messages[0].thread, None);
    }

    #[test]
    fn ignored_events_are_still_acked() {
        for event in [
            // A channel message (the app_mention covers it).
            r#"{"type":"message","text":"<@U111> Hi here!","user":"U222","ts":"1610241741.000200","channel":"C111","channel_type":"channel"}"#,
            // The bot's own message.
            r#"{"type":"message","text":"reply","user":"U111","ts":"1.2","channel":"D111","channel_type":"im"}"#,
            // An edit.
            r#"{"type":"message","subtype":"message_changed","channel":"D111","channel_type":"im","ts":"1.3"}"#,
            // Malformed.
            r#"{"type":"message","user":["not","a","string"]}"#,
            r#""not an object""#,
        ] {
            let outcome = frame(&events_envelope(event), 0).expect("events_api");
            assert_eq!(outcome.replies, vec![ACK.to_string()], "{event}");
            assert!(outcome.messages.is_empty(), "{event}");
        }
        // A payload that is not an event_callback (the docs' App Home example).
        let home = r#"{ "payload": { "type": "app_home_opened", "user": "U123ABC456", "channel": "C123ABC456", "event_ts": "1515449522000016", "tab": "home" }, "envelope_id": "dbdd0ef3-1543-4f94-bfb4-133d0e6c1545", "type": "events_api", "accepts_response_payload": false}"#;
        let outcome = frame(home, 0).expect("events_api");
        assert_eq!(
            outcome.replies,
            vec![r#"{"envelope_id":"dbdd0ef3-1543-4f94-bfb4-133d0e6c1545"}"#.to_string()]
        );
        assert!(outcome.messages.is_empty());
        // No payload at all.
        let outcome = frame(r#"{"envelope_id":"e1","type":"events_api"}"#, 0).expect("bare");
        assert_eq!(outcome.replies, vec![r#"{"envelope_id":"e1"}"#.to_string()]);
    }

    #[test]
    fn interactive_is_only_acked() {
        let outcome = frame(BUTTON, 0).expect("interactive");
        assert_eq!(
            outcome.replies,
            vec![r#"{"envelope_id":"dbdd0ef3-1543-4f94-bfb4-133d0e6c1545"}"#.to_string()]
        );
        assert!(outcome.messages.is_empty());
        assert!(!outcome.reconnect);
    }

    #[test]
    fn slash_command_becomes_a_message() {
        let outcome = frame(COMMAND, 5).expect("slash_commands");
        assert_eq!(outcome.replies.len(), 1);
        let message = &outcome.messages[0];
        assert_eq!(message.text, "tell me a poem");
        assert_eq!(message.conversation, "C123ABC456");
        assert_eq!(message.sender, "U123ABC456");
        assert_eq!(
            message.id,
            "37053613634.26768298162.440952c06ef4de2653466a48fe495f93"
        );
        // A malformed command is acked and dropped.
        let outcome = frame(
            r#"{"envelope_id":"e2","type":"slash_commands","payload":{"text":"x"}}"#,
            0,
        )
        .expect("slash_commands");
        assert_eq!(outcome.replies, vec![r#"{"envelope_id":"e2"}"#.to_string()]);
        assert!(outcome.messages.is_empty());
    }

    #[test]
    fn bad_frames() {
        assert!(frame("not json", 0).is_err());
        assert!(frame("[1,2]", 0).is_err());
        assert!(frame("", 0).is_err());
        // Unknown types are no error.
        let outcome = frame(r#"{"type":"mystery"}"#, 0).expect("unknown");
        assert_eq!(outcome.replies, Vec::<String>::new());
        let outcome = frame(r#"{"type":"mystery","envelope_id":"e3"}"#, 0).expect("unknown");
        assert_eq!(outcome.replies, vec![r#"{"envelope_id":"e3"}"#.to_string()]);
    }
}
