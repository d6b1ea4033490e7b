//! Workspace containers on the real Docker Engine, driven through the real
//! `pincer` binary. Every container is labelled and removed afterwards.
//! Network checks talk only to the test's own containers on a network it
//! created; nothing leaves the machine.

use crate::support;

use std::path::PathBuf;

use support::{
    DockerCleanup, Sandbox, docker, fails, listener_on_test_network, ok, stderr, stdout, unique,
};

struct Env {
    // Dropped first: it reads the instance id from the sandbox's home.
    _cleanup: DockerCleanup,
    sandbox: Sandbox,
    config: PathBuf,
    label: String,
}

impl Env {
    /// A sandbox whose config defines `workspaces` (YAML under `workspaces:`),
    /// with the default image built (a no-op when it is up to date).
    fn new(workspaces: &str) -> Self {
        Self::with_prefix("", workspaces)
    }

    /// As `new`, with `prefix` (top-level YAML) before the containers section.
    fn with_prefix(prefix: &str, workspaces: &str) -> Self {
        let sandbox = Sandbox::new();
        let label = unique();
        let base = sandbox.dir.path().join("ws");
        let config = sandbox.write(
            "pincer.yaml",
            &format!(
                "{prefix}containers:\n  workspace_base_path: {}\nworkspaces:\n{workspaces}",
                base.display()
            ),
        );
        let cleanup = DockerCleanup {
            home: sandbox.home(),
            label: label.clone(),
        };
        let env = Self {
            _cleanup: cleanup,
            sandbox,
            config,
            label,
        };
        ok(env.pincer(&["image", "build"]));
        env
    }

    fn pincer(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["--config", self.config.to_str().unwrap()];
        all.extend_from_slice(args);
        self.sandbox.pincer(&all)
    }

    fn exec(&self, workspace: &str, command: &[&str]) -> std::process::Output {
        let mut args = vec!["workspace", "exec", workspace, "--"];
        args.extend_from_slice(command);
        self.pincer(&args)
    }

    fn workspace_dir(&self, name: &str) -> PathBuf {
        self.sandbox.dir.path().join("ws").join(name)
    }

    fn container(&self, workspace: &str) -> String {
        let id = std::fs::read_to_string(self.sandbox.home().join("instance-id")).unwrap();
        format!("pincer-{}-{workspace}", id.trim())
    }
}

#[test]
fn no_internet_leaves_only_loopback_and_the_gateway_socket() {
    let env = Env::new("  sealed: {policies: [no_internet_access]}\n");
    let interfaces = ok(env.exec("sealed", &["cat", "/proc/net/dev"]));
    let names: Vec<&str> = interfaces
        .lines()
        .skip(2)
        .filter_map(|l| l.split(':').next())
        .map(str::trim)
        .collect();
    assert_eq!(names, ["lo"], "{interfaces}");
    let routes = ok(env.exec("sealed", &["cat", "/proc/net/route"]));
    assert_eq!(routes.lines().count(), 1, "a route exists:\n{routes}");

    // A listener of the test's own, on a network the test created, answers
    // a peer on that network but not the sealed workspace.
    let (net, ip) = listener_on_test_network(&env.label);
    let label = format!("pincer.test={}", env.label);
    let ip = ip.as_str();
    let peer = ok(docker(&[
        "run",
        "--rm",
        "--label",
        &label,
        "--network",
        &net,
        "--entrypoint",
        "/bin/sh",
        "pincer-agent:latest",
        "-c",
        &format!("for i in 1 2 3 4 5; do nc -w 2 {ip} 8080 && exit 0; sleep 0.5; done; exit 1"),
    ]));
    assert!(
        peer.contains("hello-from-listener"),
        "the control peer could not reach the listener: {peer}"
    );
    let sealed = env.exec("sealed", &["nc", "-w", "2", ip, "8080"]);
    assert!(
        !sealed.status.success(),
        "the sealed workspace reached {ip}: {}",
        stdout(&sealed)
    );
    assert!(!stdout(&sealed).contains("hello-from-listener"));

    // The host's gateway socket folder is reachable (read-only: connecting works).
    let socket = env.sandbox.home().join("run/sealed/gateway/gateway.sock");
    let server = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let answer = std::thread::spawn(move || {
        use std::io::{BufRead, Write};
        let (stream, _) = server.accept().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(&stream)
            .read_line(&mut line)
            .unwrap();
        let status = r#"{"op":"pong","pid":1,"uid":0,"uptime_ms":1,"version":"gateway-stand-in","enforcement":{"exec_filter":false,"landlock_abi":null,"allowed_executables":null}}"#;
        (&stream)
            .write_all(format!("{status}\n").as_bytes())
            .unwrap();
        line
    });
    let out = ok(env.exec(
        "sealed",
        &[
            "/opt/pincer/pincer-agent",
            "ping",
            "--socket",
            "/run/pincer/gateway/gateway.sock",
        ],
    ));
    assert!(out.contains("gateway-stand-in"), "{out}");
    assert!(answer.join().unwrap().contains("ping"));
}

