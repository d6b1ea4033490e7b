//! `pincer schedule check`: validate a `schedules.yaml` and show when each
//! task fires.

use std::collections::BTreeSet;
use std::path::Path;
use std::str::FromStr;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use chrono_tz::Tz;

use crate::config::{self, Config, SkillReference};
use crate::operator::{
    delivery, find_task, fire_time, open_store, queue_run, run_json, schedule_listing,
    set_task_paused,
};
use crate::scheduler::agent;
use crate::scheduler::file::{self, Checks};
use crate::scheduler::{Action, RunStatus, Task, plan};

/// How many fire times `check` prints per task.
const SHOWN: usize = 5;

pub async fn check(
    config_flag: Option<&Path>,
    path: &Path,
    workspace: Option<&str>,
    zone: Option<&str>,
    after: Option<&str>,
) -> anyhow::Result<()> {
    let zone = match zone {
        Some(name) => Some(
            Tz::from_str(name)
                .map_err(|_| anyhow::anyhow!("unknown time zone `{name}` (use an IANA name)"))?,
        ),
        None => None,
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
    let default_zone = zone.unwrap_or_else(|| match &config {
        Some((config, _)) => agent::default_zone(config),
        None => file::host_zone(),
    });
    // The plugins the file names, and their tools, as this host has them.
    let ctx = super::Context {
        config_path: config.as_ref().map(|(_, p)| p.clone()),
        config: match &config {
            Some((config, _)) => config.clone(),
            None => Config::embedded()?,
        },
        home: config::pincer_home()?,
    };
    let catalog = ctx.catalog();
    let text = std::fs::read_to_string(path).map_err(|source| config::ConfigError::Read {
        file: path.display().to_string(),
        source,
    })?;
    let named = crate::scheduler::discover::named_plugins(&text, path);
    // A skill (`plugin` or `plugin__tool`) whose plugin this host has.
    let exists = |skill: &str| {
        let plugin = SkillReference::plugin_of(skill);
        match catalog.get(plugin) {
            Ok(package) => {
                match crate::plugins::Manifest::parse(&package.manifest_text, plugin)
                    .map(|m| m.kind())
                {
                    Ok(crate::plugins::PluginKind::Skill) => Ok(()),
                    Ok(kind) => Err(format!(
                        "`{plugin}` is a {} plugin, not a skill",
                        kind.as_str()
                    )),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(_) => Err(format!(
                "unknown skill `{plugin}`: no built-in or installed plugin has that name (pincer plugin list shows them)"
            )),
        }
    };
    let callable: BTreeSet<String> = named
        .into_iter()
        .filter(|p| exists(p.as_str()).is_ok())
        .collect();
    let tools = if callable.is_empty() {
        crate::scheduler::discover::ToolLists::new()
    } else {
        let host = ctx.plugin_host()?;
        let workspace = workspace.unwrap_or(crate::plugins::LEGACY_WORKSPACE);
        crate::scheduler::discover::list_tools(
            &host,
            &catalog,
            &ctx.config,
            ctx.limits(),
            workspace,
            &callable,
        )
        .await
    };
    let tasks = match (&config, workspace) {
        (Some((config, _)), Some(name)) => {
            if !config.workspaces.contains_key(name) {
                anyhow::bail!("no workspace `{name}` in the configuration");
            }
            let mut config = config.clone();
            if let Some(zone) = zone {
                config.timezone = Some(zone.name().to_owned());
            }
            crate::scheduler::discover::load_tasks(&config, name, path, Some(&tools))?
        }
        (None, Some(_)) => {
            anyhow::bail!("--workspace needs a configuration (pincer.yaml, or --config FILE)")
        }
        (Some((config, _)), None) => {
            let (channels, without_default) = crate::scheduler::discover::channel_names(config);
            let skill = |name: &str| {
                skill_known(config, name)?;
                exists(name)
            };
            let checks = Checks {
                default_zone,
                channels: Some(&channels),
                without_default: Some(&without_default),
                skill: Some(&skill),
                tools: Some(&tools),
            };
            shown_even_if_refused(
                file::parse(&text, path, &checks),
                &text,
                path,
                default_zone,
                after,
            )?
        }
        (None, None) => {
            let checks = Checks {
                skill: Some(&exists),
                tools: Some(&tools),
                ..Checks::offline(default_zone)
            };
            shown_even_if_refused(
                file::parse(&text, path, &checks),
                &text,
                path,
                default_zone,
                after,
            )?
        }
    };

    let count = tasks.len();
    println!(
        "{}: ok ({count} task{})",
        path.display(),
        if count == 1 { "" } else { "s" }
    );
    match (&config, workspace) {
        (Some((_, config_path)), Some(name)) => println!(
            "checked as workspace `{name}`'s schedule against {}",
            config_path.display()
        ),
        (Some((_, config_path)), None) => println!(
            "channels and skills checked against {}",
            config_path.display()
        ),
        (None, _) => println!(
            "skills checked against this host's plugins; channels not checked (no configuration found)"
        ),
    }
    for task in &tasks {
        print_task(task, after);
    }
    Ok(())
}

/// `checked`'s tasks; when it is refused but the file itself is sound (only
/// a skill, tool or channel it names is wrong), each task's fire times are
/// printed before the refusal, so the schedule can still be read.
fn shown_even_if_refused(
    checked: Result<Vec<Task>, config::ConfigError>,
    text: &str,
    path: &Path,
    zone: Tz,
    after: DateTime<Utc>,
) -> anyhow::Result<Vec<Task>> {
    let refused = match checked {
        Ok(tasks) => return Ok(tasks),
        Err(refused) => refused,
    };
    if let Ok(tasks) = file::parse(text, path, &Checks::offline(zone)) {
        println!(
            "{}: refused (see below); as written its tasks would fire:",
            path.display()
        );
        for task in &tasks {
            print_task(task, after);
        }
    }
    Err(refused.into())
}

/// A skill is known when `skills:` or a workspace's `skills` names its
/// plugin, and, for `plugin__tool`, the tool passes that skill's filter.
// String: this is a `scheduler::Checks::skill` callback; its error is the
// text the located `schedules.yaml` error shows.
fn skill_known(config: &Config, name: &str) -> Result<(), String> {
    let SkillReference { plugin, tool } = SkillReference::parse(name);
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

fn when(ms: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |d| d.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
    )
}

/// `pincer schedule list`.
pub fn list(config_flag: Option<&Path>, workspace: Option<&str>, json: bool) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let listing = schedule_listing(&ctx, workspace)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&listing)?);
        return Ok(());
    }
    let rows = listing["tasks"].as_array().cloned().unwrap_or_default();
    let problems: Vec<String> = listing["problems"]
        .as_array()
        .map(|p| {
            p.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        println!(
            "no scheduled tasks (write workspaces/NAME/schedules.yaml beside pincer.yaml; `pincer schedule check FILE` validates one)"
        );
    }
    let mut current = "";
    for row in &rows {
        let workspace = row["workspace"].as_str().unwrap_or("");
        if workspace != current {
            current = workspace;
            println!("workspace {current}:");
        }
        let text = |key: &str| row[key].as_str().unwrap_or("").to_owned();
        let trigger = match (row["trigger"].as_str(), row["zone"].as_str()) {
            (Some(t), Some(z)) => format!("{t} in {z}"),
            _ => String::new(),
        };
        let from = if row["source"] == "agent" {
            " (agent)"
        } else {
            ""
        };
        println!("  {}{from}  {trigger}", text("id"));
        let state = text("state");
        let mut detail = match state.as_str() {
            "pending approval" => format!(
                "PENDING APPROVAL: proposed by the agent; `pincer schedule approve {}` enables it",
                text("id")
            ),
            "not valid" => format!("NOT VALID: {}", text("problem")),
            "paused" => "paused (`pincer schedule resume` lets it run)".to_owned(),
            _ => format!("next {}", row["next"].as_str().unwrap_or("none")),
        };
        if let Some(last) = row["last"].as_object() {
            let status = last["status"].as_str().unwrap_or("");
            let due = last["due_ms"].as_i64().map(when).unwrap_or_default();
            detail.push_str(&format!("; last run {status} (due {due})"));
        }
        println!("      {detail}");
    }
    for problem in &problems {
        println!("PROBLEM: {problem}");
    }
    Ok(())
}

