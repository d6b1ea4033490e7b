//! The runner driven over its socket: exec semantics, robustness, lifecycle,
//! and the `exec`/`ping` clients.

mod common;

use std::io::Read;
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use pincer_runner_protocol::{
    ErrorKind, ExecRequest, MAX_REQUEST_BYTES, Request, Response, Status,
};

#[test]
fn ping_reports_status() {
    let runner = Runner::start(None);
    std::thread::sleep(Duration::from_millis(20));
    let status = runner.status();
    assert_eq!(status.pid, runner.child.id());
    // SAFETY: getuid cannot fail.
    assert_eq!(status.uid, unsafe { libc::getuid() });
    assert!(status.uptime_ms >= 20, "{status:?}");
    assert_eq!(status.version, env!("CARGO_PKG_VERSION"));
    assert!(!status.enforcement.exec_filter);
    assert_eq!(status.enforcement.allowed_executables, None);
    eprintln!("landlock ABI here: {:?}", status.enforcement.landlock_abi);
}

/// Idleness as the host reads it: a running command makes the runner busy
/// (a ping is not work), and its end starts the idle clock again.
#[test]
fn status_counts_running_work_and_time_since_the_last() {
    let runner = Runner::start(None);
    std::thread::sleep(Duration::from_millis(50));
    let fresh = runner.status();
    assert_eq!(fresh.busy, 0);
    assert!(fresh.idle_ms >= 50, "{fresh:?}");
    let pinged = runner.status();
    assert!(
        pinged.idle_ms >= fresh.idle_ms,
        "a ping is not work: {pinged:?}"
    );

    let mut slow = runner.request(&["sleep", "1"]);
    slow.timeout_ms = 5_000;
    let running = {
        let socket = runner.socket.clone();
        std::thread::spawn(move || common::call_at(&socket, &Request::Exec(slow)))
    };
    let deadline = Instant::now() + Duration::from_secs(5);
    while runner.status().busy == 0 {
        assert!(
            Instant::now() < deadline,
            "the command never showed as busy"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(runner.status().idle_ms, 0);
    running.join().unwrap();
    let after = runner.status();
    assert_eq!(after.busy, 0);
    assert!(
        after.idle_ms < fresh.idle_ms + 1_000,
        "the clock restarted: {after:?}"
    );
}

#[test]
fn echo_round_trip_with_exit_code() {
    let runner = Runner::start(None);
    let result = runner.run(&["sh", "-c", "echo hello; echo oops >&2; exit 3"]);
    assert_eq!(result.stdout, "hello\n");
    assert_eq!(result.stderr, "oops\n");
    assert_eq!(result.exit_code, Some(3));
    assert_eq!(result.signal, None);
    assert!(!result.truncated && !result.timed_out);

    let ok = runner.run(&["echo", "a b", "c"]);
    assert_eq!((ok.stdout.as_str(), ok.exit_code), ("a b c\n", Some(0)));
    // One log line per request, without arguments.
    assert!(runner.log().contains("exec sh (+2 args) -> exit 3"));
}

#[test]
fn killed_by_a_signal() {
    let runner = Runner::start(None);
    let result = runner.run(&["sh", "-c", "kill -9 $$"]);
    assert_eq!(result.exit_code, None);
    assert_eq!(result.signal, Some(9));
}

#[test]
fn stdin_is_fed_and_closed() {
    let runner = Runner::start(None);
    let mut request = runner.request(&["cat"]);
    request.stdin = Some("line 1\nline 2\n".into());
    let result = expect_exec(runner.exec(request));
    assert_eq!(result.stdout, "line 1\nline 2\n");

    // Without stdin the command reads /dev/null and does not hang.
    let result = runner.run(&["cat"]);
    assert_eq!((result.stdout.as_str(), result.exit_code), ("", Some(0)));

    // Large stdin and output both at once: no deadlock.
    let big = "0123456789abcdef".repeat(40_000); // 640 KB
    let mut request = runner.request(&["cat"]);
    request.stdin = Some(big.clone());
    request.max_output_bytes = 1 << 20;
    let result = expect_exec(runner.exec(request));
    assert_eq!(result.stdout.len(), big.len());
    assert!(!result.truncated);
}

#[test]
fn cwd_and_env() {
    let runner = Runner::start(None);
    let mut request = runner.request(&[
        "sh",
        "-c",
        "pwd; echo $FOO; echo $HOME; echo $LANG; echo $PATH; echo ${PINCER_TEST_SECRET-unset}",
    ]);
    request.env = vec![("FOO".into(), "bar baz".into())];
    let result = expect_exec(runner.exec(request));
    let dir = runner.dir.path().canonicalize().unwrap();
    assert_eq!(
        result.stdout,
        format!(
            "{}\nbar baz\n/workspace\nC.UTF-8\n/usr/local/bin:/usr/bin:/bin\nunset\n",
            dir.display()
        )
    );

    // The request's env overrides the base, and its PATH is used for lookup.
    let bin = runner.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let script = bin.join("hello-pincer");
    std::fs::write(&script, "#!/bin/sh\necho from script $HOME\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mut request = runner.request(&["hello-pincer"]);
    request.env = vec![
        ("PATH".into(), format!("{}:/usr/bin:/bin", bin.display())),
        ("HOME".into(), "/home/x".into()),
    ];
    let result = expect_exec(runner.exec(request));
    assert_eq!(result.stdout, "from script /home/x\n");

    // A relative program path is relative to cwd.
    let result = runner.run(&["./bin/hello-pincer"]);
    assert_eq!(result.stdout, "from script /workspace\n");
}

#[test]
fn default_cwd_is_workspace() {
    let runner = Runner::start(None);
    let response = runner.exec(ExecRequest::new(["pwd"]));
    if std::path::Path::new("/workspace").is_dir() {
        assert_eq!(expect_exec(response).stdout, "/workspace\n");
    } else {
        let message = expect_error(response, ErrorKind::NotFound);
        assert!(message.contains("/workspace"), "{message}");
    }
}

#[test]
fn output_cap_keeps_head_and_tail() {
    let runner = Runner::start(None);
    let mut request = runner.request(&["seq", "1", "100000"]);
    request.max_output_bytes = 1000;
    let result = expect_exec(runner.exec(request));
    assert!(result.truncated);
    let total: usize = (1..=100_000).map(|i: u32| i.to_string().len() + 1).sum();
    let marker = format!("\n[... {} bytes truncated ...]\n", total - 1000);
    let (head, tail) = result.stdout.split_once(&marker).expect("marker");
    assert_eq!(head.len(), 500);
    assert_eq!(tail.len(), 500);
    assert!(head.starts_with("1\n2\n3\n"));
    assert!(tail.ends_with("99999\n100000\n"));
    assert_eq!(result.exit_code, Some(0));

    // stderr is capped separately; a request's cap is lowered to MAX_OUTPUT_BYTES.
    let mut request = runner.request(&["sh", "-c", "seq 1 10 >&2"]);
    request.max_output_bytes = usize::MAX;
    let result = expect_exec(runner.exec(request));
    assert_eq!(result.stderr.lines().count(), 10);
    assert!(!result.truncated);
}

#[test]
fn non_utf8_output_is_lossy() {
    let runner = Runner::start(None);
    let result = runner.run(&["printf", "a\\377b"]);
    assert_eq!(result.stdout, "a\u{FFFD}b");
}

#[test]
fn timeout_kills_the_process_group() {
    let runner = Runner::start(None);
    let mut request = runner.request(&["sh", "-c", "sleep 30 & echo $! $$; sleep 30"]);
    request.timeout_ms = 500;
    let start = Instant::now();
    let result = expect_exec(runner.exec(request));
    let elapsed = start.elapsed();
    assert!(result.timed_out);
    assert_eq!(result.signal, Some(9));
    assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
    assert!(result.duration_ms >= 500, "{result:?}");
    let pids: Vec<u32> = result
        .stdout
        .split_whitespace()
        .map(|p| p.parse().expect("pid"))
        .collect();
    assert_eq!(pids.len(), 2, "{:?}", result.stdout);
    for pid in pids {
        assert!(
            eventually(Duration::from_secs(2), || is_dead(pid)),
            "process {pid} survived the timeout"
        );
    }
}

#[test]
fn output_held_by_a_background_process_does_not_block() {
    let runner = Runner::start(None);
    let start = Instant::now();
    let result = runner.run(&["sh", "-c", "sleep 3 & echo started"]);
    assert_eq!(result.stdout, "started\n");
    assert_eq!(result.exit_code, Some(0));
    assert!(start.elapsed() < Duration::from_millis(1500));
}

#[test]
fn commands_start_with_no_blocked_signals() {
    let runner = Runner::start(None);
    let result = runner.run(&["grep", "^SigBlk", "/proc/self/status"]);
    assert_eq!(result.stdout.trim(), "SigBlk:\t0000000000000000");
}

#[test]
fn not_found() {
    let runner = Runner::start(None);
    let message = expect_error(
        runner.exec(runner.request(&["no-such-command-pincer"])),
        ErrorKind::NotFound,
    );
    assert!(message.contains("no-such-command-pincer"), "{message}");
    let message = expect_error(
        runner.exec(runner.request(&["/no/such/program"])),
        ErrorKind::NotFound,
    );
    assert!(message.contains("/no/such/program"), "{message}");
    let mut request = runner.request(&["true"]);
    request.cwd = Some("/no/such/dir".into());
    expect_error(runner.exec(request), ErrorKind::NotFound);

    // A program whose interpreter is missing says so.
    let script = runner.dir.path().join("orphan-script");
    std::fs::write(&script, "#!/no/such/interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let message = expect_error(
        runner.exec(runner.request(&["./orphan-script"])),
        ErrorKind::NotFound,
    );
    assert!(
        message.contains("interpreter /no/such/interpreter does not exist"),
        "{message}"
    );
}

#[test]
fn not_executable_is_permission_denied() {
    let runner = Runner::start(None);
    let file = runner.dir.path().join("data.txt");
    std::fs::write(&file, "not a program").unwrap();
    let message = expect_error(
        runner.exec(runner.request(&[file.to_str().unwrap()])),
        ErrorKind::PermissionDenied,
    );
    assert!(
        message.contains("data.txt") && message.contains("os error 13"),
        "{message}"
    );
}

#[test]
fn invalid_requests_are_bad_requests_and_the_runner_keeps_serving() {
    let runner = Runner::start(None);
    for bad in [
        &b"not json\n"[..],
        b"{\"op\":\"reboot\"}\n",
        b"{\"op\":\"exec\",\"argv\":[]}\n",
        b"{\"op\":\"exec\",\"argv\":[\"true\"],\"timeout_ms\":0}\n",
        b"{\"op\":\"exec\",\"argv\":[\"true\"],\"env\":[[\"A=B\",\"c\"]]}\n",
    ] {
        expect_error(runner.raw(bad), ErrorKind::BadRequest);
    }
    // Over the size limit, without ever sending a newline.
    let huge = vec![b'x'; MAX_REQUEST_BYTES + 10];
    let message = expect_error(runner.raw(&huge), ErrorKind::BadRequest);
    assert!(message.contains("exceeds"), "{message}");
    // A connection that closes without a request is harmless.
    drop(UnixStream::connect(&runner.socket).unwrap());
    assert_eq!(runner.run(&["echo", "still here"]).stdout, "still here\n");
    runner.status();
}

#[test]
fn concurrent_requests() {
    let runner = Runner::start(None);
    let start = Instant::now();
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                let runner = &runner;
                scope.spawn(move || {
                    let n = i.to_string();
                    let result = runner.run(&["sh", "-c", "sleep 0.5; echo $0", &n]);
                    assert_eq!(result.stdout, format!("{i}\n"));
                })
            })
            .collect();
        for handle in handles {
            handle.join().unwrap();
        }
    });
    assert!(
        start.elapsed() < Duration::from_millis(2500),
        "{:?}",
        start.elapsed()
    );
    // Every command was waited for: the runner has no children left.
    let pid = runner.child.id();
    assert!(
        eventually(Duration::from_secs(2), || children_of(pid).is_empty()),
        "children left: {:?}",
        children_of(pid)
    );
}

