//! Issue 28: a container's only way out is the egress proxy. Real
//! containers on the real Docker Engine, the real `pincer` binary; every
//! connection goes to a listener on the host's loopback or to a container
//! of the test's own on a network it created, and every refusal is made by
//! the proxy before it connects anywhere.

use crate::support;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use support::{DockerCleanup, Sandbox, fails, listener_on_test_network, ok, stdout, unique};

struct Env {
    _cleanup: DockerCleanup,
    sandbox: Sandbox,
    config: PathBuf,
}

impl Env {
    fn new(label: &str, workspaces: &str) -> Self {
        Self::with(label, "", workspaces)
    }

    /// With `top` (more top-level sections) before the workspaces.
    fn with(label: &str, top: &str, workspaces: &str) -> Self {
        let sandbox = Sandbox::new();
        let base = sandbox.dir.path().join("ws");
        let config = sandbox.write(
            "pincer.yaml",
            &format!(
                "{top}containers:\n  workspace_base_path: {}\nworkspaces:\n{workspaces}",
                base.display()
            ),
        );
        let env = Self {
            _cleanup: DockerCleanup {
                home: sandbox.home(),
                label: label.to_owned(),
            },
            sandbox,
            config,
        };
        ok(env.pincer(&["image", "build"]));
        env
    }

    fn pincer(&self, args: &[&str]) -> std::process::Output {
        let mut all = vec!["--config", self.config.to_str().unwrap()];
        all.extend_from_slice(args);
        self.sandbox.pincer(&all)
    }

    fn sh(&self, workspace: &str, script: &str) -> std::process::Output {
        self.pincer(&["workspace", "exec", workspace, "--", "sh", "-c", script])
    }

    /// What the proxy answers `request` (printf escapes) sent from inside
    /// `workspace`'s container.
    fn ask_proxy(&self, workspace: &str, request: &str) -> String {
        stdout(&self.sh(
            workspace,
            &format!("printf '{request}' | nc -w 5 127.0.0.1 3128; true"),
        ))
    }
}

/// An HTTP origin on the host's loopback that answers every request with
/// `hello from the host`; counts the connections it accepted.
fn loopback_origin() -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { return };
            counter.fetch_add(1, Ordering::SeqCst);
            let mut head = Vec::new();
            let mut byte = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                head.push(byte[0]);
            }
            let body = "hello from the host\n";
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    (port, accepted)
}

/// The names of the container's network interfaces and its routes.
fn interfaces_and_routes(env: &Env, workspace: &str) -> (Vec<String>, usize) {
    let names = ok(env.sh(workspace, "ls /sys/class/net"));
    let routes = ok(env.sh(workspace, "cat /proc/net/route"));
    (
        names.split_whitespace().map(str::to_owned).collect(),
        routes.lines().count() - 1,
    )
}

