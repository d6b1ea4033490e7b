//! The HTTP client of model calls: hyper's pooled client with rustls, and
//! nothing else on the path (no redirects, no cookies, no decompression).

use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::error::LlmError;

type Connector = HttpsConnector<HttpConnector>;

/// Cheap to clone: one connection pool.
#[derive(Clone)]
pub struct UpstreamClient {
    client: Client<Connector, Full<Bytes>>,
}

impl std::fmt::Debug for UpstreamClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamClient").finish_non_exhaustive()
    }
}

/// Why a call got no response head.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct SendError(String);

impl UpstreamClient {
    /// Pooled connections, a 10 s connect timeout, HTTP/1.1 and HTTP/2
    /// (ALPN). Installs the process-wide rustls provider if none is.
    pub fn new() -> Result<Self, LlmError> {
        use rustls_platform_verifier::ConfigVerifierExt as _;
        let _ = rustls::crypto::ring::default_provider().install_default();
        let tls = rustls::ClientConfig::with_platform_verifier()
            .map_err(|e| LlmError::Config(format!("cannot set up TLS: {e}")))?;
        let mut http = HttpConnector::new();
        http.enforce_http(false);
        http.set_connect_timeout(Some(Duration::from_secs(10)));
        http.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .enable_http2()
            .wrap_connector(http);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .build(connector);
        Ok(UpstreamClient { client })
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
            .map_err(|e| SendError(e.to_string()))?;
        *request.headers_mut() = headers;
        let response = self
            .client
            .request(request)
            .await
            .map_err(|e| SendError(error_chain(&e)))?;
        let (head, body) = response.into_parts();
        Ok(UpstreamResponse {
            status: head.status,
            headers: head.headers,
            body,
        })
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
