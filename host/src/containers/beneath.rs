//! The host's only ways of touching a name inside a folder a container can
//! write (its workspace folder, its runner folder, its mounts): opened
//! beneath a directory handle with `openat2` so that no symlink (nor a
//! `/proc` magic link, nor `..`) is ever followed, checked by `fstat` before
//! use, and — for the runner socket — connected through the opened handle
//! and checked at the other end (`SO_PEERCRED`: the peer process must be in
//! that container's cgroup).
//!
//! A container can rename, replace or relink anything in those folders at
//! any moment; these primitives are safe by construction against that: the
//! kernel resolves the name once, refusing symlinks, and everything after
//! works on the resolved inode. Without `openat2` (Linux < 5.6) they fail
//! closed; there is no fallback to path-based access.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

/// Why a name beneath a container-writable folder was not used.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    #[error(
        "this kernel has no openat2 (Linux 5.6 or newer is needed); pincer does not touch \
         files in container-writable folders without it"
    )]
    Unsupported,
    #[error("{0} does not exist")]
    NotFound(String),
    #[error(
        "{0} is a symlink (or a path through one); pincer never follows symlinks in folders a container can write"
    )]
    Symlink(String),
    #[error("{0} leads outside its folder; pincer reads only files beneath it")]
    Escapes(String),
    #[error("{name} is a {kind}, not a regular file; pincer reads only regular files")]
    NotRegular { name: String, kind: &'static str },
    #[error("{name} is a {kind}, not a unix socket")]
    NotSocket { name: String, kind: &'static str },
    #[error("{name}: {source}")]
    Io {
        name: String,
        source: std::io::Error,
    },
}

impl BeneathError {
    fn io(name: &Path, source: std::io::Error) -> Self {
        BeneathError::Io {
            name: name.display().to_string(),
            source,
        }
    }
}

/// `struct open_how` of `linux/openat2.h`.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Resolution flags used for every name: stay beneath the folder, follow no
/// symlink and no magic link.
const RESOLVE: u64 =
    libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;

/// Opens a host-controlled folder (one the host created and the container
/// cannot rename, such as `$PINCER_HOME/run/<ws>/runner` or the workspace
/// folder itself) as a directory handle. The path is the operator's; its
/// last component must be a real directory, not a symlink.
pub fn open_dir(path: &Path) -> Result<OwnedFd, BeneathError> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ENOENT) => BeneathError::NotFound(path.display().to_string()),
            Some(libc::ELOOP) => BeneathError::Symlink(path.display().to_string()),
            // O_DIRECTORY|O_NOFOLLOW on a symlink: ENOTDIR.
            Some(libc::ENOTDIR)
                if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) =>
            {
                BeneathError::Symlink(path.display().to_string())
            }
            _ => BeneathError::io(path, e),
        })?;
    Ok(OwnedFd::from(file))
}

/// Makes `path` a real directory (not a symlink) with `mode`, owned by
/// `owner` when given, changing it through a handle (never by path). The
/// parent must be a host folder no container can write; a symlink found at
/// `path` (left by an older layout) is removed, never followed.
pub fn ensure_dir(path: &Path, mode: u32, owner: Option<(u32, u32)>) -> Result<(), BeneathError> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(|e| BeneathError::io(parent, e))?;
    }
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
        std::fs::remove_file(path).map_err(|e| BeneathError::io(path, e))?;
    }
    match std::fs::create_dir(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(BeneathError::io(path, e)),
    }
    let dir = File::from(open_dir(path)?);
    // A host folder is the host's: take back one an older layout handed out.
    let owner = owner.or_else(|| {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid/getegid cannot fail.
        let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
        dir.metadata()
            .ok()
            .filter(|m| m.uid() != uid)
            .map(|_| (uid, gid))
    });
    if let Some((uid, gid)) = owner {
        std::os::unix::fs::fchown(&dir, Some(uid), Some(gid)).map_err(|e| {
            BeneathError::io(
                path,
                std::io::Error::new(
                    e.kind(),
                    format!("cannot hand it to the container user {uid}:{gid}: {e}"),
                ),
            )
        })?;
    }
    dir.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| BeneathError::io(path, e))?;
    Ok(())
}

