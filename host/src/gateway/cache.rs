//! The exact-match response cache (`gateway.cache`): local, bounded (least
//! recently used answers go first), with a time to live.
//!
//! Decisions:
//! - **What is cached**: only requests for one deterministic, complete
//!   answer — not streamed, no tools (`tools`, `tool_choice`, and the legacy
//!   `functions`, `function_call`), `n` absent or 1, and `temperature`
//!   absent or 0 (see [`ResponseCache::cacheable`]). A request that sets a
//!   temperature above 0 asks for variety, so it always reaches the model.
//!   An absent temperature is cached: most clients never set one, and the
//!   cache is off unless the user turns it on.
//! - **The key** is the SHA-256 of the workspace, the endpoint (so an
//!   OpenAI and an Anthropic request with the same body never share an
//!   answer) and the canonical JSON of the request body (object keys
//!   sorted, integral floats written as integers, so `0.0` and `0` match),
//!   leaving out only the fields that cannot change the answer: `user`,
//!   `stream` and `stream_options`. Everything else counts, including the
//!   model alias as requested, `temperature`, `seed`, `max_tokens`,
//!   `response_format` and the system prompt.
//! - **Per workspace**: answers are never shared between workspaces, even
//!   for identical requests. Sharing would let one workspace learn, from a
//!   hit's speed or content, what another asked, which the isolation
//!   between workspaces rules out.
//! - Clear it (`clear`) when the configuration is reloaded: an alias may
//!   then point at other deployments.
//!
//! The caller marks hits (a response header and a `cached` usage row that
//! costs nothing) and only stores successful, complete answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::config::GatewayCache;

/// Request fields that do not change the answer, left out of the key.
pub const IGNORED_FIELDS: [&str; 3] = ["user", "stream", "stream_options"];

type Key = [u8; 32];

struct Slot {
    response: Value,
    expires: Instant,
    /// Position in `Inner::lru`.
    tick: u64,
}

#[derive(Default)]
struct Inner {
    map: HashMap<Key, Slot>,
    /// Last use -> key; the first entry is the least recently used.
    lru: BTreeMap<u64, Key>,
    tick: u64,
}

impl Inner {
    fn remove(&mut self, key: &Key) {
        if let Some(slot) = self.map.remove(key) {
            self.lru.remove(&slot.tick);
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }
}

/// Counters since the cache was made.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
    pub entries: u64,
}

pub struct ResponseCache {
    inner: Mutex<Inner>,
    max_entries: usize,
    ttl: Duration,
    hits: AtomicU64,
    misses: AtomicU64,
}

impl ResponseCache {
    /// A cache of at most `max_entries` answers (at least 1), each kept for
    /// `ttl`.
    pub fn new(max_entries: u64, ttl: Duration) -> Self {
        ResponseCache {
            inner: Mutex::new(Inner::default()),
            max_entries: usize::try_from(max_entries.max(1)).unwrap_or(usize::MAX),
            ttl,
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
        }
    }

    /// The cache `gateway.cache` asks for, or `None` when it is disabled.
    pub fn from_config(config: &GatewayCache) -> Option<Self> {
        config
            .enabled
            .then(|| Self::new(config.max_entries, Duration::from_secs(config.ttl_secs)))
    }

    /// Whether a request body may be answered from (and stored in) the
    /// cache; see the module documentation.
    pub fn cacheable(request: &Value) -> bool {
        let Some(fields) = request.as_object() else {
            return false;
        };
        let absent = |k: &str| fields.get(k).is_none_or(Value::is_null);
        let no_tools = ["tools", "functions"].iter().all(|k| {
            fields
                .get(*k)
                .is_none_or(|v| v.is_null() || v.as_array().is_some_and(Vec::is_empty))
        });
        let streaming = fields
            .get("stream")
            .is_some_and(|v| !(v.is_null() || v == &Value::Bool(false)));
        let one_choice = fields
            .get("n")
            .is_none_or(|v| v.is_null() || v.as_u64() == Some(1));
        let deterministic = fields
            .get("temperature")
            .is_none_or(|v| v.is_null() || v.as_f64() == Some(0.0));
        !streaming
            && no_tools
            && absent("tool_choice")
            && absent("function_call")
            && one_choice
            && deterministic
    }

