//! The daemon's side of the scheduler: finds each workspace's
//! `schedules.yaml` (where its container cannot write), loads it, and on
//! every tick runs what [`Scheduler::due_now`] hands out — a skill call or
//! an agent turn in the workspace, within the task's timeout — then records
//! the outcome and queues it in the outbox for each `deliver_to`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::audit::AuditLog;
use crate::channels::{Address, ChannelHost, InboundState};
use crate::cli::Context;
use crate::config::Config;
use crate::plugins::PluginHost;
use crate::router::{Agent, Inbound};
use crate::scheduler::file::{self, Checks};
use crate::scheduler::{Action, DueRun, Outcome, Scheduler, Store, SystemClock, Task};
use crate::sessions::{SessionKey, TurnStatus};

/// The channel name of scheduled agent turns' sessions.
pub const SCHEDULE_CHANNEL: &str = "schedule";

/// How often the scheduler looks for due runs.
const TICK: Duration = Duration::from_millis(500);

/// Where workspace `name`'s `schedules.yaml` is: `workspaces/NAME/schedules.yaml`
/// beside the configuration file, if there is one.
pub fn schedule_path(ctx: &Context, name: &str) -> Option<PathBuf> {
    let dir = ctx.config_path.as_ref()?.parent()?.to_path_buf();
    let path = dir.join("workspaces").join(name).join(file::FILE_NAME);
    path.is_file().then_some(path)
}

/// Refuses a schedule file the workspace's container could write: inside
/// any workspace folder or any writable mount source.
fn check_location(config: &Config, path: &Path) -> Result<(), String> {
    let resolved = std::fs::canonicalize(path)
        .map_err(|e| format!("cannot resolve {}: {e}", path.display()))?;
    let base = crate::config::expand_tilde(&config.containers.workspace_base_path);
    let base = std::fs::canonicalize(&base).unwrap_or(base);
    let mut writable: Vec<PathBuf> = config
        .workspaces
        .keys()
        .map(|name| base.join(name))
        .collect();
    writable.extend(
        crate::containers::mounts::writable_sources(config)
            .into_iter()
            .map(|p| p.path),
    );
    for place in writable {
        let place = std::fs::canonicalize(&place).unwrap_or(place);
        if resolved.starts_with(&place) {
            return Err(format!(
                "{} lies inside {}, which a workspace container can write; a compromised agent could schedule itself. Keep schedules.yaml beside pincer.yaml (workspaces/NAME/schedules.yaml)",
                path.display(),
                place.display()
            ));
        }
    }
    Ok(())
}

/// Loads and checks workspace `name`'s tasks from `path`.
pub fn load_tasks(config: &Config, name: &str, path: &Path) -> anyhow::Result<Vec<Task>> {
    check_location(config, path).map_err(anyhow::Error::msg)?;
    let channels: BTreeSet<String> = config.channels.keys().cloned().collect();
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
        default_zone: file::host_zone(),
        channels: Some(&channels),
        skill: Some(&skill),
    };
    let tasks = file::load(path, &checks)?;
    for task in &tasks {
        for to in &task.deliver_to {
            if to.conversation.is_none()
                && config
                    .channels
                    .get(&to.channel)
                    .is_none_or(|c| c.default_conversation.is_none())
            {
                anyhow::bail!(
                    "{}: task `{}` delivers to `channel:{}`, which has no channels.{}.default_conversation; set one or write {{channel: {}, conversation: ID}}",
                    path.display(),
                    task.id,
                    to.channel,
                    to.channel,
                    to.channel
                );
            }
        }
    }
    Ok(tasks)
}

/// Runs scheduled work for one configuration.
pub struct Schedules {
    /// Tasks loaded, over all workspaces.
    pub tasks: usize,
    scheduler: Mutex<Scheduler>,
    /// Each workspace's schedule file, watched for changes.
    files: BTreeMap<String, PathBuf>,
    agent: Arc<Agent>,
    plugins: Arc<PluginHost>,
    channels: Arc<ChannelHost>,
    audit: Arc<AuditLog>,
    config: Arc<Config>,
    catalog: crate::plugins::Catalog,
    limits: crate::plugins::CallLimits,
}

