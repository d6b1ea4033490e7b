//! `Scheduler` over a temporary database with a `ManualClock`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chrono::{DateTime, Duration as ChronoDuration, Utc};
use chrono_tz::Tz;

use super::*;

struct Env {
    _dir: tempfile::TempDir,
    db: PathBuf,
    clock: Arc<ManualClock>,
}

fn utc(text: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(text)
        .expect("test time")
        .with_timezone(&Utc)
}

impl Env {
    fn new(start: &str) -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = dir.path().join(crate::db::FILE_NAME);
        Env {
            _dir: dir,
            db,
            clock: Arc::new(ManualClock::new(utc(start))),
        }
    }

    /// A scheduler (a daemon process) named `owner` with `yaml` as the
    /// tasks of workspace `ws`.
    fn scheduler(&self, owner: &str, yaml: &str) -> Scheduler {
        let store = Store::open(&self.db).expect("store");
        let clock: Arc<dyn Clock> = self.clock.clone();
        let mut scheduler = Scheduler::new(store, clock, owner).expect("scheduler");
        let tasks =
            file::parse(yaml, Path::new("s.yaml"), &Checks::offline(Tz::UTC)).expect("tasks parse");
        scheduler.set_tasks("ws", tasks).expect("set tasks");
        scheduler
    }

    fn at(&self, time: &str) {
        self.clock.set(utc(time));
    }
}

fn dues(runs: &[DueRun]) -> Vec<String> {
    runs.iter()
        .map(|r| r.due.format("%H:%M:%S").to_string())
        .collect()
}

fn finish(scheduler: &Scheduler, run: &DueRun) {
    let store = scheduler.store();
    assert!(
        store
            .start(run.run_id, scheduler.owner(), 0)
            .expect("start")
    );
    let outcome = Outcome::Done {
        output: "ok".into(),
        receipts: None,
    };
    assert!(store.finish(run.run_id, &outcome, 0).expect("finish"));
}

fn hourly(catch_up: &str) -> String {
    format!(
        "tasks:\n  - id: h\n    schedule: '0 * * * *'\n    prompt: x\n    catch_up: {catch_up}\n"
    )
}

/// Runs at 10:00, then the daemon is down from 10:30 to 13:30.
fn outage(catch_up: &str) -> (Env, Scheduler) {
    let env = Env::new("2026-01-01T09:30:00Z");
    let mut first = env.scheduler("a", &hourly(catch_up));
    assert!(first.due_now().expect("due").is_empty(), "first sight");
    env.at("2026-01-01T10:00:00Z");
    let runs = first.due_now().expect("due");
    assert_eq!(dues(&runs), ["10:00:00"]);
    finish(&first, &runs[0]);
    env.at("2026-01-01T10:30:00Z");
    assert!(first.due_now().expect("due").is_empty());
    drop(first);
    env.at("2026-01-01T13:30:00Z");
    let second = env.scheduler("b", &hourly(catch_up));
    (env, second)
}

#[test]
fn outage_with_catch_up_skip_runs_nothing_missed() {
    let (env, mut scheduler) = outage("skip");
    assert!(scheduler.due_now().expect("due").is_empty());
    env.at("2026-01-01T14:00:00Z");
    assert_eq!(dues(&scheduler.due_now().expect("due")), ["14:00:00"]);
}

#[test]
fn outage_with_catch_up_once_runs_the_latest_missed() {
    let (env, mut scheduler) = outage("once");
    let runs = scheduler.due_now().expect("due");
    assert_eq!(dues(&runs), ["13:00:00"]);
    assert!(scheduler.due_now().expect("due").is_empty(), "claimed once");
    finish(&scheduler, &runs[0]);
    env.at("2026-01-01T14:00:00Z");
    assert_eq!(dues(&scheduler.due_now().expect("due")), ["14:00:00"]);
}

#[test]
fn outage_with_catch_up_all_runs_each_missed_in_turn() {
    let (_env, mut scheduler) = outage("all");
    let mut seen = Vec::new();
    for _ in 0..4 {
        let runs = scheduler.due_now().expect("due");
        assert!(runs.len() <= 1, "one at a time: {:?}", dues(&runs));
        for run in &runs {
            finish(&scheduler, run);
        }
        seen.extend(dues(&runs));
    }
    assert_eq!(seen, ["11:00:00", "12:00:00", "13:00:00"]);
}

