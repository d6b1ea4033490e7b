//! The MCP gateway through the real `pincer gateway serve`, driven by the
//! official `mcp` Python client over streamable HTTP: a workspace sees and
//! calls exactly the tools it may use (a WASM skill and a filtered stdio MCP
//! server written with the official `mcp` package), and is refused, with an
//! audit record, everything else. Loopback only.

use crate::support;

use std::process::Command;

use serde_json::Value;
use support::gateway::{Served, python, python_client, python_script};

/// The official `mcp` client's view of `/mcp` with `key`.
fn client(served: &Served, key: &str) -> Value {
    python_client("mcp_client.py", &[&format!("{}/mcp", served.base), key])
}

/// The stdio echo server as a configured `command`.
fn stdio_server() -> String {
    format!(
        "command: [\"{}\", \"{}\"]",
        python(),
        python_script("mcp_echo_server.py").display()
    )
}

/// `main` uses skill-calc and the `echoer` server (`echoer` is the YAML
/// definition of how to reach it, filtered to `echo`), both reserved to it
/// (the configuration would refuse `other` listing them); `other` uses only
/// `forbidden`, a server `main` does not list.
fn config_with(echoer: &str) -> String {
    let server = stdio_server();
    format!(
        "mcp_servers:
  echoer:
    {echoer}
    tools: [echo]
    allowed_workspaces: [main]
  forbidden:
    {server}
skills:
  skill-calc:
    allowed_workspaces: [main]
workspaces:
  main:
    skills: [skill-calc]
    mcp_servers: [echoer]
  other:
    mcp_servers: [forbidden]
"
    )
}

fn refused(step: &Value) -> String {
    assert_eq!(step["ok"], false, "{step}");
    step["error"].as_str().unwrap_or_default().to_string()
}

fn config() -> String {
    config_with(&stdio_server())
}

#[test]
fn official_mcp_client_sees_and_calls_exactly_its_workspace_tools() {
    sees_and_calls_exactly_its_workspace_tools(&config());
}

/// The same, with `echoer` a remote streamable-HTTP server (the official
/// `mcp` package's own HTTP transport) on a loopback port.
#[test]
fn a_remote_streamable_http_server_is_aggregated_like_a_local_one() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut remote = KillOnDrop(
        Command::new(python())
            .arg(python_script("mcp_echo_server.py"))
            .args(["http", &port.to_string()])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start the remote MCP server"),
    );
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            remote.0.try_wait().expect("wait").is_none(),
            "the remote MCP server exited"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the remote MCP server never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    sees_and_calls_exactly_its_workspace_tools(&config_with(&format!(
        "url: \"http://127.0.0.1:{port}/mcp\""
    )));
    let _ = remote.0.kill();
}

struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn sees_and_calls_exactly_its_workspace_tools(config: &str) {
    let served = Served::start(config, &[]);
    let main = client(&served, &served.key("main"));

    assert_eq!(
        main["tools"],
        serde_json::json!([
            "echoer__echo",
            "memory__forget",
            "memory__memorize",
            "memory__recall",
            "skill-calc__convert",
            "skill-calc__evaluate"
        ]),
        "{main}"
    );
    assert_eq!(main["calc"]["ok"], true, "{main}");
    assert!(
        main["calc"]["text"].as_str().unwrap().contains("42"),
        "{main}"
    );
    assert_eq!(main["echo"]["ok"], true, "{main}");
    assert!(
        main["echo"]["text"]
            .as_str()
            .unwrap()
            .contains("echo: hello gateway"),
        "{main}"
    );
    let secret = refused(&main["secret"]);
    assert!(secret.contains("filtered out"), "{secret}");
    let unlisted = refused(&main["unlisted"]);
    assert!(
        unlisted.contains("not available to workspace `main`"),
        "{unlisted}"
    );
    refused(&main["unknown"]);

    // `other` may use neither skill-calc nor `echoer`.
    let other = client(&served, &served.key("other"));
    assert_eq!(
        other["tools"],
        serde_json::json!([
            "forbidden__echo",
            "forbidden__secret_admin",
            "memory__forget",
            "memory__memorize",
            "memory__recall"
        ]),
        "{other}"
    );
    assert!(refused(&other["echo"]).contains("not available to workspace `other`"));
    assert!(refused(&other["calc"]).contains("not available to workspace `other`"));

    let calls = served.audited_showing("main", "gateway.tool_call", |d| {
        d.iter().any(|d| d.contains("skill-calc__evaluate: ok"))
            && d.iter().any(|d| d.contains("echoer__echo: ok"))
    });
    assert!(
        calls.iter().any(|d| d == "skill-calc__evaluate: ok"),
        "{calls:?}"
    );
    assert!(calls.iter().any(|d| d == "echoer__echo: ok"), "{calls:?}");
    let denied = served.audited_showing("main", "gateway.denied", |d| {
        d.iter().any(|d| d.contains("echoer__secret_admin"))
            && d.iter().any(|d| d.contains("forbidden__echo"))
    });
    assert!(
        denied.iter().any(|d| d.contains("echoer__secret_admin")),
        "{denied:?}"
    );
    assert!(
        denied.iter().any(|d| d.contains("forbidden__echo")),
        "{denied:?}"
    );
    let denied = served.audited_showing("other", "gateway.denied", |d| {
        d.iter().any(|d| d.contains("echoer__echo"))
            && d.iter().any(|d| d.contains("skill-calc__evaluate"))
    });
    assert!(
        denied.iter().any(|d| d.contains("echoer__echo")),
        "{denied:?}"
    );
    assert!(
        denied.iter().any(|d| d.contains("skill-calc__evaluate")),
        "{denied:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_endpoint_requires_a_valid_key() {
    let served = Served::start(&config(), &[]);
    let client = pincer::gateway::default_client().expect("http client");
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#;
    for key in [None, Some("pk-not-a-real-key")] {
        let mut request = client
            .post(format!("{}/mcp", served.base))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.expect("gateway answers");
        assert_eq!(response.status().as_u16(), 401, "{key:?}");
    }
}

/// One tool call through the official `mcp` client with `key`.
fn call(served: &Served, key: &str, tool: &str, args: Value) -> Value {
    python_client(
        "mcp_call.py",
        &[
            &format!("{}/mcp", served.base),
            key,
            tool,
            &args.to_string(),
        ],
    )
}

/// Two workspaces share the skill-notes skill; each has its own notes.
/// (Before per-workspace plugin state, bob's `list` showed alice's note.)
#[test]
fn skill_state_is_private_to_each_workspace() {
    let served = Served::start(
        "workspaces:
  alice:
    skills: [skill-notes]
  bob:
    skills: [skill-notes]
",
        &[],
    );
    let (alice, bob) = (served.key("alice"), served.key("bob"));
    let put = call(
        &served,
        &alice,
        "skill-notes__put",
        serde_json::json!({"key": "secret", "text": "alice's diary"}),
    );
    assert_eq!(put["ok"], true, "{put}");
    let listed = call(&served, &bob, "skill-notes__list", serde_json::json!({}));
    assert_eq!(listed["ok"], true, "{listed}");
    let text = listed["text"].as_str().unwrap_or_default();
    assert!(!text.contains("secret"), "bob sees alice's note: {text}");
    let got = call(
        &served,
        &bob,
        "skill-notes__get",
        serde_json::json!({"key": "secret"}),
    );
    assert!(
        !got.to_string().contains("alice's diary"),
        "bob reads alice's note: {got}"
    );
    // alice still has hers.
    let mine = call(&served, &alice, "skill-notes__list", serde_json::json!({}));
    assert!(
        mine["text"].as_str().unwrap_or_default().contains("secret"),
        "{mine}"
    );
}

/// Issue 27: where approvals are in force, the gateway runs a skill or MCP
/// call only on a permit its turn engine gave for exactly those arguments.
/// A client holding the workspace's key (what a container could send
/// directly, bypassing its runner) is refused and audited; the built-in
/// memory tools are not gated.
#[test]
fn a_skill_or_mcp_call_no_turn_let_through_is_refused_where_approvals_are_in_force() {
    let config = config().replace(
        "  main:\n    skills: [skill-calc]\n",
        "  main:\n    approvals: {tier: approval}\n    skills: [skill-calc]\n",
    );
    assert!(config.contains("approvals"), "{config}");
    let served = Served::start(&config, &[]);
    let main = client(&served, &served.key("main"));
    for step in ["calc", "echo"] {
        let why = refused(&main[step]);
        assert!(why.contains("no such permission"), "{step}: {why}");
    }
    assert_eq!(
        served
            .audited_showing("main", "approval.refused_unapproved", |d| d.len() >= 2)
            .len(),
        2,
        "{main}"
    );
    // A workspace without approvals (tier yolo: no channel serves it) is
    // not affected: see `official_mcp_client_sees_and_calls_exactly_its_workspace_tools`.
}
