//! CPU inference of llama-architecture GGUF models, in pure Rust, for
//! pincer's `local/` provider: GGUF parsing with bounds checks, quantized
//! matrix products (AVX2 chosen at run time, scalar otherwise), the llama
//! forward pass with a KV cache, the byte-level BPE tokenizer built from the
//! file's own vocabulary, and the sampling loop.
//!
//! A crate of its own so that it is optimised even in debug builds and tests
//! (see the workspace's `profile.dev.package`).

mod error;
mod generate;
mod gguf;
mod model;
mod quant;
mod tokenizer;

pub use error::ModelError;
pub use generate::{FinishReason, Finished, Generator, Limits, Sampling};
pub use gguf::{GgufFile, Meta, TensorInfo, TensorType};
pub use model::{Hyper, KvCache, Model};
pub use rayon::ThreadPool;
pub use tokenizer::Tokenizer;

/// A pool of `threads` compute threads for [`Model::forward`].
pub fn compute_pool(threads: usize) -> Result<rayon::ThreadPool, rayon::ThreadPoolBuildError> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(threads.max(1))
        .thread_name(|i| format!("pincer-infer-{i}"))
        .build()
}
