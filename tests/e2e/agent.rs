//! The agent turn end to end: the real `pincer message`, a real workspace
//! container with the real agent runner, the gateway on the workspace's unix
//! socket, and a local fake provider that speaks the OpenAI protocol and
//! scripts the model's tool calls. Network checks use only the test's own
//! containers on a network it created.

use crate::support;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Output, Stdio};

use serde_json::Value;
use support::fake_llm::{Behaviour, FakeUpstream};
use support::{
    DockerCleanup, Sandbox, docker, listener_on_test_network, ok, staged, stderr, unique,
};

const PROVIDER_KEY: &str = "sk-agent-test-provider-key-4f1c";

pub(crate) struct Env {
    // Dropped first: it reads the instance id from the sandbox's home.
    _cleanup: DockerCleanup,
    pub(crate) sandbox: Sandbox,
    config: PathBuf,
    pub(crate) upstream: FakeUpstream,
}

impl Env {
    /// A sandbox whose model `default` is the fake provider scripted with
    /// `script`, and whose workspaces are `workspaces` (YAML under
    /// `workspaces:`).
    pub(crate) async fn new(script: Vec<Behaviour>, workspaces: &str) -> Self {
        let upstream = FakeUpstream::spawn(Behaviour::Script(script)).await;
        let sandbox = Sandbox::new();
        let base = sandbox.dir.path().join("ws");
        let config = sandbox.write(
            "pincer.yaml",
            &format!(
                "gateway:\n  num_retries: 0\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai/fake-model, api_base: \"{}\", api_key: \"{PROVIDER_KEY}\"}}\n\
                 containers:\n  workspace_base_path: {}\nworkspaces:\n{workspaces}",
                upstream.base_url,
                base.display()
            ),
        );
        let env = Env {
            _cleanup: DockerCleanup {
                home: sandbox.home(),
                label: unique(),
            },
            sandbox,
            config,
            upstream,
        };
        ok(env.pincer(&["image", "build"]));
        env
    }

    pub(crate) fn pincer(&self, args: &[&str]) -> Output {
        let mut all = vec!["--config", self.config.to_str().unwrap()];
        all.extend_from_slice(args);
        self.sandbox.pincer(&all)
    }

    /// Rewrites the configuration file with `edit`.
    pub(crate) fn edit_config(&self, edit: impl FnOnce(&str) -> String) {
        let yaml = std::fs::read_to_string(&self.config).unwrap();
        std::fs::write(&self.config, edit(&yaml)).unwrap();
    }

    /// `pincer workspace exec WORKSPACE -- COMMAND…`.
    pub(crate) fn exec(&self, workspace: &str, command: &[&str]) -> Output {
        let mut args = vec!["workspace", "exec", workspace, "--"];
        args.extend_from_slice(command);
        self.pincer(&args)
    }

    /// `pincer message --json`: its events and its exit status.
    pub(crate) fn message(&self, workspace: &str, text: &str) -> (Vec<Value>, Output) {
        let out = self.pincer(&["message", "-w", workspace, "--json", "--text", text]);
        (events(&out), out)
    }

    /// `pincer start` on this sandbox's configuration.
    pub(crate) fn start(&self) -> support::daemon::Daemon {
        let mut command = self.sandbox.command();
        command
            .args(["--config", self.config.to_str().unwrap()])
            .args(["start", "--listen", "127.0.0.1:0"]);
        let log = self
            .sandbox
            .dir
            .path()
            .join(format!("daemon-{}.log", unique()));
        support::daemon::Daemon::spawn(command, log)
    }

    pub(crate) fn workspace_dir(&self, name: &str) -> PathBuf {
        self.sandbox.dir.path().join("ws").join(name)
    }

    pub(crate) fn container(&self, workspace: &str) -> String {
        let id = std::fs::read_to_string(self.sandbox.home().join("instance-id")).unwrap();
        format!("pincer-{}-{workspace}", id.trim())
    }

