//! The lexical index where there is no FTS5 (PostgreSQL): the postings FTS5
//! keeps for `memory_index`, in tables the store writes itself, and FTS5's
//! own `bm25()` computed over them here, so a query ranks the same on every
//! backend.
//!
//! What FTS5 stores and computes (SQLite's `fts5_tokenize.c`, the `ascii`
//! tokenizer, and `fts5_aux.c`, `fts5Bm25Function`):
//!
//! - a token is a run of ASCII letters and digits and non-ASCII bytes,
//!   ASCII letters folded to lower case; everything else separates tokens
//!   ([`tokens`]). A row's length is its number of tokens, repeats counted;
//! - N is the number of rows in the whole table (every workspace), avgdl
//!   the total length of all rows over N, both kept exact across inserts
//!   and deletes (`contentless_delete` subtracts a deleted row's length);
//! - a quoted query term is one phrase; n(q) is the number of rows holding
//!   it and f(q, D) its occurrences in row D;
//! - `bm25 = −Σ_q IDF(q) · f(q,D)·(k1+1) / (f(q,D) + k1·(1 − b + b·|D|/avgdl))`
//!   over the query's phrases in order, with k1 = 1.2, b = 0.75 and
//!   `IDF(q) = ln((N − n(q) + 0.5) / (n(q) + 0.5))`, 10⁻⁶ when that is not
//!   positive. The store ranks by `−bm25`, [`relevance`].
//!
//! The arithmetic below is FTS5's, operation for operation, so the two
//! backends agree to the last bit, not only in order.

use std::collections::HashMap;

/// FTS5's `bm25()` constants.
const K1: f64 = 1.2;
const B: f64 = 0.75;
/// The least IDF FTS5 gives a phrase (one in more than half the rows).
const MIN_IDF: f64 = 1e-6;

/// The tokens FTS5's `ascii` tokenizer makes of `text`, in order.
pub fn tokens(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_ascii() && !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase)
        .collect()
}

/// The token a quoted query `term` is to FTS5. Index terms are single
/// tokens ([`super::segment`] splits at everything the tokenizer would), so
/// folding is all the tokenizer does to them.
pub fn phrase(term: &str) -> String {
    term.to_ascii_lowercase()
}

/// The index-wide numbers BM25 needs: rows (memories indexed, in every
/// workspace) and their total length in tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    pub rows: i64,
    pub tokens: i64,
}

/// One row of `memory_postings` with its memory's length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Posting {
    pub term: String,
    pub memory: i64,
    /// Occurrences of the term in the memory's index text.
    pub count: i64,
    /// The memory's index text in tokens.
    pub length: i64,
}