const EVERY_MINUTE: &str = "tasks:\n  - id: m\n    schedule: '* * * * *'\n    prompt: x\n";

#[test]
fn overlap_skip_records_the_due_time_as_skipped() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let mut scheduler = env.scheduler("a", EVERY_MINUTE);
    scheduler.due_now().expect("first sight");
    env.at("2026-01-01T10:00:00Z");
    let runs = scheduler.due_now().expect("due");
    assert_eq!(dues(&runs), ["10:00:00"]);
    assert!(
        scheduler
            .store()
            .start(runs[0].run_id, "a", 0)
            .expect("start")
    );
    env.at("2026-01-01T10:01:00Z");
    assert!(
        scheduler.due_now().expect("due").is_empty(),
        "still running"
    );
    let history = scheduler.store().history("ws", "m", 5).expect("history");
    assert_eq!(history[0].status, RunStatus::Skipped);
    assert_eq!(history[1].status, RunStatus::Running);
    finish_running(&scheduler, &runs[0]);
    env.at("2026-01-01T10:01:30Z");
    assert!(
        scheduler.due_now().expect("due").is_empty(),
        "skipped stays skipped"
    );
}

fn finish_running(scheduler: &Scheduler, run: &DueRun) {
    let outcome = Outcome::Failed {
        error: "boom".into(),
        receipts: None,
    };
    assert!(
        scheduler
            .store()
            .finish(run.run_id, &outcome, 0)
            .expect("finish")
    );
}

#[test]
fn overlap_queue_runs_the_due_time_after_the_previous_one() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let yaml = format!("{EVERY_MINUTE}    overlap: queue\n");
    let mut scheduler = env.scheduler("a", &yaml);
    scheduler.due_now().expect("first sight");
    env.at("2026-01-01T10:00:00Z");
    let runs = scheduler.due_now().expect("due");
    env.at("2026-01-01T10:01:00Z");
    assert!(scheduler.due_now().expect("due").is_empty(), "queued");
    assert_eq!(
        scheduler.store().history("ws", "m", 1).expect("history")[0].status,
        RunStatus::Queued
    );
    finish(&scheduler, &runs[0]);
    env.at("2026-01-01T10:01:20Z");
    let runs = scheduler.due_now().expect("due");
    assert_eq!(dues(&runs), ["10:01:00"]);
}

fn restart_mid_run(rerun: bool) -> (Env, Scheduler, DueRun) {
    let env = Env::new("2026-01-01T09:59:30Z");
    let yaml = format!("{EVERY_MINUTE}    rerun_interrupted: {rerun}\n");
    let mut first = env.scheduler("a", &yaml);
    first.due_now().expect("first sight");
    env.at("2026-01-01T10:00:00Z");
    let runs = first.due_now().expect("due");
    assert!(first.store().start(runs[0].run_id, "a", 0).expect("start"));
    drop(first); // the daemon dies mid-run
    env.at("2026-01-01T10:00:10Z");
    let second = env.scheduler("b", &yaml);
    (env, second, runs[0].clone())
}

#[test]
fn restart_mid_run_marks_it_interrupted_and_does_not_claim_it_again() {
    let (env, mut scheduler, run) = restart_mid_run(false);
    assert!(scheduler.due_now().expect("due").is_empty());
    let history = scheduler.store().history("ws", "m", 5).expect("history");
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].id, run.run_id);
    assert_eq!(history[0].status, RunStatus::Interrupted);
    env.at("2026-01-01T10:01:00Z");
    assert_eq!(dues(&scheduler.due_now().expect("due")), ["10:01:00"]);
}

#[test]
fn restart_mid_run_with_rerun_interrupted_runs_it_once_more() {
    let (_env, mut scheduler, run) = restart_mid_run(true);
    let runs = scheduler.due_now().expect("due");
    assert_eq!(dues(&runs), ["10:00:00"]);
    assert_eq!(runs[0].run_id, run.run_id);
    assert_eq!(runs[0].attempt, 2);
    assert!(scheduler.due_now().expect("due").is_empty());
}

