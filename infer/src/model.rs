//! A llama-architecture transformer loaded from GGUF and its forward pass
//! (RMSNorm, rotary attention with grouped KV heads, SwiGLU), batched over
//! the prompt and one token at a time while generating.

use crate::error::ModelError;
use crate::gguf::{GgufFile, Meta, TensorInfo};
use crate::quant::{BlockQ8, Matrix, quantize, round_f16};

#[derive(Debug, Clone)]
pub struct Hyper {
    pub layers: usize,
    pub dim: usize,
    pub ffn: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub rope_dim: usize,
    pub rope_base: f32,
    pub eps: f32,
    pub context: usize,
    pub vocab: usize,
}

#[derive(Debug)]
struct Layer {
    attn_norm: Vec<f32>,
    /// q, k and v stacked when they share a format, else separate.
    qkv: Projection,
    wo: Matrix,
    ffn_norm: Vec<f32>,
    /// gate and up stacked when they share a format.
    gate_up: Projection,
    down: Matrix,
}

#[derive(Debug)]
enum Projection {
    Stacked(Matrix),
    Separate(Vec<Matrix>),
}

impl Projection {
    fn new(parts: Vec<Matrix>) -> Self {
        match Matrix::stack(parts) {
            Ok(m) => Projection::Stacked(m),
            Err(parts) => Projection::Separate(parts),
        }
    }

    fn rows(&self) -> usize {
        match self {
            Projection::Stacked(m) => m.rows,
            Projection::Separate(v) => v.iter().map(|m| m.rows).sum(),
        }
    }

    /// `out[t]` = the parts' outputs concatenated, for `n` tokens.
    fn product(
        &self,
        pool: &rayon::ThreadPool,
        x: &[f32],
        xq: &[BlockQ8],
        n: usize,
        out: &mut [f32],
    ) {
        match self {
            Projection::Stacked(m) => m.product(pool, x, xq, n, out),
            Projection::Separate(parts) => {
                let total = self.rows();
                let mut offset = 0;
                for m in parts {
                    let mut part = vec![0f32; n * m.rows];
                    m.product(pool, x, xq, n, &mut part);
                    for t in 0..n {
                        out[t * total + offset..t * total + offset + m.rows]
                            .copy_from_slice(&part[t * m.rows..(t + 1) * m.rows]);
                    }
                    offset += m.rows;
                }
            }
        }
    }
}

#[derive(Debug)]
pub struct Model {
    pub hyper: Hyper,
    embed: Matrix,
    layers: Vec<Layer>,
    norm: Vec<f32>,
    /// `None`: tied to the embeddings.
    output: Option<Matrix>,
    inv_freq: Vec<f32>,
}

/// Keys and values of every layer for one sequence.
pub struct KvCache {
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    pub len: usize,
}

fn meta_usize(file: &GgufFile, key: &str) -> Result<usize, ModelError> {
    file.meta(key)
        .and_then(Meta::as_u64)
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| ModelError::Unsupported {
            path: file.path.clone(),
            reason: format!("metadata `{key}` is missing"),
        })
}

