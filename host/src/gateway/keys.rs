//! Gateway tokens: bearer tokens minted by the host, one or more per
//! workspace. A token names a workspace, never a provider key; the gateway
//! maps token -> workspace -> what the workspace may use.
//!
//! Format: `pk-pincer-<workspace>-<secret>`, where `<secret>` is 43
//! characters of unpadded base64url encoding 32 bytes from the operating
//! system's random source. The store keeps only the SHA-256 of the whole
//! token and an 8-character display prefix (the first 8 characters of the
//! secret), so a stolen database yields no usable token and a token is shown
//! exactly once, when minted. Tokens are never logged; [`MintedKey`]'s
//! `Debug` hides it.
//!
//! Two kinds: [`KeyKind::Container`], the one live token a workspace's own
//! container uses (named `container`, replaced on every mint), and
//! [`KeyKind::External`], named tokens for clients outside the container
//! (`pincer gateway keys create`). Names are unique per workspace among live
//! keys; a revoked name may be minted again.
//!
//! A verified token is remembered (by its hash) under the generation of
//! revocations it was read in, so a request costs no read of its key, and
//! any process's revocation is seen by the next request: on SQLite the
//! generation is in a file beside the database ([`super::revocations`],
//! no database read at all); on PostgreSQL, whose daemons share no file,
//! it is a row every revocation raises in its own transaction.

use std::collections::HashMap;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::sync::Mutex;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::revocations::Revocations;
use crate::args;
use crate::containers::{GrantError, GrantMinter};
use crate::db::{Conn, Db, DbError, Dialect, Location, now_ms};

/// Every gateway token starts with this.
pub const TOKEN_PREFIX: &str = "pk-pincer-";
/// The name of a workspace's container token.
pub const CONTAINER_KEY_NAME: &str = "container";
/// Random bytes in a token.
const SECRET_BYTES: usize = 32;
/// Length of the display prefix.
pub const DISPLAY_PREFIX_LEN: usize = 8;
/// Longer strings are not tokens and are rejected before hashing.
const MAX_TOKEN_LEN: usize = 256;
const MAX_KEY_NAME_LEN: usize = 64;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error(
        "invalid workspace name `{0}`: use 1-63 characters from a-z, 0-9, `_` and `-`, \
         starting with a letter or digit"
    )]
    InvalidWorkspace(String),
    #[error(
        "invalid key name `{0}`: use 1-64 characters from A-Z, a-z, 0-9, `.`, `_` and `-`, \
         starting with a letter or digit"
    )]
    InvalidName(String),
    #[error(
        "the key name `container` is reserved for the workspace container's own token; \
         choose another name"
    )]
    ReservedName,
    #[error(
        "workspace `{workspace}` already has a key named `{name}`; revoke it first \
         (pincer gateway keys revoke {workspace} {name}) or choose another name"
    )]
    Exists { workspace: String, name: String },
    #[error("cannot read random bytes for a token: {0}")]
    Random(String),
    #[error("key storage: {0}")]
    Storage(String),
}

impl From<DbError> for KeyError {
    fn from(e: DbError) -> Self {
        Self::Storage(e.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyKind {
    /// The token mounted into the workspace's container.
    Container,
    /// A token for a client outside the container.
    External,
}

impl KeyKind {
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Container => "container",
            KeyKind::External => "external",
        }
    }

    fn parse(s: &str) -> Result<Self, KeyError> {
        match s {
            "container" => Ok(KeyKind::Container),
            "external" => Ok(KeyKind::External),
            other => Err(KeyError::Storage(format!("unknown key kind `{other}`"))),
        }
    }
}

impl fmt::Display for KeyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A freshly minted key. `token` is shown to the user once and not stored;
/// `Debug` hides it.
#[derive(Clone, PartialEq, Eq)]
pub struct MintedKey {
    pub name: String,
    pub token: String,
    /// Display prefix, as [`KeyListing::prefix`].
    pub prefix: String,
}

impl fmt::Debug for MintedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MintedKey")
            .field("name", &self.name)
            .field("token", &"<redacted>")
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// Who a valid token belongs to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyInfo {
    pub workspace: String,
    pub name: String,
    pub kind: KeyKind,
}

