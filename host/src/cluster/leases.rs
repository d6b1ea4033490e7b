//! Leases: which daemon runs what (a workspace's containers and turns, a
//! channel connection), as rows in the shared state with an owner, a
//! fencing token and a deadline.
//!
//! A lease is taken when it is free or its deadline has passed, renewed by
//! its holder's heartbeat, and handed back at once on a clean stop. Each
//! change of holder raises the token. A write made under a lease names the
//! token it holds ([`Fence`]); it is refused once the lease has passed to
//! another daemon, so a holder that was paused past its deadline (a long GC,
//! a frozen VM, SIGSTOP) cannot overwrite the new holder's work when it
//! wakes.

use crate::args;
use crate::db::{Conn, Db, DbError, Location, Row, now_ms};

#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("lease store: {0}")]
    Db(#[from] DbError),
    #[error(
        "{what} is held by {holder} (token {token}) now, not by this daemon's token {mine}: \
         its lease expired and was taken over; the write was refused"
    )]
    Fenced {
        what: String,
        holder: String,
        token: i64,
        mine: i64,
    },
    #[error(
        "workspace `{0}` is not held by this daemon: another daemon runs it; the write was refused"
    )]
    NotHeld(String),
}

/// A lease as held: the proof a fenced write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub what: String,
    pub owner: String,
    pub token: i64,
    pub expires_ms: i64,
    /// The daemon it was taken from, when it was another's.
    pub taken_from: Option<String>,
}

/// Who holds what, for `pincer status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Holder {
    pub what: String,
    pub owner: String,
    pub token: i64,
    pub expires_ms: i64,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS cluster_leases (
        what TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        token INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL
    )";

pub struct Leases {
    db: Db,
}

impl Leases {
    pub fn open(at: &Location) -> Result<Self, LeaseError> {
        let db = Db::open(at)?;
        db.transaction(|conn| conn.schema(SCHEMA))?;
        Ok(Self { db })
    }

    /// Takes `what` for `owner` until `ttl_ms` from now, or renews it when
    /// `owner` holds it already. `None` while another daemon's lease runs.
    pub fn acquire(
        &self,
        what: &str,
        owner: &str,
        ttl_ms: i64,
    ) -> Result<Option<Lease>, LeaseError> {
        self.acquire_at(what, owner, ttl_ms, now_ms())
    }

    fn acquire_at(
        &self,
        what: &str,
        owner: &str,
        ttl_ms: i64,
        now: i64,
    ) -> Result<Option<Lease>, LeaseError> {
        self.db.transaction(|tx| {
            let expires_ms = now + ttl_ms;
            let mut taken_from = None;
            let token = match holder(tx, what)? {
                None => {
                    tx.execute(
                        "INSERT INTO cluster_leases (what, owner, token, expires_ms)
                         VALUES (?1, ?2, 1, ?3)",
                        args![what, owner, expires_ms],
                    )?;
                    1
                }
                Some(h) if h.owner == owner && h.expires_ms > now => {
                    renew(tx, what, owner, h.token, expires_ms)?;
                    h.token
                }
                // Free (expired, handed back, or held by an earlier process
                // of this daemon's home, which is gone): the next holder,
                // even the same daemon coming back, gets a new token, so
                // writes made under the old one stay fenced off.
                Some(h) if h.expires_ms <= now || earlier_process_of(&h.owner, owner) => {
                    tx.execute(
                        "UPDATE cluster_leases SET owner = ?2, token = ?3, expires_ms = ?4
                         WHERE what = ?1 AND token = ?5",
                        args![what, owner, h.token + 1, expires_ms, h.token],
                    )?;
                    if h.owner != owner {
                        taken_from = Some(h.owner);
                    }
                    h.token + 1
                }
                Some(_) => return Ok(None),
            };
            Ok(Some(Lease {
                what: what.to_owned(),
                owner: owner.to_owned(),
                token,
                expires_ms,
                taken_from,
            }))
        })
    }

    /// Extends `lease` to `ttl_ms` from now; `false` (and nothing written)
    /// when it has expired or passed to another daemon: the holder must
    /// stop what it runs under it.
    pub fn renew(&self, lease: &mut Lease, ttl_ms: i64) -> Result<bool, LeaseError> {
        let now = now_ms();
        let expires_ms = now + ttl_ms;
        let renewed = self.db.transaction(|tx| -> Result<bool, DbError> {
            Ok(tx.execute(
                "UPDATE cluster_leases SET expires_ms = ?4
                 WHERE what = ?1 AND owner = ?2 AND token = ?3 AND expires_ms > ?5",
                args![
                    lease.what.as_str(),
                    lease.owner.as_str(),
                    lease.token,
                    expires_ms,
                    now
                ],
            )? == 1)
        })?;
        if renewed {
            lease.expires_ms = expires_ms;
        }
        Ok(renewed)
    }

