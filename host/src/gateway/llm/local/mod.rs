//! The `local/…` provider: a GGUF model run in-process on the CPU, answering
//! through the same OpenAI-shaped outcomes as every remote provider.
//!
//! - `local/smollm2`: the default model (SmolLM2-135M-Instruct, Q4_1) in
//!   `$PINCER_HOME/models`, put there by [`fetch::ensure_default_model`] /
//!   `pincer model fetch smollm2`.
//! - `local/<name>`: `$PINCER_HOME/models/<name>.gguf`.
//! - `local//abs/path/model.gguf`: any llama-architecture GGUF file.
//!
//! Inference is the `pincer-infer` crate (GGUF, the llama forward pass, the
//! BPE tokenizer built from the file's vocabulary, sampling); this module
//! adds the file's Jinja chat template (minijinja), model loading and
//! sharing, the bounded queue, OpenAI-shaped answers and fetching.

mod error;
pub mod fetch;
mod request;
mod runtime;
mod template;

pub use error::LocalError;
pub use runtime::{LocalModel, LocalOutcome, LocalRuntime, LocalSettings, ModelSpec};
