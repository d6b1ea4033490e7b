//! Interactive messages: pincer's buttons as a Feishu card (card JSON 2.0,
//! https://open.feishu.cn/document/feishu-cards/card-json-v2-structure) and
//! the `card.action.trigger` callback Feishu sends when one is clicked, over
//! the long connection or to the webhook (encrypted and signed as events),
//! answered within 3 s with a toast
//! (https://open.feishu.cn/document/feishu-cards/card-callback-communication).

use pincer_plugin_sdk::types::{Action, ActionStyle, Interaction};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::event::Envelope;

/// The event type of a click on a card's button.
pub const ACTION_TRIGGER: &str = "card.action.trigger";
/// The key of a button's callback `value` that holds pincer's action id.
const VALUE_KEY: &str = "pincer_action";
/// Feishu's limit on a button's text, in characters (kept short: buttons
/// sit side by side).
const LABEL_CHARS: usize = 40;

/// A card showing `markdown`, then the buttons, if any, side by side.
/// `update_multi`: every reader sees the card as updated (card 2.0 knows
/// only shared cards).
pub fn card(markdown: &str, actions: &[Action]) -> Value {
    let mut elements = vec![json!({ "tag": "markdown", "content": markdown })];
    if !actions.is_empty() {
        let columns: Vec<Value> = actions
            .iter()
            .enumerate()
            .map(|(i, action)| {
                json!({
                    "tag": "column",
                    "width": "auto",
                    "elements": [button(i, action)],
                })
            })
            .collect();
        elements.push(json!({ "tag": "column_set", "columns": columns }));
    }
    json!({
        "schema": "2.0",
        "config": { "update_multi": true },
        "body": { "elements": elements },
    })
}

/// Button `i` of the card: card JSON 2.0 wants a `name` unique in the card
/// (Feishu answers 200340 without one).
fn button(i: usize, action: &Action) -> Value {
    let mut label: String = action.label.chars().take(LABEL_CHARS).collect();
    if label.is_empty() {
        label = action.id.chars().take(LABEL_CHARS).collect();
    }
    let kind = match action.style {
        ActionStyle::Primary => "primary",
        ActionStyle::Danger => "danger",
        ActionStyle::Plain => "default",
    };
    json!({
        "tag": "button",
        "name": format!("pincer_button_{i}"),
        "text": { "tag": "plain_text", "content": label },
        "type": kind,
        "behaviors": [{ "type": "callback", "value": { VALUE_KEY: action.id } }],
    })
}

/// The callback's `event`, as far as this channel reads it.
#[derive(Debug, Deserialize)]
struct Trigger {
    operator: Option<Operator>,
    action: Option<TriggerAction>,
    context: Option<Context>,
}

#[derive(Debug, Deserialize)]
struct Operator {
    #[serde(default)]
    open_id: Option<String>,
}

#[derive(Debug, Deserialize)]
struct TriggerAction {
    #[serde(default)]
    value: Option<Value>,
}

#[derive(Debug, Deserialize)]
struct Context {
    #[serde(default)]
    open_message_id: Option<String>,
    #[serde(default)]
    open_chat_id: Option<String>,
}

/// The click of a verified `card.action.trigger` callback; `Err` says why
/// it is none of pincer's (another card's button, a malformed callback).
pub fn click(envelope: &Envelope, now_ms: u64) -> Result<Interaction, String> {
    let header = envelope
        .header
        .as_ref()
        .ok_or("a card callback without a header")?;
    let event = envelope
        .event
        .clone()
        .ok_or("a card callback without an event")?;
    let trigger: Trigger =
        serde_json::from_value(event).map_err(|err| format!("malformed card callback: {err}"))?;
    let action = trigger
        .action
        .and_then(|a| a.value)
        .and_then(|v| v.get(VALUE_KEY).and_then(Value::as_str).map(str::to_string))
        .ok_or("a click on a button that is not pincer's (no `pincer_action` in its value)")?;
    let user = trigger
        .operator
        .and_then(|o| o.open_id)
        .filter(|id| !id.is_empty())
        .ok_or("a card callback without operator.open_id: who clicked is unknown")?;
    let context = trigger
        .context
        .ok_or("a card callback without a context: not a click on a message")?;
    let message = context
        .open_message_id
        .filter(|id| !id.is_empty())
        .ok_or("a card callback without context.open_message_id")?;
    let conversation = context
        .open_chat_id
        .filter(|id| !id.is_empty())
        .ok_or("a card callback without context.open_chat_id")?;
    if header.event_id.is_empty() {
        return Err("a card callback without header.event_id".into());
    }
    Ok(Interaction {
        // Feishu delivers a callback again with the same event_id.
        id: header.event_id.clone(),
        action,
        conversation,
        thread: None,
        message,
        user,
        user_name: None,
        timestamp_ms: header
            .create_time
            .parse()
            .ok()
            .filter(|&ms: &u64| ms > 0)
            .unwrap_or(now_ms),
    })
}