#[test]
fn read_only_mounts_refuse_writes_and_the_workspace_folder_accepts_them() {
    let sandbox_notes = tempfile::tempdir().unwrap();
    std::fs::write(sandbox_notes.path().join("note.txt"), "private").unwrap();
    let env = Env::new(&format!(
        "  writer:\n    mounts: [{{source: {}, target: /notes, read_only: true}}]\n",
        sandbox_notes.path().display()
    ));
    assert_eq!(
        ok(env.exec("writer", &["cat", "/notes/note.txt"])),
        "private"
    );
    let denied = fails(env.exec("writer", &["sh", "-c", "echo x > /notes/new.txt"]));
    assert!(denied.contains("Read-only file system"), "{denied}");
    assert!(!sandbox_notes.path().join("new.txt").exists());
    ok(env.exec("writer", &["sh", "-c", "echo hello > /workspace/hello.txt"]));
    let on_host = std::fs::read_to_string(env.workspace_dir("writer").join("hello.txt")).unwrap();
    assert_eq!(on_host, "hello\n");
}

#[test]
fn no_process_creation_refuses_commands_while_the_runner_keeps_working() {
    let env = Env::new("  frozen: {policies: [no_process_creation]}\n");
    for _ in 0..2 {
        let err = fails(env.exec("frozen", &["sh", "-c", "ls"]));
        assert!(
            err.contains("permission denied") && err.contains("no_process_creation"),
            "{err}"
        );
    }
    let status = ok(env.pincer(&["workspace", "status", "frozen"]));
    assert!(status.contains("running"), "{status}");
}

#[test]
fn allowed_executables_run_and_others_are_refused() {
    let tools = tempfile::tempdir().unwrap();
    std::fs::copy("/bin/busybox", tools.path().join("other")).unwrap();
    let env = Env::new(&format!(
        "  narrow:\n    policies: [{{allowed_executables: [/bin/busybox]}}]\n    mounts: [{{source: {}, target: /tools}}]\n",
        tools.path().display()
    ));
    assert_eq!(
        ok(env.exec("narrow", &["/bin/busybox", "echo", "allowed"])),
        "allowed\n"
    );
    let err = fails(env.exec("narrow", &["/tools/other", "echo", "nope"]));
    assert!(err.contains("permission denied"), "{err}");
    let audit = ok(env.pincer(&["policy", "audit", "narrow"]));
    assert!(
        audit.contains("container.exec_refused") && audit.contains("/tools/other"),
        "the refusal is not in the audit: {audit}"
    );
    // Also when a permitted shell tries to start it.
    let out = env.exec(
        "narrow",
        &["/bin/busybox", "sh", "-c", "/tools/other echo nope"],
    );
    assert!(
        !out.status.success() && !stdout(&out).contains("nope"),
        "{}",
        stdout(&out)
    );
}

#[test]
fn memory_and_pids_limits_stop_hogs_and_the_workspace_recovers() {
    let env = Env::new("  tight: {policies: [max_memory_64mb, max_pids_32]}\n");
    let hog = env.pincer(&[
        "workspace",
        "exec",
        "tight",
        "--timeout-ms",
        "30000",
        "--",
        "sh",
        "-c",
        "x=aaaaaaaa; while :; do x=$x$x; done",
    ]);
    assert!(!hog.status.success());
    assert!(
        stderr(&hog).contains("killed at the workspace's memory limit (64 MiB)"),
        "{}",
        stderr(&hog)
    );
    assert_eq!(ok(env.exec("tight", &["echo", "alive"])), "alive\n");

    let bomb = env.pincer(&[
        "workspace",
        "exec",
        "tight",
        "--timeout-ms",
        "3000",
        "--",
        "sh",
        "-c",
        "f() { f | f & }; f; sleep 10",
    ]);
    assert!(!bomb.status.success());
    assert!(
        stderr(&bomb).contains("hit the workspace's pids limit (32)"),
        "{}",
        stderr(&bomb)
    );
    assert_eq!(ok(env.exec("tight", &["echo", "alive"])), "alive\n");
}

