//! Approval requests and "always" rules in `pincer.db`. A request is a row
//! written before anything is shown to a person, so a restart (even
//! `kill -9`) loses none; a decision is one conditional update, so two
//! clicks, a click after the timeout, or a click by someone else each get
//! a clear answer and change nothing.

use std::path::Path;

use super::rules::{Rule, RuleError, Tier};
use crate::args;
use crate::db::{Db, DbError, Location, Row, Value};

/// Who may decide a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Approvers {
    /// Only the person whose message started the turn.
    Originator,
    /// These senders (platform ids).
    Listed(Vec<String>),
}

/// Who is deciding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decider<'a> {
    /// A platform user, by the verified id of their click.
    Sender(&'a str),
    /// An operator: the CLI on this `PINCER_HOME` (`operator:cli`) or a
    /// signed-in web session (`operator:web`); may decide any request.
    Operator(&'a str),
}

impl Decider<'_> {
    fn recorded(&self) -> String {
        match self {
            Self::Sender(id) => (*id).to_owned(),
            Self::Operator(how) => format!("operator:{how}"),
        }
    }
}

/// A decision on a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Once,
    /// The same call shape for the rest of the session.
    Session,
    /// A rule for the workspace from now on.
    Always(Rule),
    Deny {
        reason: Option<String>,
    },
}

impl Decision {
    fn stored(&self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Session => "session",
            Self::Always(_) => "always",
            Self::Deny { .. } => "deny",
        }
    }
}

/// A request as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub id: String,
    pub workspace: String,
    pub session: String,
    /// The turn that waits, and the call it waits on.
    pub turn_id: String,
    pub call_id: String,
    /// Where the turn's session is: a decision from a chat must come from
    /// the same channel and conversation.
    pub channel: String,
    pub conversation: String,
    pub originator: Option<String>,
    /// Who may decide, when the request names them itself (a scheduled
    /// run's `approvals.approvers`); otherwise the workspace's approvers.
    pub approvers: Option<Vec<String>>,
    /// The scheduled task whose run waits, if a scheduled run asked: no
    /// such run outlives the process, so a restart ends its requests.
    pub scheduled_task: Option<String>,
    pub tool: String,
    pub fingerprint: String,
    pub shape: Option<String>,
    pub preview: String,
    pub created_ms: i64,
    pub expires_ms: i64,
    pub state: State,
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub reason: Option<String>,
    /// The decision reached the turn (the call ran or was refused).
    pub applied: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    Pending,
    Granted,
    Denied,
    Expired,
}

impl State {
    fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Granted => "granted",
            Self::Denied => "denied",
            Self::Expired => "expired",
        }
    }

    fn parse(text: &str) -> Self {
        match text {
            "granted" => Self::Granted,
            "denied" => Self::Denied,
            "expired" => Self::Expired,
            _ => Self::Pending,
        }
    }
}

