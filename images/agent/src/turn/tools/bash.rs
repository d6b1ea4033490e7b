//! `bash`: a shell command through the runner's exec machinery, so the
//! workspace's policy (allowed executables, no process creation, process
//! group kill on timeout, output caps) applies exactly as to host `Exec`s.
//! The command gets the fixed base environment (with the egress proxy's
//! variables when the relay runs) only: never the gateway token.

use std::fmt::Write;

use pincer_runner_protocol::{ExecRequest, MAX_OUTPUT_BYTES, Response};
use serde::Deserialize;

use super::{ToolContext, ToolOutput};
use crate::exec;

#[derive(Debug, Deserialize)]
pub struct Args {
    command: String,
    timeout_secs: Option<u64>,
}

pub fn run(args: Args, ctx: &ToolContext) -> ToolOutput {
    let timeout_ms = args
        .timeout_secs
        .map_or(ctx.timeout_ms, |secs| {
            secs.saturating_mul(1000).min(ctx.timeout_ms)
        })
        .max(1);
    let request = ExecRequest {
        argv: vec!["/bin/sh".into(), "-c".into(), args.command],
        cwd: Some(ctx.workspace.display().to_string()),
        env: Vec::new(),
        stdin: None,
        timeout_ms,
        max_output_bytes: MAX_OUTPUT_BYTES,
    };
    match exec::run_cancellable(&request, ctx.enforcer, ctx.children, ctx.cancel) {
        Response::Exec(result) => {
            let mut text = result.stdout;
            if !result.stderr.is_empty() {
                if !text.is_empty() && !text.ends_with('\n') {
                    text.push('\n');
                }
                text.push_str("[stderr]\n");
                text.push_str(&result.stderr);
            }
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            let ok = !result.timed_out && result.exit_code == Some(0);
            let _ = match (result.timed_out, result.exit_code, result.signal) {
                (true, ..) => write!(
                    text,
                    "[timed out after {timeout_ms} ms: the command and everything it started were killed]"
                ),
                (false, Some(code), _) => write!(text, "[exit status {code}]"),
                (false, None, Some(signal)) => write!(text, "[killed by signal {signal}]"),
                (false, None, None) => write!(text, "[no exit status]"),
            };
            ToolOutput { ok, text }
        }
        Response::Error { kind, message } => ToolOutput::error(format!("{kind}: {message}")),
        other => ToolOutput::error(format!("unexpected answer from exec: {other:?}")),
    }
}
