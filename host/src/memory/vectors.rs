//! The memory vectors: stored in `memory_vectors` next to the text, tagged
//! with the model that made them, and held in memory per workspace for an
//! exact brute-force search (see `docs/memory.md` for the sizes it suits).
//!
//! A generation number in `memory_meta` changes with every write to the
//! vectors, by any connection or process; a search reads it (one row) and
//! reloads a workspace's vectors only when it moved.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::MemoryError;
use super::embed::Vector;
use crate::args;
use crate::db::{Conn, DbError};

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS memory_vectors (
    id INTEGER PRIMARY KEY REFERENCES memories (id) ON DELETE CASCADE,
    workspace TEXT NOT NULL,
    vector BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS memory_vectors_by_workspace ON memory_vectors (workspace, id);
-- The model every row of memory_vectors was made by (one row).
CREATE TABLE IF NOT EXISTS memory_vector_model (
    one INTEGER PRIMARY KEY CHECK (one = 1),
    model TEXT NOT NULL
);
";

/// `memories.embedded`: 1 once `memory_vectors` holds the memory's vector.
/// Rows written by older releases (or while the model was absent) get 0.
pub const EMBEDDED_COLUMN: (&str, &str) = ("embedded", "INTEGER NOT NULL DEFAULT 0");
/// Finds the memories still lacking a vector without reading the others.
pub const UNEMBEDDED_INDEX: &str = "CREATE INDEX IF NOT EXISTS memories_unembedded
    ON memories (workspace, id) WHERE embedded = 0";

/// The model the stored vectors were made by, if any.
pub fn stored_model(conn: &mut dyn Conn) -> Result<Option<String>, DbError> {
    match conn.query_opt("SELECT model FROM memory_vector_model", args![])? {
        Some(row) => row.get(0),
        None => Ok(None),
    }
}

/// Makes the stored vectors `model`'s: vectors of another model are
/// dropped (and their memories marked for embedding again).
pub fn adopt_model(conn: &mut dyn Conn, model: &str) -> Result<(), DbError> {
    let stored = stored_model(conn)?;
    if stored.as_deref() == Some(model) {
        return Ok(());
    }
    conn.execute("DELETE FROM memory_vectors", args![])?;
    conn.execute(
        "UPDATE memories SET embedded = 0 WHERE embedded = 1",
        args![],
    )?;
    conn.execute(
        "INSERT INTO memory_vector_model (one, model) VALUES (1, ?1)
         ON CONFLICT (one) DO UPDATE SET model = excluded.model",
        args![model],
    )?;
    bump_generation(conn)?;
    if let Some(old) = stored {
        tracing::info!("memory: the embedding model changed ({old} → {model}); re-embedding");
    }
    Ok(())
}

pub fn generation(conn: &mut dyn Conn) -> Result<i64, DbError> {
    match conn.query_opt(
        "SELECT value FROM memory_meta WHERE key = 'vector_generation'",
        args![],
    )? {
        Some(row) => row.get(0),
        None => Ok(0),
    }
}

/// Marks a change to the vectors; returns the new generation.
pub fn bump_generation(conn: &mut dyn Conn) -> Result<i64, DbError> {
    conn.query_one(
        "INSERT INTO memory_meta (key, value) VALUES ('vector_generation', 1)
         ON CONFLICT (key) DO UPDATE SET value = memory_meta.value + 1 RETURNING value",
        args![],
    )?
    .get(0)
}

/// Stores memory `id`'s vector, unless the memory was deleted meanwhile.
pub fn store(
    conn: &mut dyn Conn,
    id: i64,
    workspace: &str,
    vector: &Vector,
) -> Result<bool, DbError> {
    // Marking the memory first says whether it is still there.
    let marked = conn.execute("UPDATE memories SET embedded = 1 WHERE id = ?1", args![id])?;
    if marked == 0 {
        return Ok(false);
    }
    conn.execute(
        "INSERT INTO memory_vectors (id, workspace, vector) VALUES (?1, ?2, ?3)
         ON CONFLICT (id) DO UPDATE SET workspace = excluded.workspace, vector = excluded.vector",
        args![id, workspace, vector.to_bytes()],
    )?;
    Ok(true)
}

/// Up to `limit` memories of `workspace` (all workspaces if `None`) that
/// have no vector yet, oldest first: `(id, workspace, text)`.
pub fn unembedded(
    conn: &mut dyn Conn,
    workspace: Option<&str>,
    limit: usize,
) -> Result<Vec<(i64, String, String)>, DbError> {
    let rows = match workspace {
        Some(ws) => conn.query(
            "SELECT id, workspace, text FROM memories
             WHERE workspace = ?1 AND embedded = 0 ORDER BY id LIMIT ?2",
            args![ws, limit],
        )?,
        None => conn.query(
            "SELECT id, workspace, text FROM memories
             WHERE embedded = 0 ORDER BY id LIMIT ?1",
            args![limit],
        )?,
    };
    rows.iter()
        .map(|r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .collect()
}

/// How many memories of `workspace` (or all) have no vector yet.
pub fn unembedded_count(conn: &mut dyn Conn, workspace: Option<&str>) -> Result<u64, DbError> {
    let n: i64 = match workspace {
        Some(ws) => conn.query_one(
            "SELECT count(*) FROM memories WHERE workspace = ?1 AND embedded = 0",
            args![ws],
        )?,
        None => conn.query_one("SELECT count(*) FROM memories WHERE embedded = 0", args![])?,
    }
    .get(0)?;
    Ok(n.max(0) as u64)
}

/// One workspace's vectors, flat.
#[derive(Debug, Default, Clone)]
pub struct Loaded {
    generation: i64,
    dim: usize,
    ids: Vec<i64>,
    scales: Vec<f32>,
    values: Vec<i8>,
}

impl Loaded {
    fn load(
        conn: &mut dyn Conn,
        workspace: &str,
        generation: i64,
        dim: usize,
    ) -> Result<Loaded, MemoryError> {
        let mut loaded = Loaded {
            generation,
            dim,
            ..Loaded::default()
        };
        let rows = conn.query(
            "SELECT id, vector FROM memory_vectors WHERE workspace = ?1 ORDER BY id",
            args![workspace],
        )?;
        let mut skipped = 0usize;
        for row in &rows {
            let id: i64 = row.get(0)?;
            let bytes: Vec<u8> = row.get(1).unwrap_or_default();
            match Vector::from_bytes(&bytes, dim) {
                Some(v) => loaded.push(id, &v),
                None => skipped += 1,
            }
        }
        if skipped > 0 {
            tracing::warn!(
                "memory: {skipped} stored vector(s) of {workspace} are unreadable; they rank by words only"
            );
        }
        Ok(loaded)
    }

    fn push(&mut self, id: i64, v: &Vector) {
        self.ids.push(id);
        self.scales.push(v.scale);
        self.values.extend_from_slice(&v.values);
    }

    /// The `n` memories most similar to `query`, best first:
    /// `(id, similarity)`. Large workspaces are scanned on every core.
    pub fn nearest(&self, query: &Vector, n: usize) -> Vec<(i64, f32)> {
        if self.dim == 0 || query.values.len() != self.dim || n == 0 {
            return Vec::new();
        }
        let rows = self.ids.len();
        let parts = if rows >= PARALLEL_FROM {
            std::thread::available_parallelism().map_or(1, usize::from)
        } else {
            1
        };
        let per_part = rows.div_ceil(parts).max(1);
        // The first part is scanned on this thread, the others beside it.
        let mut best = std::thread::scope(|scope| {
            let others: Vec<_> = (per_part..rows)
                .step_by(per_part)
                .map(|start| {
                    let rows = start..(start + per_part).min(rows);
                    scope.spawn(move || self.best_of(query, rows, n))
                })
                .collect();
            let mut best = self.best_of(query, 0..per_part.min(rows), n);
            for scan in others {
                // A part's panic is this scan's, as on this thread.
                best.extend(scan.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
            }
            best
        });
        keep_best(&mut best, n);
        best.sort_unstable_by(best_first);
        best
    }

    /// The best `n` of `rows`, unordered.
    fn best_of(&self, query: &Vector, rows: std::ops::Range<usize>, n: usize) -> Vec<(i64, f32)> {
        let values = &self.values[rows.start * self.dim..rows.end * self.dim];
        let mut scores = vec![0i32; rows.len()];
        dot_all(&query.values, values, &mut scores);
        let mut all: Vec<(i64, f32)> = scores
            .iter()
            .zip(&self.scales[rows.clone()])
            .zip(&self.ids[rows])
            .map(|((dot, scale), id)| (*id, *dot as f32 * query.scale * scale))
            .collect();
        keep_best(&mut all, n);
        all
    }
}

/// Below this many vectors one thread scans faster than starting others.
const PARALLEL_FROM: usize = 16_384;

fn best_first(a: &(i64, f32), b: &(i64, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then(b.0.cmp(&a.0))
}

/// `all` cut to its best `n`, in no order.
fn keep_best(all: &mut Vec<(i64, f32)>, n: usize) {
    if all.len() > n {
        all.select_nth_unstable_by(n - 1, best_first);
        all.truncate(n);
    }
}

/// `out[i]` = the dot product of `query` with the `i`th row of `rows`.
fn dot_all(query: &[i8], rows: &[i8], out: &mut [i32]) {
    #[cfg(target_arch = "x86_64")]
    if query.len().is_multiple_of(64) && pincer_infer::has_avx512_vnni() {
        // SAFETY: the CPU has the features; rows of whole 64-byte chunks.
        return unsafe { dot_all_vnni(query, rows, out) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { dot_all_avx2(query, rows, out) };
    }
    dot_all_portable(query, rows, out);
}

/// [`dot_all_portable`] compiled for AVX2: 16 products a step instead of 8.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn dot_all_avx2(query: &[i8], rows: &[i8], out: &mut [i32]) {
    dot_all_portable(query, rows, out);
}

/// [`dot_all_portable`] with AVX-512 VNNI, 64 products an instruction, for
/// `query.len()` a multiple of 64. `vpdpbusd` multiplies unsigned bytes by
/// signed ones, so each row byte is moved up by 128 (`r ^ 0x80` = `r + 128`
/// as unsigned), which adds 128 · Σ query to every dot product, taken off
/// again: the same exact integers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
unsafe fn dot_all_vnni(query: &[i8], rows: &[i8], out: &mut [i32]) {
    use std::arch::x86_64::*;
    let dim = query.len();
    let moved: i32 = 128 * query.iter().map(|q| i32::from(*q)).sum::<i32>();
    let flip = _mm512_set1_epi8(i8::MIN);
    for (row, out) in rows.chunks_exact(dim).zip(out) {
        let mut acc = _mm512_setzero_si512();
        for (r, q) in row.chunks_exact(64).zip(query.chunks_exact(64)) {
            // SAFETY: 64-byte loads of 64-byte chunks.
            let (r, q) = unsafe {
                (
                    _mm512_loadu_si512(r.as_ptr().cast()),
                    _mm512_loadu_si512(q.as_ptr().cast()),
                )
            };
            acc = _mm512_dpbusd_epi32(acc, _mm512_xor_si512(r, flip), q);
        }
        *out = _mm512_reduce_add_epi32(acc) - moved;
    }
}

#[inline(always)]
fn dot_all_portable(query: &[i8], rows: &[i8], out: &mut [i32]) {
    for (row, out) in rows.chunks_exact(query.len()).zip(out) {
        *out = super::embed::dot(query, row);
    }
}

/// The loaded workspaces.
#[derive(Default)]
pub struct Cache {
    by_workspace: Mutex<HashMap<String, Arc<Loaded>>>,
}

impl Cache {
    /// `workspace`'s vectors as of the database's current generation.
    pub fn get(
        &self,
        conn: &mut dyn Conn,
        workspace: &str,
        dim: usize,
    ) -> Result<Arc<Loaded>, MemoryError> {
        let current = generation(conn)?;
        let mut map = self
            .by_workspace
            .lock()
            .map_err(|_| MemoryError::Poisoned)?;
        if let Some(loaded) = map.get(workspace)
            && loaded.generation == current
            && loaded.dim == dim
        {
            return Ok(loaded.clone());
        }
        let loaded = Arc::new(Loaded::load(conn, workspace, current, dim)?);
        map.insert(workspace.to_owned(), loaded.clone());
        Ok(loaded)
    }

    /// Our own write moved the generation from `before` to `after`, adding
    /// `added`: applied in place when the cache held `before`, else the
    /// next search reloads.
    pub fn added(&self, workspace: &str, before: i64, after: i64, added: &[(i64, Vector)]) {
        let Ok(mut map) = self.by_workspace.lock() else {
            return;
        };
        let Some(loaded) = map.get_mut(workspace) else {
            return;
        };
        if loaded.generation != before {
            return;
        }
        let loaded = Arc::make_mut(loaded);
        for (id, v) in added {
            if v.values.len() == loaded.dim {
                loaded.push(*id, v);
            }
        }
        loaded.generation = after;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The next state of a fixed pseudo-random sequence (an LCG).
    fn next(state: &mut u64) -> u64 {
        *state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        *state
    }

    /// Unit vectors from a fixed pseudo-random sequence.
    fn vectors(n: usize, dim: usize, seed: u64) -> Vec<Vector> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                let v: Vec<f32> = (0..dim)
                    .map(|_| (next(&mut state) >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
                    .collect();
                let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
                Vector::quantize(&v.iter().map(|x| x / norm).collect::<Vec<_>>())
            })
            .collect()
    }

    #[test]
    fn every_dot_product_kernel_gives_the_portable_integers() {
        let dim = 384;
        let mut state = 7u64;
        let mut byte = || (next(&mut state) >> 56) as u8 as i8;
        let mut query: Vec<i8> = (0..dim).map(|_| byte()).collect();
        let mut rows: Vec<i8> = (0..dim * 50).map(|_| byte()).collect();
        // The extremes, where a widening or a bias would overflow first.
        query[..64].fill(i8::MIN);
        rows[..dim].fill(i8::MIN);
        rows[dim..2 * dim].fill(i8::MAX);
        let mut portable = vec![0; 50];
        dot_all_portable(&query, &rows, &mut portable);
        let mut dispatched = vec![0; 50];
        dot_all(&query, &rows, &mut dispatched);
        assert_eq!(dispatched, portable);
        #[cfg(target_arch = "x86_64")]
        if pincer_infer::has_avx512_vnni() {
            let mut vnni = vec![0; 50];
            // SAFETY: the features were detected.
            unsafe { dot_all_vnni(&query, &rows, &mut vnni) };
            assert_eq!(vnni, portable);
        }
        // A length no 64-byte kernel takes goes the other way, same answer.
        let (query, rows) = (&query[..100], &rows[..100 * 3]);
        let (mut a, mut b) = (vec![0; 3], vec![0; 3]);
        dot_all_portable(query, rows, &mut a);
        dot_all(query, rows, &mut b);
        assert_eq!(a, b);
    }

    #[test]
    fn a_scan_split_across_threads_ranks_as_one_pass_over_every_vector() {
        let dim = 384;
        let empty = Loaded {
            dim,
            ..Loaded::default()
        };
        assert!(empty.nearest(&vectors(1, dim, 1)[0], 5).is_empty());
        for rows in [1, 31, PARALLEL_FROM - 1, PARALLEL_FROM * 2 + 7] {
            let mut loaded = Loaded {
                dim,
                ..Loaded::default()
            };
            let stored = vectors(rows, dim, rows as u64);
            for (i, v) in stored.iter().enumerate() {
                loaded.push(i as i64 * 3, v);
            }
            // Copies of one vector tie: the newer (higher id) ranks first.
            loaded.push(rows as i64 * 3, &stored[0]);
            let query = &vectors(1, dim, 99)[0];
            let mut expected: Vec<(i64, f32)> = loaded
                .ids
                .iter()
                .enumerate()
                .map(|(i, id)| {
                    let row = &loaded.values[i * dim..(i + 1) * dim];
                    (*id, query.similarity(row, loaded.scales[i]))
                })
                .collect();
            expected.sort_by(best_first);
            for n in [1, 5, 32] {
                let want: Vec<_> = expected.iter().take(n).copied().collect();
                assert_eq!(loaded.nearest(query, n), want, "{rows} rows, n = {n}");
            }
            let own = loaded.nearest(&stored[0], 2);
            assert_eq!(
                own.iter().map(|r| r.0).collect::<Vec<_>>(),
                [rows as i64 * 3, 0],
                "{rows} rows"
            );
        }
    }
}
