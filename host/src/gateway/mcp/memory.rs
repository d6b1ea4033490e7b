//! The workspace's long-term memory offered as MCP tools: `memory__memorize`,
//! `memory__recall` and `memory__forget`. The store is opened on first use
//! (the jieba dictionary loads then, off the async threads).

use std::sync::Arc;

use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde::Deserialize;

use super::{McpError, Reply};
use crate::memory::{MemoryError, MemoryKind, MemoryStore, Recalled};

/// Results of one recall call, at most.
const MAX_RECALL: usize = 20;
const DEFAULT_RECALL: usize = 5;

pub struct MemoryTools {
    store: Arc<MemoryStore>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Memorize {
    text: String,
    #[serde(default)]
    kind: Option<MemoryKind>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Recall {
    query: String,
    #[serde(default)]
    limit: Option<usize>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Forget {
    id: i64,
}

fn schema(value: serde_json::Value) -> JsonObject {
    match value {
        serde_json::Value::Object(object) => object,
        _ => JsonObject::new(),
    }
}

/// The three tools, unprefixed (the gateway adds `memory__`).
pub fn tools() -> Vec<Tool> {
    vec![
        Tool::new(
            "memorize",
            "Remember something for later conversations in this workspace: a fact \
             (about the user, project or world), a preference (how the user likes things \
             done) or a procedure (steps that worked). Store one self-contained statement \
             per call, in the user's language; only what the user said or confirmed. \
             Storing the same text again returns the existing memory.",
            schema(serde_json::json!({
                "type": "object",
                "properties": {
                    "text": {
                        "type": "string",
                        "description": "The statement to remember, at most 8 KiB, e.g. \"用户喜欢靠窗的座位\" or \"Deploys go through GitHub Actions\"."
                    },
                    "kind": {
                        "type": "string",
                        "enum": ["fact", "preference", "procedure"],
                        "default": "fact",
                        "description": "What sort of memory this is."
                    }
                },
                "required": ["text"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "recall",
            "Search this workspace's memories (Chinese, English or mixed). Matches any \
             word of the query, best first, weighing recent and often-used memories higher. \
             Returns a numbered list with each memory's id and kind.",
            schema(serde_json::json!({
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "description": "Words to look for, e.g. \"座位偏好\" or \"deploy steps\"."
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_RECALL,
                        "default": DEFAULT_RECALL,
                        "description": "How many memories to return at most."
                    }
                },
                "required": ["query"],
                "additionalProperties": false
            })),
        ),
        Tool::new(
            "forget",
            "Delete one memory of this workspace by the id `recall` showed, e.g. when \
             the user says it is wrong or outdated.",
            schema(serde_json::json!({
                "type": "object",
                "properties": {
                    "id": {"type": "integer", "description": "The memory's id."}
                },
                "required": ["id"],
                "additionalProperties": false
            })),
        ),
    ]
}

/// One line per memory: `1. #12 [preference] text`.
pub fn numbered(found: &[Recalled]) -> String {
    if found.is_empty() {
        return "no memories match".to_string();
    }
    found
        .iter()
        .enumerate()
        .map(|(i, r)| {
            format!(
                "{}. #{} [{}] {}",
                i + 1,
                r.memory.id,
                r.memory.kind,
                r.memory.text
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The call's arguments as `T`, or the refusal to answer with.
fn args<T: for<'de> Deserialize<'de>>(arguments: Option<JsonObject>) -> Result<T, Reply> {
    let value = serde_json::Value::Object(arguments.unwrap_or_default());
    serde_json::from_value(value).map_err(|e| Reply::Refused(format!("invalid arguments: {e}")))
}

impl MemoryTools {
    pub fn new(store: Arc<MemoryStore>) -> Self {
        Self { store }
    }

    pub async fn call(
        &self,
        workspace: &str,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
        let store = self.store.clone();
        let (workspace, tool) = (workspace.to_string(), tool.to_string());
        let reply = tokio::task::spawn_blocking(move || run(&store, &workspace, &tool, arguments))
            .await
            .map_err(|e| McpError::Failed(e.to_string()))??;
        Ok(reply.into_result())
    }
}

/// Store errors the agent caused become tool errors; database trouble is the
/// gateway's.
fn refused_or_failed(error: MemoryError) -> Result<Reply, McpError> {
    match error {
        MemoryError::EmptyText
        | MemoryError::TooLong { .. }
        | MemoryError::EmptyQuery
        | MemoryError::UnknownKind(_) => Ok(Reply::Refused(error.to_string())),
        other => Err(McpError::Failed(other.to_string())),
    }
}

fn run(
    store: &MemoryStore,
    workspace: &str,
    tool: &str,
    arguments: Option<JsonObject>,
) -> Result<Reply, McpError> {
    match tool {
        "memorize" => {
            let Memorize { text, kind } = match args(arguments) {
                Ok(a) => a,
                Err(refused) => return Ok(refused),
            };
            match store.add(workspace, kind.unwrap_or(MemoryKind::Fact), &text) {
                Ok(m) => Ok(Reply::Done(format!(
                    "memorized #{} [{}] {}",
                    m.id, m.kind, m.text
                ))),
                Err(e) => refused_or_failed(e),
            }
        }
        "recall" => {
            let Recall { query, limit } = match args(arguments) {
                Ok(a) => a,
                Err(refused) => return Ok(refused),
            };
            let limit = limit.unwrap_or(DEFAULT_RECALL).clamp(1, MAX_RECALL);
            match store.recall(workspace, &query, limit) {
                Ok(found) => Ok(Reply::Done(numbered(&found))),
                Err(e) => refused_or_failed(e),
            }
        }
        "forget" => {
            let Forget { id } = match args(arguments) {
                Ok(a) => a,
                Err(refused) => return Ok(refused),
            };
            match store.forget(workspace, id) {
                Ok(true) => Ok(Reply::Done(format!("forgot memory #{id}"))),
                Ok(false) => Ok(Reply::Refused(format!(
                    "no memory #{id} in this workspace (recall shows the ids)"
                ))),
                Err(e) => refused_or_failed(e),
            }
        }
        other => Ok(Reply::Refused(format!("unknown memory tool `{other}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: serde_json::Value) -> Option<JsonObject> {
        Some(schema(value))
    }

    fn text(outcome: Result<Reply, McpError>) -> (bool, String) {
        match outcome {
            Ok(Reply::Done(t)) => (true, t),
            Ok(Reply::Refused(t)) => (false, t),
            Err(e) => panic!("gateway failure: {e}"),
        }
    }

    #[test]
    fn tools_memorize_recall_and_forget() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::open(dir.path()).unwrap();
        let (ok, said) = text(run(
            &store,
            "main",
            "memorize",
            object(serde_json::json!({"text": "用户喜欢靠窗的座位", "kind": "preference"})),
        ));
        assert!(ok, "{said}");
        assert!(said.starts_with("memorized #1 [preference]"), "{said}");
        let (ok, said) = text(run(
            &store,
            "main",
            "recall",
            object(serde_json::json!({"query": "座位偏好"})),
        ));
        assert!(ok);
        assert_eq!(said, "1. #1 [preference] 用户喜欢靠窗的座位");
        let (ok, said) = text(run(
            &store,
            "main",
            "forget",
            object(serde_json::json!({"id": 1})),
        ));
        assert!(ok, "{said}");
        let (_, said) = text(run(
            &store,
            "main",
            "recall",
            object(serde_json::json!({"query": "座位"})),
        ));
        assert_eq!(said, "no memories match");
        let (ok, said) = text(run(
            &store,
            "main",
            "forget",
            object(serde_json::json!({"id": 1})),
        ));
        assert!(!ok);
        assert!(said.contains("no memory #1"), "{said}");
    }

    #[test]
    fn bad_arguments_are_tool_errors_with_reasons() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::open(dir.path()).unwrap();
        for (tool, arguments, expected) in [
            ("memorize", serde_json::json!({}), "missing field `text`"),
            (
                "memorize",
                serde_json::json!({"text": " "}),
                "cannot be empty",
            ),
            (
                "memorize",
                serde_json::json!({"text": "x", "kind": "opinion"}),
                "unknown variant `opinion`",
            ),
            ("recall", serde_json::json!({"query": 3}), "invalid type"),
            ("recall", serde_json::json!({"query": ""}), "query is empty"),
            ("forget", serde_json::json!({"id": "one"}), "invalid type"),
            (
                "forget",
                serde_json::json!({"id": 1, "all": true}),
                "unknown field `all`",
            ),
        ] {
            let (ok, said) = text(run(&store, "main", tool, object(arguments)));
            assert!(!ok, "{tool}");
            assert!(said.contains(expected), "{tool}: {said}");
        }
    }
}
