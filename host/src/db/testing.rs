//! A private PostgreSQL server for tests: one per test process, started
//! from Debian's `postgresql` package on a unix socket in a directory of
//! its own, one fresh database per test. The server dies with the test
//! process (parent-death signal), and a later run removes the directories
//! of servers whose process is gone. It also listens on a free loopback
//! port with TLS, its certificate (for `localhost` only) signed by a CA
//! made for it ([`tls_database`]).

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
    /// The loopback TCP port (TLS on).
    port: u16,
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
            "host={} port={} user=pincer dbname={database}",
            self.socket_dir.display(),
            self.port
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
    certificates(&dir, uid, gid);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
        .port();
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
    let server_dir = dir.clone();
    // The server is the child of a thread that lives as long as the
    // process, so the parent-death signal fires when the process ends, not
    // when the test that started it does.
    std::thread::spawn(move || {
        let mut command = Command::new(postgres);
        command
            .arg("-D")
            .arg(&data)
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "max_connections=200",
            ])
            .args(["-p", &port.to_string(), "-c", "ssl=on"])
            .arg("-c")
            .arg(format!(
                "ssl_cert_file={}",
                dir.join("server.pem").display()
            ))
            .arg("-c")
            .arg(format!("ssl_key_file={}", dir.join("server.key").display()));
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

    let server = Server {
        socket_dir: server_dir,
        port,
    };
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

/// A CA, a server certificate it signed for `localhost` (key readable by
/// the server's account only, as PostgreSQL requires) and another CA that
/// signed nothing, made with the `openssl` command in `dir`.
fn certificates(dir: &Path, uid: u32, gid: u32) {
    let openssl = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .expect("these tests need the openssl command: apt-get install openssl");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    for ca in ["ca", "other-ca"] {
        let (key, pem, subject) = (
            format!("{ca}.key"),
            format!("{ca}.pem"),
            format!("/CN=pincer test {ca}"),
        );
        let mut args = vec!["req", "-x509", "-days", "2", "-subj", &subject];
        args.extend(ec);
        args.extend(["-keyout", &key, "-out", &pem]);
        openssl(&args);
    }
    let mut args = vec![
        "req",
        "-subj",
        "/CN=localhost",
        "-keyout",
        "server.key",
        "-out",
        "server.csr",
    ];
    args.extend(ec);
    openssl(&args);
    std::fs::write(dir.join("server.ext"), "subjectAltName=DNS:localhost\n").expect("server.ext");
    openssl(&[
        "x509",
        "-req",
        "-in",
        "server.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "2",
        "-extfile",
        "server.ext",
        "-out",
        "server.pem",
    ]);
    let key = dir.join("server.key");
    std::os::unix::fs::chown(&key, Some(uid), Some(gid)).expect("chown server.key");
    std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .expect("chmod server.key");
}

/// A new database on this process's server: its location over the unix
/// socket, and a connection string for it over the loopback port
/// (`host=localhost`, the name the certificate holds) with `tls` appended
/// (e.g. `sslmode=verify-full sslrootcert=…`).
pub fn tls_database(tls: &str) -> (Location, String) {
    let at = database();
    let Location::Postgres(url) = &at else {
        unreachable!("database() is on PostgreSQL")
    };
    let server = SERVER.get().expect("started by database()");
    let name = url.rsplit("dbname=").next().unwrap_or_default();
    let tcp = format!(
        "host=localhost port={} user=pincer dbname={name} {tls}",
        server.port
    );
    (at, tcp)
}

/// The CA that signed the test server's certificate, and one that did not.
pub fn test_cas() -> (PathBuf, PathBuf) {
    let server = SERVER.get_or_init(start);
    (
        server.socket_dir.join("ca.pem"),
        server.socket_dir.join("other-ca.pem"),
    )
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
