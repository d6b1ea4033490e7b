//! Configuration errors. Every error about the file's content carries a
//! `FILE:LINE:COLUMN` position (1-based, columns count characters).

use std::fmt;
use std::path::PathBuf;

/// A 1-based position in a configuration file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Position {
    /// The file name as given to the loader (used only for messages).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, in characters.
    pub column: usize,
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

/// Everything that can go wrong while loading `pincer.yaml`.
///
/// Display is `FILE:LINE:COLUMN: message` for every problem in the file's
/// content; only [`ConfigError::Read`] and [`ConfigError::Home`] (which are
/// not about content) have no position.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{file}: cannot read: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    /// Broken YAML (including duplicate keys) or a malformed `${...}` reference.
    #[error("{at}: {message}")]
    Syntax { at: Position, message: String },
    /// Valid YAML that does not fit the schema: unknown key, wrong type,
    /// missing required key, value outside an enumeration.
    #[error("{at}: {message}")]
    Schema { at: Position, message: String },
    /// `${NAME}` without a default, and `NAME` is not set. `at` is the `$`.
    #[error("{at}: environment variable {name} is not set")]
    MissingEnv { at: Position, name: String },
    /// The configuration parsed but is inconsistent (bad name, dangling
    /// reference, value out of range, ...).
    #[error("{at}: {message}")]
    Invalid { at: Position, message: String },
    /// Several problems, each located, in file order.
    #[error("{}", errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Several { errors: Vec<ConfigError> },
    /// The pincer home directory could not be found or created.
    #[error("cannot create pincer home directory {}: {source}", path.display())]
    Home {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl ConfigError {
    /// One error for `errors` (`None` when empty): the error itself when it
    /// is alone, otherwise [`ConfigError::Several`].
    pub fn from_all(mut errors: Vec<ConfigError>) -> Option<ConfigError> {
        match errors.len() {
            0 => None,
            1 => errors.pop(),
            _ => Some(ConfigError::Several { errors }),
        }
    }

    /// Every problem, one per element ([`ConfigError::Several`] unpacked).
    pub fn all(&self) -> Vec<&ConfigError> {
        match self {
            ConfigError::Several { errors } => errors.iter().flat_map(ConfigError::all).collect(),
            other => vec![other],
        }
    }

    /// The position of the problem, when it is about the file's content.
    pub fn position(&self) -> Option<&Position> {
        match self {
            ConfigError::Syntax { at, .. }
            | ConfigError::Schema { at, .. }
            | ConfigError::MissingEnv { at, .. }
            | ConfigError::Invalid { at, .. } => Some(at),
            ConfigError::Several { errors } => errors.first().and_then(ConfigError::position),
            ConfigError::Read { .. } | ConfigError::Home { .. } => None,
        }
    }
}

/// Escapes control characters (terminal escapes, newlines) so that text taken
/// from the file cannot mangle the one-line message.
pub(crate) fn sanitize(message: &str) -> String {
    if !message.chars().any(char::is_control) {
        return message.to_owned();
    }
    message
        .chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Builds positions for one file.
#[derive(Debug, Clone)]
pub(crate) struct Site {
    file: String,
}

impl Site {
    pub(crate) fn new(file: String) -> Self {
        Site { file }
    }

    pub(crate) fn file(&self) -> &str {
        &self.file
    }

    pub(crate) fn at(&self, (line, column): (usize, usize)) -> Position {
        Position {
            file: self.file.clone(),
            line: line.max(1),
            column: column.max(1),
        }
    }

    pub(crate) fn syntax(&self, pos: (usize, usize), message: &str) -> ConfigError {
        ConfigError::Syntax {
            at: self.at(pos),
            message: sanitize(message),
        }
    }

    pub(crate) fn schema(&self, pos: (usize, usize), message: &str) -> ConfigError {
        ConfigError::Schema {
            at: self.at(pos),
            message: sanitize(message),
        }
    }

    pub(crate) fn invalid(&self, pos: (usize, usize), message: &str) -> ConfigError {
        ConfigError::Invalid {
            at: self.at(pos),
            message: sanitize(message),
        }
    }

    pub(crate) fn missing_env(&self, pos: (usize, usize), name: &str) -> ConfigError {
        ConfigError::MissingEnv {
            at: self.at(pos),
            name: sanitize(name),
        }
    }
}

sentence_error! {
    /// Why a value is not valid, said for a person; the loader adds where it
    /// was written.
    pub struct Invalid;
}