/// `openat2(dir, name, flags, resolve)`; maps the kernel's refusals to
/// [`BeneathError`]. `display` names the file in messages.
fn openat2(
    dir: Option<BorrowedFd<'_>>,
    name: &Path,
    flags: i32,
    resolve: u64,
    display: &Path,
) -> Result<OwnedFd, BeneathError> {
    openat2_mode(dir, name, flags, 0, resolve, display)
}

/// [`openat2`] with the mode of a file `O_CREAT` makes.
fn openat2_mode(
    dir: Option<BorrowedFd<'_>>,
    name: &Path,
    flags: i32,
    mode: u64,
    resolve: u64,
    display: &Path,
) -> Result<OwnedFd, BeneathError> {
    use std::os::unix::ffi::OsStrExt;
    let c_name = std::ffi::CString::new(name.as_os_str().as_bytes())
        .map_err(|e| BeneathError::io(display, std::io::Error::other(e)))?;
    let how = OpenHow {
        flags: u64::try_from(flags | libc::O_CLOEXEC).unwrap_or(0),
        mode,
        resolve,
    };
    let dirfd = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    loop {
        // SAFETY: `c_name` and `how` outlive the call; the size is exact.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                dirfd,
                c_name.as_ptr(),
                &how as *const OpenHow,
                std::mem::size_of::<OpenHow>(),
            )
        };
        if fd >= 0 {
            let fd = i32::try_from(fd).map_err(|_| {
                BeneathError::io(
                    display,
                    std::io::Error::other("file descriptor out of range"),
                )
            })?;
            // SAFETY: the kernel just returned this descriptor to us.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
        let e = std::io::Error::last_os_error();
        let shown = display.display().to_string();
        return Err(match e.raw_os_error() {
            Some(libc::EINTR) | Some(libc::EAGAIN) => continue,
            Some(libc::ENOSYS) => BeneathError::Unsupported,
            Some(libc::ENOENT) => BeneathError::NotFound(shown),
            Some(libc::ELOOP) => BeneathError::Symlink(shown),
            Some(libc::EXDEV) => BeneathError::Escapes(shown),
            // Opening a socket file (or a FIFO without a reader for writing).
            Some(libc::ENXIO) => BeneathError::NotRegular {
                name: shown,
                kind: "socket or device",
            },
            _ => BeneathError::io(display, e),
        });
    }
}

fn kind_of(meta: &std::fs::Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_file() {
        "regular file"
    } else if t.is_dir() {
        "directory"
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_socket() {
        "socket"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else {
        "special file"
    }
}

/// What a capped read got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capped {
    /// At most `cap` bytes from the start of the file.
    pub bytes: Vec<u8>,
    /// The file had more than `cap` bytes.
    pub truncated: bool,
}

/// Reads the regular file `name` (relative, beneath `dir`) without following
/// any symlink, without blocking on a FIFO or device, and at most `cap`
/// bytes of it. Blocking I/O: call it off the async threads.
pub fn read_regular_beneath(
    dir: BorrowedFd<'_>,
    name: &Path,
    cap: usize,
    display: &Path,
) -> Result<Capped, BeneathError> {
    if name.is_absolute() {
        return Err(BeneathError::Escapes(display.display().to_string()));
    }
    let fd = openat2(
        Some(dir),
        name,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        RESOLVE,
        display,
    )?;
    read_capped(File::from(fd), cap, display)
}

/// Reads an operator-configured absolute path that is not inside any
/// container-writable folder: no component may be a symlink or `..`, and
/// the same regular-only, non-blocking, capped read applies.
pub fn read_regular_absolute(path: &Path, cap: usize) -> Result<Capped, BeneathError> {
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(BeneathError::Escapes(path.display().to_string()));
    }
    let fd = openat2(
        None,
        path,
        libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
        libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS,
        path,
    )?;
    read_capped(File::from(fd), cap, path)
}

