//! Added latency, CPU and memory of pincer's gateway next to LiteLLM's
//! proxy, both in front of the same local fake OpenAI-protocol upstream,
//! same load, in one run:
//!
//!     bench/run-gateway-vs-litellm.sh      # sets up LiteLLM's venv, then:
//!     cargo bench -p pincer --bench gateway_vs_litellm
//!
//! - the fake upstream (in this process, its own thread) answers
//!   `POST /v1/chat/completions` at once with a fixed tiny JSON body and
//!   usage, or (`"stream": true`) with three SSE chunks, usage and `[DONE]`;
//! - "direct" is the load generator against the fake itself: the baseline;
//! - "relay" is the floor of pincer's HTTP stack: this bench re-run as a
//!   child process that relays each call to the fake upstream with the same
//!   crates and settings pincer uses (axum, pincer's reqwest client, a
//!   multi-thread runtime), with no key, budget, routing, parsing or
//!   accounting; what pincer costs above it is pincer's own work;
//! - "pincer" is the real `pincer gateway serve` (a child process, its own
//!   PINCER_HOME; `PINCER_BENCH_BIN` runs another build of it, e.g. an
//!   older commit's), "litellm" is `litellm --config …` from the venv at
//!   `target/litellm-venv` (or `$PINCER_BENCH_LITELLM_VENV`); without it the
//!   LiteLLM rows are skipped with a note;
//! - open loop, for each scenario of `BENCH_SCENARIOS` (default
//!   `50,200,1000,3000,s1000`: a rate in requests per second, `s` for
//!   streamed) for `BENCH_SECS` (default 5) each: requests dispatched on a
//!   fixed schedule whatever the answers do, each timed from the moment it
//!   was *scheduled* to its last body byte (latency correction: a
//!   generator that falls behind cannot hide the queueing);
//! - per scenario: answered share, p50/p99, added p50/p99 (target minus
//!   direct), CPU per request = (utime + stime of the target's processes
//!   during the scenario) / requests answered, peak RSS (VmHWM, summed over
//!   the target's processes), and "sustained": at least 99.9 % answered and
//!   no growing lag (the median of the last fifth of the schedule within
//!   twice the first fifth's plus 1 ms);
//! - pincer's workspace has a budget (`BENCH_BUDGET`, default
//!   `{daily_tokens: 1000000000000}`; `{}` for none), so every call is
//!   reserved and settled;
//! - LiteLLM runs the scenarios up to `BENCH_LITELLM_MAX_RATE` (default
//!   200/s) and is marked "skipped" above it.
//!
//! Loopback only; every child is killed at the end.

use std::net::{SocketAddr, TcpListener};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use axum::Router;
use axum::body::Bytes;
use axum::http::header::CONTENT_TYPE;
use axum::response::IntoResponse;
use axum::routing::post;

const ANSWER: &str = r#"{"id":"chatcmpl-bench","object":"chat.completion","created":1700000000,"model":"fake","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":11,"completion_tokens":1,"total_tokens":12}}"#;
const STREAM_ANSWER: &str = concat!(
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"fake\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"o\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"fake\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"k\"},\"finish_reason\":null}]}\n\n",
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"fake\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
    "data: {\"id\":\"chatcmpl-bench\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"fake\",\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":2,\"total_tokens\":13}}\n\n",
    "data: [DONE]\n\n"
);
const REQUEST: &str =
    r#"{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":16}"#;
const STREAM_REQUEST: &str = r#"{"model":"default","messages":[{"role":"user","content":"hi"}],"max_tokens":16,"stream":true,"stream_options":{"include_usage":true}}"#;
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const LITELLM_MASTER_KEY: &str = "sk-bench-litellm-master";

/// Set in the child that runs as the "relay" target: the upstream's base URL.
const RELAY_UPSTREAM_ENV: &str = "PINCER_BENCH_RELAY_UPSTREAM";
/// ... and the address it listens on.
const RELAY_LISTEN_ENV: &str = "PINCER_BENCH_RELAY_LISTEN";
/// ... and, when set, that it runs on one thread.
const RELAY_ONE_THREAD_ENV: &str = "PINCER_BENCH_RELAY_ONE_THREAD";

