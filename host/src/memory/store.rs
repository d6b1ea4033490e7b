//! The memory tables and every query on them.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ValueRef};
use rusqlite::{Connection, OptionalExtension, Row, Transaction, TransactionBehavior, params};

use super::embed::{Embedder, Vector};
use super::query::{
    index_term, like_pattern, prefixed_expression, quoted, term_prefix, variant_prefix,
};
use super::{
    Explained, MAX_TEXT_BYTES, MatchKind, Memory, MemoryError, MemoryKind, Recalled, Why, rank,
    segment, vectors,
};
use crate::db::now_ms;

/// Distinct query terms considered; the rest of a very long query is ignored.
const MAX_QUERY_TERMS: usize = 64;
/// BM25 candidates re-ranked with recency and use, per requested result.
const CANDIDATES_PER_RESULT: usize = 8;
const MIN_CANDIDATES: usize = 64;
/// A term held by more memories of the workspace than this is common: BM25
/// would have to read every one of its rows. Common terms are left out of
/// the match when the query has rarer ones; a query of only common terms
/// takes the newest matches (recency is part of the ranking anyway) instead
/// of the best-scoring.
const COMMON_TERM_ROWS: usize = 500;
/// Substring matches re-ranked at most (newest first).
const MAX_SUBSTRING_CANDIDATES: usize = 1000;
/// The substring fallback reads the text of this many of the workspace's
/// newest memories at most: a miss costs a scan, and a scan of a whole large
/// workspace (~40 ms per 100k memories) on every turn would be too slow.
const SUBSTRING_SCAN_ROWS: usize = 20_000;
/// What the index holds, in `memory_meta`: 2 added the second list
/// ([`segment::variants`]), 3 the truncated forms of long words in it. A
/// database whose index is of another version
/// is reindexed from `memories` when opened.
const INDEX_VERSION: i64 = 3;
/// The memory connection's page cache, in KiB (pages are taken as used).
const CACHE_KIB: i64 = 32 * 1024;
/// Memories embedded per encoder call when catching up or importing: big
/// enough that the encoder streams each weight once for many texts.
const EMBED_BATCH: usize = 64;
/// Results of the ranking by words fused with the ranking by meaning: with
/// [`rank::Hybrid::DEFAULT`] a rank past 10 adds little, and each one costs
/// the candidates' coverage (segmentation) at query time.
const WORDS_DEPTH: usize = 10;
/// Results of the ranking by meaning fused (cheap: one pass over the
/// workspace's vectors whatever the depth).
const MEANING_DEPTH: usize = 32;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memories (
    -- AUTOINCREMENT: an id is never reused, so a stale id cannot forget
    -- a newer memory.
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workspace TEXT NOT NULL,
    kind TEXT NOT NULL,
    text TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    last_used_ms INTEGER,
    use_count INTEGER NOT NULL DEFAULT 0,
    UNIQUE (workspace, text)
);
CREATE INDEX IF NOT EXISTS memories_by_workspace ON memories (workspace, id);
-- Contentless: the text lives in `memories`; rowid = memories.id. `terms`
-- holds the segmented text, each term prefixed by its workspace (see
-- query::term_prefix).
CREATE VIRTUAL TABLE IF NOT EXISTS memory_index USING fts5 (
    terms, content = '', contentless_delete = 1, tokenize = 'ascii'
);
CREATE TABLE IF NOT EXISTS memory_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
";

/// The index of earlier versions (one `space` column ANDed with the terms:
/// slow at scale). Replaced by `memory_index`, rebuilt from `memories`.
const OLD_INDEX: &str = "memory_fts";

const COLUMNS: &str = "id, workspace, kind, text, created_ms, last_used_ms, use_count";

impl FromSql for MemoryKind {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        value
            .as_str()?
            .parse()
            .map_err(|e: MemoryError| FromSqlError::Other(Box::new(e)))
    }
}

fn memory(row: &Row<'_>) -> rusqlite::Result<Memory> {
    Ok(Memory {
        id: row.get(0)?,
        workspace: row.get(1)?,
        kind: row.get(2)?,
        text: row.get(3)?,
        created_ms: row.get(4)?,
        last_used_ms: row.get(5)?,
        use_count: row.get::<_, i64>(6)?.max(0) as u64,
    })
}

