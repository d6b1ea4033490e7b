//! One container per workspace on the Docker Engine: created lazily,
//! labelled, reused, verified against its policy on every use (fail closed),
//! replaced when it died, and reconciled at start.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use pincer_runner_protocol::{ExecRequest, ExecResult, Grant, Request, Response, Status};

use super::ContainerError;
use super::beneath::Reowned;
use super::engine::{ContainerEngine, Observed};
use super::frozen::Frozen;
use super::in_use::{self, InUse, Unused};
use super::runner_client::{self, RunnerAddr, RunnerError};
use super::spec::WorkspaceSpec;
use crate::audit::AuditLog;

/// Why a grant could not be minted or revoked (the minter's own error).
pub type GrantError = Box<dyn std::error::Error + Send + Sync>;

/// Mints and revokes the gateway token of a workspace's container. The
/// gateway implements it and the composition root hands it to the runtime,
/// which opens no store and names nothing of the gateway.
pub trait GrantMinter: Send + Sync {
    /// A fresh token for `workspace`'s container; its previous one is revoked.
    fn mint(&self, workspace: &str) -> Result<String, GrantError>;
    fn revoke(&self, workspace: &str) -> Result<(), GrantError>;
}

/// How long a fresh runner gets to answer its first ping.
const RUNNER_START: Duration = Duration::from_secs(10);
/// How long a stopped runner gets to end before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);

pub struct ContainerRuntime {
    engine: Arc<dyn ContainerEngine>,
    instance: String,
    audit: Arc<AuditLog>,
    /// Mints each container's own gateway token (never a provider key).
    grants: Arc<dyn GrantMinter>,
    /// `$PINCER_HOME/run`: a folder per workspace.
    run_root: PathBuf,
    /// Workspaces whose runner must be handed a fresh token at its next
    /// use, whatever it holds ([`ContainerRuntime::taken_up`]).
    regrant: std::sync::Mutex<std::collections::BTreeSet<String>>,
    /// One `ensure` at a time per workspace: the first messages of many
    /// conversations at once would otherwise each create the container,
    /// and all but one fail on the name.
    ensuring: std::sync::Mutex<std::collections::BTreeMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// Where a container finds the gateway (its token is granted over the
/// runner socket, never put in an environment).
pub use pincer_runner_protocol::{GATEWAY_SOCKET_PATH, GATEWAY_URL_ENV};

/// A container as pincer sees it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ContainerStatus {
    pub workspace: String,
    pub name: String,
    pub id: String,
    /// Docker's state: running, paused, exited, created, ...
    pub state: String,
    pub status: String,
}

/// Where a container is in its life, as `pincer workspace status` and
/// `pincer status` say it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lifecycle {
    Running,
    /// Frozen; pincer's record of it, unless someone else froze it.
    Paused(Option<Frozen>),
    Stopped,
}

impl std::fmt::Display for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lifecycle::Running => f.write_str("running"),
            Lifecycle::Stopped => f.write_str("stopped"),
            Lifecycle::Paused(None) => f.write_str("paused (not by pincer)"),
            Lifecycle::Paused(Some(frozen)) => write!(
                f,
                "paused since {} (unused for {})",
                chrono::DateTime::<chrono::Utc>::from(frozen.since())
                    .format("%Y-%m-%d %H:%M:%S UTC"),
                humantime::format_duration(Duration::from_secs(
                    frozen.unused_at(std::time::SystemTime::now()).as_secs()
                ))
            ),
        }
    }
}

impl ContainerStatus {
    pub fn paused(&self) -> bool {
        self.state == "paused"
    }

    pub fn running(&self) -> bool {
        self.state == "running"
    }
}

/// What `ensure` found or did.
#[derive(Debug, Clone)]
pub struct Ensured {
    pub id: String,
    pub created: bool,
    /// Why an earlier container was replaced, if one was.
    pub replaced: Option<String>,
    pub runner: Status,
    /// The container stays thawed (is never frozen or stopped for
    /// idleness) while this lives.
    pub in_use: InUse,
}

/// The outcome of running a command, with what the kernel did to it.
#[derive(Debug, Clone)]
pub struct ExecOutcome {
    pub result: ExecResult,
    /// Set when the command was killed at the memory limit.
    pub oom_killed: bool,
    /// Times a fork failed at the pids limit during the command.
    pub pids_limit_hits: u64,
}

