//! One agent turn: call the model through the gateway, run the tools it asks
//! for, feed the results back, until it answers without tools or a limit is
//! reached. Every step is reported as a [`TurnEvent`] as it happens; the
//! last one is `Done` or `Failed` (unless the host went away).

mod gateway;
mod llm;
mod mcp;
mod sse;
mod tools;
mod truncate;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use pincer_runner_protocol::{
    HOST_TOOLS, StopReason, TurnErrorKind, TurnEvent, TurnRequest, Verdict,
};
use serde_json::{Value, json};

pub use gateway::Gateway;
use llm::{Completion, LlmError, ToolCall};
use mcp::{McpError, McpTool};
use tools::{ToolContext, ToolOutput};

use crate::cancel::Cancel;
use crate::policy::Enforcer;
use crate::reap::Children;

/// Default longest wait for the model's answer and between two pieces of it.
pub const MODEL_IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// What a turn runs with.
pub struct TurnEnv<'a> {
    /// The gateway (from the environment), or why there is none.
    pub gateway: Result<Gateway, String>,
    /// Where the built-in tools work (`/workspace` in a container).
    pub workspace: PathBuf,
    pub enforcer: &'a Enforcer,
    pub children: &'a Children,
    pub cancel: &'a Cancel<'a>,
    pub model_idle: Duration,
}

/// How a turn went, for the log.
#[derive(Debug)]
pub struct Summary {
    /// The terminal event sent, or `None` when the host went away first.
    pub end: Option<TurnEvent>,
    pub steps: u32,
    pub tool_calls: usize,
}

/// Why the loop stopped early.
enum Stop {
    /// The host is gone: nothing more can be sent.
    Gone,
    Failed(TurnErrorKind, String),
}

impl From<LlmError> for Stop {
    fn from(e: LlmError) -> Self {
        match e {
            LlmError::Gateway(message) => Stop::Failed(TurnErrorKind::Gateway, message),
            LlmError::Unreachable(message) => {
                Stop::Failed(TurnErrorKind::GatewayUnreachable, message)
            }
            LlmError::ModelOutput(message) => Stop::Failed(TurnErrorKind::ModelOutput, message),
            LlmError::Cancelled => Stop::Gone,
        }
    }
}

/// Sends events and reads the host's verdicts; remembers when the host
/// stopped listening.
struct Events<'e> {
    emit: &'e mut dyn FnMut(TurnEvent) -> bool,
    verdict: &'e mut dyn FnMut() -> Option<Verdict>,
    cancel: &'e Cancel<'e>,
}

impl Events<'_> {
    fn send(&mut self, event: TurnEvent) -> Result<(), Stop> {
        if (self.emit)(event) {
            Ok(())
        } else {
            self.cancel.cancel();
            Err(Stop::Gone)
        }
    }

    /// Asks the host whether `call` may run with `arguments`, and waits.
    fn check(&mut self, call: &ToolCall, arguments: &Value) -> Result<Verdict, Stop> {
        self.send(TurnEvent::Check {
            call_id: call.id.clone(),
            name: call.name.clone(),
            arguments: arguments.clone(),
        })?;
        match (self.verdict)() {
            Some(verdict) => Ok(verdict),
            None => {
                self.cancel.cancel();
                Err(Stop::Gone)
            }
        }
    }
}

/// The tools offered to the model in this turn.
struct Toolbox {
    specs: Vec<Value>,
    names: Vec<String>,
    gateway: BTreeSet<String>,
}

impl Toolbox {
    fn new(gateway_tools: Vec<McpTool>) -> Toolbox {
        let mut specs = tools::specs();
        specs.extend(tools::host_specs());
        let mut names: Vec<String> = tools::NAMES
            .iter()
            .chain(HOST_TOOLS.iter())
            .map(|n| n.to_string())
            .collect();
        let mut gateway = BTreeSet::new();
        for tool in gateway_tools {
            // A built-in keeps its name; the first of two gateway tools too.
            if names.contains(&tool.name) {
                continue;
            }
            specs.push(tool.spec());
            names.push(tool.name.clone());
            gateway.insert(tool.name);
        }
        Toolbox {
            specs,
            names,
            gateway,
        }
    }
}

