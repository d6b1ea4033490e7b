//! Interactive messages: pincer's buttons as Block Kit
//! (https://docs.slack.dev/reference/block-kit/blocks), and the
//! `block_actions` payloads Slack sends when one is clicked, over Socket
//! Mode (an `interactive` envelope) or to the Interactivity Request URL (a
//! signed form POST whose `payload` field is the JSON).

use pincer_plugin_sdk::types::{Action, ActionStyle, Interaction};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::inbound::ts_to_ms;
use crate::mrkdwn;

/// Slack's limit on a section block's text, in characters.
const SECTION_CHARS: usize = 3000;
/// Slack's limit on a button's text, in characters.
const LABEL_CHARS: usize = 75;

/// The blocks of a message whose Markdown is `markdown`: its text in
/// section blocks, then one actions block with the buttons, if any. A
/// replaced message gets blocks too, even without buttons: Slack keeps the
/// old blocks (and their buttons) of an update that has none.
pub fn blocks(markdown: &str, actions: &[Action]) -> Value {
    let text = mrkdwn::to_mrkdwn(markdown);
    let mut blocks: Vec<Value> = sections(&text)
        .into_iter()
        .map(|chunk| json!({ "type": "section", "text": { "type": "mrkdwn", "text": chunk } }))
        .collect();
    if !actions.is_empty() {
        let elements: Vec<Value> = actions.iter().map(button).collect();
        blocks
            .push(json!({ "type": "actions", "block_id": "pincer_actions", "elements": elements }));
    }
    Value::Array(blocks)
}

fn button(action: &Action) -> Value {
    let mut label: String = action.label.chars().take(LABEL_CHARS).collect();
    if label.is_empty() {
        label = action.id.chars().take(LABEL_CHARS).collect();
    }
    let mut element = json!({
        "type": "button",
        "action_id": action.id,
        "value": action.id,
        "text": { "type": "plain_text", "text": label, "emoji": true },
    });
    match action.style {
        ActionStyle::Primary => element["style"] = json!("primary"),
        ActionStyle::Danger => element["style"] = json!("danger"),
        ActionStyle::Plain => {}
    }
    element
}

/// `text` in chunks of at most [`SECTION_CHARS`] characters, cut at a line
/// end where there is one.
fn sections(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while rest.chars().count() > SECTION_CHARS {
        let limit = rest
            .char_indices()
            .nth(SECTION_CHARS)
            .map_or(rest.len(), |(i, _)| i);
        let cut = rest[..limit]
            .rfind('\n')
            .filter(|&i| i > 0)
            .map_or(limit, |i| i + 1);
        out.push(rest[..cut].to_string());
        rest = &rest[cut..];
    }
    if !rest.is_empty() || out.is_empty() {
        out.push(rest.to_string());
    }
    out
}

/// A `block_actions` payload, as far as this channel reads it.
#[derive(Debug, Deserialize)]
struct BlockActions {
    #[serde(rename = "type")]
    kind: String,
    user: Option<User>,
    container: Option<Container>,
    channel: Option<Channel>,
    message: Option<MessageRef>,
    #[serde(default)]
    actions: Vec<ActionRef>,
}

