//! Budgets and usage through the real `pincer gateway serve`: exact budgets
//! under concurrency, within one process and across two processes serving
//! one workspace (state on SQLite, and on PostgreSQL), and usage rows surviving SIGTERM and `kill -9`. The fake
//! upstream here holds its answers until every call was answered or
//! refused, and reports usage equal to the gateway's reservation, so a
//! budget of exactly N reservations must let exactly N calls through.
//! Loopback only.

use crate::support;

use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::response::IntoResponse;
use axum::routing::post;
use serde_json::{Value, json};
use support::{Sandbox, ok};

/// Completion tokens each call asks for.
const MAX_TOKENS: u64 = 16;

fn request() -> Value {
    json!({"model": "default", "messages": [{"role": "user", "content": "hi"}], "max_tokens": MAX_TOKENS})
}

/// What the gateway reserves for [`request`].
fn reservation() -> u64 {
    pincer::gateway::Estimate::for_request(&request(), None).tokens()
}

/// A provider that answers every call with usage equal to [`reservation`],
/// once `release` is set (at once when it is set from the start).
#[derive(Clone)]
struct Upstream {
    arrived: Arc<AtomicUsize>,
    release: Arc<AtomicBool>,
    base_url: String,
}

impl Upstream {
    async fn spawn(hold: bool) -> Self {
        let arrived = Arc::new(AtomicUsize::new(0));
        let release = Arc::new(AtomicBool::new(!hold));
        let state = (arrived.clone(), release.clone());
        let router = Router::new()
            .route("/v1/chat/completions", post(answer))
            .with_state(state);
        let addr = support::serve(router).await;
        Self {
            arrived,
            release,
            base_url: format!("http://127.0.0.1:{}/v1", addr.port()),
        }
    }
}

async fn answer(
    State((arrived, release)): State<(Arc<AtomicUsize>, Arc<AtomicBool>)>,
) -> axum::response::Response {
    arrived.fetch_add(1, Ordering::SeqCst);
    while !release.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let completion = MAX_TOKENS;
    let prompt = reservation() - completion;
    axum::Json(json!({
        "id": "chatcmpl-budget", "object": "chat.completion", "created": 1_700_000_000u64,
        "model": "fake",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
    }))
    .into_response()
}

/// One sandbox (home, config) that several gateway processes can serve.
struct Home {
    sandbox: Sandbox,
}

impl Home {
    fn new(upstream: &Upstream, workspace_yaml: &str) -> Self {
        let sandbox = Sandbox::new();
        sandbox.write(
            "pincer.yaml",
            &format!(
                "gateway:\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai_compatible/fake, api_base: \"{}\", api_key: fake}}\nworkspaces:\n  main:\n{workspace_yaml}",
                upstream.base_url
            ),
        );
        Self { sandbox }
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        crate::support::pincer_command()
            .arg("--config")
            .arg(self.sandbox.work().join("pincer.yaml"))
            .args(args)
            .current_dir(self.sandbox.work())
            .env("PINCER_HOME", self.sandbox.home())
            .output()
            .expect("run pincer")
    }

    fn key(&self) -> String {
        ok(self.cli(&["gateway", "keys", "create", "main"]))
            .trim()
            .to_string()
    }

    /// `gateway serve` on a port of its own; returns it and its base URL.
    fn serve(&self, name: &str) -> (Process, String) {
        let mut served = support::gateway::serve(
            &self.sandbox,
            &self.sandbox.work().join("pincer.yaml"),
            &format!("{name}.log"),
            &[],
        );
        let child = served.child.take().expect("the gateway process");
        (Process(child), served.base.clone())
    }

    /// Calls and tokens `pincer gateway usage` shows for workspace main.
    fn usage(&self) -> (u64, u64) {
        let shown = ok(self.cli(&["gateway", "usage", "--workspace", "main"]));
        shown
            .lines()
            .skip(1)
            .filter_map(|line| {
                let cols: Vec<&str> = line.split_whitespace().collect();
                let n = |i: usize| cols.get(i).and_then(|c| c.parse::<u64>().ok());
                Some((n(3)?, n(4)? + n(5)?))
            })
            .fold((0, 0), |(c, t), (c2, t2)| (c + c2, t + t2))
    }

