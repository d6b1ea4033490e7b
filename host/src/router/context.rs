//! The context one turn starts from: a system prompt (pincer's own words,
//! the workspace's instructions file, recalled memories), the session's
//! history within its token budget, and the new message.

use std::path::Path;

use serde_json::{Value, json};

/// Largest instructions file read into the system prompt.
pub const MAX_INSTRUCTIONS_BYTES: usize = 32 * 1024;

/// What pincer tells every agent about where it runs.
fn preamble(workspace: &str) -> String {
    format!(
        "You are the assistant of the pincer workspace `{workspace}`. You run inside an \
         isolated container; your working folder is /workspace and files you write there \
         persist. Use the tools to act (run commands, read and edit files, call the \
         workspace's skills and memory) and answer concisely. When the user states a lasting \
         fact, preference or procedure, store it with memory__memorize if that tool is offered."
    )
}

/// The workspace's instructions: the configured file (relative to the
/// workspace folder) or `AGENTS.md` when present. Capped; a missing
/// configured file is reported, not fatal.
pub fn instructions(folder: &Path, configured: Option<&Path>) -> (Option<String>, Option<String>) {
    let (path, required) = match configured {
        Some(p) if p.is_absolute() => (p.to_path_buf(), true),
        Some(p) => (folder.join(p), true),
        None => (folder.join("AGENTS.md"), false),
    };
    match std::fs::read(&path) {
        Ok(bytes) => {
            let mut text = String::from_utf8_lossy(&bytes).into_owned();
            let mut notice = None;
            if text.len() > MAX_INSTRUCTIONS_BYTES {
                let mut cut = MAX_INSTRUCTIONS_BYTES;
                while !text.is_char_boundary(cut) {
                    cut -= 1;
                }
                text.truncate(cut);
                notice = Some(format!(
                    "{} is larger than {} KiB; only its beginning is used",
                    path.display(),
                    MAX_INSTRUCTIONS_BYTES / 1024
                ));
            }
            (Some(text), notice)
        }
        Err(e) if required => (
            None,
            Some(format!(
                "the instructions file {} cannot be read ({e}); continuing without it",
                path.display()
            )),
        ),
        Err(_) => (None, None),
    }
}

/// Recalled memories, as lines, within `max_chars`.
pub fn memory_lines(memories: &[(i64, String, String)], max_chars: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut used = 0;
    for (id, kind, text) in memories {
        let line = format!("- [{kind} #{id}] {text}");
        let chars = line.chars().count();
        if used + chars > max_chars {
            break;
        }
        used += chars;
        out.push(line);
    }
    out
}

/// The system message: preamble, instructions, memories.
pub fn system_message(workspace: &str, instructions: Option<&str>, memories: &[String]) -> Value {
    let mut text = preamble(workspace);
    if let Some(instructions) = instructions {
        text.push_str("\n\n# Workspace instructions\n\n");
        text.push_str(instructions.trim_end());
    }
    if !memories.is_empty() {
        text.push_str("\n\n# What you remember that may be relevant\n\n");
        text.push_str(&memories.join("\n"));
    }
    json!({"role": "system", "content": text})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memories_stay_within_their_budget() {
        let memories = vec![
            (1, "fact".to_string(), "用户喜欢靠窗的座位".to_string()),
            (2, "preference".to_string(), "x".repeat(100)),
        ];
        let lines = memory_lines(&memories, 40);
        assert_eq!(lines, vec!["- [fact #1] 用户喜欢靠窗的座位".to_string()]);
        assert_eq!(memory_lines(&memories, 1000).len(), 2);
    }

    #[test]
    fn instructions_come_from_agents_md_or_the_configured_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(instructions(dir.path(), None), (None, None));
        std::fs::write(dir.path().join("AGENTS.md"), "be brief").unwrap();
        assert_eq!(
            instructions(dir.path(), None).0.as_deref(),
            Some("be brief")
        );
        let (text, notice) = instructions(dir.path(), Some(Path::new("missing.md")));
        assert!(text.is_none());
        assert!(notice.unwrap().contains("missing.md"));
        std::fs::write(
            dir.path().join("big.md"),
            "é".repeat(MAX_INSTRUCTIONS_BYTES),
        )
        .unwrap();
        let (text, notice) = instructions(dir.path(), Some(Path::new("big.md")));
        assert!(text.unwrap().len() <= MAX_INSTRUCTIONS_BYTES);
        assert!(notice.unwrap().contains("only its beginning"));
    }

    #[test]
    fn the_system_message_names_the_workspace_and_carries_memories() {
        let m = system_message("research", Some("Cite sources."), &["- [fact #1] a".into()]);
        let text = m["content"].as_str().unwrap();
        assert!(text.contains("`research`"));
        assert!(text.contains("Cite sources."));
        assert!(text.contains("- [fact #1] a"));
    }
}
