//! The egress relay: a local TCP port spliced to the host's proxy socket,
//! a 502 when nothing serves that socket, and the proxy variables of every
//! command; none of it without `egress` in the policy.

mod common;

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use pincer_runner_protocol::{EgressRelay, RunnerPolicy};

const NO_PROXY: &str = "localhost,127.0.0.1,::1";

/// A port nobody listens on (bound, then released).
fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind port 0");
    listener.local_addr().expect("local addr").port()
}

fn egress_policy(listen: &str, socket: &Path) -> String {
    RunnerPolicy {
        egress: Some(EgressRelay {
            listen: listen.to_string(),
            socket: socket.to_string_lossy().into_owned(),
        }),
        ..RunnerPolicy::default()
    }
    .to_env_value()
}

/// A runner relaying a fresh port to `<its temp dir>/egress.sock` (nothing
/// listens there yet).
struct Relayed {
    runner: Runner,
    listen: String,
    socket: PathBuf,
    /// Keeps the socket's folder alive (the runner's own dir is separate).
    _dir: TempDir,
}

fn start_relayed() -> Relayed {
    let dir = TempDir::new();
    let socket = dir.path().join("egress.sock");
    let listen = format!("127.0.0.1:{}", free_port());
    let runner = Runner::start(Some(&egress_policy(&listen, &socket)));
    Relayed {
        runner,
        listen,
        socket,
        _dir: dir,
    }
}

fn connect(listen: &str) -> TcpStream {
    let stream = TcpStream::connect(listen).expect("connect to the relay");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    stream
}

/// Echoes one connection back until its EOF; returns what it received.
fn echo_once(listener: UnixListener) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let (mut stream, _) = listener.accept().expect("accept");
        let mut seen = Vec::new();
        let mut buf = [0u8; 8192];
        loop {
            let n = stream.read(&mut buf).expect("read");
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
            stream.write_all(&buf[..n]).expect("echo");
        }
        seen
    })
}

#[test]
fn the_relay_carries_bytes_both_ways() {
    let relayed = start_relayed();
    let echo = echo_once(UnixListener::bind(&relayed.socket).expect("bind egress socket"));
    let mut sent = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n".to_vec();
    sent.extend((0..200_000u32).map(|i| (i % 251) as u8));

    let mut client = connect(&relayed.listen);
    let writer = {
        let mut client = client.try_clone().expect("clone");
        let sent = sent.clone();
        // Written from a thread: the echo comes back while we still write.
        std::thread::spawn(move || {
            client.write_all(&sent).expect("write");
            client.shutdown(Shutdown::Write).expect("shutdown");
        })
    };
    let mut received = Vec::new();
    client.read_to_end(&mut received).expect("read the echo");
    writer.join().expect("writer");

    assert_eq!(echo.join().expect("echo thread"), sent);
    assert!(
        received == sent,
        "{} of {} bytes",
        received.len(),
        sent.len()
    );
    let log = relayed.runner.log();
    assert!(log.contains("egress relay: 127.0.0.1:"), "{log}");
}

#[test]
fn without_a_proxy_the_client_gets_a_502() {
    let relayed = start_relayed();
    let mut client = connect(&relayed.listen);
    client
        .write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .expect("write");
    let mut answer = String::new();
    client.read_to_string(&mut answer).expect("read the answer");

    let (head, body) = answer.split_once("\r\n\r\n").expect("head and body");
    assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
    assert!(head.contains("\r\nContent-Type: text/plain\r\n"), "{head}");
    assert!(head.contains("\r\nConnection: close"), "{head}");
    assert!(
        head.contains(&format!("\r\nContent-Length: {}", body.len())),
        "{head}"
    );
    assert_eq!(
        body,
        format!(
            "pincer: no egress proxy answers for this workspace (nothing is serving {}); \
             the container has no other way out\n",
            relayed.socket.display()
        )
    );
    // The runner is still there.
    assert_eq!(relayed.runner.status().pid, relayed.runner.child.id());
}