/// Trimmed text, or why it cannot be stored.
fn checked_text(text: &str) -> Result<&str, MemoryError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(MemoryError::EmptyText);
    }
    if text.len() > MAX_TEXT_BYTES {
        return Err(MemoryError::TooLong { len: text.len() });
    }
    Ok(text)
}

/// Memories of every workspace in the host database (`PINCER_HOME/pincer.db`).
pub struct MemoryStore {
    conn: Mutex<Connection>,
    /// Recall by meaning, when the embedding model is there.
    embedder: Option<Arc<Embedder>>,
    vectors: vectors::Cache,
}

impl MemoryStore {
    /// The store with lexical recall only.
    pub fn open(home: &Path) -> Result<Self, MemoryError> {
        Self::open_with(home, None)
    }

    /// The store, ranking by meaning too when `embedder` is given.
    pub fn open_with(home: &Path, embedder: Option<Arc<Embedder>>) -> Result<Self, MemoryError> {
        let path = home.join(crate::db::FILE_NAME);
        let open_error = |source| MemoryError::Open {
            path: path.display().to_string(),
            source,
        };
        if let Err(e) = std::fs::create_dir_all(home) {
            tracing::debug!("cannot create {}: {e}", home.display());
        }
        let mut conn = crate::db::open(&path).map_err(open_error)?;
        // SQLite's default page cache is 2 MiB; at a million memories the
        // `(workspace, text)` index and the FTS5 segments an insert touches
        // no longer fit, and every insert reads pages back from the OS.
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(open_error)?;
        conn.execute_batch(SCHEMA).map_err(open_error)?;
        conn.execute_batch(vectors::SCHEMA).map_err(open_error)?;
        crate::db::add_missing_columns(&conn, "memories", &[vectors::EMBEDDED_COLUMN])
            .map_err(open_error)?;
        conn.execute_batch(vectors::UNEMBEDDED_INDEX)
            .map_err(open_error)?;
        reindex_if_stale(&mut conn).map_err(open_error)?;
        // The write lock only when the model changed: a store is opened per
        // CLI command and console page, beside a daemon that writes.
        if let Some(embedder) = &embedder
            && vectors::stored_model(&conn).map_err(open_error)?.as_deref()
                != Some(embedder.model_id())
        {
            let tx = write_transaction(&mut conn).map_err(open_error)?;
            vectors::adopt_model(&tx, embedder.model_id()).map_err(open_error)?;
            tx.commit().map_err(open_error)?;
        }
        Ok(Self {
            conn: Mutex::new(conn),
            embedder,
            vectors: vectors::Cache::default(),
        })
    }

    /// The embedding model, if memory ranks by meaning.
    pub fn embedder(&self) -> Option<&Arc<Embedder>> {
        self.embedder.as_ref()
    }

    /// `texts` as vectors, or `None` (said once) when there is no usable
    /// embedding model: memory then works by words alone.
    fn embed_passages(&self, texts: &[&str]) -> Option<Vec<Vector>> {
        let embedder = self.embedder.as_ref()?;
        match embedder.passages(texts) {
            Ok(v) => Some(v),
            // Said once by the embedder; every write would repeat it.
            Err(why) => {
                tracing::debug!("memory: {why}");
                None
            }
        }
    }

