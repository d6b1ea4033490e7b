//! One agent turn: the host sends [`Request::Turn`](crate::Request::Turn)
//! with the assembled context; the runner answers with a stream of
//! [`Response::Event`](crate::Response::Event) lines, the last of which is
//! [`TurnEvent::Done`] or [`TurnEvent::Failed`], then closes the connection.
//!
//! Messages travel in the OpenAI chat-completions shape (`role`, `content`,
//! `tool_calls`, `tool_call_id`) as JSON values: the host stores them
//! verbatim and sends them back as history, so neither side reinterprets
//! what the model said.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Environment variable (set by the host in every workspace container) with
/// the gateway's address, `unix:///run/pincer/gateway/gateway.sock` (a
/// host-owned folder mounted read-only).
pub const GATEWAY_URL_ENV: &str = "PINCER_GATEWAY_URL";

/// Where the gateway socket is inside a workspace container.
pub const GATEWAY_SOCKET_PATH: &str = "/run/pincer/gateway/gateway.sock";

/// Where the host's egress proxy (plain HTTP proxy, `CONNECT` included)
/// listens inside a workspace container, beside the gateway socket. With
/// Docker `network: none` it is the container's only way out; the runner
/// relays [`PROXY_LISTEN`](crate::PROXY_LISTEN) to it (see
/// [`EgressRelay`](crate::EgressRelay)).
pub const EGRESS_SOCKET_PATH: &str = "/run/pincer/gateway/egress.sock";

// The container's gateway token is in no environment: the host hands it to
// the runner with [`Request::Grant`](crate::Request::Grant) over the
// peer-checked runner socket, and the runner keeps it in memory.

/// Default [`TurnLimits::max_steps`]: model calls per turn.
pub const DEFAULT_MAX_STEPS: u32 = 16;

/// Default [`TurnLimits::max_tool_output_bytes`]: 16 KiB of a tool's output
/// enter the model's context; the rest is cut from the middle.
pub const DEFAULT_MAX_TOOL_OUTPUT_BYTES: usize = 16 * 1024;

/// Default [`TurnLimits::tool_timeout_ms`]: 60 s per tool call.
pub const DEFAULT_TOOL_TIMEOUT_MS: u64 = 60_000;

/// Default [`TurnLimits::max_total_tokens`]: prompt + completion tokens
/// summed over the turn's model calls.
pub const DEFAULT_MAX_TOTAL_TOKENS: u64 = 200_000;

/// What the host asks the runner to do for one turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TurnRequest {
    /// The host's id of this turn (echoed in logs; opaque to the runner).
    pub turn_id: String,
    /// The model alias to ask the gateway for (`gateway.model_list`).
    pub model: String,
    /// The whole context, oldest first: system prompt, history, the new
    /// user message. OpenAI chat-completions message objects.
    pub messages: Vec<Value>,
    #[serde(default)]
    pub limits: TurnLimits,
    /// Offer the tools of the workspace's MCP endpoint on the gateway
    /// (skills, memory, MCP servers) besides the built-in ones.
    #[serde(default = "yes")]
    pub gateway_tools: bool,
    /// Ask the host before every tool call ([`TurnEvent::Check`], answered
    /// with one [`Verdict`] line on the same connection). Off: every call
    /// runs (hosts before approvals).
    #[serde(default)]
    pub checked: bool,
    /// Continue a turn that stopped at a check: `messages` end with the
    /// assistant message whose calls are unanswered; the call `call_id`
    /// was decided already (its verdict is here, it is not checked again),
    /// the others are checked as usual, then the turn goes on.
    #[serde(default)]
    pub resume: Option<Resume>,
}

/// What the host says of one checked tool call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "snake_case")]
pub enum Verdict {
    /// Run the call exactly as it was checked.
    Run,
    /// Do not run it; the model reads `message` as the call's (failed) result.
    Refuse { message: String },
    /// The host ran the call itself (a host tool: [`HOST_TOOLS`]); the
    /// model reads `output` as its result.
    Ran { ok: bool, output: String },
}

