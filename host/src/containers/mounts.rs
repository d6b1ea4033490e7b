//! Mount sources from config, checked before anything is handed to Docker:
//! a source must exist, must not be `/` or a home folder root, must not
//! resolve (through symlinks) anywhere other than where it was named, and
//! must not expose what the container must never reach: the kernel's
//! interfaces (`/proc`, `/sys`, `/dev`), the container engine's sockets and
//! state, pincer's own state folder (tokens, sockets, the database) and the
//! folder holding every workspace. A source inside such a place, equal to it
//! or holding it (an ancestor) is refused, and so is any unix socket: a
//! container reaches host services only through the gateway.

use std::os::unix::fs::FileTypeExt;
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
    #[error(
        "mount source {path} {relation} {protected} ({why}); a container must never reach it — mount a folder that holds only what the agent may see"
    )]
    Protected {
        path: String,
        relation: &'static str,
        protected: String,
        why: &'static str,
    },
    #[error(
        "mount source {0} is a unix socket; containers reach host services only through the gateway socket"
    )]
    Socket(String),
}

/// A host path no mount may expose, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protected {
    pub path: PathBuf,
    pub why: &'static str,
    pub guard: Guard,
}

/// Which sources a [`Protected`] path refuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Guard {
    /// The path, anything inside it, and any folder holding it.
    Tree,
    /// The path and any folder holding it, not what is inside (`/home`,
    /// whose users' own folders are what people mount).
    AtOrAbove,
    /// Only what is strictly inside it: a folder some container can write,
    /// where it could swap a subfolder for a symlink between pincer's check
    /// and Docker's mount.
    Inside,
}

impl Protected {
    fn tree(path: impl Into<PathBuf>, why: &'static str) -> Self {
        Self {
            path: path.into(),
            why,
            guard: Guard::Tree,
        }
    }

    /// What this path says of `source`, when it refuses it.
    fn refuses(&self, source: &Path) -> Option<&'static str> {
        let (at, inside, above) = (
            source == self.path,
            source != self.path && source.starts_with(&self.path),
            source != self.path && self.path.starts_with(source),
        );
        match self.guard {
            Guard::Tree | Guard::AtOrAbove if at => Some("is"),
            Guard::Tree | Guard::Inside if inside => Some("is inside"),
            Guard::Tree | Guard::AtOrAbove if above => Some("holds"),
            _ => None,
        }
    }
}

/// Engine sockets and state a container must never see (the Docker socket is
/// root on the host).
const ENGINE_PATHS: [&str; 6] = [
    "/run/docker.sock",
    "/run/docker",
    "/run/containerd",
    "/var/lib/docker",
    "/var/lib/containerd",
    "/run/runc",
];

/// Kernel interfaces: a bind mount of these bypasses what Docker masks.
const KERNEL_PATHS: [&str; 3] = ["/proc", "/sys", "/dev"];

/// What no mount of this host may expose: the kernel's and the engine's
/// folders, `/home` itself, pincer's state folder and the workspace base
/// folder (every workspace's files).
pub fn protected_paths(pincer_home: &Path, workspace_base: &Path) -> Vec<Protected> {
    let mut out: Vec<Protected> = KERNEL_PATHS
        .iter()
        .map(|p| Protected::tree(*p, "a kernel interface"))
        .collect();
    out.extend(
        ENGINE_PATHS
            .iter()
            .map(|p| Protected::tree(*p, "the container engine's socket or state")),
    );
    if let Some(socket) = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|h| h.strip_prefix("unix://").map(PathBuf::from))
    {
        out.push(Protected::tree(
            real_or_named(&socket),
            "the container engine's socket (DOCKER_HOST)",
        ));
    }
    out.push(Protected {
        path: PathBuf::from("/home"),
        why: "every user's home folder",
        guard: Guard::AtOrAbove,
    });
    out.push(Protected::tree(
        real_or_named(pincer_home),
        "pincer's state: database, tokens, sockets (PINCER_HOME)",
    ));
    out.push(Protected::tree(
        real_or_named(&expand_tilde(workspace_base)),
        BASE_WHY,
    ));
    out
}

const BASE_WHY: &str = "the folder of every workspace (containers.workspace_base_path)";

/// Every workspace's folder (`workspaces.NAME.path` or the default beneath
/// the base folder): no mount may expose one (another workspace's files,
/// or this one's under a second name).
pub fn workspace_folders(config: &crate::config::Config) -> Vec<Protected> {
    config
        .workspaces
        .keys()
        .map(|name| {
            Protected::tree(
                real_or_named(&config.workspace_dir(name)),
                "a workspace folder",
            )
        })
        .collect()
}

