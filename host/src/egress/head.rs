//! The head of one proxy request, read strictly: a `CONNECT host:port`
//! (an opaque tunnel) or an absolute-form plain-HTTP request
//! (`GET http://host/path HTTP/1.1`), whose head is rewritten for the
//! origin server (RFC 9112 §3.2.2: the request-target's authority is what
//! is matched and connected to; `Host` is replaced by it).

use crate::hosts::normalized_host;

/// The largest head read, request line and headers together.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
const MAX_HEADERS: usize = 100;

/// Headers that concern the hop to the proxy, never forwarded (and those
/// the `Connection` header names). `Transfer-Encoding` is kept: the body is
/// relayed as it comes, so its framing must reach the origin server.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-authenticate",
    "proxy-connection",
    "te",
    "trailer",
    "upgrade",
    "host",
];

sentence_error! {
    /// Why a request is refused before any policy is asked: what the
    /// client reads after `403 Forbidden`.
    pub struct BadHead;
}

/// What a client asked the proxy for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// `CONNECT` or the plain-HTTP method.
    pub method: String,
    /// As [`normalized_host`] writes it.
    pub host: String,
    pub port: u16,
    /// For plain HTTP: the head to send the origin server. `None` for a
    /// tunnel.
    pub forward: Option<Vec<u8>>,
    /// For plain HTTP: the request as a tunnel plugin is handed it.
    pub plain: Option<Plain>,
}

/// A plain-HTTP request's parts past its authority.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plain {
    /// Path and query, starting with `/`.
    pub path: String,
    /// The end-to-end headers (no `Host`, hop-by-hop ones dropped).
    pub headers: Vec<(String, String)>,
    /// `Content-Length`, if given.
    pub content_length: Option<u64>,
    /// A `Transfer-Encoding` is given.
    pub chunked: bool,
}

