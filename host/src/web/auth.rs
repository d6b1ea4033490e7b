//! Sign-in to the web console: one-time login tokens (`pincer web login`,
//! possibly in another process than the daemon) exchanged for a session
//! cookie. Only SHA-256 hashes of tokens and cookies are stored, so a copy
//! of `pincer.db` signs nobody in.

use std::path::Path;
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::args;
use crate::db::{Db, DbError, Location};

/// How long a login token from `pincer web login` may be used.
pub const LOGIN_TOKEN_TTL: Duration = Duration::from_secs(10 * 60);

#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    #[error("web sign-in store: {0}")]
    Db(#[from] DbError),
}

/// A signed-in browser session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebSession {
    /// The hash of the cookie, which names the session in the store.
    pub id: String,
    /// The token every state-changing request of this session carries.
    pub csrf: String,
    pub expires_ms: i64,
}

pub struct WebAuth {
    db: Db,
}

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS web_login_tokens (
        hash TEXT PRIMARY KEY,
        expires_ms INTEGER NOT NULL
    );
    CREATE TABLE IF NOT EXISTS web_sessions (
        id TEXT PRIMARY KEY,
        csrf TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        expires_ms INTEGER NOT NULL
    );";

fn random_token() -> String {
    let mut bytes = [0u8; 32];
    // `getrandom` through ring: a failure here means no entropy at all.
    let rng = ring::rand::SystemRandom::new();
    if ring::rand::SecureRandom::fill(&rng, &mut bytes).is_err() {
        // Never hand out a predictable token: fall back to uuids, which
        // draw from the OS generator too.
        let a = uuid::Uuid::new_v4();
        let b = uuid::Uuid::new_v4();
        bytes[..16].copy_from_slice(a.as_bytes());
        bytes[16..].copy_from_slice(b.as_bytes());
    }
    hex::encode(bytes)
}

fn hashed(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Tokens and cookies are 64 hex digits; anything else is refused before
/// any lookup.
fn well_formed(token: &str) -> bool {
    token.len() == 64 && token.bytes().all(|b| b.is_ascii_hexdigit())
}

impl WebAuth {
    pub fn open(path: &Path) -> Result<Self, AuthError> {
        Self::open_at(&Location::from(path))
    }

    pub fn open_at(location: &Location) -> Result<Self, AuthError> {
        let db = Db::open(location)?;
        db.transaction(|conn| conn.schema(SCHEMA))?;
        Ok(Self { db })
    }

    /// A new one-time login token, valid for [`LOGIN_TOKEN_TTL`].
    pub fn issue_login_token(&self, now_ms: i64) -> Result<String, AuthError> {
        let token = random_token();
        let expires_ms = now_ms + i64::try_from(LOGIN_TOKEN_TTL.as_millis()).unwrap_or(i64::MAX);
        self.db.run(|conn| {
            conn.execute(
                "DELETE FROM web_login_tokens WHERE expires_ms <= ?1",
                args![now_ms],
            )?;
            conn.execute(
                "INSERT INTO web_login_tokens (hash, expires_ms) VALUES (?1, ?2)",
                args![hashed(&token), expires_ms],
            )?;
            Ok::<_, AuthError>(())
        })?;
        Ok(token)
    }

    /// Exchanges a login token for a new session, once: the token is
    /// deleted in the same statement that checks it, so two concurrent
    /// uses cannot both win. Returns the cookie value and the session.
    pub fn redeem(
        &self,
        token: &str,
        ttl: Duration,
        now_ms: i64,
    ) -> Result<Option<(String, WebSession)>, AuthError> {
        if !well_formed(token) {
            return Ok(None);
        }
        let cookie = random_token();
        let session = WebSession {
            id: hashed(&cookie),
            csrf: random_token(),
            expires_ms: now_ms + i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX),
        };
        let taken = self.db.transaction(|tx| {
            let taken = tx.execute(
                "DELETE FROM web_login_tokens WHERE hash = ?1 AND expires_ms > ?2",
                args![hashed(token), now_ms],
            )?;
            if taken != 1 {
                return Ok::<_, AuthError>(false);
            }
            tx.execute(
                "DELETE FROM web_sessions WHERE expires_ms <= ?1",
                args![now_ms],
            )?;
            tx.execute(
                "INSERT INTO web_sessions (id, csrf, created_ms, expires_ms)
                 VALUES (?1, ?2, ?3, ?4)",
                args![&session.id, &session.csrf, now_ms, session.expires_ms],
            )?;
            Ok(true)
        })?;
        Ok(taken.then_some((cookie, session)))
    }

    /// The live session a cookie names.
    pub fn session(&self, cookie: &str, now_ms: i64) -> Result<Option<WebSession>, AuthError> {
        if !well_formed(cookie) {
            return Ok(None);
        }
        self.db.run(|conn| {
            let Some(row) = conn.query_opt(
                "SELECT id, csrf, expires_ms FROM web_sessions WHERE id = ?1 AND expires_ms > ?2",
                args![hashed(cookie), now_ms],
            )?
            else {
                return Ok(None);
            };
            Ok(Some(WebSession {
                id: row.get(0)?,
                csrf: row.get(1)?,
                expires_ms: row.get(2)?,
            }))
        })
    }

    /// Ends one session.
    pub fn sign_out(&self, session_id: &str) -> Result<(), AuthError> {
        self.db.run(|conn| {
            conn.execute("DELETE FROM web_sessions WHERE id = ?1", args![session_id])?;
            Ok(())
        })
    }

    /// Ends every session and unused login token; returns how many
    /// sessions ended.
    pub fn sign_out_all(&self) -> Result<usize, AuthError> {
        self.db.transaction(|tx| {
            tx.execute("DELETE FROM web_login_tokens", args![])?;
            Ok(tx.execute("DELETE FROM web_sessions", args![])?)
        })
    }
}