impl Model {
    pub fn load(file: &GgufFile) -> Result<Self, ModelError> {
        let unsupported = |reason: String| ModelError::Unsupported {
            path: file.path.clone(),
            reason,
        };
        let arch = file
            .meta("general.architecture")
            .and_then(Meta::as_str)
            .unwrap_or("(none)");
        if arch != "llama" {
            return Err(unsupported(format!(
                "architecture `{arch}` (supported: llama)"
            )));
        }
        let key = |k: &str| format!("llama.{k}");
        let dim = meta_usize(file, &key("embedding_length"))?;
        let heads = meta_usize(file, &key("attention.head_count"))?;
        let kv_heads = file
            .meta(&key("attention.head_count_kv"))
            .and_then(Meta::as_u64)
            .map_or(heads, |v| v as usize);
        if heads == 0 || kv_heads == 0 || dim % heads != 0 || heads % kv_heads != 0 {
            return Err(unsupported(format!(
                "{heads} heads / {kv_heads} kv heads / width {dim}"
            )));
        }
        let head_dim = dim / heads;
        let embed_info = tensor(file, "token_embd.weight")?;
        let vocab = embed_info.dims.get(1).map_or(0, |v| *v as usize);
        let hyper = Hyper {
            layers: meta_usize(file, &key("block_count"))?,
            dim,
            ffn: meta_usize(file, &key("feed_forward_length"))?,
            heads,
            kv_heads,
            head_dim,
            rope_dim: file
                .meta(&key("rope.dimension_count"))
                .and_then(Meta::as_u64)
                .map_or(head_dim, |v| v as usize)
                .min(head_dim),
            rope_base: file
                .meta(&key("rope.freq_base"))
                .and_then(Meta::as_f64)
                .unwrap_or(10_000.0) as f32,
            eps: file
                .meta(&key("attention.layer_norm_rms_epsilon"))
                .and_then(Meta::as_f64)
                .unwrap_or(1e-5) as f32,
            context: meta_usize(file, &key("context_length"))?,
            vocab,
        };
        if !hyper.rope_dim.is_multiple_of(2) {
            return Err(unsupported("odd rope dimension".into()));
        }
        let matrix = |name: &str, rows: usize, cols: usize| -> Result<Matrix, ModelError> {
            let info = tensor(file, name)?;
            if info.elements() != (rows * cols) as u64 {
                return Err(unsupported(format!(
                    "tensor `{name}` has shape {:?}, expected {cols}×{rows}",
                    info.dims
                )));
            }
            Matrix::from_gguf(info.kind, file.tensor_bytes(info), rows, cols)
                .map_err(|e| unsupported(format!("tensor `{name}`: {e}")))
        };
        let vector = |name: &str, len: usize| -> Result<Vec<f32>, ModelError> {
            let m = matrix(name, 1, len)?;
            let mut out = vec![0f32; len];
            m.row(0, &mut out);
            Ok(out)
        };
        let kv_dim = kv_heads * head_dim;
        let mut layers = Vec::with_capacity(hyper.layers);
        for i in 0..hyper.layers {
            let n = |s: &str| format!("blk.{i}.{s}.weight");
            layers.push(Layer {
                attn_norm: vector(&n("attn_norm"), dim)?,
                qkv: Projection::new(vec![
                    matrix(&n("attn_q"), dim, dim)?,
                    matrix(&n("attn_k"), kv_dim, dim)?,
                    matrix(&n("attn_v"), kv_dim, dim)?,
                ]),
                wo: matrix(&n("attn_output"), dim, dim)?,
                ffn_norm: vector(&n("ffn_norm"), dim)?,
                gate_up: Projection::new(vec![
                    matrix(&n("ffn_gate"), hyper.ffn, dim)?,
                    matrix(&n("ffn_up"), hyper.ffn, dim)?,
                ]),
                down: matrix(&n("ffn_down"), dim, hyper.ffn)?,
            });
        }
        let output = if file.tensors.contains_key("output.weight") {
            Some(matrix("output.weight", vocab, dim)?)
        } else {
            None
        };
        let half = hyper.rope_dim / 2;
        let inv_freq = (0..half)
            .map(|i| {
                hyper
                    .rope_base
                    .powf(-(2.0 * i as f32) / hyper.rope_dim as f32)
            })
            .collect();
        Ok(Model {
            embed: matrix("token_embd.weight", vocab, dim)?,
            hyper,
            layers,
            norm: vector("output_norm.weight", dim)?,
            output,
            inv_freq,
        })
    }

    pub fn new_cache(&self, capacity: usize) -> KvCache {
        let kv_dim = self.hyper.kv_heads * self.hyper.head_dim;
        KvCache {
            k: (0..self.hyper.layers)
                .map(|_| Vec::with_capacity(capacity * kv_dim))
                .collect(),
            v: (0..self.hyper.layers)
                .map(|_| Vec::with_capacity(capacity * kv_dim))
                .collect(),
            len: 0,
        }
    }

