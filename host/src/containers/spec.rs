//! What one workspace's container must be: computed from its config and
//! effective policy, and compared with what its engine reports after start
//! (the engine turns it into its own terms: [`super::docker`]).

use std::path::PathBuf;

use super::mounts::BindMount;
use crate::policy::ContainerSettings;

pub const LABEL_WORKSPACE: &str = "pincer.workspace";
pub const LABEL_INSTANCE: &str = "pincer.instance";
/// Hash of the spec; a container whose spec changed is recreated.
pub const LABEL_SPEC: &str = "pincer.spec";

pub use pincer_runner_protocol::mounts::{RUNNER_PATH, WORKSPACE_DIR, gateway_dir, runner_dir};

#[derive(Debug, Clone)]
pub struct WorkspaceSpec {
    pub workspace: String,
    pub instance: String,
    pub container_name: String,
    pub image: String,
    pub settings: ContainerSettings,
    /// Host folder mounted at `/workspace`.
    pub workspace_dir: PathBuf,
    /// The workspace folder is pincer's own (beneath
    /// `containers.workspace_base_path`), so one an earlier version made
    /// for its container user 1000 is handed to the current user.
    pub managed_dir: bool,
    /// Users this workspace's container may have run as before (pincer's
    /// old `1000:1000`, the baseline's, its own `per-workspace` uid): a
    /// managed folder one of them owns is handed to the current user.
    pub earlier_users: Vec<(u32, u32)>,
    /// Host folder `$PINCER_HOME/run/<ws>`, never mounted itself: its
    /// `gateway/` is mounted read-only at [`pincer_runner_protocol::mounts::GATEWAY_DIR`], its `runner/`
    /// read-write at [`pincer_runner_protocol::mounts::RUNNER_DIR`].
    pub run_dir: PathBuf,
    /// The static runner binary on the host.
    pub runner_binary: PathBuf,
    /// Extra mounts from config, sources validated.
    pub mounts: Vec<BindMount>,
    /// The runner exits (stopping the container) after this long unused
    /// (`containers.idle.stop_after`); 0: never.
    pub stop_after_secs: u64,
}

impl WorkspaceSpec {
    /// Host folder of the gateway socket (host-owned; read-only in the container).
    pub fn gateway_dir(&self) -> PathBuf {
        gateway_dir(&self.run_dir)
    }

    /// Host folder of the runner socket (the container's; never followed by name).
    pub fn runner_dir(&self) -> PathBuf {
        runner_dir(&self.run_dir)
    }

    /// Every bind mount, with its effective mode.
    pub fn all_mounts(&self) -> Vec<BindMount> {
        let mut all = pincer_mounts(&self.workspace_dir, &self.runner_binary, &self.run_dir);
        for mount in &self.mounts {
            all.push(BindMount {
                read_only: mount.read_only || self.settings.mounts_read_only,
                ..mount.clone()
            });
        }
        all
    }

    pub fn runner_policy_json(&self) -> String {
        serde_json::to_string(&self.settings.runner).unwrap_or_else(|_| "{}".into())
    }

    /// A short stable digest of everything that shapes the container.
    pub fn digest(&self) -> String {
        use sha2::{Digest, Sha256};
        // From pincer's own ordered types: Docker's create body holds
        // HashMaps, whose order would change the digest from run to run.
        let settings = serde_json::to_string(&self.settings).unwrap_or_default();
        let shape = format!(
            "{}|{settings}|{:?}|{}",
            self.image,
            self.all_mounts(),
            self.stop_after_secs
        );
        hex::encode(&Sha256::digest(shape.as_bytes())[..8])
    }

    /// The container's environment (the gateway's address is the
    /// runtime's to add).
    pub fn env(&self) -> Vec<String> {
        vec![
            format!(
                "{}={}",
                pincer_runner_protocol::POLICY_ENV,
                self.runner_policy_json()
            ),
            format!(
                "{}={}",
                pincer_runner_protocol::IDLE_ENV,
                self.stop_after_secs
            ),
            "PATH=/usr/local/bin:/usr/bin:/bin".into(),
        ]
    }
}

/// The mounts pincer gives every container, before the configured ones
/// ([`pincer_runner_protocol::mounts::pincer_mounts`]).
pub fn pincer_mounts(
    workspace_dir: &std::path::Path,
    runner_binary: &std::path::Path,
    run_dir: &std::path::Path,
) -> Vec<BindMount> {
    pincer_runner_protocol::mounts::pincer_mounts(workspace_dir, runner_binary, run_dir)
        .into_iter()
        .map(|m| BindMount {
            source: m.source,
            target: m.target.to_owned(),
            read_only: m.read_only,
        })
        .collect()
}

/// `items` sorted and joined by `,`, for comparing lists.
pub(super) fn sorted(items: &[String]) -> String {
    let mut items = items.to_vec();
    items.sort();
    items.join(",")
}
