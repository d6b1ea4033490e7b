//! The scheduled tasks as the operator sees and steers them: the listing,
//! pause and resume, a run now, a task's history with where its output
//! went. `pincer schedule` and the web console call these.

use chrono::{DateTime, Timelike as _, Utc};
use chrono_tz::Tz;

use crate::channels::ChannelStore;
use crate::daemon::context::Context;
use crate::scheduler::agent::{self, Status};
use crate::scheduler::{Store, Task, plan};

/// `2026-12-02 09:00 +08:00 (01:00 UTC)`; seconds only when not zero.
pub(crate) fn fire_time(time: DateTime<Utc>, zone: Tz) -> String {
    let local = time.with_timezone(&zone);
    let (local_fmt, utc_fmt) = if time.second() == 0 {
        ("%Y-%m-%d %H:%M %:z", "%H:%M")
    } else {
        ("%Y-%m-%d %H:%M:%S %:z", "%H:%M:%S")
    };
    let utc_day = if time.date_naive() == local.date_naive() {
        String::new()
    } else {
        time.format("%Y-%m-%d ").to_string()
    };
    format!(
        "{} ({utc_day}{} UTC)",
        local.format(local_fmt),
        time.format(utc_fmt)
    )
}

/// A task as the CLI sees it: from a workspace's file or from the agent.
pub(crate) struct Listed {
    pub(crate) workspace: String,
    pub(crate) task: Option<Task>,
    /// The agent's row, for agent tasks.
    pub(crate) agent: Option<agent::AgentTask>,
    /// Why the task cannot be read, if so.
    pub(crate) problem: Option<String>,
}

impl Listed {
    fn id(&self) -> &str {
        match (&self.task, &self.agent) {
            (_, Some(a)) => &a.id,
            (Some(t), None) => &t.id,
            (None, None) => "",
        }
    }
}

/// Every task of `only` (every workspace when `None`): the file's, then
/// the agent's (pending and active).
pub(crate) fn tasks_of(
    ctx: &Context,
    store: &Store,
    only: Option<&str>,
) -> anyhow::Result<(Vec<Listed>, Vec<String>)> {
    let mut out = Vec::new();
    let mut problems = Vec::new();
    for name in ctx.config.workspaces.keys() {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        if let Some(path) =
            crate::scheduler::discover::schedule_path(ctx.config_path.as_deref(), name)
        {
            match crate::scheduler::discover::load_tasks(&ctx.config, name, &path, None) {
                Ok(tasks) => out.extend(tasks.into_iter().map(|task| Listed {
                    workspace: name.clone(),
                    task: Some(task),
                    agent: None,
                    problem: None,
                })),
                Err(e) => problems.push(format!("{name}: {e:#}")),
            }
        }
        for row in store.agent_tasks(Some(name), false)? {
            let checked = agent::check(&ctx.config, name, &row.spec);
            out.push(Listed {
                workspace: name.clone(),
                problem: checked.as_ref().err().map(ToString::to_string),
                task: checked.ok(),
                agent: Some(row),
            });
        }
    }
    Ok((out, problems))
}

pub(crate) fn open_store(ctx: &Context) -> anyhow::Result<Store> {
    ctx.schedule_store()
}

