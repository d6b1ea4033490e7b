//! Long-term memory: facts, preferences and procedures per workspace, kept in
//! the host database and recalled by relevance, recency and use.
//!
//! Text is segmented with jieba-rs (Chinese, English and mixed) and the
//! resulting terms are stored in an FTS5 table with the plain `ascii`
//! tokenizer. We pre-segment rather than register a custom FTS5 tokenizer
//! through `fts5_tokenizer_v2`: no `unsafe` FFI, segmentation is ordinary Rust
//! that tests reach directly, and the database stays readable (and checkable)
//! by any SQLite — a connection that never registered a tokenizer can still
//! open, query and repair the table. The cost is that FTS5 never sees the
//! original text, which only snippets and highlighting would need.
//!
//! Queries are segmented the same way and become an OR of quoted terms
//! (ranked), so no user text is parsed as FTS5 syntax; a query the index
//! misses falls back to an escaped substring match over the workspace's
//! newest memories. Ranking: see [`rank`].
//!
//! On PostgreSQL, which has no FTS5, the store keeps the same postings in
//! tables of its own and computes FTS5's BM25 over them ([`postings`]): a
//! query ranks the same on either backend.

pub mod embed;
mod postings;
mod query;
pub mod rank;
pub mod segment;
mod store;
mod vectors;

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub use embed::Embedder;
pub use store::MemoryStore;

/// Longest memory text, in bytes after trimming.
pub const MAX_TEXT_BYTES: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryKind {
    Fact,
    Preference,
    Procedure,
}

impl MemoryKind {
    pub const ALL: [MemoryKind; 3] = [
        MemoryKind::Fact,
        MemoryKind::Preference,
        MemoryKind::Procedure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MemoryKind::Fact => "fact",
            MemoryKind::Preference => "preference",
            MemoryKind::Procedure => "procedure",
        }
    }
}

impl fmt::Display for MemoryKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MemoryKind {
    type Err = MemoryError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        MemoryKind::ALL
            .into_iter()
            .find(|k| k.as_str().eq_ignore_ascii_case(s.trim()))
            .ok_or_else(|| MemoryError::UnknownKind(s.to_string()))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Memory {
    pub id: i64,
    pub workspace: String,
    pub kind: MemoryKind,
    pub text: String,
    pub created_ms: i64,
    pub last_used_ms: Option<i64>,
    pub use_count: u64,
}

/// How a recalled memory was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchKind {
    /// Through the segmented full-text index.
    Index,
    /// By the query appearing literally in the text (the index had nothing).
    Substring,
    /// By meaning alone: the embedding model put it near the query.
    Meaning,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Recalled {
    pub memory: Memory,
    pub score: f64,
    pub matched_by: MatchKind,
    /// Why it ranked where it did ([`MemoryStore::explain`] fills the
    /// terms; ranks are always kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<Why>,
}

/// Where a memory stood in each ranked list ([`rank`]) and which of the
/// query's terms it holds.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Why {
    /// 1-based rank by words (the two lists below fused), when recall by
    /// meaning took part.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lexical_rank: Option<usize>,
    /// 1-based rank by meaning (the embedding model's similarity), if in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub vector_rank: Option<usize>,
    /// Cosine similarity of the memory's and the query's embeddings.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
    /// 1-based rank in the word list (BM25 over the query's words), if in it.
    pub word_rank: Option<usize>,
    /// 1-based rank in the variant list (stems, characters, pairs), if in it.
    pub variant_rank: Option<usize>,
    /// The share of the query's variants this memory holds (0 to 1).
    pub coverage: f64,
    /// The fused relevance (with meaning's when it took part), before
    /// recency and use break ties.
    pub relevance: f64,
    /// The query's words this memory holds.
    pub words: Vec<String>,
    /// The query's variants this memory holds.
    pub variants: Vec<String>,
}

/// The query as the index saw it, and the results with their [`Why`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explained {
    /// The query's words that were searched.
    pub words: Vec<String>,
    /// Its words held by so many memories that they were left out.
    pub common_words: Vec<String>,
    pub variants: Vec<String>,
    pub common_variants: Vec<String>,
    pub results: Vec<Recalled>,
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("a memory cannot be empty")]
    EmptyText,
    #[error("a memory can hold at most {max} bytes of text; this one has {len}", max = MAX_TEXT_BYTES)]
    TooLong { len: usize },
    #[error("the query is empty: say what to look for")]
    EmptyQuery,
    #[error("unknown memory kind `{0}`: use fact, preference or procedure")]
    UnknownKind(String),
    #[error("memory database {at}: {source}")]
    Open {
        at: String,
        #[source]
        source: crate::db::DbError,
    },
    #[error("memory database: {0}")]
    Db(#[from] crate::db::DbError),
    #[error("memory database is unusable: a thread panicked while holding it")]
    Poisoned,
    #[error("memory recall failed: {0}")]
    Task(String),
}

#[cfg(test)]
mod tests;
