//! Workspace container figures on the real Docker Engine, next to plain
//! `docker run` measured in the same run:
//!
//!     cargo bench -p pincer --bench containers
//!
//! - cold start: create + start + verify (inspect and runner enforcement);
//! - warm exec: `true` through the runner of a running, re-verified container;
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
        let request = ExecRequest {
            argv: vec!["true".into()],
            cwd: None,
            env: vec![],
            stdin: None,
            timeout_ms: 10_000,
            max_output_bytes: 65_536,
        };
        let started = Instant::now();
        let (_, outcome) = runtime.exec(&spec, request).await?;
        anyhow::ensure!(
            outcome.result.exit_code == Some(0),
            "exec failed: {outcome:?}"
        );
        warm.push(started.elapsed());
    }
    runtime.down("bench").await?;

    report("docker run --rm <image> true (docker CLI)", &mut docker_run);
    report("pincer cold start (create + start + verify)", &mut cold);
    report("pincer warm exec (verify + run `true`)", &mut warm);
    println!(
        "  -> cold start / docker run: {:.2}x",
        median(&cold).as_secs_f64() / median(&docker_run).as_secs_f64()
    );
    Ok(())
}

fn median(samples: &[Duration]) -> Duration {
    let mut sorted = samples.to_vec();
    sorted.sort();
    sorted[sorted.len() / 2]
}

fn report(label: &str, samples: &mut [Duration]) {
    samples.sort();
    let p99 = samples[((samples.len() * 99) / 100).min(samples.len() - 1)];
    println!(
        "{label:<46} median {:>8.1} ms  p99 {:>8.1} ms  (n={})",
        median(samples).as_secs_f64() * 1e3,
        p99.as_secs_f64() * 1e3,
        samples.len()
    );
}
