//! The egress proxy against a direct loopback connection, in one run.
//!
//!     cargo bench -p pincer --bench egress                  # 2,000 connects, 512 MiB
//!     cargo bench -p pincer --bench egress -- 5000 1024     # connects, MiB
//!
//! 1. **Connection setup.** Time from connect to the first echoed byte: a
//!    TCP connect to a loopback echo origin against a unix connect to the
//!    workspace's egress socket, `CONNECT 127.0.0.1:PORT`, its `200`, then
//!    the same byte through the tunnel. The proxy is the real one
//!    ([`EgressProxies::start`] over the [`Reaches`] of a configuration
//!    whose workspace lists the origin literally), each connection judged,
//!    resolved, connected and audited into a real `pincer.db`. p50, p90 and
//!    the p50 the proxy adds.
//! 2. **Throughput through one tunnel.** One client writes N MiB to a
//!    loopback sink directly and through one tunnel; MiB/s each.
//!
//! Inside a container the runner's relay (TCP → unix socket) sits in front
//! of the proxy; it is not part of these figures.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pincer::audit::AuditLog;
use pincer::config::Config;
use pincer::egress::{EgressProxies, Limits, Parts, socket_path};
use pincer::policy::Reaches;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

const WORKSPACE: &str = "bench";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .map(|a| a.parse())
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("arguments are whole numbers: {e}"))?;
    let connects = args.first().copied().unwrap_or(2_000) as usize;
    let mebibytes = args.get(1).copied().unwrap_or(512);

    let echo = spawn_echo().await?;
    let sink = spawn_sink().await?;
    let home = tempfile::tempdir()?;
    let text = format!(
        "workspaces:\n  {WORKSPACE}:\n    egress: [\"127.0.0.1:{}\", \"127.0.0.1:{}\"]\n",
        echo.port(),
        sink.port()
    );
    let config = Config::from_str_with_env(&text, Path::new("pincer.yaml"), |_| None)?;
    let audit = Arc::new(AuditLog::open(&home.path().join("pincer.db"))?);
    let _proxies = EgressProxies::start(
        home.path(),
        &Reaches::compute(&config),
        Parts {
            limits: Limits {
                max_connections: 1024,
                ..Limits::default()
            },
            ..Parts::new(&audit)
        },
    );
    let socket = socket_path(home.path(), WORKSPACE);

    println!("\n## Connection setup: connect → first byte echoed ({connects} each)\n");
    let mut direct = Vec::with_capacity(connects);
    let mut proxied = Vec::with_capacity(connects);
    for _ in 0..connects {
        direct.push(direct_round_trip(echo).await?);
        proxied.push(proxied_round_trip(&socket, echo).await?);
    }
    let (d50, d90) = quantiles(&mut direct);
    let (p50, p90) = quantiles(&mut proxied);
    println!("| path | p50 | p90 |");
    println!("|---|---:|---:|");
    println!("| direct TCP to loopback | {} | {} |", ms(d50), ms(d90));
    println!("| through the egress proxy | {} | {} |", ms(p50), ms(p90));
    println!(
        "\nadded by the proxy at p50: {}",
        ms(p50.saturating_sub(d50))
    );

    println!("\n## Throughput: {mebibytes} MiB through one connection\n");
    let direct = throughput_direct(sink, mebibytes).await?;
    let tunnel = throughput_tunnel(&socket, sink, mebibytes).await?;
    println!("| path | MiB/s |");
    println!("|---|---:|");
    println!("| direct TCP to loopback | {direct:.0} |");
    println!("| through one egress tunnel | {tunnel:.0} |");
    println!("\ntunnel / direct: {:.2}", tunnel / direct);
    Ok(())
}

/// Echoes every byte back.
async fn spawn_echo() -> anyhow::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    Ok(addr)
}

/// Reads everything and answers one byte when the client closes its side.
async fn spawn_sink() -> anyhow::Result<std::net::SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = vec![0u8; 256 * 1024];
                while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
                let _ = stream.write_all(b"!").await;
            });
        }
    });
    Ok(addr)
}

async fn direct_round_trip(origin: std::net::SocketAddr) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut stream = TcpStream::connect(origin).await?;
    stream.set_nodelay(true)?;
    stream.write_all(b"x").await?;
    let mut byte = [0u8; 1];
    stream.read_exact(&mut byte).await?;
    Ok(started.elapsed())
}

/// Opens a tunnel to `origin` through the proxy on `socket`.
async fn tunnel(socket: &Path, origin: std::net::SocketAddr) -> anyhow::Result<UnixStream> {
    let mut stream = UnixStream::connect(socket).await?;
    stream
        .write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .await?;
    let want = b"HTTP/1.1 200 Connection established\r\n\r\n";
    let mut answer = vec![0u8; want.len()];
    stream.read_exact(&mut answer).await?;
    anyhow::ensure!(
        answer == want,
        "the proxy answered {}",
        String::from_utf8_lossy(&answer)
    );
    Ok(stream)
}

async fn proxied_round_trip(
    socket: &Path,
    origin: std::net::SocketAddr,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut stream = tunnel(socket, origin).await?;
    stream.write_all(b"x").await?;
    let mut byte = [0u8; 1];
    stream.read_exact(&mut byte).await?;
    Ok(started.elapsed())
}

async fn send_all(
    stream: &mut (impl AsyncWriteExt + AsyncReadExt + Unpin),
    mebibytes: u64,
) -> anyhow::Result<f64> {
    let chunk = vec![7u8; 1 << 20];
    let started = Instant::now();
    for _ in 0..mebibytes {
        stream.write_all(&chunk).await?;
    }
    stream.shutdown().await?;
    let mut done = [0u8; 1];
    stream.read_exact(&mut done).await?;
    Ok(mebibytes as f64 / started.elapsed().as_secs_f64())
}

async fn throughput_direct(sink: std::net::SocketAddr, mebibytes: u64) -> anyhow::Result<f64> {
    let mut stream = TcpStream::connect(sink).await?;
    send_all(&mut stream, mebibytes).await
}

async fn throughput_tunnel(
    socket: &Path,
    sink: std::net::SocketAddr,
    mebibytes: u64,
) -> anyhow::Result<f64> {
    let mut stream = tunnel(socket, sink).await?;
    send_all(&mut stream, mebibytes).await
}

fn quantiles(samples: &mut [Duration]) -> (Duration, Duration) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    (at(0.5), at(0.9))
}

fn ms(d: Duration) -> String {
    format!("{:.3} ms", d.as_secs_f64() * 1000.0)
}
