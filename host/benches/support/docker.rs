//! Docker things the benches share.

use std::path::PathBuf;
use std::process::Command;

/// Removes, on drop, every container of the bench's pincer instance.
pub struct DockerCleanup {
    pub home: PathBuf,
}

impl Drop for DockerCleanup {
    fn drop(&mut self) {
        let Ok(id) = std::fs::read_to_string(self.home.join("instance-id")) else {
            return;
        };
        let filter = format!("label=pincer.instance={}", id.trim());
        if let Ok(ids) = Command::new("docker")
            .args(["ps", "-aq", "--filter", &filter])
            .output()
        {
            for id in String::from_utf8_lossy(&ids.stdout).split_whitespace() {
                let _ = Command::new("docker").args(["rm", "-f", id]).output();
            }
        }
    }
}
