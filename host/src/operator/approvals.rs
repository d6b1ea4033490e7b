//! Deciding approval requests and revoking "always" rules as the operator
//! of this `PINCER_HOME`: `pincer approvals` and the web console alike.

use crate::approvals::{Approvals, Approvers, Decider, Decision, Request, Rule, State, Wanted};
use crate::audit::{Action, Actor, AuditLog};

/// Where an operator decides: the CLI on this `PINCER_HOME`, or a signed-in
/// web console session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    Cli,
    Web,
}

impl Operator {
    fn via(self) -> &'static str {
        match self {
            Self::Cli => "cli",
            Self::Web => "web",
        }
    }

    fn actor(self) -> Actor<'static> {
        match self {
            Self::Cli => Actor::Cli(None),
            Self::Web => Actor::Web,
        }
    }
}

/// Removes `workspace`'s "always" rule `rule`; what was done, in words.
pub fn revoke(
    approvals: &Approvals,
    audit: &AuditLog,
    workspace: &str,
    rule: &str,
    operator: Operator,
) -> anyhow::Result<String> {
    let rule = Rule::parse(rule)?;
    if !approvals.store().revoke(workspace, &rule)? {
        anyhow::bail!(
            "workspace `{workspace}` has no rule `{rule}` (see `pincer approvals rules -w {workspace}`)"
        );
    }
    audit.record(
        operator.actor(),
        Some(workspace),
        Action::ApprovalRuleRevoked,
        &format!("rule `{rule}` revoked by operator:{}", operator.via()),
    );
    Ok(format!("revoked `{rule}` in workspace `{workspace}`"))
}

/// Decides request `id` as the operator; what happened, in words.
pub fn decide(
    approvals: &Approvals,
    audit: &AuditLog,
    id: &str,
    wanted: Wanted,
    operator: Operator,
) -> anyhow::Result<String> {
    let request = approvals
        .store()
        .get(id)?
        .ok_or_else(|| anyhow::anyhow!("no approval request `{id}`"))?;
    let decision = wanted.decision(&request).map_err(anyhow::Error::msg)?;
    let done = approvals.decide(
        id,
        Decider::Operator(operator.via()),
        &Approvers::Originator,
        &decision,
        crate::db::now_ms(),
    )?;
    let (action, what) = match &decision {
        Decision::Deny { .. } => (Action::ApprovalDenied, "denied".to_string()),
        Decision::Once => (Action::ApprovalGranted, "approved once".to_string()),
        Decision::Session => (
            Action::ApprovalGranted,
            format!(
                "approved for session {} (`{}`)",
                done.session,
                done.shape.as_deref().unwrap_or("")
            ),
        ),
        Decision::Always(rule) => (
            Action::ApprovalGranted,
            format!("approved always (rule `{rule}`)"),
        ),
    };
    audit.record(
        operator.actor(),
        Some(&request.workspace),
        action,
        &format!(
            "request {id}: `{}` {what} by operator:{}",
            request.tool,
            operator.via()
        ),
    );
    let warning = match &decision {
        Decision::Always(rule) => rule
            .warning()
            .map(|w| format!("\nwarning: {w}"))
            .unwrap_or_default(),
        _ => String::new(),
    };
    Ok(format!("{id}: `{}` {what}{warning}", request.tool))
}

/// A request as `approvals show` prints it (the web console reads the same).
pub fn as_json(r: &Request) -> serde_json::Value {
    serde_json::json!({
        "id": r.id,
        "workspace": r.workspace,
        "session": r.session,
        "channel": r.channel,
        "conversation": r.conversation,
        "originator": r.originator,
        "tool": r.tool,
        "preview": r.preview,
        "fingerprint": r.fingerprint,
        "shape": r.shape,
        "created_ms": r.created_ms,
        "expires_ms": r.expires_ms,
        "state": match r.state {
            State::Pending => "pending",
            State::Granted => "granted",
            State::Denied => "denied",
            State::Expired => "expired",
        },
        "decision": r.decision,
        "decided_by": r.decided_by,
        "reason": r.reason,
    })
}
