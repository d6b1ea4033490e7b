//! The gateway, reached over its unix socket: HTTP/1.1 POSTs carrying the
//! container's token. One connection per request (hyper's connection-level
//! client; nothing to pool for a few calls a minute).

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper_util::rt::TokioIo;
use pincer_runner_protocol::GATEWAY_URL_ENV;
use serde_json::Value;

use crate::cancel::{CHECK_INTERVAL, Cancel};

/// How long connecting to the socket may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most of an error body that is read.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Where the gateway is and how to authenticate to it. `Debug` hides the token.
#[derive(Clone)]
pub struct Gateway {
    socket: PathBuf,
    token: String,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field("socket", &self.socket)
            .field("token", &"<hidden>")
            .finish()
    }
}

/// Why a gateway request failed.
#[derive(Debug)]
pub enum GatewayError {
    /// No connection, a broken one, or no answer in time.
    Unreachable(String),
    /// The gateway answered with a non-2xx status; `message` is its own.
    Status { status: u16, message: String },
    /// The turn was cancelled (the host went away).
    Cancelled,
}

/// An answer with a 2xx status whose body is read as it arrives.
pub struct Reply {
    pub content_type: String,
    body: Incoming,
}

impl Gateway {
    /// From [`GATEWAY_URL_ENV`] and the token the host granted (never from
    /// the environment).
    pub fn from_env(token: Option<String>) -> Result<Gateway, String> {
        let url = std::env::var(GATEWAY_URL_ENV).map_err(|_| {
            format!("{GATEWAY_URL_ENV} is not set: this container was started without a gateway")
        })?;
        let token = token.ok_or_else(|| {
            "the host has not granted this runner a gateway token yet".to_string()
        })?;
        Gateway::new(&url, token)
    }

    /// `url` must be `unix:///absolute/path.sock`.
    pub fn new(url: &str, token: String) -> Result<Gateway, String> {
        let path = url.strip_prefix("unix://").ok_or_else(|| {
            format!(
                "{GATEWAY_URL_ENV}={url:?}: only unix:///path/to/socket addresses are supported"
            )
        })?;
        if !path.starts_with('/') {
            return Err(format!(
                "{GATEWAY_URL_ENV}={url:?}: the socket path must be absolute"
            ));
        }
        if token.trim().is_empty() {
            return Err("the gateway token is empty".to_string());
        }
        Ok(Gateway {
            socket: PathBuf::from(path),
            token,
        })
    }

    fn unreachable(&self, what: impl std::fmt::Display) -> GatewayError {
        GatewayError::Unreachable(format!("the gateway at {} {what}", self.socket.display()))
    }

    /// POSTs `body` as JSON to `path` and waits up to `wait` for the answer's
    /// head. A non-2xx answer becomes [`GatewayError::Status`].
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        headers: &[(&str, &str)],
        wait: Duration,
        cancel: &Cancel<'_>,
    ) -> Result<Reply, GatewayError> {
        let connect = tokio::net::UnixStream::connect(&self.socket);
        let stream = match guard(connect, CONNECT_TIMEOUT, cancel).await? {
            Some(Ok(stream)) => stream,
            Some(Err(e)) => return Err(self.unreachable(format_args!("cannot be reached: {e}"))),
            None => return Err(self.unreachable("did not accept the connection in time")),
        };
        let handshake = hyper::client::conn::http1::handshake(TokioIo::new(stream));
        let (mut sender, connection) = match guard(handshake, CONNECT_TIMEOUT, cancel).await? {
            Some(Ok(pair)) => pair,
            Some(Err(e)) => return Err(self.unreachable(format_args!("failed: {e}"))),
            None => return Err(self.unreachable("did not answer in time")),
        };
        // Drives the connection; it ends when the answer is consumed or dropped.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let json = serde_json::to_vec(body).map_err(|e| self.unreachable(e))?;
        let mut request = hyper::Request::post(path)
            .header(HOST, "localhost")
            .header(AUTHORIZATION, format!("Bearer {}", self.token))
            .header(CONTENT_TYPE, "application/json");
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        let request = request
            .body(Full::new(Bytes::from(json)))
            .map_err(|e| self.unreachable(format_args!("request could not be built: {e}")))?;
        let response = match guard(sender.send_request(request), wait, cancel).await? {
            Some(Ok(response)) => response,
            Some(Err(e)) => return Err(self.unreachable(format_args!("failed: {e}"))),
            None => {
                return Err(self.unreachable(format_args!("did not answer within {wait:?}")));
            }
        };
        let status = response.status();
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_ascii_lowercase();
        let mut reply = Reply {
            content_type,
            body: response.into_body(),
        };
        if status.is_success() {
            return Ok(reply);
        }
        let text = match reply
            .read_all(MAX_ERROR_BODY, self, CONNECT_TIMEOUT, cancel)
            .await
        {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(GatewayError::Cancelled) => return Err(GatewayError::Cancelled),
            Err(_) => String::new(),
        };
        Err(GatewayError::Status {
            status: status.as_u16(),
            message: error_message(&text).unwrap_or_else(|| {
                format!(
                    "the gateway answered HTTP {status} on {path}{}",
                    if text.trim().is_empty() {
                        String::new()
                    } else {
                        format!(": {}", text.trim())
                    }
                )
            }),
        })
    }
}

