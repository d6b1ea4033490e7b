//! One turn, end to end: a message for a (channel, conversation, workspace)
//! is stored in its session, the context is assembled, the workspace's
//! container is made ready, the agent runner inside it runs the turn, and
//! every event it streams back is stored, shown to the caller and handed to
//! the workspace's observers.

pub mod commands;
pub mod context;
pub mod control;
mod host_tools;
pub mod observers;

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pincer_runner_protocol::{
    Resume, StopReason, TurnErrorKind, TurnEvent, TurnLimits, TurnRequest, Verdict,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

use crate::approvals::{self, Judgement};
use crate::config::Config;
use crate::containers::{self, ContainerRuntime, RunnerAddr, RunnerError};
use crate::gateway::Gateway;
use crate::gateway::WorkspaceSockets;
use crate::plugins::api;
use crate::sessions::{SessionKey, SessionStore, ToolCallRecord, TurnStatus};

pub use observers::Observers;

/// The message that starts a fresh session instead of going to the agent.
pub const NEW_SESSION_COMMAND: &str = "/new";

use crate::config::{DEFAULT_MODEL_ALIAS, MAX_MESSAGE_BYTES};

#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    #[error("no workspace named `{0}`")]
    UnknownWorkspace(String),
    #[error("{0}")]
    BadMessage(String),
    #[error("{0}")]
    NoModel(String),
    #[error(transparent)]
    Sessions(#[from] crate::sessions::SessionError),
    #[error(transparent)]
    Container(#[from] containers::ContainerError),
    #[error("{0}")]
    Gateway(String),
}

/// An inbound message for the agent.
#[derive(Debug, Clone)]
pub struct Inbound {
    pub key: SessionKey,
    pub text: String,
    /// Who sent it on which platform message, for channel messages.
    pub origin: Option<Origin>,
    /// Who is there to decide a call that needs a person.
    pub presence: Presence,
    /// Earlier messages of the conversation, quoted (one user message
    /// before this one, for this turn only: not stored in the session).
    pub quoted: Option<serde_json::Value>,
    /// Images sent with the message, as paths beneath the workspace
    /// folder: shown to a model that takes images, for this turn only.
    pub images: Vec<String>,
}

/// Who is there to decide a call of a turn that needs a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Presence {
    /// The sender of the message, or the terminal's user.
    Person,
    /// Nobody (a scheduled run of a person's task):
    /// `approvals.unattended` says what happens.
    Nobody,
    /// Nobody, in a run of a task the agent made itself: such a call is
    /// refused whatever `approvals.unattended` says, so a task cannot grant
    /// its agent what a person was never asked for.
    NobodyForAgentTask,
    /// Nobody in the turn's session, but its scheduled task names who
    /// decides and where they are asked (`approvals:` in `schedules.yaml`).
    Appointed(Appointed),
}

/// The people a scheduled task names to decide its calls, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appointed {
    /// The task whose run asks.
    pub task: String,
    /// Where a request is posted and decided: the channel and the session
    /// conversation (`conversation` or `conversation/thread`) a decision
    /// must come from.
    pub channel: String,
    pub conversation: String,
    /// Sender ids of that channel.
    pub approvers: Vec<String>,
}

/// The platform's view of an inbound message.
#[derive(Debug, Clone)]
pub struct Origin {
    /// The platform conversation the message came in.
    pub conversation: String,
    pub sender: String,
    pub sender_name: Option<String>,
    pub message_id: String,
    pub thread: Option<String>,
    pub timestamp_ms: u64,
}

/// What the caller of a turn sees, in order. Host events and the runner's
/// events share one stream (`event` names the kind).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum AgentEvent {
    Host(HostEvent),
    Turn(TurnEvent),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum HostEvent {
    /// The session and turn this message belongs to.
    Session {
        session_id: i64,
        turn_id: String,
        workspace: String,
        new_session: bool,
    },
    /// The context sent to the agent.
    Context {
        messages: usize,
        history_dropped_turns: usize,
        memories_recalled: usize,
        estimated_tokens: u64,
    },
    /// A call waits for a person's decision; the request is stored
    /// already. Ask whoever `approvers` names, show `preview`.
    Approval {
        request: String,
        tool: String,
        preview: String,
        /// Who may decide, in words (`the originator U…`, `U1, U2`).
        approvers: String,
        /// A "for this session" decision can cover this call.
        session: bool,
        expires_ms: i64,
    },
    /// The request was decided (or expired) and the turn goes on.
    /// `announce`: nobody was told in the conversation yet (it expired, or
    /// an operator decided it elsewhere).
    Decided {
        request: String,
        outcome: String,
        announce: bool,
    },
    /// The workspace's container is ready.
    Container {
        name: String,
        started: bool,
        replaced: Option<String>,
        ready_ms: u64,
    },
}

/// How a turn ended, for the caller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnSummary {
    pub session_id: i64,
    pub turn_id: String,
    pub status: TurnStatus,
    pub reply: Option<String>,
    pub stop: Option<StopReason>,
    pub error: Option<String>,
}

/// Memories relevant to a message, as (id, kind, text), best first.
pub trait Recall: Send + Sync {
    fn recall(
        &self,
        workspace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(i64, String, String)>, crate::memory::MemoryError>;
}

/// Runs turns for the workspaces of one configuration.
pub struct Agent {
    config: Arc<Config>,
    runtime: Arc<ContainerRuntime>,
    sessions: Arc<SessionStore>,
    memory: Arc<dyn Recall>,
    gateway: Arc<Gateway>,
    /// The workspaces' gateway sockets, started by the composition root.
    sockets: WorkspaceSockets,
    /// The workspaces' egress proxies, started by the composition root.
    egress: crate::egress::EgressProxies,
    observers: HashMap<String, Observers>,
    /// Each workspace's container spec (or why it has none), computed once
    /// per configuration load.
    specs: HashMap<String, Result<containers::WorkspaceSpec, String>>,
    /// The chat channels, where `send_file` sends (a daemon attaches them).
    channels: std::sync::OnceLock<Arc<crate::channels::ChannelHost>>,
}

impl Agent {
    /// Whether `workspace` is one of this configuration's.
    pub fn has_workspace(&self, workspace: &str) -> bool {
        self.config.workspaces.contains_key(workspace)
    }