#[test]
fn a_container_leaves_only_through_the_proxy_to_what_its_workspace_lists() {
    let label = unique();
    let (port, accepted) = loopback_origin();
    // A listener of the test's own on a network it created: a container
    // without a route cannot reach it, and the proxy refuses its private
    // address.
    let (_net, peer) = listener_on_test_network(&label);
    let env = Env::new(
        &label,
        &format!(
            "  open: {{egress: [\"127.0.0.1:{port}\"]}}\n  closed: {{}}\n  \
             public: {{policies: [egress_any_public]}}\n"
        ),
    );

    // Every workspace: loopback only, no route, no resolver reachable.
    for workspace in ["open", "closed", "public"] {
        assert_eq!(
            interfaces_and_routes(&env, workspace),
            (vec!["lo".to_owned()], 0),
            "{workspace}"
        );
    }
    let dns = env.sh("closed", "nslookup example.com 2>&1; true");
    assert!(
        stdout(&dns).contains("unreachable"),
        "a resolver answered: {}",
        stdout(&dns)
    );
    let direct = env.sh("closed", &format!("nc -w 2 {peer} 8080"));
    assert!(!direct.status.success() && !stdout(&direct).contains("hello-from-listener"));

    // The listed origin is reached through the proxy, and audited with
    // its byte counts.
    let fetched = ok(env.sh(
        "open",
        &format!("wget -q -O- http://127.0.0.1:{port}/hello"),
    ));
    assert_eq!(fetched, "hello from the host\n");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    let allowed = env.sandbox.audited("egress.allowed");
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert!(
        allowed[0].starts_with(&format!(
            "GET 127.0.0.1:{port} → 127.0.0.1:{port} by `127.0.0.1:{port}` (from workspaces.open.egress): "
        )) && allowed[0].contains("bytes up") && allowed[0].contains("bytes down"),
        "{}",
        allowed[0]
    );

    // Refusals, each a 403 the client reads, audited, and nothing reached.
    for (workspace, request, why) in [
        (
            "closed",
            format!("GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\n\\r\\n"),
            format!("add `127.0.0.1:{port}` to workspaces.closed.egress"),
        ),
        (
            "open",
            "CONNECT pypi.org:443 HTTP/1.1\\r\\n\\r\\n".to_owned(),
            "add `pypi.org` to workspaces.open.egress".to_owned(),
        ),
        (
            "open",
            format!("CONNECT 127.0.0.1:{} HTTP/1.1\\r\\n\\r\\n", port + 1),
            "is not in the egress allowlist".to_owned(),
        ),
        (
            "public",
            "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\\r\\n\\r\\n".to_owned(),
            "is a link-local address".to_owned(),
        ),
        (
            "public",
            "CONNECT 10.0.0.1:443 HTTP/1.1\\r\\n\\r\\n".to_owned(),
            "is a private address".to_owned(),
        ),
        (
            "public",
            format!("CONNECT {peer}:443 HTTP/1.1\\r\\n\\r\\n"),
            "is a private address".to_owned(),
        ),
        (
            "public",
            "CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\\r\\n\\r\\n".to_owned(),
            "is a loopback address".to_owned(),
        ),
        (
            "public",
            "CONNECT localhost:443 HTTP/1.1\\r\\n\\r\\n".to_owned(),
            "is a loopback address".to_owned(),
        ),
        (
            "public",
            "CONNECT pypi.org:443\\r\\nHost: x HTTP/1.1\\r\\n\\r\\n".to_owned(),
            "not valid HTTP".to_owned(),
        ),
    ] {
        let answer = env.ask_proxy(workspace, &request);
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden") && answer.contains(&why),
            "{workspace} {request:?}: {answer}"
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "no refused request reached it"
    );
    assert_eq!(env.sandbox.audited("egress.refused").len(), 9);
    let log = ok(env.pincer(&["egress", "log", "--workspace", "public", "--denied"]));
    assert!(
        log.contains("REFUSED") && log.contains("169.254.169.254:80"),
        "{log}"
    );

    // The audit prints the allowlist the proxy enforces, with its source.
    let audit = ok(env.pincer(&["policy", "audit", "open"]));
    assert!(
        audit.contains(&format!(
            "egress       127.0.0.1:{port} (from workspaces.open.egress)"
        )),
        "{audit}"
    );
    let test = ok(env.pincer(&[
        "egress",
        "test",
        "open",
        &format!("http://127.0.0.1:{port}/x"),
    ]));
    assert!(test.starts_with("allowed: 127.0.0.1:"), "{test}");
    let test = env.pincer(&["egress", "test", "public", "http://10.0.0.1/"]);
    assert!(!test.status.success());
    assert!(
        stdout(&test).contains("private address"),
        "{}",
        stdout(&test)
    );
}

