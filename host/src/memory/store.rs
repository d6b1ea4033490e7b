//! The memory tables and every query on them, on SQLite or PostgreSQL
//! ([`crate::db`]). The lexical index is FTS5 on SQLite and
//! [`postings`] on PostgreSQL; the ranking above it is one code path.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use super::embed::{Embedder, Vector};
use super::query::{
    index_term, like_pattern, prefixed_expression, quoted, term_prefix, variant_prefix,
};
use super::{
    Explained, MAX_TEXT_BYTES, MatchKind, Memory, MemoryError, MemoryKind, Recalled, Why, postings,
    rank, segment, vectors,
};
use crate::args;
use crate::db::{Conn, Db, DbError, Dialect, Location, Row, now_ms};

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

/// `memories` and `memory_meta`, in SQLite's words ([`crate::db::dialect`]).
/// A text is stored once per workspace: SQLite keeps that with the
/// `UNIQUE (workspace, text)` below; PostgreSQL's b-tree entries hold at most
/// ~2.7 kB and a memory may have 8 kB, so there [`POSTGRES_INDEX`] makes it
/// a unique index on the text's md5.
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
    use_count INTEGER NOT NULL DEFAULT 0{unique}
);
CREATE INDEX IF NOT EXISTS memories_by_workspace ON memories (workspace, id);
CREATE TABLE IF NOT EXISTS memory_meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);
";

/// The index on SQLite.
const SQLITE_INDEX: &str = "
-- Contentless: the text lives in `memories`; rowid = memories.id. `terms`
-- holds the segmented text, each term prefixed by its workspace (see
-- query::term_prefix).
CREATE VIRTUAL TABLE IF NOT EXISTS memory_index USING fts5 (
    terms, content = '', contentless_delete = 1, tokenize = 'ascii'
);
";

/// The index on PostgreSQL ([`postings`]): what FTS5 would hold for each
/// memory's index text — its tokens with their counts, and its length —
/// while `memory_meta` keeps the totals (`index_rows`, `index_tokens`).
const POSTGRES_INDEX: &str = "
CREATE UNIQUE INDEX IF NOT EXISTS memories_text_once ON memories (workspace, md5(text));
CREATE INDEX IF NOT EXISTS memories_by_text ON memories USING hash (text);
CREATE TABLE IF NOT EXISTS memory_postings (
    term TEXT NOT NULL,
    memory_id BIGINT NOT NULL,
    tf BIGINT NOT NULL,
    PRIMARY KEY (term, memory_id)
);
CREATE INDEX IF NOT EXISTS memory_postings_by_memory ON memory_postings (memory_id);
CREATE TABLE IF NOT EXISTS memory_index_docs (
    memory_id BIGINT NOT NULL PRIMARY KEY,
    length BIGINT NOT NULL
);
";

/// The index of earlier versions (one `space` column ANDed with the terms:
/// slow at scale). Replaced by `memory_index`, rebuilt from `memories`.
const OLD_INDEX: &str = "memory_fts";

const COLUMNS: &str = "id, workspace, kind, text, created_ms, last_used_ms, use_count";