/// One key as listed: never the token, only its display prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyListing {
    pub name: String,
    /// The first 8 characters of the token's secret part.
    pub prefix: String,
    pub created_ms: i64,
    pub revoked: bool,
    pub kind: KeyKind,
}

/// Live tokens remembered at most; past it, the memory starts afresh.
const REMEMBERED: usize = 4096;

const SCHEMA: &str = "CREATE TABLE IF NOT EXISTS gateway_keys (
        id INTEGER PRIMARY KEY,
        workspace TEXT NOT NULL,
        name TEXT NOT NULL,
        kind TEXT NOT NULL,
        token_sha256 BLOB NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        created_ms INTEGER NOT NULL,
        revoked_ms INTEGER
    );
    CREATE UNIQUE INDEX IF NOT EXISTS gateway_keys_live_name
        ON gateway_keys (workspace, name) WHERE revoked_ms IS NULL;
    CREATE INDEX IF NOT EXISTS gateway_keys_by_workspace
        ON gateway_keys (workspace, id);";

/// The generation of revocations on PostgreSQL: one row.
const GENERATION_SCHEMA: &str = "CREATE TABLE IF NOT EXISTS gateway_key_generation (
        id INTEGER PRIMARY KEY,
        generation INTEGER NOT NULL
    )";

/// How a verifier learns that some process revoked a key.
enum Generations {
    /// SQLite: counters in a file beside the database, mapped by every
    /// process that opens it. `one` keeps this process's revocations one at
    /// a time, as the file's lock does across processes.
    File {
        counters: Revocations,
        one: Mutex<()>,
    },
    /// PostgreSQL: daemons on other hosts share no file, so a row of the
    /// shared database, raised by each revoking transaction.
    Table,
}

/// The token store, in the host database.
pub struct KeyStore {
    db: Db,
    generations: Generations,
    /// Live tokens by hash, with the generation of revocations they were
    /// read in.
    verified: Mutex<HashMap<[u8; 32], (u64, KeyInfo)>>,
}

impl KeyStore {
    /// # Errors
    /// The database or the revocations file beside it cannot be opened.
    pub fn open(path: &Path) -> Result<Self, KeyError> {
        Self::open_at(&Location::from(path))
    }

    /// # Errors
    /// The database (or, on SQLite, the revocations file beside it) cannot
    /// be opened.
    pub fn open_at(location: &Location) -> Result<Self, KeyError> {
        let db = Db::open(location)?;
        db.transaction(|conn| -> Result<(), DbError> {
            conn.schema(SCHEMA)?;
            if conn.dialect() == Dialect::Postgres {
                conn.schema(GENERATION_SCHEMA)?;
                conn.execute(
                    "INSERT INTO gateway_key_generation (id, generation) VALUES (1, 0)
                     ON CONFLICT (id) DO NOTHING",
                    args![],
                )?;
            }
            Ok(())
        })?;
        let generations = match location {
            Location::Sqlite(path) => Generations::File {
                counters: Revocations::open(path).map_err(|e| {
                    KeyError::Storage(format!("{}: {e}", Revocations::path_for(path).display()))
                })?,
                one: Mutex::new(()),
            },
            Location::Postgres(_) => Generations::Table,
        };
        Ok(Self {
            db,
            generations,
            verified: Mutex::new(HashMap::new()),
        })
    }

