//! Turning text into index terms: jieba-rs search-mode segmentation (so a
//! Chinese word and its shorter parts are both terms), lowercased, split at
//! ASCII punctuation and whitespace, without pure punctuation and without a
//! few stop words that would otherwise match most rows.
//!
//! Documents and queries go through the same function, and every term it
//! returns is a run of ASCII letters/digits and non-ASCII characters — exactly
//! one token for FTS5's `ascii` tokenizer, and safe inside a quoted phrase.

use std::sync::OnceLock;

use jieba_rs::Jieba;

static JIEBA: OnceLock<Jieba> = OnceLock::new();

/// The segmenter, its dictionary loaded on first use (~100-160 ms) and kept
/// for the life of the process.
pub fn jieba() -> &'static Jieba {
    JIEBA.get_or_init(Jieba::new)
}

/// Function words that carry no meaning for recall. Kept short on purpose:
/// BM25 already discounts common terms; these are the ones so common that
/// scoring their posting lists would cost more than they help.
const STOP_WORDS: &[&str] = &[
    // Chinese
    "的", "了", "是", "在", "和", "与", "及", "或", "也", "都", "就", "而", "着", "把", "被", "吗",
    "呢", "吧", "啊", "之", "个", "这", "那", "我", "你", "他", "她", "它", "们", "我们", "你们",
    "他们", "一个", "有", "要", "会", "对", "很", // English
    "a", "an", "the", "of", "to", "in", "on", "at", "for", "and", "or", "is", "are", "was", "were",
    "be", "been", "it", "its", "this", "that", "with", "as", "by", "from", "i", "you", "he", "she",
    "we", "they", "my", "your", "me", "do", "does", "did", "s",
];

fn is_stop_word(term: &str) -> bool {
    STOP_WORDS.contains(&term)
}

fn splits_terms(c: char) -> bool {
    c.is_whitespace() || (c.is_ascii() && !c.is_ascii_alphanumeric())
}

/// The index terms of `text`, in order, repeats kept (they count for BM25).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for token in jieba().cut_for_search(text, true) {
        for part in token.word.split(splits_terms) {
            if !part.chars().any(char::is_alphanumeric) {
                continue;
            }
            let term = part.to_lowercase();
            if !is_stop_word(&term) {
                out.push(term);
            }
        }
    }
    out
}

/// The distinct terms of a query, first occurrence first, at most `max`.
pub fn query_terms(query: &str, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for term in terms(query) {
        if out.len() == max {
            break;
        }
        if !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_english_and_mixed_text_become_lowercase_terms() {
        let t = terms("用户喜欢靠窗的座位");
        assert!(t.contains(&"座位".to_string()), "{t:?}");
        assert!(!t.contains(&"的".to_string()), "{t:?}");
        let english = terms("The USER prefers Dark-Mode!");
        for expected in ["user", "prefers", "dark", "mode"] {
            assert!(english.contains(&expected.to_string()), "{english:?}");
        }
        assert!(
            !english.iter().any(|t| t == "the" || t.contains('-')),
            "{english:?}"
        );
        let mixed = terms("部署用Docker，端口8080");
        for expected in ["部署", "docker", "端口", "8080"] {
            assert!(mixed.contains(&expected.to_string()), "{mixed:?}");
        }
    }

    #[test]
    fn punctuation_and_fts5_syntax_never_survive_into_terms() {
        for t in terms(r#"" AND * NEAR( - : ^ ) OR "x"。，！？ "#) {
            assert!(
                t.chars().all(|c| c.is_alphanumeric() || !c.is_ascii()),
                "{t:?}"
            );
        }
        assert!(terms("。，！？ ... ---").is_empty());
    }

    #[test]
    fn query_terms_are_distinct_and_capped() {
        assert_eq!(query_terms("tea tea TEA coffee", 10), ["tea", "coffee"]);
        assert_eq!(query_terms("one two three four", 2), ["one", "two"]);
    }
}