impl ContainerRuntime {
    /// Connects to the local Docker Engine; containers' gateway tokens
    /// come from `grants`.
    pub async fn connect(
        home: &Path,
        audit: Arc<AuditLog>,
        grants: Arc<dyn GrantMinter>,
    ) -> Result<Self, ContainerError> {
        let engine = super::docker::DockerEngine::connect().await?;
        Self::new(home, Arc::new(engine), audit, grants)
    }

    /// The runtime of this `home` on `engine`.
    pub fn new(
        home: &Path,
        engine: Arc<dyn ContainerEngine>,
        audit: Arc<AuditLog>,
        grants: Arc<dyn GrantMinter>,
    ) -> Result<Self, ContainerError> {
        Ok(Self {
            engine,
            instance: instance_id(home)?,
            audit,
            grants,
            run_root: home.join("run"),
            regrant: std::sync::Mutex::default(),
            ensuring: std::sync::Mutex::default(),
        })
    }

    /// This daemon now runs `workspace` (at start, or taken over from
    /// another daemon of the cluster): the workspace's container token is
    /// revoked at once, so a container another daemon started (a paused
    /// daemon's, still running) can no longer call the gateway, and this
    /// daemon's runner gets a fresh token at its next use.
    pub fn taken_up(&self, workspace: &str) {
        self.revoke_token(workspace);
        self.regrant
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(workspace.to_owned());
    }

    /// Builds (or confirms) the default image `tag` from `images/`, offline;
    /// `progress` receives one line per step.
    pub async fn build_image(
        &self,
        tag: &str,
        progress: &mut (dyn FnMut(&str) + Send),
    ) -> Result<super::image::Built, ContainerError> {
        self.engine.build_image(tag, progress).await
    }

    /// Whether the engine has image `tag`.
    pub async fn has_image(&self, tag: &str) -> bool {
        self.engine.has_image(tag).await
    }

    pub fn audit(&self) -> &AuditLog {
        &self.audit
    }

    /// This host instance's id (the `pincer.instance` label of its containers).
    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn container_name(&self, workspace: &str) -> String {
        format!("pincer-{}-{workspace}", &self.instance)
    }

    /// Makes sure the workspace's container runs and is exactly what its spec
    /// says; creates, starts or replaces it as needed.
    pub async fn ensure(&self, spec: &WorkspaceSpec) -> Result<Ensured, ContainerError> {
        let turn = self
            .ensuring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(spec.workspace.clone())
            .or_default()
            .clone();
        let _one_at_a_time = turn.lock().await;
        let in_use = in_use::hold(&spec.run_dir).await?;
        let digest = spec.digest();
        let mut replaced = None;
        if let Some(existing) = self.engine.inspect(&spec.container_name).await? {
            let Observed {
                id,
                state,
                spec_digest,
                ..
            } = existing;
            if state.paused {
                // A frozen runner answers nothing: thaw before talking to it
                // (whoever froze it), then verify as after a start.
                self.thaw(&spec.workspace, &id).await?;
            }
            if state.running && spec_digest.as_deref() == Some(digest.as_str()) {
                let runner = self.verify(spec, &id).await?;
                let runner = self.grant(spec, &id, runner).await?;
                return Ok(Ensured {
                    id,
                    created: false,
                    replaced: None,
                    runner,
                    in_use,
                });
            }
            let why = if !state.running && state.exit_code == 0 && !state.oom_killed {
                "the previous container had stopped unused (containers.idle)".to_string()
            } else if !state.running {
                let mut why = format!(
                    "the previous container had stopped (exit code {}{})",
                    state.exit_code,
                    if state.oom_killed {
                        ", killed by the OOM killer"
                    } else {
                        ""
                    }
                );
                if let Some(error) = state.error {
                    why.push_str(&format!(": {error}"));
                }
                why
            } else {
                "the workspace's configuration or policy changed".to_string()
            };
            self.audit.record(
                crate::audit::Actor::Workspace(&spec.workspace),
                Some(&spec.workspace),
                crate::audit::Action::ContainerReplaced,
                &why,
            );
            self.remove(&spec.container_name).await?;
            replaced = Some(why);
        }
        let id = self.create_and_start(spec, &digest).await?;
        crate::events::container_started(&spec.workspace);
        let runner = self.verify(spec, &id).await?;
        let runner = self.grant(spec, &id, runner).await?;
        Ok(Ensured {
            id,
            created: true,
            replaced,
            runner,
            in_use,
        })
    }

