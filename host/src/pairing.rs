//! Pairing: a person a channel does not yet allow asks for a short code
//! (`refusal: pair`), the operator approves it (`pincer pairing approve
//! CODE`), and from their next message on they are allowed. Approved
//! senders live in a stored overlay of the channels' `allowed_senders`
//! (never written into the operator's YAML), with where each came from.
//! Only the host and the operator's CLI touch these tables: no agent tool
//! reads or writes them.

use std::path::Path;

use ring::rand::{SecureRandom, SystemRandom};

use crate::args;
use crate::db::{Conn, Db, DbError, Location, Row, now_ms};

/// How long a code is valid.
pub const CODE_TTL_MS: i64 = 3_600_000;

/// Characters of a code: upper-case Crockford base32 (no I, L, O, U).
const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

pub const CODE_LEN: usize = 8;

/// Pending codes one channel holds at once; past it strangers are refused
/// without a code (audited), so a crowd cannot fill the table.
pub const MAX_PENDING_PER_CHANNEL: i64 = 1000;

#[derive(Debug, thiserror::Error)]
pub enum PairingError {
    #[error("there is no pairing code `{0}`")]
    Unknown(String),
    #[error("pairing code `{code}` expired at {expired}; the sender can ask again for a new one")]
    Expired { code: String, expired: String },
    #[error("pairing code `{code}` was already {state}")]
    Used { code: String, state: String },
    #[error("`{0}` is not a pairing code: 8 characters of 0-9 and A-Z without I, L, O, U")]
    Malformed(String),
    #[error("pairing store: {0}")]
    Db(#[from] DbError),
    #[error("no randomness for a pairing code")]
    Random,
}

/// A stranger's request to be allowed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Request {
    pub code: String,
    pub channel: String,
    pub sender: String,
    pub sender_name: Option<String>,
    pub created_ms: i64,
    pub expires_ms: i64,
    /// `pending`, `approved` or `denied`.
    pub state: String,
    pub decided_by: Option<String>,
}

/// A sender allowed by the overlay, and why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Allowed {
    pub channel: String,
    pub sender: String,
    pub sender_name: Option<String>,
    /// E.g. `pairing K7Q2M9XD approved by root`.
    pub origin: String,
    pub added_ms: i64,
}

/// What asking for a code gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Asked {
    /// A new code: send it to the sender.
    New(Request),
    /// The sender holds an unexpired code already: nothing new is made.
    Pending(Request),
    /// The channel holds [`MAX_PENDING_PER_CHANNEL`] pending codes.
    Full,
}

pub struct PairingStore {
    db: Db,
    random: SystemRandom,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS pairing_requests (
        code TEXT PRIMARY KEY,
        channel TEXT NOT NULL,
        sender TEXT NOT NULL,
        sender_name TEXT,
        created_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        state TEXT NOT NULL DEFAULT 'pending',
        decided_by TEXT,
        decided_ms INTEGER
    );
    CREATE INDEX IF NOT EXISTS pairing_requests_sender
        ON pairing_requests (channel, sender, state);
    CREATE TABLE IF NOT EXISTS channel_allowed_senders (
        channel TEXT NOT NULL,
        sender TEXT NOT NULL,
        sender_name TEXT,
        origin TEXT NOT NULL,
        added_ms INTEGER NOT NULL,
        PRIMARY KEY (channel, sender)
    );";

impl PairingStore {
    pub fn open(path: &Path) -> Result<Self, PairingError> {
        Self::open_at(&Location::from(path))
    }

    pub fn open_at(location: &Location) -> Result<Self, PairingError> {
        let db = Db::open(location)?;
        db.transaction(|conn| conn.schema(SCHEMA))?;
        Ok(Self {
            db,
            random: SystemRandom::new(),
        })
    }

    /// Deletes (or, `dry_run`, counts) the requests made before
    /// `before_ms`: decided, or expired long since (a code lives an hour).
    /// The allowed senders they added stay.
    pub fn prune(&self, before_ms: i64, dry_run: bool) -> Result<usize, PairingError> {
        self.db.run(|conn| {
            Ok(if dry_run {
                conn.query_one(
                    "SELECT COUNT(*) FROM pairing_requests WHERE created_ms < ?1 AND expires_ms < ?1",
                    args![before_ms],
                )?
                .get(0)?
            } else {
                conn.execute(
                    "DELETE FROM pairing_requests WHERE created_ms < ?1 AND expires_ms < ?1",
                    args![before_ms],
                )?
            })
        })
    }

