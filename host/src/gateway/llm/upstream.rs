//! The HTTP client of model calls: hyper's pooled client with rustls, and
//! nothing else on the path (no redirects, no cookies, no decompression).
//!
//! Proxies come from the environment as curl reads them (`HTTPS_PROXY`,
//! `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY`, lower case too): an https
//! upstream is reached through a CONNECT tunnel, an http one by sending the
//! request to the proxy in absolute form; `user:password@` in the proxy URL
//! becomes `Proxy-Authorization: Basic`.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::PROXY_AUTHORIZATION;
use http::{HeaderMap, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::proxy::Tunnel;
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tower_service::Service;

use super::error::LlmError;

type Pooled<C> = Client<C, Full<Bytes>>;

/// Cheap to clone: the connection pools are shared.
#[derive(Clone)]
pub struct UpstreamClient {
    direct: Pooled<HttpsConnector<HttpConnector>>,
    proxies: Arc<Proxies>,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient").finish_non_exhaustive()
    }
}

/// Why a call got no response head.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct SendError {
    message: String,
    /// Connecting took longer than the connect timeout.
    pub timed_out: bool,
}

impl SendError {
    fn new(message: String) -> Self {
        SendError {
            message,
            timed_out: false,
        }
    }
}

impl UpstreamClient {
    /// Pooled connections, a 10 s connect timeout, HTTP/1.1 and HTTP/2
    /// (ALPN), proxies from the environment. Installs the process-wide
    /// rustls provider if none is.
    pub fn new() -> Result<Self, LlmError> {
        Self::with_proxies(Matcher::from_env())
    }

    /// As [`UpstreamClient::new`], with proxies from `matcher` instead of
    /// the environment.
    pub fn with_proxies(matcher: Matcher) -> Result<Self, LlmError> {
        use rustls_platform_verifier::ConfigVerifierExt as _;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = rustls::ClientConfig::with_platform_verifier()
            .map_err(|e| LlmError::Config(format!("cannot set up TLS: {e}")))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        http.set_nodelay(true);
        let direct = pooled(https(tls.clone(), http.clone()));
        let proxies = Arc::new(Proxies {
            matcher,
            http,
            tls,
            tunnels: Mutex::default(),
            forwards: Mutex::default(),
        });
        Ok(UpstreamClient { direct, proxies })
    }

    /// Sends a POST of `body` with `headers`; the response head, the body
    /// still to read.
    pub async fn post(
        &self,
        uri: &Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Result<UpstreamResponse, SendError> {
        let mut request = Request::post(uri.clone())
            .body(Full::new(body))
            .map_err(|e| SendError::new(e.to_string()))?;
        *request.headers_mut() = headers;
        let sent = match self.proxies.matcher.intercept(uri) {
            None => self.direct.request(request).await,
            Some(intercept) => self.proxies.send(request, &intercept).await?,
        };
        let (head, body) = sent
            .map_err(|e| SendError {
                message: error_chain(&e),
                timed_out: timed_out(&e),
            })?
            .into_parts();
        Ok(UpstreamResponse {
            status: head.status,
            headers: head.headers,
            body,
        })
    }
}

fn https<C>(tls: rustls::ClientConfig, connector: C) -> HttpsConnector<C> {
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(connector)
}

fn pooled<C>(connector: C) -> Pooled<C>
where
    C: hyper_util::client::legacy::connect::Connect + Clone,
{
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector)
}

type SendResult = Result<http::Response<Incoming>, hyper_util::client::legacy::Error>;

/// The clients through proxies, one per proxy URL, made on first use.
struct Proxies {
    matcher: Matcher,
    http: HttpConnector,
    tls: rustls::ClientConfig,
    tunnels: Mutex<HashMap<Uri, Pooled<HttpsConnector<Tunnel<HttpConnector>>>>>,
    forwards: Mutex<HashMap<Uri, Pooled<Forward>>>,
}

impl Proxies {
    async fn send(
        &self,
        mut request: Request<Full<Bytes>>,
        intercept: &Intercept,
    ) -> Result<SendResult, SendError> {
        let proxy = intercept.uri().clone();
        if !matches!(proxy.scheme_str(), Some("http" | "https")) {
            return Err(SendError::new(format!(
                "the proxy {}://… from the environment is not supported for model calls (http and https proxies are)",
                proxy.scheme_str().unwrap_or("")
            )));
        }
        if request.uri().scheme_str() == Some("https") {
            let client = {
                let mut tunnels = self.tunnels.lock().unwrap_or_else(|e| e.into_inner());
                tunnels
                    .entry(proxy.clone())
                    .or_insert_with(|| {
                        let mut tunnel = Tunnel::new(proxy, self.http.clone());
                        if let Some(auth) = intercept.basic_auth() {
                            tunnel = tunnel.with_auth(auth.clone());
                        }
                        pooled(https(self.tls.clone(), tunnel))
                    })
                    .clone()
            };
            Ok(client.request(request).await)
        } else {
            if let Some(auth) = intercept.basic_auth() {
                request
                    .headers_mut()
                    .insert(PROXY_AUTHORIZATION, auth.clone());
            }
            let client = {
                let mut forwards = self.forwards.lock().unwrap_or_else(|e| e.into_inner());
                forwards
                    .entry(proxy.clone())
                    .or_insert_with(|| {
                        pooled(Forward {
                            http: self.http.clone(),
                            proxy,
                        })
                    })
                    .clone()
            };
            Ok(client.request(request).await)
        }
    }
}