#[test]
fn commands_get_the_proxy_variables() {
    let relayed = start_relayed();
    let url = format!("http://{}", relayed.listen);
    let result = relayed.runner.run(&[
        "/bin/sh",
        "-c",
        "echo $HTTP_PROXY $HTTPS_PROXY $ALL_PROXY $NO_PROXY; \
         echo $http_proxy $https_proxy $all_proxy $no_proxy",
    ]);
    let line = format!("{url} {url} {url} {NO_PROXY}");
    assert_eq!(result.stdout, format!("{line}\n{line}\n"));

    // A request's own variables win.
    let mut request = relayed
        .runner
        .request(&["/bin/sh", "-c", "echo $HTTPS_PROXY $https_proxy"]);
    request.env = vec![("HTTPS_PROXY".into(), "http://elsewhere:1".into())];
    let result = expect_exec(relayed.runner.exec(request));
    assert_eq!(result.stdout, format!("http://elsewhere:1 {url}\n"));
}

#[test]
fn connections_beyond_the_limit_are_closed() {
    const LIMIT: usize = 256;
    let relayed = start_relayed();
    let listener = UnixListener::bind(&relayed.socket).expect("bind egress socket");
    let upstream: Arc<Mutex<Vec<UnixStream>>> = Arc::default();
    {
        let upstream = Arc::clone(&upstream);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { break };
                upstream.lock().expect("lock").push(stream);
            }
        });
    }
    let accepted = || upstream.lock().expect("lock").len();

    let held: Vec<TcpStream> = (0..LIMIT).map(|_| connect(&relayed.listen)).collect();
    assert!(
        eventually(Duration::from_secs(10), || accepted() == LIMIT),
        "{} of {LIMIT} relayed",
        accepted()
    );
    let mut over = connect(&relayed.listen);
    let mut buf = [0u8; 16];
    assert_eq!(over.read(&mut buf).expect("closed, not timed out"), 0);
    assert_eq!(accepted(), LIMIT);

    // Once both ends of the relayed connections are gone, there is room again.
    drop(held);
    upstream.lock().expect("lock").clear();
    let relayed_again = eventually(Duration::from_secs(10), || {
        let _probe = connect(&relayed.listen);
        std::thread::sleep(Duration::from_millis(100));
        accepted() > 0
    });
    assert!(
        relayed_again,
        "no connection relayed after the others ended"
    );
}

#[test]
fn an_unusable_listen_address_does_not_stop_the_runner() {
    let dir = TempDir::new();
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let listen = taken.local_addr().expect("addr").to_string();
    let runner = Runner::start(Some(&egress_policy(&listen, &dir.path().join("e.sock"))));
    let result = runner.run(&["/usr/bin/env"]);
    assert!(
        !result.stdout.to_lowercase().contains("proxy"),
        "{}",
        result.stdout
    );
    let log = runner.log();
    assert!(log.contains("egress relay: cannot listen on"), "{log}");
}

#[test]
fn without_egress_there_is_no_relay_and_no_proxy_variable() {
    for policy in [None, Some("{}")] {
        let runner = Runner::start(policy);
        let result = runner.run(&["/usr/bin/env"]);
        assert_eq!(result.exit_code, Some(0));
        assert!(
            !result.stdout.to_lowercase().contains("proxy"),
            "{}",
            result.stdout
        );
        assert!(!runner.log().contains("egress"), "{}", runner.log());
        assert!(listening_tcp_sockets(runner.child.id()).is_empty());
    }
    // The check above does see a relay's listener.
    let relayed = start_relayed();
    assert_eq!(listening_tcp_sockets(relayed.runner.child.id()).len(), 1);
}

/// The inodes of listening TCP sockets among `pid`'s descriptors.
fn listening_tcp_sockets(pid: u32) -> Vec<u64> {
    let mut owned = HashSet::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .flatten()
    {
        let target = std::fs::read_link(entry.path()).unwrap_or_default();
        let target = target.to_string_lossy();
        if let Some(inode) = target
            .strip_prefix("socket:[")
            .and_then(|rest| rest.strip_suffix(']'))
            .and_then(|inode| inode.parse::<u64>().ok())
        {
            owned.insert(inode);
        }
    }
    let mut listening = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // Field 3 is the state (0A: LISTEN), field 9 the inode.
            let (Some(&state), Some(inode)) =
                (fields.get(3), fields.get(9).and_then(|i| i.parse().ok()))
            else {
                continue;
            };
            if state == "0A" && owned.contains(&inode) {
                listening.push(inode);
            }
        }
    }
    listening
}