    #[allow(clippy::too_many_arguments)] // the composition root hands each service in
    pub fn new(
        config: Arc<Config>,
        home: &Path,
        runtime: Arc<ContainerRuntime>,
        sessions: Arc<SessionStore>,
        memory: Arc<dyn Recall>,
        gateway: Arc<Gateway>,
        sockets: WorkspaceSockets,
        egress: crate::egress::EgressProxies,
        observers: HashMap<String, Observers>,
    ) -> Self {
        let specs = config
            .workspaces
            .keys()
            .map(|name| {
                let spec = containers::plan(&config, home, runtime.instance(), name)
                    .map(|(_, spec)| spec)
                    .map_err(|e| e.to_string());
                (name.clone(), spec)
            })
            .collect();
        Agent {
            specs,
            channels: std::sync::OnceLock::new(),
            config,
            runtime,
            sessions,
            memory,
            gateway,
            sockets,
            egress,
            observers,
        }
    }

    /// Lets `send_file` send to the conversations of `channels`.
    pub fn attach_channels(&self, channels: Arc<crate::channels::ChannelHost>) {
        let _ = self.channels.set(channels);
    }

    /// Where files for `workspace` go (its folder, made when missing)
    /// and whose they are (its container's user).
    pub fn inbox(&self, workspace: &str) -> Result<crate::channels::files::InboxDir, String> {
        let spec = match self.specs.get(workspace) {
            Some(Ok(spec)) => spec,
            Some(Err(why)) => return Err(why.clone()),
            None => return Err(format!("workspace `{workspace}` is not configured")),
        };
        let owner = containers::parse_user(&spec.settings.user);
        containers::ensure_workspace_dir(&spec.workspace_dir, owner).map_err(|e| e.to_string())?;
        Ok(crate::channels::files::InboxDir {
            workspace_dir: spec.workspace_dir.clone(),
            owner,
        })
    }

    /// Whether the model alias `model` takes images: every deployment of
    /// it says `model_info.supports_vision: true`.
    pub fn sees_images(&self, model: &str) -> bool {
        let mut deployments = self
            .config
            .gateway
            .model_list
            .iter()
            .filter(|d| d.model_name == model)
            .peekable();
        deployments.peek().is_some() && deployments.all(|d| d.model_info.supports_vision)
    }

    pub fn runtime(&self) -> &Arc<ContainerRuntime> {
        &self.runtime
    }

    pub fn sessions(&self) -> &SessionStore {
        &self.sessions
    }

    pub fn gateway(&self) -> &Arc<Gateway> {
        &self.gateway
    }

    pub fn gateway_sockets(&self) -> &WorkspaceSockets {
        &self.sockets
    }

    /// Lets observers deliver what is queued and the egress proxies'
    /// connections end (each is audited when it ends), for at most `within`
    /// each; call before the process exits.
    pub async fn close(&self, within: Duration) {
        for observers in self.observers.values() {
            observers.close(within).await;
        }
        self.egress.close(within).await;
    }

    /// Runs one turn. Events go to `events` as they happen; `cancel`
    /// resolving stops the turn (the runner is told by the closed
    /// connection). Errors before the turn starts are returned; everything
    /// after is in the summary (and stored).
    pub async fn turn(
        &self,
        inbound: Inbound,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
        cancel: impl Future<Output = ()>,
    ) -> Result<TurnSummary, TurnError> {
        let key = inbound.key.clone();
        let workspace = self
            .config
            .workspaces
            .get(&key.workspace)
            .ok_or_else(|| TurnError::UnknownWorkspace(key.workspace.clone()))?;
        let text = inbound.text.trim();
        if text.is_empty() {
            return Err(TurnError::BadMessage("the message is empty".into()));
        }
        if text.len() > MAX_MESSAGE_BYTES {
            return Err(TurnError::BadMessage(format!(
                "the message is {} bytes; the limit is {} KiB",
                text.len(),
                MAX_MESSAGE_BYTES / 1024
            )));
        }
        let (session, new_session, text) = match text.strip_prefix(NEW_SESSION_COMMAND) {
            Some(rest) if rest.is_empty() || rest.starts_with(char::is_whitespace) => {
                (self.sessions.start_new(&key)?, true, rest.trim())
            }
            _ => (self.sessions.current(&key)?, false, text),
        };
        let turn_id = uuid::Uuid::new_v4().to_string();
        events(AgentEvent::Host(HostEvent::Session {
            session_id: session.id,
            turn_id: turn_id.clone(),
            workspace: key.workspace.clone(),
            new_session,
        }));
        if text.is_empty() {
            let reply = "Started a new session.".to_string();
            events(AgentEvent::Turn(TurnEvent::Done {
                reply: reply.clone(),
                steps: 0,
                stop: StopReason::Finished,
            }));
            return Ok(TurnSummary {
                session_id: session.id,
                turn_id,
                status: TurnStatus::Done,
                reply: Some(reply),
                stop: Some(StopReason::Finished),
                error: None,
            });
        }
        let model = workspace
            .model
            .clone()
            .unwrap_or_else(|| DEFAULT_MODEL_ALIAS.to_string());
        self.check_model(&key.workspace, &model)?;

        self.sessions.begin_turn(session.id, &turn_id)?;
        let user = json!({"role": "user", "content": text});
        self.sessions.append(session.id, &turn_id, &user)?;
        let observe = self.observer(&key.workspace, session.id);
        let origin = inbound.origin.as_ref();
        observe(api::EventBody::MessageIn(api::Message {
            id: origin.map_or_else(|| turn_id.clone(), |o| o.message_id.clone()),
            conversation: key.conversation.clone(),
            thread: origin.and_then(|o| o.thread.clone()),
            sender: origin.map_or_else(|| key.channel.clone(), |o| o.sender.clone()),
            sender_name: origin.and_then(|o| o.sender_name.clone()),
            text: text.to_string(),
            timestamp_ms: origin.map_or_else(
                || u64::try_from(crate::db::now_ms()).unwrap_or(0),
                |o| o.timestamp_ms,
            ),
            files: Vec::new(),
        }));

        let scope = Scope {
            key: &key,
            session_id: session.id,
            turn_id: &turn_id,
            model: &model,
            text,
            gate: self.gate(&key, origin, inbound.presence.clone()),
            resume: None,
            quoted: inbound.quoted.as_ref(),
            images: &inbound.images,
            origin,
        };
        let run = self.run(&scope, events, &observe);
        let outcome = tokio::select! {
            outcome = run => outcome,
            () = cancel => Outcome::Cancelled,
        };
        self.finish(&scope, origin, outcome, events, &observe)
    }