    pub(super) fn conn(&self) -> Result<MutexGuard<'_, Connection>, MemoryError> {
        self.conn.lock().map_err(|_| MemoryError::Poisoned)
    }

    /// Stores `text` (trimmed); the same text again in the same workspace
    /// returns the memory already stored, unchanged.
    pub fn add(
        &self,
        workspace: &str,
        kind: MemoryKind,
        text: &str,
    ) -> Result<Memory, MemoryError> {
        let text = checked_text(text)?;
        // Segmented and embedded before the write lock is taken.
        let terms = index_terms(workspace, text);
        let vector = self.embed_passages(&[text]).and_then(|mut v| v.pop());
        let mut conn = self.conn()?;
        let tx = write_transaction(&mut conn)?;
        let (memory, new) = insert(&tx, workspace, kind, text, now_ms(), terms)?;
        let vectors = if new {
            vec![(memory.id, vector)]
        } else {
            Vec::new()
        };
        self.store_vectors(tx, workspace, vectors)?;
        Ok(memory)
    }

    /// Stores the vectors of memories of `workspace` by id (those just
    /// inserted) and commits `tx`.
    fn store_vectors(
        &self,
        tx: Transaction<'_>,
        workspace: &str,
        new: Vec<(i64, Option<Vector>)>,
    ) -> Result<(), MemoryError> {
        let mut added = Vec::new();
        for (id, vector) in new {
            if let Some(v) = vector
                && vectors::store(&tx, id, workspace, &v)?
            {
                added.push((id, v));
            }
        }
        if added.is_empty() {
            tx.commit()?;
            return Ok(());
        }
        let before = vectors::generation(&tx)?;
        let after = vectors::bump_generation(&tx)?;
        tx.commit()?;
        self.vectors.added(workspace, before, after, &added);
        Ok(())
    }

    /// [`add`](Self::add) for many texts of one kind in one transaction
    /// (imports, the benchmark). Every text is checked before anything is
    /// written.
    pub fn add_many(
        &self,
        workspace: &str,
        kind: MemoryKind,
        texts: &[impl AsRef<str>],
    ) -> Result<Vec<Memory>, MemoryError> {
        let checked = texts
            .iter()
            .map(|text| checked_text(text.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        // Segmented and embedded before the write lock is taken.
        let terms = index_terms_all(workspace, &checked);
        let mut embedded = Vec::new();
        if self.embedder.is_some() {
            for batch in checked.chunks(EMBED_BATCH) {
                match self.embed_passages(batch) {
                    Some(v) => embedded.extend(v.into_iter().map(Some)),
                    None => break,
                }
            }
        }
        embedded.resize(checked.len(), None);
        let mut conn = self.conn()?;
        let tx = write_transaction(&mut conn)?;
        let now = now_ms();
        let mut out = Vec::with_capacity(checked.len());
        let mut new_vectors = Vec::new();
        for ((text, terms), vector) in checked.into_iter().zip(terms).zip(embedded) {
            let (memory, new) = insert(&tx, workspace, kind, text, now, terms)?;
            if new {
                new_vectors.push((memory.id, vector));
            }
            out.push(memory);
        }
        self.store_vectors(tx, workspace, new_vectors)?;
        Ok(out)
    }

    /// The best matches for `query`, counted as used (use count and last use
    /// are bumped; the returned memories show the bumped values).
    pub fn recall(
        &self,
        workspace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Recalled>, MemoryError> {
        let mut found = self.ranked(workspace, query, limit)?;
        if found.is_empty() {
            return Ok(found);
        }
        let mut conn = self.conn()?;
        let now = now_ms();
        let tx = write_transaction(&mut conn)?;
        {
            let mut bump = tx.prepare_cached(
                "UPDATE memories SET use_count = use_count + 1, last_used_ms = ?2 WHERE id = ?1",
            )?;
            for r in &mut found {
                bump.execute(params![r.memory.id, now])?;
                r.memory.use_count += 1;
                r.memory.last_used_ms = Some(now);
            }
        }
        tx.commit()?;
        Ok(found)
    }

    /// The same ranking as [`recall`](Self::recall), without counting a use.
    pub fn search(
        &self,
        workspace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Recalled>, MemoryError> {
        self.ranked(workspace, query, limit)
    }

    /// The ranking of [`search`](Self::search): by words ([`find`]) and,
    /// with an embedding model, fused with the ranking by meaning
    /// ([`rank::Hybrid`]).
    fn ranked(
        &self,
        workspace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Vec<Recalled>, MemoryError> {
        if query.trim().is_empty() {
            return Err(MemoryError::EmptyQuery);
        }
        if limit == 0 {
            return Ok(Vec::new());
        }
        let Some(near) = self.nearest(workspace, query, limit.max(MEANING_DEPTH))? else {
            return find(&*self.conn()?, workspace, query, limit);
        };
        let conn = self.conn()?;
        let lexical = find(&conn, workspace, query, limit.max(WORDS_DEPTH))?;
        fuse_meaning(&conn, workspace, lexical, near, limit)
    }

    /// The `n` memories of `workspace` nearest to `query` in meaning, best
    /// first, with their similarity; `None` without a usable embedding
    /// model. Memories still lacking a vector are embedded first, so the
    /// answer never depends on a background worker having caught up.
    pub fn nearest(
        &self,
        workspace: &str,
        query: &str,
        n: usize,
    ) -> Result<Option<Vec<(i64, f32)>>, MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        if !self.catch_up(Some(workspace), &mut |_, _| {})? {
            return Ok(None);
        }
        let query = match embedder.query(query.trim()) {
            Ok(v) => v,
            Err(why) => {
                tracing::debug!("memory: {why}");
                return Ok(None);
            }
        };
        let loaded = self
            .vectors
            .get(&*self.conn()?, workspace, query.values.len())?;
        Ok(Some(loaded.nearest(&query, n)))
    }

    /// Embeds the memories of `workspace` (every workspace if `None`) that
    /// lack a vector, `progress(done, total)` after each batch. `false`
    /// when there is no usable embedding model.
    pub fn catch_up(
        &self,
        workspace: Option<&str>,
        progress: &mut dyn FnMut(u64, u64),
    ) -> Result<bool, MemoryError> {
        if self.embedder.is_none() {
            return Ok(false);
        }
        let mut total = None;
        let mut done = 0u64;
        loop {
            let batch = vectors::unembedded(&*self.conn()?, workspace, EMBED_BATCH)?;
            if batch.is_empty() {
                return Ok(true);
            }
            let total = match total {
                Some(t) => t,
                None => *total.insert(done + vectors::unembedded_count(&*self.conn()?, workspace)?),
            };
            let texts: Vec<&str> = batch.iter().map(|(_, _, text)| text.as_str()).collect();
            let Some(embedded) = self.embed_passages(&texts) else {
                return Ok(false);
            };
            let mut conn = self.conn()?;
            let tx = write_transaction(&mut conn)?;
            for ((id, ws, _), vector) in batch.iter().zip(&embedded) {
                vectors::store(&tx, *id, ws, vector)?;
            }
            vectors::bump_generation(&tx)?;
            tx.commit()?;
            done += batch.len() as u64;
            progress(done.min(total), total);
        }
    }

    /// How many memories of `workspace` (or all) lack a vector.
    pub fn unembedded(&self, workspace: Option<&str>) -> Result<u64, MemoryError> {
        Ok(vectors::unembedded_count(&*self.conn()?, workspace)?)
    }

    /// [`Self::search`], with why each result ranked where it did: its rank
    /// in each list and the query's terms it holds, and the query's terms
    /// that were left out as too common.
    pub fn explain(
        &self,
        workspace: &str,
        query: &str,
        limit: usize,
    ) -> Result<Explained, MemoryError> {
        let mut results = self.ranked(workspace, query, limit)?;
        let conn = self.conn()?;
        let split =
            |terms: Vec<String>, prefix: &str| -> Result<(Vec<String>, Vec<String>), MemoryError> {
                let mut used = Vec::new();
                let mut common = Vec::new();
                for term in terms {
                    if is_common(&conn, &format!("{prefix}{term}"))? {
                        common.push(term);
                    } else {
                        used.push(term);
                    }
                }
                Ok((used, common))
            };
        let query_words = segment::query_terms(query, MAX_QUERY_TERMS);
        let query_variants = segment::query_variants(query, MAX_QUERY_TERMS);
        let (words, common_words) = split(query_words.clone(), &term_prefix(workspace))?;
        let (variants, common_variants) =
            split(query_variants.clone(), &variant_prefix(workspace))?;
        for r in &mut results {
            let held = segment::terms(&r.memory.text);
            let held_variants = segment::variants(&r.memory.text);
            let why = r.why.get_or_insert_with(Why::default);
            why.words = query_words
                .iter()
                .filter(|t| held.contains(t))
                .cloned()
                .collect();
            why.variants = query_variants
                .iter()
                .filter(|t| held_variants.contains(t))
                .cloned()
                .collect();
        }
        Ok(Explained {
            words,
            common_words,
            variants,
            common_variants,
            results,
        })
    }

    /// Deletes memory `id` of `workspace`; `false` when there is none.
    pub fn forget(&self, workspace: &str, id: i64) -> Result<bool, MemoryError> {
        let mut conn = self.conn()?;
        let tx = write_transaction(&mut conn)?;
        let deleted = tx.execute(
            "DELETE FROM memories WHERE id = ?1 AND workspace = ?2",
            params![id, workspace],
        )?;
        if deleted > 0 {
            tx.execute("DELETE FROM memory_index WHERE rowid = ?1", params![id])?;
            // Its vector went with it (ON DELETE CASCADE).
            vectors::bump_generation(&tx)?;
        }
        tx.commit()?;
        Ok(deleted > 0)
    }

    /// The newest memories of `workspace` first.
    pub fn list(&self, workspace: &str, limit: usize) -> Result<Vec<Memory>, MemoryError> {
        let conn = self.conn()?;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT {COLUMNS} FROM memories WHERE workspace = ?1 ORDER BY id DESC LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![workspace, sql_limit(limit)], memory)?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// How many memories `workspace` holds.
    pub fn count(&self, workspace: &str) -> Result<u64, MemoryError> {
        let conn = self.conn()?;
        let n: i64 = conn.query_row(
            "SELECT count(*) FROM memories WHERE workspace = ?1",
            params![workspace],
            |r| r.get(0),
        )?;
        Ok(n.max(0) as u64)
    }
}

/// A transaction that takes the write lock when it begins. A deferred one
/// that reads before it writes fails at once with SQLITE_BUSY (no busy wait)
/// when another connection — the session store, the audit log, another
/// pincer process — wrote in between.
fn write_transaction(conn: &mut Connection) -> rusqlite::Result<Transaction<'_>> {
    conn.transaction_with_behavior(TransactionBehavior::Immediate)
}

fn sql_limit(limit: usize) -> i64 {
    i64::try_from(limit).unwrap_or(i64::MAX)
}

/// Stores a memory (or finds the same text stored already: then `false`);
/// `terms`: its [`index_terms`].
fn insert(
    conn: &Connection,
    workspace: &str,
    kind: MemoryKind,
    text: &str,
    now: i64,
    terms: String,
) -> Result<(Memory, bool), MemoryError> {
    // One index lookup for the usual case, a new text; a second only
    // when the text is stored already.
    let inserted = conn
        .prepare_cached(
            "INSERT INTO memories (workspace, kind, text, created_ms) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (workspace, text) DO NOTHING",
        )?
        .execute(params![workspace, kind.as_str(), text, now])?;
    if inserted == 0 {
        let existing = conn
            .prepare_cached(&format!(
                "SELECT {COLUMNS} FROM memories WHERE workspace = ?1 AND text = ?2"
            ))?
            .query_row(params![workspace, text], memory)?;
        return Ok((existing, false));
    }
    let id = conn.last_insert_rowid();
    index(conn, id, &terms)?;
    let memory = Memory {
        id,
        workspace: workspace.to_string(),
        kind,
        text: text.to_string(),
        created_ms: now,
        last_used_ms: None,
        use_count: 0,
    };
    Ok((memory, true))
}

/// The index text of a memory: its words and, with another prefix, their
/// variants (the second list), each prefixed by its workspace.
fn index_terms(workspace: &str, text: &str) -> String {
    let variant = variant_prefix(workspace);
    let terms: Vec<String> = segment::terms(text)
        .iter()
        .map(|t| index_term(workspace, t))
        .chain(
            segment::variants(text)
                .iter()
                .map(|t| format!("{variant}{t}")),
        )
        .collect();
    terms.join(" ")
}

/// [`index_terms`] of each text, in order, segmented on up to as many
/// threads as the machine has cores: segmentation is most of an import's
/// CPU time, and SQLite writes on one thread only.
fn index_terms_all(workspace: &str, texts: &[&str]) -> Vec<String> {
    /// Below this many texts per thread a thread costs more than it saves.
    const PER_THREAD: usize = 256;
    let threads = std::thread::available_parallelism()
        .map_or(1, std::num::NonZeroUsize::get)
        .min(texts.len() / PER_THREAD)
        .max(1);
    if threads == 1 {
        return texts.iter().map(|t| index_terms(workspace, t)).collect();
    }
    let chunk = texts.len().div_ceil(threads);
    std::thread::scope(|scope| {
        let parts: Vec<_> = texts
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || {
                    part.iter()
                        .map(|t| index_terms(workspace, t))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        parts
            .into_iter()
            .flat_map(|part| part.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Adds memory `id`'s index text ([`index_terms`]) to the index.
fn index(conn: &Connection, id: i64, terms: &str) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT INTO memory_index (rowid, terms) VALUES (?1, ?2)")?
        .execute(params![id, terms])?;
    Ok(())
}

/// The index version the database says it has (0 before `memory_meta`).
fn index_version(conn: &Connection) -> rusqlite::Result<i64> {
    Ok(conn
        .query_row(
            "SELECT value FROM memory_meta WHERE key = 'index_version'",
            [],
            |r| r.get(0),
        )
        .optional()?
        .unwrap_or(0))
}

/// Rebuilds the index from `memories` if the database has the old index
/// table or an index of another version; the memories themselves are
/// untouched.
fn reindex_if_stale(conn: &mut Connection) -> rusqlite::Result<()> {
    let stale = |conn: &Connection| -> rusqlite::Result<bool> {
        let has_old = conn.query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
            params![OLD_INDEX],
            |r| r.get::<_, bool>(0),
        )?;
        Ok(has_old || index_version(conn)? != INDEX_VERSION)
    };
    if !stale(conn)? {
        return Ok(());
    }
    let tx = write_transaction(conn)?;
    // Another process may have rebuilt it meanwhile.
    if !stale(&tx)? {
        return Ok(());
    }
    tx.execute_batch(&format!(
        "DROP TABLE IF EXISTS {OLD_INDEX}; DELETE FROM memory_index;"
    ))?;
    let rows: Vec<(i64, String, String)> = tx
        .prepare("SELECT id, workspace, text FROM memories")?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    for (id, workspace, text) in &rows {
        index(&tx, *id, &index_terms(workspace, text))?;
    }
    tx.execute(
        "INSERT OR REPLACE INTO memory_meta (key, value) VALUES ('index_version', ?1)",
        params![INDEX_VERSION],
    )?;
    tx.commit()?;
    if !rows.is_empty() {
        tracing::info!("memory: rebuilt the index of {} memories", rows.len());
    }
    Ok(())
}

/// Two ranked lists of index matches — the query's words, and their
/// variants (stems, Chinese characters and pairs) — fused by reciprocal
/// rank ([`rank::fuse`]), recency and use breaking ties ([`rank::score`]).
/// Without a word match: substring matches, then variant matches alone.
fn find(
    conn: &Connection,
    workspace: &str,
    query: &str,
    limit: usize,
) -> Result<Vec<Recalled>, MemoryError> {
    let query = query.trim();
    if query.is_empty() {
        return Err(MemoryError::EmptyQuery);
    }
    if limit == 0 {
        return Ok(Vec::new());
    }
    let words = by_list(
        conn,
        workspace,
        &term_prefix(workspace),
        segment::query_terms(query, MAX_QUERY_TERMS),
        true,
        limit,
    )?;
    let query_variants = segment::query_variants(query, MAX_QUERY_TERMS);
    let variants = by_list(
        conn,
        workspace,
        &variant_prefix(workspace),
        query_variants.clone(),
        false,
        limit,
    )?;
    let mut found = if !words.is_empty() {
        fuse(words, variants, &query_variants)
    } else {
        let substring = by_substring(conn, workspace, query)?;
        if substring.is_empty() {
            fuse(Vec::new(), variants, &query_variants)
        } else {
            substring
        }
    };
    best_first(&mut found);
    found.truncate(limit);
    Ok(found)
}

/// One ranked list: the matches of `terms` (with `prefix`), best first, each
/// with its BM25 relevance. Common terms give way to rarer ones; a list of
/// only common terms takes the newest matches if `newest_if_common`, or
/// nothing.
fn by_list(
    conn: &Connection,
    workspace: &str,
    prefix: &str,
    terms: Vec<String>,
    newest_if_common: bool,
    limit: usize,
) -> Result<Vec<Recalled>, MemoryError> {
    let mut rare = Vec::new();
    for term in &terms {
        if !is_common(conn, &format!("{prefix}{term}"))? {
            rare.push(term.clone());
        }
    }
    let (terms, order) = if !rare.is_empty() {
        (rare, Order::Relevance)
    } else if newest_if_common {
        (terms, Order::Newest)
    } else {
        return Ok(Vec::new());
    };
    let Some(expression) = prefixed_expression(prefix, &terms) else {
        return Ok(Vec::new());
    };
    let mut found = by_index(conn, workspace, &expression, &terms, order, limit)?;
    best_first(&mut found);
    Ok(found)
}

/// The two lists as one, by [`rank::fuse`] over each memory's ranks and its
/// coverage of `query_variants`; equal relevance shares a rank, so ties stay
/// ties for recency and use to break.
fn fuse(words: Vec<Recalled>, variants: Vec<Recalled>, query_variants: &[String]) -> Vec<Recalled> {
    let ranks = |list: &[Recalled]| -> Vec<usize> {
        let mut out = Vec::with_capacity(list.len());
        for (i, r) in list.iter().enumerate() {
            // Within a millionth: the same BM25, recency's tie-break aside.
            let shared = i > 0 && (list[i - 1].score - r.score).abs() <= 1e-6 * r.score.abs();
            out.push(if shared { out[i - 1] } else { i + 1 });
        }
        out
    };
    let (word_ranks, variant_ranks) = (ranks(&words), ranks(&variants));
    let mut fused: Vec<(Recalled, Option<usize>, Option<usize>)> = Vec::new();
    for (r, rank) in words.into_iter().zip(word_ranks) {
        fused.push((r, Some(rank), None));
    }
    for (r, rank) in variants.into_iter().zip(variant_ranks) {
        match fused.iter_mut().find(|f| f.0.memory.id == r.memory.id) {
            Some(f) => f.2 = Some(rank),
            None => fused.push((r, None, Some(rank))),
        }
    }
    let now = now_ms();
    fused
        .into_iter()
        .map(|(r, word, variant)| {
            let matched_by = r.matched_by;
            let coverage = coverage(&r.memory.text, query_variants);
            let relevance = rank::fuse(word, variant, coverage);
            let mut out = recalled(r.memory, relevance, now, matched_by);
            out.why = Some(Why {
                word_rank: word,
                variant_rank: variant,
                coverage,
                relevance,
                ..Why::default()
            });
            out
        })
        .collect()
}

/// Highest score first; the newer memory first at equal scores.
fn best_first(found: &mut [Recalled]) {
    found.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then(b.memory.id.cmp(&a.memory.id))
    });
}

/// The lexical results (best first) and the `near` list (best first) as
/// one ranking by [`rank::Hybrid`]; memories found by meaning alone join
/// when [`rank::Hybrid::admits`] their similarity.
fn fuse_meaning(
    conn: &Connection,
    workspace: &str,
    lexical: Vec<Recalled>,
    near: Vec<(i64, f32)>,
    limit: usize,
) -> Result<Vec<Recalled>, MemoryError> {
    let hybrid = rank::Hybrid::DEFAULT;
    let now = now_ms();
    let place = |id: i64| {
        near.iter()
            .position(|n| n.0 == id)
            .map(|i| (i + 1, near[i].1))
    };
    let mut out = Vec::with_capacity(lexical.len() + near.len());
    for (i, r) in lexical.into_iter().enumerate() {
        let meaning = place(r.memory.id);
        let relevance = hybrid.fuse(Some(i + 1), meaning.map(|m| m.0));
        let mut why = r.why.unwrap_or_default();
        why.lexical_rank = Some(i + 1);
        (why.vector_rank, why.similarity) = (meaning.map(|m| m.0), meaning.map(|m| m.1));
        why.relevance = relevance;
        let mut fused = recalled(r.memory, relevance, now, r.matched_by);
        fused.why = Some(why);
        out.push(fused);
    }
    let mut by_id = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM memories WHERE id = ?1 AND workspace = ?2"
    ))?;
    for (i, (id, similarity)) in near.iter().enumerate() {
        if out.iter().any(|r| r.memory.id == *id) || !hybrid.admits(*similarity) {
            continue;
        }
        let Some(memory) = by_id.query_row(params![id, workspace], memory).optional()? else {
            continue;
        };
        let relevance = hybrid.fuse(None, Some(i + 1));
        let mut fused = recalled(memory, relevance, now, MatchKind::Meaning);
        fused.why = Some(Why {
            vector_rank: Some(i + 1),
            similarity: Some(*similarity),
            relevance,
            ..Why::default()
        });
        out.push(fused);
    }
    best_first(&mut out);
    out.truncate(limit);
    Ok(out)
}

/// Whether the (prefixed, so per-workspace) index `term` is in more than
/// [`COMMON_TERM_ROWS`] memories (counting stops there, so this stays cheap for any term).
fn is_common(conn: &Connection, term: &str) -> Result<bool, MemoryError> {
    let rows: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM (SELECT 1 FROM memory_index WHERE memory_index MATCH ?1 LIMIT ?2)",
        )?
        .query_row(
            params![
                quoted(term),
                sql_limit(COMMON_TERM_ROWS + 1)
            ],
            |r| r.get(0),
        )?;
    Ok(rows > COMMON_TERM_ROWS as i64)
}