    /// A code for `sender` of `channel`: the pending one if it holds one,
    /// else a new one (one pending code per sender is the rate limit).
    pub fn ask(
        &self,
        channel: &str,
        sender: &str,
        sender_name: Option<&str>,
    ) -> Result<Asked, PairingError> {
        let now = now_ms();
        self.db.transaction(|tx| {
            let pending = tx.query_opt(
                &format!(
                    "SELECT {COLUMNS} FROM pairing_requests
                     WHERE channel = ?1 AND sender = ?2 AND state = 'pending' AND expires_ms > ?3"
                ),
                args![channel, sender, now],
            )?;
            if let Some(pending) = pending {
                return Ok(Asked::Pending(request_of(&pending)?));
            }
            let open: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM pairing_requests
                     WHERE channel = ?1 AND state = 'pending' AND expires_ms > ?2",
                    args![channel, now],
                )?
                .get(0)?;
            if open >= MAX_PENDING_PER_CHANNEL {
                return Ok(Asked::Full);
            }
            let code = loop {
                let code = self.new_code()?;
                let taken: bool = tx
                    .query_one(
                        "SELECT EXISTS (SELECT 1 FROM pairing_requests WHERE code = ?1)",
                        args![&code],
                    )?
                    .get(0)?;
                if !taken {
                    break code;
                }
            };
            let request = Request {
                code,
                channel: channel.to_string(),
                sender: sender.to_string(),
                sender_name: sender_name.map(str::to_string),
                created_ms: now,
                expires_ms: now + CODE_TTL_MS,
                state: "pending".into(),
                decided_by: None,
            };
            tx.execute(
                "INSERT INTO pairing_requests (code, channel, sender, sender_name, created_ms, expires_ms)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                args![
                    &request.code,
                    &request.channel,
                    &request.sender,
                    &request.sender_name,
                    request.created_ms,
                    request.expires_ms
                ],
            )?;
            Ok(Asked::New(request))
        })
    }

    fn new_code(&self) -> Result<String, PairingError> {
        let mut bytes = [0u8; CODE_LEN];
        self.random
            .fill(&mut bytes)
            .map_err(|_| PairingError::Random)?;
        // 256 is a multiple of 32: each byte's low five bits are uniform.
        Ok(bytes
            .iter()
            .map(|b| char::from(ALPHABET[usize::from(b & 31)]))
            .collect())
    }

    /// Pending, unexpired requests, oldest first.
    pub fn pending(&self) -> Result<Vec<Request>, PairingError> {
        self.db.run(|conn| {
            conn.query(
                &format!(
                    "SELECT {COLUMNS} FROM pairing_requests
                     WHERE state = 'pending' AND expires_ms > ?1 ORDER BY created_ms, code"
                ),
                args![now_ms()],
            )?
            .iter()
            .map(request_of)
            .collect()
        })
    }

    /// The request of `code`, whatever its state.
    pub fn find(&self, code: &str) -> Result<Option<Request>, PairingError> {
        let code = normalized(code)?;
        self.db.run(|conn| find(conn, &code))
    }

    /// Approves `code` (as `by`): its sender joins the overlay of its
    /// channel. Unknown, expired and used codes are refused.
    pub fn approve(&self, code: &str, by: &str) -> Result<Request, PairingError> {
        self.decide(code, by, true)
    }

    /// Denies `code`: it cannot be used any more.
    pub fn deny(&self, code: &str, by: &str) -> Result<Request, PairingError> {
        self.decide(code, by, false)
    }

    fn decide(&self, code: &str, by: &str, approve: bool) -> Result<Request, PairingError> {
        let code = normalized(code)?;
        let now = now_ms();
        self.db.transaction(|tx| {
            let request =
                find(tx, &code)?.ok_or_else(|| PairingError::Unknown(code.clone()))?;
            if request.state != "pending" {
                return Err(PairingError::Used {
                    code: code.clone(),
                    state: request.state,
                });
            }
            if request.expires_ms <= now {
                return Err(PairingError::Expired {
                    code: code.clone(),
                    expired: crate::db::utc_text(request.expires_ms),
                });
            }
            let state = if approve { "approved" } else { "denied" };
            tx.execute(
                "UPDATE pairing_requests SET state = ?2, decided_by = ?3, decided_ms = ?4
                 WHERE code = ?1 AND state = 'pending'",
                args![&code, state, by, now],
            )?;
            if approve {
                tx.execute(
                    "INSERT INTO channel_allowed_senders (channel, sender, sender_name, origin, added_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (channel, sender) DO UPDATE SET
                         sender_name = excluded.sender_name, origin = excluded.origin,
                         added_ms = excluded.added_ms",
                    args![
                        &request.channel,
                        &request.sender,
                        &request.sender_name,
                        format!("pairing {code} approved by {by}"),
                        now
                    ],
                )?;
            }
            Ok(Request {
                state: state.into(),
                decided_by: Some(by.to_string()),
                ..request
            })
        })
    }

    /// Whether the overlay allows `sender` on `channel`.
    pub fn allows(&self, channel: &str, sender: &str) -> Result<bool, PairingError> {
        self.db.run(|conn| {
            Ok(conn
                .query_one(
                    "SELECT EXISTS (SELECT 1 FROM channel_allowed_senders
                                    WHERE channel = ?1 AND sender = ?2)",
                    args![channel, sender],
                )?
                .get(0)?)
        })
    }

    /// Every sender the overlay allows, by channel and sender.
    pub fn allowed(&self) -> Result<Vec<Allowed>, PairingError> {
        self.db.run(|conn| allowed(conn))
    }

    /// Takes `sender` out of the overlay (of `channel`, or of every
    /// channel); what was removed.
    pub fn remove(
        &self,
        channel: Option<&str>,
        sender: &str,
    ) -> Result<Vec<Allowed>, PairingError> {
        self.db.transaction(|tx| {
            let removed: Vec<Allowed> = allowed(tx)?
                .into_iter()
                .filter(|a| a.sender == sender && channel.is_none_or(|c| c == a.channel))
                .collect();
            for a in &removed {
                tx.execute(
                    "DELETE FROM channel_allowed_senders WHERE channel = ?1 AND sender = ?2",
                    args![&a.channel, &a.sender],
                )?;
            }
            Ok(removed)
        })
    }
}

