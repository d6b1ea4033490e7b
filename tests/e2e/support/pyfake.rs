//! A local fake platform from `tests/python/` (fake_slack.py,
//! fake_feishu.py) as a child process: started with its flags, its ready
//! line read, its control API (`…/_test`) driven over loopback, killed on
//! drop. Its log goes to the test's stderr when `PINCER_TEST_FAKE_LOGS` is
//! set.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct PyFake {
    child: Child,
    /// The ready line, e.g. `{"port", "base" | "api_base", "control"}`.
    pub ready: Value,
    pub control: String,
    http: reqwest::Client,
}

impl PyFake {
    /// Runs `script` with `args`; returns once it printed its ready line.
    pub fn start(script: &str, args: &[&str]) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let mut child = Command::new(super::gateway::python())
            .arg(super::gateway::python_script(script))
            .args(args)
            .stdout(Stdio::piped())
            .stderr(if std::env::var_os("PINCER_TEST_FAKE_LOGS").is_some() {
                Stdio::inherit()
            } else {
                Stdio::null()
            })
            .spawn()
            .unwrap_or_else(|e| panic!("start {script}: {e}"));
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("ready line");
        let ready: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("{script} ready line {line:?}: {e}"));
        let control = ready["control"]
            .as_str()
            .expect("the ready line names the control API")
            .to_string();
        Self {
            child,
            ready,
            control,
            http: reqwest::Client::new(),
        }
    }

    /// `POST {control}{path}` with a JSON body; the JSON answer.
    pub async fn post(&self, path: &str, body: Value) -> Value {
        self.http
            .post(format!("{}{path}", self.control))
            .json(&body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {path}: {e}"))
            .json()
            .await
            .unwrap_or(Value::Null)
    }

    /// `GET {control}{path}`: status and JSON answer (`Null` if none).
    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self
            .http
            .get(format!("{}{path}", self.control))
            .timeout(Duration::from_secs(150))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path}: {e}"));
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null))
    }
}

impl Drop for PyFake {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