#[test]
fn pause_survives_a_restart() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let mut first = env.scheduler("a", EVERY_MINUTE);
    first.due_now().expect("first sight");
    first.pause("ws", "m").expect("pause");
    drop(first);
    env.at("2026-01-01T10:05:00Z");
    let mut second = env.scheduler("b", EVERY_MINUTE);
    assert!(second.due_now().expect("due").is_empty(), "paused");
    env.at("2026-01-01T10:06:00Z");
    assert!(second.due_now().expect("due").is_empty(), "still paused");
    second.resume("ws", "m").expect("resume");
    assert!(
        second.due_now().expect("due").is_empty(),
        "nothing caught up"
    );
    env.at("2026-01-01T10:07:00Z");
    assert_eq!(dues(&second.due_now().expect("due")), ["10:07:00"]);
}

#[test]
fn every_two_seconds_with_a_six_field_cron() {
    let env = Env::new("2026-01-01T10:00:00Z");
    let yaml = "tasks:\n  - id: s\n    schedule: '*/2 * * * * *'\n    prompt: x\n";
    let mut scheduler = env.scheduler("a", yaml);
    scheduler.due_now().expect("first sight");
    let mut seen = Vec::new();
    for _ in 0..10 {
        env.clock.advance(ChronoDuration::milliseconds(1000));
        for _ in 0..2 {
            for run in scheduler.due_now().expect("due") {
                finish(&scheduler, &run);
                seen.push(run.due.format("%S").to_string());
            }
        }
    }
    assert_eq!(seen, ["02", "04", "06", "08", "10"]);
    // a reload (new task list) and a restart find the same due times taken
    let mut again = env.scheduler("b", yaml);
    assert!(again.due_now().expect("due").is_empty());
}

#[test]
fn next_wake_is_the_earliest_due_time_of_a_task_not_paused() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let yaml = "tasks:\n  - id: m\n    schedule: '* * * * *'\n    prompt: x\n  - id: h\n    schedule: '0 * * * *'\n    prompt: x\n";
    let mut scheduler = env.scheduler("a", yaml);
    assert_eq!(scheduler.next_wake(), Some(utc("2026-01-01T10:00:00Z")));
    scheduler.pause("ws", "m").expect("pause");
    assert_eq!(scheduler.next_wake(), Some(utc("2026-01-01T10:00:00Z")));
    env.at("2026-01-01T10:00:00Z");
    assert_eq!(
        dues(&scheduler.due_now().expect("due")),
        ["10:00:00"],
        "h only"
    );
    assert_eq!(scheduler.next_wake(), Some(utc("2026-01-01T11:00:00Z")));
    scheduler.resume("ws", "m").expect("resume");
    assert_eq!(scheduler.next_wake(), Some(utc("2026-01-01T10:01:00Z")));
}

#[test]
fn a_pause_and_resume_from_another_process_are_seen_at_the_next_tick() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let mut scheduler = env.scheduler("a", EVERY_MINUTE);
    let cli = Store::open(&env.db).expect("the CLI's store");
    cli.set_paused("ws", "m", true).expect("pause");
    env.at("2026-01-01T10:03:00Z");
    assert!(scheduler.due_now().expect("due").is_empty(), "paused");
    env.at("2026-01-01T10:05:30Z");
    cli.resume("ws", "m", utc("2026-01-01T10:05:30Z").timestamp_millis())
        .expect("resume");
    assert!(
        scheduler.due_now().expect("due").is_empty(),
        "nothing missed while paused runs"
    );
    env.at("2026-01-01T10:06:00Z");
    assert_eq!(dues(&scheduler.due_now().expect("due")), ["10:06:00"]);
}