    /// Mints an external key named `name` for `workspace`.
    ///
    /// # Errors
    /// Invalid or reserved names, a live key of that name, no randomness,
    /// storage failures.
    pub fn mint(&self, workspace: &str, name: &str) -> Result<MintedKey, KeyError> {
        check_workspace(workspace)?;
        check_key_name(name)?;
        if name == CONTAINER_KEY_NAME {
            return Err(KeyError::ReservedName);
        }
        let (token, prefix) = new_token(workspace)?;
        self.db.transaction(|tx| {
            let live = tx.query_opt(
                "SELECT id FROM gateway_keys
                 WHERE workspace = ?1 AND name = ?2 AND revoked_ms IS NULL",
                args![workspace, name],
            )?;
            if live.is_some() {
                return Err(KeyError::Exists {
                    workspace: workspace.to_owned(),
                    name: name.to_owned(),
                });
            }
            insert(tx, workspace, name, KeyKind::External, &token, &prefix)
        })?;
        Ok(MintedKey {
            name: name.to_owned(),
            token,
            prefix,
        })
    }

    /// Mints the token for `workspace`'s container, revoking the one it
    /// replaces: a workspace has at most one live container token.
    ///
    /// # Errors
    /// An invalid workspace name, no randomness, storage failures.
    pub fn mint_container_token(&self, workspace: &str) -> Result<String, KeyError> {
        check_workspace(workspace)?;
        let (token, prefix) = new_token(workspace)?;
        self.revoking(|tx| {
            tx.execute(
                "UPDATE gateway_keys SET revoked_ms = ?3
                 WHERE workspace = ?1 AND (kind = ?2 OR name = ?4) AND revoked_ms IS NULL",
                args![
                    workspace,
                    KeyKind::Container.as_str(),
                    now_ms(),
                    CONTAINER_KEY_NAME
                ],
            )?;
            insert(
                tx,
                workspace,
                CONTAINER_KEY_NAME,
                KeyKind::Container,
                &token,
                &prefix,
            )
        })?;
        Ok(token)
    }

    /// The workspace and key a token belongs to, if it is live. Anything
    /// else (malformed, unknown, revoked, or a storage failure, which is
    /// logged) is `None`: callers refuse the request.
    pub fn verify(&self, token: &str) -> Option<KeyInfo> {
        if !token.starts_with(TOKEN_PREFIX) || token.len() > MAX_TOKEN_LEN {
            return None;
        }
        let hash = sha256(token);
        let generation = self.generation();
        if let Some(generation) = generation {
            let remembered = self.verified.lock().ok().and_then(|verified| {
                verified
                    .get(&hash)
                    .filter(|(seen, _)| *seen == generation)
                    .map(|(_, info)| info.clone())
            });
            if remembered.is_some() {
                return remembered;
            }
        }
        let found = self.read(&hash)?;
        // Remembered only if no revocation began or ended during the read.
        if let Some(generation) = generation.filter(|g| self.unchanged(*g))
            && let Ok(mut verified) = self.verified.lock()
        {
            if verified.len() >= REMEMBERED {
                verified.clear();
            }
            verified.insert(hash, (generation, found.clone()));
        }
        Some(found)
    }

    /// The generation of revocations every process has settled on; `None`
    /// while a revocation is under way, or when it cannot be read (then
    /// nothing is remembered, nor used from memory).
    fn generation(&self) -> Option<u64> {
        match &self.generations {
            Generations::File { counters, .. } => counters.settle(),
            Generations::Table => self
                .db
                .run(|conn| {
                    conn.query_one(
                        "SELECT generation FROM gateway_key_generation WHERE id = 1",
                        args![],
                    )?
                    .get(0)
                })
                .map_err(|e| tracing::error!("cannot read the gateway key revocations: {e}"))
                .ok(),
        }
    }

    /// Whether `generation`, read before a key was, still holds.
    fn unchanged(&self, generation: u64) -> bool {
        match &self.generations {
            Generations::File { counters, .. } => counters.settled() == Some(generation),
            // Raised in the revoking transaction itself: a revocation that
            // committed before the key was read shows in the key, and one
            // after leaves `generation` behind for good.
            Generations::Table => true,
        }
    }

