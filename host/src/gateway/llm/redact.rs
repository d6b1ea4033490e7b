//! Redaction of provider keys from text that leaves the gateway.
//!
//! Two layers: the keys we know (from the configuration), replaced wherever
//! they occur (also in their JSON-escaped form), and common key formats
//! detected by shape, because an upstream may echo back a key we were never
//! told about (or one of ours in a mangled form).

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Configured secrets shorter than this are not replaced: replacing e.g. a
/// dummy key `"x"` everywhere would mangle the text and protect nothing.
const MIN_SECRET_LEN: usize = 8;

/// Replaces every occurrence of `secrets` and of common key formats in
/// `text` with `[REDACTED]`. Detected formats: `sk-…` (OpenAI, Anthropic
/// `sk-ant-…`, DeepSeek, …), `sk_live_`/`sk_test_`/`rk_live_…` (Stripe),
/// `AKIA…`/`ASIA…` (AWS access key ids), `xox[bpars]-…` (Slack), `ghp_…`,
/// `gho_…`, `ghs_…`, `ghu_…`, `ghr_…`, `github_pat_…` (GitHub), `AIza…`
/// (Google) and the token after `Bearer ` (case-insensitive). The text stays
/// valid JSON if it was.
pub fn redact_secrets(text: &str, secrets: &[&str]) -> String {
    redacted(text, &needles(secrets.iter().copied())).unwrap_or_else(|| text.to_owned())
}

/// What a secret is replaced in: the secret itself and, where different,
/// the form it takes inside a JSON string. Secrets shorter than
/// [`MIN_SECRET_LEN`] are skipped.
fn needles<'a>(secrets: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut needles = Vec::new();
    for secret in secrets.into_iter().filter(|s| s.len() >= MIN_SECRET_LEN) {
        needles.push(secret.to_owned());
        if let Ok(quoted) = serde_json::to_string(secret) {
            let escaped = &quoted[1..quoted.len() - 1];
            if escaped != secret {
                needles.push(escaped.to_owned());
            }
        }
    }
    needles
}

/// `text` with `needles` and key formats replaced, or `None` when it holds
/// none of them (the common case, which then costs no copy).
fn redacted(text: &str, needles: &[String]) -> Option<String> {
    let mut out: Option<String> = None;
    for needle in needles {
        let current = out.as_deref().unwrap_or(text);
        if current.contains(needle.as_str()) {
            out = Some(current.replace(needle.as_str(), REDACTED));
        }
    }
    redact_key_formats(out.as_deref().unwrap_or(text)).or(out)
}

/// The configured keys, shared; redacts them and key formats.
#[derive(Clone, Default)]
pub(crate) struct Secrets {
    needles: std::sync::Arc<Vec<String>>,
    configured: usize,
}

impl Secrets {
    pub fn new(secrets: Vec<String>) -> Self {
        Secrets {
            needles: std::sync::Arc::new(needles(secrets.iter().map(String::as_str))),
            configured: secrets.len(),
        }
    }

    pub fn redact(&self, text: &str) -> String {
        self.redacted(text).unwrap_or_else(|| text.to_owned())
    }

    /// [`Self::redact`] of a string the caller gives up: returned as it is
    /// when it holds nothing to redact.
    pub fn redact_owned(&self, text: String) -> String {
        self.redacted(&text).unwrap_or(text)
    }

    /// The redacted text, or `None` when nothing in `text` is a secret.
    pub fn redacted(&self, text: &str) -> Option<String> {
        redacted(text, &self.needles)
    }
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secrets({} redacted)", self.configured)
    }
}

/// Whether `text` contains something shaped like a key (see
/// [`redact_secrets`]).
#[cfg(test)]
pub fn contains_key_format(text: &str) -> bool {
    redact_key_formats(text).is_some()
}

struct Format {
    prefix: &'static [u8],
    /// Compare the prefix ignoring ASCII case.
    ignore_case: bool,
    /// Keep the prefix in the output (`Bearer [REDACTED]`).
    keep_prefix: bool,
    body: fn(u8) -> bool,
    min_len: usize,
}

fn token_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

fn alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

fn upper_alnum(b: u8) -> bool {
    b.is_ascii_uppercase() || b.is_ascii_digit()
}

fn slack_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-'
}

fn bearer_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'~' | b'+' | b'/' | b'=' | b'-')
}

const FORMATS: &[Format] = &[
    Format {
        prefix: b"sk-",
        ignore_case: false,
        keep_prefix: false,
        body: token_char,
        min_len: 20,
    },
    Format {
        prefix: b"sk_live_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 16,
    },
    Format {
        prefix: b"sk_test_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 16,
    },
    Format {
        prefix: b"rk_live_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 16,
    },
    Format {
        prefix: b"AKIA",
        ignore_case: false,
        keep_prefix: false,
        body: upper_alnum,
        min_len: 16,
    },
    Format {
        prefix: b"ASIA",
        ignore_case: false,
        keep_prefix: false,
        body: upper_alnum,
        min_len: 16,
    },
    Format {
        prefix: b"xoxb-",
        ignore_case: false,
        keep_prefix: false,
        body: slack_char,
        min_len: 10,
    },
    Format {
        prefix: b"xoxp-",
        ignore_case: false,
        keep_prefix: false,
        body: slack_char,
        min_len: 10,
    },
    Format {
        prefix: b"xoxa-",
        ignore_case: false,
        keep_prefix: false,
        body: slack_char,
        min_len: 10,
    },
    Format {
        prefix: b"xoxr-",
        ignore_case: false,
        keep_prefix: false,
        body: slack_char,
        min_len: 10,
    },
    Format {
        prefix: b"xoxs-",
        ignore_case: false,
        keep_prefix: false,
        body: slack_char,
        min_len: 10,
    },
    Format {
        prefix: b"ghp_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 20,
    },
    Format {
        prefix: b"gho_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 20,
    },
    Format {
        prefix: b"ghs_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 20,
    },
    Format {
        prefix: b"ghu_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 20,
    },
    Format {
        prefix: b"ghr_",
        ignore_case: false,
        keep_prefix: false,
        body: alnum,
        min_len: 20,
    },
    Format {
        prefix: b"github_pat_",
        ignore_case: false,
        keep_prefix: false,
        body: token_char,
        min_len: 20,
    },
    Format {
        prefix: b"AIza",
        ignore_case: false,
        keep_prefix: false,
        body: token_char,
        min_len: 30,
    },
    Format {
        prefix: b"bearer ",
        ignore_case: true,
        keep_prefix: true,
        body: bearer_char,
        min_len: 16,
    },
];

