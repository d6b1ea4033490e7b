//! Shared helpers for the end-to-end tests: the real `pincer` binary with an
//! isolated `PINCER_HOME`, and the plugins the build staged.
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use pincer::db::{Db, FromValue, Location, Row};

/// Folder of a plugin staged by the build (first-party or `testing/`).
pub fn staged(name: &str) -> PathBuf {
    Path::new(env!("PINCER_STAGED_PLUGINS")).join(name)
}

/// Whether this test process keeps the state of its sandboxes on
/// PostgreSQL: `PINCER_TEST_STATE=postgres` runs the same end-to-end tests
/// against a private server (`pincer::db::testing`, one database per
/// sandbox) instead of SQLite files, the backend matrix of `tests/README.md`.
pub fn on_postgres() -> bool {
    match std::env::var("PINCER_TEST_STATE").as_deref() {
        Ok("postgres") => true,
        Ok("sqlite" | "") | Err(_) => false,
        Ok(other) => panic!("PINCER_TEST_STATE={other}: expected sqlite or postgres"),
    }
}

/// A sandbox: its own `PINCER_HOME` and working folder.
pub struct Sandbox {
    pub dir: tempfile::TempDir,
    /// A database of its own on the test PostgreSQL server
    /// ([`on_postgres`]), for a `pincer.yaml` written by [`Self::write`].
    postgres: Option<Location>,
    /// Whether a configuration was given [`Self::state_section`] (the
    /// others keep `$PINCER_HOME/pincer.db`).
    on_postgres: std::sync::atomic::AtomicBool,
}