fn memory(row: &Row) -> Result<Memory, MemoryError> {
    Ok(Memory {
        id: row.get(0)?,
        workspace: row.get(1)?,
        kind: row.get::<String>(2)?.parse()?,
        text: row.get(3)?,
        created_ms: row.get(4)?,
        last_used_ms: row.get(5)?,
        use_count: row.get::<i64>(6)?.max(0) as u64,
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

/// Where the state is, as an error may say it (never a PostgreSQL URL: it
/// may hold a password).
fn shown(location: &Location) -> String {
    match location {
        Location::Sqlite(path) => path.display().to_string(),
        Location::Postgres(_) => "on PostgreSQL (state.url)".to_owned(),
    }
}

/// Vectors a write stored: the generation it moved the vectors from and
/// to, and what it added, for [`vectors::Cache::added`].
type Stored = (i64, i64, Vec<(i64, Vector)>);

/// Memories of every workspace in the host's state (`PINCER_HOME/pincer.db`
/// or a PostgreSQL database).
pub struct MemoryStore {
    db: Db,
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
        if let Err(e) = std::fs::create_dir_all(home) {
            tracing::debug!("cannot create {}: {e}", home.display());
        }
        Self::open_at(&Location::Sqlite(home.join(crate::db::FILE_NAME)), embedder)
    }

    /// The store at `location`, ranking by meaning too when `embedder` is
    /// given.
    pub fn open_at(
        location: &Location,
        embedder: Option<Arc<Embedder>>,
    ) -> Result<Self, MemoryError> {
        let open_error = |source| MemoryError::Open {
            at: shown(location),
            source,
        };
        let db = Db::open(location).map_err(open_error)?;
        // Creating what exists already writes nothing, so SQLite needs no
        // write lock for it (a store is opened per CLI command and console
        // page, beside a daemon that writes); PostgreSQL's schema lock holds
        // only inside a transaction.
        match db.dialect() {
            Dialect::Sqlite => db.run(create_tables),
            Dialect::Postgres => db.transaction(create_tables),
        }
        .map_err(open_error)?;
        reindex_if_stale(&db).map_err(open_error)?;
        // The write lock only when the model changed: a store is opened per
        // CLI command and console page, beside a daemon that writes.
        if let Some(embedder) = &embedder
            && db
                .run(vectors::stored_model)
                .map_err(open_error)?
                .as_deref()
                != Some(embedder.model_id())
        {
            db.transaction(|conn| vectors::adopt_model(conn, embedder.model_id()))
                .map_err(open_error)?;
        }
        Ok(Self {
            db,
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

    #[cfg(test)]
    pub(super) fn db(&self) -> &Db {
        &self.db
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
        let now = now_ms();
        let (memory, stored) = self.db.transaction(|conn| {
            let (memory, new) = insert(conn, workspace, kind, text, now, &terms)?;
            let vectors = if new {
                vec![(memory.id, vector.as_ref())]
            } else {
                Vec::new()
            };
            Ok::<_, MemoryError>((memory, store_vectors(conn, workspace, &vectors)?))
        })?;
        self.stored(workspace, stored);
        Ok(memory)
    }

    /// What a committed write did to the vectors, into the cache.
    fn stored(&self, workspace: &str, stored: Option<Stored>) {
        if let Some((before, after, added)) = stored {
            self.vectors.added(workspace, before, after, &added);
        }
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
        let now = now_ms();
        let (out, stored) = self.db.transaction(|conn| {
            let mut out = Vec::with_capacity(checked.len());
            let mut new_vectors = Vec::new();
            for ((text, terms), vector) in checked.iter().zip(&terms).zip(&embedded) {
                let (memory, new) = insert(conn, workspace, kind, text, now, terms)?;
                if new {
                    new_vectors.push((memory.id, vector.as_ref()));
                }
                out.push(memory);
            }
            Ok::<_, MemoryError>((out, store_vectors(conn, workspace, &new_vectors)?))
        })?;
        self.stored(workspace, stored);
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
        let now = now_ms();
        let ids: Vec<i64> = found.iter().map(|r| r.memory.id).collect();
        self.db.transaction(|conn| {
            for id in &ids {
                conn.execute(
                    "UPDATE memories SET use_count = use_count + 1, last_used_ms = ?2 WHERE id = ?1",
                    args![*id, now],
                )?;
            }
            Ok::<_, MemoryError>(())
        })?;
        for r in &mut found {
            r.memory.use_count += 1;
            r.memory.last_used_ms = Some(now);
        }
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
        if !self.catch_up(Some(workspace), &mut |_, _| {})? {
            return self.db.run(|conn| find(conn, workspace, query, limit));
        }
        // The words are looked up while the query is embedded.
        let (near, lexical) = std::thread::scope(|scope| {
            let lexical = scope.spawn(|| {
                self.db
                    .run(|conn| find(conn, workspace, query, limit.max(WORDS_DEPTH)))
            });
            let near = self.nearest_embedded(workspace, query, limit.max(MEANING_DEPTH));
            (near, lexical.join())
        });
        let lexical = lexical.map_err(|_| MemoryError::Poisoned)?;
        match near? {
            Some(near) => self
                .db
                .run(|conn| fuse_meaning(conn, workspace, lexical?, near, limit)),
            None => self.db.run(|conn| find(conn, workspace, query, limit)),
        }
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
        if !self.catch_up(Some(workspace), &mut |_, _| {})? {
            return Ok(None);
        }
        self.nearest_embedded(workspace, query, n)
    }

    /// [`Self::nearest`] once every memory of `workspace` has its vector.
    fn nearest_embedded(
        &self,
        workspace: &str,
        query: &str,
        n: usize,
    ) -> Result<Option<Vec<(i64, f32)>>, MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        let query = match embedder.query(query.trim()) {
            Ok(v) => v,
            Err(why) => {
                tracing::debug!("memory: {why}");
                return Ok(None);
            }
        };
        let loaded = self
            .db
            .run(|conn| self.vectors.get(conn, workspace, query.values.len()))?;
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
            let batch = self
                .db
                .run(|conn| vectors::unembedded(conn, workspace, EMBED_BATCH))?;
            if batch.is_empty() {
                return Ok(true);
            }
            let total = match total {
                Some(t) => t,
                None => *total.insert(done + self.unembedded(workspace)?),
            };
            let texts: Vec<&str> = batch.iter().map(|(_, _, text)| text.as_str()).collect();
            let Some(embedded) = self.embed_passages(&texts) else {
                return Ok(false);
            };
            self.db.transaction(|conn| {
                for ((id, ws, _), vector) in batch.iter().zip(&embedded) {
                    vectors::store(conn, *id, ws, vector)?;
                }
                vectors::bump_generation(conn)
            })?;
            done += batch.len() as u64;
            progress(done.min(total), total);
        }
    }

    /// How many memories of `workspace` (or all) lack a vector.
    pub fn unembedded(&self, workspace: Option<&str>) -> Result<u64, MemoryError> {
        Ok(self
            .db
            .run(|conn| vectors::unembedded_count(conn, workspace))?)
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
        let query_words = segment::query_terms(query, MAX_QUERY_TERMS);
        let query_variants = segment::query_variants(query, MAX_QUERY_TERMS);
        let ((words, common_words), (variants, common_variants)) = self.db.run(|conn| {
            let mut split = |terms: Vec<String>, prefix: &str| {
                let mut used = Vec::new();
                let mut common = Vec::new();
                for term in terms {
                    if is_common(conn, &format!("{prefix}{term}"))? {
                        common.push(term);
                    } else {
                        used.push(term);
                    }
                }
                Ok::<_, MemoryError>((used, common))
            };
            Ok::<_, MemoryError>((
                split(query_words.clone(), &term_prefix(workspace))?,
                split(query_variants.clone(), &variant_prefix(workspace))?,
            ))
        })?;
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
        Ok(self.db.transaction(|conn| {
            let deleted = conn.execute(
                "DELETE FROM memories WHERE id = ?1 AND workspace = ?2",
                args![id, workspace],
            )?;
            if deleted > 0 {
                unindex(conn, id)?;
                // Its vector went with it (ON DELETE CASCADE).
                vectors::bump_generation(conn)?;
            }
            Ok::<_, DbError>(deleted > 0)
        })?)
    }

    /// The newest memories of `workspace` first.
    pub fn list(&self, workspace: &str, limit: usize) -> Result<Vec<Memory>, MemoryError> {
        self.db.run(|conn| {
            conn.query(
                &format!(
                    "SELECT {COLUMNS} FROM memories WHERE workspace = ?1 ORDER BY id DESC LIMIT ?2"
                ),
                args![workspace, limit],
            )?
            .iter()
            .map(memory)
            .collect()
        })
    }

    /// How many memories `workspace` holds.
    pub fn count(&self, workspace: &str) -> Result<u64, MemoryError> {
        let n: i64 = self.db.run(|conn| {
            conn.query_one(
                "SELECT count(*) FROM memories WHERE workspace = ?1",
                args![workspace],
            )?
            .get(0)
        })?;
        Ok(n.max(0) as u64)
    }
}

#[cfg(test)]
impl MemoryStore {
    /// Every index match in `workspace` of any of `terms` (with `prefix`)
    /// with its `−bm25`, best first: what the backends must agree on.
    pub(super) fn bm25(
        &self,
        workspace: &str,
        prefix: &str,
        terms: &[String],
    ) -> Result<Vec<(i64, f64)>, MemoryError> {
        let mut found: Vec<(i64, f64)> = self
            .db
            .run(|conn| {
                index_matches(conn, workspace, prefix, terms, Order::Relevance, usize::MAX)
            })?
            .into_iter()
            .map(|(m, relevance)| (m.id, relevance.unwrap_or(f64::NAN)))
            .collect();
        found.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(found)
    }
}

/// Creates the tables (and brings older ones forward).
fn create_tables(conn: &mut dyn Conn) -> Result<(), DbError> {
    let dialect = conn.dialect();
    let unique = match dialect {
        Dialect::Sqlite => ",\n    UNIQUE (workspace, text)",
        Dialect::Postgres => "",
    };
    conn.schema(&SCHEMA.replace("{unique}", unique))?;
    match dialect {
        Dialect::Sqlite => {
            // SQLite's default page cache is 2 MiB; at a million memories the
            // `(workspace, text)` index and the FTS5 segments an insert touches
            // no longer fit, and every insert reads pages back from the OS.
            conn.schema(&format!("PRAGMA cache_size = -{CACHE_KIB}"))?;
            conn.schema(SQLITE_INDEX)?;
        }
        Dialect::Postgres => conn.schema(POSTGRES_INDEX)?,
    }
    conn.schema(vectors::SCHEMA)?;
    conn.add_missing_columns("memories", &[vectors::EMBEDDED_COLUMN])?;
    conn.schema(vectors::UNEMBEDDED_INDEX)
}

/// Stores the vectors of memories of `workspace` by id (those just
/// inserted), in the caller's transaction.
fn store_vectors(
    conn: &mut dyn Conn,
    workspace: &str,
    new: &[(i64, Option<&Vector>)],
) -> Result<Option<Stored>, MemoryError> {
    let mut added = Vec::new();
    for (id, vector) in new {
        if let Some(v) = vector
            && vectors::store(conn, *id, workspace, v)?
        {
            added.push((*id, (*v).clone()));
        }
    }
    if added.is_empty() {
        return Ok(None);
    }
    let before = vectors::generation(conn)?;
    let after = vectors::bump_generation(conn)?;
    Ok(Some((before, after, added)))
}

/// Stores a memory (or finds the same text stored already: then `false`);
/// `terms`: its [`index_terms`].
fn insert(
    conn: &mut dyn Conn,
    workspace: &str,
    kind: MemoryKind,
    text: &str,
    now: i64,
    terms: &str,
) -> Result<(Memory, bool), MemoryError> {
    // One index lookup for the usual case, a new text; a second only
    // when the text is stored already.
    let inserted = conn.query_opt(
        "INSERT INTO memories (workspace, kind, text, created_ms) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT DO NOTHING RETURNING id",
        args![workspace, kind.as_str(), text, now],
    )?;
    let Some(inserted) = inserted else {
        let existing = conn.query_one(
            &format!("SELECT {COLUMNS} FROM memories WHERE workspace = ?1 AND text = ?2"),
            args![workspace, text],
        )?;
        return Ok((memory(&existing)?, false));
    };
    let id = inserted.get(0)?;
    index(conn, id, terms)?;
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
fn index(conn: &mut dyn Conn, id: i64, terms: &str) -> Result<(), DbError> {
    match conn.dialect() {
        Dialect::Sqlite => conn.execute(
            "INSERT INTO memory_index (rowid, terms) VALUES (?1, ?2)",
            args![id, terms],
        ),
        Dialect::Postgres => {
            let tokens = postings::tokens(terms);
            // The memory's length, its postings and the totals in one round
            // trip (the statements of a WITH all run).
            conn.execute(
                "WITH doc AS (
                     INSERT INTO memory_index_docs (memory_id, length)
                     VALUES (CAST(?1 AS BIGINT), CAST(?3 AS BIGINT))
                 ), posting AS (
                     INSERT INTO memory_postings (term, memory_id, tf)
                     SELECT t.term, CAST(?1 AS BIGINT), count(*)
                     FROM unnest(string_to_array(?2, ' ')) AS t (term) GROUP BY t.term
                 )
                 INSERT INTO memory_meta (key, value)
                 VALUES ('index_rows', CAST(1 AS BIGINT)), ('index_tokens', CAST(?3 AS BIGINT))
                 ON CONFLICT (key) DO UPDATE SET value = memory_meta.value + excluded.value",
                args![id, tokens.join(" "), tokens.len()],
            )
        }
    }
    .map(drop)
}

/// Takes memory `id` out of the index.
fn unindex(conn: &mut dyn Conn, id: i64) -> Result<(), DbError> {
    match conn.dialect() {
        Dialect::Sqlite => conn.execute("DELETE FROM memory_index WHERE rowid = ?1", args![id]),
        Dialect::Postgres => conn.execute(
            "WITH doc AS (
                 DELETE FROM memory_index_docs WHERE memory_id = ?1 RETURNING length
             ), posting AS (
                 DELETE FROM memory_postings WHERE memory_id = ?1
             )
             INSERT INTO memory_meta (key, value)
             SELECT 'index_rows', CAST(-1 AS BIGINT) FROM doc
             UNION ALL SELECT 'index_tokens', -length FROM doc
             ON CONFLICT (key) DO UPDATE SET value = memory_meta.value + excluded.value",
            args![id],
        ),
    }
    .map(drop)
}

/// The PostgreSQL index's totals ([`postings::Totals`]).
fn totals(conn: &mut dyn Conn) -> Result<postings::Totals, DbError> {
    let mut totals = postings::Totals::default();
    for row in conn.query(
        "SELECT key, value FROM memory_meta WHERE key IN ('index_rows', 'index_tokens')",
        args![],
    )? {
        match row.get::<String>(0)?.as_str() {
            "index_rows" => totals.rows = row.get(1)?,
            _ => totals.tokens = row.get(1)?,
        }
    }
    Ok(totals)
}

/// The index version the database says it has (0 before `memory_meta`).
fn index_version(conn: &mut dyn Conn) -> Result<i64, DbError> {
    match conn.query_opt(
        "SELECT value FROM memory_meta WHERE key = 'index_version'",
        args![],
    )? {
        Some(row) => row.get(0),
        None => Ok(0),
    }
}

/// Whether the index is to be rebuilt: SQLite's of an older layout, or of
/// another [`INDEX_VERSION`].
fn index_stale(conn: &mut dyn Conn) -> Result<bool, DbError> {
    let has_old = match conn.dialect() {
        Dialect::Sqlite => conn
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?1)",
                args![OLD_INDEX],
            )?
            .get(0)?,
        Dialect::Postgres => false,
    };
    Ok(has_old || index_version(conn)? != INDEX_VERSION)
}

