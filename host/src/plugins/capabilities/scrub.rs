//! Scrubbing secret values out of what a plugin reads: defence in depth
//! behind the bindings (which are the boundary, since a server a plugin
//! picks can always echo a form no scrubber knows).
//!
//! Each value is looked for in the spellings a server commonly echoes:
//! as is, hex (either case), standard and URL-safe base64 at each of the
//! three byte alignments, percent-encoded (minimal and every byte) and
//! JSON `\u` escapes; a JSON body is also scrubbed on its decoded strings,
//! so any JSON escaping is covered.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;

/// What replaces a secret's value wherever the plugin could read it.
pub const SCRUBBED: &str = "[secret]";

/// The shortest spelling looked for: shorter ones are ordinary text.
const MIN_FORM: usize = 8;

/// The spellings of `value` a server may echo, each at least 8 bytes.
pub fn forms(value: &str) -> Vec<Vec<u8>> {
    let raw = value.as_bytes();
    let mut out: Vec<Vec<u8>> = vec![raw.to_vec()];
    out.push(hex::encode(raw).into_bytes());
    out.push(hex::encode_upper(raw).into_bytes());
    for engine in [
        &base64::engine::general_purpose::STANDARD_NO_PAD,
        &base64::engine::general_purpose::URL_SAFE_NO_PAD,
    ] {
        // With k bytes before it, the value's own characters are those
        // whose six bits all come from the value.
        for k in 0..3usize {
            let mut shifted = vec![0u8; k];
            shifted.extend_from_slice(raw);
            let encoded = engine.encode(&shifted);
            let skip = (4 * k).div_ceil(3);
            let keep = (4 * (k + raw.len())) / 3;
            if keep > skip {
                out.push(encoded.as_bytes()[skip..keep.min(encoded.len())].to_vec());
            }
        }
    }
    out.push(
        url::form_urlencoded::byte_serialize(raw)
            .collect::<String>()
            .into_bytes(),
    );
    out.push(
        raw.iter()
            .flat_map(|b| format!("%{b:02X}").into_bytes())
            .collect(),
    );
    out.push(
        raw.iter()
            .flat_map(|b| format!("%{b:02x}").into_bytes())
            .collect(),
    );
    let units: Vec<u16> = value.encode_utf16().collect();
    out.push(
        units
            .iter()
            .flat_map(|u| format!("\\u{u:04x}").into_bytes())
            .collect(),
    );
    out.push(
        units
            .iter()
            .flat_map(|u| format!("\\u{u:04X}").into_bytes())
            .collect(),
    );
    out.retain(|f| f.len() >= MIN_FORM);
    out.sort();
    out.dedup();
    out
}

/// Finds every form of a set of values at once.
pub struct Scrubber {
    finder: Option<AhoCorasick>,
}

