//! Added latency and throughput of pincer's gateway next to LiteLLM's proxy,
//! both in front of the same local fake OpenAI-protocol upstream, same load:
//!
//!     bench/run-gateway-vs-litellm.sh      # sets up LiteLLM's venv, then:
//!     cargo bench -p pincer --bench gateway_vs_litellm
//!
//! - the fake upstream (in this process, its own thread) answers
//!   `POST /v1/chat/completions` at once with a fixed tiny JSON body and usage;
//! - "direct" is the load generator against the fake itself: the baseline L0;
//! - "pincer" is the real `pincer gateway serve` (a child process, its own
//!   PINCER_HOME), "litellm" is `litellm --config …` from the venv at
//!   `target/litellm-venv` (or `$PINCER_BENCH_LITELLM_VENV`); without it the
//!   LiteLLM rows are skipped with a note;
//! - open loop: requests dispatched on a fixed schedule (`BENCH_RATE`, default
//!   500 req/s, for `BENCH_SECS`, default 10 s), each timed from dispatch to
//!   the last body byte; added latency = target percentile − direct percentile;
//! - closed loop: `BENCH_CONCURRENCY` (default 16) callers back to back for
//!   `BENCH_CLOSED_SECS` (default 5 s; 0 skips it): the maximum throughput.
//!
//! Loopback only; every child is killed at the end.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use axum::Router;
use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::post;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":1,"total_tokens":12}}"#;
const REQUEST: &str =
    r#"{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":16}"#;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const LITELLM_MASTER_KEY: &str = "sk-bench-litellm-master";

fn main() -> anyhow::Result<()> {
    let upstream = start_upstream()?;
    // The load generator on one thread: it needs little CPU, and the two
    // cores are better left to the gateway under test.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(upstream))
}

struct Settings {
    rate: u32,
    secs: f64,
    concurrency: usize,
    closed_secs: f64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

struct Target {
    name: &'static str,
    url: String,
    key: Option<String>,
}

struct Sample {
    dispatched: usize,
    ok: usize,
    wall: Duration,
    latencies: Vec<Duration>,
}

impl Sample {
    fn throughput(&self) -> f64 {
        self.ok as f64 / self.wall.as_secs_f64()
    }
    fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return f64::NAN;
        }
        let rank =
            ((p * self.latencies.len() as f64).ceil() as usize).clamp(1, self.latencies.len());
        self.latencies[rank - 1].as_secs_f64() * 1e3
    }
}

struct Results {
    name: &'static str,
    open: Sample,
    closed: Option<Sample>,
}

async fn run(upstream: SocketAddr) -> anyhow::Result<()> {
    let settings = Settings {
        rate: env_or("BENCH_RATE", 500),
        secs: env_or("BENCH_SECS", 10.0),
        concurrency: env_or("BENCH_CONCURRENCY", 16),
        closed_secs: env_or("BENCH_CLOSED_SECS", 5.0),
    };
    let client = pincer::gateway::llm::default_client()?;
    let scratch = tempfile::tempdir()?;
    let upstream_base = format!("http://{upstream}/v1");
    println!(
        "gateway_vs_litellm: fake upstream {upstream_base}; open loop {} req/s for {} s; closed loop {} callers for {} s",
        settings.rate, settings.secs, settings.concurrency, settings.closed_secs
    );

    let mut results = Vec::new();
    let direct = Target {
        name: "direct",
        url: format!("{upstream_base}/chat/completions"),
        key: None,
    };
    results.push(measure(&client, &direct, &settings).await?);

    {
        let (pincer, target) = start_pincer(scratch.path(), &upstream_base)?;
        let ready = wait_ready(&client, &target, Duration::from_secs(30)).await;
        let measured = match ready {
            Ok(()) => measure(&client, &target, &settings).await,
            Err(e) => Err(e),
        };
        let log = pincer.stop();
        match measured {
            Ok(r) => results.push(r),
            Err(e) => bail!("pincer gateway: {e:#}\n--- its log ---\n{log}"),
        }
    }

    let venv = std::env::var_os("PINCER_BENCH_LITELLM_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/litellm-venv"));
    let litellm_bin = venv.join("bin/litellm");
    let mut litellm_note = None;
    if litellm_bin.is_file() {
        let version = litellm_version(&venv);
        println!("LiteLLM {version} from {}", venv.display());
        let (litellm, target) = start_litellm(scratch.path(), &litellm_bin, &upstream_base)?;
        let ready = wait_ready(&client, &target, Duration::from_secs(180)).await;
        let measured = match ready {
            Ok(()) => measure(&client, &target, &settings).await,
            Err(e) => Err(e),
        };
        let log = litellm.stop();
        match measured {
            Ok(r) => results.push(r),
            Err(e) => {
                let tail: String = log
                    .lines()
                    .rev()
                    .take(40)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n");
                litellm_note = Some(format!(
                    "LiteLLM skipped: its proxy did not serve: {e:#}\n--- the end of its log ---\n{tail}"
                ));
            }
        }
    } else {
        litellm_note = Some(format!(
            "LiteLLM skipped: no venv at {} (run bench/run-gateway-vs-litellm.sh, or set PINCER_BENCH_LITELLM_VENV)",
            venv.display()
        ));
    }

    report(&results, &settings);
    if let Some(note) = litellm_note {
        println!("\nNOTE: {note}");
    }
    Ok(())
}

