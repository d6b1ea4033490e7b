//! pincer's listeners under attack (SECURITY.md, "Listeners"): the real
//! `pincer start` daemon with the real `channel-slack` component (Events API
//! only: a signed webhook needs no fake Slack) and real workspace
//! containers. Half-sent requests from the network, a connection flood from
//! inside a container against its own gateway socket, listeners beyond
//! loopback in the configuration, and the containers' open-file limit.
//! Loopback and the test's own containers only.

use crate::support;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use hmac::{Hmac, Mac};
use sha2::Sha256;
use support::daemon::Daemon;
use support::{DockerCleanup, Sandbox, fails, ok, stderr, unique};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
/// The header timeout the tests configure, in seconds.
const HEADER_SECS: u64 = 1;

struct Env {
    // Dropped first: it reads the instance id from the sandbox's home.
    _cleanup: DockerCleanup,
    sandbox: Sandbox,
    config: PathBuf,
}

impl Env {
    /// Workspaces `flood` and `calm`, a Slack channel on `calm` (Events API,
    /// no Socket Mode), a one-second header timeout everywhere, and
    /// `extra_gateway_limits` / `extra_containers` added to those sections.
    fn new(gateway_limits: &str, channel_limits: &str, containers: &str) -> Self {
        let sandbox = Sandbox::new();
        let base = sandbox.dir.path().join("ws");
        for ws in ["flood", "calm"] {
            std::fs::create_dir_all(base.join(ws)).unwrap();
        }
        let config = sandbox.write(
            "pincer.yaml",
            &format!(
                r#"gateway:
  num_retries: 0
  limits: {{header_read_secs: {HEADER_SECS}{gateway_limits}}}
  model_list:
    - model_name: default
      litellm_params: {{model: openai/fake-model, api_base: "http://127.0.0.1:9/v1", api_key: "sk-listen-test"}}
containers:
  workspace_base_path: {base}
{containers}workspaces:
  flood: {{}}
  calm: {{}}
channels:
  listen: 127.0.0.1:0
  limits: {{header_read_secs: {HEADER_SECS}{channel_limits}}}
  slack:
    plugin: channel-slack
    workspace: calm
    allowed_senders: [U0ALLOWED]
    http: ["127.0.0.1:*"]
    config:
      bot_token: "${{SLACK_BOT_TOKEN}}"
      signing_secret: "${{SLACK_SIGNING_SECRET}}"
      api_base: "http://127.0.0.1:9/api/"
"#,
                base = base.display(),
            ),
        );
        let env = Env {
            _cleanup: DockerCleanup {
                home: sandbox.home(),
                label: unique(),
            },
            sandbox,
            config,
        };
        ok(env.cli(&["image", "build"]));
        env
    }

    fn command(&self) -> Command {
        let mut command = crate::support::pincer_command();
        command
            .args(["--config", self.config.to_str().unwrap()])
            .current_dir(self.sandbox.work())
            .env("PINCER_HOME", self.sandbox.home())
            .env_remove("PINCER_LOG")
            .env("SLACK_BOT_TOKEN", "xoxb-fake-bot-token")
            .env("SLACK_SIGNING_SECRET", SIGNING_SECRET);
        command
    }

    fn cli(&self, args: &[&str]) -> std::process::Output {
        self.command().args(args).output().unwrap()
    }

    fn start(&self) -> Daemon {
        let log = self
            .sandbox
            .dir
            .path()
            .join(format!("daemon-{}.log", unique()));
        let mut command = self.command();
        command
            .args(["start", "--listen", "127.0.0.1:0"])
            .env("PINCER_LOG", "info");
        let daemon = Daemon::spawn(command, log);
        assert!(!daemon.webhooks.is_empty(), "{}", daemon.banner);
        daemon
    }

    fn socket(&self, workspace: &str) -> PathBuf {
        self.sandbox
            .home()
            .join("run")
            .join(workspace)
            .join("gateway")
            .join("gateway.sock")
    }
}

