//! The daemons of a cluster: one row each, with a heartbeat and a deadline.
//! A daemon is alive while its deadline has not passed; one that stops
//! cleanly removes its row, one killed leaves it to expire. Other stores
//! ask [`Members::alive`] before treating another daemon's claims as
//! abandoned.

use crate::args;
use crate::db::{Db, DbError, Location, Row, now_ms};

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS cluster_members (
        id TEXT PRIMARY KEY,
        host TEXT NOT NULL,
        started_ms INTEGER NOT NULL,
        heartbeat_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL,
        detail TEXT NOT NULL
    )";

/// Rows of daemons dead this long are deleted by the next heartbeat.
const FORGET_AFTER_MS: i64 = 3_600_000;

/// A daemon as `pincer status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Member {
    pub id: String,
    pub host: String,
    pub started_ms: i64,
    pub heartbeat_ms: i64,
    pub expires_ms: i64,
    /// What it serves (listen addresses, channel connections), as JSON.
    pub detail: serde_json::Value,
}

impl Member {
    pub fn alive_at(&self, now: i64) -> bool {
        self.expires_ms > now
    }
}

pub struct Members {
    db: Db,
}

impl Members {
    pub fn open(at: &Location) -> Result<Self, DbError> {
        let db = Db::open(at)?;
        db.transaction(|conn| conn.schema(SCHEMA))?;
        Ok(Self { db })
    }

    /// Records that `id` is alive until `ttl_ms` from now, with `detail`.
    /// Also forgets daemons dead for an hour, and marks dead the earlier
    /// processes of `id`'s home ([`super::leases::earlier_process_of`]).
    pub fn heartbeat(
        &self,
        id: &str,
        host: &str,
        ttl_ms: i64,
        detail: &serde_json::Value,
    ) -> Result<(), DbError> {
        let now = now_ms();
        let detail = detail.to_string();
        let home = id.split_once(':').map_or(id, |(home, _)| home);
        self.db.transaction(|tx| {
            tx.execute(
                "DELETE FROM cluster_members WHERE expires_ms < ?1",
                args![now - FORGET_AFTER_MS],
            )?;
            tx.execute(
                "UPDATE cluster_members SET expires_ms = ?3
                 WHERE id != ?1 AND id LIKE ?2 AND expires_ms > ?3",
                args![id, format!("{home}:%"), now],
            )?;
            let updated = tx.execute(
                "UPDATE cluster_members SET heartbeat_ms = ?2, expires_ms = ?3, detail = ?4
                 WHERE id = ?1",
                args![id, now, now + ttl_ms, detail.as_str()],
            )?;
            if updated == 0 {
                tx.execute(
                    "INSERT INTO cluster_members (id, host, started_ms, heartbeat_ms, expires_ms, detail)
                     VALUES (?1, ?2, ?3, ?3, ?4, ?5)",
                    args![id, host, now, now + ttl_ms, detail.as_str()],
                )?;
            }
            Ok(())
        })
    }

    /// Removes `id` (a clean stop).
    pub fn leave(&self, id: &str) -> Result<(), DbError> {
        self.db.run(|conn| {
            conn.execute("DELETE FROM cluster_members WHERE id = ?1", args![id])
                .map(drop)
        })
    }

    /// Every daemon known, alive or dead within the last hour, oldest first.
    pub fn all(&self) -> Result<Vec<Member>, DbError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT id, host, started_ms, heartbeat_ms, expires_ms, detail
                 FROM cluster_members ORDER BY started_ms, id",
                args![],
            )?
            .iter()
            .map(member_row)
            .collect()
        })
    }

    /// The ids of the daemons alive now.
    pub fn alive(&self) -> Result<Vec<String>, DbError> {
        let now = now_ms();
        Ok(self
            .all()?
            .into_iter()
            .filter(|m| m.alive_at(now))
            .map(|m| m.id)
            .collect())
    }
}

fn member_row(r: &Row) -> Result<Member, DbError> {
    let detail: String = r.get(5)?;
    Ok(Member {
        id: r.get(0)?,
        host: r.get(1)?,
        started_ms: r.get(2)?,
        heartbeat_ms: r.get(3)?,
        expires_ms: r.get(4)?,
        detail: serde_json::from_str(&detail).unwrap_or(serde_json::Value::Null),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::each_backend;

    #[test]
    fn a_daemon_is_alive_while_it_beats_and_gone_when_it_leaves_or_restarts() {
        each_backend(|at| {
            let members = Members::open(at).unwrap();
            let alive = || {
                let mut ids = members.alive().unwrap();
                ids.sort();
                ids
            };
            let detail = serde_json::json!({"gateway": "127.0.0.1:1"});
            members
                .heartbeat("aaaa0001:10", "h1", 60_000, &detail)
                .unwrap();
            members
                .heartbeat("bbbb0002:20", "h2", 60_000, &detail)
                .unwrap();
            assert_eq!(alive(), ["aaaa0001:10", "bbbb0002:20"]);
            // A heartbeat keeps the start time and the row count.
            let started = members.all().unwrap()[0].started_ms;
            members
                .heartbeat("aaaa0001:10", "h1", 60_000, &detail)
                .unwrap();
            let all = members.all().unwrap();
            assert_eq!((all.len(), all[0].started_ms), (2, started));
            assert_eq!(all[0].detail, detail);
            // The same home started again (after kill -9): its old process
            // is dead at once.
            members
                .heartbeat("aaaa0001:11", "h1", 60_000, &detail)
                .unwrap();
            assert_eq!(alive(), ["aaaa0001:11", "bbbb0002:20"]);
            members.leave("bbbb0002:20").unwrap();
            assert_eq!(alive(), ["aaaa0001:11"]);
            // A beat that has run out is not alive.
            members.heartbeat("cccc0003:30", "h3", -1, &detail).unwrap();
            assert_eq!(alive(), ["aaaa0001:11"]);
        });
    }
}
