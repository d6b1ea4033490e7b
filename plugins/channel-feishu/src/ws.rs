//! The long connection's control plane, as lark-oapi's websocket client
//! runs it (larksuite/oapi-sdk-python, `lark_oapi/ws/client.py`,
//! `lark_oapi/ws/model.py`, `lark_oapi/ws/const.py`):
//!
//! - `POST {domain}/callback/ws/endpoint` with `{"AppID", "AppSecret"}`
//!   answers `{"code", "msg", "data": {"URL", "ClientConfig"}}`; code 0 is
//!   success, 1 and 1000040343 are the server's trouble, others the client's.
//! - The URL's query carries `device_id` and `service_id`; pings go to that
//!   service.
//! - `ClientConfig` (also the payload of every pong) holds seconds:
//!   `PingInterval`, `ReconnectInterval`, `ReconnectNonce` (random delay
//!   before the first reconnect) and `ReconnectCount` (-1: forever).
//! - Data frames carry headers `type`, `message_id`, `sum`, `seq`,
//!   `trace_id`; a payload in `sum` > 1 parts is joined in `seq` order.

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// `GEN_ENDPOINT_URI`.
pub const ENDPOINT_PATH: &str = "/callback/ws/endpoint";

/// The SDK's defaults before the server says otherwise (`Client.__init__`).
pub const DEFAULT_PING_SECS: u32 = 120;
const DEFAULT_RECONNECT_INTERVAL_SECS: u32 = 120;
const DEFAULT_RECONNECT_NONCE_SECS: u32 = 30;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct ClientConfig {
    pub reconnect_count: Option<i64>,
    pub reconnect_interval: Option<i64>,
    pub reconnect_nonce: Option<i64>,
    pub ping_interval: Option<i64>,
}

/// The keepalive and reconnect settings a `ClientConfig` asks for, in the
/// host's terms (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub ping_interval_ms: u32,
    /// Reconnect when nothing arrived for three ping intervals (every ping
    /// is answered by a pong, so silence means a dead connection).
    pub idle_timeout_ms: u32,
    pub min_delay_ms: u32,
    pub max_delay_ms: u32,
    pub jitter_ms: u32,
    pub max_attempts: Option<u32>,
}

fn secs(value: Option<i64>, default: u32) -> u32 {
    match value {
        Some(v) if v > 0 => u32::try_from(v).unwrap_or(u32::MAX),
        _ => default,
    }
}

impl ClientConfig {
    /// The SDK waits `ReconnectNonce` at random, then retries every
    /// `ReconnectInterval`, `ReconnectCount` times. The host's policy doubles
    /// from a minimum to a maximum; we start at 1 s (so a dropped connection
    /// comes back at once, as the SDK's first try after the jitter does) and
    /// cap at the server's interval, with the server's jitter. A count of
    /// -1 (or 0) means: never give up.
    pub fn timing(&self) -> Timing {
        let ping = secs(self.ping_interval, DEFAULT_PING_SECS).min(3600);
        let interval = secs(self.reconnect_interval, DEFAULT_RECONNECT_INTERVAL_SECS).min(3600);
        let nonce = match self.reconnect_nonce {
            Some(v) if v >= 0 => u32::try_from(v).unwrap_or(u32::MAX).min(3600),
            _ => DEFAULT_RECONNECT_NONCE_SECS,
        };
        let max_delay_ms = interval * 1000;
        Timing {
            ping_interval_ms: ping * 1000,
            idle_timeout_ms: ping * 3000,
            min_delay_ms: 1000.min(max_delay_ms),
            max_delay_ms,
            jitter_ms: nonce * 1000,
            max_attempts: match self.reconnect_count {
                Some(n) if n > 0 => Some(u32::try_from(n).unwrap_or(u32::MAX)),
                _ => None,
            },
        }
    }
}

/// A usable answer of the endpoint call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub url: String,
    pub service_id: i32,
    pub config: ClientConfig,
}

/// Why the endpoint call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointError {
    /// The server's trouble (code 1 "system busy", 1000040343 internal error,
    /// or nonsense): retry.
    Server(String),
    /// The client's (bad credentials, long connection not enabled…).
    Client(i64, String),
}

/// Reads the endpoint's JSON answer (`EndpointResp`).
pub fn endpoint(body: &[u8]) -> Result<Endpoint, EndpointError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|err| EndpointError::Server(format!("the answer is not JSON: {err}")))?;
    let code = value.get("code").and_then(Value::as_i64).unwrap_or(-1);
    let msg = value
        .get("msg")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    match code {
        0 => {}
        1 | 1_000_040_343 => return Err(EndpointError::Server(format!("code {code}: {msg}"))),
        _ => return Err(EndpointError::Client(code, msg)),
    }
    let data = value.get("data").unwrap_or(&Value::Null);
    let url = data
        .get("URL")
        .and_then(Value::as_str)
        .filter(|u| u.starts_with("wss://") || u.starts_with("ws://"))
        .ok_or_else(|| EndpointError::Server("the answer has no ws(s):// `data.URL`".into()))?
        .to_string();
    let service_id = query_param(&url, "service_id")
        .and_then(|s| s.parse::<i32>().ok())
        .ok_or_else(|| EndpointError::Server("the URL has no numeric `service_id`".into()))?;
    let config = data
        .get("ClientConfig")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    Ok(Endpoint {
        url,
        service_id,
        config,
    })
}

/// One query parameter of a URL (no percent-decoding: the ids are digits).
pub fn query_param<'a>(url: &'a str, name: &str) -> Option<&'a str> {
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == name).then_some(v)
    })
}

/// The pong's payload, when it is a `ClientConfig`.
pub fn pong_config(payload: &[u8]) -> Option<ClientConfig> {
    if payload.is_empty() {
        return None;
    }
    serde_json::from_slice(payload).ok()
}