    async fn create_and_start(
        &self,
        spec: &WorkspaceSpec,
        digest: &str,
    ) -> Result<String, ContainerError> {
        if let Some((reowned, from)) = prepare_host_dirs(spec)? {
            self.audit.record(
                crate::audit::Actor::Host,
                Some(&spec.workspace),
                crate::audit::Action::ContainerWorkspaceReowned,
                &format!(
                    "{}: {} entries handed from {}:{} to {}{}{}",
                    spec.workspace_dir.display(),
                    reowned.changed,
                    from.0,
                    from.1,
                    spec.settings.user,
                    if reowned.skipped_links > 0 {
                        format!(
                            "; {} file(s) with several links left as they were",
                            reowned.skipped_links
                        )
                    } else {
                        String::new()
                    },
                    if reowned.truncated {
                        "; stopped at the walk's limit"
                    } else {
                        ""
                    },
                ),
            );
        }
        // The address only: the token is granted after start (see `grant`).
        let gateway = format!("{GATEWAY_URL_ENV}=unix://{GATEWAY_SOCKET_PATH}");
        self.engine.create_and_start(spec, digest, &[gateway]).await
    }

    /// Compares the running container with its spec, and the runner's own
    /// enforcement with the policy. Any difference removes the container.
    async fn verify(&self, spec: &WorkspaceSpec, id: &str) -> Result<Status, ContainerError> {
        let mut problems = match self.engine.inspect(id).await? {
            Some(actual) => super::verify::mismatches(spec, &actual),
            None => vec!["the container disappeared".to_string()],
        };
        if problems.is_empty() {
            match runner_client::wait_ready(&runner_addr(spec, id), RUNNER_START).await {
                Ok(status) => {
                    problems.extend(enforcement_mismatches(spec, &status));
                    if problems.is_empty() {
                        return Ok(status);
                    }
                }
                Err(e) => problems.push(format!("the agent runner is not answering: {e}")),
            }
        }
        Err(self.not_trusted(spec, problems).await)
    }

    /// Removes the container whose policy or runner could not be verified,
    /// audits why, and says so.
    async fn not_trusted(&self, spec: &WorkspaceSpec, problems: Vec<String>) -> ContainerError {
        let _ = self.remove(&spec.container_name).await;
        self.revoke_token(&spec.workspace);
        crate::events::container_verify_failed(&spec.workspace);
        let detail = problems.join("; ");
        tracing::debug!(workspace = %spec.workspace, "policy not applied, container removed: {detail}");
        self.audit.record(
            crate::audit::Actor::Workspace(&spec.workspace),
            Some(&spec.workspace),
            crate::audit::Action::ContainerVerifyFailed,
            &detail,
        );
        ContainerError::PolicyNotApplied {
            workspace: spec.workspace.clone(),
            problems,
        }
    }

