//! Tools the runner offers the model but the host carries out
//! ([`pincer_runner_protocol::HOST_TOOLS`]): `send_file` reads a file
//! beneath the workspace folder (never following a symlink) and queues it
//! for the turn's own conversation, through the outbox with its retries
//! and receipts.

use std::os::fd::AsFd;
use std::path::{Component, Path, PathBuf};

use pincer_runner_protocol::Verdict;
use serde_json::Value;

use super::{Agent, Origin};
use crate::channels::files::{safe_name, size_text, sniff};
use crate::channels::{Address, OutboxFile, Post};
use crate::sessions::SessionKey;

/// The longest comment sent with a file.
const MAX_COMMENT_BYTES: usize = 4000;

impl Agent {
    /// Carries out host tool `name` for the turn of `key` (started by the
    /// message `origin`).
    pub(super) async fn host_tool(
        &self,
        key: &SessionKey,
        origin: Option<&Origin>,
        name: &str,
        arguments: &Value,
    ) -> Verdict {
        let done = match name {
            "send_file" => self.send_file(key, origin, arguments).await,
            other => Err(format!("there is no host tool named {other:?}")),
        };
        match done {
            Ok(output) => Verdict::Ran { ok: true, output },
            Err(why) => Verdict::Ran {
                ok: false,
                output: format!("error: {why}"),
            },
        }
    }

    async fn send_file(
        &self,
        key: &SessionKey,
        origin: Option<&Origin>,
        arguments: &Value,
    ) -> Result<String, String> {
        let path = arguments["path"]
            .as_str()
            .ok_or("`path` (a string) is required")?;
        let comment = match &arguments["comment"] {
            Value::Null => String::new(),
            Value::String(text) if text.len() <= MAX_COMMENT_BYTES => text.clone(),
            Value::String(text) => {
                return Err(format!(
                    "the comment is {} bytes; at most {MAX_COMMENT_BYTES}",
                    text.len()
                ));
            }
            _ => return Err("`comment` must be a string".into()),
        };
        let (Some(channels), Some(origin)) = (self.channels.get(), origin) else {
            return Err(
                "this conversation is not on a chat platform, so there is nobody to send a file to; it stays in the workspace".into(),
            );
        };
        let channel = channels.get(&key.channel).ok_or_else(|| {
            format!(
                "channel `{}` is not loaded; the file was not sent",
                key.channel
            )
        })?;
        let max = channel.info.max_upload_bytes;
        if max == 0 {
            return Err(format!(
                "channel `{}` cannot send files (its plugin sends none)",
                key.channel
            ));
        }
        let relative = beneath_workspace(path)?;
        let folder = match self.specs.get(&key.workspace) {
            Some(Ok(spec)) => spec.workspace_dir.clone(),
            _ => return Err(format!("workspace `{}` has no folder", key.workspace)),
        };
        let cap = usize::try_from(max).unwrap_or(usize::MAX);
        let shown = relative.clone();
        let read = tokio::task::spawn_blocking(move || {
            let dir = crate::containers::open_dir(&folder)?;
            crate::containers::read_regular_beneath(dir.as_fd(), &shown, cap, &shown)
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| e.to_string())?;
        if read.truncated {
            return Err(format!(
                "{path} is larger than the {} channel `{}` sends",
                size_text(max),
                key.channel
            ));
        }
        let base = relative
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let name = safe_name(&base);
        let head = &read.bytes[..read.bytes.len().min(crate::channels::files::SNIFF_BYTES)];
        let sniffed = sniff(head, read.bytes.len() > head.len(), None);
        let size = read.bytes.len() as u64;
        let to = Address {
            channel: &key.channel,
            conversation: &origin.conversation,
            thread: origin.thread.as_deref(),
            reply_to: Some(&origin.message_id),
        };
        let file = OutboxFile {
            name: name.clone(),
            media_type: sniffed.media_type.clone(),
            size,
        };
        channels
            .post(
                &to,
                &comment,
                Post {
                    file: Some((file, read.bytes)),
                    ..Post::default()
                },
            )
            .map_err(|e| format!("the file could not be queued: {e}"))?;
        self.runtime.audit().record(
            crate::audit::Actor::Workspace(&key.workspace),
            Some(&key.workspace),
            crate::audit::Action::ChannelFileSent,
            &format!(
                "{path} as `{name}` ({size} bytes, {}) to conversation {} of channel `{}`",
                sniffed.media_type, origin.conversation, key.channel
            ),
        );
        Ok(format!(
            "{name} ({}, {}) is queued for this conversation; it is delivered even if the platform is slow or pincer restarts",
            size_text(size),
            sniffed.media_type
        ))
    }
}

/// `path` (relative to /workspace, or absolute beneath it) as a path
/// relative to the workspace folder; `..` is refused.
fn beneath_workspace(path: &str) -> Result<PathBuf, String> {
    let root = Path::new(pincer_runner_protocol::mounts::WORKSPACE_DIR);
    let given = Path::new(path);
    let relative = if given.is_absolute() {
        given
            .strip_prefix(root)
            .map_err(|_| format!("{path} is not beneath {}", root.display()))?
    } else {
        given
    };
    let mut out = PathBuf::new();
    for part in relative.components() {
        match part {
            Component::Normal(p) => out.push(p),
            Component::CurDir => {}
            _ => return Err(format!("{path} leads outside the workspace")),
        }
    }
    if out.as_os_str().is_empty() {
        return Err("`path` names no file".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_must_stay_beneath_the_workspace() {
        assert_eq!(
            beneath_workspace("/workspace/out/a.csv").unwrap(),
            PathBuf::from("out/a.csv")
        );
        assert_eq!(
            beneath_workspace("./a.csv").unwrap(),
            PathBuf::from("a.csv")
        );
        for bad in [
            "/etc/passwd",
            "../x",
            "a/../../x",
            "/workspace",
            "/workspacex/a",
        ] {
            assert!(beneath_workspace(bad).is_err(), "{bad}");
        }
    }
}
