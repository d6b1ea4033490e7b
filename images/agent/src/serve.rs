//! `pincer-agent serve`: the runner. PID 1 of the workspace container; one
//! request and one response per unix-socket connection, a thread per
//! connection.

use std::fmt;
use std::io::{BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pincer_runner_protocol::{
    ErrorKind, MAX_REQUEST_BYTES, MAX_VERDICT_BYTES, ProtocolError, Request, Response, Status,
    TurnEvent, TurnRequest, Verdict, decode_line, encode_line, read_line,
};

use crate::cancel::{self, Cancel};
use crate::egress::Relay;
use crate::exec;
use crate::policy::{Enforcer, PolicyError, policy_from_env};
use crate::reap::{self, Children};
use crate::turn::{self, Gateway, TurnEnv};

/// Connections served at once; more are answered "busy".
pub const MAX_CONNECTIONS: usize = 64;
/// How long a client may take to send its request line.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a client may take to read its response.
const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Why `serve` stopped.
#[derive(Debug)]
pub enum ServeError {
    /// The policy is invalid or cannot be enforced (exit 2: fail closed).
    Policy(PolicyError),
    /// Anything else at start (exit 1).
    Setup(String),
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Policy(e) => write!(f, "refusing to start: {e}"),
            ServeError::Setup(e) => f.write_str(e),
        }
    }
}

impl std::error::Error for ServeError {}

struct Shared {
    enforcer: Enforcer,
    children: Arc<Children>,
    started: Instant,
    /// Connections being served (pings included).
    active: AtomicUsize,
    /// Commands and turns running now (pings are not work).
    working: AtomicUsize,
    /// Milliseconds since `started` when work last began or ended, or the
    /// container was thawed.
    last_work_ms: AtomicU64,
    /// Milliseconds since `started` of the watchdog's last tick.
    last_tick_ms: AtomicU64,
    /// The gateway token the host granted ([`Request::Grant`]); in memory
    /// only, never in an environment, never passed to commands.
    grant: Mutex<Option<String>>,
}

/// One command or turn, counted in [`Shared::working`] until dropped.
struct Work<'a>(&'a Shared);

impl Drop for Work<'_> {
    fn drop(&mut self) {
        self.0.working.fetch_sub(1, Ordering::SeqCst);
        self.0.mark_work();
    }
}

impl Shared {
    fn work(&self) -> Work<'_> {
        self.working.fetch_add(1, Ordering::SeqCst);
        self.mark_work();
        Work(self)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn mark_work(&self) {
        self.last_work_ms.store(self.now_ms(), Ordering::SeqCst);
    }

    /// Notices a thaw: when the watchdog has not ticked for [`FROZEN_GAP`],
    /// the container was frozen (`docker pause`) or the machine slept.
    /// That time is not idleness, and whoever thawed it is about to use it,
    /// so it counts as work now. Called by the watchdog and before a status
    /// answer, which may come first after a thaw.
    fn notice_thaw(&self) {
        let now = self.now_ms();
        let last = self.last_tick_ms.swap(now, Ordering::SeqCst);
        if Duration::from_millis(now.saturating_sub(last)) > FROZEN_GAP {
            self.mark_work();
        }
    }

    /// How long nothing has run; zero while something does.
    fn idle(&self) -> Duration {
        if self.working.load(Ordering::SeqCst) > 0 {
            return Duration::ZERO;
        }
        Duration::from_millis(
            self.now_ms()
                .saturating_sub(self.last_work_ms.load(Ordering::SeqCst)),
        )
    }
}