impl Reply {
    /// The next piece of the body, `None` at its end; waits at most `idle`.
    pub async fn next_chunk(
        &mut self,
        gateway: &Gateway,
        idle: Duration,
        cancel: &Cancel<'_>,
    ) -> Result<Option<Bytes>, GatewayError> {
        loop {
            let frame = match guard(self.body.frame(), idle, cancel).await? {
                None => {
                    return Err(gateway.unreachable(format_args!("sent nothing for {idle:?}")));
                }
                Some(None) => return Ok(None),
                Some(Some(Err(e))) => {
                    return Err(gateway.unreachable(format_args!("broke the connection: {e}")));
                }
                Some(Some(Ok(frame))) => frame,
            };
            // Trailers carry nothing needed here.
            if let Ok(data) = frame.into_data() {
                return Ok(Some(data));
            }
        }
    }

    /// The whole body, cut at `max` bytes.
    pub async fn read_all(
        &mut self,
        max: usize,
        gateway: &Gateway,
        idle: Duration,
        cancel: &Cancel<'_>,
    ) -> Result<Vec<u8>, GatewayError> {
        let mut all = Vec::new();
        while let Some(chunk) = self.next_chunk(gateway, idle, cancel).await? {
            let room = max.saturating_sub(all.len());
            all.extend_from_slice(&chunk[..room.min(chunk.len())]);
            if all.len() >= max {
                break;
            }
        }
        Ok(all)
    }
}

/// The message of an OpenAI-style error body `{"error":{"message":...}}`
/// (or `{"error":"..."}`, or `{"message":...}`).
pub fn error_message(body: &str) -> Option<String> {
    let value: Value = serde_json::from_str(body).ok()?;
    let error = value.get("error").unwrap_or(&value);
    if let Some(text) = error.as_str() {
        return Some(text.to_string());
    }
    error
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// Runs `future` for at most `limit` (`Ok(None)` on expiry), giving up as
/// soon as `cancel` fires.
pub async fn guard<F: Future>(
    future: F,
    limit: Duration,
    cancel: &Cancel<'_>,
) -> Result<Option<F::Output>, GatewayError> {
    tokio::select! {
        out = tokio::time::timeout(limit, future) => Ok(out.ok()),
        () = cancelled(cancel) => Err(GatewayError::Cancelled),
    }
}

async fn cancelled(cancel: &Cancel<'_>) {
    while !cancel.is_cancelled() {
        tokio::time::sleep(CHECK_INTERVAL).await;
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn addresses() {
        let gateway = Gateway::new("unix:///run/pincer/gateway/gateway.sock", "t".into()).unwrap();
        assert_eq!(
            gateway.socket,
            Path::new("/run/pincer/gateway/gateway.sock")
        );
        assert!(!format!("{gateway:?}").contains("\"t\""));
        for bad in [
            "http://localhost:8080",
            "unix://relative.sock",
            "/run/x.sock",
        ] {
            let e = Gateway::new(bad, "t".into()).unwrap_err();
            assert!(e.contains(GATEWAY_URL_ENV), "{e}");
        }
        assert!(Gateway::new("unix:///x.sock", " ".into()).is_err());
    }

    #[test]
    fn error_messages() {
        assert_eq!(
            error_message(r#"{"error":{"message":"budget exceeded","type":"x","code":"budget"}}"#)
                .as_deref(),
            Some("budget exceeded")
        );
        assert_eq!(
            error_message(r#"{"error":"plain"}"#).as_deref(),
            Some("plain")
        );
        assert_eq!(error_message("<html>"), None);
    }
}