/// Whether the runner already answered (or closed) a connection we never
/// sent anything on: it was refused.
fn answered(stream: &UnixStream) -> bool {
    stream.set_nonblocking(true).expect("non-blocking");
    let answered = !matches!(
        (&*stream).read(&mut [0u8; 1]),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock
    );
    stream.set_nonblocking(false).expect("blocking");
    answered
}

#[test]
fn too_many_connections_are_answered_busy() {
    let runner = Runner::start(None);
    // 64 idle connections occupy every slot. The connection that saw the
    // runner up may hold a slot a moment longer (its thread still has to see
    // it close), so one of the 64 can be refused then: keep only connections
    // the runner kept open, until 64 are held.
    let mut idle: Vec<UnixStream> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        while idle.len() < 64 {
            idle.push(UnixStream::connect(&runner.socket).unwrap());
        }
        std::thread::sleep(Duration::from_millis(200));
        idle.retain(|s| !answered(s));
        if idle.len() == 64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the runner kept refusing idle connections"
        );
    }
    let message = expect_error(runner.call(&Request::Ping), ErrorKind::Internal);
    assert_eq!(message, "busy");
    drop(idle);
    assert!(eventually(Duration::from_secs(5), || matches!(
        runner.call(&Request::Ping),
        Response::Pong(_)
    )));
}

