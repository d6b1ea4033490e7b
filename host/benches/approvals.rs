//! What an approval costs the host, on Slack: the real `pincer start`
//! daemon with its `channel-slack` component, the fake Slack
//! (`tests/python/fake_slack.py`, Socket Mode), a warm workspace container
//! and an instant fake model that asks for `bash: true` once per turn.
//!
//!     cargo bench -p pincer --bench approvals [-- N]
//!
//! N turns (default and at most 19: with the warm-up, the 20 requests a
//! workspace may ask a minute), each in a DM of its own person (a message
//! and a click count against their sender's rate as any message does),
//! each approved once by a click.
//! Per turn, on one wall clock (the bench and the fake run on this machine):
//!
//! - **request → posted**: from the fake model's answer with the tool call
//!   (the last byte written) to the fake Slack receiving the
//!   `chat.postMessage` with the request's buttons. Host work: the runner
//!   reading the answer and sending its check, judging it, storing the
//!   request, queueing it, the outbox, the plugin's Block Kit and the Web
//!   API call. The runner's share (parsing one small stream) is in it.
//! - **click → update**: from pushing the click's `interactive` envelope to
//!   the fake Slack receiving the `chat.update` that shows the decision:
//!   the socket, the plugin, the decision in `pincer.db`, waking the turn,
//!   the outbox and the plugin again.
//! - **click → tool ran**: from the push to the model's next request, which
//!   carries the tool's result: the same path to the turn, the verdict to
//!   the runner, `true` run in the container, and the runner's next model
//!   call through the gateway.
//!
//! The fake Slack's own time per Web API call (from receiving it to its
//! answer, Block Kit validation by slack_sdk included) is printed beside
//! them; it is outside the first two, which end when the call arrives.
//!
//! Needs Docker, the default image (built if missing) and a python with
//! `tests/python/requirements.txt` (`PINCER_TEST_PYTHON`, else `python3`).
//! Loopback only; removes the containers of its own pincer instance.

#[path = "support/docker.rs"]
mod docker;
#[path = "support/slack_daemon.rs"]
mod slack_daemon;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::response::Response;
use axum::routing::post;
use docker::DockerCleanup;
use serde_json::{Value, json};
use slack_daemon::{FakeSlack, Scratch, quantile, serve, start_daemon, unix_now};

/// The person (and DM) of turn `n`.
fn person(n: usize) -> (String, String) {
    (format!("U0BENCH{n:02}"), format!("D0BENCH{n:02}"))
}

fn main() -> anyhow::Result<()> {
    let turns = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map(|a| a.parse::<usize>().context("N: a number of turns"))
        .transpose()?
        .unwrap_or(19);
    // Turn 0 warms up; a workspace may ask 20 approvals a minute.
    if turns + 1 > pincer::approvals::MAX_REQUESTS_PER_WINDOW {
        bail!(
            "N at most {}: a workspace asks at most {} approvals a minute",
            pincer::approvals::MAX_REQUESTS_PER_WINDOW - 1,
            pincer::approvals::MAX_REQUESTS_PER_WINDOW
        );
    }
    // The fake Slack's client (reqwest) needs rustls's process-wide provider.
    let _ = rustls::crypto::ring::default_provider().install_default();
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run(turns))
}

/// One request to the fake model: when it arrived, when its answer was
/// written, and whether it carried a tool's result.
#[derive(Clone, Copy)]
struct ModelCall {
    arrived: f64,
    answered: f64,
    after_tool: bool,
}

type ModelLog = Arc<Mutex<Vec<ModelCall>>>;

/// Asks for `bash: true` after a user message, answers "done" after the
/// tool's result; streamed as OpenAI does.
async fn model(State(log): State<ModelLog>, body: String) -> Response {
    let arrived = unix_now();
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let after_tool = request["messages"]
        .as_array()
        .and_then(|ms| ms.last())
        .is_some_and(|m| m["role"] == "tool");
    let chunk = |delta: Value, finish: Option<&str>| {
        json!({"id": "x", "object": "chat.completion.chunk", "created": 0, "model": "instant",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let events = if after_tool {
        vec![
            chunk(json!({"role": "assistant", "content": "done"}), None),
            chunk(json!({}), Some("stop")),
        ]
    } else {
        vec![
            chunk(
                json!({"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1",
                    "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"true\"}"}}]}),
                None,
            ),
            chunk(json!({}), Some("tool_calls")),
        ]
    };
    let usage = json!({"id": "x", "object": "chat.completion.chunk", "created": 0,
        "model": "instant", "choices": [],
        "usage": {"prompt_tokens": 50, "completion_tokens": 5, "total_tokens": 55}});
    let mut text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    text.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    let response = Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from(text))
        .unwrap_or_default();
    if let Ok(mut log) = log.lock() {
        log.push(ModelCall {
            arrived,
            answered: unix_now(),
            after_tool,
        });
    }
    response
}