/// The workspace that has task `id` (`flag` if given), and the task.
pub(crate) fn find_task(
    ctx: &Context,
    store: &Store,
    id: &str,
    flag: Option<&str>,
) -> anyhow::Result<Listed> {
    if let Some(name) = flag {
        ctx.check_workspace(name)?;
    }
    let (tasks, problems) = tasks_of(ctx, store, flag)?;
    let mut found: Vec<Listed> = tasks.into_iter().filter(|t| t.id() == id).collect();
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => {
            let mut message = format!(
                "no task `{id}`: not in any workspace's schedules.yaml (workspaces/NAME/schedules.yaml beside pincer.yaml) nor among the agent's tasks (pincer schedule list shows them all)"
            );
            for problem in problems {
                message.push_str(&format!(
                    "\n  note: a schedule could not be read: {problem}"
                ));
            }
            anyhow::bail!(message)
        }
        _ => anyhow::bail!(
            "task `{id}` is in the schedules of several workspaces ({}): say which with --workspace",
            found
                .iter()
                .map(|t| t.workspace.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// `pincer schedule list --json`'s value: `{"tasks": [...], "problems": [...]}`
/// (the web console shows the same).
pub fn listing(ctx: &Context, workspace: Option<&str>) -> anyhow::Result<serde_json::Value> {
    if let Some(name) = workspace {
        ctx.check_workspace(name)?;
    }
    let store = open_store(ctx)?;
    let (tasks, problems) = tasks_of(ctx, &store, workspace)?;
    let paused = store.paused_tasks()?;
    let now = Utc::now();
    let mut rows = Vec::new();
    for listed in &tasks {
        let id = listed.id().to_owned();
        let is_paused = paused.contains(&(listed.workspace.clone(), id.clone()));
        let state = match &listed.agent {
            Some(a) if a.status == Status::Pending => "pending approval",
            _ if listed.problem.is_some() => "not valid",
            _ if is_paused => "paused",
            _ => "active",
        };
        let next: Vec<String> = listed
            .task
            .as_ref()
            .filter(|_| state == "active")
            .map(|t| {
                let mut after = now;
                let mut times = Vec::new();
                while times.len() < 3 {
                    let Some(n) = plan::next_after(t, after) else {
                        break;
                    };
                    times.push(fire_time(n, t.zone));
                    after = n;
                }
                times
            })
            .unwrap_or_default();
        let last = store.history(&listed.workspace, &id, 1)?.into_iter().next();
        rows.push(serde_json::json!({
            "workspace": listed.workspace,
            "id": id,
            "source": if listed.agent.is_some() { "agent" } else { "file" },
            "state": state,
            "trigger": listed.task.as_ref().map(|t| t.trigger.to_string()),
            "zone": listed.task.as_ref().map(|t| t.zone.name()),
            "next": next.first(),
            "next_times": next,
            "last": last.map(|r| serde_json::json!({
                "status": r.status.as_str(), "due_ms": r.due_ms, "ended_ms": r.ended_ms,
                "error": r.error,
            })),
            "problem": listed.problem,
        }));
    }
    Ok(serde_json::json!({"tasks": rows, "problems": problems}))
}

/// Pauses or resumes task `id`; what was done, in words.
pub fn set_paused(
    ctx: &Context,
    id: &str,
    workspace: Option<&str>,
    paused: bool,
) -> anyhow::Result<String> {
    let store = open_store(ctx)?;
    let workspace = find_task(ctx, &store, id, workspace)?.workspace;
    if paused {
        store.set_paused(&workspace, id, true)?;
        Ok(format!("paused task `{id}` of workspace `{workspace}`"))
    } else {
        store.resume(&workspace, id, crate::db::now_ms())?;
        Ok(format!(
            "resumed task `{id}` of workspace `{workspace}` (due times missed while paused do not run)"
        ))
    }
}

/// Queues a run of task `id` now (the daemon starts it once no run of the
/// task is active); its run id and the task.
pub(crate) fn queue_run(
    ctx: &Context,
    store: &Store,
    id: &str,
    workspace: Option<&str>,
) -> anyhow::Result<(i64, Listed)> {
    let listed = find_task(ctx, store, id, workspace)?;
    if let Some(row) = &listed.agent
        && row.status == Status::Pending
    {
        anyhow::bail!("task `{id}` waits for approval: `pincer schedule approve {id}` first");
    }
    if listed.task.is_none() {
        anyhow::bail!(
            "task `{id}` is not valid: {}",
            listed.problem.as_deref().unwrap_or("")
        );
    }
    let run_id = store.queue_manual(&listed.workspace, id, crate::db::now_ms())?;
    Ok((run_id, listed))
}

/// [`queue_run`] for the web console: the run id and the workspace.
pub fn run_soon(ctx: &Context, id: &str, workspace: Option<&str>) -> anyhow::Result<(i64, String)> {
    let store = open_store(ctx)?;
    let (run_id, listed) = queue_run(ctx, &store, id, workspace)?;
    Ok((run_id, listed.workspace))
}

/// Where a run's output went, as it stands now: per destination, each part
/// of the message with the outbox state and the platform's receipt (e.g.
/// Slack's `ts`) once delivered.
pub(crate) fn delivery(receipts: Option<&str>, outbox: &ChannelStore) -> Vec<serde_json::Value> {
    let Some(list) = receipts.and_then(|r| serde_json::from_str::<serde_json::Value>(r).ok())
    else {
        return Vec::new();
    };
    let Some(list) = list.as_array() else {
        return Vec::new();
    };
    list.iter()
        .map(|to| {
            let ids: Vec<i64> = to["outbox"]
                .as_array()
                .map(|a| a.iter().filter_map(serde_json::Value::as_i64).collect())
                .unwrap_or_default();
            let parts: Vec<serde_json::Value> = outbox
                .outbox_rows(&ids)
                .unwrap_or_default()
                .into_iter()
                .map(|row| {
                    serde_json::json!({
                        "outbox": row.id, "state": row.state, "receipt": row.receipt,
                        "attempts": row.attempts, "error": row.last_error,
                    })
                })
                .collect();
            serde_json::json!({
                "channel": to["channel"], "conversation": to["conversation"], "parts": parts,
            })
        })
        .collect()
}

pub(crate) fn run_json(
    r: &crate::scheduler::store::RunRecord,
    outbox: &ChannelStore,
) -> serde_json::Value {
    serde_json::json!({
        "id": r.id, "due_ms": r.due_ms, "status": r.status.as_str(), "attempt": r.attempt,
        "started_ms": r.started_ms, "ended_ms": r.ended_ms, "origin": r.origin,
        "output": r.output, "error": r.error,
        "delivery": delivery(r.receipts.as_deref(), outbox),
    })
}

/// `pincer schedule history ID --json`'s rows (newest first), for the web
/// console: the task's workspace, whether it is paused, the runs.
pub fn history_rows(
    ctx: &Context,
    id: &str,
    workspace: Option<&str>,
    limit: usize,
) -> anyhow::Result<(String, bool, Vec<serde_json::Value>)> {
    let store = open_store(ctx)?;
    let outbox = ctx.channel_store()?;
    let workspace = find_task(ctx, &store, id, workspace)?.workspace;
    let runs = store.history(&workspace, id, limit)?;
    let paused = store.is_paused(&workspace, id)?;
    Ok((
        workspace,
        paused,
        runs.iter().map(|r| run_json(r, &outbox)).collect(),
    ))
}

/// Approves (`approve`) or cancels a task the agent proposed, as `actor`;
/// what was done, in words. Audited.
pub fn decide_agent_task(
    ctx: &Context,
    id: &str,
    workspace: Option<&str>,
    approve: bool,
    actor: crate::audit::Actor<'_>,
) -> anyhow::Result<String> {
    let store = open_store(ctx)?;
    let listed = find_task(ctx, &store, id, workspace)?;
    let Some(row) = &listed.agent else {
        anyhow::bail!(
            "task `{id}` is from workspace `{}`'s schedules.yaml: edit that file (or `pincer schedule pause {id}`); approve and cancel are for tasks the agent proposed",
            listed.workspace
        );
    };
    let by = actor.to_string();
    let (from, to, event): (&[Status], _, _) = if approve {
        if let Some(problem) = &listed.problem {
            anyhow::bail!("task `{id}` cannot be approved: {problem}");
        }
        (
            &[Status::Pending],
            Status::Active,
            crate::audit::Action::ScheduleApproved,
        )
    } else {
        (
            &[Status::Pending, Status::Active],
            Status::Cancelled,
            crate::audit::Action::ScheduleCancelled,
        )
    };
    if !store.decide_agent_task(&listed.workspace, id, from, to, &by, crate::db::now_ms())? {
        anyhow::bail!(
            "task `{id}` is {} already",
            match row.status {
                Status::Active => "active",
                Status::Pending => "pending",
                Status::Cancelled => "cancelled",
            }
        );
    }
    ctx.audit_log()?.record(
        actor,
        Some(&listed.workspace),
        event,
        &agent::audit_summary(id, &row.spec),
    );
    Ok(if approve {
        let next = listed
            .task
            .as_ref()
            .and_then(|t| plan::next_after(t, Utc::now()).map(|n| fire_time(n, t.zone)))
            .unwrap_or_else(|| "none".into());
        format!(
            "approved task `{id}` of workspace `{}` (proposed by the agent); next run {next}",
            listed.workspace
        )
    } else {
        format!("cancelled task `{id}` of workspace `{}`", listed.workspace)
    })
}