#[test]
fn a_run_by_hand_is_queued_behind_an_active_run_and_recorded_as_manual() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let mut scheduler = env.scheduler("a", EVERY_MINUTE);
    env.at("2026-01-01T10:00:00Z");
    let runs = scheduler.due_now().expect("due");
    assert_eq!(dues(&runs), ["10:00:00"]);
    let cli = Store::open(&env.db).expect("the CLI's store");
    let manual = cli
        .queue_manual("ws", "m", utc("2026-01-01T10:00:00Z").timestamp_millis())
        .expect("queue");
    env.at("2026-01-01T10:00:10Z");
    assert!(
        scheduler.due_now().expect("due").is_empty(),
        "waits for the scheduled run"
    );
    finish(&scheduler, &runs[0]);
    let runs = scheduler.due_now().expect("due");
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].run_id, manual);
    let record = scheduler.store().run(manual).expect("run").expect("row");
    assert_eq!(record.origin, "manual");
    assert_eq!(
        record.due_ms % 1000,
        1,
        "a manual run never takes a scheduled due time"
    );
}

mod agent_tasks {
    use super::*;
    use crate::config::Config;
    use crate::scheduler::agent::{self, Refusal, Status};

    fn config() -> Config {
        Config::from_str_with_env(
            "timezone: Asia/Shanghai
workspaces:
  team: {agent_schedules: propose}
  other: {}
channels:
  ours: {plugin: channel-slack, workspace: team, default_conversation: C1}
  theirs: {plugin: channel-slack, workspace: other, default_conversation: C2}
  bound: {plugin: channel-slack, workspace: team, default_conversation: C3, conversations: {C3: other}}
",
            Path::new("pincer.yaml"),
            |_| None,
        )
        .expect("config")
    }

    fn refused(spec: serde_json::Value) -> String {
        match agent::check(&config(), "team", &spec) {
            Err(Refusal::Invalid(m)) => m,
            Ok(task) => panic!("accepted: {task:?}"),
        }
    }

    #[test]
    fn what_the_agent_may_schedule() {
        let task = agent::check(
            &config(),
            "team",
            &serde_json::json!({"id": "agent-standup", "schedule": "0 9 * * 1-5",
                "prompt": "standup notes", "deliver_to": ["channel:ours"]}),
        )
        .expect("a weekday prompt to its own channel");
        assert_eq!(
            task.zone,
            chrono_tz::Asia::Shanghai,
            "pincer.yaml's timezone"
        );
        for (spec, want) in [
            (
                serde_json::json!({"id": "agent-x", "every": "1h", "skill": "skill-calc"}),
                "`skill`: an agent task is a prompt",
            ),
            (
                serde_json::json!({"id": "agent-x", "every": "1m", "prompt": "p"}),
                "agent tasks fire at most once every 5m",
            ),
            (
                serde_json::json!({"id": "agent-x", "every": "1h", "prompt": "p", "deliver_to": ["channel:theirs"]}),
                "unknown channel `theirs`",
            ),
            (
                serde_json::json!({"id": "agent-x", "every": "1h", "prompt": "p", "deliver_to": ["channel:bound"]}),
                "unknown channel `bound`",
            ),
            (
                serde_json::json!({"id": "agent-x", "every": "1h", "prompt": "p",
                    "deliver_to": [{"channel": "ours", "conversation": "C9"}]}),
                "an agent task delivers only to a channel's default conversation",
            ),
            (
                serde_json::json!({"id": "x", "every": "1h", "prompt": "p"}),
                "an agent task's id starts with `agent-`",
            ),
            (
                serde_json::json!({"id": "agent-x", "every": "1h", "prompt": "p", "timezone": "Mars/Base"}),
                "unknown time zone `Mars/Base`",
            ),
        ] {
            let got = refused(spec.clone());
            assert!(got.contains(want), "{spec}\n got: {got}\nwant: {want}");
        }
    }

    /// The daemon's view: the active agent tasks of `team`, loaded again
    /// (as it does within a second of any change).
    fn reload(scheduler: &mut Scheduler) {
        let (tasks, problems) =
            agent::active_tasks(scheduler.store(), &config(), "team").expect("tasks");
        assert!(problems.is_empty(), "{problems:?}");
        scheduler.set_tasks("team", tasks).expect("set tasks");
    }

