//! Approvals: which tool calls wait for a person, and the durable record of
//! each request and decision. This is the core the turn, the gateway and
//! the channels build on.
//!
//! - [`command`]: a `bash` call's command as argv, when it is one simple
//!   command (nothing chained, substituted, redirected or expanded).
//! - [`rules`]: tiers, tool classes, readable allow rules (never a shell or
//!   an interpreter), the built-in read commands, and what a decision binds
//!   to: the call's fingerprint (exact arguments) and shape (what "for this
//!   session" covers).
//! - [`policy`]: a workspace's approvals as configured, and the verdict on
//!   one call: run (and why), refuse, or ask.
//! - [`store`]: requests and "always" rules in `pincer.db`; a decision is
//!   one conditional update, checked against who may decide.
//! - [`service`]: the store, the wake-up of a turn waiting on a decision,
//!   and the one-use permits the gateway checks before a skill or MCP call.

mod command;
mod decide;
mod policy;
mod rules;
mod service;
mod store;

pub use command::{NotSimple, argv, program};
pub use decide::{
    ChatDecision, Choice, Wanted, button_prefix, buttons, default_always_rule, parse_button,
    parse_chat, parse_tier,
};
pub use policy::{
    Allowed, DEFAULT_TIMEOUT, Judgement, MAX_SHOWN_PREVIEW, Policy, Selector, Unattended,
    default_ask, preview, shown_preview,
};
pub use rules::{
    Call, EGRESS_TOOL, Rule, RuleError, SourceKind, Tier, ToolClass, builtin_class,
    is_read_command, shown_argv,
};
pub use service::{Approvals, MAX_PREVIEW_BYTES, MAX_REQUESTS_PER_WINDOW};
pub use store::{
    ApprovalError, ApprovalStore, Approvers, Decider, Decision, NewRequest, Request, State,
};