    /// Hands `lease` back at once (a clean stop): another daemon may take
    /// it without waiting for the deadline.
    pub fn release(&self, lease: &Lease) -> Result<bool, LeaseError> {
        Ok(self.db.run(|conn| -> Result<bool, DbError> {
            Ok(conn.execute(
                "UPDATE cluster_leases SET expires_ms = 0
                 WHERE what = ?1 AND owner = ?2 AND token = ?3",
                args![lease.what.as_str(), lease.owner.as_str(), lease.token],
            )? == 1)
        })?)
    }

    pub fn holders(&self) -> Result<Vec<Holder>, LeaseError> {
        Ok(self.db.run(|conn| -> Result<Vec<Holder>, DbError> {
            conn.query(
                "SELECT what, owner, token, expires_ms FROM cluster_leases ORDER BY what",
                args![],
            )?
            .iter()
            .map(holder_row)
            .collect()
        })?)
    }

    /// Runs `write` in one transaction with a check that `lease` is still
    /// the current one: the write commits only if no other daemon has taken
    /// the lease, whatever the clock of the daemon making it says.
    pub fn fenced<R: Send>(
        &self,
        lease: &Lease,
        mut write: impl FnMut(&mut dyn Conn) -> Result<R, DbError> + Send,
    ) -> Result<R, LeaseError> {
        self.db.transaction(|tx| {
            Fence(lease).check(tx)?;
            Ok(write(tx)?)
        })
    }
}

/// The check a fenced write makes inside its transaction.
pub struct Fence<'a>(pub &'a Lease);

impl Fence<'_> {
    pub fn check(&self, tx: &mut dyn Conn) -> Result<(), LeaseError> {
        let lease = self.0;
        match holder(tx, &lease.what)? {
            Some(h) if h.token == lease.token && h.owner == lease.owner => Ok(()),
            h => {
                let (holder, token) =
                    h.map_or_else(|| ("nobody".to_owned(), 0), |h| (h.owner, h.token));
                Err(LeaseError::Fenced {
                    what: lease.what.clone(),
                    holder,
                    token,
                    mine: lease.token,
                })
            }
        }
    }
}

/// Whether `holder` is an earlier process of the same home as `me` (daemon
/// ids are `INSTANCE:PID`, [`super::daemon_id`]). One home runs one daemon
/// at a time (its control socket refuses a second), so that process is gone:
/// a daemon restarted after `kill -9` takes its workspaces back at once
/// instead of waiting out its own old leases.
pub(crate) fn earlier_process_of(holder: &str, me: &str) -> bool {
    match (holder.split_once(':'), me.split_once(':')) {
        (Some((home, _)), Some((my_home, _))) => home == my_home && holder != me,
        _ => false,
    }
}

fn holder(conn: &mut dyn Conn, what: &str) -> Result<Option<Holder>, DbError> {
    conn.query_opt(
        "SELECT what, owner, token, expires_ms FROM cluster_leases WHERE what = ?1",
        args![what],
    )?
    .as_ref()
    .map(holder_row)
    .transpose()
}

fn renew(
    conn: &mut dyn Conn,
    what: &str,
    owner: &str,
    token: i64,
    expires_ms: i64,
) -> Result<(), DbError> {
    conn.execute(
        "UPDATE cluster_leases SET expires_ms = ?4 WHERE what = ?1 AND owner = ?2 AND token = ?3",
        args![what, owner, token, expires_ms],
    )
    .map(drop)
}

