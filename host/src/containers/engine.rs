//! What pincer asks of whatever runs its workspace containers. The
//! [`ContainerRuntime`](super::ContainerRuntime) holds the rules (one
//! container per workspace, verified against its policy on every use, fail
//! closed, replaced when it died, frozen when idle); an engine only creates,
//! reports, freezes, stops and removes. Docker ([`super::docker`]) is the one
//! implementation; docs/architecture.md ("Past one machine") says how a
//! Kubernetes one would fill the same trait.
//!
//! An engine reports what it applied in engine-neutral terms ([`Applied`]),
//! so the comparison with the policy ([`super::spec`]) is pincer's own and
//! the same for every engine.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use super::cgroup::Counters;
use super::image::Built;
use super::spec::WorkspaceSpec;
use super::{ContainerError, ContainerStatus};

#[async_trait]
pub trait ContainerEngine: Send + Sync {
    /// Creates the container `spec` describes, labelled with its spec
    /// `digest` and with `env` added to its environment, and starts it; its
    /// id. A container that was created and did not start is removed.
    async fn create_and_start(
        &self,
        spec: &WorkspaceSpec,
        digest: &str,
        env: &[String],
    ) -> Result<String, ContainerError>;

    /// The container by name or id; `None` when there is none.
    async fn inspect(&self, name_or_id: &str) -> Result<Option<Observed>, ContainerError>;

    /// The workspace containers labelled with `instance`.
    async fn list(&self, instance: &str) -> Result<Vec<ContainerStatus>, ContainerError>;

    /// Freezes a running container: it keeps its memory and gets no CPU.
    async fn pause(&self, id: &str) -> Result<(), ContainerError>;

    async fn unpause(&self, name_or_id: &str) -> Result<(), ContainerError>;

    /// Stops a running container, killing it after `grace`.
    async fn stop(&self, name_or_id: &str, grace: Duration) -> Result<(), ContainerError>;

    /// Kills and removes a container (thawing it first); `Ok` when there
    /// was none.
    async fn remove(&self, name_or_id: &str) -> Result<(), ContainerError>;

    /// Builds (or confirms) the default image `tag` offline; `progress`
    /// receives one line per step.
    async fn build_image(
        &self,
        tag: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<Built, ContainerError>;

    async fn has_image(&self, tag: &str) -> bool;

    /// The kernel's counters of the container's cgroup (OOM kills, forks
    /// refused at the pids limit).
    fn counters(&self, id: &str) -> Counters;
}

/// A container as its engine reports it.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    pub id: String,
    pub state: RunState,
    /// The spec digest it was created with (`pincer.spec`).
    pub spec_digest: Option<String>,
    pub applied: Applied,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunState {
    pub running: bool,
    pub paused: bool,
    pub exit_code: i64,
    pub oom_killed: bool,
    /// The engine's reason it could not run, if it gave one.
    pub error: Option<String>,
}

/// The settings a started container actually has, read back from its
/// engine, in the terms of [`crate::policy::ContainerSettings`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Applied {
    pub image: String,
    pub user: String,
    pub network_mode: String,
    /// The networks it is attached to, sorted.
    pub networks: Vec<String>,
    pub memory_bytes: i64,
    pub memory_swap_bytes: i64,
    pub nano_cpus: i64,
    pub pids_limit: i64,
    /// Every resource limit, `name=soft:hard`, sorted.
    pub ulimits: Vec<String>,
    pub cap_drop: Vec<String>,
    pub cap_add: Vec<String>,
    pub security_opt: Vec<String>,
    pub read_only_rootfs: bool,
    /// Mount point to options.
    pub tmpfs: BTreeMap<String, String>,
    /// Every mount, `source:target:ro|rw`, sorted.
    pub mounts: Vec<String>,
}