#[test]
fn bad_policies_and_mounts_are_refused_before_anything_starts() {
    let env = Env::new(concat!(
        "  typo: {policies: [no_internets]}\n",
        "  badmount:\n    mounts: [{source: /definitely/not/here, target: /x}]\n",
        "  rootmount:\n    mounts: [{source: /, target: /x}]\n",
    ));
    let err = fails(env.pincer(&["workspace", "up", "typo"]));
    assert!(
        err.contains("unknown policy group `no_internets`") && err.contains("no_internet_access"),
        "{err}"
    );
    let err = fails(env.pincer(&["workspace", "up", "badmount"]));
    assert!(
        err.contains("mount source /definitely/not/here does not exist"),
        "{err}"
    );
    let err = fails(env.pincer(&["workspace", "up", "rootmount"]));
    assert!(err.contains("is the root folder"), "{err}");
    let listed = docker(&[
        "ps",
        "-aq",
        "--filter",
        &format!("name={}", env.container("typo")),
    ]);
    assert!(stdout(&listed).trim().is_empty());
}

#[test]
fn a_tampered_container_is_removed_and_refused() {
    let env = Env::new("  guarded: {policies: [max_pids_64]}\n");
    ok(env.pincer(&["workspace", "up", "guarded"]));
    ok(docker(&[
        "update",
        "--pids-limit",
        "4096",
        &env.container("guarded"),
    ]));
    let err = fails(env.exec("guarded", &["echo", "hi"]));
    assert!(
        err.contains("could not be applied") && err.contains("pids limit: wanted 64, found 4096"),
        "{err}"
    );
    let gone = docker(&["inspect", &env.container("guarded")]);
    assert!(
        !gone.status.success(),
        "the tampered container is still there"
    );
    let audit = ok(env.pincer(&["policy", "audit", "guarded"]));
    assert!(audit.contains("container.verify_failed"), "{audit}");
}

