//! Slack end to end: the real `pincer start` daemon with the real
//! `channel-slack` component, a real workspace container running the agent
//! runner, a scripted fake model, and `tests/python/fake_slack.py` — a
//! local Slack built from Slack's documented examples whose Events API
//! requests are signed by the official `slack_sdk`. Loopback only.

use crate::support;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use support::daemon::Daemon;
use support::fake_llm::{Behaviour, FakeUpstream};
use support::pyfake::PyFake;
use support::{DockerCleanup, Sandbox, ok, unique};

pub(crate) const BOT_TOKEN: &str = "xoxb-fake-bot-token";
const APP_TOKEN: &str = "xapp-1-fake-app-token";
const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
pub(crate) const ALLOWED: &str = "U0ALLOWED";
/// Allowed to talk to the assistant too, but not the originator of
/// `ALLOWED`'s turns.
pub(crate) const COLLEAGUE: &str = "U0COLLEAGUE";

/// The fake Slack, killed on drop.
pub(crate) struct FakeSlack {
    fake: PyFake,
    api_base: String,
}

impl FakeSlack {
    pub(crate) fn start() -> Self {
        Self::start_with(&[])
    }

    /// With extra flags, e.g. `--scopes chat:write`.
    pub(crate) fn start_with(flags: &[&str]) -> Self {
        let mut args = vec![
            "--bot-token",
            BOT_TOKEN,
            "--app-token",
            APP_TOKEN,
            "--signing-secret",
            SIGNING_SECRET,
        ];
        args.extend_from_slice(flags);
        let fake = PyFake::start("fake_slack.py", &args);
        let api_base = fake.ready["api_base"].as_str().unwrap().to_string();
        Self { fake, api_base }
    }

    pub(crate) async fn post(&self, path: &str, body: Value) -> Value {
        self.fake.post(path, body).await
    }

    pub(crate) async fn get(&self, path: &str) -> (u16, Value) {
        self.fake.get(path).await
    }

    /// Waits until `count` Socket Mode connections were opened.
    pub(crate) async fn connections(&self, count: usize) {
        let (status, seen) = self
            .get(&format!("/wait?what=connections&count={count}&timeout=30"))
            .await;
        assert_eq!(
            status, 200,
            "fewer than {count} Socket Mode connections: {seen:#}"
        );
    }

    /// Pushes a DM from `user` in `channel` over Socket Mode.
    pub(crate) async fn dm(&self, text: &str, user: &str, channel: &str) -> Value {
        self.post(
            "/socket/push",
            json!({"kind": "dm", "text": text, "user": user, "channel": channel}),
        )
        .await
    }

    /// Pushes a click by `user` on button `action` of message `ts` in
    /// `channel` over Socket Mode (`action_ts`: the click's own id, fresh
    /// unless given); returns the click's `action_ts`.
    async fn click(
        &self,
        action: &str,
        ts: &str,
        user: &str,
        channel: &str,
        action_ts: Option<&str>,
    ) -> String {
        let fresh = format!("1800000000.{:06}", rand_micros());
        let action_ts = action_ts.unwrap_or(&fresh);
        let pushed = self
            .post(
                "/socket/push",
                json!({"kind": "interactive", "action_id": action, "ts": ts, "user": user,
                       "channel": channel, "action_ts": action_ts}),
            )
            .await;
        assert!(pushed["envelope_id"].is_string(), "{pushed}");
        action_ts.to_string()
    }

    /// Waits until `count` calls of `method` are recorded; returns them all.
    pub(crate) async fn calls(&self, method: &str, count: usize) -> Vec<Value> {
        let (status, _) = self
            .get(&format!(
                "/wait?what=calls&method={method}&count={count}&timeout=60"
            ))
            .await;
        let (_, calls) = self.get(&format!("/calls?method={method}")).await;
        let calls = calls["calls"].as_array().cloned().unwrap_or_default();
        assert_eq!(
            status, 200,
            "waited for {count} {method} calls, got {calls:#?}"
        );
        calls
    }

    pub(crate) async fn posted(&self, count: usize) -> Vec<Value> {
        self.calls("chat.postMessage", count)
            .await
            .into_iter()
            .filter(|c| c["status"] == 200 && c["response"]["ok"] == true)
            .collect()
    }
}

pub(crate) struct Env {
    _cleanup: DockerCleanup,
    pub(crate) sandbox: Sandbox,
    config: PathBuf,
    pub(crate) slack: FakeSlack,
    pub(crate) model: FakeUpstream,
}

impl Env {
    /// A click on the message pincer sent as `ts`, once it is recorded.
    async fn click_sent(&self, action: &str, ts: &str, user: &str, channel: &str) -> String {
        self.sandbox.sent_recorded(ts).await;
        self.slack.click(action, ts, user, channel, None).await
    }

    pub(crate) async fn new(script: Vec<Behaviour>) -> Self {
        Self::with_slack(script, FakeSlack::start()).await
    }

    async fn with_slack(script: Vec<Behaviour>, slack: FakeSlack) -> Self {
        Self::with_workspace(
            script,
            slack,
            "{observers: [observer-jsonl], skills: [skill-calc]}",
        )
        .await
    }

    /// `team` configured as `workspace` (YAML flow mapping).
    pub(crate) async fn with_workspace(
        script: Vec<Behaviour>,
        slack: FakeSlack,
        workspace: &str,
    ) -> Self {
        Self::configured(script, slack, workspace, "reply").await
    }

    /// As [`Env::with_workspace`], strangers answered as `refusal` says.
    pub(crate) async fn configured(
        script: Vec<Behaviour>,
        slack: FakeSlack,
        workspace: &str,
        refusal: &str,
    ) -> Self {
        Self::configured_with(script, slack, workspace, refusal, "").await
    }

    /// As [`Env::configured`], with `extra` (top-level YAML sections)
    /// appended to the configuration.
    pub(crate) async fn configured_with(
        script: Vec<Behaviour>,
        slack: FakeSlack,
        workspace: &str,
        refusal: &str,
        extra: &str,
    ) -> Self {
        let model = FakeUpstream::spawn(Behaviour::Script(script)).await;
        let sandbox = Sandbox::new();
        let base = sandbox.dir.path().join("ws");
        let config = sandbox.write(
            "pincer.yaml",
            &format!(
                r#"gateway:
  num_retries: 0
  model_list:
    - model_name: default
      litellm_params: {{model: openai/fake-model, api_base: "{model}", api_key: "sk-slack-test"}}
      model_info: {{supports_vision: true}}
containers:
  workspace_base_path: {base}
workspaces:
  team: {workspace}
channels:
  listen: 127.0.0.1:0
  slack:
    plugin: channel-slack
    workspace: team
    allowed_senders: [{ALLOWED}, {COLLEAGUE}]
    refusal: {refusal}
    default_conversation: C0SCHED
    http: ["127.0.0.1:*"]
    config:
      bot_token: "${{SLACK_BOT_TOKEN}}"
      app_token: "${{SLACK_APP_TOKEN}}"
      signing_secret: "${{SLACK_SIGNING_SECRET}}"
      api_base: "{api}"
      files_base: "{files}"
{extra}"#,
                model = model.base_url,
                base = base.display(),
                api = slack.api_base,
                files = slack.api_base.trim_end_matches("/api"),
            ),
        );
        let env = Env {
            _cleanup: DockerCleanup {
                home: sandbox.home(),
                label: unique(),
            },
            sandbox,
            config,
            slack,
            model,
        };
        ok(env.cli(&["image", "build"]));
        env
    }

    /// A plain `team` workspace whose model behaves as `model`, with
    /// `state.lease` set to `lease`.
    async fn with_lease(model: Behaviour, lease: &str) -> Self {
        Self::configured_with(
            vec![model],
            FakeSlack::start(),
            "{}",
            "reply",
            &format!("state:\n  lease: {lease}\n"),
        )
        .await
    }