impl Scrubber {
    /// A scrubber for `values` (those shorter than 8 bytes are skipped:
    /// the host refuses such secrets at load).
    pub fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let patterns: Vec<Vec<u8>> = values
            .into_iter()
            .filter(|v| v.len() >= MIN_FORM)
            .flat_map(forms)
            .collect();
        let finder = (!patterns.is_empty())
            .then(|| {
                AhoCorasick::builder()
                    .match_kind(MatchKind::LeftmostLongest)
                    .build(&patterns)
                    .ok()
            })
            .flatten();
        Self { finder }
    }

    /// `bytes` with every form replaced, or `None` when none occurs.
    pub fn bytes(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let finder = self.finder.as_ref()?;
        finder.find(bytes)?;
        let with = vec![SCRUBBED.as_bytes(); finder.patterns_len()];
        Some(finder.replace_all_bytes(bytes, &with))
    }

    pub fn text(&self, text: &str) -> String {
        match self.bytes(text.as_bytes()) {
            Some(b) => String::from_utf8_lossy(&b).into_owned(),
            None => text.to_string(),
        }
    }

    /// Scrubs every string (and object key) of `value`; whether any changed.
    pub fn json(&self, value: &mut serde_json::Value) -> bool {
        use serde_json::Value as V;
        match value {
            V::String(s) => match self.bytes(s.as_bytes()) {
                Some(b) => {
                    *s = String::from_utf8_lossy(&b).into_owned();
                    true
                }
                None => false,
            },
            V::Array(items) => items.iter_mut().fold(false, |c, v| self.json(v) | c),
            V::Object(map) => {
                let mut changed = false;
                let entries = std::mem::take(map);
                for (key, mut v) in entries {
                    changed |= self.json(&mut v);
                    let key = match self.bytes(key.as_bytes()) {
                        Some(b) => {
                            changed = true;
                            String::from_utf8_lossy(&b).into_owned()
                        }
                        None => key,
                    };
                    map.insert(key, v);
                }
                changed
            }
            _ => false,
        }
    }

    /// A body the plugin will read: a JSON body scrubbed on its decoded
    /// strings (and printed again only when that changed something), any
    /// body scrubbed of every form in its bytes.
    pub fn body(&self, body: &mut Vec<u8>) {
        if self.finder.is_none() {
            return;
        }
        if let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(body)
            && self.json(&mut json)
            && let Ok(printed) = serde_json::to_vec(&json)
        {
            *body = printed;
        }
        if let Some(scrubbed) = self.bytes(body) {
            *body = scrubbed;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "xoxb-123-secret-value";

    #[test]
    fn every_common_spelling_of_an_echo_is_scrubbed() {
        let s = Scrubber::new([SECRET]);
        let b64 = |prefix: &str, e: &base64::engine::GeneralPurpose| {
            e.encode(format!("{prefix}{SECRET}\"}}"))
        };
        let echoes = [
            SECRET.to_string(),
            hex::encode(SECRET),
            hex::encode_upper(SECRET),
            b64("", &base64::engine::general_purpose::STANDARD),
            b64("a", &base64::engine::general_purpose::STANDARD),
            b64("ab", &base64::engine::general_purpose::STANDARD),
            b64("Bearer ", &base64::engine::general_purpose::URL_SAFE),
            b64(
                "{\"t\":\"",
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
            ),
            SECRET.bytes().map(|b| format!("%{b:02X}")).collect(),
            SECRET.bytes().map(|b| format!("%{b:02x}")).collect(),
            SECRET
                .chars()
                .map(|c| format!("\\u{:04x}", c as u32))
                .collect(),
        ];
        for echo in echoes {
            let mut body = format!("you sent: {echo}.").into_bytes();
            s.body(&mut body);
            let seen = String::from_utf8_lossy(&body);
            assert!(seen.contains(SCRUBBED), "{echo} -> {seen}");
            assert!(!seen.contains(&echo), "{echo} -> {seen}");
        }
    }

    #[test]
    fn json_bodies_are_scrubbed_on_their_decoded_strings() {
        let s = Scrubber::new([SECRET]);
        // Escapes of single characters anywhere in the value.
        let mut body = br#"{"echo":"xo\u0078b-123-secret-valu\u0065","n":1}"#.to_vec();
        s.body(&mut body);
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["echo"], SCRUBBED);
        assert_eq!(json["n"], 1);
        let mut clean = br#"{"b":1,  "a":"x"}"#.to_vec();
        s.body(&mut clean);
        assert_eq!(clean, br#"{"b":1,  "a":"x"}"#.to_vec(), "untouched bytes");
    }

    #[test]
    fn short_values_and_no_values_scrub_nothing() {
        let mut body = b"short 1234567".to_vec();
        Scrubber::new(["1234567"]).body(&mut body);
        assert_eq!(body, b"short 1234567".to_vec());
        Scrubber::new([]).body(&mut body);
        assert_eq!(body, b"short 1234567".to_vec());
    }
}
