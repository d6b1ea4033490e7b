//! The scheduled-run driver: loads each workspace's `schedules.yaml`
//! ([`crate::scheduler::discover`]) and the agent's approved tasks, watches
//! the files, and at each due time runs what
//! [`Scheduler::due_now`] hands out — a skill call or an agent turn in the
//! workspace, within the task's timeout — then records the outcome and
//! queues it in the outbox for each `deliver_to`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::audit::AuditLog;
use crate::channels::{Address, ChannelHost, InboundState};
use crate::config::{Config, SkillReference, ToolName};
use crate::file_watch::FileWatch;
use crate::plugins::PluginHost;
use crate::scheduler::discover::{list_tools, load_tasks, named_plugins, schedule_file};
use crate::scheduler::{
    Action, Delivery, DueRun, Outcome, Scheduler, Store, SystemClock, Task, agent,
};
use crate::sessions::{SessionKey, TurnStatus};
use crate::turn::{Agent, AgentEvent, Appointed, HostEvent, Inbound, Presence};

use super::asking;
use super::inbound::session_conversation;

/// The channel name of scheduled agent turns' sessions.
pub const SCHEDULE_CHANNEL: &str = "schedule";

/// How often, at least, the scheduler looks at the database for changes
/// other processes made (pauses, `pincer schedule run`, approved agent
/// tasks) and for schedule files that appeared.
const POLL: Duration = Duration::from_secs(1);

/// What a workspace's schedule looks like to `pincer status`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorkspaceSchedule {
    /// Tasks loaded (the file's and the agent's).
    pub tasks: usize,
    /// The file, if there is one.
    pub file: Option<PathBuf>,
    /// Why the file (or an agent task) is not used as it is, if so.
    pub problem: Option<String>,
}

/// Runs scheduled work for one configuration.
pub struct Schedules {
    scheduler: Mutex<Scheduler>,
    /// Where each workspace's schedule file is or would be.
    expected: BTreeMap<String, PathBuf>,
    /// The tasks of each workspace's file as last loaded successfully.
    file_tasks: Mutex<BTreeMap<String, Vec<Task>>>,
    summary: Mutex<BTreeMap<String, WorkspaceSchedule>>,
    watch: Mutex<Option<FileWatch<String>>>,
    changed: Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<String>>>,
    config: Arc<Config>,
    runners: Runners,
}

