//! The gateway sockets of the workspaces (`$PINCER_HOME/run/<ws>/gateway/
//! gateway.sock`, mounted into each container). The composition root starts
//! them once, before any turn; a turn only asks whether its workspace's
//! socket answers, and never starts a listener itself.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::task::JoinHandle;

use super::server::{Gateway, workspace_socket};

/// Who answers one workspace's socket.
enum Serving {
    /// This process, until the task ends.
    Here(JoinHandle<anyhow::Result<()>>),
    /// Another pincer process (`pincer start`, `pincer gateway serve`)
    /// answered it when this one started.
    Elsewhere(PathBuf),
    /// Nobody: why this process could not serve it.
    Failed(String),
}

/// The workspace sockets this process serves, or found served.
pub struct WorkspaceSockets {
    sockets: HashMap<String, Serving>,
}

impl WorkspaceSockets {
    /// Serves each of `workspaces`' sockets, except those another process
    /// already answers. A socket that cannot be served is remembered and
    /// reported by [`Self::check`] for each turn of its workspace.
    pub fn start<'a>(
        gateway: &Arc<Gateway>,
        home: &Path,
        workspaces: impl IntoIterator<Item = &'a String>,
    ) -> Self {
        let sockets = workspaces
            .into_iter()
            .map(|workspace| {
                let path = workspace_socket(home, workspace);
                let serving = if std::os::unix::net::UnixStream::connect(&path).is_ok() {
                    Serving::Elsewhere(path)
                } else {
                    match gateway.serve_workspace_socket(home, workspace) {
                        Ok(task) => Serving::Here(task),
                        Err(e) => Serving::Failed(format!(
                            "cannot serve the gateway for `{workspace}`: {e:#}"
                        )),
                    }
                };
                (workspace.clone(), serving)
            })
            .collect();
        Self { sockets }
    }

    /// `Ok` when `workspace`'s socket answers; else why not.
    // String: the reason is the text of the turn's `GatewayUnreachable` event.
    pub fn check(&self, workspace: &str) -> Result<(), String> {
        match self.sockets.get(workspace) {
            Some(Serving::Here(task)) if !task.is_finished() => Ok(()),
            Some(Serving::Here(_)) => Err(format!(
                "the gateway socket of workspace `{workspace}` stopped; restart pincer"
            )),
            Some(Serving::Elsewhere(path)) => std::os::unix::net::UnixStream::connect(path)
                .map(drop)
                .map_err(|e| {
                    format!(
                        "the pincer process that served the gateway socket {} no longer answers ({e}); restart pincer",
                        path.display()
                    )
                }),
            Some(Serving::Failed(why)) => Err(why.clone()),
            None => Err(format!(
                "workspace `{workspace}` has no gateway socket in this process"
            )),
        }
    }
}

impl Drop for WorkspaceSockets {
    fn drop(&mut self) {
        for serving in self.sockets.values() {
            if let Serving::Here(task) = serving {
                task.abort();
            }
        }
    }
}