/// What to ask about.
pub struct NewRequest<'a> {
    pub workspace: &'a str,
    pub session: &'a str,
    pub turn_id: &'a str,
    pub call_id: &'a str,
    pub channel: &'a str,
    pub conversation: &'a str,
    pub originator: Option<&'a str>,
    pub approvers: Option<&'a [String]>,
    pub scheduled_task: Option<&'a str>,
    pub tool: &'a str,
    pub fingerprint: &'a str,
    pub shape: Option<&'a str>,
    pub preview: &'a str,
    pub now_ms: i64,
    pub timeout_ms: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum ApprovalError {
    #[error("no approval request `{0}`")]
    Unknown(String),
    #[error("approval request `{0}` expired; the call was denied")]
    Expired(String),
    #[error("approval request `{id}` was already {state} by {by}")]
    AlreadyDecided {
        id: String,
        state: String,
        by: String,
    },
    #[error("only {allowed} can decide approval request `{id}`")]
    NotAnApprover { id: String, allowed: String },
    #[error("a session decision cannot cover `{0}` (not one simple command); decide once instead")]
    NoShape(String),
    #[error(transparent)]
    Rule(#[from] RuleError),
    #[error("approvals in pincer.db: {0}")]
    Db(#[from] DbError),
}

pub struct ApprovalStore {
    db: Db,
}

const COLUMNS: &str = "id, workspace, session, originator, tool, fingerprint, shape, preview, \
                       created_ms, expires_ms, state, decision, decided_by, reason, turn_id, \
                       call_id, applied, channel, conversation, approvers, scheduled_task";

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS approval_requests (
        id TEXT PRIMARY KEY,
        workspace TEXT NOT NULL,
        session TEXT NOT NULL,
        originator TEXT,
        tool TEXT NOT NULL,
        fingerprint TEXT NOT NULL,
        shape TEXT,
        preview TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        decision TEXT,
        decided_by TEXT,
        decided_ms INTEGER,
        reason TEXT,
        turn_id TEXT NOT NULL DEFAULT '',
        call_id TEXT NOT NULL DEFAULT '',
        applied INTEGER NOT NULL DEFAULT 0,
        channel TEXT NOT NULL DEFAULT '',
        conversation TEXT NOT NULL DEFAULT '',
        approvers TEXT,
        scheduled_task TEXT
    );
    CREATE INDEX IF NOT EXISTS approval_requests_pending
        ON approval_requests (state, expires_ms);
    CREATE TABLE IF NOT EXISTS approval_rules (
        workspace TEXT NOT NULL,
        rule TEXT NOT NULL,
        created_by TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, rule)
    );
    CREATE TABLE IF NOT EXISTS approval_session_tiers (
        workspace TEXT NOT NULL,
        channel TEXT NOT NULL,
        conversation TEXT NOT NULL,
        tier TEXT NOT NULL,
        set_by TEXT NOT NULL,
        set_ms INTEGER NOT NULL,
        PRIMARY KEY (workspace, channel, conversation)
    );";

impl ApprovalStore {
    pub fn open(path: &Path) -> Result<Self, ApprovalError> {
        Self::open_at(&Location::from(path))
    }

    pub fn open_at(location: &Location) -> Result<Self, ApprovalError> {
        let db = Db::open(location)?;
        db.transaction(|conn| -> Result<(), DbError> {
            conn.schema(SCHEMA)?;
            // Tables of the release before approvals were wired lack these.
            conn.add_missing_columns(
                "approval_requests",
                &[
                    ("turn_id", "TEXT NOT NULL DEFAULT ''"),
                    ("call_id", "TEXT NOT NULL DEFAULT ''"),
                    ("applied", "INTEGER NOT NULL DEFAULT 0"),
                    ("channel", "TEXT NOT NULL DEFAULT ''"),
                    ("conversation", "TEXT NOT NULL DEFAULT ''"),
                    ("approvers", "TEXT"),
                    ("scheduled_task", "TEXT"),
                ],
            )?;
            conn.schema(
                "CREATE INDEX IF NOT EXISTS approval_requests_turn ON approval_requests (turn_id);",
            )
        })?;
        Ok(Self { db })
    }

    fn requests(&self, sql: &str, args: &[Value]) -> Result<Vec<Request>, ApprovalError> {
        self.db.run(|conn| {
            conn.query(sql, args)?
                .iter()
                .map(|row| Ok(request_row(row)?))
                .collect()
        })
    }

    fn request_where(&self, sql: &str, args: &[Value]) -> Result<Option<Request>, ApprovalError> {
        self.db.run(|conn| {
            Ok(conn
                .query_opt(sql, args)?
                .as_ref()
                .map(request_row)
                .transpose()?)
        })
    }

    fn execute(&self, sql: &str, args: &[Value]) -> Result<usize, ApprovalError> {
        self.db.run(|conn| Ok(conn.execute(sql, args)?))
    }

    /// Stores a pending request and returns its id; nothing may be shown
    /// before this returns.
    pub fn request(&self, new: &NewRequest<'_>) -> Result<String, ApprovalError> {
        let id = format!("apr_{}", uuid::Uuid::new_v4().simple());
        self.execute(
            "INSERT INTO approval_requests (id, workspace, session, originator, tool, fingerprint,
                 shape, preview, created_ms, expires_ms, turn_id, call_id, channel, conversation,
                 approvers, scheduled_task)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            args![
                &id,
                new.workspace,
                new.session,
                new.originator,
                new.tool,
                new.fingerprint,
                new.shape,
                new.preview,
                new.now_ms,
                new.now_ms.saturating_add(new.timeout_ms),
                new.turn_id,
                new.call_id,
                new.channel,
                new.conversation,
                new.approvers.map(|ids| serde_json::json!(ids).to_string()),
                new.scheduled_task,
            ],
        )?;
        Ok(id)
    }

    pub fn get(&self, id: &str) -> Result<Option<Request>, ApprovalError> {
        self.request_where(
            &format!("SELECT {COLUMNS} FROM approval_requests WHERE id = ?1"),
            args![id],
        )
    }

    /// Requests still waiting, oldest first (expired ones are marked first).
    pub fn pending(&self, now_ms: i64) -> Result<Vec<Request>, ApprovalError> {
        self.expire_due(now_ms)?;
        self.requests(
            &format!(
                "SELECT {COLUMNS} FROM approval_requests WHERE state = 'pending'
                 ORDER BY created_ms, id"
            ),
            args![],
        )
    }

    /// The latest decided (or expired) requests, newest first.
    pub fn decided(&self, limit: u32) -> Result<Vec<Request>, ApprovalError> {
        self.requests(
            &format!(
                "SELECT {COLUMNS} FROM approval_requests WHERE state != 'pending'
                 ORDER BY created_ms DESC, id DESC LIMIT ?1"
            ),
            args![limit],
        )
    }

    /// Marks every request past its deadline expired (a denial); returns
    /// them, so each can be told and audited once.
    pub fn expire_due(&self, now_ms: i64) -> Result<Vec<String>, ApprovalError> {
        self.db.run(|conn| {
            conn.query(
                "UPDATE approval_requests SET state = 'expired', decided_ms = ?1
                 WHERE state = 'pending' AND expires_ms <= ?1 RETURNING id",
                args![now_ms],
            )?
            .iter()
            .map(|row| Ok(row.get(0)?))
            .collect()
        })
    }

    /// Decides request `id`, if `decider` may and it is still pending. An
    /// "always" decision stores its rule for the workspace in the same
    /// transaction.
    pub fn decide(
        &self,
        id: &str,
        decider: Decider<'_>,
        approvers: &Approvers,
        decision: &Decision,
        now_ms: i64,
    ) -> Result<Request, ApprovalError> {
        let by = decider.recorded();
        let rule = match decision {
            Decision::Always(rule) => Some(rule.to_string()),
            _ => None,
        };
        // A refusal is this transaction's answer, not its failure: the
        // expiry a late decision records is committed.
        self.db
            .transaction(|tx| -> Result<Result<Request, ApprovalError>, DbError> {
                let Some(row) = tx.query_opt(
                    &format!("SELECT {COLUMNS} FROM approval_requests WHERE id = ?1"),
                    args![id],
                )?
                else {
                    return Ok(Err(ApprovalError::Unknown(id.to_owned())));
                };
                let request = request_row(&row)?;
                let named = request.approvers.clone().map(Approvers::Listed);
                let approvers = named.as_ref().unwrap_or(approvers);
                if let Decider::Sender(sender) = decider {
                    let allowed = match approvers {
                        Approvers::Originator => request.originator.iter().any(|o| o == sender),
                        Approvers::Listed(ids) => ids.iter().any(|i| i == sender),
                    };
                    if !allowed {
                        let allowed = match approvers {
                            Approvers::Originator => request
                                .originator
                                .clone()
                                .unwrap_or_else(|| "an operator".into()),
                            Approvers::Listed(ids) => ids.join(", "),
                        };
                        return Ok(Err(ApprovalError::NotAnApprover {
                            id: id.to_owned(),
                            allowed,
                        }));
                    }
                }
                match request.state {
                    State::Pending if request.expires_ms <= now_ms => {
                        tx.execute(
                            "UPDATE approval_requests SET state = 'expired', decided_ms = ?2
                             WHERE id = ?1 AND state = 'pending'",
                            args![id, now_ms],
                        )?;
                        return Ok(Err(ApprovalError::Expired(id.to_owned())));
                    }
                    State::Pending => {}
                    State::Expired => return Ok(Err(ApprovalError::Expired(id.to_owned()))),
                    State::Granted | State::Denied => {
                        return Ok(Err(ApprovalError::AlreadyDecided {
                            id: id.to_owned(),
                            state: request.state.as_str().to_owned(),
                            by: request.decided_by.clone().unwrap_or_default(),
                        }));
                    }
                }
                if matches!(decision, Decision::Session) && request.shape.is_none() {
                    return Ok(Err(ApprovalError::NoShape(request.preview.clone())));
                }
                let (state, reason) = match decision {
                    Decision::Deny { reason } => (State::Denied, reason.clone()),
                    _ => (State::Granted, None),
                };
                tx.execute(
                    "UPDATE approval_requests SET state = ?2, decision = ?3, decided_by = ?4,
                         decided_ms = ?5, reason = ?6
                     WHERE id = ?1 AND state = 'pending'",
                    args![id, state.as_str(), decision.stored(), &by, now_ms, &reason],
                )?;
                if let Some(rule) = &rule {
                    tx.execute(
                        "INSERT INTO approval_rules (workspace, rule, created_by, created_ms)
                         VALUES (?1, ?2, ?3, ?4)
                         ON CONFLICT (workspace, rule) DO NOTHING",
                        args![&request.workspace, rule, &by, now_ms],
                    )?;
                }
                Ok(Ok(Request {
                    state,
                    decision: Some(decision.stored().to_owned()),
                    decided_by: Some(by.clone()),
                    reason,
                    ..request
                }))
            })?
    }

    /// Ends request `id` as expired if it is still pending (its turn went
    /// away without it); whether it was.
    pub fn expire(&self, id: &str, now_ms: i64) -> Result<bool, ApprovalError> {
        let changed = self.execute(
            "UPDATE approval_requests SET state = 'expired', decided_ms = ?2
             WHERE id = ?1 AND state = 'pending'",
            args![id, now_ms],
        )?;
        Ok(changed > 0)
    }

    /// Ends every pending request of a scheduled run in `workspace` as
    /// expired: once a daemon takes the workspace up (at start, or from a
    /// daemon that died), no run of an earlier process waits on them.
    pub fn expire_scheduled(
        &self,
        workspace: &str,
        now_ms: i64,
    ) -> Result<Vec<Request>, ApprovalError> {
        self.requests(
            &format!(
                "UPDATE approval_requests SET state = 'expired', decided_ms = ?1
                 WHERE state = 'pending' AND scheduled_task IS NOT NULL AND workspace = ?2
                 RETURNING {COLUMNS}"
            ),
            args![now_ms, workspace],
        )
    }

    /// Records that request `id`'s decision reached its turn.
    pub fn mark_applied(&self, id: &str) -> Result<(), ApprovalError> {
        self.execute(
            "UPDATE approval_requests SET applied = 1 WHERE id = ?1",
            args![id],
        )?;
        Ok(())
    }

    /// The request turn `turn_id` waits on (its decision not yet applied),
    /// if any: what a restart resumes.
    pub fn open_for_turn(&self, turn_id: &str) -> Result<Option<Request>, ApprovalError> {
        self.request_where(
            &format!(
                "SELECT {COLUMNS} FROM approval_requests WHERE turn_id = ?1 AND applied = 0
                 ORDER BY created_ms DESC LIMIT 1"
            ),
            args![turn_id],
        )
    }

    /// Whether the session holds a granted "session" decision of `shape`.
    pub fn session_allows(
        &self,
        workspace: &str,
        session: &str,
        shape: &str,
    ) -> Result<bool, ApprovalError> {
        self.db.run(|conn| {
            Ok(conn
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM approval_requests
                        WHERE workspace = ?1 AND session = ?2 AND shape = ?3
                          AND state = 'granted' AND decision = 'session')",
                    args![workspace, session, shape],
                )?
                .get(0)?)
        })
    }

    /// The tier a conversation chose for itself (`/tier`), if any.
    pub fn session_tier(
        &self,
        workspace: &str,
        channel: &str,
        conversation: &str,
    ) -> Result<Option<Tier>, ApprovalError> {
        let text: Option<String> = self.db.run(|conn| {
            conn.query_opt(
                "SELECT tier FROM approval_session_tiers
                 WHERE workspace = ?1 AND channel = ?2 AND conversation = ?3",
                args![workspace, channel, conversation],
            )?
            .map(|row| row.get(0))
            .transpose()
        })?;
        Ok(text.as_deref().and_then(Tier::parse))
    }

    /// Sets (`Some`) or clears (`None`) the tier of a conversation.
    pub fn set_session_tier(
        &self,
        workspace: &str,
        channel: &str,
        conversation: &str,
        tier: Option<Tier>,
        by: &str,
    ) -> Result<(), ApprovalError> {
        match tier {
            Some(tier) => self.execute(
                "INSERT INTO approval_session_tiers
                    (workspace, channel, conversation, tier, set_by, set_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (workspace, channel, conversation)
                 DO UPDATE SET tier = excluded.tier, set_by = excluded.set_by,
                     set_ms = excluded.set_ms",
                args![
                    workspace,
                    channel,
                    conversation,
                    tier.as_str(),
                    by,
                    crate::db::now_ms()
                ],
            )?,
            None => self.execute(
                "DELETE FROM approval_session_tiers
                 WHERE workspace = ?1 AND channel = ?2 AND conversation = ?3",
                args![workspace, channel, conversation],
            )?,
        };
        Ok(())
    }

    /// The workspace's "always" rules, as stored (each re-checked: a rule
    /// that no longer parses is left out).
    pub fn rules(&self, workspace: &str) -> Result<Vec<Rule>, ApprovalError> {
        let mut texts: Vec<String> = self.db.run(|conn| {
            conn.query(
                "SELECT rule FROM approval_rules WHERE workspace = ?1",
                args![workspace],
            )?
            .iter()
            .map(|row| row.get(0))
            .collect::<Result<_, DbError>>()
        })?;
        // Sorted here, by bytes as SQLite's ORDER BY would: PostgreSQL's
        // order depends on the database's collation.
        texts.sort();
        Ok(texts.iter().filter_map(|t| Rule::parse(t).ok()).collect())
    }

    /// Removes a rule; `false` when the workspace had none such.
    pub fn revoke(&self, workspace: &str, rule: &Rule) -> Result<bool, ApprovalError> {
        Ok(self.execute(
            "DELETE FROM approval_rules WHERE workspace = ?1 AND rule = ?2",
            args![workspace, rule.to_string()],
        )? == 1)
    }
}

