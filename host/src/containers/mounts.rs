//! Mount sources from config, checked before anything is handed to Docker:
//! a source must exist, must not be `/` or a home folder root, and must not
//! resolve (through symlinks) anywhere other than where it was named.

use std::path::{Path, PathBuf};

use crate::config::expand_tilde;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindMount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MountError {
    #[error("mount source {0} does not exist")]
    Missing(String),
    #[error("mount source {0} is the root folder; mount a folder inside it")]
    Root(String),
    #[error("mount source {0} is a home folder root; mount a folder inside it")]
    HomeRoot(String),
    #[error("mount source {named} resolves through a symlink to {resolved}; name the real path")]
    Escapes { named: String, resolved: String },
    #[error("mount source {0} must be an absolute path or start with ~")]
    Relative(String),
}

/// Checks one configured mount and returns it with its source resolved.
pub fn check_source(source: &Path) -> Result<PathBuf, MountError> {
    let named = expand_tilde(source);
    if !named.is_absolute() {
        return Err(MountError::Relative(source.display().to_string()));
    }
    let resolved = named
        .canonicalize()
        .map_err(|_| MountError::Missing(named.display().to_string()))?;
    if resolved == Path::new("/") {
        return Err(MountError::Root(source.display().to_string()));
    }
    if is_home_root(&resolved) {
        return Err(MountError::HomeRoot(resolved.display().to_string()));
    }
    let lexical = normalize(&named);
    if resolved != lexical {
        return Err(MountError::Escapes {
            named: named.display().to_string(),
            resolved: resolved.display().to_string(),
        });
    }
    Ok(resolved)
}

fn is_home_root(path: &Path) -> bool {
    let own_home = std::env::var_os("HOME").map(PathBuf::from);
    if own_home
        .as_deref()
        .and_then(|h| h.canonicalize().ok())
        .as_deref()
        == Some(path)
    {
        return true;
    }
    // /home/<user> and /root themselves.
    path == Path::new("/root")
        || (path.parent() == Some(Path::new("/home")) && path.file_name().is_some())
}

/// Removes `.` and resolves `..` without touching the filesystem.
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("notes");
        std::fs::create_dir(&real).unwrap();
        let real = real.canonicalize().unwrap();
        assert_eq!(check_source(&real).unwrap(), real);
        assert!(matches!(
            check_source(Path::new("/")),
            Err(MountError::Root(_))
        ));
        assert!(matches!(
            check_source(Path::new("/root")),
            Err(MountError::HomeRoot(_))
        ));
        assert!(matches!(
            check_source(Path::new("relative/dir")),
            Err(MountError::Relative(_))
        ));
        let missing = real.join("nope");
        assert!(matches!(
            check_source(&missing),
            Err(MountError::Missing(_))
        ));
        let link = dir.path().canonicalize().unwrap().join("link");
        std::os::unix::fs::symlink("/etc", &link).unwrap();
        assert!(matches!(
            check_source(&link),
            Err(MountError::Escapes { .. })
        ));
        let dotted = format!("{}/../notes", real.display());
        assert!(
            check_source(Path::new(&dotted)).is_ok(),
            "a `..` that stays inside is fine"
        );
    }
}