/// First bytes of the prefixes above (both cases for `Bearer`).
fn may_start(b: u8) -> bool {
    matches!(b, b's' | b'r' | b'A' | b'x' | b'g' | b'b' | b'B')
}

fn starts_with(hay: &[u8], prefix: &[u8], ignore_case: bool) -> bool {
    hay.len() >= prefix.len()
        && if ignore_case {
            hay[..prefix.len()].eq_ignore_ascii_case(prefix)
        } else {
            &hay[..prefix.len()] == prefix
        }
}

/// `Some(redacted)` when at least one key format was found.
fn redact_key_formats(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0; // bytes of `text` already handled
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        // Only at the start of a word: `task-…` is not an `sk-` key.
        if !may_start(b) || (i > 0 && token_char(bytes[i - 1])) {
            i += 1;
            continue;
        }
        let mut matched = None;
        for format in FORMATS {
            if !starts_with(&bytes[i..], format.prefix, format.ignore_case) {
                continue;
            }
            let body_start = i + format.prefix.len();
            let body_len = bytes[body_start..]
                .iter()
                .take_while(|c| (format.body)(**c))
                .count();
            if body_len >= format.min_len {
                matched = Some((format, body_start + body_len));
                break;
            }
        }
        match matched {
            Some((format, end)) => {
                // Every prefix and body byte is ASCII, so `i` and `end` are
                // char boundaries.
                let buf = out.get_or_insert_with(|| String::with_capacity(text.len()));
                buf.push_str(&text[copied..i]);
                if format.keep_prefix {
                    buf.push_str(&text[i..i + format.prefix.len()]);
                }
                buf.push_str(REDACTED);
                copied = end;
                i = end;
            }
            None => i += 1,
        }
    }
    out.map(|mut buf| {
        buf.push_str(&text[copied..]);
        buf
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configured_secrets_are_replaced_everywhere() {
        let key = "my-very-secret-key-123";
        let text = format!("{{\"error\":\"bad key {key}\", \"again\": \"{key}\"}}");
        let out = redact_secrets(&text, &[key]);
        assert!(!out.contains(key));
        assert_eq!(out.matches(REDACTED).count(), 2);
        assert!(serde_json::from_str::<serde_json::Value>(&out).is_ok());
    }

    #[test]
    fn json_escaped_secret_is_replaced() {
        let key = "abc\"def\\ghi-jkl";
        let text = serde_json::json!({ "echo": key }).to_string();
        let out = redact_secrets(&text, &[key]);
        assert!(!out.contains("abc\\\"def"), "{out}");
    }

    #[test]
    fn short_secrets_are_ignored() {
        assert_eq!(
            redact_secrets("x marks the spot", &["x"]),
            "x marks the spot"
        );
    }

    #[test]
    fn key_formats_are_detected() {
        let cases = [
            "sk-proj-abcdefghijklmnopqrstuvwxyz012345",
            "sk-ant-api03-abcdefghijklmnopqrstuvwxyz_0123-ABC",
            "AKIAIOSFODNN7EXAMPLE",
            "xoxb-1234567890-abcdefghij",
            "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
            "AIzaSyA-abcdefghijklmnopqrstuvwxyz012345",
            "sk_live_abcdefghijklmnop1234",
        ];
        for key in cases {
            let text = format!("before {key} after");
            let out = redact_secrets(&text, &[]);
            assert_eq!(out, format!("before {REDACTED} after"), "{key}");
            assert!(contains_key_format(&text));
        }
    }

    #[test]
    fn bearer_tokens_keep_the_scheme() {
        let out = redact_secrets(
            "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload.sig",
            &[],
        );
        assert_eq!(out, format!("Authorization: Bearer {REDACTED}"));
        let out = redact_secrets("authorization: bearer abcdefghijklmnop1234", &[]);
        assert_eq!(out, format!("authorization: bearer {REDACTED}"));
    }

    #[test]
    fn ordinary_text_is_untouched() {
        for text in [
            "the task-abcdefghijklmnopqrstuvwxyz is done",
            "ask-me-anything-about-everything-please",
            "sk-short",
            "Bearer short",
            "AKIA lowercase akiaiosfodnn7example",
            "中文 sk- 混合",
            "",
        ] {
            assert_eq!(redact_secrets(text, &[]), text);
            assert!(!contains_key_format(text));
        }
    }

    #[test]
    fn multibyte_text_around_keys() {
        let text = "密钥：sk-abcdefghijklmnopqrstuvwxyz。完";
        assert_eq!(redact_secrets(text, &[]), format!("密钥：{REDACTED}。完"));
    }
}
