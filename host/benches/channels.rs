//! Slack channel under open-loop load: N conversations over M workspaces
//! through the fake Slack (`tests/python/fake_slack.py`, Socket Mode) and an
//! instant fake model, with the real `pincer start` daemon and its
//! `channel-slack` component.
//!
//!     cargo bench -p pincer --bench channels [-- N M P D] [--cluster]
//!
//! `--cluster` runs the same load three times in one run and prints them
//! side by side: one daemon on SQLite, one on PostgreSQL, two on one
//! PostgreSQL (each with its own home and Socket Mode connection). The
//! PostgreSQL server is a private one on a unix socket
//! (`pincer::db::testing`) with its default durability.
//!
//! Defaults: N=50 conversations (`D0001`…), M=2 workspaces (one container
//! each; conversation i goes to workspace i mod M), every conversation sends
//! a DM every P=5 s (random phase) for D=60 s, without waiting for replies.
//! One message per workspace first warms the containers up; its latency is
//! reported apart as the cold latency.
//!
//! Per message, on the fake Slack's clock: t0 = the envelope frame went out
//! on the socket, t1 = the `chat.postMessage` carrying its reply arrived.
//! The model answers `re: <marker of the last user message>`, so replies
//! are matched to messages. Host overhead = (t1 − t0) − the model's own time
//! for that message (recorded inside the fake model; ~0 as it answers at
//! once). Everything else is in it: the socket, the plugin, storing, routing,
//! context assembly, the container exec of the runner and the runner's own
//! work, the gateway, storing the reply, the outbox and the Web API call.
//! The split at the model request (before / after, same wall clock) is
//! printed too.
//!
//! Lost: no reply 30 s after the last send. Duplicated: more than one reply.
//! Daemon RSS is read from `/proc/<pid>/status` every second (the daemon's
//! own process; the runners live in the containers).
//!
//! Needs Docker, the default image (built if missing) and a python with
//! `tests/python/requirements.txt` (`PINCER_TEST_PYTHON`, else `python3`).
//! Loopback only; removes the containers of its own pincer instance.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};

#[path = "support/docker.rs"]
mod docker;
#[path = "support/slack_daemon.rs"]
mod slack_daemon;

use docker::DockerCleanup;
use slack_daemon::{FakeSlack, Scratch, quantile, serve, start_daemon, start_nth_daemon, unix_now};
/// How long replies may take after the last message was sent.
const DRAIN: Duration = Duration::from_secs(30);

struct Params {
    /// `--cluster`: SQLite, then one and two daemons on PostgreSQL.
    cluster: bool,
    conversations: usize,
    workspaces: usize,
    period: f64,
    duration: f64,
}

fn params() -> anyhow::Result<Params> {
    // `cargo bench` passes `--bench`; positional arguments are N M P D.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let arg = |i: usize, default: f64| -> anyhow::Result<f64> {
        match args.get(i) {
            Some(a) => a
                .parse()
                .with_context(|| format!("argument {}: {a}", i + 1)),
            None => Ok(default),
        }
    };
    let p = Params {
        cluster: std::env::args().any(|a| a == "--cluster"),
        conversations: arg(0, 50.0)? as usize,
        workspaces: arg(1, 2.0)? as usize,
        period: arg(2, 5.0)?,
        duration: arg(3, 60.0)?,
    };
    if p.conversations == 0 || p.workspaces == 0 || p.conversations < p.workspaces {
        bail!("usage: channels [N conversations >= M workspaces >= 1] [M] [P seconds] [D seconds]");
    }
    if p.conversations > 9999 || p.period <= 0.0 || p.duration <= 0.0 {
        bail!("N at most 9999, P and D positive");
    }
    Ok(p)
}

fn main() -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let params = params()?;
    // SAFETY: no other thread runs yet.
    unsafe { std::env::set_var("PINCER_TEST_PG_DURABLE", "1") };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run(params))
}

fn conversation_id(i: usize) -> String {
    format!("D{:04}", i + 1)
}

