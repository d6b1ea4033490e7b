//! The ranking, in one place.
//!
//! A query is answered from two ranked lists of index matches, each ordered
//! by FTS5's BM25: the query's words ([`super::segment::terms`]) and their
//! variants ([`super::segment::variants`]: English stems, Chinese characters
//! and pairs). The lists are fused by reciprocal rank:
//!
//! ```text
//! relevance = 1 / (K + rank_words) + VARIANT_WEIGHT / (K + rank_variants)
//! ```
//!
//! (a list a memory is not in adds nothing; equal BM25 shares a rank). The
//! share of the query's variants a memory holds (its *coverage*, 0 to 1)
//! then weighs in, strongly enough that holding more of the query usually
//! beats ranking higher on a few rare words (a distractor shares some words
//! of the query; the memory it paraphrases shares more of its stems):
//!
//! ```text
//! relevance = fused × (1 + COVERAGE_WEIGHT · coverage)
//! ```
//!
//! Then recency and use break ties, never more:
//!
//! ```text
//! score = relevance × (1 + TIE · (0.5 · 2^(−age_days / 30) + 0.25 · ln(1 + use_count)))
//! ```
//!
//! - `age_days` runs from the memory's last use, or its creation if never
//!   used;
//! - `TIE` is small enough (0.1 % per unit) that a memory one rank lower in
//!   a list is not lifted above a better match by being newer or used.
//!
//! Substring matches (the fallback) have relevance 1.
//!
//! With an embedding model ([`super::embed`]), that ranking by words and
//! the ranking by meaning (cosine similarity of the query's and the
//! memories' embeddings) are fused by reciprocal rank again ([`Hybrid`]):
//!
//! ```text
//! relevance = 1 / (k + rank_words) + meaning_weight / (k + rank_meaning)
//! ```
//!
//! A memory found by meaning alone joins only when its similarity is at
//! least `floor`: a query about something unrelated to every memory finds
//! nothing rather than its nearest strangers.

/// Reciprocal rank fusion's constant: how much the first ranks of a list
/// count more than the later ones.
pub const K: f64 = 10.0;
/// The variant list's weight against the word list's 1.
pub const VARIANT_WEIGHT: f64 = 1.0;
const TIE: f64 = 1e-3;
const RECENCY_WEIGHT: f64 = 0.5;
const HALF_LIFE_DAYS: f64 = 30.0;
const USE_WEIGHT: f64 = 0.25;
const DAY_MS: f64 = 86_400_000.0;

/// How much coverage counts against the fused ranks.
pub const COVERAGE_WEIGHT: f64 = 10.0;

/// The relevance of a memory at 1-based `word` and `variant` ranks that
/// holds the share `coverage` of the query's variants.
pub fn fuse(word: Option<usize>, variant: Option<usize>, coverage: f64) -> f64 {
    let part = |rank: Option<usize>| rank.map_or(0.0, |r| 1.0 / (K + r as f64));
    (part(word) + VARIANT_WEIGHT * part(variant)) * (1.0 + COVERAGE_WEIGHT * coverage)
}

/// How the ranking by words and the ranking by meaning are fused, chosen
/// on the labelled set's dev split (`cargo bench -p pincer --bench memory
/// -- --tune`): the embedding model's ranking was the better one on every
/// kind of query, so it weighs five times the words' and a small `k` lets
/// its first ranks count; the words then order what the model finds
/// alike and add what it misses.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hybrid {
    /// Reciprocal rank fusion's constant.
    pub k: f64,
    /// The meaning list's weight against the word list's 1.
    pub meaning_weight: f64,
    /// The least similarity of a memory found by meaning alone: the highest
    /// that loses no relevant memory of the dev split. It keeps out what is
    /// unrelated to every memory; it cannot tell a near miss from an answer
    /// (the model's similarities of both overlap).
    pub floor: f32,
}

impl Hybrid {
    pub const DEFAULT: Hybrid = Hybrid {
        k: 2.0,
        meaning_weight: 5.0,
        floor: 0.78,
    };

    /// The relevance of a memory at 1-based ranks by words and by meaning.
    pub fn fuse(&self, words: Option<usize>, meaning: Option<usize>) -> f64 {
        let part = |rank: Option<usize>| rank.map_or(0.0, |r| 1.0 / (self.k + r as f64));
        part(words) + self.meaning_weight * part(meaning)
    }

    /// Whether a memory found by meaning alone, at `similarity`, joins the
    /// results.
    pub fn admits(&self, similarity: f32) -> bool {
        similarity >= self.floor
    }
}

pub fn score(
    relevance: f64,
    now_ms: i64,
    created_ms: i64,
    last_used_ms: Option<i64>,
    use_count: u64,
) -> f64 {
    let touched = last_used_ms.map_or(created_ms, |used| used.max(created_ms));
    let age_days = (now_ms.saturating_sub(touched)).max(0) as f64 / DAY_MS;
    let recency = (-age_days / HALF_LIFE_DAYS).exp2();
    let uses = (use_count as f64).ln_1p();
    relevance * (1.0 + TIE * (RECENCY_WEIGHT * recency + USE_WEIGHT * uses))
}

#[cfg(test)]
mod tests {
    use super::{fuse, score};

    const DAY: i64 = 86_400_000;

    #[test]
    fn recent_and_used_memories_score_higher_at_equal_relevance() {
        let now = 100 * DAY;
        assert!(score(2.0, now, now, None, 0) > score(2.0, now, now - 60 * DAY, None, 0));
        assert!(
            score(2.0, now, now - 60 * DAY, Some(now), 0)
                > score(2.0, now, now - 60 * DAY, None, 0)
        );
        assert!(score(2.0, now, now, None, 5) > score(2.0, now, now, None, 0));
        assert!((score(1.0, now, now, None, 0) - 1.0005).abs() < 1e-9);
    }

    #[test]
    fn recency_and_use_never_outrank_one_rank_of_relevance() {
        let now = 100 * DAY;
        for coverage in [0.0, 0.5, 1.0] {
            for rank in 1..50 {
                let better = fuse(Some(rank), None, coverage);
                let worse = fuse(Some(rank + 1), None, coverage);
                assert!(
                    score(better, now, now - 365 * DAY, None, 0)
                        > score(worse, now, now, None, 100)
                );
            }
        }
        assert!(fuse(Some(3), Some(3), 0.0) > fuse(Some(1), None, 0.0));
    }

    #[test]
    fn meaning_leads_and_words_order_what_it_finds_alike() {
        let h = super::Hybrid::DEFAULT;
        // First by meaning alone beats first by words alone.
        assert!(h.fuse(None, Some(1)) > h.fuse(Some(1), None));
        // At neighbouring meaning ranks, being in the word list decides.
        assert!(h.fuse(Some(1), Some(3)) > h.fuse(None, Some(2)));
        assert!(h.admits(h.floor) && !h.admits(h.floor - 0.01));
    }

    #[test]
    fn holding_more_of_the_query_beats_a_higher_rank_on_fewer_of_its_words() {
        // A distractor first in both lists on one rare word of three, the
        // paraphrased memory fifth in both holding all three.
        assert!(fuse(Some(5), Some(5), 1.0) > fuse(Some(1), Some(1), 1.0 / 3.0));
        // At equal coverage the ranks decide.
        assert!(fuse(Some(1), Some(2), 0.5) > fuse(Some(2), Some(2), 0.5));
    }
}