#[test]
fn sigterm_exits_zero_and_removes_the_socket() {
    let runner = Runner::start(None);
    let socket = runner.socket.clone();
    let dir = TempDir(runner.dir.path().to_path_buf());
    let status = runner.terminate();
    assert_eq!(status.code(), Some(0));
    assert!(!socket.exists());
    drop(dir);
}

#[test]
fn socket_is_owner_only_and_a_stale_one_is_replaced() {
    let dir = TempDir::new();
    let socket = dir.path().join("r.sock");
    drop(UnixListener::bind(&socket).unwrap()); // stale: nobody listens
    let log = dir.path().join("log");
    let mut child = serve_command(&socket, None, &log).spawn().unwrap();
    wait_for_socket(&socket, &mut child, &log);
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&socket).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600);

    // A second runner on the same, live socket refuses to start.
    let second = serve_command(&socket, None, &dir.path().join("log2"))
        .status()
        .unwrap();
    assert_eq!(second.code(), Some(1));
    child.kill().unwrap();
    child.wait().unwrap();

    // Something that is not a socket is never removed.
    let file = dir.path().join("file");
    std::fs::write(&file, "keep").unwrap();
    let status = serve_command(&file, None, &dir.path().join("log3"))
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(1));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");

    // A symlink in the socket's place (planted by an earlier container's
    // tools) is replaced; its target is left alone.
    let link = dir.path().join("link.sock");
    std::os::unix::fs::symlink(&file, &link).unwrap();
    let log4 = dir.path().join("log4");
    let mut child = serve_command(&link, None, &log4).spawn().unwrap();
    wait_for_socket(&link, &mut child, &log4);
    assert!(
        !std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep");
    child.kill().unwrap();
    child.wait().unwrap();
}