    /// The live key of `hash` in the database.
    fn read(&self, hash: &[u8; 32]) -> Option<KeyInfo> {
        let found = self.db.run(|conn| {
            conn.query_opt(
                "SELECT workspace, name, kind, token_sha256 FROM gateway_keys
                 WHERE token_sha256 = ?1 AND revoked_ms IS NULL",
                args![&hash[..]],
            )?
            .map(|r| -> Result<_, KeyError> {
                Ok((
                    r.get::<String>(0)?,
                    r.get::<String>(1)?,
                    KeyKind::parse(&r.get::<String>(2)?)?,
                    r.get::<Vec<u8>>(3)?,
                ))
            })
            .transpose()
        });
        match found {
            Ok(Some((workspace, name, kind, stored))) if constant_time_eq(&stored, hash) => {
                Some(KeyInfo {
                    workspace,
                    name,
                    kind,
                })
            }
            Ok(_) => None,
            Err(e) => {
                tracing::error!("cannot verify a gateway token: {e}");
                None
            }
        }
    }

    /// Runs `revoke`, a transaction that may revoke keys, as a revocation
    /// every process sees on its next verification.
    fn revoking<T: Send>(
        &self,
        mut revoke: impl FnMut(&mut dyn Conn) -> Result<T, KeyError> + Send,
    ) -> Result<T, KeyError> {
        match &self.generations {
            Generations::File { counters, one } => {
                let _one = one
                    .lock()
                    .map_err(|_| KeyError::Storage("key store lock poisoned".into()))?;
                counters
                    .revoking(|| self.db.transaction(revoke))
                    .map_err(|e| KeyError::Storage(format!("the key revocations file: {e}")))?
            }
            Generations::Table => self.db.transaction(|tx| {
                // First, so revocations run one at a time: a second waits
                // on this row, loses the conflict and runs again after.
                tx.execute(
                    "UPDATE gateway_key_generation SET generation = generation + 1 WHERE id = 1",
                    args![],
                )?;
                revoke(tx)
            }),
        }
    }

    /// The workspace's keys, live and revoked, oldest first.
    ///
    /// # Errors
    /// Storage failures.
    pub fn list(&self, workspace: &str) -> Result<Vec<KeyListing>, KeyError> {
        self.db.run(|conn| {
            conn.query(
                "SELECT name, prefix, created_ms, revoked_ms IS NOT NULL, kind FROM gateway_keys
                 WHERE workspace = ?1 ORDER BY id",
                args![workspace],
            )?
            .iter()
            .map(|r| {
                Ok(KeyListing {
                    name: r.get(0)?,
                    prefix: r.get(1)?,
                    created_ms: r.get(2)?,
                    revoked: r.get(3)?,
                    kind: KeyKind::parse(&r.get::<String>(4)?)?,
                })
            })
            .collect()
        })
    }

    /// Revokes the workspace's live key named `name`; `false` if there is
    /// none. Takes effect for the next request.
    ///
    /// # Errors
    /// Storage failures.
    pub fn revoke(&self, workspace: &str, name: &str) -> Result<bool, KeyError> {
        self.revoking(|tx| {
            let changed = tx.execute(
                "UPDATE gateway_keys SET revoked_ms = ?3
                 WHERE workspace = ?1 AND name = ?2 AND revoked_ms IS NULL",
                args![workspace, name, now_ms()],
            )?;
            Ok(changed > 0)
        })
    }

    /// Revokes the workspace's live container token(s): its container is
    /// gone (`workspace down`, an orphan removed by reconcile, a container
    /// that failed verification). `false` if there was none.
    ///
    /// # Errors
    /// Storage failures.
    pub fn revoke_container_token(&self, workspace: &str) -> Result<bool, KeyError> {
        self.revoking(|tx| {
            let changed = tx.execute(
                "UPDATE gateway_keys SET revoked_ms = ?3
                 WHERE workspace = ?1 AND kind = ?2 AND revoked_ms IS NULL",
                args![workspace, KeyKind::Container.as_str(), now_ms()],
            )?;
            Ok(changed > 0)
        })
    }
}