    /// Continues turn `turn_id`, which stopped (a restart) while `request`
    /// waited: the decided call runs (or is refused) first, without asking
    /// the model again, then the turn goes on from the stored session.
    pub async fn resume(
        &self,
        key: SessionKey,
        origin: Option<Origin>,
        request: &approvals::Request,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
        cancel: impl Future<Output = ()>,
    ) -> Result<TurnSummary, TurnError> {
        let workspace = self
            .config
            .workspaces
            .get(&key.workspace)
            .ok_or_else(|| TurnError::UnknownWorkspace(key.workspace.clone()))?;
        let turn_id = request.turn_id.clone();
        let turn = self.sessions.turn(&turn_id)?.ok_or_else(|| {
            TurnError::BadMessage(format!(
                "turn {turn_id} of approval request {} is not stored",
                request.id
            ))
        })?;
        let model = workspace
            .model
            .clone()
            .unwrap_or_else(|| DEFAULT_MODEL_ALIAS.to_string());
        self.check_model(&key.workspace, &model)?;
        let stored = self.sessions.messages(turn.session_id)?;
        let text = stored
            .iter()
            .rev()
            .filter(|m| m.turn_id == turn_id && m.message["role"] == "user")
            .find_map(|m| m.message["content"].as_str().map(str::to_string))
            .unwrap_or_default();
        events(AgentEvent::Host(HostEvent::Session {
            session_id: turn.session_id,
            turn_id: turn_id.clone(),
            workspace: key.workspace.clone(),
            new_session: false,
        }));
        let (mut verdict, outcome) = verdict_of(request, workspace.approvals.timeout.0);
        if verdict == Verdict::Run
            && pincer_runner_protocol::HOST_TOOLS.contains(&request.tool.as_str())
        {
            // The host carries it out now, with the arguments the model gave.
            let arguments = call_arguments(&stored, &request.call_id).unwrap_or_default();
            verdict = self
                .host_tool(&key, origin.as_ref(), &request.tool, &arguments)
                .await;
        }
        let announce = announced(request);
        if verdict == Verdict::Run
            && self
                .gateway
                .tool_source(&key.workspace, &request.tool)
                .is_some()
        {
            self.gateway.approvals().permit(
                &key.workspace,
                &request.fingerprint,
                permit_ttl(workspace.agent.tool_timeout_secs),
            );
        }
        events(AgentEvent::Host(HostEvent::Decided {
            request: request.id.clone(),
            outcome,
            announce,
        }));
        let scope = Scope {
            key: &key,
            session_id: turn.session_id,
            turn_id: &turn_id,
            model: &model,
            text: &text,
            gate: self.gate(&key, origin.as_ref(), Presence::Person),
            resume: Some((
                request.id.clone(),
                Resume {
                    call_id: request.call_id.clone(),
                    verdict,
                },
            )),
            quoted: None,
            images: &[],
            origin: origin.as_ref(),
        };
        let observe = self.observer(&key.workspace, turn.session_id);
        let run = self.run(&scope, events, &observe);
        let outcome = tokio::select! {
            outcome = run => outcome,
            () = cancel => Outcome::Cancelled,
        };
        self.finish(&scope, origin.as_ref(), outcome, events, &observe)
    }

    /// Hands a turn's events to the workspace's observers.
    fn observer(
        &self,
        workspace: &str,
        session_id: i64,
    ) -> impl Fn(api::EventBody) + Send + Sync + '_ {
        let observers = self.observers.get(workspace);
        let workspace = workspace.to_string();
        move |body: api::EventBody| {
            if let Some(o) = observers {
                o.emit(api::Event {
                    timestamp_ms: u64::try_from(crate::db::now_ms()).unwrap_or(0),
                    workspace: Some(workspace.clone()),
                    session: Some(session_id.to_string()),
                    body,
                });
            }
        }
    }

    /// The approvals in force for a turn of `key` from `origin`; `None`
    /// where nothing is asked (tier yolo): its calls are not checked.
    fn gate(&self, key: &SessionKey, origin: Option<&Origin>, presence: Presence) -> Option<Gate> {
        let sender = origin.map(|o| o.sender.as_str());
        let mut policy = self
            .config
            .approval_policy(&key.workspace, Some(&key.channel), sender)?;
        // What the conversation chose for itself (`/tier`) can only tighten;
        // unreadable, it is taken as the strictest.
        let chosen = self
            .gateway
            .approvals()
            .store()
            .session_tier(&key.workspace, &key.channel, &key.conversation)
            .unwrap_or_else(|e| {
                tracing::warn!(workspace = %key.workspace, "the conversation's tier cannot be read, so read-only holds: {e}");
                Some(approvals::Tier::ReadOnly)
            });
        if let Some(chosen) = chosen {
            policy.tier = policy.tier.tightened_by(chosen);
        }
        if let Presence::Appointed(appointed) = &presence {
            policy.approvers = approvals::Approvers::Listed(appointed.approvers.clone());
        }
        (policy.tier != approvals::Tier::Yolo).then(|| Gate {
            policy,
            originator: sender.map(str::to_string),
            presence,
        })
    }

