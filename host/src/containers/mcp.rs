//! MCP servers in containers of their own (`mcp_servers.NAME.container`):
//! each is created lazily (on first use by the gateway), labelled with the
//! server's name and the host instance, put under its own policy (default:
//! the baseline plus `no_internet_access` and `read_only_rootfs`: no network,
//! read-only root, no capabilities, no new privileges, memory and pids
//! limits, its volumes with their modes), verified after start (fail
//! closed), and spoken to over stdio through Docker's attach stream: never
//! over a network. A connection is one container; when it ends (the server
//! crashed, a call hung) the container is removed and the next use starts a
//! fresh one. Every gateway process (a daemon, `gateway serve`, a one-shot
//! `pincer message`) runs its own server containers, named and labelled
//! with that process ([`Owner`]): two gateways of one home never remove
//! each other's live containers, and a gateway's first use of a container
//! server removes those of this instance whose process is gone
//! ([`McpContainers::reconcile`]).
//!
//! Runner-enforced settings (`no_process_creation`, `allowed_executables`)
//! are refused: pincer's runner is not inside a server's container, so
//! nothing would enforce them.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bollard::Docker;
use bollard::container::LogOutput;
use bollard::models::ContainerCreateBody;
use bollard::query_parameters::{
    AttachContainerOptionsBuilder, CreateContainerOptionsBuilder, InspectContainerOptions,
    StartContainerOptions,
};
use futures_util::StreamExt;
use tokio::sync::OnceCell;

use super::ContainerError;
use super::docker::{clean, host_config, is_not_found, labelled, name_of, observed, remove};
use super::engine::Observed;
use super::mounts::{self, BindMount};
use super::spec::{LABEL_INSTANCE, sorted};
use super::verify::{differ, settings_mismatches};
use crate::audit::AuditLog;
use crate::config::{Config, McpContainer, expand_tilde, parse_volume};
use crate::policy::{ContainerSettings, EffectivePolicy, PolicyCatalog, PolicyError};

/// The label naming the MCP server a container runs.
pub const LABEL_MCP_SERVER: &str = "pincer.mcp-server";
/// The label naming the gateway process that owns a server container
/// ([`Owner::label`]).
pub const LABEL_MCP_OWNER: &str = "pincer.mcp-owner";

/// The gateway process that started a server container: this machine's
/// boot, the process id and its start time (so a reused pid is not taken
/// for the owner), and a nonce of the gateway (one process may hold more
/// than one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    boot: String,
    pid: u32,
    started: u64,
    nonce: String,
}

impl Owner {
    /// This process, with a fresh nonce.
    ///
    /// # Errors
    /// `/proc` cannot be read.
    pub fn current() -> Result<Self, ContainerError> {
        let pid = std::process::id();
        let started = process_start(pid).ok_or_else(|| {
            ContainerError::Host(format!(
                "cannot read the start time of process {pid} in /proc"
            ))
        })?;
        Ok(Self {
            boot: boot_id(),
            pid,
            started,
            nonce: uuid::Uuid::new_v4().simple().to_string()[..8].to_owned(),
        })
    }

    /// The value of [`LABEL_MCP_OWNER`].
    pub fn label(&self) -> String {
        format!("{}:{}:{}:{}", self.boot, self.pid, self.started, self.nonce)
    }

    pub fn parse(label: &str) -> Option<Self> {
        let mut parts = label.split(':');
        let owner = Self {
            boot: parts.next()?.to_owned(),
            pid: parts.next()?.parse().ok()?,
            started: parts.next()?.parse().ok()?,
            nonce: parts.next()?.to_owned(),
        };
        parts.next().is_none().then_some(owner)
    }

    /// Whether the owning process still runs (same boot, same pid, same
    /// start time).
    pub fn alive(&self) -> bool {
        self.boot == boot_id() && process_start(self.pid) == Some(self.started)
    }

    /// What container names get after the server's name.
    fn suffix(&self) -> String {
        format!("{}-{}", self.pid, self.nonce)
    }
}

fn boot_id() -> String {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_owned())
        .unwrap_or_default()
}

/// Process `pid`'s start time (clock ticks since boot), if it runs.
fn process_start(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the command name (field 2) may hold spaces and parentheses.
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Why a server's policy cannot be applied.
#[derive(Debug, thiserror::Error)]
pub enum McpPolicyError {
    #[error("MCP server {server}: {source}")]
    Policy {
        server: String,
        #[source]
        source: Box<PolicyError>,
    },
    #[error(
        "MCP server {server}: {what} cannot be enforced in an MCP server's container (pincer's runner, which enforces it, is not inside); remove it from mcp_servers.{server}.container.policies"
    )]
    NeedsRunner { server: String, what: &'static str },
}

