//! Host-side overhead of one agent turn: everything but the model's own
//! time, with a warm container.
//!
//!     cargo bench -p pincer --bench turn
//!
//! A local fake provider answers instantly (streamed, OpenAI protocol), so a
//! turn's wall time is pincer's own work: storing the message, recalling
//! memories, assembling the context, re-verifying the container, the
//! runner's model call through the gateway over the workspace's unix
//! socket (gateway auth, budget, routing, translation), streaming the
//! events back and storing them. Measured for a plain answer and for a turn
//! with one `bash` tool call (two model calls and a command in the
//! container). The fake provider's own time per request is printed too.
//!
//! Needs Docker and builds the default image offline; removes what it
//! creates.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use pincer::audit::AuditLog;
use pincer::config::Config;
use pincer::containers::ContainerRuntime;
use pincer::gateway::WorkspaceSockets;
use pincer::gateway::{Gateway, KeyStore, Ledger, Services};
use pincer::memory::MemoryStore;
use pincer::sessions::{SessionKey, SessionStore, TurnStatus};
use pincer::turn::{Agent, Inbound};
use serde_json::{Value, json};

const RUNS: usize = 60;

fn main() -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    runtime.block_on(run())
}

/// Time the fake provider spent per request, from request to last byte
/// queued.
type ProviderTimes = Arc<Mutex<Vec<Duration>>>;

async fn run() -> anyhow::Result<()> {
    let times: ProviderTimes = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let app = Router::new()
        .route("/v1/chat/completions", post(provider))
        .with_state(times.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let home = tempfile::tempdir()?;
    let base = tempfile::tempdir()?;
    let yaml = format!(
        "gateway:\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai/instant, api_base: \"http://{addr}/v1\", api_key: sk-bench}}\n\
         containers:\n  workspace_base_path: {}\nworkspaces:\n  bench: {{}}\n",
        base.path().display()
    );
    let config = Arc::new(Config::from_str_with_env(
        &yaml,
        Path::new("bench.yaml"),
        |_| None,
    )?);
    let audit = Arc::new(AuditLog::open(&home.path().join(pincer::db::FILE_NAME))?);
    let database = home.path().join(pincer::db::FILE_NAME);
    let memory = Arc::new(MemoryStore::open(home.path())?);
    let services = Services {
        audit: audit.clone(),
        keys: Arc::new(KeyStore::open(&database)?),
        ledger: Ledger::open(&database)?,
        plugins: None,
        memory: memory.clone(),
        schedules: Arc::new(pincer::scheduler::Store::open(&database)?),
        approvals: Arc::new(pincer::approvals::Approvals::new(
            pincer::approvals::ApprovalStore::open(&database)?,
        )),
    };
    let gateway = Arc::new(Gateway::new(&config, home.path(), services)?);
    let containers = Arc::new(
        ContainerRuntime::connect(home.path(), audit.clone(), gateway.container_grants()).await?,
    );
    containers
        .build_image(&config.containers.image, &mut |_| {})
        .await?;
    pincer::containers::install_runner(home.path())?;
    let sockets = WorkspaceSockets::start(&gateway, home.path(), config.workspaces.keys());
    let egress = pincer::egress::EgressProxies::start(
        home.path(),
        gateway.reaches(),
        pincer::egress::Parts::new(&audit),
    );
    let agent = Agent::new(
        config.clone(),
        home.path(),
        containers.clone(),
        Arc::new(SessionStore::open(home.path())?),
        memory,
        gateway,
        sockets,
        egress,
        Default::default(),
    );

    println!(
        "host-side overhead of one turn (warm container, instant local model), {RUNS} runs each\n"
    );
    println!("| turn | median | p99 | model calls |");
    println!("|---|---|---|---|");
    for (label, text, calls) in [
        ("plain answer", "say hi", 1),
        ("one bash tool call", "use a tool", 2),
    ] {
        // Warm up: the container starts on the first turn.
        turn(&agent, text).await?;
        times
            .lock()
            .map_err(|_| anyhow::anyhow!("poisoned"))?
            .clear();
        let mut samples = Vec::with_capacity(RUNS);
        for _ in 0..RUNS {
            let started = Instant::now();
            turn(&agent, text).await?;
            samples.push(started.elapsed());
        }
        let (median, p99) = percentiles(&mut samples);
        println!(
            "| {label} | {:.1} ms | {:.1} ms | {calls} |",
            ms(median),
            ms(p99)
        );
    }
    let mut provider = times
        .lock()
        .map_err(|_| anyhow::anyhow!("poisoned"))?
        .clone();
    let (median, _) = percentiles(&mut provider);
    println!(
        "\nthe fake provider's own time per model call: median {:.3} ms (included above)",
        ms(median)
    );
    containers.down("bench").await?;
    Ok(())
}

async fn turn(agent: &Agent, text: &str) -> anyhow::Result<()> {
    let summary = agent
        .turn(
            Inbound {
                key: SessionKey {
                    channel: "bench".into(),
                    conversation: "bench".into(),
                    workspace: "bench".into(),
                },
                presence: pincer::turn::Presence::Person,
                quoted: None,
                images: Vec::new(),
                // A fresh session each time keeps the context the same size.
                text: format!("/new {text}"),
                origin: None,
            },
            &|_| {},
            std::future::pending(),
        )
        .await?;
    anyhow::ensure!(
        summary.status == TurnStatus::Done,
        "turn failed: {:?}",
        summary.error
    );
    Ok(())
}

/// Answers instantly: a `bash` call when asked to use a tool (and no tool
/// result is in yet), else a short streamed answer.
async fn provider(State(times): State<ProviderTimes>, body: String) -> Response {
    let started = Instant::now();
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let wants_tool = messages
        .iter()
        .any(|m| m["role"] == "user" && m["content"].as_str().unwrap_or("").contains("tool"));
    let has_result = messages.iter().any(|m| m["role"] == "tool");
    let delta = if wants_tool && !has_result {
        json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
            "function": {"name": "bash", "arguments": "{\"command\": \"echo hi\"}"}}]})
    } else {
        json!({"role": "assistant", "content": "hi"})
    };
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "instant",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let usage = json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "instant",
        "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}});
    let finish = if wants_tool && !has_result {
        "tool_calls"
    } else {
        "stop"
    };
    let body = format!(
        "data: {}\n\ndata: {}\n\ndata: {}\n\ndata: [DONE]\n\n",
        chunk(delta, None),
        chunk(json!({}), Some(finish)),
        usage
    );
    if let Ok(mut times) = times.lock() {
        times.push(started.elapsed());
    }
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(body))
        .unwrap_or_default()
}

fn percentiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    if samples.is_empty() {
        return (Duration::ZERO, Duration::ZERO);
    }
    let at = |q: f64| samples[((samples.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
