//! The egress relay. A workspace container has no network but `lo`; its only
//! way out is the host's HTTP proxy on a unix socket in the read-only gateway
//! folder. Programs speak to proxies over TCP, so the runner listens on a
//! local port (named in every command's proxy variables) and splices each
//! connection to that socket.

use std::io;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use pincer_runner_protocol::{EgressRelay, proxy_environment};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UnixStream};

use crate::serve::log;

/// Connections relayed at once; more are accepted and closed at once, so a
/// program cannot make the runner hold descriptors without bound.
pub const MAX_RELAYED: usize = 256;
/// Pause after a failed `accept` (out of descriptors, say) before the next.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// After a 502, how long (and how much of) the client's request is read
/// before closing: closing with unread input resets the connection, and the
/// reset can destroy the answer before the client reads it.
const LINGER: Duration = Duration::from_secs(1);
const LINGER_BYTES: usize = 64 * 1024;

/// The relay's listener, bound but not yet serving.
#[derive(Debug)]
pub struct Relay {
    listener: std::net::TcpListener,
    listen: String,
    socket: PathBuf,
}

impl Relay {
    /// Binds the relay `egress` asks for, if any. A failure is logged and the
    /// runner goes on without a relay: PID 1 must not die for it.
    pub fn bind_or_warn(egress: Option<&EgressRelay>) -> Option<Relay> {
        let egress = egress?;
        match Relay::bind(egress) {
            Ok(relay) => Some(relay),
            Err(e) => {
                log(&format!(
                    "egress relay: cannot listen on {:?}: {e}; going on without it \
                     (commands get no proxy variables and have no way out)",
                    egress.listen
                ));
                None
            }
        }
    }

    fn bind(egress: &EgressRelay) -> io::Result<Relay> {
        let addr: SocketAddr = egress.listen.parse().map_err(|_| {
            io::Error::new(io::ErrorKind::InvalidInput, "not an IP address with a port")
        })?;
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Relay {
            listener,
            listen: egress.listen.clone(),
            socket: PathBuf::from(&egress.socket),
        })
    }

    /// Serves on a thread of its own until the process ends; returns the
    /// proxy variables for commands, or `None` (logged) when it cannot start.
    pub fn start_or_warn(self) -> Option<Vec<(String, String)>> {
        let listen = self.listen.clone();
        match self.start() {
            Ok(()) => Some(proxy_environment(&listen)),
            Err(e) => {
                log(&format!(
                    "egress relay: cannot start on {listen}: {e}; going on without it"
                ));
                None
            }
        }
    }

    fn start(self) -> io::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()?;
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(self.listener)?
        };
        log(&format!(
            "egress relay: {} -> {}",
            self.listen,
            self.socket.display()
        ));
        let socket = Arc::new(self.socket);
        std::thread::Builder::new()
            .name("egress".into())
            .spawn(move || runtime.block_on(accept_loop(listener, socket)))?;
        Ok(())
    }
}

async fn accept_loop(listener: TcpListener, socket: Arc<PathBuf>) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let client = match listener.accept().await {
            Ok((client, _)) => client,
            Err(e) => {
                log(&format!("egress relay: accept: {e}"));
                tokio::time::sleep(ACCEPT_BACKOFF).await;
                continue;
            }
        };
        // Over the limit the client is dropped, which closes it.
        if let Some(slot) = Slot::take(&active) {
            tokio::spawn(relay(client, Arc::clone(&socket), slot));
        }
    }
}

/// One of the [`MAX_RELAYED`] places; freed on drop.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    fn take(active: &Arc<AtomicUsize>) -> Option<Slot> {
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_RELAYED {
            active.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(Arc::clone(active)))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn relay(mut client: TcpStream, socket: Arc<PathBuf>, _slot: Slot) {
    match UnixStream::connect(socket.as_path()).await {
        // Either side may end abruptly; there is nobody to tell.
        Ok(mut upstream) => {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
        }
        Err(_) => refuse(client, &socket).await,
    }
}

/// Answers 502 (nothing serves `socket`) and closes.
async fn refuse(mut client: TcpStream, socket: &Path) {
    if client.write_all(&bad_gateway(socket)).await.is_err() {
        return;
    }
    let _ = client.shutdown().await;
    let drain = async {
        let mut sink = [0u8; 4096];
        let mut read = 0;
        while read < LINGER_BYTES {
            match client.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(n) => read += n,
            }
        }
    };
    let _ = tokio::time::timeout(LINGER, drain).await;
}

fn bad_gateway(socket: &Path) -> Vec<u8> {
    let body = format!(
        "pincer: no egress proxy answers for this workspace (nothing is serving {}); \
         the container has no other way out\n",
        socket.display()
    );
    format!(
        "HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\nConnection: close\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_502_is_well_formed() {
        let text = String::from_utf8(bad_gateway(Path::new("/s.sock"))).unwrap();
        let (head, body) = text.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 502 Bad Gateway\r\n"), "{head}");
        assert!(head.contains("\r\nConnection: close"), "{head}");
        assert!(
            head.contains(&format!("\r\nContent-Length: {}", body.len())),
            "{head}"
        );
        assert!(body.contains("nothing is serving /s.sock"), "{body}");
    }

    #[test]
    fn a_bad_listen_address_is_refused() {
        let egress = EgressRelay {
            listen: "localhost:3128".into(),
            socket: "/s.sock".into(),
        };
        assert!(Relay::bind_or_warn(Some(&egress)).is_none());
        assert!(Relay::bind_or_warn(None).is_none());
    }

    #[test]
    fn slots_are_bounded_and_freed() {
        let active = Arc::new(AtomicUsize::new(0));
        let slots: Vec<Slot> = (0..MAX_RELAYED)
            .map(|_| Slot::take(&active).unwrap())
            .collect();
        assert!(Slot::take(&active).is_none());
        drop(slots);
        assert_eq!(active.load(Ordering::SeqCst), 0);
        assert!(Slot::take(&active).is_some());
    }
}