/// The marker a message carries and its reply repeats: `bm<conv>x<seq>`.
fn marker(conversation: usize, seq: usize) -> String {
    format!("bm{:04}x{seq:04}", conversation + 1)
}

/// The last marker in `text`.
fn find_marker(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut found = None;
    let mut at = 0;
    while let Some(i) = text[at..].find("bm").map(|i| i + at) {
        let candidate = bytes.get(i..i + 11);
        if let Some(c) = candidate
            && c[2..6].iter().all(u8::is_ascii_digit)
            && c[6] == b'x'
            && c[7..11].iter().all(u8::is_ascii_digit)
        {
            found = Some(text[i..i + 11].to_string());
        }
        at = i + 2;
    }
    found
}

// ---- the instant fake model --------------------------------------------------------------------

struct ModelCall {
    marker: Option<String>,
    /// Unix time the request was in (body read).
    arrived: f64,
    took: Duration,
}

type ModelLog = Arc<Mutex<Vec<ModelCall>>>;

fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// Answers at once with `re: <marker of the last user message>`.
async fn model(State(log): State<ModelLog>, body: String) -> Response {
    let arrived = unix_now();
    let started = Instant::now();
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let marker = request["messages"]
        .as_array()
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| content_text(&m["content"]))
        .and_then(|t| find_marker(&t));
    let text = format!("re: {}", marker.as_deref().unwrap_or("none"));
    let usage = json!({"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55});
    let response = if request["stream"].as_bool().unwrap_or(false) {
        let chunk = |delta: Value, finish: Option<&str>| {
            json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "instant",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        let usage = json!({"id": "x", "object": "chat.completion.chunk", "created": 0,
            "model": "instant", "choices": [], "usage": usage});
        let body = format!(
            "data: {}\n\ndata: {}\n\ndata: {usage}\n\ndata: [DONE]\n\n",
            chunk(json!({"role": "assistant", "content": text}), None),
            chunk(json!({}), Some("stop")),
        );
        Response::builder()
            .header("content-type", "text/event-stream")
            .body(Body::from(body))
    } else {
        let body = json!({"id": "x", "object": "chat.completion", "created": 0, "model": "instant",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                "finish_reason": "stop"}],
            "usage": usage});
        Response::builder()
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
    }
    .unwrap_or_default();
    if let Ok(mut log) = log.lock() {
        log.push(ModelCall {
            marker,
            arrived,
            took: started.elapsed(),
        });
    }
    response
}

