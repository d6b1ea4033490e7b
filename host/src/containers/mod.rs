//! Workspace containers: the offline agent image, one container per
//! workspace with its policy applied and verified, and the agent runner
//! inside it reached over a unix socket. The rules are engine-neutral
//! ([`ContainerRuntime`]); the Docker Engine (bollard) is the one
//! [`ContainerEngine`].

mod agent_binary;
pub mod beneath;
mod cgroup;
mod docker;
mod engine;
#[cfg(test)]
mod engine_tests;
mod frozen;
pub mod idle;
mod image;
mod in_use;
mod mcp;
mod mounts;
mod runner_client;
mod runtime;
mod spec;
mod users;
mod verify;

use std::path::Path;

pub use agent_binary::{install as install_runner, path as runner_path, size as runner_size};
pub use beneath::{
    BeneathError, ensure_dir, open_dir, read_regular_absolute, read_regular_beneath,
};
pub use engine::{Applied, ContainerEngine, Observed, RunState};
pub use frozen::Frozen;
pub use image::{BUSYBOX, Built, DEFAULT_IMAGE};
pub use in_use::{InUse, Unused};
pub use mcp::{McpContainers, server_policy, volume_problems, volumes_as_written};
pub use mounts::{
    BindMount, MountError, check_source, check_workspace_folder, protected_paths,
    workspace_folders, writable_sources,
};
pub use pincer_runner_protocol::ErrorKind as ExecErrorKind;
pub use runner_client::{RunnerAddr, RunnerError, turn as runner_turn};
pub(crate) use runtime::instance_id;
pub use runtime::{
    ContainerRuntime, ContainerStatus, Ensured, ExecOutcome, GrantError, GrantMinter, Lifecycle,
};
pub use runtime::{ensure_workspace_dir, parse_user, runner_addr};
pub use spec::{LABEL_INSTANCE, LABEL_WORKSPACE, WorkspaceSpec};
pub use users::allocated_at as allocated_user;
pub use users::create_table as create_user_table;

use crate::config::{Config, expand_tilde};
use crate::policy::{EffectivePolicy, PolicyCatalog};

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    #[error("{0}")]
    Docker(String),
    #[error("{0}")]
    Image(String),
    #[error("{0}")]
    Host(String),
    #[error("no workspace named `{0}` in the configuration")]
    UnknownWorkspace(String),
    #[error("workspace {workspace}: {source}")]
    Mount {
        workspace: String,
        source: mounts::MountError,
    },
    #[error(transparent)]
    Policy(#[from] crate::policy::PolicyError),
    #[error(
        "workspace {workspace}: its policy could not be applied, so its container was removed (fail closed): {}",
        problems.join("; ")
    )]
    PolicyNotApplied {
        workspace: String,
        problems: Vec<String>,
    },
    #[error(
        "workspace {workspace}: the container died during the command ({detail}); the next command starts a fresh one"
    )]
    Died { workspace: String, detail: String },
    #[error("{}", describe_exec_error(kind, message))]
    Exec {
        kind: ExecErrorKind,
        message: String,
    },
    #[error(transparent)]
    Runner(#[from] runner_client::RunnerError),
}

fn describe_exec_error(kind: &ExecErrorKind, message: &str) -> String {
    match kind {
        ExecErrorKind::PermissionDenied => format!("permission denied: {message}"),
        ExecErrorKind::NotFound => format!("not found: {message}"),
        _ => message.to_string(),
    }
}

/// Everything needed to run a workspace: its effective policy and the
/// container spec compiled from it. Mount sources are validated here.
pub fn plan(
    config: &Config,
    home: &Path,
    instance: &str,
    workspace: &str,
) -> Result<(EffectivePolicy, WorkspaceSpec), ContainerError> {
    let ws = config
        .workspaces
        .get(workspace)
        .ok_or_else(|| ContainerError::UnknownWorkspace(workspace.to_string()))?;
    let catalog = PolicyCatalog::load(&config.containers.policy_dirs)?;
    let policy = catalog.effective(workspace, &ws.policies)?;
    let mut settings = crate::policy::ContainerSettings {
        nofile: i64::try_from(config.containers.nofile).unwrap_or(i64::MAX),
        ..policy.compile()
    };
    let state = config.state.location(home).map_err(ContainerError::Host)?;
    let users = users::resolve_at(&state, workspace, &settings.user)?;
    settings.user = users.user;
    let workspace_base = expand_tilde(&config.containers.workspace_base_path);
    let workspace_dir = config.workspace_dir(workspace);
    mounts::check_workspace_folder(&workspace_dir, home, &workspace_base).map_err(|source| {
        ContainerError::Mount {
            workspace: workspace.to_string(),
            source,
        }
    })?;
    let mut protected = mounts::protected_paths(home, &workspace_base);
    protected.extend(mounts::writable_sources(config));
    protected.extend(mounts::workspace_folders(config));
    let mut extra = Vec::new();
    for mount in &ws.mounts {
        let source = mounts::check_source(&mount.source, &protected).map_err(|source| {
            ContainerError::Mount {
                workspace: workspace.to_string(),
                source,
            }
        })?;
        extra.push(mounts::BindMount {
            source,
            target: mount.target.clone(),
            read_only: mount.read_only,
        });
    }
    let spec = WorkspaceSpec {
        workspace: workspace.to_string(),
        instance: instance.to_string(),
        container_name: format!("pincer-{instance}-{workspace}"),
        image: config.containers.image.clone(),
        settings,
        managed_dir: workspace_dir.starts_with(&workspace_base),
        earlier_users: users.earlier,
        workspace_dir,
        run_dir: home.join("run").join(workspace),
        runner_binary: agent_binary::install(home)?,
        mounts: extra,
        stop_after_secs: config
            .idleness(workspace)
            .stop_after
            .map_or(0, |after| after.as_secs()),
    };
    Ok((policy, spec))
}