fn read_capped(file: File, cap: usize, display: &Path) -> Result<Capped, BeneathError> {
    let meta = file.metadata().map_err(|e| BeneathError::io(display, e))?;
    if !meta.file_type().is_file() {
        return Err(BeneathError::NotRegular {
            name: display.display().to_string(),
            kind: kind_of(&meta),
        });
    }
    let mut bytes = Vec::with_capacity(cap.min(64 * 1024) + 1);
    file.take(u64::try_from(cap).unwrap_or(u64::MAX).saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| BeneathError::io(display, e))?;
    let truncated = bytes.len() > cap;
    bytes.truncate(cap);
    Ok(Capped { bytes, truncated })
}

/// The directory `name` (one component) beneath `dir`, made with `mode`
/// and handed to `owner` when it is not there yet; an existing one is
/// opened without following a symlink, and must be a directory.
pub fn subdir_beneath(
    dir: BorrowedFd<'_>,
    name: &str,
    mode: u32,
    owner: Option<(u32, u32)>,
    display: &Path,
) -> Result<OwnedFd, BeneathError> {
    single_component(name, display)?;
    let c_name = std::ffi::CString::new(name)
        .map_err(|e| BeneathError::io(display, std::io::Error::other(e)))?;
    // SAFETY: `c_name` outlives the call.
    let made = unsafe { libc::mkdirat(dir.as_raw_fd(), c_name.as_ptr(), mode) } == 0;
    if !made {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EEXIST) {
            return Err(BeneathError::io(display, e));
        }
    }
    // RESOLVE_NO_SYMLINKS refuses a symlink in the last place too (ELOOP).
    let fd = openat2(
        Some(dir),
        Path::new(name),
        libc::O_RDONLY | libc::O_DIRECTORY,
        RESOLVE,
        display,
    )?;
    if made {
        let file = File::from(fd);
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
                .map_err(|e| BeneathError::io(display, e))?;
        }
        use std::os::unix::fs::PermissionsExt;
        // mkdirat's mode is cut by the umask.
        file.set_permissions(std::fs::Permissions::from_mode(mode))
            .map_err(|e| BeneathError::io(display, e))?;
        return Ok(OwnedFd::from(file));
    }
    Ok(fd)
}

/// What [`reown_tree`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reowned {
    /// Entries (the folder included) handed to the new owner.
    pub changed: usize,
    /// Files with more than one link, left as they were: another link may
    /// be outside the folder.
    pub skipped_links: usize,
    /// The walk stopped at its limit of entries or depth.
    pub truncated: bool,
}

/// Hands `dir` and everything beneath it that `from.0` owns to `to`,
/// never by a path: each entry is opened itself (`openat2` with
/// `O_PATH|O_NOFOLLOW`, beneath its folder's handle, no symlink followed),
/// and that one handle is looked at (`fstat`), changed (`fchownat` with
/// `AT_EMPTY_PATH`) and, for a folder, listed; a file with several links
/// is left alone. The group changes only where it is `from.1`. At most
/// `limit` entries, 64 levels deep.
pub fn reown_tree(
    dir: &Path,
    from: (u32, u32),
    to: (u32, u32),
    limit: usize,
) -> Result<Reowned, BeneathError> {
    let root = open_dir(dir)?;
    let mut done = Reowned::default();
    let meta = File::from(root.try_clone().map_err(|e| BeneathError::io(dir, e))?)
        .metadata()
        .map_err(|e| BeneathError::io(dir, e))?;
    if std::os::unix::fs::MetadataExt::uid(&meta) == from.0 {
        let gid = (std::os::unix::fs::MetadataExt::gid(&meta) == from.1).then_some(to.1);
        std::os::unix::fs::fchown(&root, Some(to.0), gid).map_err(|e| BeneathError::io(dir, e))?;
        done.changed += 1;
    }
    reown_beneath(&root, dir, from, to, limit, 0, &mut done)?;
    Ok(done)
}