impl Schedules {
    /// Loads every workspace's `schedules.yaml`; a file that cannot be
    /// loaded is reported (and audited) and that workspace runs no
    /// schedule until it is fixed.
    pub fn start(
        ctx: &Context,
        agent: Arc<Agent>,
        plugins: Arc<PluginHost>,
        channels: Arc<ChannelHost>,
        audit: Arc<AuditLog>,
    ) -> anyhow::Result<Arc<Self>> {
        let store = Store::open(&ctx.home.join(crate::db::FILE_NAME))?;
        let owner = format!("pincer-{}-{}", std::process::id(), uuid::Uuid::new_v4());
        let mut scheduler = Scheduler::new(store, Arc::new(SystemClock), owner)?;
        let mut loaded = BTreeMap::new();
        let mut files = BTreeMap::new();
        for name in ctx.config.workspaces.keys() {
            let Some(path) = schedule_path(ctx, name) else {
                continue;
            };
            files.insert(name.clone(), path.clone());
            match load_tasks(&ctx.config, name, &path) {
                Ok(tasks) => {
                    loaded.insert(name.clone(), tasks.len());
                    scheduler.set_tasks(name, tasks);
                }
                Err(e) => {
                    eprintln!("pincer: no schedule for workspace `{name}`: {e:#}");
                    audit.record(
                        "pincer",
                        Some(name),
                        "schedule.file_refused",
                        &format!("{e:#}"),
                    );
                }
            }
        }
        let tasks = loaded.values().sum();
        Ok(Arc::new(Self {
            tasks,
            files,
            scheduler: Mutex::new(scheduler),
            agent,
            plugins,
            channels,
            audit,
            config: Arc::new(ctx.config.clone()),
            catalog: ctx.catalog(),
            limits: ctx.limits(),
        }))
    }

    /// Ticks until `stop`; each due run runs in a task of its own. A
    /// changed `schedules.yaml` is loaded again; an invalid one keeps the
    /// tasks it had, says why and is audited.
    pub async fn run(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        let (changed_tx, mut changed) = tokio::sync::mpsc::unbounded_channel::<String>();
        for (workspace, path) in &self.files {
            let (tx, path, workspace) = (changed_tx.clone(), path.clone(), workspace.clone());
            std::thread::spawn(move || {
                if let Err(e) = super::watch_file(&path, &tx, workspace) {
                    eprintln!("pincer: not watching {} for changes: {e}", path.display());
                }
            });
        }
        loop {
            let due = match self.scheduler.lock() {
                Ok(scheduler) => scheduler.due_now(),
                Err(_) => return,
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
            tokio::select! {
                () = tokio::time::sleep(TICK) => {}
                Some(workspace) = changed.recv() => self.reload(&workspace),
                _ = stop.changed() => return,
            }
        }
    }

    fn reload(&self, workspace: &str) {
        let Some(path) = self.files.get(workspace) else {
            return;
        };
        match load_tasks(&self.config, workspace, path) {
            Ok(tasks) => {
                println!(
                    "pincer: {} reloaded: {} task(s) for workspace `{workspace}`",
                    path.display(),
                    tasks.len()
                );
                if let Ok(mut scheduler) = self.scheduler.lock() {
                    scheduler.set_tasks(workspace, tasks);
                }
            }
            Err(e) => {
                eprintln!(
                    "pincer: {} is not valid, so workspace `{workspace}` keeps its previous schedule: {e:#}",
                    path.display()
                );
                self.audit.record(
                    "pincer",
                    Some(workspace),
                    "schedule.reload_refused",
                    &format!("{e:#}"),
                );
            }
        }
    }

    async fn execute(&self, run: DueRun) {
        let now = || crate::db::now_ms();
        let started = match self.scheduler.lock() {
            Ok(s) => s.store().start(run.run_id, s.owner(), now()),
            Err(_) => return,
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
                Ok(()) => receipts.push(format!("outbox:{}:{conversation}", to.channel)),
                Err(e) => tracing::error!(task = %task.id, "cannot queue the output: {e}"),
            }
        }
        let stored = match &outcome {
            Ok(output) => Outcome::Done {
                output: output.clone(),
                receipts: (!receipts.is_empty())
                    .then(|| serde_json::to_string(&receipts).unwrap_or_default()),
            },
            Err(e) => Outcome::Failed(e.clone()),
        };
        if let Err(e) = outcome {
            self.audit.record(
                "scheduler",
                Some(&run.workspace),
                "schedule.run_failed",
                &format!("task `{}` due {}: {e}", task.id, run.due.to_rfc3339()),
            );
        }
        if let Ok(s) = self.scheduler.lock()
            && let Err(e) = s.store().finish(run.run_id, &stored, now())
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
            Err(e) => Err(format!("{plugin_name}__{tool}: {e:?}")),
        }
    }
}
