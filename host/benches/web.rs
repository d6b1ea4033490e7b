//! The web console of the real `pincer start` over a full store, and how
//! fast a streamed reply reaches the chat page.
//!
//!     cargo bench -p pincer --bench web [-- REQUESTS TICKS]
//!
//! The store (`pincer.db`, written before the daemon starts, through the
//! stores' own schemas) holds 10,000 sessions over 10 workspaces and three
//! channels, three messages each, and 100,000 audit events. One signed-in
//! client asks each page REQUESTS times (default 200) in turn, one request
//! at a time, and the bench prints the time to the first byte of the
//! answer (the status line and headers: the page is rendered whole before
//! they are sent) at p50, p90 and p99, with the page's size.
//!
//! Then the chat: a message posted to `/chat` makes a turn in a warm
//! container whose model (a fake on loopback, OpenAI streaming) sends
//! TICKS pieces of text (default 40) 50 ms apart. The bench follows the
//! turn's feed (`/chat/feed/ID`, Server-Sent Events) and prints, per
//! piece, the time from the fake writing it to the feed's event holding
//! it: the gateway, the runner in the container, the host's turn loop, the
//! feed and the SSE stream, on one clock. The runner's own emission is
//! inside that path, so this bounds runner → browser from above.
//!
//! Needs Docker and builds the default image offline; loopback only;
//! removes the containers of its own pincer instance. The binary is
//! `PINCER_BENCH_BIN`, else the one cargo built with the bench.

#[path = "../../tests/e2e/support/daemon.rs"]
#[allow(dead_code)]
mod daemon;

#[path = "support/docker.rs"]
mod docker;

#[path = "support/proc_stats.rs"]
#[allow(dead_code)]
mod proc_stats;

use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use serde_json::json;

use proc_stats::arg;

const WORKSPACES: usize = 10;
const SESSIONS: usize = 10_000;
const AUDIT_ROWS: usize = 100_000;
const TICK_EVERY: Duration = Duration::from_millis(50);

fn main() -> anyhow::Result<()> {
    let requests = arg(1, 200) as usize;
    let ticks = arg(2, 40) as usize;
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(requests, ticks))
}

fn binary() -> String {
    std::env::var("PINCER_BENCH_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_pincer").to_owned())
}