/// Runs the turn, handing each event to `emit` (which returns false once
/// the host cannot be reached any more; the turn then stops at once).
/// `verdict` waits for the host's answer to a [`TurnEvent::Check`] (`None`:
/// the host is gone).
pub fn run(
    req: &TurnRequest,
    env: &TurnEnv,
    emit: &mut dyn FnMut(TurnEvent) -> bool,
    verdict: &mut dyn FnMut() -> Option<Verdict>,
) -> Summary {
    let mut summary = Summary {
        end: None,
        steps: 0,
        tool_calls: 0,
    };
    let mut events = Events {
        emit,
        verdict,
        cancel: env.cancel,
    };
    let end = match drive(req, env, &mut events, &mut summary) {
        Ok((reply, stop)) => TurnEvent::Done {
            reply,
            steps: summary.steps,
            stop,
        },
        Err(Stop::Failed(kind, message)) => TurnEvent::Failed { kind, message },
        Err(Stop::Gone) => return summary,
    };
    if events.send(end.clone()).is_ok() {
        summary.end = Some(end);
    }
    summary
}

fn validate(req: &TurnRequest) -> Result<(), String> {
    if req.model.trim().is_empty() {
        return Err("model is empty".into());
    }
    if req.messages.is_empty() {
        return Err("messages is empty".into());
    }
    if let Some(bad) = req.messages.iter().position(|m| !m.is_object()) {
        return Err(format!("messages[{bad}] is not a JSON object"));
    }
    if req.limits.max_steps == 0 {
        return Err("limits.max_steps must be at least 1".into());
    }
    if req.limits.tool_timeout_ms == 0 {
        return Err("limits.tool_timeout_ms must be positive".into());
    }
    Ok(())
}