/// A correctly signed Slack `url_verification` to the webhook listener at
/// `addr`: its status, body and how long it took.
async fn signed_webhook(addr: &str) -> (u16, String, Duration) {
    let body = r#"{"token":"Jhj5dZrVaK7ZwHHjRyZWjbDl","challenge":"listen-challenge-42","type":"url_verification"}"#;
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let mut mac = Hmac::<Sha256>::new_from_slice(SIGNING_SECRET.as_bytes()).unwrap();
    mac.update(format!("v0:{timestamp}:{body}").as_bytes());
    let signature = format!("v0={}", hex::encode(mac.finalize().into_bytes()));
    let request = format!(
        "POST /channels/slack/events HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         X-Slack-Request-Timestamp: {timestamp}\r\nX-Slack-Signature: {signature}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (status, body) = exchange(stream, &request).await;
    (status, body, started.elapsed())
}

/// Sends `request` (with `Connection: close`) and reads the answer: status
/// and body. Panics after 10 s.
async fn exchange<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(
    mut stream: S,
    request: &str,
) -> (u16, String) {
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("an answer within 10 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {answer:?}"));
    let body = answer
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn get(path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: pincer\r\n{extra}Connection: close\r\n\r\n")
}

/// Opens `count` connections to `addr`, sends each a request head cut
/// short, and returns them with the instant each was opened.
async fn half_sent(addr: &str, count: usize) -> Vec<(tokio::net::TcpStream, Instant)> {
    let mut open = Vec::with_capacity(count);
    for _ in 0..count {
        let opened = Instant::now();
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"POST /channels/slack/events HTTP/1.1\r\nHost: x\r\nContent-Ty")
            .await
            .unwrap();
        open.push((stream, opened));
    }
    open
}

/// How long after it was opened the server closed each connection (`None`:
/// still open `within` after the call).
async fn closed_after(
    open: Vec<(tokio::net::TcpStream, Instant)>,
    within: Duration,
) -> Vec<Option<Duration>> {
    let waits = open.into_iter().map(|(mut stream, opened)| async move {
        let mut buf = [0u8; 512];
        loop {
            match tokio::time::timeout(within, stream.read(&mut buf)).await {
                Err(_) => return None,
                // A 408 or nothing, then the end: closed either way.
                Ok(Ok(0)) | Ok(Err(_)) => return Some(opened.elapsed()),
                Ok(Ok(_)) => continue,
            }
        }
    });
    futures_util::future::join_all(waits).await
}