/// Enforces the policy, binds `socket` and serves until SIGTERM/SIGINT
/// (which exit the process with 0 from the signal thread).
pub fn serve(socket: &Path) -> Result<(), ServeError> {
    let started = Instant::now();
    // Not dumpable: the commands it runs (same uid) cannot read its memory,
    // environment or descriptors through /proc/1 (the granted token lives in
    // its memory). Commands it starts are dumpable again after execve.
    // SAFETY: prctl(PR_SET_DUMPABLE) takes plain integers.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(ServeError::Setup(format!(
            "prctl(PR_SET_DUMPABLE, 0): {}",
            std::io::Error::last_os_error()
        )));
    }
    let policy = policy_from_env().map_err(ServeError::Policy)?;
    let signals =
        reap::catch_signals().map_err(|e| ServeError::Setup(format!("catching signals: {e}")))?;
    // Before any thread exists: the seccomp filter covers the calling thread
    // and the threads it creates later.
    let mut enforcer = Enforcer::enforce(&policy).map_err(ServeError::Policy)?;
    // Bound before the runner socket: once the host can reach the runner,
    // the proxy port takes connections.
    let relay = Relay::bind_or_warn(policy.egress.as_ref());
    let listener = bind(socket)?;
    let children = Arc::new(Children::default());
    reap::spawn_signal_thread(signals, children.clone(), socket.to_path_buf())
        .map_err(|e| ServeError::Setup(format!("starting the signal thread: {e}")))?;
    if let Some(proxy_env) = relay.and_then(Relay::start_or_warn) {
        enforcer.child_env = proxy_env;
    }
    log(&format!(
        "serving on {} (pid {}, uid {}, enforcement {})",
        socket.display(),
        std::process::id(),
        // SAFETY: getuid cannot fail.
        unsafe { libc::getuid() },
        serde_json::to_string(&enforcer.enforcement).unwrap_or_default()
    ));
    let shared = Arc::new(Shared {
        enforcer,
        children,
        started,
        active: AtomicUsize::new(0),
        working: AtomicUsize::new(0),
        last_work_ms: AtomicU64::new(0),
        last_tick_ms: AtomicU64::new(0),
        grant: Mutex::new(None),
    });
    spawn_idle_watchdog(shared.clone(), idle_timeout(), socket.to_path_buf())
        .map_err(|e| ServeError::Setup(format!("starting the idle watchdog: {e}")))?;
    for stream in listener.incoming() {
        match stream {
            Ok(stream) => dispatch(stream, &shared),
            Err(e) => {
                log(&format!("accept: {e}"));
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
    Ok(())
}

fn idle_timeout() -> Option<Duration> {
    let secs: u64 = std::env::var(pincer_runner_protocol::IDLE_ENV)
        .ok()?
        .trim()
        .parse()
        .ok()?;
    (secs > 0).then(|| Duration::from_secs(secs))
}

const WATCHDOG_TICK: Duration = Duration::from_millis(500);
/// A tick this much later than asked means the process did not run.
const FROZEN_GAP: Duration = Duration::from_secs(2);

/// Notices thaws ([`Shared::notice_thaw`]) and, with an `idle` limit,
/// exits (status 0, socket removed) once no command or turn has run for
/// that long, so an unused container stops by itself. Pings are not work:
/// the host asking how idle it is does not keep it alive.
fn spawn_idle_watchdog(
    shared: Arc<Shared>,
    idle: Option<Duration>,
    socket: std::path::PathBuf,
) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("idle".into())
        .spawn(move || {
            loop {
                std::thread::sleep(WATCHDOG_TICK);
                shared.notice_thaw();
                let quiet = shared.idle();
                if idle.is_some_and(|idle| quiet >= idle) {
                    log(&format!("idle for {} s: exiting", quiet.as_secs()));
                    let _ = std::fs::remove_file(&socket);
                    std::process::exit(0);
                }
            }
        })?;
    Ok(())
}

pub fn log(line: &str) {
    eprintln!("pincer-agent: {line}");
}

/// Removes a stale socket (refusing if a runner still answers on it) or a
/// symlink in its place, binds,
/// and makes the socket owner-only (0600).
fn bind(socket: &Path) -> Result<UnixListener, ServeError> {
    let setup = |what: &str, e: &dyn fmt::Display| {
        ServeError::Setup(format!("{what} {}: {e}", socket.display()))
    };
    if let Some(dir) = socket.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| setup("creating the directory of", &e))?;
    }
    match std::fs::symlink_metadata(socket) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(socket).is_ok() {
                return Err(setup("another runner is listening on", &"address in use"));
            }
            std::fs::remove_file(socket).map_err(|e| setup("removing stale socket", &e))?;
        }
        // A symlink left by a previous container's tools: removing it removes
        // only the link (the host never follows names in this folder anyway).
        Ok(meta) if meta.file_type().is_symlink() => {
            std::fs::remove_file(socket).map_err(|e| setup("removing the symlink", &e))?;
        }
        Ok(_) => return Err(setup("refusing to replace", &"not a socket")),
        Err(_) => {}
    }
    // Owner-only from the start (no window before the chmod); no other thread runs yet.
    // SAFETY: umask cannot fail.
    let old_umask = unsafe { libc::umask(0o177) };
    let bound = UnixListener::bind(socket);
    // SAFETY: as above.
    unsafe { libc::umask(old_umask) };
    let listener = bound.map_err(|e| setup("binding", &e))?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| setup("chmod 0600", &e))?;
    Ok(listener)
}

