//! The default agent image, built offline: a scratch-style root filesystem
//! holding Debian's static busybox, imported into Docker with no registry
//! and no pull. The agent runner is not in the image; it is bind-mounted.

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;
use sha2::{Digest, Sha256};

use super::ContainerError;

pub const DEFAULT_IMAGE: &str = "pincer-agent:latest";
pub const BUSYBOX: &str = "/bin/busybox";
const LABEL_CONTENT: &str = "pincer.image.sha256";
/// The image's `agent` account: the baseline policy's `user`, an id no
/// host account has.
const AGENT_UID: u32 = 100_000;

const APPLETS: &[&str] = &[
    "sh",
    "ls",
    "cat",
    "echo",
    "mkdir",
    "rm",
    "cp",
    "mv",
    "grep",
    "sed",
    "awk",
    "head",
    "tail",
    "wc",
    "sleep",
    "env",
    "id",
    "touch",
    "find",
    "sort",
    "uniq",
    "tr",
    "cut",
    "date",
    "printf",
    "test",
    "[",
    "true",
    "false",
    "chmod",
    "ln",
    "pwd",
    "basename",
    "dirname",
    "xargs",
    "tee",
    "nc",
    "wget",
    "ip",
    "ps",
    "kill",
    "du",
    "df",
    "diff",
    "md5sum",
    "sha256sum",
    "gzip",
    "tar",
    "vi",
    "less",
    "expr",
    "seq",
    "stat",
    "readlink",
    "realpath",
    "which",
    "yes",
    "hostname",
];

/// What `build` did.
#[derive(Debug)]
pub struct Built {
    pub image: String,
    pub id: String,
    pub up_to_date: bool,
    pub bytes: usize,
}

/// Builds (or confirms) the default image; `progress` receives one line per step.
pub async fn build(
    docker: &Docker,
    tag: &str,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Built, ContainerError> {
    let busybox = std::fs::read(BUSYBOX).map_err(|e| ContainerError::Image(format!(
        "cannot read {BUSYBOX} ({e}); install Debian's static busybox: apt-get install busybox-static"
    )))?;
    progress(&format!(
        "assembling a root filesystem: {BUSYBOX} ({} KiB) and {} applets",
        busybox.len() / 1024,
        APPLETS.len()
    ));
    let rootfs = rootfs_tar(&busybox)
        .map_err(|e| ContainerError::Image(format!("assembling the root filesystem: {e}")))?;
    let digest = hex::encode(Sha256::digest(&rootfs));

    if let Ok(existing) = docker.inspect_image(tag).await {
        let same = existing
            .config
            .as_ref()
            .and_then(|c| c.labels.as_ref())
            .and_then(|l| l.get(LABEL_CONTENT))
            .is_some_and(|d| *d == digest);
        if same {
            progress(&format!("{tag} is up to date"));
            return Ok(Built {
                image: tag.into(),
                id: existing.id.unwrap_or_default(),
                up_to_date: true,
                bytes: rootfs.len(),
            });
        }
    }
    let (repo, version) = tag.rsplit_once(':').unwrap_or((tag, "latest"));
    progress(&format!(
        "importing into Docker as {tag} (no registry, no pull)"
    ));
    let options = CreateImageOptionsBuilder::default()
        .from_src("-")
        .repo(repo)
        .tag(version)
        .changes(vec![
            "WORKDIR /workspace".to_string(),
            "ENV PATH=/usr/local/bin:/usr/bin:/bin".to_string(),
            format!("LABEL {LABEL_CONTENT}={digest}"),
            "LABEL org.opencontainers.image.title=pincer-agent".to_string(),
            format!("CMD [\"{}\", \"serve\"]", super::spec::RUNNER_PATH),
        ])
        .build();
    let bytes = rootfs.len();
    let mut stream =
        docker.create_image(Some(options), Some(bollard::body_full(rootfs.into())), None);
    while let Some(item) = stream.next().await {
        let info = item.map_err(|e| ContainerError::Image(format!("docker import failed: {e}")))?;
        if let Some(error) = info.error_detail.and_then(|d| d.message) {
            return Err(ContainerError::Image(format!(
                "docker import failed: {error}"
            )));
        }
    }
    let inspected = docker.inspect_image(tag).await.map_err(|e| {
        ContainerError::Image(format!("the imported image cannot be inspected: {e}"))
    })?;
    let id = inspected.id.unwrap_or_default();
    progress(&format!("built {tag} ({id})"));
    Ok(Built {
        image: tag.into(),
        id,
        up_to_date: false,
        bytes,
    })
}

/// The image's root filesystem as a tar stream. Deterministic: the same
/// busybox gives the same bytes, so rebuilding is a no-op.
fn rootfs_tar(busybox: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(Vec::new());
    tar.mode(tar::HeaderMode::Deterministic);
    let dir = |tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, owner: u64| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(mode);
        h.set_uid(owner);
        h.set_gid(owner);
        h.set_size(0);
        h.set_mtime(0);
        tar.append_data(&mut h, path, std::io::empty())
    };
    for (path, mode, owner) in [
        ("bin", 0o755, 0),
        ("etc", 0o755, 0),
        ("usr", 0o755, 0),
        ("usr/bin", 0o755, 0),
        ("opt", 0o755, 0),
        ("opt/pincer", 0o755, 0),
        ("run", 0o755, 0),
        ("run/pincer", 0o755, 0),
        ("proc", 0o555, 0),
        ("sys", 0o555, 0),
        ("dev", 0o755, 0),
        ("tmp", 0o1777, 0),
        ("workspace", 0o755, u64::from(AGENT_UID)),
    ] {
        dir(&mut tar, path, mode, owner)?;
    }
    let file = |tar: &mut tar::Builder<Vec<u8>>, path: &str, mode: u32, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_mode(mode);
        h.set_size(data.len() as u64);
        h.set_mtime(0);
        tar.append_data(&mut h, path, data)
    };
    file(&mut tar, "bin/busybox", 0o755, busybox)?;
    let passwd = format!(
        "root:x:0:0:root:/root:/bin/sh\nagent:x:{AGENT_UID}:{AGENT_UID}:pincer agent:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n"
    );
    file(&mut tar, "etc/passwd", 0o644, passwd.as_bytes())?;
    let group = format!("root:x:0:\nagent:x:{AGENT_UID}:\nnogroup:x:65534:\n");
    file(&mut tar, "etc/group", 0o644, group.as_bytes())?;
    for applet in APPLETS {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_mode(0o777);
        h.set_size(0);
        h.set_mtime(0);
        tar.append_link(&mut h, format!("bin/{applet}"), "busybox")?;
    }
    // Scripts often start with `#!/usr/bin/env`.
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_mode(0o777);
    h.set_size(0);
    h.set_mtime(0);
    tar.append_link(&mut h, "usr/bin/env", "/bin/busybox")?;
    tar.into_inner()
}