impl McpPolicyError {
    /// The policy error, when it is one.
    pub fn policy(&self) -> Option<&PolicyError> {
        match self {
            McpPolicyError::Policy { source, .. } => Some(source.as_ref()),
            McpPolicyError::NeedsRunner { .. } => None,
        }
    }
}

/// The effective policy of server `name`'s container.
///
/// # Errors
/// The policy cannot be merged, or needs the runner.
pub fn server_policy(
    catalog: &PolicyCatalog,
    name: &str,
    container: &McpContainer,
) -> Result<EffectivePolicy, McpPolicyError> {
    let policy = catalog
        .effective(&format!("mcp-server:{name}"), &container.policy_entries())
        .map_err(|source| McpPolicyError::Policy {
            server: name.to_owned(),
            source: Box::new(source),
        })?;
    let settings = policy.compile();
    let needs = if settings.runner.no_process_creation {
        Some("no_process_creation (no exec after start)")
    } else if settings.runner.allowed_executables.is_some() {
        Some("allowed_executables")
    } else {
        None
    };
    match needs {
        Some(what) => Err(McpPolicyError::NeedsRunner {
            server: name.to_owned(),
            what,
        }),
        None => Ok(policy),
    }
}

/// What no server volume may expose: what no workspace mount may, plus
/// every workspace folder and writable mount source.
fn protected(config: &Config, home: &Path) -> Vec<mounts::Protected> {
    let base = expand_tilde(&config.containers.workspace_base_path);
    let mut protected = mounts::protected_paths(home, &base);
    protected.extend(mounts::writable_sources(config));
    protected.extend(mounts::workspace_folders(config));
    protected
}

/// Problems of `container`'s volumes that can be seen without them
/// existing (`config check`, `policy audit`): a source that exists is
/// checked fully, a missing one only when the server starts.
pub fn volume_problems(
    config: &Config,
    home: &Path,
    container: &McpContainer,
) -> Vec<(usize, String)> {
    let protected = protected(config, home);
    let mut out = Vec::new();
    for (i, written) in container.volumes.iter().enumerate() {
        let Ok(volume) = parse_volume(written) else {
            continue; // reported by the file's own checks
        };
        if !expand_tilde(&volume.source).exists() {
            continue;
        }
        if let Err(e) = mounts::check_source(&volume.source, &protected) {
            out.push((i, e.to_string()));
        }
    }
    out
}

/// The volumes as written, for the audit (no filesystem access).
pub fn volumes_as_written(container: &McpContainer) -> Vec<BindMount> {
    container
        .volumes
        .iter()
        .filter_map(|v| parse_volume(v).ok())
        .map(|v| BindMount {
            source: v.source,
            target: v.target,
            read_only: v.read_only,
        })
        .collect()
}

/// Everything needed to run one server's container.
#[derive(Debug, Clone)]
pub struct McpServerSpec {
    pub server: String,
    pub instance: String,
    pub owner: Owner,
    pub container_name: String,
    pub image: String,
    /// Empty: the image's own command.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub settings: ContainerSettings,
    /// Volumes, sources checked and resolved.
    pub mounts: Vec<BindMount>,
}

/// The container name of server `server` of host instance `instance`
/// started by gateway `owner`.
pub fn container_name(instance: &str, server: &str, owner: &Owner) -> String {
    format!("pincer-{instance}-mcp-{server}-{}", owner.suffix())
}

/// The spec of server `name`'s container; volume sources must exist.
///
/// # Errors
/// The server is not a container server, its policy cannot be applied, or
/// a volume is refused.
pub fn plan(
    config: &Config,
    home: &Path,
    instance: &str,
    owner: &Owner,
    name: &str,
) -> Result<McpServerSpec, ContainerError> {
    let server = config
        .mcp_servers
        .get(name)
        .ok_or_else(|| ContainerError::Host(format!("MCP server `{name}` is not configured")))?;
    let container = server
        .container
        .as_ref()
        .ok_or_else(|| ContainerError::Host(format!("MCP server `{name}` is not a container")))?;
    let catalog = PolicyCatalog::load(&config.containers.policy_dirs)?;
    let policy = server_policy(&catalog, name, container)
        .map_err(|e| ContainerError::Host(e.to_string()))?;
    let settings = crate::policy::ContainerSettings {
        nofile: i64::try_from(config.containers.nofile).unwrap_or(i64::MAX),
        ..policy.compile()
    };
    let protected = protected(config, home);
    let mut bind = Vec::new();
    for written in &container.volumes {
        let volume = parse_volume(written).map_err(|e| ContainerError::Host(e.0))?;
        let source = mounts::check_source(&volume.source, &protected)
            .map_err(|e| ContainerError::Host(format!("volume `{written}`: {e}")))?;
        bind.push(BindMount {
            source,
            target: volume.target,
            read_only: volume.read_only || settings.mounts_read_only,
        });
    }
    Ok(McpServerSpec {
        server: name.to_owned(),
        instance: instance.to_owned(),
        owner: owner.clone(),
        container_name: container_name(instance, name, owner),
        image: container.image.clone(),
        command: container.command.clone(),
        env: server.env.clone(),
        settings,
        mounts: bind,
    })
}

