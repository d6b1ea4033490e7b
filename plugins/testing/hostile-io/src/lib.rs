//! Test fixture: `fill` appends MiB after MiB to a file under `/data` (to
//! show the quota stops it), `size` reports a file's size, `kv` and `fetch`
//! use capabilities the manifest does not request (to show the denials are
//! audited), and `flood` passes the host one huge kv value (to show hostcall
//! fuel exhaustion is audited).

wit_bindgen::generate!({
    path: "../../../wit/v0.1.0",
    world: "skill-plugin",
});

use std::io::Write;

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::types::{HttpRequest, ToolError, ToolOutput, ToolSpec};
use pincer::plugin::{http, kv};
use serde::Deserialize;

struct HostileIo;

fn spec(name: &str, description: &str, schema: &str) -> ToolSpec {
    ToolSpec {
        name: name.into(),
        description: description.into(),
        input_schema: schema.into(),
    }
}

impl Guest for HostileIo {
    fn tools() -> Vec<ToolSpec> {
        vec![
            spec(
                "fill",
                "Appends `mb` MiB to /data/`file`, one MiB per write; reports how many were written.",
                r#"{"type":"object","properties":{"file":{"type":"string"},"mb":{"type":"integer"}},"required":["file","mb"]}"#,
            ),
            spec(
                "size",
                "The size of /data/`file` in bytes.",
                r#"{"type":"object","properties":{"file":{"type":"string"}},"required":["file"]}"#,
            ),
            spec(
                "kv",
                "Sets a kv key (no kv capability).",
                r#"{"type":"object"}"#,
            ),
            spec(
                "fetch",
                "GETs `url` (no http capability).",
                r#"{"type":"object","properties":{"url":{"type":"string"}},"required":["url"]}"#,
            ),
            spec(
                "flood",
                "Passes the host one kv value of `mb` MiB.",
                r#"{"type":"object","properties":{"mb":{"type":"integer"}},"required":["mb"]}"#,
            ),
        ]
    }

    fn invoke(tool: String, args_json: String) -> Result<ToolOutput, ToolError> {
        let json = match tool.as_str() {
            "fill" => {
                let args: Fill = serde_json::from_str(&args_json)
                    .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
                let mut file = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(format!("/data/{}", args.file))
                    .map_err(|e| ToolError::Failed(format!("open: {e}")))?;
                let chunk = vec![b'x'; 1 << 20];
                let mut written = 0;
                let mut error = None;
                for _ in 0..args.mb {
                    match file.write_all(&chunk) {
                        Ok(()) => written += 1,
                        Err(e) => {
                            error = Some(e.to_string());
                            break;
                        }
                    }
                }
                serde_json::json!({"written_mb": written, "error": error})
            }
            "size" => {
                let args: File = serde_json::from_str(&args_json)
                    .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
                let len = std::fs::metadata(format!("/data/{}", args.file))
                    .map(|m| m.len())
                    .map_err(|e| ToolError::Failed(e.to_string()))?;
                serde_json::json!({"bytes": len})
            }
            "kv" => {
                let outcome = kv::set("k", b"v", None);
                serde_json::json!({"denied": outcome.is_err(), "error": outcome.err().map(|e| format!("{e:?}"))})
            }
            "fetch" => {
                let args: Fetch = serde_json::from_str(&args_json)
                    .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
                let outcome = http::fetch(&HttpRequest {
                    method: "GET".into(),
                    url: args.url,
                    headers: Vec::new(),
                    body: Vec::new(),
                    timeout_ms: None,
                });
                serde_json::json!({"denied": outcome.is_err(), "error": outcome.err().map(|e| format!("{e:?}"))})
            }
            "flood" => {
                let args: Flood = serde_json::from_str(&args_json)
                    .map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
                let value = vec![7u8; (args.mb as usize) << 20];
                let outcome = kv::set("flood", &value, None);
                serde_json::json!({"returned": outcome.is_ok()})
            }
            _ => return Err(ToolError::UnknownTool(tool)),
        };
        Ok(ToolOutput {
            json: json.to_string(),
        })
    }
}

#[derive(Deserialize)]
struct Fill {
    file: String,
    mb: u32,
}

#[derive(Deserialize)]
struct File {
    file: String,
}

#[derive(Deserialize)]
struct Fetch {
    url: String,
}

#[derive(Deserialize)]
struct Flood {
    mb: u32,
}

export!(HostileIo);
