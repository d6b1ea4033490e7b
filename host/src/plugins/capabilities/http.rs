//! The `http` capability: outbound requests only to the hosts a plugin's
//! manifest declares and its workspace grants ([`HttpReach`]). Redirects are
//! followed by hand so every hop is checked against the same allowlist (and
//! credentials are dropped across hosts).
//!
//! Names are checked, then resolved by the client's own resolver, which
//! drops every loopback, private, link-local, unique-local, multicast or
//! unspecified address the configuration does not name literally. The
//! connection goes to exactly the addresses that resolver returned, so a
//! name that re-resolves elsewhere between check and connect gains nothing.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use crate::hosts::address_class;
use crate::plugins::scope::HttpReach;

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
    /// The request carries secrets: a redirect to another origin is handed
    /// back as the response instead of followed, the response is asked for
    /// without content encoding and refused with one (the host could not
    /// scrub a compressed echo of a secret; decoding would let any server
    /// hand the host a decompression bomb).
    pub carries_secrets: bool,
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
    reach: Arc<HttpReach>,
    on_denied: DenialSink,
}

impl HttpEgress {
    /// An egress for one (scope, plugin): its own client, whose resolver
    /// enforces `reach`'s address rule.
    pub fn new(reach: HttpReach, on_denied: DenialSink) -> reqwest::Result<Self> {
        let reach = Arc::new(reach);
        let resolver = Arc::new(CheckedResolver {
            reach: reach.clone(),
            on_denied: on_denied.clone(),
        });
        Ok(Self {
            client: Self::client(resolver)?,
            reach,
            on_denied,
        })
    }

    pub fn reach(&self) -> &HttpReach {
        &self.reach
    }

    /// A client that never follows redirects on its own and resolves names
    /// with `resolver`.
    fn client(resolver: Arc<CheckedResolver>) -> reqwest::Result<reqwest::Client> {
        // The process-wide TLS provider; a second install is a harmless no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("pincer/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .dns_resolver(resolver)
            .build()
    }

    pub async fn fetch(&self, request: Request) -> Result<Response, HttpError> {
        let timeout = request
            .timeout
            .unwrap_or(DEFAULT_TIMEOUT)
            .min(DEFAULT_TIMEOUT);
        tokio::time::timeout(timeout, async {
            read_response(self.send_following_redirects(request).await?).await
        })
        .await
        .unwrap_or(Err(HttpError::Timeout))
    }

    /// Sends `request` like [`HttpEgress::fetch`] (within its timeout up to
    /// the response's head) and hands back the body as a stream, for bodies
    /// the host writes to a file as they arrive: no size cap here, each
    /// chunk within [`STREAM_IDLE`].
    pub async fn open(&self, request: Request) -> Result<Streaming, HttpError> {
        let timeout = request
            .timeout
            .unwrap_or(DEFAULT_TIMEOUT)
            .min(DEFAULT_TIMEOUT);
        let response = tokio::time::timeout(timeout, self.send_following_redirects(request))
            .await
            .unwrap_or(Err(HttpError::Timeout))?;
        Ok(Streaming {
            status: response.status().as_u16(),
            headers: header_pairs(response.headers()),
            length: response.content_length(),
            response,
        })
    }

