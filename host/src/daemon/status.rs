//! What `pincer status` shows of a running daemon: it writes a snapshot to
//! `$PINCER_HOME/run/status.json` every second (and removes it when it
//! stops); `pincer status` adds what the database and Docker say.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::channels::{ChannelHost, ConnectionStatus};
use crate::config::Config;
use crate::router::scheduled::{Schedules, WorkspaceSchedule};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    pub pid: u32,
    pub started_ms: i64,
    pub updated_ms: i64,
    pub gateway: String,
    pub webhooks: Option<String>,
    /// Where the web console listens (the bound address: a configured
    /// port 0 shows the port picked).
    #[serde(default)]
    pub console: Option<String>,
    pub workspaces: Vec<String>,
    pub channels: BTreeMap<String, ChannelSnapshot>,
    /// Each workspace's schedule: tasks loaded, and a problem if its file
    /// is refused.
    #[serde(default)]
    pub schedules: BTreeMap<String, WorkspaceSchedule>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChannelSnapshot {
    pub plugin: String,
    pub workspace: String,
    #[serde(flatten)]
    pub connection: ConnectionStatus,
}

pub fn path(home: &Path) -> PathBuf {
    home.join("run").join("status.json")
}

#[derive(Clone)]
pub struct Reporter {
    file: PathBuf,
    config: Arc<Config>,
    channels: Arc<ChannelHost>,
    schedules: Arc<Schedules>,
    gateway: String,
    webhooks: Option<String>,
    console: Option<String>,
    started_ms: i64,
}

/// Where a running daemon's TCP listeners are bound.
pub struct Bound {
    pub gateway: std::net::SocketAddr,
    pub webhooks: Option<std::net::SocketAddr>,
    pub console: Option<std::net::SocketAddr>,
}

impl Reporter {
    pub fn new(
        home: &Path,
        config: Config,
        channels: Arc<ChannelHost>,
        schedules: Arc<Schedules>,
        bound: &Bound,
    ) -> Self {
        Self {
            file: path(home),
            config: Arc::new(config),
            channels,
            schedules,
            gateway: bound.gateway.to_string(),
            webhooks: bound.webhooks.map(|a| a.to_string()),
            console: bound.console.map(|a| a.to_string()),
            started_ms: crate::db::now_ms(),
        }
    }

    pub fn snapshot(&self) -> Snapshot {
        let status = self.channels.status();
        let channels = self
            .config
            .channels
            .iter()
            .map(|(name, c)| {
                (
                    name.clone(),
                    ChannelSnapshot {
                        plugin: c.plugin.clone(),
                        workspace: c.workspace.clone(),
                        connection: status.get(name).cloned().unwrap_or_default(),
                    },
                )
            })
            .collect();
        Snapshot {
            pid: std::process::id(),
            started_ms: self.started_ms,
            updated_ms: crate::db::now_ms(),
            gateway: self.gateway.clone(),
            webhooks: self.webhooks.clone(),
            console: self.console.clone(),
            workspaces: self.config.workspaces.keys().cloned().collect(),
            channels,
            schedules: self.schedules.summary(),
        }
    }

    /// Writes the snapshot now (the daemon does before its banner, so a
    /// command run after the banner finds the bound addresses).
    pub fn write(&self) {
        let Ok(text) = serde_json::to_vec_pretty(&self.snapshot()) else {
            return;
        };
        let tmp = self.file.with_extension("json.tmp");
        if std::fs::write(&tmp, text).is_ok() {
            let _ = std::fs::rename(&tmp, &self.file);
        }
    }

    pub async fn run(self, mut stop: tokio::sync::watch::Receiver<bool>) {
        loop {
            self.write();
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
        }
    }

    pub fn clear(&self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

/// The running daemon's snapshot, if one is running (a snapshot older
/// than a few seconds is from a daemon that died).
pub fn read(home: &Path) -> Option<Snapshot> {
    let text = std::fs::read(path(home)).ok()?;
    let snapshot: Snapshot = serde_json::from_slice(&text).ok()?;
    (crate::db::now_ms() - snapshot.updated_ms < 5000).then_some(snapshot)
}
