//! Long-term memory end to end: the `pincer memory` CLI on a real
//! `PINCER_HOME`, and the `memory__*` MCP tools through the real
//! `pincer gateway serve`, driven by the official `mcp` Python client.

use crate::support;

use serde_json::Value;
use support::gateway::{Served, python_client};
use support::{Sandbox, fails, ok};

const CONFIG: &str = "workspaces:
  default: {}
  research: {}
  quiet:
    memory: {enabled: false}
";

fn sandbox() -> (Sandbox, String) {
    let sandbox = Sandbox::new();
    let config = sandbox.write("pincer.yaml", CONFIG);
    (sandbox, config.display().to_string())
}

#[test]
fn cli_adds_searches_lists_and_forgets() {
    let (sandbox, config) = sandbox();
    let pincer = |args: &[&str]| {
        let mut all = vec!["--config", config.as_str(), "memory"];
        all.extend_from_slice(args);
        sandbox.pincer(&all)
    };

    let seat = ok(pincer(&[
        "add",
        "--kind",
        "preference",
        "用户喜欢靠窗的座位",
    ]));
    let seat: i64 = seat.trim().parse().expect("add prints the id");
    let deploy = ok(pincer(&[
        "add",
        "--workspace",
        "research",
        "--kind",
        "procedure",
        "Deploy",
        "with",
        "cargo",
        "dist",
    ]));
    let deploy: i64 = deploy.trim().parse().expect("id");
    assert_ne!(seat, deploy);
    // The same text again: the same memory.
    assert_eq!(
        ok(pincer(&[
            "add",
            "--kind",
            "preference",
            "用户喜欢靠窗的座位"
        ]))
        .trim(),
        seat.to_string()
    );

    let text = ok(pincer(&["search", "座位偏好"]));
    assert!(text.contains("用户喜欢靠窗的座位"), "{text}");
    assert!(text.contains("preference"), "{text}");
    let json: Value =
        serde_json::from_str(&ok(pincer(&["search", "--json", "座位偏好"]))).expect("JSON");
    assert_eq!(json[0]["memory"]["id"], seat, "{json}");
    assert_eq!(json[0]["matched_by"], "index", "{json}");
    assert_eq!(json[0]["memory"]["kind"], "preference", "{json}");
    // Workspaces are isolated.
    assert_eq!(
        ok(pincer(&["search", "cargo dist"])).trim(),
        "no memories match"
    );
    let json: Value = serde_json::from_str(&ok(pincer(&[
        "search",
        "--workspace",
        "research",
        "--json",
        "--limit",
        "1",
        "DEPLOY",
    ])))
    .expect("JSON");
    assert_eq!(json.as_array().map(Vec::len), Some(1), "{json}");
    assert_eq!(json[0]["memory"]["id"], deploy, "{json}");

    let listed: Value = serde_json::from_str(&ok(pincer(&["list", "--json"]))).expect("JSON");
    assert_eq!(listed.as_array().map(Vec::len), Some(1), "{listed}");
    assert_eq!(listed[0]["text"], "用户喜欢靠窗的座位");
    assert!(ok(pincer(&["list", "--workspace", "research"])).contains("Deploy with cargo dist"));

    // Forgetting it in the wrong workspace fails; in its own it works once.
    let err = fails(pincer(&[
        "forget",
        "--workspace",
        "research",
        &seat.to_string(),
    ]));
    assert!(
        err.contains(&format!("workspace research has no memory #{seat}")),
        "{err}"
    );
    assert!(ok(pincer(&["forget", &seat.to_string()])).contains(&format!("forgot memory #{seat}")));
    let err = fails(pincer(&["forget", &seat.to_string()]));
    assert!(err.contains("no memory"), "{err}");
    assert_eq!(ok(pincer(&["search", "座位"])).trim(), "no memories match");
    assert!(ok(pincer(&["list"])).contains("no memories in workspace default"));
}

/// `memory search --explain` says why each result ranked where it did.
#[test]
fn search_explain_shows_each_list_rank_and_the_terms_held() {
    let (sandbox, config) = sandbox();
    let pincer = |args: &[&str]| {
        let mut all = vec!["--config", config.as_str(), "memory"];
        all.extend_from_slice(args);
        sandbox.pincer(&all)
    };
    let weekly = ok(pincer(&["add", "The weekly meetings are on Tuesday"]));
    ok(pincer(&["add", "Lunch is at noon on Tuesday"]));
    let out = ok(pincer(&[
        "search",
        "--explain",
        "when is the weekly meeting",
    ]));
    assert!(out.contains("query words:    weekly meeting"), "{out}");
    assert!(
        out.contains(&format!(
            "1. #{} [fact] The weekly meetings are on Tuesday",
            weekly.trim()
        )),
        "{out}"
    );
    assert!(out.contains("word list:    #1 (holds weekly)"), "{out}");
    assert!(out.contains("variant list: #1 (holds"), "{out}");
    assert!(
        out.contains("meet"),
        "the English stem matched `meetings`: {out}"
    );
    assert!(out.contains("recency and use +0.0"), "{out}");
    let json: serde_json::Value = serde_json::from_str(&ok(pincer(&[
        "search",
        "--explain",
        "--json",
        "weekly meeting",
    ])))
    .expect("JSON");
    assert_eq!(json[0]["memory"]["id"].to_string(), weekly.trim());
    assert_eq!(json[0]["why"]["word_rank"], 1);
    assert!(
        json[0]["why"]["words"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w == "weekly")
    );
}

