//! Every request passes here: the `Host` must be the console's own (DNS
//! rebinding), pages need a signed-in session, and a request that changes
//! anything must come from the console's own origin and carry the
//! session's CSRF token. Every answer gets the security headers.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};

use super::{Console, SESSION_COOKIE, auth};

/// Largest form body read to find its CSRF token.
const MAX_FORM_BYTES: usize = 1 << 20;

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// Paths served without a session.
fn is_public(path: &str) -> bool {
    matches!(path, "/login" | "/signin") || path.starts_with("/static/")
}

pub async fn guard(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let mut response = check(&console, request, next).await;
    let headers = response.headers_mut();
    for (name, value) in [
        (header::CONTENT_SECURITY_POLICY, CSP),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_FRAME_OPTIONS, "DENY"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
    headers
        .entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    response
}

fn refuse(status: StatusCode, why: &str) -> Response {
    (status, format!("{why}\n")).into_response()
}

async fn check(console: &Console, request: Request, next: Next) -> Response {
    let Some(host) = header_text(request.headers(), header::HOST) else {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "a request needs a Host header",
        );
    };
    let host = host.to_ascii_lowercase();
    if !console.hosts.contains(&host) {
        return refuse(
            StatusCode::MISDIRECTED_REQUEST,
            "this console does not answer for that Host (add it to `web.hosts`)",
        );
    }
    let path = request.uri().path().to_owned();
    let reads = matches!(*request.method(), Method::GET | Method::HEAD);
    if !reads && let Err(why) = same_origin(request.headers(), &host, console.secure) {
        return refuse(StatusCode::FORBIDDEN, &why);
    }
    if is_public(&path) {
        return next.run(request).await;
    }
    let session = cookie(request.headers(), SESSION_COOKIE)
        .map(|c| console.auth.session(c, crate::db::now_ms()));
    let session = match session {
        Some(Ok(Some(session))) => session,
        Some(Err(e)) => {
            tracing::error!("web console: {e}");
            return refuse(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the sign-in store cannot be read",
            );
        }
        _ if reads => return Redirect::to("/signin").into_response(),
        _ => return refuse(StatusCode::FORBIDDEN, "sign in first (`pincer web login`)"),
    };
    let mut request = request;
    if !reads {
        let (parts, body) = request.into_parts();
        let bytes = match axum::body::to_bytes(body, MAX_FORM_BYTES).await {
            Ok(bytes) => bytes,
            Err(_) => {
                return refuse(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "the form is larger than 1 MiB",
                );
            }
        };
        let sent = header_text(&parts.headers, "x-csrf-token".parse().ok())
            .map(str::to_owned)
            .or_else(|| {
                url::form_urlencoded::parse(&bytes)
                    .find(|(k, _)| k == "csrf")
                    .map(|(_, v)| v.into_owned())
            });
        if !sent.is_some_and(|sent| auth::same_secret(&sent, &session.csrf)) {
            return refuse(
                StatusCode::FORBIDDEN,
                "missing or wrong CSRF token: reload the page",
            );
        }
        request = Request::from_parts(parts, Body::from(bytes));
    }
    request.extensions_mut().insert(session);
    next.run(request).await
}

/// A state-changing request must come from the console's own pages: a
/// browser says where from in `Sec-Fetch-Site` and `Origin`.
fn same_origin(headers: &HeaderMap, host: &str, secure: bool) -> Result<(), String> {
    let site = header_text(headers, "sec-fetch-site".parse().ok());
    if let Some(site) = site
        && site != "same-origin"
    {
        return Err(format!(
            "cross-origin request refused (Sec-Fetch-Site: {site})"
        ));
    }
    if let Some(origin) = header_text(headers, Some(header::ORIGIN)) {
        // Under `Referrer-Policy: no-referrer` a browser's own form post
        // says `Origin: null`; only its `Sec-Fetch-Site` (which no page can
        // set) vouches for it. A `null` without it is refused.
        if origin == "null" && site == Some("same-origin") {
            return Ok(());
        }
        let scheme = if secure { "https" } else { "http" };
        if !origin.eq_ignore_ascii_case(&format!("{scheme}://{host}")) {
            return Err(format!("cross-origin request refused (Origin: {origin})"));
        }
    }
    Ok(())
}

fn header_text(headers: &HeaderMap, name: impl Into<Option<header::HeaderName>>) -> Option<&str> {
    headers.get(name.into()?)?.to_str().ok()
}

/// The value of cookie `name`.
pub fn cookie<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// The `Set-Cookie` of a new session (`Secure` behind TLS).
pub fn session_cookie(value: &str, ttl: std::time::Duration, secure: bool) -> String {
    format!(
        "{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{}",
        ttl.as_secs(),
        if secure { "; Secure" } else { "" }
    )
}

/// The `Set-Cookie` that ends it in the browser.
pub fn cleared_cookie() -> String {
    format!("{SESSION_COOKIE}=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0")
}
