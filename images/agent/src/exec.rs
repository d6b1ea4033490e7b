//! Running one command for the host: validate, resolve, check the policy,
//! spawn in a new process group, feed stdin and capture both outputs in one
//! `poll` loop, kill the whole group on timeout.

use std::ffi::OsStr;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStderr, ChildStdin, ChildStdout, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use pincer_runner_protocol::{ErrorKind, ExecRequest, ExecResult, MAX_OUTPUT_BYTES, Response};

use crate::cancel::{self, Cancel};
use crate::capture::Capture;
use crate::policy::{self, Enforcer};
use crate::reap::Children;

/// `PATH` of every command (unless the request sets its own).
pub const BASE_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// Working directory when the request names none.
pub const DEFAULT_CWD: &str = "/workspace";
/// The fixed base environment of every command.
pub const BASE_ENV: [(&str, &str); 3] = [
    ("PATH", BASE_PATH),
    ("HOME", "/workspace"),
    ("LANG", "C.UTF-8"),
];

/// After the command exits, how long output from processes it left behind
/// (still holding its stdout/stderr) is awaited before the pipes are closed.
const EXIT_GRACE: Duration = Duration::from_millis(200);
/// After a timeout kill, how long the pipes are drained.
const KILL_GRACE: Duration = Duration::from_millis(500);
/// Poll interval when the kernel offers no pidfd.
const FALLBACK_POLL: Duration = Duration::from_millis(10);

/// Runs `req`; every outcome is a response.
pub fn run(req: &ExecRequest, enforcer: &Enforcer, children: &Children) -> Response {
    run_cancellable(req, enforcer, children, &Cancel::never())
}

/// Like [`run`], but kills the command's process group as soon as `cancel`
/// fires (answered with an `internal` error "cancelled").
pub fn run_cancellable(
    req: &ExecRequest,
    enforcer: &Enforcer,
    children: &Children,
    cancel: &Cancel,
) -> Response {
    match prepare(req, enforcer) {
        Ok(mut command) => {
            let program = PathBuf::from(command.get_program());
            spawn_and_wait(req, &mut command, &program, enforcer, children, cancel)
        }
        Err(response) => response,
    }
}

fn bad_request(message: impl Into<String>) -> Response {
    Response::error(ErrorKind::BadRequest, message)
}

fn has_nul(s: &str) -> bool {
    s.as_bytes().contains(&0)
}

/// Validates the request and builds the command (program resolved to the
/// file `execve` will run, so that the policy check sees exactly that).
fn prepare(req: &ExecRequest, enforcer: &Enforcer) -> Result<Command, Response> {
    let Some(argv0) = req.argv.first() else {
        return Err(bad_request("argv is empty"));
    };
    if argv0.is_empty() {
        return Err(bad_request("argv[0] is empty"));
    }
    if req.argv.iter().any(|a| has_nul(a)) {
        return Err(bad_request("argv contains a NUL byte"));
    }
    for (key, value) in &req.env {
        if key.is_empty() || key.contains('=') || has_nul(key) || has_nul(value) {
            return Err(bad_request(format!("invalid environment variable {key:?}")));
        }
    }
    if req.timeout_ms == 0 {
        return Err(bad_request("timeout_ms must be positive"));
    }
    let cwd = req.cwd.as_deref().unwrap_or(DEFAULT_CWD);
    if has_nul(cwd) {
        return Err(bad_request("cwd contains a NUL byte"));
    }
    let cwd =
        std::path::absolute(cwd).map_err(|e| bad_request(format!("invalid cwd {cwd:?}: {e}")))?;
    if !cwd.is_dir() {
        return Err(Response::error(
            ErrorKind::NotFound,
            format!("working directory {} is not a directory", cwd.display()),
        ));
    }

    let path_var = req
        .env
        .iter()
        .rev()
        .find(|(k, _)| k == "PATH")
        .map_or(BASE_PATH, |(_, v)| v.as_str());
    let program = resolve_program(argv0, path_var, &cwd)?;
    enforcer
        .check_program(&program)
        .map_err(|e| Response::error(ErrorKind::PermissionDenied, e.0))?;

    let mut command = Command::new(&program);
    command
        .arg0(argv0)
        .args(&req.argv[1..])
        .env_clear()
        .envs(BASE_ENV)
        .envs(enforcer.child_env.iter().map(|(k, v)| (k, v)))
        .envs(req.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&cwd)
        .stdin(stdin_for(req))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(restrictions) = enforcer.child_restrictions() {
        // SAFETY: the hook only makes async-signal-safe syscalls and does
        // not allocate (see ChildRestrictions::apply).
        unsafe {
            command.pre_exec(move || restrictions.apply());
        }
    }
    Ok(command)
}

