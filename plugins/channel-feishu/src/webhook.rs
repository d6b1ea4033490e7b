//! Pure parts of webhook verification.
//!
//! Feishu's docs, "接收事件 / Receive events"
//! (https://open.feishu.cn/document/ukTMukTMukTM/uYDNxYjL2QTM24iN0EjN/event-subscription-configure-/encrypt-key-encryption-configuration-case):
//! with an Encrypt Key, requests carry `X-Lark-Request-Timestamp`,
//! `X-Lark-Request-Nonce` and `X-Lark-Signature` = hex SHA-256 of
//! timestamp + nonce + encrypt_key + raw body; the body is
//! `{"encrypt": base64(IV ‖ AES-256-CBC(SHA-256(key), plaintext))}`.
//! The URL-verification request is not signed. lark-oapi's handler does not
//! check the timestamp's age; we refuse requests more than 5 minutes off.

pub const TIMESTAMP_HEADER: &str = "X-Lark-Request-Timestamp";
pub const NONCE_HEADER: &str = "X-Lark-Request-Nonce";
pub const SIGNATURE_HEADER: &str = "X-Lark-Signature";
pub const MAX_AGE_SECS: u64 = 300;

/// What to hand `secrets::verify` for one request.
#[derive(Debug, PartialEq, Eq)]
pub struct Check {
    pub timestamp: String,
    pub nonce: String,
    pub expected: Vec<u8>,
}

/// Checks the headers' form and the timestamp's age.
pub fn prepare(
    timestamp: Option<&str>,
    nonce: Option<&str>,
    signature: Option<&str>,
    now_ms: u64,
) -> Result<Check, String> {
    let timestamp = timestamp
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .ok_or(format!("no {TIMESTAMP_HEADER} header"))?;
    let nonce = nonce.ok_or(format!("no {NONCE_HEADER} header"))?;
    let signature = signature
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or(format!("no {SIGNATURE_HEADER} header"))?;
    let secs: u64 = timestamp
        .parse()
        .map_err(|_| format!("{TIMESTAMP_HEADER} is not a number: {timestamp:?}"))?;
    let now = now_ms / 1000;
    if now.abs_diff(secs) > MAX_AGE_SECS {
        return Err(format!(
            "{TIMESTAMP_HEADER} {secs} is more than {MAX_AGE_SECS} s from now ({now}): a replay, or the clocks disagree"
        ));
    }
    let expected = hex::decode(signature.to_ascii_lowercase())
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or(format!("{SIGNATURE_HEADER} is not a hex SHA-256"))?;
    Ok(Check {
        timestamp: timestamp.into(),
        nonce: nonce.into(),
        expected,
    })
}

/// Standard base64 (with or without padding), as the `encrypt` field uses.
pub fn base64_decode(text: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let mut acc: u32 = 0;
    let mut bits = 0;
    let body = text.trim().trim_end_matches('=');
    for c in body.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return Err(format!("`encrypt` is not base64 (byte {c:#04x})")),
        };
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    if bits >= 6 {
        return Err("`encrypt` has a truncated base64 group".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW_MS: u64 = 1_700_000_000_000;

    #[test]
    fn signature_headers_and_window() {
        let sig = "a".repeat(64);
        let check = prepare(Some("1700000000"), Some("n1"), Some(&sig), NOW_MS).expect("ok");
        assert_eq!(check.timestamp, "1700000000");
        assert_eq!(check.nonce, "n1");
        assert_eq!(check.expected, vec![0xaa; 32]);
        assert!(
            prepare(Some("1699999700"), Some("n"), Some(&sig), NOW_MS).is_ok(),
            "300 s old"
        );
        assert!(
            prepare(Some("1699999699"), Some("n"), Some(&sig), NOW_MS).is_err(),
            "301 s old"
        );
        assert!(
            prepare(Some("1700000301"), Some("n"), Some(&sig), NOW_MS).is_err(),
            "future"
        );
        assert!(prepare(None, Some("n"), Some(&sig), NOW_MS).is_err());
        assert!(prepare(Some("1700000000"), None, Some(&sig), NOW_MS).is_err());
        assert!(prepare(Some("1700000000"), Some("n"), None, NOW_MS).is_err());
        assert!(prepare(Some("x"), Some("n"), Some(&sig), NOW_MS).is_err());
        assert!(prepare(Some("1700000000"), Some("n"), Some("abcd"), NOW_MS).is_err());
        assert!(prepare(Some("1700000000"), Some("n"), Some(&"A".repeat(64)), NOW_MS).is_ok());
    }

    #[test]
    fn the_signature_is_what_feishu_computes() {
        use sha2::{Digest, Sha256};
        // What the host computes from these parts must equal the header:
        // sha256(timestamp + nonce + encrypt_key + body), hex.
        let (ts, nonce, key, body) = ("1700000000", "abc", "test key", br#"{"encrypt":"x"}"#);
        let mut h = Sha256::new();
        h.update(ts);
        h.update(nonce);
        h.update(key);
        h.update(body);
        let header = hex::encode(h.finalize());
        let check = prepare(Some(ts), Some(nonce), Some(&header), NOW_MS).expect("ok");
        let mut concat = Vec::new();
        concat.extend_from_slice(format!("{ts}{nonce}{key}").as_bytes());
        concat.extend_from_slice(body);
        assert_eq!(check.expected, Sha256::digest(&concat).to_vec());
    }

    #[test]
    fn base64_of_the_docs_example() {
        // Feishu's decryption example: the host decrypts this with key
        // "test key" to "hello world"; we only decode it.
        let data = base64_decode("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=").expect("b64");
        assert_eq!(data.len(), 32, "16-byte IV + one AES block");
        assert_eq!(&data[..4], &[0x3f, 0x7e, 0xf0, 0xf9]);
        assert_eq!(base64_decode("aGk"), Ok(b"hi".to_vec()));
        assert_eq!(base64_decode("aGVsbG8="), Ok(b"hello".to_vec()));
        assert!(base64_decode("a").is_err());
        assert!(base64_decode("a*b=").is_err());
    }
}