fn main() -> anyhow::Result<()> {
    if let Ok(upstream) = std::env::var(RELAY_UPSTREAM_ENV) {
        return relay(&upstream, &std::env::var(RELAY_LISTEN_ENV)?);
    }
    let upstream = start_upstream()?;
    // The load generator on one thread: the two cores are better left to
    // the gateway under test and the upstream.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(upstream))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[derive(Clone, Copy, PartialEq)]
struct Scenario {
    rate: u32,
    stream: bool,
}

impl Scenario {
    fn label(&self) -> String {
        format!(
            "{}/s {}",
            self.rate,
            if self.stream { "stream" } else { "JSON" }
        )
    }
}

fn scenarios() -> anyhow::Result<Vec<Scenario>> {
    let spec = std::env::var("BENCH_SCENARIOS").unwrap_or_else(|_| "50,200,1000,3000,s1000".into());
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            let (stream, rate) = match s.strip_prefix('s') {
                Some(rate) => (true, rate),
                None => (false, s),
            };
            Ok(Scenario {
                rate: rate
                    .parse()
                    .with_context(|| format!("BENCH_SCENARIOS: {s:?} is not RATE or sRATE"))?,
                stream,
            })
        })
        .collect()
}

#[derive(Clone)]
struct Target {
    name: &'static str,
    url: String,
    key: Option<String>,
}

/// One scenario against one target.
struct Sample {
    dispatched: usize,
    ok: usize,
    /// Latencies of the answered calls, in schedule order.
    in_order: Vec<Duration>,
    sorted: Vec<Duration>,
    cpu: Option<Duration>,
    peak_rss_kb: Option<u64>,
}

impl Sample {
    fn percentile(&self, p: f64) -> f64 {
        percentile(&self.sorted, p)
    }

    fn answered_share(&self) -> f64 {
        self.ok as f64 / self.dispatched.max(1) as f64
    }

    /// At least 99.9 % answered and the lag not growing.
    fn sustained(&self) -> bool {
        if self.answered_share() < 0.999 || self.in_order.len() < 10 {
            return false;
        }
        let fifth = self.in_order.len() / 5;
        let median = |part: &[Duration]| {
            let mut part = part.to_vec();
            part.sort_unstable();
            percentile(&part, 0.5)
        };
        let first = median(&self.in_order[..fifth]);
        let last = median(&self.in_order[self.in_order.len() - fifth..]);
        last <= 2.0 * first + 1.0
    }

    fn cpu_per_request_ms(&self) -> Option<f64> {
        self.cpu
            .map(|cpu| cpu.as_secs_f64() * 1e3 / self.ok.max(1) as f64)
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1].as_secs_f64() * 1e3
}

enum Row {
    Measured(Sample),
    Skipped(String),
}

struct Results {
    name: &'static str,
    rows: Vec<(Scenario, Row)>,
}

