//! Test fixture: the `trap` tool hits a wasm `unreachable` instruction, the
//! `ok` tool returns `{"ok":true}`, so a test can show the host recovers.

wit_bindgen::generate!({
    path: "../../../wit/v0.1.0",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::types::{ToolError, ToolOutput, ToolSpec};

struct TrapOnCall;

const EMPTY_SCHEMA: &str = r#"{"type":"object","properties":{},"additionalProperties":false}"#;

impl Guest for TrapOnCall {
    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "trap".into(),
                description: "Traps (wasm `unreachable`).".into(),
                input_schema: EMPTY_SCHEMA.into(),
            },
            ToolSpec {
                name: "ok".into(),
                description: "Returns {\"ok\":true}.".into(),
                input_schema: EMPTY_SCHEMA.into(),
            },
        ]
    }

    fn invoke(tool: String, _args_json: String) -> Result<ToolOutput, ToolError> {
        match tool.as_str() {
            "trap" => trap(),
            "ok" => Ok(ToolOutput {
                json: r#"{"ok":true}"#.into(),
            }),
            _ => Err(ToolError::UnknownTool(tool)),
        }
    }
}

fn trap() -> ! {
    #[cfg(target_arch = "wasm32")]
    core::arch::wasm32::unreachable();
    #[cfg(not(target_arch = "wasm32"))]
    panic!("trap");
}

export!(TrapOnCall);