const COLUMNS: &str =
    "code, channel, sender, sender_name, created_ms, expires_ms, state, decided_by";

fn find(conn: &mut dyn Conn, code: &str) -> Result<Option<Request>, PairingError> {
    conn.query_opt(
        &format!("SELECT {COLUMNS} FROM pairing_requests WHERE code = ?1"),
        args![code],
    )?
    .as_ref()
    .map(request_of)
    .transpose()
}

fn allowed(conn: &mut dyn Conn) -> Result<Vec<Allowed>, PairingError> {
    conn.query(
        "SELECT channel, sender, sender_name, origin, added_ms
         FROM channel_allowed_senders ORDER BY channel, sender",
        args![],
    )?
    .iter()
    .map(|row| {
        Ok(Allowed {
            channel: row.get(0)?,
            sender: row.get(1)?,
            sender_name: row.get(2)?,
            origin: row.get(3)?,
            added_ms: row.get(4)?,
        })
    })
    .collect()
}

fn request_of(row: &Row) -> Result<Request, PairingError> {
    Ok(Request {
        code: row.get(0)?,
        channel: row.get(1)?,
        sender: row.get(2)?,
        sender_name: row.get(3)?,
        created_ms: row.get(4)?,
        expires_ms: row.get(5)?,
        state: row.get(6)?,
        decided_by: row.get(7)?,
    })
}