fn reown_beneath(
    dir: &OwnedFd,
    display: &Path,
    from: (u32, u32),
    to: (u32, u32),
    limit: usize,
    depth: usize,
    done: &mut Reowned,
) -> Result<(), BeneathError> {
    if depth >= 64 {
        done.truncated = true;
        return Ok(());
    }
    // The listing of exactly this handle's folder (`/proc/self/fd/N` is
    // the open directory itself, whatever its path now names).
    let listing = std::fs::read_dir(fd_path(dir)).map_err(|e| BeneathError::io(display, e))?;
    for entry in listing {
        let entry = entry.map_err(|e| BeneathError::io(display, e))?;
        let name = entry.file_name();
        let shown = display.join(&name);
        // The entry itself (a symlink stays a symlink): what is looked at,
        // handed over and descended into is this one inode, whatever the
        // name is renamed or relinked to meanwhile.
        let handle = match openat2(
            Some(dir.as_fd()),
            Path::new(&name),
            libc::O_PATH | libc::O_NOFOLLOW,
            RESOLVE,
            &shown,
        ) {
            Ok(handle) => handle,
            // Gone since the listing: the container's to remove.
            Err(BeneathError::NotFound(_)) => continue,
            Err(e) => return Err(e),
        };
        // SAFETY: `stat` is plain data the call fills.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(handle.as_raw_fd(), &mut stat) } != 0 {
            return Err(BeneathError::io(&shown, std::io::Error::last_os_error()));
        }
        let is_dir = stat.st_mode & libc::S_IFMT == libc::S_IFDIR;
        if stat.st_uid == from.0 {
            if done.changed >= limit {
                done.truncated = true;
                return Ok(());
            }
            if !is_dir && stat.st_nlink > 1 {
                done.skipped_links += 1;
            } else {
                let gid = if stat.st_gid == from.1 {
                    to.1
                } else {
                    stat.st_gid
                };
                // SAFETY: the empty name is a valid C string; with
                // AT_EMPTY_PATH the call changes the handle's own inode.
                let changed = unsafe {
                    libc::fchownat(
                        handle.as_raw_fd(),
                        c"".as_ptr(),
                        to.0,
                        gid,
                        libc::AT_EMPTY_PATH,
                    )
                };
                if changed != 0 {
                    return Err(BeneathError::io(&shown, std::io::Error::last_os_error()));
                }
                done.changed += 1;
            }
        }
        if is_dir {
            reown_beneath(&handle, &shown, from, to, limit, depth + 1, done)?;
        }
        if done.truncated {
            return Ok(());
        }
    }
    Ok(())
}

/// A new regular file `name` (one component) beneath `dir`, opened for
/// writing; `None` when that name is taken (by anything: a file, a
/// symlink, a directory), so the caller picks another.
pub fn create_beneath(
    dir: BorrowedFd<'_>,
    name: &str,
    owner: Option<(u32, u32)>,
    display: &Path,
) -> Result<Option<File>, BeneathError> {
    single_component(name, display)?;
    match openat2_mode(
        Some(dir),
        Path::new(name),
        libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW,
        0o644,
        RESOLVE,
        display,
    ) {
        Ok(fd) => {
            let file = File::from(fd);
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::fchown(&file, Some(uid), Some(gid))
                    .map_err(|e| BeneathError::io(display, e))?;
            }
            Ok(Some(file))
        }
        Err(BeneathError::Io { source, .. }) if source.raw_os_error() == Some(libc::EEXIST) => {
            Ok(None)
        }
        // A dangling symlink under that name: taken too.
        Err(BeneathError::Symlink(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Removes the file `name` (one component) beneath `dir`; gone already is fine.
pub fn remove_beneath(dir: BorrowedFd<'_>, name: &str) -> std::io::Result<()> {
    let c_name = std::ffi::CString::new(name).map_err(std::io::Error::other)?;
    // SAFETY: `c_name` outlives the call.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), c_name.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ENOENT) {
        Ok(())
    } else {
        Err(e)
    }
}

fn single_component(name: &str, display: &Path) -> Result<(), BeneathError> {
    if name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0') {
        return Err(BeneathError::Escapes(display.display().to_string()));
    }
    Ok(())
}

/// An `O_PATH` handle on the unix socket `name` beneath `dir`, resolved
/// without following symlinks; connect to it with [`fd_path`] while
/// the handle is open.
pub fn open_socket_beneath(
    dir: BorrowedFd<'_>,
    name: &Path,
    display: &Path,
) -> Result<OwnedFd, BeneathError> {
    let fd = openat2(
        Some(dir),
        name,
        libc::O_PATH | libc::O_NOFOLLOW,
        RESOLVE,
        display,
    )?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|e| BeneathError::io(display, e))?;
    // O_PATH|O_NOFOLLOW hands back the symlink itself rather than failing.
    if meta.file_type().is_symlink() {
        return Err(BeneathError::Symlink(display.display().to_string()));
    }
    if !meta.file_type().is_socket() {
        return Err(BeneathError::NotSocket {
            name: display.display().to_string(),
            kind: kind_of(&meta),
        });
    }
    Ok(OwnedFd::from(file))
}