impl McpServerSpec {
    pub fn create_body(&self) -> ContainerCreateBody {
        let s = &self.settings;
        let labels = HashMap::from([
            (LABEL_MCP_SERVER.to_owned(), self.server.clone()),
            (LABEL_INSTANCE.to_owned(), self.instance.clone()),
            (LABEL_MCP_OWNER.to_owned(), self.owner.label()),
        ]);
        ContainerCreateBody {
            image: Some(self.image.clone()),
            cmd: (!self.command.is_empty()).then(|| self.command.clone()),
            env: Some(self.env.iter().map(|(k, v)| format!("{k}={v}")).collect()),
            user: Some(s.user.clone()),
            labels: Some(labels),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            open_stdin: Some(true),
            // Its stdin closes when the gateway's attach connection does
            // (the gateway exited or was killed): the server sees EOF and
            // exits rather than run on with no one to answer.
            stdin_once: Some(true),
            tty: Some(false),
            network_disabled: Some(s.network_mode == "none"),
            host_config: Some(host_config(s, &self.mounts)),
            ..Default::default()
        }
    }

    /// Differences between this spec and the started container.
    pub fn mismatches(&self, actual: &Observed) -> Vec<String> {
        let s = &self.settings;
        let mut diffs = settings_mismatches(s, &self.image, &self.mounts, actual);
        // `none` with networking disabled: no network at all, or `none`.
        let got = sorted(&actual.applied.networks);
        let got = if s.network_mode == "none" && got.is_empty() {
            "none".to_owned()
        } else {
            got
        };
        differ(&mut diffs, "attached networks", s.network_mode.clone(), got);
        diffs
    }
}

/// The stdio of one running server container.
pub struct Attached {
    /// The server's stdout.
    pub output: tokio_util::io::StreamReader<
        futures_util::stream::BoxStream<'static, std::io::Result<bytes::Bytes>>,
        bytes::Bytes,
    >,
    /// The server's stdin.
    pub input: std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    pub container_id: String,
}

/// Starts and stops one gateway's MCP server containers. Docker is reached
/// on first use, so a configuration without container servers never needs it.
pub struct McpContainers {
    home: PathBuf,
    audit: Arc<AuditLog>,
    docker: OnceCell<(Docker, String, Owner)>,
}

impl McpContainers {
    pub fn new(home: &Path, audit: Arc<AuditLog>) -> Self {
        Self {
            home: home.to_path_buf(),
            audit,
            docker: OnceCell::new(),
        }
    }

