//! Workspace container figures on the real Docker Engine, next to plain
//! `docker run` measured in the same run:
//!
//!     cargo bench -p pincer --bench containers
//!
//! - cold start: create + start + verify (inspect and runner enforcement);
//! - warm exec: `true` through the runner of a running, re-verified container;
//! - wake: the same exec into a frozen (`docker pause`) container: thaw,
//!   verify, run; and what the frozen container holds meanwhile (memory
//!   resident, CPU time not moving);
//! - `docker run --rm <image> true` via the docker CLI, for comparison.
//!
//! Needs the default image (`pincer image build`); removes what it creates.

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pincer::audit::AuditLog;
use pincer::config::Config;
use pincer::containers::{self, ContainerRuntime};
use pincer::gateway::KeyStore;
use pincer_runner_protocol::ExecRequest;

const COLD_RUNS: usize = 7;
const WARM_RUNS: usize = 100;
const WAKE_RUNS: usize = 40;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

async fn run() -> anyhow::Result<()> {
    let home = tempfile::tempdir()?;
    let base = tempfile::tempdir()?;
    let yaml = format!(
        "containers:\n  workspace_base_path: {}\nworkspaces:\n  bench: {{}}\n",
        base.path().display()
    );
    let config = Config::from_str_with_env(&yaml, std::path::Path::new("bench.yaml"), |_| None)?;
    let audit = Arc::new(AuditLog::open(&home.path().join("pincer.db"))?);
    let keys = Arc::new(KeyStore::open(&home.path().join("pincer.db"))?);
    let runtime = ContainerRuntime::connect(home.path(), audit, keys).await?;
    runtime
        .build_image(&config.containers.image, &mut |_| {})
        .await?;
    let (_, spec) = containers::plan(&config, home.path(), runtime.instance(), "bench")?;

    let mut docker_run = Vec::new();
    for _ in 0..COLD_RUNS {
        let started = Instant::now();
        let status = Command::new("docker")
            .args([
                "run",
                "--rm",
                "--network",
                "none",
                "--entrypoint",
                "/bin/true",
                &config.containers.image,
            ])
            .status()?;
        anyhow::ensure!(status.success(), "docker run failed");
        docker_run.push(started.elapsed());
    }
    let mut cold = Vec::new();
    for _ in 0..COLD_RUNS {
        runtime.down("bench").await?;
        let started = Instant::now();
        runtime.ensure(&spec).await?;
        cold.push(started.elapsed());
    }
    let mut warm = Vec::new();
    for _ in 0..WARM_RUNS {
        warm.push(exec_true(&runtime, &spec).await?);
    }
    let mut wake = Vec::new();
    let mut frozen = None;
    for run in 0..WAKE_RUNS {
        let unused = runtime
            .try_unused("bench")?
            .ok_or_else(|| anyhow::anyhow!("the bench container is in use"))?;
        let id = runtime
            .status("bench")
            .await?
            .ok_or_else(|| anyhow::anyhow!("the bench container is gone"))?
            .id;
        runtime
            .freeze(&unused, &id, Duration::ZERO, "by the bench")
            .await?;
        drop(unused);
        if run == 0 {
            frozen = Some(
                while_frozen(&id)
                    .unwrap_or_else(|e| format!("frozen container: not measured ({e})")),
            );
        }
        wake.push(exec_true(&runtime, &spec).await?);
    }
    runtime.down("bench").await?;

    report("docker run --rm <image> true (docker CLI)", &mut docker_run);
    report("pincer cold start (create + start + verify)", &mut cold);
    report("pincer warm exec (verify + run `true`)", &mut warm);
    report("pincer wake + exec (thaw + verify + `true`)", &mut wake);
    if let Some(frozen) = frozen {
        println!("{frozen}");
    }
    println!(
        "  -> cold start / docker run: {:.2}x",
        median(&cold).as_secs_f64() / median(&docker_run).as_secs_f64()
    );
    Ok(())
}

async fn exec_true(
    runtime: &ContainerRuntime,
    spec: &containers::WorkspaceSpec,
) -> anyhow::Result<Duration> {
    let request = ExecRequest {
        argv: vec!["true".into()],
        cwd: None,
        env: vec![],
        stdin: None,
        timeout_ms: 10_000,
        max_output_bytes: 65_536,
    };
    let started = Instant::now();
    let (_, outcome) = runtime.exec(spec, request).await?;
    anyhow::ensure!(
        outcome.result.exit_code == Some(0),
        "exec failed: {outcome:?}"
    );
    Ok(started.elapsed())
}

/// The frozen container's memory and CPU time over a second, from its
/// cgroup: v2 (one folder) or v1 (one folder per controller).
fn while_frozen(id: &str) -> anyhow::Result<String> {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let read = |path: std::path::PathBuf, key: Option<&str>| -> anyhow::Result<u64> {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", path.display()))?;
        let value = match key {
            Some(key) => text
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .unwrap_or_default()
                .trim()
                .to_string(),
            None => text.trim().to_string(),
        };
        Ok(value.parse()?)
    };
    let v2 = [
        format!("system.slice/docker-{id}.scope"),
        format!("docker/{id}"),
    ]
    .into_iter()
    .map(|p| root.join(p))
    .find(|p| p.join("cgroup.freeze").exists());
    let v1 =
        |controller: &str, file: &str| root.join(controller).join("docker").join(id).join(file);
    // (CPU file, its key, units per µs, memory bytes, freezer state)
    let (cpu_file, cpu_key, per_us, memory, state) = match v2 {
        Some(dir) => (
            dir.join("cpu.stat"),
            Some("usage_usec "),
            1,
            read(dir.join("memory.current"), None)?,
            format!("cgroup.freeze {}", read(dir.join("cgroup.freeze"), None)?),
        ),
        None => {
            let state = std::fs::read_to_string(v1("freezer", "freezer.state"))
                .map_err(|e| anyhow::anyhow!("no cgroup v2 folder nor v1 freezer for {id}: {e}"))?;
            (
                v1("cpuacct", "cpuacct.usage"),
                None,
                1000,
                read(v1("memory", "memory.usage_in_bytes"), None)?,
                format!("freezer.state {}", state.trim()),
            )
        }
    };
    let cpu_us = || read(cpu_file.clone(), cpu_key).map(|v| v / per_us);
    let before = cpu_us()?;
    std::thread::sleep(Duration::from_secs(1));
    let after = cpu_us()?;
    Ok(format!(
        "frozen container: memory {} KiB, CPU {} µs over 1 s, {state}",
        memory / 1024,
        after.saturating_sub(before),
    ))
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let at = |q: usize| samples[((samples.len() * q) / 100).min(samples.len() - 1)];
    println!(
        "{label:<46} median {:>8.1} ms  p90 {:>8.1} ms  p99 {:>8.1} ms  (n={})",
        median(samples).as_secs_f64() * 1e3,
        at(90).as_secs_f64() * 1e3,
        at(99).as_secs_f64() * 1e3,
        samples.len()
    );
}