    /// Runs `tokens` (appended after what `cache` holds) and returns the
    /// logits of the last one.
    pub fn forward(
        &self,
        pool: &rayon::ThreadPool,
        tokens: &[u32],
        cache: &mut KvCache,
    ) -> Vec<f32> {
        let h = &self.hyper;
        let n = tokens.len();
        let (dim, hd) = (h.dim, h.head_dim);
        let kv_dim = h.kv_heads * hd;
        let qkv_rows = dim + 2 * kv_dim;
        let mut x = vec![0f32; n * dim];
        for (t, tok) in tokens.iter().enumerate() {
            let row = (*tok as usize).min(h.vocab.saturating_sub(1));
            self.embed.row(row, &mut x[t * dim..(t + 1) * dim]);
        }
        let mut xn = vec![0f32; n * dim];
        let mut xq = Vec::new();
        let mut qkv = vec![0f32; n * qkv_rows];
        let mut attn = vec![0f32; n * dim];
        let mut proj = vec![0f32; n * dim];
        let mut gu = vec![0f32; n * 2 * h.ffn];
        let mut act = vec![0f32; n * h.ffn];
        let pos0 = cache.len;
        let group = h.heads / h.kv_heads;
        let scale = 1.0 / (hd as f32).sqrt();
        let mut scores = Vec::new();
        for (l, layer) in self.layers.iter().enumerate() {
            rms_norm(&x, &layer.attn_norm, h.eps, &mut xn);
            quantize(&xn, &mut xq);
            layer.qkv.product(pool, &xn, &xq, n, &mut qkv);
            for t in 0..n {
                let row = &mut qkv[t * qkv_rows..(t + 1) * qkv_rows];
                let (q, kv) = row.split_at_mut(dim);
                self.rope(q, pos0 + t);
                self.rope(&mut kv[..kv_dim], pos0 + t);
                cache.k[l].extend(kv[..kv_dim].iter().map(|v| round_f16(*v)));
                cache.v[l].extend(kv[kv_dim..].iter().map(|v| round_f16(*v)));
            }
            let (keys, values) = (&cache.k[l], &cache.v[l]);
            for t in 0..n {
                let visible = pos0 + t + 1;
                let q_row = &qkv[t * qkv_rows..t * qkv_rows + dim];
                for head in 0..h.heads {
                    let kvh = head / group;
                    let q = &q_row[head * hd..(head + 1) * hd];
                    scores.clear();
                    scores.extend((0..visible).map(|p| {
                        let k = &keys[p * kv_dim + kvh * hd..p * kv_dim + (kvh + 1) * hd];
                        crate::quant::dot_f32(q, k) * scale
                    }));
                    softmax(&mut scores);
                    let out = &mut attn[t * dim + head * hd..t * dim + (head + 1) * hd];
                    out.fill(0.0);
                    for (p, w) in scores.iter().enumerate() {
                        let v = &values[p * kv_dim + kvh * hd..p * kv_dim + (kvh + 1) * hd];
                        for (o, vv) in out.iter_mut().zip(v) {
                            *o += w * vv;
                        }
                    }
                }
            }
            quantize(&attn, &mut xq);
            layer.wo.product(pool, &attn, &xq, n, &mut proj);
            add(&mut x, &proj);
            rms_norm(&x, &layer.ffn_norm, h.eps, &mut xn);
            quantize(&xn, &mut xq);
            layer.gate_up.product(pool, &xn, &xq, n, &mut gu);
            for t in 0..n {
                let row = &gu[t * 2 * h.ffn..(t + 1) * 2 * h.ffn];
                let (gate, up) = row.split_at(h.ffn);
                for ((a, g), u) in act[t * h.ffn..(t + 1) * h.ffn].iter_mut().zip(gate).zip(up) {
                    *a = g / (1.0 + (-g).exp()) * u;
                }
            }
            quantize(&act, &mut xq);
            layer.down.product(pool, &act, &xq, n, &mut proj);
            add(&mut x, &proj);
        }
        cache.len += n;
        let last = &x[(n - 1) * dim..n * dim];
        let mut normed = vec![0f32; dim];
        rms_norm(last, &self.norm, h.eps, &mut normed);
        quantize(&normed, &mut xq);
        let head = self.output.as_ref().unwrap_or(&self.embed);
        let mut logits = vec![0f32; head.rows];
        head.product(pool, &normed, &xq, 1, &mut logits);
        logits
    }

    /// Rotates consecutive pairs (GGUF llama's "normal" rope layout) of
    /// every head in `v`.
    fn rope(&self, v: &mut [f32], pos: usize) {
        let hd = self.hyper.head_dim;
        for head in v.chunks_exact_mut(hd) {
            for (i, f) in self.inv_freq.iter().enumerate() {
                let (sin, cos) = (pos as f32 * f).sin_cos();
                let (a, b) = (head[2 * i], head[2 * i + 1]);
                head[2 * i] = a * cos - b * sin;
                head[2 * i + 1] = a * sin + b * cos;
            }
        }
    }
}

fn tensor<'a>(file: &'a GgufFile, name: &str) -> Result<&'a TensorInfo, ModelError> {
    file.tensors
        .get(name)
        .ok_or_else(|| ModelError::Unsupported {
            path: file.path.clone(),
            reason: format!("tensor `{name}` is missing"),
        })
}

fn rms_norm(x: &[f32], weight: &[f32], eps: f32, out: &mut [f32]) {
    let dim = weight.len();
    for (row, o) in x.chunks_exact(dim).zip(out.chunks_exact_mut(dim)) {
        let ms = row.iter().map(|v| v * v).sum::<f32>() / dim as f32;
        let inv = 1.0 / (ms + eps).sqrt();
        for ((o, v), w) in o.iter_mut().zip(row).zip(weight) {
            *o = v * inv * w;
        }
    }
}

pub fn softmax(v: &mut [f32]) {
    let max = v.iter().fold(f32::NEG_INFINITY, |m, x| m.max(*x));
    let mut sum = 0.0;
    for x in v.iter_mut() {
        *x = (*x - max).exp();
        sum += *x;
    }
    if sum > 0.0 {
        for x in v.iter_mut() {
            *x /= sum;
        }
    }
}

fn add(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}