/// Checks a workspace's own folder (it is mounted read-write at
/// `/workspace`, and may not exist yet): absolute, not `/` or a home folder
/// root, and nothing a container must never reach — the kernel's and the
/// engine's folders, pincer's state. Inside the base folder is where it
/// belongs; equal to the base folder or holding it is refused.
pub fn check_workspace_folder(
    dir: &Path,
    pincer_home: &Path,
    workspace_base: &Path,
) -> Result<(), MountError> {
    if !dir.is_absolute() {
        return Err(MountError::Relative(dir.display().to_string()));
    }
    let named = normalize(dir);
    let resolved = named.canonicalize().unwrap_or_else(|_| named.clone());
    for path in [&named, &resolved] {
        if path == Path::new("/") {
            return Err(MountError::Root(dir.display().to_string()));
        }
        if is_home_root(path) {
            return Err(MountError::HomeRoot(path.display().to_string()));
        }
        let mut protected: Vec<Protected> = protected_paths(pincer_home, workspace_base)
            .into_iter()
            .filter(|p| p.why != BASE_WHY)
            .collect();
        protected.push(Protected {
            path: real_or_named(&expand_tilde(workspace_base)),
            why: BASE_WHY,
            guard: Guard::AtOrAbove,
        });
        for p in &protected {
            if let Some(relation) = p.refuses(path) {
                return Err(MountError::Protected {
                    path: path.display().to_string(),
                    relation,
                    protected: p.path.display().to_string(),
                    why: p.why,
                });
            }
        }
    }
    Ok(())
}

/// Every read-write mount source of the configuration (any workspace's,
/// this one's included): a container can rename what is inside, so a
/// source inside one could be a symlink by the time Docker mounts it.
pub fn writable_sources(config: &crate::config::Config) -> Vec<Protected> {
    config
        .workspaces
        .values()
        .flat_map(|ws| ws.mounts.iter())
        .filter(|m| !m.read_only)
        .map(|m| Protected {
            path: real_or_named(&expand_tilde(&m.source)),
            why: "a folder a container can write (a read-write mount source)",
            guard: Guard::Inside,
        })
        .collect()
}

fn real_or_named(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| normalize(path))
}

/// Checks one configured mount and returns it with its source resolved.
pub fn check_source(source: &Path, protected: &[Protected]) -> Result<PathBuf, MountError> {
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
    for p in protected {
        let Some(relation) = p.refuses(&resolved) else {
            continue;
        };
        return Err(MountError::Protected {
            path: resolved.display().to_string(),
            relation,
            protected: p.path.display().to_string(),
            why: p.why,
        });
    }
    if std::fs::metadata(&resolved).is_ok_and(|m| m.file_type().is_socket()) {
        return Err(MountError::Socket(resolved.display().to_string()));
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

    fn check_source(source: &Path) -> Result<PathBuf, MountError> {
        super::check_source(source, &[])
    }

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

    fn refused(source: &Path, protected: &[Protected]) -> String {
        match super::check_source(source, protected) {
            Err(e) => e.to_string(),
            Ok(p) => panic!("{} was accepted", p.display()),
        }
    }

    #[test]
    fn what_the_container_must_never_reach_is_refused_inside_equal_or_above() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("state");
        let base = root.join("workspaces");
        for d in [&home.join("run"), &base.join("other"), &root.join("docs")] {
            std::fs::create_dir_all(d).unwrap();
        }
        let protected = protected_paths(&home, &base);
        for (source, says) in [
            (home.clone(), "is"),
            (home.join("run"), "is inside"),
            (root.clone(), "holds"),
            (base.join("other"), "is inside"),
            (PathBuf::from("/proc"), "is"),
            (PathBuf::from("/proc/1"), "is inside"),
            (PathBuf::from("/dev"), "is"),
            (PathBuf::from("/sys/fs"), "is inside"),
            (PathBuf::from("/home"), "is"),
            (PathBuf::from("/run"), "holds"),
            (PathBuf::from("/var"), "holds"),
        ] {
            if !source.exists() {
                continue;
            }
            let e = refused(&source, &protected);
            assert!(e.contains(says) && e.contains("must never reach"), "{e}");
        }
        assert_eq!(
            super::check_source(&root.join("docs"), &protected).unwrap(),
            root.join("docs"),
            "a folder of its own is fine"
        );
    }

    #[test]
    fn a_folder_inside_a_users_home_is_fine_but_home_itself_is_not() {
        let protected = protected_paths(Path::new("/nonexistent/h"), Path::new("/nonexistent/w"));
        let inside_home = protected
            .iter()
            .find(|p| p.path == Path::new("/home"))
            .unwrap();
        assert_eq!(inside_home.guard, Guard::AtOrAbove);
        assert!(refused(Path::new("/home"), &protected).contains("every user's home folder"));
    }

    #[test]
    fn a_unix_socket_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap().join("s.sock");
        let _listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        assert!(matches!(
            super::check_source(&path, &[]),
            Err(MountError::Socket(_))
        ));
    }

    #[test]
    fn a_source_inside_a_writable_mount_is_refused_but_the_mount_itself_is_fine() {
        let dir = tempfile::tempdir().unwrap();
        let shared = dir.path().canonicalize().unwrap().join("shared");
        std::fs::create_dir_all(shared.join("sub")).unwrap();
        let protected = [Protected {
            path: shared.clone(),
            why: "a folder a container can write (a read-write mount source)",
            guard: Guard::Inside,
        }];
        assert_eq!(super::check_source(&shared, &protected).unwrap(), shared);
        let e = refused(&shared.join("sub"), &protected);
        assert!(
            e.contains("is inside") && e.contains("a container can write"),
            "{e}"
        );
    }
}
