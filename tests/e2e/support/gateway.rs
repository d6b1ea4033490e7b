//! `pincer gateway serve` as a child process for end-to-end tests: its own
//! sandbox, a loopback port chosen by the OS, its log in a file.
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};

use super::{Sandbox, ok};

pub struct Served {
    pub sandbox: Sandbox,
    /// `http://127.0.0.1:PORT` (no `/v1`).
    pub base: String,
    child: Child,
    env: Vec<(String, String)>,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Served {
    /// Writes `config` as the sandbox's pincer.yaml and starts the gateway
    /// with `env` added to its environment (and to every `cli` call).
    pub fn start(config: &str, env: &[(&str, &str)]) -> Self {
        let sandbox = Sandbox::new();
        sandbox.write("pincer.yaml", config);
        let mut first = serve(
            &sandbox,
            &sandbox.work().join("pincer.yaml"),
            "gateway.log",
            env,
        );
        let child = first.child.take().expect("the gateway process");
        let base = first.base.clone();
        let env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            sandbox,
            base,
            child,
            env,
        }
    }

    /// A second `pincer gateway serve` on the same config, home and
    /// environment (its log in `log`, in the sandbox's folder).
    pub fn another(&self, log: &str) -> Another {
        let env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        serve(
            &self.sandbox,
            &self.sandbox.work().join("pincer.yaml"),
            log,
            &env,
        )
    }

    /// The real binary on the same config, home and environment.
    pub fn cli(&self, args: &[&str]) -> Output {
        crate::support::pincer_command()
            .arg("--config")
            .arg(self.sandbox.work().join("pincer.yaml"))
            .args(args)
            .current_dir(self.sandbox.work())
            .env("PINCER_HOME", self.sandbox.home())
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .output()
            .expect("run pincer")
    }

    /// What `pincer gateway usage ARGS` prints once `shows` accepts it, or
    /// after 10 s: the serving process writes usage about one group-commit
    /// window after each answer (docs/gateway.md), so another process reads
    /// it a little later.
    pub fn usage_showing(&self, args: &[&str], shows: impl Fn(&str) -> bool) -> String {
        let started = std::time::Instant::now();
        let command: Vec<&str> = ["gateway", "usage"].iter().chain(args).copied().collect();
        loop {
            let usage = ok(self.cli(&command));
            if shows(&usage) || started.elapsed() > std::time::Duration::from_secs(10) {
                return usage;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Mints a key for `workspace` and returns it.
    pub fn key(&self, workspace: &str) -> String {
        ok(self.cli(&["gateway", "keys", "create", workspace]))
            .trim()
            .to_string()
    }

    /// What the gateway has logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.sandbox.dir.path().join("gateway.log")).unwrap_or_default()
    }

    /// `kind` audit records of `workspace`, as their details.
    /// [`Self::audited`] once `shows` accepts it, or after 10 s: a
    /// `gateway.call` event is written with the call's usage, about one
    /// group-commit window after the answer.
    pub fn audited_showing(
        &self,
        workspace: &str,
        kind: &str,
        shows: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let started = std::time::Instant::now();
        loop {
            let audited = self.audited(workspace, kind);
            if shows(&audited) || started.elapsed() > std::time::Duration::from_secs(10) {
                return audited;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    pub fn audited(&self, workspace: &str, kind: &str) -> Vec<String> {
        let audit: serde_json::Value =
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

/// A `pincer gateway serve` process; killed on drop.
pub struct Another {
    pub base: String,
    pub child: Option<Child>,
}

impl Drop for Another {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Starts `pincer gateway serve` with `config` and the sandbox's home,
/// logging to `log` in the sandbox's folder; returns once it listens.
pub fn serve(
    sandbox: &Sandbox,
    config: &std::path::Path,
    log: &str,
    env: &[(&str, &str)],
) -> Another {
    let log = std::fs::File::create(sandbox.dir.path().join(log)).expect("log file");
    let mut child = crate::support::pincer_command()
        .arg("--config")
        .arg(config)
        .args(["gateway", "serve", "--listen", "127.0.0.1:0"])
        .current_dir(sandbox.work())
        .env("PINCER_HOME", sandbox.home())
        .env("PINCER_LOG", "info")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(log)
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
    Another {
        base,
        child: Some(child),
    }
}

/// The interpreter of the venv with the official clients (scripts/test).
pub fn python() -> String {
    std::env::var("PINCER_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("PINCER_TEST_PYTHON is not set: run the tests through scripts/test (it creates the venv with the official clients)")
    })
}

pub fn python_script(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../tests/python")
        .join(name)
}

/// Runs `tests/python/<script>` with `args` in the client venv and returns
/// the one JSON object it prints; panics with its output when it fails.
pub fn python_client(script: &str, args: &[&str]) -> serde_json::Value {
    let output = Command::new(python())
        .arg(python_script(script))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {script}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{script} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// `GET <base>/metrics`, parsed by the official `prometheus_client`
/// OpenMetrics parser (`tests/python/metrics_scrape.py`); panics when the
/// parser refuses the text.
pub fn scrape_metrics(base: &str) -> serde_json::Value {
    let scraped = python_client("metrics_scrape.py", &[&format!("{base}/metrics")]);
    assert!(
        scraped.get("error").is_none(),
        "the parser refused it: {scraped:#}"
    );
    scraped
}

/// The value of the scraped sample `name` with exactly these `labels`.
pub fn metric(scraped: &serde_json::Value, name: &str, labels: serde_json::Value) -> Option<f64> {
    scraped["samples"]
        .as_array()?
        .iter()
        .find(|s| s["name"] == name && s["labels"] == labels)
        .and_then(|s| s["value"].as_f64())
}

/// Scrapes `<base>/metrics` until sample `name` with exactly `labels` is at
/// least `at_least`, at most `within`; returns the last value seen (`None`:
/// never shown).
pub async fn wait_for_metric(
    base: &str,
    name: &str,
    labels: serde_json::Value,
    at_least: f64,
    within: std::time::Duration,
) -> Option<f64> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let value = metric(&scrape_metrics(base), name, labels.clone());
        if value >= Some(at_least) || std::time::Instant::now() >= deadline {
            return value;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
