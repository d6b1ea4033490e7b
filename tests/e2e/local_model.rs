//! The `local/` provider end to end: the real `pincer gateway serve` running
//! SmolLM2-135M-Instruct in-process, driven by the official `openai` Python
//! client and plain HTTP.
//!
//! The model comes through the same fetch code as `pincer model fetch`
//! (`support::models`).

use crate::support;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use pincer::gateway::model_fetch::SMOLLM2;
use serde_json::{Value, json};
use support::gateway::{Served, python};

/// The verified SmolLM2 file, fetched once per machine.
fn shared_model() -> PathBuf {
    support::models::shared(&SMOLLM2)
}

/// A gateway whose `PINCER_HOME/models` holds the model, with `model_list`
/// (the YAML list body) and a key for workspace `main`.
fn serve(model_list: &str) -> (Served, String) {
    let served = Served::start(
        &format!("gateway:\n  model_list:\n{model_list}workspaces:\n  main: {{}}\n"),
        &[],
    );
    support::models::install(&SMOLLM2, &served.sandbox.home());
    let key = served.key("main");
    (served, key)
}

fn entry(alias: &str, model: &str) -> String {
    format!("    - model_name: {alias}\n      litellm_params: {{model: \"{model}\"}}\n")
}

async fn post(base: &str, key: &str, body: Value) -> (u16, Value) {
    let response = pincer::gateway::default_client()
        .unwrap()
        .post(format!("{base}/v1/chat/completions"))
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .expect("gateway answers");
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn ask(model: &str, question: &str, max_tokens: u32) -> Value {
    json!({
        "model": model,
        "messages": [{"role": "user", "content": question}],
        "temperature": 0,
        "max_tokens": max_tokens,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_client_streams_an_answer_from_local_smollm2() {
    let (served, key) = serve(&entry("local", "local/smollm2"));
    let out = tokio::process::Command::new(python())
        .args([
            support::gateway::python_script("local_model_client.py")
                .to_str()
                .unwrap(),
            &served.base,
            &key,
            "local",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "python client failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        served.log()
    );
    let got: Value = serde_json::from_slice(&out.stdout).unwrap();
    let streamed = got["stream"]["text"].as_str().unwrap();
    assert!(streamed.contains("Paris"), "{got}");
    assert!(got["stream"]["chunks"].as_u64().unwrap() > 1, "{got}");
    assert_eq!(got["stream"]["finish"], "stop", "{got}");
    let usage = &got["stream"]["usage"];
    assert!(usage[0].as_u64().unwrap() > 10, "{got}");
    assert!(usage[1].as_u64().unwrap() > 0, "{got}");
    // Greedy decoding: the same answer streamed or not.
    assert_eq!(got["complete"]["text"], got["stream"]["text"], "{got}");
    assert_eq!(got["complete"]["usage"], *usage, "{got}");
    assert_eq!(got["complete"]["model"], "local");
    assert_eq!(
        got["short"],
        json!({"finish": "length", "completion_tokens": 3})
    );
    let stopped = got["stopped"]["text"].as_str().unwrap();
    assert!(!stopped.contains("Paris"), "{got}");
    assert!(streamed.starts_with(stopped), "{got}");
    assert_eq!(got["stopped"]["finish"], "stop");
    // Local models are free, and their calls are counted.
    let listed = |usage: &str| {
        usage
            .lines()
            .any(|l| l.starts_with("main") && l.contains("local"))
    };
    let usage = served.usage_showing(&[], listed);
    assert!(listed(&usage), "{usage}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_model_files_get_clear_errors_and_the_gateway_keeps_serving() {
    let files = tempfile::tempdir().unwrap();
    let missing = files.path().join("missing.gguf");
    let truncated = files.path().join("truncated.gguf");
    let text = files.path().join("notes.gguf");
    let model = shared_model();
    let bytes = std::fs::read(&model).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    std::fs::write(&text, "just some notes, not a model\n").unwrap();
    let list = [
        entry("missing", &format!("local/{}", missing.display())),
        entry("truncated", &format!("local/{}", truncated.display())),
        entry("text", &format!("local/{}", text.display())),
        entry("unfetched", "local/other-model"),
        entry("good", "local/smollm2"),
    ]
    .concat();
    let (served, key) = serve(&list);
    let cases = [
        ("missing", missing.display().to_string(), "does not exist"),
        ("truncated", truncated.display().to_string(), "truncated"),
        ("text", text.display().to_string(), "not a GGUF file"),
        ("unfetched", "other-model.gguf".to_owned(), "does not exist"),
    ];
    for (alias, path, what) in cases {
        for _ in 0..2 {
            let (status, body) = post(&served.base, &key, ask(alias, "hi", 4)).await;
            assert_eq!(status, 500, "{alias}: {body}");
            let message = body["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains(&path), "{alias}: {message}");
            assert!(message.contains(what), "{alias}: {message}");
            assert!(
                message.contains("litellm_params.model") || message.contains("pincer model fetch"),
                "{alias} names no fix: {message}"
            );
            assert_eq!(body["error"]["code"], "local_model_unavailable");
        }
    }
    // The gateway still serves the good model.
    let (status, body) = post(
        &served.base,
        &key,
        ask(
            "good",
            "What is the capital of France? Answer in one sentence.",
            24,
        ),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(
        body["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("Paris"),
        "{body}"
    );

    // Without a fetched model, the error says how to get it.
    let fresh = Served::start(
        &format!(
            "gateway:\n  model_list:\n{}workspaces:\n  main: {{}}\n",
            entry("local", "local/smollm2")
        ),
        &[],
    );
    let fresh_key = fresh.key("main");
    let (status, body) = post(&fresh.base, &fresh_key, ask("local", "hi", 4)).await;
    assert_eq!(status, 500, "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("pincer model fetch smollm2") && message.contains(SMOLLM2.file_name),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_requests_than_the_queue_holds_get_a_clear_busy_error() {
    let (served, key) = serve(&entry("local", "local/smollm2"));
    let story = json!({
        "model": "local",
        "messages": [{"role": "user", "content": "Write a long story about a dragon."}],
        "temperature": 0.7,
        "seed": 1,
        // Long enough that all eight arrive while the first still runs.
        "max_tokens": 40,
    });
    // One generation runs and four wait; the rest must be refused at once.
    let calls = (0..8).map(|_| post(&served.base, &key, story.clone()));
    let results = futures_util::future::join_all(calls).await;
    let busy: Vec<&Value> = results
        .iter()
        .filter(|(status, _)| *status == 429)
        .map(|(_, body)| body)
        .collect();
    let answered = results.iter().filter(|(status, _)| *status == 200).count();
    assert_eq!(busy.len(), 3, "{results:?}");
    assert_eq!(answered, 5, "{results:?}");
    for body in busy {
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains("busy"), "{message}");
        assert_eq!(body["error"]["code"], "rate_limit_exceeded");
    }
    let (status, _) = post(&served.base, &key, ask("local", "hi", 2)).await;
    assert_eq!(status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_stream_stops_its_generation() {
    let (served, key) = serve(&entry("local", "local/smollm2"));
    let client = pincer::gateway::default_client().unwrap();
    let long = json!({
        "model": "local",
        "messages": [{"role": "user", "content": "Count from 1 to 5000, one number per line."}],
        "temperature": 0,
        "max_tokens": 4000,
        "stream": true,
    });
    let response = client
        .post(format!("{}/v1/chat/completions", served.base))
        .bearer_auth(&key)
        .json(&long)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut body = response.bytes_stream();
    let mut seen = 0;
    while seen < 3 {
        let chunk = body.next().await.expect("chunks").unwrap();
        seen += chunk.iter().filter(|b| **b == b'\n').count();
    }
    drop(body);
    // With one generation slot, this waits for the dropped one to stop.
    let started = Instant::now();
    let (status, answer) = post(&served.base, &key, ask("local", "hi", 2)).await;
    assert_eq!(status, 200, "{answer}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the dropped generation kept the slot for {:?}",
        started.elapsed()
    );
}

#[test]
fn the_tokenizer_matches_llama_cpp_on_the_real_vocabulary() {
    let model = pincer::gateway::LocalModel::load(&shared_model(), None).unwrap();
    // Token ids from llama-cpp-python 0.3.36 (`Llama.tokenize(text,
    // add_bos=False, special=True)`) on the same file.
    for (text, expected) in TOKENIZER_REFERENCE {
        assert_eq!(model.tokenizer.encode(text), *expected, "{text:?}");
        if !text.contains("<|") {
            assert_eq!(model.tokenizer.decode(expected), *text);
        }
    }
}

const TOKENIZER_REFERENCE: &[(&str, &[u32])] = &[
    (
        "What is the capital of France?",
        &[1780, 314, 260, 3575, 282, 4649, 47],
    ),
    (
        "Hello, world! It's 2024.  Numbers: 12345 and 3.14159",
        &[
            19556, 28, 905, 17, 657, 506, 216, 34, 32, 34, 36, 30, 216, 20254, 42, 216, 33, 34, 35,
            36, 37, 284, 216, 35, 30, 33, 36, 33, 37, 41,
        ],
    ),
    (
        "<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
        &[1, 4093, 198, 26843, 665, 2, 198, 1, 520, 9531, 198],
    ),
    (
        "  leading spaces\n\n\ttabs and\r\nnewlines  ",
        &[
            216, 2899, 5600, 1116, 197, 100, 7366, 284, 201, 198, 2241, 5110, 256,
        ],
    ),
    (
        "Ünïcödé café naïve 日本語 — émojis 🙂👍 don't won't I'm we'll they've",
        &[
            142, 246, 94, 25972, 83, 7466, 84, 2756, 37366, 15486, 46494, 17097, 241, 115, 40993,
            179, 120, 248, 1841, 26411, 15771, 90, 271, 47526, 10813, 235, 231, 1326, 982, 3763,
            982, 339, 5248, 392, 3060, 502, 3543,
        ],
    ),
    (
        "def f(x):\n    return x**2 + 1  # comment",
        &[
            1604, 275, 24, 104, 727, 472, 1003, 1792, 828, 34, 1232, 216, 33, 216, 907, 5189,
        ],
    ),
];

/// The README's main job with the built-in defaults and no provider key:
/// a real agent turn in the default workspace's container, answered by the
/// local model through the gateway.
#[test]
fn the_main_job_answers_offline_with_the_built_in_defaults() {
    let sandbox = support::Sandbox::new();
    let _cleanup = support::DockerCleanup {
        home: sandbox.home(),
        label: support::unique(),
    };
    support::models::install(&SMOLLM2, &sandbox.home());
    let run = |args: &[&str]| {
        crate::support::pincer_command()
            .args(args)
            .current_dir(sandbox.work())
            .env("PINCER_HOME", sandbox.home())
            .env("HOME", sandbox.dir.path())
            .env_remove("PINCER_CONFIG")
            .env_remove("OPENAI_API_KEY")
            .env_remove("ANTHROPIC_API_KEY")
            .output()
            .unwrap()
    };
    support::ok(run(&["image", "build"]));
    let reply = support::ok(run(&[
        "message",
        "--text",
        "What is the capital of France? Answer in one sentence.",
    ]));
    assert!(reply.contains("Paris"), "{reply}");
}
