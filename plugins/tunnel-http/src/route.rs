//! Validating the container's relative URL, joining it onto the configured
//! target, and filtering hop-by-hop headers.

use pincer_plugin_sdk::types::Header;

/// Headers that describe one connection, not the message; never forwarded.
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// Checks the configured target (`http(s)://authority[/path]`) and returns it
/// without a trailing slash, ready for [`join`].
pub fn parse_target(target: &str) -> Result<String, String> {
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
        .ok_or_else(|| format!("`target` must start with http:// or https://, got {target:?}"))?;
    let authority = rest.split('/').next().unwrap_or_default();
    if authority.is_empty() || authority.contains('@') {
        return Err(format!(
            "`target` must name a host (without credentials), got {target:?}"
        ));
    }
    if target.contains(['?', '#']) || target.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "`target` must be a plain base URL without query, fragment or whitespace, got {target:?}"
        ));
    }
    Ok(target.trim_end_matches('/').to_owned())
}

/// Validates the request's URL, which must be relative (`/path?query`), and
/// returns it without any fragment.
pub fn relative_url(url: &str) -> Result<&str, String> {
    if let Some(c) = url.chars().find(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!("URL contains the character {c:?}"));
    }
    let url = url.split('#').next().unwrap_or_default();
    if !url.starts_with('/') {
        return Err(format!(
            "URL must be relative and start with `/`, got {url:?}"
        ));
    }
    let path = url.split('?').next().unwrap_or_default();
    if path.contains("//") {
        return Err(format!("URL path must not contain `//`, got {url:?}"));
    }
    // Servers decode %2e and %2f, and some treat `\` as `/`: check what they will see.
    let decoded = percent_decode(path);
    if decoded.chars().any(char::is_control) {
        return Err("URL path encodes a control character".into());
    }
    if decoded.split(['/', '\\']).any(|segment| segment == "..") {
        return Err(format!("URL must not contain `..` segments, got {url:?}"));
    }
    Ok(url)
}

/// Joins a validated relative URL onto a target from [`parse_target`].
pub fn join(target: &str, relative: &str) -> String {
    format!("{target}{relative}")
}

/// Drops hop-by-hop headers: the fixed list, `proxy-*`, and any header the
/// `Connection` header names.
pub fn end_to_end(headers: Vec<Header>) -> Vec<Header> {
    let named: Vec<String> = headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| h.value.split(','))
        .map(|token| token.trim().to_ascii_lowercase())
        .filter(|token| !token.is_empty())
        .collect();
    headers
        .into_iter()
        .filter(|h| {
            let name = h.name.to_ascii_lowercase();
            !(HOP_BY_HOP.contains(&name.as_str())
                || name.starts_with("proxy-")
                || named.contains(&name))
        })
        .collect()
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes.get(i + 1..i + 3).and_then(|pair| {
            std::str::from_utf8(pair)
                .ok()
                .and_then(|pair| u8::from_str_radix(pair, 16).ok())
        });
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(name: &str, value: &str) -> Header {
        Header {
            name: name.into(),
            value: value.into(),
        }
    }

    #[test]
    fn accepts_relative_urls() {
        assert_eq!(relative_url("/"), Ok("/"));
        assert_eq!(
            relative_url("/api/v1/x?q=1&r=a/b"),
            Ok("/api/v1/x?q=1&r=a/b")
        );
        assert_eq!(relative_url("/a#frag"), Ok("/a"));
        assert_eq!(relative_url("/a..b/c."), Ok("/a..b/c."));
        // `//` in the query is data, not a path.
        assert_eq!(relative_url("/go?to=http://x"), Ok("/go?to=http://x"));
    }

    #[test]
    fn rejects_escapes() {
        for bad in [
            "",
            "api",
            "http://evil.example/",
            "https://127.0.0.1/",
            "//evil.example/x",
            "/a//b",
            "/../etc/passwd",
            "/a/..",
            "/a/%2e%2e/b",
            "/a/%2E./b",
            "/a/..%2fb",
            "/a\\..\\b",
            "/a\nb",
            "/a\rHost: x",
            "/a b",
            "/a%00",
            "/\u{7f}",
        ] {
            assert!(relative_url(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn targets() {
        assert_eq!(
            parse_target("http://127.0.0.1:3000/"),
            Ok("http://127.0.0.1:3000".into())
        );
        assert_eq!(
            parse_target("https://localhost/api/"),
            Ok("https://localhost/api".into())
        );
        for bad in [
            "127.0.0.1:3000",
            "ftp://localhost",
            "http://",
            "http:///x",
            "http://u:p@localhost",
            "http://localhost/?a",
            "http://local host",
        ] {
            assert!(parse_target(bad).is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn joins() {
        let target = parse_target("http://127.0.0.1:3000/api/").expect("valid target");
        let relative = relative_url("/x?y=1").expect("valid relative URL");
        assert_eq!(join(&target, relative), "http://127.0.0.1:3000/api/x?y=1");
    }

    #[test]
    fn drops_hop_by_hop_headers() {
        let kept = end_to_end(vec![
            header("Content-Type", "application/json"),
            header("Connection", "keep-alive, X-Secret"),
            header("Keep-Alive", "timeout=5"),
            header("Proxy-Authorization", "Basic x"),
            header("TE", "trailers"),
            header("Trailer", "x"),
            header("Transfer-Encoding", "chunked"),
            header("Upgrade", "websocket"),
            header("Host", "evil"),
            header("x-secret", "1"),
            header("Authorization", "Bearer t"),
        ]);
        let names: Vec<&str> = kept.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["Content-Type", "Authorization"]);
    }
}
