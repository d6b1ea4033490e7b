//! One way to serve HTTP for every listener pincer opens — the gateway's TCP
//! listener, each workspace's gateway socket, the channel webhook listener —
//! so that none can be held open or exhausted by its clients:
//!
//! - **header-read timeout**: a connection that has not sent a request's
//!   whole head within `header_read_secs` of connecting (or of the first
//!   byte of its next request) is closed;
//! - **body timeout**: a request body not received within `body_secs` of
//!   its head ends in an error ([`BodyTimedOut`]) and the connection closes;
//! - **idle timeout**: a kept-alive connection with no request for
//!   `idle_secs` is closed — never while a response (such as an SSE stream
//!   of a chat completion) is still being sent;
//! - **connection cap**: at most `max_connections` connections at once;
//!   one more is accepted and closed at once (not left in the backlog: the
//!   client learns at once instead of waiting behind the flood, the kernel
//!   queue keeps draining, and the daemon holds at most one fd beyond the
//!   cap). Each workspace socket is served by its own call, with its own
//!   cap, so one workspace cannot starve another or the daemon.
//!
//! hyper's own `header_read_timeout` is not used: it starts whenever the
//! connection waits for a head, idle keep-alive included, so it would cut
//! every kept-alive connection at the header timeout. The activity of each
//! connection is watched here instead ([`Activity`]); HTTP parsing stays
//! hyper's.

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, watch};
use tokio::time::{Instant, Sleep};

use crate::config::ListenerLimits;

/// The timeouts and cap of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub header_read: Duration,
    pub body: Duration,
    pub idle: Duration,
    pub max_connections: usize,
}

impl From<ListenerLimits> for Limits {
    fn from(l: ListenerLimits) -> Self {
        Limits {
            header_read: Duration::from_secs(l.header_read_secs),
            body: Duration::from_secs(l.body_secs),
            idle: Duration::from_secs(l.idle_secs),
            max_connections: usize::try_from(l.max_connections).unwrap_or(usize::MAX),
        }
    }
}

/// A request body that did not arrive within the listener's body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body was not received within {0:?}")]
pub struct BodyTimedOut(pub Duration);

impl BodyTimedOut {
    /// Whether `error` (or what caused it) is a [`BodyTimedOut`].
    pub fn caused(error: &(dyn std::error::Error + 'static)) -> bool {
        let mut cause = Some(error);
        while let Some(e) = cause {
            if e.is::<BodyTimedOut>() {
                return true;
            }
            cause = e.source();
        }
        false
    }
}

/// A listener [`serve`] accepts connections from.
pub trait Accept: Send + 'static {
    type Io: AsyncRead + AsyncWrite + Unpin + Send + 'static;
    fn accept(&mut self) -> impl Future<Output = std::io::Result<Self::Io>> + Send;
    /// The TCP address it is bound to, if it is a TCP listener.
    fn tcp_address(&self) -> Option<SocketAddr> {
        None
    }
}

/// The TCP addresses this process's listeners are bound to, each with its
/// name (`web.listen`, …), while they serve: the egress proxy refuses them
/// whatever a workspace lists.
pub fn bound_tcp() -> Vec<(SocketAddr, String)> {
    bound_registry()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
}

fn bound_registry() -> &'static Mutex<Vec<(SocketAddr, String)>> {
    static BOUND: std::sync::OnceLock<Mutex<Vec<(SocketAddr, String)>>> =
        std::sync::OnceLock::new();
    BOUND.get_or_init(Default::default)
}

/// Counts `address` among [`bound_tcp`] as `name` while the returned guard
/// lives: a service pincer depends on that is not one of its listeners
/// (the state database), which the egress proxy must refuse too.
pub fn protect(address: SocketAddr, name: &str) -> Protected {
    Protected {
        _registered: Registered::new(address, name),
    }
}

/// What [`protect`] returns.
pub struct Protected {
    _registered: Registered,
}

/// One entry of [`bound_tcp`], removed when the listener stops.
struct Registered(SocketAddr);

impl Registered {
    fn new(address: SocketAddr, name: &str) -> Self {
        let mut bound = bound_registry().lock().unwrap_or_else(|e| e.into_inner());
        bound.push((address, name.to_owned()));
        Registered(address)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut bound = bound_registry().lock().unwrap_or_else(|e| e.into_inner());
        if let Some(at) = bound.iter().position(|(a, _)| *a == self.0) {
            bound.remove(at);
        }
    }
}

