//! The byte-level BPE tokenizer (GPT-2 style, `tokenizer.ggml.model =
//! gpt2`) built from the GGUF's own vocabulary and merges, since no
//! `tokenizer.json` can be downloaded.
//!
//! Text is first split at special tokens (control / user-defined tokens are
//! matched literally, as llama.cpp does for rendered chat templates), then
//! into digits one by one (the `smollm` pre-tokenizer), then into GPT-2
//! pieces (contractions, letters, numbers, punctuation, whitespace); each
//! piece's bytes are merged by rank.

use std::collections::HashMap;
use std::path::Path;

use crate::error::ModelError;
use crate::gguf::{GgufFile, Meta};

const TOKEN_CONTROL: i64 = 3;
const TOKEN_USER_DEFINED: i64 = 4;

#[derive(Debug)]
pub struct Tokenizer {
    tokens: Vec<String>,
    ids: HashMap<String, u32>,
    /// (left, right) → (rank, merged)
    merges: HashMap<(u32, u32), (u32, u32)>,
    /// Special tokens, longest first.
    specials: Vec<(String, u32)>,
    control: Vec<bool>,
    pub bos: Option<u32>,
    pub eos: Option<u32>,
    pub add_bos: bool,
    split_digits: bool,
    byte_to_char: [char; 256],
    char_to_byte: HashMap<char, u8>,
}

/// GPT-2's reversible map from bytes to printable characters.
fn byte_chars() -> [char; 256] {
    let mut table = ['\0'; 256];
    let mut next = 256u32;
    for b in 0..=255u8 {
        let printable = (b'!'..=b'~').contains(&b) || (0xa1..=0xac).contains(&b) || b >= 0xae;
        table[usize::from(b)] = if printable {
            char::from(b)
        } else {
            let c = char::from_u32(next).unwrap_or('\u{fffd}');
            next += 1;
            c
        };
    }
    table
}

impl Tokenizer {
    pub fn from_gguf(file: &GgufFile) -> Result<Self, ModelError> {
        Self::from_parts(&file.path, |k| file.meta(k))
    }