    async fn docker(&self) -> Result<&(Docker, String, Owner), ContainerError> {
        self.docker
            .get_or_try_init(|| async {
                let docker = super::docker::connect().await?;
                let instance = super::runtime::instance_id(&self.home)?;
                Ok((docker, instance, Owner::current()?))
            })
            .await
    }

    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// Starts a fresh container for server `name` (replacing this
    /// gateway's earlier one) and attaches to its stdio.
    pub async fn start(&self, config: &Config, name: &str) -> Result<Attached, ContainerError> {
        let (docker, instance, owner) = self.docker().await?;
        let spec = plan(config, &self.home, instance, owner, name)?;
        remove(docker, &spec.container_name).await?;
        let options = CreateContainerOptionsBuilder::default()
            .name(&spec.container_name)
            .build();
        let created = docker
            .create_container(Some(options), spec.create_body())
            .await
            .map_err(|e| {
                if is_not_found(&e) {
                    ContainerError::Image(format!(
                        "MCP server {name}: image {} is not on this Docker Engine (nothing is ever pulled; build or load it first)",
                        spec.image
                    ))
                } else {
                    ContainerError::Docker(format!(
                        "MCP server {name}: creating its container: {}",
                        clean(&e)
                    ))
                }
            })?;
        let id = created.id;
        let attach = AttachContainerOptionsBuilder::default()
            .stdin(true)
            .stdout(true)
            .stderr(true)
            .stream(true)
            .logs(false)
            .build();
        let attached = match docker.attach_container(&id, Some(attach)).await {
            Ok(attached) => attached,
            Err(e) => {
                let _ = remove(docker, &id).await;
                return Err(ContainerError::Docker(format!(
                    "MCP server {name}: attaching to its container: {}",
                    clean(&e)
                )));
            }
        };
        if let Err(e) = docker
            .start_container(&id, None::<StartContainerOptions>)
            .await
        {
            let _ = remove(docker, &id).await;
            return Err(ContainerError::Host(format!(
                "MCP server {name}: its container did not start: {}",
                clean(&e)
            )));
        }
        let problems = match docker
            .inspect_container(&id, None::<InspectContainerOptions>)
            .await
        {
            Ok(actual) => spec.mismatches(&observed(&actual)),
            Err(e) => vec![format!("the container cannot be inspected: {}", clean(&e))],
        };
        if !problems.is_empty() {
            let _ = remove(docker, &id).await;
            self.audit
                .record_async(
                    crate::audit::Actor::Host,
                    None,
                    crate::audit::Action::McpVerifyFailed,
                    &format!("{name}: {}", problems.join("; ")),
                )
                .await;
            return Err(ContainerError::Host(format!(
                "MCP server {name}: its policy could not be applied, so its container was removed (fail closed): {}",
                problems.join("; ")
            )));
        }
        let server = name.to_owned();
        let output = attached
            .output
            .filter_map(move |chunk| {
                let server = server.clone();
                async move {
                    match chunk {
                        Ok(LogOutput::StdOut { message }) => Some(Ok(message)),
                        Ok(LogOutput::StdErr { message }) => {
                            tracing::debug!(server = %server, "{}", String::from_utf8_lossy(&message).trim_end());
                            None
                        }
                        Ok(_) => None,
                        Err(e) => Some(Err(std::io::Error::other(e))),
                    }
                }
            })
            .boxed();
        Ok(Attached {
            output: tokio_util::io::StreamReader::new(output),
            input: attached.input,
            container_id: id,
        })
    }

    /// Removes this gateway's container of server `name`, if it has one.
    pub async fn stop(&self, name: &str) -> Result<(), ContainerError> {
        let (docker, instance, owner) = self.docker().await?;
        remove(docker, &container_name(instance, name, owner)).await
    }

    /// Removes this instance's server containers whose gateway process is
    /// gone (a connection never outlives the gateway that made it; one
    /// without an owner label is from an older pincer). Those of live
    /// gateways, this one's included, are left alone. Returns the names
    /// removed.
    pub async fn reconcile(&self) -> Result<Vec<String>, ContainerError> {
        let (docker, instance, _) = self.docker().await?;
        let listed = labelled(docker, instance, LABEL_MCP_SERVER).await?;
        let mut removed = Vec::new();
        for container in listed {
            let Some(id) = container.id.clone() else {
                continue;
            };
            let owner = container
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_MCP_OWNER))
                .and_then(|l| Owner::parse(l));
            if owner.is_some_and(|o| o.alive()) {
                continue;
            }
            remove(docker, &id).await?;
            let name = name_of(&container).unwrap_or(id);
            self.audit
                .record_async(
                    crate::audit::Actor::Host,
                    None,
                    crate::audit::Action::McpOrphanRemoved,
                    &name,
                )
                .await;
            removed.push(name);
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_owner_is_alive_while_its_process_runs() {
        let me = Owner::current().unwrap();
        assert!(me.alive());
        assert_eq!(Owner::parse(&me.label()), Some(me.clone()));
        let reused_pid = Owner {
            started: me.started + 1,
            ..me.clone()
        };
        assert!(!reused_pid.alive(), "another process with the same pid");
        let rebooted = Owner {
            boot: "another-boot".to_owned(),
            ..me.clone()
        };
        assert!(!rebooted.alive());
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let started = process_start(pid);
        child.wait().unwrap();
        let gone = Owner {
            pid,
            started: started.unwrap_or(0),
            ..me.clone()
        };
        assert!(!gone.alive(), "an exited process");
        assert_eq!(Owner::parse("a:1:2"), None);
        assert_eq!(Owner::parse("a:x:2:n"), None);
    }
}