/// Compares two secrets in time independent of where they differ.
pub fn same_secret(a: &str, b: &str) -> bool {
    // Both sides are fixed-length hex; the comparison folds every byte.
    a.len() == b.len()
        && a.bytes()
            .zip(b.bytes())
            .fold(0u8, |diff, (x, y)| diff | (x ^ y))
            == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    const HOUR: Duration = Duration::from_secs(3600);

    #[test]
    fn a_login_token_works_once() {
        each_backend(|at| {
            let auth = WebAuth::open_at(at).unwrap();
            let token = auth.issue_login_token(1_000).unwrap();
            let (cookie, session) = auth.redeem(&token, HOUR, 2_000).unwrap().unwrap();
            assert_eq!(auth.session(&cookie, 3_000).unwrap(), Some(session));
            assert!(auth.redeem(&token, HOUR, 2_001).unwrap().is_none());
        });
    }

    #[test]
    fn an_expired_token_or_session_is_refused() {
        each_backend(|at| {
            let auth = WebAuth::open_at(at).unwrap();
            let token = auth.issue_login_token(0).unwrap();
            let late = i64::try_from(LOGIN_TOKEN_TTL.as_millis()).unwrap();
            assert!(auth.redeem(&token, HOUR, late).unwrap().is_none());
            let token = auth.issue_login_token(0).unwrap();
            let (cookie, _) = auth.redeem(&token, HOUR, 10).unwrap().unwrap();
            assert!(auth.session(&cookie, 10 + 3_600_000).unwrap().is_none());
        });
    }

    #[test]
    fn malformed_and_unknown_cookies_name_no_session() {
        each_backend(|at| {
            let auth = WebAuth::open_at(at).unwrap();
            assert!(auth.session("", 0).unwrap().is_none());
            assert!(auth.session("' OR 1=1 --", 0).unwrap().is_none());
            assert!(auth.session(&"a".repeat(64), 0).unwrap().is_none());
            // The stored hash is not a cookie.
            let token = auth.issue_login_token(0).unwrap();
            let (_, session) = auth.redeem(&token, HOUR, 1).unwrap().unwrap();
            assert!(auth.session(&session.id, 2).unwrap().is_none());
        });
    }

    #[test]
    fn signing_out_all_ends_every_session_and_token() {
        each_backend(|at| {
            let auth = WebAuth::open_at(at).unwrap();
            let a = auth.issue_login_token(0).unwrap();
            let b = auth.issue_login_token(0).unwrap();
            let (cookie, _) = auth.redeem(&a, HOUR, 1).unwrap().unwrap();
            assert_eq!(auth.sign_out_all().unwrap(), 1);
            assert!(auth.session(&cookie, 2).unwrap().is_none());
            assert!(auth.redeem(&b, HOUR, 2).unwrap().is_none());
        });
    }

    /// One sign-in link opened at once through two daemons' consoles: it
    /// signs in one browser, and only one session exists.
    #[test]
    fn a_login_token_redeemed_through_two_daemons_at_once_signs_in_once() {
        let at = database();
        let daemons = [
            WebAuth::open_at(&at).unwrap(),
            WebAuth::open_at(&at).unwrap(),
        ];
        let tokens: Vec<String> = (0..20)
            .map(|_| daemons[0].issue_login_token(0).unwrap())
            .collect();
        let cookies = std::sync::Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for auth in &daemons {
                for _ in 0..2 {
                    let (tokens, cookies) = (&tokens, &cookies);
                    s.spawn(move || {
                        for token in tokens {
                            if let Some((cookie, _)) = auth.redeem(token, HOUR, 1).unwrap() {
                                cookies.lock().unwrap().push(cookie);
                            }
                        }
                    });
                }
            }
        });
        let cookies = cookies.into_inner().unwrap();
        assert_eq!(cookies.len(), tokens.len());
        assert!(
            cookies
                .iter()
                .all(|c| daemons[1].session(c, 2).unwrap().is_some())
        );
        assert_eq!(daemons[1].sign_out_all().unwrap(), tokens.len());
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same_secret("abc", "abc"));
        assert!(!same_secret("abc", "abd"));
        assert!(!same_secret("abc", "ab"));
    }
}
