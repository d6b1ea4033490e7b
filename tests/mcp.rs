//! The MCP gateway through the real `pincer gateway serve`, driven by the
//! official `mcp` Python client over streamable HTTP: a workspace sees and
//! calls exactly the tools it may use (a WASM skill and a filtered stdio MCP
//! server written with the official `mcp` package), and is refused, with an
//! audit record, everything else. Loopback only.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use serde_json::Value;
use support::{Sandbox, ok};

struct Served {
    sandbox: Sandbox,
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    fn start(config: &str) -> Self {
        let sandbox = Sandbox::new();
        let config = sandbox.write("pincer.yaml", config);
        let mut child = Command::new(env!("CARGO_BIN_EXE_pincer"))
            .args([
                "--config",
                config.to_str().unwrap(),
                "gateway",
                "serve",
                "--listen",
                "127.0.0.1:0",
            ])
            .current_dir(sandbox.work())
            .env("PINCER_HOME", sandbox.home())
            .env("PINCER_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start gateway");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("banner");
        let base = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .map(|u| u.trim_end_matches("/v1").to_string())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        Self {
            sandbox,
            child,
            base,
        }
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(env!("CARGO_BIN_EXE_pincer"))
            .arg("--config")
            .arg(self.sandbox.work().join("pincer.yaml"))
            .args(args)
            .current_dir(self.sandbox.work())
            .env("PINCER_HOME", self.sandbox.home())
            .output()
            .expect("run pincer")
    }

    fn key(&self, workspace: &str) -> String {
        ok(self.cli(&["gateway", "keys", "create", workspace]))
            .trim()
            .to_string()
    }

    /// The official client's view of `/mcp` with `key`.
    fn client(&self, key: &str) -> Value {
        let output = Command::new(python())
            .arg(script("mcp_client.py"))
            .arg(format!("{}/mcp", self.base))
            .arg(key)
            .output()
            .expect("run the mcp client");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "mcp client failed:\n{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
    }

    /// `kind` audit records of `workspace`, as details.
    fn audited(&self, workspace: &str, kind: &str) -> Vec<String> {
        let audit: Value =
            serde_json::from_str(&ok(self.cli(&["policy", "audit", workspace, "--json"])))
                .expect("audit JSON");
        audit["denials"]
            .as_array()
            .expect("records")
            .iter()
            .filter(|e| e["kind"] == kind)
            .filter_map(|e| e["detail"].as_str().map(str::to_string))
            .collect()
    }
}

fn python() -> String {
    std::env::var("PINCER_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("PINCER_TEST_PYTHON is not set: run the tests through scripts/test (it creates the venv with the official clients)")
    })
}

fn script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python")
        .join(name)
}

/// `main` uses skill-calc and the `echoer` server (filtered to `echo`), both
/// reserved to it (the configuration would refuse `other` listing them);
/// `other` uses only `forbidden`, a server `main` does not list.
fn config() -> String {
    let server = format!(
        "[\"{}\", \"{}\"]",
        python(),
        script("mcp_echo_server.py").display()
    );
    format!(
        "mcp_servers:
  echoer:
    command: {server}
    tools: [echo]
    allowed_workspaces: [main]
  forbidden:
    command: {server}
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

#[test]
fn official_mcp_client_sees_and_calls_exactly_its_workspace_tools() {
    let served = Served::start(&config());
    let main = served.client(&served.key("main"));

    assert_eq!(
        main["tools"],
        serde_json::json!([
            "echoer__echo",
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
    let other = served.client(&served.key("other"));
    assert_eq!(
        other["tools"],
        serde_json::json!(["forbidden__echo", "forbidden__secret_admin"]),
        "{other}"
    );
    assert!(refused(&other["echo"]).contains("not available to workspace `other`"));
    assert!(refused(&other["calc"]).contains("not available to workspace `other`"));

    let calls = served.audited("main", "gateway.tool_call");
    assert!(
        calls.iter().any(|d| d == "skill-calc__evaluate: ok"),
        "{calls:?}"
    );
    assert!(calls.iter().any(|d| d == "echoer__echo: ok"), "{calls:?}");
    let denied = served.audited("main", "gateway.denied");
    assert!(
        denied.iter().any(|d| d.contains("echoer__secret_admin")),
        "{denied:?}"
    );
    assert!(
        denied.iter().any(|d| d.contains("forbidden__echo")),
        "{denied:?}"
    );
    let denied = served.audited("other", "gateway.denied");
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
    let served = Served::start(&config());
    let client = pincer::gateway::llm::default_client().expect("http client");
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
