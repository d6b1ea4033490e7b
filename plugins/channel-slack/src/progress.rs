//! What a turn shows while it works: the working reaction on the message,
//! and what it does now — Slack's assistant status
//! (https://docs.slack.dev/reference/methods/assistant.threads.setStatus)
//! in an AI app's thread (`assistant: true`), else one status line posted
//! where the answer goes and edited as the turn goes on.

use serde::{Deserialize, Serialize};

/// What the host hands back with the next update of the same message.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handle {
    /// The reaction added, to remove at the end.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reaction: Option<String>,
    /// The `ts` of the status line, to edit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<String>,
    /// The assistant status was set, to clear at the end.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub status: bool,
}

impl Handle {
    /// A stored handle: JSON, or (from before progress) a reaction name.
    pub fn parse(stored: Option<&str>) -> Self {
        match stored.map(str::trim).filter(|s| !s.is_empty()) {
            None => Self::default(),
            Some(json) if json.starts_with('{') => serde_json::from_str(json).unwrap_or_default(),
            Some(reaction) => Self {
                reaction: Some(reaction.to_string()),
                ..Self::default()
            },
        }
    }

    /// What to store; `None` when nothing is left to undo.
    pub fn stored(&self) -> Option<String> {
        (*self != Self::default()).then(|| serde_json::to_string(self).unwrap_or_default())
    }
}

/// The status line's text while working and once the turn ended.
pub fn line(detail: &str) -> String {
    format!("⏳ {detail}")
}

pub const FINISHED_LINE: &str = "✅ finished; the answer follows";
pub const FAILED_LINE: &str = "⚠️ stopped; see the message below";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_old_reaction_names_still_read() {
        assert_eq!(Handle::parse(None), Handle::default());
        assert_eq!(
            Handle::parse(Some("eyes")).reaction.as_deref(),
            Some("eyes")
        );
        let handle = Handle {
            reaction: Some("eyes".into()),
            line: Some("1700000000.000200".into()),
            status: false,
        };
        assert_eq!(Handle::parse(handle.stored().as_deref()), handle);
        assert_eq!(Handle::default().stored(), None);
    }
}