/// The answer to a callback: a toast saying it arrived (the host updates
/// the card itself once it has decided).
pub fn received() -> Value {
    json!({ "toast": { "type": "info", "content": "Received · 已收到" } })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event;

    /// `card.action.trigger` as Feishu's callback reference shows it
    /// (https://open.feishu.cn/document/feishu-cards/card-callback-communication),
    /// with a pincer button's value.
    const TRIGGER: &str = r#"{
      "schema": "2.0",
      "header": {
        "event_id": "f7984f25108f8137722bb63cee927e66",
        "token": "066zT6pS4QCbgj5Do145GfDbbagCHGgF",
        "create_time": "1603977298000",
        "event_type": "card.action.trigger",
        "tenant_key": "2df73991750c3a19",
        "app_id": "cli_a5fb0ae6a4ba9013"
      },
      "event": {
        "operator": {
          "tenant_key": "2df73991750c3a19",
          "user_id": "867b3d4f",
          "open_id": "ou_3c1e3bdf1f4a2b6b7f5e3d1e1a2b3c4d",
          "union_id": "on_cad4860e7af114fb4ff6c5d496d1dd76"
        },
        "token": "c-295ee57216a5dc9de90fefd0aadb4b1d7d337bc6",
        "action": {
          "value": { "pincer_action": "pincer-approval:apr_1:once" },
          "tag": "button"
        },
        "host": "im_message",
        "context": {
          "open_message_id": "om_574d639e4a44e4dd646eaf628e2f6b5d",
          "open_chat_id": "oc_e4d8a6a5fd0e0a48c53c1f3f1c1b5e1f"
        }
      }
    }"#;

    #[test]
    fn a_click_from_feishus_example_becomes_one_interaction() {
        let envelope = event::envelope(TRIGGER.as_bytes()).expect("envelope");
        assert_eq!(envelope.event_type(), ACTION_TRIGGER);
        let click = click(&envelope, 7).expect("a click");
        assert_eq!(click.id, "f7984f25108f8137722bb63cee927e66");
        assert_eq!(click.action, "pincer-approval:apr_1:once");
        assert_eq!(click.user, "ou_3c1e3bdf1f4a2b6b7f5e3d1e1a2b3c4d");
        assert_eq!(click.message, "om_574d639e4a44e4dd646eaf628e2f6b5d");
        assert_eq!(click.conversation, "oc_e4d8a6a5fd0e0a48c53c1f3f1c1b5e1f");
        assert_eq!(click.timestamp_ms, 1_603_977_298_000);
    }

    #[test]
    fn callbacks_that_are_not_a_click_on_pincers_buttons_say_why() {
        let other = TRIGGER.replace("pincer_action", "something_else");
        let envelope = event::envelope(other.as_bytes()).expect("envelope");
        assert!(click(&envelope, 0).unwrap_err().contains("not pincer's"));
        let nobody = TRIGGER.replace("\"open_id\": \"ou_3c1e", "\"x\": \"ou_3c1e");
        let envelope = event::envelope(nobody.as_bytes()).expect("envelope");
        assert!(click(&envelope, 0).unwrap_err().contains("open_id"));
        let nowhere = TRIGGER.replace("open_message_id", "x");
        let envelope = event::envelope(nowhere.as_bytes()).expect("envelope");
        assert!(click(&envelope, 0).unwrap_err().contains("open_message_id"));
    }

    #[test]
    fn buttons_sit_under_the_text_with_their_callbacks() {
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
        ];
        let got = card("**run** `ls`?", &actions);
        assert_eq!(got["schema"], "2.0");
        let elements = got["body"]["elements"].as_array().expect("elements");
        assert_eq!(elements[0]["tag"], "markdown");
        assert_eq!(elements[0]["content"], "**run** `ls`?");
        let columns = elements[1]["columns"].as_array().expect("columns");
        let first = &columns[0]["elements"][0];
        assert_eq!(first["type"], "primary");
        assert_eq!(first["name"], "pincer_button_0");
        assert_eq!(columns[1]["elements"][0]["name"], "pincer_button_1");
        assert_eq!(first["behaviors"][0]["value"]["pincer_action"], "a:once");
        assert_eq!(columns[1]["elements"][0]["type"], "danger");
        assert_eq!(
            card("done", &[])["body"]["elements"]
                .as_array()
                .map(Vec::len),
            Some(1)
        );
        assert_eq!(received()["toast"]["type"], "info");
    }
}