impl Sandbox {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(dir.path().join("home")).expect("home");
        std::fs::create_dir_all(dir.path().join("work")).expect("work");
        let postgres = on_postgres().then(pincer::db::testing::database);
        Self {
            dir,
            postgres,
            on_postgres: false.into(),
        }
    }

    pub fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    pub fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    /// The `state:` section that puts a configuration's state where this
    /// sandbox keeps it (nothing for the default SQLite file).
    pub fn state_section(&self) -> String {
        match &self.postgres {
            Some(Location::Postgres(url)) => {
                self.on_postgres
                    .store(true, std::sync::atomic::Ordering::SeqCst);
                format!("\nstate:\n  backend: postgres\n  url: \"{url}\"\n")
            }
            _ => String::new(),
        }
    }

    /// Where the daemon keeps this sandbox's state: the database of
    /// [`Self::state_section`] once a configuration was given it, else
    /// `$PINCER_HOME/pincer.db`.
    pub fn state(&self) -> Location {
        match &self.postgres {
            Some(at) if self.on_postgres.load(std::sync::atomic::Ordering::SeqCst) => at.clone(),
            _ => Location::Sqlite(self.home().join(pincer::db::FILE_NAME)),
        }
    }

    /// This sandbox's state, as the daemon sees it.
    pub fn db(&self) -> Db {
        Db::open(&self.state()).expect("open the sandbox's state")
    }

    /// The rows `sql` selects from this sandbox's state.
    #[track_caller]
    pub fn rows(&self, sql: &str) -> Vec<Row> {
        self.db()
            .run(|c| c.query(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs a statement on this sandbox's state; the rows it changed.
    #[track_caller]
    pub fn execute(&self, sql: &str) -> usize {
        self.db()
            .run(|c| c.execute(sql, &[]))
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// The first column of the first row `sql` selects.
    #[track_caller]
    pub fn scalar<T: FromValue>(&self, sql: &str) -> T {
        let rows = self.rows(sql);
        let row = rows.first().unwrap_or_else(|| panic!("{sql}: no row"));
        row.get(0).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Waits (10 s at most) until the daemon has recorded `receipt`, the
    /// platform's id of a message it sent: a fake answers the send before the
    /// daemon stores its receipt, and a button counts only on a message
    /// pincer knows it sent (a person cannot click within those
    /// milliseconds; a test under load can).
    pub async fn sent_recorded(&self, receipt: &str) {
        let sql = format!("SELECT COUNT(*) FROM channel_outbox WHERE receipt = '{receipt}'");
        assert!(
            self.counts_within(&sql, std::time::Duration::from_secs(10))
                .await,
            "the daemon never recorded sending {receipt}"
        );
    }

    /// Whether `count_sql` (a `SELECT COUNT(*)`) comes to more than zero
    /// within `limit`, polled every 100 ms: for a row another process
    /// writes after the event a test can see.
    pub async fn counts_within(&self, count_sql: &str, limit: std::time::Duration) -> bool {
        let started = std::time::Instant::now();
        loop {
            if self.scalar::<i64>(count_sql) > 0 {
                return true;
            }
            if started.elapsed() > limit {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }

    /// The details of the `kind` audit records in this sandbox's state,
    /// oldest first.
    pub fn audited(&self, kind: &str) -> Vec<String> {
        let rows = self
            .db()
            .run(|c| {
                c.query(
                    "SELECT detail FROM audit_events WHERE kind = ?1 ORDER BY id",
                    &[kind.into()],
                )
            })
            .expect("audit query");
        rows.iter().map(|r| r.get(0).expect("detail")).collect()
    }

    /// Makes the state refuse writes until the guard is released or
    /// dropped, as a full disk or a stuck lock would: on SQLite a connection
    /// of the test's own holds the write lock (`BEGIN EXCLUSIVE`), so every
    /// write of the daemon waits its busy timeout (5 s) and fails; on
    /// PostgreSQL a transaction holds every table `IN EXCLUSIVE MODE`
    /// (reads go on), so every write waits its lock timeout (5 s) and
    /// fails.
    pub fn lock_db(&self) -> DbLock {
        match &self.state() {
            Location::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).expect("pincer.db");
                conn.busy_timeout(std::time::Duration::from_secs(30))
                    .expect("busy timeout");
                conn.execute_batch("BEGIN EXCLUSIVE")
                    .expect("take the database's write lock");
                DbLock::Sqlite(Some(conn))
            }
            Location::Postgres(url) => {
                let url = url.clone();
                let (locked, lock) = std::sync::mpsc::channel();
                let (release, released) = std::sync::mpsc::channel::<()>();
                // The blocking client runs a runtime of its own: on a thread
                // outside the test's.
                let holder = std::thread::spawn(move || {
                    let mut client = pincer::db::connect_postgres(&url).expect("connect");
                    // Taking the tables one by one can deadlock with a
                    // daemon's transaction holding one of them: the server
                    // then cancels one side, and if it was this one, it
                    // tries again.
                    let mut attempts = 0;
                    let tx = loop {
                        attempts += 1;
                        let mut tx = client.transaction().expect("begin");
                        let tables: Vec<String> = tx
                            .query(
                                "SELECT tablename::text FROM pg_tables WHERE schemaname = 'public'",
                                &[],
                            )
                            .expect("list tables")
                            .iter()
                            .map(|r| r.get(0))
                            .collect();
                        match tx.batch_execute(&format!(
                            "LOCK TABLE {} IN EXCLUSIVE MODE",
                            tables.join(", ")
                        )) {
                            Ok(()) => break tx,
                            Err(e) if attempts < 20 => {
                                eprintln!("lock_db: {e}; again");
                                drop(tx);
                            }
                            Err(e) => panic!("lock every table: {e}"),
                        }
                    };
                    locked.send(()).expect("locked");
                    let _ = released.recv();
                    tx.rollback().expect("release the locks");
                });
                lock.recv().expect("the tables are locked");
                DbLock::Postgres(Some((release, holder)))
            }
        }
    }

    /// Writes a file under the working folder and returns its path.
    /// A `pincer.yaml` without a `state:` section gains this sandbox's
    /// [`Self::state`] when that is on PostgreSQL.
    pub fn write(&self, name: &str, text: &str) -> PathBuf {
        let text = if name == "pincer.yaml" && !text.lines().any(|l| l.starts_with("state:")) {
            format!("{text}{}", self.state_section())
        } else {
            text.to_owned()
        };
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
        let mut command = pincer_command();
        command
            .current_dir(self.work())
            .env("PINCER_HOME", self.home())
            .env_remove("PINCER_CONFIG")
            .env_remove("PINCER_LOG");
        command
    }
}

/// The lock of [`Sandbox::lock_db`]; rolled back on release or drop.
pub enum DbLock {
    Sqlite(Option<rusqlite::Connection>),
    Postgres(Option<(std::sync::mpsc::Sender<()>, std::thread::JoinHandle<()>)>),
}

impl DbLock {
    pub fn release(mut self) {
        self.unlock().expect("release the lock");
    }

    /// Rolls the lock's transaction back and waits until it is.
    fn unlock(&mut self) -> Result<(), String> {
        match self {
            DbLock::Sqlite(conn) => match conn.take() {
                Some(conn) => conn.execute_batch("ROLLBACK").map_err(|e| e.to_string()),
                None => Ok(()),
            },
            DbLock::Postgres(held) => match held.take() {
                Some((release, holder)) => {
                    let _ = release.send(());
                    holder.join().map_err(|_| "the lock holder panicked".into())
                }
                None => Ok(()),
            },
        }
    }
}

impl Drop for DbLock {
    fn drop(&mut self) {
        let _ = self.unlock();
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
/// Each of the `(url, status)` GETs that did not answer its status
/// within 2 s, described (with what it answered and when): a daemon
/// whose runtime is held answers late or not at all.
pub async fn not_answered_at_once(checks: &[(String, u16)]) -> Vec<String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http = reqwest::Client::new();
    let mut slow = Vec::new();
    for (at, expected) in checks {
        let started = std::time::Instant::now();
        let answer = http
            .get(at)
            .timeout(std::time::Duration::from_secs(30))
            .send()
            .await
            .map(|a| a.status().as_u16());
        let took = started.elapsed();
        if answer.as_ref().ok() != Some(expected) || took > std::time::Duration::from_secs(2) {
            slow.push(format!("{at}: {answer:?} after {took:?}"));
        }
    }
    slow
}

pub fn unique() -> String {
    let mut bytes = [0u8; 4];
    std::io::Read::read_exact(
        &mut std::fs::File::open("/dev/urandom").expect("urandom"),
        &mut bytes,
    )
    .expect("random");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The real `pincer` binary, with the compiled plugins of every test of
/// this run in one folder (`PINCER_COMPILE_CACHE`): each plugin is compiled
/// once per run, not once per home (compiling was a third of a Slack
/// test's CPU time). Tests of the compile cache itself load plugins in
/// process, where their home's cache is their own.
pub fn pincer_command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_pincer"));
    command.env("PINCER_COMPILE_CACHE", shared_compile_cache());
    command
}

fn shared_compile_cache() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("compile-cache");
        std::fs::create_dir_all(&dir).expect("compile cache folder");
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
            .expect("a private compile cache");
        // Components of older builds are never asked for again.
        let day = std::time::Duration::from_secs(24 * 3600);
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let old = entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > day));
            if old {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        dir
    })
}

pub mod daemon;
pub mod fake_llm;
pub mod gateway;
pub mod models;
pub mod openweathermap;
pub mod pyfake;