    /// Records how the turn ended and tells the observers.
    fn finish(
        &self,
        scope: &Scope<'_>,
        origin: Option<&Origin>,
        outcome: Outcome,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
        observe: &(dyn Fn(api::EventBody) + Send + Sync),
    ) -> Result<TurnSummary, TurnError> {
        let key = scope.key;
        let turn_id = scope.turn_id.to_string();
        let summary = |status, reply, stop, error| TurnSummary {
            session_id: scope.session_id,
            turn_id: turn_id.clone(),
            status,
            reply,
            stop,
            error,
        };
        Ok(match outcome {
            Outcome::Done { reply, stop } => {
                self.sessions
                    .finish_turn(&turn_id, TurnStatus::Done, None)?;
                observe(api::EventBody::MessageOut(api::Outbound {
                    conversation: key.conversation.clone(),
                    thread: origin.and_then(|o| o.thread.clone()),
                    text: reply.clone(),
                    reply_to: Some(
                        origin.map_or_else(|| turn_id.clone(), |o| o.message_id.clone()),
                    ),
                    actions: Vec::new(),
                    visible_to: None,
                }));
                summary(TurnStatus::Done, Some(reply), Some(stop), None)
            }
            Outcome::Failed(message) => {
                self.sessions
                    .finish_turn(&turn_id, TurnStatus::Failed, Some(&message))?;
                observe(api::EventBody::Error(message.clone()));
                summary(TurnStatus::Failed, None, None, Some(message))
            }
            Outcome::Cancelled => {
                let message = "the turn was cancelled".to_string();
                self.sessions
                    .finish_turn(&turn_id, TurnStatus::Cancelled, Some(&message))?;
                events(AgentEvent::Turn(TurnEvent::Failed {
                    kind: TurnErrorKind::Internal,
                    message: message.clone(),
                }));
                observe(api::EventBody::Error(message.clone()));
                summary(TurnStatus::Cancelled, None, None, Some(message))
            }
        })
    }

    /// The alias must exist in `gateway.model_list`; otherwise say exactly
    /// what to configure.
    fn check_model(&self, workspace: &str, model: &str) -> Result<(), TurnError> {
        let list = &self.config.gateway.model_list;
        if list.iter().any(|d| d.model_name == model) {
            return Ok(());
        }
        if list.is_empty() {
            return Err(TurnError::NoModel(format!(
                "no model is configured, so workspace `{workspace}` cannot think yet. \
                 Set a provider key and run `pincer init` (it writes a pincer.yaml using it): \
                 `export OPENAI_API_KEY=sk-...` or `export ANTHROPIC_API_KEY=sk-ant-...`; \
                 or add to pincer.yaml:\n  gateway:\n    model_list:\n      - model_name: {model}\n        \
                 litellm_params: {{model: openai/gpt-4o-mini, api_key: \"${{OPENAI_API_KEY}}\"}}"
            )));
        }
        let known: std::collections::BTreeSet<_> =
            list.iter().map(|d| d.model_name.as_str()).collect();
        Err(TurnError::NoModel(format!(
            "workspace `{workspace}` uses the model alias `{model}`, which gateway.model_list does not define (it defines: {}); set workspaces.{workspace}.model to one of them or add a `{model}` entry",
            known.into_iter().collect::<Vec<_>>().join(", ")
        )))
    }

    async fn run(
        &self,
        scope: &Scope<'_>,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
        observe: &(dyn Fn(api::EventBody) + Send + Sync),
    ) -> Outcome {
        let (workspace, session_id, text) = (&scope.key.workspace, scope.session_id, scope.text);
        let Some(ws) = self.config.workspaces.get(workspace) else {
            return Outcome::Failed(format!("no workspace named `{workspace}`"));
        };
        let limits = ws.agent;
        let spec = match self.specs.get(workspace) {
            Some(Ok(spec)) => spec.clone(),
            Some(Err(e)) => return fail(events, TurnErrorKind::Internal, e.clone()),
            None => {
                return fail(
                    events,
                    TurnErrorKind::Internal,
                    format!("no workspace named `{workspace}`"),
                );
            }
        };

        // Context: system prompt, memories, history (which ends with `text`).
        // The instructions file is in the container-writable workspace
        // folder: read beneath it, off the async threads, within the turn's
        // time limit.
        let deadline = Duration::from_secs(limits.turn_timeout_secs);
        let read = {
            let folder = spec.workspace_dir.clone();
            let configured = ws.instructions.clone();
            tokio::task::spawn_blocking(move || {
                context::instructions(&folder, configured.as_deref())
            })
        };
        let (instructions, notice) = match tokio::time::timeout(deadline, read).await {
            Ok(Ok(read)) => read,
            Ok(Err(e)) => (
                None,
                Some(format!(
                    "the instructions file could not be read ({e}); continuing without it"
                )),
            ),
            Err(_) => (
                None,
                Some(format!(
                    "reading the instructions file took longer than {} s; continuing without it",
                    limits.turn_timeout_secs
                )),
            ),
        };
        if let Some(notice) = notice {
            events(AgentEvent::Turn(TurnEvent::Notice { message: notice }));
        }
        let memories = if ws.memory.enabled && ws.memory.recall_limit > 0 {
            // Off the async threads: the query may be embedded (and the
            // embedding model loaded) first.
            let (memory, ws_name, query, limit) = (
                self.memory.clone(),
                workspace.to_owned(),
                text.to_owned(),
                ws.memory.recall_limit,
            );
            let recalled =
                tokio::task::spawn_blocking(move || memory.recall(&ws_name, &query, limit))
                    .await
                    .unwrap_or_else(|e| Err(crate::memory::MemoryError::Task(e.to_string())));
            match recalled {
                Ok(found) => found,
                Err(e) => {
                    events(AgentEvent::Turn(TurnEvent::Notice {
                        message: format!("memories could not be recalled: {e}"),
                    }));
                    Vec::new()
                }
            }
        } else {
            Vec::new()
        };
        let memory_lines = context::memory_lines(&memories, ws.memory.recall_chars);
        let stored = match self.sessions.messages(session_id) {
            Ok(stored) => stored,
            Err(e) => return fail(events, TurnErrorKind::Internal, e.to_string()),
        };
        // A resumed turn's last calls stay open: the runner answers them.
        let open = scope.resume.as_ref().map(|_| scope.turn_id);
        let history = crate::sessions::trim_to_budget(&stored, limits.history_tokens, open);
        if history.dropped_turns > 0 {
            events(AgentEvent::Turn(TurnEvent::Notice {
                message: format!(
                    "{} older turn(s) of this session were left out of the context to stay within {} tokens of history; they remain stored",
                    history.dropped_turns, limits.history_tokens
                ),
            }));
        }
        let mut messages = vec![context::system_message(
            workspace,
            instructions.as_deref(),
            &memory_lines,
        )];
        messages.extend(history.messages);
        if let Some(quoted) = scope.quoted {
            // Before the message being answered, which ends the history.
            let at = messages.len().saturating_sub(1).max(1);
            messages.insert(at, quoted.clone());
        }
        if !scope.images.is_empty() && self.sees_images(scope.model) {
            let folder = spec.workspace_dir.clone();
            let paths = scope.images.to_vec();
            let shown = tokio::task::spawn_blocking(move || context::image_parts(&folder, &paths))
                .await
                .unwrap_or_else(|e| (Vec::new(), vec![e.to_string()]));
            for problem in shown.1 {
                events(AgentEvent::Turn(TurnEvent::Notice { message: problem }));
            }
            if let Some(last) = messages.last_mut() {
                context::with_images(last, shown.0);
            }
        }
        events(AgentEvent::Host(HostEvent::Context {
            messages: messages.len(),
            history_dropped_turns: history.dropped_turns,
            memories_recalled: memory_lines.len(),
            estimated_tokens: history.estimated_tokens,
        }));

        if let Err(e) = self.sockets.check(workspace) {
            return fail(events, TurnErrorKind::GatewayUnreachable, e);
        }
        if let Err(e) = self.egress.check(workspace) {
            events(AgentEvent::Turn(TurnEvent::Notice {
                message: format!("{e}: the container has no way out in this turn"),
            }));
        }
        let started = Instant::now();
        let ensured = match self.runtime.ensure(&spec).await {
            Ok(ensured) => ensured,
            Err(e) => return fail(events, TurnErrorKind::Internal, e.to_string()),
        };
        events(AgentEvent::Host(HostEvent::Container {
            name: spec.container_name.clone(),
            started: ensured.created,
            replaced: ensured.replaced.clone(),
            ready_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        }));

        let request = TurnRequest {
            turn_id: scope.turn_id.to_string(),
            model: scope.model.to_string(),
            messages,
            limits: TurnLimits {
                max_steps: limits.max_steps,
                max_tool_output_bytes: limits.max_tool_output_bytes,
                tool_timeout_ms: limits.tool_timeout_secs.saturating_mul(1000),
                max_total_tokens: limits.max_turn_tokens,
                max_completion_tokens: None,
            },
            gateway_tools: true,
            checked: scope.gate.is_some(),
            resume: scope.resume.as_ref().map(|(_, resume)| resume.clone()),
        };
        let socket = containers::runner_addr(&spec, &ensured.id);
        // Time spent waiting for a person's decision does not count.
        let mut deadline =
            tokio::time::Instant::now() + Duration::from_secs(limits.turn_timeout_secs);
        let bounds = RelayBounds {
            workspace,
            max_events: limits.max_turn_events,
            max_bytes: limits.max_turn_stored_bytes,
        };
        let streamed = self
            .relay(
                &socket,
                request,
                scope,
                &bounds,
                &mut deadline,
                events,
                observe,
            )
            .await;
        match streamed {
            Ok(outcome) => outcome,
            Err(RelayEnd::RunnerGone) => {
                let message = self.container_gone(workspace).await;
                fail(events, TurnErrorKind::Internal, message)
            }
            Err(RelayEnd::TimedOut) => fail(
                events,
                TurnErrorKind::Internal,
                format!(
                    "the turn took longer than {} s (workspaces.{workspace}.agent.turn_timeout_secs) and was stopped",
                    limits.turn_timeout_secs
                ),
            ),
        }
    }

