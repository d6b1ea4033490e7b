//! Wire protocol between the pincer host and the in-container agent runner.
//!
//! One connection carries exactly one exchange: the client writes one JSON
//! [`Request`] line (terminated by `\n`), the runner answers with one JSON
//! [`Response`] line (a turn: a stream of [`Response::Event`] lines) and
//! closes the connection. Both sides use
//! [`encode_line`] and [`decode_line`]; readers bound their line with
//! [`read_line`] ([`MAX_REQUEST_BYTES`] for requests, [`MAX_RESPONSE_BYTES`]
//! for responses).
//!
//! The runner's policy is handed to it at start as JSON in the environment
//! variable [`POLICY_ENV`] (see [`RunnerPolicy`]).
//!
//! Only `serde` and `serde_json`: the host and the runner both depend on
//! this crate, so it stays tiny and its wire format stable.

use std::fmt;
use std::io::{self, BufRead};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

pub mod mounts;
pub mod turn;

pub use turn::{
    EGRESS_SOCKET_PATH, GATEWAY_SOCKET_PATH, GATEWAY_URL_ENV, HOST_TOOLS, Resume, StopReason,
    TurnErrorKind, TurnEvent, TurnLimits, TurnRequest, Verdict,
};

/// Where the runner listens inside the container: in its own folder
/// `/run/pincer/runner` (container-writable; the host never follows names
/// in it), apart from the host-owned, read-only `/run/pincer/gateway`.
pub const SOCKET_PATH: &str = "/run/pincer/runner/runner.sock";

/// Environment variable holding the runner's [`RunnerPolicy`] as JSON.
pub const POLICY_ENV: &str = "PINCER_RUNNER_POLICY";

/// Seconds without a request after which the runner exits, stopping its
/// container (the host starts a fresh one on the next use). Unset or 0: never.
pub const IDLE_ENV: &str = "PINCER_RUNNER_IDLE_SECS";

/// The TCP address inside the container where the runner relays to the
/// egress proxy; every command it starts finds it in [`proxy_environment`].
pub const PROXY_LISTEN: &str = "127.0.0.1:3128";

/// The proxy variables of every command the runner starts when it relays
/// egress on `listen` (both spellings: tools read one or the other). Local
/// addresses bypass the proxy.
pub fn proxy_environment(listen: &str) -> Vec<(String, String)> {
    let url = format!("http://{listen}");
    let no_proxy = "localhost,127.0.0.1,::1";
    [
        ("HTTP_PROXY", url.as_str()),
        ("HTTPS_PROXY", &url),
        ("ALL_PROXY", &url),
        ("NO_PROXY", no_proxy),
        ("http_proxy", &url),
        ("https_proxy", &url),
        ("all_proxy", &url),
        ("no_proxy", no_proxy),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), value.to_string()))
    .collect()
}

/// Largest request line (without its newline) the runner accepts: 1 MiB.
pub const MAX_REQUEST_BYTES: usize = 1024 * 1024;

/// Largest [`Verdict`] line the runner accepts (a refusal's message is
/// short).
pub const MAX_VERDICT_BYTES: usize = 64 * 1024;

/// Cap on each captured output stream (stdout, stderr) of an Exec: 4 MiB.
/// A request's `max_output_bytes` is lowered to this.
pub const MAX_OUTPUT_BYTES: usize = 4 * 1024 * 1024;

/// Largest response line a client should accept: two full output streams
/// whose every byte JSON-escapes to six (`\u0000`), plus room for the rest.
pub const MAX_RESPONSE_BYTES: usize = 2 * 6 * MAX_OUTPUT_BYTES + 64 * 1024;

/// Default [`ExecRequest::timeout_ms`] when a request omits it: 60 s.
pub const DEFAULT_TIMEOUT_MS: u64 = 60_000;

/// Default [`ExecRequest::max_output_bytes`] when a request omits it: 1 MiB.
pub const DEFAULT_MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// What the host asks of the runner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Liveness and status; answered with [`Response::Pong`].
    Ping,
    /// Run a command; answered with [`Response::Exec`] or [`Response::Error`].
    Exec(ExecRequest),
    /// Run one agent turn; answered with a stream of [`Response::Event`]
    /// lines ending in a terminal event (see [`turn`]), or with one
    /// [`Response::Error`] when the turn cannot start.
    Turn(TurnRequest),
    /// The container's gateway token, handed over by the host after start
    /// (never through the environment); the runner keeps it in memory only
    /// and answers [`Response::Ok`]. A later grant replaces it.
    Grant(Grant),
}

/// The gateway token of a [`Request::Grant`]; its `Debug` hides it.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub token: String,
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Grant { token: <hidden> }")
    }
}