    /// Ticks once a second from now for `seconds`, starting and finishing
    /// each run handed out at the clock's time; the due times it ran.
    fn tick(env: &Env, scheduler: &mut Scheduler, seconds: i64) -> Vec<String> {
        let mut ran = Vec::new();
        for _ in 0..seconds {
            for run in scheduler.due_now().expect("due") {
                let now = env.clock.now().timestamp_millis();
                let store = scheduler.store();
                assert!(
                    store
                        .start(run.run_id, scheduler.owner(), now)
                        .expect("start")
                );
                let outcome = Outcome::Done {
                    output: "ok".into(),
                    receipts: None,
                };
                assert!(store.finish(run.run_id, &outcome, now).expect("finish"));
                ran.push(run.due.format("%H:%M:%S").to_string());
            }
            env.clock.advance(ChronoDuration::seconds(1));
        }
        ran
    }

    fn add(store: &Store, spec: serde_json::Value, now: DateTime<Utc>) {
        let id = spec["id"].as_str().expect("id").to_owned();
        agent::check(&config(), "team", &spec).expect("valid");
        store
            .add_agent_task("team", &id, &spec, Status::Active, now.timestamp_millis())
            .expect("db")
            .expect("added");
    }

    fn cancel(store: &Store, id: &str, now: DateTime<Utc>) {
        assert!(
            store
                .decide_agent_task(
                    "team",
                    id,
                    &[Status::Active],
                    Status::Cancelled,
                    "agent:team",
                    now.timestamp_millis()
                )
                .expect("db")
        );
    }

    /// Finding 6 of issue 25: the cursor of an id outlived its cancel, so
    /// re-creating the id an hour later ran the slots missed meanwhile
    /// (every one of them with `catch_up: all`). A re-created id now starts
    /// from its first sight: nothing missed runs, then its next slot once.
    #[test]
    fn a_cancelled_then_recreated_task_after_a_pause_runs_at_most_once() {
        let env = Env::new("2026-01-01T09:00:00Z");
        let store = Store::open(&env.db).expect("store");
        let spec = serde_json::json!({"id": "agent-tick", "every": "5m", "prompt": "p"});
        add(&store, spec.clone(), env.clock.now());
        let clock: Arc<dyn Clock> = env.clock.clone();
        let mut scheduler = Scheduler::new(store, clock, "daemon").expect("scheduler");
        reload(&mut scheduler);
        assert_eq!(tick(&env, &mut scheduler, 310), ["09:05:00"]);

        cancel(scheduler.store(), "agent-tick", env.clock.now());
        reload(&mut scheduler);
        env.at("2026-01-01T10:06:00Z");
        assert!(tick(&env, &mut scheduler, 5).is_empty());
        add(scheduler.store(), spec, env.clock.now());
        reload(&mut scheduler);
        // 10:06:05 .. 10:12:05: nothing of 09:10 .. 10:05, then 10:10 once
        assert_eq!(tick(&env, &mut scheduler, 360), ["10:10:00"]);
    }

    /// The same, before the daemon reloads: the re-created id finds no
    /// cursor even if the scheduler still holds the old task.
    #[test]
    fn a_recreated_task_replays_nothing_even_before_a_reload() {
        let env = Env::new("2026-01-01T09:00:00Z");
        let store = Store::open(&env.db).expect("store");
        let spec = serde_json::json!({"id": "agent-tick", "every": "5m", "prompt": "p"});
        add(&store, spec.clone(), env.clock.now());
        let clock: Arc<dyn Clock> = env.clock.clone();
        let mut scheduler = Scheduler::new(store, clock, "daemon").expect("scheduler");
        reload(&mut scheduler);
        assert_eq!(tick(&env, &mut scheduler, 1), Vec::<String>::new());
        // the daemon stalls for an hour while the agent cancels and re-creates
        env.at("2026-01-01T10:06:00Z");
        cancel(scheduler.store(), "agent-tick", env.clock.now());
        add(scheduler.store(), spec, env.clock.now());
        assert_eq!(tick(&env, &mut scheduler, 250), ["10:10:00"]);
    }

