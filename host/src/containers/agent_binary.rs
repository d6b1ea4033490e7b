//! The static agent runner, built from `images/agent` by `host/build.rs` and
//! embedded here; written once into `$PINCER_HOME/bin/` so containers can
//! bind-mount it read-only.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::ContainerError;

mod embedded {
    include!(concat!(env!("OUT_DIR"), "/agent_binary.rs"));
}

/// Writes the runner into `<home>/bin/` (named by its digest, so upgrades
/// never touch a binary a running container has mounted) and returns its path.
pub fn install(home: &Path) -> Result<PathBuf, ContainerError> {
    let path = path(home);
    let dir = home.join("bin");
    if path.is_file() {
        return Ok(path);
    }
    let failed = |e: std::io::Error| {
        ContainerError::Host(format!(
            "installing the agent runner into {}: {e}",
            dir.display()
        ))
    };
    std::fs::create_dir_all(&dir).map_err(failed)?;
    let tmp = tempfile::NamedTempFile::new_in(&dir).map_err(failed)?;
    std::fs::write(tmp.path(), embedded::AGENT).map_err(failed)?;
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).map_err(failed)?;
    tmp.persist(&path).map_err(|e| failed(e.error))?;
    Ok(path)
}

/// Where [`install`] puts this build's runner.
pub fn path(home: &Path) -> PathBuf {
    let digest = hex::encode(&Sha256::digest(embedded::AGENT)[..6]);
    home.join("bin").join(format!("pincer-agent-{digest}"))
}

pub fn size() -> usize {
    embedded::AGENT.len()
}
