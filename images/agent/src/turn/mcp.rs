//! The workspace's gateway tools (skills, memory, MCP servers) over the
//! gateway's MCP endpoint: streamable HTTP, stateless, JSON answers. Being
//! stateless, the endpoint needs no `initialize` handshake: every
//! `tools/list` and `tools/call` stands alone and names its protocol version
//! in `MCP-Protocol-Version`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::gateway::{Gateway, GatewayError};
use super::sse::SseParser;
use crate::cancel::Cancel;

pub const PATH: &str = "/mcp";
pub const PROTOCOL_VERSION: &str = "2025-06-18";
/// Most bytes of one MCP answer.
const MAX_ANSWER_BYTES: usize = 8 * 1024 * 1024;
/// Most pages of a paginated tool list.
const MAX_PAGES: usize = 20;
/// How long listing the tools may take.
pub const LIST_TIMEOUT: Duration = Duration::from_secs(30);

/// A tool as the gateway describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct McpTool {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
}

impl McpTool {
    /// The OpenAI `tools` entry.
    pub fn spec(&self) -> Value {
        let parameters = if self.input_schema.is_object() {
            self.input_schema.clone()
        } else {
            json!({"type": "object", "properties": {}})
        };
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            }
        })
    }
}

/// A JSON-RPC exchange that did not yield a result.
#[derive(Debug)]
pub enum McpError {
    Cancelled,
    Failed(String),
}

impl From<GatewayError> for McpError {
    fn from(e: GatewayError) -> Self {
        match e {
            GatewayError::Cancelled => McpError::Cancelled,
            GatewayError::Unreachable(message) => McpError::Failed(message),
            GatewayError::Status { status, message } => {
                McpError::Failed(format!("HTTP {status}: {message}"))
            }
        }
    }
}

/// Every tool of the workspace's endpoint (following `nextCursor`).
pub async fn list_tools(gateway: &Gateway, cancel: &Cancel<'_>) -> Result<Vec<McpTool>, McpError> {
    let mut tools = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = match &cursor {
            Some(cursor) => json!({"cursor": cursor}),
            None => json!({}),
        };
        let result = rpc(gateway, "tools/list", params, LIST_TIMEOUT, cancel).await?;
        for tool in result
            .get("tools")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(name) = tool.get("name").and_then(Value::as_str) else {
                continue;
            };
            tools.push(McpTool {
                name: name.to_string(),
                description: tool
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                input_schema: tool.get("inputSchema").cloned().unwrap_or(Value::Null),
            });
        }
        cursor = result
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_string);
        if cursor.is_none() {
            return Ok(tools);
        }
    }
    Ok(tools)
}

/// Calls a tool; `Ok((ok, text))` with its text content.
pub async fn call_tool(
    gateway: &Gateway,
    name: &str,
    arguments: Value,
    timeout: Duration,
    cancel: &Cancel<'_>,
) -> Result<(bool, String), McpError> {
    let params = json!({"name": name, "arguments": arguments});
    let result = rpc(gateway, "tools/call", params, timeout, cancel).await?;
    let is_error = result
        .get("isError")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok((!is_error, result_text(&result)))
}

/// The text of a `tools/call` result: its text blocks joined by newlines;
/// other blocks are named; structured content when there is no text.
fn result_text(result: &Value) -> String {
    let mut parts = Vec::new();
    for block in result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => {
                parts.push(
                    block
                        .get("text")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                );
            }
            Some("resource") => {
                let resource = block.get("resource").unwrap_or(&Value::Null);
                match resource.get("text").and_then(Value::as_str) {
                    Some(text) => parts.push(text.to_string()),
                    None => parts.push(format!(
                        "[resource {}]",
                        resource
                            .get("uri")
                            .and_then(Value::as_str)
                            .unwrap_or("(no uri)")
                    )),
                }
            }
            Some(other) => parts.push(format!("[{other} content omitted]")),
            None => {}
        }
    }
    if parts.is_empty()
        && let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        return structured.to_string();
    }
    parts.join("\n")
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// One JSON-RPC request; its `result`, or the error it names.
async fn rpc(
    gateway: &Gateway,
    method: &str,
    params: Value,
    timeout: Duration,
    cancel: &Cancel<'_>,
) -> Result<Value, McpError> {
    let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    let headers = [
        ("accept", "application/json, text/event-stream"),
        ("mcp-protocol-version", PROTOCOL_VERSION),
    ];
    let mut reply = gateway.post(PATH, &body, &headers, timeout, cancel).await?;
    let bytes = reply
        .read_all(MAX_ANSWER_BYTES, gateway, timeout, cancel)
        .await?;
    let answer = if reply.content_type.starts_with("text/event-stream") {
        // The server fell back to a stream (it sent notifications first):
        // the answer is the event carrying our id.
        let mut parser = SseParser::new(MAX_ANSWER_BYTES);
        let mut events = parser.feed(&bytes).map_err(McpError::Failed)?;
        events.extend(parser.finish());
        events
            .iter()
            .filter_map(|data| serde_json::from_str::<Value>(data).ok())
            .find(|message| message.get("id") == Some(&Value::from(id)))
            .ok_or_else(|| {
                McpError::Failed(format!(
                    "the MCP endpoint's stream held no answer to {method}"
                ))
            })?
    } else {
        serde_json::from_slice::<Value>(&bytes).map_err(|e| {
            McpError::Failed(format!(
                "the MCP endpoint's answer to {method} is not JSON: {e}"
            ))
        })?
    };
    if let Some(error) = answer.get("error") {
        let message = error
            .get("message")
            .and_then(Value::as_str)
            .map_or_else(|| error.to_string(), str::to_string);
        return Err(McpError::Failed(message));
    }
    answer.get("result").cloned().ok_or_else(|| {
        McpError::Failed(format!(
            "the MCP endpoint's answer to {method} has no result"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_translation() {
        let tool = McpTool {
            name: "memory__recall".into(),
            description: "Recall".into(),
            input_schema: json!({"type":"object","properties":{"query":{"type":"string"}}}),
        };
        let spec = tool.spec();
        assert_eq!(spec["type"], "function");
        assert_eq!(spec["function"]["name"], "memory__recall");
        assert_eq!(
            spec["function"]["parameters"]["properties"]["query"]["type"],
            "string"
        );
        let bare = McpTool {
            input_schema: Value::Null,
            ..tool
        };
        assert_eq!(bare.spec()["function"]["parameters"]["type"], "object");
    }

    #[test]
    fn result_texts() {
        let result = json!({"content":[
            {"type":"text","text":"a"},
            {"type":"image","data":"..","mimeType":"image/png"},
            {"type":"resource","resource":{"uri":"file:///x","text":"b"}}
        ]});
        assert_eq!(result_text(&result), "a\n[image content omitted]\nb");
        assert_eq!(
            result_text(&json!({"content":[],"structuredContent":{"n":1}})),
            r#"{"n":1}"#
        );
    }
}
