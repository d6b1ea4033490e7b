//! Outbound HTTP, only to hosts the manifest declares and the workspace
//! allows. Secrets are put into a request by the host: the plugin names them.

pub use crate::types::{
    Capture, Header, HttpError, HttpRequest, HttpResponse, SecretHeader, SecretPlace, SecretUse,
};
use crate::wit::host::pincer::plugin::http::fetch as host_fetch;

/// Sends `request` as it is.
pub fn fetch(request: &HttpRequest) -> Result<HttpResponse, HttpError> {
    host_fetch(request)
}

/// What went wrong, in words.
pub fn describe(err: &HttpError) -> String {
    match err {
        HttpError::Denied(msg) => format!("denied: {msg}"),
        HttpError::InvalidRequest(msg) => format!("invalid request: {msg}"),
        HttpError::Transport(msg) => format!("transport error: {msg}"),
        HttpError::Timeout => "timed out".into(),
        HttpError::TooLarge => "response too large".into(),
    }
}

/// A request under construction.
#[derive(Debug, Clone)]
pub struct Request(HttpRequest);

impl Request {
    pub fn new(method: &str, url: &str) -> Self {
        Self(HttpRequest {
            method: method.into(),
            url: url.into(),
            headers: Vec::new(),
            body: Vec::new(),
            timeout_ms: None,
            secrets: Vec::new(),
            capture: None,
        })
    }

    pub fn get(url: &str) -> Self {
        Self::new("GET", url)
    }

    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.0.headers.push(Header {
            name: name.into(),
            value: value.into(),
        });
        self
    }

    /// Appends `name=value` to the URL's query, percent-encoded.
    pub fn query(mut self, name: &str, value: &str) -> Self {
        let url = &mut self.0.url;
        let fragment = url.find('#').map(|at| url.split_off(at));
        url.push(if url.contains('?') { '&' } else { '?' });
        url.push_str(&encode(name));
        url.push('=');
        url.push_str(&encode(value));
        if let Some(fragment) = fragment {
            url.push_str(&fragment);
        }
        self
    }

    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.0.body = body.into();
        self
    }

    /// A JSON body, with `content-type: application/json`.
    pub fn json(self, body: &serde_json::Value) -> Self {
        self.header("content-type", "application/json")
            .body(body.to_string())
    }

    pub fn timeout_ms(mut self, ms: u32) -> Self {
        self.0.timeout_ms = Some(ms);
        self
    }

    /// The host sets header `name` to `prefix` + the value of `secret`.
    pub fn secret_header(self, secret: &str, name: &str, prefix: &str) -> Self {
        self.secret(
            secret,
            SecretPlace::Header(SecretHeader {
                name: name.into(),
                prefix: prefix.into(),
            }),
        )
    }

    /// The host sets the JSON body's member at `pointer` to the secret.
    pub fn secret_json_field(self, secret: &str, pointer: &str) -> Self {
        self.secret(secret, SecretPlace::JsonField(pointer.into()))
    }

    /// The host sets the URL's query parameter `name` to the secret (e.g. an
    /// API's `appid`); set or replaced.
    pub fn secret_query(self, secret: &str, name: &str) -> Self {
        self.secret(secret, SecretPlace::QueryParam(name.into()))
    }

    /// The host sets the form body's field `name` to the secret.
    pub fn secret_form_field(self, secret: &str, name: &str) -> Self {
        self.secret(secret, SecretPlace::FormField(name.into()))
    }

    /// The host puts `secret` at `place`.
    pub fn secret(mut self, secret: &str, place: SecretPlace) -> Self {
        self.0.secrets.push(SecretUse {
            secret: secret.into(),
            place,
        });
        self
    }

    /// The host keeps the response's string at `pointer` as the secret
    /// `secret` and blanks it in what the plugin gets.
    pub fn capture(mut self, capture: Capture) -> Self {
        self.0.capture = Some(capture);
        self
    }

    pub fn send(self) -> Result<Response, HttpError> {
        host_fetch(&self.0).map(Response)
    }

    pub fn into_raw(self) -> HttpRequest {
        self.0
    }

    pub fn raw(&self) -> &HttpRequest {
        &self.0
    }
}

/// A response, whatever its status.
#[derive(Debug, Clone)]
pub struct Response(pub HttpResponse);

impl Response {
    pub fn status(&self) -> u16 {
        self.0.status
    }

    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.0.status)
    }

    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.0
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    pub fn body(&self) -> &[u8] {
        &self.0.body
    }

    pub fn text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.0.body)
    }

    /// The body as JSON `T`.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.0.body)
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_parameters_are_encoded_and_appended() {
        let request = Request::get("http://127.0.0.1:1/data/2.5/weather")
            .query("q", "São Paulo")
            .query("units", "metric");
        assert_eq!(
            request.raw().url,
            "http://127.0.0.1:1/data/2.5/weather?q=S%C3%A3o%20Paulo&units=metric"
        );
        let request = Request::get("http://h/p?a=1#top").query("b", "x&y=z");
        assert_eq!(request.raw().url, "http://h/p?a=1&b=x%26y%3Dz#top");
    }

    #[test]
    fn secrets_are_named_not_given() {
        let request = Request::post("https://h/")
            .secret_header("token", "authorization", "Bearer ")
            .secret_json_field("app_secret", "/app_secret");
        let raw = request.into_raw();
        assert_eq!(raw.secrets.len(), 2);
        assert_eq!(raw.secrets[0].secret, "token");
        assert!(matches!(&raw.secrets[1].place, SecretPlace::JsonField(p) if p == "/app_secret"));
    }
}