/// Warm up, then the open-loop run, then the closed-loop run.
async fn measure(
    client: &reqwest::Client,
    target: &Target,
    settings: &Settings,
) -> anyhow::Result<Results> {
    // Warm-up: open the connections and let lazy paths settle.
    let warm = closed_loop(client, target, 8, Duration::from_secs(2)).await;
    if warm.ok == 0 {
        bail!("{}: no successful call during warm-up", target.name);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let open = open_loop(client, target, settings.rate, settings.secs).await;
    let closed = if settings.closed_secs > 0.0 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        Some(
            closed_loop(
                client,
                target,
                settings.concurrency,
                Duration::from_secs_f64(settings.closed_secs),
            )
            .await,
        )
    } else {
        None
    };
    eprintln!(
        "  {}: open loop {}/{} ok, closed loop {} ok",
        target.name,
        open.ok,
        open.dispatched,
        closed.as_ref().map_or(0, |c| c.ok)
    );
    Ok(Results {
        name: target.name,
        open,
        closed,
    })
}

/// One call: true when it answered 2xx with a non-empty body.
async fn call(client: &reqwest::Client, target: &Target) -> bool {
    let mut request = client
        .post(&target.url)
        .header(CONTENT_TYPE, "application/json")
        .timeout(CALL_TIMEOUT)
        .body(REQUEST);
    if let Some(key) = &target.key {
        request = request.bearer_auth(key);
    }
    match request.send().await {
        Ok(response) => {
            let ok = response.status().is_success();
            matches!(response.bytes().await, Ok(body) if ok && !body.is_empty())
        }
        Err(_) => false,
    }
}

/// Dispatches `rate` calls a second for `secs` seconds on a fixed schedule,
/// whatever the answers do, and waits for all of them.
async fn open_loop(client: &reqwest::Client, target: &Target, rate: u32, secs: f64) -> Sample {
    let count = (f64::from(rate) * secs).round() as usize;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let started = tokio::time::Instant::now();
    let tasks = tokio::task::LocalSet::new();
    let results = tasks
        .run_until(async {
            let mut handles = Vec::with_capacity(count);
            for i in 0..count {
                tokio::time::sleep_until(started + period.mul_f64(i as f64)).await;
                let client = client.clone();
                let target = Target {
                    name: target.name,
                    url: target.url.clone(),
                    key: target.key.clone(),
                };
                handles.push(tokio::task::spawn_local(async move {
                    let sent = Instant::now();
                    let ok = call(&client, &target).await;
                    (ok, sent.elapsed())
                }));
            }
            let mut results = Vec::with_capacity(count);
            for handle in handles {
                results.push(handle.await.unwrap_or((false, Duration::ZERO)));
            }
            results
        })
        .await;
    let wall = started.elapsed();
    collect(count, wall, results)
}

/// `concurrency` callers, each calling again as soon as it has an answer.
async fn closed_loop(
    client: &reqwest::Client,
    target: &Target,
    concurrency: usize,
    duration: Duration,
) -> Sample {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks = tokio::task::LocalSet::new();
    let results = tasks
        .run_until(async {
            let mut handles = Vec::new();
            for _ in 0..concurrency {
                let client = client.clone();
                let target = Target {
                    name: target.name,
                    url: target.url.clone(),
                    key: target.key.clone(),
                };
                let stop = stop.clone();
                handles.push(tokio::task::spawn_local(async move {
                    let mut mine = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let sent = Instant::now();
                        let ok = call(&client, &target).await;
                        mine.push((ok, sent.elapsed()));
                    }
                    mine
                }));
            }
            tokio::time::sleep(duration).await;
            stop.store(true, Ordering::Relaxed);
            let mut results = Vec::new();
            for handle in handles {
                results.extend(handle.await.unwrap_or_default());
            }
            results
        })
        .await;
    let wall = started.elapsed();
    collect(results.len(), wall, results)
}