impl Accept for tokio::net::TcpListener {
    type Io = tokio::net::TcpStream;
    fn tcp_address(&self) -> Option<SocketAddr> {
        self.local_addr().ok()
    }
    async fn accept(&mut self) -> std::io::Result<Self::Io> {
        let (stream, _) = tokio::net::TcpListener::accept(self).await?;
        let _ = stream.set_nodelay(true);
        Ok(stream)
    }
}

impl Accept for tokio::net::UnixListener {
    type Io = tokio::net::UnixStream;
    async fn accept(&mut self) -> std::io::Result<Self::Io> {
        tokio::net::UnixListener::accept(self)
            .await
            .map(|(stream, _)| stream)
    }
}

/// How often a listener at its cap says so in the log.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);

/// Serves `router` on `listener` within `limits` until `shutdown`
/// resolves; then stops accepting, lets each connection finish its
/// current response and returns when every connection has closed. `name`
/// (e.g. `gateway.listen`) is the listener in log lines.
pub async fn serve<L: Accept>(
    mut listener: L,
    router: Router,
    limits: Limits,
    name: String,
    shutdown: impl Future<Output = ()> + Send,
) {
    let _registered = listener
        .tcp_address()
        .map(|address| Registered::new(address, &name));
    let cap = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let permits = Arc::new(Semaphore::new(cap));
    let (closing_tx, closing) = watch::channel(false);
    let service = TowerToHyperService::new(router);
    let mut refused: u64 = 0;
    let mut refusal_logged: Option<Instant> = None;
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => accepted,
        };
        let io = match accepted {
            Ok(io) => io,
            Err(e) => {
                // EMFILE/ENFILE (the process is out of descriptors) or a
                // connection that died in the queue: wait a little, go on.
                tracing::warn!(listener = name.as_str(), "accept failed: {e}");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(Duration::from_millis(50)) => continue,
                }
            }
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(io);
            refused += 1;
            if refusal_logged.is_none_or(|at| at.elapsed() >= REFUSAL_LOG_EVERY) {
                tracing::warn!(
                    listener = name.as_str(),
                    "{refused} connection(s) closed at once: {cap} connections are open, the most \
                     this listener serves at a time"
                );
                refusal_logged = Some(Instant::now());
                refused = 0;
            }
            continue;
        };
        tokio::spawn(connection(
            io,
            service.clone(),
            limits,
            permit,
            closing.clone(),
        ));
    }
    drop(listener);
    let _ = closing_tx.send(true);
    // Every connection holds a permit until it ends.
    let all = u32::try_from(cap).unwrap_or(u32::MAX);
    let _ = permits.acquire_many(all).await;
}

/// What one connection is doing, for its deadlines.
struct Activity {
    state: Mutex<State>,
    /// Woken when a deadline may have moved earlier or ended.
    changed: Notify,
}

struct State {
    /// Requests whose response has not been sent in full yet.
    busy: usize,
    /// When the head being waited for began: the connection's start for the
    /// first request, the first byte read while idle for the next ones.
    head_since: Option<Instant>,
    /// When the last response ended (the connection's start before one).
    idle_since: Instant,
}