    /// The cache key of a request: see the module documentation.
    pub fn key(workspace: &str, endpoint: &str, request: &Value) -> [u8; 32] {
        let mut text = Vec::with_capacity(256);
        text.extend_from_slice(b"pincer-cache-v1\n");
        for part in [workspace, endpoint] {
            text.extend_from_slice(part.len().to_string().as_bytes());
            text.push(b':');
            text.extend_from_slice(part.as_bytes());
        }
        match request {
            Value::Object(fields) => {
                let kept: serde_json::Map<String, Value> = fields
                    .iter()
                    .filter(|(k, _)| !IGNORED_FIELDS.contains(&k.as_str()))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                canonical(&Value::Object(kept), &mut text);
            }
            other => canonical(other, &mut text),
        }
        Sha256::digest(&text).into()
    }

    /// The cached answer to `request` from `workspace` at `endpoint`
    /// (e.g. `/v1/chat/completions`), if there is a live one.
    pub fn get(&self, workspace: &str, endpoint: &str, request: &Value) -> Option<Value> {
        if !Self::cacheable(request) {
            return None;
        }
        let found = self.get_at(&Self::key(workspace, endpoint, request), Instant::now());
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Stores the answer to a cacheable `request`; other requests are
    /// ignored.
    pub fn put(&self, workspace: &str, endpoint: &str, request: &Value, response: Value) {
        if Self::cacheable(request) {
            self.put_at(
                Self::key(workspace, endpoint, request),
                response,
                Instant::now(),
            );
        }
    }

    /// Forgets every answer.
    #[cfg(test)]
    pub fn clear(&self) {
        if let Some(mut inner) = self.lock() {
            *inner = Inner::default();
        }
    }

    /// Number of stored answers (some may have expired).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.lock().map_or(0, |inner| inner.map.len())
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    #[cfg(test)]
    pub fn stats(&self) -> CacheStats {
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            entries: self.len() as u64,
        }
    }

    /// `None` if a panic poisoned the lock: the cache then stays out of the
    /// way (every lookup misses) rather than serve from a broken state.
    fn lock(&self) -> Option<MutexGuard<'_, Inner>> {
        self.inner.lock().ok()
    }

    fn get_at(&self, key: &Key, now: Instant) -> Option<Value> {
        let mut inner = self.lock()?;
        let expires = inner.map.get(key)?.expires;
        if now >= expires {
            inner.remove(key);
            return None;
        }
        let tick = inner.next_tick();
        let slot = inner.map.get_mut(key)?;
        let old = std::mem::replace(&mut slot.tick, tick);
        let response = slot.response.clone();
        inner.lru.remove(&old);
        inner.lru.insert(tick, *key);
        Some(response)
    }

    fn put_at(&self, key: Key, response: Value, now: Instant) {
        let Some(mut inner) = self.lock() else {
            return;
        };
        inner.remove(&key);
        while inner.map.len() >= self.max_entries {
            let Some((_, oldest)) = inner.lru.pop_first() else {
                break;
            };
            inner.map.remove(&oldest);
        }
        let tick = inner.next_tick();
        inner.lru.insert(tick, key);
        inner.map.insert(
            key,
            Slot {
                response,
                expires: now + self.ttl,
                tick,
            },
        );
    }
}

/// Writes `value` as JSON with object keys sorted and integral floats as
/// integers.
fn canonical(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Number(n) => {
            let integral = n
                .as_f64()
                .filter(|f| n.is_f64() && f.fract() == 0.0 && f.abs() < 9.0e15);
            match integral {
                // exact: |f| < 2^53
                Some(f) => out.extend_from_slice(format!("{f:.0}").as_bytes()),
                None => out.extend_from_slice(n.to_string().as_bytes()),
            }
        }
        Value::String(s) => write_string(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                canonical(item, out);
            }
            out.push(b']');
        }
        Value::Object(fields) => {
            let mut sorted: Vec<(&String, &Value)> = fields.iter().collect();
            sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.push(b'{');
            for (i, (k, v)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_string(k, out);
                out.push(b':');
                canonical(v, out);
            }
            out.push(b'}');
        }
    }
}