#[derive(Debug, Deserialize)]
struct User {
    id: String,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    username: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Container {
    #[serde(default)]
    message_ts: Option<String>,
    #[serde(default)]
    channel_id: Option<String>,
    #[serde(default)]
    thread_ts: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Channel {
    id: String,
}

#[derive(Debug, Deserialize)]
struct MessageRef {
    #[serde(default)]
    ts: Option<String>,
    #[serde(default)]
    thread_ts: Option<String>,
}

#[derive(Debug, Deserialize)]
struct ActionRef {
    #[serde(default)]
    action_id: Option<String>,
    #[serde(default)]
    action_ts: Option<String>,
}

/// The clicks of an interactive payload; `Err` says why it has none (a
/// view submission, a shortcut, a malformed payload).
pub fn clicks(payload: &Value, now_ms: u64) -> Result<Vec<Interaction>, String> {
    let parsed: BlockActions = serde_json::from_value(payload.clone())
        .map_err(|err| format!("malformed interactive payload: {err}"))?;
    if parsed.kind != "block_actions" {
        return Err(format!(
            "interactive payload of type {:?} ignored",
            parsed.kind
        ));
    }
    let user = parsed
        .user
        .ok_or("block_actions without a `user`: who clicked is unknown")?;
    let container = parsed.container;
    let conversation = container
        .as_ref()
        .and_then(|c| c.channel_id.clone())
        .or(parsed.channel.map(|c| c.id))
        .ok_or("block_actions without a channel: not a click on a message")?;
    let message = container
        .as_ref()
        .and_then(|c| c.message_ts.clone())
        .or(parsed.message.as_ref().and_then(|m| m.ts.clone()))
        .ok_or("block_actions without a message ts: not a click on a message")?;
    let thread = container
        .and_then(|c| c.thread_ts)
        .or(parsed.message.and_then(|m| m.thread_ts))
        .filter(|t| !t.is_empty());
    let name = user.name.or(user.username);
    Ok(parsed
        .actions
        .into_iter()
        .filter_map(|action| {
            let id = action.action_id?;
            let at = action.action_ts.unwrap_or_default();
            Some(Interaction {
                // The same click delivered again has the same `action_ts`.
                id: format!("{message}/{at}/{}", user.id),
                action: id,
                conversation: conversation.clone(),
                thread: thread.clone(),
                message: message.clone(),
                user: user.id.clone(),
                user_name: name.clone(),
                timestamp_ms: ts_to_ms(&at).unwrap_or(now_ms),
            })
        })
        .collect())
}

/// The `payload` field of the form Slack POSTs to the Interactivity
/// Request URL, as JSON.
pub fn form_payload(body: &[u8]) -> Result<Value, String> {
    let payload = form_urlencoded::parse(body)
        .find(|(key, _)| key == "payload")
        .map(|(_, value)| value.into_owned())
        .ok_or("the interactivity request has no `payload` field")?;
    serde_json::from_str(&payload).map_err(|err| format!("the `payload` field is not JSON: {err}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `block_actions` example of Slack's reference
    /// (https://docs.slack.dev/reference/interaction-payloads/block_actions-payload),
    /// with the container of a message in a thread.
    const BLOCK_ACTIONS: &str = r#"{
      "type": "block_actions",
      "team": { "id": "T9TK3CUKW", "domain": "example" },
      "user": { "id": "UA8RXUSPL", "username": "jtorrance", "name": "jtorrance", "team_id": "T9TK3CUKW" },
      "api_app_id": "AABA1ABCD",
      "token": "9s8d9as89d8as9d8as989",
      "container": { "type": "message", "message_ts": "1548261231.000200", "channel_id": "CBR2V3XEX", "is_ephemeral": false, "thread_ts": "1548261200.000100" },
      "trigger_id": "12466734323.1395872398",
      "channel": { "id": "CBR2V3XEX", "name": "review-updates" },
      "message": { "bot_id": "BAH5CA16Z", "type": "message", "text": "This content can't be displayed.", "user": "UAJ2RU415", "ts": "1548261231.000200" },
      "response_url": "https://hooks.slack.com/actions/AABA1ABCD/1232321423432/D09sSasdasdAS9091209",
      "actions": [ { "action_id": "pincer-approval:apr_1:once", "block_id": "pincer_actions", "text": { "type": "plain_text", "text": "Approve once", "emoji": true }, "value": "pincer-approval:apr_1:once", "type": "button", "action_ts": "1548426417.840180" } ]
    }"#;

    #[test]
    fn a_click_from_slacks_example_becomes_one_interaction() {
        let payload: Value = serde_json::from_str(BLOCK_ACTIONS).expect("json");
        let got = clicks(&payload, 7).expect("a click");
        assert_eq!(got.len(), 1);
        let click = &got[0];
        assert_eq!(click.action, "pincer-approval:apr_1:once");
        assert_eq!(click.conversation, "CBR2V3XEX");
        assert_eq!(click.message, "1548261231.000200");
        assert_eq!(click.thread.as_deref(), Some("1548261200.000100"));
        assert_eq!(click.user, "UA8RXUSPL");
        assert_eq!(click.user_name.as_deref(), Some("jtorrance"));
        assert_eq!(click.timestamp_ms, 1_548_426_417_840);
        assert_eq!(click.id, "1548261231.000200/1548426417.840180/UA8RXUSPL");
    }

    #[test]
    fn payloads_that_are_not_clicks_on_a_message_say_why() {
        let view = json!({ "type": "view_submission", "user": { "id": "U1" } });
        assert!(clicks(&view, 0).unwrap_err().contains("view_submission"));
        let nobody = json!({ "type": "block_actions", "channel": { "id": "C1" }, "actions": [] });
        assert!(clicks(&nobody, 0).unwrap_err().contains("user"));
        let nowhere = json!({ "type": "block_actions", "user": { "id": "U1" }, "actions": [] });
        assert!(clicks(&nowhere, 0).unwrap_err().contains("channel"));
        assert!(clicks(&json!([1]), 0).is_err());
    }

    #[test]
    fn the_form_post_carries_the_payload_url_encoded() {
        let body = format!(
            "payload={}",
            form_urlencoded::byte_serialize(BLOCK_ACTIONS.as_bytes()).collect::<String>()
        );
        let payload = form_payload(body.as_bytes()).expect("payload");
        assert_eq!(payload["type"], "block_actions");
        assert!(
            form_payload(b"token=x")
                .unwrap_err()
                .contains("no `payload`")
        );
        assert!(form_payload(b"payload=%7Bnot").is_err());
    }

    #[test]
    fn buttons_become_one_actions_block_under_the_text() {
        let actions = [
            Action {
                id: "a:once".into(),
                label: "Approve once".into(),
                style: ActionStyle::Primary,
            },
            Action {
                id: "a:deny".into(),
                label: "Deny".into(),
                style: ActionStyle::Danger,
            },
            Action {
                id: "a:s".into(),
                label: "x".repeat(100),
                style: ActionStyle::Plain,
            },
        ];
        let got = blocks("**run** `ls`?", &actions);
        let blocks = got.as_array().expect("array");
        assert_eq!(blocks.len(), 2);
        assert_eq!(blocks[0]["type"], "section");
        assert_eq!(blocks[0]["text"]["text"], "*run* `ls`?");
        let elements = blocks[1]["elements"].as_array().expect("elements");
        assert_eq!(elements[0]["action_id"], "a:once");
        assert_eq!(elements[0]["style"], "primary");
        assert_eq!(elements[1]["style"], "danger");
        assert!(elements[2].get("style").is_none());
        assert_eq!(
            elements[2]["text"]["text"]
                .as_str()
                .map(|t| t.chars().count()),
            Some(75)
        );
        // Without buttons: the text alone, so an update drops old buttons.
        assert_eq!(super::blocks("done", &[]).as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn long_texts_are_cut_into_sections_at_line_ends() {
        let line = "y".repeat(1000);
        let text = [line.as_str(); 7].join("\n");
        let chunks = sections(&text);
        assert!(chunks.iter().all(|c| c.chars().count() <= SECTION_CHARS));
        assert_eq!(chunks.concat(), text);
        // Two lines and their line ends (2,002 characters) fit, three not.
        assert_eq!(chunks.len(), 4);
        let long = "z".repeat(SECTION_CHARS * 2 + 1);
        let chunks = sections(&long);
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks.concat(), long);
        assert_eq!(sections(""), vec![String::new()]);
    }
}
