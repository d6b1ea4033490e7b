//! Host-held connections (Slack Socket Mode, Feishu's long connection): the
//! plugin says where to connect (`connect`), the host opens and holds the
//! WebSocket, hands every frame to the plugin (`on-frame`), stores the
//! frame's messages and only then sends its replies (acks) — none if the
//! store failed, so the platform delivers the frame again — sends the
//! keepalive it asks for, and reconnects with backoff when the socket
//! closes, the plugin asks, or the socket goes quiet (no frame and no pong
//! for the idle timeout: a "connected" socket that receives nothing is
//! treated as dead). A plugin that asks for a keepalive expects it
//! answered: then only data frames count, and the idle timeout scales with
//! the keepalive interval the plugin sets later.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};

use crate::db::now_ms;
use crate::plugins::api;

use super::{ChannelHost, Inbox};

/// Reconnect policy when the plugin gives none.
pub const DEFAULT_RECONNECT: api::ReconnectPolicy = api::ReconnectPolicy {
    min_delay_ms: 1000,
    max_delay_ms: 60_000,
    jitter_ms: 1000,
    max_attempts: None,
};

/// Idle timeout when the plugin gives none.
pub const DEFAULT_IDLE: Duration = Duration::from_secs(60);

/// Largest frame accepted from the platform.
const MAX_FRAME_BYTES: usize = 4 << 20;

#[derive(Debug, thiserror::Error)]
enum Dropped {
    #[error("{0}")]
    Refused(String),
    #[error("the socket was quiet for {0:?} (no frames, no pongs)")]
    Quiet(Duration),
    #[error("the plugin asked to reconnect")]
    PluginAsked,
    #[error("closed by the platform{0}")]
    Closed(String),
    #[error("{0}")]
    Transport(String),
    #[error("stopping")]
    Stopping,
}

/// Holds `channel`'s connection until `stop`; returns at once if the
/// plugin has no connection mode.
pub async fn hold(
    host: Arc<ChannelHost>,
    inbox: Arc<dyn Inbox>,
    channel: String,
    mut stop: watch::Receiver<bool>,
) {
    let Some(loaded) = host.get(&channel) else {
        return;
    };
    let plugin = loaded.plugin.clone();
    let mut policy = DEFAULT_RECONNECT;
    let mut failures: u32 = 0;
    loop {
        if *stop.borrow() {
            return;
        }
        let mut wait_at_least = Duration::ZERO;
        let request = match host.plugins.channel_connect(&plugin).await {
            Ok(Ok(Some(request))) => Some(request),
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                if let api::ChannelError::RetryLater(r) = &e {
                    wait_at_least = Duration::from_millis(u64::from(r.after_ms));
                }
                record_failure(
                    &host,
                    &channel,
                    &format!("connect refused: {}", channel_error(&e)),
                );
                None
            }
            Err(e) => {
                record_failure(&host, &channel, &format!("connect failed: {e}"));
                None
            }
        };
        host.update_status(&channel, |s| s.holds_connection = true);
        match request {
            None => failures += 1,
            Some(request) => {
                if let Some(p) = request.reconnect {
                    policy = p;
                }
                let started = Instant::now();
                let outcome = session(
                    &host,
                    &inbox,
                    &channel,
                    &plugin,
                    request,
                    &mut policy,
                    &mut stop,
                )
                .await;
                if matches!(outcome, Dropped::Stopping) {
                    host.update_status(&channel, |s| s.connected = false);
                    return;
                }
                tracing::warn!(%channel, "connection dropped: {outcome}");
                crate::events::channel_reconnected(&channel);
                host.update_status(&channel, |s| {
                    s.connected = false;
                    s.since_ms = Some(now_ms());
                    s.reconnects += 1;
                    if matches!(outcome, Dropped::Quiet(_)) {
                        s.watchdog_reconnects += 1;
                    }
                    s.last_error = Some(outcome.to_string());
                });
                // A connection that lived a while, or one the platform asked
                // to renew, starts the backoff over.
                if started.elapsed() > Duration::from_secs(30)
                    || matches!(outcome, Dropped::PluginAsked)
                {
                    failures = 0;
                } else {
                    failures += 1;
                }
            }
        }
        if let Some(max) = policy.max_attempts
            && failures > max
        {
            record_failure(
                &host,
                &channel,
                &format!("gave up after {max} failed connection attempts in a row"),
            );
            return;
        }
        let delay = reconnect_delay(&policy, failures).max(wait_at_least);
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.changed() => return,
        }
    }
}

