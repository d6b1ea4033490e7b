//! Recall by meaning: memories and queries turned into vectors by a local
//! text encoder (multilingual-e5-small, `pincer model fetch
//! multilingual-e5-small`), run in-process on the CPU by `pincer-infer`.
//!
//! The model is loaded on first use and shared (the gateway's
//! `/v1/embeddings` uses the same one; `gateway::memory_embedder` finds it
//! in a pincer home). When it is absent, off (`memory.embeddings: off`) or
//! unloadable, memory is lexical only, as before.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use pincer_infer::{Encoder, Role};

/// An embedding model's file, loaded on first use.
pub struct Embedder {
    path: PathBuf,
    id: String,
    encoder: OnceLock<Result<Arc<Encoder>, String>>,
}

impl Embedder {
    /// The model file at `path`, not yet loaded; `id` names the model (and
    /// its build) in the stored vectors' tag.
    pub fn at(path: PathBuf, id: String) -> Embedder {
        Embedder {
            path,
            id,
            encoder: OnceLock::new(),
        }
    }

    /// What the stored vectors are tagged with: another model (or another
    /// build of it) means every memory is embedded again.
    pub fn model_id(&self) -> &str {
        &self.id
    }

    /// The loaded encoder, or why it cannot be loaded (logged once, and the
    /// same answer after).
    pub fn encoder(&self) -> Result<&Arc<Encoder>, &str> {
        self.encoder
            .get_or_init(|| {
                Encoder::load(&self.path).map(Arc::new).map_err(|e| {
                    let why = format!(
                        "the embedding model {} failed to load: {e}",
                        self.path.display()
                    );
                    // Once per embedder: the failure is kept.
                    tracing::warn!("memory: lexical recall only: {why}");
                    why
                })
            })
            .as_ref()
            .map_err(String::as_str)
    }

    /// Memories' texts as stored vectors.
    pub fn passages(&self, texts: &[&str]) -> Result<Vec<Vector>, String> {
        self.embed(texts, Role::Passage)
    }

    pub fn query(&self, text: &str) -> Result<Vector, String> {
        self.embed(&[text], Role::Query)?
            .pop()
            .ok_or_else(|| "the encoder returned no vector".to_owned())
    }

    fn embed(&self, texts: &[&str], role: Role) -> Result<Vec<Vector>, String> {
        let encoder = self.encoder().map_err(str::to_owned)?;
        let vectors = encoder
            .embed(texts, role)
            .map_err(|e| format!("embedding failed: {e}"))?;
        Ok(vectors.iter().map(|v| Vector::quantize(v)).collect())
    }

    /// Unit vectors as floats (for `/v1/embeddings`).
    pub fn floats(&self, texts: &[&str], role: Role) -> Result<Vec<Vec<f32>>, String> {
        let encoder = self.encoder().map_err(str::to_owned)?;
        encoder
            .embed(texts, role)
            .map_err(|e| format!("embedding failed: {e}"))
    }
}

/// A unit vector stored as 8-bit integers and one scale: a quarter of the
/// floats' size, and similarity is an integer dot product. At 384
/// dimensions the cosine it gives is within ~0.002 of the floats'.
#[derive(Debug, Clone, PartialEq)]
pub struct Vector {
    pub scale: f32,
    pub values: Vec<i8>,
}

impl Vector {
    pub fn quantize(v: &[f32]) -> Vector {
        let max = v.iter().fold(0f32, |m, x| m.max(x.abs()));
        let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
        let values = v
            .iter()
            .map(|x| (x / scale).round().clamp(-127.0, 127.0) as i8)
            .collect();
        Vector { scale, values }
    }

    /// The stored form: the scale (f32, little-endian), then the values.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.values.len());
        out.extend_from_slice(&self.scale.to_le_bytes());
        out.extend(self.values.iter().map(|v| v.to_le_bytes()[0]));
        out
    }

    /// The stored form back, `None` if it is not one of `dim` values.
    pub fn from_bytes(bytes: &[u8], dim: usize) -> Option<Vector> {
        if bytes.len() != 4 + dim {
            return None;
        }
        let (scale, values) = bytes.split_at(4);
        let scale = f32::from_le_bytes(scale.try_into().ok()?);
        scale.is_finite().then(|| Vector {
            scale,
            values: values.iter().map(|b| i8::from_le_bytes([*b])).collect(),
        })
    }

    /// Cosine similarity with another unit vector of the same model.
    pub fn similarity(&self, values: &[i8], scale: f32) -> f32 {
        dot(&self.values, values) as f32 * self.scale * scale
    }
}

/// Integer dot product, written so the compiler vectorizes it.
#[inline(always)]
pub fn dot(a: &[i8], b: &[i8]) -> i32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| i32::from(*x) * i32::from(*y))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantized_similarity_is_close_to_the_floats() {
        let a: Vec<f32> = (0..384).map(|i| ((i * 7919) % 101) as f32 - 50.0).collect();
        let b: Vec<f32> = (0..384)
            .map(|i| ((i * 104_729) % 97) as f32 - 48.0)
            .collect();
        let unit = |v: &[f32]| {
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            v.iter().map(|x| x / n).collect::<Vec<_>>()
        };
        let (a, b) = (unit(&a), unit(&b));
        let exact: f32 = a.iter().zip(&b).map(|(x, y)| x * y).sum();
        let (qa, qb) = (Vector::quantize(&a), Vector::quantize(&b));
        assert!((qa.similarity(&qb.values, qb.scale) - exact).abs() < 0.005);
        assert!((qa.similarity(&qa.values, qa.scale) - 1.0).abs() < 0.005);
    }

    #[test]
    fn the_stored_form_round_trips_and_refuses_other_sizes() {
        let v = Vector::quantize(&[0.5, -0.25, 0.0, 1.0]);
        let bytes = v.to_bytes();
        assert_eq!(Vector::from_bytes(&bytes, 4), Some(v));
        assert_eq!(Vector::from_bytes(&bytes, 5), None);
        assert_eq!(Vector::from_bytes(&bytes[..3], 0), None);
        let mut nan = bytes.clone();
        nan[..4].copy_from_slice(&f32::NAN.to_le_bytes());
        assert_eq!(Vector::from_bytes(&nan, 4), None);
    }
}