    /// Hands a verified runner that holds no gateway token (a fresh one, or
    /// a reused one whose grant was lost, e.g. the host stopped between
    /// start and grant) a freshly minted token over its peer-checked socket.
    /// Minting revokes the workspace's previous container token.
    async fn grant(
        &self,
        spec: &WorkspaceSpec,
        id: &str,
        mut status: Status,
    ) -> Result<Status, ContainerError> {
        let fresh = self
            .regrant
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&spec.workspace);
        if status.granted && !fresh {
            return Ok(status);
        }
        let token = self.grants.mint(&spec.workspace).map_err(|e| {
            ContainerError::Host(format!(
                "minting the gateway token of {}: {e}",
                spec.workspace
            ))
        })?;
        let answer = runner_client::call(
            &runner_addr(spec, id),
            &Request::Grant(Grant { token }),
            Duration::from_secs(5),
        )
        .await;
        match answer {
            Ok(Response::Ok) => {
                status.granted = true;
                Ok(status)
            }
            Ok(other) => Err(self
                .not_trusted(
                    spec,
                    vec![format!(
                        "the agent runner did not accept its gateway token: {other:?}"
                    )],
                )
                .await),
            Err(e) => Err(self
                .not_trusted(
                    spec,
                    vec![format!(
                        "the agent runner did not take its gateway token: {e}"
                    )],
                )
                .await),
        }
    }

    /// Revokes the workspace's container token (its container is gone).
    fn revoke_token(&self, workspace: &str) {
        if let Err(e) = self.grants.revoke(workspace) {
            tracing::warn!(%workspace, "revoking the container token failed: {e}");
        }
    }

    /// Runs a command in the workspace's container through its runner, as
    /// the agent's tools do. Ensures (and verifies) the container first.
    pub async fn exec(
        &self,
        spec: &WorkspaceSpec,
        request: ExecRequest,
    ) -> Result<(Ensured, ExecOutcome), ContainerError> {
        let ensured = self.ensure(spec).await?;
        let program = request.argv.first().cloned().unwrap_or_default();
        let before = self.engine.counters(&ensured.id);
        let wait = Duration::from_millis(request.timeout_ms) + Duration::from_secs(5);
        let answer = runner_client::call(
            &runner_addr(spec, &ensured.id),
            &Request::Exec(request),
            wait,
        )
        .await;
        let after = self.engine.counters(&ensured.id);
        let oom_killed = after.oom_kills > before.oom_kills;
        let pids_limit_hits = after.pids_limit_hits.saturating_sub(before.pids_limit_hits);
        if oom_killed {
            self.audit.record(
                crate::audit::Actor::Workspace(&spec.workspace),
                Some(&spec.workspace),
                crate::audit::Action::ContainerOomKill,
                &format!(
                    "a process was killed at the memory limit of {} MiB",
                    spec.settings.memory_bytes >> 20
                ),
            );
        }
        if pids_limit_hits > 0 {
            self.audit.record(
                crate::audit::Actor::Workspace(&spec.workspace),
                Some(&spec.workspace),
                crate::audit::Action::ContainerPidsLimit,
                &format!(
                    "process creation hit the pids limit of {} ({pids_limit_hits} times)",
                    spec.settings.pids_limit
                ),
            );
        }
        match answer {
            Ok(Response::Exec(result)) => Ok((
                ensured,
                ExecOutcome {
                    result,
                    oom_killed,
                    pids_limit_hits,
                },
            )),
            Ok(Response::Error { kind, message }) => {
                if kind == pincer_runner_protocol::ErrorKind::PermissionDenied {
                    self.audit.record(
                        crate::audit::Actor::Workspace(&spec.workspace),
                        Some(&spec.workspace),
                        crate::audit::Action::ContainerExecRefused,
                        &format!("{program:?}: {message}"),
                    );
                }
                Err(ContainerError::Exec { kind, message })
            }
            Ok(other) => Err(ContainerError::Runner(RunnerError::Protocol(format!(
                "unexpected answer {other:?}"
            )))),
            Err(e) => {
                // The container may have died under the command (OOM of the
                // runner, docker kill): say so; the next call replaces it.
                let state = self
                    .engine
                    .inspect(&ensured.id)
                    .await
                    .ok()
                    .flatten()
                    .map(|c| c.state);
                match state {
                    Some(s) if !s.running => Err(ContainerError::Died {
                        workspace: spec.workspace.clone(),
                        detail: format!(
                            "exit code {}{}",
                            s.exit_code,
                            if s.oom_killed || oom_killed {
                                ", out of memory"
                            } else {
                                ""
                            }
                        ),
                    }),
                    _ => Err(e.into()),
                }
            }
        }
    }

    /// Freezes the workspace's running container (`docker pause`) by
    /// hand: it keeps its memory and uses no CPU; the next use thaws it.
    /// Refused while someone uses it.
    pub async fn pause(&self, workspace: &str) -> Result<(), ContainerError> {
        let name = self.container_name(workspace);
        let container = self.engine.inspect(&name).await?.unwrap_or_default();
        let state = container.state;
        if state.paused {
            return Err(ContainerError::Docker(format!(
                "the container of workspace `{workspace}` is paused already"
            )));
        }
        if !state.running {
            return Err(ContainerError::Docker(format!(
                "workspace `{workspace}` has no running container to pause"
            )));
        }
        let Some(unused) = self.try_unused(workspace)? else {
            return Err(ContainerError::Docker(format!(
                "the container of workspace `{workspace}` is in use (a turn or a command is running); try again when it has ended"
            )));
        };
        self.freeze(&unused, &container.id, Duration::ZERO, "by hand")
            .await
    }

    /// Holds the workspace's container unused, so it can be frozen or
    /// stopped; `None` while a turn or a command uses it.
    pub fn try_unused(&self, workspace: &str) -> Result<Option<Unused>, ContainerError> {
        in_use::try_unused(&self.run_root.join(workspace), workspace)
    }

    /// Freezes the running container `id` of the workspace `unused` holds,
    /// `idle` unused so far; `why` goes to the audit log. By id, so a
    /// container replaced since the caller looked is not frozen in its place.
    pub async fn freeze(
        &self,
        unused: &Unused,
        id: &str,
        idle: Duration,
        why: &str,
    ) -> Result<(), ContainerError> {
        let workspace = unused.workspace();
        let name = self.container_name(workspace);
        let started = std::time::Instant::now();
        self.engine.pause(id).await?;
        let took = started.elapsed();
        Frozen::now(id.to_string(), idle).record(&self.run_root.join(workspace));
        crate::events::container_paused(workspace);
        self.audit.record(
            crate::audit::Actor::Host,
            Some(workspace),
            crate::audit::Action::ContainerPaused,
            &format!("{name} {why}, in {} ms", took.as_millis()),
        );
        Ok(())
    }

    /// Stops the container `unused` holds (thawing it first if frozen, so
    /// its runner ends cleanly); its next use starts a fresh one. `false`
    /// when there was no running container.
    pub async fn stop_unused(&self, unused: &Unused, why: &str) -> Result<bool, ContainerError> {
        let workspace = unused.workspace();
        let name = self.container_name(workspace);
        let Some(state) = self.engine.inspect(&name).await?.map(|c| c.state) else {
            return Ok(false);
        };
        if state.paused {
            self.engine.unpause(&name).await?;
        }
        Frozen::clear(&self.run_root.join(workspace));
        if !state.running {
            return Ok(false);
        }
        self.engine.stop(&name, STOP_GRACE).await?;
        self.revoke_token(workspace);
        crate::events::container_stopped(workspace);
        self.audit.record(
            crate::audit::Actor::Host,
            Some(workspace),
            crate::audit::Action::ContainerStopped,
            &format!("{name} {why}"),
        );
        Ok(true)
    }

    /// Stops `workspace`'s container of home `instance` (the daemon of the
    /// cluster this one took the workspace from), if this engine has it
    /// running; `false` when it has none. Its home reconciles it when it
    /// starts again.
    pub async fn stop_predecessor(
        &self,
        instance: &str,
        workspace: &str,
    ) -> Result<bool, ContainerError> {
        let is_instance = instance.len() == 8 && instance.chars().all(|c| c.is_ascii_hexdigit());
        if instance == self.instance || !is_instance {
            return Ok(false);
        }
        let name = format!("pincer-{instance}-{workspace}");
        let Some(state) = self.engine.inspect(&name).await?.map(|c| c.state) else {
            return Ok(false);
        };
        if state.paused {
            self.engine.unpause(&name).await?;
        }
        if !state.running {
            return Ok(false);
        }
        self.engine.stop(&name, STOP_GRACE).await?;
        self.audit.record(
            crate::audit::Actor::Host,
            Some(workspace),
            crate::audit::Action::ContainerStopped,
            &format!("{name}: the daemon that ran the workspace lost it to this one"),
        );
        Ok(true)
    }

    /// Thaws the workspace's container if it is frozen; `false` when it
    /// was not.
    pub async fn wake(&self, workspace: &str) -> Result<bool, ContainerError> {
        let name = self.container_name(workspace);
        let paused = self
            .engine
            .inspect(&name)
            .await?
            .is_some_and(|c| c.state.paused);
        if paused {
            self.thaw(workspace, &name).await?;
        }
        Ok(paused)
    }

    async fn thaw(&self, workspace: &str, id: &str) -> Result<(), ContainerError> {
        let started = std::time::Instant::now();
        self.engine.unpause(id).await?;
        let took = started.elapsed();
        Frozen::clear(&self.run_root.join(workspace));
        crate::events::container_woken(workspace, took);
        self.audit.record(
            crate::audit::Actor::Host,
            Some(workspace),
            crate::audit::Action::ContainerWoken,
            &format!(
                "{} in {} ms",
                self.container_name(workspace),
                took.as_millis()
            ),
        );
        Ok(())
    }

    /// Since when and after how long unused the workspace's container
    /// `id` is frozen, as pincer recorded it; `None` when pincer did not
    /// freeze it (someone else did, or it is not frozen).
    pub fn frozen(&self, workspace: &str, id: &str) -> Option<Frozen> {
        Frozen::read(&self.run_root.join(workspace)).filter(|f| f.container == id)
    }

    /// Where container `c` is in its life.
    pub fn lifecycle(&self, c: &ContainerStatus) -> Lifecycle {
        if c.paused() {
            Lifecycle::Paused(self.frozen(&c.workspace, &c.id))
        } else if c.running() {
            Lifecycle::Running
        } else {
            Lifecycle::Stopped
        }
    }

    /// Records that the workspace's container `id`, frozen by someone else,
    /// counts as unused from now.
    pub fn adopt_frozen(&self, workspace: &str, id: &str) -> Frozen {
        let record = Frozen::now(id.to_string(), Duration::ZERO);
        record.record(&self.run_root.join(workspace));
        record
    }

    /// What the runner of the workspace's running (not frozen) container
    /// says of itself, busy and idle time included; `None` when there is
    /// none to ask or it does not answer within a second. Never thaws.
    pub async fn runner_status(&self, workspace: &str) -> Option<Status> {
        let container = self
            .engine
            .inspect(&self.container_name(workspace))
            .await
            .ok()??;
        if !container.state.running || container.state.paused {
            return None;
        }
        self.ping(workspace, &container.id).await
    }

    /// Asks the runner of the workspace's running container `id` how it is.
    pub async fn ping(&self, workspace: &str, id: &str) -> Option<Status> {
        let addr = RunnerAddr {
            dir: super::spec::runner_dir(&self.run_root.join(workspace)),
            container_id: id.to_string(),
        };
        match runner_client::call(&addr, &Request::Ping, Duration::from_secs(1)).await {
            Ok(Response::Pong(status)) => Some(status),
            _ => None,
        }
    }

    /// Stops and removes the workspace's container; `false` if there was none.
    pub async fn down(&self, workspace: &str) -> Result<bool, ContainerError> {
        let name = self.container_name(workspace);
        // Whatever was there, no token outlives `down`.
        self.revoke_token(workspace);
        if self.engine.inspect(&name).await?.is_none() {
            return Ok(false);
        }
        self.remove(&name).await?;
        Ok(true)
    }

    pub async fn status(&self, workspace: &str) -> Result<Option<ContainerStatus>, ContainerError> {
        Ok(self
            .list()
            .await?
            .into_iter()
            .find(|c| c.workspace == workspace))
    }

    /// This instance's containers.
    pub async fn list(&self) -> Result<Vec<ContainerStatus>, ContainerError> {
        self.engine.list(&self.instance).await
    }

    /// Removes this instance's containers whose workspace is no longer
    /// configured; other instances' containers are left alone.
    pub async fn reconcile(&self, workspaces: &[String]) -> Result<Vec<String>, ContainerError> {
        let mut removed = Vec::new();
        for container in self.list().await? {
            if !workspaces.contains(&container.workspace) {
                self.remove(&container.id).await?;
                self.revoke_token(&container.workspace);
                self.audit.record(
                    crate::audit::Actor::Host,
                    Some(&container.workspace),
                    crate::audit::Action::ContainerOrphanRemoved,
                    &container.name,
                );
                removed.push(container.name);
            }
        }
        Ok(removed)
    }

    async fn remove(&self, name_or_id: &str) -> Result<(), ContainerError> {
        self.engine.remove(name_or_id).await
    }
}