fn pincer(root: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(binary())
        .args(["--config", &root.join("pincer.yaml").to_string_lossy()])
        .args(args)
        .env("PINCER_HOME", root.join("home"))
        .env_remove("PINCER_LOG")
        .output()?;
    if !out.status.success() {
        bail!(
            "pincer {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// When the fake model wrote each piece (`tick-N `), by N.
type Sent = Arc<Mutex<Vec<Option<Instant>>>>;

async fn run(requests: usize, ticks: usize) -> anyhow::Result<()> {
    let sent: Sent = Arc::new(Mutex::new(vec![None; ticks]));
    let model = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let model_at = model.local_addr()?;
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(provider))
        .with_state((sent.clone(), ticks));
    tokio::spawn(async move { axum::serve(model, app).await });

    let root = tempfile::tempdir()?;
    let web_at = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let mut yaml = format!(
        "gateway:\n  num_retries: 0\n  model_list:\n    - model_name: default\n      \
         litellm_params: {{model: openai/ticks, api_base: \"http://{model_at}/v1\", api_key: sk-bench}}\n\
         containers:\n  workspace_base_path: {}\nweb:\n  listen: \"{web_at}\"\nworkspaces:\n",
        root.path().join("ws").display()
    );
    for w in 0..WORKSPACES {
        yaml.push_str(&format!("  w{w:02}: {{}}\n"));
    }
    std::fs::write(root.path().join("pincer.yaml"), yaml)?;
    let home = root.path().join("home");
    std::fs::create_dir_all(&home)?;
    let filled = Instant::now();
    fill_store(&home)?;
    println!(
        "store: {SESSIONS} sessions ({} messages), {AUDIT_ROWS} audit events, written in {:.1} s",
        SESSIONS * 3,
        filled.elapsed().as_secs_f64()
    );
    pincer(root.path(), &["image", "build"])?;

    let mut command = Command::new(binary());
    command
        .args([
            "--config",
            &root.path().join("pincer.yaml").to_string_lossy(),
        ])
        .args(["start", "--listen", "127.0.0.1:0"])
        .env("PINCER_HOME", &home)
        .env_remove("PINCER_LOG");
    let _cleanup = docker::DockerCleanup { home: home.clone() };
    let mut daemon = daemon::Daemon::spawn(command, root.path().join("daemon.log"));
    daemon.wait_for_line("web console on");
    let result = measure(root.path(), web_at, requests, &sent).await;
    daemon.stop();
    result
}

async fn measure(
    root: &Path,
    web_at: std::net::SocketAddr,
    requests: usize,
    sent: &Sent,
) -> anyhow::Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let link = pincer(root, &["web", "login"])?;
    let signed_in = http.get(link.trim()).send().await?;
    let cookie = signed_in
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("the sign-in link set no cookie")?
        .to_owned();
    let url = |path: &str| format!("http://{web_at}{path}");
    let pages = [
        "/".to_owned(),
        "/chat?workspace=w00".to_owned(),
        "/sessions".to_owned(),
        "/sessions?workspace=w03&channel=slack".to_owned(),
        "/sessions?text=needle-4242".to_owned(),
        format!("/sessions/{}", SESSIONS / 2),
        "/approvals".to_owned(),
        "/schedules".to_owned(),
        "/workspaces".to_owned(),
        "/workspaces/w00".to_owned(),
        "/usage".to_owned(),
        "/audit".to_owned(),
        "/audit?workspace=w07&kind=egress.allowed".to_owned(),
        "/channels".to_owned(),
    ];
    println!(
        "\ntime to first byte, {requests} requests per page, one at a time (one signed-in client)\n"
    );
    println!("| page | p50 | p90 | p99 | size |");
    println!("|---|---|---|---|---|");
    for page in &pages {
        let mut samples = Vec::with_capacity(requests);
        let mut size = 0;
        for _ in 0..requests {
            let started = Instant::now();
            let response = http.get(url(page)).header("cookie", &cookie).send().await?;
            samples.push(started.elapsed());
            if response.status() != 200 {
                bail!("{page}: {}", response.status());
            }
            size = response.bytes().await?.len();
        }
        samples.sort();
        println!(
            "| `{page}` | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} KiB |",
            ms(at(&samples, 0.5)),
            ms(at(&samples, 0.9)),
            ms(at(&samples, 0.99)),
            size as f64 / 1024.0
        );
    }

    // The chat: a warm container first (the first turn starts it).
    let chat = http
        .get(url("/chat?workspace=w00"))
        .header("cookie", &cookie)
        .send()
        .await?
        .text()
        .await?;
    let csrf = chat
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .context("no CSRF field on /chat")?
        .to_owned();
    let origin = format!("http://{web_at}");
    let mut latencies = Vec::new();
    for round in 0..2 {
        if let Ok(mut sent) = sent.lock() {
            sent.iter_mut().for_each(|t| *t = None);
        }
        let posted = http
            .post(url("/chat"))
            .header("cookie", &cookie)
            .header("origin", &origin)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(
                url::form_urlencoded::Serializer::new(String::new())
                    .append_pair("csrf", &csrf)
                    .append_pair("workspace", "w00")
                    .append_pair("text", "count for me")
                    .finish(),
            )
            .send()
            .await?;
        let back = posted
            .headers()
            .get("location")
            .and_then(|v| v.to_str().ok())
            .context("POST /chat did not redirect")?
            .to_owned();
        let feed = back
            .split("feed=")
            .nth(1)
            .context("no feed in the redirect")?
            .to_owned();
        let mut stream = http
            .get(url(&format!("/chat/feed/{feed}")))
            .header("cookie", &cookie)
            .send()
            .await?;
        let mut seen = 0usize;
        let mut text = String::new();
        let deadline = Instant::now() + Duration::from_secs(120);
        while !text.contains("event: end") {
            let chunk = tokio::time::timeout_at(deadline.into(), stream.chunk())
                .await
                .context("the turn did not end within 120 s")??
                .context("the feed closed before the turn ended")?;
            let arrived = Instant::now();
            text.push_str(&String::from_utf8_lossy(&chunk));
            while text.contains(&format!("tick-{seen} ")) {
                if round == 1 {
                    let wrote = sent
                        .lock()
                        .ok()
                        .and_then(|s| s.get(seen).copied().flatten());
                    if let Some(wrote) = wrote {
                        latencies.push(arrived.duration_since(wrote));
                    }
                }
                seen += 1;
            }
        }
    }
    latencies.sort();
    if latencies.is_empty() {
        bail!("no piece of the reply reached the feed");
    }
    println!(
        "\nchat: a streamed piece from the model's write to the feed's SSE event, {} pieces \
         (second turn, warm container)\n",
        latencies.len()
    );
    println!("| p50 | p90 | p99 | max |");
    println!("|---|---|---|---|");
    println!(
        "| {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms |",
        ms(at(&latencies, 0.5)),
        ms(at(&latencies, 0.9)),
        ms(at(&latencies, 0.99)),
        ms(at(&latencies, 1.0)),
    );
    Ok(())
}

/// Writes the sessions and audit events into `home/pincer.db`, after the
/// stores created their tables.
fn fill_store(home: &Path) -> anyhow::Result<()> {
    let database = home.join(pincer::db::FILE_NAME);
    drop(pincer::sessions::SessionStore::open(home)?);
    drop(pincer::audit::AuditLog::open(&database)?);
    let mut conn = rusqlite::Connection::open(&database)?;
    let tx = conn.transaction()?;
    let now = pincer::db::now_ms();
    let channels = ["slack", "cli", "web"];
    for n in 0..SESSIONS {
        let workspace = format!("w{:02}", n % WORKSPACES);
        let channel = channels[n % channels.len()];
        let created = now - ((SESSIONS - n) as i64) * 60_000;
        tx.execute(
            "INSERT INTO sessions (id, channel, conversation, workspace, created_ms, closed_ms)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![
                n as i64 + 1,
                channel,
                format!("C{n:05}"),
                workspace,
                created,
                created + 30_000
            ],
        )?;
        let turn = format!("turn-{n}");
        tx.execute(
            "INSERT INTO turns (id, session_id, status, started_ms, ended_ms, steps)
             VALUES (?1, ?2, 'done', ?3, ?4, 2)",
            rusqlite::params![turn, n as i64 + 1, created, created + 2_000],
        )?;
        let messages = [
            json!({"role": "user", "content": format!("what is on the agenda for needle-{n}?")}),
            json!({"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "bash", "arguments": "{\"command\":\"cat agenda.md\"}"}}]}),
            json!({"role": "assistant", "content": "The stand-up at 10, then the design review."}),
        ];
        for message in messages {
            tx.execute(
                "INSERT INTO session_messages (session_id, turn_id, role, message, created_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5)",
                rusqlite::params![
                    n as i64 + 1,
                    turn,
                    message["role"].as_str().unwrap_or("user"),
                    message.to_string(),
                    created + 1_000
                ],
            )?;
        }
    }
    let kinds = [
        "egress.allowed",
        "approval.requested",
        "approval.granted",
        "container.started",
        "schedule.fired",
    ];
    for n in 0..AUDIT_ROWS {
        tx.execute(
            "INSERT INTO audit_events (timestamp_ms, actor, workspace, kind, detail)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            rusqlite::params![
                now - ((AUDIT_ROWS - n) as i64) * 1_000,
                if n % 7 == 0 { "cli" } else { "host" },
                format!("w{:02}", n % WORKSPACES),
                kinds[n % kinds.len()],
                format!(
                    "event {n}: GET pypi.org:443 → 151.101.0.223:443, 5120 bytes up, 80 KiB down"
                ),
            ],
        )?;
    }
    tx.commit()?;
    Ok(())
}