    /// Two scheduled starts of one agent task id are at least 4 minutes
    /// apart, whatever the triggers of its re-creations say.
    #[test]
    fn an_agent_task_id_starts_at_most_once_every_four_minutes() {
        let env = Env::new("2026-01-01T09:00:00Z");
        let store = Store::open(&env.db).expect("store");
        let clock: Arc<dyn Clock> = env.clock.clone();
        let mut scheduler = Scheduler::new(store, clock, "daemon").expect("scheduler");
        let mut ran = Vec::new();
        // each minute: cancel, and re-create to fire 30 s later
        for minute in 0..8 {
            let now = env.clock.now();
            if minute > 0 {
                cancel(scheduler.store(), "agent-soon", now);
            }
            let at = (now + ChronoDuration::seconds(30)).to_rfc3339();
            let spec = serde_json::json!({"id": "agent-soon", "prompt": "p", "at": at});
            add(scheduler.store(), spec, now);
            reload(&mut scheduler);
            ran.extend(tick(&env, &mut scheduler, 60));
        }
        assert_eq!(ran, ["09:00:30", "09:04:30"]);
        let skipped = scheduler
            .store()
            .history("team", "agent-soon", 20)
            .expect("history")
            .into_iter()
            .filter(|r| r.status == RunStatus::Skipped)
            .count();
        assert_eq!(skipped, 6, "the others are on record as skipped");
    }

    #[test]
    fn a_file_task_cannot_take_the_agent_prefix() {
        let err = file::parse(
            "tasks:\n  - id: agent-x\n    every: 1h\n    prompt: p\n",
            Path::new("s.yaml"),
            &Checks::offline(Tz::UTC),
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with(
                "s.yaml:2:9: task ids starting with `agent-` are kept for tasks the agent schedules"
            ),
            "{err}"
        );
    }

    #[test]
    fn live_tasks_are_capped_and_ids_unique_until_cancelled() {
        let env = Env::new("2026-01-01T00:00:00Z");
        let store = Store::open(&env.db).expect("store");
        let spec = serde_json::json!({"id": "agent-a", "every": "1h", "prompt": "p"});
        store
            .add_agent_task("team", "agent-a", &spec, Status::Pending, 1)
            .expect("db")
            .expect("added");
        let again = store
            .add_agent_task("team", "agent-a", &spec, Status::Pending, 2)
            .expect("db")
            .unwrap_err();
        assert!(again.to_string().contains("exists already"), "{again}");
        assert!(
            store
                .decide_agent_task(
                    "team",
                    "agent-a",
                    &[Status::Pending],
                    Status::Cancelled,
                    "agent:team",
                    3
                )
                .expect("db")
        );
        store
            .add_agent_task("team", "agent-a", &spec, Status::Pending, 4)
            .expect("db")
            .expect("a cancelled id may be used again");
        for i in 1..agent::MAX_PER_WORKSPACE {
            store
                .add_agent_task("team", &format!("agent-{i}"), &spec, Status::Active, 5)
                .expect("db")
                .expect("under the cap");
        }
        let over = store
            .add_agent_task("team", "agent-over", &spec, Status::Active, 6)
            .expect("db")
            .unwrap_err();
        assert!(
            over.to_string().contains("has 20 scheduled tasks"),
            "{over}"
        );
        assert!(
            store
                .add_agent_task("other", "agent-over", &spec, Status::Active, 6)
                .expect("db")
                .is_ok(),
            "the cap is per workspace"
        );
        assert!(
            !store
                .decide_agent_task(
                    "team",
                    "agent-a",
                    &[Status::Active],
                    Status::Cancelled,
                    "x",
                    7
                )
                .expect("db"),
            "a pending task is not active"
        );
    }
}

#[test]
fn a_reload_mid_run_fires_no_due_time_twice() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let mut scheduler = env.scheduler("a", EVERY_MINUTE);
    env.at("2026-01-01T10:00:00Z");
    let runs = scheduler.due_now().expect("due");
    assert_eq!(dues(&runs), ["10:00:00"]);
    // the file is edited (same task, new options) while the run goes on
    let edited = format!("{EVERY_MINUTE}    overlap: queue\n");
    let tasks =
        file::parse(&edited, Path::new("s.yaml"), &Checks::offline(Tz::UTC)).expect("parse");
    scheduler.set_tasks("ws", tasks).expect("reload");
    assert!(
        scheduler.due_now().expect("due").is_empty(),
        "10:00 is taken"
    );
    env.at("2026-01-01T10:01:00Z");
    assert!(
        scheduler.due_now().expect("due").is_empty(),
        "10:01 waits (queue)"
    );
    finish(&scheduler, &runs[0]);
    env.at("2026-01-01T10:01:05Z");
    assert_eq!(dues(&scheduler.due_now().expect("due")), ["10:01:00"]);
    let history = scheduler.store().history("ws", "m", 10).expect("history");
    assert_eq!(history.len(), 2, "one row per due time: {history:?}");
}

