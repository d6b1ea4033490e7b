//! The daemon's side of the scheduler: finds each workspace's
//! `schedules.yaml` (where its container cannot write) and the agent's
//! approved tasks, loads them, and at each due time runs what
//! [`Scheduler::due_now`] hands out — a skill call or an agent turn in the
//! workspace, within the task's timeout — then records the outcome and
//! queues it in the outbox for each `deliver_to`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use super::file_watch::FileWatch;
use crate::audit::AuditLog;
use crate::channels::{Address, ChannelHost, InboundState};
use crate::cli::Context;
use crate::config::Config;
use crate::plugins::PluginHost;
use crate::router::{Agent, Inbound};
use crate::scheduler::file::{self, Checks};
use crate::scheduler::{Action, DueRun, Outcome, Scheduler, Store, SystemClock, Task, agent};
use crate::sessions::{SessionKey, TurnStatus};

/// The channel name of scheduled agent turns' sessions.
pub const SCHEDULE_CHANNEL: &str = "schedule";

/// Where workspace `name`'s `schedules.yaml` belongs:
/// `workspaces/NAME/schedules.yaml` beside the configuration file (none
/// without one).
pub fn schedule_file(ctx: &Context, name: &str) -> Option<PathBuf> {
    let dir = ctx.config_path.as_ref()?.parent()?.to_path_buf();
    Some(dir.join("workspaces").join(name).join(file::FILE_NAME))
}

/// Workspace `name`'s `schedules.yaml`, if it exists.
pub fn schedule_path(ctx: &Context, name: &str) -> Option<PathBuf> {
    schedule_file(ctx, name).filter(|p| p.is_file())
}

/// Refuses a schedule file a workspace's container could see or write:
/// inside any workspace folder or any mount source, read-only ones too.
fn check_location(config: &Config, path: &Path) -> Result<(), String> {
    let resolved = std::fs::canonicalize(path)
        .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
    let mut places: Vec<(PathBuf, &str)> = config
        .workspaces
        .keys()
        .map(|name| (config.workspace_dir(name), "a workspace folder"))
        .collect();
    places.extend(
        config
            .workspaces
            .values()
            .flat_map(|ws| ws.mounts.iter())
            .map(|m| {
                let why = if m.read_only {
                    "a read-only mount source"
                } else {
                    "a read-write mount source"
                };
                (crate::config::expand_tilde(&m.source), why)
            }),
    );
    for (place, why) in places {
        let place = std::fs::canonicalize(&place).unwrap_or(place);
        if resolved.starts_with(&place) {
            return Err(format!(
                "{} lies inside {} ({why}), which a workspace container can see; an agent could read or change its own schedule. Keep schedules.yaml beside pincer.yaml (workspaces/NAME/schedules.yaml)",
                path.display(),
                place.display()
            ));
        }
    }
    Ok(())
}

/// The tools of each skill plugin, by plugin name (see [`Checks::tools`]).
pub type ToolLists = BTreeMap<String, Result<Vec<String>, String>>;

/// The skill plugins `text` (a `schedules.yaml`) names, as far as it parses.
pub fn named_plugins(text: &str, path: &Path) -> BTreeSet<String> {
    let Ok(tasks) = file::parse(text, path, &Checks::offline(chrono_tz::Tz::UTC)) else {
        return BTreeSet::new();
    };
    tasks
        .iter()
        .filter_map(|task| match &task.action {
            Action::Skill { skill, .. } => Some(
                skill
                    .split_once("__")
                    .map_or(skill.as_str(), |(p, _)| p)
                    .to_owned(),
            ),
            Action::Prompt(_) => None,
        })
        .collect()
}