    fn from_parts<'a>(
        path: &Path,
        meta: impl Fn(&str) -> Option<&'a Meta>,
    ) -> Result<Self, ModelError> {
        let unsupported = |reason: String| ModelError::Unsupported {
            path: path.to_owned(),
            reason,
        };
        let model = meta("tokenizer.ggml.model")
            .and_then(Meta::as_str)
            .unwrap_or("(none)");
        if model != "gpt2" {
            return Err(unsupported(format!(
                "tokenizer `{model}` (supported: gpt2 byte-level BPE)"
            )));
        }
        let tokens: Vec<String> = meta("tokenizer.ggml.tokens")
            .and_then(Meta::as_array)
            .ok_or_else(|| unsupported("tokenizer.ggml.tokens is missing".into()))?
            .iter()
            .map(|t| t.as_str().unwrap_or_default().to_owned())
            .collect();
        let types: Vec<i64> = meta("tokenizer.ggml.token_type")
            .and_then(Meta::as_array)
            .map(|a| {
                a.iter()
                    .map(|t| if let Meta::Int(i) = t { *i } else { 1 })
                    .collect()
            })
            .unwrap_or_default();
        let ids: HashMap<String, u32> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        let mut merges = HashMap::new();
        if let Some(list) = meta("tokenizer.ggml.merges").and_then(Meta::as_array) {
            for (rank, m) in list.iter().enumerate() {
                let Some((a, b)) = m.as_str().and_then(|s| s.split_once(' ')) else {
                    continue;
                };
                if let (Some(&l), Some(&r), Some(&merged)) =
                    (ids.get(a), ids.get(b), ids.get(&format!("{a}{b}")))
                {
                    merges.entry((l, r)).or_insert((rank as u32, merged));
                }
            }
        }
        let control: Vec<bool> = (0..tokens.len())
            .map(|i| types.get(i) == Some(&TOKEN_CONTROL))
            .collect();
        let mut specials: Vec<(String, u32)> = tokens
            .iter()
            .enumerate()
            .filter(|(i, t)| {
                !t.is_empty()
                    && matches!(
                        types.get(*i),
                        Some(&TOKEN_CONTROL) | Some(&TOKEN_USER_DEFINED)
                    )
            })
            .map(|(i, t)| (t.clone(), i as u32))
            .collect();
        specials.sort_by_key(|s| std::cmp::Reverse(s.0.len()));
        let id = |k: &str| {
            meta(k)
                .and_then(Meta::as_u64)
                .and_then(|v| u32::try_from(v).ok())
                .filter(|v| (*v as usize) < tokens.len())
        };
        let byte_to_char = byte_chars();
        let char_to_byte = byte_to_char
            .iter()
            .enumerate()
            .map(|(b, c)| (*c, b as u8))
            .collect();
        let pre = meta("tokenizer.ggml.pre")
            .and_then(Meta::as_str)
            .unwrap_or("default");
        Ok(Tokenizer {
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            add_bos: matches!(meta("tokenizer.ggml.add_bos_token"), Some(Meta::Bool(true))),
            split_digits: matches!(
                pre,
                "smollm" | "starcoder" | "refact" | "command-r" | "codeshell"
            ),
            tokens,
            ids,
            merges,
            specials,
            control,
            byte_to_char,
            char_to_byte,
        })
    }

    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }

    pub fn token_text(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Control tokens (end of turn, end of text, …) end a generation.
    pub fn is_control(&self, id: u32) -> bool {
        self.control.get(id as usize).copied().unwrap_or(false)
    }

    /// Token ids of `text`, special tokens recognised.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        if self.add_bos
            && let Some(bos) = self.bos
        {
            out.push(bos);
        }
        let mut rest = text;
        while !rest.is_empty() {
            let next_special = self
                .specials
                .iter()
                .filter_map(|(s, id)| rest.find(s.as_str()).map(|at| (at, s.len(), *id)))
                .min_by_key(|(at, len, _)| (*at, usize::MAX - len));
            match next_special {
                Some((at, len, id)) => {
                    self.encode_plain(&rest[..at], &mut out);
                    out.push(id);
                    rest = &rest[at + len..];
                }
                None => {
                    self.encode_plain(rest, &mut out);
                    rest = "";
                }
            }
        }
        out
    }

    fn encode_plain(&self, text: &str, out: &mut Vec<u32>) {
        for piece in pre_tokenize(text, self.split_digits) {
            let mapped: String = piece
                .bytes()
                .map(|b| self.byte_to_char[usize::from(b)])
                .collect();
            if let Some(id) = self.ids.get(&mapped) {
                out.push(*id);
                continue;
            }
            self.bpe(&mapped, out);
        }
    }

    fn bpe(&self, mapped: &str, out: &mut Vec<u32>) {
        let mut parts: Vec<u32> = Vec::new();
        for c in mapped.chars() {
            let mut buf = [0u8; 4];
            match self.ids.get(c.encode_utf8(&mut buf) as &str) {
                Some(id) => parts.push(*id),
                // A byte without a token: nothing sensible to emit.
                None => continue,
            }
        }
        loop {
            let best = parts
                .windows(2)
                .enumerate()
                .filter_map(|(i, w)| {
                    self.merges
                        .get(&(w[0], w[1]))
                        .map(|(rank, m)| (*rank, i, *m))
                })
                .min();
            let Some((rank, _, _)) = best else { break };
            let mut merged = Vec::with_capacity(parts.len());
            let mut i = 0;
            while i < parts.len() {
                if i + 1 < parts.len()
                    && let Some((r, m)) = self.merges.get(&(parts[i], parts[i + 1]))
                    && *r == rank
                {
                    merged.push(*m);
                    i += 2;
                } else {
                    merged.push(parts[i]);
                    i += 1;
                }
            }
            parts = merged;
        }
        out.extend(parts);
    }

    /// The bytes a token stands for (special tokens as their text).
    pub fn token_bytes(&self, id: u32, out: &mut Vec<u8>) {
        let Some(text) = self.tokens.get(id as usize) else {
            return;
        };
        if self.is_control(id) {
            out.extend_from_slice(text.as_bytes());
            return;
        }
        for c in text.chars() {
            match self.char_to_byte.get(&c) {
                Some(b) => out.push(*b),
                None => {
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
            }
        }
    }

    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for id in ids {
            self.token_bytes(*id, &mut bytes);
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// GPT-2 pieces: `'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|
/// ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+`, after splitting every digit off on
/// its own when `split_digits`.
pub fn pre_tokenize(text: &str, split_digits: bool) -> Vec<&str> {
    let mut pieces = Vec::new();
    if split_digits {
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if c.is_numeric() {
                if start < i {
                    gpt2_pieces(&text[start..i], &mut pieces);
                }
                pieces.push(&text[i..i + c.len_utf8()]);
                start = i + c.len_utf8();
            }
        }
        if start < text.len() {
            gpt2_pieces(&text[start..], &mut pieces);
        }
    } else {
        gpt2_pieces(text, &mut pieces);
    }
    pieces
}

fn is_letter(c: char) -> bool {
    c.is_alphabetic()
}

fn is_number(c: char) -> bool {
    c.is_numeric()
}

fn is_other(c: char) -> bool {
    !c.is_whitespace() && !is_letter(c) && !is_number(c)
}

fn gpt2_pieces<'a>(text: &'a str, pieces: &mut Vec<&'a str>) {
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let end_of = |k: usize| chars.get(k).map_or(text.len(), |(i, _)| *i);
    let mut k = 0;
    while k < chars.len() {
        let start = chars[k].0;
        let c = chars[k].1;
        // Contractions.
        if c == '\'' {
            let rest = &text[start + 1..];
            let suffix = ["re", "ve", "ll", "s", "t", "m", "d"]
                .into_iter()
                .find(|s| rest.starts_with(s));
            if let Some(s) = suffix {
                let n = 1 + s.len();
                pieces.push(&text[start..start + n]);
                k += n;
                continue;
            }
        }
        // An optional single space before a run of one class.
        let (lead, first) = if c == ' ' {
            match chars.get(k + 1) {
                Some((_, n)) if !n.is_whitespace() => (1, *n),
                _ => (0, c),
            }
        } else {
            (0, c)
        };
        let class: Option<fn(char) -> bool> = if is_letter(first) {
            Some(is_letter)
        } else if is_number(first) {
            Some(is_number)
        } else if is_other(first) {
            Some(is_other)
        } else {
            None
        };
        if let Some(class) = class {
            let mut j = k + lead;
            while j < chars.len() && class(chars[j].1) {
                j += 1;
            }
            pieces.push(&text[start..end_of(j)]);
            k = j;
            continue;
        }
        // Whitespace: leave the last one for the next piece when a
        // non-space follows.
        let mut j = k;
        while j < chars.len() && chars[j].1.is_whitespace() {
            j += 1;
        }
        if j < chars.len() && j - k > 1 {
            j -= 1;
        }
        pieces.push(&text[start..end_of(j)]);
        k = j;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gpt2_splitting() {
        assert_eq!(
            pre_tokenize("Hello, world! It's 2024.", true),
            vec![
                "Hello", ",", " world", "!", " It", "'s", " ", "2", "0", "2", "4", "."
            ]
        );
        assert_eq!(
            pre_tokenize("a  b\n\nc", false),
            vec!["a", " ", " b", "\n", "\n", "c"]
        );
        assert_eq!(pre_tokenize("x   ", false), vec!["x", "   "]);
        assert_eq!(pre_tokenize("12", false), vec!["12"]);
    }

    fn toy() -> Tokenizer {
        let vocab = [
            "<|im_start|>",
            "h",
            "e",
            "l",
            "o",
            "he",
            "ll",
            "hell",
            "hello",
            "Ġ",
            "Ġh",
        ];
        let meta: HashMap<&str, Meta> = [
            ("tokenizer.ggml.model", Meta::Str("gpt2".into())),
            (
                "tokenizer.ggml.tokens",
                Meta::Array(vocab.iter().map(|t| Meta::Str((*t).into())).collect()),
            ),
            (
                "tokenizer.ggml.token_type",
                Meta::Array(
                    (0..vocab.len())
                        .map(|i| Meta::Int(if i == 0 { 3 } else { 1 }))
                        .collect(),
                ),
            ),
            (
                "tokenizer.ggml.merges",
                Meta::Array(
                    ["h e", "l l", "he ll", "hell o", "Ġ h"]
                        .iter()
                        .map(|t| Meta::Str((*t).into()))
                        .collect(),
                ),
            ),
            ("tokenizer.ggml.eos_token_id", Meta::Int(0)),
        ]
        .into_iter()
        .collect();
        Tokenizer::from_parts(Path::new("/t.gguf"), |k| meta.get(k)).unwrap()
    }

    #[test]
    fn merges_by_rank_and_special_tokens() {
        let t = toy();
        assert_eq!(t.encode("hello"), vec![8]);
        assert_eq!(t.encode("<|im_start|>hell"), vec![0, 7]);
        assert_eq!(t.encode("hel h"), vec![5, 3, 10]);
        assert_eq!(t.decode(&[8, 10]), "hello h");
        assert!(t.is_control(0) && !t.is_control(8));
    }
}
