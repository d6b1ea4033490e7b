//! Shared helpers for the end-to-end tests: the real `pincer` binary with an
//! isolated `PINCER_HOME`, and the plugins the build staged.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Folder of a plugin staged by the build (first-party or `testing/`).
pub fn staged(name: &str) -> PathBuf {
    Path::new(env!("PINCER_STAGED_PLUGINS")).join(name)
}

/// A sandbox: its own `PINCER_HOME` and working folder.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("home")).expect("home");
        std::fs::create_dir_all(dir.path().join("work")).expect("work");
        Self { dir }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The details of the `kind` audit records in this home's database,
    /// oldest first.
    pub fn audited(&self, kind: &str) -> Vec<String> {
        let db = rusqlite::Connection::open(self.home().join("pincer.db")).expect("pincer.db");
        let mut stmt = db
            .prepare("SELECT detail FROM audit_events WHERE kind = ?1 ORDER BY id")
            .expect("audit query");
        stmt.query_map([kind], |r| r.get(0))
            .expect("audit rows")
            .map(|row| row.expect("audit row"))
            .collect()
    }

    /// Holds SQLite's write lock on this home's `pincer.db` (`BEGIN
    /// EXCLUSIVE` through a connection of the test's own) until the guard
    /// is released or dropped: every write of the daemon waits its busy
    /// timeout (5 s) and fails, as on a disk that refuses writes.
    pub fn lock_db(&self) -> DbLock {
        let conn = rusqlite::Connection::open(self.home().join("pincer.db")).expect("pincer.db");
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .expect("busy timeout");
        conn.execute_batch("BEGIN EXCLUSIVE")
            .expect("take the database's write lock");
        DbLock { conn: Some(conn) }
    }

    /// Writes a file under the working folder and returns its path.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let path = self.work().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("parent dir");
        }
        std::fs::write(&path, text).expect("write");
        path
    }

    pub fn pincer(&self, args: &[&str]) -> Output {
        self.command().args(args).output().expect("run pincer")
    }

    /// The real `pincer` binary in this sandbox's home and folder.
    pub fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_pincer"));
        command
            .current_dir(self.work())
            .env("PINCER_HOME", self.home())
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_LOG");
        command
    }
}

/// The write lock of [`Sandbox::lock_db`]; rolled back on release or drop.
pub struct DbLock {
    conn: Option<rusqlite::Connection>,
}

impl DbLock {
    pub fn release(mut self) {
        if let Some(conn) = self.conn.take() {
            conn.execute_batch("ROLLBACK")
                .expect("release the write lock");
        }
    }
}

impl Drop for DbLock {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            let _ = conn.execute_batch("ROLLBACK");
        }
    }
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Asserts success and returns stdout.
#[track_caller]
pub fn ok(output: Output) -> String {
    assert!(
        output.status.success(),
        "pincer failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        stdout(&output),
        stderr(&output)
    );
    stdout(&output)
}

/// Asserts failure and returns stderr.
#[track_caller]
pub fn fails(output: Output) -> String {
    assert!(
        !output.status.success(),
        "pincer should have failed:\nstdout: {}\nstderr: {}",
        stdout(&output),
        stderr(&output)
    );
    stderr(&output)
}

/// Serves `router` on a loopback port for the life of the test.
pub async fn serve(router: axum::Router) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

/// Runs the docker CLI (tests use it only to set up peers and to tamper).
pub fn docker(args: &[&str]) -> Output {
    Command::new("docker")
        .args(args)
        .output()
        .expect("run docker")
}

/// Removes, on drop, every container of a sandbox's pincer instance and
/// everything the test itself labelled with `label`.
pub struct DockerCleanup {
    pub home: PathBuf,
    pub label: String,
}

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        let mut filters = vec![format!("label=pincer.test={}", self.label)];
        if let Ok(id) = std::fs::read_to_string(self.home.join("instance-id")) {
            filters.push(format!("label=pincer.instance={}", id.trim()));
        }
        for filter in filters {
            let ids = docker(&["ps", "-aq", "--filter", &filter]);
            for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
                docker(&["rm", "-f", id]);
            }
        }
        let nets = docker(&[
            "network",
            "ls",
            "-q",
            "--filter",
            &format!("label=pincer.test={}", self.label),
        ]);
        for id in String::from_utf8_lossy(&nets.stdout).split_whitespace() {
            docker(&["network", "rm", id]);
        }
    }
}

/// A listener of the test's own: a container on a network the test creates
/// (both labelled `pincer.test=<label>`, so [`DockerCleanup`] removes them)
/// that answers `hello-from-listener` on port 8080. Returns the network's
/// name and the listener's address on it. Needs the default image.
pub fn listener_on_test_network(label: &str) -> (String, String) {
    let net = format!("pincer-test-{label}");
    let test_label = format!("pincer.test={label}");
    ok(docker(&["network", "create", "--label", &test_label, &net]));
    let listener = ok(docker(&[
        "run",
        "-d",
        "--label",
        &test_label,
        "--network",
        &net,
        "--entrypoint",
        "/bin/sh",
        "pincer-agent:latest",
        "-c",
        "while true; do echo hello-from-listener | nc -l -p 8080; done",
    ]));
    let ip = ok(docker(&[
        "inspect",
        "-f",
        "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
        listener.trim(),
    ]));
    (net, ip.trim().to_string())
}

/// A short random suffix for names on the shared Docker engine.
pub fn unique() -> String {
    let mut bytes = [0u8; 4];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("urandom"),
        &mut bytes,
    )
    .expect("random");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
pub mod daemon;
pub mod fake_llm;
pub mod gateway;
pub mod models;
pub mod openweathermap;
pub mod pyfake;