/// A pipe when the request has stdin, else `/dev/null` (or, in a rootfs
/// without it, a pipe closed at once: EOF all the same).
fn stdin_for(req: &ExecRequest) -> Stdio {
    if req.stdin.is_some() {
        return Stdio::piped();
    }
    std::fs::File::open("/dev/null").map_or_else(|_| Stdio::piped(), Stdio::from)
}

/// The file `execve` will run for `argv0`: a path containing `/` as is
/// (relative to `cwd`), else the first executable file in `path_var`.
pub fn resolve_program(argv0: &str, path_var: &str, cwd: &Path) -> Result<PathBuf, Response> {
    let not_found = |what: String| Response::error(ErrorKind::NotFound, what);
    if argv0.contains('/') {
        let program = cwd.join(argv0);
        return if program.exists() {
            Ok(program)
        } else {
            Err(not_found(format!(
                "{argv0}: {}",
                io::Error::from_raw_os_error(libc::ENOENT)
            )))
        };
    }
    for dir in path_var.split(':').filter(|d| !d.is_empty()) {
        let candidate = cwd.join(dir).join(argv0);
        let executable = candidate
            .metadata()
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
        if executable {
            return Ok(candidate);
        }
    }
    Err(not_found(format!(
        "{argv0}: command not found (PATH={path_var})"
    )))
}

fn spawn_error(argv0: &str, program: &Path, error: &io::Error, enforcer: &Enforcer) -> Response {
    match error.raw_os_error() {
        Some(libc::ENOENT) => {
            // The program exists (it was resolved); a missing interpreter
            // (ELF loader of a dynamic binary, `#!` line) gives ENOENT too.
            let missing_interpreter = policy::program_interpreter(program)
                .ok()
                .flatten()
                .filter(|interpreter| !interpreter.exists());
            let message = match missing_interpreter {
                Some(interpreter) => format!(
                    "{argv0}: its interpreter {} does not exist: {error}",
                    interpreter.display()
                ),
                None => format!("{argv0}: {error}"),
            };
            Response::error(ErrorKind::NotFound, message)
        }
        Some(libc::EPERM) if enforcer.no_process_creation => Response::error(
            ErrorKind::PermissionDenied,
            format!(
                "process creation is not allowed in this workspace \
                 (policy no_process_creation): {error}"
            ),
        ),
        Some(libc::EPERM | libc::EACCES) => {
            let note = if enforcer.restricts_executables() {
                " (allowed_executables is enforced)"
            } else {
                ""
            };
            Response::error(
                ErrorKind::PermissionDenied,
                format!("{argv0}: {error}{note}"),
            )
        }
        _ => Response::error(ErrorKind::SpawnFailed, format!("{argv0}: {error}")),
    }
}

fn spawn_and_wait(
    req: &ExecRequest,
    command: &mut Command,
    program: &Path,
    enforcer: &Enforcer,
    children: &Children,
    cancel: &Cancel,
) -> Response {
    let argv0 = req.argv.first().map_or("", String::as_str);
    let start = Instant::now();
    let Some(deadline) = start.checked_add(Duration::from_millis(req.timeout_ms)) else {
        return bad_request("timeout_ms is too large");
    };
    let (mut child, registration) = match children.spawn(command) {
        Ok(spawned) => spawned,
        Err(e) => return spawn_error(argv0, program, &e, enforcer),
    };
    let limit = req.max_output_bytes.min(MAX_OUTPUT_BYTES);
    let stdin = req.stdin.as_deref().map(str::as_bytes).unwrap_or_default();
    let outcome = pump(
        &mut child,
        registration.pid(),
        stdin,
        limit,
        deadline,
        cancel,
    );
    // Whatever happened, the command is waited for before it is unregistered.
    let status = match outcome.status {
        Some(status) => Ok(status),
        None => {
            kill_group(registration.pid());
            child.wait()
        }
    };
    drop(registration);
    let status = match (status, outcome.error) {
        (Ok(status), None) => status,
        (Err(e), _) | (_, Some(e)) => {
            return Response::error(ErrorKind::Internal, format!("waiting for {argv0}: {e}"));
        }
    };
    if outcome.cancelled {
        return Response::error(
            ErrorKind::Internal,
            format!("{argv0}: cancelled (its process group was killed)"),
        );
    }
    let (stdout, out_truncated) = outcome.stdout.finish();
    let (stderr, err_truncated) = outcome.stderr.finish();
    Response::Exec(ExecResult {
        exit_code: status.code(),
        signal: status.signal(),
        stdout,
        stderr,
        truncated: out_truncated || err_truncated,
        timed_out: outcome.timed_out,
        duration_ms: u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX),
    })
}