#[test]
fn a_workspace_that_relied_on_the_bridge_is_told_what_to_write() {
    let label = unique();
    let env = Env::new(&label, "  legacy: {}\n");
    let up = ok(env.pincer(&["workspace", "up", "legacy"]));
    assert!(
        up.contains("note: `legacy` has no network") && up.contains("workspaces.legacy.egress"),
        "{up}"
    );
    let check = ok(env.pincer(&["config", "check"]));
    assert!(check.contains("workspaces.legacy.egress"), "{check}");
    // A group that still says `network: bridge` is refused, naming both
    // ways forward.
    let groups = env.sandbox.dir.path().join("groups");
    std::fs::create_dir_all(&groups).unwrap();
    std::fs::write(
        groups.join("open.yaml"),
        "description: x\nnetwork: bridge\n",
    )
    .unwrap();
    let config = env.sandbox.write(
        "pincer-legacy.yaml",
        &format!(
            "containers:\n  policy_dirs: [{}]\nworkspaces:\n  legacy: {{policies: [open]}}\n",
            groups.display()
        ),
    );
    let refused =
        fails(
            env.sandbox
                .pincer(&["--config", config.to_str().unwrap(), "config", "check"]),
        );
    assert!(
        refused.contains("open.yaml:2:10")
            && refused.contains("workspaces.NAME.egress")
            && refused.contains("network: bridge_unfiltered"),
        "{refused}"
    );
}

/// Tunnels: a workspace that lists `grafana` reaches the loopback service
/// a `tunnel-http` instance serves as `http://grafana.tunnel/…`, through
/// the plugin's `forward`; one that does not is refused 403; neither has
/// a route to the host.
#[test]
fn a_listed_tunnel_reaches_a_host_service_by_name_and_no_other_workspace_does() {
    let label = unique();
    let (port, accepted) = loopback_origin();
    let env = Env::with(
        &label,
        &format!(
            "plugins:\n  config:\n    tunnel-http:\n      - {{service: grafana, target: \"http://127.0.0.1:{port}\"}}\n      \
             - {{service: wiki, target: \"http://127.0.0.1:9\"}}\n"
        ),
        "  dash: {tunnels: [grafana]}\n  other: {tunnels: [wiki]}\n",
    );
    assert_eq!(
        interfaces_and_routes(&env, "dash"),
        (vec!["lo".to_owned()], 0),
        "a tunnel opens no route"
    );
    let fetched = ok(env.sh("dash", "wget -q -O- http://grafana.tunnel/api/health"));
    assert_eq!(fetched, "hello from the host\n");
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
    let allowed = env.sandbox.audited("egress.allowed");
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert!(
        allowed[0].starts_with(
            "GET grafana.tunnel:80/api/health → tunnel-http.forward by tunnel `grafana`: status 200, 0 bytes up, 20 bytes down"
        ),
        "{}",
        allowed[0]
    );

    for (workspace, request, why) in [
        (
            "other",
            "GET http://grafana.tunnel/api/health HTTP/1.1\\r\\n\\r\\n",
            "add `grafana` to workspaces.other.tunnels",
        ),
        (
            "dash",
            "GET http://wiki.tunnel/ HTTP/1.1\\r\\n\\r\\n",
            "add `wiki` to workspaces.dash.tunnels",
        ),
        (
            "dash",
            "CONNECT grafana.tunnel:443 HTTP/1.1\\r\\n\\r\\n",
            "is reached with plain HTTP through the proxy",
        ),
    ] {
        let answer = env.ask_proxy(workspace, request);
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden") && answer.contains(why),
            "{workspace} {request:?}: {answer}"
        );
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "no refused request reached it"
    );
    assert_eq!(env.sandbox.audited("egress.refused").len(), 3);

    let audit = ok(env.pincer(&["policy", "audit", "dash"]));
    assert!(
        audit.contains(
            "tunnels      http://grafana.tunnel/ (served by tunnel-http; from workspaces.dash.tunnels)"
        ),
        "{audit}"
    );
    let test = ok(env.pincer(&["egress", "test", "dash", "http://grafana.tunnel/x"]));
    assert!(
        test.starts_with("allowed: grafana.tunnel:80 by tunnel `grafana`"),
        "{test}"
    );

    // A tunnel nobody serves, and one beside no_internet_access, are
    // refused before anything starts.
    let config = env.sandbox.write(
        "pincer-bad.yaml",
        "workspaces:\n  a: {tunnels: [grafana]}\n  b: {policies: [no_internet_access], tunnels: [grafana]}\n\
         plugins:\n  config:\n    tunnel-http: {service: grafana, target: \"http://127.0.0.1:9\"}\n",
    );
    let refused =
        fails(
            env.sandbox
                .pincer(&["--config", config.to_str().unwrap(), "config", "check"]),
        );
    assert!(
        refused.contains("says `egress: none`, yet workspaces.b.tunnels lists grafana"),
        "{refused}"
    );
    let config = env.sandbox.write(
        "pincer-unserved.yaml",
        "workspaces:\n  a: {tunnels: [grafana]}\n",
    );
    let refused =
        fails(
            env.sandbox
                .pincer(&["--config", config.to_str().unwrap(), "config", "check"]),
        );
    assert!(refused.contains("no tunnel serves `grafana`"), "{refused}");
}