fn record_failure(host: &ChannelHost, channel: &str, message: &str) {
    tracing::warn!(%channel, "{message}");
    host.update_status(channel, |s| {
        s.connected = false;
        s.last_error = Some(message.to_string());
    });
}

fn channel_error(e: &api::ChannelError) -> String {
    use api::ChannelError as E;
    match e {
        E::Unauthorized(m) => format!("unauthorized: {m}"),
        E::BadRequest(m) => format!("bad request: {m}"),
        E::Upstream(m) => format!("the platform failed: {m}"),
        E::Unsupported(m) => format!("unsupported: {m}"),
        E::Rejected(m) => format!("refused: {m}"),
        E::RetryLater(r) => format!("retry in {} ms: {}", r.after_ms, r.reason),
    }
}

/// The delay before attempt `failures` (1 = the first retry; 0 = the
/// first attempt after a connection that lived, which keeps the jitter so
/// that clients dropped together do not all come back at once).
pub fn reconnect_delay(policy: &api::ReconnectPolicy, failures: u32) -> Duration {
    let base = if failures == 0 {
        u64::from(policy.min_delay_ms.min(250))
    } else {
        u64::from(policy.min_delay_ms)
            .saturating_mul(1u64 << (failures - 1).min(16))
            .min(u64::from(policy.max_delay_ms.max(policy.min_delay_ms)))
    };
    let jitter = if policy.jitter_ms == 0 {
        0
    } else {
        u64::from(uuid::Uuid::new_v4().as_u128() as u32) % u64::from(policy.jitter_ms)
    };
    Duration::from_millis(base + jitter)
}

sentence_error! {
    /// Why the host will not open the connection a channel plugin asked for.
    struct Refusal;
}

sentence_error! {
    /// The TLS client could not be set up (no usable root certificates).
    struct TlsSetup;
}

/// Checks the URL the plugin asks for: `wss://`, or `ws://` to loopback
/// only, to a host the plugin may reach.
fn check_url(plugin: &crate::plugins::LoadedPlugin, raw: &str) -> Result<url::Url, Refusal> {
    let (url, host, port, default_port) = websocket_target(raw)?;
    if !plugin.reaches(&host, port, default_port) {
        return Err(Refusal::from(format!(
            "{host}:{port} is not among the hosts this channel's plugin may reach (its manifest's http capability and channels.NAME.http)"
        )));
    }
    Ok(url)
}

/// The URL, host (lower-case, IPv6 bracketed), port and default port of a
/// WebSocket URL the host will open: `wss://`, or `ws://` to loopback.
fn websocket_target(raw: &str) -> Result<(url::Url, String, u16, u16), Refusal> {
    let url = url::Url::parse(raw).map_err(|e| format!("bad connection URL: {e}"))?;
    let host = url.host().ok_or("the connection URL has no host")?;
    let loopback = match &host {
        url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
        url::Host::Ipv4(ip) => ip.is_loopback(),
        url::Host::Ipv6(ip) => ip.is_loopback(),
    };
    match url.scheme() {
        "wss" => {}
        "ws" if loopback => {}
        "ws" => {
            return Err(Refusal::from(
                "ws:// (unencrypted) is accepted only to loopback; use wss://",
            ));
        }
        other => {
            return Err(Refusal::from(format!(
                "scheme `{other}` is not a WebSocket scheme"
            )));
        }
    }
    let host_text = match host {
        url::Host::Domain(d) => d.to_ascii_lowercase(),
        url::Host::Ipv4(ip) => ip.to_string(),
        url::Host::Ipv6(ip) => format!("[{ip}]"),
    };
    let default_port = if url.scheme() == "wss" { 443 } else { 80 };
    let port = url.port_or_known_default().unwrap_or(default_port);
    Ok((url, host_text, port, default_port))
}

