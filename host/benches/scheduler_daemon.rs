//! The real `pincer start` daemon with 10,000 scheduled skill calls over 100
//! workspaces: due→start latency while tasks fire, the daemon's CPU while
//! idle between fires, and its RSS.
//!
//!     cargo bench -p pincer --bench scheduler_daemon [-- TASKS WORKSPACES FIRES IDLE_SECS]
//!
//! Same load as the `scheduler` bench (which drives the library in-process):
//! each workspace has `workspaces/NAME/schedules.yaml` beside `pincer.yaml`;
//! 1,000 tasks fire once each during a 20-second window (6-field cron with a
//! fixed second, minute and hour), the others are daily tasks twelve hours
//! away. Every task is a call of the built-in `skill-calc__evaluate`, so no
//! container and no model is involved (the gateway's model points at a
//! closed loopback port). The window starts at least `LEAD` after the
//! daemon is spawned, then 30 s with nothing due give the idle CPU.
//!
//! Measured from outside: the daemon's utime + stime from `/proc/PID/stat`
//! over the idle window as a share of one core, VmRSS / VmHWM from
//! `/proc/PID/status` at its end, and due→start = `started_ms − due_ms` of
//! the `schedule_runs` rows the daemon wrote to `pincer.db`. The binary is
//! `PINCER_BENCH_BIN`, else the one cargo built with the bench.

#[path = "../../tests/e2e/support/daemon.rs"]
#[allow(dead_code)]
mod daemon;

#[path = "support/proc_stats.rs"]
mod proc_stats;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use chrono::{DateTime, Utc};

use proc_stats::{arg, cpu_seconds, cron_at, percentile, status_kib};

/// Time the daemon gets to start (load 10,000 tasks) before the first fire.
const LEAD: i64 = 30;

fn sleep_until(t: DateTime<Utc>) {
    if let Ok(d) = (t - Utc::now()).to_std() {
        std::thread::sleep(d);
    }
}

