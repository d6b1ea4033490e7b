//! The proxy over a real unix socket against a loopback origin: what a
//! client inside a container gets for each request, and what is audited.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, UnixStream};

use super::proxy::{Limits, Proxy};
use crate::audit::AuditLog;
use crate::policy::{EgressReach, GroupsEgress, NetworkMode};

struct Fixture {
    _dir: tempfile::TempDir,
    socket: std::path::PathBuf,
    audit: Arc<AuditLog>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn groups(any_public: bool) -> GroupsEgress {
    GroupsEgress {
        any_public: if any_public {
            vec!["egress_any_public".into()]
        } else {
            Vec::new()
        },
        ..GroupsEgress::default()
    }
}

fn start(listed: &[String], any_public: bool, limits: Limits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("egress.sock");
    let audit = Arc::new(AuditLog::open(&dir.path().join("pincer.db")).unwrap());
    let reach = EgressReach::compute("w", &groups(any_public), listed, &[], NetworkMode::None);
    let proxy = Arc::new(Proxy {
        workspace: "w".into(),
        reach,
        audit: audit.clone(),
        limits,
        budget: super::proxy::Budget::default(),
        tunnels: Default::default(),
        asking: Default::default(),
        approvals: None,
        open: Default::default(),
    });
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let task = tokio::spawn(proxy.serve(listener));
    Fixture {
        _dir: dir,
        socket,
        audit,
        task,
    }
}

/// A loopback origin that answers each connection with what it read (up
/// to the blank line, then echoes) and the port it listens on.
async fn echo_origin() -> (u16, tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = stream.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        break;
                    }
                    seen.extend_from_slice(&chunk[..n]);
                    if stream.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    if seen.ends_with(b"\r\n\r\n") && seen.starts_with(b"GET") {
                        break;
                    }
                }
                let _ = tx.send(seen);
            });
        }
    });
    (port, rx)
}

/// Sends `request` and reads until the proxy closes (or `want` bytes).
async fn exchange(fixture: &Fixture, request: &[u8]) -> String {
    let mut client = UnixStream::connect(&fixture.socket).await.unwrap();
    client.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), client.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn audited(fixture: &Fixture, kind: &str) -> Vec<String> {
    fixture
        .audit
        .recent(None, 100)
        .unwrap()
        .into_iter()
        .filter(|e| e.kind == kind)
        .map(|e| e.detail)
        .collect()
}

fn limits() -> Limits {
    Limits {
        head_timeout: Duration::from_secs(2),
        ..Limits::default()
    }
}

#[tokio::test]
async fn a_literally_listed_loopback_origin_is_tunnelled_and_audited_with_its_bytes() {
    let (port, mut seen) = echo_origin().await;
    let fixture = start(&[format!("127.0.0.1:{port}")], false, limits());
    let mut client = UnixStream::connect(&fixture.socket).await.unwrap();
    client
        .write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\nhello").as_bytes())
        .await
        .unwrap();
    let mut answer = vec![0u8; 39 + 5];
    client.read_exact(&mut answer).await.unwrap();
    assert_eq!(
        String::from_utf8_lossy(&answer),
        "HTTP/1.1 200 Connection established\r\n\r\nhello"
    );
    client.write_all(b" world").await.unwrap();
    let mut more = [0u8; 6];
    client.read_exact(&mut more).await.unwrap();
    assert_eq!(&more, b" world");
    drop(client);
    assert_eq!(seen.recv().await.unwrap(), b"hello world");
    for _ in 0..50 {
        if !audited(&fixture, "egress.allowed").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let allowed = audited(&fixture, "egress.allowed");
    assert_eq!(allowed.len(), 1, "{allowed:?}");
    assert!(
        allowed[0].starts_with(&format!(
            "CONNECT 127.0.0.1:{port} → 127.0.0.1:{port} by `127.0.0.1:{port}` (from workspaces.w.egress): 11 bytes up, 11 bytes down"
        )),
        "{}",
        allowed[0]
    );
}

/// The state's database (`state.url` on TCP) is refused like pincer's own
/// listeners, even to a workspace that lists it literally.
#[tokio::test]
async fn the_state_database_is_refused_even_when_listed() {
    let (port, mut seen) = echo_origin().await;
    let fixture = start(&[format!("127.0.0.1:{port}")], false, limits());
    let address: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let _database = crate::listener::protect(address, "state.url");
    let answer = exchange(
        &fixture,
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes(),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("pincer's own listener (state.url)"),
        "{answer}"
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(300), seen.recv())
            .await
            .is_err(),
        "the database was never reached"
    );
}