#[allow(clippy::too_many_arguments)]
async fn session(
    host: &ChannelHost,
    inbox: &Arc<dyn Inbox>,
    channel: &str,
    plugin: &crate::plugins::LoadedPlugin,
    request: api::ConnectionRequest,
    policy: &mut api::ReconnectPolicy,
    stop: &mut watch::Receiver<bool>,
) -> Dropped {
    let url = match check_url(plugin, &request.url) {
        Ok(url) => url,
        Err(m) => return Dropped::Refused(m.0),
    };
    let mut ws_request =
        match tungstenite::client::IntoClientRequest::into_client_request(url.as_str()) {
            Ok(r) => r,
            Err(e) => return Dropped::Refused(format!("bad connection URL: {e}")),
        };
    for header in &request.headers {
        let (Ok(name), Ok(value)) = (
            tungstenite::http::HeaderName::from_bytes(header.name.as_bytes()),
            tungstenite::http::HeaderValue::from_str(&header.value),
        ) else {
            return Dropped::Refused(format!("bad connection header `{}`", header.name));
        };
        ws_request.headers_mut().insert(name, value);
    }
    let config = tungstenite::protocol::WebSocketConfig::default()
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    let connector = match tls_connector() {
        Ok(c) => c,
        Err(e) => return Dropped::Transport(e.0),
    };
    // Resolved by the same checking resolver as the plugin's HTTP, and
    // connected to exactly the addresses it kept: a name that resolves to
    // a private or link-local address is refused unless named literally.
    let connect = async {
        let (host, port) = (
            url.host_str().unwrap_or_default(),
            url.port_or_known_default().unwrap_or(443),
        );
        let addrs = plugin.resolve(host, port).await.map_err(Dropped::Refused)?;
        let stream = tokio::net::TcpStream::connect(&addrs[..])
            .await
            .map_err(|e| Dropped::Transport(format!("cannot connect: {e}")))?;
        tokio_tungstenite::client_async_tls_with_config(
            ws_request,
            stream,
            Some(config),
            Some(connector),
        )
        .await
        .map_err(|e| Dropped::Transport(format!("cannot connect: {e}")))
    };
    let mut socket = match tokio::time::timeout(Duration::from_secs(15), connect).await {
        Ok(Ok((socket, _))) => socket,
        Ok(Err(dropped)) => return dropped,
        Err(_) => return Dropped::Transport("connecting took longer than 15 s".into()),
    };
    host.update_status(channel, |s| {
        s.connected = true;
        s.since_ms = Some(now_ms());
        s.last_error = None;
    });
    tracing::info!(%channel, "connected");
    let mut idle = request.idle_timeout_ms.map_or(DEFAULT_IDLE, |ms| {
        Duration::from_millis(u64::from(ms.max(1000)))
    });
    let mut keepalive = request.keepalive;
    let mut last_inbound = Instant::now();
    let mut ping_every = idle / 3;
    let mut next_ping = Instant::now() + ping_every;
    let mut next_keepalive = keepalive
        .as_ref()
        .map(|k| Instant::now() + Duration::from_millis(u64::from(k.interval_ms.max(100))));
    loop {
        let quiet_at = last_inbound + idle;
        let next_tick = [Some(next_ping), next_keepalive, Some(quiet_at)]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(quiet_at);
        let frame = tokio::select! {
            frame = socket.next() => frame,
            () = tokio::time::sleep_until(next_tick) => {
                let now = Instant::now();
                if now >= quiet_at {
                    let _ = socket.close(None).await;
                    return Dropped::Quiet(idle);
                }
                if now >= next_ping {
                    next_ping = now + ping_every;
                    if let Err(e) = socket.send(WsMessage::Ping(Vec::new().into())).await {
                        return Dropped::Transport(e.to_string());
                    }
                }
                if let (Some(at), Some(k)) = (next_keepalive, keepalive.as_ref())
                    && now >= at
                {
                    next_keepalive = Some(now + Duration::from_millis(u64::from(k.interval_ms.max(100))));
                    if let Err(e) = socket.send(to_ws(&k.frame)).await {
                        return Dropped::Transport(e.to_string());
                    }
                }
                continue;
            }
            _ = stop.changed() => {
                let _ = socket.close(None).await;
                return Dropped::Stopping;
            }
        };
        let frame = match frame {
            None => return Dropped::Closed(String::new()),
            Some(Err(e)) => return Dropped::Transport(e.to_string()),
            Some(Ok(frame)) => frame,
        };
        if proves_alive(&frame, keepalive.is_some()) {
            last_inbound = Instant::now();
        }
        let frame = match frame {
            WsMessage::Text(t) => api::Frame::Text(t.to_string()),
            WsMessage::Binary(b) => api::Frame::Binary(b.to_vec()),
            WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_) => continue,
            WsMessage::Close(close) => {
                return Dropped::Closed(
                    close
                        .map(|c| format!(" ({} {})", u16::from(c.code), c.reason))
                        .unwrap_or_default(),
                );
            }
        };
        host.update_status(channel, |s| s.last_event_ms = Some(now_ms()));
        let outcome = match host.plugins.channel_on_frame(plugin, &frame).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                tracing::warn!(%channel, "frame refused: {}", channel_error(&e));
                continue;
            }
            Err(e) => {
                tracing::warn!(%channel, "frame handling failed: {e}");
                continue;
            }
        };
        // Stored first, acked after: a frame whose messages could not be
        // stored gets none of its replies, so the platform sends it again.
        let stored =
            super::store_inbound(host, inbox, channel, outcome.messages, outcome.interactions)
                .await;
        if stored.is_ok() {
            for reply in &outcome.replies {
                if let Err(e) = socket.send(to_ws(reply)).await {
                    return Dropped::Transport(format!("cannot send an ack: {e}"));
                }
            }
        }
        if let Some(k) = outcome.keepalive {
            if let Some(old) = keepalive.as_ref() {
                idle = rescaled_idle(idle, old.interval_ms, k.interval_ms);
                ping_every = idle / 3;
                next_ping = next_ping.min(Instant::now() + ping_every);
            }
            next_keepalive =
                Some(Instant::now() + Duration::from_millis(u64::from(k.interval_ms.max(100))));
            keepalive = Some(k);
        }
        if let Some(p) = outcome.reconnect_policy {
            *policy = p;
        }
        if outcome.reconnect {
            let _ = socket.close(None).await;
            return Dropped::PluginAsked;
        }
    }
}

