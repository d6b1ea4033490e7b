//! One workspace's proxy: each connection on its socket is one request
//! (a tunnel or a plain-HTTP exchange), judged by the workspace's
//! [`EgressReach`], resolved on the host, connected to the address that was
//! checked (no second lookup), relayed, and audited with its byte counts.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::sync::Semaphore;

use super::head::{self, Head, MAX_HEAD_BYTES};
use crate::audit::{Action, Actor, AuditLog};
use crate::hosts::address_class;
use crate::policy::{EgressEntry, EgressReach, EgressRule};

/// Bounds of one workspace's proxy.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Time to send the request head.
    pub head_timeout: Duration,
    /// Time to resolve a name.
    pub resolve_timeout: Duration,
    /// Time to connect to the origin.
    pub connect_timeout: Duration,
    /// A connection with no byte either way for this long is closed.
    pub idle_timeout: Duration,
    /// Bytes the workspace's connections may move in a minute, both ways
    /// together; 0: no cap.
    pub bytes_per_minute: u64,
    /// The port whose tunnels to a name have their TLS server name checked
    /// against that name (443; a test's own origin in tests).
    pub tls_port: u16,
}

impl From<crate::config::EgressLimits> for Limits {
    fn from(configured: crate::config::EgressLimits) -> Self {
        Limits {
            max_connections: usize::try_from(configured.max_connections).unwrap_or(usize::MAX),
            idle_timeout: Duration::from_secs(configured.idle_timeout_secs),
            bytes_per_minute: configured.bytes_per_minute,
            ..Limits::default()
        }
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            head_timeout: Duration::from_secs(10),
            resolve_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(300),
            bytes_per_minute: 0,
            tls_port: 443,
        }
    }
}

/// What one workspace's proxy works with.
pub(super) struct Proxy {
    pub workspace: String,
    pub reach: EgressReach,
    pub audit: Arc<AuditLog>,
    pub limits: Limits,
    /// What the workspace's connections moved this minute.
    pub budget: Budget,
    /// The tunnel plugins `SERVICE.tunnel` requests are handed to.
    pub tunnels: Arc<super::Tunnels>,
    /// The running turns that ask about an unlisted host (`egress_ask`).
    pub asking: super::Asking,
    /// Where "always" decisions on egress are stored.
    pub approvals: Option<Arc<crate::approvals::Approvals>>,
    /// Connections being handled, across the process's proxies.
    pub open: Arc<std::sync::atomic::AtomicUsize>,
}

/// One connection counted in [`Proxy::open`] until dropped.
struct Open(Arc<std::sync::atomic::AtomicUsize>);

