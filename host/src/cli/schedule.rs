//! `pincer schedule check`: validate a `schedules.yaml` and show when each
//! task fires.

use std::collections::BTreeSet;
use std::path::Path;
use std::str::FromStr;

use anyhow::Context as _;
use chrono::{DateTime, Timelike as _, Utc};
use chrono_tz::Tz;

use crate::config::{self, Config};
use crate::scheduler::file::{self, Checks};
use crate::scheduler::{Action, Task, plan};

/// How many fire times `check` prints per task.
const SHOWN: usize = 5;

pub fn check(
    config_flag: Option<&Path>,
    path: &Path,
    zone: Option<&str>,
    after: Option<&str>,
) -> anyhow::Result<()> {
    let default_zone = match zone {
        Some(name) => Tz::from_str(name)
            .map_err(|_| anyhow::anyhow!("unknown time zone `{name}` (use an IANA name)"))?,
        None => file::host_zone(),
    };
    let after = match after {
        Some(text) => DateTime::parse_from_rfc3339(text)
            .with_context(|| {
                format!("--after `{text}`: expected RFC 3339, e.g. 2026-12-01T00:00:00Z")
            })?
            .with_timezone(&Utc),
        None => Utc::now(),
    };

    let config = match config::resolve_config_path(config_flag) {
        Some(config_path) => Some((Config::load(&config_path)?, config_path)),
        None => None,
    };
    let tasks = match &config {
        Some((config, _)) => {
            let channels: BTreeSet<String> = config.channels.keys().cloned().collect();
            let skill = |name: &str| skill_known(config, name);
            let checks = Checks {
                default_zone,
                channels: Some(&channels),
                skill: Some(&skill),
            };
            file::load(path, &checks)?
        }
        None => file::load(path, &Checks::offline(default_zone))?,
    };

    let count = tasks.len();
    println!(
        "{}: ok ({count} task{})",
        path.display(),
        if count == 1 { "" } else { "s" }
    );
    match &config {
        Some((_, config_path)) => println!(
            "channels and skills checked against {}",
            config_path.display()
        ),
        None => println!("channels and skills not checked (no configuration found)"),
    }
    for task in &tasks {
        print_task(task, after);
    }
    Ok(())
}

/// A skill is known when `skills:` or a workspace's `skills` names its
/// plugin, and, for `plugin__tool`, the tool passes that skill's filter.
fn skill_known(config: &Config, name: &str) -> Result<(), String> {
    let (plugin, tool) = match name.split_once("__") {
        Some((plugin, tool)) => (plugin, Some(tool)),
        None => (name, None),
    };
    let in_workspace = config
        .workspaces
        .values()
        .any(|w| w.skills.iter().any(|s| s == plugin));
    match config.skills.get(plugin) {
        Some(skill) => match tool {
            Some(tool) if !skill.tools.is_empty() && !skill.tools.iter().any(|t| t == tool) => {
                Err(format!("skill `{plugin}` does not offer tool `{tool}`"))
            }
            _ => Ok(()),
        },
        None if in_workspace => Ok(()),
        None => Err(format!(
            "unknown skill `{plugin}`: not under `skills:` nor in any workspace's skills"
        )),
    }
}

fn print_task(task: &Task, after: DateTime<Utc>) {
    let action = match &task.action {
        Action::Skill {
            skill,
            tool: Some(tool),
            ..
        } => format!("skill {skill} tool {tool}"),
        Action::Skill { skill, .. } => format!("skill {skill}"),
        Action::Prompt(_) => "prompt".to_owned(),
    };
    println!();
    println!("{}: {} in {}, {action}", task.id, task.trigger, task.zone);
    let times = plan::upcoming(task, after, SHOWN);
    if times.is_empty() {
        println!(
            "  (no fire time after {})",
            after.format("%Y-%m-%d %H:%M:%S UTC")
        );
    }
    for time in times {
        println!("  {}", fire_time(time, task.zone));
    }
}

/// `2026-12-02 09:00 +08:00 (01:00 UTC)`; seconds only when not zero.
fn fire_time(time: DateTime<Utc>, zone: Tz) -> String {
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

/// The workspace whose `schedules.yaml` has task `id` (`flag` if given).
fn task_workspace(ctx: &super::Context, id: &str, flag: Option<&str>) -> anyhow::Result<String> {
    if let Some(name) = flag {
        ctx.check_workspace(name)?;
        return Ok(name.to_string());
    }
    let mut found = Vec::new();
    for name in ctx.config.workspaces.keys() {
        let Some(path) = crate::daemon::schedules::schedule_path(ctx, name) else {
            continue;
        };
        let tasks = crate::daemon::schedules::load_tasks(&ctx.config, name, &path)
            .with_context(|| format!("reading {}", path.display()))?;
        if tasks.iter().any(|t| t.id == id) {
            found.push(name.clone());
        }
    }
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => anyhow::bail!(
            "no workspace's schedules.yaml has a task `{id}` (they live in workspaces/NAME/schedules.yaml beside pincer.yaml)"
        ),
        several => anyhow::bail!(
            "task `{id}` is in the schedules of several workspaces ({}): say which with --workspace",
            several.join(", ")
        ),
    }
}

/// `pincer schedule pause|resume ID`: kept in the database, so the running
/// daemon sees it at its next tick, and restarts and reloads keep it.
pub fn pause(
    config_flag: Option<&Path>,
    id: &str,
    workspace: Option<&str>,
    paused: bool,
) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let workspace = task_workspace(&ctx, id, workspace)?;
    let store = crate::scheduler::Store::open(&ctx.home.join(crate::db::FILE_NAME))?;
    store.set_paused(&workspace, id, paused)?;
    if paused {
        println!("paused task `{id}` of workspace `{workspace}`");
    } else {
        println!(
            "resumed task `{id}` of workspace `{workspace}` (due times missed while paused do not run)"
        );
    }
    Ok(())
}

/// `pincer schedule history ID`: the latest runs, newest first.
pub fn history(
    config_flag: Option<&Path>,
    id: &str,
    workspace: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let workspace = task_workspace(&ctx, id, workspace)?;
    let store = crate::scheduler::Store::open(&ctx.home.join(crate::db::FILE_NAME))?;
    let runs = store.history(&workspace, id, limit)?;
    if json {
        let rows: Vec<serde_json::Value> = runs
            .iter()
            .map(|r| {
                serde_json::json!({
                    "due_ms": r.due_ms, "status": r.status.as_str(), "attempt": r.attempt,
                    "started_ms": r.started_ms, "ended_ms": r.ended_ms,
                    "output": r.output, "error": r.error, "receipts": r.receipts,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&rows)?);
        return Ok(());
    }
    if store.is_paused(&workspace, id)? {
        println!("task `{id}` of workspace `{workspace}` is paused");
    }
    if runs.is_empty() {
        println!("task `{id}` of workspace `{workspace}` has not run yet");
    }
    for run in &runs {
        let due = DateTime::<Utc>::from_timestamp_millis(run.due_ms)
            .map_or_else(|| run.due_ms.to_string(), |d| d.to_rfc3339());
        let what = run
            .error
            .as_deref()
            .or(run.output.as_deref())
            .unwrap_or("")
            .replace('\n', " ");
        let what: String = what.chars().take(80).collect();
        println!(
            "{due}  {:<11} {}{}",
            run.status.as_str(),
            what,
            run.receipts
                .as_deref()
                .map(|r| format!("  → {r}"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