/// Whether `frame` shows the platform is still there. With a keepalive of
/// the plugin's (Feishu's ping frame), the platform's answers to it are the
/// proof: WebSocket pings and pongs are answered by the server's WebSocket
/// layer even when the service behind it has stopped answering.
fn proves_alive(frame: &WsMessage, has_keepalive: bool) -> bool {
    match frame {
        WsMessage::Ping(_) | WsMessage::Pong(_) | WsMessage::Frame(_) => !has_keepalive,
        WsMessage::Text(_) | WsMessage::Binary(_) | WsMessage::Close(_) => true,
    }
}

/// The idle timeout once the keepalive interval changes from `old_ms` to
/// `new_ms` (a Feishu pong carrying the server's PingInterval): the same
/// number of missed keepalives, at least 1 s.
fn rescaled_idle(idle: Duration, old_ms: u32, new_ms: u32) -> Duration {
    if old_ms == 0 || old_ms == new_ms {
        return idle;
    }
    let scaled = idle.as_millis() * u128::from(new_ms) / u128::from(old_ms);
    Duration::from_millis(u64::try_from(scaled).unwrap_or(u64::MAX).max(1000))
}

fn to_ws(frame: &api::Frame) -> WsMessage {
    match frame {
        api::Frame::Text(t) => WsMessage::Text(t.clone().into()),
        api::Frame::Binary(b) => WsMessage::Binary(b.clone().into()),
    }
}

