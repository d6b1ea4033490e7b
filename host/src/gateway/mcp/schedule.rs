//! Tasks the agent schedules for itself, offered as MCP tools:
//! `schedule__create`, `schedule__list` and `schedule__cancel`, only to
//! workspaces whose `agent_schedules` is `propose` or `auto` (the reach
//! decides). The rules are [`crate::scheduler::agent`]'s; this is the tool
//! surface. The running daemon sees changes within a second.

use std::sync::Arc;

use chrono::Utc;
use rmcp::model::{CallToolResult, JsonObject, Tool};
use serde::Deserialize;

use super::{McpError, Reply};
use crate::audit::AuditLog;
use crate::config::{AgentSchedules, Config};
use crate::scheduler::agent::{self, Status};
use crate::scheduler::{Action, Store, plan};

pub struct ScheduleTools {
    store: Arc<Store>,
    config: Arc<Config>,
    audit: Arc<AuditLog>,
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
    pub fn new(store: Arc<Store>, config: Arc<Config>, audit: Arc<AuditLog>) -> Self {
        Self {
            store,
            config,
            audit,
        }
    }

    pub async fn call(
        &self,
        workspace: &str,
        tool: &str,
        arguments: Option<JsonObject>,
    ) -> Result<CallToolResult, McpError> {
        let store = self.store.clone();
        let config = self.config.clone();
        let audit = self.audit.clone();
        let (workspace, tool) = (workspace.to_owned(), tool.to_owned());
        let outcome = tokio::task::spawn_blocking(move || {
            run(&store, &config, &audit, &workspace, &tool, arguments)
        })
        .await
        .map_err(|e| McpError::Failed(e.to_string()))??;
        Ok(outcome.into_result())
    }
}

/// The answer for the agent, or `Err` for the gateway's own trouble.
fn run(
    store: &Store,
    config: &Config,
    audit: &AuditLog,
    workspace: &str,
    tool: &str,
    arguments: Option<JsonObject>,
) -> Result<Reply, McpError> {
    run_at(
        store,
        config,
        audit,
        workspace,
        tool,
        arguments,
        crate::db::now_ms(),
    )
}

