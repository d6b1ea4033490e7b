//! Two-stage idleness on the real Docker Engine with the real daemon: an
//! unused workspace container is frozen after `pause_after` (the engine
//! says paused, its CPU time stops), every kind of use wakes it (a message,
//! `workspace exec`, a scheduled run), a daemon killed while it is frozen
//! finds it again, `stop_after` stops it, and past `max_paused` the least
//! recently used frozen container is stopped and cold-starts on next use.

use std::time::{Duration, Instant};

use crate::agent::{Env, last};
use crate::support::fake_llm::Behaviour;
use crate::support::gateway::{metric, scrape_metrics};
use crate::support::{docker, ok, stderr, stdout};
use serde_json::json;

/// What the engine says of `container` (a Go template of `docker inspect`).
fn inspect(container: &str, format: &str) -> String {
    stdout(&docker(&["inspect", "-f", format, container]))
        .trim()
        .to_owned()
}

/// Waits until `container`'s state (`.State.Status`) is `state`.
fn wait_state(container: &str, state: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = inspect(container, "{{.State.Status}}");
        if now == state {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{container} is still {now}, not {state}, after {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Waits until `sandbox`'s audit log holds more than `count` rows of `kind`.
fn wait_audited(env: &Env, kind: &str, count: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let rows = env.sandbox.audited(kind);
        if rows.len() > count {
            return rows;
        }
        assert!(Instant::now() < deadline, "no new {kind}: {rows:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// CPU time (µs) the container's cgroup has used (cgroup v2 or v1).
fn cpu_usage_usec(container: &str) -> u64 {
    let id = inspect(container, "{{.Id}}");
    for dir in [
        format!("/sys/fs/cgroup/system.slice/docker-{id}.scope"),
        format!("/sys/fs/cgroup/docker/{id}"),
    ] {
        if let Ok(stat) = std::fs::read_to_string(format!("{dir}/cpu.stat")) {
            return stat
                .lines()
                .find_map(|l| l.strip_prefix("usage_usec "))
                .and_then(|v| v.trim().parse().ok())
                .expect("usage_usec");
        }
    }
    let nanos =
        std::fs::read_to_string(format!("/sys/fs/cgroup/cpuacct/docker/{id}/cpuacct.usage"))
            .expect("the container's cgroup");
    nanos.trim().parse::<u64>().expect("cpuacct.usage") / 1000
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unused_container_is_frozen_and_a_message_an_exec_and_a_scheduled_run_wake_it() {
    let env = Env::new(
        vec![Behaviour::answer("awake")],
        "  w: {idle: {pause_after: 2s}}\n",
    )
    .await;
    // Loaded now, edited later: the running daemon picks up the change.
    let schedule = |every: &str| {
        env.sandbox.write(
            "workspaces/w/schedules.yaml",
            &format!("tasks:\n  - id: nudge\n    every: {every}\n    prompt: \"anything new?\"\n"),
        );
    };
    schedule("1h");
    let daemon = env.start();
    let (events, out) = env.message("w", "hello");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(last(&events)["reply"], "awake");
    let container = env.container("w");
    let id = inspect(&container, "{{.Id}}");

    wait_state(&container, "paused", Duration::from_secs(15));
    let paused = env.sandbox.audited("container.paused");
    assert!(paused[0].contains("unused for"), "{paused:?}");
    let before = cpu_usage_usec(&container);
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(
        cpu_usage_usec(&container),
        before,
        "a frozen container uses no CPU"
    );
    let status = ok(env.pincer(&["workspace", "status", "w"]));
    assert!(status.contains("paused since"), "{status}");
    let status = ok(env.pincer(&["status"]));
    assert!(status.contains("paused since"), "{status}");

    // A message wakes it, and it is answered by the same container.
    let woken = env.sandbox.audited("container.woken").len();
    let (events, out) = env.message("w", "are you there?");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(last(&events)["reply"], "awake");
    assert_eq!(inspect(&container, "{{.Id}}"), id, "woken, not replaced");
    wait_audited(&env, "container.woken", woken);

    // So does `workspace exec`, another process than the daemon.
    wait_state(&container, "paused", Duration::from_secs(15));
    let woken = env.sandbox.audited("container.woken").len();
    assert_eq!(ok(env.exec("w", &["echo", "hi"])), "hi\n");
    wait_audited(&env, "container.woken", woken);

    // And a scheduled run (the daemon loads the new file by itself).
    wait_state(&container, "paused", Duration::from_secs(15));
    let woken = env.sandbox.audited("container.woken").len();
    let asked = env.upstream.received().len();
    schedule("2s");
    wait_audited(&env, "container.woken", woken);
    let deadline = Instant::now() + Duration::from_secs(20);
    while env.upstream.received().len() == asked {
        assert!(
            Instant::now() < deadline,
            "the scheduled run reached no model"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(inspect(&container, "{{.Id}}"), id);
    let scraped = scrape_metrics(&daemon.gateway);
    // The daemon thawed for the message and the scheduled run; `workspace
    // exec` thawed in its own process.
    let wakes = metric(&scraped, "pincer_container_wake_seconds_count", json!({}));
    assert!(wakes.is_some_and(|n| n >= 2.0), "{scraped:#}");
    let pauses = metric(
        &scraped,
        "pincer_container_pauses_total",
        json!({"workspace": "w"}),
    );
    assert!(pauses.is_some_and(|n| n >= 3.0), "{scraped:#}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_killed_while_a_container_is_frozen_keeps_it_and_answers_next() {
    let env = Env::new(
        vec![Behaviour::answer("still here")],
        "  w: {idle: {pause_after: 1s}}\n",
    )
    .await;
    let mut daemon = env.start();
    let (_, out) = env.message("w", "hello");
    assert!(out.status.success(), "{}", stderr(&out));
    let container = env.container("w");
    let id = inspect(&container, "{{.Id}}");
    wait_state(&container, "paused", Duration::from_secs(15));
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();

    let _again = env.start();
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        inspect(&container, "{{.State.Status}}"),
        "paused",
        "kept frozen"
    );
    let status = ok(env.pincer(&["workspace", "status", "w"]));
    assert!(
        status.contains("paused since"),
        "the record survived: {status}"
    );

    let (events, out) = env.message("w", "after the crash");
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(last(&events)["reply"], "still here");
    assert_eq!(inspect(&container, "{{.Id}}"), id, "no new container");
    let instance = std::fs::read_to_string(env.sandbox.home().join("instance-id")).unwrap();
    let all = stdout(&docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("label=pincer.instance={}", instance.trim()),
        "--filter",
        "label=pincer.workspace",
    ]));
    assert_eq!(all.lines().count(), 1, "one container, no orphan: {all}");
}

#[tokio::test(flavor = "multi_thread")]
async fn past_max_paused_the_least_recently_used_frozen_container_stops_and_cold_starts_next() {
    let env = Env::new(
        vec![Behaviour::answer("unused")],
        "  a: {idle: {pause_after: 1s}}\n  b: {idle: {pause_after: 1s}}\n",
    )
    .await;
    env.edit_config(|yaml| yaml.replace("containers:\n", "containers:\n  idle: {max_paused: 1}\n"));
    let _daemon = env.start();

    // A command longer than pause_after is never frozen under it.
    let out = env.exec("a", &["sh", "-c", "sleep 3; echo done"]);
    assert_eq!(stdout(&out), "done\n", "{}", stderr(&out));
    wait_state(&env.container("a"), "paused", Duration::from_secs(15));

    // b frozen too: one more than max_paused, so a, unused longer, stops.
    ok(env.exec("b", &["true"]));
    wait_state(&env.container("b"), "paused", Duration::from_secs(15));
    wait_state(&env.container("a"), "exited", Duration::from_secs(15));
    assert_eq!(inspect(&env.container("b"), "{{.State.Status}}"), "paused");
    let stopped = env.sandbox.audited("container.stopped");
    assert!(
        stopped.iter().any(|s| s.contains("max_paused")),
        "{stopped:?}"
    );
    let status = ok(env.pincer(&["status"]));
    assert!(status.contains("stopped"), "{status}");

    let out = env.exec("a", &["echo", "cold"]);
    assert_eq!(stdout(&out), "cold\n", "{}", stderr(&out));
    assert!(stderr(&out).contains("stopped unused"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_frozen_container_unused_for_stop_after_is_stopped() {
    let env = Env::new(
        vec![Behaviour::answer("unused")],
        "  c: {idle: {pause_after: 1s, stop_after: 4s}}\n",
    )
    .await;
    let _daemon = env.start();
    ok(env.exec("c", &["true"]));
    wait_state(&env.container("c"), "paused", Duration::from_secs(15));
    wait_state(&env.container("c"), "exited", Duration::from_secs(20));
    let stopped = env.sandbox.audited("container.stopped");
    assert!(
        stopped.iter().any(|s| s.contains("unused for")),
        "{stopped:?}"
    );
    let status = ok(env.pincer(&["workspace", "status", "c"]));
    assert!(status.contains("stopped"), "{status}");
    assert_eq!(ok(env.exec("c", &["echo", "again"])), "again\n");
}