/// A command to run inside the container.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecRequest {
    /// Program and arguments; no shell unless `argv` names one. A program
    /// without `/` is looked up in the runner's fixed `PATH`
    /// (`/usr/local/bin:/usr/bin:/bin`) or in `PATH` from `env`.
    pub argv: Vec<String>,
    /// Working directory; `/workspace` when absent.
    #[serde(default)]
    pub cwd: Option<String>,
    /// Added to (and overriding) the fixed base environment
    /// `PATH=/usr/local/bin:/usr/bin:/bin HOME=/workspace LANG=C.UTF-8`
    /// (plus [`proxy_environment`] when the runner relays egress).
    #[serde(default)]
    pub env: Vec<(String, String)>,
    /// Standard input; `/dev/null` when absent.
    #[serde(default)]
    pub stdin: Option<String>,
    /// Wall-clock limit; on expiry the command's whole process group is killed.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Cap for each of stdout and stderr (lowered to [`MAX_OUTPUT_BYTES`]).
    #[serde(default = "default_max_output_bytes")]
    pub max_output_bytes: usize,
}

fn default_timeout_ms() -> u64 {
    DEFAULT_TIMEOUT_MS
}

fn default_max_output_bytes() -> usize {
    DEFAULT_MAX_OUTPUT_BYTES
}

impl ExecRequest {
    /// A request for `argv` with every other field at its default.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        ExecRequest {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: None,
            env: Vec::new(),
            stdin: None,
            timeout_ms: DEFAULT_TIMEOUT_MS,
            max_output_bytes: DEFAULT_MAX_OUTPUT_BYTES,
        }
    }
}

/// What the runner answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Response {
    /// Answer to [`Request::Ping`].
    Pong(Status),
    /// The command ran (whatever its exit status).
    Exec(ExecResult),
    /// The request could not be carried out.
    Error { kind: ErrorKind, message: String },
    /// One event of a [`Request::Turn`].
    Event(TurnEvent),
    /// The request (a [`Request::Grant`]) was carried out.
    Ok,
}

impl Response {
    /// Shorthand for [`Response::Error`].
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Self {
        Response::Error {
            kind,
            message: message.into(),
        }
    }
}

/// The runner's view of itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Status {
    pub pid: u32,
    pub uid: u32,
    pub uptime_ms: u64,
    /// The runner's version (its crate version).
    pub version: String,
    /// What the runner enforces, as opposed to what it was asked to.
    pub enforcement: Enforcement,
    /// The runner holds a gateway token ([`Request::Grant`]).
    #[serde(default)]
    pub granted: bool,
    /// Commands and turns running now ([`Request::Exec`],
    /// [`Request::Turn`]; a ping is not work): a container with any is
    /// never frozen or stopped for idleness.
    #[serde(default)]
    pub busy: u32,
    /// Milliseconds since the last command or turn ended (since the runner
    /// started when there was none); 0 while busy.
    #[serde(default)]
    pub idle_ms: u64,
}

/// The restrictions the runner has in force.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Enforcement {
    /// The runner's own seccomp filter denying `execve`/`execveat` (EPERM)
    /// is installed, for the runner and everything it starts.
    pub exec_filter: bool,
    /// The kernel refuses `io_uring_setup` in the container (its seccomp
    /// profile does; io_uring would submit I/O seccomp never sees).
    #[serde(default)]
    pub io_uring_refused: bool,
    /// The kernel's Landlock ABI version, when Landlock is available.
    pub landlock_abi: Option<u32>,
    /// The executables (canonical paths) every command is restricted to,
    /// when `allowed_executables` is enforced.
    pub allowed_executables: Option<Vec<String>>,
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecResult {
    /// Exit code when the command exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when the command was killed by a signal.
    pub signal: Option<i32>,
    /// Captured stdout (lossy UTF-8), possibly truncated.
    pub stdout: String,
    /// Captured stderr (lossy UTF-8), possibly truncated.
    pub stderr: String,
    /// Some output was dropped: the head and tail of an over-long stream are
    /// kept around a marker `\n[... N bytes truncated ...]\n`.
    pub truncated: bool,
    /// The timeout expired and the command's process group was killed.
    pub timed_out: bool,
    pub duration_ms: u64,
}

/// Why a request failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request is malformed (bad JSON, empty argv, too large, ...).
    BadRequest,
    /// Refused by policy or by the kernel (EPERM, EACCES).
    PermissionDenied,
    /// The program or working directory does not exist.
    NotFound,
    /// The command could not be started for another reason.
    SpawnFailed,
    /// The runner failed (or is busy).
    Internal,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ErrorKind::BadRequest => "bad request",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::NotFound => "not found",
            ErrorKind::SpawnFailed => "spawn failed",
            ErrorKind::Internal => "internal error",
        })
    }
}