/// 2,000 connections that never finish their request head, to the webhook
/// listener and then to the gateway's TCP port: each is closed by the
/// server once the header timeout (1 s here) has passed, and meanwhile
/// both listeners answer a normal request at once.
#[tokio::test(flavor = "multi_thread")]
async fn half_sent_requests_are_closed_after_the_header_timeout_and_listeners_keep_answering() {
    // Caps above the 2,000, so that what closes them is the timeout.
    let env = Env::new(", max_connections: 3000", ", max_connections: 3000", "");
    let mut daemon = env.start();
    let gateway = daemon.gateway.trim_start_matches("http://").to_string();
    for (target, addr) in [
        ("webhooks", daemon.webhooks.clone()),
        ("gateway", gateway.clone()),
    ] {
        let open = half_sent(&addr, 2000).await;

        // The listeners answer while the 2,000 hang.
        let (status, body, took) = signed_webhook(&daemon.webhooks).await;
        assert_eq!(
            status,
            200,
            "{target}: signed webhook: {body}\n{}",
            daemon.log()
        );
        assert!(body.contains("listen-challenge-42"), "{target}: {body}");
        assert!(
            took < Duration::from_secs(3),
            "{target}: webhook took {took:?}"
        );
        let started = Instant::now();
        let stream = tokio::net::TcpStream::connect(&gateway).await.unwrap();
        let (status, body) = exchange(stream, &get("/health", "")).await;
        assert_eq!((status, body.as_str()), (200, "ok"), "{target}: gateway");
        assert!(started.elapsed() < Duration::from_secs(3), "{target}");

        let closed = closed_after(open, Duration::from_secs(HEADER_SECS + 6)).await;
        let still_open = closed.iter().filter(|c| c.is_none()).count();
        assert_eq!(
            still_open, 0,
            "{target}: {still_open} of 2000 half-sent requests still open {} s after the header timeout",
            6
        );
        let early = closed
            .iter()
            .flatten()
            .filter(|after| **after < Duration::from_millis(HEADER_SECS * 1000 - 100))
            .count();
        assert_eq!(
            early, 0,
            "{target}: {early} closed before the header timeout"
        );
    }
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// A static program run inside the flooding container: `ATTEMPTS`
/// non-blocking connects to the gateway socket, each sent a cut-short
/// head and held until the container's open-file limit, when all are
/// closed and the flood goes on; then it holds what it has for `HOLD` s.
const FLOOD_C: &str = r#"
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
static int fds[200000];
int main(int argc, char **argv) {
    if (argc != 4) return 2;
    signal(SIGPIPE, SIG_IGN);
    int attempts = atoi(argv[2]), hold = atoi(argv[3]), held = 0;
    long connected = 0, failed = 0, emfile = 0;
    struct sockaddr_un addr;
    memset(&addr, 0, sizeof addr);
    addr.sun_family = AF_UNIX;
    strncpy(addr.sun_path, argv[1], sizeof addr.sun_path - 1);
    const char *head = "GET /v1/models HTTP/1.1\r\nHost: x\r\n";
    for (int i = 0; i < attempts; i++) {
        int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            if (errno != EMFILE && errno != ENFILE) { perror("socket"); return 3; }
            emfile++;
            for (int j = 0; j < held; j++) close(fds[j]);
            held = 0;
            continue;
        }
        if (connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0) {
            connected++;
            send(fd, head, strlen(head), MSG_NOSIGNAL);
            if (held < 200000) fds[held++] = fd; else close(fd);
        } else {
            failed++;
            close(fd);
            if (errno == EAGAIN) usleep(200);
        }
    }
    printf("attempts=%d connected=%ld failed=%ld emfile=%ld held=%d\n",
           attempts, connected, failed, emfile, held);
    fflush(stdout);
    sleep(hold);
    return 0;
}
"#;

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// From inside workspace `flood`'s real container, 20,000 connection
/// attempts to its own gateway socket: the daemon's descriptors stay
/// within the socket's cap (64) of where they were, and workspace `calm`,
/// the webhook listener and the gateway port keep answering at once.
#[tokio::test(flavor = "multi_thread")]
async fn a_connection_flood_from_one_container_starves_neither_the_daemon_nor_other_workspaces() {
    let env = Env::new("", "", "");
    let key = ok(env.cli(&["gateway", "keys", "create", "calm", "--name", "probe"]));
    let key = key.trim().to_string();
    let program = env
        .sandbox
        .dir
        .path()
        .join("ws")
        .join("flood")
        .join("flood");
    let source = env.sandbox.dir.path().join("flood.c");
    std::fs::write(&source, FLOOD_C).unwrap();
    let built = Command::new("gcc")
        .args(["-static", "-O1", "-o"])
        .arg(&program)
        .arg(&source)
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );

    let mut daemon = env.start();
    let pid = daemon.child.id();
    let gateway = daemon.gateway.trim_start_matches("http://").to_string();
    // The container exists and its socket is in use before the baseline.
    ok(env.cli(&["workspace", "exec", "flood", "--", "true"]));
    let baseline = fd_count(pid);

    let flood = env
        .command()
        .args(["workspace", "exec", "flood", "--timeout-ms", "60000", "--"])
        .args([
            "/workspace/flood",
            "/run/pincer/gateway/gateway.sock",
            "20000",
            "6",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampling = done.clone();
    let sampler = std::thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(60);
        let mut most = 0;
        while Instant::now() < until && !sampling.load(std::sync::atomic::Ordering::Relaxed) {
            most = most.max(fd_count(pid));
            std::thread::sleep(Duration::from_millis(20));
        }
        most
    });

    // Give the flood time to start, then ask the others, several times.
    tokio::time::sleep(Duration::from_secs(3)).await;
    for round in 0..3 {
        let started = Instant::now();
        let stream = tokio::net::UnixStream::connect(env.socket("calm"))
            .await
            .unwrap();
        let (status, body) = exchange(
            stream,
            &get("/v1/models", &format!("Authorization: Bearer {key}\r\n")),
        )
        .await;
        assert_eq!(
            status,
            200,
            "round {round}: calm's socket: {body}\n{}",
            daemon.log()
        );
        assert!(body.contains("\"default\""), "{body}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "round {round}: calm took {:?}",
            started.elapsed()
        );

        let (status, body, took) = signed_webhook(&daemon.webhooks).await;
        assert_eq!(
            status,
            200,
            "round {round}: webhook: {body}\n{}",
            daemon.log()
        );
        assert!(
            took < Duration::from_secs(2),
            "round {round}: webhook took {took:?}"
        );

        let stream = tokio::net::TcpStream::connect(&gateway).await.unwrap();
        let (status, _) = exchange(stream, &get("/health", "")).await;
        assert_eq!(status, 200, "round {round}: gateway port");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let out = flood.wait_with_output().unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let report = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "the flood program failed: {report}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let connected: u64 = report
        .split_whitespace()
        .find_map(|w| w.strip_prefix("connected="))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no count in {report:?}"));
    // More than the container's open-file limit: the flood was real and
    // the server went on closing what it did not serve.
    assert!(connected > 1024, "{report}");
    let most = sampler.join().unwrap();
    eprintln!("flood: {report}; daemon descriptors: baseline {baseline}, most {most}");
    assert!(
        most <= baseline + 64 + 40,
        "the daemon held {most} descriptors during the flood (baseline {baseline}, cap 64): {report}"
    );
    assert!(
        daemon.log().contains("connection(s) closed at once"),
        "{}",
        daemon.log()
    );
    assert!(daemon.stop().success(), "{}", daemon.log());
}