fn insert(
    conn: &mut dyn Conn,
    workspace: &str,
    name: &str,
    kind: KeyKind,
    token: &str,
    prefix: &str,
) -> Result<(), KeyError> {
    conn.execute(
        "INSERT INTO gateway_keys (workspace, name, kind, token_sha256, prefix, created_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        args![
            workspace,
            name,
            kind.as_str(),
            &sha256(token)[..],
            prefix,
            now_ms()
        ],
    )
    .map_err(|e| {
        if breaks_a_unique_rule(&e) {
            KeyError::Exists {
                workspace: workspace.to_owned(),
                name: name.to_owned(),
            }
        } else {
            e.into()
        }
    })?;
    Ok(())
}

/// Whether a write was refused for a constraint (here: another live key of
/// the name).
fn breaks_a_unique_rule(e: &DbError) -> bool {
    match e {
        DbError::Sqlite(rusqlite::Error::SqliteFailure(f, _)) => {
            f.code == rusqlite::ErrorCode::ConstraintViolation
        }
        DbError::Postgres(e) => e.code() == Some(&::postgres::error::SqlState::UNIQUE_VIOLATION),
        _ => false,
    }
}

/// A new token for `workspace` and its display prefix.
fn new_token(workspace: &str) -> Result<(String, String), KeyError> {
    let mut secret = [0u8; SECRET_BYTES];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut secret))
        .map_err(|e| KeyError::Random(e.to_string()))?;
    let encoded = base64url(&secret);
    let prefix = encoded[..DISPLAY_PREFIX_LEN].to_owned();
    Ok((format!("{TOKEN_PREFIX}{workspace}-{encoded}"), prefix))
}

fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares without an early exit, so timing does not reveal how many
/// leading bytes matched.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Unpadded base64url (RFC 4648 section 5).
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            let index = (n >> (18 - 6 * i)) & 0x3f;
            out.push(char::from(ALPHABET[index as usize]));
        }
    }
    out
}

/// Workspace names as in the configuration: `[a-z0-9][a-z0-9_-]{0,62}`.
fn check_workspace(name: &str) -> Result<(), KeyError> {
    let bytes = name.as_bytes();
    let ok = bytes.len() <= 63
        && bytes
            .first()
            .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        && bytes
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'_' || *c == b'-');
    if ok {
        Ok(())
    } else {
        Err(KeyError::InvalidWorkspace(name.to_owned()))
    }
}

fn check_key_name(name: &str) -> Result<(), KeyError> {
    let bytes = name.as_bytes();
    let ok = bytes.len() <= MAX_KEY_NAME_LEN
        && bytes.first().is_some_and(u8::is_ascii_alphanumeric)
        && bytes
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(KeyError::InvalidName(name.to_owned()))
    }
}

/// The key store mints each container's gateway token for the container
/// runtime, which knows it only as a [`GrantMinter`].
impl GrantMinter for KeyStore {
    fn mint(&self, workspace: &str) -> Result<String, GrantError> {
        Ok(self.mint_container_token(workspace)?)
    }

