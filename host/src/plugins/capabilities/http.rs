//! The `http` capability: outbound requests only to the hosts a plugin's
//! manifest declares. Redirects are followed by hand so every hop is checked
//! against the same allowlist (and credentials are dropped across hosts).

use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::plugins::manifest::HostPattern;

pub const MAX_REDIRECTS: usize = 5;
pub const MAX_RESPONSE_BYTES: usize = 16 << 20;
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// Headers the host sets itself; a plugin may not (Host-header SSRF, framing).
const FORBIDDEN_HEADERS: &[&str] = &["host", "content-length", "transfer-encoding", "connection"];

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout: Option<Duration>,
}

#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    #[error("denied: {0}")]
    Denied(String),
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    #[error("transport: {0}")]
    Transport(String),
    #[error("timed out")]
    Timeout,
    #[error("response larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
}

/// Called with a description of each refused destination.
pub type DenialSink = Arc<dyn Fn(&str) + Send + Sync>;

#[derive(Clone)]
pub struct HttpEgress {
    client: reqwest::Client,
    allow: Arc<Vec<HostPattern>>,
    on_denied: DenialSink,
}

impl HttpEgress {
    pub fn new(client: reqwest::Client, allow: Vec<HostPattern>, on_denied: DenialSink) -> Self {
        Self {
            client,
            allow: Arc::new(allow),
            on_denied,
        }
    }

    /// A client that never follows redirects on its own.
    pub fn client() -> reqwest::Result<reqwest::Client> {
        // The process-wide TLS provider; a second install is a harmless no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")))
            .build()
    }

    pub async fn fetch(&self, request: Request) -> Result<Response, HttpError> {
        let timeout = request
            .timeout
            .unwrap_or(DEFAULT_TIMEOUT)
            .min(DEFAULT_TIMEOUT);
        tokio::time::timeout(timeout, self.fetch_following_redirects(request))
            .await
            .unwrap_or(Err(HttpError::Timeout))
    }

    async fn fetch_following_redirects(&self, request: Request) -> Result<Response, HttpError> {
        let mut method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("bad method `{}`", request.method)))?;
        let mut url = Url::parse(&request.url)
            .map_err(|e| HttpError::InvalidRequest(format!("bad URL `{}`: {e}", request.url)))?;
        let mut headers = header_map(&request.headers)?;
        let mut body = request.body;
        for _ in 0..=MAX_REDIRECTS {
            self.check_destination(&url)?;
            let response = self
                .client
                .request(method.clone(), url.clone())
                .headers(headers.clone())
                .body(body.clone())
                .send()
                .await
                .map_err(transport_error)?;
            let status = response.status();
            let location = response
                .headers()
                .get(reqwest::header::LOCATION)
                .and_then(|v| v.to_str().ok());
            let Some(location) = location.filter(|_| status.is_redirection()) else {
                return read_response(response).await;
            };
            let next = url.join(location).map_err(|e| {
                HttpError::Transport(format!("redirect to a bad location `{location}`: {e}"))
            })?;
            if next.host_str() != url.host_str()
                || next.port_or_known_default() != url.port_or_known_default()
            {
                for name in ["authorization", "cookie", "proxy-authorization"] {
                    headers.remove(name);
                }
            }
            if status == reqwest::StatusCode::SEE_OTHER
                || (matches!(status.as_u16(), 301 | 302) && method == reqwest::Method::POST)
            {
                method = reqwest::Method::GET;
                body.clear();
            }
            url = next;
        }
        Err(HttpError::Transport(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    fn check_destination(&self, url: &Url) -> Result<(), HttpError> {
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpError::InvalidRequest(format!(
                "scheme `{}` is not allowed; use http or https",
                url.scheme()
            )));
        }
        let host = match url.host() {
            Some(url::Host::Domain(d)) => d.to_ascii_lowercase(),
            Some(url::Host::Ipv4(ip)) => ip.to_string(),
            Some(url::Host::Ipv6(ip)) => format!("[{ip}]"),
            None => {
                return Err(HttpError::InvalidRequest(format!(
                    "URL `{url}` has no host"
                )));
            }
        };
        let port = url.port_or_known_default().unwrap_or(0);
        if self.allow.iter().any(|p| p.matches(&host, port)) {
            return Ok(());
        }
        let what = format!("{host}:{port} is not in this plugin's http allowlist");
        (self.on_denied)(&format!("http {what} ({url})"));
        Err(HttpError::Denied(what))
    }
}

fn header_map(headers: &[(String, String)]) -> Result<HeaderMap, HttpError> {
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let lower = name.to_ascii_lowercase();
        if FORBIDDEN_HEADERS.contains(&lower.as_str()) {
            return Err(HttpError::InvalidRequest(format!(
                "header `{name}` is set by the host"
            )));
        }
        let name = HeaderName::from_bytes(lower.as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("bad header name `{name}`")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| HttpError::InvalidRequest(format!("bad value for header `{name}`")))?;
        map.append(name, value);
    }
    Ok(map)
}

async fn read_response(mut response: reqwest::Response) -> Result<Response, HttpError> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
    {
        return Err(HttpError::TooLarge);
    }
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(transport_error)? {
        if body.len() + chunk.len() > MAX_RESPONSE_BYTES {
            return Err(HttpError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Response {
        status,
        headers,
        body,
    })
}

fn transport_error(e: reqwest::Error) -> HttpError {
    if e.is_timeout() {
        HttpError::Timeout
    } else {
        // Without the URL: it is the plugin's own, and may carry a token.
        HttpError::Transport(e.without_url().to_string())
    }
}