fn collect(dispatched: usize, wall: Duration, results: Vec<(bool, Duration)>) -> Sample {
    let mut latencies: Vec<Duration> = results.iter().filter(|r| r.0).map(|r| r.1).collect();
    latencies.sort_unstable();
    Sample {
        dispatched,
        ok: latencies.len(),
        wall,
        latencies,
    }
}

fn report(results: &[Results], settings: &Settings) {
    let direct = &results[0].open;
    let (d50, d99) = (direct.percentile(0.5), direct.percentile(0.99));
    println!(
        "\nOpen loop, {} req/s offered for {} s (latency in ms; added = minus direct)",
        settings.rate, settings.secs
    );
    println!(
        "{:<8} {:>6} {:>6} {:>10} {:>8} {:>8} {:>8} {:>10} {:>10}",
        "target", "sent", "ok", "ok req/s", "p50", "p99", "max", "added p50", "added p99"
    );
    for r in results {
        let s = &r.open;
        let (p50, p99) = (s.percentile(0.5), s.percentile(0.99));
        println!(
            "{:<8} {:>6} {:>6} {:>10.1} {:>8.3} {:>8.3} {:>8.3} {:>10.3} {:>10.3}",
            r.name,
            s.dispatched,
            s.ok,
            s.throughput(),
            p50,
            p99,
            s.percentile(1.0),
            p50 - d50,
            p99 - d99
        );
    }
    let added = |name: &str| {
        results
            .iter()
            .find(|r| r.name == name)
            .map(|r| (r.open.percentile(0.5) - d50, r.open.percentile(0.99) - d99))
    };
    if let Some((p50, _)) = added("pincer") {
        println!(
            "pincer added median {p50:.3} ms at {} req/s: target <= 1 ms {}",
            settings.rate,
            if p50 <= 1.0 { "MET" } else { "MISSED" }
        );
    }
    if let (Some((pin50, pin99)), Some((lit50, lit99))) = (added("pincer"), added("litellm")) {
        let ratio = |lit: f64, pin: f64| {
            if pin > 0.0 {
                format!("{:.1}x", lit / pin)
            } else {
                "inf (pincer adds nothing measurable)".to_string()
            }
        };
        println!(
            "LiteLLM / pincer added latency: median {}, p99 {}; target >= 10x at the median {}",
            ratio(lit50, pin50),
            ratio(lit99, pin99),
            if pin50 <= 0.0 || lit50 / pin50 >= 10.0 {
                "MET"
            } else {
                "MISSED"
            }
        );
    }
    if results.iter().any(|r| r.closed.is_some()) {
        println!(
            "\nClosed loop, {} concurrent callers for {} s (latency in ms)",
            settings.concurrency, settings.closed_secs
        );
        println!(
            "{:<8} {:>7} {:>10} {:>8} {:>8}",
            "target", "ok", "ok req/s", "p50", "p99"
        );
        for r in results {
            if let Some(s) = &r.closed {
                println!(
                    "{:<8} {:>7} {:>10.1} {:>8.3} {:>8.3}",
                    r.name,
                    s.ok,
                    s.throughput(),
                    s.percentile(0.5),
                    s.percentile(0.99)
                );
            }
        }
        if let (Some(pin), Some(lit)) = (
            results
                .iter()
                .find(|r| r.name == "pincer")
                .and_then(|r| r.closed.as_ref()),
            results
                .iter()
                .find(|r| r.name == "litellm")
                .and_then(|r| r.closed.as_ref()),
        ) {
            println!(
                "pincer / LiteLLM max throughput: {:.1}x",
                pin.throughput() / lit.throughput()
            );
        }
    }
}

/// The fake upstream on its own thread and runtime, so the load generator
/// never delays its answers.
fn start_upstream() -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new()
        .name("fake-upstream".into())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("upstream runtime");
            runtime.block_on(async move {
                let listener =
                    tokio::net::TcpListener::from_std(listener).expect("upstream listener");
                let router = Router::new().route(
                    "/v1/chat/completions",
                    post(|_body: Bytes| async {
                        ([(CONTENT_TYPE, "application/json")], ANSWER).into_response()
                    }),
                );
                axum::serve(listener, router)
                    .await
                    .expect("upstream serves");
            });
        })?;
    Ok(addr)
}

