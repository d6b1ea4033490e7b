//! Test fixture: `fetch` GETs whatever URL it is given, so tests can show the
//! host denies hosts outside the manifest's (`localhost` only) and the
//! workspace's allowlists.

wit_bindgen::generate!({
    path: "../../../wit/v0.1.0",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::http;
use pincer::plugin::types::{HttpError, HttpRequest, ToolError, ToolOutput, ToolSpec};
use serde::Deserialize;

struct UndeclaredHttp;

impl Guest for UndeclaredHttp {
    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "fetch".into(),
            description: "GETs `url` and returns the status and body.".into(),
            input_schema: r#"{"type":"object","properties":{"url":{"type":"string"}},"required":["url"],"additionalProperties":false}"#
                .into(),
        }]
    }

    fn invoke(tool: String, args_json: String) -> Result<ToolOutput, ToolError> {
        if tool != "fetch" {
            return Err(ToolError::UnknownTool(tool));
        }
        let args: FetchArgs =
            serde_json::from_str(&args_json).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let response = http::fetch(&HttpRequest {
            method: "GET".into(),
            url: args.url,
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: None,
        })
        .map_err(tool_error)?;
        let json = serde_json::json!({
            "status": response.status,
            "body": String::from_utf8_lossy(&response.body),
        });
        Ok(ToolOutput {
            json: json.to_string(),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FetchArgs {
    url: String,
}

fn tool_error(err: HttpError) -> ToolError {
    match err {
        HttpError::Denied(msg) => ToolError::Denied(msg),
        HttpError::InvalidRequest(msg) => ToolError::Failed(format!("invalid request: {msg}")),
        HttpError::Transport(msg) => ToolError::Failed(format!("transport error: {msg}")),
        HttpError::Timeout => ToolError::Failed("timed out".into()),
        HttpError::TooLarge => ToolError::Failed("response too large".into()),
    }
}

export!(UndeclaredHttp);
