//! The Docker Engine as pincer's [`ContainerEngine`] (bollard): a
//! workspace's spec turned into Docker's create body, and what Docker
//! reports read back into [`Applied`] for the runtime to verify.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use async_trait::async_trait;
use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, ContainerInspectResponse, ContainerSummary, HostConfig, Mount, MountType,
    ResourcesUlimits,
};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, KillContainerOptions,
    ListContainersOptionsBuilder, RemoveContainerOptionsBuilder, StartContainerOptions,
    StopContainerOptionsBuilder,
};

use super::cgroup::Counters;
use super::engine::{Applied, ContainerEngine, Observed, RunState};
use super::image::Built;
use super::mounts::BindMount;
use super::spec::WorkspaceSpec;
use super::spec::{LABEL_INSTANCE, LABEL_SPEC, LABEL_WORKSPACE, RUNNER_PATH, WORKSPACE_DIR};
use super::{ContainerError, ContainerStatus};
use crate::policy::ContainerSettings;

pub struct DockerEngine {
    docker: Docker,
}

impl DockerEngine {
    /// Connects to the local Docker Engine and agrees on an API version.
    pub async fn connect() -> Result<Self, ContainerError> {
        Ok(Self {
            docker: connect().await?,
        })
    }
}

/// A client of the local Docker Engine that has agreed on an API version.
pub async fn connect() -> Result<Docker, ContainerError> {
    Docker::connect_with_socket_defaults()
        .map_err(|e| ContainerError::Docker(format!("cannot connect to the Docker Engine: {e}")))?
        .negotiate_version()
        .await
        .map_err(|e| {
            ContainerError::Docker(format!(
                "the Docker Engine does not answer ({e}); is it running? (`pincer doctor`)"
            ))
        })
}

#[async_trait]
impl ContainerEngine for DockerEngine {
    async fn create_and_start(
        &self,
        spec: &WorkspaceSpec,
        digest: &str,
        env: &[String],
    ) -> Result<String, ContainerError> {
        let mut body = create_body(spec);
        if let Some(labels) = body.labels.as_mut() {
            labels.insert(LABEL_SPEC.into(), digest.into());
        }
        if let Some(all) = body.env.as_mut() {
            all.extend_from_slice(env);
        }
        let options = CreateContainerOptionsBuilder::default()
            .name(&spec.container_name)
            .build();
        let created = self
            .docker
            .create_container(Some(options), body)
            .await
            .map_err(|e| {
                if is_not_found(&e) {
                    ContainerError::Image(format!(
                        "image {} is not on this Docker Engine; build the default one with `pincer image build` (nothing is ever pulled)",
                        spec.image
                    ))
                } else {
                    ContainerError::Docker(format!(
                        "creating the container for {}: {}",
                        spec.workspace,
                        clean(&e)
                    ))
                }
            })?;
        if let Err(e) = self
            .docker
            .start_container(&created.id, None::<StartContainerOptions>)
            .await
        {
            let _ = self.remove(&spec.container_name).await;
            return Err(ContainerError::PolicyNotApplied {
                workspace: spec.workspace.clone(),
                problems: vec![format!("the container did not start: {}", clean(&e))],
            });
        }
        Ok(created.id)
    }

    async fn inspect(&self, name_or_id: &str) -> Result<Option<Observed>, ContainerError> {
        match self
            .docker
            .inspect_container(name_or_id, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => Ok(Some(observed(&c))),
            Err(e) if is_not_found(&e) => Ok(None),
            Err(e) => Err(ContainerError::Docker(format!(
                "inspecting {name_or_id}: {}",
                clean(&e)
            ))),
        }
    }

    async fn list(&self, instance: &str) -> Result<Vec<ContainerStatus>, ContainerError> {
        // Workspace containers only (MCP server containers carry the
        // instance label too: `containers::mcp` owns them).
        Ok(labelled(&self.docker, instance, LABEL_WORKSPACE)
            .await?
            .into_iter()
            .map(|c| ContainerStatus {
                workspace: c
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_WORKSPACE))
                    .cloned()
                    .unwrap_or_default(),
                name: name_of(&c).unwrap_or_default(),
                id: c.id.unwrap_or_default(),
                state: c.state.map(|s| s.to_string()).unwrap_or_default(),
                status: c.status.unwrap_or_default(),
            })
            .collect())
    }

    async fn pause(&self, id: &str) -> Result<(), ContainerError> {
        self.docker
            .pause_container(id)
            .await
            .map_err(|e| ContainerError::Docker(format!("pausing {id}: {}", clean(&e))))
    }

    async fn unpause(&self, name_or_id: &str) -> Result<(), ContainerError> {
        self.docker
            .unpause_container(name_or_id)
            .await
            .map_err(|e| ContainerError::Docker(format!("unpausing {name_or_id}: {}", clean(&e))))
    }

    async fn stop(&self, name_or_id: &str, grace: Duration) -> Result<(), ContainerError> {
        let seconds = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        let options = StopContainerOptionsBuilder::default().t(seconds).build();
        self.docker
            .stop_container(name_or_id, Some(options))
            .await
            .map_err(|e| ContainerError::Docker(format!("stopping {name_or_id}: {}", clean(&e))))
    }

    async fn remove(&self, name_or_id: &str) -> Result<(), ContainerError> {
        remove(&self.docker, name_or_id).await
    }

    async fn build_image(
        &self,
        tag: &str,
        progress: &mut (dyn for<'a> FnMut(&'a str) + Send),
    ) -> Result<Built, ContainerError> {
        super::image::build(&self.docker, tag, progress).await
    }

    async fn has_image(&self, tag: &str) -> bool {
        self.docker.inspect_image(tag).await.is_ok()
    }

    fn counters(&self, id: &str) -> Counters {
        Counters::read(id)
    }
}