/// A child process in its own process group, killed (the whole group) on drop.
struct Server {
    child: Child,
    log: PathBuf,
}

impl Server {
    fn spawn(mut command: Command, log: PathBuf) -> anyhow::Result<Self> {
        let out = std::fs::File::create(&log)?;
        let child = command
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .process_group(0)
            .spawn()
            .with_context(|| format!("cannot start {command:?}"))?;
        Ok(Self { child, log })
    }

    /// Kills it and returns what it printed.
    fn stop(mut self) -> String {
        self.kill();
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let group = format!("-{}", self.child.id());
            let _ = Command::new("kill")
                .args(["-KILL", "--", &group])
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn start_pincer(scratch: &Path, upstream_base: &str) -> anyhow::Result<(Server, Target)> {
    let home = scratch.join("pincer-home");
    std::fs::create_dir_all(&home)?;
    let config = scratch.join("pincer.yaml");
    std::fs::write(
        &config,
        format!(
            "gateway:\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai_compatible/fake, api_base: \"{upstream_base}\", api_key: fake}}\nworkspaces:\n  main: {{}}\n"
        ),
    )?;
    let pincer = env!("CARGO_BIN_EXE_pincer");
    let created = Command::new(pincer)
        .arg("--config")
        .arg(&config)
        .args(["gateway", "keys", "create", "main"])
        .current_dir(scratch)
        .env("PINCER_HOME", &home)
        .output()?;
    if !created.status.success() {
        bail!(
            "pincer gateway keys create failed: {}",
            String::from_utf8_lossy(&created.stderr)
        );
    }
    let key = String::from_utf8(created.stdout)?.trim().to_string();
    let port = free_port()?;
    let mut command = Command::new(pincer);
    command
        .arg("--config")
        .arg(&config)
        .args(["gateway", "serve", "--listen", &format!("127.0.0.1:{port}")])
        .current_dir(scratch)
        .env("PINCER_HOME", &home);
    let server = Server::spawn(command, scratch.join("pincer.log"))?;
    Ok((
        server,
        Target {
            name: "pincer",
            url: format!("http://127.0.0.1:{port}/v1/chat/completions"),
            key: Some(key),
        },
    ))
}

fn litellm_version(venv: &Path) -> String {
    Command::new(venv.join("bin/python"))
        .args([
            "-c",
            "import importlib.metadata as m; print(m.version('litellm'))",
        ])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_else(|| "(version unknown)".into())
}

fn start_litellm(
    scratch: &Path,
    litellm: &Path,
    upstream_base: &str,
) -> anyhow::Result<(Server, Target)> {
    let config = scratch.join("litellm.yaml");
    std::fs::write(
        &config,
        format!(
            "model_list:\n  - model_name: default\n    litellm_params: {{model: openai/fake, api_base: \"{upstream_base}\", api_key: fake}}\nlitellm_settings:\n  telemetry: false\n  set_verbose: false\ngeneral_settings:\n  master_key: {LITELLM_MASTER_KEY}\n"
        ),
    )?;
    let port = free_port()?;
    let mut command = Command::new(litellm);
    command
        .arg("--config")
        .arg(&config)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--num_workers", "1"])
        .current_dir(scratch)
        // Offline: the bundled model cost map, no telemetry, no database.
        .env("LITELLM_LOCAL_MODEL_COST_MAP", "True")
        .env("LITELLM_TELEMETRY", "False")
        .env("LITELLM_LOG", "ERROR")
        .env_remove("DATABASE_URL")
        .env("NO_PROXY", "127.0.0.1,localhost")
        .env("HOME", scratch);
    let server = Server::spawn(command, scratch.join("litellm.log"))?;
    Ok((
        server,
        Target {
            name: "litellm",
            url: format!("http://127.0.0.1:{port}/v1/chat/completions"),
            key: Some(LITELLM_MASTER_KEY.into()),
        },
    ))
}

/// Polls with a real chat call until it succeeds.
async fn wait_ready(
    client: &reqwest::Client,
    target: &Target,
    limit: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        if call(client, target).await {
            eprintln!(
                "  {} ready after {:.1} s",
                target.name,
                started.elapsed().as_secs_f64()
            );
            return Ok(());
        }
        if started.elapsed() > limit {
            bail!("{} not ready after {} s", target.name, limit.as_secs());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