fn holder_row(r: &Row) -> Result<Holder, DbError> {
    Ok(Holder {
        what: r.get(0)?,
        owner: r.get(1)?,
        token: r.get(2)?,
        expires_ms: r.get(3)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    #[test]
    fn a_lease_is_taken_over_only_after_its_deadline_with_a_new_token() {
        each_backend(|at| {
            let leases = Leases::open(at).unwrap();
            let a = leases
                .acquire_at("workspace:main", "a", 15_000, 1_000)
                .unwrap()
                .unwrap();
            assert_eq!(a.token, 1);
            assert_eq!(
                leases
                    .acquire_at("workspace:main", "b", 15_000, 15_999)
                    .unwrap(),
                None
            );
            // A renewing its own lease keeps the token.
            let again = leases
                .acquire_at("workspace:main", "a", 15_000, 10_000)
                .unwrap()
                .unwrap();
            assert_eq!((again.token, again.expires_ms), (1, 25_000));
            assert_eq!(
                leases
                    .acquire_at("workspace:main", "b", 15_000, 24_999)
                    .unwrap(),
                None
            );
            let b = leases
                .acquire_at("workspace:main", "b", 15_000, 25_000)
                .unwrap()
                .unwrap();
            assert_eq!((b.owner.as_str(), b.token), ("b", 2));
            // A coming back after its deadline gets a new token too.
            let a2 = leases
                .acquire_at("workspace:main", "a", 15_000, 40_001)
                .unwrap()
                .unwrap();
            assert_eq!(a2.token, 3);
            assert_eq!(leases.holders().unwrap().len(), 1);
        });
    }

    #[test]
    fn a_paused_holder_cannot_renew_or_write_after_a_takeover() {
        each_backend(|at| {
            let leases = Leases::open(at).unwrap();
            leases
                .db
                .run(|c| c.schema("CREATE TABLE IF NOT EXISTS work (v TEXT NOT NULL)"))
                .unwrap();
            let old = leases
                .acquire_at("workspace:main", "a", 15_000, 1_000)
                .unwrap()
                .unwrap();
            let write = |lease: &Lease, v: &str| {
                leases.fenced(lease, |tx| {
                    tx.execute("INSERT INTO work (v) VALUES (?1)", args![v])
                })
            };
            write(&old, "by a").unwrap();
            // a is paused past its deadline; b takes over.
            let new = leases
                .acquire_at("workspace:main", "b", 15_000, 16_001)
                .unwrap()
                .unwrap();
            // a wakes and carries on as if it still held the lease.
            let refused = write(&old, "stale a").unwrap_err();
            assert!(
                matches!(refused, LeaseError::Fenced { ref holder, token: 2, mine: 1, .. } if holder == "b"),
                "{refused}"
            );
            assert!(!leases.renew(&mut old.clone(), 15_000).unwrap());
            write(&new, "by b").unwrap();
            let rows: Vec<String> = leases
                .db
                .run(|c| {
                    c.query("SELECT v FROM work ORDER BY v", args![])?
                        .iter()
                        .map(|r| r.get(0))
                        .collect()
                })
                .unwrap();
            assert_eq!(rows, ["by a", "by b"]);
        });
    }

    #[test]
    fn a_released_lease_is_taken_at_once_and_renewal_needs_the_current_token() {
        each_backend(|at| {
            let leases = Leases::open(at).unwrap();
            let mut a = leases
                .acquire("channel:slack", "a", 60_000)
                .unwrap()
                .unwrap();
            assert!(leases.renew(&mut a, 60_000).unwrap());
            assert_eq!(leases.acquire("channel:slack", "b", 60_000).unwrap(), None);
            assert!(leases.release(&a).unwrap());
            assert!(!leases.renew(&mut a, 60_000).unwrap(), "handed back");
            let b = leases
                .acquire("channel:slack", "b", 60_000)
                .unwrap()
                .unwrap();
            assert_eq!(b.token, 2);
            assert!(!leases.release(&a).unwrap(), "a no longer holds it");
        });
    }

    #[test]
    fn a_restarted_daemon_takes_its_homes_leases_back_at_once() {
        each_backend(|at| {
            let leases = Leases::open(at).unwrap();
            let old = leases
                .acquire_at("workspace:main", "0a1b2c3d:100", 15_000, 1_000)
                .unwrap()
                .unwrap();
            // Another home waits for the deadline.
            assert_eq!(
                leases
                    .acquire_at("workspace:main", "99999999:100", 15_000, 2_000)
                    .unwrap(),
                None
            );
            // The same home's next process does not.
            let new = leases
                .acquire_at("workspace:main", "0a1b2c3d:200", 15_000, 2_000)
                .unwrap()
                .unwrap();
            assert_eq!(new.token, old.token + 1);
            assert_eq!(new.taken_from.as_deref(), Some("0a1b2c3d:100"));
        });
    }

    /// Many daemons racing for one free lease on PostgreSQL: exactly one
    /// wins each round.
    #[test]
    fn daemons_racing_for_a_lease_get_one_holder() {
        let at = database();
        let daemons: Vec<Leases> = (0..4).map(|_| Leases::open(&at).unwrap()).collect();
        for round in 0..10 {
            let won = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for (i, leases) in daemons.iter().enumerate() {
                    let won = &won;
                    s.spawn(move || {
                        if leases
                            .acquire(&format!("workspace:{round}"), &format!("d{i}"), 60_000)
                            .unwrap()
                            .is_some()
                        {
                            won.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        }
                    });
                }
            });
            assert_eq!(won.into_inner(), 1, "round {round}");
        }
    }
}