/// Hands the connection to a thread, or answers "busy".
fn dispatch(stream: UnixStream, shared: &Arc<Shared>) {
    if shared.active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
        shared.active.fetch_sub(1, Ordering::SeqCst);
        log("busy: connection refused");
        reply_and_close(stream, &Response::error(ErrorKind::Internal, "busy"));
        return;
    }
    let worker = Arc::clone(shared);
    let spawned = std::thread::Builder::new()
        .name("conn".into())
        .spawn(move || {
            handle(&stream, &worker);
            worker.active.fetch_sub(1, Ordering::SeqCst);
        });
    if let Err(e) = spawned {
        shared.active.fetch_sub(1, Ordering::SeqCst);
        log(&format!("cannot start a connection thread: {e}"));
        // The stream moved into the failed closure and is closed with it.
    }
}

fn reply_and_close(mut stream: UnixStream, response: &Response) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = stream.write_all(&encode_line(response));
}

fn handle(stream: &UnixStream, shared: &Shared) {
    let _ = stream.set_read_timeout(Some(REQUEST_TIMEOUT));
    let _ = stream.set_write_timeout(Some(RESPONSE_TIMEOUT));
    let started = Instant::now();
    let mut reader = BufReader::new(stream);
    let (what, response) = match read_line(&mut reader, MAX_REQUEST_BYTES) {
        Err(ProtocolError::Eof) => {
            log("connection closed without a request");
            return;
        }
        Err(e) => (
            "unreadable request".to_string(),
            Response::error(ErrorKind::BadRequest, e.to_string()),
        ),
        Ok(line) => match decode_line::<Request>(&line, MAX_REQUEST_BYTES) {
            Err(e) => (
                "invalid request".to_string(),
                Response::error(ErrorKind::BadRequest, e.to_string()),
            ),
            Ok(Request::Ping) => ("ping".to_string(), Response::Pong(status(shared))),
            Ok(Request::Grant(grant)) => ("grant".to_string(), accept_grant(shared, grant.token)),
            Ok(Request::Exec(req)) => {
                let _work = shared.work();
                (
                    format!("exec {}", exec::describe(&req)),
                    exec::run(&req, &shared.enforcer, &shared.children),
                )
            }
            Ok(Request::Turn(req)) => {
                let _work = shared.work();
                serve_turn(stream, &mut reader, &req, shared, started);
                return;
            }
        },
    };
    let mut writer = stream;
    let sent = writer.write_all(&encode_line(&response));
    let outcome = match &response {
        Response::Pong(_) => "pong".to_string(),
        Response::Exec(r) => {
            let mut s = match (r.timed_out, r.exit_code, r.signal) {
                (true, ..) => "timed out".to_string(),
                (false, Some(code), _) => format!("exit {code}"),
                (false, None, Some(signal)) => format!("signal {signal}"),
                (false, None, None) => "no status".to_string(),
            };
            if r.truncated {
                s.push_str(", output truncated");
            }
            s
        }
        Response::Error { kind, message } => format!("{kind}: {message}"),
        Response::Event(_) => "event".to_string(),
        Response::Ok => "ok".to_string(),
    };
    let sent = match sent {
        Ok(()) => String::new(),
        Err(e) => format!(" (response not delivered: {e})"),
    };
    log(&format!(
        "{what} -> {outcome} in {} ms{sent}",
        started.elapsed().as_millis()
    ));
}