impl Open {
    fn new(open: &Arc<std::sync::atomic::AtomicUsize>) -> Self {
        open.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Open(open.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Longest a connection waits on a person; the turn's own approval
/// timeout ends the wait first.
const ASK_WAIT: Duration = Duration::from_secs(3600);

/// The largest request body handed to a tunnel plugin.
const MAX_TUNNEL_BODY: u64 = 8 << 20;

impl Proxy {
    /// Serves `listener` until the task is dropped.
    pub(super) async fn serve(self: Arc<Self>, listener: UnixListener) {
        let slots = Arc::new(Semaphore::new(self.limits.max_connections));
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!(workspace = %self.workspace, "egress proxy: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let me = self.clone();
            match slots.clone().try_acquire_owned() {
                Ok(slot) => {
                    let open = Open::new(&self.open);
                    tokio::spawn(async move {
                        me.handle(stream).await;
                        drop((slot, open));
                    });
                }
                Err(_) => {
                    crate::events::egress_refused(&self.workspace);
                    tokio::spawn(async move {
                        let why = format!(
                            "workspace `{}` has {} connections through the egress proxy already, as many as it may",
                            me.workspace, me.limits.max_connections
                        );
                        answer(stream, 503, &why).await;
                    });
                }
            }
        }
    }

    async fn handle(&self, mut client: UnixStream) {
        let started = Instant::now();
        let mut buffer = Vec::with_capacity(1024);
        let read = tokio::time::timeout(
            self.limits.head_timeout,
            read_head(&mut client, &mut buffer),
        )
        .await;
        let end = match read {
            Ok(Ok(end)) => end,
            Ok(Err(why)) => return self.refuse(client, "(unreadable request)", &why).await,
            Err(_) => {
                let why = format!(
                    "the request head did not arrive within {} s",
                    self.limits.head_timeout.as_secs()
                );
                return self.refuse(client, "(no request)", &why).await;
            }
        };
        let head = match head::parse(&buffer[..end]) {
            Ok(head) => head,
            Err(why) => return self.refuse(client, "(malformed request)", &why.0).await,
        };
        let target = head.target();
        let approved;
        let rule = match self.reach.rule(&head.host, head.port) {
            Some(rule) => rule,
            None if self.reach.may_ask(&head.host) => match self.ask(&head).await {
                Ok(entry) => {
                    approved = entry;
                    EgressRule::Listed(&approved)
                }
                Err(why) => return self.refuse(client, &target, &why).await,
            },
            None => {
                let why = self
                    .reach
                    .why_refused(&self.workspace, &head.host, head.port);
                return self.refuse(client, &target, &why).await;
            }
        };
        if let EgressRule::Tunnel(service) = rule {
            let early = buffer[end..].to_vec();
            return self
                .tunnel(client, &head, early, service, rule, started)
                .await;
        }
        let addresses = match self.resolve(&head, rule).await {
            Ok(addresses) => addresses,
            Err(why) => return self.refuse(client, &target, &why).await,
        };
        let (mut origin, address) = match self.connect(&addresses).await {
            Ok(connected) => connected,
            Err(why) => {
                self.record_refused(&target, &why);
                return answer(client, 502, &why).await;
            }
        };
        let first = match &head.forward {
            None => {
                if client
                    .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
                    .await
                    .is_err()
                {
                    return;
                }
                let mut first = buffer[end..].to_vec();
                if head.port == self.limits.tls_port && head.host.parse::<IpAddr>().is_err() {
                    let hello =
                        read_client_hello(&mut client, &mut first, self.limits.head_timeout);
                    if let Some(name) = hello.await
                        && crate::hosts::normalized_host(&name).ok().as_deref() != Some(&head.host)
                    {
                        // Past the 200 a refusal can only be a closed
                        // connection; the audit says why.
                        let why = format!(
                            "the TLS server name `{name}` is not the CONNECT host `{}` (domain fronting)",
                            head.host
                        );
                        return self.record_refused(&target, &why);
                    }
                }
                first
            }
            Some(forward) => {
                let mut first = forward.clone();
                first.extend_from_slice(&buffer[end..]);
                first
            }
        };
        let counts = Counts::new();
        let outcome = self.relay(&mut client, &mut origin, &first, &counts).await;
        let (up, down) = (counts.up(), counts.down());
        self.record_allowed(
            up,
            down,
            &format!(
                "{} {target} → {address} by {rule}: {up} bytes up, {down} bytes down, {:.1} s{}",
                head.method,
                started.elapsed().as_secs_f64(),
                match outcome {
                    Relayed::Closed => String::new(),
                    Relayed::Idle => format!(
                        " (closed after {} s without traffic)",
                        self.limits.idle_timeout.as_secs()
                    ),
                }
            ),
        );
    }

    /// For a host no rule allows: a stored "always" rule, else a person's
    /// decision in the running turn (`egress_ask`). The entry that allows
    /// it, or why not (naming the key that would).
    async fn ask(&self, head: &Head) -> Result<EgressEntry, String> {
        let listed = self
            .reach
            .why_refused(&self.workspace, &head.host, head.port);
        let arguments = serde_json::json!({"host": head.host, "port": head.port});
        let call = crate::approvals::Call {
            tool: crate::approvals::EGRESS_TOOL,
            source: None,
            arguments: &arguments,
        };
        if let Some(approvals) = &self.approvals {
            let stored = approvals.store().rules(&self.workspace).unwrap_or_else(|e| {
                tracing::warn!(workspace = %self.workspace, "the approval rules cannot be read: {e}");
                Vec::new()
            });
            if let Some(crate::approvals::Rule::Egress(pattern)) =
                stored.iter().find(|r| r.covers(&call))
            {
                return Ok(EgressEntry {
                    host: pattern.clone(),
                    from: vec!["an \"always\" approval (pincer approvals rules)".to_owned()],
                });
            }
        }
        match self
            .asking
            .ask(&self.workspace, &head.host, head.port, ASK_WAIT)
            .await
        {
            Ok(how) => {
                // A person approved exactly this target, as shown.
                let written = match head.host.parse::<IpAddr>() {
                    Ok(IpAddr::V6(v6)) => format!("[{v6}]:{}", head.port),
                    _ => head.target(),
                };
                Ok(EgressEntry {
                    host: written,
                    from: vec![how],
                })
            }
            Err(why) => Err(format!("{why}; {listed}")),
        }
    }

    /// The addresses of `head`'s host the rules allow: non-public ones only
    /// when an entry names them literally.
    async fn resolve(&self, head: &Head, rule: EgressRule<'_>) -> Result<Vec<SocketAddr>, String> {
        let bare = head.host.trim_start_matches('[').trim_end_matches(']');
        let found: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, head.port)],
            Err(_) => {
                let lookup = tokio::net::lookup_host((bare, head.port));
                match tokio::time::timeout(self.limits.resolve_timeout, lookup).await {
                    Ok(Ok(found)) => found.collect(),
                    Ok(Err(e)) => return Err(format!("`{}` cannot be resolved: {e}", head.host)),
                    Err(_) => {
                        return Err(format!(
                            "resolving `{}` took longer than {} s",
                            head.host,
                            self.limits.resolve_timeout.as_secs()
                        ));
                    }
                }
            }
        };
        if let Some((address, listener)) = found.iter().find_map(|a| own_listener(*a)) {
            return Err(format!(
                "`{}` is pincer's own listener ({listener}) at {address}; no workspace reaches it, whatever it lists",
                head.target()
            ));
        }
        let (kept, refused): (Vec<SocketAddr>, Vec<SocketAddr>) =
            found.into_iter().partition(|a| {
                refused_class(a.ip()).is_none()
                    || self.reach.names_address(a.ip(), a.port())
                    || names_literally(rule, *a)
            });
        if !kept.is_empty() {
            return Ok(kept);
        }
        let Some(first) = refused.first() else {
            return Err(format!("`{}` resolves to no address", head.host));
        };
        let class = refused_class(first.ip()).unwrap_or("non-public");
        let literal = match first.ip() {
            IpAddr::V6(v6) => format!("[{v6}]:{}", head.port),
            v4 => format!("{v4}:{}", head.port),
        };
        let ws = &self.workspace;
        let via = match rule {
            EgressRule::Listed(entry) => format!("allowed by `{}`", entry.host),
            EgressRule::AnyPublic => "allowed as a public host".to_owned(),
            EgressRule::Tunnel(service) => format!("tunnel `{service}`"),
        };
        Err(format!(
            "`{}` ({via}) is a {class} address ({}); a non-public address is reached only when listed literally: add `{literal}` to workspaces.{ws}.egress",
            head.target(),
            refused
                .iter()
                .map(|a| a.ip().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }

    /// Connects to the first of `addresses` that answers.
    async fn connect(&self, addresses: &[SocketAddr]) -> Result<(TcpStream, SocketAddr), String> {
        let mut last = String::new();
        for address in addresses {
            match tokio::time::timeout(self.limits.connect_timeout, TcpStream::connect(address))
                .await
            {
                Ok(Ok(stream)) => return Ok((stream, *address)),
                Ok(Err(e)) => last = format!("{address}: {e}"),
                Err(_) => {
                    last = format!(
                        "{address}: no answer within {} s",
                        self.limits.connect_timeout.as_secs()
                    );
                }
            }
        }
        Err(format!("cannot connect ({last})"))
    }

    /// Relays both ways until either side closes or neither sends for
    /// `idle_timeout`, within the workspace's bytes a minute.
    async fn relay(
        &self,
        client: &mut UnixStream,
        origin: &mut TcpStream,
        first: &[u8],
        counts: &Counts,
    ) -> Relayed {
        if !first.is_empty() {
            self.budget
                .take(first.len(), self.limits.bytes_per_minute)
                .await;
            if origin.write_all(first).await.is_err() {
                return Relayed::Closed;
            }
            counts.add(true, first.len());
        }
        let (client_read, client_write) = client.split();
        let (origin_read, origin_write) = origin.split();
        let copy = async {
            tokio::join!(
                self.pump(client_read, origin_write, counts, true),
                self.pump(origin_read, client_write, counts, false)
            );
        };
        let idle = async {
            loop {
                let quiet = counts.quiet();
                if quiet >= self.limits.idle_timeout {
                    return;
                }
                tokio::time::sleep(self.limits.idle_timeout - quiet).await;
            }
        };
        tokio::select! {
            () = copy => Relayed::Closed,
            () = idle => Relayed::Idle,
        }
    }

    /// Copies `from` to `to` until `from` ends, counting each chunk and
    /// holding it while the minute's bytes are spent.
    async fn pump(
        &self,
        mut from: impl AsyncRead + Unpin,
        mut to: impl AsyncWrite + Unpin,
        counts: &Counts,
        upward: bool,
    ) {
        let mut buffer = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            counts.add(upward, n);
            self.budget.take(n, self.limits.bytes_per_minute).await;
            if to.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    }

    /// A `SERVICE.tunnel` request: read whole (bounded), handed to the
    /// tunnel plugin's `forward`, its response written back and audited.
    async fn tunnel(
        &self,
        mut client: UnixStream,
        head: &Head,
        mut body: Vec<u8>,
        service: &str,
        rule: EgressRule<'_>,
        started: Instant,
    ) {
        let target = head.target();
        let Some(plain) = head.plain.as_ref().filter(|_| head.port == 80) else {
            let why = format!(
                "tunnel `{service}` is reached with plain HTTP through the proxy: ask for http://{service}.tunnel/… (no CONNECT, no https, no port)"
            );
            return self.refuse(client, &target, &why).await;
        };
        if plain.chunked {
            self.record_refused(&target, "a chunked request body");
            let why = "send a request body to a tunnel with Content-Length, not chunked";
            return answer(client, 411, why).await;
        }
        let length = plain.content_length.unwrap_or(0);
        if length > MAX_TUNNEL_BODY || (body.len() as u64) > length {
            let why = format!(
                "a request body to a tunnel is at most {} MiB and exactly its Content-Length",
                MAX_TUNNEL_BODY >> 20
            );
            self.record_refused(&target, &why);
            return answer(client, 413, &why).await;
        }
        let mut rest = vec![0u8; (length - body.len() as u64) as usize];
        let read = tokio::time::timeout(self.limits.idle_timeout, client.read_exact(&mut rest));
        if !matches!(read.await, Ok(Ok(_))) {
            return self.record_refused(&target, "the request body did not arrive whole");
        }
        body.extend_from_slice(&rest);
        let request = crate::plugins::api::HttpRequest {
            method: head.method.clone(),
            url: plain.path.clone(),
            headers: plain
                .headers
                .iter()
                .filter(|(name, _)| !name.eq_ignore_ascii_case("content-length"))
                .map(|(name, value)| crate::plugins::api::Header {
                    name: name.clone(),
                    value: value.clone(),
                })
                .collect(),
            body,
            timeout_ms: None,
            secrets: Vec::new(),
            capture: None,
        };
        let up = request.body.len() as u64;
        self.budget
            .take(request.body.len(), self.limits.bytes_per_minute)
            .await;
        let response = match self.tunnels.forward(service, &request).await {
            Ok(response) => response,
            Err(refusal) => {
                self.record_refused(&target, &refusal.why);
                return answer(client, refusal.status, &refusal.why).await;
            }
        };
        self.budget
            .take(response.body.len(), self.limits.bytes_per_minute)
            .await;
        let mut out = format!(
            "HTTP/1.1 {} {}
",
            response.status,
            reason_phrase(response.status)
        );
        for header in &response.headers {
            let clean = |t: &str| !t.contains(['\r', '\n']);
            let framing = ["content-length", "transfer-encoding", "connection"]
                .iter()
                .any(|f| header.name.eq_ignore_ascii_case(f));
            if !framing && clean(&header.name) && clean(&header.value) {
                out.push_str(&format!("{}: {}\r\n", header.name, header.value));
            }
        }
        out.push_str(&format!(
            "Content-Length: {}\r\nConnection: close\r\n\r\n",
            response.body.len()
        ));
        let down = response.body.len() as u64;
        if client.write_all(out.as_bytes()).await.is_ok()
            && client.write_all(&response.body).await.is_ok()
        {
            let _ = client.shutdown().await;
        }
        let plugin = self.tunnels.plugin_of(service).unwrap_or("?");
        self.record_allowed(
            up,
            down,
            &format!(
                "{} {target}{} → {plugin}.forward by {rule}: status {}, {up} bytes up, {down} bytes down, {:.1} s",
                head.method,
                plain.path,
                response.status,
                started.elapsed().as_secs_f64()
            ),
        );
    }

    /// Answers 403 with `why`, audited.
    async fn refuse(&self, client: UnixStream, target: &str, why: &str) {
        self.record_refused(target, why);
        answer(client, 403, why).await;
    }

    fn record_allowed(&self, up: u64, down: u64, detail: &str) {
        crate::events::egress_allowed(&self.workspace, up, down);
        self.audit.record(
            Actor::Workspace(&self.workspace),
            Some(&self.workspace),
            Action::EgressAllowed,
            detail,
        );
    }

    fn record_refused(&self, target: &str, why: &str) {
        crate::events::egress_refused(&self.workspace);
        self.audit.record(
            Actor::Workspace(&self.workspace),
            Some(&self.workspace),
            Action::EgressRefused,
            &format!("{target}: {why}"),
        );
    }
}

/// How a relay ended.
enum Relayed {
    Closed,
    Idle,
}

/// Reads until the head's blank line; the index after it.
async fn read_head(client: &mut UnixStream, buffer: &mut Vec<u8>) -> Result<usize, String> {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = head::end_of_head(buffer) {
            return Ok(end);
        }
        if buffer.len() > MAX_HEAD_BYTES {
            return Err(format!(
                "the request head is larger than {} KiB",
                MAX_HEAD_BYTES / 1024
            ));
        }
        let n = client
            .read(&mut chunk)
            .await
            .map_err(|e| format!("the request could not be read ({e})"))?;
        if n == 0 {
            return Err("the connection closed before the request head ended".to_owned());
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

/// The standard reason phrase of `status` (empty for an unknown one).
fn reason_phrase(status: u16) -> &'static str {
    hyper::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("")
}

/// Answers `status` with `why` as a plain-text body and closes.
async fn answer(mut client: UnixStream, status: u16, why: &str) {
    let body = format!("pincer egress proxy: {why}\n");
    let response = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: text/plain; charset=utf-8\r\n\
         X-Pincer-Egress: refused\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        reason_phrase(status),
        body.len()
    );
    if client.write_all(response.as_bytes()).await.is_ok() {
        let _ = client.shutdown().await;
    }
}

/// Bytes each way and when the last one moved.
struct Counts {
    up: AtomicU64,
    down: AtomicU64,
    /// Milliseconds after `epoch` of the last byte.
    last_ms: AtomicU64,
    epoch: Instant,
}

impl Counts {
    fn new() -> Self {
        Counts {
            up: AtomicU64::new(0),
            down: AtomicU64::new(0),
            last_ms: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    fn add(&self, upward: bool, bytes: usize) {
        let total = if upward { &self.up } else { &self.down };
        total.fetch_add(bytes as u64, Ordering::Relaxed);
        let now = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.fetch_max(now, Ordering::Relaxed);
    }

    fn up(&self) -> u64 {
        self.up.load(Ordering::Relaxed)
    }

    fn down(&self) -> u64 {
        self.down.load(Ordering::Relaxed)
    }

    /// How long no byte moved.
    fn quiet(&self) -> Duration {
        let last = Duration::from_millis(self.last_ms.load(Ordering::Relaxed));
        self.epoch.elapsed().saturating_sub(last)
    }
}

/// The bytes a workspace's connections moved in the current minute.
pub(super) struct Budget {
    /// A minute, but for tests that cannot wait one.
    length: Duration,
    window: std::sync::Mutex<Option<(tokio::time::Instant, u64)>>,
}

impl Default for Budget {
    fn default() -> Self {
        Self {
            length: Duration::from_secs(60),
            window: std::sync::Mutex::new(None),
        }
    }
}

impl Budget {
    #[cfg(test)]
    pub(super) fn with_window(length: Duration) -> Self {
        Self {
            length,
            ..Self::default()
        }
    }

    /// Counts `bytes` against `per_minute` (0: no cap), first waiting for
    /// the next minute when this one's bytes are spent. A chunk larger than
    /// the cap passes alone at the start of a minute.
    pub(super) async fn take(&self, bytes: usize, per_minute: u64) {
        if per_minute == 0 {
            return;
        }
        let bytes = bytes as u64;
        loop {
            let wait = {
                let mut window = self
                    .window
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let now = tokio::time::Instant::now();
                let (start, used) = match *window {
                    Some((start, used)) if now.duration_since(start) < self.length => (start, used),
                    _ => (now, 0),
                };
                if used == 0 || used.saturating_add(bytes) <= per_minute {
                    *window = Some((start, used.saturating_add(bytes)));
                    return;
                }
                *window = Some((start, used));
                self.length.saturating_sub(now.duration_since(start))
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// Why `ip` is not reached without a literal grant: a non-public address,
/// or one of this host's own (a public interface address would otherwise
/// open the gateway's and the console's ports to `egress_any_public`).
fn refused_class(ip: IpAddr) -> Option<&'static str> {
    address_class(ip).or_else(|| is_own_address(ip).then_some("local-interface"))
}

/// This process's listener that `address` reaches (the console, the
/// gateway's TCP port, the webhook listener), with its name.
fn own_listener(address: SocketAddr) -> Option<(SocketAddr, String)> {
    crate::listener::bound_tcp().into_iter().find(|(bound, _)| {
        bound.port() == address.port()
            && (bound.ip() == address.ip()
                || (bound.ip().is_unspecified()
                    && (address.ip().is_loopback() || is_own_address(address.ip()))))
    })
}

/// Binding succeeds only for an address one of this host's interfaces has.
pub(super) fn is_own_address(ip: IpAddr) -> bool {
    std::net::UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Whether `rule` is an entry naming `address` as a literal address (a
/// configured one, or one a person approved as shown).
fn names_literally(rule: EgressRule<'_>, address: SocketAddr) -> bool {
    let EgressRule::Listed(entry) = rule else {
        return false;
    };
    let port = address.port();
    crate::hosts::HostPattern::parse(&entry.host)
        .is_ok_and(|p| p.names_address(address.ip(), port, crate::hosts::web_scheme_port(port)))
}

/// Reads the client's first bytes into `first` until they hold a whole TLS
/// ClientHello (at most 16 KiB, within `wait`); the server name it asks
/// for, if it is one and names one. Whatever was read is relayed as is.
async fn read_client_hello(
    client: &mut UnixStream,
    first: &mut Vec<u8>,
    wait: Duration,
) -> Option<String> {
    let read = async {
        let mut chunk = [0u8; 4096];
        loop {
            let mut acceptor = rustls::server::Acceptor::default();
            let mut fed = &first[..];
            while !fed.is_empty() {
                if acceptor.read_tls(&mut fed).is_err() {
                    return None;
                }
            }
            match acceptor.accept() {
                Ok(Some(accepted)) => {
                    return accepted.client_hello().server_name().map(str::to_owned);
                }
                Ok(None) => {}
                Err(_) => return None,
            }
            if first.len() >= MAX_HEAD_BYTES {
                return None;
            }
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => first.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(wait, read).await.ok().flatten()
}
