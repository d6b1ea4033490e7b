//! Errors of the policy subsystem. Every message names what it is about: the
//! workspace, the group(s) and the setting, or the file and position.

use std::path::PathBuf;

/// Why a policy catalog cannot be loaded or a workspace's policy cannot be
/// built. A workspace whose policy fails must not start (fail closed).
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// A listed group is neither built in, parametric nor a user group.
    #[error("workspace {workspace}: unknown policy group `{group}`{hint} (known: {known})")]
    UnknownGroup {
        workspace: String,
        group: String,
        /// `, did you mean `x`?` or empty.
        hint: String,
        known: String,
    },

    /// Two listed groups ask for incompatible settings.
    #[error(
        "workspace {workspace}: policy groups `{first}` and `{second}` contradict on {setting} ({detail})"
    )]
    Contradiction {
        workspace: String,
        first: String,
        second: String,
        setting: String,
        detail: String,
    },

    /// A listed entry is recognised but cannot be used as written
    /// (`max_memory_1mb`, an empty `allowed_executables`, a group listed twice).
    #[error("workspace {workspace}: policy group `{group}`: {message}")]
    InvalidEntry {
        workspace: String,
        group: String,
        message: String,
    },

    /// A group file is malformed. `location` is `FILE:LINE:COLUMN` when the
    /// parser knows the position, else `FILE`.
    #[error("{location}: {message}")]
    GroupFile { location: String, message: String },

    #[error("cannot read policy folder {}: {source}", dir.display())]
    ReadDir {
        dir: PathBuf,
        source: std::io::Error,
    },

    #[error("cannot read policy group file {}: {source}", file.display())]
    ReadFile {
        file: PathBuf,
        source: std::io::Error,
    },

    /// A user group uses the name of a built-in or parametric group.
    #[error("{}: policy group `{name}` shadows the built-in group of that name; rename the file", file.display())]
    Shadows { name: String, file: PathBuf },

    /// Two user folders define the same group.
    #[error("policy group `{name}` is defined twice: {} and {}", first.display(), second.display())]
    DefinedTwice {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },

    /// The policy data embedded in the binary is broken (a test rules this out).
    #[error("built-in policy data is broken: {0}")]
    Builtin(String),
}
