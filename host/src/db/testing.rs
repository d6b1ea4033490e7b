//! A private PostgreSQL server for tests: one per test process, started
//! from Debian's `postgresql` package on a unix socket in a directory of
//! its own (no port to collide on), one fresh database per test. The
//! server dies with the test process (parent-death signal), and a later
//! run removes the directories of servers whose process is gone.

use std::os::unix::fs::MetadataExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::Location;

const ROOT: &str = "/tmp/pincer-pg-tests";

struct Server {
    socket_dir: PathBuf,
}

static SERVER: OnceLock<Server> = OnceLock::new();
static DATABASES: AtomicU32 = AtomicU32::new(0);

/// A new, empty database on this process's server.
pub fn database() -> Location {
    database_with("")
}

impl Server {
    fn url(&self, database: &str) -> String {
        format!(
            "host={} port=5432 user=pincer dbname={database}",
            self.socket_dir.display()
        )
    }
}

fn binaries() -> PathBuf {
    if let Some(dir) = std::env::var_os("PINCER_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("postgres").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    found.pop().expect(
        "these tests need a PostgreSQL server: apt-get install postgresql \
         (or set PINCER_TEST_PG_BIN to the directory holding initdb and postgres)",
    )
}

/// The account the server runs as: PostgreSQL refuses to run as root.
fn account() -> (u32, u32) {
    let meta = std::fs::metadata("/var/lib/postgresql")
        .expect("the postgres account's home (/var/lib/postgresql), made by Debian's package");
    (meta.uid(), meta.gid())
}

fn remove_stale() {
    for entry in std::fs::read_dir(ROOT).into_iter().flatten().flatten() {
        let pid = entry.file_name().to_string_lossy().parse::<u32>().ok();
        if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn start() -> Server {
    remove_stale();
    let bin = binaries();
    let (uid, gid) = account();
    let dir = Path::new(ROOT).join(std::process::id().to_string());
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("test server directory");
    std::fs::set_permissions(ROOT, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod test root");
    std::os::unix::fs::chown(&dir, Some(uid), Some(gid)).expect("chown test server directory");
    let data = dir.join("data");
    let status = Command::new(bin.join("initdb"))
        .args(["-D"])
        .arg(&data)
        .args(["-U", "pincer", "-A", "trust", "-E", "UTF8", "--no-sync"])
        .uid(uid)
        .gid(gid)
        .stdout(Stdio::null())
        .status()
        .expect("run initdb");
    assert!(status.success(), "initdb failed");

    let socket_dir = dir.clone();
    let postgres = bin.join("postgres");
    // The server is the child of a thread that lives as long as the
    // process, so the parent-death signal fires when the process ends, not
    // when the test that started it does.
    std::thread::spawn(move || {
        let mut command = Command::new(postgres);
        command
            .arg("-D")
            .arg(&data)
            .args(["-c", "listen_addresses=", "-c", "max_connections=200"]);
        // Tests need no durability; a bench measures the server as it is
        // run (`PINCER_TEST_PG_DURABLE`).
        if std::env::var_os("PINCER_TEST_PG_DURABLE").is_none() {
            command.args(["-c", "fsync=off", "-c", "full_page_writes=off"]);
        }
        command
            .arg("-k")
            .arg(&socket_dir)
            .uid(uid)
            .gid(gid)
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; nothing else runs in the child.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) == 0 {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
        let mut child = command.spawn().expect("start postgres");
        let _ = child.wait();
        loop {
            std::thread::park();
        }
    });

    let server = Server { socket_dir: dir };
    let url = server.url("postgres");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let probe = url.clone();
        // Connected and closed on that thread: a blocking client may not
        // be dropped on a runtime's thread.
        let up = std::thread::spawn(move || {
            ::postgres::Client::connect(&probe, ::postgres::NoTls).map(drop)
        })
        .join()
        .expect("probe thread");
        match up {
            Ok(_) => break,
            Err(e) if Instant::now() > deadline => {
                panic!("the test PostgreSQL server did not start: {e}")
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    server
}

/// Runs `test` on a fresh SQLite file, then on a fresh PostgreSQL database:
/// a store's behaviour must be the same on both.
pub fn each_backend(test: impl Fn(&Location)) {
    let dir = tempfile::tempdir().expect("tempdir");
    let sqlite = Location::Sqlite(dir.path().join(super::FILE_NAME));
    for at in [sqlite, database()] {
        eprintln!("on {at:?}");
        test(&at);
    }
}

/// A new database on this process's server created with `options` (e.g. a
/// collation), as a connection string.
pub fn database_with(options: &str) -> Location {
    let server = SERVER.get_or_init(start);
    let name = format!("t{}", DATABASES.fetch_add(1, Ordering::Relaxed));
    let admin = server.url("postgres");
    let create = format!("CREATE DATABASE {name} {options}");
    std::thread::spawn(move || {
        let mut client = ::postgres::Client::connect(&admin, ::postgres::NoTls)?;
        client.batch_execute(&create)
    })
    .join()
    .expect("create database thread")
    .expect("create a test database");
    Location::Postgres(server.url(&name))
}
