//! What the Slack benches share: the fake Slack (`tests/python/fake_slack.py`)
//! and the real `pincer start` daemon with its config and secrets, each
//! stopped on drop (`docker.rs` removes the instance's containers).

#![allow(dead_code)] // each bench uses its part

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};
use serde_json::Value;

pub const BOT_TOKEN: &str = "xoxb-fake-bot-token";
pub const APP_TOKEN: &str = "xapp-1-fake-app-token";
pub const SIGNING_SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";

/// A bench's scratch folder: `home` (PINCER_HOME), `work` (the config and
/// the working directory) and `base` (the workspaces), removed on drop.
pub struct Scratch {
    pub dir: tempfile::TempDir,
    pub home: PathBuf,
    pub work: PathBuf,
    pub base: PathBuf,
}

impl Scratch {
    pub fn new() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let (home, work, base) = (
            dir.path().join("home"),
            dir.path().join("work"),
            dir.path().join("ws"),
        );
        for path in [&home, &work, &base] {
            std::fs::create_dir_all(path)?;
        }
        Ok(Self {
            dir,
            home,
            work,
            base,
        })
    }
}

/// Serves `app` on a loopback port; its base URL (`http://127.0.0.1:N`).
pub async fn serve(app: axum::Router) -> anyhow::Result<String> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok(base)
}

/// The `q` quantile (0..1) of `sorted`, NaN for none.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// Seconds since the Unix epoch, as the fake Slack stamps what it records.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

// ---- the fake Slack ----------------------------------------------------------------------------

/// `tests/python/fake_slack.py`, killed on drop.
pub struct FakeSlack {
    child: Child,
    pub api_base: String,
    pub control: String,
    http: reqwest::Client,
}

impl FakeSlack {
    pub fn start(log: &Path) -> anyhow::Result<Self> {
        let python = std::env::var("PINCER_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/python/fake_slack.py");
        let mut child = Command::new(&python)
            .arg(script)
            .args(["--bot-token", BOT_TOKEN, "--app-token", APP_TOKEN])
            .args(["--signing-secret", SIGNING_SECRET])
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log)?)
            .spawn()
            .with_context(|| format!("start fake_slack.py with {python}"))?;
        let mut line = String::new();
        BufReader::new(child.stdout.take().context("fake_slack stdout")?).read_line(&mut line)?;
        let ready: Value = serde_json::from_str(&line).with_context(|| {
            format!(
                "fake_slack.py did not start (set PINCER_TEST_PYTHON to a python with \
                 tests/python/requirements.txt): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            )
        })?;
        Ok(Self {
            child,
            api_base: ready["api_base"].as_str().context("api_base")?.to_string(),
            control: ready["control"].as_str().context("control")?.to_string(),
            http: reqwest::Client::builder().no_proxy().build()?,
        })
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self
            .http
            .post(format!("{}{path}", self.control))
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await?;
        Ok(serde_json::from_slice(&response.bytes().await?)?)
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<(u16, Value)> {
        let response = self
            .http
            .get(format!("{}{path}", self.control))
            .timeout(Duration::from_secs(120))
            .send()
            .await?;
        let status = response.status().as_u16();
        let body = serde_json::from_slice(&response.bytes().await?).unwrap_or(Value::Null);
        Ok((status, body))
    }
}

impl Drop for FakeSlack {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---- the daemon --------------------------------------------------------------------------------

/// `pincer start`, killed on drop (stopped with SIGTERM by `stop`).
pub struct Daemon {
    pub child: Child,
}

impl Daemon {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stop(&mut self) -> anyhow::Result<std::process::ExitStatus> {
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        Ok(self.child.wait()?)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn pincer(config: &Path, home: &Path, work: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pincer"));
    command
        .arg("--config")
        .arg(config)
        .current_dir(work)
        .env("PINCER_HOME", home)
        .env_remove("PINCER_CONFIG")
        .env("SLACK_BOT_TOKEN", BOT_TOKEN)
        .env("SLACK_APP_TOKEN", APP_TOKEN)
        .env("SLACK_SIGNING_SECRET", SIGNING_SECRET);
    command
}

/// Builds the default image, then starts the daemon on `config` and waits
/// for its Socket Mode connection to `slack`; its log goes to `log`.
pub async fn start_daemon(
    config: &Path,
    home: &Path,
    work: &Path,
    slack: &FakeSlack,
    log: &Path,
) -> anyhow::Result<Daemon> {
    start_nth_daemon(config, home, work, slack, log, 1).await
}

/// [`start_daemon`] of the `nth` daemon connected to `slack` (it waits for
/// `nth` connections).
pub async fn start_nth_daemon(
    config: &Path,
    home: &Path,
    work: &Path,
    slack: &FakeSlack,
    log: &Path,
    nth: usize,
) -> anyhow::Result<Daemon> {
    let built = pincer(config, home, work)
        .args(["image", "build"])
        .output()?;
    if !built.status.success() {
        bail!(
            "pincer image build failed: {}",
            String::from_utf8_lossy(&built.stderr)
        );
    }
    let mut child = pincer(config, home, work)
        .args(["start", "--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()?;
    let stdout = child.stdout.take().context("daemon stdout")?;
    let daemon = Daemon { child };
    let mut banner = String::new();
    BufReader::new(stdout).read_line(&mut banner)?;
    if !banner.contains("pincer is running") {
        bail!(
            "the daemon did not start: {banner}\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    let (status, _) = slack
        .get(&format!("/wait?what=connections&count={nth}&timeout=60"))
        .await?;
    if status != 200 {
        bail!(
            "no Socket Mode connection: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
    Ok(daemon)
}