fn kill_group(pgid: libc::pid_t) {
    // SAFETY: plain syscalls. The command leads its own process group; it is
    // also killed directly in case it left the group.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
        libc::kill(pgid, libc::SIGKILL);
    }
}

struct Outcome {
    status: Option<ExitStatus>,
    error: Option<io::Error>,
    stdout: Capture,
    stderr: Capture,
    timed_out: bool,
    cancelled: bool,
}

/// Feeds stdin, captures stdout/stderr and waits for the command, killing
/// its process group at `deadline`.
fn pump(
    child: &mut Child,
    pid: libc::pid_t,
    stdin_data: &[u8],
    limit: usize,
    deadline: Instant,
    cancel: &Cancel,
) -> Outcome {
    let mut outcome = Outcome {
        status: None,
        error: None,
        stdout: Capture::new(limit),
        stderr: Capture::new(limit),
        timed_out: false,
        cancelled: false,
    };
    let mut stdin: Option<ChildStdin> = child.stdin.take();
    let mut stdout: Option<ChildStdout> = child.stdout.take();
    let mut stderr: Option<ChildStderr> = child.stderr.take();
    let mut written = 0;
    if stdin_data.is_empty() {
        stdin = None;
    } else if let Some(pipe) = &stdin
        && set_nonblocking(pipe.as_fd()).is_err()
    {
        stdin = None;
    }
    let mut pidfd = pidfd_open(pid);
    let mut read_until: Option<Instant> = None;
    let mut buf = vec![0u8; 64 * 1024];

    loop {
        if outcome.status.is_none() {
            match child.try_wait() {
                Ok(Some(status)) => {
                    outcome.status = Some(status);
                    read_until = Some(Instant::now() + EXIT_GRACE);
                    stdin = None;
                    pidfd = None;
                }
                Ok(None) => {}
                Err(e) => {
                    outcome.error = Some(e);
                    return outcome;
                }
            }
        }
        if cancel.is_cancelled() {
            // The status is collected by the caller, which kills the group.
            outcome.cancelled = true;
            return outcome;
        }
        let now = Instant::now();
        if outcome.status.is_none() && now >= deadline {
            kill_group(pid);
            outcome.timed_out = true;
            match child.wait() {
                Ok(status) => outcome.status = Some(status),
                Err(e) => {
                    outcome.error = Some(e);
                    return outcome;
                }
            }
            read_until = Some(Instant::now() + KILL_GRACE);
            stdin = None;
            pidfd = None;
        }
        if outcome.status.is_some() && stdout.is_none() && stderr.is_none() {
            return outcome;
        }
        let wait_until = read_until.unwrap_or(deadline);
        if now >= wait_until {
            return outcome; // output still held open by processes left behind
        }
        let mut wait = wait_until - now;
        if outcome.status.is_none() && pidfd.is_none() {
            wait = wait.min(FALLBACK_POLL);
        }
        if cancel.is_watched() {
            wait = wait.min(cancel::CHECK_INTERVAL);
        }

        // Slots: 0 stdin, 1 stdout, 2 stderr, 3 pidfd (-1 = unused: poll ignores it).
        let fd_of = |fd: Option<i32>| fd.unwrap_or(-1);
        let mut fds = [
            pollfd(fd_of(stdin.as_ref().map(|p| p.as_raw_fd())), libc::POLLOUT),
            pollfd(fd_of(stdout.as_ref().map(|p| p.as_raw_fd())), libc::POLLIN),
            pollfd(fd_of(stderr.as_ref().map(|p| p.as_raw_fd())), libc::POLLIN),
            pollfd(fd_of(pidfd.as_ref().map(|p| p.as_raw_fd())), libc::POLLIN),
        ];
        let millis = libc::c_int::try_from(wait.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        // SAFETY: fds is a valid array of pollfd of the given length.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, millis) };
        if ready < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            outcome.error = Some(e);
            return outcome;
        }
        let ready_for = |slot: usize, events: libc::c_short| {
            fds[slot].revents & (events | libc::POLLHUP | libc::POLLERR) != 0
        };
        if ready_for(0, libc::POLLOUT)
            && let Some(pipe) = &mut stdin
        {
            match pipe.write(&stdin_data[written..]) {
                Ok(n) => {
                    written += n;
                    if written >= stdin_data.len() {
                        stdin = None; // EOF for the command
                    }
                }
                Err(e) if is_transient(&e) => {}
                Err(_) => stdin = None, // EPIPE: the command stopped reading
            }
        }
        if ready_for(1, libc::POLLIN) {
            read_into(&mut stdout, &mut outcome.stdout, &mut buf);
        }
        if ready_for(2, libc::POLLIN) {
            read_into(&mut stderr, &mut outcome.stderr, &mut buf);
        }
    }
}

