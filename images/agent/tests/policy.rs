//! The runner's policy: `no_process_creation` (its own seccomp filter) and
//! `allowed_executables` (Landlock in each child plus a runner-side check),
//! and failing closed on a policy it cannot enforce.

mod common;

use std::path::Path;
use std::process::Output;

use common::*;
use pincer_runner_protocol::{ErrorKind, Request, Response};

/// Starts the runner with `policy`, expecting it to refuse (exit 2).
fn refused_start(policy: &str) -> String {
    let dir = TempDir::new();
    let log = dir.path().join("log");
    let status = serve_command(&dir.path().join("r.sock"), Some(policy), &log)
        .status()
        .expect("run");
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    assert_eq!(status.code(), Some(2), "policy {policy}: {stderr}");
    assert!(!dir.path().join("r.sock").exists());
    stderr
}

fn static_busybox() -> bool {
    let busybox = Path::new("/bin/busybox");
    let Ok(output) = std::process::Command::new("file").arg(busybox).output() else {
        return busybox.exists();
    };
    let Output { stdout, .. } = output;
    let described = String::from_utf8_lossy(&stdout).into_owned();
    if described.contains("statically linked") {
        true
    } else {
        eprintln!("skipped: /bin/busybox is not busybox-static ({described})");
        false
    }
}

#[test]
fn invalid_policies_fail_closed() {
    let stderr = refused_start("{not json");
    assert!(stderr.contains("PINCER_RUNNER_POLICY"), "{stderr}");
    refused_start("");
    refused_start(r#"{"no_process_creaton":true}"#);
    let stderr = refused_start(r#"{"allowed_executables":["busybox"]}"#);
    assert!(stderr.contains("not an absolute path"), "{stderr}");
    let stderr = refused_start(r#"{"allowed_executables":["/no/such/program"]}"#);
    assert!(stderr.contains("/no/such/program"), "{stderr}");
    let stderr = refused_start(r#"{"allowed_executables":["/tmp"]}"#);
    assert!(stderr.contains("not a regular file"), "{stderr}");
    // A dynamically linked program needs its loader listed (Landlock checks
    // Execute on the ELF interpreter too).
    let stderr = refused_start(r#"{"allowed_executables":["/usr/bin/env"]}"#);
    assert!(stderr.contains("interpreter"), "{stderr}");
}

#[test]
fn allowed_executables_are_enforced_by_landlock() {
    if !static_busybox() {
        return;
    }
    let runner = Runner::start(Some(r#"{"allowed_executables":["/bin/busybox"]}"#));
    let status = runner.status();
    // Reported canonical (here /bin may be a symlink to usr/bin).
    let canonical = Path::new("/bin/busybox").canonicalize().unwrap();
    assert_eq!(
        status.enforcement.allowed_executables,
        Some(vec![canonical.to_string_lossy().into_owned()])
    );
    assert!(status.enforcement.landlock_abi.is_some());
    assert!(!status.enforcement.exec_filter);

    let result = runner.run(&["/bin/busybox", "true"]);
    assert_eq!(result.exit_code, Some(0));
    let result = runner.run(&["/bin/busybox", "sh", "-c", "echo $((6 * 7))"]);
    assert_eq!(result.stdout, "42\n");

    // The runner-side check refuses before spawning.
    let message = expect_error(
        runner.exec(runner.request(&["/usr/bin/env", "true"])),
        ErrorKind::PermissionDenied,
    );
    assert!(message.contains("allowed_executables"), "{message}");
    // Also through PATH lookup.
    let message = expect_error(
        runner.exec(runner.request(&["true"])),
        ErrorKind::PermissionDenied,
    );
    assert!(message.contains("not in allowed_executables"), "{message}");

    // The Landlock layer: an allowed program cannot execute anything else.
    let result = runner.run(&["/bin/busybox", "sh", "-c", "/usr/bin/env true"]);
    assert_eq!(result.exit_code, Some(126), "{result:?}");
    assert!(result.stderr.contains("Permission denied"), "{result:?}");
    // A copy of an allowed program is another file.
    let result = runner.run(&[
        "/bin/busybox",
        "sh",
        "-c",
        "cp /bin/busybox ./bb && chmod +x ./bb && ./bb true",
    ]);
    assert_eq!(result.exit_code, Some(126), "{result:?}");
    // Symlinks to the allowed file work (same inode): applets.
    let result = runner.run(&[
        "/bin/busybox",
        "sh",
        "-c",
        "ln -s /bin/busybox ./echo && ./echo via-symlink",
    ]);
    assert_eq!(result.stdout, "via-symlink\n");
}

#[test]
fn allowed_executables_close_the_memfd_loophole() {
    let Ok(python) = Path::new("/usr/bin/python3").canonicalize() else {
        eprintln!("skipped: no python3");
        return;
    };
    let Ok(Some(loader)) = interpreter_of(&python) else {
        eprintln!("skipped: python3 is not dynamically linked");
        return;
    };
    let policy = serde_json::json!({
        "allowed_executables": [python.to_str().unwrap(), loader.to_str().unwrap()],
    })
    .to_string();
    let runner = Runner::start(Some(&policy));
    let script = "import os\n\
        try:\n    os.memfd_create('x')\n    print('exec-able memfd created')\n\
        except PermissionError:\n    print('denied')\n\
        fd = os.memfd_create('y', 8)  # MFD_NOEXEC_SEAL\n\
        print('noexec memfd ok')\n";
    let result = runner.run(&[python.to_str().unwrap(), "-c", script]);
    assert_eq!(result.stdout, "denied\nnoexec memfd ok\n", "{result:?}");
}

fn interpreter_of(path: &Path) -> std::io::Result<Option<std::path::PathBuf>> {
    let output = std::process::Command::new("file")
        .arg("-L")
        .arg(path)
        .output()?;
    let described = String::from_utf8_lossy(&output.stdout).into_owned();
    Ok(described
        .split("interpreter ")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .map(|p| std::path::PathBuf::from(p.trim())))
}

#[test]
fn no_process_creation_denies_exec() {
    let runner = Runner::start(Some(r#"{"no_process_creation":true}"#));
    let status = runner.status();
    assert!(status.enforcement.exec_filter);
    assert_eq!(status.enforcement.allowed_executables, None);
    for _ in 0..2 {
        let message = expect_error(
            runner.exec(runner.request(&["/bin/sh", "-c", "true"])),
            ErrorKind::PermissionDenied,
        );
        assert!(
            message.starts_with(
                "process creation is not allowed in this workspace (policy no_process_creation): "
            ),
            "{message}"
        );
    }
    // The runner keeps serving (its threads still work).
    assert!(matches!(runner.call(&Request::Ping), Response::Pong(_)));
}
