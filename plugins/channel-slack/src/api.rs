//! Slack Web API responses (`{"ok": true, …}` / `{"ok": false, "error": …}`)
//! and what their failures mean for the host.

use serde_json::Value;

/// Why a Web API call failed, in the host's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Slack asked to slow down; retry after this long.
    RetryLater { after_ms: u32, reason: String },
    /// Slack failed or answered nonsense; worth retrying.
    Upstream(String),
    /// Slack refused for good (a bad token, an unknown channel…).
    Rejected { error: String, message: String },
}

impl Failure {
    /// Slack's `error` code, for refusals.
    pub fn error_code(&self) -> Option<&str> {
        match self {
            Failure::Rejected { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// `Retry-After` (seconds) in milliseconds; one second when absent or unreadable.
pub fn retry_after_ms(header: Option<&str>) -> u32 {
    header
        .and_then(|value| value.trim().parse::<u32>().ok())
        .map_or(1000, |secs| secs.saturating_mul(1000).max(1000))
}

/// Checks one Web API response of `method`; `Ok` is the parsed body of an
/// `"ok": true` answer.
pub fn check(
    method: &str,
    status: u16,
    retry_after: Option<&str>,
    body: &[u8],
) -> Result<Value, Failure> {
    if status == 429 {
        return Err(Failure::RetryLater {
            after_ms: retry_after_ms(retry_after),
            reason: format!("Slack rate-limited {method} (HTTP 429)"),
        });
    }
    if !(200..300).contains(&status) {
        let message = format!(
            "Slack answered {method} with HTTP {status}: {}",
            snippet(body)
        );
        // Client errors other than timeouts will not heal by retrying.
        return Err(if (400..500).contains(&status) && status != 408 {
            Failure::Rejected {
                error: format!("http_{status}"),
                message,
            }
        } else {
            Failure::Upstream(message)
        });
    }
    let value: Value = serde_json::from_slice(body).map_err(|err| {
        Failure::Upstream(format!(
            "Slack's answer to {method} is not JSON ({err}): {}",
            snippet(body)
        ))
    })?;
    match value.get("ok").and_then(Value::as_bool) {
        Some(true) => Ok(value),
        Some(false) => Err(refusal(method, &value, retry_after)),
        None => Err(Failure::Upstream(format!(
            "Slack's answer to {method} has no `ok` field: {}",
            snippet(body)
        ))),
    }
}

/// An `"ok": false` answer.
fn refusal(method: &str, value: &Value, retry_after: Option<&str>) -> Failure {
    let error = value
        .get("error")
        .and_then(Value::as_str)
        .filter(|e| !e.is_empty())
        .unwrap_or("unknown_error")
        .to_string();
    match error.as_str() {
        "ratelimited" | "rate_limited" => Failure::RetryLater {
            after_ms: retry_after_ms(retry_after),
            reason: format!("Slack rate-limited {method} ({error})"),
        },
        "internal_error"
        | "fatal_error"
        | "service_unavailable"
        | "request_timeout"
        | "team_added_to_org" => Failure::Upstream(format!("Slack failed {method}: {error}")),
        _ if permanent(&error) => {
            let mut message = format!("Slack refused {method}: {error}");
            if let Some(hint) = hint(&error, value) {
                message.push_str(" (");
                message.push_str(&hint);
                message.push(')');
            }
            Failure::Rejected { error, message }
        }
        _ => Failure::Upstream(format!("Slack refused {method}: {error}")),
    }
}

/// Errors that retrying will not fix.
fn permanent(error: &str) -> bool {
    matches!(
        error,
        "channel_not_found"
            | "not_in_channel"
            | "is_archived"
            | "msg_too_long"
            | "no_text"
            | "too_many_attachments"
            | "invalid_blocks"
            | "invalid_blocks_format"
            | "restricted_action"
            | "restricted_action_read_only_channel"
            | "restricted_action_thread_only_channel"
            | "restricted_action_non_threadable_channel"
            | "cannot_reply_to_message"
            | "thread_not_found"
            | "message_not_found"
            | "invalid_name"
            | "bad_timestamp"
            | "too_many_emoji"
            | "too_many_reactions"
            | "already_reacted"
            | "no_reaction"
            | "invalid_auth"
            | "not_authed"
            | "account_inactive"
            | "token_revoked"
            | "token_expired"
            | "no_permission"
            | "not_allowed_token_type"
            | "missing_scope"
            | "ekm_access_denied"
            | "team_access_not_granted"
            | "org_login_required"
            | "access_denied"
            | "invalid_arguments"
            | "invalid_arg_name"
            | "invalid_array_arg"
            | "invalid_charset"
            | "invalid_form_data"
            | "invalid_post_type"
            | "missing_post_type"
            | "method_deprecated"
            | "deprecated_endpoint"
            | "two_factor_setup_required"
            | "forbidden_team"
            | "missing_args"
            | "insecure_request"
    )
}

fn hint(error: &str, value: &Value) -> Option<String> {
    let field = |name: &str| value.get(name).and_then(Value::as_str).map(str::to_string);
    Some(match error {
        "missing_scope" => {
            let mut hint = format!(
                "the bot token needs the scope {}",
                field("needed").unwrap_or_else(|| "named by Slack".into())
            );
            if let Some(provided) = field("provided") {
                hint.push_str(&format!("; it has {provided}"));
            }
            hint.push_str("; add it under OAuth & Permissions and reinstall the app");
            hint
        }
        "not_in_channel" => "invite the bot to the channel first".into(),
        "channel_not_found" => "no such channel, or the bot cannot see it".into(),
        "is_archived" => "the channel is archived".into(),
        "msg_too_long" => "the text is too long for one Slack message".into(),
        "invalid_auth" | "not_authed" | "token_revoked" | "token_expired" | "account_inactive" => {
            "check `bot_token`: a Bot User OAuth Token, xoxb-…".into()
        }
        "not_allowed_token_type" => "this call needs the bot token (xoxb-…)".into(),
        _ => return None,
    })
}

/// The start of a response body, for error messages.
pub fn snippet(body: &[u8]) -> String {
    const MAX: usize = 200;
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".into();
    }
    match text.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const POST: &str = "chat.postMessage";

    fn post(status: u16, retry_after: Option<&str>, body: &str) -> Result<Value, Failure> {
        check(POST, status, retry_after, body.as_bytes())
    }

    fn rejected(result: Result<Value, Failure>) -> (String, String) {
        match result {
            Err(Failure::Rejected { error, message }) => (error, message),
            other => panic!("expected rejected, got {other:?}"),
        }
    }

    #[test]
    fn success_from_slacks_docs() {
        // https://api.slack.com/methods/chat.postMessage, "Typical success response"
        let body = r#"{
            "ok": true,
            "channel": "C123ABC456",
            "ts": "1503435956.000247",
            "message": {
                "text": "Here's a message for you",
                "username": "ecto1",
                "bot_id": "B123ABC456",
                "attachments": [{ "text": "This is an attachment", "id": 1, "fallback": "This is an attachment's fallback" }],
                "type": "message",
                "subtype": "bot_message",
                "ts": "1503435956.000247"
            }
        }"#;
        let value = post(200, None, body).expect("ok");
        assert_eq!(value["ts"], "1503435956.000247");
    }

    #[test]
    fn http_429_retries_after_the_header() {
        assert_eq!(
            post(429, Some("30"), ""),
            Err(Failure::RetryLater {
                after_ms: 30_000,
                reason: "Slack rate-limited chat.postMessage (HTTP 429)".into()
            })
        );
        assert!(matches!(
            post(429, None, ""),
            Err(Failure::RetryLater { after_ms: 1000, .. })
        ));
        assert!(matches!(
            post(429, Some("soon"), ""),
            Err(Failure::RetryLater { after_ms: 1000, .. })
        ));
        assert_eq!(retry_after_ms(Some("0")), 1000);
        assert_eq!(retry_after_ms(Some(" 2 ")), 2000);
        assert_eq!(retry_after_ms(Some("4294967295")), u32::MAX);
    }

    #[test]
    fn ratelimited_error_retries() {
        assert!(matches!(
            post(200, Some("3"), r#"{"ok":false,"error":"ratelimited"}"#),
            Err(Failure::RetryLater { after_ms: 3000, .. })
        ));
    }

    #[test]
    fn server_errors_are_upstream() {
        for status in [500, 502, 503, 504] {
            assert!(matches!(
                post(status, None, "<html>bad gateway</html>"),
                Err(Failure::Upstream(_))
            ));
        }
        assert!(matches!(post(408, None, ""), Err(Failure::Upstream(_))));
        assert!(matches!(
            post(200, None, r#"{"ok":false,"error":"internal_error"}"#),
            Err(Failure::Upstream(_))
        ));
        assert!(matches!(
            post(200, None, r#"{"ok":false,"error":"something_new"}"#),
            Err(Failure::Upstream(_))
        ));
        assert!(matches!(
            post(200, None, r#"{"ok":false}"#),
            Err(Failure::Upstream(m)) if m.contains("unknown_error")
        ));
    }

    #[test]
    fn garbage_is_upstream_not_a_panic() {
        for body in ["", "not json", "[1]", r#"{"channel":"C1"}"#, "\u{0}\u{1}"] {
            assert!(
                matches!(post(200, None, body), Err(Failure::Upstream(_))),
                "{body:?}"
            );
        }
        assert!(matches!(
            check(POST, 200, None, &[0xff, 0xfe]),
            Err(Failure::Upstream(_))
        ));
    }

    #[test]
    fn refusals_are_rejected_and_named() {
        for error in [
            "channel_not_found",
            "not_in_channel",
            "is_archived",
            "msg_too_long",
            "invalid_auth",
            "not_authed",
            "account_inactive",
            "token_revoked",
            "no_text",
        ] {
            let (code, message) = rejected(post(
                200,
                None,
                &format!(r#"{{"ok":false,"error":"{error}"}}"#),
            ));
            assert_eq!(code, error);
            assert!(message.contains(error), "{message}");
            assert!(message.contains(POST), "{message}");
        }
        let (_, message) = rejected(post(200, None, r#"{"ok":false,"error":"not_in_channel"}"#));
        assert!(message.contains("invite the bot"), "{message}");
    }

    #[test]
    fn missing_scope_names_the_needed_scope() {
        // The shape Slack documents for missing_scope.
        let body = r#"{"ok":false,"error":"missing_scope","needed":"chat:write","provided":"app_mentions:read,im:history"}"#;
        let (code, message) = rejected(post(200, None, body));
        assert_eq!(code, "missing_scope");
        assert!(message.contains("chat:write"), "{message}");
        assert!(
            message.contains("app_mentions:read,im:history"),
            "{message}"
        );
    }

    #[test]
    fn client_errors_are_rejected() {
        let (code, message) = rejected(post(404, None, "no such method"));
        assert_eq!(code, "http_404");
        assert!(message.contains("HTTP 404") && message.contains("no such method"));
    }

    #[test]
    fn snippets_are_bounded() {
        assert_eq!(snippet(b"short"), "short");
        assert_eq!(snippet(b""), "(empty body)");
        assert_eq!(snippet("é".repeat(300).as_bytes()).chars().count(), 201);
    }
}