fn drive(
    req: &TurnRequest,
    env: &TurnEnv,
    events: &mut Events,
    summary: &mut Summary,
) -> Result<(String, StopReason), Stop> {
    validate(req).map_err(|e| Stop::Failed(TurnErrorKind::BadRequest, e))?;
    let gateway = env
        .gateway
        .as_ref()
        .map_err(|e| Stop::Failed(TurnErrorKind::GatewayUnreachable, e.clone()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .map_err(|e| {
            Stop::Failed(
                TurnErrorKind::Internal,
                format!("cannot start the turn's I/O runtime: {e}"),
            )
        })?;
    let limits = &req.limits;

    let mut listing_failed = None;
    let gateway_tools = if req.gateway_tools {
        match runtime.block_on(mcp::list_tools(gateway, env.cancel)) {
            Ok(tools) => tools,
            Err(McpError::Cancelled) => return Err(Stop::Gone),
            Err(McpError::Failed(e)) => {
                listing_failed = Some(e);
                Vec::new()
            }
        }
    } else {
        Vec::new()
    };
    let toolbox = Toolbox::new(gateway_tools);
    events.send(TurnEvent::Started {
        tools: toolbox.names.clone(),
    })?;
    if let Some(e) = listing_failed {
        events.send(TurnEvent::Notice {
            message: format!(
                "the workspace's tools (skills, memory, MCP servers) are unavailable in this \
                 turn, only the built-in tools are: {e}"
            ),
        })?;
    }

    let mut messages = req.messages.clone();
    if let Some(resume) = &req.resume {
        let unanswered = unanswered_calls(&messages).map_err(|e| {
            Stop::Failed(
                TurnErrorKind::BadRequest,
                format!("cannot resume the turn: {e}"),
            )
        })?;
        if !unanswered.iter().any(|call| call.id == resume.call_id) {
            return Err(Stop::Failed(
                TurnErrorKind::BadRequest,
                format!(
                    "cannot resume the turn: call {:?} is not an unanswered call of the last assistant message",
                    resume.call_id
                ),
            ));
        }
        for call in &unanswered {
            let decided = (call.id == resume.call_id).then_some(&resume.verdict);
            let result = run_tool(call, decided, req, env, &runtime, &toolbox, events)?;
            summary.tool_calls += 1;
            messages.push(result);
        }
    }
    let mut tokens: u64 = 0;
    let mut last_text = String::new();
    loop {
        let stop = if summary.steps >= limits.max_steps {
            Some((
                StopReason::StepLimit,
                format!("step limit reached: {} model calls", summary.steps),
            ))
        } else if tokens >= limits.max_total_tokens {
            Some((
                StopReason::TokenLimit,
                format!(
                    "token limit reached: {tokens} of {} tokens used",
                    limits.max_total_tokens
                ),
            ))
        } else {
            None
        };
        if let Some((reason, notice)) = stop {
            events.send(TurnEvent::Notice { message: notice })?;
            let reply = if last_text.is_empty() {
                format!(
                    "The turn stopped after {} steps ({}) before the model gave a final answer.",
                    summary.steps,
                    match reason {
                        StopReason::TokenLimit => "the token limit was reached",
                        _ => "the step limit was reached",
                    }
                )
            } else {
                last_text
            };
            return Ok((reply, reason));
        }

        let body = llm::request_body(
            &req.model,
            &messages,
            &toolbox.specs,
            limits.max_completion_tokens,
        );
        let completion: Completion = {
            let mut on_text = |text: &str| {
                events
                    .send(TurnEvent::TextDelta {
                        text: text.to_string(),
                    })
                    .is_ok()
            };
            runtime.block_on(llm::complete(
                gateway,
                &body,
                env.model_idle,
                env.cancel,
                &mut on_text,
            ))?
        };
        summary.steps += 1;
        if let Some((prompt_tokens, completion_tokens)) = completion.usage {
            tokens = tokens.saturating_add(prompt_tokens.saturating_add(completion_tokens));
            events.send(TurnEvent::Usage {
                model: req.model.clone(),
                prompt_tokens,
                completion_tokens,
            })?;
        }
        let assistant = completion.message();
        events.send(TurnEvent::Message {
            message: assistant.clone(),
        })?;
        messages.push(assistant);
        if completion.finish_reason.as_deref() == Some("length") {
            events.send(TurnEvent::Notice {
                message: "the model's answer was cut off at its token limit (max_tokens)".into(),
            })?;
        }
        if !completion.text.is_empty() {
            last_text.clone_from(&completion.text);
        }
        if completion.tool_calls.is_empty() {
            return Ok((completion.text, StopReason::Finished));
        }
        for call in &completion.tool_calls {
            let result = run_tool(call, None, req, env, &runtime, &toolbox, events)?;
            summary.tool_calls += 1;
            messages.push(result);
        }
    }
}

/// The calls of the last assistant message that no `tool` message after
/// it answers, in order.
fn unanswered_calls(messages: &[Value]) -> Result<Vec<ToolCall>, String> {
    let last = messages
        .iter()
        .rposition(|m| m["role"] == "assistant")
        .ok_or("the messages hold no assistant message")?;
    let answered: BTreeSet<&str> = messages[last + 1..]
        .iter()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| m["tool_call_id"].as_str())
        .collect();
    let calls = messages[last]["tool_calls"]
        .as_array()
        .ok_or("the last assistant message asks for no tool")?;
    let mut unanswered = Vec::new();
    for call in calls {
        let (Some(id), Some(name)) = (call["id"].as_str(), call["function"]["name"].as_str())
        else {
            return Err(format!("a tool call without id or name: {call}"));
        };
        if !answered.contains(id) {
            unanswered.push(ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: call["function"]["arguments"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            });
        }
    }
    Ok(unanswered)
}

/// Runs one tool call and reports it; returns the `tool` message.
/// `decided`: the host's verdict on it, given already (a resumed turn).
fn run_tool(
    call: &ToolCall,
    decided: Option<&Verdict>,
    req: &TurnRequest,
    env: &TurnEnv,
    runtime: &tokio::runtime::Runtime,
    toolbox: &Toolbox,
    events: &mut Events,
) -> Result<Value, Stop> {
    if env.cancel.is_cancelled() {
        return Err(Stop::Gone);
    }
    events.send(TurnEvent::ToolStart {
        call_id: call.id.clone(),
        name: call.name.clone(),
        arguments: call.arguments.clone(),
    })?;
    let started = Instant::now();
    let output = execute(call, decided, req, env, runtime, toolbox, events, started)?;
    let (content, truncated) = truncate::head_tail(&output.text, req.limits.max_tool_output_bytes);
    events.send(TurnEvent::ToolEnd {
        call_id: call.id.clone(),
        name: call.name.clone(),
        ok: output.ok,
        output_bytes: output.text.len(),
        truncated,
        duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
    })?;
    let message = json!({"role": "tool", "tool_call_id": call.id, "content": content});
    events.send(TurnEvent::Message {
        message: message.clone(),
    })?;
    Ok(message)
}

/// The output of one tool call; bad calls are outputs too (the model reads
/// what was wrong and may try again).
#[allow(clippy::too_many_arguments)]
fn execute(
    call: &ToolCall,
    decided: Option<&Verdict>,
    req: &TurnRequest,
    env: &TurnEnv,
    runtime: &tokio::runtime::Runtime,
    toolbox: &Toolbox,
    events: &mut Events,
    started: Instant,
) -> Result<ToolOutput, Stop> {
    let builtin = tools::NAMES.contains(&call.name.as_str());
    let host_tool = HOST_TOOLS.contains(&call.name.as_str());
    if !builtin && !host_tool && !toolbox.gateway.contains(&call.name) {
        return Ok(ToolOutput::error(format!(
            "there is no tool named {:?}; the available tools are: {}",
            call.name,
            toolbox.names.join(", ")
        )));
    }
    let raw = call.arguments.trim();
    let arguments: Value = if raw.is_empty() {
        json!({})
    } else {
        match serde_json::from_str(raw) {
            Ok(value) => value,
            Err(e) => {
                return Ok(ToolOutput::error(format!(
                    "the arguments of this {} call are not valid JSON ({e}); send one JSON \
                     object matching the tool's parameter schema",
                    call.name
                )));
            }
        }
    };
    if !arguments.is_object() {
        return Ok(ToolOutput::error(format!(
            "the arguments of this {} call must be a JSON object, not {}",
            call.name, arguments
        )));
    }
    let verdict = match decided {
        Some(verdict) => verdict.clone(),
        None if req.checked || host_tool => events.check(call, &arguments)?,
        None => Verdict::Run,
    };
    match verdict {
        Verdict::Refuse { message } => return Ok(ToolOutput::error(message)),
        Verdict::Ran { ok, output } => return Ok(ToolOutput { ok, text: output }),
        Verdict::Run if host_tool => {
            return Ok(ToolOutput::error(format!(
                "{} is carried out by the host, which did not do it",
                call.name
            )));
        }
        Verdict::Run => {}
    }
    // The check may have waited long for a person: the call's own time
    // starts now.
    let started = Instant::now().max(started);
    let timeout_ms = req.limits.tool_timeout_ms;
    if builtin {
        let ctx = ToolContext {
            workspace: &env.workspace,
            enforcer: env.enforcer,
            children: env.children,
            cancel: env.cancel,
            timeout_ms,
            deadline: started + Duration::from_millis(timeout_ms),
        };
        let output = tools::run(&call.name, arguments, &ctx);
        if env.cancel.is_cancelled() {
            return Err(Stop::Gone);
        }
        return Ok(output);
    }
    let Ok(gateway) = &env.gateway else {
        return Ok(ToolOutput::error("the gateway is not configured"));
    };
    let timeout = Duration::from_millis(timeout_ms);
    match runtime.block_on(mcp::call_tool(
        gateway, &call.name, arguments, timeout, env.cancel,
    )) {
        Ok((ok, text)) => Ok(ToolOutput { ok, text }),
        Err(McpError::Cancelled) => Err(Stop::Gone),
        Err(McpError::Failed(e)) => Ok(ToolOutput::error(format!(
            "{} failed through the gateway: {e}",
            call.name
        ))),
    }
}

#[cfg(test)]
mod tests;
