//! Approvals: which tool calls wait for a person, and the durable record of
//! each request and decision. This is the core the turn, the gateway and
//! the channels build on (issue 27); it is not wired into turns yet.
//!
//! - [`command`]: a `bash` call's command as argv, when it is one simple
//!   command (nothing chained, substituted, redirected or expanded).
//! - [`rules`]: tiers, tool classes, readable allow rules (never a shell or
//!   an interpreter), the built-in read commands, and what a decision binds
//!   to: the call's fingerprint (exact arguments) and shape (what "for this
//!   session" covers).
//! - [`store`]: requests and "always" rules in `pincer.db`; a decision is
//!   one conditional update, checked against who may decide.

mod command;
mod rules;
mod store;

pub use command::{NotSimple, argv, program};
pub use rules::{
    Call, Rule, RuleError, SourceKind, Tier, ToolClass, builtin_class, hardened, is_read_command,
    shown_argv,
};
pub use store::{
    ApprovalError, ApprovalStore, Approvers, Decider, Decision, NewRequest, Request, State,
};