/// How the host reaches the runner of `spec`'s container `container_id`.
pub fn runner_addr(spec: &WorkspaceSpec, container_id: &str) -> RunnerAddr {
    RunnerAddr {
        dir: spec.runner_dir(),
        container_id: container_id.to_string(),
    }
}

fn enforcement_mismatches(spec: &WorkspaceSpec, status: &Status) -> Vec<String> {
    let mut problems = Vec::new();
    let want = &spec.settings.runner;
    if status.uid == 0 {
        problems.push("the agent runner runs as root".to_string());
    }
    if !status.enforcement.io_uring_refused {
        problems.push(
            "io_uring is allowed in the container (its seccomp profile did not take effect)"
                .to_string(),
        );
    }
    if want.no_process_creation && !status.enforcement.exec_filter {
        problems
            .push("no_process_creation: the runner did not install its exec filter".to_string());
    }
    if want.allowed_executables.is_some()
        && status.enforcement.allowed_executables != want.allowed_executables
    {
        problems.push(format!(
            "allowed_executables: the runner enforces {:?}, the policy says {:?}",
            status.enforcement.allowed_executables, want.allowed_executables
        ));
    }
    problems
}

/// Folders on the host that the container mounts. The workspace folder
/// (new ones handed to the container user) and the runner folder (handed
/// to it on every start) are the container's; the gateway folder is the
/// host's (0755, read-only in the container). Ownership and modes are set
/// through directory handles, never by following a path; nothing inside
/// the container-writable folders is touched (a stale runner socket is the
/// runner's to replace).
/// What an earlier workspace folder of pincer's own was handed over,
/// if it was.
fn prepare_host_dirs(spec: &WorkspaceSpec) -> Result<Option<Handover>, ContainerError> {
    use super::beneath::ensure_dir;
    let owner = parse_user(&spec.settings.user);
    let host = |e: super::beneath::BeneathError| ContainerError::Host(e.to_string());
    ensure_workspace_dir(&spec.workspace_dir, owner)?;
    let reowned = reown_previous(spec, owner)?;
    ensure_dir(&spec.run_dir, 0o755, None).map_err(host)?;
    ensure_dir(&spec.gateway_dir(), 0o755, None).map_err(host)?;
    ensure_dir(&spec.runner_dir(), 0o755, owner).map_err(host)?;
    Ok(reowned)
}