/// `pincer schedule pause|resume ID`: kept in the database, so the running
/// daemon sees it within a second, and restarts and reloads keep it.
pub fn pause(
    config_flag: Option<&Path>,
    id: &str,
    workspace: Option<&str>,
    paused: bool,
) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    println!("{}", set_task_paused(&ctx, id, workspace, paused)?);
    Ok(())
}

/// `pincer schedule approve|cancel ID`: for the agent's tasks.
pub fn decide(
    config_flag: Option<&Path>,
    id: &str,
    workspace: Option<&str>,
    approve: bool,
) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let user = std::env::var("USER").unwrap_or_else(|_| "operator".into());
    let said = crate::operator::decide_agent_task(
        &ctx,
        id,
        workspace,
        approve,
        crate::audit::Actor::Cli(Some(&user)),
    )?;
    println!("{said}");
    Ok(())
}

/// `pincer schedule run ID`: queues a run now; the running daemon starts
/// it once no run of the task is active, and this waits for the outcome.
pub async fn run_now(
    config_flag: Option<&Path>,
    id: &str,
    workspace: Option<&str>,
    wait: bool,
) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let store = open_store(&ctx)?;
    let (run_id, listed) = queue_run(&ctx, &store, id, workspace)?;
    let Some(task) = &listed.task else {
        anyhow::bail!("task `{id}` is not valid");
    };
    let daemon = crate::daemon::status::read(&ctx.home);
    if daemon.is_none() {
        println!(
            "queued run #{run_id} of task `{id}`; no daemon is running, so it starts when `pincer start` does"
        );
        return Ok(());
    }
    if !wait {
        println!("queued run #{run_id} of task `{id}`; `pincer schedule history {id}` shows it");
        return Ok(());
    }
    println!(
        "queued run #{run_id} of task `{id}` of workspace `{}`",
        listed.workspace
    );
    let deadline = std::time::Instant::now() + task.timeout + std::time::Duration::from_secs(90);
    let mut said_running = false;
    loop {
        let Some(run) = store.run(run_id)? else {
            anyhow::bail!("run #{run_id} disappeared from the database");
        };
        match run.status {
            RunStatus::Running if !said_running => {
                said_running = true;
                println!("running…");
            }
            RunStatus::Done => {
                println!("{}", run.output.unwrap_or_default());
                let outbox = ctx.channel_store()?;
                for to in delivery(run.receipts.as_deref(), &outbox) {
                    println!("→ {}", delivery_line(&to));
                }
                return Ok(());
            }
            RunStatus::Failed | RunStatus::Interrupted => anyhow::bail!(
                "run #{run_id} {}: {}",
                run.status.as_str(),
                run.error.unwrap_or_default()
            ),
            _ => {}
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!(
                "run #{run_id} has not finished yet (status {}); `pincer schedule history {id}` shows it later",
                run.status.as_str()
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}

/// One line per destination: `team-chat/C1 sent 1733.0001` or
/// `team-chat/C1 pending (attempt 2: …)`.
fn delivery_line(to: &serde_json::Value) -> String {
    let place = format!(
        "{}/{}",
        to["channel"].as_str().unwrap_or("?"),
        to["conversation"].as_str().unwrap_or("?")
    );
    let parts = to["parts"].as_array().cloned().unwrap_or_default();
    if parts.is_empty() {
        return format!("{place} (no outbox record)");
    }
    let states: Vec<String> = parts
        .iter()
        .map(|p| {
            let state = p["state"].as_str().unwrap_or("?");
            match (state, p["receipt"].as_str(), p["error"].as_str()) {
                ("sent", Some(receipt), _) => format!("sent {receipt}"),
                (state, _, Some(error)) => format!(
                    "{state} (attempt {}: {error})",
                    p["attempts"].as_u64().unwrap_or(0)
                ),
                (state, _, None) => state.to_owned(),
            }
        })
        .collect();
    format!("{place} {}", states.join(", "))
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
    let store = open_store(&ctx)?;
    let outbox = ctx.channel_store()?;
    let workspace = find_task(&ctx, &store, id, workspace)?.workspace;
    let runs = store.history(&workspace, id, limit)?;
    if json {
        let rows: Vec<serde_json::Value> = runs.iter().map(|r| run_json(r, &outbox)).collect();
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
        let manual = if run.origin == "manual" {
            " (run by hand)"
        } else {
            ""
        };
        println!("{due}{manual}  {:<11} {what}", run.status.as_str());
        for to in delivery(run.receipts.as_deref(), &outbox) {
            println!("    → {}", delivery_line(&to));
        }
    }
    Ok(())
}