/// Every container of `instance` (running or not) carrying `label`.
pub async fn labelled(
    docker: &Docker,
    instance: &str,
    label: &str,
) -> Result<Vec<ContainerSummary>, ContainerError> {
    let filters = HashMap::from([(
        "label".to_string(),
        vec![format!("{LABEL_INSTANCE}={instance}"), label.to_string()],
    )]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    docker
        .list_containers(Some(options))
        .await
        .map_err(|e| ContainerError::Docker(format!("listing containers: {}", clean(&e))))
}

/// A listed container's name, without Docker's leading `/`.
pub fn name_of(c: &ContainerSummary) -> Option<String> {
    c.names
        .as_ref()?
        .first()
        .map(|n| n.trim_start_matches('/').to_string())
}

/// Kills and removes a container (a frozen one is thawed first: it ignores
/// signals until then); `Ok` when there was none.
pub async fn remove(docker: &Docker, name_or_id: &str) -> Result<(), ContainerError> {
    let _ = docker.unpause_container(name_or_id).await;
    let _ = docker
        .kill_container(
            name_or_id,
            Some(KillContainerOptions {
                signal: "KILL".into(),
            }),
        )
        .await;
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(name_or_id, Some(options)).await {
        Ok(()) => Ok(()),
        Err(e) if is_not_found(&e) => Ok(()),
        Err(e) => Err(ContainerError::Docker(format!(
            "removing {name_or_id}: {}",
            clean(&e)
        ))),
    }
}

/// Docker's create body for a workspace's container (the spec digest and
/// the gateway's address are added by the caller).
fn create_body(spec: &WorkspaceSpec) -> ContainerCreateBody {
    let s = &spec.settings;
    let labels = HashMap::from([
        (LABEL_WORKSPACE.to_string(), spec.workspace.clone()),
        (LABEL_INSTANCE.to_string(), spec.instance.clone()),
    ]);
    ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: Some(vec![RUNNER_PATH.into(), "serve".into()]),
        cmd: Some(vec![]),
        env: Some(spec.env()),
        user: Some(s.user.clone()),
        working_dir: Some(WORKSPACE_DIR.into()),
        labels: Some(labels),
        host_config: Some(host_config(s, &spec.all_mounts())),
        ..Default::default()
    }
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

/// What Docker reports of a container, in the engine-neutral terms.
pub fn observed(c: &ContainerInspectResponse) -> Observed {
    let state = c.state.clone().unwrap_or_default();
    Observed {
        id: c.id.clone().unwrap_or_default(),
        state: RunState {
            running: state.running.unwrap_or(false),
            paused: state.paused.unwrap_or(false),
            exit_code: state.exit_code.unwrap_or_default(),
            oom_killed: state.oom_killed.unwrap_or(false),
            error: state.error.filter(|e| !e.is_empty()),
        },
        spec_digest: c
            .config
            .as_ref()
            .and_then(|config| config.labels.as_ref())
            .and_then(|labels| labels.get(LABEL_SPEC))
            .cloned(),
        applied: applied(c),
    }
}

fn applied(c: &ContainerInspectResponse) -> Applied {
    let host = c.host_config.clone().unwrap_or_default();
    let config = c.config.clone().unwrap_or_default();
    let sorted = |mut items: Vec<String>| {
        items.sort();
        items
    };
    Applied {
        image: config.image.unwrap_or_default(),
        user: config.user.unwrap_or_default(),
        network_mode: host.network_mode.unwrap_or_default(),
        networks: sorted(
            c.network_settings
                .as_ref()
                .and_then(|n| n.networks.as_ref())
                .map(|n| n.keys().cloned().collect())
                .unwrap_or_default(),
        ),
        memory_bytes: host.memory.unwrap_or(0),
        memory_swap_bytes: host.memory_swap.unwrap_or(0),
        nano_cpus: host.nano_cpus.unwrap_or(0),
        pids_limit: host.pids_limit.unwrap_or(0),
        ulimits: sorted(
            host.ulimits
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
                .collect(),
        ),
        cap_drop: sorted(host.cap_drop.unwrap_or_default()),
        cap_add: sorted(host.cap_add.unwrap_or_default()),
        security_opt: sorted(host.security_opt.unwrap_or_default()),
        read_only_rootfs: host.readonly_rootfs.unwrap_or(false),
        tmpfs: host
            .tmpfs
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeMap<_, _>>(),
        mounts: sorted(
            c.mounts
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
                .collect(),
        ),
    }
}

pub fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(
        e,
        bollard::errors::Error::DockerResponseServerError {
            status_code: 404,
            ..
        }
    )
}

/// Docker's error without bollard's wrapping.
pub fn clean(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        other => other.to_string(),
    }
}