/// The tools of `plugins` as workspace `workspace` would load them.
pub async fn list_tools(
    host: &PluginHost,
    catalog: &crate::plugins::Catalog,
    config: &Config,
    limits: crate::plugins::CallLimits,
    workspace: &str,
    plugins: &BTreeSet<String>,
) -> ToolLists {
    let mut lists = ToolLists::new();
    for name in plugins {
        let listed = match host.load_for_workspace(catalog, config, limits, name, workspace) {
            Ok(plugin) => host
                .skill_tools(&plugin)
                .await
                .map(|tools| tools.into_iter().map(|t| t.name).collect())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        lists.insert(name.clone(), listed);
    }
    lists
}

/// The configured channels, and those of them without a
/// `default_conversation` (which `channel:NAME` cannot name).
pub fn channel_names(config: &Config) -> (BTreeSet<String>, BTreeSet<String>) {
    let without_default = config
        .channels
        .iter()
        .filter(|(_, c)| c.default_conversation.is_none())
        .map(|(name, _)| name.clone())
        .collect();
    (config.channels.keys().cloned().collect(), without_default)
}

/// Loads and checks workspace `name`'s tasks from `path`; with `tools`,
/// named tools are checked and a plugin's only tool is resolved.
pub fn load_tasks(
    config: &Config,
    name: &str,
    path: &Path,
    tools: Option<&ToolLists>,
) -> anyhow::Result<Vec<Task>> {
    check_location(config, path).map_err(anyhow::Error::msg)?;
    let (channels, without_default) = channel_names(config);
    let skills: Vec<String> = config
        .workspaces
        .get(name)
        .map(|ws| ws.skills.clone())
        .unwrap_or_default();
    let skill = |wanted: &str| {
        let plugin = wanted.split_once("__").map_or(wanted, |(p, _)| p);
        if skills.iter().any(|s| s == plugin) {
            Ok(())
        } else {
            Err(format!(
                "workspace `{name}` may not use skill `{plugin}` (add it to workspaces.{name}.skills)"
            ))
        }
    };
    let checks = Checks {
        default_zone: agent::default_zone(config),
        channels: Some(&channels),
        without_default: Some(&without_default),
        skill: Some(&skill),
        tools,
    };
    Ok(file::load(path, &checks)?)
}

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
    agent: Arc<Agent>,
    plugins: Arc<PluginHost>,
    channels: Arc<ChannelHost>,
    audit: Arc<AuditLog>,
    config: Arc<Config>,
    catalog: crate::plugins::Catalog,
    limits: crate::plugins::CallLimits,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Schedules {
    /// Loads every workspace's `schedules.yaml` and the agent's active
    /// tasks; a file that cannot be loaded is reported (and audited) and
    /// that workspace runs only its agent tasks until it is fixed.
    pub async fn start(
        ctx: &Context,
        agent: Arc<Agent>,
        plugins: Arc<PluginHost>,
        channels: Arc<ChannelHost>,
        audit: Arc<AuditLog>,
    ) -> anyhow::Result<Arc<Self>> {
        let store = Store::open(&ctx.home.join(crate::db::FILE_NAME))?;
        let owner = format!("pincer-{}-{}", std::process::id(), uuid::Uuid::new_v4());
        let scheduler = Scheduler::new(store, Arc::new(SystemClock), owner)?;
        let expected: BTreeMap<String, PathBuf> = ctx
            .config
            .workspaces
            .keys()
            .filter_map(|name| Some((name.clone(), schedule_file(ctx, name)?)))
            .collect();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let watch = match FileWatch::new(tx) {
            Ok(watch) => Some(watch),
            Err(e) => {
                eprintln!("pincer: schedule files are not watched for changes: {e}");
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
            agent,
            plugins,
            channels,
            audit,
            config: Arc::new(ctx.config.clone()),
            catalog: ctx.catalog(),
            limits: ctx.limits(),
        });
        for name in ctx.config.workspaces.keys() {
            me.watch_file(name);
            me.load_file(name, false).await;
            me.apply(name)?;
        }
        Ok(me)
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
                println!(
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
            &self.plugins,
            &self.catalog,
            &self.config,
            self.limits,
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
                    println!(
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
                        "schedule.reload_refused",
                    )
                } else {
                    (
                        format!("no schedule for workspace `{workspace}`: {e:#}"),
                        "schedule.file_refused",
                    )
                };
                eprintln!("pincer: {said}");
                self.audit
                    .record("pincer", Some(workspace), event, &format!("{e:#}"));
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
            eprintln!("pincer: workspace `{workspace}`: {problem}; it does not run");
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
        let outcome = match tokio::time::timeout(task.timeout, self.perform(&run)).await {
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
            let conversation = to.conversation.clone().or_else(|| {
                self.config
                    .channels
                    .get(&to.channel)
                    .and_then(|c| c.default_conversation.clone())
            });
            let Some(conversation) = conversation else {
                continue;
            };
            let address = Address {
                channel: &to.channel,
                conversation: &conversation,
                thread: to.thread.as_deref(),
                reply_to: None,
            };
            match self
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
            self.audit.record(
                "scheduler",
                Some(&run.workspace),
                "schedule.run_failed",
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

    /// Does what the task says; the output as text.
    async fn perform(&self, run: &DueRun) -> Result<String, String> {
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
                };
                let summary = self
                    .agent
                    .turn(inbound, &|_| {}, std::future::pending())
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

    async fn call_skill(
        &self,
        workspace: &str,
        skill: &str,
        tool: Option<&str>,
        input: &serde_json::Value,
    ) -> Result<String, String> {
        let (plugin_name, named_tool) = match skill.split_once("__") {
            Some((plugin, tool)) => (plugin, Some(tool)),
            None => (skill, tool),
        };
        let plugin = self
            .plugins
            .load_for_workspace(
                &self.catalog,
                &self.config,
                self.limits,
                plugin_name,
                workspace,
            )
            .map_err(|e| e.to_string())?;
        let tool = match named_tool {
            Some(tool) => tool.to_string(),
            None => {
                let tools = self
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
            .plugins
            .skill_invoke(&plugin, &tool, &input.to_string())
            .await
            .map_err(|e| e.to_string())?
        {
            Ok(output) => Ok(output.json),
            Err(e) => Err(format!(
                "{plugin_name}__{tool}: {}",
                crate::cli::skill::describe(&e)
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A configuration whose workspaces live under `dir/ws`, with a
    /// writable mount from `dir/shared` and a read-only one from
    /// `dir/docs`, and its `schedules.yaml` at `at`.
    fn setup(at: &str, text: &str) -> (tempfile::TempDir, Config, PathBuf) {
        let dir = tempfile::tempdir().expect("dir");
        let base = dir.path().join("ws");
        let shared = dir.path().join("shared");
        let docs = dir.path().join("docs");
        std::fs::create_dir_all(base.join("team")).expect("workspace folder");
        std::fs::create_dir_all(&shared).expect("mount source");
        std::fs::create_dir_all(&docs).expect("read-only mount source");
        let config = Config::from_str_with_env(
            &format!(
                "containers: {{workspace_base_path: {}}}
workspaces:
  team:
    skills: [skill-calc]
    mounts:
      - {{source: {}, target: /shared, read_only: false}}
      - {{source: {}, target: /docs, read_only: true}}
channels:
  chat: {{plugin: channel-slack, workspace: team}}
",
                base.display(),
                shared.display(),
                docs.display()
            ),
            Path::new("pincer.yaml"),
            |_| None,
        )
        .expect("config");
        let path = dir.path().join(at);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("folder");
        std::fs::write(&path, text).expect("schedule");
        (dir, config, path)
    }

    const TASK: &str = "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n";

    #[test]
    fn a_schedule_a_container_could_see_is_refused() {
        for (at, inside, why) in [
            ("ws/team/schedules.yaml", "ws/team", "a workspace folder"),
            (
                "shared/schedules.yaml",
                "shared",
                "a read-write mount source",
            ),
            (
                "docs/sub/schedules.yaml",
                "docs",
                "a read-only mount source",
            ),
        ] {
            let (dir, config, path) = setup(at, TASK);
            let root = dir.path().canonicalize().expect("real path");
            let got = format!(
                "{:#}",
                load_tasks(&config, "team", &path, None).unwrap_err()
            );
            assert_eq!(
                got,
                format!(
                    "{} lies inside {} ({why}), which a workspace container can see; an agent could read or change its own schedule. Keep schedules.yaml beside pincer.yaml (workspaces/NAME/schedules.yaml)",
                    path.display(),
                    root.join(inside).display()
                ),
                "{at}"
            );
        }
        let (_dir, config, path) = setup("workspaces/team/schedules.yaml", TASK);
        assert_eq!(
            load_tasks(&config, "team", &path, None)
                .expect("beside pincer.yaml")
                .len(),
            1
        );
    }

    #[test]
    fn skills_and_channels_the_workspace_cannot_use_are_located_errors() {
        let at = "workspaces/team/schedules.yaml";
        for (text, want) in [
            (
                "tasks:\n  - id: a\n    every: 1h\n    skill: skill-notes\n",
                "4:12: workspace `team` may not use skill `skill-notes` (add it to workspaces.team.skills)",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n    deliver_to: [\"channel:nope\"]\n",
                "5:18: unknown channel `nope`",
            ),
            (
                "tasks:\n  - id: a\n    every: 1h\n    prompt: x\n    deliver_to: [\"channel:chat\"]\n",
                "5:18: channel `chat` has no default conversation: set channels.chat.default_conversation or write {channel: chat, conversation: ID}",
            ),
        ] {
            let (_dir, config, path) = setup(at, text);
            let got = format!(
                "{:#}",
                load_tasks(&config, "team", &path, None).unwrap_err()
            );
            assert_eq!(got, format!("{}:{want}", path.display()));
        }
    }
}
