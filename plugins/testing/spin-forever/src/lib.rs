//! Test fixture: `tools()` answers normally, but invoking `spin` loops
//! forever, so tests can show the host's per-call deadline interrupts it.

wit_bindgen::generate!({
    path: "../../../wit/v0.1.0",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::types::{ToolError, ToolOutput, ToolSpec};
use std::hint::black_box;

struct SpinForever;

impl Guest for SpinForever {
    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "spin".into(),
            description: "Never returns.".into(),
            input_schema: r#"{"type":"object","properties":{},"additionalProperties":false}"#
                .into(),
        }]
    }

    fn invoke(tool: String, _args_json: String) -> Result<ToolOutput, ToolError> {
        match tool.as_str() {
            "spin" => spin(),
            _ => Err(ToolError::UnknownTool(tool)),
        }
    }
}

fn spin() -> ! {
    // black_box keeps the optimiser from proving the loop has no effect.
    let mut counter = 0u64;
    loop {
        counter = black_box(counter.wrapping_add(1));
    }
}

export!(SpinForever);
