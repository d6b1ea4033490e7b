//! Secrets a plugin uses by name and never sees: the values of the config
//! keys its manifest marks `secret = true`, and values the host kept from a
//! response for it (`capture`, e.g. a tenant access token).
//!
//! The host puts a secret only into a typed place a request names (a
//! header, a JSON member, a form field, a query parameter), never into free
//! text, and only where the manifest binds that secret
//! ([`super::binding`]): a plugin cannot put its bot token into the text of
//! a message. Webhook tokens are checked by the host on the parsed request
//! and removed before the plugin sees it ([`Secrets::inbound_body`]).
//! Everything the plugin reads is scrubbed of every value
//! ([`super::scrub`]), in case a server echoes one back.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hmac::Mac;
use sha2::{Digest as _, Sha256};

use super::binding::{self, Destination};
use super::scrub::Scrubber;
use crate::plugins::manifest::{Binding, WebhookToken};
use crate::plugins::scope::HttpReach;

/// The shortest piece of a secret value that inbound frames are masked for
/// ([`Secrets::mask_in_place`]); also the shortest value accepted as a
/// secret at all (shorter ones are too likely to be ordinary text).
pub const MASKED_FRAGMENT: usize = 8;

/// Longest lifetime a captured value is kept without a stated expiry.
pub const CAPTURE_MAX_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// How long before its stated expiry a captured value is forgotten, at
/// most (a tenth of its lifetime when that is shorter).
pub const CAPTURE_REFRESH_MARGIN: Duration = Duration::from_secs(300);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretError {
    #[error("no value is set for secret `{0}`")]
    Unknown(String),
    #[error("`{0}` is not a secret of this plugin (mark it `secret = true` in plugin.toml)")]
    Denied(String),
    #[error("{0}")]
    Invalid(String),
    /// A use the manifest's bindings do not allow.
    #[error("{0}")]
    NotBound(String),
    /// A webhook whose credential the host checked and refused.
    #[error("{0}")]
    Forged(String),
}

/// Where a secret goes in a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Header `name` set to `prefix` + value.
    Header { name: String, prefix: String },
    /// A member of the JSON object body, by JSON Pointer.
    JsonField(String),
    /// A field of a form-urlencoded body.
    FormField(String),
    /// A query parameter of the URL.
    QueryParam(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Use {
    pub secret: String,
    pub place: Place,
}

/// Keep a response's JSON string member as a secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub pointer: String,
    pub secret: String,
    pub expires_in_pointer: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Digest {
    HmacSha256,
    Sha256,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Bytes(Vec<u8>),
    Secret(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cipher {
    Aes256CbcSha256Key,
}

/// One plugin's secrets in one scope.
pub struct Secrets {
    /// Config keys the manifest marks secret.
    declared: BTreeSet<String>,
    /// Their non-empty values.
    configured: BTreeMap<String, String>,
    /// Where each secret (config key or capture) may be placed.
    bindings: BTreeMap<String, Vec<Binding>>,
    /// Tokens the host checks in webhook requests.
    webhook_tokens: Vec<WebhookToken>,
    captured: Mutex<HashMap<String, Captured>>,
    /// The scrubber of the values it was built for (building one is not
    /// free; the values change only when a capture does).
    scrubber: Mutex<Option<(Vec<String>, Arc<Scrubber>)>>,
}

/// Which JSON a webhook credential is checked in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inbound {
    /// The request body as it arrived.
    Request,
    /// What `decrypt` made of a body's encrypted member.
    Decrypted,
}

struct Captured {
    value: String,
    until: Instant,
}

impl std::fmt::Debug for Secrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Secrets")
            .field("declared", &self.declared)
            .finish_non_exhaustive()
    }
}

impl Secrets {
    /// The secrets among `config`'s values: those of the `declared` keys.
    /// Non-string values count by their JSON text.
    pub fn new(declared: BTreeSet<String>, config: &serde_json::Value) -> Self {
        let configured = declared
            .iter()
            .filter_map(|key| {
                let value = match config.get(key)? {
                    serde_json::Value::String(s) => s.clone(),
                    serde_json::Value::Null => return None,
                    other => other.to_string(),
                };
                (!value.is_empty()).then(|| (key.clone(), value))
            })
            .collect();
        Self {
            declared,
            configured,
            bindings: BTreeMap::new(),
            webhook_tokens: Vec::new(),
            captured: Mutex::default(),
            scrubber: Mutex::default(),
        }
    }

    /// Where each secret may be placed (config keys and captures), and
    /// the webhook tokens the host checks: from the manifest.
    pub fn bound(
        mut self,
        bindings: BTreeMap<String, Vec<Binding>>,
        webhook_tokens: Vec<WebhookToken>,
    ) -> Self {
        self.bindings = bindings;
        self.webhook_tokens = webhook_tokens;
        self
    }

