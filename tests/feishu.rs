//! Feishu end to end: the real `pincer start` with the real
//! `channel-feishu` component against `tests/python/fake_feishu.py`, whose
//! long-connection frames are encoded with the official `lark-oapi`
//! package's own protobuf classes. Loopback only.

mod support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};
use support::fake_llm::{Behaviour, FakeUpstream};
use support::{DockerCleanup, Sandbox, ok, unique};

const APP_ID: &str = "cli_fake";
const APP_SECRET: &str = "feishu-test-app-secret-91d2";
const ENCRYPT_KEY: &str = "feishu-test-encrypt-key-3c7a";
const VERIFICATION_TOKEN: &str = "feishu-test-verification-token-8b0e";

struct FakeFeishu {
    child: Child,
    base: String,
    control: String,
    http: reqwest::Client,
}

impl FakeFeishu {
    fn start() -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::new();
        let mut child = Command::new(support::gateway::python())
            .arg(support::gateway::python_script("fake_feishu.py"))
            .args(["--app-id", APP_ID, "--app-secret", APP_SECRET])
            .args(["--encrypt-key", ENCRYPT_KEY])
            .args(["--verification-token", VERIFICATION_TOKEN])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start fake_feishu.py");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: Value = serde_json::from_str(&line).expect("fake_feishu ready line");
        Self {
            child,
            base: ready["base"].as_str().unwrap().to_string(),
            control: ready["control"].as_str().unwrap().to_string(),
            http,
        }
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let response = self
            .http
            .post(format!("{}{path}", self.control))
            .json(&body)
            .send()
            .await
            .unwrap();
        response.json().await.unwrap()
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.control))
            .timeout(Duration::from_secs(120))
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }

    async fn wait(&self, what: &str, count: usize) -> Value {
        let (status, seen) = self
            .get(&format!("/wait?what={what}&count={count}&timeout=60"))
            .await;
        assert_eq!(status, 200, "waited for {count} {what}: {seen:#}");
        seen
    }
}

impl Drop for FakeFeishu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Env {
    _cleanup: DockerCleanup,
    sandbox: Sandbox,
    config: PathBuf,
    feishu: FakeFeishu,
    _model: FakeUpstream,
}

impl Env {
    async fn new(script: Vec<Behaviour>) -> Self {
        let model = FakeUpstream::spawn(Behaviour::Script(script)).await;
        let feishu = FakeFeishu::start();
        let sandbox = Sandbox::new();
        let base = sandbox.dir.path().join("ws");
        let config = sandbox.write(
            "pincer.yaml",
            &format!(
                r#"gateway:
  num_retries: 0
  model_list:
    - model_name: default
      litellm_params: {{model: openai/fake-model, api_base: "{model}", api_key: "sk-feishu-test"}}
containers:
  workspace_base_path: {base}
workspaces:
  team: {{}}
channels:
  listen: 127.0.0.1:0
  feishu:
    plugin: channel-feishu
    workspace: team
    allowed_senders: ["*"]
    http: ["127.0.0.1:*"]
    config:
      app_id: {APP_ID}
      app_secret: "${{FEISHU_APP_SECRET}}"
      encrypt_key: "${{FEISHU_ENCRYPT_KEY}}"
      verification_token: "${{FEISHU_VERIFICATION_TOKEN}}"
      domain: "{domain}"
"#,
                model = model.base_url,
                base = base.display(),
                domain = feishu.base,
            ),
        );
        let env = Env {
            _cleanup: DockerCleanup {
                home: sandbox.home(),
                label: unique(),
            },
            sandbox,
            config,
            feishu,
            _model: model,
        };
        ok(env.command().args(["image", "build"]).output().unwrap());
        env
    }

    fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pincer"));
        command
            .args(["--config", self.config.to_str().unwrap()])
            .current_dir(self.sandbox.work())
            .env("PINCER_HOME", self.sandbox.home())
            .env("FEISHU_APP_SECRET", APP_SECRET)
            .env("FEISHU_ENCRYPT_KEY", ENCRYPT_KEY)
            .env("FEISHU_VERIFICATION_TOKEN", VERIFICATION_TOKEN);
        command
    }

    fn start(&self, trace: &std::path::Path) -> (Child, String) {
        let log = self.sandbox.dir.path().join("daemon.log");
        let mut child = self
            .command()
            .args(["start", "--listen", "127.0.0.1:0"])
            .env("PINCER_LOG", "info")
            .env("PINCER_PLUGIN_TRACE", trace)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut banner = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut banner)
            .unwrap();
        assert!(
            banner.contains("pincer is running"),
            "{banner}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let webhooks = banner
            .split("webhooks on http://")
            .nth(1)
            .and_then(|rest| rest.split("/channels/").next())
            .expect("the banner names the webhook listener")
            .to_string();
        (child, webhooks)
    }

    /// Inbound messages stored, as (message_id, state).
    fn inbound(&self) -> Vec<(String, String)> {
        let db = rusqlite::Connection::open(self.sandbox.home().join("pincer.db")).unwrap();
        let mut stmt = db
            .prepare("SELECT message_id, state FROM channel_inbound ORDER BY id")
            .unwrap();
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .map(Result::unwrap)
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_chinese_group_mention_over_the_long_connection_gets_a_threaded_reply() {
    let env = Env::new(vec![Behaviour::answer(
        "今天完成了**三件事**：见 [文档](https://example.com)",
    )])
    .await;
    let trace = env.sandbox.dir.path().join("trace.log");
    let (mut daemon, _) = env.start(&trace);
    env.feishu.wait("connections", 1).await;
    let pushed = env
        .feishu
        .post(
            "/ws/push",
            json!({"kind": "group_mention", "text": "请总结一下今天的工作", "user": "ou_user1", "chat_id": "oc_chat1"}),
        )
        .await;
    let sent = env.feishu.wait("messages", 1).await;
    let reply = &sent["items"][0];
    assert_eq!(reply["kind"], "reply", "{sent:#}");
    assert_eq!(reply["parent_id"], pushed["message_id"], "{sent:#}");
    assert_eq!(reply["msg_type"], "post");
    let content = reply["content"].as_str().unwrap();
    assert!(content.contains("三件事"), "{content}");
    assert!(content.contains("https://example.com"), "{content}");
    // The event was acked with code 200.
    let (_, acks) = env.feishu.get("/acks").await;
    assert!(
        acks["acks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a.to_string().contains("200")),
        "{acks:#}"
    );
    // The reply carried a tenant token the fake issued.
    let (_, calls) = env
        .feishu
        .get("/calls?path=/open-apis/im/v1/messages/*")
        .await;
    let authorized = calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["path"].as_str().unwrap_or_default().ends_with("/reply"))
        .all(|c| c.to_string().contains("Bearer t-"));
    assert!(authorized, "{calls:#}");

    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    let recorded = std::fs::read_to_string(&trace).unwrap();
    assert!(recorded.contains("→ channel.on-frame"), "{recorded}");
    // Feishu puts the verification token in every event (`header.token`):
    // the host masks it in frames before the plugin reads them.
    for (name, secret) in [
        ("app secret", APP_SECRET),
        ("encrypt key", ENCRYPT_KEY),
        ("verification token", VERIFICATION_TOKEN),
    ] {
        assert!(
            !recorded.contains(secret),
            "the {name} crossed into the component"
        );
    }
    for token in calls["calls"].as_array().unwrap().iter().filter_map(|c| {
        c.to_string()
            .split("Bearer ")
            .nth(1)
            .map(|t| t[..t.find('"').unwrap_or(t.len())].to_string())
    }) {
        assert!(
            !recorded.contains(&token),
            "the tenant token {token} crossed into the component"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn encrypted_webhooks_are_checked_and_retries_make_one_turn() {
    let env = Env::new(vec![Behaviour::answer("收到")]).await;
    let trace = env.sandbox.dir.path().join("trace.log");
    let (mut daemon, webhooks) = env.start(&trace);
    let url = format!("http://{webhooks}/channels/feishu/events");

    let challenge = env
        .feishu
        .post(
            "/webhook/send",
            json!({"url": url, "kind": "url_verification", "challenge": "ajls384kdjx98XX"}),
        )
        .await;
    assert_eq!(challenge["status"], 200, "{challenge:#}");
    assert!(
        challenge["body"]
            .as_str()
            .unwrap()
            .contains("ajls384kdjx98XX"),
        "{challenge:#}"
    );

    for bad in [
        json!({"bad_signature": true}),
        json!({"stale": true}),
        json!({"wrong_token": true, "encrypted": false}),
    ] {
        let mut request = json!({"url": url, "kind": "p2p", "text": "伪造的", "user": "ou_user1"});
        request
            .as_object_mut()
            .unwrap()
            .extend(bad.as_object().unwrap().clone());
        let answer = env.feishu.post("/webhook/send", request).await;
        assert_eq!(answer["status"], 401, "{bad}: {answer:#}");
    }
    assert!(env.inbound().is_empty(), "a refused request stored nothing");

    // Feishu retries up to 4 times: the same event, one turn, one reply.
    let sent = env
        .feishu
        .post(
            "/webhook/send",
            json!({"url": url, "kind": "p2p", "text": "你好", "user": "ou_user1", "retries": 4}),
        )
        .await;
    assert_eq!(sent["status"], 200, "{sent:#}");
    let replies = env.feishu.wait("messages", 1).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, all) = env.feishu.get("/messages").await;
    assert_eq!(all["messages"].as_array().unwrap().len(), 1, "{all:#}");
    assert!(
        replies["items"][0]["content"]
            .as_str()
            .unwrap()
            .contains("收到")
    );
    assert_eq!(env.inbound().len(), 1);
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    assert!(daemon.wait().unwrap().success());
    let recorded = std::fs::read_to_string(&trace).unwrap();
    assert!(
        recorded.contains("→ import secrets.decrypt"),
        "the host decrypted"
    );
    // The decrypted events held the verification token: the plugin got the
    // host's marker.
    for secret in [APP_SECRET, ENCRYPT_KEY, VERIFICATION_TOKEN] {
        assert!(
            !recorded.contains(secret),
            "a secret crossed into the component"
        );
    }
}

/// The fake itself is checked against the official `lark-oapi` SDK
/// (`tests/python/fake_feishu_check.py`).
#[test]
fn the_fake_feishu_agrees_with_lark_oapi() {
    let out = Command::new(support::gateway::python())
        .arg(support::gateway::python_script("fake_feishu_check.py"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("all checks held"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