    /// [`Self::usage`] once it shows `calls` calls (the writer of a process
    /// still running lags by about one commit), or what it shows after 10 s.
    fn usage_reaching(&self, calls: u64) -> (u64, u64) {
        let started = Instant::now();
        loop {
            let usage = self.usage();
            if usage.0 >= calls || started.elapsed() > Duration::from_secs(10) {
                return usage;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// A gateway process, killed on drop.
struct Process(Child);

impl Process {
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([signal, &self.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
    }

    fn wait(&mut self) -> std::process::ExitStatus {
        self.0.wait().expect("wait")
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn call(client: &reqwest::Client, base: &str, key: &str) -> (u16, Value) {
    let response = client
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&request())
        .send()
        .await
        .expect("gateway answers");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// Sends `per_gateway` calls to each of `bases` at once while `upstream`
/// holds its answers; releases them once every call reached the upstream
/// or was refused. Returns (answered, refused).
async fn all_at_once(
    upstream: &Upstream,
    bases: &[String],
    key: &str,
    per_gateway: usize,
) -> (usize, usize) {
    let client = pincer::gateway::default_client().expect("client");
    let refused = Arc::new(AtomicUsize::new(0));
    let total = bases.len() * per_gateway;
    let mut calls = Vec::new();
    for base in bases {
        for _ in 0..per_gateway {
            let (client, base, key, refused) = (
                client.clone(),
                base.clone(),
                key.to_string(),
                refused.clone(),
            );
            calls.push(tokio::spawn(async move {
                let (status, body) = call(&client, &base, &key).await;
                if status == 429 {
                    assert_eq!(body["error"]["code"], "budget_exceeded", "{body}");
                    refused.fetch_add(1, Ordering::SeqCst);
                }
                (status, body)
            }));
        }
    }
    let started = Instant::now();
    while upstream.arrived.load(Ordering::SeqCst) + refused.load(Ordering::SeqCst) < total {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "calls neither answered nor refused after 60 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    upstream.release.store(true, Ordering::SeqCst);
    let mut answered = 0;
    for call in calls {
        let (status, body) = call.await.expect("call task");
        match status {
            200 => answered += 1,
            429 => {}
            other => panic!("unexpected {other}: {body}"),
        }
    }
    (answered, refused.load(Ordering::SeqCst))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_concurrent_calls_against_a_budget_of_exactly_ten() {
    let upstream = Upstream::spawn(true).await;
    let budget = 10 * reservation();
    let home = Home::new(
        &upstream,
        &format!("    budget: {{daily_tokens: {budget}}}\n"),
    );
    let key = home.key();
    let (_gateway, base) = home.serve("gateway");
    let (answered, refused) = all_at_once(&upstream, &[base], &key, 64).await;
    assert_eq!((answered, refused), (10, 54));
    assert_eq!(upstream.arrived.load(Ordering::SeqCst), 10);
    assert_eq!(home.usage_reaching(10), (10, budget));
}

/// Two processes serving one workspace from the state `state_yaml` names,
/// 32 concurrent calls to each against a budget of ten.
async fn two_processes_cannot_overspend_together(state_yaml: &str) {
    let upstream = Upstream::spawn(true).await;
    let budget = 10 * reservation();
    let home = Home::new(
        &upstream,
        &format!("    budget: {{daily_tokens: {budget}}}\n{state_yaml}"),
    );
    let key = home.key();
    let (first, a) = home.serve("first");
    let (second, b) = home.serve("second");
    let (answered, refused) = all_at_once(&upstream, &[a.clone(), b.clone()], &key, 32).await;
    // Every call is in flight at once, so the whole budget is leased and
    // used: exactly ten calls, whichever process served them.
    assert_eq!((answered, refused), (10, 54));
    assert_eq!(upstream.arrived.load(Ordering::SeqCst), 10);
    assert_eq!(home.usage_reaching(10), (10, budget));
    // Spent: both processes refuse, also after the leases were renewed.
    let client = pincer::gateway::default_client().expect("client");
    for base in [&a, &b] {
        assert_eq!(call(&client, base, &key).await.0, 429);
    }
    // The budget is spent, not merely leased: with the first process gone
    // (its lease with it), the second still refuses.
    drop(first);
    assert_eq!(call(&client, &b, &key).await.0, 429);
    drop(second);
    assert_eq!(home.usage(), (10, budget));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_serving_one_workspace_cannot_overspend_together() {
    two_processes_cannot_overspend_together("").await;
}

/// The same, with the state on PostgreSQL: the budget leases are rows there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_processes_on_postgres_cannot_overspend_together() {
    let pincer::db::Location::Postgres(url) = pincer::db::testing::database() else {
        unreachable!()
    };
    two_processes_cannot_overspend_together(&format!(
        "state:\n  backend: postgres\n  url: \"{url}\"\n"
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_writes_the_usage_of_every_answered_call() {
    let upstream = Upstream::spawn(false).await;
    let home = Home::new(&upstream, "    budget: {daily_tokens: 100000000}\n");
    let key = home.key();
    let (mut gateway, base) = home.serve("gateway");
    let client = pincer::gateway::default_client().expect("client");
    let calls: Vec<_> = (0..40)
        .map(|_| {
            let (client, base, key) = (client.clone(), base.clone(), key.clone());
            tokio::spawn(async move { call(&client, &base, &key).await.0 })
        })
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap(), 200);
    }
    gateway.signal("-TERM");
    let status = gateway.wait();
    assert!(status.success(), "gateway exited with {status}");
    // Read only after the process is gone: nothing can be written later.
    assert_eq!(home.usage(), (40, 40 * reservation()));
}

/// docs/gateway.md ("Usage and audit off the request path"): a `kill -9` loses at most the
/// usage rows still queued for the writer: at most QUEUE_CAPACITY plus the
/// calls in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_at_most_the_stated_bound_of_usage_rows() {
    const CALLERS: usize = 16;
    let upstream = Upstream::spawn(false).await;
    let home = Home::new(&upstream, "    budget: {daily_tokens: 100000000000}\n");
    let key = home.key();
    let (mut gateway, base) = home.serve("gateway");
    let client = pincer::gateway::default_client().expect("client");
    let received = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = (0..CALLERS)
        .map(|_| {
            let (client, base, key) = (client.clone(), base.clone(), key.clone());
            let (received, stop) = (received.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let Ok(response) = client
                        .post(format!("{base}/v1/chat/completions"))
                        .bearer_auth(&key)
                        .json(&request())
                        .send()
                        .await
                    else {
                        continue;
                    };
                    let status = response.status().as_u16();
                    // Fully received: the whole body arrived and parses.
                    if let Ok(body) = response.json::<Value>().await
                        && status == 200
                        && body["choices"][0]["message"]["content"] == "ok"
                    {
                        received.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    // Under load until a few hundred calls were answered.
    let started = Instant::now();
    while received.load(Ordering::SeqCst) < 300 && started.elapsed() < Duration::from_secs(30) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    gateway.signal("-KILL");
    gateway.wait();
    stop.store(true, Ordering::SeqCst);
    for caller in callers {
        caller.await.unwrap();
    }
    let received = received.load(Ordering::SeqCst) as u64;
    let (rows, _) = home.usage();
    let missing = received.saturating_sub(rows);
    let bound = (pincer::gateway::QUEUE_CAPACITY + CALLERS) as u64;
    println!(
        "kill -9 after {received} fully received answers: {rows} usage rows, {missing} missing (bound {bound})"
    );
    assert!(received >= 300, "only {received} answers before the kill");
    assert!(
        rows <= received + CALLERS as u64,
        "{rows} rows for {received} answers"
    );
    assert!(
        missing <= bound,
        "{missing} usage rows missing, over the stated bound of {bound}"
    );
}