fn config_yaml(model: &str, base: &std::path::Path, api: &str) -> String {
    format!(
        "gateway:\n  num_retries: 0\n  model_list:\n    - model_name: default\n      \
         litellm_params: {{model: openai/instant, api_base: \"{model}\", api_key: sk-bench}}\n\
         containers:\n  workspace_base_path: {}\n\
         workspaces:\n  team: {{approvals: {{tier: approval}}}}\n\
         channels:\n  slack:\n    plugin: channel-slack\n    workspace: team\n    \
         allowed_senders: [\"*\"]\n    http: [\"127.0.0.1:*\"]\n    config:\n      \
         bot_token: \"${{SLACK_BOT_TOKEN}}\"\n      app_token: \"${{SLACK_APP_TOKEN}}\"\n      \
         api_base: \"{api}\"\n      working_reaction: \"\"\n",
        base.display()
    )
}

/// The `n`-th successful call of `method` (0-based), waiting up to a minute.
async fn nth_call(slack: &FakeSlack, method: &str, n: usize) -> anyhow::Result<Value> {
    let (status, _) = slack
        .get(&format!(
            "/wait?what=calls&method={method}&count={}&timeout=60",
            n + 1
        ))
        .await?;
    let (_, calls) = slack.get(&format!("/calls?method={method}")).await?;
    let calls: Vec<Value> = calls["calls"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c["response"]["ok"] == true)
        .collect();
    if status != 200 || calls.len() <= n {
        bail!("waited for {method} #{}: {calls:#?}", n + 1);
    }
    Ok(calls[n].clone())
}

/// Waits until the fake model has answered `count` requests.
async fn model_calls(models: &ModelLog, count: usize) -> anyhow::Result<Vec<ModelCall>> {
    for _ in 0..600 {
        let seen = models.lock().map(|m| m.clone()).unwrap_or_default();
        if seen.len() >= count {
            return Ok(seen);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    bail!("the model got fewer than {count} requests")
}

fn row(label: &str, values: &mut [f64]) {
    values.sort_by(f64::total_cmp);
    println!(
        "{label:<22} p50 {:>7.2} ms   p90 {:>7.2} ms   max {:>7.2} ms   (n={})",
        quantile(values, 0.5),
        quantile(values, 0.9),
        values.last().copied().unwrap_or(f64::NAN),
        values.len()
    );
}

async fn run(turns: usize) -> anyhow::Result<()> {
    let scratch = Scratch::new()?;
    let _cleanup = DockerCleanup {
        home: scratch.home.clone(),
    };
    let models: ModelLog = Arc::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(model))
        .with_state(models.clone());
    let model_base = format!("{}/v1", serve(app).await?);
    let slack = FakeSlack::start(&scratch.dir.path().join("fake_slack.log"))?;
    let config = scratch.work.join("pincer.yaml");
    std::fs::write(
        &config,
        config_yaml(&model_base, &scratch.base, &slack.api_base),
    )?;
    let log = scratch.dir.path().join("daemon.log");
    let mut daemon = start_daemon(&config, &scratch.home, &scratch.work, &slack, &log).await?;

    let (mut asked, mut updated, mut ran, mut fake) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // Turn 0 starts the container and is not counted.
    for turn in 0..=turns {
        let posted_before = turn * 2;
        let (user, dm) = person(turn);
        slack
            .post(
                "/socket/push",
                &json!({"kind": "dm", "text": format!("turn {turn}"), "user": user, "channel": dm}),
            )
            .await?;
        let request = nth_call(&slack, "chat.postMessage", posted_before).await?;
        let calls = model_calls(&models, turn * 2 + 1).await?;
        let tool_call = calls[turn * 2];
        let action = request["args"]["blocks"][1]["elements"][0]["action_id"]
            .as_str()
            .with_context(|| format!("no button on the request: {request:#}"))?
            .to_string();
        let ts = request["response"]["ts"]
            .as_str()
            .context("ts")?
            .to_string();
        let clicked = unix_now();
        slack
            .post(
                "/socket/push",
                &json!({"kind": "interactive", "action_id": action, "ts": ts, "user": user,
                        "channel": dm}),
            )
            .await?;
        let update = nth_call(&slack, "chat.update", turn).await?;
        let calls = model_calls(&models, turn * 2 + 2).await?;
        let after = calls[turn * 2 + 1];
        if !after.after_tool {
            bail!("the model's request after the click carried no tool result");
        }
        // The reply, so the next turn starts on a quiet session.
        nth_call(&slack, "chat.postMessage", posted_before + 1).await?;
        if turn == 0 {
            continue;
        }
        let received = |call: &Value| call["received_at"].as_f64().unwrap_or(f64::NAN);
        asked.push((received(&request) - tool_call.answered) * 1000.0);
        updated.push((received(&update) - clicked) * 1000.0);
        ran.push((after.arrived - clicked) * 1000.0);
        for call in [&request, &update] {
            fake.push((call["answered_at"].as_f64().unwrap_or(f64::NAN) - received(call)) * 1000.0);
        }
    }
    println!("approvals on Slack, {turns} turns (host and runner; fake model instant):");
    row("request → posted", &mut asked);
    row("click → update", &mut updated);
    row("click → tool ran", &mut ran);
    row("fake Slack per call", &mut fake);
    daemon.stop()?;
    Ok(())
}