/// What a handover changed, and from which user.
type Handover = (Reowned, (u32, u32));

/// Entries one handover changes at most.
const REOWN_LIMIT: usize = 1_000_000;

/// Hands a workspace folder of pincer's own that still belongs to an
/// earlier container user of this workspace (`spec.earlier_users`), and
/// what that user owns in it, to the configured user, once: afterwards the
/// folder is the new user's. A folder given by `path:` elsewhere is the operator's
/// and left alone.
fn reown_previous(
    spec: &WorkspaceSpec,
    owner: Option<(u32, u32)>,
) -> Result<Option<Handover>, ContainerError> {
    use std::os::unix::fs::MetadataExt;
    let Some(owner) = owner else {
        return Ok(None);
    };
    if !spec.managed_dir {
        return Ok(None);
    }
    let meta = std::fs::symlink_metadata(&spec.workspace_dir)
        .map_err(|e| ContainerError::Host(format!("{}: {e}", spec.workspace_dir.display())))?;
    let found = (meta.uid(), meta.gid());
    if found == owner || !spec.earlier_users.contains(&found) {
        return Ok(None);
    }
    super::beneath::reown_tree(&spec.workspace_dir, found, owner, REOWN_LIMIT)
        .map(|reowned| Some((reowned, found)))
        .map_err(|e| {
            ContainerError::Host(format!(
                "handing the workspace folder to {}: {e}",
                spec.settings.user
            ))
        })
}