impl Activity {
    fn new() -> Arc<Self> {
        let now = Instant::now();
        Arc::new(Activity {
            state: Mutex::new(State {
                busy: 0,
                head_since: Some(now),
                idle_since: now,
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// When this connection is to be closed, if nothing happens before;
    /// `None` while a request is being answered.
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        let state = self.lock();
        if state.busy > 0 {
            return None;
        }
        Some(match state.head_since {
            Some(since) => since + limits.header_read,
            None => state.idle_since + limits.idle,
        })
    }

    /// Bytes arrived.
    fn read(&self) {
        let mut state = self.lock();
        if state.busy == 0 && state.head_since.is_none() {
            state.head_since = Some(Instant::now());
            drop(state);
            self.changed.notify_one();
        }
    }
}

/// A request being answered: from its head until its response has been
/// sent in full (or dropped).
struct Busy(Arc<Activity>);

impl Busy {
    fn start(activity: &Arc<Activity>) -> Self {
        let mut state = activity.lock();
        state.busy += 1;
        state.head_since = None;
        drop(state);
        Busy(activity.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let mut state = self.0.lock();
        state.busy = state.busy.saturating_sub(1);
        if state.busy == 0 {
            state.idle_since = Instant::now();
            state.head_since = None;
        }
        drop(state);
        self.0.changed.notify_one();
    }
}

async fn connection<Io: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    io: Io,
    service: TowerToHyperService<Router>,
    limits: Limits,
    _permit: OwnedSemaphorePermit,
    mut closing: watch::Receiver<bool>,
) {
    let activity = Activity::new();
    let io = TokioIo::new(Watched {
        inner: io,
        activity: activity.clone(),
    });
    let requests = {
        let activity = activity.clone();
        hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let busy = Busy::start(&activity);
            let deadline = Instant::now() + limits.body;
            let request = request.map(|body| {
                Body::new(Deadlined {
                    inner: body,
                    deadline,
                    limit: limits.body,
                    sleep: None,
                })
            });
            let answer = hyper::service::Service::call(&service, request);
            async move {
                let response = answer.await?;
                Ok::<_, Infallible>(response.map(|body| Held {
                    inner: body,
                    _busy: busy,
                }))
            }
        })
    };
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(true).header_read_timeout(None::<Duration>);
    let served = http.serve_connection(io, requests);
    tokio::pin!(served);
    let mut shutting_down = false;
    loop {
        let deadline = activity.deadline(&limits);
        tokio::select! {
            _ = served.as_mut() => break,
            () = sleep_until(deadline) => {
                if activity.deadline(&limits).is_some_and(|d| d <= Instant::now()) {
                    // Nothing is being answered: closing loses nothing.
                    break;
                }
            }
            () = activity.changed.notified() => {}
            _ = closing.changed(), if !shutting_down => {
                shutting_down = true;
                served.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A connection's stream, noting when bytes arrive.
struct Watched<Io> {
    inner: Io,
    activity: Arc<Activity>,
}

impl<Io: AsyncRead + Unpin> AsyncRead for Watched<Io> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.read();
        }
        polled
    }
}

impl<Io: AsyncWrite + Unpin> AsyncWrite for Watched<Io> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

/// A request body that fails with [`BodyTimedOut`] once `deadline` passes.
struct Deadlined {
    inner: Incoming,
    deadline: Instant,
    limit: Duration,
    /// Made on the first wait: most bodies are complete before that.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl http_body::Body for Deadlined {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|f| f.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        match sleep.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimedOut(this.limit))))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request [`Busy`] until it is sent in
/// full or dropped: a stream is never cut by the idle timeout.
struct Held {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Raises this process's soft open-file limit (RLIMIT_NOFILE) to its hard
/// limit, for a daemon that serves many connections; returns the limit now
/// in force.
///
/// # Errors
/// The limit cannot be read or set.
pub fn raise_nofile_limit() -> std::io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the valid struct passed.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads one valid rlimit.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        limit = raised;
    }
    Ok(limit.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    fn limits(header_ms: u64, body_ms: u64, idle_ms: u64, max: usize) -> Limits {
        Limits {
            header_read: Duration::from_millis(header_ms),
            body: Duration::from_millis(body_ms),
            idle: Duration::from_millis(idle_ms),
            max_connections: max,
        }
    }

    /// Serves a router with `/fast`, `/stream` (five chunks 150 ms apart)
    /// and `/echo` (reads the body) on a loopback port.
    async fn start(limits: Limits) -> std::net::SocketAddr {
        use axum::routing::{get, post};
        let router = Router::new()
            .route("/fast", get(|| async { "fast" }))
            .route(
                "/stream",
                get(|| async {
                    let chunks = futures_util::stream::unfold(0, |n| async move {
                        if n == 5 {
                            return None;
                        }
                        tokio::time::sleep(Duration::from_millis(150)).await;
                        Some((
                            Ok::<_, Infallible>(Bytes::from(format!("chunk{n};"))),
                            n + 1,
                        ))
                    });
                    Body::from_stream(chunks)
                }),
            )
            .route(
                "/echo",
                post(|body: Body| async move {
                    match axum::body::to_bytes(body, 1 << 20).await {
                        Ok(bytes) => (axum::http::StatusCode::OK, bytes.to_vec()),
                        Err(e) if BodyTimedOut::caused(&e) => {
                            (axum::http::StatusCode::REQUEST_TIMEOUT, b"late".to_vec())
                        }
                        Err(_) => (axum::http::StatusCode::BAD_REQUEST, Vec::new()),
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            router,
            limits,
            "test".into(),
            std::future::pending(),
        ));
        addr
    }

    /// Reads one response (`Content-Length` or chunked until `0\r\n\r\n`).
    async fn response(stream: &mut TcpStream) -> String {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .expect("a response within 5 s")
                .unwrap();
            assert!(
                n > 0,
                "closed mid-response: {}",
                String::from_utf8_lossy(&seen)
            );
            seen.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&seen).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .and_then(|n| n.trim().parse::<usize>().ok());
                match length {
                    Some(length) if body.len() >= length => return text,
                    None if body.ends_with("0\r\n\r\n") => return text,
                    _ => {}
                }
            }
        }
    }

    /// Time until the server closes `stream`.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
        let started = Instant::now();
        let mut buf = [0u8; 256];
        loop {
            match tokio::time::timeout(within, stream.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
                Ok(Ok(_)) => {}
            }
        }
    }

    #[tokio::test]
    async fn a_head_cut_short_is_closed_at_the_header_timeout() {
        let addr = start(limits(300, 5000, 5000, 16)).await;
        let started = Instant::now();
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let mut partial = TcpStream::connect(addr).await.unwrap();
        partial
            .write_all(b"GET /fast HTTP/1.1\r\nHo")
            .await
            .unwrap();
        let (a, b) = tokio::join!(
            closed_within(&mut silent, Duration::from_secs(3)),
            closed_within(&mut partial, Duration::from_secs(3)),
        );
        for after in [a, b] {
            assert!(after.is_some(), "not closed by the header timeout");
            assert!(started.elapsed() >= Duration::from_millis(280));
        }
    }

    #[tokio::test]
    async fn kept_alive_connections_live_until_the_idle_timeout_not_the_header_one() {
        let addr = start(limits(200, 5000, 900, 16)).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let fast = b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n";
        stream.write_all(fast).await.unwrap();
        assert!(response(&mut stream).await.ends_with("fast"));
        // Idle for longer than the header timeout: still served.
        tokio::time::sleep(Duration::from_millis(500)).await;
        stream.write_all(fast).await.unwrap();
        assert!(response(&mut stream).await.ends_with("fast"));
        // Then closed by the idle timeout.
        let after = closed_within(&mut stream, Duration::from_secs(3)).await;
        let after = after.expect("closed by the idle timeout");
        assert!(after >= Duration::from_millis(800), "{after:?}");
        // A next head begun after idling gets the header timeout.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(fast).await.unwrap();
        response(&mut stream).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        stream.write_all(b"GET /fa").await.unwrap();
        let after = closed_within(&mut stream, Duration::from_secs(3)).await;
        let after = after.expect("closed by the header timeout");
        assert!(after < Duration::from_millis(700), "{after:?}");
    }

    #[tokio::test]
    async fn a_stream_longer_than_the_idle_timeout_is_not_cut() {
        // 750 ms of stream, idle and header timeouts of 200 ms.
        let addr = start(limits(200, 200, 200, 16)).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let text = response(&mut stream).await;
        for n in 0..5 {
            assert!(text.contains(&format!("chunk{n};")), "{text}");
        }
    }

    #[tokio::test]
    async fn a_body_sent_too_slowly_times_out() {
        let addr = start(limits(5000, 300, 5000, 16)).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc")
            .await
            .unwrap();
        let started = Instant::now();
        let text = response(&mut stream).await;
        assert!(text.starts_with("HTTP/1.1 408"), "{text}");
        assert!(started.elapsed() >= Duration::from_millis(250));
        // A body in time is read.
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
            .await
            .unwrap();
        assert!(response(&mut stream).await.ends_with("\r\n\r\nabc"));
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_are_closed_at_once_and_served_again_later() {
        let addr = start(limits(5000, 5000, 5000, 2)).await;
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(b"GET /fast HTTP/1.1\r\nHost: x\r\n\r\n")
                .await
                .unwrap();
            response(&mut stream).await;
            held.push(stream);
        }
        let mut extra = TcpStream::connect(addr).await.unwrap();
        let after = closed_within(&mut extra, Duration::from_secs(2)).await;
        assert!(after.expect("closed at once") < Duration::from_millis(500));
        drop(held);
        // The slots come back.
        let mut served = None;
        for _ in 0..50 {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            let _ = stream
                .write_all(b"GET /fast HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .await;
            let mut text = String::new();
            let _ = stream.read_to_string(&mut text).await;
            if text.ends_with("fast") {
                served = Some(text);
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(served.is_some(), "never served after the held ones closed");
    }
}