#[test]
fn a_killed_container_is_noticed_and_replaced_with_the_folder_intact() {
    let env = Env::new("  durable: {}\n");
    ok(env.exec("durable", &["sh", "-c", "echo kept > /workspace/state.txt"]));
    ok(docker(&["kill", &env.container("durable")]));
    let out = env.exec("durable", &["cat", "/workspace/state.txt"]);
    assert_eq!(stdout(&out), "kept\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("replaced the previous container"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn an_unused_container_stops_by_itself_and_is_replaced_on_next_use() {
    let env = Env::new("  sleepy: {}\n");
    let config = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(
        &env.config,
        config.replace("containers:\n", "containers:\n  idle_timeout_secs: 1\n"),
    )
    .unwrap();
    ok(env.exec("sleepy", &["true"]));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let state = ok(docker(&[
            "inspect",
            "-f",
            "{{.State.Status}}",
            &env.container("sleepy"),
        ]));
        if state.trim() == "exited" {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still {state} after the idle timeout"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
    let out = env.exec("sleepy", &["echo", "back"]);
    assert_eq!(stdout(&out), "back\n", "{}", stderr(&out));
    assert!(
        stderr(&out).contains("had stopped unused"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn orphans_of_this_instance_are_removed_and_other_instances_left_alone() {
    let env = Env::new("  keep: {}\n  drop: {}\n");
    let other = Env::new("  drop: {}\n");
    ok(env.pincer(&["workspace", "up", "keep"]));
    ok(env.pincer(&["workspace", "up", "drop"]));
    ok(other.pincer(&["workspace", "up", "drop"]));
    let config = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(&env.config, config.replace("  drop: {}\n", "")).unwrap();
    let listed = env.pincer(&["workspace", "list"]);
    assert!(
        stderr(&listed).contains(&format!("removed {}", env.container("drop"))),
        "{}",
        stderr(&listed)
    );
    assert!(
        !docker(&["inspect", &env.container("drop")])
            .status
            .success()
    );
    assert!(
        docker(&["inspect", &env.container("keep")])
            .status
            .success()
    );
    assert!(
        docker(&["inspect", &other.container("drop")])
            .status
            .success(),
        "another instance's container was touched"
    );
}

#[test]
fn containers_get_their_own_gateway_token_and_never_a_provider_key() {
    const PROVIDER_KEY: &str = "sk-live-PROVIDERKEY-never-inside-a-container-0123456789";
    let env = Env::with_prefix(
        &format!(
            "gateway:\n  model_list:\n    - model_name: default\n      litellm_params: {{model: openai/gpt-4o-mini, api_key: \"{PROVIDER_KEY}\"}}\n"
        ),
        "  main: {}\n",
    );
    // Commands see a minimal environment; the runner's own holds only the
    // gateway address: its token was granted over the runner socket.
    let inside = ok(env.exec("main", &["env"]));
    assert!(
        !inside.contains(PROVIDER_KEY),
        "the provider key is in the container: {inside}"
    );
    let container_env = ok(docker(&[
        "inspect",
        "-f",
        "{{json .Config.Env}}",
        &env.container("main"),
    ]));
    assert!(!container_env.contains(PROVIDER_KEY), "{container_env}");
    let vars: Vec<String> = serde_json::from_str(&container_env).unwrap();
    assert!(
        !container_env.contains("pk-pincer-") && !container_env.contains("PINCER_GATEWAY_TOKEN"),
        "a gateway token is in the container's environment: {vars:?}"
    );
    assert!(
        vars.contains(&"PINCER_GATEWAY_URL=unix:///run/pincer/gateway/gateway.sock".to_string()),
        "{vars:?}"
    );
    let live_prefix = |env: &Env| -> String {
        let keys = pincer::gateway::KeyStore::open_at(&env.sandbox.state()).unwrap();
        let live: Vec<_> = keys
            .list("main")
            .unwrap()
            .into_iter()
            .filter(|k| k.kind == pincer::gateway::KeyKind::Container && !k.revoked)
            .collect();
        assert_eq!(live.len(), 1, "{live:?}");
        live[0].prefix.clone()
    };
    let first = live_prefix(&env);
    assert_no_token_inside(&env, "main", &first);

    // A replacement container gets a new token; the old one is revoked.
    ok(docker(&["kill", &env.container("main")]));
    ok(env.exec("main", &["true"]));
    let second = live_prefix(&env);
    assert_ne!(first, second, "the replaced container kept the old token");
    assert_no_token_inside(&env, "main", &second);
}

/// Nothing a command in `workspace` can read holds its gateway token: not
/// its environment, not the runner's (`/proc/1/environ`), not the runner's
/// memory (`/proc/1/mem`: the runner is not dumpable). `prefix` is the
/// token's display prefix (`pk-pincer-<ws>-<prefix>...`).
fn assert_no_token_inside(env: &Env, workspace: &str, prefix: &str) {
    let token_start = format!("pk-pincer-{workspace}-{prefix}");
    let out = env.exec(
        workspace,
        &[
            "sh",
            "-c",
            "env; echo ---; cat /proc/1/environ | tr '\\0' '\\n'; echo ---;              head -c 65536 /proc/1/mem | wc -c; echo ---;              for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null | tr '\\0' '\\n'; done",
        ],
    );
    let seen = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        !seen.contains("pk-pincer-"),
        "a command saw a gateway token ({token_start}...):\n{seen}"
    );
    assert!(!seen.contains(&token_start), "{seen}");
    // The runner is not dumpable: its /proc files are closed to its commands.
    assert!(
        seen.matches("Permission denied").count() >= 2,
        "/proc/1/environ or /proc/1/mem was readable:\n{seen}"
    );
}

#[test]
fn workspace_down_and_reconcile_revoke_the_container_token() {
    let env = Env::new(
        "  main: {}
  gone: {}
",
    );
    ok(env.exec("main", &["true"]));
    ok(env.exec("gone", &["true"]));
    // The test cannot read the tokens the host granted (nothing in the
    // container can); it mints container tokens the way the host does and
    // checks what the gateway answers.
    let keys = pincer::gateway::KeyStore::open_at(&env.sandbox.state()).unwrap();
    let main_token = keys.mint_container_token("main").unwrap();
    let gone_token = keys.mint_container_token("gone").unwrap();
    let gateway = GatewayProcess::start(&env);
    assert_eq!(gateway.status_with(&main_token), 200);
    assert_eq!(gateway.status_with(&gone_token), 200);

    ok(env.pincer(&["workspace", "down", "main"]));
    assert_eq!(
        gateway.status_with(&main_token),
        401,
        "the token of a container that is down still works"
    );
    // An orphan removed by reconcile loses its token too.
    let config = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(&env.config, config.replace("  gone: {}\n", "")).unwrap();
    let listed = env.pincer(&["workspace", "list"]);
    assert!(
        stderr(&listed).contains(&format!("removed {}", env.container("gone"))),
        "{}",
        stderr(&listed)
    );
    assert_eq!(
        gateway.status_with(&gone_token),
        401,
        "the token of a removed orphan still works"
    );
}

/// `pincer gateway serve` on a free port, stopped on drop.
struct GatewayProcess {
    child: std::process::Child,
    port: u16,
}

impl GatewayProcess {
    fn start(env: &Env) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let listen = format!("127.0.0.1:{port}");
        let child = crate::support::pincer_command()
            .env("PINCER_HOME", env.sandbox.home())
            .args(["--config", env.config.to_str().unwrap()])
            .args(["gateway", "serve", "--listen", &listen])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let gateway = Self { child, port };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "gateway serve did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        gateway
    }

    /// The HTTP status of `GET /v1/models` with `token`.
    fn status_with(&self, token: &str) -> u16 {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        write!(
            stream,
            "GET /v1/models HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
            .split_whitespace()
            .nth(1)
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("not HTTP: {answer}"))
    }
}

impl Drop for GatewayProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Inside workspace `a`, replace its runner socket by a symlink to `b`'s (as
/// the host sees the tree): the host must not run `a`'s next command in `b`.
#[test]
fn a_workspace_cannot_divert_the_hosts_commands_to_another_workspace() {
    let env = Env::new("  a: {}\n  b: {}\n");
    ok(env.exec("a", &["sh", "-c", "echo I-am-a > /workspace/who"]));
    ok(env.exec("b", &["sh", "-c", "echo I-am-b > /workspace/who"]));
    // Relative to the runner's folder on the host, whichever layout it has.
    ok(env.exec(
        "a",
        &[
            "sh",
            "-c",
            "if [ -d /run/pincer/runner ]; then cd /run/pincer/runner && ln -s ../../b/runner/runner.sock r; \
             else cd /run/pincer && ln -s ../b/runner.sock r; fi && mv -f r runner.sock",
        ],
    ));
    let diverted = env.exec("a", &["cat", "/workspace/who"]);
    assert!(
        !stdout(&diverted).contains("I-am-b"),
        "workspace a's command ran in workspace b's container"
    );
    let err = stderr(&diverted);
    assert!(
        !diverted.status.success() && err.contains("symlink"),
        "the swapped socket was not refused: {err}"
    );
    let audit = ok(env.pincer(&["policy", "audit", "a"]));
    assert!(audit.contains("container.verify_failed"), "{audit}");
    // The next command gets a fresh container of a's own (its runner
    // replaces the planted symlink), and b was never touched.
    assert_eq!(ok(env.exec("a", &["cat", "/workspace/who"])), "I-am-a\n");
    assert_eq!(ok(env.exec("b", &["cat", "/workspace/who"])), "I-am-b\n");
}

/// The gateway socket's folder is the host's and read-only in the
/// container: the container cannot plant a symlink where the host binds,
/// so the host's chmod(0666) after bind cannot be turned onto a host file
/// (the race is also run, bounded, against repeated rebinds).
#[test]
fn the_container_cannot_swap_the_gateway_socket_for_a_host_file() {
    use std::os::unix::fs::PermissionsExt;
    let env = Env::new("  w: {}\n");
    ok(env.exec("w", &["true"]));
    let victim = env.sandbox.dir.path().join("victim.txt");
    std::fs::write(&victim, "host-only").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let folder = "d=/run/pincer/gateway; [ -d $d ] || d=/run/pincer";
    let planted = env.exec(
        "w",
        &[
            "sh",
            "-c",
            &format!("{folder}; ln -s {} $d/planted", victim.display()),
        ],
    );
    assert!(
        !planted.status.success() && stderr(&planted).contains("Read-only file system"),
        "the container created an entry next to the gateway socket: {}",
        stderr(&planted)
    );
    // The race: the container swaps symlinks in while the host rebinds.
    let racer = {
        let config = env.config.clone();
        let home = env.sandbox.home();
        let work = env.sandbox.work();
        let script = format!(
            "{folder}; r() {{ i=0; while [ $i -lt 3000 ]; do ln -sf {v} $d/t$1 2>/dev/null; mv -f $d/t$1 $d/gateway.sock 2>/dev/null; i=$((i+1)); done; }}; r 1 & r 2 & r 3 & wait; echo raced",
            v = victim.display()
        );
        std::thread::spawn(move || {
            crate::support::pincer_command()
                .current_dir(work)
                .env("PINCER_HOME", home)
                .args(["--config", config.to_str().unwrap()])
                .args(["workspace", "exec", "w", "--timeout-ms", "60000", "--"])
                .args(["sh", "-c", &script])
                .output()
                .unwrap()
        })
    };
    // On the old layout this won within ~12 rebinds (3 racing loops).
    for _ in 0..40 {
        let gateway = GatewayProcess::start(&env);
        std::thread::sleep(std::time::Duration::from_millis(200));
        drop(gateway);
        let mode = std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
        assert_eq!(
            mode,
            0o600,
            "the host made {} mode {mode:o}",
            victim.display()
        );
        if racer.is_finished() {
            break;
        }
    }
    let _ = racer.join();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "host-only");
    assert_eq!(
        std::fs::metadata(&victim).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn mounts_that_expose_the_host_are_refused_before_anything_starts() {
    let env = Env::new("  other: {}\n");
    let root = env.sandbox.dir.path();
    let home = env.sandbox.home();
    let base = root.join("ws");
    std::fs::create_dir_all(base.join("other")).unwrap();
    std::fs::create_dir_all(home.join("run")).unwrap();
    let cases: [(&str, String, &str); 7] = [
        ("state", home.display().to_string(), "pincer's state"),
        (
            "statepart",
            home.join("run").display().to_string(),
            "is inside",
        ),
        ("above", root.display().to_string(), "holds"),
        ("kernel", "/proc".into(), "a kernel interface"),
        (
            "engine",
            "/run/docker.sock".into(),
            "the container engine's socket",
        ),
        (
            "viasymlink",
            "/var/run/docker.sock".into(),
            "resolves through a symlink",
        ),
        (
            "neighbour",
            base.join("other").display().to_string(),
            "the folder of every workspace",
        ),
    ];
    let mut yaml = format!(
        "containers:\n  workspace_base_path: {}\nworkspaces:\n  other: {{}}\n",
        base.display()
    );
    for (name, source, _) in &cases {
        yaml.push_str(&format!(
            "  {name}:\n    mounts: [{{source: \"{source}\", target: /x}}]\n"
        ));
    }
    std::fs::write(&env.config, yaml).unwrap();
    for (name, _, says) in &cases {
        let err = fails(env.pincer(&["workspace", "up", name]));
        assert!(err.contains(says), "{name}: {err}");
        let listed = docker(&[
            "ps",
            "-aq",
            "--filter",
            &format!("name={}", env.container(name)),
        ]);
        assert!(stdout(&listed).trim().is_empty(), "{name} got a container");
    }
    // A target over pincer's own folders is a configuration error.
    std::fs::write(
        &env.config,
        format!(
            "containers:\n  workspace_base_path: {}\nworkspaces:\n  cover:\n    mounts: [{{source: {}, target: /run/pincer}}]\n",
            base.display(),
            base.join("other").display()
        ),
    )
    .unwrap();
    let err = fails(env.pincer(&["workspace", "up", "cover"]));
    assert!(
        err.contains("cannot mount over, above or inside `/run/pincer`"),
        "{err}"
    );
}

#[test]
fn io_uring_is_refused_in_a_baseline_workspace() {
    let env = Env::new("  plain: {}\n");
    let status = ok(env.exec("plain", &["/opt/pincer/pincer-agent", "ping"]));
    let status: serde_json::Value = serde_json::from_str(status.trim()).unwrap();
    assert_eq!(
        status["enforcement"]["io_uring_refused"], true,
        "io_uring is allowed in the container: {status}"
    );
}

/// Issue 32: the container's user is a uid no host account has. What the
/// agent writes into its folder belongs on the host to 100000:100000, which
/// `/etc/passwd` does not name; a workspace folder an earlier pincer made
/// for uid 1000 is handed over once when the container starts (audited,
/// the container can write its old files again); `pincer doctor` warns
/// when a workspace's uid is a host account.
#[test]
fn the_container_user_is_nobody_on_the_host_and_old_folders_are_handed_over_once() {
    use std::os::unix::fs::{MetadataExt, chown};
    let env = Env::new("  fresh: {}\n  legacy: {}\n");
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap();
    assert!(
        !passwd
            .lines()
            .any(|l| l.split(':').nth(2) == Some("100000")),
        "this host has an account with uid 100000"
    );
    let id = ok(env.exec(
        "fresh",
        &["sh", "-c", "touch /workspace/mine; id -u; id -g"],
    ));
    assert_eq!(
        id.split_whitespace().collect::<Vec<_>>(),
        ["100000", "100000"]
    );
    let mine = std::fs::metadata(env.workspace_dir("fresh").join("mine")).unwrap();
    assert_eq!((mine.uid(), mine.gid()), (100_000, 100_000));

    // A folder as an earlier pincer left it: uid 1000's, with its files.
    let legacy = env.workspace_dir("legacy");
    std::fs::create_dir_all(legacy.join("notes")).unwrap();
    std::fs::write(legacy.join("notes/todo.md"), "old\n").unwrap();
    std::fs::write(legacy.join("host-owned"), "root's\n").unwrap();
    for path in [
        &legacy,
        &legacy.join("notes"),
        &legacy.join("notes/todo.md"),
    ] {
        chown(path, Some(1000), Some(1000)).unwrap();
    }
    ok(env.exec(
        "legacy",
        &["sh", "-c", "echo new >> /workspace/notes/todo.md"],
    ));
    assert_eq!(
        std::fs::read_to_string(legacy.join("notes/todo.md")).unwrap(),
        "old\nnew\n"
    );
    let todo = std::fs::metadata(legacy.join("notes/todo.md")).unwrap();
    assert_eq!((todo.uid(), todo.gid()), (100_000, 100_000));
    assert_eq!(
        std::fs::metadata(legacy.join("host-owned")).unwrap().uid(),
        0
    );
    let handed = env.sandbox.audited("container.workspace_reowned");
    assert_eq!(handed.len(), 1, "{handed:?}");
    assert!(
        handed[0].contains("3 entries handed from 1000:1000 to 100000:100000"),
        "{handed:?}"
    );
    // Once: a new container finds the folder the new user's already.
    ok(env.pincer(&["workspace", "down", "legacy"]));
    ok(env.exec("legacy", &["true"]));
    assert_eq!(env.sandbox.audited("container.workspace_reowned").len(), 1);

    // doctor: quiet for nobody's uid, a warning for a host account's.
    let doctor = env.pincer(&["doctor"]);
    assert!(
        support::stdout(&doctor)
            .contains("ok       container user 100000:100000: no host account has that uid"),
        "{}",
        support::stdout(&doctor)
    );
    let groups = env.sandbox.dir.path().join("groups");
    std::fs::create_dir_all(&groups).unwrap();
    std::fs::write(
        groups.join("as-nobody.yaml"),
        "description: x\nuser: \"65534:65534\"\n",
    )
    .unwrap();
    let config = env.sandbox.write(
        "pincer-host-user.yaml",
        &format!(
            "containers:\n  policy_dirs: [{}]\nworkspaces:\n  shared: {{policies: [as-nobody]}}\n",
            groups.display()
        ),
    );
    let doctor = env
        .sandbox
        .pincer(&["--config", config.to_str().unwrap(), "doctor"]);
    let said = support::stdout(&doctor);
    assert!(
        said.contains("warning  container user workspace(s) shared run as uid 65534, the host account `nobody`"),
        "{said}"
    );
    assert!(said.contains("userns-remap"), "{said}");
}

/// `user: per-workspace`: each workspace's container runs as a uid of its
/// own (from 100001, allocated once and kept), no host account; a folder
/// the baseline's user wrote is handed to the workspace's own uid once.
#[test]
fn per_workspace_users_give_each_workspace_a_stable_uid_of_its_own() {
    use std::os::unix::fs::MetadataExt;
    let env = Env::new("  a: {}\n  b: {}\n");
    // a runs once as the baseline's user and leaves a file.
    ok(env.exec("a", &["sh", "-c", "echo before > /workspace/old"]));
    ok(env.pincer(&["workspace", "down", "a"]));

    let groups = env.sandbox.dir.path().join("groups");
    std::fs::create_dir_all(&groups).unwrap();
    std::fs::write(
        groups.join("own-uid.yaml"),
        "description: x\nuser: per-workspace\n",
    )
    .unwrap();
    let config = std::fs::read_to_string(&env.config).unwrap();
    std::fs::write(
        &env.config,
        config
            .replace(
                "containers:\n",
                &format!("containers:\n  policy_dirs: [{}]\n", groups.display()),
            )
            .replace(
                "  a: {}\n  b: {}\n",
                "  a: {policies: [own-uid]}\n  b: {policies: [own-uid]}\n",
            ),
    )
    .unwrap();
    let uid = |ws: &str| ok(env.exec(ws, &["sh", "-c", "touch /workspace/mine; id -u"]));
    assert_eq!(uid("a"), "100001\n");
    assert_eq!(uid("b"), "100002\n");
    for (ws, want) in [("a", 100_001), ("b", 100_002)] {
        let mine = std::fs::metadata(env.workspace_dir(ws).join("mine")).unwrap();
        assert_eq!((mine.uid(), mine.gid()), (want, want), "{ws}");
    }
    let old = std::fs::metadata(env.workspace_dir("a").join("old")).unwrap();
    assert_eq!(old.uid(), 100_001, "handed from the baseline's user");
    let handed = env.sandbox.audited("container.workspace_reowned");
    assert!(
        handed
            .iter()
            .any(|h| h.contains("from 100000:100000 to 100001:100001")),
        "{handed:?}"
    );
    // Stable: a new container of a keeps a's uid.
    ok(env.pincer(&["workspace", "down", "a"]));
    assert_eq!(uid("a"), "100001\n");
    let doctor = stdout(&env.pincer(&["doctor"]));
    assert!(doctor.contains("100001:100001"), "{doctor}");
}

/// Issue 32, first step: `pincer workspace pause` freezes the container
/// (the engine says paused, `workspace status` too); its next use thaws it
/// before the host talks to the runner and answers, with the same
/// container (nothing replaced); a container frozen by someone else
/// (`docker pause`) is thawed the same way. Pauses and wakes are audited.
#[test]
fn a_paused_container_is_woken_by_its_next_use_whoever_paused_it() {
    let env = Env::new("  w: {}\n");
    ok(env.exec("w", &["true"]));
    let container = env.container("w");
    let inspect = |format: &str| {
        support::stdout(&support::docker(&["inspect", "-f", format, &container]))
            .trim()
            .to_owned()
    };
    let id = inspect("{{.Id}}");

    ok(env.pincer(&["workspace", "pause", "w"]));
    assert_eq!(inspect("{{.State.Paused}}"), "true");
    let status = ok(env.pincer(&["workspace", "status", "w"]));
    assert!(status.contains("paused"), "{status}");
    assert!(
        !status.contains("runner"),
        "a frozen runner is not asked: {status}"
    );
    let again = env.pincer(&["workspace", "pause", "w"]);
    assert!(!again.status.success());
    assert!(
        stderr(&again).contains("paused already"),
        "{}",
        stderr(&again)
    );

    assert_eq!(ok(env.exec("w", &["echo", "hi"])), "hi\n");
    assert_eq!(inspect("{{.State.Paused}}"), "false");
    let status = ok(env.pincer(&["workspace", "status", "w"]));
    assert!(status.contains("runner idle for 0 s"), "{status}");
    assert_eq!(inspect("{{.Id}}"), id, "woken, not replaced");

    support::docker(&["pause", &container]);
    assert_eq!(ok(env.exec("w", &["echo", "again"])), "again\n");
    assert_eq!(inspect("{{.Id}}"), id);
    let woke = ok(env.pincer(&["workspace", "wake", "w"]));
    assert!(woke.contains("is not paused"), "{woke}");

    assert_eq!(env.sandbox.audited("container.paused").len(), 1);
    assert_eq!(env.sandbox.audited("container.woken").len(), 2);
    assert!(env.sandbox.audited("container.replaced").is_empty());
}