/// Tools the runner offers the model but the host carries out: the
/// runner sends a [`TurnEvent::Check`] for each call (whether the turn is
/// [`TurnRequest::checked`] or not) and the host answers [`Verdict::Ran`].
/// `send_file {path, comment?}` sends a workspace file to the turn's
/// conversation.
pub const HOST_TOOLS: [&str; 1] = ["send_file"];

/// The decided call a resumed turn starts with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resume {
    pub call_id: String,
    pub verdict: Verdict,
}

fn yes() -> bool {
    true
}

/// Bounds of one turn; every one of them ends the turn cleanly when hit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct TurnLimits {
    /// Model calls per turn; reaching it ends the turn with
    /// [`StopReason::StepLimit`].
    pub max_steps: u32,
    /// Bytes of one tool result that enter the context (head + tail kept
    /// around a `[... N bytes truncated ...]` marker).
    pub max_tool_output_bytes: usize,
    /// Wall-clock limit of one tool call.
    pub tool_timeout_ms: u64,
    /// Prompt + completion tokens over the turn; reaching it ends the turn
    /// with [`StopReason::TokenLimit`].
    pub max_total_tokens: u64,
    /// `max_tokens` of each model call, when set.
    pub max_completion_tokens: Option<u32>,
}

impl Default for TurnLimits {
    fn default() -> Self {
        TurnLimits {
            max_steps: DEFAULT_MAX_STEPS,
            max_tool_output_bytes: DEFAULT_MAX_TOOL_OUTPUT_BYTES,
            tool_timeout_ms: DEFAULT_TOOL_TIMEOUT_MS,
            max_total_tokens: DEFAULT_MAX_TOTAL_TOKENS,
            max_completion_tokens: None,
        }
    }
}

/// One event of a running turn.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum TurnEvent {
    /// The turn started; `tools` are the names offered to the model.
    Started { tools: Vec<String> },
    /// A piece of the assistant's text, as the model streams it.
    TextDelta { text: String },
    /// A complete message to append to the session, in order: assistant
    /// messages (with their `tool_calls`) and `tool` results. The host
    /// stores each as it arrives, so a killed container loses nothing that
    /// was already said.
    Message { message: Value },
    /// A tool call is starting. `arguments` is the model's raw JSON text.
    ToolStart {
        call_id: String,
        name: String,
        arguments: String,
    },
    /// The runner asks whether it may run this call (only when the request
    /// is [`TurnRequest::checked`]) and waits for one [`Verdict`] line.
    /// `arguments` is the parsed JSON object that runs if the verdict is
    /// [`Verdict::Run`].
    Check {
        call_id: String,
        name: String,
        arguments: Value,
    },
    /// A tool call ended; its (capped) output is in the following
    /// [`TurnEvent::Message`].
    ToolEnd {
        call_id: String,
        name: String,
        ok: bool,
        /// Size of the full output before capping.
        output_bytes: usize,
        truncated: bool,
        duration_ms: u64,
    },
    /// Token usage of one model call.
    Usage {
        model: String,
        prompt_tokens: u64,
        completion_tokens: u64,
    },
    /// Something the user should know that does not end the turn (a limit
    /// approached, a tool list that could not be fetched, ...).
    Notice { message: String },
    /// The turn ended; `reply` is the final assistant text.
    Done {
        reply: String,
        steps: u32,
        stop: StopReason,
    },
    /// The turn could not complete.
    Failed {
        kind: TurnErrorKind,
        message: String,
    },
}

impl TurnEvent {
    /// Whether this event ends the turn's stream.
    pub fn is_terminal(&self) -> bool {
        matches!(self, TurnEvent::Done { .. } | TurnEvent::Failed { .. })
    }
}

/// Why a completed turn stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model answered without asking for a tool.
    Finished,
    /// [`TurnLimits::max_steps`] model calls were made.
    StepLimit,
    /// [`TurnLimits::max_total_tokens`] were used.
    TokenLimit,
}

/// Why a turn failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnErrorKind {
    /// The request was malformed.
    BadRequest,
    /// The gateway refused or failed the model call (budget, unknown model,
    /// every deployment failed, ...); the message is the gateway's.
    Gateway,
    /// The gateway could not be reached (socket missing, connection
    /// refused, timeout).
    GatewayUnreachable,
    /// The model's stream could not be understood.
    ModelOutput,
    /// The runner failed.
    Internal,
}