/// `egress_ask`: a connection to an unlisted address waits while the
/// running turn asks (here the terminal, `--approve`); "once" lets that
/// connection through, "deny" answers 403, "always" stores an `egress:`
/// rule that lets later ones through unasked until it is revoked. With no
/// turn running, nobody is asked and the connection is refused.
#[tokio::test(flavor = "multi_thread")]
async fn an_unlisted_host_is_asked_about_in_the_running_turn() {
    use crate::agent::{Env as AgentEnv, of_kind, tool_results};
    use crate::support::fake_llm::Behaviour;

    let (port, accepted) = loopback_origin();
    let fetch = |path: &str| {
        Behaviour::tool(
            "bash",
            &serde_json::json!({
                "command": format!("wget -q -O- http://127.0.0.1:{port}/{path}")
            })
            .to_string(),
        )
    };
    let decisions = ["once", "deny", "always", "deny", "deny"];
    let mut script = Vec::new();
    for (i, _) in decisions.iter().enumerate() {
        script.push(fetch(&i.to_string()));
        script.push(Behaviour::answer("done"));
    }
    let env = AgentEnv::new(
        script,
        "  asked:\n    egress_ask: true\n    approvals: {tier: approval, allow: [\"bash: wget\"]}\n",
    )
    .await;
    let mut seen = Vec::new();
    for (i, how) in decisions.iter().enumerate() {
        if i == 4 {
            ok(env.pincer(&[
                "approvals",
                "revoke",
                "-w",
                "asked",
                &format!("egress: 127.0.0.1:{port}"),
            ]));
        }
        let out = env.pincer(&[
            "message",
            "-w",
            "asked",
            "--json",
            "--approve",
            how,
            "--text",
            "fetch",
        ]);
        let events = crate::agent::events(&out);
        let asked: Vec<String> = of_kind(&events, "approval")
            .iter()
            .map(|e| e["preview"].as_str().unwrap_or_default().to_owned())
            .collect();
        let result = tool_results(&events).first().cloned().unwrap_or_default();
        seen.push((how, asked, result));
    }
    let shown = format!("reach 127.0.0.1:{port} (a loopback address)");
    let asked: Vec<Vec<String>> = seen.iter().map(|(_, a, _)| a.clone()).collect();
    assert_eq!(
        asked,
        [
            vec![shown.clone()],
            vec![shown.clone()],
            vec![shown.clone()],
            vec![],
            vec![shown.clone()]
        ],
        "{seen:#?}"
    );
    for (i, reached) in [true, false, true, true, false].into_iter().enumerate() {
        assert_eq!(
            seen[i].2.contains("hello from the host"),
            reached,
            "{i}: {seen:#?}"
        );
    }
    assert!(seen[1].2.contains("403"), "{seen:#?}");
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
    let allowed = env.sandbox.audited("egress.allowed");
    assert!(
        allowed[0].contains("(from approved in request apr_")
            && allowed[2].contains("(from an \"always\" approval (pincer approvals rules))"),
        "{allowed:#?}"
    );

    // No turn running: nobody to ask, refused with why.
    let out = stdout(&env.pincer(&[
        "workspace",
        "exec",
        "asked",
        "--",
        "sh",
        "-c",
        &format!("printf 'GET http://127.0.0.1:{port}/ HTTP/1.1\\r\\n\\r\\n' | nc -w 5 127.0.0.1 3128; true"),
    ]));
    assert!(
        out.starts_with("HTTP/1.1 403") && out.contains("no turn of workspace `asked` is running"),
        "{out}"
    );
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}
