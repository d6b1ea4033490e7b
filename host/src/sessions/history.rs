//! Turning stored messages into the history sent with a turn: whole turns,
//! newest kept first, within a token budget; tool calls a killed turn left
//! without results get a stated result, so the history stays valid for
//! every provider.

use std::collections::HashSet;

use serde_json::{Value, json};

use super::StoredMessage;

/// The history for the next turn and what was left out.
#[derive(Debug, Clone, PartialEq)]
pub struct Trimmed {
    pub messages: Vec<Value>,
    /// Older turns not sent (they stay stored).
    pub dropped_turns: usize,
    pub estimated_tokens: u64,
}

/// What a tool call that never finished is answered with.
pub const INTERRUPTED_TOOL_RESULT: &str =
    "error: the turn was interrupted before this tool call finished; its outcome is unknown";

/// A rough token count that errs high: 3 bytes per token fits English (about
/// 4 characters per token) and Chinese (3 bytes per character, about one
/// token each).
pub fn estimate_tokens(message: &Value) -> u64 {
    (message.to_string().len() as u64).div_ceil(3)
}

/// Keeps the newest whole turns whose estimated size fits `budget_tokens`.
/// The newest turn is always kept, whatever its size. `open_turn`: a turn
/// being resumed, whose last assistant message's calls are left without a
/// result (the resumed runner runs them).
pub fn trim_to_budget(
    stored: &[StoredMessage],
    budget_tokens: u64,
    open_turn: Option<&str>,
) -> Trimmed {
    let mut turns: Vec<(&str, Vec<Value>)> = Vec::new();
    for m in stored {
        match turns.last_mut() {
            Some((id, messages)) if *id == m.turn_id => messages.push(m.message.clone()),
            _ => turns.push((&m.turn_id, vec![m.message.clone()])),
        }
    }
    let mut kept: Vec<Vec<Value>> = Vec::new();
    let mut used = 0u64;
    for (id, messages) in turns.iter().rev() {
        let repaired = answer_dangling_tool_calls(messages, open_turn == Some(*id));
        let cost: u64 = repaired.iter().map(estimate_tokens).sum();
        if !kept.is_empty() && used + cost > budget_tokens {
            break;
        }
        used += cost;
        kept.push(repaired);
    }
    let dropped_turns = turns.len() - kept.len();
    kept.reverse();
    Trimmed {
        messages: kept.into_iter().flatten().collect(),
        dropped_turns,
        estimated_tokens: used,
    }
}

/// Adds a result after every assistant tool call that has none (its turn
/// was killed) and drops tool results whose call is unknown; with
/// `keep_last_open`, the calls of the last assistant message are left as
/// they are.
fn answer_dangling_tool_calls(messages: &[Value], keep_last_open: bool) -> Vec<Value> {
    let last_assistant = messages.iter().rposition(|m| m["role"] == "assistant");
    let answered: HashSet<&str> = messages
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    let mut asked = HashSet::new();
    let mut out = Vec::with_capacity(messages.len());
    for (i, m) in messages.iter().enumerate() {
        if m["role"] == "tool" {
            if m["tool_call_id"]
                .as_str()
                .is_some_and(|id| asked.contains(id))
            {
                out.push(m.clone());
            }
            continue;
        }
        out.push(m.clone());
        let calls = m["tool_calls"].as_array().map(Vec::as_slice).unwrap_or(&[]);
        for id in calls.iter().filter_map(|c| c["id"].as_str()) {
            asked.insert(id.to_string());
            if !answered.contains(id) && (!keep_last_open || Some(i) != last_assistant) {
                out.push(json!({
                    "role": "tool",
                    "tool_call_id": id,
                    "content": INTERRUPTED_TOOL_RESULT,
                }));
            }
        }
    }
    out
}