async fn run(upstream: SocketAddr) -> anyhow::Result<()> {
    let scenarios = scenarios()?;
    let secs: f64 = env_or("BENCH_SECS", 5.0);
    let litellm_max_rate: u32 = env_or("BENCH_LITELLM_MAX_RATE", 200);
    let client = pincer::gateway::default_client()?;
    let scratch = tempfile::tempdir()?;
    let upstream_base = format!("http://{upstream}/v1");
    println!(
        "gateway_vs_litellm: fake upstream {upstream_base}; open loop, {secs} s per scenario: {}",
        scenarios
            .iter()
            .map(Scenario::label)
            .collect::<Vec<_>>()
            .join(", ")
    );

    let mut results = Vec::new();
    let direct = Target {
        name: "direct",
        url: format!("{upstream_base}/chat/completions"),
        key: None,
    };
    results.push(measure_all(&client, &direct, None, &scenarios, secs, u32::MAX).await?);

    {
        let (pincer, target) = start_pincer(scratch.path(), &upstream_base)?;
        let ready = wait_ready(&client, &target, Duration::from_secs(30)).await;
        let measured = match ready {
            Ok(()) => {
                measure_all(
                    &client,
                    &target,
                    Some(pincer.pid()),
                    &scenarios,
                    secs,
                    u32::MAX,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let log = pincer.stop();
        match measured {
            Ok(r) => results.push(r),
            Err(e) => bail!("pincer gateway: {e:#}\n--- its log ---\n{log}"),
        }
    }

    for threads in [RelayThreads::Multi, RelayThreads::One] {
        let (relay, target) = start_relay(scratch.path(), &upstream_base, threads)?;
        let measured = match wait_ready(&client, &target, Duration::from_secs(30)).await {
            Ok(()) => {
                measure_all(
                    &client,
                    &target,
                    Some(relay.pid()),
                    &scenarios,
                    secs,
                    u32::MAX,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let log = relay.stop();
        results.push(measured.with_context(|| format!("the relay: {log}"))?);
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
            Ok(()) => {
                measure_all(
                    &client,
                    &target,
                    Some(litellm.pid()),
                    &scenarios,
                    secs,
                    litellm_max_rate,
                )
                .await
            }
            Err(e) => Err(e),
        };
        let log = litellm.stop();
        match measured {
            Ok(r) => results.push(r),
            Err(e) => {
                let tail: Vec<&str> = log.lines().rev().take(40).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                litellm_note = Some(format!(
                    "LiteLLM skipped: its proxy did not serve: {e:#}\n--- the end of its log ---\n{}",
                    tail.join("\n")
                ));
            }
        }
    } else {
        litellm_note = Some(format!(
            "LiteLLM skipped: no venv at {} (run bench/run-gateway-vs-litellm.sh, or set PINCER_BENCH_LITELLM_VENV)",
            venv.display()
        ));
    }

    report(&results, &scenarios);
    if let Some(note) = litellm_note {
        println!("\nNOTE: {note}");
    }
    Ok(())
}

/// Warm up, then every scenario in turn.
async fn measure_all(
    client: &reqwest::Client,
    target: &Target,
    pid: Option<u32>,
    scenarios: &[Scenario],
    secs: f64,
    max_rate: u32,
) -> anyhow::Result<Results> {
    let warm = open_loop(client, target, None, 100, 2.0, false).await;
    if warm.ok == 0 {
        bail!("{}: no successful call during warm-up", target.name);
    }
    let mut rows = Vec::new();
    for scenario in scenarios {
        if scenario.rate > max_rate {
            rows.push((
                *scenario,
                Row::Skipped(format!("skipped above {max_rate}/s")),
            ));
            continue;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
        let sample = open_loop(client, target, pid, scenario.rate, secs, scenario.stream).await;
        eprintln!(
            "  {} {}: {}/{} answered",
            target.name,
            scenario.label(),
            sample.ok,
            sample.dispatched
        );
        rows.push((*scenario, Row::Measured(sample)));
    }
    Ok(Results {
        name: target.name,
        rows,
    })
}

/// One call: true when it answered 2xx with the whole body (`[DONE]` last
/// when streamed).
async fn call(client: &reqwest::Client, target: &Target, stream: bool) -> bool {
    let mut request = client
        .post(&target.url)
        .header(CONTENT_TYPE, "application/json")
        .timeout(CALL_TIMEOUT)
        .body(if stream { STREAM_REQUEST } else { REQUEST });
    if let Some(key) = &target.key {
        request = request.bearer_auth(key);
    }
    match request.send().await {
        Ok(response) => {
            let ok = response.status().is_success();
            match response.bytes().await {
                Ok(body) if ok && stream => body.trim_ascii_end().ends_with(b"data: [DONE]"),
                Ok(body) => ok && !body.is_empty(),
                Err(_) => false,
            }
        }
        Err(_) => false,
    }
}

/// CPU time (utime + stime) and peak RSS (VmHWM, kB) of the processes in
/// the process group `pid` leads.
fn group_usage(pid: u32) -> (Duration, u64) {
    // USER_HZ is 100 on Linux.
    const TICK: f64 = 0.01;
    let (mut ticks, mut rss) = (0u64, 0u64);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return (Duration::ZERO, 0);
    };
    for entry in entries.flatten() {
        let Some(Ok(id)) = entry.file_name().to_str().map(str::parse::<u32>) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{id}/stat")) else {
            continue;
        };
        // The fields after the command (which may hold spaces) in parentheses.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // fields[0] is field 3 (state): pgrp is field 5, utime 14, stime 15.
        let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
        if field(5) != Some(u64::from(pid)) {
            continue;
        }
        ticks += field(14).unwrap_or(0) + field(15).unwrap_or(0);
        if let Ok(status) = std::fs::read_to_string(format!("/proc/{id}/status")) {
            rss += status
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    (Duration::from_secs_f64(ticks as f64 * TICK), rss)
}

/// Dispatches `rate` calls a second for `secs` seconds on a fixed schedule,
/// whatever the answers do, and waits for all of them; each is timed from
/// the moment it was scheduled.
async fn open_loop(
    client: &reqwest::Client,
    target: &Target,
    pid: Option<u32>,
    rate: u32,
    secs: f64,
    stream: bool,
) -> Sample {
    let count = (f64::from(rate) * secs).round() as usize;
    let period = Duration::from_secs_f64(1.0 / f64::from(rate.max(1)));
    let before = pid.map(group_usage);
    let started = tokio::time::Instant::now();
    let tasks = tokio::task::LocalSet::new();
    let results = tasks
        .run_until(async {
            let mut handles = Vec::with_capacity(count);
            for i in 0..count {
                let scheduled = started + period.mul_f64(i as f64);
                tokio::time::sleep_until(scheduled).await;
                let client = client.clone();
                let target = target.clone();
                handles.push(tokio::task::spawn_local(async move {
                    let ok = call(&client, &target, stream).await;
                    (ok, scheduled.elapsed())
                }));
            }
            let mut results = Vec::with_capacity(count);
            for handle in handles {
                results.push(handle.await.unwrap_or((false, Duration::ZERO)));
            }
            results
        })
        .await;
    let after = pid.map(group_usage);
    let in_order: Vec<Duration> = results.iter().filter(|r| r.0).map(|r| r.1).collect();
    let mut sorted = in_order.clone();
    sorted.sort_unstable();
    Sample {
        dispatched: count,
        ok: in_order.len(),
        in_order,
        sorted,
        cpu: before
            .zip(after)
            .map(|((b, _), (a, _))| a.saturating_sub(b)),
        peak_rss_kb: after.map(|(_, rss)| rss),
    }
}

fn report(results: &[Results], scenarios: &[Scenario]) {
    println!(
        "\nOpen loop, latency from the scheduled send to the last byte (ms); added = minus direct at the same scenario"
    );
    println!(
        "{:<8} {:<12} {:>9} {:>8} {:>8} {:>10} {:>10} {:>11} {:>9} {:>10}",
        "target",
        "scenario",
        "answered",
        "p50",
        "p99",
        "added p50",
        "added p99",
        "CPU/req ms",
        "peak RSS",
        "sustained"
    );
    let direct = results.iter().find(|r| r.name == "direct");
    for scenario in scenarios {
        let base = direct.and_then(|d| {
            d.rows.iter().find_map(|(s, row)| match row {
                Row::Measured(sample) if s == scenario => Some(sample),
                _ => None,
            })
        });
        for r in results {
            let Some((_, row)) = r.rows.iter().find(|(s, _)| s == scenario) else {
                continue;
            };
            match row {
                Row::Skipped(why) => println!("{:<8} {:<12} {why}", r.name, scenario.label()),
                Row::Measured(s) => {
                    let (p50, p99) = (s.percentile(0.5), s.percentile(0.99));
                    let added = |p: f64, own: f64| {
                        base.filter(|_| r.name != "direct")
                            .map_or("-".to_string(), |b| format!("{:.3}", own - b.percentile(p)))
                    };
                    println!(
                        "{:<8} {:<12} {:>8.2}% {:>8.3} {:>8.3} {:>10} {:>10} {:>11} {:>9} {:>10}",
                        r.name,
                        scenario.label(),
                        s.answered_share() * 100.0,
                        p50,
                        p99,
                        added(0.5, p50),
                        added(0.99, p99),
                        s.cpu_per_request_ms()
                            .map_or("-".to_string(), |c| format!("{c:.3}")),
                        s.peak_rss_kb.map_or("-".to_string(), |kb| format!(
                            "{:.1} MB",
                            kb as f64 / 1024.0
                        )),
                        if s.sustained() { "yes" } else { "NO" }
                    );
                }
            }
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
                    post(|body: Bytes| async move {
                        let streamed = serde_json::from_slice::<serde_json::Value>(&body)
                            .is_ok_and(|b| b["stream"] == true);
                        if streamed {
                            ([(CONTENT_TYPE, "text/event-stream")], STREAM_ANSWER).into_response()
                        } else {
                            ([(CONTENT_TYPE, "application/json")], ANSWER).into_response()
                        }
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
    fn pid(&self) -> u32 {
        self.child.id()
    }

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
    // A budget, so every call is reserved and settled (BENCH_BUDGET={} for none).
    let budget =
        std::env::var("BENCH_BUDGET").unwrap_or_else(|_| "{daily_tokens: 1000000000000}".into());
    let home = scratch.join("pincer-home");
    std::fs::create_dir_all(&home)?;
    let config = scratch.join("pincer.yaml");
    std::fs::write(
        &config,
        format!(
            "gateway:\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai_compatible/fake, api_base: \"{upstream_base}\", api_key: fake}}\nworkspaces:\n  main: {{budget: {budget}}}\n"
        ),
    )?;
    let pincer =
        std::env::var("PINCER_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pincer").into());
    let pincer = pincer.as_str();
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

/// The relay's runtime: tokio's multi-thread one (a worker per core), or
/// one thread doing everything.
#[derive(Clone, Copy, PartialEq)]
enum RelayThreads {
    Multi,
    One,
}

fn start_relay(
    scratch: &Path,
    upstream_base: &str,
    threads: RelayThreads,
) -> anyhow::Result<(Server, Target)> {
    let port = free_port()?;
    let mut command = Command::new(std::env::current_exe()?);
    command
        .env(RELAY_UPSTREAM_ENV, upstream_base)
        .env(RELAY_LISTEN_ENV, format!("127.0.0.1:{port}"));
    let name = match threads {
        RelayThreads::Multi => "relay",
        RelayThreads::One => {
            command.env(RELAY_ONE_THREAD_ENV, "1");
            "relay-1t"
        }
    };
    let server = Server::spawn(command, scratch.join(format!("{name}.log")))?;
    Ok((
        server,
        Target {
            name,
            url: format!("http://127.0.0.1:{port}/v1/chat/completions"),
            key: None,
        },
    ))
}

/// The "relay" targets' process: `POST /v1/chat/completions` passed to
/// `upstream` as it came and its answer streamed back as it comes, with
/// pincer's HTTP client, on a multi-thread runtime or one thread.
fn relay(upstream: &str, listen: &str) -> anyhow::Result<()> {
    let url = reqwest::Url::parse(&format!("{upstream}/chat/completions"))?;
    let client = pincer::gateway::default_client()?;
    let runtime = if std::env::var_os(RELAY_ONE_THREAD_ENV).is_some() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()?
    };
    runtime.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen).await?;
        let router = Router::new().route(
            "/v1/chat/completions",
            post(move |body: Bytes| async move {
                let answer = client
                    .post(url.clone())
                    .header(CONTENT_TYPE, "application/json")
                    .body(body)
                    .send()
                    .await;
                match answer {
                    Ok(answer) => {
                        let status = answer.status();
                        let kind = answer.headers().get(CONTENT_TYPE).cloned();
                        let mut response =
                            axum::body::Body::from_stream(answer.bytes_stream()).into_response();
                        *response.status_mut() = status;
                        if let Some(kind) = kind {
                            response.headers_mut().insert(CONTENT_TYPE, kind);
                        }
                        response
                    }
                    Err(e) => (axum::http::StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
                }
            }),
        );
        axum::serve(listener, router).await?;
        Ok(())
    })
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
        if call(client, target, false).await {
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