fn write_string(s: &str, out: &mut Vec<u8>) {
    // serializing a str cannot fail
    if serde_json::to_writer(&mut *out, s).is_err() {
        out.extend_from_slice(s.as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CHAT: &str = "/v1/chat/completions";

    fn request() -> Value {
        json!({
            "model": "default",
            "messages": [{"role": "user", "content": "What is 2+2?"}],
            "temperature": 0,
            "max_tokens": 10,
        })
    }

    fn answer(text: &str) -> Value {
        json!({"id": "chatcmpl-1", "object": "chat.completion",
               "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop"}],
               "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
    }

    #[test]
    fn hit_after_put_and_stats() {
        let cache = ResponseCache::new(10, Duration::from_secs(60));
        assert_eq!(cache.get("dev", CHAT, &request()), None);
        cache.put("dev", CHAT, &request(), answer("4"));
        assert_eq!(cache.get("dev", CHAT, &request()), Some(answer("4")));
        assert_eq!(
            cache.stats(),
            CacheStats {
                hits: 1,
                misses: 1,
                entries: 1
            }
        );
        cache.clear();
        assert!(cache.is_empty());
        assert_eq!(cache.get("dev", CHAT, &request()), None);
    }

    #[test]
    fn key_ignores_order_formatting_and_non_semantic_fields() {
        let base = ResponseCache::key("dev", CHAT, &request());
        let reordered: Value = serde_json::from_str(
            r#"{"max_tokens": 10.0, "temperature": 0.0, "user": "alice", "stream": false,
                "stream_options": null,
                "messages": [{"content": "What is 2+2?", "role": "user"}], "model": "default"}"#,
        )
        .unwrap();
        assert_eq!(ResponseCache::key("dev", CHAT, &reordered), base);
    }

    #[test]
    fn key_includes_everything_that_changes_the_answer() {
        let base = ResponseCache::key("dev", CHAT, &request());
        let mut variants = Vec::new();
        for (field, value) in [
            ("model", json!("other")),
            ("max_tokens", json!(11)),
            ("seed", json!(7)),
            ("response_format", json!({"type": "json_object"})),
            (
                "messages",
                json!([{"role": "user", "content": "What is 2+3?"}]),
            ),
            (
                "messages",
                json!([{"role": "user", "content": "What is 2+2? "}]),
            ),
            ("top_p", json!(0.5)),
        ] {
            let mut changed = request();
            changed[field] = value;
            variants.push(ResponseCache::key("dev", CHAT, &changed));
        }
        variants.push(ResponseCache::key("ops", CHAT, &request()));
        variants.push(ResponseCache::key("dev", "/v1/messages", &request()));
        // length-prefixed parts: moving a character between them matters
        variants.push(ResponseCache::key("de", &format!("v{CHAT}"), &request()));
        variants.push(base);
        let distinct: std::collections::HashSet<_> = variants.iter().collect();
        assert_eq!(distinct.len(), variants.len());
    }

    #[test]
    fn workspaces_do_not_share_answers() {
        let cache = ResponseCache::new(10, Duration::from_secs(60));
        cache.put("dev", CHAT, &request(), answer("4"));
        assert_eq!(cache.get("ops", CHAT, &request()), None);
        assert_eq!(cache.get("dev", "/v1/messages", &request()), None);
    }

    #[test]
    fn cacheable_requests() {
        assert!(ResponseCache::cacheable(&request()));
        let mut no_temperature = request();
        no_temperature
            .as_object_mut()
            .unwrap()
            .remove("temperature");
        assert!(ResponseCache::cacheable(&no_temperature));
        for (field, value, want) in [
            ("stream", json!(true), false),
            ("stream", json!(false), true),
            ("stream", Value::Null, true),
            (
                "tools",
                json!([{"type": "function", "function": {"name": "f"}}]),
                false,
            ),
            ("tools", json!([]), true),
            ("tool_choice", json!("auto"), false),
            ("tool_choice", json!("none"), false),
            ("functions", json!([{"name": "f"}]), false),
            ("function_call", json!("auto"), false),
            ("n", json!(2), false),
            ("n", json!(1), true),
            ("temperature", json!(0.7), false),
            ("temperature", json!(0.0), true),
            ("temperature", Value::Null, true),
            ("user", json!("alice"), true),
        ] {
            let mut r = request();
            r[field] = value.clone();
            assert_eq!(ResponseCache::cacheable(&r), want, "{field}: {value}");
        }
        assert!(!ResponseCache::cacheable(&json!([1, 2])));
        assert!(!ResponseCache::cacheable(&json!("x")));
    }

    #[test]
    fn uncacheable_requests_are_neither_stored_nor_served() {
        let cache = ResponseCache::new(10, Duration::from_secs(60));
        let mut streamed = request();
        streamed["stream"] = json!(true);
        cache.put("dev", CHAT, &streamed, answer("4"));
        assert!(cache.is_empty());
        cache.put("dev", CHAT, &request(), answer("4"));
        // same key (stream is ignored), but a stream is never served from here
        assert_eq!(cache.get("dev", CHAT, &streamed), None);
    }

    #[test]
    fn entries_expire() {
        let cache = ResponseCache::new(10, Duration::from_secs(300));
        let key = ResponseCache::key("dev", CHAT, &request());
        let t0 = Instant::now();
        cache.put_at(key, answer("4"), t0);
        assert!(cache.get_at(&key, t0 + Duration::from_secs(299)).is_some());
        assert_eq!(cache.get_at(&key, t0 + Duration::from_secs(300)), None);
        assert!(cache.is_empty());
        // a fresh put starts a new lifetime
        cache.put_at(key, answer("5"), t0 + Duration::from_secs(400));
        assert_eq!(
            cache.get_at(&key, t0 + Duration::from_secs(600)),
            Some(answer("5"))
        );
    }

    #[test]
    fn bounded_least_recently_used_first() {
        let cache = ResponseCache::new(3, Duration::from_secs(60));
        let ask = |q: &str| {
            let mut r = request();
            r["messages"] = json!([{"role": "user", "content": q}]);
            r
        };
        for q in ["a", "b", "c"] {
            cache.put("dev", CHAT, &ask(q), answer(q));
        }
        // touch "a": "b" is now the least recently used
        assert!(cache.get("dev", CHAT, &ask("a")).is_some());
        cache.put("dev", CHAT, &ask("d"), answer("d"));
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get("dev", CHAT, &ask("b")), None);
        for q in ["a", "c", "d"] {
            assert_eq!(cache.get("dev", CHAT, &ask(q)), Some(answer(q)), "{q}");
        }
        // replacing an entry does not evict another
        cache.put("dev", CHAT, &ask("c"), answer("c2"));
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get("dev", CHAT, &ask("c")), Some(answer("c2")));
        let inner = cache.lock().unwrap();
        assert_eq!(inner.lru.len(), inner.map.len());
    }

    #[test]
    fn from_config() {
        assert!(ResponseCache::from_config(&GatewayCache::default()).is_none());
        let cache = ResponseCache::from_config(&GatewayCache {
            enabled: true,
            ttl_secs: 5,
            max_entries: 2,
        })
        .unwrap();
        assert_eq!((cache.max_entries, cache.ttl), (2, Duration::from_secs(5)));
        assert_eq!(ResponseCache::new(0, Duration::ZERO).max_entries, 1);
    }

    #[test]
    fn concurrent_use() {
        let cache = std::sync::Arc::new(ResponseCache::new(50, Duration::from_secs(60)));
        let handles: Vec<_> = (0..8)
            .map(|t| {
                let cache = std::sync::Arc::clone(&cache);
                std::thread::spawn(move || {
                    for i in 0..200 {
                        let mut r = request();
                        r["messages"] =
                            json!([{"role": "user", "content": format!("{}", (i * 7 + t) % 80)}]);
                        if cache.get("dev", CHAT, &r).is_none() {
                            cache.put("dev", CHAT, &r, answer("x"));
                        }
                    }
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        assert!(cache.len() <= 50);
        let stats = cache.stats();
        assert_eq!(stats.hits + stats.misses, 1600);
    }

    #[test]
    fn canonical_json() {
        let mut out = Vec::new();
        canonical(
            &json!({"b": [1, 2.5, 3.0, -0.0, 1e300], "a": {"z": null, "y": "é\"\n"}, "c": true}),
            &mut out,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"a":{"y":"é\"\n","z":null},"b":[1,2.5,3,-0,1e+300],"c":true}"#
        );
    }
}