    fn revoke(&self, workspace: &str) -> Result<(), GrantError> {
        self.revoke_container_token(workspace)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::testing::{database, each_backend};

    #[test]
    fn base64url_matches_rfc4648_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg"),
            ("fo", "Zm8"),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg"),
            ("fooba", "Zm9vYmE"),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64url(input.as_bytes()), want);
        }
        assert_eq!(base64url(&[0xfb, 0xff, 0xbf]), "-_-_");
        assert_eq!(base64url(&[0u8; 32]).len(), 43);
    }

    #[test]
    fn minted_token_has_the_documented_shape_and_verifies() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            let key = store.mint("dev-1", "laptop").unwrap();
            let secret = key.token.strip_prefix("pk-pincer-dev-1-").unwrap();
            assert_eq!(secret.len(), 43);
            assert!(
                secret
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            );
            assert_eq!(key.prefix, &secret[..8]);
            assert_eq!(key.name, "laptop");
            assert_eq!(
                store.verify(&key.token),
                Some(KeyInfo {
                    workspace: "dev-1".into(),
                    name: "laptop".into(),
                    kind: KeyKind::External,
                })
            );
            // two mints never share a secret
            let other = store.mint("dev-1", "phone").unwrap();
            assert_ne!(other.token, key.token);
        });
    }

    #[test]
    fn only_the_hash_and_prefix_are_stored() {
        each_backend(|at| {
            let key = KeyStore::open_at(at)
                .unwrap()
                .mint("dev", "laptop")
                .unwrap();
            let secret = key.token[key.token.len() - 43..].to_owned();
            let rows = Db::open(at)
                .unwrap()
                .run(|conn| {
                    conn.query(
                        "SELECT workspace, name, kind, token_sha256, prefix FROM gateway_keys",
                        args![],
                    )
                })
                .unwrap();
            let dump = format!("{rows:?}");
            assert!(!dump.contains(&key.token));
            assert!(!dump.contains(&secret[8..]), "{dump}");
            if let Location::Sqlite(path) = at {
                let bytes = std::fs::read(path).unwrap();
                let text = String::from_utf8_lossy(&bytes);
                assert!(!text.contains(&secret));
            }
        });
    }

    #[test]
    fn bad_tokens_do_not_verify() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            let key = store.mint("dev", "laptop").unwrap();
            let mut altered = key.token.clone();
            let last = altered.pop().unwrap();
            altered.push(if last == 'A' { 'B' } else { 'A' });
            for bad in [
                "",
                "Bearer x",
                "pk-pincer-",
                "pk-pincer-dev-",
                altered.as_str(),
                &key.token[..key.token.len() - 1],
                &format!("{}x", key.token),
                &key.token.to_uppercase(),
                &"pk-pincer-".repeat(100),
            ] {
                assert_eq!(store.verify(bad), None, "{bad}");
            }
        });
    }

    #[test]
    fn revoke_stops_verification_and_frees_the_name() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            let key = store.mint("dev", "ci").unwrap();
            assert!(store.revoke("dev", "ci").unwrap());
            assert!(!store.revoke("dev", "ci").unwrap());
            assert!(!store.revoke("other", "ci").unwrap());
            assert_eq!(store.verify(&key.token), None);
            let again = store.mint("dev", "ci").unwrap();
            assert!(store.verify(&again.token).is_some());
            let listed = store.list("dev").unwrap();
            assert_eq!(listed.len(), 2);
            assert!(listed[0].revoked && !listed[1].revoked);
            assert_eq!(listed[1].prefix, again.prefix);
            assert!(listed.iter().all(|k| k.name == "ci"));
        });
    }

    #[test]
    fn a_verified_key_is_remembered_until_any_store_revokes_one() {
        each_backend(|at| {
            // Two stores on one database: the gateway and the CLI's process.
            let (gateway, cli) = (
                KeyStore::open_at(at).unwrap(),
                KeyStore::open_at(at).unwrap(),
            );
            let (ci, other) = (
                cli.mint("dev", "ci").unwrap(),
                cli.mint("dev", "other").unwrap(),
            );
            let container = cli.mint_container_token("dev").unwrap();
            for token in [&ci.token, &other.token, &container] {
                assert!(gateway.verify(token).is_some());
            }
            // Remembered: the database row is not read again while nothing is
            // revoked (here it no longer says the key is live).
            let raw = Db::open(at).unwrap();
            let set_kind = |kind: &str| {
                raw.run(|conn| {
                    conn.execute(
                        "UPDATE gateway_keys SET kind = ?1 WHERE name = 'ci'",
                        args![kind],
                    )
                })
                .unwrap();
            };
            set_kind("bogus");
            assert!(gateway.verify(&ci.token).is_some(), "from memory");
            // Any revocation, by any store, is seen by the next verification.
            assert!(cli.revoke("dev", "other").unwrap());
            assert_eq!(gateway.verify(&other.token), None);
            assert_eq!(gateway.verify(&ci.token), None, "read again: the bogus row");
            cli.mint_container_token("dev").unwrap();
            assert_eq!(gateway.verify(&container), None, "replaced container token");
            set_kind("external");
            assert!(gateway.verify(&ci.token).is_some());
            assert!(cli.revoke_container_token("dev").unwrap());
            assert!(gateway.verify(&ci.token).is_some(), "others stay live");
        });
    }

    #[test]
    fn names_are_unique_per_workspace_among_live_keys() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            store.mint("dev", "ci").unwrap();
            let err = store.mint("dev", "ci").unwrap_err();
            assert_eq!(
                err,
                KeyError::Exists {
                    workspace: "dev".into(),
                    name: "ci".into()
                }
            );
            assert!(err.to_string().contains("revoke it first"), "{err}");
            store.mint("prod", "ci").unwrap();
        });
    }

    #[test]
    fn names_are_checked() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            assert!(matches!(
                store.mint("Dev", "ci"),
                Err(KeyError::InvalidWorkspace(_))
            ));
            assert!(matches!(
                store.mint("", "ci"),
                Err(KeyError::InvalidWorkspace(_))
            ));
            assert!(matches!(
                store.mint_container_token("a/b"),
                Err(KeyError::InvalidWorkspace(_))
            ));
            for bad in ["", "-x", "a b", "a/b", &"n".repeat(65)] {
                assert!(
                    matches!(store.mint("dev", bad), Err(KeyError::InvalidName(_))),
                    "{bad}"
                );
            }
            assert_eq!(
                store.mint("dev", "container").unwrap_err(),
                KeyError::ReservedName
            );
            store.mint("dev", "My.Laptop_2-x").unwrap();
        });
    }

    #[test]
    fn one_live_container_token_per_workspace() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            let first = store.mint_container_token("dev").unwrap();
            let info = store.verify(&first).unwrap();
            assert_eq!(
                (info.workspace.as_str(), info.name.as_str(), info.kind),
                ("dev", CONTAINER_KEY_NAME, KeyKind::Container)
            );
            let external = store.mint("dev", "laptop").unwrap();
            let other_ws = store.mint_container_token("prod").unwrap();
            let second = store.mint_container_token("dev").unwrap();
            assert_eq!(store.verify(&first), None);
            assert!(store.verify(&second).is_some());
            // other keys are untouched
            assert!(store.verify(&external.token).is_some());
            assert!(store.verify(&other_ws).is_some());
            let listed = store.list("dev").unwrap();
            let live_containers = listed
                .iter()
                .filter(|k| k.kind == KeyKind::Container && !k.revoked)
                .count();
            assert_eq!(live_containers, 1);
            assert_eq!(listed.len(), 3);
            // the container token can be revoked by name
            assert!(store.revoke("dev", CONTAINER_KEY_NAME).unwrap());
            assert_eq!(store.verify(&second), None);
        });
    }

    #[test]
    fn revoking_the_container_token_leaves_external_keys() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            let token = store.mint_container_token("dev").unwrap();
            let external = store.mint("dev", "laptop").unwrap();
            let other = store.mint_container_token("prod").unwrap();
            assert!(store.revoke_container_token("dev").unwrap());
            assert!(!store.revoke_container_token("dev").unwrap());
            assert_eq!(store.verify(&token), None);
            assert!(store.verify(&external.token).is_some());
            assert!(store.verify(&other).is_some());
        });
    }

    #[test]
    fn keys_survive_reopening() {
        each_backend(|at| {
            let key = KeyStore::open_at(at).unwrap().mint("dev", "ci").unwrap();
            let store = KeyStore::open_at(at).unwrap();
            assert_eq!(store.verify(&key.token).unwrap().workspace, "dev");
            assert_eq!(store.list("dev").unwrap()[0].kind, KeyKind::External);
            assert!(store.list("nobody").unwrap().is_empty());
        });
    }

    #[test]
    fn debug_hides_the_token() {
        each_backend(|at| {
            let store = KeyStore::open_at(at).unwrap();
            let key = store.mint("dev", "ci").unwrap();
            let shown = format!("{key:?}");
            assert!(!shown.contains(&key.token), "{shown}");
            let secret = &key.token[key.token.len() - 43..];
            assert!(!shown.contains(secret));
            assert!(shown.contains("<redacted>") && shown.contains(&key.prefix));
        });
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"ab"));
    }

    /// Two daemons (each its own pool on one PostgreSQL database) minting
    /// at once: every container mint succeeds and leaves one live container
    /// token; of the mints of one name, one succeeds and the rest are told
    /// it exists.
    #[test]
    fn two_daemons_minting_at_once_leave_one_live_key_per_name() {
        let at = database();
        let daemons = [
            KeyStore::open_at(&at).unwrap(),
            KeyStore::open_at(&at).unwrap(),
        ];
        let start = std::sync::Barrier::new(4);
        let (minted, failed) = (
            std::sync::Mutex::new(Vec::new()),
            std::sync::Mutex::new(Vec::new()),
        );
        std::thread::scope(|s| {
            for store in &daemons {
                for _ in 0..2 {
                    let (start, minted, failed) = (&start, &minted, &failed);
                    s.spawn(move || {
                        for i in 0..10 {
                            start.wait();
                            if let Err(e) = store.mint_container_token("dev") {
                                failed.lock().unwrap().push(e);
                            }
                            match store.mint("dev", &format!("k{i}")) {
                                Ok(key) => minted.lock().unwrap().push(key),
                                Err(KeyError::Exists { .. }) => {}
                                Err(e) => failed.lock().unwrap().push(e),
                            }
                        }
                    });
                }
            }
        });
        assert_eq!(failed.into_inner().unwrap(), []);
        let minted = minted.into_inner().unwrap();
        let mut names: Vec<&str> = minted.iter().map(|k| k.name.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!((minted.len(), names.len()), (10, 10));
        let listed = daemons[1].list("dev").unwrap();
        let live = |kind| {
            listed
                .iter()
                .filter(|k| k.kind == kind && !k.revoked)
                .count()
        };
        assert_eq!(listed.len(), 50);
        assert_eq!((live(KeyKind::Container), live(KeyKind::External)), (1, 10));
    }

    /// One daemon's gateway verifying keys from threads while another
    /// daemon revokes them one by one: no request that starts after a
    /// revocation returned is let through.
    #[test]
    fn a_revocation_by_one_daemon_is_refused_by_the_others_next_request() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let at = database();
        let (gateway, cli) = (
            KeyStore::open_at(&at).unwrap(),
            KeyStore::open_at(&at).unwrap(),
        );
        let keys: Vec<MintedKey> = (0..10)
            .map(|i| cli.mint("dev", &format!("k{i}")).unwrap())
            .collect();
        let revoked: Vec<AtomicBool> = keys.iter().map(|_| AtomicBool::new(false)).collect();
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            for _ in 0..2 {
                s.spawn(|| {
                    while !done.load(Ordering::SeqCst) {
                        for (key, revoked) in keys.iter().zip(&revoked) {
                            let before = revoked.load(Ordering::SeqCst);
                            let live = gateway.verify(&key.token).is_some();
                            assert!(
                                !(before && live),
                                "{} verified after its revocation",
                                key.name
                            );
                        }
                    }
                });
            }
            s.spawn(|| {
                for (key, revoked) in keys.iter().zip(&revoked) {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                    assert!(cli.revoke("dev", &key.name).unwrap());
                    revoked.store(true, Ordering::SeqCst);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
                done.store(true, Ordering::SeqCst);
            });
        });
        assert!(keys.iter().all(|key| gateway.verify(&key.token).is_none()));
    }
}