/// Which index matches become candidates for [`rank::score`].
#[derive(Clone, Copy)]
enum Order {
    /// The best BM25 scores.
    Relevance,
    /// The newest matches, their relevance the number of query terms they
    /// hold. BM25 is not asked for: its weights count every row of every
    /// term, which for common terms is what this order avoids.
    Newest,
}

fn by_index(
    conn: &Connection,
    workspace: &str,
    expression: &str,
    terms: &[String],
    order: Order,
    limit: usize,
) -> Result<Vec<Recalled>, MemoryError> {
    let candidates = limit
        .saturating_mul(CANDIDATES_PER_RESULT)
        .max(MIN_CANDIDATES);
    let matches = match order {
        Order::Relevance => {
            "SELECT rowid, -bm25(memory_index) AS relevance FROM memory_index
             WHERE memory_index MATCH ?1 ORDER BY relevance DESC LIMIT ?2"
        }
        Order::Newest => {
            "SELECT rowid, NULL AS relevance FROM memory_index
             WHERE memory_index MATCH ?1 ORDER BY rowid DESC LIMIT ?2"
        }
    };
    // CROSS JOIN keeps the index matches the outer loop; left to itself the
    // planner may walk every memory of the workspace and probe the matches.
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS}, f.relevance FROM ({matches}) AS f
         CROSS JOIN memories ON memories.id = f.rowid WHERE memories.workspace = ?3"
    ))?;
    let now = now_ms();
    let rows = stmt.query_map(
        params![expression, sql_limit(candidates), workspace],
        |row| {
            let memory = memory(row)?;
            let relevance = match row.get::<_, Option<f64>>(7)? {
                Some(bm25) => bm25,
                None => terms_held(&memory.text, terms),
            };
            Ok(recalled(memory, relevance, now, MatchKind::Index))
        },
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The share of `query_variants` that `text`'s variants hold (0 when the
/// query has none).
fn coverage(text: &str, query_variants: &[String]) -> f64 {
    if query_variants.is_empty() {
        return 0.0;
    }
    let held = segment::variants(text);
    query_variants.iter().filter(|v| held.contains(v)).count() as f64 / query_variants.len() as f64
}

/// How many of `terms` the segmented `text` holds.
fn terms_held(text: &str, terms: &[String]) -> f64 {
    let held = segment::terms(text);
    terms.iter().filter(|t| held.contains(t)).count() as f64
}

fn by_substring(
    conn: &Connection,
    workspace: &str,
    query: &str,
) -> Result<Vec<Recalled>, MemoryError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM (
             SELECT * FROM memories WHERE workspace = ?1 ORDER BY id DESC LIMIT ?4
         ) WHERE text LIKE ?2 ESCAPE '\\' ORDER BY id DESC LIMIT ?3"
    ))?;
    let now = now_ms();
    let rows = stmt.query_map(
        params![
            workspace,
            like_pattern(query),
            sql_limit(MAX_SUBSTRING_CANDIDATES),
            sql_limit(SUBSTRING_SCAN_ROWS)
        ],
        |row| Ok(recalled(memory(row)?, 1.0, now, MatchKind::Substring)),
    )?;
    Ok(rows.collect::<Result<_, _>>()?)
}

fn recalled(memory: Memory, relevance: f64, now: i64, matched_by: MatchKind) -> Recalled {
    let score = rank::score(
        relevance,
        now,
        memory.created_ms,
        memory.last_used_ms,
        memory.use_count,
    );
    Recalled {
        memory,
        score,
        matched_by,
        why: None,
    }
}