/// The fake model: streams `tick-0 ` … `tick-N ` one piece every
/// [`TICK_EVERY`], noting when it wrote each.
async fn provider(State((sent, ticks)): State<(Sent, usize)>) -> Response {
    let chunk = |delta: serde_json::Value, finish: Option<&str>| {
        let body = json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "ticks",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {body}\n\n")
    };
    let stream = ticking(sent, ticks, chunk);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap_or_default()
}

fn ticking(
    sent: Sent,
    ticks: usize,
    chunk: impl Fn(serde_json::Value, Option<&str>) -> String + Send + 'static,
) -> impl futures_util::Stream<Item = Result<String, std::io::Error>> {
    futures_util::stream::unfold(0usize, move |n| {
        let sent = sent.clone();
        let piece = if n < ticks {
            Some(chunk(
                json!({"role": "assistant", "content": format!("tick-{n} ")}),
                None,
            ))
        } else if n == ticks {
            Some(format!(
                "{}data: {}\n\ndata: [DONE]\n\n",
                chunk(json!({}), Some("stop")),
                json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "ticks",
                    "choices": [], "usage": {"prompt_tokens": 50, "completion_tokens": ticks, "total_tokens": 50 + ticks}})
            ))
        } else {
            None
        };
        async move {
            let piece = piece?;
            if n > 0 {
                tokio::time::sleep(TICK_EVERY).await;
            }
            if n < ticks
                && let Ok(mut sent) = sent.lock()
            {
                sent[n] = Some(Instant::now());
            }
            Some((Ok(piece), n + 1))
        }
    })
}

fn at(samples: &[Duration], q: f64) -> Duration {
    samples[((samples.len() - 1) as f64 * q).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
