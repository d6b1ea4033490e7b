//! Open API answers (`{"code": 0, "msg": "success", "data": {…}}`) and what
//! their failures mean for the host.
//!
//! Gateway codes, Feishu's "服务端错误码说明 / Server error codes"
//! (https://open.feishu.cn/document/server-docs/api-call-guide/generic-error-code),
//! as Lark's own CLI names them (larksuite/cli, `internal/output/lark_errors.go`):
//! 99991400 request frequency limit; 99991661 no access token
//! (`Authorization` missing or empty); 99991663 the access token is invalid
//! (a tenant token expired or revoked); 99991668 a user access token is
//! invalid (not expected with a tenant token, but a fresh token costs one
//! retry); 99991672 the app has not been granted a scope the API needs.
//! Rate limits answer HTTP 429 with `x-ogw-ratelimit-reset` (seconds until
//! the quota refills), per "频控策略 / Rate limits"
//! (https://open.feishu.cn/document/server-docs/api-call-guide/frequency-control).
//! 230020 is not settled: remembered as IM's send-rate limit of one chat
//! (and third-party code retries it), while lark-oapi 1.7.5 files it with
//! the permanent "target revoked" codes (`lark_oapi/channel/errors.py`). It
//! is retried with the outbox's growing backoff, which ends after a dozen
//! attempts, instead of as a rate limit, which would be retried forever.

use serde_json::Value;

pub const RATE_LIMITED: i64 = 99_991_400;
/// Codes after which a fresh tenant token is worth one retry: the three
/// above, and 99991664-99991666, which lark-oapi 1.7.5 counts as invalid
/// tokens too (`lark_oapi/channel/errors.py`).
pub const TOKEN_INVALID: [i64; 6] = [
    99_991_663, 99_991_661, 99_991_668, 99_991_664, 99_991_665, 99_991_666,
];
const CHAT_RATE_LIMITED_OR_GONE: i64 = 230_020;
const MISSING_SCOPE: i64 = 99_991_672;

/// Why an Open API call failed, in the host's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// Asked to slow down; retry after this long.
    RetryLater { after_ms: u32, reason: String },
    /// Feishu failed or answered nonsense; worth retrying.
    Upstream(String),
    /// The tenant token was refused: fetch a fresh one.
    TokenInvalid(String),
    /// Refused for good (no permission, unknown chat or message…).
    Rejected { code: i64, message: String },
}

/// `x-ogw-ratelimit-reset` (seconds) in milliseconds; 1 s when absent.
pub fn reset_ms(header: Option<&str>) -> u32 {
    header
        .and_then(|v| v.trim().parse::<u32>().ok())
        .map_or(1000, |secs| secs.saturating_mul(1000).max(1000))
}

pub fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &text[..i]),
        None => text.to_string(),
    }
}

/// Checks one answer of `what`; `Ok` is the parsed body of a `code: 0`.
pub fn check(what: &str, status: u16, reset: Option<&str>, body: &[u8]) -> Result<Value, Failure> {
    let value: Option<Value> = serde_json::from_slice(body).ok();
    let code = value
        .as_ref()
        .and_then(|v| v.get("code"))
        .and_then(Value::as_i64);
    let msg = value
        .as_ref()
        .and_then(|v| v.get("msg"))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if status == 429 || code == Some(RATE_LIMITED) {
        return Err(Failure::RetryLater {
            after_ms: reset_ms(reset),
            reason: format!(
                "Feishu rate-limited {what} (HTTP {status}{})",
                code.map(|c| format!(", code {c}")).unwrap_or_default()
            ),
        });
    }
    if let Some(code) = code.filter(|c| TOKEN_INVALID.contains(c)) {
        return Err(Failure::TokenInvalid(format!(
            "Feishu refused the tenant access token for {what}: code {code}: {msg}"
        )));
    }
    if code == Some(CHAT_RATE_LIMITED_OR_GONE) {
        return Err(Failure::Upstream(format!(
            "Feishu refused {what} for now: code 230020: {msg}"
        )));
    }
    if status >= 500 {
        return Err(Failure::Upstream(format!(
            "Feishu answered {what} with HTTP {status}: {}",
            snippet(body)
        )));
    }
    match (code, value) {
        (Some(0), Some(value)) if (200..300).contains(&status) => Ok(value),
        (Some(code), _) => {
            let mut message = format!("Feishu refused {what}: code {code}: {msg}");
            if code == MISSING_SCOPE {
                message.push_str(
                    " (add the scope in the developer console under Permissions & Scopes, then publish a new version)",
                );
            }
            Err(Failure::Rejected { code, message })
        }
        (None, _) if (400..500).contains(&status) && status != 408 => Err(Failure::Rejected {
            code: -i64::from(status),
            message: format!(
                "Feishu answered {what} with HTTP {status}: {}",
                snippet(body)
            ),
        }),
        (None, _) => Err(Failure::Upstream(format!(
            "Feishu's answer to {what} (HTTP {status}) is not an Open API answer: {}",
            snippet(body)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_failures() {
        let ok = check(
            "send",
            200,
            None,
            br#"{"code":0,"msg":"success","data":{"message_id":"om_1"}}"#,
        )
        .expect("ok");
        assert_eq!(ok["data"]["message_id"], "om_1");
        assert_eq!(
            check("send", 429, Some("7"), b""),
            Err(Failure::RetryLater {
                after_ms: 7000,
                reason: "Feishu rate-limited send (HTTP 429)".into()
            })
        );
        assert!(matches!(
            check(
                "send",
                400,
                None,
                br#"{"code":99991400,"msg":"request trigger frequency limit"}"#
            ),
            Err(Failure::RetryLater { after_ms: 1000, .. })
        ));
        assert!(matches!(
            check("send", 200, None, br#"{"code":230020,"msg":"limit"}"#),
            Err(Failure::Upstream(m)) if m.contains("230020")
        ));
        for code in TOKEN_INVALID {
            assert!(matches!(
                check("send", 400, None, format!(r#"{{"code":{code},"msg":"Invalid access token"}}"#).as_bytes()),
                Err(Failure::TokenInvalid(m)) if m.contains(&code.to_string())
            ));
        }
        assert!(matches!(
            check("send", 502, None, b"<html>"),
            Err(Failure::Upstream(_))
        ));
        assert!(matches!(
            check("send", 500, None, br#"{"code":1,"msg":"x"}"#),
            Err(Failure::Upstream(_))
        ));
        assert!(matches!(
            check("send", 400, None, br#"{"code":230002,"msg":"Bot/User can NOT be out of the chat."}"#),
            Err(Failure::Rejected { code: 230002, message }) if message.contains("230002") && message.contains("out of the chat")
        ));
        assert!(matches!(
            check("send", 400, None, br#"{"code":99991672,"msg":"Access denied"}"#),
            Err(Failure::Rejected { message, .. }) if message.contains("Permissions & Scopes")
        ));
        assert!(matches!(
            check("send", 404, None, b"not found"),
            Err(Failure::Rejected { code: -404, .. })
        ));
        assert!(matches!(
            check("send", 200, None, b"weird"),
            Err(Failure::Upstream(_))
        ));
        assert_eq!(reset_ms(Some("0")), 1000);
        assert_eq!(reset_ms(Some("x")), 1000);
    }
}