/// `code` upper-cased, checked against the alphabet.
fn normalized(code: &str) -> Result<String, PairingError> {
    let code = code.trim().to_ascii_uppercase();
    if code.len() != CODE_LEN || !code.bytes().all(|b| ALPHABET.contains(&b)) {
        return Err(PairingError::Malformed(code));
    }
    Ok(code)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    fn new_code(asked: Asked) -> Request {
        match asked {
            Asked::New(request) => request,
            other => panic!("expected a new code, got {other:?}"),
        }
    }

    #[test]
    fn a_code_is_eight_crockford_characters_and_one_per_sender() {
        each_backend(|at| {
            let store = PairingStore::open_at(at).expect("open");
            let first = new_code(store.ask("slack", "U1", Some("ann")).expect("ask"));
            assert_eq!(first.code.len(), CODE_LEN);
            assert!(first.code.bytes().all(|b| ALPHABET.contains(&b)));
            assert_eq!(first.expires_ms - first.created_ms, CODE_TTL_MS);
            // asking again gives the same pending code, no new one
            assert_eq!(
                store.ask("slack", "U1", None).expect("ask"),
                Asked::Pending(first.clone())
            );
            let other = new_code(store.ask("slack", "U2", None).expect("ask"));
            assert_ne!(other.code, first.code);
            assert_eq!(store.pending().expect("pending").len(), 2);
        });
    }

    #[test]
    fn approve_adds_to_the_overlay_once_and_a_used_code_is_refused() {
        each_backend(|at| {
            let store = PairingStore::open_at(at).expect("open");
            let request = new_code(store.ask("slack", "U1", Some("ann")).expect("ask"));
            assert!(!store.allows("slack", "U1").expect("allows"));
            let lower = request.code.to_ascii_lowercase();
            let approved = store.approve(&lower, "root").expect("approve");
            assert_eq!(approved.state, "approved");
            assert!(store.allows("slack", "U1").expect("allows"));
            assert!(!store.allows("feishu", "U1").expect("other channel"));
            let allowed = store.allowed().expect("allowed");
            assert_eq!(
                allowed[0].origin,
                format!("pairing {} approved by root", request.code)
            );
            assert!(matches!(
                store.approve(&request.code, "root"),
                Err(PairingError::Used { .. })
            ));
            assert!(matches!(
                store.deny(&request.code, "root"),
                Err(PairingError::Used { .. })
            ));
            // removed again
            assert_eq!(store.remove(None, "U1").expect("remove").len(), 1);
            assert!(!store.allows("slack", "U1").expect("allows"));
        });
    }

    #[test]
    fn unknown_malformed_denied_and_expired_codes_are_refused() {
        each_backend(|at| {
            let store = PairingStore::open_at(at).expect("open");
            assert!(matches!(
                store.approve("K7Q2M9XD", "root"),
                Err(PairingError::Unknown(_))
            ));
            assert!(matches!(
                store.approve("K7Q2M9X", "root"),
                Err(PairingError::Malformed(_))
            ));
            assert!(matches!(
                store.approve("K7Q2M9XI", "root"),
                Err(PairingError::Malformed(_))
            ));
            let denied = new_code(store.ask("slack", "U1", None).expect("ask"));
            store.deny(&denied.code, "root").expect("deny");
            assert!(!store.allows("slack", "U1").expect("allows"));
            // a denied sender may ask again (a new code)
            let again = new_code(store.ask("slack", "U1", None).expect("ask"));
            store
                .db
                .run(|conn| {
                    conn.execute(
                        "UPDATE pairing_requests SET expires_ms = ?2 WHERE code = ?1",
                        args![&again.code, now_ms() - 1],
                    )
                })
                .expect("expire");
            assert!(matches!(
                store.approve(&again.code, "root"),
                Err(PairingError::Expired { .. })
            ));
            assert!(store.pending().expect("pending").is_empty());
            assert!(!store.allows("slack", "U1").expect("allows"));
        });
    }

    #[test]
    fn a_channel_holds_a_bounded_number_of_pending_codes() {
        each_backend(|at| {
            let store = PairingStore::open_at(at).expect("open");
            let far = now_ms() + CODE_TTL_MS;
            store
                .db
                .transaction(|tx| {
                    for i in 0..MAX_PENDING_PER_CHANNEL {
                        tx.execute(
                            "INSERT INTO pairing_requests (code, channel, sender, created_ms, expires_ms)
                             VALUES (?1, 'slack', ?2, 0, ?3)",
                            args![format!("C{i:07}"), format!("U{i}"), far],
                        )?;
                    }
                    Ok::<_, DbError>(())
                })
                .expect("insert");
            assert_eq!(store.ask("slack", "UNEW", None).expect("ask"), Asked::Full);
            assert!(matches!(
                store.ask("feishu", "UNEW", None).expect("ask"),
                Asked::New(_)
            ));
        });
    }

    /// Two daemons (and the operator's CLI) deciding the same codes at
    /// once: each code is decided once; every other attempt is told it was
    /// used.
    #[test]
    fn a_code_decided_from_two_daemons_at_once_is_decided_once() {
        let at = database();
        let daemons = [
            PairingStore::open_at(&at).expect("open"),
            PairingStore::open_at(&at).expect("open"),
        ];
        let codes: Vec<String> = (0..20)
            .map(|i| {
                new_code(
                    daemons[0]
                        .ask("slack", &format!("U{i}"), None)
                        .expect("ask"),
                )
                .code
            })
            .collect();
        let decided = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|s| {
            for (d, store) in daemons.iter().enumerate() {
                for w in 0..2 {
                    let (codes, decided) = (&codes, &decided);
                    s.spawn(move || {
                        for code in codes {
                            let by = format!("daemon{d}/{w}");
                            let outcome = if w == 0 {
                                store.approve(code, &by)
                            } else {
                                store.deny(code, &by)
                            };
                            match outcome {
                                Ok(_) => {
                                    decided.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                                }
                                Err(PairingError::Used { .. }) => {}
                                Err(e) => panic!("{e}"),
                            }
                        }
                    });
                }
            }
        });
        assert_eq!(decided.into_inner(), codes.len());
        assert!(daemons[1].pending().expect("pending").is_empty());
    }
}
