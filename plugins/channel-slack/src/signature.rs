//! Slack's request signatures (Events API webhooks):
//! `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:{timestamp}:{body}">`, keyed
//! with the signing secret, and `X-Slack-Request-Timestamp` in seconds. The
//! HMAC itself is computed by the host (`secrets::verify`): the plugin never
//! sees the secret.

pub const SIGNATURE_HEADER: &str = "x-slack-signature";
pub const TIMESTAMP_HEADER: &str = "x-slack-request-timestamp";

/// How far the request's timestamp may be from the clock, either way.
pub const MAX_SKEW_SECS: u64 = 300;

/// What the host must check: the HMAC of `prefix` then the body must equal
/// `expected`.
#[derive(Debug, PartialEq, Eq)]
pub struct Check {
    /// `v0:{timestamp}:`, the part of the signed text before the body.
    pub prefix: Vec<u8>,
    pub expected: Vec<u8>,
}

/// Checks the headers and the timestamp window; returns what remains to be
/// verified, or why the request is refused.
pub fn prepare(
    timestamp: Option<&str>,
    signature: Option<&str>,
    now_ms: u64,
) -> Result<Check, String> {
    let timestamp = timestamp
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or("missing X-Slack-Request-Timestamp header")?;
    let signature = signature
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or("missing X-Slack-Signature header")?;
    let secs: u64 = timestamp
        .parse()
        .map_err(|_| format!("X-Slack-Request-Timestamp {timestamp:?} is not a number"))?;
    check_window(secs, now_ms)?;
    let hex_digest = signature
        .strip_prefix("v0=")
        .ok_or("X-Slack-Signature does not start with v0=")?;
    let expected =
        hex::decode(hex_digest).map_err(|_| "X-Slack-Signature is not hexadecimal".to_string())?;
    if expected.len() != 32 {
        return Err(format!(
            "X-Slack-Signature has {} bytes, an HMAC-SHA256 has 32",
            expected.len()
        ));
    }
    Ok(Check {
        prefix: format!("v0:{timestamp}:").into_bytes(),
        expected,
    })
}

/// Whether a request timestamp (seconds) is within `MAX_SKEW_SECS` of the
/// clock (milliseconds), in the past or the future.
pub fn check_window(timestamp_secs: u64, now_ms: u64) -> Result<(), String> {
    let now_secs = now_ms / 1000;
    let skew = now_secs.abs_diff(timestamp_secs);
    if skew > MAX_SKEW_SECS {
        let direction = if timestamp_secs < now_secs {
            "old"
        } else {
            "in the future"
        };
        return Err(format!(
            "X-Slack-Request-Timestamp is {skew} s {direction} (at most {MAX_SKEW_SECS} s allowed); \
             a replay, or this host's clock is wrong"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{KeyInit, Mac};

    // Slack's worked example ("Verifying requests from Slack").
    const SECRET: &str = "8f742231b10e8888abcd99yyyzzz85a5";
    const TIMESTAMP: &str = "1531420618";
    const BODY: &str = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
    const SIGNATURE: &str = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503";
    const NOW_MS: u64 = 1_531_420_618_000;

    /// What the host computes for `secrets::verify(hmac-sha256, …)`.
    fn host_hmac(prefix: &[u8], body: &[u8]) -> Vec<u8> {
        let mut mac = <hmac::Hmac<sha2::Sha256> as KeyInit>::new_from_slice(SECRET.as_bytes())
            .expect("HMAC accepts keys of any length");
        mac.update(prefix);
        mac.update(body);
        mac.finalize().into_bytes().to_vec()
    }

    #[test]
    fn slacks_example_verifies() {
        let check = prepare(Some(TIMESTAMP), Some(SIGNATURE), NOW_MS).expect("prepared");
        assert_eq!(check.prefix, b"v0:1531420618:");
        assert_eq!(host_hmac(&check.prefix, BODY.as_bytes()), check.expected);
        // A changed body does not.
        assert_ne!(host_hmac(&check.prefix, b"token=x"), check.expected);
    }

    #[test]
    fn missing_and_malformed_headers() {
        let err =
            |ts: Option<&str>, sig: Option<&str>| prepare(ts, sig, NOW_MS).expect_err("refused");
        assert!(err(None, Some(SIGNATURE)).contains("X-Slack-Request-Timestamp"));
        assert!(err(Some(TIMESTAMP), None).contains("missing X-Slack-Signature"));
        assert!(err(Some(" "), Some(SIGNATURE)).contains("missing"));
        assert!(err(Some("soon"), Some(SIGNATURE)).contains("not a number"));
        assert!(err(Some(TIMESTAMP), Some("v1=abcd")).contains("v0="));
        assert!(err(Some(TIMESTAMP), Some("v0=zz")).contains("hexadecimal"));
        assert!(err(Some(TIMESTAMP), Some("v0=abcd")).contains("32"));
    }

    #[test]
    fn timestamp_window_both_ways() {
        let now = 1_000_000_000;
        assert!(check_window(1_000_000, now).is_ok());
        assert!(check_window(1_000_000 - 300, now).is_ok());
        assert!(check_window(1_000_000 + 300, now).is_ok());
        assert!(
            check_window(1_000_000 - 301, now)
                .expect_err("stale")
                .contains("old")
        );
        assert!(
            check_window(1_000_000 + 301, now)
                .expect_err("future")
                .contains("future")
        );
        assert!(check_window(0, now).is_err());
        assert!(check_window(u64::MAX, now).is_err());
        // The stale check happens before the signature is looked at.
        let stale = prepare(Some(TIMESTAMP), Some(SIGNATURE), NOW_MS + 301_000);
        assert!(stale.expect_err("stale").contains("old"));
    }
}
