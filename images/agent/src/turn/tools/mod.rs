//! The built-in tools, executed inside the container: `bash` (through the
//! runner's exec machinery, so every policy applies), `read`, `write`,
//! `edit`, `glob`, `grep`.

mod bash;
mod files;
mod search;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::cancel::Cancel;
use crate::policy::Enforcer;
use crate::reap::Children;

/// What a tool call produced: `text` goes to the model (capped later).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub ok: bool,
    pub text: String,
}

impl ToolOutput {
    pub fn ok(text: impl Into<String>) -> Self {
        ToolOutput {
            ok: true,
            text: text.into(),
        }
    }

    pub fn error(text: impl std::fmt::Display) -> Self {
        ToolOutput {
            ok: false,
            text: format!("error: {text}"),
        }
    }
}

/// Where and under which bounds a built-in tool runs.
pub struct ToolContext<'a> {
    /// Relative paths resolve against it; `bash` runs in it.
    pub workspace: &'a Path,
    pub enforcer: &'a Enforcer,
    pub children: &'a Children,
    pub cancel: &'a Cancel<'a>,
    pub timeout_ms: u64,
    /// When the call must be over (`timeout_ms` after its start).
    pub deadline: Instant,
}

impl ToolContext<'_> {
    /// `path` against the workspace (absolute paths stay as they are).
    fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        if path.is_empty() {
            return Err("path is empty".into());
        }
        if path.contains('\0') {
            return Err("path contains a NUL byte".into());
        }
        Ok(self.workspace.join(path))
    }

    /// How `path` is shown to the model: relative to the workspace when
    /// inside it.
    fn show(&self, path: &Path) -> String {
        match path.strip_prefix(self.workspace) {
            Ok(relative) if !relative.as_os_str().is_empty() => relative.display().to_string(),
            _ => path.display().to_string(),
        }
    }

    /// Whether the call must stop now (deadline passed or turn cancelled).
    fn expired(&self) -> Option<String> {
        if self.cancel.is_cancelled() {
            Some("cancelled".into())
        } else if Instant::now() >= self.deadline {
            Some(format!("timed out after {} ms", self.timeout_ms))
        } else {
            None
        }
    }
}

pub const NAMES: [&str; 6] = ["bash", "read", "write", "edit", "glob", "grep"];

/// The OpenAI `tools` entries of the tools the host carries out
/// ([`pincer_runner_protocol::HOST_TOOLS`]).
pub fn host_specs() -> Vec<Value> {
    vec![json!({
        "type": "function",
        "function": {
            "name": "send_file",
            "description": "Send a file from the workspace to the person you are talking \
                with, in this conversation (only there). Use it for files you made for \
                them: a CSV, a chart, a report. The file must be a regular file beneath \
                /workspace; symlinks are refused.",
            "parameters": {
                "type": "object",
                "properties": {
                    "path": {
                        "type": "string",
                        "description": "The file, relative to /workspace or absolute beneath it."
                    },
                    "comment": {
                        "type": "string",
                        "description": "A short message sent with the file (Markdown)."
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }
        }
    })]
}

/// The OpenAI `tools` entries of the built-in tools.
pub fn specs() -> Vec<Value> {
    let tool = |name: &str, description: &str, parameters: Value| {
        json!({
            "type": "function",
            "function": {"name": name, "description": description, "parameters": parameters}
        })
    };
    vec![
        tool(
            "bash",
            "Run a shell command (/bin/sh -c) in the workspace directory and return its \
             stdout, stderr and exit status. Runs without network credentials and under the \
             workspace's policy; long output is cut in the middle. Killed (with everything it \
             started) when it exceeds its timeout.",
            json!({
                "type": "object",
                "properties": {
                    "command": {"type": "string", "description": "The shell command line."},
                    "timeout_secs": {
                        "type": "integer", "minimum": 1,
                        "description": "Kill the command after this many seconds (capped by the turn's tool timeout)."
                    }
                },
                "required": ["command"],
                "additionalProperties": false
            }),
        ),
        tool(
            "read",
            "Read a text file. Returns its lines numbered from 1 (`N<TAB>line`). Use offset \
             and limit to page through long files.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                    "offset": {"type": "integer", "minimum": 1, "description": "First line to return (1-based; default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "Most lines to return (default 2000)."}
                },
                "required": ["path"],
                "additionalProperties": false
            }),
        ),
        tool(
            "write",
            "Write a file with the given content, replacing it if it exists; creates missing \
             parent directories.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                    "content": {"type": "string", "description": "The complete new content."}
                },
                "required": ["path", "content"],
                "additionalProperties": false
            }),
        ),
        tool(
            "edit",
            "Replace an exact piece of text in a file. old_string must occur exactly once \
             (include surrounding lines to make it unique) unless replace_all is true.",
            json!({
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path, relative to the workspace or absolute."},
                    "old_string": {"type": "string", "description": "The exact text to replace (whitespace matters)."},
                    "new_string": {"type": "string", "description": "The replacement text."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."}
                },
                "required": ["path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        ),
        tool(
            "glob",
            "Find files whose path matches a glob pattern (`*` within a directory, `**` across \
             directories, `{a,b}` alternatives), e.g. `**/*.rs`. Returns paths sorted by name.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Glob matched against paths relative to `path`."},
                    "path": {"type": "string", "description": "Directory to search (default: the workspace)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
        tool(
            "grep",
            "Search file contents with a regular expression (Rust regex syntax). Returns \
             matching lines as `path:line:text`; skips binary files and .git directories.",
            json!({
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Regular expression."},
                    "path": {"type": "string", "description": "File or directory to search (default: the workspace)."},
                    "glob": {"type": "string", "description": "Only search files whose name (or relative path) matches this glob, e.g. `*.py`."},
                    "ignore_case": {"type": "boolean", "description": "Case-insensitive match (default false)."}
                },
                "required": ["pattern"],
                "additionalProperties": false
            }),
        ),
    ]
}

/// Runs built-in tool `name` (one of [`NAMES`]) with parsed `arguments`.
pub fn run(name: &str, arguments: Value, ctx: &ToolContext) -> ToolOutput {
    match name {
        "bash" => with_args(name, arguments, |args| bash::run(args, ctx)),
        "read" => with_args(name, arguments, |args| files::read(args, ctx)),
        "write" => with_args(name, arguments, |args| files::write(args, ctx)),
        "edit" => with_args(name, arguments, |args| files::edit(args, ctx)),
        "glob" => with_args(name, arguments, |args| search::glob(args, ctx)),
        "grep" => with_args(name, arguments, |args| search::grep(args, ctx)),
        other => ToolOutput::error(format!("{other:?} is not a built-in tool")),
    }
}

fn with_args<A: DeserializeOwned>(
    name: &str,
    arguments: Value,
    run: impl FnOnce(A) -> ToolOutput,
) -> ToolOutput {
    match serde_json::from_value(arguments) {
        Ok(args) => run(args),
        Err(e) => ToolOutput::error(format!(
            "invalid arguments for {name}: {e}; see the tool's parameter schema"
        )),
    }
}