/// Makes a missing workspace folder and hands it to the container user;
/// an existing one is left as it is.
pub fn ensure_workspace_dir(
    dir: &std::path::Path,
    owner: Option<(u32, u32)>,
) -> Result<(), ContainerError> {
    if dir.exists() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| ContainerError::Host(format!("creating {}: {e}", dir.display())))?;
    if let Some((uid, gid)) = owner {
        let handle =
            super::beneath::open_dir(dir).map_err(|e| ContainerError::Host(e.to_string()))?;
        std::os::unix::fs::fchown(&handle, Some(uid), Some(gid)).map_err(|e| {
            ContainerError::Host(format!(
                "cannot hand {} to the container user {uid}:{gid}: {e}",
                dir.display()
            ))
        })?;
    }
    Ok(())
}

pub fn parse_user(user: &str) -> Option<(u32, u32)> {
    let (uid, gid) = user.split_once(':').unwrap_or((user, user));
    Some((uid.parse().ok()?, gid.parse().ok()?))
}

/// A stable id per PINCER_HOME, so two homes never share containers.
pub(crate) fn instance_id(home: &Path) -> Result<String, ContainerError> {
    let path = home.join("instance-id");
    if let Ok(id) = std::fs::read_to_string(&path) {
        let id = id.trim();
        if id.len() == 8 && id.chars().all(|c| c.is_ascii_hexdigit()) {
            return Ok(id.to_string());
        }
    }
    let mut bytes = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes))
        .map_err(|e| ContainerError::Host(format!("reading /dev/urandom: {e}")))?;
    let id = hex::encode(bytes);
    std::fs::write(&path, format!("{id}\n"))
        .map_err(|e| ContainerError::Host(format!("writing {}: {e}", path.display())))?;
    Ok(id)
}