fn pollfd(fd: i32, events: libc::c_short) -> libc::pollfd {
    libc::pollfd {
        fd,
        events,
        revents: 0,
    }
}

fn is_transient(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

/// One read from a ready pipe; closes it on EOF or error.
fn read_into<R: Read>(pipe: &mut Option<R>, capture: &mut Capture, buf: &mut [u8]) {
    let Some(reader) = pipe else { return };
    match reader.read(buf) {
        Ok(0) => *pipe = None,
        Ok(n) => capture.push(&buf[..n]),
        Err(e) if is_transient(&e) => {}
        Err(_) => *pipe = None,
    }
}

fn set_nonblocking(fd: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    let fd = fd.as_raw_fd();
    // SAFETY: fcntl on a valid fd.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags < 0 || libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A pidfd for `pid` (readable once it exits), if the kernel offers one.
fn pidfd_open(pid: libc::pid_t) -> Option<OwnedFd> {
    // SAFETY: plain syscall; on success it returns a new fd we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
    // SAFETY: fd is a fresh, valid descriptor owned by nobody else.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// For logs: the program name without its arguments (which may hold secrets).
pub fn describe(req: &ExecRequest) -> String {
    let argv0 = req.argv.first().map_or("", String::as_str);
    let name = Path::new(OsStr::from_bytes(argv0.as_bytes()));
    format!(
        "{} (+{} args)",
        name.display(),
        req.argv.len().saturating_sub(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(r: Response) -> ErrorKind {
        match r {
            Response::Error { kind, .. } => kind,
            other => panic!("not an error: {other:?}"),
        }
    }

    #[test]
    fn resolves_through_path() {
        let cwd = Path::new("/");
        let sh = resolve_program("sh", BASE_PATH, cwd).unwrap();
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            resolve_program("/bin/sh", BASE_PATH, cwd).unwrap(),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(
            resolve_program("bin/sh", BASE_PATH, cwd).unwrap(),
            PathBuf::from("/bin/sh")
        );
        assert_eq!(
            kind(resolve_program("no-such-program-pincer", BASE_PATH, cwd).unwrap_err()),
            ErrorKind::NotFound
        );
        assert_eq!(
            kind(resolve_program("/no/such", BASE_PATH, cwd).unwrap_err()),
            ErrorKind::NotFound
        );
    }

    #[test]
    fn bad_requests_are_refused_before_spawning() {
        let enforcer = Enforcer::unrestricted();
        let children = Children::default();
        let mut cases = Vec::new();
        cases.push(ExecRequest::new(Vec::<String>::new()));
        cases.push(ExecRequest::new([""]));
        cases.push(ExecRequest::new(["true", "a\0b"]));
        let mut r = ExecRequest::new(["true"]);
        r.env.push(("A=B".into(), "x".into()));
        cases.push(r);
        let mut r = ExecRequest::new(["true"]);
        r.timeout_ms = 0;
        cases.push(r);
        for req in cases {
            assert_eq!(
                kind(run(&req, &enforcer, &children)),
                ErrorKind::BadRequest,
                "{req:?}"
            );
        }
        let mut r = ExecRequest::new(["true"]);
        r.cwd = Some("/no/such/dir".into());
        assert_eq!(kind(run(&r, &enforcer, &children)), ErrorKind::NotFound);
    }

    #[test]
    fn commands_get_the_child_env_under_their_own() {
        let mut enforcer = Enforcer::unrestricted();
        enforcer.child_env = vec![
            ("HTTP_PROXY".into(), "http://127.0.0.1:9".into()),
            ("NO_PROXY".into(), "localhost".into()),
        ];
        let children = Children::default();
        let mut req = ExecRequest::new(["/bin/sh", "-c", "echo $HTTP_PROXY $NO_PROXY"]);
        req.cwd = Some("/".into());
        req.env.push(("NO_PROXY".into(), "mine".into()));
        match run(&req, &enforcer, &children) {
            Response::Exec(result) => assert_eq!(result.stdout, "http://127.0.0.1:9 mine\n"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn describe_hides_arguments() {
        assert_eq!(
            describe(&ExecRequest::new(["curl", "-H", "secret"])),
            "curl (+2 args)"
        );
    }
}