/// Rebuilds the index from `memories` if it is stale ([`index_stale`]); the
/// memories themselves are untouched.
fn reindex_if_stale(db: &Db) -> Result<(), DbError> {
    if !db.run(index_stale)? {
        return Ok(());
    }
    let rebuilt = db.transaction(|conn| {
        // Another process may have rebuilt it meanwhile.
        if !index_stale(conn)? {
            return Ok(0);
        }
        match conn.dialect() {
            Dialect::Sqlite => conn.schema(&format!(
                "DROP TABLE IF EXISTS {OLD_INDEX}; DELETE FROM memory_index;"
            ))?,
            Dialect::Postgres => {
                conn.execute("DELETE FROM memory_postings", args![])?;
                conn.execute("DELETE FROM memory_index_docs", args![])?;
                conn.execute(
                    "DELETE FROM memory_meta WHERE key IN ('index_rows', 'index_tokens')",
                    args![],
                )?;
            }
        }
        let rows = conn.query("SELECT id, workspace, text FROM memories", args![])?;
        for row in &rows {
            let workspace: String = row.get(1)?;
            let text: String = row.get(2)?;
            index(conn, row.get(0)?, &index_terms(&workspace, &text))?;
        }
        conn.execute(
            "INSERT INTO memory_meta (key, value) VALUES ('index_version', ?1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            args![INDEX_VERSION],
        )?;
        Ok::<_, DbError>(rows.len())
    })?;
    if rebuilt > 0 {
        tracing::info!("memory: rebuilt the index of {rebuilt} memories");
    }
    Ok(())
}