/// `−bm25(memory_index)` of every memory holding one of `phrases` (the
/// query's terms in the order the match expression lists them), given all
/// the postings of those phrases.
pub fn relevance(phrases: &[String], postings: &[Posting], totals: Totals) -> Vec<(i64, f64)> {
    let mut hits: HashMap<&str, i64> = HashMap::new();
    let mut memories: HashMap<i64, (i64, HashMap<&str, i64>)> = HashMap::new();
    for p in postings {
        *hits.entry(p.term.as_str()).or_default() += 1;
        memories
            .entry(p.memory)
            .or_insert_with(|| (p.length, HashMap::new()))
            .1
            .insert(p.term.as_str(), p.count);
    }
    let avgdl = totals.tokens as f64 / totals.rows as f64;
    let idf: Vec<f64> = phrases
        .iter()
        .map(|phrase| {
            let n = hits.get(phrase.as_str()).copied().unwrap_or(0);
            let idf = (((totals.rows - n) as f64 + 0.5) / (n as f64 + 0.5)).ln();
            if idf <= 0.0 { MIN_IDF } else { idf }
        })
        .collect();
    let mut out: Vec<(i64, f64)> = memories
        .into_iter()
        .map(|(memory, (length, counts))| {
            let d = length as f64;
            let mut score = 0.0;
            for (phrase, idf) in phrases.iter().zip(&idf) {
                let f = counts.get(phrase.as_str()).copied().unwrap_or(0) as f64;
                score += idf * ((f * (K1 + 1.0)) / (f + K1 * (1.0 - B + B * d / avgdl)));
            }
            // bm25() is −score; the store ranks by −bm25().
            (memory, score)
        })
        .collect();
    out.sort_by_key(|m| m.0);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_the_ascii_tokenizers() {
        assert_eq!(
            tokens("6d61696exGitHub  6d61696ey部署-x_y 8080,é"),
            ["6d61696exgithub", "6d61696ey部署", "x", "y", "8080", "é"]
        );
        assert!(tokens(" ,.;").is_empty());
    }

    #[test]
    fn every_index_term_is_one_token() {
        for term in super::super::segment::terms(
            "Deploys go through GitHub-Actions, 部署用Docker；端口 8080 ×2 naïve",
        )
        .into_iter()
        .chain(super::super::segment::variants(
            "Meetings need approval 报警 naïve",
        )) {
            let prefixed = super::super::query::index_term("main", &term);
            assert_eq!(tokens(&prefixed), [phrase(&prefixed)], "{term:?}");
        }
    }

    #[test]
    fn bm25_by_hand() {
        // Two rows: "a a b" and "b c"; query a OR c.
        let postings = [
            Posting {
                term: "a".into(),
                memory: 1,
                count: 2,
                length: 3,
            },
            Posting {
                term: "c".into(),
                memory: 2,
                count: 1,
                length: 2,
            },
        ];
        let totals = Totals { rows: 2, tokens: 5 };
        let got = relevance(&["a".into(), "c".into()], &postings, totals);
        // Each phrase is in half the rows: ln(1.5 / 1.5) = 0, so 1e-6.
        let avgdl = 2.5;
        let expect = |f: f64, d: f64| 1e-6 * ((f * 2.2) / (f + 1.2 * (0.25 + 0.75 * d / avgdl)));
        assert_eq!(got, [(1, expect(2.0, 3.0)), (2, expect(1.0, 2.0))]);
    }

    /// The same rows in a real FTS5 table (as the store declares it), one
    /// deleted again: its bm25() and [`relevance`] over [`tokens`] agree
    /// to the bit.
    #[test]
    fn bm25_is_fts5s_to_the_bit() {
        let db = rusqlite::Connection::open_in_memory().unwrap();
        db.execute_batch(
            "CREATE VIRTUAL TABLE ix USING fts5 (
                 terms, content = '', contentless_delete = 1, tokenize = 'ascii')",
        )
        .unwrap();
        let rows = [
            "wxtea wxtea wxgreen wyte",
            "wxtea wxjasmine wxGreen,wxgreen",
            "wxcoffee wxmilk wxmilk wxmilk wxsugar wxtea",
            "wx咖啡 wy咖 wy啡 wy咖啡 wxmilk",
            "wxnothing wxelse wxhere at all",
            "",
        ];
        for (id, text) in rows.iter().enumerate() {
            db.execute(
                "INSERT INTO ix (rowid, terms) VALUES (?1, ?2)",
                rusqlite::params![id as i64 + 1, text],
            )
            .unwrap();
        }
        db.execute("DELETE FROM ix WHERE rowid = 5", []).unwrap();
        let kept: Vec<(i64, &str)> = (1..).zip(rows).filter(|(id, _)| *id != 5).collect();
        let totals = Totals {
            rows: kept.len() as i64,
            tokens: kept.iter().map(|(_, t)| tokens(t).len() as i64).sum(),
        };
        for query in [
            vec!["wxtea"],
            vec!["wxgreen", "wxmilk"],
            vec!["wxmilk", "wx咖啡", "wxsugar", "wxmissing"],
            vec!["wy咖", "wxtea", "wxjasmine"],
        ] {
            let phrases: Vec<String> = query.iter().map(|t| phrase(t)).collect();
            let postings: Vec<Posting> = kept
                .iter()
                .flat_map(|(id, text)| {
                    let all = tokens(text);
                    let mut seen: Vec<String> = Vec::new();
                    all.iter()
                        .filter(|t| {
                            let new = !seen.contains(t);
                            seen.push((*t).clone());
                            new && phrases.contains(t)
                        })
                        .map(|t| Posting {
                            term: t.clone(),
                            memory: *id,
                            count: all.iter().filter(|u| *u == t).count() as i64,
                            length: all.len() as i64,
                        })
                        .collect::<Vec<_>>()
                })
                .collect();
            let expression = phrases
                .iter()
                .map(|p| format!("\"{p}\""))
                .collect::<Vec<_>>()
                .join(" OR ");
            let fts5: Vec<(i64, f64)> = db
                .prepare("SELECT rowid, -bm25(ix) FROM ix WHERE ix MATCH ?1 ORDER BY rowid")
                .unwrap()
                .query_map([&expression], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            let ours = relevance(&phrases, &postings, totals);
            assert!(!fts5.is_empty());
            assert_eq!(
                ours.iter()
                    .map(|m| (m.0, m.1.to_bits()))
                    .collect::<Vec<_>>(),
                fts5.iter()
                    .map(|m| (m.0, m.1.to_bits()))
                    .collect::<Vec<_>>(),
                "{expression}: {ours:?} {fts5:?}"
            );
        }
    }
}