/// Moves the clock a minute at a time from `from` to `to`, finishing each
/// run at once; the due times handed out, in UTC.
fn walk(env: &Env, scheduler: &mut Scheduler, from: &str, to: &str) -> Vec<String> {
    env.at(from);
    scheduler.due_now().expect("first sight");
    let end = utc(to);
    let mut seen = Vec::new();
    while env.clock.now() < end {
        env.clock.advance(ChronoDuration::minutes(1));
        for run in scheduler.due_now().expect("due") {
            finish(scheduler, &run);
            seen.push(run.due.to_rfc3339());
        }
    }
    seen
}

/// A 02:30 job in New York over the spring-forward night (2026-03-08,
/// 02:00 EST → 03:00 EDT): once a day, that day at 03:00 EDT.
#[test]
fn spring_forward_runs_a_skipped_time_once_after_the_gap() {
    let env = Env::new("2026-03-07T05:00:00Z");
    let yaml = "tasks:\n  - id: d\n    schedule: '30 2 * * *'\n    timezone: America/New_York\n    prompt: x\n";
    let mut scheduler = env.scheduler("a", yaml);
    let seen = walk(
        &env,
        &mut scheduler,
        "2026-03-07T05:00:00Z",
        "2026-03-09T12:00:00Z",
    );
    assert_eq!(
        seen,
        [
            "2026-03-07T07:30:00+00:00", // 02:30 EST
            "2026-03-08T07:00:00+00:00", // 03:00 EDT: 02:30 does not exist
            "2026-03-09T06:30:00+00:00", // 02:30 EDT
        ]
    );
}

/// A 01:30 job in New York over the fall-back night (2026-11-01, 02:00
/// EDT → 01:00 EST): once a day, that day at the first 01:30 (EDT).
#[test]
fn fall_back_runs_a_repeated_time_once_at_its_first_pass() {
    let env = Env::new("2026-10-31T04:00:00Z");
    let yaml = "tasks:\n  - id: d\n    schedule: '30 1 * * *'\n    timezone: America/New_York\n    prompt: x\n";
    let mut scheduler = env.scheduler("a", yaml);
    let seen = walk(
        &env,
        &mut scheduler,
        "2026-10-31T04:00:00Z",
        "2026-11-02T12:00:00Z",
    );
    assert_eq!(
        seen,
        [
            "2026-10-31T05:30:00+00:00", // 01:30 EDT
            "2026-11-01T05:30:00+00:00", // 01:30 EDT, not again at 01:30 EST
            "2026-11-02T06:30:00+00:00", // 01:30 EST
        ]
    );
}

fn tasks(yaml: &str) -> Vec<Task> {
    file::parse(yaml, Path::new("s.yaml"), &Checks::offline(Tz::UTC)).expect("tasks parse")
}

#[test]
fn pause_survives_a_reload() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let mut scheduler = env.scheduler("a", EVERY_MINUTE);
    scheduler.due_now().expect("first sight");
    scheduler.pause("ws", "m").expect("pause");
    // the file is saved again (the same task, and an edited one)
    scheduler
        .set_tasks("ws", tasks(&format!("{EVERY_MINUTE}    timeout: 5m\n")))
        .expect("reload");
    assert_eq!(scheduler.next_wake(), None, "paused after the reload");
    env.at("2026-01-01T10:03:00Z");
    assert!(scheduler.due_now().expect("due").is_empty(), "paused");
    scheduler.resume("ws", "m").expect("resume");
    env.at("2026-01-01T10:04:00Z");
    assert_eq!(dues(&scheduler.due_now().expect("due")), ["10:04:00"]);
}