fn tls_connector() -> Result<tokio_tungstenite::Connector, TlsSetup> {
    use rustls_platform_verifier::ConfigVerifierExt as _;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = rustls::ClientConfig::with_platform_verifier()
        .map_err(|e| TlsSetup(format!("cannot set up TLS: {e}")))?;
    Ok(tokio_tungstenite::Connector::Rustls(Arc::new(config)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unencrypted_sockets_go_to_loopback_only() {
        for ok in [
            "wss://wss-primary.slack.com/link/?ticket=1",
            "ws://127.0.0.1:9/link",
            "ws://localhost:9/",
            "ws://[::1]:9/",
        ] {
            assert!(websocket_target(ok).is_ok(), "{ok}");
        }
        for (bad, says) in [
            ("ws://wss-primary.slack.com/link", "only to loopback"),
            ("ws://10.0.0.1:9/", "only to loopback"),
            ("ws://127.0.0.1.nip.io/", "only to loopback"),
            ("https://slack.com/", "not a WebSocket scheme"),
            ("not a url", "bad connection URL"),
        ] {
            let err = websocket_target(bad).unwrap_err();
            assert!(err.0.contains(says), "{bad}: {err}");
        }
        let (_, host, port, default) = websocket_target("wss://Example.COM/x").unwrap();
        assert_eq!((host.as_str(), port, default), ("example.com", 443, 443));
    }

    #[test]
    fn a_keepalive_of_the_plugin_makes_its_answers_the_proof_of_life() {
        let pong = WsMessage::Pong(Vec::new().into());
        let data = WsMessage::Binary(vec![1].into());
        assert!(proves_alive(&pong, false));
        assert!(!proves_alive(&pong, true));
        assert!(proves_alive(&data, true));
        // Feishu's endpoint said ping every 120 s (idle 360 s); a pong says 1 s.
        let idle = rescaled_idle(Duration::from_secs(360), 120_000, 1000);
        assert_eq!(idle, Duration::from_secs(3));
        assert_eq!(
            rescaled_idle(Duration::from_secs(3), 1000, 90_000),
            Duration::from_secs(270)
        );
        assert_eq!(
            rescaled_idle(Duration::from_secs(3), 1000, 100),
            Duration::from_secs(1)
        );
        assert_eq!(
            rescaled_idle(Duration::from_secs(60), 0, 1000),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn backoff_doubles_to_the_cap_with_bounded_jitter() {
        let p = api::ReconnectPolicy {
            min_delay_ms: 1000,
            max_delay_ms: 8000,
            jitter_ms: 500,
            max_attempts: None,
        };
        for (failures, base) in [(1, 1000), (2, 2000), (3, 4000), (4, 8000), (9, 8000)] {
            let d = reconnect_delay(&p, failures).as_millis() as u64;
            assert!((base..base + 500).contains(&d), "{failures}: {d}");
        }
    }

    #[test]
    fn the_first_reconnect_after_a_long_connection_keeps_the_jitter() {
        // Feishu's ReconnectNonce: every client waits a random part of it
        // before reconnecting, so a server restart is not met by all at once.
        let p = api::ReconnectPolicy {
            min_delay_ms: 1000,
            max_delay_ms: 120_000,
            jitter_ms: 30_000,
            max_attempts: None,
        };
        let delays: Vec<u64> = (0..64)
            .map(|_| reconnect_delay(&p, 0).as_millis() as u64)
            .collect();
        assert!(
            delays.iter().all(|d| (250..30_250).contains(d)),
            "{delays:?}"
        );
        assert!(delays.iter().any(|d| *d > 1000), "no jitter: {delays:?}");
        let none = api::ReconnectPolicy { jitter_ms: 0, ..p };
        assert_eq!(reconnect_delay(&none, 0), Duration::from_millis(250));
    }
}