/// Two ranked lists of index matches — the query's words, and their
/// variants (stems, Chinese characters and pairs) — fused by reciprocal
/// rank ([`rank::fuse`]), recency and use breaking ties ([`rank::score`]).
/// Without a word match: substring matches, then variant matches alone.
fn find(
    conn: &mut dyn Conn,
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
    conn: &mut dyn Conn,
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
    if terms.is_empty() {
        return Ok(Vec::new());
    }
    let mut found = by_index(conn, workspace, prefix, &terms, order, limit)?;
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
    conn: &mut dyn Conn,
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
    for (i, (id, similarity)) in near.iter().enumerate() {
        if out.iter().any(|r| r.memory.id == *id) || !hybrid.admits(*similarity) {
            continue;
        }
        let Some(row) = conn.query_opt(
            &format!("SELECT {COLUMNS} FROM memories WHERE id = ?1 AND workspace = ?2"),
            args![*id, workspace],
        )?
        else {
            continue;
        };
        let relevance = hybrid.fuse(None, Some(i + 1));
        let mut fused = recalled(memory(&row)?, relevance, now, MatchKind::Meaning);
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
fn is_common(conn: &mut dyn Conn, term: &str) -> Result<bool, MemoryError> {
    let (sql, term) = match conn.dialect() {
        Dialect::Sqlite => (
            "SELECT count(*) FROM (SELECT 1 FROM memory_index WHERE memory_index MATCH ?1 LIMIT ?2)",
            quoted(term),
        ),
        Dialect::Postgres => (
            "SELECT count(*) FROM (SELECT 1 FROM memory_postings WHERE term = ?1 LIMIT ?2) AS hits",
            postings::phrase(term),
        ),
    };
    let rows: i64 = conn
        .query_one(sql, args![term, COMMON_TERM_ROWS + 1])?
        .get(0)?;
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
    conn: &mut dyn Conn,
    workspace: &str,
    prefix: &str,
    terms: &[String],
    order: Order,
    limit: usize,
) -> Result<Vec<Recalled>, MemoryError> {
    let candidates = limit
        .saturating_mul(CANDIDATES_PER_RESULT)
        .max(MIN_CANDIDATES);
    let now = now_ms();
    Ok(
        index_matches(conn, workspace, prefix, terms, order, candidates)?
            .into_iter()
            .map(|(memory, bm25)| {
                let relevance = bm25.unwrap_or_else(|| terms_held(&memory.text, terms));
                recalled(memory, relevance, now, MatchKind::Index)
            })
            .collect(),
    )
}

/// The index's first `candidates` matches of any of `terms` (with
/// `prefix`) by `order`, with their `−bm25` in [`Order::Relevance`]; those
/// of `workspace` (all of them: the prefix is the workspace's). At equal
/// relevance the lower id is taken first, on both backends: what SQLite's
/// sorter did unasked, so naming it costs nothing (a higher id first would
/// make it replace kept rows on every tie).
fn index_matches(
    conn: &mut dyn Conn,
    workspace: &str,
    prefix: &str,
    terms: &[String],
    order: Order,
    candidates: usize,
) -> Result<Vec<(Memory, Option<f64>)>, MemoryError> {
    if conn.dialect() == Dialect::Sqlite {
        let Some(expression) = prefixed_expression(prefix, terms) else {
            return Ok(Vec::new());
        };
        let matches = match order {
            Order::Relevance => {
                "SELECT rowid, -bm25(memory_index) AS relevance FROM memory_index
                 WHERE memory_index MATCH ?1 ORDER BY relevance DESC, rowid LIMIT ?2"
            }
            Order::Newest => {
                "SELECT rowid, NULL AS relevance FROM memory_index
                 WHERE memory_index MATCH ?1 ORDER BY rowid DESC LIMIT ?2"
            }
        };
        // CROSS JOIN keeps the index matches the outer loop; left to itself
        // the planner may walk every memory of the workspace and probe the
        // matches.
        return conn
            .query(
                &format!(
                    "SELECT {COLUMNS}, f.relevance FROM ({matches}) AS f
                     CROSS JOIN memories ON memories.id = f.rowid WHERE memories.workspace = ?3"
                ),
                args![expression, candidates, workspace],
            )?
            .iter()
            .map(|row| Ok((memory(row)?, row.get(7)?)))
            .collect();
    }
    let phrases: Vec<String> = terms
        .iter()
        .map(|t| postings::phrase(&format!("{prefix}{t}")))
        .collect();
    let ranked: Vec<(i64, Option<f64>)> = match order {
        Order::Relevance => {
            // Rare terms only (see `by_list`): at most COMMON_TERM_ROWS
            // postings each.
            let found = conn
                .query(
                    "SELECT p.term, p.memory_id, p.tf, d.length FROM memory_postings AS p
                     JOIN memory_index_docs AS d ON d.memory_id = p.memory_id
                     WHERE p.term = ANY (string_to_array(?1, ' '))",
                    args![phrases.join(" ")],
                )?
                .iter()
                .map(|row| {
                    Ok(postings::Posting {
                        term: row.get(0)?,
                        memory: row.get(1)?,
                        count: row.get(2)?,
                        length: row.get(3)?,
                    })
                })
                .collect::<Result<Vec<_>, DbError>>()?;
            let mut scored = postings::relevance(&phrases, &found, totals(conn)?);
            scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            scored.truncate(candidates);
            scored.into_iter().map(|(id, r)| (id, Some(r))).collect()
        }
        Order::Newest => conn
            .query(
                "SELECT DISTINCT newest.memory_id FROM unnest(string_to_array(?1, ' ')) AS q (term)
                 CROSS JOIN LATERAL (
                     SELECT memory_id FROM memory_postings AS p WHERE p.term = q.term
                     ORDER BY memory_id DESC LIMIT ?2
                 ) AS newest
                 ORDER BY newest.memory_id DESC LIMIT ?2",
                args![phrases.join(" "), candidates],
            )?
            .iter()
            .map(|row| Ok((row.get(0)?, None)))
            .collect::<Result<_, DbError>>()?,
    };
    if ranked.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<String> = ranked.iter().map(|(id, _)| id.to_string()).collect();
    let mut memories: HashMap<i64, Memory> = HashMap::new();
    for row in conn.query(
        &format!(
            "SELECT {COLUMNS} FROM memories
             WHERE id = ANY (CAST(string_to_array(?1, ',') AS BIGINT[])) AND workspace = ?2"
        ),
        args![ids.join(","), workspace],
    )? {
        let m = memory(&row)?;
        memories.insert(m.id, m);
    }
    Ok(ranked
        .into_iter()
        .filter_map(|(id, relevance)| Some((memories.remove(&id)?, relevance)))
        .collect())
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

/// The workspace's newest memories holding `query` literally, newest first.
/// SQLite's LIKE ignores the case of ASCII letters (only those); on
/// PostgreSQL the text's ASCII letters are folded and the pattern is
/// lowercase, which is the same match.
fn by_substring(
    conn: &mut dyn Conn,
    workspace: &str,
    query: &str,
) -> Result<Vec<Recalled>, MemoryError> {
    let text = match conn.dialect() {
        Dialect::Sqlite => "text",
        Dialect::Postgres => {
            "translate(text, 'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz')"
        }
    };
    let now = now_ms();
    conn.query(
        &format!(
            "SELECT {COLUMNS} FROM (
                 SELECT * FROM memories WHERE workspace = ?1 ORDER BY id DESC LIMIT ?4
             ) AS recent WHERE {text} LIKE ?2 ESCAPE '\\' ORDER BY id DESC LIMIT ?3"
        ),
        args![
            workspace,
            like_pattern(query).to_ascii_lowercase(),
            MAX_SUBSTRING_CANDIDATES,
            SUBSTRING_SCAN_ROWS
        ],
    )?
    .iter()
    .map(|row| Ok(recalled(memory(row)?, 1.0, now, MatchKind::Substring)))
    .collect()
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
