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
use rust_stemmers::{Algorithm, Stemmer};

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

/// Words of a question that say what is asked, not what it is about: left
/// out of queries only (a memory never needs them to be found).
const QUERY_STOP_WORDS: &[&str] = &[
    // Chinese
    "什么",
    "怎么",
    "怎么样",
    "怎样",
    "谁",
    "哪",
    "哪里",
    "哪儿",
    "哪个",
    "哪些",
    "哪天",
    "多久",
    "多少",
    "多长",
    "几",
    "几点",
    "是否",
    "吗",
    "如何",
    "为什么",
    "要",
    "需要",
    "能",
    "可以",
    "该",
    "一般",
    "什么样",
    "时候", // English
    "what",
    "when",
    "where",
    "who",
    "whom",
    "whose",
    "which",
    "why",
    "how",
    "can",
    "could",
    "should",
    "would",
    "will",
    "shall",
    "may",
    "must",
    "need",
    "there",
    "any",
    "anyone",
    "much",
    "many",
    "often",
    "long",
    "get",
    "go",
    "our",
    "us",
    "so",
    "if",
    "about",
    "have",
    "has",
    "am",
];

fn is_query_stop_word(term: &str) -> bool {
    is_stop_word(term) || QUERY_STOP_WORDS.contains(&term)
}

/// The index terms of a query: [`terms`] without the question words.
fn query_words(query: &str) -> Vec<String> {
    terms(query)
        .into_iter()
        .filter(|t| !is_query_stop_word(t))
        .collect()
}

/// The distinct terms of a query, first occurrence first, at most `max`.
/// Question words (what, how, 什么, 谁 …) are left out, unless the query
/// has nothing else.
pub fn query_terms(query: &str, max: usize) -> Vec<String> {
    let mut words = query_words(query);
    if words.is_empty() {
        words = terms(query);
    }
    distinct(words, max)
}

fn distinct(terms: Vec<String>, max: usize) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for term in terms {
        if out.len() == max {
            break;
        }
        if !out.contains(&term) {
            out.push(term);
        }
    }
    out
}

static STEMMER: OnceLock<Stemmer> = OnceLock::new();

fn is_han(c: char) -> bool {
    matches!(c, '\u{3400}'..='\u{4dbf}' | '\u{4e00}'..='\u{9fff}' | '\u{f900}'..='\u{faff}')
}

/// Length of the truncated form a long Latin word adds to its stem.
const TRUNCATED_LEN: usize = 4;

/// The second list's terms of `text`: what matches when the words differ.
/// Each Latin word becomes its Snowball English stem (meetings → meet,
/// approval and approve → approv) and, when the stem is longer than four
/// letters, also its first four (allergy and allergic → alle), each run of Chinese characters its single
/// characters and the pairs of neighbours (报警 and 告警 share 警; 审核
/// and 审批 share 审). Repeats are kept, as in [`terms`].
pub fn variants(text: &str) -> Vec<String> {
    let stemmer = STEMMER.get_or_init(|| Stemmer::create(Algorithm::English));
    let mut out = Vec::new();
    let mut run: Vec<char> = Vec::new();
    let flush = |run: &mut Vec<char>, out: &mut Vec<String>| {
        for (i, c) in run.iter().enumerate() {
            out.push(c.to_string());
            if let Some(next) = run.get(i + 1) {
                out.push([*c, *next].iter().collect());
            }
        }
        run.clear();
    };
    let mut word = String::new();
    let end_word = |word: &mut String, out: &mut Vec<String>| {
        if word.len() >= 2 && !is_query_stop_word(word) {
            let stem = stemmer.stem(word).into_owned();
            // Truncation catches the derivations Snowball keeps apart
            // (allergy/allergic, specs/specifications); words are ASCII.
            let truncated = (stem.len() > TRUNCATED_LEN
                && word
                    .bytes()
                    .take(TRUNCATED_LEN)
                    .all(|b| b.is_ascii_alphabetic()))
            .then(|| word[..TRUNCATED_LEN].to_string());
            out.push(stem);
            out.extend(truncated);
        }
        word.clear();
    };
    for c in text.chars() {
        if is_han(c) {
            end_word(&mut word, &mut out);
            run.push(c);
        } else if c.is_ascii_alphanumeric() {
            flush(&mut run, &mut out);
            word.push(c.to_ascii_lowercase());
        } else {
            flush(&mut run, &mut out);
            end_word(&mut word, &mut out);
        }
    }
    flush(&mut run, &mut out);
    end_word(&mut word, &mut out);
    out
}

/// The distinct [`variants`] of a query without its stop and question words
/// (they split the query's Chinese runs), at most `max`.
pub fn query_variants(query: &str, max: usize) -> Vec<String> {
    let mut kept = String::new();
    for token in jieba().cut(query, true) {
        let word = token.word.to_lowercase();
        if is_query_stop_word(word.trim()) {
            kept.push(' ');
        } else {
            kept.push_str(token.word);
        }
    }
    distinct(variants(&kept), max)
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

    #[test]
    fn question_words_leave_queries_unless_nothing_else_is_left() {
        assert_eq!(
            query_terms("who approves expenses", 10),
            ["approves", "expenses"]
        );
        assert_eq!(query_terms("who", 10), ["who"]);
        assert!(!query_terms("报销找谁批", 10).contains(&"谁".to_string()));
    }

    #[test]
    fn variants_are_english_stems_and_chinese_characters_and_pairs() {
        let v = variants("Meetings need approval 报警");
        for expected in ["meet", "approv", "报", "警", "报警"] {
            assert!(v.contains(&expected.to_string()), "{v:?}");
        }
        assert_eq!(variants("approve")[0], variants("approval")[0]);
        let (allergy, allergic) = (variants("allergy"), variants("allergic"));
        assert_ne!(
            allergy[0], allergic[0],
            "Snowball keeps them apart: {allergy:?}"
        );
        assert!(allergy.contains(&"alle".to_string()) && allergic.contains(&"alle".to_string()));
        assert_eq!(variants("team"), ["team"], "short stems are not truncated");
        assert_eq!(variants("x8664yz").len(), 1, "only letters are truncated");
        let q = query_variants("谁批准告警", 10);
        assert!(q.contains(&"警".to_string()), "{q:?}");
        assert!(!q.iter().any(|t| t.contains('谁')), "{q:?}");
    }
}