    /// The host's verdict on a call the runner checks, and the request it
    /// waited on if a person was asked. A host tool the verdict lets run is
    /// carried out here.
    async fn check(
        &self,
        scope: &Scope<'_>,
        call_id: &str,
        name: &str,
        arguments: &serde_json::Value,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
    ) -> (Verdict, Option<String>) {
        let host_tool = pincer_runner_protocol::HOST_TOOLS.contains(&name);
        let (verdict, request) = match &scope.gate {
            None if host_tool => (Verdict::Run, None),
            _ => self.judge(scope, call_id, name, arguments, events).await,
        };
        if host_tool && verdict == Verdict::Run {
            let ran = self
                .host_tool(scope.key, scope.origin, name, arguments)
                .await;
            return (ran, request);
        }
        (verdict, request)
    }

    /// Whether the approvals let the call run, asking a person if needed.
    async fn judge(
        &self,
        scope: &Scope<'_>,
        call_id: &str,
        name: &str,
        arguments: &serde_json::Value,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
    ) -> (Verdict, Option<String>) {
        let Some(gate) = &scope.gate else {
            return (
                Verdict::Refuse {
                    message: "this turn's calls are not checked, yet the runner asked".into(),
                },
                None,
            );
        };
        let ws = scope.key.workspace.as_str();
        let store = self.gateway.approvals().store();
        let source = self.gateway.tool_source(ws, name);
        let call = approvals::Call {
            tool: name,
            source: source.as_ref().map(|(kind, name)| (*kind, name.as_str())),
            arguments,
        };
        let class =
            approvals::builtin_class(name).unwrap_or_else(|| self.gateway.tool_class(ws, name));
        let session = scope.session_id.to_string();
        let stored = store.rules(ws).unwrap_or_else(|e| {
            tracing::warn!(workspace = ws, "the approval rules cannot be read: {e}");
            Vec::new()
        });
        let session_allows =
            |shape: &str| store.session_allows(ws, &session, shape).unwrap_or(false);
        let judgement = if arguments.is_object() {
            gate.policy
                .judge(ws, &call, class, &stored, &session_allows)
        } else {
            Judgement::Refuse(format!("the arguments of `{name}` must be a JSON object"))
        };
        let refuse = |message: String| self.refuse(ws, &session, name, message);
        match judgement {
            Judgement::Run(_) => {
                self.permit(scope, source.is_some(), &call);
                (Verdict::Run, None)
            }
            Judgement::Refuse(message) => refuse(message),
            Judgement::Ask if gate.presence == Presence::NobodyForAgentTask => refuse(format!(
                "`{name}` needs a person's approval in workspace `{ws}`, and a task the agent \
                 scheduled itself never runs such a call unasked, so it was not run"
            )),
            Judgement::Ask if gate.presence == Presence::Nobody => match gate.policy.unattended {
                approvals::Unattended::Allow => {
                    self.permit(scope, source.is_some(), &call);
                    (Verdict::Run, None)
                }
                approvals::Unattended::Deny => refuse(format!(
                    "`{name}` needs a person's approval in workspace `{ws}`, and nobody can be \
                     asked in a scheduled run (approvals.unattended: deny), so it was not run"
                )),
            },
            Judgement::Ask => {
                self.ask(scope, gate, &call, call_id, source.is_some(), events)
                    .await
            }
        }
    }

