//! The ranking formula, in one place:
//!
//! ```text
//! score = relevance × (1 + 0.5 · 2^(−age_days / 30) + 0.25 · ln(1 + use_count))
//! ```
//!
//! - `relevance` is FTS5's BM25 negated (higher is better) for index matches,
//!   and 1 for substring matches;
//! - `age_days` runs from the memory's last use, or its creation if never
//!   used: a memory touched today gets up to ×1.5, one idle for 30 days ×1.25;
//! - `use_count` grows the score logarithmically: 10 uses give +0.6.
//!
//! Relevance multiplies, so recency and use reorder comparable matches but
//! cannot lift a memory that does not match at all.

const RECENCY_WEIGHT: f64 = 0.5;
const HALF_LIFE_DAYS: f64 = 30.0;
const USE_WEIGHT: f64 = 0.25;
const DAY_MS: f64 = 86_400_000.0;

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
    relevance * (1.0 + RECENCY_WEIGHT * recency + USE_WEIGHT * uses)
}

#[cfg(test)]
mod tests {
    use super::score;

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
        assert!((score(1.0, now, now, None, 0) - 1.5).abs() < 1e-9);
        assert!((score(1.0, now, now - 30 * DAY, None, 0) - 1.25).abs() < 1e-9);
    }

    #[test]
    fn much_better_relevance_beats_recency() {
        let now = 100 * DAY;
        assert!(score(4.0, now, now - 365 * DAY, None, 0) > score(2.0, now, now, None, 0));
    }
}
