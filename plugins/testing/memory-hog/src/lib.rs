//! Test fixture: `hog` allocates and touches 1 MiB chunks, keeping them all
//! alive, until allocation fails (which aborts, i.e. traps). With `mb` it
//! allocates just that much and returns, to show in-limit allocation works.

wit_bindgen::generate!({
    path: "../../../wit/v0.1.0",
    world: "skill-plugin",
});

use exports::pincer::plugin::skill::Guest;
use pincer::plugin::types::{ToolError, ToolOutput, ToolSpec};
use serde::Deserialize;
use std::hint::black_box;

const MIB: usize = 1024 * 1024;

struct MemoryHog;

impl Guest for MemoryHog {
    fn tools() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "hog".into(),
            description: "Allocates `mb` MiB and returns; without `mb`, allocates until memory \
                          runs out (traps)."
                .into(),
            input_schema: r#"{"type":"object","properties":{"mb":{"type":"integer","minimum":0}},"additionalProperties":false}"#
                .into(),
        }]
    }

    fn invoke(tool: String, args_json: String) -> Result<ToolOutput, ToolError> {
        if tool != "hog" {
            return Err(ToolError::UnknownTool(tool));
        }
        let args: HogArgs =
            serde_json::from_str(&args_json).map_err(|e| ToolError::InvalidArgs(e.to_string()))?;
        match args.mb {
            Some(mb) => Ok(ToolOutput {
                json: format!(r#"{{"allocated_mb":{}}}"#, allocate(mb).len()),
            }),
            None => loop {
                allocate(u32::MAX);
            },
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct HogArgs {
    #[serde(default)]
    mb: Option<u32>,
}

/// Allocates `mb` chunks of 1 MiB, writing to every byte so the memory is really committed.
fn allocate(mb: u32) -> Vec<Vec<u8>> {
    let mut chunks = Vec::new();
    for _ in 0..mb {
        chunks.push(black_box(vec![0xA5u8; MIB]));
    }
    black_box(chunks)
}

export!(MemoryHog);