/// Successful `chat.postMessage` calls as (marker, channel, received_at).
async fn posted_replies(slack: &FakeSlack) -> anyhow::Result<Vec<(String, String, f64)>> {
    let (_, calls) = slack.get("/calls?method=chat.postMessage").await?;
    Ok(calls["calls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["status"] == 200 && c["response"]["ok"] == true)
        .filter_map(|c| {
            let text = c["args"]["text"].as_str().unwrap_or("");
            Some((
                find_marker(text)?,
                c["args"]["channel"].as_str().unwrap_or("").to_string(),
                c["received_at"].as_f64()?,
            ))
        })
        .collect())
}

fn config_yaml(p: &Params, model: &str, base: &Path, api: &str) -> String {
    let mut yaml = format!(
        "gateway:\n  num_retries: 0\n  model_list:\n    - model_name: default\n      \
         litellm_params: {{model: openai/instant, api_base: \"{model}\", api_key: sk-bench}}\n\
         containers:\n  workspace_base_path: {}\nworkspaces:\n",
        base.display()
    );
    for w in 1..=p.workspaces {
        yaml.push_str(&format!("  w{w}: {{}}\n"));
    }
    yaml.push_str(&format!(
        "channels:\n  listen: 127.0.0.1:0\n  slack:\n    plugin: channel-slack\n    workspace: w1\n    \
         allowed_senders: [\"*\"]\n    http: [\"127.0.0.1:*\"]\n    config:\n      \
         bot_token: \"${{SLACK_BOT_TOKEN}}\"\n      app_token: \"${{SLACK_APP_TOKEN}}\"\n      \
         signing_secret: \"${{SLACK_SIGNING_SECRET}}\"\n      api_base: \"{api}\"\n    \
         conversations:\n"
    ));
    for c in 0..p.conversations {
        yaml.push_str(&format!(
            "      {}: w{}\n",
            conversation_id(c),
            c % p.workspaces + 1
        ));
    }
    yaml
}

/// VmRSS of `pid` in KiB.
fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Samples the daemon's RSS every second until stopped.
struct RssSampler {
    samples: Arc<Mutex<Vec<(Instant, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RssSampler {
    fn start(pid: u32) -> Self {
        let samples: Arc<Mutex<Vec<(Instant, u64)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (samples, stop) = (samples.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let (Some(kib), Ok(mut s)) = (rss_kib(pid), samples.lock()) {
                        s.push((Instant::now(), kib));
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        Self {
            samples,
            stop,
            thread: Some(thread),
        }
    }

    fn finish(mut self) -> Vec<(Instant, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.samples.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

// ---- the run -----------------------------------------------------------------------------------

/// One message sent: its marker, conversation and envelope.
struct Sent {
    marker: String,
    channel: String,
    envelope: String,
    /// The message's Slack `ts` (what the working reaction names).
    ts: String,
}

async fn push(slack: &FakeSlack, c: usize, seq: usize) -> anyhow::Result<Sent> {
    let marker = marker(c, seq);
    let channel = conversation_id(c);
    let pushed = slack
        .post(
            "/socket/push",
            &json!({"kind": "dm", "text": format!("please answer {marker}"),
                "user": format!("U{:04}", c + 1), "channel": channel}),
        )
        .await?;
    let envelope = pushed["envelope_id"]
        .as_str()
        .with_context(|| format!("push failed: {pushed}"))?
        .to_string();
    let ts = pushed["ts"].as_str().unwrap_or("").to_string();
    Ok(Sent {
        marker,
        channel,
        envelope,
        ts,
    })
}

/// Polls until every message in `sent` has a reply or `deadline` passes.
async fn drain(slack: &FakeSlack, sent: &[Sent], deadline: Instant) -> anyhow::Result<()> {
    loop {
        let replies = posted_replies(slack).await?;
        let answered: std::collections::HashSet<&str> =
            replies.iter().map(|(m, _, _)| m.as_str()).collect();
        if sent.iter().all(|s| answered.contains(s.marker.as_str())) || Instant::now() > deadline {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Small deterministic PRNG (xorshift) for the phases.
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// What came back for one message.
struct Outcome {
    conversation: String,
    latency_ms: f64,
    overhead_ms: f64,
    /// t0 → the working reaction's `reactions.add` was answered (the
    /// host awaits it before the turn starts).
    reaction_ms: Option<f64>,
    /// t0 → the model request arrived; the model's end → t1.
    before_model_ms: Option<f64>,
    after_model_ms: Option<f64>,
}

struct Analysis {
    outcomes: Vec<Outcome>,
    lost: Vec<String>,
    duplicated: Vec<String>,
    first_t0: f64,
    last_t1: f64,
}

async fn analyse(slack: &FakeSlack, sent: &[Sent], models: &ModelLog) -> anyhow::Result<Analysis> {
    let (_, acks) = slack.get("/acks").await?;
    let mut t0s = HashMap::new();
    for env in acks["envelopes"].as_array().into_iter().flatten() {
        let first = env["deliveries"][0]["sent_at"]
            .as_f64()
            .or(env["pushed_at"].as_f64());
        if let (Some(id), Some(t0)) = (env["id"].as_str(), first) {
            t0s.insert(id.to_string(), t0);
        }
    }
    let mut replies: HashMap<String, Vec<(String, f64)>> = HashMap::new();
    for (marker, channel, at) in posted_replies(slack).await? {
        replies.entry(marker).or_default().push((channel, at));
    }
    let (_, reactions) = slack.get("/calls?method=reactions.add").await?;
    let mut reacted: HashMap<String, f64> = HashMap::new();
    for call in reactions["calls"].as_array().into_iter().flatten() {
        if let (Some(ts), Some(at)) = (
            call["args"]["timestamp"].as_str(),
            call["answered_at"].as_f64(),
        ) {
            let entry = reacted.entry(ts.to_string()).or_insert(at);
            *entry = entry.min(at);
        }
    }
    let mut model: HashMap<String, (f64, Duration)> = HashMap::new();
    for call in models
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .iter()
    {
        if let Some(m) = &call.marker {
            let entry = model
                .entry(m.clone())
                .or_insert((call.arrived, Duration::ZERO));
            entry.0 = entry.0.min(call.arrived);
            entry.1 += call.took;
        }
    }
    let mut analysis = Analysis {
        outcomes: Vec::new(),
        lost: Vec::new(),
        duplicated: Vec::new(),
        first_t0: f64::MAX,
        last_t1: 0.0,
    };
    for s in sent {
        let t0 = *t0s
            .get(&s.envelope)
            .with_context(|| format!("the fake has no envelope {}", s.envelope))?;
        analysis.first_t0 = analysis.first_t0.min(t0);
        let got = replies.get(&s.marker).map(Vec::as_slice).unwrap_or(&[]);
        if got.len() > 1 {
            analysis.duplicated.push(s.marker.clone());
        }
        let Some(t1) = got
            .iter()
            .filter(|(channel, _)| *channel == s.channel)
            .map(|(_, at)| *at)
            .reduce(f64::min)
        else {
            analysis.lost.push(s.marker.clone());
            continue;
        };
        analysis.last_t1 = analysis.last_t1.max(t1);
        let (model_in, model_took) = model
            .get(&s.marker)
            .map(|(at, took)| (Some(*at), took.as_secs_f64()))
            .unwrap_or((None, 0.0));
        let latency = t1 - t0;
        analysis.outcomes.push(Outcome {
            conversation: s.channel.clone(),
            latency_ms: latency * 1e3,
            overhead_ms: (latency - model_took) * 1e3,
            reaction_ms: reacted.get(&s.ts).map(|at| (at - t0) * 1e3),
            before_model_ms: model_in.map(|at| (at - t0) * 1e3),
            after_model_ms: model_in.map(|at| (t1 - at - model_took) * 1e3),
        });
    }
    Ok(analysis)
}

fn sorted(values: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v
}

fn row(label: &str, values: &[f64]) {
    println!(
        "| {label} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
        quantile(values, 0.5),
        quantile(values, 0.9),
        quantile(values, 0.99),
        values.last().copied().unwrap_or(f64::NAN),
        values.len()
    );
}

/// Where the daemons keep their state, and how many serve.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Setup {
    Sqlite,
    Postgres { daemons: usize },
}

impl Setup {
    fn label(self) -> String {
        match self {
            Self::Sqlite => "1 daemon, SQLite".into(),
            Self::Postgres { daemons } => format!("{daemons} daemon(s), PostgreSQL"),
        }
    }
}

/// What one run of the load measured.
struct Measured {
    ready: Duration,
    sent: usize,
    sent_for: Duration,
    analysis: Analysis,
    cold: Analysis,
    redelivered: usize,
    /// The first daemon's RSS idle, after the warm-up, at its peak and at
    /// the end, in KiB.
    rss: [u64; 4],
    exits: Vec<String>,
    ack_ms: Vec<f64>,
    /// Each daemon's CPU over [`IDLE`] with the containers warm and no
    /// message, in percent of one core.
    idle_cpu: Vec<f64>,
}

/// How long the daemons' idle CPU is measured.
const IDLE: Duration = Duration::from_secs(20);

/// utime + stime of `pid`, in seconds.
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name (which may hold spaces), 1-based from
    // field 3: utime is field 14, stime 15.
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Some(ticks / per_second)
}

async fn run(p: Params) -> anyhow::Result<()> {
    if !p.cluster {
        let measured = measure(&p, Setup::Sqlite).await?;
        report(&p, &measured);
        return Ok(());
    }
    // SQLite first: the PostgreSQL server starts with the first database.
    let setups = [
        Setup::Sqlite,
        Setup::Postgres { daemons: 1 },
        Setup::Postgres { daemons: 2 },
    ];
    let mut results = Vec::new();
    for setup in setups {
        eprintln!("== {}", setup.label());
        results.push((setup, measure(&p, setup).await?));
    }
    compare(&p, &results);
    Ok(())
}

async fn measure(p: &Params, setup: Setup) -> anyhow::Result<Measured> {
    let scratch = Scratch::new()?;
    let (home, work, base) = (&scratch.home, &scratch.work, &scratch.base);
    let _cleanup = DockerCleanup { home: home.clone() };

    let models: ModelLog = Arc::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(model))
        .with_state(models.clone());
    let model_base = format!("{}/v1", serve(app).await?);

    let slack = FakeSlack::start(&scratch.dir.path().join("fake_slack.log"))?;
    let config = work.join("pincer.yaml");
    let mut yaml = config_yaml(p, &model_base, base, &slack.api_base);
    if let Setup::Postgres { .. } = setup {
        let pincer::db::Location::Postgres(url) = pincer::db::testing::database() else {
            bail!("the test server gave no PostgreSQL database");
        };
        yaml.push_str(&format!("state:\n  backend: postgres\n  url: \"{url}\"\n"));
    }
    std::fs::write(&config, yaml)?;

    let log = scratch.dir.path().join("daemon.log");
    let started = Instant::now();
    let mut daemons = vec![start_daemon(&config, home, work, &slack, &log).await?];
    let ready = started.elapsed();
    // The others each on a home of their own, after the first took the
    // workspaces (nothing rebalances: they receive and hand over).
    let mut cleanups = Vec::new();
    if let Setup::Postgres { daemons: n } = setup {
        for i in 2..=n {
            let home = scratch.dir.path().join(format!("home-{i}"));
            std::fs::create_dir_all(&home)?;
            cleanups.push(DockerCleanup { home: home.clone() });
            let log = scratch.dir.path().join(format!("daemon-{i}.log"));
            daemons.push(start_nth_daemon(&config, &home, work, &slack, &log, i).await?);
        }
    }
    let daemon = &daemons[0];
    let rss = RssSampler::start(daemon.pid());
    let rss_idle = rss_kib(daemon.pid()).unwrap_or(0);

    // Warm-up: one message per workspace (each starts its container).
    let mut warm = Vec::new();
    for c in 0..p.workspaces {
        warm.push(push(&slack, c, 0).await?);
    }
    drain(&slack, &warm, Instant::now() + Duration::from_secs(120)).await?;
    let cold = analyse(&slack, &warm, &models).await?;
    if !cold.lost.is_empty() {
        bail!(
            "warm-up messages got no reply: {:?}\n{}",
            cold.lost,
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    let rss_warm = rss_kib(daemon.pid()).unwrap_or(0);
    let before: Vec<Option<f64>> = daemons.iter().map(|d| cpu_seconds(d.pid())).collect();
    tokio::time::sleep(IDLE).await;
    let idle_cpu = daemons
        .iter()
        .zip(before)
        .map(|(d, before)| {
            let used = cpu_seconds(d.pid()).zip(before).map(|(a, b)| a - b);
            used.map_or(f64::NAN, |s| s / IDLE.as_secs_f64() * 100.0)
        })
        .collect();

    // The open loop.
    let slack = Arc::new(slack);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let begin = tokio::time::Instant::now() + Duration::from_millis(200);
    let end = begin + Duration::from_secs_f64(p.duration);
    let measured_from = Instant::now() + Duration::from_millis(200);
    let mut senders = Vec::new();
    for c in 0..p.conversations {
        let phase = Duration::from_secs_f64(rng.unit() * p.period);
        let (slack, period) = (slack.clone(), Duration::from_secs_f64(p.period));
        senders.push(tokio::spawn(async move {
            let mut sent = Vec::new();
            let mut at = begin + phase;
            let mut seq = 1;
            while at < end {
                tokio::time::sleep_until(at).await;
                sent.push(push(&slack, c, seq).await?);
                seq += 1;
                at += period;
            }
            anyhow::Ok(sent)
        }));
    }
    let mut sent = Vec::new();
    for sender in senders {
        sent.extend(sender.await??);
    }
    let sent_for = measured_from.elapsed();
    drain(&slack, &sent, Instant::now() + DRAIN).await?;
    // A little longer, for duplicates to show.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let analysis = analyse(&slack, &sent, &models).await?;
    let rss_end = rss_kib(daemon.pid()).unwrap_or(0);
    let samples = rss.finish();
    let rss_peak = samples
        .iter()
        .filter(|(at, _)| *at >= measured_from)
        .map(|(_, kib)| *kib)
        .max()
        .unwrap_or(0)
        .max(rss_end);
    let (_, acks) = slack.get("/acks").await?;
    let ack_ms = sorted(
        acks["acks"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|a| a["delay_ms"].as_f64()),
    );
    let redelivered = acks["envelopes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["deliveries"].as_array().is_some_and(|d| d.len() > 1))
        .count();
    let mut exits = Vec::new();
    for d in daemons.iter_mut().rev() {
        exits.push(d.stop()?.to_string());
    }
    exits.reverse();
    drop(cleanups);
    Ok(Measured {
        ready,
        sent: sent.len(),
        sent_for,
        analysis,
        cold,
        redelivered,
        rss: [rss_idle, rss_warm, rss_peak, rss_end],
        exits,
        ack_ms,
        idle_cpu,
    })
}

fn report(p: &Params, m: &Measured) {
    let Measured {
        ready,
        sent,
        sent_for,
        analysis,
        cold,
        redelivered,
        rss: [rss_idle, rss_warm, rss_peak, rss_end],
        exits,
        ack_ms,
        idle_cpu,
    } = m;

    // The report.
    let answered = analysis.outcomes.len();
    let span = (analysis.last_t1 - analysis.first_t0).max(f64::MIN_POSITIVE);
    println!(
        "\npincer channels bench: {} conversations over {} workspace(s), a DM every {} s each \
         for {} s (open loop), fake Slack (Socket Mode) + instant fake model, release daemon\n",
        p.conversations, p.workspaces, p.period, p.duration
    );
    println!("| | |\n|---|---|");
    println!(
        "| daemon ready (Socket Mode connected) | {:.1} s |",
        ready.as_secs_f64()
    );
    println!(
        "| offered load | {:.2} msg/s |",
        p.conversations as f64 / p.period
    );
    println!(
        "| messages sent | {} in {:.1} s ({:.2} msg/s) |",
        sent,
        sent_for.as_secs_f64(),
        *sent as f64 / sent_for.as_secs_f64()
    );
    println!(
        "| replies received | {answered} ({:.2} msg/s, first send to last reply) |",
        answered as f64 / span
    );
    println!(
        "| lost (no reply {} s after the end) | {} |",
        DRAIN.as_secs(),
        analysis.lost.len()
    );
    println!("| duplicated | {} |", analysis.duplicated.len());
    println!("| envelopes redelivered by the fake | {redelivered} |");
    println!(
        "| daemon RSS idle / after warm-up / peak / end | {:.1} / {:.1} / {:.1} / {:.1} MiB |",
        *rss_idle as f64 / 1024.0,
        *rss_warm as f64 / 1024.0,
        *rss_peak as f64 / 1024.0,
        *rss_end as f64 / 1024.0
    );
    println!(
        "| daemon CPU idle ({} s, containers warm) | {:.2} % of a core |",
        IDLE.as_secs(),
        idle_cpu[0]
    );
    println!("| daemon exit on SIGTERM | {} |", exits.join(", "));
    println!("\n| ms | p50 | p90 | p99 | max | n |\n|---|---|---|---|---|---|");
    let o = &analysis.outcomes;
    row(
        "**host overhead** (latency − model time)",
        &sorted(o.iter().map(|x| x.overhead_ms)),
    );
    row("latency (t1 − t0)", &sorted(o.iter().map(|x| x.latency_ms)));
    row(
        "  t0 → reactions.add (working sign) answered",
        &sorted(o.iter().filter_map(|x| x.reaction_ms)),
    );
    row(
        "  t0 → model request in (runner started)",
        &sorted(o.iter().filter_map(|x| x.before_model_ms)),
    );
    row(
        "  model answer out → t1 (reply posted)",
        &sorted(o.iter().filter_map(|x| x.after_model_ms)),
    );
    row(
        "model time (fake, per message)",
        &sorted(o.iter().map(|x| x.latency_ms - x.overhead_ms)),
    );
    row("socket ack delay (all envelopes)", ack_ms);
    for w in 0..p.workspaces {
        let of_w = sorted(
            o.iter()
                .filter(|x| {
                    x.conversation[1..]
                        .parse::<usize>()
                        .ok()
                        .map(|i| (i - 1) % p.workspaces)
                        == Some(w)
                })
                .map(|x| x.overhead_ms),
        );
        row(&format!("host overhead, workspace w{}", w + 1), &of_w);
    }
    let cold: Vec<String> = cold
        .outcomes
        .iter()
        .map(|x| format!("{} {:.1} ms", x.conversation, x.latency_ms))
        .collect();
    println!(
        "\ncold latency, the first message per workspace (its container starts): {}",
        cold.join(", ")
    );
    println!(
        "\nt0: the fake Slack sent the envelope frame; t1: the reply's chat.postMessage reached it \
         (both on its clock). Host overhead is t1 − t0 − the model's own time: it includes the \
         plugin, the daemon, the working-sign Web API call, the container exec and the runner's \
         own work in the container, the gateway, the outbox."
    );
    if !analysis.lost.is_empty() || !analysis.duplicated.is_empty() {
        println!(
            "\nlost: {:?}\nduplicated: {:?}",
            analysis.lost, analysis.duplicated
        );
    }
    let p50 = quantile(&sorted(o.iter().map(|x| x.overhead_ms)), 0.5);
    println!(
        "\ntarget ≤ 20 ms p50 host overhead: {} ({p50:.1} ms)",
        if p50 <= 20.0 { "met" } else { "NOT met" }
    );
}

/// The setups side by side.
fn compare(p: &Params, results: &[(Setup, Measured)]) {
    println!(
        "\npincer channels bench, cluster: {} conversations over {} workspace(s), a DM every {} s \
         each for {} s (open loop), per setup, one after the other in one run; fake Slack \
         (Socket Mode, one connection per daemon) + instant fake model, release daemons; \
         PostgreSQL: a private server on a unix socket with its default durability (fsync on)\n",
        p.conversations, p.workspaces, p.period, p.duration
    );
    println!(
        "| setup | sent | lost / duplicated | host overhead p50 / p90 / p99 / max (ms) | \
         daemon CPU idle (% of a core, each) | exit |\n|---|---:|---:|---:|---:|---|"
    );
    for (setup, m) in results {
        let overhead = sorted(m.analysis.outcomes.iter().map(|x| x.overhead_ms));
        println!(
            "| {} | {} | {} / {} | {:.1} / {:.1} / {:.1} / {:.1} | {} | {} |",
            setup.label(),
            m.sent,
            m.analysis.lost.len(),
            m.analysis.duplicated.len(),
            quantile(&overhead, 0.5),
            quantile(&overhead, 0.9),
            quantile(&overhead, 0.99),
            overhead.last().copied().unwrap_or(f64::NAN),
            m.idle_cpu
                .iter()
                .map(|c| format!("{c:.2}"))
                .collect::<Vec<_>>()
                .join(" / "),
            m.exits.join(", ")
        );
    }
    println!(
        "\nWith two daemons the first holds every workspace (it took them first; nothing \
         rebalances) and each daemon receives the events of its own connection: those the second \
         receives are stored by it and run by the first, woken by NOTIFY."
    );
}
