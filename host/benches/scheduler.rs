//! The scheduler with 10,000 tasks over 100 workspaces: due→start latency
//! while tasks fire, CPU while idle between fires, and RSS.
//!
//!     cargo bench -p pincer --bench scheduler [-- TASKS WORKSPACES FIRES IDLE_SECS]
//!
//! Defaults: 10,000 tasks over 100 workspaces, 1,000 of which fire once
//! each during a 20-second window (50 a second, 6-field cron with a fixed
//! second, minute and hour); the others are daily tasks twelve hours away.
//! Then 30 s in which nothing is due, for the idle CPU.
//!
//! It drives `pincer::scheduler::Scheduler` over a real `pincer.db` the way
//! the daemon's loop does (`router::scheduled::Schedules::run`): `due_now`,
//! then sleep until `next_wake` or at most a second; each due run is started
//! (`Store::start`, whose time is the run's start) and finished in a task of
//! its own. The run itself does nothing, so what is measured is the
//! scheduler: due→start = `started_ms − due_ms` of each run row.
//!
//! CPU is this process's utime + stime from `/proc/self/stat` over the idle
//! window, as a share of one core; RSS and its peak from `/proc/self/status`.

#[path = "support/proc_stats.rs"]
mod proc_stats;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use pincer::scheduler::file::{self, Checks};
use pincer::scheduler::{Outcome, Scheduler, Store, SystemClock};

use proc_stats::{arg, cpu_seconds, cron_at, percentile, status_kib};

const POLL: Duration = Duration::from_secs(1);

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let tasks = arg(1, 10_000) as usize;
    let workspaces = arg(2, 100).max(1) as usize;
    let fires = (arg(3, 1_000) as usize).min(tasks);
    let idle = Duration::from_secs(arg(4, 30));
    let window = Duration::from_secs(20);

    let dir = tempfile::tempdir()?;
    let db = dir.path().join("pincer.db");
    let now = Utc::now();
    // the fire window starts at the next whole 10 s, at least 10 s away
    let t0 = DateTime::from_timestamp((now.timestamp() / 10 + 2) * 10, 0).unwrap_or(now);
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
            "  - id: t{k}\n    schedule: '{}'\n    timezone: UTC\n    prompt: p\n",
            cron_at(when)
        ));
    }

    let started = Instant::now();
    let store = Store::open(&db)?;
    let mut scheduler = Scheduler::new(store, Arc::new(SystemClock), "bench")?;
    let checks = Checks::offline(Tz::UTC);
    for (i, text) in yaml.iter().enumerate() {
        let parsed = file::parse(text, std::path::Path::new("schedules.yaml"), &checks)?;
        scheduler.set_tasks(&format!("ws{i:03}"), parsed)?;
    }
    let load = started.elapsed();
    println!(
        "loaded {} tasks over {workspaces} workspaces in {:.0} ms (parse + first-sight cursors)",
        scheduler.task_count(),
        load.as_secs_f64() * 1000.0
    );
    println!(
        "{fires} tasks fire from {} over {} s; then {} s with nothing due",
        t0.format("%H:%M:%S UTC"),
        window.as_secs(),
        idle.as_secs()
    );

    let scheduler = Arc::new(Mutex::new(scheduler));
    let end_of_fires = t0 + chrono::Duration::from_std(window)? + chrono::Duration::seconds(3);
    let end = end_of_fires + chrono::Duration::from_std(idle)?;
    let mut idle_from: Option<(Instant, f64)> = None;
    let mut ticks = 0u64;
    loop {
        let (due, wake) = {
            let mut s = scheduler.lock().unwrap_or_else(|e| e.into_inner());
            (s.due_now()?, s.next_wake())
        };
        ticks += 1;
        for run in due {
            let scheduler = scheduler.clone();
            tokio::spawn(async move {
                let s = scheduler.lock().unwrap_or_else(|e| e.into_inner());
                let now = Utc::now().timestamp_millis();
                if s.store().start(run.run_id, s.owner(), now).unwrap_or(false) {
                    let done = Outcome::Done {
                        output: String::new(),
                        receipts: None,
                    };
                    let _ = s.store().finish(run.run_id, &done, now);
                }
            });
        }
        let now = Utc::now();
        if now >= end_of_fires && idle_from.is_none() {
            idle_from = Some((Instant::now(), cpu_seconds(std::process::id())));
        }
        if now >= end {
            break;
        }
        let sleep = wake
            .and_then(|at| (at - now).to_std().ok())
            .map_or(POLL, |until| until.min(POLL));
        tokio::time::sleep(sleep).await;
    }
    let (idle_start, idle_cpu_start) =
        idle_from.unwrap_or((Instant::now(), cpu_seconds(std::process::id())));
    let idle_wall = idle_start.elapsed().as_secs_f64();
    let idle_cpu = cpu_seconds(std::process::id()) - idle_cpu_start;

    let conn = rusqlite::Connection::open(&db)?;
    let mut stmt = conn.prepare(
        "SELECT started_ms - due_ms FROM schedule_runs WHERE status = 'done' ORDER BY 1",
    )?;
    let latencies: Vec<i64> = stmt
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    let rows: i64 = conn.query_row("SELECT COUNT(*) FROM schedule_runs", [], |r| r.get(0))?;
    let distinct: i64 = conn.query_row(
        "SELECT COUNT(DISTINCT workspace || '/' || task || '/' || due_ms) FROM schedule_runs",
        [],
        |r| r.get(0),
    )?;

    println!();
    println!("| figure | value |");
    println!("|---|---:|");
    println!("| tasks / workspaces | {} / {workspaces} |", tasks);
    println!("| runs expected / done | {fires} / {} |", latencies.len());
    println!("| run rows / duplicates | {rows} / {} |", rows - distinct);
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
        status_kib(std::process::id(), "VmRSS:") as f64 / 1024.0,
        status_kib(std::process::id(), "VmHWM:") as f64 / 1024.0
    );
    println!("| loop iterations | {ticks} |");
    Ok(())
}
