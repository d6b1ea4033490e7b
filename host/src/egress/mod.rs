//! The egress proxy: a container's only way out. Every workspace container
//! runs with Docker's `network: none`; its runner relays `127.0.0.1:3128`
//! to `$PINCER_HOME/run/<ws>/gateway/egress.sock` (host-owned, mounted
//! read-only beside the gateway socket), where this proxy speaks HTTP
//! `CONNECT` and absolute-form plain HTTP ([`head`]), lets through what
//! the workspace's [`crate::policy::EgressReach`] allows, resolves names on
//! the host, connects to the address it checked and audits every
//! connection, allowed (`egress.allowed`, with bytes each way) or refused
//! (`egress.refused`, with the key to change) ([`proxy`]). A request for
//! `http://SERVICE.tunnel/…` goes to the tunnel plugin serving SERVICE
//! instead ([`tunnel`]).
//!
//! Whichever pincer process runs a workspace's command serves its proxy:
//! the daemon, or a one-shot command for its length; a process that finds
//! the socket answered by another leaves it to that one
//! ([`EgressProxies::start`]).

mod ask;
mod head;
mod proxy;
#[cfg(test)]
mod tests;
mod tunnel;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::audit::AuditLog;
use crate::policy::Reaches;

pub use ask::{Asking, Listening, Question};
pub use head::{BadHead, Head, MAX_HEAD_BYTES, parse as parse_head};
pub use proxy::Limits;
pub use tunnel::{Refusal as TunnelRefusal, Tunnels};

/// The host path of `workspace`'s egress socket.
pub fn socket_path(home: &Path, workspace: &str) -> PathBuf {
    pincer_runner_protocol::mounts::gateway_dir(&home.join("run").join(workspace))
        .join("egress.sock")
}

/// The sockets this process serves, by path: a later start in this
/// process (a configuration reload) takes them over instead of leaving
/// them to a server it is about to drop.
static SERVED: LazyLock<Mutex<HashMap<PathBuf, tokio::task::AbortHandle>>> =
    LazyLock::new(Mutex::default);

fn served() -> std::sync::MutexGuard<'static, HashMap<PathBuf, tokio::task::AbortHandle>> {
    SERVED
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Who answers one workspace's egress socket.
enum Serving {
    Here(PathBuf, JoinHandle<()>),
    Elsewhere,
    Failed(String),
}

/// The egress proxies this process serves (or found served).
pub struct EgressProxies {
    serving: HashMap<String, Serving>,
    asking: Asking,
    /// Connections this process's proxies are handling.
    open: Arc<std::sync::atomic::AtomicUsize>,
}

/// What every workspace's proxy works with.
pub struct Parts {
    pub audit: Arc<AuditLog>,
    pub limits: Limits,
    pub tunnels: Arc<Tunnels>,
    /// The running turns that ask about unlisted hosts.
    pub asking: Asking,
    /// Where "always" decisions on egress are stored; `None`: none are
    /// read.
    pub approvals: Option<Arc<crate::approvals::Approvals>>,
}

impl Parts {
    /// Audit only: default limits, no tunnels, nobody to ask.
    pub fn new(audit: &Arc<AuditLog>) -> Self {
        Parts {
            audit: audit.clone(),
            limits: Limits::default(),
            tunnels: Arc::default(),
            asking: Asking::default(),
            approvals: None,
        }
    }
}

impl EgressProxies {
    /// Serves the proxy of each workspace of `reaches` on its socket,
    /// except where another process answers it already. A socket that
    /// cannot be served leaves that workspace with no way out (its
    /// runner answers 502), said once here.
    pub fn start(home: &Path, reaches: &Reaches, parts: Parts) -> Self {
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let serving = reaches
            .iter()
            .map(|(workspace, reach)| {
                let path = socket_path(home, workspace);
                let ours = served().remove(&path);
                if let Some(previous) = &ours {
                    previous.abort();
                }
                let serving = if ours.is_none()
                    && std::os::unix::net::UnixStream::connect(&path).is_ok()
                {
                    Serving::Elsewhere
                } else {
                    let proxy = proxy::Proxy {
                        workspace: workspace.clone(),
                        reach: reach.egress.clone(),
                        audit: parts.audit.clone(),
                        limits: parts.limits,
                        budget: proxy::Budget::default(),
                        tunnels: parts.tunnels.clone(),
                        asking: parts.asking.clone(),
                        approvals: parts.approvals.clone(),
                        open: open.clone(),
                    };
                    match bind(&path) {
                        Ok(listener) => {
                            let task = tokio::spawn(Arc::new(proxy).serve(listener));
                            served().insert(path.clone(), task.abort_handle());
                            Serving::Here(path, task)
                        }
                        Err(e) => {
                            let why = format!(
                                "cannot serve the egress proxy of workspace `{workspace}` on {}: {e:#}",
                                path.display()
                            );
                            tracing::warn!("{why}");
                            Serving::Failed(why)
                        }
                    }
                };
                (workspace.clone(), serving)
            })
            .collect();
        Self {
            serving,
            asking: parts.asking,
            open,
        }
    }

    /// Waits, at most `within`, for the connections this process's proxies
    /// handle to end, so each is audited before a one-shot command exits.
    pub async fn close(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.open.load(std::sync::atomic::Ordering::SeqCst) > 0
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Where a running turn listens for questions about its workspace's
    /// connections (`egress_ask`).
    pub fn asking(&self) -> &Asking {
        &self.asking
    }

    /// `Ok` when this process or another serves `workspace`'s proxy.
    // String: shown as is.
    pub fn check(&self, workspace: &str) -> Result<(), String> {
        match self.serving.get(workspace) {
            Some(Serving::Here(_, task)) if !task.is_finished() => Ok(()),
            Some(Serving::Here(..)) => Err(format!(
                "the egress proxy of workspace `{workspace}` stopped; restart pincer"
            )),
            Some(Serving::Elsewhere) => Ok(()),
            Some(Serving::Failed(why)) => Err(why.clone()),
            None => Err(format!(
                "workspace `{workspace}` has no egress proxy in this process"
            )),
        }
    }
}

impl Drop for EgressProxies {
    fn drop(&mut self) {
        let mut served = served();
        for serving in self.serving.values() {
            if let Serving::Here(path, task) = serving {
                task.abort();
                if served.get(path).is_some_and(|h| h.id() == task.id()) {
                    served.remove(path);
                }
            }
        }
    }
}

/// Binds the socket in its host-owned folder (0755, mounted read-only:
/// no container can rename or relink its entries, so remove, bind and
/// chmod by path are safe here).
fn bind(path: &Path) -> anyhow::Result<tokio::net::UnixListener> {
    use anyhow::Context as _;
    if let Some(dir) = path.parent() {
        crate::containers::ensure_dir(dir, 0o755, None)
            .with_context(|| format!("preparing {}", dir.display()))?;
    }
    let _ = std::fs::remove_file(path);
    let listener = tokio::net::UnixListener::bind(path)
        .with_context(|| format!("binding {}", path.display()))?;
    // The container's user must be able to connect; the allowlist decides.
    std::fs::set_permissions(
        path,
        <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o666),
    )?;
    Ok(listener)
}