/// What scheduled runs run with, handed in by the composition root.
pub struct Runners {
    pub agent: Arc<Agent>,
    pub plugins: Arc<PluginHost>,
    pub catalog: crate::plugins::Catalog,
    pub limits: crate::plugins::CallLimits,
    pub channels: Arc<ChannelHost>,
    pub audit: Arc<AuditLog>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Schedules {
    /// Loads every workspace's `schedules.yaml` and the agent's active
    /// tasks; a file that cannot be loaded is reported (and audited) and
    /// that workspace runs only its agent tasks until it is fixed.
    pub async fn start(
        config: Arc<Config>,
        config_path: Option<&Path>,
        store: Store,
        cluster: Arc<dyn crate::cluster::Membership>,
        runners: Runners,
    ) -> anyhow::Result<Arc<Self>> {
        let scheduler = Scheduler::in_cluster(store, Arc::new(SystemClock), cluster)?;
        let expected: BTreeMap<String, PathBuf> = config
            .workspaces
            .keys()
            .filter_map(|name| Some((name.clone(), schedule_file(config_path, name)?)))
            .collect();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let watch = match FileWatch::new(tx) {
            Ok(watch) => Some(watch),
            Err(e) => {
                say_err!("pincer: schedule files are not watched for changes: {e}");
                None
            }
        };
        let me = Arc::new(Self {
            scheduler: Mutex::new(scheduler),
            expected,
            file_tasks: Mutex::new(BTreeMap::new()),
            summary: Mutex::new(BTreeMap::new()),
            watch: Mutex::new(watch),
            changed: Mutex::new(Some(rx)),
            config: config.clone(),
            runners,
        });
        for name in config.workspaces.keys() {
            me.watch_file(name);
            me.load_file(name, false).await;
            me.apply(name)?;
        }
        Ok(me)
    }

    /// Once this daemon runs `workspace` (at start, or taken over): ends
    /// the approval requests of scheduled runs an earlier process started
    /// there. Those runs are over (recorded `interrupted`), so nothing
    /// would carry out a decision. A late click is told "expired".
    pub fn gained(&self, workspace: &str) {
        let store = self.runners.agent.gateway().approvals().store();
        match store.expire_scheduled(workspace, crate::db::now_ms()) {
            Ok(ended) => {
                for request in ended {
                    self.runners.audit.record(
                        crate::audit::Actor::Scheduler,
                        Some(&request.workspace),
                        crate::audit::Action::ApprovalExpired,
                        &format!(
                            "request {}: `{}` of task `{}` was denied: the run that asked ended with the previous pincer process",
                            request.id,
                            request.tool,
                            request.scheduled_task.as_deref().unwrap_or_default()
                        ),
                    );
                }
            }
            Err(e) => tracing::error!("cannot end earlier scheduled runs' approval requests: {e}"),
        }
    }

    /// Tasks loaded, over all workspaces.
    pub fn task_count(&self) -> usize {
        lock(&self.scheduler).task_count()
    }

    /// Each workspace's schedule, for `pincer status`.
    pub fn summary(&self) -> BTreeMap<String, WorkspaceSchedule> {
        lock(&self.summary).clone()
    }

    /// Watches the workspace's schedule file once its folder exists.
    fn watch_file(&self, workspace: &str) -> bool {
        let Some(path) = self.expected.get(workspace) else {
            return false;
        };
        let mut watch = lock(&self.watch);
        let Some(watch) = watch.as_mut() else {
            return false;
        };
        if watch.watches(path) {
            return false;
        }
        watch.add(path, workspace.to_owned()).is_ok()
    }

    /// Reads the workspace's file again. An invalid one keeps the tasks it
    /// had (said, audited and shown by `pincer status`); a removed one
    /// stops them.
    async fn load_file(&self, workspace: &str, reload: bool) {
        let path = self.expected.get(workspace).filter(|p| p.is_file());
        let Some(path) = path else {
            let had = lock(&self.file_tasks).remove(workspace);
            if had.is_some_and(|t| !t.is_empty()) {
                say!(
                    "pincer: workspace `{workspace}` has no schedules.yaml any more: its tasks stop"
                );
            }
            lock(&self.summary).insert(workspace.to_owned(), WorkspaceSchedule::default());
            return;
        };
        // only plugins the workspace may use are loaded to list their tools
        let allowed = self.config.workspaces.get(workspace).map(|ws| &ws.skills);
        let plugins: BTreeSet<String> = std::fs::read_to_string(path)
            .map(|text| named_plugins(&text, path))
            .unwrap_or_default()
            .into_iter()
            .filter(|p| allowed.is_some_and(|skills| skills.contains(p)))
            .collect();
        let tools = list_tools(
            &self.runners.plugins,
            &self.runners.catalog,
            &self.config,
            self.runners.limits,
            workspace,
            &plugins,
        )
        .await;
        let loaded = load_tasks(&self.config, workspace, path, Some(&tools));
        let mut summary = WorkspaceSchedule {
            file: Some(path.clone()),
            ..WorkspaceSchedule::default()
        };
        match loaded {
            Ok(tasks) => {
                if reload {
                    say!(
                        "pincer: {} reloaded: {} task(s) for workspace `{workspace}`",
                        path.display(),
                        tasks.len()
                    );
                }
                lock(&self.file_tasks).insert(workspace.to_owned(), tasks);
            }
            Err(e) => {
                let (said, event) = if reload && lock(&self.file_tasks).contains_key(workspace) {
                    (
                        format!(
                            "{} is not valid, so workspace `{workspace}` keeps its previous schedule: {e:#}",
                            path.display()
                        ),
                        crate::audit::Action::ScheduleReloadRefused,
                    )
                } else {
                    (
                        format!("no schedule for workspace `{workspace}`: {e:#}"),
                        crate::audit::Action::ScheduleFileRefused,
                    )
                };
                say_err!("pincer: {said}");
                self.runners.audit.record(
                    crate::audit::Actor::Pincer,
                    Some(workspace),
                    event,
                    &format!("{e:#}"),
                );
                summary.problem = Some(format!("{e:#}"));
            }
        }
        lock(&self.summary).insert(workspace.to_owned(), summary);
    }

    /// Hands the scheduler the workspace's file tasks and active agent
    /// tasks.
    fn apply(&self, workspace: &str) -> anyhow::Result<()> {
        let mut tasks = lock(&self.file_tasks)
            .get(workspace)
            .cloned()
            .unwrap_or_default();
        let mut scheduler = lock(&self.scheduler);
        let (agent_tasks, problems) =
            agent::active_tasks(scheduler.store(), &self.config, workspace)?;
        for problem in &problems {
            say_err!("pincer: workspace `{workspace}`: {problem}; it does not run");
        }
        tasks.extend(agent_tasks);
        let count = tasks.len();
        scheduler.set_tasks(workspace, tasks)?;
        drop(scheduler);
        let mut summary = lock(&self.summary);
        let entry = summary.entry(workspace.to_owned()).or_default();
        entry.tasks = count;
        if !problems.is_empty() && entry.problem.is_none() {
            entry.problem = Some(problems.join("; "));
        }
        Ok(())
    }

    async fn reload(&self, workspace: &str) {
        self.load_file(workspace, true).await;
        if let Err(e) = self.apply(workspace) {
            tracing::error!(workspace, "scheduler: {e:#}");
        }
    }

    /// Runs what is due until `stop`, each run in a task of its own, waking
    /// at the next due time and at least every [`POLL`]. A changed or new
    /// `schedules.yaml` and a changed set of agent tasks are loaded again.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let Some(mut changed) = lock(&self.changed).take() else {
            return;
        };
        let revision = || lock(&self.scheduler).store().agent_revision().ok();
        let mut agent_revision = revision();
        loop {
            let (due, wake) = {
                let mut scheduler = lock(&self.scheduler);
                (scheduler.due_now(), scheduler.next_wake())
            };
            match due {
                Ok(runs) => {
                    for run in runs {
                        let me = self.clone();
                        tokio::spawn(async move { me.execute(run).await });
                    }
                }
                Err(e) => tracing::error!("scheduler: {e}"),
            }
            for workspace in self.expected.keys() {
                // a file whose folder appeared since
                if self.watch_file(workspace) && self.expected[workspace].is_file() {
                    self.reload(workspace).await;
                }
            }
            let now_revision = revision();
            if now_revision != agent_revision {
                agent_revision = now_revision;
                for workspace in self.config.workspaces.keys() {
                    if let Err(e) = self.apply(workspace) {
                        tracing::error!(workspace, "scheduler: {e:#}");
                    }
                }
            }
            let sleep = wake
                .and_then(|at| (at - chrono::Utc::now()).to_std().ok())
                .map_or(POLL, |until| until.min(POLL));
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                Some(workspace) = changed.recv() => self.reload(&workspace).await,
                _ = stop.changed() => return,
            }
        }
    }

    async fn execute(&self, run: DueRun) {
        let now = || crate::db::now_ms();
        let started = {
            let s = lock(&self.scheduler);
            s.store().start(run.run_id, s.owner(), now())
        };
        if !matches!(started, Ok(true)) {
            tracing::warn!(task = %run.task.id, "scheduled run {} could not start: {started:?}", run.run_id);
            return;
        }
        let task = run.task.clone();
        let turn = Mutex::new(None);
        let performed = tokio::time::timeout(task.timeout, self.perform(&run, &turn)).await;
        // A run that ended while its request waited (its timeout) leaves
        // no request open: a later decision would run nothing.
        if let Some(turn_id) = lock(&turn).take() {
            self.end_open_request(&run, &turn_id);
        }
        let outcome = match performed {
            Ok(Ok(output)) => Ok(output),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(format!(
                "the run took longer than its timeout ({})",
                humantime::format_duration(task.timeout)
            )),
        };
        let text = match &outcome {
            Ok(output) => output.clone(),
            Err(e) => format!("⚠️ Scheduled task `{}` failed: {e}", task.id),
        };
        let mut receipts = Vec::new();
        for to in &task.deliver_to {
            let Some(conversation) = self.conversation_of(to) else {
                continue;
            };
            let address = Address {
                channel: &to.channel,
                conversation: &conversation,
                thread: to.thread.as_deref(),
                reply_to: None,
            };
            match self
                .runners
                .channels
                .reply(None, InboundState::Done, &address, &text)
            {
                Ok(outbox) => receipts.push(serde_json::json!({
                    "channel": to.channel, "conversation": conversation, "outbox": outbox,
                })),
                Err(e) => tracing::error!(task = %task.id, "cannot queue the output: {e}"),
            }
        }
        let receipts =
            (!receipts.is_empty()).then(|| serde_json::Value::from(receipts).to_string());
        let stored = match &outcome {
            Ok(output) => Outcome::Done {
                output: output.clone(),
                receipts,
            },
            Err(e) => Outcome::Failed {
                error: e.clone(),
                receipts,
            },
        };
        if let Err(e) = outcome {
            self.runners.audit.record(
                crate::audit::Actor::Scheduler,
                Some(&run.workspace),
                crate::audit::Action::ScheduleRunFailed,
                &format!("task `{}` due {}: {e}", task.id, run.due.to_rfc3339()),
            );
        }
        if let Err(e) = lock(&self.scheduler)
            .store()
            .finish(run.run_id, &stored, now())
        {
            tracing::error!(task = %task.id, "cannot record the run: {e}");
        }
    }

    /// `to`'s conversation: as written, else its channel's default.
    fn conversation_of(&self, to: &Delivery) -> Option<String> {
        to.conversation.clone().or_else(|| {
            self.config
                .channels
                .get(&to.channel)
                .and_then(|c| c.default_conversation.clone())
        })
    }

    /// Who decides the calls of `task`'s turn that need a person.
    fn presence(&self, task: &Task) -> Presence {
        if task.id.starts_with(crate::scheduler::agent::ID_PREFIX) {
            return Presence::NobodyForAgentTask;
        }
        let Some(asking) = &task.approvals else {
            return Presence::Nobody;
        };
        let Some(conversation) = self.conversation_of(&asking.ask_in) else {
            // checked at load; a channel changed since asks nobody
            return Presence::Nobody;
        };
        Presence::Appointed(Appointed {
            task: task.id.clone(),
            channel: asking.ask_in.channel.clone(),
            conversation: session_conversation(&conversation, asking.ask_in.thread.as_deref()),
            approvers: asking.approvers.clone(),
        })
    }

    /// Expires the request `turn_id` still waits on, if any, and says so
    /// where it was asked.
    fn end_open_request(&self, run: &DueRun, turn_id: &str) {
        let store = self.runners.agent.gateway().approvals().store();
        let open = match store.open_for_turn(turn_id) {
            Ok(open) => open,
            Err(e) => {
                tracing::warn!(task = %run.task.id, "cannot read the run's approval request: {e}");
                return;
            }
        };
        let Some(request) = open else { return };
        if !matches!(store.expire(&request.id, crate::db::now_ms()), Ok(true)) {
            return;
        }
        self.runners.audit.record(
            crate::audit::Actor::Scheduler,
            Some(&run.workspace),
            crate::audit::Action::ApprovalExpired,
            &format!(
                "request {}: `{}` of task `{}` was denied: the run ended (its timeout) before anyone decided",
                request.id, request.tool, run.task.id
            ),
        );
        if let Some(asking) = &run.task.approvals
            && let Some(conversation) = self.conversation_of(&asking.ask_in)
        {
            let to = Address {
                channel: &asking.ask_in.channel,
                conversation: &conversation,
                thread: asking.ask_in.thread.as_deref(),
                reply_to: None,
            };
            asking::post_decided(
                &self.runners.channels,
                store,
                &to,
                &request.id,
                "expired: the scheduled run ended before anyone decided",
                true,
            );
        }
    }

    /// Does what the task says; the output as text. A turn records its id
    /// in `turn` as it starts.
    // String: a failed run's error is the text `schedule history` shows and
    // the outbox delivers.
    async fn perform(&self, run: &DueRun, turn: &Mutex<Option<String>>) -> Result<String, String> {
        match &run.task.action {
            Action::Prompt(prompt) => {
                let inbound = Inbound {
                    key: SessionKey {
                        channel: SCHEDULE_CHANNEL.into(),
                        conversation: run.task.id.clone(),
                        workspace: run.workspace.clone(),
                    },
                    text: prompt.clone(),
                    origin: None,
                    presence: self.presence(&run.task),
                    quoted: None,
                    images: Vec::new(),
                };
                let events = |event: AgentEvent| self.on_event(run, turn, &event);
                let summary = self
                    .runners
                    .agent
                    .turn(inbound, &events, std::future::pending())
                    .await
                    .map_err(|e| e.to_string())?;
                match summary.status {
                    TurnStatus::Done => Ok(summary.reply.unwrap_or_default()),
                    _ => Err(summary.error.unwrap_or_else(|| "the turn failed".into())),
                }
            }
            Action::Skill { skill, tool, input } => {
                self.call_skill(&run.workspace, skill, tool.as_deref(), input)
                    .await
            }
        }
    }

    /// What a scheduled turn's host events do: its id is kept, and its
    /// approval requests are posted where the task says.
    fn on_event(&self, run: &DueRun, turn: &Mutex<Option<String>>, event: &AgentEvent) {
        let AgentEvent::Host(event) = event else {
            return;
        };
        if let HostEvent::Session { turn_id, .. } = event {
            *lock(turn) = Some(turn_id.clone());
            return;
        }
        let Some(asking) = &run.task.approvals else {
            return;
        };
        let Some(conversation) = self.conversation_of(&asking.ask_in) else {
            return;
        };
        let to = Address {
            channel: &asking.ask_in.channel,
            conversation: &conversation,
            thread: asking.ask_in.thread.as_deref(),
            reply_to: None,
        };
        let store = self.runners.agent.gateway().approvals().store();
        match event {
            HostEvent::Approval {
                request,
                tool,
                preview,
                approvers,
                session,
                expires_ms,
            } => asking::post_request(
                &self.runners.channels,
                store,
                &to,
                &asking::Asked {
                    request,
                    tool,
                    preview,
                    approvers,
                    session: *session,
                    expires_ms: *expires_ms,
                },
            ),
            HostEvent::Decided {
                request,
                outcome,
                announce,
            } => asking::post_decided(
                &self.runners.channels,
                store,
                &to,
                request,
                outcome,
                *announce,
            ),
            _ => {}
        }
    }

    // String: as `perform`, whose error this becomes.
    async fn call_skill(
        &self,
        workspace: &str,
        skill: &str,
        tool: Option<&str>,
        input: &serde_json::Value,
    ) -> Result<String, String> {
        let reference = SkillReference::parse(skill);
        let (plugin_name, named_tool) = (reference.plugin, reference.tool.or(tool));
        let plugin = self
            .runners
            .plugins
            .load_for_workspace(
                &self.runners.catalog,
                &self.config,
                self.runners.limits,
                plugin_name,
                workspace,
            )
            .map_err(|e| e.to_string())?;
        let tool = match named_tool {
            Some(tool) => tool.to_string(),
            None => {
                let tools = self
                    .runners
                    .plugins
                    .skill_tools(&plugin)
                    .await
                    .map_err(|e| e.to_string())?;
                match tools.as_slice() {
                    [only] => only.name.clone(),
                    many => {
                        return Err(format!(
                            "skill `{plugin_name}` has several tools ({}); name one with `tool:` or `{plugin_name}__TOOL`",
                            many.iter()
                                .map(|t| t.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                    }
                }
            }
        };
        match self
            .runners
            .plugins
            .skill_invoke(&plugin, &tool, &input.to_string())
            .await
            .map_err(|e| e.to_string())?
        {
            Ok(output) => Ok(output.json),
            Err(e) => Err(format!(
                "{}: {}",
                ToolName::new(plugin_name, tool),
                crate::plugins::describe_tool_error(&e)
            )),
        }
    }
}
