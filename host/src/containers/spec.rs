//! What one workspace's container must be: computed from its config and
//! effective policy, turned into Docker's create body, and compared with
//! what Docker reports after start.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;

use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, HostConfig, Mount, MountType, ResourcesUlimits,
};

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

    pub fn create_body(&self) -> ContainerCreateBody {
        let s = &self.settings;
        let labels = HashMap::from([
            (LABEL_WORKSPACE.to_string(), self.workspace.clone()),
            (LABEL_INSTANCE.to_string(), self.instance.clone()),
        ]);
        ContainerCreateBody {
            image: Some(self.image.clone()),
            entrypoint: Some(vec![RUNNER_PATH.into(), "serve".into()]),
            cmd: Some(vec![]),
            env: Some(vec![
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
            ]),
            user: Some(s.user.clone()),
            working_dir: Some(WORKSPACE_DIR.into()),
            labels: Some(labels),
            host_config: Some(host_config(s, &self.all_mounts())),
            ..Default::default()
        }
    }

    /// Differences between this spec and a started container, one line each;
    /// empty when every setting took effect.
    pub fn mismatches(&self, actual: &ContainerInspectResponse) -> Vec<String> {
        let s = &self.settings;
        let mut diffs = settings_mismatches(s, &self.image, &self.all_mounts(), actual);
        let mut check = |what: &str, want: String, got: String| {
            if want != got {
                diffs.push(format!("{what}: wanted {want}, found {got}"));
            }
        };
        // Runtimes have been seen attaching a network to a `none` container.
        let networks: Vec<String> = actual
            .network_settings
            .as_ref()
            .and_then(|n| n.networks.as_ref())
            .map(|n| {
                let mut names: Vec<String> = n.keys().cloned().collect();
                names.sort();
                names
            })
            .unwrap_or_default();
        let want_networks = if s.network_mode == "none" {
            "none".to_string()
        } else {
            s.network_mode.clone()
        };
        check("attached networks", want_networks, networks.join(","));
        diffs
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

/// The Docker host settings that enforce `s`, with `mounts` bound in: one
/// for workspace containers and MCP server containers alike.
pub fn host_config(s: &ContainerSettings, mounts: &[BindMount]) -> HostConfig {
    HostConfig {
        network_mode: Some(s.network_mode.clone()),
        memory: Some(s.memory_bytes),
        memory_swap: Some(s.memory_swap_bytes),
        nano_cpus: Some(s.nano_cpus),
        pids_limit: Some(s.pids_limit),
        ulimits: Some(vec![ResourcesUlimits {
            name: Some("nofile".into()),
            soft: Some(s.nofile),
            hard: Some(s.nofile),
        }]),
        cap_drop: Some(s.cap_drop.clone()),
        cap_add: Some(s.cap_add.clone()),
        security_opt: Some(s.security_opt.clone()),
        readonly_rootfs: Some(s.read_only_rootfs),
        tmpfs: Some(s.tmpfs.clone().into_iter().collect()),
        mounts: Some(
            mounts
                .iter()
                .map(|m| Mount {
                    target: Some(m.target.clone()),
                    source: Some(m.source.display().to_string()),
                    typ: Some(MountType::BIND),
                    read_only: Some(m.read_only),
                    ..Default::default()
                })
                .collect(),
        ),
        init: Some(false),
        ..Default::default()
    }
}

/// What [`host_config`] asked for that the started container `actual` does
/// not have (running, image, user, every limit and option, the mounts), one
/// line each. The attached networks are the caller's to check: how a
/// `none` container shows them differs by how it was created.
pub fn settings_mismatches(
    s: &ContainerSettings,
    image: &str,
    mounts: &[BindMount],
    actual: &ContainerInspectResponse,
) -> Vec<String> {
    let mut diffs = Vec::new();
    let mut check = |what: &str, want: String, got: String| {
        if want != got {
            diffs.push(format!("{what}: wanted {want}, found {got}"));
        }
    };
    let host = actual.host_config.clone().unwrap_or_default();
    let config = actual.config.clone().unwrap_or_default();
    let running = actual
        .state
        .as_ref()
        .and_then(|st| st.running)
        .unwrap_or(false);
    check("running", "true".into(), running.to_string());
    check("image", image.to_owned(), config.image.unwrap_or_default());
    check("user", s.user.clone(), config.user.unwrap_or_default());
    check(
        "network mode",
        s.network_mode.clone(),
        host.network_mode.unwrap_or_default(),
    );
    check(
        "memory",
        s.memory_bytes.to_string(),
        host.memory.unwrap_or(0).to_string(),
    );
    check(
        "memory+swap",
        s.memory_swap_bytes.to_string(),
        host.memory_swap.unwrap_or(0).to_string(),
    );
    check(
        "cpus (nano)",
        s.nano_cpus.to_string(),
        host.nano_cpus.unwrap_or(0).to_string(),
    );
    check(
        "pids limit",
        s.pids_limit.to_string(),
        host.pids_limit.unwrap_or(0).to_string(),
    );
    // Every ulimit the container has, so one added behind pincer's back
    // (or a daemon default in place of ours) is a difference too.
    let mut ulimits: Vec<String> = host
        .ulimits
        .unwrap_or_default()
        .iter()
        .map(|u| {
            format!(
                "{}={}:{}",
                u.name.clone().unwrap_or_default(),
                u.soft.unwrap_or(-1),
                u.hard.unwrap_or(-1)
            )
        })
        .collect();
    ulimits.sort();
    check(
        "ulimits",
        format!("nofile={0}:{0}", s.nofile),
        ulimits.join(","),
    );
    check(
        "cap_drop",
        sorted(&s.cap_drop),
        sorted(&host.cap_drop.unwrap_or_default()),
    );
    check(
        "cap_add",
        sorted(&s.cap_add),
        sorted(&host.cap_add.unwrap_or_default()),
    );
    check(
        "security options",
        sorted(&s.security_opt),
        sorted(&host.security_opt.unwrap_or_default()),
    );
    check(
        "read-only root filesystem",
        s.read_only_rootfs.to_string(),
        host.readonly_rootfs.unwrap_or(false).to_string(),
    );
    let tmpfs: BTreeMap<String, String> = host.tmpfs.unwrap_or_default().into_iter().collect();
    check("tmpfs", format!("{:?}", s.tmpfs), format!("{tmpfs:?}"));
    let mut want: Vec<String> = mounts
        .iter()
        .map(|m| {
            format!(
                "{}:{}:{}",
                m.source.display(),
                m.target,
                if m.read_only { "ro" } else { "rw" }
            )
        })
        .collect();
    let mut got: Vec<String> = actual
        .mounts
        .clone()
        .unwrap_or_default()
        .iter()
        .map(|m| {
            format!(
                "{}:{}:{}",
                m.source.clone().unwrap_or_default(),
                m.destination.clone().unwrap_or_default(),
                if m.rw.unwrap_or(true) { "rw" } else { "ro" }
            )
        })
        .collect();
    want.sort();
    got.sort();
    check("mounts", want.join(", "), got.join(", "));
    diffs
}
