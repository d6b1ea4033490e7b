//! Tasks the agent schedules for itself, offered as MCP tools:
//! `schedule__create`, `schedule__list` and `schedule__cancel`, only to
//! workspaces whose `agent_schedules` is `propose` or `auto` (the reach
//! decides). The rules are [`crate::scheduler::agent`]'s; this is the tool
//! surface. The running daemon sees changes within a second.

use std::path::PathBuf;
use std::sync::Arc;

use chrono::Utc;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde::Deserialize;
use tokio::sync::OnceCell;

use super::text_result;
use crate::audit::AuditLog;
use crate::config::{AgentSchedules, Config};
use crate::scheduler::agent::{self, Status};
use crate::scheduler::{Action, Store, plan};

pub struct ScheduleTools {
    home: PathBuf,
    config: Arc<Config>,
    audit: Arc<AuditLog>,
    store: OnceCell<Arc<Store>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Cancel {
    id: String,
}

/// The three tools, unprefixed (the gateway adds `schedule__`).
pub fn tools() -> Vec<Tool> {
    let object = |value: serde_json::Value| match value {
        serde_json::Value::Object(o) => o,
        _ => JsonObject::new(),
    };
    vec![
        Tool::new(
            "create",
            format!(
                "Schedule a prompt to run later as a turn of this workspace, once or repeatedly. \
                 Give exactly one of `schedule` (cron, 5 or 6 fields, read in `timezone`), \
                 `every` (e.g. \"6h\") or `at` (e.g. \"2026-12-24T09:00\"). Tasks fire at most \
                 once every {}; depending on the workspace's settings a person may have to \
                 approve the task before it runs.",
                humantime::format_duration(agent::MIN_INTERVAL)
            ),
            Arc::new(object(serde_json::json!({
                "type": "object",
                "properties": {
                    "id": {"type": "string", "description": "A short name: a-z, 0-9, `_` and `-`."},
                    "prompt": {"type": "string", "description": "What to do when the task fires."},
                    "schedule": {"type": "string", "description": "Cron expression, e.g. \"0 9 * * 1-5\"."},
                    "every": {"type": "string", "description": "An interval, e.g. \"2h\"."},
                    "at": {"type": "string", "description": "One time, e.g. \"2026-12-24T09:00\"."},
                    "timezone": {"type": "string", "description": "IANA zone, e.g. \"Asia/Shanghai\"."},
                    "description": {"type": "string"},
                    "deliver_to": {
                        "type": "array", "items": {"type": "string"},
                        "description": "Where the output goes, as \"channel:NAME\"."
                    }
                },
                "required": ["id", "prompt"]
            }))),
        ),
        Tool::new(
            "list",
            "List the tasks this agent scheduled, with their state (pending approval or \
             active) and next fire time.",
            Arc::new(object(
                serde_json::json!({"type": "object", "properties": {}}),
            )),
        ),
        Tool::new(
            "cancel",
            "Cancel a task this agent scheduled, by the id `list` shows.",
            Arc::new(object(serde_json::json!({
                "type": "object",
                "properties": {"id": {"type": "string"}},
                "required": ["id"]
            }))),
        ),
    ]
}

impl ScheduleTools {
    pub fn new(home: PathBuf, config: Arc<Config>, audit: Arc<AuditLog>) -> Self {
        Self {
            home,
            config,
            audit,
            store: OnceCell::new(),
        }
    }

    async fn store(&self) -> Result<Arc<Store>, String> {
        self.store
            .get_or_try_init(|| async {
                let path = self.home.join(crate::db::FILE_NAME);
                tokio::task::spawn_blocking(move || Store::open(&path).map(Arc::new))
                    .await
                    .map_err(|e| e.to_string())?
                    .map_err(|e| e.to_string())
            })
            .await
            .cloned()
    }