/// `pincer.yaml` and every `workspaces/NAME/schedules.yaml` under `root`.
fn write_config(
    root: &Path,
    tasks: usize,
    workspaces: usize,
    fires: usize,
    window: Duration,
    t0: DateTime<Utc>,
) -> anyhow::Result<()> {
    let mut config = format!(
        "gateway:\n  listen: 127.0.0.1:0\n  num_retries: 0\n  model_list:\n    - model_name: default\n      \
         litellm_params: {{model: openai/none, api_base: \"http://127.0.0.1:9/v1\", api_key: sk-bench}}\n\
         containers:\n  workspace_base_path: {}\nworkspaces:\n",
        root.join("ws").display()
    );
    for w in 0..workspaces {
        config.push_str(&format!("  w{w:03}: {{skills: [skill-calc]}}\n"));
    }
    std::fs::write(root.join("pincer.yaml"), config)?;

    let far = t0 + chrono::Duration::hours(12);
    let mut yaml: Vec<String> = vec![String::from("tasks:\n"); workspaces];
    for k in 0..tasks {
        let when = if k < fires {
            t0 + chrono::Duration::milliseconds(
                (k as i64) * window.as_millis() as i64 / fires.max(1) as i64,
            )
        } else {
            far + chrono::Duration::seconds((k % 3000) as i64)
        };
        yaml[k % workspaces].push_str(&format!(
            "  - id: t{k}\n    schedule: '{}'\n    timezone: UTC\n    \
             skill: skill-calc__evaluate\n    skill_input: {{expression: \"6*7\"}}\n",
            cron_at(when)
        ));
    }
    for (w, text) in yaml.iter().enumerate() {
        let dir = root.join(format!("workspaces/w{w:03}"));
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("schedules.yaml"), text)?;
    }
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let tasks = arg(1, 10_000) as usize;
    let workspaces = arg(2, 100).max(1) as usize;
    let fires = (arg(3, 1_000) as usize).min(tasks);
    let idle = Duration::from_secs(arg(4, 30));
    let window = Duration::from_secs(20);

    let dir = tempfile::tempdir()?;
    let root = dir.path();
    let home = root.join("home");
    std::fs::create_dir_all(&home)?;
    let now = Utc::now();
    // the fire window starts at a whole 10 s, at least LEAD s away
    let t0 = DateTime::from_timestamp((now.timestamp() + LEAD) / 10 * 10 + 10, 0).unwrap_or(now);
    write_config(root, tasks, workspaces, fires, window, t0)?;

    let bin =
        std::env::var("PINCER_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pincer").into());
    let mut command = Command::new(&bin);
    command
        .arg("--config")
        .arg(root.join("pincer.yaml"))
        .arg("start")
        .current_dir(root)
        .env("PINCER_HOME", &home)
        .env_remove("PINCER_CONFIG");
    let started = Instant::now();
    let mut daemon = daemon::Daemon::spawn(command, root.join("daemon.log"));
    let startup = started.elapsed();
    let pid = daemon.child.id();
    println!("{}", daemon.banner.trim());
    println!(
        "serving {:.1} s after spawn; {fires} tasks fire from {} over {} s; then {} s with nothing due",
        startup.as_secs_f64(),
        t0.format("%H:%M:%S UTC"),
        window.as_secs(),
        idle.as_secs()
    );
    if Utc::now() >= t0 {
        bail!("the daemon took longer than the lead time to start; raise LEAD");
    }

    let end_of_fires = t0 + chrono::Duration::from_std(window)? + chrono::Duration::seconds(3);
    sleep_until(end_of_fires);
    let (idle_start, idle_cpu_start) = (Instant::now(), cpu_seconds(pid));
    std::thread::sleep(idle);
    let idle_wall = idle_start.elapsed().as_secs_f64();
    let idle_cpu = cpu_seconds(pid) - idle_cpu_start;
    let (rss, peak) = (status_kib(pid, "VmRSS:"), status_kib(pid, "VmHWM:"));
    let stopped = daemon.stop();
    if !stopped.success() {
        eprintln!("{}", daemon.log());
        bail!("the daemon exited with {stopped} on SIGTERM");
    }

    let conn = rusqlite::Connection::open(home.join("pincer.db")).context("pincer.db")?;
    let mut stmt = conn.prepare(
        "SELECT started_ms - due_ms FROM schedule_runs WHERE status = 'done' ORDER BY 1",
    )?;
    let latencies: Vec<i64> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let rows: i64 = conn.query_row("SELECT COUNT(*) FROM schedule_runs", [], |r| r.get(0))?;
    // each task fires once in the window: a second row of a task is a duplicate
    let distinct: i64 = conn.query_row(
        "SELECT COUNT(DISTINCT workspace || '/' || task) FROM schedule_runs",
        [],
        |r| r.get(0),
    )?;

    println!();
    println!("| figure | value |");
    println!("|---|---:|");
    println!("| tasks / workspaces | {tasks} / {workspaces} |");
    println!(
        "| daemon start (spawn → serving) | {:.0} ms |",
        startup.as_secs_f64() * 1000.0
    );
    println!(
        "| runs expected / done / duplicated | {fires} / {} / {} |",
        latencies.len(),
        rows - distinct
    );
    println!(
        "| due→start p50 / p99 / max | {} / {} / {} ms |",
        percentile(&latencies, 50.0),
        percentile(&latencies, 99.0),
        latencies.last().copied().unwrap_or(0)
    );
    println!(
        "| idle CPU ({:.0} s, nothing due) | {:.2} % of a core ({:.3} s CPU) |",
        idle_wall,
        100.0 * idle_cpu / idle_wall.max(1e-9),
        idle_cpu
    );
    println!(
        "| RSS now / peak | {:.1} / {:.1} MiB |",
        rss as f64 / 1024.0,
        peak as f64 / 1024.0
    );
    Ok(())
}
