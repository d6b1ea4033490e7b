//! HMAC-SHA256 request signatures: `X-Pincer-Signature: sha256=<hex>` over
//! `"<X-Pincer-Timestamp>.<raw body>"`, with a bounded clock skew.

pub const TIMESTAMP_HEADER: &str = "X-Pincer-Timestamp";
pub const SIGNATURE_HEADER: &str = "X-Pincer-Signature";
/// How far the sender's timestamp may be from the host clock, in seconds.
pub const MAX_SKEW_SECS: u64 = 300;

const SCHEME: &str = "sha256=";

/// Checks a request's signature headers against the host clock, and the
/// digest with `hmac(timestamp, body, digest)` (the host, which holds the
/// secret). The error says what was wrong, never what was expected.
pub fn verify(
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_ms: u64,
    hmac: impl FnOnce(&str, &[u8], &[u8]) -> Result<bool, String>,
) -> Result<(), String> {
    let timestamp = timestamp.ok_or_else(|| format!("missing {TIMESTAMP_HEADER} header"))?;
    let sent_at: u64 = timestamp
        .trim()
        .parse()
        .map_err(|_| format!("{TIMESTAMP_HEADER} must be unix seconds"))?;
    let signature = signature.ok_or_else(|| format!("missing {SIGNATURE_HEADER} header"))?;
    let digest = signature
        .trim()
        .strip_prefix(SCHEME)
        .and_then(|hex_digest| hex::decode(hex_digest).ok())
        .ok_or_else(|| format!("{SIGNATURE_HEADER} must be `{SCHEME}<hex>`"))?;
    if !hmac(timestamp, body, &digest)? {
        return Err("signature mismatch".to_owned());
    }
    let skew = (now_ms / 1000).abs_diff(sent_at);
    if skew > MAX_SKEW_SECS {
        return Err(format!(
            "stale timestamp: {TIMESTAMP_HEADER} is {skew} s away from the host clock (limit {MAX_SKEW_SECS} s)"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hmac::{Hmac, KeyInit, Mac};
    use sha2::Sha256;

    fn mac(secret: &[u8], timestamp: &str, body: &[u8]) -> Hmac<Sha256> {
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(secret).expect("any key length");
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        mac
    }

    fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
        let digest = mac(secret, timestamp, body).finalize().into_bytes();
        format!("{SCHEME}{}", hex::encode(digest))
    }

    /// What the host's `secrets.verify` does, keyed with `SECRET`.
    fn host(timestamp: &str, body: &[u8], digest: &[u8]) -> Result<bool, String> {
        Ok(mac(SECRET, timestamp, body).verify_slice(digest).is_ok())
    }

    fn verify(
        _secret: &[u8],
        timestamp: Option<&str>,
        signature: Option<&str>,
        body: &[u8],
        now_ms: u64,
    ) -> Result<(), String> {
        super::verify(timestamp, signature, body, now_ms, host)
    }

    const SECRET: &[u8] = b"topsecret";
    const BODY: &[u8] = br#"{"id":"1"}"#;
    const NOW_MS: u64 = 1_700_000_000_000;
    // python3 -c 'import hmac,hashlib; print(hmac.new(b"topsecret", b"1700000000.{\"id\":\"1\"}", hashlib.sha256).hexdigest())'
    const EXPECTED: &str =
        "sha256=5ae2fe9589b5395efc54aa255a5cd86f4f6884285427ae96ebfc427963e60e81";

    #[test]
    fn signs_like_other_implementations() {
        assert_eq!(sign(SECRET, "1700000000", BODY), EXPECTED);
    }

    #[test]
    fn accepts_a_valid_signature() {
        assert_eq!(
            verify(SECRET, Some("1700000000"), Some(EXPECTED), BODY, NOW_MS),
            Ok(())
        );
        // Within the allowed skew either way.
        let late = NOW_MS + MAX_SKEW_SECS * 1000;
        assert_eq!(
            verify(SECRET, Some("1700000000"), Some(EXPECTED), BODY, late),
            Ok(())
        );
        let ts = (NOW_MS / 1000 + MAX_SKEW_SECS).to_string();
        let signature = sign(SECRET, &ts, BODY);
        assert_eq!(
            verify(SECRET, Some(&ts), Some(&signature), BODY, NOW_MS),
            Ok(())
        );
    }

    #[test]
    fn rejects_bad_signatures() {
        let verify = |ts: Option<&str>, sig: Option<&str>, body: &[u8]| {
            verify(SECRET, ts, sig, body, NOW_MS)
        };
        assert!(
            verify(None, Some(EXPECTED), BODY)
                .is_err_and(|e| e.contains("missing X-Pincer-Timestamp"))
        );
        assert!(verify(Some("soon"), Some(EXPECTED), BODY).is_err());
        assert!(
            verify(Some("1700000000"), None, BODY)
                .is_err_and(|e| e.contains("missing X-Pincer-Signature"))
        );
        assert!(verify(Some("1700000000"), Some(&EXPECTED[7..]), BODY).is_err());
        assert!(verify(Some("1700000000"), Some("sha256=zz"), BODY).is_err());
        assert_eq!(
            verify(Some("1700000000"), Some(EXPECTED), b"{}"),
            Err("signature mismatch".into())
        );
        // The timestamp is part of what is signed.
        assert_eq!(
            verify(Some("1700000001"), Some(EXPECTED), BODY),
            Err("signature mismatch".into())
        );
        let other_secret = sign(b"other", "1700000000", BODY);
        assert!(verify(Some("1700000000"), Some(&other_secret), BODY).is_err());
        // What the host says goes: an error is passed on.
        let refused = super::verify(
            Some("1700000000"),
            Some(EXPECTED),
            BODY,
            NOW_MS,
            |_, _, _| Err("the `secret` is not set".into()),
        );
        assert_eq!(refused, Err("the `secret` is not set".into()));
    }

    #[test]
    fn rejects_stale_timestamps() {
        let now = NOW_MS + (MAX_SKEW_SECS + 1) * 1000;
        let err = verify(SECRET, Some("1700000000"), Some(EXPECTED), BODY, now).expect_err("stale");
        assert!(err.starts_with("stale timestamp"), "{err}");
        let early = NOW_MS - (MAX_SKEW_SECS + 1) * 1000;
        assert!(verify(SECRET, Some("1700000000"), Some(EXPECTED), BODY, early).is_err());
    }
}