/// As PID 1 of a new PID namespace (`unshare --pid --fork`, needs root), the
/// runner reaps orphans and still collects its own commands' statuses.
#[test]
fn reaps_orphans_as_pid_1() {
    let dir = TempDir::new();
    let socket = dir.path().join("r.sock");
    let log = dir.path().join("log");
    let mut command = Command::new("unshare");
    command
        .args([
            "--pid",
            "--fork",
            "--kill-child",
            AGENT,
            "serve",
            "--socket",
        ])
        .arg(&socket)
        .env_remove("PINCER_RUNNER_POLICY")
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    let Ok(mut child) = command.spawn() else {
        eprintln!("skipped: unshare is not available");
        return;
    };
    let start = Instant::now();
    while UnixStream::connect(&socket).is_err() {
        if child.try_wait().unwrap().is_some() || start.elapsed() > Duration::from_secs(5) {
            eprintln!(
                "skipped: cannot run in a new PID namespace: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            let _ = child.kill();
            let _ = child.wait();
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let runner = Runner { child, socket, dir };
    let Status { pid, .. } = runner.status();
    assert_eq!(pid, 1);
    let agent_pid = children_of(runner.child.id())[0];

    // Orphans (the backgrounded sleeps) are reparented to the runner.
    let mut request = runner.request(&["sh", "-c", "sleep 0.2 & sleep 0.2 & exit 5"]);
    request.cwd = Some("/".into());
    for _ in 0..5 {
        assert_eq!(expect_exec(runner.exec(request.clone())).exit_code, Some(5));
    }
    assert!(
        eventually(Duration::from_secs(5), || children_of(agent_pid).is_empty()),
        "zombies left: {:?}",
        children_of(agent_pid)
    );

    // SIGTERM reaches PID 1 (signals with the default disposition would not).
    // SAFETY: plain syscall.
    unsafe { libc::kill(agent_pid as libc::pid_t, libc::SIGTERM) };
    assert_eq!(runner.terminate_wait().code(), Some(0));
}

#[test]
fn exec_client_relays_output_and_exit_code() {
    let runner = Runner::start(None);
    let dir = runner.dir.path().to_str().unwrap().to_string();
    let socket = runner.socket.to_str().unwrap().to_string();
    let run = |args: &[&str]| {
        Command::new(AGENT)
            .args(["exec", "--socket", &socket, "--cwd", &dir])
            .args(args)
            .output()
            .unwrap()
    };
    let out = run(&["--", "sh", "-c", "echo out; echo err >&2; exit 5"]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert_eq!(String::from_utf8_lossy(&out.stderr), "err\n");

    assert_eq!(run(&["no-such-command-pincer"]).status.code(), Some(127));
    assert_eq!(
        run(&["sh", "-c", "kill -TERM $$"]).status.code(),
        Some(128 + 15)
    );
    let out = run(&["--timeout-ms", "200", "--", "sleep", "5"]);
    assert_eq!(out.status.code(), Some(124));
    assert!(String::from_utf8_lossy(&out.stderr).contains("timed out"));

    let out = Command::new(AGENT)
        .args(["ping", "--socket", &socket])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let status: Status = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status.pid, runner.child.id());

    // No runner there.
    let out = Command::new(AGENT)
        .args(["ping", "--socket", "/nonexistent/r.sock"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn version_and_usage() {
    let out = Command::new(AGENT).arg("--version").output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("pincer-agent {}\n", env!("CARGO_PKG_VERSION"))
    );
    let out = Command::new(AGENT).arg("bogus").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("usage:"));
}

#[test]
fn an_idle_runner_exits_by_itself() {
    let dir = TempDir::new();
    let socket = dir.path().join("r.sock");
    let mut child = Command::new(AGENT)
        .args(["serve", "--socket"])
        .arg(&socket)
        .env(pincer_runner_protocol::IDLE_ENV, "1")
        .env_remove(pincer_runner_protocol::POLICY_ENV)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the idle runner did not exit"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(status.success());
    assert!(!socket.exists(), "the socket was left behind");
}

/// Time spent frozen (`docker pause`, here SIGSTOP) is not idleness: a
/// runner thawed after longer than its idle timeout answers the host's
/// next request instead of exiting under it, and exits later only after a
/// real idle period.
#[test]
fn a_runner_thawed_after_its_idle_timeout_does_not_exit_at_once() {
    let runner = Runner::start_with(None, &[(pincer_runner_protocol::IDLE_ENV, "2".to_owned())]);
    let pid = runner.child.id() as libc::pid_t;
    // The connection that found the socket is over before the freeze.
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: plain syscalls on our own child.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    std::thread::sleep(Duration::from_secs(3));
    unsafe { libc::kill(pid, libc::SIGCONT) };
    // The watchdog ticks (every 500 ms) before anyone speaks to it.
    std::thread::sleep(Duration::from_millis(1_200));
    assert!(
        runner.socket.exists(),
        "the runner exited on thaw: {}",
        runner.log()
    );
    let status = runner.status();
    assert_eq!(status.busy, 0);
    let mut runner = runner;
    let deadline = Instant::now() + Duration::from_secs(10);
    while runner.child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "it never exited when idle");
        std::thread::sleep(Duration::from_millis(100));
    }
}