/// Restrictions the runner applies to itself at start, before it accepts a
/// connection. Given as JSON in [`POLICY_ENV`]; an absent variable means the
/// default (nothing restricted). Unknown fields are errors: a misspelt
/// restriction must not silently restrict nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RunnerPolicy {
    /// No program may be executed after the runner started (its own seccomp
    /// filter denies `execve`/`execveat`).
    pub no_process_creation: bool,
    /// Absolute paths of the only files commands may execute (Landlock).
    pub allowed_executables: Option<Vec<String>>,
    /// Relay a local TCP port to the host's egress proxy and point every
    /// command at it ([`proxy_environment`]). Absent: no relay, no proxy
    /// variables.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressRelay>,
}

/// Where the runner listens for proxy clients and where it forwards them.
/// The host sets `{listen: PROXY_LISTEN, socket: EGRESS_SOCKET_PATH}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressRelay {
    /// TCP address the runner binds, e.g. [`PROXY_LISTEN`].
    pub listen: String,
    /// Unix socket of the host's proxy, e.g. [`EGRESS_SOCKET_PATH`].
    pub socket: String,
}

impl RunnerPolicy {
    /// The policy as the value of [`POLICY_ENV`].
    pub fn to_env_value(&self) -> String {
        // Plain derived fields (bool, strings, vectors): serialization cannot fail.
        serde_json::to_string(self).unwrap_or_else(|_| String::from("{}"))
    }

    /// Parses the value of [`POLICY_ENV`].
    pub fn from_env_value(value: &str) -> Result<Self, ProtocolError> {
        serde_json::from_str(value).map_err(ProtocolError::Json)
    }
}

/// A message that travels as one line: [`Request`] or [`Response`].
pub trait Message: Serialize + DeserializeOwned + sealed::Sealed {}
impl Message for Request {}
impl Message for Response {}
impl Message for Verdict {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for super::Request {}
    impl Sealed for super::Response {}
    impl Sealed for super::Verdict {}
}

/// Errors of [`decode_line`] and [`read_line`].
#[derive(Debug)]
pub enum ProtocolError {
    /// The line is longer than allowed.
    TooLarge {
        max: usize,
    },
    /// The connection ended before a line arrived.
    Eof,
    /// The line is not valid JSON for the expected message.
    Json(serde_json::Error),
    Io(io::Error),
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::TooLarge { max } => write!(f, "message exceeds {max} bytes"),
            ProtocolError::Eof => f.write_str("connection closed before a message arrived"),
            ProtocolError::Json(e) => write!(f, "invalid message: {e}"),
            ProtocolError::Io(e) => write!(f, "i/o error: {e}"),
        }
    }
}

impl std::error::Error for ProtocolError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ProtocolError::Json(e) => Some(e),
            ProtocolError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// One message as a JSON line ending in `\n`.
pub fn encode_line<T: Message>(message: &T) -> Vec<u8> {
    // The protocol types hold only strings, numbers, booleans, options,
    // vectors and tuples, which serde_json always serializes.
    let mut line = serde_json::to_vec(message).unwrap_or_default();
    line.push(b'\n');
    line
}

/// Parses one line (with or without its trailing `\n` / `\r\n`) of at most
/// `max_bytes` bytes, excluding the line ending.
pub fn decode_line<T: Message>(line: &[u8], max_bytes: usize) -> Result<T, ProtocolError> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    if line.len() > max_bytes {
        return Err(ProtocolError::TooLarge { max: max_bytes });
    }
    serde_json::from_slice(line).map_err(ProtocolError::Json)
}

