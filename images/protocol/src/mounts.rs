//! Where pincer's own parts sit inside every workspace container. The host
//! mounts them there (its container spec and `pincer policy audit` both use
//! [`pincer_mounts`]); the runner finds its sockets under them.

use std::path::{Path, PathBuf};

/// The workspace folder.
pub const WORKSPACE_DIR: &str = "/workspace";
/// The static agent runner binary (read-only).
pub const RUNNER_PATH: &str = "/opt/pincer/pincer-agent";
/// The parent of both socket folders.
pub const RUN_DIR: &str = "/run/pincer";
/// The gateway socket's folder: a host-owned folder, mounted read-only, so
/// the container can connect but never rename, replace or relink its
/// entries.
pub const GATEWAY_DIR: &str = "/run/pincer/gateway";
/// The runner socket's folder: the container's own (read-write); the host
/// reaches the runner only beneath a handle on it.
pub const RUNNER_DIR: &str = "/run/pincer/runner";

/// One bind mount pincer gives a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    pub target: &'static str,
    pub read_only: bool,
}

/// The host folder mounted at [`GATEWAY_DIR`], under a workspace's run
/// folder (`$PINCER_HOME/run/<workspace>`).
pub fn gateway_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("gateway")
}

/// The host folder mounted at [`RUNNER_DIR`], under a workspace's run folder.
pub fn runner_dir(run_dir: &Path) -> PathBuf {
    run_dir.join("runner")
}

/// The mounts pincer gives every container, before the configured ones:
/// the workspace folder, the runner binary, the gateway socket's folder
/// (host-owned, read-only) and the runner socket's folder (the container's).
pub fn pincer_mounts(workspace_dir: &Path, runner_binary: &Path, run_dir: &Path) -> Vec<Mount> {
    vec![
        Mount {
            source: workspace_dir.to_path_buf(),
            target: WORKSPACE_DIR,
            read_only: false,
        },
        Mount {
            source: runner_binary.to_path_buf(),
            target: RUNNER_PATH,
            read_only: true,
        },
        Mount {
            source: gateway_dir(run_dir),
            target: GATEWAY_DIR,
            read_only: true,
        },
        Mount {
            source: runner_dir(run_dir),
            target: RUNNER_DIR,
            read_only: false,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sockets_sit_in_their_mounted_folders() {
        let parent = |path: &str| Path::new(path).parent().map(Path::to_path_buf);
        assert_eq!(parent(crate::SOCKET_PATH), Some(PathBuf::from(RUNNER_DIR)));
        for socket in [crate::GATEWAY_SOCKET_PATH, crate::EGRESS_SOCKET_PATH] {
            assert_eq!(parent(socket), Some(PathBuf::from(GATEWAY_DIR)), "{socket}");
        }
        for dir in [GATEWAY_DIR, RUNNER_DIR] {
            assert_eq!(parent(dir), Some(PathBuf::from(RUN_DIR)));
        }
    }

    #[test]
    fn the_gateway_folder_is_read_only_and_the_runner_folder_is_not() {
        let mounts = pincer_mounts(Path::new("/w"), Path::new("/b"), Path::new("/r"));
        let mode = |target: &str| {
            mounts
                .iter()
                .find(|m| m.target == target)
                .map(|m| m.read_only)
        };
        assert_eq!(mode(GATEWAY_DIR), Some(true));
        assert_eq!(mode(RUNNER_DIR), Some(false));
        assert_eq!(mode(RUNNER_PATH), Some(true));
        assert_eq!(mounts[2].source, PathBuf::from("/r/gateway"));
    }
}