    /// Refuses `tool`'s call with `message` (what the model reads), audited
    /// as `approval.denied`.
    fn refuse(
        &self,
        ws: &str,
        session: &str,
        tool: &str,
        message: String,
    ) -> (Verdict, Option<String>) {
        self.audit(
            ws,
            crate::audit::Action::ApprovalDenied,
            &format!("`{tool}` in session {session}: {message}"),
        );
        (Verdict::Refuse { message }, None)
    }

    /// Stores a request for `call`, shows it, and waits for its decision.
    async fn ask(
        &self,
        scope: &Scope<'_>,
        gate: &Gate,
        call: &approvals::Call<'_>,
        call_id: &str,
        through_gateway: bool,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
    ) -> (Verdict, Option<String>) {
        let ws = scope.key.workspace.as_str();
        let approvals = self.gateway.approvals();
        let session = scope.session_id.to_string();
        let preview = approvals::preview(call);
        let refused = |why: String| {
            let message = format!(
                "`{}` needs a person's approval, but {why}; it was not run",
                call.tool
            );
            self.refuse(ws, &session, call.tool, message)
        };
        if preview.len() > approvals::MAX_PREVIEW_BYTES {
            return refused(format!(
                "its arguments are {} bytes, more than the {} a person is asked to review",
                preview.len(),
                approvals::MAX_PREVIEW_BYTES
            ));
        }
        if let Err(why) = approvals.admit_request(ws, std::time::Instant::now()) {
            return refused(format!("{why}; nobody was asked"));
        }
        let shape = call.shape();
        let fingerprint = call.fingerprint();
        let appointed = match &gate.presence {
            Presence::Appointed(appointed) => Some(appointed),
            _ => None,
        };
        let new = approvals::NewRequest {
            workspace: ws,
            session: &session,
            turn_id: scope.turn_id,
            call_id,
            channel: appointed.map_or(&scope.key.channel, |a| &a.channel),
            conversation: appointed.map_or(&scope.key.conversation, |a| &a.conversation),
            originator: gate.originator.as_deref(),
            approvers: appointed.map(|a| a.approvers.as_slice()),
            scheduled_task: appointed.map(|a| a.task.as_str()),
            tool: call.tool,
            fingerprint: &fingerprint,
            shape: shape.as_deref(),
            preview: &preview,
            now_ms: crate::db::now_ms(),
            timeout_ms: i64::try_from(gate.policy.timeout.as_millis()).unwrap_or(i64::MAX),
        };
        let id = match approvals.store().request(&new) {
            Ok(id) => id,
            Err(e) => {
                let message = format!(
                    "`{}` needs a person's approval, and the request could not be stored ({e}), so it was not run",
                    call.tool
                );
                return (Verdict::Refuse { message }, None);
            }
        };
        let approvers = approvers_text(&gate.policy, gate.originator.as_deref());
        self.audit(
            ws,
            crate::audit::Action::ApprovalRequested,
            &format!(
                "request {id}: `{}` in session {session}, for {approvers}: {}",
                call.tool,
                approvals::shown_preview(&preview)
            ),
        );
        events(AgentEvent::Host(HostEvent::Approval {
            request: id.clone(),
            tool: call.tool.to_string(),
            preview: preview.clone(),
            approvers,
            session: shape.is_some(),
            expires_ms: new.now_ms.saturating_add(new.timeout_ms),
        }));
        let mut announce = true;
        let (verdict, outcome) = match approvals.settled(&id).await {
            Ok(request) => {
                announce = announced(&request);
                if request.state == approvals::State::Expired {
                    self.audit(
                        ws,
                        crate::audit::Action::ApprovalExpired,
                        &format!(
                            "request {id}: `{}` was denied, nobody decided in time",
                            call.tool
                        ),
                    );
                }
                verdict_of(&request, gate.policy.timeout)
            }
            Err(e) => {
                let outcome = format!("the request could not be read back ({e})");
                (
                    Verdict::Refuse {
                        message: format!("{outcome}; the call was not run"),
                    },
                    outcome,
                )
            }
        };
        if verdict == Verdict::Run {
            self.permit(scope, through_gateway, call);
        }
        events(AgentEvent::Host(HostEvent::Decided {
            request: id.clone(),
            outcome,
            announce,
        }));
        (verdict, Some(id))
    }

    /// Asks, as for a tool call, whether the workspace's container may
    /// reach a host its egress allowlist does not list (`egress_ask`):
    /// only where this turn has someone to ask and its tier asks.
    async fn ask_egress(
        &self,
        scope: &Scope<'_>,
        question: &crate::egress::Question,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
    ) -> Result<String, String> {
        let Some(gate) = &scope.gate else {
            return Err("nobody is asked in tier yolo".to_owned());
        };
        if gate.policy.tier == approvals::Tier::ReadOnly {
            return Err("nobody is asked in tier read-only".to_owned());
        }
        if matches!(
            gate.presence,
            Presence::Nobody | Presence::NobodyForAgentTask
        ) {
            return Err("nobody is there to ask in a scheduled run".to_owned());
        }
        let arguments = serde_json::json!({"host": question.host, "port": question.port});
        let call = approvals::Call {
            tool: approvals::EGRESS_TOOL,
            source: None,
            arguments: &arguments,
        };
        let call_id = format!("egress-{}", uuid::Uuid::new_v4().simple());
        let (verdict, request) = self.ask(scope, gate, &call, &call_id, false, events).await;
        if let Some(id) = &request {
            self.applied(id);
        }
        match verdict {
            Verdict::Run => Ok(format!(
                "approved in request {}",
                request.unwrap_or_default()
            )),
            Verdict::Refuse { message }
            | Verdict::Ran {
                output: message, ..
            } => Err(message),
        }
    }

    /// Lets the gateway run `call` once, when it goes through the gateway.
    fn permit(&self, scope: &Scope<'_>, through_gateway: bool, call: &approvals::Call<'_>) {
        if !through_gateway {
            return;
        }
        let ttl = self
            .config
            .workspaces
            .get(&scope.key.workspace)
            .map_or(permit_ttl(60), |ws| permit_ttl(ws.agent.tool_timeout_secs));
        self.gateway
            .approvals()
            .permit(&scope.key.workspace, &call.fingerprint(), ttl);
    }