/// Reads one line of at most `max_bytes` bytes (excluding the `\n`) without
/// buffering more than that. A final line without `\n` counts; an empty
/// stream is [`ProtocolError::Eof`]. The returned line excludes the `\n`.
pub fn read_line<R: BufRead>(reader: &mut R, max_bytes: usize) -> Result<Vec<u8>, ProtocolError> {
    let mut line = Vec::new();
    loop {
        let available = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(ProtocolError::Io(e)),
        };
        if available.is_empty() {
            return if line.is_empty() {
                Err(ProtocolError::Eof)
            } else {
                Ok(line)
            };
        }
        let (chunk, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if line.len() + chunk.len() > max_bytes {
            return Err(ProtocolError::TooLarge { max: max_bytes });
        }
        line.extend_from_slice(chunk);
        match done {
            Some(consumed) => {
                reader.consume(consumed);
                return Ok(line);
            }
            None => {
                let consumed = chunk.len();
                reader.consume(consumed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip<T: Message + PartialEq + fmt::Debug>(message: T) -> T {
        let line = encode_line(&message);
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        let back: T = decode_line(&line, usize::MAX).expect("decodes");
        assert_eq!(back, message);
        back
    }

    #[test]
    fn ping_wire_format() {
        assert_eq!(encode_line(&Request::Ping), b"{\"op\":\"ping\"}\n");
        round_trip(Request::Ping);
    }

    #[test]
    fn exec_request_round_trip() {
        round_trip(Request::Exec(ExecRequest {
            argv: vec!["sh".into(), "-c".into(), "echo \"hi\"\n".into()],
            cwd: Some("/workspace/sub dir".into()),
            env: vec![("A".into(), "1".into()), ("B".into(), "x=y".into())],
            stdin: Some("input\u{0}\u{1F980}".into()),
            timeout_ms: 1234,
            max_output_bytes: 99,
        }));
        round_trip(Request::Exec(ExecRequest::new(["true"])));
    }

    #[test]
    fn exec_request_defaults() {
        let req: Request = decode_line(br#"{"op":"exec","argv":["ls","-l"]}"#, 1024).unwrap();
        assert_eq!(req, Request::Exec(ExecRequest::new(["ls", "-l"])));
        let Request::Exec(exec) = req else {
            panic!("not exec")
        };
        assert_eq!(exec.timeout_ms, DEFAULT_TIMEOUT_MS);
        assert_eq!(exec.max_output_bytes, DEFAULT_MAX_OUTPUT_BYTES);
    }

    #[test]
    fn exec_request_wire_format() {
        let mut req = ExecRequest::new(["env"]);
        req.env.push(("K".into(), "V".into()));
        let text = String::from_utf8(encode_line(&Request::Exec(req))).unwrap();
        assert_eq!(
            text,
            "{\"op\":\"exec\",\"argv\":[\"env\"],\"cwd\":null,\"env\":[[\"K\",\"V\"]],\
             \"stdin\":null,\"timeout_ms\":60000,\"max_output_bytes\":1048576}\n"
        );
    }

    #[test]
    fn a_grant_carries_its_token_on_the_wire_but_not_in_debug() {
        let grant = Request::Grant(Grant {
            token: "pk-pincer-w-secret".into(),
        });
        let text = String::from_utf8(encode_line(&grant)).unwrap();
        assert_eq!(
            text,
            "{\"op\":\"grant\",\"token\":\"pk-pincer-w-secret\"}\n"
        );
        assert!(!format!("{grant:?}").contains("secret"));
        let back: Request = decode_line(text.trim_end().as_bytes(), MAX_REQUEST_BYTES).unwrap();
        assert_eq!(back, grant);
        // An older runner's status (no `granted`) reads as not granted.
        let old = r#"{"op":"pong","pid":1,"uid":1,"uptime_ms":1,"version":"x","enforcement":{"exec_filter":false,"landlock_abi":null,"allowed_executables":null}}"#;
        match decode_line::<Response>(old.as_bytes(), MAX_RESPONSE_BYTES).unwrap() {
            // Nor busy or idle: the host cannot tell, so it does not freeze.
            Response::Pong(status) => {
                assert!(!status.granted);
                assert_eq!((status.busy, status.idle_ms), (0, 0));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn response_round_trips() {
        round_trip(Response::Pong(Status {
            pid: 1,
            uid: 1000,
            uptime_ms: 42,
            version: "0.1.0".into(),
            enforcement: Enforcement {
                exec_filter: true,
                io_uring_refused: true,
                landlock_abi: Some(7),
                allowed_executables: Some(vec!["/bin/busybox".into()]),
            },
            granted: true,
            busy: 2,
            idle_ms: 0,
        }));
        round_trip(Response::Pong(Status {
            pid: 7,
            uid: 0,
            uptime_ms: 0,
            version: String::new(),
            enforcement: Enforcement::default(),
            granted: false,
            busy: 0,
            idle_ms: 9_000,
        }));
        round_trip(Response::Ok);
        round_trip(Response::Exec(ExecResult {
            exit_code: Some(3),
            signal: None,
            stdout: "out\n".into(),
            stderr: "\u{FFFD}err".into(),
            truncated: true,
            timed_out: false,
            duration_ms: 17,
        }));
        round_trip(Response::Exec(ExecResult {
            exit_code: None,
            signal: Some(9),
            stdout: String::new(),
            stderr: String::new(),
            truncated: false,
            timed_out: true,
            duration_ms: 1000,
        }));
        for kind in [
            ErrorKind::BadRequest,
            ErrorKind::PermissionDenied,
            ErrorKind::NotFound,
            ErrorKind::SpawnFailed,
            ErrorKind::Internal,
        ] {
            round_trip(Response::error(kind, format!("{kind}")));
        }
    }

    #[test]
    fn error_wire_format() {
        let line = encode_line(&Response::error(ErrorKind::PermissionDenied, "no"));
        assert_eq!(
            line,
            b"{\"op\":\"error\",\"kind\":\"permission_denied\",\"message\":\"no\"}\n"
        );
    }

    #[test]
    fn decode_checks_size() {
        let line = encode_line(&Request::Ping);
        let len = line.len() - 1;
        assert!(decode_line::<Request>(&line, len).is_ok());
        assert!(matches!(
            decode_line::<Request>(&line, len - 1),
            Err(ProtocolError::TooLarge { max }) if max == len - 1
        ));
        assert!(decode_line::<Request>(b"{\"op\":\"ping\"}\r\n", 64).is_ok());
    }

    #[test]
    fn decode_rejects_garbage() {
        for bad in [
            &b"not json"[..],
            b"{}",
            b"{\"op\":\"reboot\"}",
            b"{\"op\":\"exec\"}",
            b"{\"op\":\"exec\",\"argv\":\"ls\"}",
            b"",
        ] {
            assert!(
                matches!(
                    decode_line::<Request>(bad, 1024),
                    Err(ProtocolError::Json(_))
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn policy_env_value() {
        assert_eq!(
            RunnerPolicy::from_env_value("{}").unwrap(),
            RunnerPolicy::default()
        );
        let policy = RunnerPolicy {
            no_process_creation: true,
            allowed_executables: Some(vec!["/bin/busybox".into()]),
            egress: None,
        };
        assert_eq!(
            RunnerPolicy::from_env_value(&policy.to_env_value()).unwrap(),
            policy
        );
        let only_list =
            RunnerPolicy::from_env_value(r#"{"allowed_executables":["/bin/busybox"]}"#).unwrap();
        assert!(!only_list.no_process_creation);
        // A misspelt restriction is an error, not a silent no-op.
        assert!(RunnerPolicy::from_env_value(r#"{"no_process_creaton":true}"#).is_err());
        assert!(RunnerPolicy::from_env_value("nope").is_err());
    }

    #[test]
    fn policy_egress_round_trip_and_default() {
        let policy = RunnerPolicy {
            egress: Some(EgressRelay {
                listen: PROXY_LISTEN.into(),
                socket: EGRESS_SOCKET_PATH.into(),
            }),
            ..RunnerPolicy::default()
        };
        let value = policy.to_env_value();
        assert!(
            value.contains(
                r#""egress":{"listen":"127.0.0.1:3128","socket":"/run/pincer/gateway/egress.sock"}"#
            ),
            "{value}"
        );
        assert_eq!(RunnerPolicy::from_env_value(&value).unwrap(), policy);
        // Without egress the field is left out, and an older host's policy
        // (no field) means no relay.
        assert!(!RunnerPolicy::default().to_env_value().contains("egress"));
        let old = RunnerPolicy::from_env_value(r#"{"no_process_creation":true}"#).unwrap();
        assert_eq!(old.egress, None);
        assert!(
            RunnerPolicy::from_env_value(r#"{"egress":{"listen":"127.0.0.1:1","sokcet":"/x"}}"#)
                .is_err()
        );
    }

    #[test]
    fn proxy_environment_points_every_spelling_at_the_relay() {
        let env = proxy_environment("127.0.0.1:3128");
        let get = |key: &str| env.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        for key in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            assert_eq!(get(key), Some("http://127.0.0.1:3128"), "{key}");
        }
        for key in ["NO_PROXY", "no_proxy"] {
            assert_eq!(get(key), Some("localhost,127.0.0.1,::1"), "{key}");
        }
        assert_eq!(env.len(), 8);
    }

    #[test]
    fn read_line_bounds() {
        let mut input = io::BufReader::with_capacity(4, &b"abcdefgh\nrest"[..]);
        assert_eq!(read_line(&mut input, 8).unwrap(), b"abcdefgh");
        assert_eq!(read_line(&mut input, 8).unwrap(), b"rest");
        assert!(matches!(read_line(&mut input, 8), Err(ProtocolError::Eof)));

        let mut input = io::BufReader::with_capacity(4, &b"abcdefghi\n"[..]);
        assert!(matches!(
            read_line(&mut input, 8),
            Err(ProtocolError::TooLarge { max: 8 })
        ));
    }
}