#[tokio::test]
async fn plain_http_is_forwarded_with_its_head_rewritten() {
    let (port, mut seen) = echo_origin().await;
    let fixture = start(&[format!("127.0.0.1:{port}")], false, limits());
    let answer = exchange(
        &fixture,
        format!(
            "GET http://127.0.0.1:{port}/x?y=1 HTTP/1.1\r\nHost: evil.test\r\n\
             Proxy-Authorization: Basic c2VjcmV0\r\nUser-Agent: t\r\n\r\n"
        )
        .as_bytes(),
    )
    .await;
    let want = format!(
        "GET /x?y=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUser-Agent: t\r\nConnection: close\r\n\r\n"
    );
    assert_eq!(seen.recv().await.unwrap(), want.as_bytes());
    assert_eq!(answer, want, "the echo came back through the proxy");
}

#[tokio::test]
async fn every_refusal_is_a_403_naming_why_and_is_audited() {
    let (port, _seen) = echo_origin().await;
    let listed = [
        format!("localhost:{port}"),
        "pypi.org".to_owned(),
        format!("127.0.0.2:{port}"),
    ];
    let fixture = start(&listed, true, limits());
    let oversized = format!(
        "CONNECT pypi.org:443 HTTP/1.1\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    let cases: Vec<(String, &str)> = vec![
        (
            "CONNECT never-resolved.invalid:8080 HTTP/1.1\r\n\r\n".into(),
            "`never-resolved.invalid:8080` is not in the egress allowlist of workspace `w`: add `never-resolved.invalid:8080` to workspaces.w.egress",
        ),
        (
            "CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n".into(),
            "is a link-local address (169.254.169.254)",
        ),
        (
            "GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\n\r\n".into(),
            "is a link-local address",
        ),
        ("CONNECT 10.0.0.1:443 HTTP/1.1\r\n\r\n".into(), "is a private address (10.0.0.1)"),
        ("CONNECT 172.17.0.1:443 HTTP/1.1\r\n\r\n".into(), "is a private address"),
        ("CONNECT 127.0.0.1:443 HTTP/1.1\r\n\r\n".into(), "is a loopback address"),
        (
            "CONNECT [::ffff:127.0.0.1]:443 HTTP/1.1\r\n\r\n".into(),
            "is a loopback address",
        ),
        ("CONNECT 2130706433:443 HTTP/1.1\r\n\r\n".into(), "is a loopback address"),
        ("CONNECT 0x7f.1:80 HTTP/1.1\r\n\r\n".into(), "is a loopback address"),
        (
            format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n"),
            "add `127.0.0.1",
        ),
        (
            "CONNECT pypi.org:22 HTTP/1.1\r\n\r\n".into(),
            "`pypi.org:22` is not in the egress allowlist",
        ),
        (
            "CONNECT pypi.org:443\r\nHost: x HTTP/1.1\r\n\r\n".into(),
            "not valid HTTP",
        ),
        (oversized, "larger than 16 KiB"),
        (
            "POST http://pypi.org/ HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n".into(),
            "both Transfer-Encoding and Content-Length",
        ),
    ];
    for (request, why) in &cases {
        let answer = exchange(&fixture, request.as_bytes()).await;
        assert!(
            answer.starts_with("HTTP/1.1 403 Forbidden\r\n"),
            "{request:?}: {answer}"
        );
        assert!(answer.contains(why), "{request:?}: {answer}");
    }
    assert_eq!(audited(&fixture, "egress.refused").len(), cases.len());
    assert!(audited(&fixture, "egress.allowed").is_empty());
}

#[tokio::test]
async fn a_workspace_with_no_way_out_says_so_and_a_silent_client_is_cut() {
    let fixture = start(
        &[],
        false,
        Limits {
            head_timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    );
    let answer = exchange(&fixture, b"CONNECT pypi.org:443 HTTP/1.1\r\n\r\n").await;
    assert!(
        answer.contains("add `pypi.org` to workspaces.w.egress"),
        "{answer}"
    );
    let mut silent = UnixStream::connect(&fixture.socket).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), silent.read_to_string(&mut out))
        .await
        .expect("cut after the head timeout")
        .unwrap();
    assert!(out.contains("did not arrive within"), "{out}");
}

#[tokio::test]
async fn connections_past_the_cap_are_answered_503() {
    let fixture = start(
        &["pypi.org".to_owned()],
        false,
        Limits {
            max_connections: 2,
            head_timeout: Duration::from_secs(5),
            ..Limits::default()
        },
    );
    let _held: Vec<UnixStream> = vec![
        UnixStream::connect(&fixture.socket).await.unwrap(),
        UnixStream::connect(&fixture.socket).await.unwrap(),
    ];
    tokio::time::sleep(Duration::from_millis(100)).await;
    let answer = exchange(&fixture, b"").await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    assert!(answer.contains("2 connections"), "{answer}");
}