    /// Records that request `id`'s decision reached the runner.
    fn applied(&self, id: &str) {
        if let Err(e) = self.gateway.approvals().store().mark_applied(id) {
            tracing::warn!(request = id, "cannot record an applied decision: {e}");
        }
    }

    fn audit(&self, workspace: &str, action: crate::audit::Action, detail: &str) {
        self.runtime.audit().record(
            crate::audit::Actor::Workspace(workspace),
            Some(workspace),
            action,
            detail,
        );
    }

    /// Explains a runner that vanished mid-turn from its container's state.
    async fn container_gone(&self, workspace: &str) -> String {
        let state = match self.runtime.status(workspace).await {
            Ok(Some(status)) => format!("{} ({})", status.state, status.status),
            Ok(None) => "removed".to_string(),
            Err(e) => format!("unknown: {e}"),
        };
        format!(
            "the workspace container stopped during the turn (container state: {state}); \
             everything said so far is stored; send the message again to retry in a fresh container"
        )
    }

    /// Streams the runner's events: stores them, forwards them, observes.
    /// The runner is inside the container, so what it sends is bounded.
    #[allow(clippy::too_many_arguments)]
    async fn relay(
        &self,
        socket: &RunnerAddr,
        request: TurnRequest,
        scope: &Scope<'_>,
        bounds: &RelayBounds<'_>,
        deadline: &mut tokio::time::Instant,
        events: &(dyn Fn(AgentEvent) + Send + Sync),
        observe: &(dyn Fn(api::EventBody) + Send + Sync),
    ) -> Result<Outcome, RelayEnd> {
        let (session_id, turn_id) = (scope.session_id, scope.turn_id);
        let model = request.model.clone();
        let mut stream = match containers::runner_turn(socket, request).await {
            Ok(stream) => stream,
            Err(e) => return Ok(fail(events, TurnErrorKind::Internal, e.to_string())),
        };
        if let Some((id, _)) = &scope.resume {
            self.applied(id);
        }
        let mut pending: HashMap<String, (String, String)> = HashMap::new();
        let mut count: u64 = 0;
        let asks = self
            .config
            .workspaces
            .get(&scope.key.workspace)
            .is_some_and(|ws| ws.egress_ask);
        let mut listening = asks.then(|| self.egress.asking().listen(&scope.key.workspace));
        loop {
            let question = async {
                match listening.as_mut() {
                    Some(listening) => listening.questions.recv().await,
                    None => std::future::pending().await,
                }
            };
            let next = tokio::select! {
                next = tokio::time::timeout_at(*deadline, stream.next()) => {
                    next.map_err(|_| RelayEnd::TimedOut)?
                }
                Some(question) = question => {
                    let asked = tokio::time::Instant::now();
                    let answer = self.ask_egress(scope, &question, events).await;
                    *deadline += asked.elapsed();
                    let _ = question.reply.send(answer);
                    continue;
                }
            };
            let event = match next {
                Ok(Some(event)) => event,
                Ok(None) => return Ok(Outcome::Failed("the turn ended without an outcome".into())),
                Err(RunnerError::Closed) => return Err(RelayEnd::RunnerGone),
                Err(e) => return Ok(fail(events, TurnErrorKind::Internal, e.to_string())),
            };
            count += 1;
            if let Some(message) = bounds.exceeded(count, stream.received_bytes()) {
                self.runtime.audit().record(
                    crate::audit::Actor::Workspace(bounds.workspace),
                    Some(bounds.workspace),
                    crate::audit::Action::TurnRunnerFlood,
                    &message,
                );
                // Dropping the stream closes the connection: the runner stops.
                return Ok(fail(events, TurnErrorKind::Internal, message));
            }
            if let Err(e) = self.store(session_id, turn_id, &event, &mut pending, observe, &model) {
                // The stored record is the source of truth: without it the
                // turn must not go on.
                return Ok(fail(events, TurnErrorKind::Internal, e.to_string()));
            }
            if let TurnEvent::Check {
                call_id,
                name,
                arguments,
            } = &event
            {
                let asked = tokio::time::Instant::now();
                let (verdict, request) = self.check(scope, call_id, name, arguments, events).await;
                *deadline += asked.elapsed();
                if stream.answer(&verdict).await.is_err() {
                    return Err(RelayEnd::RunnerGone);
                }
                if let Some(id) = request {
                    self.applied(&id);
                }
                continue;
            }
            let outcome = match &event {
                TurnEvent::Done { reply, stop, .. } => Some(Outcome::Done {
                    reply: reply.clone(),
                    stop: *stop,
                }),
                TurnEvent::Failed { message, .. } => Some(Outcome::Failed(message.clone())),
                _ => None,
            };
            events(AgentEvent::Turn(event));
            if let Some(outcome) = outcome {
                return Ok(outcome);
            }
        }
    }

    fn store(
        &self,
        session_id: i64,
        turn_id: &str,
        event: &TurnEvent,
        pending: &mut HashMap<String, (String, String)>,
        observe: &(dyn Fn(api::EventBody) + Send + Sync),
        model: &str,
    ) -> Result<(), crate::sessions::SessionError> {
        match event {
            TurnEvent::Message { message } => {
                self.sessions.append(session_id, turn_id, message)?;
            }
            TurnEvent::Usage {
                model: used,
                prompt_tokens,
                completion_tokens,
            } => {
                self.sessions
                    .add_usage(turn_id, *prompt_tokens, *completion_tokens)?;
                observe(api::EventBody::LlmUsage(api::LlmUsage {
                    model: if used.is_empty() { model } else { used }.to_string(),
                    input_tokens: u32::try_from(*prompt_tokens).unwrap_or(u32::MAX),
                    output_tokens: u32::try_from(*completion_tokens).unwrap_or(u32::MAX),
                    cost_usd: None,
                }));
            }
            TurnEvent::ToolStart {
                call_id,
                name,
                arguments,
            } => {
                pending.insert(call_id.clone(), (name.clone(), arguments.clone()));
            }
            TurnEvent::ToolEnd {
                call_id,
                name,
                ok,
                output_bytes,
                truncated,
                duration_ms,
            } => {
                let arguments = pending
                    .remove(call_id)
                    .map(|(_, args)| args)
                    .unwrap_or_default();
                self.sessions.record_tool_call(
                    turn_id,
                    &ToolCallRecord {
                        call_id: call_id.clone(),
                        name: name.clone(),
                        arguments: arguments.clone(),
                        ok: *ok,
                        output_bytes: *output_bytes as u64,
                        truncated: *truncated,
                        duration_ms: *duration_ms,
                    },
                )?;
                observe(api::EventBody::ToolCall(api::ToolCall {
                    tool: name.clone(),
                    args_json: arguments,
                    outcome: Some(if *ok {
                        Ok(format!("{output_bytes} bytes"))
                    } else {
                        Err(format!("failed ({output_bytes} bytes of output)"))
                    }),
                    duration_ms: Some(u32::try_from(*duration_ms).unwrap_or(u32::MAX)),
                }));
            }
            _ => {}
        }
        Ok(())
    }
}