#[test]
fn cli_refuses_unknown_workspaces_and_bad_input_clearly() {
    let (sandbox, config) = sandbox();
    let pincer = |args: &[&str]| {
        let mut all = vec!["--config", config.as_str(), "memory"];
        all.extend_from_slice(args);
        sandbox.pincer(&all)
    };
    let err = fails(pincer(&["list", "--workspace", "reserch"]));
    assert!(
        err.contains("no workspace named `reserch`, did you mean `research`? (configured: default, quiet, research)"),
        "{err}"
    );
    let err = fails(pincer(&["add", "--workspace", "zzz", "x"]));
    assert!(
        err.contains("configured: default, quiet, research"),
        "{err}"
    );
    assert!(!err.contains("did you mean"), "{err}");
    let err = fails(pincer(&["add", "   "]));
    assert!(err.contains("a memory cannot be empty"), "{err}");
    let long = "x".repeat(9000);
    let err = fails(pincer(&["add", &long]));
    assert!(err.contains("at most 8192 bytes"), "{err}");
    let err = fails(pincer(&["add", "--kind", "opinion", "x"]));
    assert!(err.contains("opinion"), "{err}");
    let err = fails(pincer(&["forget", "not-a-number"]));
    assert!(err.contains("invalid value"), "{err}");
}

/// The official `mcp` client's memory round trip on `/mcp` with `key`.
fn client(served: &Served, key: &str) -> Value {
    python_client("memory_client.py", &[&format!("{}/mcp", served.base), key])
}

fn text(step: &Value) -> &str {
    assert_eq!(step["ok"], true, "{step}");
    step["text"].as_str().unwrap_or_default()
}

fn error(step: &Value) -> &str {
    assert_eq!(step["ok"], false, "{step}");
    step["error"].as_str().unwrap_or_default()
}

#[test]
fn official_mcp_client_memorizes_recalls_and_forgets() {
    let served = Served::start(CONFIG, &[]);
    let out = client(&served, &served.key("default"));
    assert_eq!(
        out["tools"],
        serde_json::json!(["memory__forget", "memory__memorize", "memory__recall"]),
        "{out}"
    );
    let schema = &out["schemas"]["memory__memorize"];
    assert_eq!(schema["required"], serde_json::json!(["text"]), "{schema}");
    assert_eq!(
        schema["properties"]["kind"]["enum"],
        serde_json::json!(["fact", "preference", "procedure"])
    );

    let id = out["id"].as_i64().expect("memorize reported an id");
    assert!(text(&out["memorize"]).starts_with(&format!("memorized #{id} [preference]")));
    assert_eq!(
        text(&out["recall"]),
        format!("1. #{id} [preference] 用户喜欢靠窗的座位"),
        "{out}"
    );
    assert_eq!(text(&out["forget"]), format!("forgot memory #{id}"));
    assert!(error(&out["forget_again"]).contains(&format!("no memory #{id}")));
    assert_eq!(text(&out["recall_after"]), "no memories match");
    assert!(
        error(&out["bad_args"]).contains("missing field `query`"),
        "{out}"
    );

    // What the agent memorized is the same store the CLI reads.
    let listed = ok(served.cli(&["memory", "list"]));
    assert!(
        listed.contains("Deploys go through GitHub Actions"),
        "{listed}"
    );
    assert!(!listed.contains("靠窗"), "{listed}");

    let expected = [
        "memory__memorize: ok",
        "memory__recall: ok",
        "memory__forget: ok",
        "memory__forget: tool error",
    ];
    let calls = served.audited_showing("default", "gateway.tool_call", |d| {
        expected.iter().all(|e| d.iter().any(|d| d == e))
    });
    for expected in expected {
        assert!(calls.iter().any(|d| d == expected), "{expected}: {calls:?}");
    }
}

#[test]
fn a_workspace_with_memory_disabled_is_refused_memory_tools() {
    let served = Served::start(CONFIG, &[]);
    // Something to find, had the tools been reachable.
    ok(served.cli(&[
        "memory",
        "add",
        "--workspace",
        "quiet",
        "用户喜欢靠窗的座位",
    ]));
    let out = client(&served, &served.key("quiet"));
    assert_eq!(out["tools"], serde_json::json!([]), "{out}");
    for step in ["memorize", "recall", "forget", "recall_after"] {
        let refused = error(&out[step]);
        assert!(
            refused.contains("not available to workspace `quiet`"),
            "{step}: {refused}"
        );
    }
    let denied = served.audited_showing("quiet", "gateway.denied", |d| {
        d.iter().any(|d| d.contains("memory__recall"))
    });
    assert!(
        denied.iter().any(|d| d.contains("memory__recall")),
        "{denied:?}"
    );
    // Nothing was written or forgotten through the refused calls.
    let listed = ok(served.cli(&["memory", "list", "--workspace", "quiet"]));
    assert!(listed.contains("靠窗"), "{listed}");
    assert!(!listed.contains("GitHub"), "{listed}");
}