#[test]
fn a_reload_stops_a_removed_task_and_replans_a_changed_one() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let both = "tasks:\n  - id: m\n    schedule: '* * * * *'\n    prompt: x\n  - id: h\n    schedule: '0 * * * *'\n    prompt: x\n";
    let mut scheduler = env.scheduler("a", both);
    scheduler.due_now().expect("first sight");
    env.at("2026-01-01T10:00:00Z");
    let runs = scheduler.due_now().expect("due");
    assert_eq!(dues(&runs).len(), 2, "m and h at 10:00");
    for run in &runs {
        finish(&scheduler, run);
    }
    env.at("2026-01-01T10:00:30Z");
    scheduler
        .set_tasks(
            "ws",
            tasks("tasks:\n  - id: h\n    schedule: '30 * * * *'\n    prompt: x\n"),
        )
        .expect("reload");
    assert_eq!(scheduler.task_count(), 1);
    assert_eq!(scheduler.next_wake(), Some(utc("2026-01-01T10:30:00Z")));
    let mut seen = Vec::new();
    while env.clock.now() < utc("2026-01-01T11:10:00Z") {
        env.clock.advance(ChronoDuration::minutes(1));
        for run in scheduler.due_now().expect("due") {
            finish(&scheduler, &run);
            seen.push(format!("{} {}", run.task.id, run.due.format("%H:%M")));
        }
    }
    assert_eq!(seen, ["h 10:30"], "m stopped; h moved to :30");
}

/// Without `timeout:` a run gets 10 minutes: its lease (timeout +
/// LEASE_MARGIN) holds until then, and a scheduler starting after it marks
/// the run interrupted even under the same owner.
#[test]
fn the_default_timeout_sets_the_lease_of_a_run() {
    let env = Env::new("2026-01-01T09:59:30Z");
    let mut scheduler = env.scheduler("a", EVERY_MINUTE);
    assert_eq!(
        scheduler.task("ws", "m").expect("task").timeout,
        std::time::Duration::from_secs(600)
    );
    env.at("2026-01-01T10:00:00Z");
    let runs = scheduler.due_now().expect("due");
    assert!(
        scheduler
            .store()
            .start(runs[0].run_id, "a", 0)
            .expect("start")
    );
    drop(scheduler);
    env.at("2026-01-01T10:11:00Z"); // 10 min + 60 s: the lease's last instant
    let same = env.scheduler("a", EVERY_MINUTE);
    let history = same.store().history("ws", "m", 5).expect("history");
    assert_eq!(history.last().expect("run").status, RunStatus::Running);
    drop(same);
    env.at("2026-01-01T10:11:01Z");
    let same = env.scheduler("a", EVERY_MINUTE);
    let history = same.store().history("ws", "m", 5).expect("history");
    let run = history
        .iter()
        .find(|r| r.id == runs[0].run_id)
        .expect("the run");
    assert_eq!(run.status, RunStatus::Interrupted);
}

/// A task without `timezone:` is read in the configuration's `timezone:`,
/// else the host's.
#[test]
fn a_task_without_a_zone_uses_the_configured_then_the_host_zone() {
    let config = |text: &str| {
        crate::config::Config::from_str_with_env(text, Path::new("pincer.yaml"), |_| None)
            .expect("config")
    };
    let shanghai = agent::default_zone(&config("timezone: Asia/Shanghai\n"));
    assert_eq!(shanghai, chrono_tz::Asia::Shanghai);
    assert_eq!(agent::default_zone(&config("{}\n")), file::host_zone());

    let env = Env::new("2026-01-01T00:00:00Z");
    let store = Store::open(&env.db).expect("store");
    let clock: Arc<dyn Clock> = env.clock.clone();
    let mut scheduler = Scheduler::new(store, clock, "a").expect("scheduler");
    let nine = file::parse(
        "tasks:\n  - id: n\n    schedule: '0 9 * * *'\n    prompt: x\n",
        Path::new("s.yaml"),
        &Checks::offline(shanghai),
    )
    .expect("parse");
    scheduler.set_tasks("ws", nine).expect("set");
    assert_eq!(
        scheduler.next_wake(),
        Some(utc("2026-01-01T01:00:00Z")),
        "09:00 in Shanghai"
    );
}