/// The `sum`/`seq` split of a data frame: `(sum, seq)`, `None` when the
/// payload is whole.
pub fn split(sum: Option<&str>, seq: Option<&str>) -> Result<Option<(usize, usize)>, String> {
    let sum: usize = match sum {
        None | Some("") => return Ok(None),
        Some(s) => s.parse().map_err(|_| format!("bad `sum` header {s:?}"))?,
    };
    if sum <= 1 {
        return Ok(None);
    }
    if sum > 64 {
        return Err(format!("`sum` {sum} is more parts than any event needs"));
    }
    let seq: usize = seq
        .unwrap_or("")
        .parse()
        .map_err(|_| format!("bad `seq` header {seq:?}"))?;
    if seq >= sum {
        return Err(format!("`seq` {seq} is not below `sum` {sum}"));
    }
    Ok(Some((sum, seq)))
}

/// The whole payload once every part `0..sum` has arrived.
pub fn assemble(sum: usize, parts: &BTreeMap<usize, Vec<u8>>) -> Option<Vec<u8>> {
    if (0..sum).any(|i| !parts.contains_key(&i)) {
        return None;
    }
    Some((0..sum).flat_map(|i| parts[&i].iter().copied()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_answers() {
        let body = br#"{"code":0,"msg":"ok","data":{
            "URL":"wss://msg-frontier.feishu.cn/ws/v2?fpid=493&aid=552564&device_id=7350&access_key=abc&service_id=33554678&ticket=t1",
            "ClientConfig":{"ReconnectCount":-1,"ReconnectInterval":120,"ReconnectNonce":30,"PingInterval":120}}}"#;
        let ep = endpoint(body).expect("ok");
        assert_eq!(ep.service_id, 33_554_678);
        assert!(ep.url.starts_with("wss://msg-frontier.feishu.cn/"));
        let t = ep.config.timing();
        assert_eq!(
            t,
            Timing {
                ping_interval_ms: 120_000,
                idle_timeout_ms: 360_000,
                min_delay_ms: 1000,
                max_delay_ms: 120_000,
                jitter_ms: 30_000,
                max_attempts: None,
            }
        );
        assert_eq!(
            endpoint(br#"{"code":1,"msg":"system busy"}"#),
            Err(EndpointError::Server("code 1: system busy".into()))
        );
        assert!(matches!(
            endpoint(br#"{"code":1000040343,"msg":"internal"}"#),
            Err(EndpointError::Server(_))
        ));
        assert_eq!(
            endpoint(br#"{"code":10003,"msg":"invalid param"}"#),
            Err(EndpointError::Client(10003, "invalid param".into()))
        );
        assert!(matches!(
            endpoint(br#"{"code":0,"data":{"URL":"wss://x/ws"}}"#),
            Err(EndpointError::Server(_))
        ));
        assert!(matches!(endpoint(b"<html>"), Err(EndpointError::Server(_))));
        // No ClientConfig: the SDK's defaults.
        let ep = endpoint(br#"{"code":0,"data":{"URL":"ws://127.0.0.1:9/ws?service_id=5"}}"#)
            .expect("ok");
        assert_eq!(ep.config.timing().ping_interval_ms, 120_000);
    }

    #[test]
    fn client_configs_map_to_host_policy() {
        let t = pong_config(
            br#"{"ReconnectCount":5,"ReconnectInterval":10,"ReconnectNonce":0,"PingInterval":30}"#,
        )
        .expect("config")
        .timing();
        assert_eq!(t.ping_interval_ms, 30_000);
        assert_eq!(t.idle_timeout_ms, 90_000);
        assert_eq!((t.min_delay_ms, t.max_delay_ms), (1000, 10_000));
        assert_eq!(t.jitter_ms, 0);
        assert_eq!(t.max_attempts, Some(5));
        // Nonsense falls back to the defaults; zero counts never give up.
        let t = ClientConfig {
            reconnect_count: Some(0),
            reconnect_interval: Some(-3),
            reconnect_nonce: Some(-1),
            ping_interval: Some(0),
        }
        .timing();
        assert_eq!(t.ping_interval_ms, 120_000);
        assert_eq!(t.max_delay_ms, 120_000);
        assert_eq!(t.jitter_ms, 30_000);
        assert_eq!(t.max_attempts, None);
        assert_eq!(pong_config(b""), None);
        assert_eq!(pong_config(b"not json"), None);
    }

    #[test]
    fn query_params() {
        let url = "wss://h/ws?device_id=1&service_id=22#frag";
        assert_eq!(query_param(url, "service_id"), Some("22"));
        assert_eq!(query_param(url, "device_id"), Some("1"));
        assert_eq!(query_param(url, "x"), None);
        assert_eq!(query_param("wss://h/ws", "service_id"), None);
    }

    #[test]
    fn split_payloads_reassemble() {
        assert_eq!(split(None, None), Ok(None));
        assert_eq!(split(Some("1"), Some("0")), Ok(None));
        assert_eq!(split(Some("3"), Some("2")), Ok(Some((3, 2))));
        assert!(split(Some("3"), Some("3")).is_err());
        assert!(split(Some("x"), Some("0")).is_err());
        assert!(split(Some("2"), None).is_err());

        let mut parts = BTreeMap::new();
        parts.insert(1, b"world\"}".to_vec());
        assert_eq!(assemble(3, &parts), None);
        parts.insert(2, Vec::new());
        assert_eq!(assemble(3, &parts), None);
        parts.insert(0, b"{\"hello\":\"".to_vec());
        assert_eq!(
            assemble(3, &parts).as_deref(),
            Some(&b"{\"hello\":\"world\"}"[..])
        );
    }
}