    /// `config` without the secret keys: what the plugin may read.
    pub fn public_config(&self, config: &serde_json::Value) -> serde_json::Value {
        match config {
            serde_json::Value::Object(map) => serde_json::Value::Object(
                map.iter()
                    .filter(|(k, _)| !self.declared.contains(*k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    pub fn is_secret(&self, key: &str) -> bool {
        self.declared.contains(key)
    }

    pub fn is_set(&self, name: &str) -> bool {
        self.value(name).is_ok()
    }

    fn value(&self, name: &str) -> Result<String, SecretError> {
        if let Some(v) = self.configured.get(name) {
            return Ok(v.clone());
        }
        if self.declared.contains(name) {
            return Err(SecretError::Unknown(name.to_string()));
        }
        let mut captured = self
            .captured
            .lock()
            .map_err(|_| SecretError::Invalid("secret store poisoned".into()))?;
        match captured.get(name) {
            Some(c) if c.until > Instant::now() => Ok(c.value.clone()),
            Some(_) => {
                captured.remove(name);
                Err(SecretError::Unknown(name.to_string()))
            }
            None if self.bindings.contains_key(name) => Err(SecretError::Unknown(name.to_string())),
            None => Err(SecretError::Denied(name.to_string())),
        }
    }

    /// Inbound binary data with every secret value — and every piece of
    /// one at least [`MASKED_FRAGMENT`] bytes long — overwritten by `*` of
    /// the same length (length prefixes, e.g. protobuf's, stay valid).
    ///
    /// Pieces matter because a platform may split one message across frames
    /// at any byte (Feishu's `sum`/`seq`) and the plugin joins them: a value
    /// cut in two arrives as two pieces, each masked here unless shorter
    /// than [`MASKED_FRAGMENT`]. So at most `MASKED_FRAGMENT - 1` bytes of
    /// a value reach the plugin on each side of a cut.
    pub fn mask_in_place(&self, bytes: &mut [u8]) {
        let values = self.all_values();
        let windows: HashSet<&[u8]> = values
            .iter()
            .flat_map(|v| v.as_bytes().windows(MASKED_FRAGMENT))
            .collect();
        if windows.is_empty() || bytes.len() < MASKED_FRAGMENT {
            return;
        }
        // Every window of the input that is a window of a secret is masked;
        // a piece of a secret is the union of its windows. Found first,
        // masked after, so masking never hides the next window.
        let hits: Vec<usize> = (0..=bytes.len() - MASKED_FRAGMENT)
            .filter(|&i| windows.contains(&bytes[i..i + MASKED_FRAGMENT]))
            .collect();
        for i in hits {
            bytes[i..i + MASKED_FRAGMENT].fill(b'*');
        }
    }

    /// Every value the plugin must never read, longest first.
    fn all_values(&self) -> Vec<String> {
        let mut values: Vec<String> = self.configured.values().cloned().collect();
        if let Ok(captured) = self.captured.lock() {
            values.extend(captured.values().map(|c| c.value.clone()));
        }
        values.retain(|v| v.len() >= MASKED_FRAGMENT);
        // Longest first; equal values adjacent, so `dedup` removes them all.
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        values
    }

    /// Puts each secret of `uses` into the request's `url`, `headers` or
    /// `body`, after checking that the manifest binds it to that place of
    /// a request with this `method` to this URL (`reach` says which
    /// destinations the operator named).
    pub fn apply(
        &self,
        uses: &[Use],
        method: &str,
        url: &mut String,
        headers: &mut Vec<(String, String)>,
        body: &mut Vec<u8>,
        reach: &HttpReach,
    ) -> Result<(), SecretError> {
        if uses.is_empty() {
            return Ok(());
        }
        let parsed = url::Url::parse(url).map_err(|e| {
            SecretError::Invalid(format!("cannot put a secret into a bad URL: {e}"))
        })?;
        let to = Destination {
            method,
            url: &parsed,
        };
        for one in uses {
            let value = self.value(&one.secret)?;
            let bindings = self
                .bindings
                .get(&one.secret)
                .map_or(&[][..], Vec::as_slice);
            binding::check(&one.secret, bindings, &one.place, &to, reach)
                .map_err(|why| SecretError::NotBound(why.0))?;
            match &one.place {
                Place::QueryParam(name) => set_query_param(url, name, &value)?,
                Place::Header { name, prefix } => {
                    headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                    headers.push((name.clone(), format!("{prefix}{value}")));
                }
                Place::JsonField(pointer) => set_json_member(body, pointer, value)?,
                Place::FormField(field) => set_form_field(body, field, &value),
            }
        }
        Ok(())
    }

    /// Keeps the string at `capture.pointer` of the JSON `body` and blanks
    /// it there.
    pub fn capture(&self, capture: &Capture, body: &mut Vec<u8>) -> Result<(), SecretError> {
        if self.declared.contains(&capture.secret) {
            return Err(SecretError::Invalid(format!(
                "cannot capture into `{}`: it is a config key",
                capture.secret
            )));
        }
        if !self.bindings.contains_key(&capture.secret) {
            return Err(SecretError::NotBound(format!(
                "cannot capture into `{}`: plugin.toml declares no `[captures.{}]`",
                capture.secret, capture.secret
            )));
        }
        let mut json: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
            SecretError::Invalid(format!("the response to capture from is not JSON: {e}"))
        })?;
        let lifetime = capture
            .expires_in_pointer
            .as_deref()
            .and_then(|p| json.pointer(p))
            .and_then(serde_json::Value::as_u64)
            .map_or(CAPTURE_MAX_LIFETIME, |s| {
                Duration::from_secs(s).min(CAPTURE_MAX_LIFETIME)
            });
        // Forgotten a little early, so a plugin that checks `is-set` fetches
        // a fresh one before the platform stops taking the old.
        let lifetime = lifetime.saturating_sub((lifetime / 10).min(CAPTURE_REFRESH_MARGIN));
        let slot = json.pointer_mut(&capture.pointer).ok_or_else(|| {
            SecretError::Invalid(format!(
                "the response has no member at `{}` to capture",
                capture.pointer
            ))
        })?;
        let serde_json::Value::String(value) = std::mem::take(slot) else {
            return Err(SecretError::Invalid(format!(
                "the member at `{}` is not a string",
                capture.pointer
            )));
        };
        *slot = serde_json::Value::String(String::new());
        if value.is_empty() {
            return Err(SecretError::Invalid(format!(
                "the member at `{}` is empty",
                capture.pointer
            )));
        }
        *body = serde_json::to_vec(&json).map_err(|e| SecretError::Invalid(e.to_string()))?;
        self.captured
            .lock()
            .map_err(|_| SecretError::Invalid("secret store poisoned".into()))?
            .insert(
                capture.secret.clone(),
                Captured {
                    value,
                    until: Instant::now() + lifetime,
                },
            );
        Ok(())
    }

    fn scrubber(&self) -> Arc<Scrubber> {
        let values = self.all_values();
        let build = || Arc::new(Scrubber::new(values.iter().map(String::as_str)));
        let Ok(mut cached) = self.scrubber.lock() else {
            return build();
        };
        match &*cached {
            Some((built_for, scrubber)) if *built_for == values => scrubber.clone(),
            _ => {
                let scrubber = build();
                *cached = Some((values, scrubber.clone()));
                scrubber
            }
        }
    }

    /// Replaces every secret value, in each common spelling, in `bytes`
    /// (a JSON body on its decoded strings too) and in `headers` with
    /// [`super::scrub::SCRUBBED`].
    pub fn scrub(&self, headers: &mut [(String, String)], bytes: &mut Vec<u8>) {
        let scrubber = self.scrubber();
        scrubber.body(bytes);
        for (_, v) in headers.iter_mut() {
            *v = scrubber.text(v);
        }
    }

    /// `text` with every secret value replaced by [`super::scrub::SCRUBBED`] (error
    /// messages may quote a URL that carries one).
    pub fn scrub_text(&self, text: &str) -> String {
        self.scrubber().text(text)
    }

    /// The webhook body the plugin gets. Each webhook token of the
    /// manifest whose secret is set is checked first: every member its
    /// `json` names that is present must equal the secret (compared in
    /// constant time) and at least one must be present, else the request
    /// is refused as forged; the members are then removed. The check is on
    /// the parsed JSON, so no spelling of the body can pass for the token.
    /// A body with the token's `encrypted` member is checked once
    /// decrypted instead. Every other secret value is scrubbed.
    pub fn inbound_body(&self, body: &[u8], stage: Inbound) -> Result<Vec<u8>, SecretError> {
        let tokens: Vec<(&WebhookToken, String)> = self
            .webhook_tokens
            .iter()
            .filter_map(|t| Some((t, self.configured.get(&t.secret)?.clone())))
            .collect();
        let scrubber = self.scrubber();
        if tokens.is_empty() {
            let mut out = body.to_vec();
            scrubber.body(&mut out);
            return Ok(out);
        }
        let mut json: serde_json::Value = serde_json::from_slice(body).map_err(|e| {
            SecretError::Forged(format!(
                "the body is not JSON ({e}), so its `{}` cannot be checked",
                tokens[0].0.secret
            ))
        })?;
        let mut changed = false;
        for (token, value) in &tokens {
            let deferred = stage == Inbound::Request
                && token
                    .encrypted
                    .as_deref()
                    .is_some_and(|p| json.pointer(p).is_some());
            if deferred {
                continue;
            }
            let mut found = 0;
            for pointer in &token.json {
                let Some(member) = take_member(&mut json, pointer) else {
                    continue;
                };
                found += 1;
                changed = true;
                let matches = member
                    .as_str()
                    .is_some_and(|m| constant_time_eq(m.as_bytes(), value.as_bytes()));
                if !matches {
                    return Err(SecretError::Forged(format!(
                        "the request's `{pointer}` is not `{}`",
                        token.secret
                    )));
                }
            }
            if found == 0 {
                return Err(SecretError::Forged(format!(
                    "the request carries no `{}` (looked for {})",
                    token.secret,
                    token.json.join(", ")
                )));
            }
        }
        changed |= scrubber.json(&mut json);
        if !changed {
            return Ok(body.to_vec());
        }
        serde_json::to_vec(&json).map_err(|e| SecretError::Invalid(e.to_string()))
    }

    /// A webhook's header values as the plugin gets them (one scrubber for
    /// all of them).
    pub fn inbound_headers<'a>(&self, values: impl IntoIterator<Item = &'a str>) -> Vec<String> {
        let scrubber = self.scrubber();
        values.into_iter().map(|v| scrubber.text(v)).collect()
    }

    /// Digest of `parts` (HMAC keyed with `key`) compared with `expected` in
    /// constant time.
    pub fn verify(
        &self,
        digest: Digest,
        key: Option<&str>,
        parts: &[Part],
        expected: &[u8],
    ) -> Result<bool, SecretError> {
        let mut message = Vec::new();
        for part in parts {
            match part {
                Part::Bytes(b) => message.extend_from_slice(b),
                Part::Secret(name) => message.extend_from_slice(self.value(name)?.as_bytes()),
            }
        }
        match digest {
            Digest::HmacSha256 => {
                let name = key.ok_or_else(|| {
                    SecretError::Invalid("hmac-sha256 needs a key (a secret's name)".into())
                })?;
                let key = self.value(name)?;
                let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key.as_bytes())
                    .map_err(|e| SecretError::Invalid(e.to_string()))?;
                mac.update(&message);
                Ok(mac.verify_slice(expected).is_ok())
            }
            Digest::Sha256 => {
                if key.is_some() {
                    return Err(SecretError::Invalid(
                        "sha256 takes no key; put the secret among the parts".into(),
                    ));
                }
                let got = Sha256::digest(&message);
                Ok(constant_time_eq(&got, expected))
            }
        }
    }

    pub fn decrypt(&self, cipher: Cipher, key: &str, data: &[u8]) -> Result<Vec<u8>, SecretError> {
        use aes::cipher::{BlockDecryptMut, KeyIvInit, block_padding::Pkcs7};
        match cipher {
            Cipher::Aes256CbcSha256Key => {
                let key = Sha256::digest(self.value(key)?.as_bytes());
                if data.len() < 32 || !data.len().is_multiple_of(16) {
                    return Err(SecretError::Invalid(format!(
                        "{} bytes is not an IV followed by whole AES blocks",
                        data.len()
                    )));
                }
                let (iv, blocks) = data.split_at(16);
                let plain = cbc::Decryptor::<aes::Aes256>::new_from_slices(&key, iv)
                    .map_err(|e| SecretError::Invalid(e.to_string()))?
                    .decrypt_padded_vec_mut::<Pkcs7>(blocks)
                    .map_err(|_| SecretError::Invalid("bad padding: wrong key?".into()))?;
                // What the platform encrypted may hold a webhook token
                // (Feishu's verification token): checked and removed here.
                self.inbound_body(&plain, Inbound::Decrypted)
            }
        }
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Removes and returns the member at JSON Pointer `pointer`.
fn take_member(json: &mut serde_json::Value, pointer: &str) -> Option<serde_json::Value> {
    let (parent, last) = pointer.rsplit_once('/')?;
    let key = last.replace("~1", "/").replace("~0", "~");
    let parent = if parent.is_empty() {
        Some(json)
    } else {
        json.pointer_mut(parent)
    };
    match parent? {
        serde_json::Value::Object(map) => map.remove(&key),
        _ => None,
    }
}

fn set_json_member(body: &mut Vec<u8>, pointer: &str, value: String) -> Result<(), SecretError> {
    let mut json: serde_json::Value = if body.is_empty() {
        serde_json::json!({})
    } else {
        serde_json::from_slice(body).map_err(|e| {
            SecretError::Invalid(format!("a json-field secret needs a JSON object body: {e}"))
        })?
    };
    let (parent, last) = match pointer.rsplit_once('/') {
        Some((parent, last)) if pointer.starts_with('/') => (parent, last),
        _ => {
            return Err(SecretError::Invalid(format!(
                "`{pointer}` is not a JSON Pointer (it starts with `/`)"
            )));
        }
    };
    let key = last.replace("~1", "/").replace("~0", "~");
    let target = if parent.is_empty() {
        Some(&mut json)
    } else {
        json.pointer_mut(parent)
    };
    match target {
        Some(serde_json::Value::Object(map)) => {
            map.insert(key, serde_json::Value::String(value));
        }
        _ => {
            return Err(SecretError::Invalid(format!(
                "the body has no JSON object at `{}`",
                if parent.is_empty() { "/" } else { parent }
            )));
        }
    }
    *body = serde_json::to_vec(&json).map_err(|e| SecretError::Invalid(e.to_string()))?;
    Ok(())
}

fn set_query_param(url: &mut String, name: &str, value: &str) -> Result<(), SecretError> {
    let mut parsed = url::Url::parse(url)
        .map_err(|e| SecretError::Invalid(format!("cannot put a secret into a bad URL: {e}")))?;
    let kept: Vec<(String, String)> = parsed
        .query_pairs()
        .into_owned()
        .filter(|(k, _)| k != name)
        .collect();
    parsed
        .query_pairs_mut()
        .clear()
        .extend_pairs(kept)
        .append_pair(name, value);
    *url = parsed.into();
    Ok(())
}

fn set_form_field(body: &mut Vec<u8>, field: &str, value: &str) {
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(body)
        .into_owned()
        .filter(|(k, _)| k != field)
        .collect();
    pairs.push((field.to_string(), value.to_string()));
    *body = url::form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
        .into_bytes();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn binding(host: &str, place: &str, name: &str) -> Binding {
        Binding {
            host: host.into(),
            path: None,
            method: None,
            header: (place == "header").then(|| name.into()),
            prefix: (place == "header").then(|| "Bearer ".into()),
            json: (place == "json").then(|| name.into()),
            form: (place == "form").then(|| name.into()),
            query: (place == "query").then(|| name.into()),
        }
    }

    fn secrets() -> Secrets {
        Secrets::new(
            [
                "bot_token".to_string(),
                "signing_secret".to_string(),
                "unset".to_string(),
            ]
            .into(),
            &serde_json::json!({
                "bot_token": "xoxb-123-secret-value",
                "signing_secret": "8f742231b10e8888abcd99yyyzzz85a5",
                "api_base": "https://slack.com/api",
            }),
        )
        .bound(
            [
                (
                    "bot_token".to_string(),
                    vec![
                        binding("slack.com", "header", "authorization"),
                        binding("slack.com", "json", "/auth/app_secret"),
                        binding("slack.com", "form", "token"),
                        binding("127.0.0.1:*", "query", "appid"),
                        binding("127.0.0.1:*", "query", "key"),
                    ],
                ),
                ("tenant_token".to_string(), Vec::new()),
            ]
            .into(),
            Vec::new(),
        )
    }

    fn reach() -> HttpReach {
        HttpReach {
            manifest: vec!["slack.com".into()],
            granted: None,
            operator_addresses: Vec::new(),
            added: Vec::new(),
        }
    }

    fn apply(
        s: &Secrets,
        uses: &[Use],
        url: &mut String,
        headers: &mut Vec<(String, String)>,
        body: &mut Vec<u8>,
    ) -> Result<(), SecretError> {
        s.apply(uses, "POST", url, headers, body, &reach())
    }

    #[test]
    fn the_plugin_reads_config_without_secret_keys() {
        let s = secrets();
        let shown = s.public_config(&serde_json::json!({"bot_token": "x", "api_base": "y"}));
        assert_eq!(shown, serde_json::json!({"api_base": "y"}));
        assert!(s.is_set("bot_token"));
        assert!(!s.is_set("unset"));
        assert!(!s.is_set("api_base"), "not a secret");
    }

    #[test]
    fn secrets_go_only_where_the_request_names_them() {
        let s = secrets();
        let mut url = "https://slack.com/api/chat.postMessage".to_string();
        let mut headers = vec![("Authorization".to_string(), "Bearer guess".to_string())];
        let mut body = br#"{"text":"bot_token {{bot_token}}"}"#.to_vec();
        apply(
            &s,
            &[Use {
                secret: "bot_token".into(),
                place: Place::Header {
                    name: "authorization".into(),
                    prefix: "Bearer ".into(),
                },
            }],
            &mut url,
            &mut headers,
            &mut body,
        )
        .unwrap();
        assert_eq!(
            headers,
            vec![(
                "authorization".to_string(),
                "Bearer xoxb-123-secret-value".to_string()
            )]
        );
        assert_eq!(body, br#"{"text":"bot_token {{bot_token}}"}"#.to_vec());

        apply(
            &s,
            &[Use {
                secret: "bot_token".into(),
                place: Place::JsonField("/auth/app_secret".into()),
            }],
            &mut url,
            &mut headers,
            &mut body,
        )
        .unwrap_err();
        let mut body = br#"{"app_id":"cli_1","auth":{}}"#.to_vec();
        apply(
            &s,
            &[Use {
                secret: "bot_token".into(),
                place: Place::JsonField("/auth/app_secret".into()),
            }],
            &mut url,
            &mut headers,
            &mut body,
        )
        .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["auth"]["app_secret"], "xoxb-123-secret-value");

        let mut form = b"channel=C1&token=guess".to_vec();
        apply(
            &s,
            &[Use {
                secret: "bot_token".into(),
                place: Place::FormField("token".into()),
            }],
            &mut url,
            &mut headers,
            &mut form,
        )
        .unwrap();
        assert_eq!(form, b"channel=C1&token=xoxb-123-secret-value".to_vec());
        assert_eq!(url, "https://slack.com/api/chat.postMessage", "untouched");
    }

    #[test]
    fn a_query_param_is_set_or_replaced_and_scrubbed_from_text() {
        let s = secrets();
        let place = |name: &str| Use {
            secret: "bot_token".into(),
            place: Place::QueryParam(name.into()),
        };
        let (mut h, mut b) = (Vec::new(), Vec::new());
        let mut url =
            "http://127.0.0.1:9/data/2.5/weather?q=S%C3%A3o+Paulo&appid=guess&units=metric"
                .to_string();
        apply(&s, &[place("appid")], &mut url, &mut h, &mut b).unwrap();
        assert_eq!(
            url,
            "http://127.0.0.1:9/data/2.5/weather?q=S%C3%A3o+Paulo&units=metric&appid=xoxb-123-secret-value"
        );
        let mut bare = "http://127.0.0.1:9/x".to_string();
        apply(&s, &[place("key")], &mut bare, &mut h, &mut b).unwrap();
        assert_eq!(bare, "http://127.0.0.1:9/x?key=xoxb-123-secret-value");
        let mut bad = "not a url".to_string();
        assert!(matches!(
            apply(&s, &[place("key")], &mut bad, &mut h, &mut b),
            Err(SecretError::Invalid(_))
        ));
        assert_eq!(bad, "not a url");
        assert_eq!(
            s.scrub_text(&format!("error sending request for url ({url})")),
            "error sending request for url (http://127.0.0.1:9/data/2.5/weather?q=S%C3%A3o+Paulo&units=metric&appid=[secret])"
        );
    }

    #[test]
    fn unknown_and_undeclared_names_are_refused() {
        let s = secrets();
        let use_of = |name: &str| Use {
            secret: name.into(),
            place: Place::FormField("token".into()),
        };
        let (mut u, mut h, mut b) = (
            "https://slack.com/api/x".to_string(),
            Vec::new(),
            Vec::new(),
        );
        assert_eq!(
            apply(&s, &[use_of("unset")], &mut u, &mut h, &mut b),
            Err(SecretError::Unknown("unset".into()))
        );
        assert_eq!(
            apply(&s, &[use_of("api_base")], &mut u, &mut h, &mut b),
            Err(SecretError::Denied("api_base".into()))
        );
    }

    #[test]
    fn captured_values_are_kept_blanked_and_scrubbed() {
        let s = secrets();
        let mut body =
            br#"{"code":0,"tenant_access_token":"t-g1044ghJRUIJJ5ELSBO","expire":7200}"#.to_vec();
        s.capture(
            &Capture {
                pointer: "/tenant_access_token".into(),
                secret: "tenant_token".into(),
                expires_in_pointer: Some("/expire".into()),
            },
            &mut body,
        )
        .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["tenant_access_token"], "");
        assert!(s.is_set("tenant_token"));
        let mut echoed = b"you sent t-g1044ghJRUIJJ5ELSBO and xoxb-123-secret-value".to_vec();
        let mut headers = vec![(
            "x-echo".to_string(),
            "Bearer t-g1044ghJRUIJJ5ELSBO".to_string(),
        )];
        s.scrub(&mut headers, &mut echoed);
        assert_eq!(echoed, b"you sent [secret] and [secret]".to_vec());
        assert_eq!(headers[0].1, "Bearer [secret]");
        assert!(
            s.capture(
                &Capture {
                    pointer: "/x".into(),
                    secret: "bot_token".into(),
                    expires_in_pointer: None,
                },
                &mut br#"{"x":"y"}"#.to_vec(),
            )
            .is_err(),
            "a capture may not overwrite a configured secret"
        );
    }

    fn feishu(encrypt_key: bool) -> Secrets {
        let mut config = serde_json::json!({"verification_token": "v-token-1234567"});
        if encrypt_key {
            config["encrypt_key"] = "test key".into();
        }
        Secrets::new(
            ["verification_token".to_string(), "encrypt_key".to_string()].into(),
            &config,
        )
        .bound(
            BTreeMap::new(),
            vec![WebhookToken {
                secret: "verification_token".into(),
                json: vec!["/token".into(), "/header/token".into()],
                encrypted: Some("/encrypt".into()),
            }],
        )
    }

    #[test]
    fn a_webhook_token_is_checked_on_the_parsed_body_and_removed() {
        let s = feishu(false);
        let forged = |body: &str| s.inbound_body(body.as_bytes(), Inbound::Request);
        // Every spelling of the old marker, and of anything but the token.
        for body in [
            r#"{"token":"{{secret:verification_token}}","event":{}}"#,
            r#"{"token":"{{secret:verification_token}}","event":{}}"#,
            r#"{"token":"{{secret:verification_token}}"}"#,
            r#"{"token":"{{secret:verification_token}}"}"#,
            r#"{"schema":"2.0","header":{"token":"{{secret:verification_token}}"}}"#,
            r#"{"header":{"token":"v-token-1234567"},"token":"guess"}"#,
            r#"{"token":"v-token-123456"}"#,
            r#"{"token":1}"#,
            r#"{"event":{"token":"v-token-1234567"}}"#,
            r#"{"challenge":"x","type":"url_verification"}"#,
            "token=v-token-1234567",
        ] {
            assert!(
                matches!(forged(body), Err(SecretError::Forged(_))),
                "{body} was accepted"
            );
        }
        let ok =
            forged(r#"{"schema":"2.0","header":{"token":"v-token-1234567","event_type":"x"}}"#)
                .unwrap();
        let ok: serde_json::Value = serde_json::from_slice(&ok).unwrap();
        assert_eq!(
            ok,
            serde_json::json!({"schema":"2.0","header":{"event_type":"x"}})
        );
        let ok = forged(r#"{"token":"v-token-1234567","type":"url_verification","challenge":"c"}"#)
            .unwrap();
        let ok: serde_json::Value = serde_json::from_slice(&ok).unwrap();
        assert_eq!(
            ok,
            serde_json::json!({"type":"url_verification","challenge":"c"})
        );
        // Elsewhere in the event, the value is scrubbed, not kept.
        let text =
            forged(r#"{"token":"v-token-1234567","event":{"text":"v-token-1234567"}}"#).unwrap();
        assert_eq!(text, br#"{"event":{"text":"[secret]"}}"#.to_vec());
    }

    #[test]
    fn an_encrypted_body_is_token_checked_once_decrypted() {
        use aes::cipher::{BlockEncryptMut, KeyIvInit, block_padding::Pkcs7};
        let s = feishu(true);
        let outer = br#"{"encrypt":"..."}"#;
        assert_eq!(
            s.inbound_body(outer, Inbound::Request).unwrap(),
            outer.to_vec(),
            "checked after decryption instead"
        );
        let seal = |plain: &str| {
            let key = Sha256::digest(b"test key");
            let iv = [7u8; 16];
            let mut out = iv.to_vec();
            out.extend(
                cbc::Encryptor::<aes::Aes256>::new_from_slices(&key, &iv)
                    .unwrap()
                    .encrypt_padded_vec_mut::<Pkcs7>(plain.as_bytes()),
            );
            out
        };
        let open = |plain: &str| s.decrypt(Cipher::Aes256CbcSha256Key, "encrypt_key", &seal(plain));
        assert_eq!(
            open(r#"{"header":{"token":"v-token-1234567"},"event":{}}"#).unwrap(),
            br#"{"event":{},"header":{}}"#.to_vec()
        );
        assert!(matches!(
            open(r#"{"header":{"token":"{{secret:verification_token}}"}}"#),
            Err(SecretError::Forged(_))
        ));
        assert!(matches!(
            open(r#"{"event":{}}"#),
            Err(SecretError::Forged(_))
        ));
    }

    #[test]
    fn a_secret_goes_nowhere_its_manifest_does_not_bind_it() {
        let s = secrets();
        let mut url = "https://slack.com/api/chat.postMessage".to_string();
        let (mut h, mut body) = (Vec::new(), br#"{"channel":"C1","text":"hi"}"#.to_vec());
        let leak = Use {
            secret: "bot_token".into(),
            place: Place::JsonField("/text".into()),
        };
        let err = apply(&s, &[leak], &mut url, &mut h, &mut body).unwrap_err();
        assert!(
            matches!(&err, SecretError::NotBound(m) if m.contains("`/text`")),
            "{err}"
        );
        assert_eq!(
            body,
            br#"{"channel":"C1","text":"hi"}"#.to_vec(),
            "nothing placed"
        );
        let unbound = Use {
            secret: "signing_secret".into(),
            place: Place::Header {
                name: "authorization".into(),
                prefix: "Bearer ".into(),
            },
        };
        let err = apply(&s, &[unbound], &mut url, &mut h, &mut body).unwrap_err();
        assert!(
            matches!(&err, SecretError::NotBound(m) if m.contains("nowhere")),
            "{err}"
        );
        assert!(h.is_empty());
        let err = s
            .capture(
                &Capture {
                    pointer: "/t".into(),
                    secret: "undeclared".into(),
                    expires_in_pointer: None,
                },
                &mut br#"{"t":"a-captured-value"}"#.to_vec(),
            )
            .unwrap_err();
        assert!(
            matches!(&err, SecretError::NotBound(m) if m.contains("[captures.undeclared]")),
            "{err}"
        );
    }

    #[test]
    fn slack_signature_example_verifies() {
        // https://api.slack.com/authentication/verifying-requests-from-slack
        let s = secrets();
        let body = "token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c";
        let expected =
            hex::decode("a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503")
                .unwrap();
        let parts = [
            Part::Bytes(b"v0:1531420618:".to_vec()),
            Part::Bytes(body.as_bytes().to_vec()),
        ];
        assert_eq!(
            s.verify(
                Digest::HmacSha256,
                Some("signing_secret"),
                &parts,
                &expected
            ),
            Ok(true)
        );
        let mut wrong = expected.clone();
        wrong[0] ^= 1;
        assert_eq!(
            s.verify(Digest::HmacSha256, Some("signing_secret"), &parts, &wrong),
            Ok(false)
        );
    }

    #[test]
    fn feishu_decrypt_example_and_signature() {
        // https://open.feishu.cn/document/server-docs/event-subscription-guide/event-subscription-configure-/encrypt-key-encryption-configuration-case
        let s = Secrets::new(
            ["encrypt_key".to_string()].into(),
            &serde_json::json!({"encrypt_key": "test key"}),
        );
        use base64::Engine as _;
        let data = base64::engine::general_purpose::STANDARD
            .decode("P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=")
            .unwrap();
        assert_eq!(
            s.decrypt(Cipher::Aes256CbcSha256Key, "encrypt_key", &data),
            Ok(b"hello world".to_vec())
        );
        let marked = Secrets::new(
            ["verification_token".to_string()].into(),
            &serde_json::json!({"verification_token": "v-token-1234567"}),
        );
        let mut frame = b"\x0a\x0fv-token-1234567\x10".to_vec();
        marked.mask_in_place(&mut frame);
        assert_eq!(frame, b"\x0a\x0f***************\x10".to_vec());
        // A value cut across frames at any byte: each piece of 8 bytes or
        // more is masked, so at most 7 bytes reach the plugin on each side.
        let token = "v-token-1234567";
        for cut in 1..token.len() {
            let (head, tail) = token.split_at(cut);
            let mut first = format!("{{\"token\":\"{head}").into_bytes();
            let mut second = format!("{tail}\",\"x\":1}}").into_bytes();
            let (len1, len2) = (first.len(), second.len());
            marked.mask_in_place(&mut first);
            marked.mask_in_place(&mut second);
            assert_eq!((first.len(), second.len()), (len1, len2), "lengths kept");
            let seen = [first, second].concat();
            let seen = String::from_utf8_lossy(&seen);
            for piece in token.as_bytes().windows(MASKED_FRAGMENT) {
                let piece = String::from_utf8_lossy(piece);
                assert!(
                    !seen.contains(&*piece),
                    "cut at {cut}: `{piece}` reached the plugin in {seen}"
                );
            }
            let kept = |piece: &str| {
                if piece.len() < MASKED_FRAGMENT {
                    piece.len()
                } else {
                    0
                }
            };
            let leaked = kept(head) + kept(tail);
            assert_eq!(
                seen.matches('*').count(),
                token.len() - leaked,
                "cut at {cut}: only pieces under 8 bytes stay ({seen})"
            );
        }
        // a middle piece of a three-way split
        let mut middle = b"\x12\x08oken-123\x18".to_vec();
        marked.mask_in_place(&mut middle);
        assert_eq!(middle, b"\x12\x08********\x18".to_vec());
        assert!(
            s.decrypt(Cipher::Aes256CbcSha256Key, "encrypt_key", &data[..20])
                .is_err()
        );
        let parts = [
            Part::Bytes(b"1700000000nonce".to_vec()),
            Part::Secret("encrypt_key".into()),
            Part::Bytes(b"{}".to_vec()),
        ];
        let want = Sha256::digest(b"1700000000noncetest key{}");
        assert_eq!(s.verify(Digest::Sha256, None, &parts, &want), Ok(true));
    }
}