/// `containers.nofile` is the container's open-file limit, soft and hard.
#[test]
fn a_containers_open_file_limit_is_containers_nofile() {
    let env = Env::new("", "", "  nofile: 512\n");
    let soft = ok(env.cli(&["workspace", "exec", "calm", "--", "sh", "-c", "ulimit -n"]));
    let hard = ok(env.cli(&["workspace", "exec", "calm", "--", "sh", "-c", "ulimit -Hn"]));
    assert_eq!((soft.trim(), hard.trim()), ("512", "512"));
}

/// Listeners beyond loopback are refused by `config check` and `start`
/// with the position and the key that allows them.
#[test]
fn listeners_beyond_loopback_need_allow_remote() {
    let sandbox = Sandbox::new();
    let check = |name: &str, text: &str| {
        let path = sandbox.write(name, text);
        let out = sandbox.pincer(&["--config", path.to_str().unwrap(), "config", "check"]);
        (path, out)
    };
    // channels.listen, with no channel configured.
    let (path, out) = check("webhooks.yaml", "channels:\n  listen: 0.0.0.0:4100\n");
    let err = fails(out);
    assert!(
        err.contains(&format!("{}:2:11:", path.display()))
            && err.contains("channels.allow_remote: true")
            && err.contains("0.0.0.0:4100"),
        "{err}"
    );
    let started = fails(sandbox.pincer(&["--config", path.to_str().unwrap(), "start"]));
    assert!(started.contains("channels.allow_remote: true"), "{started}");
    let (_, out) = check(
        "webhooks-ok.yaml",
        "channels:\n  listen: 0.0.0.0:4100\n  allow_remote: true\n",
    );
    ok(out);

    let (path, out) = check("gateway.yaml", "gateway:\n  listen: \"[::]:4000\"\n");
    let err = fails(out);
    assert!(
        err.contains(&format!("{}:2:11:", path.display()))
            && err.contains("gateway.allow_remote: true"),
        "{err}"
    );
    let started = fails(sandbox.pincer(&["--config", path.to_str().unwrap(), "start"]));
    assert!(started.contains("gateway.allow_remote: true"), "{started}");
    // allowed, but /metrics would be open to all: the key is named
    let (path, out) = check(
        "gateway-nokey.yaml",
        "gateway:\n  listen: 192.0.2.1:4000\n  allow_remote: true\n",
    );
    let err = fails(out);
    assert!(
        err.contains(&format!("{}:2:11:", path.display())) && err.contains("gateway.metrics_key"),
        "{err}"
    );
    let (_, out) = check(
        "gateway-ok.yaml",
        "gateway:\n  listen: 0.0.0.0:4000\n  allow_remote: true\n  metrics_key: 0123456789abcdef0123\n",
    );
    ok(out);

    // A `--listen` beyond loopback is refused the same way.
    let path = sandbox.write("plain.yaml", "gateway:\n  listen: 127.0.0.1:0\n");
    let refused = sandbox.pincer(&[
        "--config",
        path.to_str().unwrap(),
        "gateway",
        "serve",
        "--listen",
        "0.0.0.0:0",
    ]);
    let err = stderr(&refused);
    assert!(
        !refused.status.success() && err.contains("gateway.allow_remote: true"),
        "{err}"
    );
}