    pub async fn call(
        &self,
        workspace: &str,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, String> {
        let store = self.store().await?;
        let config = self.config.clone();
        let audit = self.audit.clone();
        let (workspace, tool) = (workspace.to_owned(), tool.to_owned());
        let outcome = tokio::task::spawn_blocking(move || {
            run(&store, &config, &audit, &workspace, &tool, arguments)
        })
        .await
        .map_err(|e| e.to_string())??;
        Ok(match outcome {
            Ok(text) => text_result(text, false),
            Err(text) => text_result(text, true),
        })
    }
}

/// `Ok(Ok(text))` done, `Ok(Err(text))` refused (the agent can fix it),
/// `Err` the gateway's trouble.
fn run(
    store: &Store,
    config: &Config,
    audit: &AuditLog,
    workspace: &str,
    tool: &str,
    arguments: Option<JsonObject>,
) -> Result<Result<String, String>, String> {
    let db = |e: rusqlite::Error| format!("schedule store: {e}");
    let actor = format!("agent:{workspace}");
    match tool {
        "create" => {
            let mut spec = serde_json::Value::Object(arguments.unwrap_or_default());
            let Some(id) = spec.get("id").and_then(|v| v.as_str()).map(agent::prefixed) else {
                return Ok(Err("`id` is required (a short name)".into()));
            };
            spec["id"] = serde_json::Value::String(id.clone());
            let task = match agent::check(config, workspace, &spec) {
                Ok(task) => task,
                Err(e) => return Ok(Err(e.to_string())),
            };
            let mode = config
                .workspaces
                .get(workspace)
                .map_or(AgentSchedules::None, |w| w.agent_schedules);
            let status = match mode {
                AgentSchedules::Auto => Status::Active,
                AgentSchedules::Propose => Status::Pending,
                AgentSchedules::None => {
                    return Ok(Err(format!(
                        "workspaces.{workspace}.agent_schedules is none: this workspace cannot schedule tasks"
                    )));
                }
            };
            let now = crate::db::now_ms();
            if let Err(e) = store
                .add_agent_task(workspace, &id, &spec, status, now)
                .map_err(db)?
            {
                return Ok(Err(e.to_string()));
            }
            let next = plan::next_after(&task, Utc::now())
                .map(|t| {
                    t.with_timezone(&task.zone)
                        .format("%Y-%m-%d %H:%M %:z")
                        .to_string()
                })
                .unwrap_or_else(|| "never (the time is past)".into());
            let what = format!("{} in {}, next {next}", task.trigger, task.zone);
            let (event, text) = if status == Status::Active {
                (
                    "schedule.agent_created",
                    format!("scheduled task `{id}` ({what})"),
                )
            } else {
                (
                    "schedule.agent_proposed",
                    format!(
                        "proposed task `{id}` ({what}); it runs once a person approves it (pincer schedule approve {id})"
                    ),
                )
            };
            audit.record(&actor, Some(workspace), event, &format!("{id}: {spec}"));
            Ok(Ok(text))
        }
        "list" => {
            let tasks = store.agent_tasks(Some(workspace), false).map_err(db)?;
            if tasks.is_empty() {
                return Ok(Ok("no scheduled tasks".into()));
            }
            let lines: Vec<String> = tasks
                .iter()
                .map(|t| {
                    let detail = match agent::check(config, workspace, &t.spec) {
                        Ok(task) => {
                            let prompt = match &task.action {
                                Action::Prompt(p) => p.chars().take(60).collect::<String>(),
                                Action::Skill { skill, .. } => skill.clone(),
                            };
                            let next = plan::next_after(&task, Utc::now())
                                .map(|n| {
                                    n.with_timezone(&task.zone)
                                        .format("%Y-%m-%d %H:%M %:z")
                                        .to_string()
                                })
                                .unwrap_or_else(|| "none".into());
                            format!("{} in {}, next {next}: {prompt}", task.trigger, task.zone)
                        }
                        Err(e) => format!("not valid any more: {e}"),
                    };
                    let state = match t.status {
                        Status::Pending => "pending approval",
                        Status::Active => "active",
                        Status::Cancelled => "cancelled",
                    };
                    format!("- {} [{state}] {detail}", t.id)
                })
                .collect();
            Ok(Ok(lines.join("\n")))
        }
        "cancel" => {
            let Cancel { id } = match arguments
                .map(serde_json::Value::Object)
                .map(serde_json::from_value::<Cancel>)
            {
                Some(Ok(args)) => args,
                Some(Err(e)) => return Ok(Err(format!("invalid arguments: {e}"))),
                None => return Ok(Err("`id` is required".into())),
            };
            let id = agent::prefixed(&id);
            let cancelled = store
                .decide_agent_task(
                    workspace,
                    &id,
                    &[Status::Pending, Status::Active],
                    Status::Cancelled,
                    &actor,
                    crate::db::now_ms(),
                )
                .map_err(db)?;
            if !cancelled {
                return Ok(Err(format!(
                    "no task `{id}` to cancel (list shows this agent's tasks)"
                )));
            }
            audit.record(&actor, Some(workspace), "schedule.agent_cancelled", &id);
            Ok(Ok(format!("cancelled task `{id}`")))
        }
        other => Ok(Err(format!("unknown schedule tool `{other}`"))),
    }
}