    /// The final response (redirects followed by hand), its body unread.
    async fn send_following_redirects(
        &self,
        request: Request,
    ) -> Result<reqwest::Response, HttpError> {
        let mut method = reqwest::Method::from_bytes(request.method.as_bytes())
            .map_err(|_| HttpError::InvalidRequest(format!("bad method `{}`", request.method)))?;
        let mut url = Url::parse(&request.url)
            .map_err(|e| HttpError::InvalidRequest(format!("bad URL `{}`: {e}", request.url)))?;
        let mut headers = header_map(&request.headers)?;
        if request.carries_secrets {
            headers.insert(
                reqwest::header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
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
            if request.carries_secrets
                && let Some(encoding) = response
                    .headers()
                    .get(reqwest::header::CONTENT_ENCODING)
                    .and_then(|v| v.to_str().ok())
                    .filter(|e| !e.trim().eq_ignore_ascii_case("identity"))
            {
                return Err(HttpError::Transport(format!(
                    "the response to a request carrying a secret is content-encoded (`{encoding}`) although the host asked for identity; refused, since the host cannot scrub an encoded echo of the secret"
                )));
            }
            let Some(location) = location.filter(|_| status.is_redirection()) else {
                return Ok(response);
            };
            let next = url.join(location).map_err(|e| {
                HttpError::Transport(format!("redirect to a bad location `{location}`: {e}"))
            })?;
            let cross_origin = next.origin() != url.origin();
            if cross_origin && request.carries_secrets {
                return Ok(response);
            }
            if cross_origin {
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
        let default_port = if url.scheme() == "https" { 443 } else { 80 };
        if !self.reach.allows(&host, port, default_port) {
            let what = format!("{host}:{port} is not in this plugin's http allowlist");
            (self.on_denied)(&format!("http {what} ({})", shown(url)));
            return Err(HttpError::Denied(what));
        }
        // An address in the URL is never resolved: check it here.
        let literal = match url.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal
            && !address_allowed(&self.reach, ip)
        {
            let what = format!(
                "{host} is a {} address the configuration does not name",
                address_class(ip).unwrap_or("non-public")
            );
            (self.on_denied)(&format!("http {what} ({})", shown(url)));
            return Err(HttpError::Denied(what));
        }
        Ok(())
    }
}

/// `url` without its `user:password@` and with its query cut to `?…`, for
/// logs and audit records: queries often carry keys (a secret placed as a
/// query parameter is one).
pub fn shown(url: &Url) -> String {
    let mut url = url.clone();
    let _ = url.set_username("");
    let _ = url.set_password(None);
    let had_query = url.query().is_some();
    url.set_query(None);
    url.set_fragment(None);
    let mut out = url.to_string();
    if had_query {
        out.push_str("?…");
    }
    out
}

/// Public addresses are allowed; others only when the configuration names
/// them literally.
fn address_allowed(reach: &HttpReach, ip: IpAddr) -> bool {
    address_class(ip).is_none() || reach.names_address(ip)
}

/// The plugin client's resolver: the system's, less the addresses
/// [`address_allowed`] refuses.
struct CheckedResolver {
    reach: Arc<HttpReach>,
    on_denied: DenialSink,
}

impl reqwest::dns::Resolve for CheckedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let reach = self.reach.clone();
        let on_denied = self.on_denied.clone();
        let host = name.as_str().to_string();
        Box::pin(async move {
            let kept = resolve_checked(&reach, &on_denied, &host, 0).await?;
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The addresses of `host` (at `port`) that the address rule allows: the
/// system's resolution less every loopback, private, link-local, … address
/// the configuration does not name. Connect to these and nothing else
/// (HTTP through [`CheckedResolver`], channel WebSockets directly).
pub async fn resolve_checked(
    reach: &HttpReach,
    on_denied: &DenialSink,
    host: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, Box<dyn std::error::Error + Send + Sync>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    let found: Vec<SocketAddr> = match bare.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => tokio::net::lookup_host((bare, port)).await?.collect(),
    };
    let (kept, refused): (Vec<SocketAddr>, Vec<SocketAddr>) = found
        .into_iter()
        .partition(|a| address_allowed(reach, a.ip()));
    if kept.is_empty() {
        let addrs: Vec<String> = refused.iter().map(|a| a.ip().to_string()).collect();
        let what = format!(
            "{host} resolves only to addresses the configuration does not name ({}); name the literal address (e.g. `{}:*`) in the manifest or in workspaces.NAME.plugin_http to allow it",
            addrs.join(", "),
            refused
                .first()
                .map(|a| match a.ip() {
                    IpAddr::V6(v6) => format!("[{v6}]"),
                    v4 => v4.to_string(),
                })
                .unwrap_or_default()
        );
        on_denied(&format!("http {what}"));
        return Err(Box::new(Refused(what)));
    }
    Ok(kept)
}

/// A resolution the address rule emptied.
#[derive(Debug)]
struct Refused(String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Refused {}

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

/// The longest wait for the next chunk of a streamed body.
pub const STREAM_IDLE: Duration = Duration::from_secs(30);

/// A response whose body is read chunk by chunk ([`HttpEgress::open`]).
pub struct Streaming {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    /// `Content-Length`, when the server gave one.
    pub length: Option<u64>,
    response: reqwest::Response,
}

impl Streaming {
    /// The next piece of the body; `None` at its end.
    pub async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, HttpError> {
        match tokio::time::timeout(STREAM_IDLE, self.response.chunk()).await {
            Ok(chunk) => chunk.map_err(transport_error),
            Err(_) => Err(HttpError::Timeout),
        }
    }

    /// The value of header `name` (case-insensitive), if there is one.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect()
}

async fn read_response(mut response: reqwest::Response) -> Result<Response, HttpError> {
    if response
        .content_length()
        .is_some_and(|n| n > MAX_RESPONSE_BYTES as u64)
    {
        return Err(HttpError::TooLarge);
    }
    let status = response.status().as_u16();
    let headers = header_pairs(response.headers());
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
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
    while let Some(err) = source {
        if let Some(refused) = err.downcast_ref::<Refused>() {
            return HttpError::Denied(refused.0.clone());
        }
        source = err.source();
    }
    if e.is_timeout() {
        HttpError::Timeout
    } else {
        // Without the URL: it is the plugin's own, and may carry a token.
        HttpError::Transport(e.without_url().to_string())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    fn class(ip: &str) -> Option<&'static str> {
        address_class(ip.parse().unwrap())
    }

    #[test]
    fn non_public_addresses_are_told_apart_in_every_spelling() {
        for (ip, want) in [
            ("127.0.0.1", Some("loopback")),
            ("::1", Some("loopback")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("169.254.169.254", Some("link-local")),
            ("::ffff:169.254.169.254", Some("link-local")),
            ("fe80::1", Some("link-local")),
            ("10.1.2.3", Some("private")),
            ("172.16.0.1", Some("private")),
            ("192.168.1.1", Some("private")),
            ("100.64.0.1", Some("private")),
            ("fd00::1", Some("unique-local")),
            ("0.0.0.0", Some("unspecified")),
            ("::", Some("unspecified")),
            ("224.0.0.1", Some("multicast or reserved")),
            ("ff02::1", Some("multicast")),
            ("8.8.8.8", None),
            ("2606:4700::1111", None),
        ] {
            assert_eq!(class(ip), want, "{ip}");
        }
    }

    #[tokio::test]
    async fn names_resolving_to_unnamed_private_addresses_are_refused_for_any_connection() {
        let denied: Arc<Mutex<Vec<String>>> = Arc::default();
        let sink: DenialSink = {
            let denied = denied.clone();
            Arc::new(move |what: &str| denied.lock().unwrap().push(what.to_string()))
        };
        let reach = |manifest: &[&str]| HttpReach {
            manifest: manifest.iter().map(|s| s.to_string()).collect(),
            granted: None,
            operator_addresses: Vec::new(),
            added: Vec::new(),
        };
        // `localhost` passes a `localhost:*` pattern, but its address is
        // loopback and named nowhere: refused (WebSockets used to connect).
        let err = resolve_checked(&reach(&["localhost:*"]), &sink, "localhost", 9)
            .await
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("resolves only to addresses the configuration does not name"),
            "{err}"
        );
        assert_eq!(denied.lock().unwrap().len(), 1);
        let err = resolve_checked(&reach(&["169.254.169.254"]), &sink, "[::1]", 9)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("::1"), "{err}");
        let kept = resolve_checked(
            &reach(&["localhost:*", "127.0.0.1:*"]),
            &sink,
            "localhost",
            9,
        )
        .await
        .unwrap();
        assert!(
            kept.iter().all(|a| a.ip().is_loopback() && a.port() == 9),
            "{kept:?}"
        );
    }

    #[test]
    fn userinfo_and_query_are_never_shown() {
        let url = Url::parse("https://admin:hunter2@example.com:8443/x?appid=k3y#frag").unwrap();
        assert_eq!(shown(&url), "https://example.com:8443/x?…");
        let url = Url::parse("https://example.com/plain").unwrap();
        assert_eq!(shown(&url), "https://example.com/plain");
    }
}