enum Outcome {
    Done { reply: String, stop: StopReason },
    Failed(String),
    Cancelled,
}

/// Why a turn's stream ended without an outcome.
enum RelayEnd {
    /// The runner's connection closed mid-turn (its container stopped).
    RunnerGone,
    /// `agent.turn_timeout_secs` passed (waits for a decision not counted).
    TimedOut,
}

/// One turn as `run` runs it.
struct Scope<'a> {
    key: &'a SessionKey,
    session_id: i64,
    turn_id: &'a str,
    model: &'a str,
    /// The message memories are recalled for.
    text: &'a str,
    /// `None`: nothing is asked (tier yolo), calls are not checked.
    gate: Option<Gate>,
    /// A resumed turn: the request decided and the call it starts with.
    resume: Option<(String, Resume)>,
    /// Quoted earlier messages, just before the new message.
    quoted: Option<&'a serde_json::Value>,
    /// Images of the new message (paths beneath the workspace folder).
    images: &'a [String],
    /// The message that started the turn (channel turns).
    origin: Option<&'a Origin>,
}

/// The approvals in force for one turn.
struct Gate {
    policy: approvals::Policy,
    /// The sender whose message started the turn (`None`: the CLI).
    originator: Option<String>,
    presence: Presence,
}

/// How long a permit for a skill or MCP call the turn let through lasts.
fn permit_ttl(tool_timeout_secs: u64) -> Duration {
    Duration::from_secs(tool_timeout_secs.saturating_add(60))
}

/// What the runner does with a decided request, and the words for it.
/// The arguments of tool call `call_id` in the stored messages.
fn call_arguments(
    stored: &[crate::sessions::StoredMessage],
    call_id: &str,
) -> Option<serde_json::Value> {
    stored.iter().rev().find_map(|m| {
        m.message["tool_calls"]
            .as_array()?
            .iter()
            .find(|call| call["id"] == call_id)
            .and_then(|call| call["function"]["arguments"].as_str())
            .and_then(|raw| serde_json::from_str(raw).ok())
    })
}

fn verdict_of(request: &approvals::Request, timeout: Duration) -> (Verdict, String) {
    let by = request.decided_by.as_deref().unwrap_or("someone");
    match request.state {
        approvals::State::Granted => {
            let how = match request.decision.as_deref() {
                Some("session") => "for this session",
                Some("always") => "always",
                _ => "once",
            };
            (Verdict::Run, format!("approved {how} by {by}"))
        }
        approvals::State::Denied => {
            let outcome = match &request.reason {
                Some(reason) => format!("denied by {by}: {reason}"),
                None => format!("denied by {by}"),
            };
            (
                Verdict::Refuse {
                    message: format!("a person {outcome}; the call was not run"),
                },
                outcome,
            )
        }
        approvals::State::Expired | approvals::State::Pending => {
            let outcome = format!(
                "nobody decided within {}; the call was denied",
                humantime::format_duration(timeout)
            );
            (
                Verdict::Refuse {
                    message: format!("the approval request expired: {outcome}"),
                },
                outcome,
            )
        }
    }
}

/// Whether the conversation still has to be told how `request` ended: a
/// sender who decided in the chat was answered there already.
fn announced(request: &approvals::Request) -> bool {
    request.state == approvals::State::Expired
        || request
            .decided_by
            .as_deref()
            .is_none_or(|by| by.starts_with("operator:"))
}

/// Who may decide, in words.
fn approvers_text(policy: &approvals::Policy, originator: Option<&str>) -> String {
    match (&policy.approvers, originator) {
        (approvals::Approvers::Listed(ids), _) => format!("{} (or an operator)", ids.join(", ")),
        (approvals::Approvers::Originator, Some(sender)) => {
            format!("{sender}, who sent the message (or an operator)")
        }
        (approvals::Approvers::Originator, None) => "an operator (`pincer approvals`)".to_string(),
    }
}

/// How much one turn's runner may stream (`agent.max_turn_events`,
/// `agent.max_turn_stored_bytes`).
struct RelayBounds<'a> {
    workspace: &'a str,
    max_events: u64,
    max_bytes: u64,
}

impl RelayBounds<'_> {
    /// Why the turn must stop after `events` events of `bytes` bytes, if it must.
    fn exceeded(&self, events: u64, bytes: u64) -> Option<String> {
        let ws = self.workspace;
        if events > self.max_events {
            Some(format!(
                "the agent runner sent more than {} events in one turn \
                 (workspaces.{ws}.agent.max_turn_events); the turn was stopped",
                self.max_events
            ))
        } else if bytes > self.max_bytes {
            Some(format!(
                "the agent runner sent more than {} bytes in one turn \
                 (workspaces.{ws}.agent.max_turn_stored_bytes); the turn was stopped",
                self.max_bytes
            ))
        } else {
            None
        }
    }
}

fn fail(
    events: &(dyn Fn(AgentEvent) + Send + Sync),
    kind: TurnErrorKind,
    message: String,
) -> Outcome {
    events(AgentEvent::Turn(TurnEvent::Failed {
        kind,
        message: message.clone(),
    }));
    Outcome::Failed(message)
}

impl Recall for crate::memory::MemoryStore {
    fn recall(
        &self,
        workspace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(i64, String, String)>, crate::memory::MemoryError> {
        crate::memory::MemoryStore::recall(self, workspace, query, limit).map(|found| {
            found
                .into_iter()
                .map(|r| (r.memory.id, r.memory.kind.to_string(), r.memory.text))
                .collect()
        })
    }
}
