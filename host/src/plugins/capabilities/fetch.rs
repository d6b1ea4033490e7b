//! A plugin's outbound HTTP request, as every WIT release's `http.fetch`
//! hands it in: refused without an `http` grant (audited), the secrets it
//! names placed by the host where their bindings allow, sent through the
//! egress allowlist, a named value captured from the answer as a secret,
//! and every secret value scrubbed from what comes back.

use std::sync::Arc;
use std::time::Duration;

use super::http::{self, HttpError, Response, Streaming};
use super::secrets::{Capture, SecretError, Use};
use crate::plugins::state::Grants;

/// What the plugin asks to send.
pub struct PluginRequest {
    pub method: String,
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub timeout_ms: Option<u32>,
    /// Secrets the host puts in, by name and place.
    pub secrets: Vec<Use>,
    /// A JSON member of a 2xx answer to keep as a secret.
    pub capture: Option<Capture>,
}

/// Sends `request` for the plugin `grants` belong to.
pub async fn fetch(grants: Arc<Grants>, mut request: PluginRequest) -> Result<Response, HttpError> {
    let secrets = &grants.secrets;
    let capture = request.capture.take();
    let (egress, outgoing) = prepared(&grants, request)?;
    // A secret in the query may come back quoted in an error message.
    let mut response = egress
        .fetch(outgoing)
        .await
        .map_err(|e| scrubbed(e, &|m| secrets.scrub_text(&m)))?;
    if let Some(capture) = capture
        && (200..300).contains(&response.status)
    {
        secrets
            .capture(&capture, &mut response.body)
            .map_err(|e| HttpError::Transport(refusal(&|w| (grants.on_denied)(w), e)))?;
    }
    secrets.scrub(&mut response.headers, &mut response.body);
    Ok(response)
}

/// Sends `request` as [`fetch`] does and hands back its body as a stream
/// (a file the host writes to disk as it arrives). Nothing is captured;
/// the headers are scrubbed, the body is not (it goes to a file, not back
/// to the plugin).
pub async fn open(grants: Arc<Grants>, request: PluginRequest) -> Result<Streaming, HttpError> {
    let secrets = &grants.secrets;
    let (egress, outgoing) = prepared(&grants, request)?;
    let mut streaming = egress
        .open(outgoing)
        .await
        .map_err(|e| scrubbed(e, &|m| secrets.scrub_text(&m)))?;
    secrets.scrub(&mut streaming.headers, &mut Vec::new());
    Ok(streaming)
}

/// The plugin's egress and its request with the named secrets placed;
/// refused (and audited) without an `http` grant or where a secret's
/// bindings do not allow it.
fn prepared(
    grants: &Grants,
    request: PluginRequest,
) -> Result<(http::HttpEgress, http::Request), HttpError> {
    let denied = |what: &str| (grants.on_denied)(what);
    let Some(egress) = grants.http.clone() else {
        let what = "this plugin's manifest requests no http capability".to_string();
        let url = url::Url::parse(&request.url)
            .map(|u| http::shown(&u))
            .unwrap_or_else(|_| "an unparsable URL".to_string());
        denied(&format!("http {url}: {what}"));
        return Err(HttpError::Denied(what));
    };
    let PluginRequest {
        method,
        mut url,
        mut headers,
        mut body,
        timeout_ms,
        secrets: uses,
        capture: _,
    } = request;
    grants
        .secrets
        .apply(
            &uses,
            &method,
            &mut url,
            &mut headers,
            &mut body,
            egress.reach(),
        )
        .map_err(|e| HttpError::InvalidRequest(refusal(&denied, e)))?;
    let outgoing = http::Request {
        method,
        url,
        headers,
        body,
        timeout: timeout_ms.map(|ms| Duration::from_millis(ms.into())),
        carries_secrets: !uses.is_empty(),
    };
    Ok((egress, outgoing))
}

/// Why a secret could not be used, reporting the refusals that are denials.
fn refusal(denied: &dyn Fn(&str), e: SecretError) -> String {
    match &e {
        SecretError::Denied(name) => {
            denied(&format!("secret `{name}`: not a secret of this plugin"))
        }
        SecretError::NotBound(why) => denied(why),
        _ => {}
    }
    e.to_string()
}

fn scrubbed(e: HttpError, scrub: &dyn Fn(String) -> String) -> HttpError {
    match e {
        HttpError::Denied(m) => HttpError::Denied(scrub(m)),
        HttpError::InvalidRequest(m) => HttpError::InvalidRequest(scrub(m)),
        HttpError::Transport(m) => HttpError::Transport(scrub(m)),
        other => other,
    }
}