impl Head {
    /// `host:port` as matched and shown.
    pub fn target(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Where the head ends in `buffer` (the index after its blank line), if it
/// is complete.
pub fn end_of_head(buffer: &[u8]) -> Option<usize> {
    buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// Parses a complete head (`buffer[..end_of_head]`).
///
/// # Errors
/// Anything not a well-formed CONNECT or absolute-form HTTP request.
pub fn parse(head: &[u8]) -> Result<Head, BadHead> {
    // A bare LF or CR anywhere is refused: only CRLF ends a line, so a
    // line cannot be smuggled past the parser.
    let text = std::str::from_utf8(head)
        .map_err(|_| BadHead::from("the request head is not UTF-8 text"))?;
    if text
        .split("\r\n")
        .any(|line| line.contains('\n') || line.contains('\r'))
    {
        return Err("a line of the request ends in a bare CR or LF; lines end in CRLF".into());
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        Ok(httparse::Status::Partial) => return Err("the request head is incomplete".into()),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(format!("the request has more than {MAX_HEADERS} headers").into());
        }
        Err(e) => return Err(format!("the request is not valid HTTP/1.x ({e})").into()),
    }
    let (Some(method), Some(target), Some(version)) =
        (request.method, request.path, request.version)
    else {
        return Err("the request line is incomplete".into());
    };
    check_framing(request.headers)?;
    if method == "CONNECT" {
        let (host, port) = authority(target, None)?;
        return Ok(Head {
            method: method.to_owned(),
            host,
            port,
            forward: None,
            plain: None,
        });
    }
    let Some(rest) = target.strip_prefix("http://") else {
        return Err(if target.starts_with("https://") {
            "an https:// URL goes through `CONNECT host:443`, not a plain request to the proxy"
                .into()
        } else {
            "this is a proxy: ask for an absolute http:// URL or `CONNECT host:port`".into()
        });
    };
    let (authority_text, path) = match rest.find(['/', '?']) {
        Some(at) => (&rest[..at], &rest[at..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let (host, port) = authority(authority_text, Some(80))?;
    let mut forward = format!("{method} {path} HTTP/1.{version}\r\n");
    forward.push_str(&format!(
        "Host: {}\r\n",
        if port == 80 {
            host.clone()
        } else {
            format!("{host}:{port}")
        }
    ));
    let named_by_connection: Vec<String> = request
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| {
            String::from_utf8_lossy(h.value)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .collect();
    let mut kept = Vec::new();
    for header in request.headers.iter() {
        let name = header.name.to_ascii_lowercase();
        if HOP_BY_HOP.contains(&name.as_str()) || named_by_connection.contains(&name) {
            continue;
        }
        let value = String::from_utf8_lossy(header.value);
        forward.push_str(header.name);
        forward.push_str(": ");
        forward.push_str(&value);
        forward.push_str("\r\n");
        if name != "host" {
            kept.push((header.name.to_owned(), value.into_owned()));
        }
    }
    forward.push_str("Connection: close\r\n\r\n");
    let content_length = match request
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
    {
        Some(h) => Some(
            std::str::from_utf8(h.value)
                .ok()
                .and_then(|v| v.trim().parse::<u64>().ok())
                .ok_or_else(|| BadHead::from("the Content-Length is not a number"))?,
        ),
        None => None,
    };
    let chunked = request
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    Ok(Head {
        method: method.to_owned(),
        host,
        port,
        forward: Some(forward.into_bytes()),
        plain: Some(Plain {
            path,
            headers: kept,
            content_length,
            chunked,
        }),
    })
}

/// `Transfer-Encoding` beside `Content-Length`, or two different lengths,
/// is how a request is smuggled past one reader to another: refused.
fn check_framing(headers: &[httparse::Header<'_>]) -> Result<(), BadHead> {
    let values = |name: &str| -> Vec<&[u8]> {
        headers
            .iter()
            .filter(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
            .collect()
    };
    let lengths = values("content-length");
    let chunked = values("transfer-encoding");
    if !lengths.is_empty() && !chunked.is_empty() {
        return Err("the request has both Transfer-Encoding and Content-Length".into());
    }
    if lengths.windows(2).any(|w| w[0] != w[1]) {
        return Err("the request has Content-Length headers that differ".into());
    }
    Ok(())
}

/// `host:port` (or `host` with `default_port`), the host normalized.
fn authority(text: &str, default_port: Option<u16>) -> Result<(String, u16), BadHead> {
    if text.contains('@') {
        return Err(format!("`{text}`: credentials in the authority are not accepted").into());
    }
    let (host, port) = if let Some(end) = text.strip_prefix('[').and_then(|_| text.find(']')) {
        let (host, rest) = text.split_at(end + 1);
        (host, rest.strip_prefix(':'))
    } else {
        match text.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (text, None),
        }
    };
    let port = match (port, default_port) {
        (Some(port), _) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or_else(|| BadHead(format!("`{text}`: `{port}` is not a port")))?,
        (None, Some(port)) => port,
        (None, None) => return Err(format!("`{text}`: CONNECT needs host:port").into()),
    };
    let host = normalized_host(host).map_err(|e| BadHead(e.0))?;
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(text: &str) -> Result<Head, BadHead> {
        parse(text.as_bytes())
    }

    #[test]
    fn connect_and_absolute_form_are_read_and_rewritten() {
        let h = head("CONNECT PyPI.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n").unwrap();
        assert_eq!(
            (h.host.as_str(), h.port, h.forward),
            ("pypi.org", 443, None)
        );
        let h = head(
            "GET http://example.com:8080/a?b=1 HTTP/1.1\r\nHost: evil.test\r\n\
             Proxy-Authorization: Basic eA==\r\nConnection: keep-alive, X-Drop\r\n\
             X-Drop: 1\r\nAccept: */*\r\n\r\n",
        )
        .unwrap();
        assert_eq!(h.target(), "example.com:8080");
        assert_eq!(
            String::from_utf8(h.forward.unwrap()).unwrap(),
            "GET /a?b=1 HTTP/1.1\r\nHost: example.com:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let h = head("GET http://0x7f.1/ HTTP/1.0\r\n\r\n").unwrap();
        assert_eq!(h.target(), "127.0.0.1:80");
        assert!(
            String::from_utf8(h.forward.unwrap())
                .unwrap()
                .starts_with("GET / HTTP/1.0\r\nHost: 127.0.0.1\r\n")
        );
        let h = head("CONNECT [::ffff:127.0.0.1]:22 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(h.target(), "127.0.0.1:22");
        let h = head("GET http://example.com?q HTTP/1.1\r\n\r\n").unwrap();
        assert!(
            String::from_utf8(h.forward.unwrap())
                .unwrap()
                .starts_with("GET /?q HTTP/1.1\r\n")
        );
    }

    #[test]
    fn malformed_and_smuggling_requests_are_refused() {
        for (text, why) in [
            (
                "CONNECT evil.com:443\r\nHost: x HTTP/1.1\r\n\r\n",
                "not valid HTTP",
            ),
            ("CONNECT a.com:443 HTTP/1.1\nX: y\r\n\r\n", "bare CR or LF"),
            (
                "CONNECT a.com:443 HTTP/1.1\r\nX: y\rZ: 1\r\n\r\n",
                "bare CR or LF",
            ),
            ("CONNECT a.com HTTP/1.1\r\n\r\n", "needs host:port"),
            ("CONNECT a.com:0 HTTP/1.1\r\n\r\n", "not a port"),
            ("CONNECT a.com:99999 HTTP/1.1\r\n\r\n", "not a port"),
            ("CONNECT u:p@a.com:443 HTTP/1.1\r\n\r\n", "credentials"),
            (
                "GET / HTTP/1.1\r\nHost: a.com\r\n\r\n",
                "absolute http:// URL",
            ),
            ("GET https://a.com/ HTTP/1.1\r\n\r\n", "CONNECT host:443"),
            (
                "POST http://a.com/ HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                "both Transfer-Encoding and Content-Length",
            ),
            (
                "POST http://a.com/ HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n",
                "differ",
            ),
            (
                "CONNECT 256.0.0.1:443 HTTP/1.1\r\n\r\n",
                "not an IPv4 address",
            ),
            ("CONNECT a b:443 HTTP/1.1\r\n\r\n", "not valid HTTP"),
        ] {
            let refused = head(text).expect_err(text);
            assert!(refused.0.contains(why), "{text:?}: {refused}");
        }
    }

    #[test]
    fn a_head_ends_at_its_blank_line() {
        assert_eq!(end_of_head(b"CONNECT a:1 HTTP/1.1\r\n\r\nrest"), Some(24));
        assert_eq!(end_of_head(b"CONNECT a:1 HTTP/1.1\r\n"), None);
    }
}
