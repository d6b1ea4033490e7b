//! Test fixture: a skill built with raw `wit_bindgen` against the frozen
//! release `wit/v0.4.0`, so the host's serving of that release stays tested
//! after the first-party plugins moved on. Tool `echo` goes through the
//! release's imports (config, kv, clock, logging).

wit_bindgen::generate!({
    path: "../../../wit/v0.4.0",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::logging::{Level, log};
use pincer::plugin::types::{ToolError, ToolOutput, ToolSpec};
use pincer::plugin::{clock, config, kv};
use serde::Deserialize;

const WIT: &str = "0.4.0";

struct Fixture;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EchoArgs {
    text: String,
}

impl Guest for Fixture {
    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "echo".into(),
            description: format!("Returns `text`, the greeting and the WIT release ({WIT})"),
            input_schema: serde_json::json!({
                "type": "object",
                "properties": { "text": { "type": "string" } },
                "required": ["text"],
                "additionalProperties": false,
            })
            .to_string(),
        }]
    }

    fn invoke(tool: String, args_json: String) -> Result<ToolOutput, ToolError> {
        if tool != "echo" {
            return Err(ToolError::UnknownTool(tool));
        }
        let args: EchoArgs =
            serde_json::from_str(&args_json).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        let version = kv::set("last", args.text.as_bytes(), None)
            .map_err(|e| ToolError::Failed(format!("kv: {e:?}")))?;
        log(Level::Info, &format!("echo on WIT {WIT}"));
        let json = serde_json::json!({
            "text": args.text,
            "greeting": config::get("greeting"),
            "wit": WIT,
            "kv_version": version,
            "clock_ok": clock::now_ms() > 1_600_000_000_000,
        });
        Ok(ToolOutput {
            json: json.to_string(),
        })
    }
}

export!(Fixture);