    /// The messages stored for the terminal conversation of `workspace`.
    fn stored(&self, workspace: &str) -> Vec<Value> {
        let store = pincer::sessions::SessionStore::open_at(&self.sandbox.state()).unwrap();
        let session = store
            .current(&pincer::sessions::SessionKey {
                channel: "cli".into(),
                conversation: "default".into(),
                workspace: workspace.into(),
            })
            .unwrap();
        store
            .messages(session.id)
            .unwrap()
            .into_iter()
            .map(|m| m.message)
            .collect()
    }
}

pub(crate) fn events(out: &Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

pub(crate) fn of_kind<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["event"] == kind).collect()
}

pub(crate) fn last(events: &[Value]) -> &Value {
    events.last().expect("no events")
}

pub(crate) fn tool_results(events: &[Value]) -> Vec<String> {
    of_kind(events, "message")
        .into_iter()
        .filter(|e| e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap_or("").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_turn_writes_a_file_with_bash_reads_it_back_and_answers() {
    let env = Env::new(
        vec![
            Behaviour::tool(
                "bash",
                r#"{"command": "echo hello from the agent > /workspace/hello.txt"}"#,
            ),
            Behaviour::tool("read", r#"{"path": "hello.txt"}"#),
            Behaviour::answer("The file says: hello from the agent"),
        ],
        "  w: {}\n",
    )
    .await;
    let (events, out) = env.message("w", "write hello.txt and read it back");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    let done = last(&events);
    assert_eq!(done["event"], "done", "{events:?}");
    assert_eq!(done["reply"], "The file says: hello from the agent");
    assert_eq!(done["stop"], "finished");
    // The file is in the host's workspace folder.
    let written = std::fs::read_to_string(env.workspace_dir("w").join("hello.txt")).unwrap();
    assert_eq!(written.trim(), "hello from the agent");
    // The model saw the read tool's result.
    let results = tool_results(&events);
    assert_eq!(results.len(), 2, "{results:?}");
    assert!(results[1].contains("hello from the agent"), "{results:?}");
    let requests = env.upstream.received();
    assert_eq!(requests.len(), 3);
    let third = requests[2]["messages"].to_string();
    assert!(third.contains("hello from the agent"), "{third}");
    // The model was offered the built-in tools.
    let offered: Vec<&str> = requests[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    for tool in ["bash", "read", "write", "edit", "glob", "grep"] {
        assert!(offered.contains(&tool), "{tool} not offered: {offered:?}");
    }
    // Stored: user, assistant(tool call), tool, assistant(tool call), tool, assistant.
    let stored = env.stored("w");
    let roles: Vec<&str> = stored.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        [
            "user",
            "assistant",
            "tool",
            "assistant",
            "tool",
            "assistant"
        ]
    );
    // Without --json the reply is what is printed.
    let plain = env.pincer(&["message", "-w", "w", "--text", "again"]);
    assert!(plain.status.success(), "{}", stderr(&plain));
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).trim(),
        "The file says: hello from the agent"
    );
    // The provider key never reached the container.
    let inspect = ok(docker(&["inspect", &env.container("w")]));
    assert!(!inspect.contains(PROVIDER_KEY));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sealed_workspace_still_thinks_through_the_socket_but_cannot_connect_out() {
    // The listener below runs the default image: build it first.
    ok(Sandbox::new().pincer(&["image", "build"]));
    let label = unique();
    // A listener of the test's own on a network the test created.
    let (_net, ip) = listener_on_test_network(&label);
    let probe = format!(r#"{{"command": "nc -w 2 {ip} 8080 </dev/null; echo nc-exit=$?"}}"#);
    let mut env = Env::new(
        vec![
            Behaviour::tool("bash", &probe),
            Behaviour::answer("could not connect"),
        ],
        "  sealed: {policies: [no_internet_access]}\n",
    )
    .await;
    env._cleanup.label = label;
    let (events, out) = env.message("sealed", "try to reach the listener");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(last(&events)["reply"], "could not connect");
    let results = tool_results(&events);
    assert_eq!(results.len(), 1);
    assert!(!results[0].contains("hello-from-listener"), "{results:?}");
    assert!(results[0].contains("nc-exit="), "{results:?}");
    assert!(!results[0].contains("nc-exit=0"), "{results:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn killing_the_container_mid_turn_keeps_what_was_said_and_the_next_turn_works() {
    let env = Env::new(
        vec![
            Behaviour::tool("bash", r#"{"command": "echo started > step1.txt"}"#),
            Behaviour::tool("bash", r#"{"command": "sleep 60"}"#),
            Behaviour::answer("back again"),
        ],
        "  w: {}\n",
    )
    .await;
    let mut child = crate::support::pincer_command()
        .args(["--config", env.config.to_str().unwrap()])
        .args(["message", "-w", "w", "--json", "--text", "work slowly"])
        .current_dir(env.sandbox.work())
        .env("PINCER_HOME", env.sandbox.home())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    // Wait for the second tool call (the sleep) to start, then kill.
    while let Some(Ok(line)) = lines.next() {
        let event: Value = serde_json::from_str(&line).unwrap();
        let sleeping = event["event"] == "tool_start"
            && event["arguments"].as_str().unwrap_or("").contains("sleep");
        seen.push(event);
        if sleeping {
            ok(docker(&["kill", &env.container("w")]));
            break;
        }
    }
    seen.extend(
        lines
            .map_while(Result::ok)
            .map(|l| serde_json::from_str(&l).unwrap()),
    );
    let status = child.wait().unwrap();
    assert!(!status.success());
    let failed = last(&seen);
    assert_eq!(failed["event"], "failed", "{seen:?}");
    assert!(
        failed["message"]
            .as_str()
            .unwrap()
            .contains("container stopped during the turn"),
        "{failed}"
    );
    // Stored: the user message, the first call and its result, the second call.
    let stored = env.stored("w");
    let roles: Vec<&str> = stored.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{stored:?}"
    );
    assert!(env.workspace_dir("w").join("step1.txt").exists());

    // The next turn starts a fresh container and sees a stated result for
    // the call that never finished.
    let (events, out) = env.message("w", "are you there?");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(last(&events)["reply"], "back again");
    let container = of_kind(&events, "container");
    assert_eq!(container[0]["started"], true, "{events:?}");
    let requests = env.upstream.received();
    let history = requests.last().unwrap()["messages"].to_string();
    assert!(history.contains("interrupted"), "{history}");
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_model_output_ends_in_bounded_clear_outcomes() {
    let env = Env::new(
        vec![
            // Invalid JSON arguments, then an unknown tool, then a huge
            // output, then an answer.
            Behaviour::tool("bash", "{not json"),
            Behaviour::tool("no_such_tool", "{}"),
            Behaviour::tool(
                "bash",
                r#"{"command": "head -c 300000 /dev/zero | tr '\\0' 'x'; echo; echo THE-END"}"#,
            ),
            Behaviour::answer("survived"),
        ],
        "  w: {agent: {max_tool_output_bytes: 4096}}\n",
    )
    .await;
    let (events, out) = env.message("w", "misbehave");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(last(&events)["reply"], "survived");
    let ends = of_kind(&events, "tool_end");
    assert_eq!(ends.len(), 3, "{events:?}");
    assert_eq!(ends[0]["ok"], false);
    assert_eq!(ends[1]["ok"], false);
    assert_eq!(ends[2]["truncated"], true);
    assert!(ends[2]["output_bytes"].as_u64().unwrap() > 300_000);
    let results = tool_results(&events);
    assert!(results[0].to_lowercase().contains("json"), "{}", results[0]);
    assert!(results[1].contains("no_such_tool") && results[1].contains("bash"));
    assert!(
        results[2].len() < 6000,
        "{} bytes entered the context",
        results[2].len()
    );
    assert!(results[2].contains("truncated") && results[2].contains("THE-END"));

    // A model that never stops calling tools is stopped by the step limit.
    let looping = Env::new(
        vec![Behaviour::tool("bash", r#"{"command": "true"}"#)],
        "  loop: {agent: {max_steps: 3}}\n",
    )
    .await;
    let (events, out) = looping.message("loop", "loop forever");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(last(&events)["stop"], "step_limit", "{events:?}");
    assert_eq!(looping.upstream.received().len(), 3);
}

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_get_clear_errors() {
    let env = Env::new(vec![Behaviour::answer("unused")], "  w: {}\n").await;
    let out = env.pincer(&["message", "-w", "nope", "--text", "hi"]);
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("no workspace named `nope`"),
        "{}",
        stderr(&out)
    );
    let out = env.pincer(&["message", "-w", "w", "--text", "   "]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("empty"), "{}", stderr(&out));
    // The upstream refusing is reported with its reason, and nothing is lost.
    let failing = Env::new(vec![Behaviour::Status(400)], "  w: {}\n").await;
    let (events, out) = failing.message("w", "hello?");
    assert!(!out.status.success());
    assert_eq!(last(&events)["event"], "failed", "{events:?}");
    assert!(
        last(&events)["message"]
            .as_str()
            .unwrap()
            .contains("upstream says 400")
    );
    assert_eq!(failing.stored("w")[0]["content"], "hello?");
}

#[tokio::test(flavor = "multi_thread")]
async fn with_a_daemon_running_message_hands_the_turn_to_it() {
    let env = Env::new(
        vec![Behaviour::answer("answered by the daemon")],
        "  w: {}\n",
    )
    .await;
    let log = env.sandbox.dir.path().join("daemon.log");
    let mut daemon = crate::support::pincer_command()
        .args(["--config", env.config.to_str().unwrap()])
        .args(["start", "--listen", "127.0.0.1:0"])
        .current_dir(env.sandbox.work())
        .env("PINCER_HOME", env.sandbox.home())
        .env("PINCER_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let mut banner = String::new();
    BufReader::new(daemon.stdout.take().unwrap())
        .read_line(&mut banner)
        .unwrap();
    assert!(banner.contains("pincer is running"), "{banner}");
    // Nobody reads its stdout any more (`pincer start | head -1`): a reload
    // writes there again, and the daemon keeps serving.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGHUP) };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !std::fs::read_to_string(&log)
        .unwrap()
        .contains("configuration reloaded")
    {
        assert!(daemon.try_wait().unwrap().is_none(), "the daemon died");
        assert!(std::time::Instant::now() < deadline, "no reload");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // A second daemon on the same home is refused.
    let second = env.pincer(&["start", "--listen", "127.0.0.1:0"]);
    assert!(!second.status.success());
    assert!(
        stderr(&second).contains("already running"),
        "{}",
        stderr(&second)
    );

    let (events, out) = env.message("w", "hello daemon");
    let _ = daemon.kill();
    let _ = daemon.wait();
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(last(&events)["reply"], "answered by the daemon");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(
        logged.contains("turn requested on the control socket"),
        "{logged}"
    );
    // The daemon is gone: the next message runs in its own process.
    let (events, out) = env.message("w", "hello again");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(env.upstream.received().len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn chat_holds_a_conversation_and_new_starts_a_fresh_session() {
    use std::io::Write;
    let env = Env::new(
        vec![
            Behaviour::answer("one"),
            Behaviour::answer("two"),
            Behaviour::answer("three"),
        ],
        "  w: {}\n",
    )
    .await;
    let mut chat = crate::support::pincer_command()
        .args(["--config", env.config.to_str().unwrap(), "chat", "-w", "w"])
        .current_dir(env.sandbox.work())
        .env("PINCER_HOME", env.sandbox.home())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    chat.stdin
        .take()
        .unwrap()
        .write_all("first\nsecond\n/new\nthird\n".as_bytes())
        .unwrap();
    let out = chat.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = printed.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(lines, ["one", "two", "Started a new session.", "three"]);
    // The second turn saw the first; the one after /new saw only itself.
    let requests = env.upstream.received();
    let users = |i: usize| -> Vec<String> {
        requests[i]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["role"] == "user")
            .map(|m| m["content"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(users(1), ["first", "second"]);
    assert_eq!(users(2), ["third"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn observers_see_the_turn_and_a_stuck_one_holds_nothing_up() {
    let env = Env::new(
        vec![
            Behaviour::tool("bash", r#"{"command": "echo observed"}"#),
            Behaviour::answer("all seen"),
        ],
        "  w: {observers: [observer-stall, observer-jsonl]}\n",
    )
    .await;
    // The stuck observer is a test fixture, installed like any plugin.
    let fixture = staged("observer-stall");
    ok(env.pincer(&["plugin", "install", fixture.to_str().unwrap()]));
    let (events, out) = env.message("w", "watch this");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(last(&events)["reply"], "all seen");
    let log = env
        .sandbox
        .home()
        .join("plugin-data/workspace.w/observer-jsonl/events.jsonl");
    let lines = std::fs::read_to_string(&log).unwrap();
    let kinds: Vec<String> = lines
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["type"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "message_in",
            "llm_usage",
            "tool_call",
            "llm_usage",
            "message_out"
        ],
        "{lines}"
    );
    assert!(lines.contains("watch this") && lines.contains("all seen"));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_made_in_one_session_is_recalled_in_the_next_until_forgotten() {
    let env = Env::new(
        vec![
            Behaviour::tool(
                "memory__memorize",
                r#"{"text": "用户喜欢靠窗的座位", "kind": "preference"}"#,
            ),
            Behaviour::answer("记住了"),
            Behaviour::answer("靠窗的座位"),
            Behaviour::answer("不知道"),
        ],
        "  w: {}\n",
    )
    .await;
    let (events, out) = env.message("w", "我喜欢靠窗的座位，请记住");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    let ends = of_kind(&events, "tool_end");
    assert_eq!(ends[0]["ok"], true, "{events:?}");
    // The memory tools came from the workspace's MCP endpoint.
    let started = of_kind(&events, "started");
    assert!(
        started[0]["tools"].to_string().contains("memory__recall"),
        "{started:?}"
    );

    // A new session: the memory is recalled into the context.
    let (events, out) = env.message("w", "/new 我的座位偏好是什么？");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(of_kind(&events, "context")[0]["memories_recalled"], 1);
    let system = |i: usize| {
        env.upstream.received()[i]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert!(system(2).contains("用户喜欢靠窗的座位"), "{}", system(2));

    // Forgotten: no longer recalled.
    let listed: Value = serde_json::from_str(&ok(env.pincer(&[
        "memory",
        "list",
        "--workspace",
        "w",
        "--json",
    ])))
    .unwrap();
    let id = listed[0]["id"].as_i64().expect("a memory id").to_string();
    ok(env.pincer(&["memory", "forget", "--workspace", "w", &id]));
    let (events, out) = env.message("w", "/new 座位偏好");
    assert!(out.status.success(), "{}\n{events:?}", stderr(&out));
    assert_eq!(of_kind(&events, "context")[0]["memories_recalled"], 0);
    assert!(!system(3).contains("靠窗"), "{}", system(3));
}

/// The runner lives in the container, so what it streams into the host's
/// database is bounded per turn: by events and by bytes.
#[tokio::test(flavor = "multi_thread")]
async fn a_runner_streaming_past_the_turn_bounds_is_stopped_and_audited() {
    let calls: Vec<(String, String)> = (0..40)
        .map(|i| {
            (
                "bash".to_string(),
                format!(
                    r#"{{"command": "head -c 16000 /dev/zero | tr '\\0' '{}'"}}"#,
                    i % 10
                ),
            )
        })
        .collect();
    let env = Env::new(
        vec![Behaviour::ToolCalls(calls)],
        concat!(
            "  flood: {agent: {max_turn_events: 30}}\n",
            "  big: {agent: {max_turn_stored_bytes: 65536}}\n",
        ),
    )
    .await;
    for (workspace, key) in [
        ("flood", "agent.max_turn_events"),
        ("big", "agent.max_turn_stored_bytes"),
    ] {
        let (events, out) = env.message(workspace, "flood the host");
        assert!(!out.status.success(), "{events:?}");
        let end = last(&events);
        assert_eq!(end["event"], "failed", "{end}");
        let message = end["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(key) && message.contains("the turn was stopped"),
            "{message}"
        );
        let stored = env.stored(workspace);
        assert!(
            stored.len() < 40,
            "{} messages were stored past the bound",
            stored.len()
        );
        let audit = ok(env.pincer(&["policy", "audit", workspace]));
        assert!(audit.contains("turn.runner_flood"), "{audit}");
    }
}

/// The workspace folder is the container's: an AGENTS.md that is a symlink
/// to a host file, a symlink to a device, a FIFO or a sparse 1 GB file must
/// neither put host data into the prompt, nor freeze the host, nor flood it.
#[tokio::test(flavor = "multi_thread")]
async fn agents_md_planted_by_the_container_cannot_leak_freeze_or_flood_the_host() {
    const HOST_SECRET: &str = "host-env-secret-7d2e1f-never-in-a-prompt";
    let env = Env::new(vec![Behaviour::answer("ok")], "  w: {}\n").await;
    ok(env.pincer(&["workspace", "exec", "w", "--", "true"]));
    let cases = [
        ("ln -s /proc/self/environ AGENTS.md", "is a symlink"),
        ("ln -s /dev/zero AGENTS.md", "is a symlink"),
        ("/bin/busybox mkfifo AGENTS.md", "FIFO"),
        (
            "/bin/busybox truncate -s 1G AGENTS.md",
            "only its beginning",
        ),
    ];
    for (plant, notice) in cases {
        ok(env.pincer(&[
            "workspace",
            "exec",
            "w",
            "--",
            "sh",
            "-c",
            &format!("cd /workspace && rm -f AGENTS.md && {plant}"),
        ]));
        let before = env.upstream.received().len();
        let mut child = crate::support::pincer_command()
            .args(["--config", env.config.to_str().unwrap()])
            .args(["message", "-w", "w", "--json", "--text", "hi"])
            .current_dir(env.sandbox.work())
            .env("PINCER_HOME", env.sandbox.home())
            .env("PINCER_TEST_HOST_SECRET", HOST_SECRET)
            .env_remove("PINCER_CONFIG")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = child.kill();
                panic!("`{plant}`: the host froze reading AGENTS.md");
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let out = child.wait_with_output().unwrap();
        let events = events(&out);
        assert_eq!(last(&events)["event"], "done", "`{plant}`: {events:?}");
        let requests = env.upstream.received();
        assert_eq!(requests.len(), before + 1);
        let system = requests[before]["messages"][0]["content"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(
            !system.contains(HOST_SECRET) && !system.contains("PINCER_HOME"),
            "`{plant}`: the host's environment went to the provider"
        );
        assert!(
            system.len() < 40 * 1024,
            "`{plant}`: {} bytes",
            system.len()
        );
        let notices: Vec<String> = of_kind(&events, "notice")
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert!(
            notices.iter().any(|n| n.contains(notice)),
            "`{plant}`: no notice with {notice:?}: {notices:?}"
        );
    }
}

/// The token the runner holds (granted over its socket) is nowhere a tool
/// can read it; a runner restarted in the same container (no grant) is
/// granted a fresh one on the next turn.
#[tokio::test(flavor = "multi_thread")]
async fn tools_in_a_turn_cannot_read_the_gateway_token() {
    let probe = "env; echo ---; cat /proc/1/environ | tr '\\0' '\\n'; echo ---; head -c 65536 /proc/1/mem | wc -c; echo ---; for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null | tr '\\0' '\\n'; done; true";
    let arguments = serde_json::json!({ "command": probe }).to_string();
    let env = Env::new(
        vec![
            Behaviour::tool("bash", &arguments),
            Behaviour::answer("looked"),
            Behaviour::tool("bash", &arguments),
            Behaviour::answer("looked again"),
        ],
        "  w: {}\n",
    )
    .await;
    let (events, out) = env.message("w", "look around");
    assert_eq!(
        last(&events)["event"],
        "done",
        "{}\n{events:?}",
        stderr(&out)
    );
    let seen = tool_results(&events).join("\n");
    assert!(
        !seen.contains("pk-pincer-"),
        "a tool saw a gateway token:\n{seen}"
    );
    assert!(
        seen.matches("Permission denied").count() >= 2,
        "/proc/1/environ or /proc/1/mem was readable:\n{seen}"
    );
    // The runner restarts in the same container and holds no token: the
    // host grants a fresh one, and the turn still reaches the gateway.
    ok(docker(&["restart", "-t", "1", &env.container("w")]));
    let (events, out) = env.message("w", "look again");
    assert_eq!(
        last(&events)["event"],
        "done",
        "{}\n{events:?}",
        stderr(&out)
    );
    assert_eq!(last(&events)["reply"], "looked again");
    let seen = tool_results(&events).join("\n");
    assert!(!seen.contains("pk-pincer-"), "{seen}");
}