    /// Lets every sender in (`allowed_senders: ["*"]`), for tests that
    /// need more senders than the two named ones.
    pub(crate) fn allow_everyone(&self) {
        let config = std::fs::read_to_string(&self.config).unwrap();
        let named = format!("allowed_senders: [{ALLOWED}, {COLLEAGUE}]");
        assert!(config.contains(&named), "{config}");
        std::fs::write(
            &self.config,
            config.replace(&named, r#"allowed_senders: ["*"]"#),
        )
        .unwrap();
    }

    /// The `pincer` command with this environment's config and secrets.
    fn command(&self) -> Command {
        let mut command = crate::support::pincer_command();
        command
            .args(["--config", self.config.to_str().unwrap()])
            .current_dir(self.sandbox.work())
            .env("PINCER_HOME", self.sandbox.home())
            .env("SLACK_BOT_TOKEN", BOT_TOKEN)
            .env("SLACK_APP_TOKEN", APP_TOKEN)
            .env("SLACK_SIGNING_SECRET", SIGNING_SECRET);
        command
    }

    pub(crate) fn cli(&self, args: &[&str]) -> std::process::Output {
        self.cli_with_env(args, &[])
    }

    pub(crate) fn cli_with_env(
        &self,
        args: &[&str],
        vars: &[(&str, &str)],
    ) -> std::process::Output {
        self.command()
            .args(args)
            .envs(vars.iter().copied())
            .output()
            .unwrap()
    }

    pub(crate) fn start(&self) -> Daemon {
        self.start_with_env(&[])
    }

    /// As [`Env::start`], logging what the cluster and the router do.
    pub(crate) fn start_traced(&self) -> Daemon {
        self.start_with_env(&[(
            "PINCER_LOG",
            "info,pincer::router=debug,pincer::cluster=debug",
        )])
    }

    /// A second daemon of this configuration with its own `home` (a
    /// cluster on one shared state).
    pub(crate) fn start_at(&self, home: &std::path::Path) -> Daemon {
        self.start_with_env(&[
            ("PINCER_HOME", home.to_str().unwrap()),
            (
                "PINCER_LOG",
                "info,pincer::router=debug,pincer::cluster=debug",
            ),
        ])
    }

    fn start_with_env(&self, vars: &[(&str, &str)]) -> Daemon {
        let log = self
            .sandbox
            .dir
            .path()
            .join(format!("daemon-{}.log", unique()));
        let mut command = self.command();
        command
            .args(["start", "--listen", "127.0.0.1:0"])
            .env("PINCER_LOG", "info")
            .envs(vars.iter().copied());
        let daemon = Daemon::spawn(command, log);
        assert!(
            !daemon.webhooks.is_empty(),
            "the banner names the webhook listener: {}",
            daemon.banner
        );
        daemon
    }

    /// Waits (up to 60 s: a container may be starting) until the model
    /// has been asked once: a turn runs.
    async fn model_asked(&self) {
        for _ in 0..600 {
            if !self.model.received().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(self.model.received().len(), 1, "the turn reached the model");
    }

    /// The states of the inbound messages stored by the daemon, in order.
    pub(crate) fn inbound_states(&self) -> Vec<String> {
        self.inbound().into_iter().map(|(_, state)| state).collect()
    }

    /// Inbound messages stored by the daemon, as (message_id, state).
    pub(crate) fn inbound(&self) -> Vec<(String, String)> {
        self.sandbox
            .rows("SELECT message_id, state FROM channel_inbound ORDER BY id")
            .iter()
            .map(|r| (r.get(0).unwrap(), r.get(1).unwrap()))
            .collect()
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_dm_over_socket_mode_is_answered_in_mrkdwn_and_acked_in_time() {
    let env = Env::new(vec![Behaviour::answer(
        "**Done**: see [the docs](https://example.com/a?b=1&c=2) and `x < y`",
    )])
    .await;
    let mut daemon = env.start();
    let (status, _) = env
        .slack
        .get("/wait?what=connections&count=1&timeout=30")
        .await;
    assert_eq!(
        status,
        200,
        "the daemon opened no Socket Mode connection\n{}",
        daemon.log()
    );

    let pushed = env.slack.dm("hello pincer", ALLOWED, "D0DM").await;
    let posted = env.slack.posted(1).await;
    let reply = &posted[0]["args"];
    assert_eq!(reply["channel"], "D0DM", "{posted:#?}");
    let text = reply["text"].as_str().unwrap();
    assert!(text.contains("*Done*"), "{text}");
    assert!(
        text.contains("<https://example.com/a?b=1&amp;c=2|the docs>"),
        "{text}"
    );
    assert!(text.contains("`x &lt; y`"), "{text}");
    assert!(
        reply.get("thread_ts").is_none_or(Value::is_null),
        "a top-level DM is answered in the DM: {reply}"
    );
    // The model wrote a link: Slack is told not to fetch it for a preview
    // (`unfurl` is off by default), so a reply is no way out.
    assert_eq!(reply["unfurl_links"], false, "{reply}");
    assert_eq!(reply["unfurl_media"], false, "{reply}");
    // The bot token went in the header, set by the host.
    assert_eq!(posted[0]["token"], BOT_TOKEN);
    assert_eq!(posted[0]["token_from"], "header");

    let (_, acks) = env.slack.get("/acks").await;
    let ack = acks["acks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["envelope_id"] == pushed["envelope_id"])
        .unwrap_or_else(|| panic!("no ack for {pushed}: {acks:#}"));
    assert!(ack["delay_ms"].as_f64().unwrap() < 3000.0, "{ack}");
    // The working sign went up and came down.
    env.slack.calls("reactions.add", 1).await;
    env.slack.calls("reactions.remove", 1).await;

    // The same event delivered again (Slack's retry) is answered once.
    env.slack
        .post(
            "/socket/push",
            json!({"kind": "dm", "text": "hello pincer", "user": ALLOWED, "channel": "D0DM",
                   "ts": pushed["ts"]}),
        )
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 1, "{calls:#}");
    assert_eq!(env.inbound().len(), 1);

    // Observers see the platform's sender and message id, not the
    // channel's name and a turn id.
    let events = env
        .sandbox
        .home()
        .join("plugin-data/workspace.team/observer-jsonl/events.jsonl");
    let mut message_in = None;
    for _ in 0..50 {
        message_in = std::fs::read_to_string(&events)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["type"] == "message_in");
        if message_in.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let message_in = message_in.expect("a message_in event");
    assert_eq!(message_in["sender"], ALLOWED, "{message_in}");
    assert_eq!(message_in["id"], pushed["ts"], "{message_in}");
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn events_api_checks_signatures_refuses_strangers_and_replies_in_thread() {
    let env = Env::new(vec![Behaviour::answer("answered in the thread")]).await;
    let mut daemon = env.start();
    let url = format!("http://{}/channels/slack/events", daemon.webhooks);

    let challenge = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "url_verification", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}),
        )
        .await;
    assert_eq!(challenge["status"], 200, "{challenge}");
    assert!(
        challenge["body"]
            .as_str()
            .unwrap()
            .contains("3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"),
        "{challenge}"
    );

    for bad in [
        json!({"bad_signature": true}),
        json!({"stale": true}),
        json!({"no_signature": true}),
    ] {
        let mut request = json!({"url": url, "kind": "mention", "text": "forged", "user": ALLOWED, "channel": "C0CHAN"});
        request
            .as_object_mut()
            .unwrap()
            .extend(bad.as_object().unwrap().clone());
        let answer = env.slack.post("/events/send", request).await;
        assert_eq!(answer["status"], 401, "{bad}: {answer}");
    }
    assert!(env.inbound().is_empty(), "a refused request stored nothing");

    let stranger = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "mention", "text": "let me in", "user": "U0STRANGER", "channel": "C0CHAN"}),
        )
        .await;
    assert_eq!(stranger["status"], 200, "{stranger}");
    let refused = env.slack.posted(1).await;
    assert!(
        refused[0]["args"]["text"]
            .as_str()
            .unwrap()
            .contains("U0STRANGER"),
        "{refused:#?}"
    );
    assert_eq!(env.sandbox.audited("channel.sender_refused").len(), 1);

    let sent = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "mention", "text": "please help", "user": ALLOWED, "channel": "C0CHAN"}),
        )
        .await;
    assert_eq!(sent["status"], 200, "{sent}");
    assert!(sent["elapsed_ms"].as_f64().unwrap() < 3000.0, "{sent}");
    let mention_ts = sent["ts"].clone();
    // Slack retries when it thinks the answer was late: the retry is dropped.
    let retry = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "mention", "text": "please help", "user": ALLOWED,
                   "channel": "C0CHAN", "ts": mention_ts, "event_id": sent["event_id"],
                   "retry_num": 1, "retry_reason": "http_timeout"}),
        )
        .await;
    assert_eq!(retry["status"], 200, "{retry}");
    let posted = env.slack.posted(2).await;
    let reply = &posted[1]["args"];
    assert_eq!(reply["channel"], "C0CHAN");
    assert_eq!(
        reply["thread_ts"], mention_ts,
        "a mention is answered in its thread"
    );
    assert_eq!(reply["text"], "answered in the thread");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        env.inbound()
            .iter()
            .map(|(_, state)| state.as_str())
            .collect::<Vec<_>>(),
        ["refused", "done"]
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Issue 26, item 1: an envelope was acked before its message was stored,
/// so a store that failed (disk full, a lock held past the busy timeout)
/// lost it: Slack had been told it arrived. Now, while the database refuses
/// writes, the envelope is not acked (the failure is counted on /metrics);
/// Slack redelivers it and, once the store takes writes again, it is
/// answered once.
#[tokio::test(flavor = "multi_thread")]
async fn an_envelope_the_store_refuses_is_not_acked_and_its_redelivery_is_answered_once() {
    let env = Env::new(vec![Behaviour::answer("stored, then answered")]).await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    let lock = env.sandbox.lock_db();
    let pushed = env.slack.dm("do not lose me", ALLOWED, "D0DM").await;
    let failures = support::gateway::wait_for_metric(
        &daemon.gateway,
        "pincer_channel_store_failures_total",
        json!({"channel": "slack"}),
        1.0,
        Duration::from_secs(15),
    )
    .await;
    let (_, acks) = env.slack.get("/acks").await;
    let acked: Vec<&Value> = acks["acks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["envelope_id"] == pushed["envelope_id"])
        .collect();
    assert!(
        acked.is_empty(),
        "acked while its message could not be stored: {acked:#?}\n{}",
        daemon.log()
    );
    assert!(
        failures >= Some(1.0),
        "the failed store is counted: {failures:?}\n{}",
        daemon.log()
    );
    lock.release();

    let posted = env.slack.posted(1).await;
    assert_eq!(posted[0]["args"]["text"], "stored, then answered");
    assert_eq!(posted[0]["args"]["channel"], "D0DM");
    let (status, _) = env.slack.get("/wait?what=acks&count=1&timeout=30").await;
    assert_eq!(status, 200, "the redelivery was acked\n{}", daemon.log());
    let (_, acks) = env.slack.get("/acks").await;
    let envelope = acks["envelopes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == pushed["envelope_id"])
        .unwrap_or_else(|| panic!("no envelope {pushed}: {acks:#}"));
    assert_eq!(envelope["status"], "acked", "{envelope:#}");
    assert_eq!(
        envelope["deliveries"][0]["unacked"], "timeout",
        "the first delivery went unacked: {envelope:#}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 1, "{calls:#}");
    assert_eq!(
        env.inbound(),
        [(pushed["ts"].as_str().unwrap().to_string(), "done".into())]
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Issue 26, item 1: an Events API request was answered 200 even when its
/// message could not be stored. Now it gets a 5xx (Slack retries a non-2xx
/// answer), and the same event sent again once the store recovers is
/// answered 200 and once.
#[tokio::test(flavor = "multi_thread")]
async fn an_event_the_store_refuses_gets_a_5xx_and_its_retry_is_answered_once() {
    let env = Env::new(vec![Behaviour::answer("answered after the retry")]).await;
    let mut daemon = env.start();
    let url = format!("http://{}/channels/slack/events", daemon.webhooks);
    let lock = env.sandbox.lock_db();
    let refused = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "mention", "text": "keep me", "user": ALLOWED,
                   "channel": "C0CHAN", "timeout": 30}),
        )
        .await;
    let status = refused["status"].as_u64().unwrap_or_default();
    assert!(
        (500..600).contains(&status),
        "a message that was not stored is not answered 2xx: {refused:#}\n{}",
        daemon.log()
    );
    lock.release();
    let failures = support::gateway::wait_for_metric(
        &daemon.gateway,
        "pincer_channel_store_failures_total",
        json!({"channel": "slack"}),
        1.0,
        Duration::from_secs(5),
    )
    .await;
    assert!(failures >= Some(1.0), "{failures:?}");
    assert!(env.inbound().is_empty(), "{:?}", env.inbound());

    let retry = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "mention", "text": "keep me", "user": ALLOWED,
                   "channel": "C0CHAN", "ts": refused["ts"], "event_id": refused["event_id"],
                   "retry_num": 1, "retry_reason": "http_error"}),
        )
        .await;
    assert_eq!(retry["status"], 200, "{retry:#}");
    assert!(retry["elapsed_ms"].as_f64().unwrap() < 3000.0, "{retry}");
    let posted = env.slack.posted(1).await;
    assert_eq!(posted[0]["args"]["text"], "answered after the retry");
    assert_eq!(posted[0]["args"]["thread_ts"], refused["ts"]);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 1, "{calls:#}");
    assert_eq!(
        env.inbound(),
        [(refused["ts"].as_str().unwrap().to_string(), "done".into())]
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// A store that refuses writes makes each inbound message wait out the
/// lock (5 s) before it is refused; that wait must not hold the daemon's
/// runtime: with more refused messages in flight than the runtime has
/// threads, the gateway and the webhook listener still answer at once.
#[tokio::test(flavor = "multi_thread")]
async fn messages_the_store_refuses_do_not_stall_the_daemon() {
    let env = Env::new(vec![Behaviour::answer("unused")]).await;
    let mut daemon = env.start();
    let url = format!("http://{}/channels/slack/events", daemon.webhooks);
    let lock = env.sandbox.lock_db();
    let threads = std::thread::available_parallelism().map_or(2, usize::from);
    let refused: Vec<_> = (0..threads * 2)
        .map(|i| {
            env.slack.post(
                "/events/send",
                json!({"url": url, "kind": "mention", "text": format!("keep me {i}"),
                       "user": ALLOWED, "channel": "C0CHAN", "timeout": 30}),
            )
        })
        .collect();
    let checks = async {
        // The requests are waiting on the lock by now.
        tokio::time::sleep(Duration::from_secs(1)).await;
        support::not_answered_at_once(&[
            (format!("{}/health", daemon.gateway), 200),
            (format!("http://{}/channels/nobody", daemon.webhooks), 404),
        ])
        .await
    };
    let (refused, slow) = tokio::join!(futures_util::future::join_all(refused), checks);
    assert!(
        slow.is_empty(),
        "{slow:?} while {} refused messages waited on the lock\n{}",
        threads * 2,
        daemon.log()
    );
    for answer in refused {
        let status = answer["status"].as_u64().unwrap_or_default();
        assert!((500..600).contains(&status), "{answer:#}");
    }
    lock.release();
    assert!(env.inbound().is_empty(), "{:?}", env.inbound());
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// A database locked past the lease time (a backup, a `sqlite3` shell left
/// in a transaction) makes a daemon alone on it lose its workspace's lease,
/// then take it back. The turn it was running never stopped: it is
/// answered, not told that pincer was restarted (it was, before the lease
/// taken back was told apart from one taken from a daemon that died).
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_running_while_the_lease_lapses_is_answered_not_interrupted() {
    let env = Env::with_lease(Behaviour::slow_answer(12_000, "worth the wait"), "3s").await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("take your time", ALLOWED, "D0DM").await;
    env.model_asked().await;
    // Held past the 3 s lease; the model answers 12 s after it was asked.
    let lock = env.sandbox.lock_db();
    tokio::time::sleep(Duration::from_secs(6)).await;
    lock.release();
    let posted = env.slack.posted(1).await;
    assert_eq!(
        posted[0]["args"]["text"],
        "worth the wait",
        "{posted:#?}\n{}",
        daemon.log()
    );
    let log = daemon.log();
    assert!(
        log.contains("the workspace's lease ran out or passed to another daemon")
            && log.contains("took the workspace back")
            && log.contains("a turn still running here goes on"),
        "the lease lapsed and was taken back while the turn ran:\n{log}"
    );
    let states = env.inbound_states();
    assert_eq!(states, ["done"]);
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(
        calls["calls"].as_array().map(Vec::len),
        Some(1),
        "one answer, no notice: {calls:#}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// A turn that ends while another process holds the database's lock well
/// past the 5 s wait cannot keep its session (the turn fails, saying why)
/// nor record its answer at first. The answer is recorded and sent once
/// the lock is gone: every message ends answered or told why, none is left
/// running unanswered until the next restart (as it was, with nothing sent).
#[tokio::test(flavor = "multi_thread")]
async fn a_turn_ending_while_the_store_is_locked_is_answered_once_it_is_free() {
    // A lease longer than the lock: this test is about the answer, not
    // about a lease taken back.
    let env = Env::with_lease(Behaviour::slow_answer(1_000, "kept for you"), "2m").await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("answer me later", ALLOWED, "D0DM").await;
    env.model_asked().await;
    let lock = env.sandbox.lock_db();
    // Held until recording the answer has failed once (the turn's session
    // writes fail first, one lock wait each).
    let mut failed_once = false;
    for _ in 0..900 {
        failed_once = daemon.log().contains("cannot record the answer yet");
        if failed_once {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    lock.release();
    assert!(
        failed_once,
        "recording the answer never failed under the lock:\n{}",
        daemon.log()
    );
    let posted = env.slack.posted(1).await;
    let log = daemon.log();
    assert_eq!(
        posted[0]["args"]["text"],
        "⚠\u{fe0f} Sorry, this message could not be answered: session store: database is locked",
        "{posted:#?}\n{log}"
    );
    let states = env.inbound_states();
    assert_eq!(states, ["failed"], "{log}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(
        calls["calls"].as_array().map(Vec::len),
        Some(1),
        "{calls:#}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn rate_limits_and_dropped_sockets_lose_and_double_nothing() {
    let env = Env::new(vec![Behaviour::answer("one reply")]).await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    // chat.postMessage answers 429 twice with Retry-After: 1.
    env.slack
        .post(
            "/ratelimit",
            json!({"method": "chat.postMessage", "count": 2, "retry_after": 1}),
        )
        .await;
    // The socket closes right after the envelope, before an ack.
    env.slack
        .post(
            "/socket/close",
            json!({"push": {"kind": "dm", "text": "are you there", "user": ALLOWED, "channel": "D0DM"}}),
        )
        .await;
    let calls = env.slack.calls("chat.postMessage", 3).await;
    let statuses: Vec<_> = calls.iter().map(|c| c["status"].clone()).collect();
    assert_eq!(statuses, [json!(429), json!(429), json!(200)], "{calls:#?}");
    let spacing =
        calls[2]["received_at"].as_f64().unwrap() - calls[1]["received_at"].as_f64().unwrap();
    assert!(spacing >= 0.9, "Retry-After honoured: {spacing}");
    // Redelivered on the new connection, answered once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 3, "{calls:#}");
    let (_, connections) = env.slack.get("/connections").await;
    assert!(
        connections["connections"].as_array().unwrap().len() >= 2,
        "{connections:#}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_reply_queued_when_the_daemon_is_killed_arrives_once_after_restart() {
    let env = Env::new(vec![Behaviour::answer("survives kill -9")]).await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    // The first delivery attempt is refused with Retry-After: 3, so the
    // reply sits in the outbox when the daemon dies.
    env.slack
        .post(
            "/ratelimit",
            json!({"method": "chat.postMessage", "count": 1, "retry_after": 3}),
        )
        .await;
    env.slack.dm("remember me", ALLOWED, "D0DM").await;
    let first = env.slack.calls("chat.postMessage", 1).await;
    assert_eq!(first[0]["status"], 429);
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    let pending: i64 = env
        .sandbox
        .scalar("SELECT COUNT(*) FROM channel_outbox WHERE state = 'pending'");
    assert_eq!(pending, 1, "the reply is a row before it is sent");

    let mut again = env.start();
    let calls = env.slack.calls("chat.postMessage", 2).await;
    assert_eq!(calls[1]["status"], 200, "{calls:#?}");
    assert_eq!(calls[1]["args"]["text"], "survives kill -9");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(
        calls["calls"].as_array().unwrap().len(),
        2,
        "delivered once"
    );
    let rows = env
        .sandbox
        .rows("SELECT state, receipt FROM channel_outbox");
    let (state, receipt): (String, Option<String>) =
        (rows[0].get(0).unwrap(), rows[0].get(1).unwrap());
    assert_eq!(state, "sent");
    assert_eq!(
        receipt.as_deref(),
        calls["calls"][1]["response"]["ts"].as_str()
    );
    assert!(again.stop().success(), "{}", again.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_sent_during_a_turn_are_answered_in_order_one_at_a_time() {
    let env = Env::new(vec![
        Behaviour::slow_answer(2500, "first"),
        Behaviour::answer("second"),
        Behaviour::answer("third"),
    ])
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    for text in ["one", "two", "three"] {
        env.slack
            .post(
                "/socket/push",
                json!({"kind": "dm", "text": text, "user": ALLOWED, "channel": "D0DM"}),
            )
            .await;
    }
    let posted = env.slack.posted(3).await;
    let texts: Vec<_> = posted.iter().map(|c| c["args"]["text"].clone()).collect();
    assert_eq!(texts, [json!("first"), json!("second"), json!("third")]);
    // Each turn started after the one before ended: its history holds the
    // earlier message and its answer.
    let requests = env.model.received();
    assert_eq!(requests.len(), 3);
    let said = |request: &Value| -> Vec<String> {
        request["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] != "system")
            .map(|m| m["content"].as_str().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(said(&requests[0]), ["one"]);
    assert_eq!(said(&requests[1]), ["one", "first", "two"]);
    assert_eq!(
        said(&requests[2]),
        ["one", "first", "two", "second", "three"]
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn refresh_requested_and_a_deaf_socket_both_end_in_a_fresh_connection() {
    let env = Env::new(vec![
        Behaviour::answer("after refresh"),
        Behaviour::answer("after deafness"),
    ])
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack
        .post("/socket/disconnect", json!({"reason": "refresh_requested"}))
        .await;
    let (status, _) = env
        .slack
        .get("/wait?what=connections&count=2&timeout=30")
        .await;
    assert_eq!(
        status,
        200,
        "no new connection after refresh_requested\n{}",
        daemon.log()
    );
    env.slack.dm("still there?", ALLOWED, "D0DM").await;
    assert_eq!(
        env.slack.posted(1).await[0]["args"]["text"],
        "after refresh"
    );

    // The socket stays open but nothing comes, not even pongs: the
    // envelope pushed now is swallowed.
    env.slack.post("/socket/deaf", json!({"on": true})).await;
    env.slack.dm("hello?", ALLOWED, "D0DM").await;
    let (status, _) = env
        .slack
        .get("/wait?what=connections&count=3&timeout=90")
        .await;
    assert_eq!(
        status,
        200,
        "the watchdog did not reconnect\n{}",
        daemon.log()
    );
    // Redelivered on the new connection and answered.
    let posted = env.slack.posted(2).await;
    assert_eq!(posted[1]["args"]["text"], "after deafness");
    // `pincer status` reads the daemon's snapshot, rewritten every second.
    let mut status = Value::Null;
    for _ in 0..50 {
        status = serde_json::from_str(&ok(env.cli(&["status", "--json"]))).unwrap();
        let slack = &status["daemon"]["channels"]["slack"];
        if slack["watchdog_reconnects"].as_u64() >= Some(1) && slack["connected"] == true {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let slack = &status["daemon"]["channels"]["slack"];
    assert_eq!(slack["watchdog_reconnects"], 1, "{status:#}");
    assert_eq!(slack["reconnects"], 2, "refresh and watchdog: {status:#}");
    assert_eq!(slack["connected"], true, "{status:#}");
    // The same figures on the daemon's /metrics, with its container start
    // (one container served both turns) and the turns it recorded.
    let scraped = support::gateway::scrape_metrics(&daemon.gateway);
    let metric = |name: &str, labels: Value| support::gateway::metric(&scraped, name, labels);
    assert_eq!(
        metric(
            "pincer_channel_reconnects_total",
            json!({"channel": "slack"})
        ),
        Some(2.0),
        "{scraped:#}"
    );
    assert_eq!(
        metric(
            "pincer_container_starts_total",
            json!({"workspace": "team"})
        ),
        Some(1.0),
        "{scraped:#}"
    );
    assert_eq!(
        metric("pincer_turns", json!({"status": "done"})),
        Some(2.0),
        "{scraped:#}"
    );
    assert_eq!(
        metric(
            "pincer_plugin_faults_total",
            json!({"plugin": "channel-slack"})
        ),
        None,
        "no plugin faulted: {scraped:#}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_a_turn_lets_it_finish_delivers_the_reply_and_exits_0() {
    let env = Env::new(vec![Behaviour::slow_answer(3000, "finished before exit")]).await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("take your time", ALLOWED, "D0DM").await;
    env.model_asked().await;
    let status = daemon.stop();
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    let calls = calls["calls"].as_array().unwrap().clone();
    assert_eq!(calls.len(), 1, "{calls:#?}");
    assert_eq!(calls[0]["args"]["text"], "finished before exit");
}

#[tokio::test(flavor = "multi_thread")]
async fn channel_test_checks_tokens_and_scopes_against_the_web_api() {
    let env = Env::with_slack(
        vec![Behaviour::answer("unused")],
        FakeSlack::start_with(&["--scopes", "chat:write,im:history,im:read"]),
    )
    .await;
    let out = env.cli(&["channel", "test", "slack"]);
    let text = support::stdout(&out);
    assert!(
        !out.status.success(),
        "missing scopes fail the check:\n{text}"
    );
    assert!(
        text.contains("auth.test: team Fake Team (T0TEAM), bot user U0BOT"),
        "{text}"
    );
    assert!(
        text.contains("missing scopes app_mentions:read, reactions:write"),
        "{text}"
    );
    assert!(text.contains("ok   app-level token"), "{text}");
    assert!(text.contains("ok   signing secret"), "{text}");

    let out = env
        .command()
        .args(["channel", "test", "slack"])
        .env("SLACK_BOT_TOKEN", "xoxb-revoked")
        .env("SLACK_APP_TOKEN", "xoxb-not-an-app-token")
        .output()
        .unwrap();
    let text = support::stdout(&out);
    assert!(!out.status.success(), "{text}");
    assert!(
        text.contains("FAIL bot token") && text.contains("invalid_auth"),
        "{text}"
    );
    assert!(text.contains("FAIL app-level token"), "{text}");
    assert!(
        !text.contains("xoxb-revoked"),
        "a token is never printed: {text}"
    );

    let fails = env.cli(&["channel", "test", "slak"]);
    assert!(
        support::stderr(&fails).contains("no channel named `slak`, did you mean `slack`?"),
        "{}",
        support::stderr(&fails)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn channel_test_passes_with_good_tokens() {
    let env = Env::new(vec![Behaviour::answer("unused")]).await;
    let out = env.cli(&["channel", "test", "slack"]);
    let text = support::stdout(&out);
    assert!(out.status.success(), "{text}\n{}", support::stderr(&out));
    assert!(text.contains("ok   bot token"), "{text}");
    assert!(
        text.contains("scopes app_mentions:read,chat:write,im:history,im:read,reactions:write"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_edited_config_is_reloaded_and_an_invalid_one_is_refused() {
    let env = Env::new(vec![Behaviour::answer("answered")]).await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    let original = std::fs::read_to_string(&env.config).unwrap();

    // Invalid: the daemon says why and keeps the running configuration.
    std::fs::write(
        &env.config,
        original.replace("refusal: reply", "refusal: shout"),
    )
    .unwrap();
    for _ in 0..100 {
        if daemon.log().contains("the new configuration is not valid") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = daemon.log();
    assert!(log.contains("the new configuration is not valid"), "{log}");
    assert!(
        log.contains("pincer.yaml:"),
        "the error names the file and line: {log}"
    );
    env.slack.dm("still working?", ALLOWED, "D0DM").await;
    env.slack.posted(1).await;

    // Valid but cannot start (no such plugin): the previous one runs again.
    std::fs::write(
        &env.config,
        original.replace("plugin: channel-slack", "plugin: channel-nope"),
    )
    .unwrap();
    daemon.wait_for_line("configuration reloaded");
    daemon.wait_for_line("pincer is running");
    assert!(
        daemon
            .log()
            .contains("could not be started, so the previous one runs again"),
        "{}",
        daemon.log()
    );
    env.slack.connections(2).await;
    env.slack.dm("and now?", ALLOWED, "D0DM").await;
    env.slack.posted(2).await;

    // Valid: a newly allowed sender is answered after the reload.
    std::fs::write(
        &env.config,
        original.replace(
            &format!("allowed_senders: [{ALLOWED}, {COLLEAGUE}]"),
            &format!("allowed_senders: [{ALLOWED}, {COLLEAGUE}, U0NEWCOMER]"),
        ),
    )
    .unwrap();
    daemon.wait_for_line("configuration reloaded");
    daemon.wait_for_line("pincer is running");
    env.slack.connections(3).await;
    env.slack.dm("hello, I am new", "U0NEWCOMER", "D0NEW").await;
    let posted = env.slack.posted(3).await;
    assert_eq!(posted[2]["args"]["channel"], "D0NEW");
    assert_eq!(posted[2]["args"]["text"], "answered");

    // SIGHUP reloads too.
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGHUP) };
    daemon.wait_for_line("configuration reloaded");
    daemon.wait_for_line("pincer is running");
    assert!(daemon.stop().success(), "{}", daemon.log());
}

#[tokio::test(flavor = "multi_thread")]
async fn after_a_crash_a_finished_turn_is_delivered_and_a_cut_one_is_told() {
    use pincer::channels::{ChannelStore, InboundState, Received};
    use pincer::sessions::{SessionKey, SessionStore, TurnStatus};
    let env = Env::new(vec![Behaviour::answer("unused")]).await;
    // What a daemon killed mid-work leaves: two messages marked running,
    // one whose turn had ended (its answer stored in the session, not yet
    // in the outbox), one cut short.
    let sessions = SessionStore::open_at(&env.sandbox.state()).unwrap();
    let key = SessionKey {
        channel: "slack".into(),
        conversation: "D0DM".into(),
        workspace: "team".into(),
    };
    let session = sessions.current(&key).unwrap();
    sessions.begin_turn(session.id, "turn-ended").unwrap();
    sessions
        .append(
            session.id,
            "turn-ended",
            &json!({"role": "user", "content": "q"}),
        )
        .unwrap();
    sessions
        .append(
            session.id,
            "turn-ended",
            &json!({"role": "assistant", "content": "the stored answer"}),
        )
        .unwrap();
    sessions
        .finish_turn("turn-ended", TurnStatus::Done, None)
        .unwrap();
    let store = ChannelStore::open_at(&env.sandbox.state()).unwrap();
    let message = |conversation: &str, id: &str| Received {
        channel: "slack".into(),
        conversation: conversation.into(),
        thread: None,
        message_id: id.into(),
        sender: ALLOWED.into(),
        sender_name: None,
        text: "q".into(),
        timestamp_ms: 1,
        files: Vec::new(),
    };
    let ended = store
        .receive(
            &message("D0DM", "1700000000.000100"),
            "team",
            InboundState::Running,
        )
        .unwrap()
        .unwrap();
    store.set_turn(ended, "turn-ended").unwrap();
    store
        .receive(
            &message("D0CUT", "1700000000.000200"),
            "team",
            InboundState::Running,
        )
        .unwrap()
        .unwrap();

    let mut daemon = env.start();
    let posted = env.slack.posted(2).await;
    let by_channel = |c: &str| {
        posted
            .iter()
            .find(|p| p["args"]["channel"] == c)
            .map(|p| p["args"]["text"].as_str().unwrap().to_string())
            .unwrap_or_else(|| panic!("nothing posted to {c}: {posted:#?}"))
    };
    assert_eq!(by_channel("D0DM"), "the stored answer");
    assert!(by_channel("D0CUT").contains("restarted"), "{posted:#?}");
    assert_eq!(
        env.inbound()
            .iter()
            .map(|(_, s)| s.as_str())
            .collect::<Vec<_>>(),
        ["done", "interrupted"]
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Everything the host hands the Slack component over a DM, an Events API
/// mention, deliveries and reactions is recorded (`PINCER_PLUGIN_TRACE`);
/// no token or signing secret is in it.
#[tokio::test(flavor = "multi_thread")]
async fn no_secret_value_crosses_the_wit_boundary() {
    let env = Env::new(vec![Behaviour::answer("traced answer")]).await;
    let trace = env.sandbox.dir.path().join("plugin-trace.log");
    let mut daemon = env.start_with_env(&[("PINCER_PLUGIN_TRACE", trace.to_str().unwrap())]);
    env.slack.connections(1).await;
    env.slack.dm("hello", ALLOWED, "D0DM").await;
    env.slack.posted(1).await;
    let url = format!("http://{}/channels/slack/events", daemon.webhooks);
    let sent = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "mention", "text": "hi", "user": ALLOWED, "channel": "C0CHAN"}),
        )
        .await;
    assert_eq!(sent["status"], 200, "{sent}");
    env.slack.posted(2).await;
    env.slack.calls("reactions.remove", 2).await;
    assert!(daemon.stop().success(), "{}", daemon.log());

    let recorded = std::fs::read_to_string(&trace).unwrap();
    for what in [
        "← channel.connect",
        "→ channel.on-frame",
        "→ channel.handle-webhook",
        "→ channel.send",
        "→ channel.status",
        "→ import http.fetch",
        "→ import secrets.verify",
        "→ import config.get",
    ] {
        assert!(
            recorded.contains(what),
            "the trace has no {what:?}:\n{recorded}"
        );
    }
    // The Events API request body the plugin received is in it, as text.
    assert!(recorded.contains("event_callback"), "{recorded}");
    for (name, secret) in [
        ("bot token", BOT_TOKEN),
        ("app-level token", APP_TOKEN),
        ("signing secret", SIGNING_SECRET),
    ] {
        assert!(
            !recorded.contains(secret),
            "the {name} crossed into the component:\n{}",
            recorded
                .lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_reply_arrives_in_ordered_parts_and_a_failed_turn_says_why() {
    let paragraph = |i: usize| {
        format!(
            "Paragraph {i}: {}",
            "lorem ipsum dolor sit amet ".repeat(20)
        )
    };
    let long = (0..20).map(paragraph).collect::<Vec<_>>().join("\n\n");
    assert!(long.len() > 3 * 3500);
    let env = Env::new(vec![Behaviour::answer(&long), Behaviour::Status(500)]).await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("tell me a lot", ALLOWED, "D0DM").await;
    let first = env.slack.posted(2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    let parts: Vec<String> = calls["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["args"]["text"].as_str().unwrap().to_string())
        .collect();
    assert!(first.len() >= 2 && parts.len() >= 3, "{parts:#?}");
    for part in &parts {
        assert!(part.len() <= 3500, "a part of {} bytes", part.len());
    }
    let numbers: Vec<usize> = parts
        .join("\n")
        .match_indices("Paragraph ")
        .map(|(at, _)| {
            parts.join("\n")[at + 10..]
                .split(':')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        })
        .collect();
    assert_eq!(
        numbers,
        (0..20).collect::<Vec<_>>(),
        "every paragraph, in order"
    );

    env.slack.dm("and now?", ALLOWED, "D0DM").await;
    let all = env.slack.posted(parts.len() + 1).await;
    let last = all.last().unwrap()["args"]["text"].as_str().unwrap();
    assert!(last.contains("could not be answered"), "{last}");
    assert!(last.contains("500"), "the reason is given: {last}");
    env.slack.calls("reactions.remove", 2).await;
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// The fake itself is checked against Slack's own client code: the
/// official `slack_sdk`'s WebClient, Socket Mode client and
/// SignatureVerifier (`tests/python/fake_slack_check.py`).
#[test]
fn the_fake_slack_agrees_with_slack_sdk() {
    let out = Command::new(support::gateway::python())
        .arg(support::gateway::python_script("fake_slack_check.py"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("all checks passed"),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `workspaces/team/schedules.yaml` beside `pincer.yaml`: a 6-field
/// every-2-seconds skill call and an agent turn every 3 s, both delivered
/// to Slack through the outbox and recorded with their receipts.
#[tokio::test(flavor = "multi_thread")]
async fn scheduled_skill_calls_and_agent_turns_are_delivered_and_recorded() {
    let env = Env::new(vec![Behaviour::answer("the briefing")]).await;
    env.sandbox.write(
        "workspaces/team/schedules.yaml",
        r#"tasks:
  - id: calc_every_2s
    description: 每两秒算一次
    schedule: "*/2 * * * * *"
    skill: skill-calc__evaluate
    skill_input: {expression: "6*7"}
    deliver_to: ["channel:slack"]
  - id: briefing
    every: 3s
    prompt: "write the briefing"
    deliver_to: [{channel: slack, conversation: C0BRIEF}]
"#,
    );
    let mut daemon = env.start();
    assert!(
        daemon.banner.contains("2 scheduled task(s)"),
        "{}",
        daemon.banner
    );
    let posted = env.slack.posted(3).await;
    let mut sched = posted.iter().filter(|p| p["args"]["channel"] == "C0SCHED");
    let calc = sched
        .next()
        .expect("the skill's output went to the default conversation");
    assert!(
        calc["args"]["text"].as_str().unwrap().contains("42"),
        "{calc}"
    );
    // Wait for a briefing too (every 3 s).
    let mut briefing = None;
    for n in 3..12 {
        let posted = env.slack.posted(n).await;
        briefing = posted
            .iter()
            .find(|p| p["args"]["channel"] == "C0BRIEF")
            .cloned();
        if briefing.is_some() {
            break;
        }
    }
    let briefing = briefing.expect("the agent turn's reply was delivered");
    assert_eq!(briefing["args"]["text"], "the briefing");
    assert!(daemon.stop().success(), "{}", daemon.log());

    let runs: Vec<(String, String, Option<String>, Option<String>)> = env
        .sandbox
        .rows("SELECT task, status, output, receipts FROM schedule_runs WHERE status = 'done' ORDER BY id")
        .iter()
        .map(|r| (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap(), r.get(3).unwrap()))
        .collect();
    for (task, conversation) in [("calc_every_2s", "C0SCHED"), ("briefing", "C0BRIEF")] {
        let run = runs
            .iter()
            .find(|r| r.0 == task)
            .unwrap_or_else(|| panic!("no done run of {task}: {runs:?}"));
        let receipts: serde_json::Value =
            serde_json::from_str(run.3.as_deref().unwrap_or("null")).unwrap();
        assert_eq!(receipts[0]["channel"], "slack", "{run:?}");
        assert_eq!(receipts[0]["conversation"], conversation, "{run:?}");
        assert!(receipts[0]["outbox"][0].is_i64(), "{run:?}");
    }
    // The briefing ran in a session of its own, not in a person's chat.
    let sessions: i64 = env.sandbox.scalar(
        "SELECT COUNT(*) FROM sessions WHERE channel = 'schedule' AND conversation = 'briefing'",
    );
    assert_eq!(sessions, 1);

    // The history and pause, from the CLI.
    // Where the output went: the outbox row and Slack's own receipt (the
    // message's `ts`, as chat.postMessage answered it).
    let history = ok(env.cli(&["schedule", "history", "calc_every_2s"]));
    let ts = calc["response"]["ts"]
        .as_str()
        .expect("the fake answered a ts");
    assert!(
        history.contains("done") && history.contains(&format!("→ slack/C0SCHED sent {ts}")),
        "{history}"
    );
    let paused = ok(env.cli(&["schedule", "pause", "calc_every_2s"]));
    assert!(
        paused.contains("paused task `calc_every_2s` of workspace `team`"),
        "{paused}"
    );
    let history = ok(env.cli(&["schedule", "history", "calc_every_2s"]));
    assert!(history.contains("is paused"), "{history}");
    ok(env.cli(&["schedule", "resume", "calc_every_2s"]));
    let unknown = env.cli(&["schedule", "pause", "nope"]);
    assert!(
        support::stderr(&unknown).contains("no task `nope`: not in any workspace's schedules.yaml"),
        "{}",
        support::stderr(&unknown)
    );
}

/// A failed run, a skill call that errors and an agent turn that outlasts
/// its `timeout:`, is recorded `failed` with its error, told to its
/// `deliver_to` and audited as `schedule.run_failed`.
#[tokio::test(flavor = "multi_thread")]
async fn a_failed_scheduled_run_is_recorded_reported_and_audited() {
    let env = Env::new(vec![Behaviour::slow_answer(20_000, "too late")]).await;
    env.sandbox.write(
        "workspaces/team/schedules.yaml",
        r#"tasks:
  - id: bad_sum
    schedule: "*/2 * * * * *"
    skill: skill-calc__evaluate
    skill_input: {expression: "6*"}
    deliver_to: ["channel:slack"]
  - id: slow_turn
    every: 3s
    prompt: "take your time"
    timeout: 1s
    overlap: skip
    deliver_to: [{channel: slack, conversation: C0SLOW}]
"#,
    );
    let mut daemon = env.start();
    let mut failures: Vec<Value> = Vec::new();
    for n in 2..12 {
        failures = env.slack.posted(n).await;
        let to = |c: &str| failures.iter().any(|p| p["args"]["channel"] == c);
        if to("C0SCHED") && to("C0SLOW") {
            break;
        }
    }
    let text_to = |channel: &str| {
        failures
            .iter()
            .find(|p| p["args"]["channel"] == channel)
            .and_then(|p| p["args"]["text"].as_str())
            .unwrap_or_else(|| panic!("nothing posted to {channel}: {failures:#?}"))
            .to_owned()
    };
    let skill_error = text_to("C0SCHED");
    assert!(
        skill_error.starts_with(
            "⚠️ Scheduled task `bad_sum` failed: skill-calc__evaluate: invalid arguments: "
        ),
        "{skill_error}"
    );
    assert_eq!(
        text_to("C0SLOW"),
        "⚠️ Scheduled task `slow_turn` failed: the run took longer than its timeout (1s)"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());

    let history = ok(env.cli(&["schedule", "history", "bad_sum"]));
    let reason = skill_error
        .strip_prefix("⚠️ Scheduled task `bad_sum` failed: ")
        .unwrap();
    assert!(
        history.contains(&format!(
            "failed      {}",
            reason.chars().take(80).collect::<String>()
        )),
        "{history}"
    );
    assert!(history.contains("→ slack/C0SCHED sent "), "{history}");
    let history = ok(env.cli(&["schedule", "history", "slow_turn", "--json"]));
    let runs: Value = serde_json::from_str(&history).unwrap();
    let failed = runs
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["status"] == "failed")
        .unwrap_or_else(|| panic!("{runs:#}"));
    assert_eq!(failed["error"], "the run took longer than its timeout (1s)");
    assert_eq!(
        failed["delivery"][0]["conversation"], "C0SLOW",
        "{failed:#}"
    );
    let audited = env.sandbox.audited("schedule.run_failed");
    for task in ["bad_sum", "slow_turn"] {
        assert!(
            audited
                .iter()
                .any(|a| a.starts_with(&format!("task `{task}` due "))),
            "{audited:#?}"
        );
    }
    let actors: Vec<String> = env
        .sandbox
        .rows("SELECT DISTINCT actor FROM audit_events WHERE kind = 'schedule.run_failed'")
        .iter()
        .map(|r| r.get(0).unwrap())
        .collect();
    assert_eq!(actors, ["scheduler"]);
}

/// `kill -9` while a scheduled agent turn is `running`: after the restart
/// that due time is `interrupted` and not run again (no
/// `rerun_interrupted`).
#[tokio::test(flavor = "multi_thread")]
async fn a_run_cut_by_kill_9_is_interrupted_and_not_run_again() {
    let env = Env::new(vec![Behaviour::slow_answer(60_000, "never seen")]).await;
    let mut daemon = env.start();
    // Written once the daemon runs (it loads a new file within a second),
    // due a few seconds later.
    let at = (chrono::Utc::now() + chrono::Duration::seconds(5))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    env.sandbox.write(
        "workspaces/team/schedules.yaml",
        &format!(
            "tasks:\n  - id: long_turn\n    at: {at}\n    prompt: \"think hard\"\n    deliver_to: [\"channel:slack\"]\n"
        ),
    );
    let statuses = || -> Vec<(i64, String, i64)> {
        env.sandbox
            .rows("SELECT due_ms, status, attempt FROM schedule_runs WHERE task = 'long_turn' ORDER BY id")
            .iter()
            .map(|r| (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap()))
            .collect()
    };
    let mut seen = Vec::new();
    for _ in 0..300 {
        seen = statuses();
        if seen.iter().any(|r| r.1 == "running") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        seen.iter().any(|r| r.1 == "running"),
        "{seen:?}\n{}",
        daemon.log()
    );
    // Let the turn reach the model, so the kill lands mid-turn.
    tokio::time::sleep(Duration::from_secs(1)).await;
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();
    drop(daemon);

    let mut daemon = env.start();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = statuses();
    assert_eq!(after.len(), 1, "one run of that due time: {after:?}");
    assert_eq!(after[0].1, "interrupted", "{after:?}");
    assert_eq!(after[0].2, 1, "not attempted again: {after:?}");
    let history = ok(env.cli(&["schedule", "history", "long_turn"]));
    assert!(
        history.contains("interrupted interrupted: its daemon stopped or its lease ran out"),
        "{history}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// An edited `schedules.yaml` is loaded by the running daemon: an invalid
/// one keeps the previous tasks and says why; a valid one replaces them.
#[tokio::test(flavor = "multi_thread")]
async fn an_edited_schedule_is_reloaded_and_an_invalid_one_keeps_the_old_tasks() {
    let env = Env::new(vec![Behaviour::answer("unused")]).await;
    let schedule = |id: &str, expression: &str| {
        format!(
            "tasks:\n  - id: {id}\n    schedule: \"*/2 * * * * *\"\n    skill: skill-calc__evaluate\n    skill_input: {{expression: \"{expression}\"}}\n    deliver_to: [\"channel:slack\"]\n"
        )
    };
    let file = env
        .sandbox
        .write("workspaces/team/schedules.yaml", &schedule("first", "6*7"));
    let mut daemon = env.start();
    env.slack.posted(1).await;

    std::fs::write(
        &file,
        "tasks:\n  - id: broken\n    schedule: \"61 * * * *\"\n    prompt: x\n",
    )
    .unwrap();
    for _ in 0..100 {
        if daemon.log().contains("keeps its previous schedule") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = daemon.log();
    assert!(log.contains("keeps its previous schedule"), "{log}");
    assert!(
        log.contains("schedules.yaml:3:"),
        "the error is located: {log}"
    );

    std::fs::write(&file, schedule("second", "1+1")).unwrap();
    daemon.wait_for_line("reloaded: 1 task(s) for workspace `team`");
    let mut seen = false;
    for n in 2..12 {
        let posted = env.slack.posted(n).await;
        if posted.iter().any(|p| {
            p["args"]["text"]
                .as_str()
                .unwrap_or_default()
                .contains("1+1")
        }) {
            seen = true;
            break;
        }
    }
    assert!(seen, "the new task ran");
    assert!(daemon.stop().success(), "{}", daemon.log());
    let last_first: i64 = env
        .sandbox
        .scalar("SELECT MAX(due_ms) FROM schedule_runs WHERE task = 'first'");
    let first_second: i64 = env
        .sandbox
        .scalar("SELECT MIN(due_ms) FROM schedule_runs WHERE task = 'second'");
    assert!(
        last_first <= first_second,
        "the removed task stopped when the new one began"
    );
}

/// The daemon's own status snapshot (`run/status.json`).
fn snapshot(env: &Env) -> Value {
    let text =
        std::fs::read(env.sandbox.home().join("run").join("status.json")).unwrap_or_default();
    serde_json::from_slice(&text).unwrap_or(Value::Null)
}

async fn wait_for_tasks(env: &Env, workspace: &str, count: u64) {
    for _ in 0..100 {
        if snapshot(env)["schedules"][workspace]["tasks"] == count {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!(
        "workspace {workspace} never had {count} task(s): {}",
        snapshot(env)
    );
}

/// A `schedules.yaml` written after the daemon started (its folder did not
/// exist) is loaded; `schedule list` shows its next fire time in its zone;
/// `schedule run` runs it now and shows where the output went, with Slack's
/// receipt; an invalid edit keeps the task and `pincer status` says why.
#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_added_later_is_listed_run_by_hand_and_its_problems_shown() {
    let env = Env::new(vec![Behaviour::answer("unused")]).await;
    let mut daemon = env.start();
    assert!(
        daemon.banner.contains("0 scheduled task(s)"),
        "{}",
        daemon.banner
    );
    let file = env.sandbox.write(
        "workspaces/team/schedules.yaml",
        r#"tasks:
  - id: nightly
    description: 每晚三点
    schedule: "0 3 * * *"
    timezone: Asia/Shanghai
    skill: skill-calc__evaluate
    skill_input: {expression: "6*7"}
    deliver_to: ["channel:slack"]
"#,
    );
    daemon.wait_for_line("reloaded: 1 task(s) for workspace `team`");

    let list = ok(env.cli(&["schedule", "list"]));
    assert!(list.contains("workspace team:"), "{list}");
    assert!(
        list.contains("nightly  schedule \"0 3 * * *\" in Asia/Shanghai"),
        "{list}"
    );
    assert!(
        list.contains(" 03:00 +08:00 (") && list.contains(" 19:00 UTC)"),
        "next fire time in its zone, with UTC: {list}"
    );

    let run = ok(env.cli(&["schedule", "run", "nightly"]));
    assert!(run.contains("queued run #"), "{run}");
    assert!(run.contains("42"), "the skill's output: {run}");
    let posted = env.slack.posted(1).await;
    assert_eq!(posted[0]["args"]["channel"], "C0SCHED");
    assert!(posted[0]["args"]["text"].as_str().unwrap().contains("42"));
    let ts = posted[0]["response"]["ts"].as_str().unwrap().to_string();
    let mut history = String::new();
    for _ in 0..50 {
        history = ok(env.cli(&["schedule", "history", "nightly"]));
        if history.contains("sent") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(history.contains("(run by hand)  done"), "{history}");
    assert!(
        history.contains(&format!("→ slack/C0SCHED sent {ts}")),
        "{history}"
    );
    let list = ok(env.cli(&["schedule", "list"]));
    assert!(list.contains("last run done"), "{list}");

    std::fs::write(
        &file,
        "tasks:\n  - id: nightly\n    schedule: \"0 3 * * *\"\n    timezone: Mars/Base\n    prompt: x\n",
    )
    .unwrap();
    for _ in 0..100 {
        if daemon.log().contains("keeps its previous schedule") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await; // the next status snapshot
    let status = ok(env.cli(&["status"]));
    assert!(
        status.contains("team                 1 task(s)"),
        "the previous task is kept: {status}"
    );
    assert!(
        status.contains("PROBLEM: ")
            && status.contains("schedules.yaml:4:15: unknown time zone `Mars/Base`"),
        "{status}"
    );
    // A plugin named alone is checked against its tools when the file is
    // loaded, not first when the task runs.
    std::fs::write(
        &file,
        "tasks:\n  - id: nightly\n    every: 1h\n    skill: skill-calc\n",
    )
    .unwrap();
    let want = format!(
        "{}:4:12: skill `skill-calc` has several tools (evaluate, convert): name one with `tool:` or write `skill: skill-calc__TOOL`",
        file.display()
    );
    for _ in 0..100 {
        if daemon.log().contains(&want) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        daemon
            .log()
            .contains(&format!("keeps its previous schedule: {want}\n")),
        "{}",
        daemon.log()
    );
    let unknown = env.cli(&["schedule", "run", "nope"]);
    assert!(
        support::stderr(&unknown).contains("no task `nope`"),
        "{}",
        support::stderr(&unknown)
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// With `agent_schedules: propose` the agent, in a turn, proposes a task
/// through `schedule__create` on its gateway endpoint; it waits, disabled,
/// until a person approves it; then it runs (here by hand) as an agent turn
/// delivered to the channel; the audit shows it came from the agent.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_the_agent_proposes_runs_only_once_a_person_approves_it() {
    let create = r#"{"id":"standup","schedule":"0 9 * * 1-5","timezone":"Asia/Shanghai","prompt":"write the standup notes","deliver_to":["channel:slack"]}"#;
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("schedule__create", create),
            Behaviour::answer("I proposed a standup task"),
            Behaviour::answer("standup notes: all good"),
        ],
        FakeSlack::start(),
        "{skills: [skill-calc], agent_schedules: propose}",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack
        .dm("remind the team every weekday at 9", ALLOWED, "D0DM")
        .await;
    let posted = env.slack.posted(1).await;
    assert_eq!(posted[0]["args"]["text"], "I proposed a standup task");
    // what the tool told the model
    let received = env.model.received();
    let tool_result = received
        .iter()
        .flat_map(|r| r["messages"].as_array().cloned().unwrap_or_default())
        .find(|m| m["role"] == "tool")
        .expect("the tool's result went back to the model");
    assert!(
        tool_result["content"]
            .to_string()
            .contains("proposed task `agent-standup`"),
        "{tool_result}"
    );

    let list = ok(env.cli(&["schedule", "list"]));
    assert!(list.contains("agent-standup (agent)"), "{list}");
    assert!(list.contains("PENDING APPROVAL"), "{list}");
    let proposed = env.sandbox.audited("schedule.agent_proposed");
    assert!(
        proposed.len() == 1 && proposed[0].starts_with("agent-standup: "),
        "{proposed:?}"
    );
    let early = env.cli(&["schedule", "run", "agent-standup"]);
    assert!(
        support::stderr(&early).contains("waits for approval"),
        "{}",
        support::stderr(&early)
    );
    wait_for_tasks(&env, "team", 0).await;

    let approved = ok(env.cli(&["schedule", "approve", "agent-standup"]));
    assert!(
        approved.contains("approved task `agent-standup` of workspace `team`")
            && approved.contains("+08:00"),
        "{approved}"
    );
    assert_eq!(env.sandbox.audited("schedule.approved").len(), 1);
    wait_for_tasks(&env, "team", 1).await;

    let run = ok(env.cli(&["schedule", "run", "agent-standup"]));
    assert!(run.contains("standup notes: all good"), "{run}");
    let posted = env.slack.posted(2).await;
    assert!(
        posted
            .iter()
            .any(|p| p["args"]["channel"] == "C0SCHED"
                && p["args"]["text"] == "standup notes: all good"),
        "{posted:#?}"
    );

    let cancelled = ok(env.cli(&["schedule", "cancel", "agent-standup"]));
    assert!(
        cancelled.contains("cancelled task `agent-standup`"),
        "{cancelled}"
    );
    wait_for_tasks(&env, "team", 0).await;
    let list = ok(env.cli(&["schedule", "list"]));
    assert!(!list.contains("agent-standup"), "{list}");
    assert!(daemon.stop().success(), "{}", daemon.log());
}

fn rand_micros() -> u32 {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The button ids of a posted message's actions block.
fn buttons(posted: &Value) -> Vec<String> {
    posted["args"]["blocks"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|b| b["type"] == "actions")
        .flat_map(|b| b["elements"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e["action_id"].as_str().map(str::to_string))
        .collect()
}

/// The `apr_…` id of the approval request in a posted message.
fn request_id(posted: &Value) -> String {
    let text = posted["args"]["text"].as_str().unwrap_or_default();
    let start = text
        .find("apr_")
        .unwrap_or_else(|| panic!("no request id in {posted:#}"));
    text[start..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect()
}

/// The last tool result the model was sent (empty if none).
pub(crate) fn last_tool_result(env: &Env) -> String {
    env.model
        .received()
        .last()
        .and_then(|request| request["messages"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str().map(str::to_string))
        .unwrap_or_default()
}

/// Whether a posted text is a turn's status line (not an answer).
fn is_status_line(text: &str) -> bool {
    text.starts_with("⏳") || text.starts_with("✅ finished") || text.starts_with("⚠️ stopped")
}

/// The texts of the first `count` messages the bot posted that are not
/// status lines, waiting for them (60 s at most).
pub(crate) async fn texts(env: &Env, count: usize) -> Vec<String> {
    for _ in 0..600 {
        let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
        let said: Vec<String> = calls["calls"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|c| c["status"] == 200 && c["response"]["ok"] == true)
            .filter_map(|c| c["args"]["text"].as_str().map(str::to_string))
            .filter(|t| !is_status_line(t))
            .collect();
        if said.len() >= count {
            return said;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {count} answers were posted");
}

/// Issue 27: a DM asks for `bash rm -rf /workspace/x` in tier approval.
/// The request is posted before anything runs; a colleague's approval is
/// refused (nothing runs, audited); the originator's "once" runs exactly
/// that call; the same call in the next turn asks again, and a denial
/// reaches the model with its reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_slack_turn_waits_for_its_originator_and_runs_exactly_what_was_approved() {
    let rm = r#"{"command":"rm -rf /workspace/x"}"#;
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", rm),
            Behaviour::answer("x is gone"),
            Behaviour::tool("bash", rm),
            Behaviour::answer("I was not allowed to"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval}}",
    )
    .await;
    // Made by the container's own user, so its `rm` may remove it.
    let x = env.sandbox.dir.path().join("ws/team/x");
    let make_x = || {
        ok(env.cli(&[
            "workspace",
            "exec",
            "team",
            "--",
            "mkdir",
            "-p",
            "/workspace/x",
        ]));
        assert!(x.exists());
    };
    make_x();
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("please remove x", ALLOWED, "D0DM").await;
    let posted = env.slack.posted(1).await;
    let text = posted[0]["args"]["text"].as_str().unwrap();
    assert!(
        text.contains("rm -rf /workspace/x") && text.contains(ALLOWED),
        "{text}"
    );
    let id = request_id(&posted[0]);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(x.exists(), "nothing runs before a decision");

    // A colleague is refused and nothing changes.
    env.slack
        .dm(&format!("/approve {id}"), COLLEAGUE, "D0DM")
        .await;
    let texts_now = texts(&env, 2).await;
    assert!(
        texts_now[1].contains(&format!("only {ALLOWED} can decide")),
        "{texts_now:#?}"
    );
    assert!(x.exists());
    assert_eq!(
        env.sandbox.audited("approval.refused_approver").len(),
        1,
        "{}",
        daemon.log()
    );

    // The originator's "once" runs it, and the turn answers.
    env.slack
        .dm(&format!("/approve {id}"), ALLOWED, "D0DM")
        .await;
    let texts_now = texts(&env, 4).await;
    assert!(
        texts_now[2].contains("approved once by U0ALLOWED"),
        "{texts_now:#?}"
    );
    assert_eq!(texts_now[3], "x is gone");
    assert!(!x.exists());
    assert_eq!(env.sandbox.audited("approval.requested").len(), 1);
    assert_eq!(env.sandbox.audited("approval.granted").len(), 1);

    // The same call again is asked again; a denial reaches the model.
    make_x();
    env.slack.dm("and again", ALLOWED, "D0DM").await;
    let texts_now = texts(&env, 5).await;
    let again = request_id(&env.slack.posted(5).await[4]);
    assert_ne!(again, id, "once is once: {texts_now:#?}");
    env.slack
        .dm(&format!("/deny {again} not twice"), ALLOWED, "D0DM")
        .await;
    let texts_now = texts(&env, 7).await;
    assert!(
        texts_now[5].contains("denied by U0ALLOWED: not twice"),
        "{texts_now:#?}"
    );
    assert_eq!(texts_now[6], "I was not allowed to");
    assert!(x.exists(), "a denied call does not run");
    let told = last_tool_result(&env);
    assert!(told.contains("denied by U0ALLOWED: not twice"), "{told}");
    // A click on a request already decided says so.
    env.slack
        .dm(&format!("/approve {id}"), ALLOWED, "D0DM")
        .await;
    let texts_now = texts(&env, 8).await;
    assert!(
        texts_now[7].contains("already granted by U0ALLOWED"),
        "{texts_now:#?}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Issue 27: `kill -9` while a request is pending loses nothing. After the
/// restart the request is still listed; the originator's approval resumes
/// the turn from the stored session with the approved call (the model is
/// not asked for it again) and the reply arrives once.
#[tokio::test(flavor = "multi_thread")]
async fn a_request_pending_across_kill_9_resumes_its_turn_once_decided() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/approved"}"#),
            Behaviour::answer("touched after the restart"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval}}",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("touch it", ALLOWED, "D0DM").await;
    let posted = env.slack.posted(1).await;
    let id = request_id(&posted[0]);
    // Killed once the request's receipt is stored: the reply between
    // Slack's accept and that write is the one window a message can be
    // sent twice (docs/slack.md), and this test is about the request.
    for _ in 0..100 {
        let delivered: i64 = env
            .sandbox
            .scalar("SELECT COUNT(*) FROM channel_outbox WHERE receipt IS NOT NULL");
        if delivered > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    daemon.child.kill().unwrap();
    daemon.child.wait().unwrap();

    let listed = ok(env.cli(&["approvals", "list", "--json"]));
    assert!(listed.contains(&id), "{listed}");
    let mut again = env.start();
    env.slack.connections(2).await;
    env.slack
        .dm(&format!("/approve {id}"), ALLOWED, "D0DM")
        .await;
    let texts_now = texts(&env, 3).await;
    assert!(texts_now[1].contains("approved once"), "{texts_now:#?}");
    assert_eq!(texts_now[2], "touched after the restart");
    assert!(env.sandbox.dir.path().join("ws/team/approved").exists());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(
        calls["calls"].as_array().unwrap().len(),
        3,
        "the reply arrives once"
    );
    assert_eq!(
        env.model.received().len(),
        2,
        "the model was not asked again for the decided call"
    );
    assert_eq!(
        env.inbound().iter().filter(|(_, s)| s == "done").count(),
        2,
        "{:?}",
        env.inbound()
    );
    assert!(again.stop().success(), "{}", again.log());
}

/// Issue 27, Slack's buttons. The request arrives as Block Kit (checked by
/// slack_sdk's models in the fake) with *Approve once / This session /
/// Always / Deny*. A colleague's click is refused with a message only they
/// see (audited, nothing runs); a click carrying the request's button on
/// another message is refused (audited); the originator's click runs
/// exactly the call, and the message is replaced by the outcome without
/// buttons. A redelivered click does nothing; a fresh click on a decided
/// request is told so. "This session" covers the same program for the rest
/// of the session; "Always", clicked through the Events API's signed form
/// POST, stores a rule the CLI lists; "Deny" reaches the model.
#[tokio::test(flavor = "multi_thread")]
async fn slack_buttons_decide_for_the_originator_on_the_request_message_only() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"rm -rf /workspace/x"}"#),
            Behaviour::answer("x is gone"),
            Behaviour::tool("bash", r#"{"command":"touch /workspace/a"}"#),
            Behaviour::tool("bash", r#"{"command":"touch /workspace/b"}"#),
            Behaviour::answer("touched"),
            Behaviour::tool("bash", r#"{"command":"mkdir /workspace/m"}"#),
            Behaviour::answer("made"),
            Behaviour::tool("bash", r#"{"command":"rm -rf /workspace/m"}"#),
            Behaviour::answer("not allowed"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval}}",
    )
    .await;
    let ws = env.sandbox.dir.path().join("ws/team");
    ok(env.cli(&[
        "workspace",
        "exec",
        "team",
        "--",
        "mkdir",
        "-p",
        "/workspace/x",
    ]));
    let mut daemon = env.start();
    env.slack.connections(1).await;

    // 1. The request, with its four buttons, before anything runs.
    env.slack.dm("please remove x", ALLOWED, "D0DM").await;
    let asked = env.slack.posted(1).await.remove(0);
    let ts = asked["response"]["ts"].as_str().unwrap().to_string();
    let id = request_id(&asked);
    let ids = buttons(&asked);
    let button = |choice: &str| format!("pincer-approval:{id}:{choice}");
    assert_eq!(
        ids,
        ["once", "session", "always", "deny"].map(button),
        "{asked:#}"
    );
    let section = asked["args"]["blocks"][0]["text"]["text"].as_str().unwrap();
    assert!(
        section.contains("rm -rf /workspace/x") && section.contains(ALLOWED),
        "{section}"
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(ws.join("x").exists(), "nothing runs before a decision");

    // A colleague's click: refused, told to them alone, nothing runs.
    env.click_sent(&button("once"), &ts, COLLEAGUE, "D0DM")
        .await;
    let only = env.slack.calls("chat.postEphemeral", 1).await;
    assert_eq!(only[0]["args"]["user"], COLLEAGUE, "{only:#?}");
    assert!(
        only[0]["args"]["text"]
            .as_str()
            .unwrap()
            .contains(&format!("only {ALLOWED}")),
        "{only:#?}"
    );
    assert_eq!(env.sandbox.audited("approval.refused_approver").len(), 1);
    // The originator clicking the request's button on another message.
    env.slack
        .click(&button("once"), "1700000000.999900", ALLOWED, "D0DM", None)
        .await;
    let forged = wait_audited(&env, "approval.refused_click", 1).await;
    assert!(forged[0].contains("1700000000.999900"), "{forged:?}");
    assert!(ws.join("x").exists(), "{}", daemon.log());

    // The originator's click runs it; the message shows who decided, no buttons.
    let action_ts = env
        .slack
        .click(&button("once"), &ts, ALLOWED, "D0DM", None)
        .await;
    let updated = env.slack.calls("chat.update", 1).await;
    let update = &updated[0];
    assert_eq!(update["response"]["ok"], true, "{update:#}");
    assert_eq!(update["args"]["ts"], ts);
    assert!(
        update["args"]["text"]
            .as_str()
            .unwrap()
            .contains("Approved once by U0ALLOWED"),
        "{update:#}"
    );
    assert!(buttons(update).is_empty(), "buttons removed: {update:#}");
    assert_eq!(texts(&env, 2).await[1], "x is gone");
    assert!(!ws.join("x").exists());
    // The same click delivered again changes and says nothing.
    env.slack
        .click(&button("once"), &ts, ALLOWED, "D0DM", Some(&action_ts))
        .await;
    // A fresh click on the decided request is told so, to the clicker.
    env.slack
        .click(&button("deny"), &ts, ALLOWED, "D0DM", None)
        .await;
    let only = env.slack.calls("chat.postEphemeral", 2).await;
    assert!(
        only[1]["args"]["text"]
            .as_str()
            .unwrap()
            .contains("already granted by U0ALLOWED"),
        "{only:#?}"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postEphemeral").await;
    assert_eq!(calls["calls"].as_array().unwrap().len(), 2, "{calls:#}");
    assert_eq!(env.sandbox.audited("approval.granted").len(), 1);

    // 2. "This session": the next `touch` of the session is not asked.
    env.slack.dm("touch two files", ALLOWED, "D0DM").await;
    let asked = env.slack.posted(3).await.remove(2);
    let second = request_id(&asked);
    env.click_sent(
        &format!("pincer-approval:{second}:session"),
        asked["response"]["ts"].as_str().unwrap(),
        ALLOWED,
        "D0DM",
    )
    .await;
    assert_eq!(texts(&env, 4).await[3], "touched");
    assert!(ws.join("a").exists() && ws.join("b").exists());
    assert_eq!(env.sandbox.audited("approval.requested").len(), 2);
    let updated = env.slack.calls("chat.update", 2).await;
    assert!(
        updated[1]["args"]["text"]
            .as_str()
            .unwrap()
            .contains("for this session"),
        "{updated:#?}"
    );

    // 3. "Always", clicked through the Events API (a signed form POST).
    env.slack.dm("make m", ALLOWED, "D0DM").await;
    let asked = env.slack.posted(5).await.remove(4);
    let third = request_id(&asked);
    let url = format!("http://{}/channels/slack/interactive", daemon.webhooks);
    let sent = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "interactive", "user": ALLOWED, "channel": "D0DM",
                   "ts": asked["response"]["ts"], "action_id": format!("pincer-approval:{third}:always")}),
        )
        .await;
    assert_eq!(sent["status"], 200, "{sent}");
    assert!(sent["elapsed_ms"].as_f64().unwrap() < 3000.0, "{sent}");
    assert_eq!(texts(&env, 6).await[5], "made");
    let rules = ok(env.cli(&["approvals", "rules", "--workspace", "team"]));
    assert!(rules.contains("bash: mkdir /workspace/m"), "{rules}");
    // A forged interactivity request is refused before the plugin reads it.
    let forged = env
        .slack
        .post(
            "/events/send",
            json!({"url": url, "kind": "interactive", "user": ALLOWED, "channel": "D0DM",
                   "ts": asked["response"]["ts"], "bad_signature": true,
                   "action_id": format!("pincer-approval:{third}:deny")}),
        )
        .await;
    assert_eq!(forged["status"], 401, "{forged}");

    // 4. "Deny" reaches the model; nothing runs.
    env.slack.dm("remove m", ALLOWED, "D0DM").await;
    let asked = env.slack.posted(7).await.remove(6);
    let fourth = request_id(&asked);
    env.click_sent(
        &format!("pincer-approval:{fourth}:deny"),
        asked["response"]["ts"].as_str().unwrap(),
        ALLOWED,
        "D0DM",
    )
    .await;
    assert_eq!(texts(&env, 8).await[7], "not allowed");
    assert!(ws.join("m").exists(), "a denied call does not run");
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    for call in calls["calls"].as_array().unwrap() {
        assert_eq!(
            call["response"]["ok"], true,
            "Slack accepted every message: {call:#}"
        );
    }
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Waits until `count` audit events of `kind` are recorded; returns them.
async fn wait_audited(env: &Env, kind: &str, count: usize) -> Vec<String> {
    for _ in 0..100 {
        let found = env.sandbox.audited(kind);
        if found.len() >= count {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {count} `{kind}` audit events");
}

/// Issue 27: a scheduled prompt has nobody to ask. Its agent's `bash` call
/// in a workspace where approvals are in force is refused under
/// `unattended: deny` without a request; the model reads why, the refusal
/// is audited, nothing runs, and the run's reply is delivered as usual.
#[tokio::test(flavor = "multi_thread")]
async fn a_scheduled_run_that_needs_an_approval_is_denied_unattended_and_says_why() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/unattended"}"#),
            Behaviour::answer("I could not touch it"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval, unattended: deny}}",
    )
    .await;
    env.sandbox.write(
        "workspaces/team/schedules.yaml",
        r#"tasks:
  - id: nightly_touch
    every: 1h
    prompt: "touch the file"
    deliver_to: [{channel: slack, conversation: C0NIGHT}]
"#,
    );
    let mut daemon = env.start();
    let run = ok(env.cli(&["schedule", "run", "nightly_touch"]));
    assert!(run.contains("queued run #"), "{run}");
    let posted = env.slack.posted(1).await;
    assert_eq!(posted[0]["args"]["channel"], "C0NIGHT", "{posted:#?}");
    assert_eq!(posted[0]["args"]["text"], "I could not touch it");
    assert!(!env.sandbox.dir.path().join("ws/team/unattended").exists());
    let denied = env.sandbox.audited("approval.denied");
    assert!(
        denied.len() == 1 && denied[0].contains("approvals.unattended: deny"),
        "{denied:?}"
    );
    assert!(env.sandbox.audited("approval.requested").is_empty());
    let told = last_tool_result(&env);
    assert!(
        told.contains("nobody can be asked in a scheduled run"),
        "{told}"
    );
    let (_, calls) = env.slack.get("/calls?method=chat.postMessage").await;
    assert_eq!(
        calls["calls"].as_array().unwrap().len(),
        1,
        "no request was posted"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Issue 27: a schedule may name who decides its run's calls and where they
/// are asked (`approvals: {ask_in, approvers}`). The request is posted with
/// buttons in that conversation (not where the output goes); an allowed
/// sender the task does not name is refused; a named approver's "once"
/// runs exactly the call and the run's output is delivered. A second task
/// whose run ends (its timeout) while its request waits leaves the request
/// expired, its message says so, and a late click is told "expired".
#[tokio::test(flavor = "multi_thread")]
async fn a_scheduled_run_asks_the_approvers_its_task_names_where_it_says() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/scheduled"}"#),
            Behaviour::answer("touched it"),
            Behaviour::tool("bash", r#"{"command":"touch /workspace/hasty"}"#),
            Behaviour::answer("unreachable"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval, unattended: deny}}",
    )
    .await;
    env.sandbox.write(
        "workspaces/team/schedules.yaml",
        &format!(
            r#"tasks:
  - id: nightly_touch
    every: 1h
    prompt: "touch the file"
    deliver_to: [{{channel: slack, conversation: C0NIGHT}}]
    approvals: {{ask_in: {{channel: slack, conversation: C0OPS}}, approvers: [{COLLEAGUE}]}}
  - id: hasty
    every: 1h
    prompt: "touch another"
    timeout: 5s
    approvals: {{ask_in: "channel:slack", approvers: [{COLLEAGUE}]}}
"#
        ),
    );
    let mut daemon = env.start();
    env.slack.connections(1).await;
    let run = ok(env.cli(&["schedule", "run", "nightly_touch", "--no-wait"]));
    assert!(run.contains("queued run #"), "{run}");
    let asked = env.slack.posted(1).await.remove(0);
    assert_eq!(asked["args"]["channel"], "C0OPS", "{asked:#}");
    let text = asked["args"]["text"].as_str().unwrap();
    assert!(
        text.contains(&format!("Only {COLLEAGUE} (or an operator) can decide")),
        "{text}"
    );
    let ts = asked["response"]["ts"].as_str().unwrap().to_string();
    let once = buttons(&asked)
        .into_iter()
        .find(|b| b.ends_with(":once"))
        .expect("an Approve once button");

    // An allowed sender the task does not name: refused, told alone.
    env.click_sent(&once, &ts, ALLOWED, "C0OPS").await;
    let only = env.slack.calls("chat.postEphemeral", 1).await;
    let told = only[0]["args"]["text"].as_str().unwrap();
    assert!(told.contains(&format!("only {COLLEAGUE}")), "{told}");
    assert_eq!(only[0]["args"]["user"], ALLOWED);
    assert_eq!(env.sandbox.audited("approval.refused_approver").len(), 1);
    let ws = env.sandbox.dir.path().join("ws/team");
    assert!(!ws.join("scheduled").exists());

    // The named approver: the call runs, the output goes where it goes.
    env.slack.click(&once, &ts, COLLEAGUE, "C0OPS", None).await;
    let posted = env.slack.posted(2).await;
    assert_eq!(posted[1]["args"]["channel"], "C0NIGHT", "{posted:#?}");
    assert_eq!(posted[1]["args"]["text"], "touched it");
    assert!(ws.join("scheduled").exists());
    let updated = env.slack.calls("chat.update", 1).await;
    let shown = updated[0]["args"]["text"].as_str().unwrap();
    assert!(
        shown.contains(&format!("Approved once by {COLLEAGUE}")),
        "{shown}"
    );
    let granted = env.sandbox.audited("approval.granted");
    assert!(
        granted.len() == 1 && granted[0].contains(COLLEAGUE),
        "{granted:?}"
    );

    // A run that ends while its request waits leaves it expired.
    let run = ok(env.cli(&["schedule", "run", "hasty", "--no-wait"]));
    assert!(run.contains("queued run #"), "{run}");
    let asked = env.slack.posted(3).await.remove(2);
    assert_eq!(asked["args"]["channel"], "C0SCHED", "{asked:#}");
    let ts = asked["response"]["ts"].as_str().unwrap().to_string();
    let once = buttons(&asked).remove(0);
    let updated = env.slack.calls("chat.update", 2).await;
    let shown = updated[1]["args"]["text"].as_str().unwrap();
    assert!(
        shown.contains("Expired: the scheduled run ended before anyone decided"),
        "{shown}"
    );
    assert!(buttons(&updated[1]).is_empty());
    env.click_sent(&once, &ts, COLLEAGUE, "C0SCHED").await;
    let only = env.slack.calls("chat.postEphemeral", 2).await;
    let told = only[1]["args"]["text"].as_str().unwrap();
    assert!(told.contains("expired"), "{told}");
    assert!(!ws.join("hasty").exists());
    let history = ok(env.cli(&["schedule", "history", "hasty"]));
    assert!(history.contains("timeout"), "{history}");
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Issue 27: `/tier` in a conversation tightens its approvals from the next
/// message on, and never loosens them: `/tier read-only` makes the next
/// `bash` refused without asking; `/tier yolo` is refused (the workspace
/// says approval); `/tier` shows where it stands; `/tier approval` goes
/// back, and the next `bash` is asked again.
#[tokio::test(flavor = "multi_thread")]
async fn tier_commands_tighten_a_conversation_and_never_loosen_it() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/ro"}"#),
            Behaviour::answer("not allowed here"),
            Behaviour::tool("bash", r#"{"command":"touch /workspace/asked"}"#),
            Behaviour::answer("asked"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval}}",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("/tier read-only", ALLOWED, "D0DM").await;
    assert!(texts(&env, 1).await[0].contains("tier `read-only` from the next message on"));
    env.slack.dm("touch it", ALLOWED, "D0DM").await;
    assert_eq!(texts(&env, 2).await[1], "not allowed here");
    assert!(!env.sandbox.dir.path().join("ws/team/ro").exists());
    assert!(
        env.sandbox.audited("approval.requested").is_empty(),
        "nobody was asked"
    );
    let told = last_tool_result(&env);
    assert!(told.contains("read-only"), "{told}");

    env.slack.dm("/tier yolo", COLLEAGUE, "D0DM").await;
    let now = texts(&env, 3).await;
    assert!(
        now[2].contains("would loosen") && now[2].contains("Nothing changed"),
        "{now:#?}"
    );
    env.slack.dm("/tier", ALLOWED, "D0DM").await;
    assert!(texts(&env, 4).await[3].contains("tier `read-only`"));
    env.slack.dm("/tier approval", ALLOWED, "D0DM").await;
    assert!(texts(&env, 5).await[4].contains("tier `approval`"));
    env.slack.dm("touch another", ALLOWED, "D0DM").await;
    let asked = env.slack.posted(6).await.remove(5);
    assert!(!buttons(&asked).is_empty(), "asked again: {asked:#}");
    assert_eq!(env.sandbox.audited("approval.tier_set").len(), 2);
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Issue 27: a task the agent scheduled itself never runs a call that
/// needs a person's approval, even where `approvals.unattended: allow` lets
/// a person's tasks run theirs: the agent cannot grant itself, through a
/// task, what nobody was asked for.
#[tokio::test(flavor = "multi_thread")]
async fn a_task_the_agent_made_never_runs_an_approval_tool_unattended() {
    let create = r#"{"id":"tidy","schedule":"0 9 * * 1-5","prompt":"tidy up","deliver_to":["channel:slack"]}"#;
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("schedule__create", create),
            Behaviour::answer("scheduled"),
            Behaviour::tool("bash", r#"{"command":"touch /workspace/agent-made"}"#),
            Behaviour::answer("could not tidy"),
        ],
        FakeSlack::start(),
        "{agent_schedules: auto, approvals: {tier: approval, unattended: allow}}",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("tidy up every weekday", ALLOWED, "D0DM").await;
    assert_eq!(texts(&env, 1).await[0], "scheduled");
    wait_for_tasks(&env, "team", 1).await;
    let run = ok(env.cli(&["schedule", "run", "agent-tidy"]));
    assert!(run.contains("could not tidy"), "{run}");
    assert!(!env.sandbox.dir.path().join("ws/team/agent-made").exists());
    let denied = env.sandbox.audited("approval.denied");
    assert!(
        denied.len() == 1 && denied[0].contains("a task the agent scheduled itself"),
        "{denied:?}"
    );
    assert!(env.sandbox.audited("approval.requested").is_empty());
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// Issue 27: nobody deciding within `timeout` denies the call; the request's
/// message is replaced by that outcome (its buttons gone), the model reads
/// the denial, and a click that arrives afterwards is told "expired" in a
/// message only the clicker sees.
#[tokio::test(flavor = "multi_thread")]
async fn an_expired_request_is_denied_shown_and_a_late_click_told_so() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/late"}"#),
            Behaviour::answer("nobody answered"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval, timeout: 10s}}",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("touch it", ALLOWED, "D0DM").await;
    let asked = env.slack.posted(1).await.remove(0);
    let ts = asked["response"]["ts"].as_str().unwrap().to_string();
    let once = buttons(&asked).remove(0);
    assert_eq!(texts(&env, 2).await[1], "nobody answered");
    let updated = env.slack.calls("chat.update", 1).await;
    assert!(
        updated[0]["args"]["text"]
            .as_str()
            .unwrap()
            .contains("Nobody decided within 10s; the call was denied"),
        "{updated:#?}"
    );
    assert!(buttons(&updated[0]).is_empty());
    assert!(!env.sandbox.dir.path().join("ws/team/late").exists());
    assert_eq!(env.sandbox.audited("approval.expired").len(), 1);
    env.slack.click(&once, &ts, ALLOWED, "D0DM", None).await;
    let only = env.slack.calls("chat.postEphemeral", 1).await;
    assert!(
        only[0]["args"]["text"]
            .as_str()
            .unwrap()
            .contains("expired"),
        "{only:#?}"
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// A channel member who may not decide cannot flood by pressing buttons:
/// each refused click is audited and answered (to them alone), so clicks
/// count against the clicker's rate as messages do (20 a minute) and the
/// ones past it change, record and post nothing.
#[tokio::test(flavor = "multi_thread")]
async fn pressing_a_button_over_and_over_is_held_to_the_senders_rate() {
    let env = Env::with_workspace(
        vec![
            Behaviour::tool("bash", r#"{"command":"touch /workspace/x"}"#),
            Behaviour::answer("done"),
        ],
        FakeSlack::start(),
        "{approvals: {tier: approval}}",
    )
    .await;
    let mut daemon = env.start();
    env.slack.connections(1).await;
    env.slack.dm("touch x", ALLOWED, "D0DM").await;
    let asked = env.slack.posted(1).await.remove(0);
    let ts = asked["response"]["ts"].as_str().unwrap().to_string();
    let once = buttons(&asked).remove(0);
    env.sandbox.sent_recorded(&ts).await;
    for _ in 0..25 {
        env.slack.click(&once, &ts, COLLEAGUE, "D0DM", None).await;
    }
    let answered = env.slack.calls("chat.postEphemeral", 20).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, calls) = env.slack.get("/calls?method=chat.postEphemeral").await;
    assert_eq!(
        calls["calls"].as_array().unwrap().len(),
        20,
        "{answered:#?}"
    );
    assert_eq!(env.sandbox.audited("approval.refused_approver").len(), 20);
    assert!(!env.sandbox.dir.path().join("ws/team/x").exists());
    assert!(daemon.stop().success(), "{}", daemon.log());
}