/// Connects every destination to the proxy and marks the connection as
/// proxied, so the client writes requests in absolute form.
#[derive(Clone)]
struct Forward {
    http: HttpConnector,
    proxy: Uri,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Service<Uri> for Forward {
    type Response = Proxied;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Proxied, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.http.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, _destination: Uri) -> Self::Future {
        let connecting = self.http.call(self.proxy.clone());
        Box::pin(async move { Ok(Proxied(connecting.await?)) })
    }
}

/// A connection to a forward proxy.
struct Proxied(TokioIo<TcpStream>);

impl Connection for Proxied {
    fn connected(&self) -> Connected {
        self.0.connected().proxy(true)
    }
}

impl hyper::rt::Read for Proxied {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for Proxied {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// The error and its sources, without the URL (which may carry a key in a
/// query string).
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Whether an I/O timeout is among the error's sources.
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut source = Some(error);
    while let Some(e) = source {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// A response whose body is read chunk by chunk.
pub struct UpstreamResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    body: Incoming,
}

impl UpstreamResponse {
    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, hyper::Error> {
        loop {
            match self.body.frame().await {
                None => return Ok(None),
                Some(Err(e)) => return Err(e),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    /// A server on loopback that answers its first request with `reply`;
    /// its URL (with `user:secret@`) and the head it received.
    async fn one_shot(reply: &'static str) -> (String, tokio::task::JoinHandle<String>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://user:secret@{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = socket.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                head.extend_from_slice(&buf[..n]);
            }
            socket.write_all(reply.as_bytes()).await.unwrap();
            String::from_utf8_lossy(&head).into_owned()
        });
        (url, task)
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
    /// base64 of `user:secret`.
    const BASIC: &str = "proxy-authorization: Basic dXNlcjpzZWNyZXQ=";

    fn post_to(
        client: &UpstreamClient,
        uri: &str,
    ) -> impl Future<Output = Result<UpstreamResponse, SendError>> {
        let uri: Uri = uri.parse().unwrap();
        let client = client.clone();
        async move {
            client
                .post(&uri, HeaderMap::new(), Bytes::from_static(b"{}"))
                .await
        }
    }

    #[tokio::test]
    async fn an_http_upstream_is_asked_through_the_proxy_in_absolute_form() {
        let (proxy, seen) = one_shot(OK).await;
        let client = UpstreamClient::with_proxies(Matcher::builder().http(proxy).build()).unwrap();
        let mut response = post_to(
            &client,
            "http://model.example.test:8000/v1/chat/completions",
        )
        .await
        .unwrap();
        assert_eq!(response.status, 200);
        assert_eq!(response.chunk().await.unwrap().as_deref(), Some(&b"{}"[..]));
        let head = seen.await.unwrap();
        assert!(
            head.starts_with(
                "POST http://model.example.test:8000/v1/chat/completions HTTP/1.1\r\n"
            ),
            "{head}"
        );
        assert!(
            head.lines().any(|l| l.eq_ignore_ascii_case(BASIC)),
            "{head}"
        );
    }

    #[tokio::test]
    async fn an_https_upstream_is_reached_through_a_connect_tunnel() {
        let (proxy, seen) = one_shot("HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\n\r\n").await;
        let client = UpstreamClient::with_proxies(Matcher::builder().https(proxy).build()).unwrap();
        let err = post_to(&client, "https://api.example.test/v1/chat/completions")
            .await
            .err()
            .expect("the proxy refused the tunnel");
        let head = seen.await.unwrap();
        assert!(
            head.starts_with("CONNECT api.example.test:443 HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(
            head.lines().any(|l| l.eq_ignore_ascii_case(BASIC)),
            "{head}"
        );
        // The request itself never reached the proxy in the clear.
        assert!(!head.contains("chat/completions"), "{head}");
        assert!(!err.to_string().is_empty());
    }

    #[tokio::test]
    async fn no_proxy_destinations_go_direct() {
        let (proxy, proxy_seen) = one_shot(OK).await;
        let (upstream, upstream_seen) = one_shot(OK).await;
        let client =
            UpstreamClient::with_proxies(Matcher::builder().all(proxy).no("127.0.0.1").build())
                .unwrap();
        let address = upstream.trim_start_matches("http://user:secret@");
        let response = post_to(&client, &format!("http://{address}/v1/chat/completions"))
            .await
            .unwrap();
        assert_eq!(response.status, 200);
        let head = upstream_seen.await.unwrap();
        assert!(
            head.starts_with("POST /v1/chat/completions HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(!proxy_seen.is_finished());
        proxy_seen.abort();
    }

    #[tokio::test]
    async fn a_socks_proxy_is_refused_with_its_name() {
        let client =
            UpstreamClient::with_proxies(Matcher::builder().all("socks5://127.0.0.1:9").build())
                .unwrap();
        let err = post_to(&client, "https://api.example.test/v1/chat/completions")
            .await
            .err()
            .expect("refused");
        assert!(err.to_string().contains("socks5"), "{err}");
    }
}