/// The path of exactly the file a handle refers to (a socket to connect
/// to, a folder to list): the kernel resolves `/proc/self/fd/N` to that very
/// inode, whatever has been renamed since.
pub fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// Whether process `pid` (as this process sees it) belongs to the container
/// `container_id` (Docker's full id): its `/proc/<pid>/cgroup` names the
/// container's cgroup (`docker-<id>.scope`, `/docker/<id>`, or under a
/// cgroup namespace the container's own root, checked through the pid's
/// cgroup namespace being the container's).
pub fn pid_in_container(pid: i32, container_id: &str) -> bool {
    if pid <= 0 || container_id.len() < 12 || !container_id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/cgroup")) {
        Ok(text) => cgroup_names_container(&text, container_id),
        Err(_) => false,
    }
}

/// Whether a `/proc/<pid>/cgroup` text places the process in the
/// container's cgroup: some hierarchy's path has a component that is the
/// container id itself or `docker-<id>.scope` (systemd driver).
pub fn cgroup_names_container(text: &str, container_id: &str) -> bool {
    let scope = format!("docker-{container_id}.scope");
    text.lines().any(|line| {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        path.split('/')
            .any(|part| part == container_id || part == scope)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    fn dir() -> (tempfile::TempDir, OwnedFd) {
        let tmp = tempfile::tempdir().unwrap();
        let fd = open_dir(tmp.path()).unwrap();
        (tmp, fd)
    }

    fn read(fd: &OwnedFd, name: &str, cap: usize) -> Result<Capped, BeneathError> {
        read_regular_beneath(fd.as_fd(), Path::new(name), cap, Path::new(name))
    }

    #[test]
    fn regular_files_are_read_and_capped() {
        let (tmp, fd) = dir();
        std::fs::write(tmp.path().join("a.md"), "hello").unwrap();
        assert_eq!(
            read(&fd, "a.md", 10).unwrap(),
            Capped {
                bytes: b"hello".to_vec(),
                truncated: false
            }
        );
        assert_eq!(
            read(&fd, "a.md", 5).unwrap(),
            Capped {
                bytes: b"hello".to_vec(),
                truncated: false
            }
        );
        let cut = read(&fd, "a.md", 3).unwrap();
        assert_eq!(cut.bytes, b"hel");
        assert!(cut.truncated);
        std::fs::create_dir(tmp.path().join("sub")).unwrap();
        std::fs::write(tmp.path().join("sub/b.md"), "b").unwrap();
        assert_eq!(read(&fd, "sub/b.md", 10).unwrap().bytes, b"b");
    }

    #[test]
    fn a_sparse_huge_file_is_read_only_up_to_the_cap() {
        let (tmp, fd) = dir();
        let f = File::create(tmp.path().join("big")).unwrap();
        f.set_len(1 << 30).unwrap();
        let got = read(&fd, "big", 1024).unwrap();
        assert_eq!(got.bytes.len(), 1024);
        assert!(got.truncated);
    }

    #[test]
    fn symlinks_fifos_devices_and_escapes_are_refused() {
        let (tmp, fd) = dir();
        let root = tmp.path();
        std::os::unix::fs::symlink("/proc/self/environ", root.join("env")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join("zero")).unwrap();
        std::fs::write(root.join("real"), "x").unwrap();
        std::os::unix::fs::symlink("real", root.join("inside")).unwrap();
        std::fs::create_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink("/etc", root.join("etc")).unwrap();
        for name in ["env", "zero", "inside", "etc/passwd"] {
            let err = read(&fd, name, 10).unwrap_err();
            assert!(matches!(err, BeneathError::Symlink(_)), "{name}: {err}");
            assert!(err.to_string().contains("symlink"), "{err}");
        }
        let fifo = std::ffi::CString::new(root.join("fifo").to_str().unwrap()).unwrap();
        // SAFETY: a valid C string.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let started = std::time::Instant::now();
        let err = read(&fd, "fifo", 10).unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(
            matches!(err, BeneathError::NotRegular { kind: "FIFO", .. }),
            "{err}"
        );
        let err = read(&fd, "d", 10).unwrap_err();
        assert!(matches!(err, BeneathError::NotRegular { .. }), "{err}");
        for name in ["../x", "d/../../x", "/etc/passwd"] {
            let err = read(&fd, name, 10).unwrap_err();
            assert!(matches!(err, BeneathError::Escapes(_)), "{name}: {err}");
        }
        assert!(matches!(
            read(&fd, "missing", 10).unwrap_err(),
            BeneathError::NotFound(_)
        ));
        // The folder itself may not be a symlink either.
        std::os::unix::fs::symlink(root.join("d"), root.join("dlink")).unwrap();
        assert!(matches!(
            open_dir(&root.join("dlink")).unwrap_err(),
            BeneathError::Symlink(_)
        ));
    }

    #[test]
    fn absolute_paths_follow_no_symlink_anywhere() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        std::fs::write(root.join("real.md"), "ops").unwrap();
        assert_eq!(
            read_regular_absolute(&root.join("real.md"), 10)
                .unwrap()
                .bytes,
            b"ops"
        );
        std::os::unix::fs::symlink(root, root.join("via")).unwrap();
        assert!(matches!(
            read_regular_absolute(&root.join("via/real.md"), 10).unwrap_err(),
            BeneathError::Symlink(_)
        ));
        assert!(matches!(
            read_regular_absolute(&root.join("x/../real.md"), 10).unwrap_err(),
            BeneathError::Escapes(_)
        ));
        assert!(matches!(
            read_regular_absolute(Path::new("/dev/zero"), 10).unwrap_err(),
            BeneathError::NotRegular { .. }
        ));
    }

    #[test]
    fn sockets_are_reached_through_their_handle_only() {
        let (tmp, fd) = dir();
        let root = tmp.path();
        let listener = std::os::unix::net::UnixListener::bind(root.join("s.sock")).unwrap();
        let handle = open_socket_beneath(fd.as_fd(), Path::new("s.sock"), Path::new("s")).unwrap();
        // Renaming the name away after resolution does not matter.
        std::fs::rename(root.join("s.sock"), root.join("moved.sock")).unwrap();
        let stream = std::os::unix::net::UnixStream::connect(fd_path(&handle)).unwrap();
        let (_accepted, _) = listener.accept().unwrap();
        drop(stream);
        std::os::unix::fs::symlink("moved.sock", root.join("link.sock")).unwrap();
        assert!(matches!(
            open_socket_beneath(fd.as_fd(), Path::new("link.sock"), Path::new("l")).unwrap_err(),
            BeneathError::Symlink(_)
        ));
        std::fs::write(root.join("file.sock"), "").unwrap();
        assert!(matches!(
            open_socket_beneath(fd.as_fd(), Path::new("file.sock"), Path::new("f")).unwrap_err(),
            BeneathError::NotSocket { .. }
        ));
    }

    #[test]
    fn ensure_dir_makes_a_real_directory_and_replaces_a_symlink() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("elsewhere");
        std::fs::create_dir(&target).unwrap();
        let before = std::fs::metadata(&target).unwrap().permissions().mode();
        let dir = tmp.path().join("run/w/gateway");
        ensure_dir(&dir, 0o755, None).unwrap();
        ensure_dir(&dir, 0o755, None).unwrap();
        assert!(std::fs::symlink_metadata(&dir).unwrap().is_dir());
        std::fs::remove_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&target, &dir).unwrap();
        ensure_dir(&dir, 0o700, None).unwrap();
        let meta = std::fs::symlink_metadata(&dir).unwrap();
        assert!(meta.is_dir());
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
        // The symlink's target was left alone.
        assert_eq!(
            std::fs::metadata(&target).unwrap().permissions().mode(),
            before
        );
    }

    #[test]
    fn cgroup_membership_is_by_exact_container_id() {
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        assert!(cgroup_names_container(
            &format!("12:memory:/docker/{id}\n0::/docker/{id}\n"),
            id
        ));
        assert!(cgroup_names_container(
            &format!("0::/system.slice/docker-{id}.scope\n"),
            id
        ));
        assert!(!cgroup_names_container("0::/user.slice\n", id));
        assert!(!cgroup_names_container(&format!("0::/docker/{id}x\n"), id));
        // This test process is in no such container.
        assert!(!pid_in_container(std::process::id() as i32, id));
        assert!(!pid_in_container(0, id));
        assert!(!pid_in_container(1, "not-hex"));
    }

    /// The old container user's tree is handed over; nothing outside it
    /// is touched through a symlink or a second link, and what another
    /// user owns stays theirs.
    #[test]
    fn reown_tree_hands_over_only_what_the_old_user_owned_beneath_the_folder() {
        use std::os::unix::fs::{MetadataExt, chown, lchown, symlink};
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: changing owners needs root");
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let outside = tmp.path().join("outside");
        std::fs::write(&outside, "host file").unwrap();
        chown(&outside, Some(1000), Some(1000)).unwrap();
        let ws = tmp.path().join("ws");
        std::fs::create_dir_all(ws.join("deep/er")).unwrap();
        for (path, owner) in [
            (ws.clone(), 1000),
            (ws.join("deep"), 1000),
            (ws.join("deep/er"), 1000),
        ] {
            chown(&path, Some(owner), Some(owner)).unwrap();
        }
        std::fs::write(ws.join("deep/er/notes.md"), "x").unwrap();
        chown(ws.join("deep/er/notes.md"), Some(1000), Some(1000)).unwrap();
        std::fs::write(ws.join("hosts"), "the host's").unwrap();
        symlink(&outside, ws.join("link")).unwrap();
        lchown(ws.join("link"), Some(1000), Some(1000)).unwrap();
        std::fs::hard_link(&outside, ws.join("hard")).unwrap();
        // A FIFO without a reader: looked at and handed over, never opened
        // for reading (that would block).
        let fifo = std::ffi::CString::new(ws.join("fifo").as_os_str().as_encoded_bytes()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        lchown(ws.join("fifo"), Some(1000), Some(1000)).unwrap();

        let done = reown_tree(&ws, (1000, 1000), (100_000, 100_000), 1000).unwrap();
        assert_eq!(
            done,
            Reowned {
                changed: 6,
                skipped_links: 1,
                truncated: false
            }
        );
        let owner = |p: &Path| {
            let m = std::fs::symlink_metadata(p).unwrap();
            (m.uid(), m.gid())
        };
        for changed in ["", "deep", "deep/er", "deep/er/notes.md", "link", "fifo"] {
            assert_eq!(owner(&ws.join(changed)), (100_000, 100_000), "{changed}");
        }
        assert_eq!(owner(&ws.join("hosts")), (0, 0));
        assert_eq!(
            owner(&outside),
            (1000, 1000),
            "not through the symlink or the link"
        );
        // Once: nothing is left to hand over.
        let again = reown_tree(&ws, (1000, 1000), (100_000, 100_000), 1000).unwrap();
        assert_eq!(again.changed, 0);
        // The limit stops the walk and says so.
        let limited = reown_tree(&ws, (100_000, 100_000), (1000, 1000), 2).unwrap();
        assert!(limited.truncated && limited.changed == 2, "{limited:?}");
    }
}