/// Runs a turn on this connection's thread, writing each event as it
/// happens. When the host closes the connection (or a write fails), the turn
/// is cancelled: a running tool is killed, a model call abandoned.
fn serve_turn(
    stream: &UnixStream,
    reader: &mut BufReader<&UnixStream>,
    req: &TurnRequest,
    shared: &Shared,
    started: Instant,
) {
    let cancel = Cancel::on_hangup(stream.as_fd());
    let env = TurnEnv {
        gateway: Gateway::from_env(shared.grant.lock().ok().and_then(|g| g.clone())),
        workspace: PathBuf::from(exec::DEFAULT_CWD),
        enforcer: &shared.enforcer,
        children: &shared.children,
        cancel: &cancel,
        model_idle: turn::MODEL_IDLE_TIMEOUT,
    };
    let mut writer = stream;
    let mut write_error = None;
    let mut emit = |event: TurnEvent| match writer.write_all(&encode_line(&Response::Event(event)))
    {
        Ok(()) => true,
        Err(e) => {
            write_error = Some(e);
            false
        }
    };
    // A person may take minutes to decide: wait without the request's read
    // timeout, until a verdict line arrives or the host goes away.
    let mut verdict = || {
        if reader.buffer().is_empty() && !cancel::wait_readable(stream.as_fd(), &cancel) {
            return None;
        }
        let line = read_line(reader, MAX_VERDICT_BYTES).ok()?;
        match decode_line::<Verdict>(&line, MAX_VERDICT_BYTES) {
            Ok(verdict) => Some(verdict),
            Err(e) => {
                log(&format!("unreadable verdict: {e}"));
                None
            }
        }
    };
    let summary = turn::run(req, &env, &mut emit, &mut verdict);
    let outcome = match &summary.end {
        Some(TurnEvent::Done { stop, .. }) => format!("done ({stop:?})"),
        Some(TurnEvent::Failed { kind, message }) => format!("failed ({kind:?}): {message}"),
        Some(other) => format!("{other:?}"),
        None => match write_error {
            Some(e) => format!("aborted (host unreachable: {e})"),
            None => "aborted (host disconnected)".to_string(),
        },
    };
    log(&format!(
        "turn {:?} model {:?} -> {outcome}, {} steps, {} tool calls in {} ms",
        req.turn_id,
        req.model,
        summary.steps,
        summary.tool_calls,
        started.elapsed().as_millis()
    ));
}

fn status(shared: &Shared) -> Status {
    shared.notice_thaw();
    let busy = shared.working.load(Ordering::SeqCst);
    Status {
        pid: std::process::id(),
        // SAFETY: getuid cannot fail.
        uid: unsafe { libc::getuid() },
        uptime_ms: u64::try_from(shared.started.elapsed().as_millis()).unwrap_or(u64::MAX),
        version: env!("CARGO_PKG_VERSION").to_string(),
        enforcement: shared.enforcer.enforcement.clone(),
        granted: shared.grant.lock().is_ok_and(|g| g.is_some()),
        busy: u32::try_from(busy).unwrap_or(u32::MAX),
        idle_ms: u64::try_from(shared.idle().as_millis()).unwrap_or(u64::MAX),
    }
}

/// Keeps the host's gateway token (replacing an earlier one).
fn accept_grant(shared: &Shared, token: String) -> Response {
    if token.trim().is_empty() || token.len() > 256 || token.chars().any(char::is_control) {
        return Response::error(ErrorKind::BadRequest, "grant: not a gateway token");
    }
    match shared.grant.lock() {
        Ok(mut grant) => {
            *grant = Some(token);
            Response::Ok
        }
        Err(_) => Response::error(ErrorKind::Internal, "grant: lock poisoned"),
    }
}

/// The socket path `serve` uses by default.
pub fn default_socket() -> PathBuf {
    PathBuf::from(pincer_runner_protocol::SOCKET_PATH)
}