fn request_row(row: &Row) -> Result<Request, DbError> {
    Ok(Request {
        id: row.get(0)?,
        workspace: row.get(1)?,
        session: row.get(2)?,
        originator: row.get(3)?,
        tool: row.get(4)?,
        fingerprint: row.get(5)?,
        shape: row.get(6)?,
        preview: row.get(7)?,
        created_ms: row.get(8)?,
        expires_ms: row.get(9)?,
        state: State::parse(&row.get::<String>(10)?),
        decision: row.get(11)?,
        decided_by: row.get(12)?,
        reason: row.get(13)?,
        turn_id: row.get(14)?,
        call_id: row.get(15)?,
        applied: row.get(16)?,
        channel: row.get(17)?,
        conversation: row.get(18)?,
        // Unreadable, nobody but an operator may decide.
        approvers: row
            .get::<Option<String>>(19)?
            .map(|text| serde_json::from_str(&text).unwrap_or_default()),
        scheduled_task: row.get(20)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    const MINUTE: i64 = 60_000;

    fn ask(store: &ApprovalStore, shape: Option<&str>) -> String {
        store
            .request(&NewRequest {
                workspace: "team",
                session: "slack/D1",
                originator: Some("U0ALICE"),
                approvers: None,
                scheduled_task: None,
                tool: "bash",
                fingerprint: "f00d",
                shape,
                preview: "rm -rf /workspace/x",
                turn_id: "turn-1",
                call_id: "call-1",
                channel: "slack",
                conversation: "D1",
                now_ms: 0,
                timeout_ms: 5 * MINUTE,
            })
            .expect("request")
    }

    #[test]
    fn only_the_originator_decides_and_only_once() {
        each_backend(|at| {
            let store = ApprovalStore::open_at(at).expect("open");
            let id = ask(&store, Some("bash: rm"));
            let stranger = store.decide(
                &id,
                Decider::Sender("U0MALLORY"),
                &Approvers::Originator,
                &Decision::Once,
                MINUTE,
            );
            assert!(
                matches!(&stranger, Err(ApprovalError::NotAnApprover { allowed, .. }) if allowed == "U0ALICE"),
                "{stranger:?}"
            );
            assert_eq!(
                store.get(&id).expect("db").expect("row").state,
                State::Pending
            );
            let granted = store
                .decide(
                    &id,
                    Decider::Sender("U0ALICE"),
                    &Approvers::Originator,
                    &Decision::Once,
                    MINUTE,
                )
                .expect("the originator decides");
            assert_eq!(granted.state, State::Granted);
            let again = store.decide(
                &id,
                Decider::Sender("U0ALICE"),
                &Approvers::Originator,
                &Decision::Deny { reason: None },
                MINUTE,
            );
            let err = again.expect_err("decided already").to_string();
            assert_eq!(
                err,
                format!("approval request `{id}` was already granted by U0ALICE")
            );
        });
    }

    /// A scheduled run's request names its approvers: they decide, not the
    /// workspace's (nor an originator: there is none); a restart ends it.
    #[test]
    fn a_request_naming_its_approvers_is_theirs_and_a_restart_ends_it_if_scheduled() {
        each_backend(|at| {
            let store = ApprovalStore::open_at(at).expect("open");
            let named = vec!["U0CAROL".to_string()];
            let scheduled = |store: &ApprovalStore| {
                store
                    .request(&NewRequest {
                        workspace: "team",
                        session: "7",
                        originator: None,
                        approvers: Some(&named),
                        scheduled_task: Some("nightly"),
                        tool: "bash",
                        fingerprint: "f00d",
                        shape: None,
                        preview: "touch x",
                        turn_id: "turn-9",
                        call_id: "call-1",
                        channel: "slack",
                        conversation: "C0OPS",
                        now_ms: 0,
                        timeout_ms: 5 * MINUTE,
                    })
                    .expect("request")
            };
            let id = scheduled(&store);
            let workspace_says = Approvers::Listed(vec!["U0ALICE".into()]);
            let alice = store.decide(
                &id,
                Decider::Sender("U0ALICE"),
                &workspace_says,
                &Decision::Once,
                1,
            );
            assert!(
                matches!(&alice, Err(ApprovalError::NotAnApprover { allowed, .. }) if allowed == "U0CAROL"),
                "{alice:?}"
            );
            let carol = store
                .decide(
                    &id,
                    Decider::Sender("U0CAROL"),
                    &workspace_says,
                    &Decision::Once,
                    1,
                )
                .expect("the named approver decides");
            assert_eq!(carol.approvers, Some(named.clone()));

            let waiting = scheduled(&store);
            let channel_turn = ask(&store, None);
            drop(store);
            let store = ApprovalStore::open_at(at).expect("reopen");
            assert!(
                store.expire_scheduled("other", 2).expect("db").is_empty(),
                "another workspace's daemon leaves them alone"
            );
            let ended = store.expire_scheduled("team", 2).expect("db");
            assert_eq!(
                ended.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
                [waiting.as_str()]
            );
            assert_eq!(ended[0].scheduled_task.as_deref(), Some("nightly"));
            assert_eq!(
                store.get(&channel_turn).expect("db").expect("row").state,
                State::Pending,
                "a channel turn's request is resumed after a restart, not ended"
            );
            assert!(!store.expire(&waiting, 3).expect("db"), "ended already");
            assert!(store.expire(&channel_turn, 3).expect("db"));
        });
    }

    #[test]
    fn a_request_survives_reopening_and_expires_into_a_denial() {
        each_backend(|at| {
            let store = ApprovalStore::open_at(at).expect("open");
            let id = ask(&store, None);
            drop(store);
            let store = ApprovalStore::open_at(at).expect("reopen");
            assert_eq!(store.pending(MINUTE).expect("db").len(), 1);
            assert_eq!(store.pending(5 * MINUTE).expect("db").len(), 0);
            let late = store.decide(
                &id,
                Decider::Operator("cli"),
                &Approvers::Originator,
                &Decision::Once,
                6 * MINUTE,
            );
            assert_eq!(
                late.expect_err("expired").to_string(),
                format!("approval request `{id}` expired; the call was denied")
            );
            assert_eq!(
                store.get(&id).expect("db").expect("row").state,
                State::Expired
            );
        });
    }

    #[test]
    fn operators_and_listed_approvers_may_decide() {
        each_backend(|at| {
            let store = ApprovalStore::open_at(at).expect("open");
            let listed = Approvers::Listed(vec!["U0BOB".into()]);
            let first = ask(&store, Some("bash: rm"));
            assert!(
                store
                    .decide(
                        &first,
                        Decider::Sender("U0ALICE"),
                        &listed,
                        &Decision::Once,
                        1
                    )
                    .is_err()
            );
            let by_bob = store
                .decide(
                    &first,
                    Decider::Sender("U0BOB"),
                    &listed,
                    &Decision::Session,
                    1,
                )
                .expect("listed");
            assert_eq!(by_bob.decision.as_deref(), Some("session"));
            assert!(
                store
                    .session_allows("team", "slack/D1", "bash: rm")
                    .expect("db")
            );
            assert!(
                !store
                    .session_allows("team", "slack/D2", "bash: rm")
                    .expect("db")
            );
            let second = ask(&store, None);
            let by_cli = store
                .decide(
                    &second,
                    Decider::Operator("cli"),
                    &listed,
                    &Decision::Deny {
                        reason: Some("no".into()),
                    },
                    1,
                )
                .expect("operators decide any request");
            assert_eq!(by_cli.decided_by.as_deref(), Some("operator:cli"));
            assert_eq!(by_cli.reason.as_deref(), Some("no"));
        });
    }

    #[test]
    fn a_session_decision_needs_a_shape_and_always_stores_a_rule() {
        each_backend(|at| {
            let store = ApprovalStore::open_at(at).expect("open");
            let shapeless = ask(&store, None);
            assert!(matches!(
                store.decide(
                    &shapeless,
                    Decider::Sender("U0ALICE"),
                    &Approvers::Originator,
                    &Decision::Session,
                    1
                ),
                Err(ApprovalError::NoShape(_))
            ));
            let id = ask(&store, Some("bash: git status"));
            let rule = Rule::parse("bash: git status").expect("rule");
            store
                .decide(
                    &id,
                    Decider::Sender("U0ALICE"),
                    &Approvers::Originator,
                    &Decision::Always(rule.clone()),
                    1,
                )
                .expect("always");
            assert_eq!(store.rules("team").expect("db"), vec![rule.clone()]);
            assert!(store.revoke("team", &rule).expect("db"));
            assert!(!store.revoke("team", &rule).expect("db"));
            assert!(store.rules("team").expect("db").is_empty());
        });
    }

    #[test]
    fn tiers_applied_decisions_and_rules_read_back_the_same() {
        each_backend(|at| {
            let store = ApprovalStore::open_at(at).expect("open");
            let tier =
                |store: &ApprovalStore| store.session_tier("team", "slack", "D1").expect("db");
            assert_eq!(tier(&store), None);
            store
                .set_session_tier("team", "slack", "D1", Some(Tier::Yolo), "U0ALICE")
                .expect("set");
            store
                .set_session_tier("team", "slack", "D1", Some(Tier::ReadOnly), "U0BOB")
                .expect("set again");
            assert_eq!(tier(&store), Some(Tier::ReadOnly));
            store
                .set_session_tier("team", "slack", "D1", None, "U0BOB")
                .expect("clear");
            assert_eq!(tier(&store), None);

            // Rules in byte order on both backends (not the collation's:
            // `Write` before `bash: …`).
            for text in ["edit", "bash: git status", "Write"] {
                let id = ask(&store, None);
                let rule = Rule::parse(text).expect("rule");
                store
                    .decide(
                        &id,
                        Decider::Operator("cli"),
                        &Approvers::Originator,
                        &Decision::Always(rule),
                        1,
                    )
                    .expect("always");
            }
            let rules: Vec<String> = store
                .rules("team")
                .expect("db")
                .iter()
                .map(ToString::to_string)
                .collect();
            assert_eq!(rules, ["Write", "bash: git status", "edit"]);
            assert_eq!(store.decided(2).expect("db").len(), 2);
            assert_eq!(store.decided(10).expect("db").len(), 3);

            let waiting = ask(&store, None);
            assert_eq!(store.pending(1).expect("db").len(), 1);
            let open = store.open_for_turn("turn-1").expect("db").expect("open");
            assert!(!open.applied);
            for request in store.decided(10).expect("db") {
                store.mark_applied(&request.id).expect("applied");
            }
            store.mark_applied(&waiting).expect("applied");
            assert!(store.get(&waiting).expect("db").expect("row").applied);
            assert_eq!(store.open_for_turn("turn-1").expect("db"), None);
            assert_eq!(store.expire_due(5 * MINUTE).expect("db"), [waiting]);
        });
    }

    /// Two daemons (each its own pool on one PostgreSQL database) handed
    /// clicks on the same requests at once: each request is decided once,
    /// and every other click is told who decided it.
    #[test]
    fn a_request_decided_from_two_daemons_at_once_is_decided_once() {
        let at = database();
        let daemons = [
            ApprovalStore::open_at(&at).expect("open"),
            ApprovalStore::open_at(&at).expect("open"),
        ];
        let ids: Vec<String> = (0..20)
            .map(|_| ask(&daemons[0], Some("bash: rm")))
            .collect();
        let start = std::sync::Barrier::new(4);
        let answers = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for (d, store) in daemons.iter().enumerate() {
                for w in 0..2 {
                    let (ids, start, answers) = (&ids, &start, &answers);
                    s.spawn(move || {
                        let me = format!("daemon{d}/{w}");
                        let decision = if w == 0 {
                            Decision::Once
                        } else {
                            Decision::Always(Rule::parse("bash: rm x").expect("rule"))
                        };
                        for id in ids {
                            start.wait();
                            let answer = store.decide(
                                id,
                                Decider::Operator(&me),
                                &Approvers::Originator,
                                &decision,
                                1,
                            );
                            let answer = match answer {
                                Ok(request) => Ok(request.decided_by.expect("decided by")),
                                Err(ApprovalError::AlreadyDecided { by, .. }) => Err(by),
                                Err(e) => Err(format!("{id}: unexpected {e}")),
                            };
                            answers.lock().expect("answers").push((id.clone(), answer));
                        }
                    });
                }
            }
        });
        let answers = answers.into_inner().expect("answers");
        for id in &ids {
            let stored = daemons[1].get(id).expect("db").expect("row");
            let by = stored.decided_by.expect("decided");
            let mine: Vec<&Result<String, String>> = answers
                .iter()
                .filter(|(of, _)| of == id)
                .map(|(_, answer)| answer)
                .collect();
            assert_eq!(mine.len(), 4, "{id}");
            assert_eq!(
                mine.iter().filter(|a| a.is_ok()).collect::<Vec<_>>(),
                [&&Ok(by.clone())],
                "{id}: decided once, by whoever the row names"
            );
            assert!(
                mine.iter()
                    .all(|a| a.as_ref().unwrap_or_else(|by| by) == &by),
                "{id}: {mine:?}"
            );
        }
    }
}