/// [`run`] at `now_ms` (the creation limits count from it).
fn run_at(
    store: &Store,
    config: &Config,
    audit: &AuditLog,
    workspace: &str,
    tool: &str,
    arguments: Option<JsonObject>,
    now_ms: i64,
) -> Result<Reply, McpError> {
    let db = |e: crate::scheduler::StoreError| McpError::Failed(format!("schedule store: {e}"));
    let actor = crate::audit::Actor::Agent(workspace);
    match tool {
        "create" => {
            let mut spec = serde_json::Value::Object(arguments.unwrap_or_default());
            let Some(id) = spec.get("id").and_then(|v| v.as_str()).map(agent::prefixed) else {
                return Ok(Reply::Refused("`id` is required (a short name)".into()));
            };
            spec["id"] = serde_json::Value::String(id.clone());
            let task = match agent::check(config, workspace, &spec) {
                Ok(task) => task,
                Err(e) => return Ok(Reply::Refused(e.to_string())),
            };
            let mode = config
                .workspaces
                .get(workspace)
                .map_or(AgentSchedules::None, |w| w.agent_schedules);
            let status = match mode {
                AgentSchedules::Auto => Status::Active,
                AgentSchedules::Propose => Status::Pending,
                AgentSchedules::None => {
                    return Ok(Reply::Refused(format!(
                        "workspaces.{workspace}.agent_schedules is none: this workspace cannot schedule tasks"
                    )));
                }
            };
            if let Err(e) = store
                .add_agent_task(workspace, &id, &spec, status, now_ms)
                .map_err(db)?
            {
                return Ok(Reply::Refused(e.to_string()));
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
                    crate::audit::Action::ScheduleAgentCreated,
                    format!("scheduled task `{id}` ({what})"),
                )
            } else {
                (
                    crate::audit::Action::ScheduleAgentProposed,
                    format!(
                        "proposed task `{id}` ({what}); it runs once a person approves it (pincer schedule approve {id})"
                    ),
                )
            };
            // the task is in the store; the log keeps its size, hash and head
            audit.record(
                actor,
                Some(workspace),
                event,
                &agent::audit_summary(&id, &spec),
            );
            Ok(Reply::Done(text))
        }
        "list" => {
            let tasks = store.agent_tasks(Some(workspace), false).map_err(db)?;
            if tasks.is_empty() {
                return Ok(Reply::Done("no scheduled tasks".into()));
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
            Ok(Reply::Done(lines.join("\n")))
        }
        "cancel" => {
            let Cancel { id } = match arguments
                .map(serde_json::Value::Object)
                .map(serde_json::from_value::<Cancel>)
            {
                Some(Ok(args)) => args,
                Some(Err(e)) => return Ok(Reply::Refused(format!("invalid arguments: {e}"))),
                None => return Ok(Reply::Refused("`id` is required".into())),
            };
            let id = agent::prefixed(&id);
            let cancelled = store
                .decide_agent_task(
                    workspace,
                    &id,
                    &[Status::Pending, Status::Active],
                    Status::Cancelled,
                    &actor.to_string(),
                    now_ms,
                )
                .map_err(db)?;
            if !cancelled {
                return Ok(Reply::Refused(format!(
                    "no task `{id}` to cancel (list shows this agent's tasks)"
                )));
            }
            audit.record(
                actor,
                Some(workspace),
                crate::audit::Action::ScheduleAgentCancelled,
                &id,
            );
            Ok(Reply::Done(format!("cancelled task `{id}`")))
        }
        other => Ok(Reply::Refused(format!("unknown schedule tool `{other}`"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Env {
        _dir: tempfile::TempDir,
        db: std::path::PathBuf,
        store: Store,
        config: Config,
        audit: AuditLog,
    }

    /// `auto` may schedule at once, `propose` only proposes, `none` nothing.
    fn env() -> Env {
        let dir = tempfile::tempdir().expect("dir");
        let db = dir.path().join(crate::db::FILE_NAME);
        let config = Config::from_str_with_env(
            "timezone: Asia/Shanghai
workspaces:
  auto: {agent_schedules: auto}
  asks: {agent_schedules: propose}
  quiet: {}
channels:
  chat: {plugin: channel-slack, workspace: auto, default_conversation: C1}
",
            std::path::Path::new("pincer.yaml"),
            |_| None,
        )
        .expect("config");
        Env {
            store: Store::open(&db).expect("store"),
            audit: AuditLog::open(&db).expect("audit"),
            db,
            config,
            _dir: dir,
        }
    }

    fn call(
        env: &Env,
        workspace: &str,
        tool: &str,
        args: serde_json::Value,
    ) -> Result<String, String> {
        let args = match args {
            serde_json::Value::Object(o) => Some(o),
            _ => None,
        };
        match run(&env.store, &env.config, &env.audit, workspace, tool, args)
            .expect("no store trouble")
        {
            Reply::Done(text) => Ok(text),
            Reply::Refused(text) => Err(text),
        }
    }

    /// (actor, workspace, kind, detail) of each audited event, oldest first.
    fn audited(env: &Env) -> Vec<(String, Option<String>, String, String)> {
        let mut events = env.audit.recent(None, 100).expect("audit");
        events.reverse();
        events
            .into_iter()
            .map(|e| (e.actor, e.workspace, e.kind, e.detail))
            .collect()
    }

    fn call_at(
        env: &Env,
        workspace: &str,
        tool: &str,
        args: serde_json::Value,
        now_ms: i64,
    ) -> Result<String, String> {
        let args = match args {
            serde_json::Value::Object(o) => Some(o),
            _ => None,
        };
        match run_at(
            &env.store,
            &env.config,
            &env.audit,
            workspace,
            tool,
            args,
            now_ms,
        )
        .expect("no store trouble")
        {
            Reply::Done(text) => Ok(text),
            Reply::Refused(text) => Err(text),
        }
    }

    /// `pincer.db` and its WAL after a checkpoint, in bytes.
    fn db_bytes(env: &Env) -> u64 {
        let conn = crate::db::open(&env.db).expect("open");
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .expect("checkpoint");
        let size = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
        size(&env.db) + size(&env.db.with_extension("db-wal"))
    }

    /// The bound SECURITY.md states: 1,000 create/cancel cycles of the
    /// largest task a container may send leave `pincer.db` under 4 MiB.
    const CYCLES_BOUND: u64 = 4 << 20;

    /// Finding 5 of issue 25: each create kept its task, and the audit log a
    /// copy of it, forever (200 cycles grew the file from 94 KB to 27 MB).
    /// Now at most 20 live and 20 cancelled tasks are kept per workspace,
    /// and the audit log keeps a hash and 256 bytes of each. The cycles are
    /// 15 minutes apart (within the creation limits) over ten days, so every
    /// one of them is accepted and the bound is the store's, not the limit's.
    #[test]
    fn a_thousand_create_cancel_cycles_leave_the_database_under_a_bound() {
        let env = env();
        let prompt = "x".repeat(60_000);
        let start = crate::db::now_ms();
        let empty = db_bytes(&env);
        for i in 0..1000_i64 {
            let now = start + i * 15 * 60_000;
            let spec =
                serde_json::json!({"id": format!("t{}", i % 50), "every": "1h", "prompt": prompt});
            let created = call_at(&env, "auto", "create", spec, now);
            assert!(created.is_ok(), "cycle {i}: {created:?}");
            let cancelled = call_at(
                &env,
                "auto",
                "cancel",
                serde_json::json!({"id": format!("t{}", i % 50)}),
                now + 1,
            );
            assert!(cancelled.is_ok(), "cycle {i}: {cancelled:?}");
        }
        let bytes = db_bytes(&env);
        assert!(
            bytes < CYCLES_BOUND,
            "pincer.db grew from {empty} to {bytes} bytes over 1000 cycles (bound {CYCLES_BOUND})"
        );
        let kept = env.store.agent_tasks(Some("auto"), true).expect("tasks");
        assert_eq!(kept.len(), agent::MAX_RETAINED, "the newest cancelled ones");
        let events = env.audit.recent(None, 5000).expect("audit");
        assert_eq!(events.len(), 2000, "every create and cancel is on record");
        let longest = events.iter().map(|e| e.detail.len()).max().unwrap_or(0);
        assert!(
            longest < agent::AUDIT_HEAD_BYTES + 200,
            "an audit row keeps a summary, not the task: {longest} bytes"
        );
    }

    /// Past 30 creations in an hour the agent is told when it may create
    /// again, and nothing of the refused ones is stored or audited.
    #[test]
    fn creations_past_the_hourly_limit_are_refused_and_leave_nothing() {
        let env = env();
        let now = crate::db::now_ms();
        let spec = serde_json::json!({"id": "burst", "every": "1h", "prompt": "p"});
        let mut accepted = 0;
        let mut refusals = Vec::new();
        for _ in 0..1000 {
            match call_at(&env, "auto", "create", spec.clone(), now) {
                Ok(_) => {
                    accepted += 1;
                    call_at(
                        &env,
                        "auto",
                        "cancel",
                        serde_json::json!({"id": "burst"}),
                        now,
                    )
                    .expect("cancelled");
                }
                Err(e) => refusals.push(e),
            }
        }
        assert_eq!(accepted, agent::MAX_CREATES_PER_HOUR);
        assert_eq!(refusals.len(), 1000 - agent::MAX_CREATES_PER_HOUR);
        assert_eq!(
            refusals[0],
            "this workspace's agent created 30 tasks in the last hour, the most it may: try again in 1h"
        );
        assert_eq!(
            env.audit.recent(None, 5000).expect("audit").len(),
            2 * agent::MAX_CREATES_PER_HOUR,
            "refusals are not stored"
        );
        assert!(
            call_at(&env, "auto", "create", spec, now + 3_600_001).is_ok(),
            "an hour later it may create again"
        );
    }

    /// Finding 6 of issue 25: what makes a task fire many times at once is
    /// refused for the agent's tasks, and nothing is stored.
    #[test]
    fn agent_tasks_asking_to_replay_queue_rerun_run_long_or_name_approvers_are_refused() {
        let env = env();
        for (extra, want) in [
            (
                serde_json::json!({"catch_up": "all"}),
                "`catch_up: all`: an agent task catches up at most once after an outage; write `catch_up: once` (the default) or `skip`",
            ),
            (
                serde_json::json!({"overlap": "queue"}),
                "`overlap: queue`: an agent task's runs never queue; leave `overlap` out (`skip`: a due time that finds the previous run still going is skipped)",
            ),
            (
                serde_json::json!({"timeout": "100000h"}),
                "`timeout: 100000h`: an agent task runs at most 1h; write a shorter timeout (the default is 10m)",
            ),
            (
                serde_json::json!({"rerun_interrupted": true}),
                "`rerun_interrupted`: an agent task's interrupted runs are not run again; leave it out",
            ),
            (
                serde_json::json!({"approvals": {"ask_in": "channel:chat", "approvers": ["U1"]}}),
                "`approvals`: who decides a task's calls is a person's choice, made in schedules.yaml; an agent task's calls that need a person are refused. Leave it out",
            ),
        ] {
            let mut spec = serde_json::json!({"id": "many", "every": "1h", "prompt": "p"});
            for (key, value) in extra.as_object().expect("object") {
                spec[key] = value.clone();
            }
            assert_eq!(call(&env, "auto", "create", spec), Err(want.to_owned()));
        }
        for ok in [
            serde_json::json!({"id": "a", "every": "1h", "prompt": "p", "catch_up": "skip", "timeout": "1h"}),
            serde_json::json!({"id": "b", "every": "1h", "prompt": "p", "catch_up": "once", "overlap": "skip", "rerun_interrupted": false}),
        ] {
            assert!(call(&env, "auto", "create", ok.clone()).is_ok(), "{ok}");
        }
        let kept = env.store.agent_tasks(None, true).expect("tasks");
        assert_eq!(
            kept.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["agent-a", "agent-b"],
            "nothing of the refused ones"
        );
        assert_eq!(audited(&env).len(), 2);
    }

    const DIGEST: &str = r#"{"id": "digest", "every": "6h", "prompt": "sum up the day", "deliver_to": ["channel:chat"]}"#;

    #[test]
    fn auto_tasks_are_active_at_once_listed_and_cancelled_by_their_agent() {
        let env = env();
        let spec: serde_json::Value = serde_json::from_str(DIGEST).expect("json");
        let created = call(&env, "auto", "create", spec.clone()).expect("created");
        assert!(
            created.starts_with("scheduled task `agent-digest` (every 6h in Asia/Shanghai, next "),
            "{created}"
        );
        let (active, problems) =
            agent::active_tasks(&env.store, &env.config, "auto").expect("tasks");
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(
            active.iter().map(|t| t.id.as_str()).collect::<Vec<_>>(),
            ["agent-digest"],
            "active without approval"
        );

        let listed = call(&env, "auto", "list", serde_json::json!({})).expect("list");
        assert!(
            listed.starts_with("- agent-digest [active] every 6h in Asia/Shanghai, next ")
                && listed.ends_with(": sum up the day"),
            "{listed}"
        );
        // another workspace's agent sees and cancels none of it
        assert_eq!(
            call(&env, "asks", "list", serde_json::json!({})),
            Ok("no scheduled tasks".to_owned())
        );
        assert_eq!(
            call(&env, "asks", "cancel", serde_json::json!({"id": "digest"})),
            Err("no task `agent-digest` to cancel (list shows this agent's tasks)".to_owned())
        );

        assert_eq!(
            call(&env, "auto", "cancel", serde_json::json!({"id": "digest"})),
            Ok("cancelled task `agent-digest`".to_owned())
        );
        let (active, _) = agent::active_tasks(&env.store, &env.config, "auto").expect("tasks");
        assert!(active.is_empty(), "cancelled tasks stop");
        assert_eq!(
            call(&env, "auto", "list", serde_json::json!({})),
            Ok("no scheduled tasks".to_owned())
        );
        assert_eq!(
            call(
                &env,
                "auto",
                "cancel",
                serde_json::json!({"id": "agent-digest"})
            ),
            Err("no task `agent-digest` to cancel (list shows this agent's tasks)".to_owned())
        );
        assert_eq!(
            call(&env, "auto", "cancel", serde_json::json!({"name": "x"})),
            Err("invalid arguments: unknown field `name`, expected `id`".to_owned())
        );

        assert_eq!(
            audited(&env),
            [
                (
                    "agent:auto".to_owned(),
                    Some("auto".to_owned()),
                    "schedule.agent_created".to_owned(),
                    {
                        use sha2::Digest as _;
                        let mut stored = spec;
                        stored["id"] = "agent-digest".into();
                        let json = stored.to_string();
                        // short enough to be kept whole after its size and hash
                        format!(
                            "agent-digest: {} bytes, sha256 {}: {json}",
                            json.len(),
                            hex::encode(sha2::Sha256::digest(json.as_bytes()))
                        )
                    },
                ),
                (
                    "agent:auto".to_owned(),
                    Some("auto".to_owned()),
                    "schedule.agent_cancelled".to_owned(),
                    "agent-digest".to_owned(),
                ),
            ]
        );
    }

    /// What a container sends is stored in the host's database: a task
    /// larger than a message (which no turn would take anyway) is refused
    /// before anything is written.
    #[test]
    fn a_task_larger_than_a_message_is_refused_and_nothing_is_stored() {
        let env = env();
        let prompt = "x".repeat(crate::config::MAX_MESSAGE_BYTES);
        let spec = serde_json::json!({"id": "huge", "every": "1h", "prompt": prompt});
        // as checked: with the id the task gets (`agent-huge`)
        let size = spec.to_string().len() + "agent-".len();
        assert_eq!(
            call(&env, "asks", "create", spec),
            Err(format!(
                "the task is {size} bytes of JSON; an agent task is at most 65536 (64 KiB), the size of a message"
            ))
        );
        let listed = call(&env, "asks", "list", serde_json::json!({})).expect("list");
        assert!(!listed.contains("huge"), "{listed}");
        assert!(audited(&env).is_empty(), "{:?}", audited(&env));
    }

    #[test]
    fn propose_waits_for_a_person_and_none_refuses() {
        let env = env();
        let spec =
            serde_json::json!({"id": "standup", "schedule": "0 9 * * 1-5", "prompt": "notes"});
        let proposed = call(&env, "asks", "create", spec.clone()).expect("proposed");
        assert!(
            proposed.starts_with(
                "proposed task `agent-standup` (schedule \"0 9 * * 1-5\" in Asia/Shanghai, next "
            ) && proposed.ends_with(
                "); it runs once a person approves it (pincer schedule approve agent-standup)"
            ),
            "{proposed}"
        );
        let (active, _) = agent::active_tasks(&env.store, &env.config, "asks").expect("tasks");
        assert!(active.is_empty(), "pending until approved");
        let listed = call(&env, "asks", "list", serde_json::json!({})).expect("list");
        assert!(
            listed.starts_with("- agent-standup [pending approval] "),
            "{listed}"
        );
        assert_eq!(
            call(&env, "quiet", "create", spec),
            Err(
                "workspaces.quiet.agent_schedules is none: this workspace cannot schedule tasks"
                    .to_owned()
            )
        );
        let kinds: Vec<(String, String)> = audited(&env)
            .into_iter()
            .map(|(actor, _, kind, _)| (actor, kind))
            .collect();
        assert_eq!(
            kinds,
            [(
                "agent:asks".to_owned(),
                "schedule.agent_proposed".to_owned()
            )]
        );
    }
}