/// A reload in the same process takes the sockets over: the new
/// allowlist answers, not the one about to be dropped.
#[tokio::test]
async fn a_reload_in_the_same_process_serves_the_new_allowlist() {
    let (port, _seen) = echo_origin().await;
    let home = tempfile::tempdir().unwrap();
    let config = |egress: &str| {
        crate::config::Config::from_str_with_env(
            &format!("workspaces:\n  w: {{egress: [{egress}]}}\n"),
            std::path::Path::new("pincer.yaml"),
            |_| None,
        )
        .unwrap()
    };
    let audit = Arc::new(AuditLog::open(&home.path().join("pincer.db")).unwrap());
    let start = |config: &crate::config::Config| {
        super::EgressProxies::start(
            home.path(),
            &crate::policy::Reaches::compute(config),
            super::Parts {
                limits: limits(),
                ..super::Parts::new(&audit)
            },
        )
    };
    let connect = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n");
    let socket = super::socket_path(home.path(), "w");
    let ask = || async {
        let mut client = UnixStream::connect(&socket).await.unwrap();
        client.write_all(connect.as_bytes()).await.unwrap();
        let mut answer = [0u8; 12];
        client.read_exact(&mut answer).await.unwrap();
        String::from_utf8_lossy(&answer).into_owned()
    };
    let first = start(&config(&format!("\"127.0.0.1:{port}\"")));
    assert_eq!(ask().await, "HTTP/1.1 200");
    let second = start(&config("pypi.org"));
    drop(first);
    assert_eq!(ask().await, "HTTP/1.1 403");
    assert!(second.check("w").is_ok());
}

/// With `bytes_per_minute`, a workspace's connections move at most that
/// much in a minute; the rest waits for the next one. (A minute of 300 ms
/// here: the waits are real.)
#[tokio::test]
async fn bytes_past_the_minutes_cap_wait_for_the_next_minute() {
    let minute = Duration::from_millis(300);
    let budget = super::proxy::Budget::with_window(minute);
    let started = tokio::time::Instant::now();
    budget.take(600, 1000).await;
    budget.take(400, 1000).await;
    assert!(started.elapsed() < minute / 2, "within the cap");
    budget.take(1, 1000).await;
    assert!(
        started.elapsed() >= minute,
        "waited {:?}",
        started.elapsed()
    );
    budget.take(5000, 1000).await;
    assert!(
        started.elapsed() >= minute * 2,
        "a large chunk passes alone, in the next minute: {:?}",
        started.elapsed()
    );
    let before = tokio::time::Instant::now();
    budget.take(usize::MAX, 0).await;
    assert!(before.elapsed() < minute / 2, "no cap, no wait");
}

/// The host's own addresses are refused like private ones: a public
/// interface address would otherwise reach the gateway's port.
#[test]
fn the_hosts_own_addresses_are_known_as_such() {
    use std::net::IpAddr;
    let own: IpAddr = "127.0.0.1".parse().unwrap();
    let documentation: IpAddr = "192.0.2.1".parse().unwrap();
    assert!(super::proxy::is_own_address(own));
    assert!(!super::proxy::is_own_address(documentation));
}

/// A ClientHello as rustls writes it, asking for `server_name`.
fn client_hello(server_name: &str) -> Vec<u8> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from(server_name.to_owned()).unwrap();
    let mut connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let mut hello = Vec::new();
    connection.write_tls(&mut hello).unwrap();
    hello
}

/// A tunnel to a listed name whose TLS ClientHello asks for another name
/// (domain fronting) is closed before a byte reaches the origin, and
/// audited; the same hello for the CONNECT host is relayed.
#[tokio::test]
async fn a_tls_server_name_other_than_the_connect_host_is_cut() {
    let (port, mut seen) = echo_origin().await;
    let listed = [format!("localhost:{port}"), format!("127.0.0.1:{port}")];
    let fixture = start(
        &listed,
        false,
        Limits {
            tls_port: port,
            ..limits()
        },
    );
    let tunnel = |hello: Vec<u8>| {
        let socket = fixture.socket.clone();
        async move {
            let mut client = UnixStream::connect(&socket).await.unwrap();
            client
                .write_all(format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\n").as_bytes())
                .await
                .unwrap();
            let mut answer = [0u8; 39];
            client.read_exact(&mut answer).await.unwrap();
            assert!(answer.starts_with(b"HTTP/1.1 200"));
            client.write_all(&hello).await.unwrap();
            let mut back = vec![0u8; hello.len()];
            let echoed = tokio::time::timeout(Duration::from_secs(5), client.read_exact(&mut back))
                .await
                .is_ok_and(|r| r.is_ok());
            echoed.then_some(back)
        }
    };
    let fronted = client_hello("evil.example");
    assert_eq!(tunnel(fronted).await, None, "closed, nothing echoed");
    let refused = audited(&fixture, "egress.refused");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert!(
        refused[0]
            .contains("the TLS server name `evil.example` is not the CONNECT host `localhost`"),
        "{}",
        refused[0]
    );
    let honest = client_hello("localhost");
    assert_eq!(tunnel(honest.clone()).await, Some(honest.clone()));
    // The origin saw the fronted connection opened and closed empty, then
    // the honest hello.
    assert_eq!(
        seen.recv().await.unwrap(),
        Vec::<u8>::new(),
        "nothing of the fronted hello"
    );
    assert_eq!(seen.recv().await.unwrap(), honest);
}
