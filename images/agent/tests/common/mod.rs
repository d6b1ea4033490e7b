//! Starts `pincer-agent serve` as a child process (not as PID 1) on a socket
//! in a fresh temporary directory, and talks to it.
#![allow(dead_code)] // each test binary uses a different part

pub mod gateway;

use std::fs::File;
use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use pincer_runner_protocol::{
    ErrorKind, ExecRequest, ExecResult, MAX_RESPONSE_BYTES, Request, Response, Status, decode_line,
    encode_line, read_line,
};

pub const AGENT: &str = env!("CARGO_BIN_EXE_pincer-agent");

/// A temporary directory, removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "pincer-agent-test-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        TempDir(dir)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Runner {
    pub child: Child,
    pub socket: PathBuf,
    pub dir: TempDir,
}

/// The command line of `pincer-agent serve` on `socket`, with `policy` (JSON)
/// if given, a secret in its own environment (which commands must not see),
/// and its stderr to `log`.
pub fn serve_command(socket: &Path, policy: Option<&str>, log: &Path) -> Command {
    let mut command = Command::new(AGENT);
    command
        .args(["serve", "--socket"])
        .arg(socket)
        .env("PINCER_TEST_SECRET", "hunter2")
        .env_remove("PINCER_RUNNER_POLICY")
        .env_remove("PINCER_GATEWAY_URL")
        .env_remove("PINCER_GATEWAY_TOKEN")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(log).expect("log file"));
    if let Some(policy) = policy {
        command.env("PINCER_RUNNER_POLICY", policy);
    }
    command
}

/// Waits until `socket` accepts connections, or panics with the runner's log.
pub fn wait_for_socket(socket: &Path, child: &mut Child, log: &Path) {
    let start = Instant::now();
    while UnixStream::connect(socket).is_err() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "runner exited with {status}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "runner did not listen"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends one raw line (no newline added) to the runner on `socket` and
/// reads the response.
pub fn raw_at(socket: &Path, bytes: &[u8]) -> Response {
    let mut stream = UnixStream::connect(socket).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    // The runner may answer (and close) before it read everything.
    let _ = stream.write_all(bytes);
    let line = read_line(&mut BufReader::new(&stream), MAX_RESPONSE_BYTES).expect("response");
    decode_line(&line, MAX_RESPONSE_BYTES).expect("valid response")
}

/// One request to the runner on `socket` (from another thread than the
/// [`Runner`]'s owner).
pub fn call_at(socket: &Path, request: &Request) -> Response {
    raw_at(socket, &encode_line(request))
}

impl Runner {
    pub fn start(policy: Option<&str>) -> Runner {
        Runner::start_with(policy, &[])
    }

    /// A runner with `env` added to its environment.
    pub fn start_with(policy: Option<&str>, env: &[(&str, String)]) -> Runner {
        let dir = TempDir::new();
        let socket = dir.path().join("r.sock");
        let log = dir.path().join("runner.log");
        let mut child = serve_command(&socket, policy, &log)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .spawn()
            .expect("spawn runner");
        wait_for_socket(&socket, &mut child, &log);
        Runner { child, socket, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("runner.log")).unwrap_or_default()
    }

    /// Sends one raw line (no newline added) and reads the response.
    pub fn raw(&self, bytes: &[u8]) -> Response {
        raw_at(&self.socket, bytes)
    }

    pub fn call(&self, request: &Request) -> Response {
        self.raw(&encode_line(request))
    }

    pub fn status(&self) -> Status {
        match self.call(&Request::Ping) {
            Response::Pong(status) => status,
            other => panic!("expected pong, got {other:?}"),
        }
    }

    pub fn exec(&self, request: ExecRequest) -> Response {
        self.call(&Request::Exec(request))
    }

    /// Runs `argv` in the runner's temp dir; expects it to run.
    pub fn run(&self, argv: &[&str]) -> ExecResult {
        expect_exec(self.exec(self.request(argv)))
    }

    /// A request for `argv` with the temp dir as cwd.
    pub fn request(&self, argv: &[&str]) -> ExecRequest {
        let mut request = ExecRequest::new(argv.iter().copied());
        request.cwd = Some(self.dir.path().to_string_lossy().into_owned());
        request
    }

    /// SIGTERM, then the exit status.
    pub fn terminate(self) -> ExitStatus {
        // SAFETY: plain syscall.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        self.terminate_wait()
    }

    /// The exit status, once the runner ends.
    pub fn terminate_wait(mut self) -> ExitStatus {
        self.child.wait().expect("wait")
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn expect_exec(response: Response) -> ExecResult {
    match response {
        Response::Exec(result) => result,
        other => panic!("expected an exec result, got {other:?}"),
    }
}

pub fn expect_error(response: Response, expected: ErrorKind) -> String {
    match response {
        Response::Error { kind, message } if kind == expected => message,
        other => panic!("expected a {expected:?} error, got {other:?}"),
    }
}

/// Whether `pid` is gone or a zombie.
pub fn is_dead(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// The pids whose parent is `parent`.
pub fn children_of(parent: u32) -> Vec<u32> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            found.push(pid);
        }
    }
    found
}

/// Polls `condition` for up to `limit`.
pub fn eventually(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    loop {
        if condition() {
            return true;
        }
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
