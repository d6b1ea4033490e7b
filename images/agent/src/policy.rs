//! The runner's policy: read from [`POLICY_ENV`] and enforced at start, before
//! the runner accepts a connection. Everything here fails closed: a policy
//! the runner cannot enforce stops it (exit 2).
//!
//! * `no_process_creation`: the runner installs its own seccomp filter making
//!   `execve`/`execveat` fail with EPERM for itself and all its future
//!   children. (Fork/vfork/process clones are denied by the container's
//!   Docker seccomp profile; the runner needs thread clones and keeps them.)
//! * `allowed_executables`: every command is restricted, in the child before
//!   `execve`, by a Landlock ruleset that handles only `Execute` and allows it
//!   on the listed files; the runner also refuses up front when `argv[0]`
//!   resolves to an unlisted file.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use landlock::{
    AccessFs, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset, RulesetAttr,
    RulesetCreatedAttr,
};
use pincer_runner_protocol::{Enforcement, POLICY_ENV, RunnerPolicy};
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};

/// Why the runner refuses to start.
#[derive(Debug)]
pub enum PolicyError {
    /// `PINCER_RUNNER_POLICY` is not valid policy JSON.
    Invalid(String),
    /// An `allowed_executables` entry is unusable.
    Entry { path: String, reason: String },
    /// `allowed_executables` is set but the kernel has no Landlock.
    NoLandlock,
    /// Building the Landlock ruleset failed.
    Landlock(String),
    /// Installing the seccomp filter failed.
    Seccomp(String),
}

impl fmt::Display for PolicyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyError::Invalid(e) => write!(f, "invalid {POLICY_ENV}: {e}"),
            PolicyError::Entry { path, reason } => {
                write!(f, "allowed_executables entry {path:?}: {reason}")
            }
            PolicyError::NoLandlock => {
                f.write_str("allowed_executables needs Landlock, which this kernel does not offer")
            }
            PolicyError::Landlock(e) => write!(f, "cannot build the Landlock ruleset: {e}"),
            PolicyError::Seccomp(e) => {
                write!(
                    f,
                    "cannot install the no_process_creation seccomp filter: {e}"
                )
            }
        }
    }
}

impl std::error::Error for PolicyError {}

/// The policy from the environment; absent means nothing is restricted.
pub fn policy_from_env() -> Result<RunnerPolicy, PolicyError> {
    match std::env::var_os(POLICY_ENV) {
        None => Ok(RunnerPolicy::default()),
        Some(value) => policy_from_value(value),
    }
}

fn policy_from_value(value: OsString) -> Result<RunnerPolicy, PolicyError> {
    let value = value
        .into_string()
        .map_err(|_| PolicyError::Invalid("not UTF-8".into()))?;
    RunnerPolicy::from_env_value(&value).map_err(|e| PolicyError::Invalid(e.to_string()))
}

/// The restrictions in force, and what each command needs to honour them.
#[derive(Debug)]
pub struct Enforcer {
    /// What the runner reports in `Status`.
    pub enforcement: Enforcement,
    /// The policy asked for no process creation (used to word errors).
    pub no_process_creation: bool,
    /// Variables every command gets on top of the base environment (a
    /// request's own win): the egress proxy's, once the relay runs.
    pub child_env: Vec<(String, String)>,
    allowed: Option<Allowed>,
}

#[derive(Debug)]
struct Allowed {
    /// Canonical paths of the allowed files.
    files: BTreeSet<PathBuf>,
    /// A Landlock ruleset handling `Execute`, allowing it on `files`; each
    /// child restricts itself with it before `execve`.
    ruleset: OwnedFd,
    /// A seccomp filter each child installs too: `memfd_create` without
    /// `MFD_NOEXEC_SEAL` fails with EPERM. Landlock does not govern files on
    /// internal mounts, so an executable memfd could run anything.
    memfd_filter: Arc<BpfProgram>,
}

/// Why a program may not run.
#[derive(Debug, PartialEq, Eq)]
pub struct NotAllowed(pub String);

impl Enforcer {
    /// No restrictions (for tests).
    #[cfg(test)]
    pub fn unrestricted() -> Self {
        Enforcer {
            enforcement: Enforcement::default(),
            no_process_creation: false,
            child_env: Vec::new(),
            allowed: None,
        }
    }

    /// Enforces `policy` on the runner. Call before any other thread starts:
    /// the seccomp filter covers the calling thread and what it creates later.
    pub fn enforce(policy: &RunnerPolicy) -> Result<Self, PolicyError> {
        let landlock_abi = landlock_abi();
        let allowed = match &policy.allowed_executables {
            None => None,
            Some(list) => {
                if landlock_abi.is_none() {
                    return Err(PolicyError::NoLandlock);
                }
                let files = validate_allowed(list)?;
                let ruleset = build_ruleset(&files)?;
                let memfd_filter = Arc::new(memfd_noexec_filter()?);
                Some(Allowed {
                    files,
                    ruleset,
                    memfd_filter,
                })
            }
        };
        if policy.no_process_creation {
            install_exec_filter()?;
        }
        let enforcement = Enforcement {
            exec_filter: policy.no_process_creation,
            io_uring_refused: io_uring_refused(),
            landlock_abi,
            allowed_executables: allowed.as_ref().map(|a| {
                a.files
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect()
            }),
        };
        Ok(Enforcer {
            enforcement,
            no_process_creation: policy.no_process_creation,
            child_env: Vec::new(),
            allowed,
        })
    }

    /// The runner-side check: may the file `program` (as resolved for
    /// `execve`) be executed?
    pub fn check_program(&self, program: &Path) -> Result<(), NotAllowed> {
        let Some(allowed) = &self.allowed else {
            return Ok(());
        };
        let canonical = program.canonicalize().map_err(|e| {
            NotAllowed(format!(
                "{}: {e} (allowed_executables is enforced)",
                program.display()
            ))
        })?;
        if allowed.files.contains(&canonical) {
            Ok(())
        } else if canonical.as_path() == program {
            Err(NotAllowed(format!(
                "{} is not in allowed_executables",
                program.display()
            )))
        } else {
            Err(NotAllowed(format!(
                "{} (resolved to {}) is not in allowed_executables",
                program.display(),
                canonical.display()
            )))
        }
    }

    /// Whether a Landlock layer restricts commands.
    pub fn restricts_executables(&self) -> bool {
        self.allowed.is_some()
    }

    /// What each child must apply to itself before `execve`, if anything.
    pub fn child_restrictions(&self) -> Option<ChildRestrictions> {
        self.allowed.as_ref().map(|a| ChildRestrictions {
            ruleset: a.ruleset.as_raw_fd(),
            memfd_filter: Arc::clone(&a.memfd_filter),
        })
    }
}

/// The restrictions a child applies to itself (in a `pre_exec` hook).
#[derive(Debug, Clone)]
pub struct ChildRestrictions {
    ruleset: RawFd,
    memfd_filter: Arc<BpfProgram>,
}

impl ChildRestrictions {
    /// Restricts the calling process: `no_new_privs`, the Landlock ruleset,
    /// the memfd filter. Only async-signal-safe syscalls, no allocation: fit
    /// for the child between `fork` and `execve`.
    pub fn apply(&self) -> io::Result<()> {
        // SAFETY: plain syscalls with integer arguments; the ruleset fd is
        // owned by the runner's Enforcer, which outlives every spawn.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if libc::syscall(libc::SYS_landlock_restrict_self, self.ruleset, 0u32) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        seccompiler::apply_filter(&self.memfd_filter).map_err(|e| match e {
            seccompiler::Error::Prctl(e) | seccompiler::Error::Seccomp(e) => e,
            _ => io::Error::from_raw_os_error(libc::EINVAL),
        })
    }
}

const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;

/// The kernel's Landlock ABI version, if Landlock is available.
pub fn landlock_abi() -> Option<u32> {
    // SAFETY: with the VERSION flag, attr must be NULL and size 0.
    let version = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    u32::try_from(version).ok().filter(|&v| v > 0)
}

/// Whether the kernel refuses io_uring here (the container's seccomp profile,
/// or a kernel without it). io_uring submits I/O that seccomp cannot see, so
/// the host refuses a container where it is allowed.
pub fn io_uring_refused() -> bool {
    // SAFETY: a NULL params pointer makes an allowed call fail with EFAULT
    // before it creates anything; a refused one fails with EPERM or ENOSYS.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, std::ptr::null::<u8>()) };
    if fd >= 0 {
        // SAFETY: the call just created this descriptor and nothing else has it.
        unsafe { libc::close(fd as libc::c_int) };
        return false;
    }
    matches!(
        io::Error::last_os_error().raw_os_error(),
        Some(libc::EPERM) | Some(libc::ENOSYS)
    )
}

/// Each entry: absolute, an existing regular file (symlinks followed), whose
/// program interpreter (ELF `PT_INTERP` or `#!` line), if any, is listed too.
fn validate_allowed(list: &[String]) -> Result<BTreeSet<PathBuf>, PolicyError> {
    let entry_error = |path: &str, reason: String| PolicyError::Entry {
        path: path.to_string(),
        reason,
    };
    let mut files = BTreeMap::new();
    for entry in list {
        let path = Path::new(entry);
        if !path.is_absolute() {
            return Err(entry_error(entry, "not an absolute path".into()));
        }
        let meta = path
            .metadata()
            .map_err(|e| entry_error(entry, e.to_string()))?;
        if !meta.is_file() {
            return Err(entry_error(entry, "not a regular file".into()));
        }
        let canonical = path
            .canonicalize()
            .map_err(|e| entry_error(entry, e.to_string()))?;
        files.insert(canonical, entry);
    }
    for (canonical, entry) in &files {
        let interpreter = program_interpreter(canonical)
            .map_err(|e| entry_error(entry, format!("cannot read it: {e}")))?;
        let Some(interpreter) = interpreter else {
            continue;
        };
        let listed = interpreter
            .canonicalize()
            .is_ok_and(|i| files.contains_key(&i));
        if !listed {
            return Err(entry_error(
                entry,
                format!(
                    "executing it also executes its interpreter {}, which is not in the list \
                     (note: listing a dynamic loader lets any readable ELF file run through it)",
                    interpreter.display()
                ),
            ));
        }
    }
    Ok(files.into_keys().collect())
}

/// The program the kernel also executes (and Landlock checks for `Execute`)
/// when running `path`: the ELF interpreter (dynamic loader) or the `#!`
/// interpreter.
pub fn program_interpreter(path: &Path) -> io::Result<Option<PathBuf>> {
    let mut file = File::open(path)?;
    let mut head = [0u8; 256];
    let mut len = 0;
    while len < head.len() {
        match file.read(&mut head[len..])? {
            0 => break,
            n => len += n,
        }
    }
    let head = &head[..len];
    if let Some(rest) = head.strip_prefix(b"#!") {
        let line = rest.split(|&b| b == b'\n').next().unwrap_or(rest);
        let interpreter = line
            .split(|b| b.is_ascii_whitespace())
            .find(|word| !word.is_empty());
        return Ok(interpreter.map(|word| PathBuf::from(String::from_utf8_lossy(word).as_ref())));
    }
    if head.starts_with(b"\x7fELF") {
        return elf_interpreter(&file, head);
    }
    Ok(None)
}

/// `PT_INTERP` of a 64-bit little-endian ELF file (the runner's targets).
fn elf_interpreter(file: &File, head: &[u8]) -> io::Result<Option<PathBuf>> {
    const ELFCLASS64: u8 = 2;
    const ELFDATA2LSB: u8 = 1;
    const PT_INTERP: u32 = 3;
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "malformed ELF header");
    if head.len() < 64 || head[4] != ELFCLASS64 || head[5] != ELFDATA2LSB {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "not a 64-bit little-endian ELF file",
        ));
    }
    let u16_at = |b: &[u8], at: usize| -> io::Result<u16> {
        let bytes = b.get(at..at + 2).ok_or_else(bad)?;
        Ok(u16::from_le_bytes([bytes[0], bytes[1]]))
    };
    let u32_at = |b: &[u8], at: usize| -> io::Result<u32> {
        let bytes = b.get(at..at + 4).ok_or_else(bad)?;
        let mut a = [0u8; 4];
        a.copy_from_slice(bytes);
        Ok(u32::from_le_bytes(a))
    };
    let u64_at = |b: &[u8], at: usize| -> io::Result<u64> {
        let bytes = b.get(at..at + 8).ok_or_else(bad)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(bytes);
        Ok(u64::from_le_bytes(a))
    };
    let phoff = u64_at(head, 0x20)?;
    let phentsize = usize::from(u16_at(head, 0x36)?);
    let phnum = u16_at(head, 0x38)?;
    if phentsize < 56 {
        return Err(bad());
    }
    let mut phdr = vec![0u8; phentsize];
    for i in 0..u64::from(phnum) {
        let at = i
            .checked_mul(phentsize as u64)
            .and_then(|o| o.checked_add(phoff))
            .ok_or_else(bad)?;
        file.read_exact_at(&mut phdr, at)?;
        if u32_at(&phdr, 0)? != PT_INTERP {
            continue;
        }
        let offset = u64_at(&phdr, 8)?;
        let size = u64_at(&phdr, 32)?;
        if size == 0 || size > 4096 {
            return Err(bad());
        }
        let mut name = vec![0u8; size as usize];
        file.read_exact_at(&mut name, offset)?;
        let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
        name.truncate(end);
        return Ok(Some(PathBuf::from(String::from_utf8_lossy(&name).as_ref())));
    }
    Ok(None)
}

/// A ruleset that handles only `Execute` and allows it on `files`. Hard
/// requirement: any Landlock feature missing is an error, never a silent
/// best effort.
fn build_ruleset(files: &BTreeSet<PathBuf>) -> Result<OwnedFd, PolicyError> {
    let landlock_error = |e: &dyn fmt::Display| PolicyError::Landlock(e.to_string());
    let execute = AccessFs::Execute;
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(execute)
        .map_err(|e| landlock_error(&e))?
        .create()
        .map_err(|e| landlock_error(&e))?;
    for file in files {
        let fd = PathFd::new(file).map_err(|e| landlock_error(&e))?;
        ruleset = ruleset
            .add_rule(PathBeneath::new(fd, execute))
            .map_err(|e| landlock_error(&e))?;
    }
    let fd: Option<OwnedFd> = ruleset.into();
    fd.ok_or_else(|| PolicyError::Landlock("the kernel gave no ruleset".into()))
}

/// `memfd_create` without `MFD_NOEXEC_SEAL` fails with EPERM (on kernels
/// before 6.3, which lack the flag, every `memfd_create` fails).
fn memfd_noexec_filter() -> Result<BpfProgram, PolicyError> {
    const MFD_NOEXEC_SEAL: u64 = 0x0008;
    let seccomp_error = |e: &dyn fmt::Display| PolicyError::Seccomp(e.to_string());
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| seccomp_error(&e))?;
    let without_noexec_seal = SeccompCondition::new(
        1,
        SeccompCmpArgLen::Dword,
        SeccompCmpOp::MaskedEq(MFD_NOEXEC_SEAL),
        0,
    )
    .and_then(|c| SeccompRule::new(vec![c]))
    .map_err(|e| seccomp_error(&e))?;
    let rules = BTreeMap::from([(libc::SYS_memfd_create, vec![without_noexec_seal])]);
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| seccomp_error(&e))?;
    BpfProgram::try_from(filter).map_err(|e| seccomp_error(&e))
}

/// Makes `execve` and `execveat` fail with EPERM for the calling thread, the
/// threads it creates later and every child (seccomp filters are inherited
/// and survive `execve`). Also sets `no_new_privs`.
fn install_exec_filter() -> Result<(), PolicyError> {
    let seccomp_error = |e: &dyn fmt::Display| PolicyError::Seccomp(e.to_string());
    let arch = TargetArch::try_from(std::env::consts::ARCH).map_err(|e| seccomp_error(&e))?;
    let mut rules = BTreeMap::new();
    rules.insert(libc::SYS_execve, Vec::new());
    rules.insert(libc::SYS_execveat, Vec::new());
    #[cfg(target_arch = "x86_64")]
    {
        // The x32 ABI's numbers (where the kernel offers x32), lest it be a way around.
        const X32_SYSCALL_BIT: i64 = 0x4000_0000;
        rules.insert(X32_SYSCALL_BIT + 520, Vec::new());
        rules.insert(X32_SYSCALL_BIT + 545, Vec::new());
    }
    let filter = SeccompFilter::new(
        rules,
        SeccompAction::Allow,
        SeccompAction::Errno(libc::EPERM as u32),
        arch,
    )
    .map_err(|e| seccomp_error(&e))?;
    let program = BpfProgram::try_from(filter).map_err(|e| seccomp_error(&e))?;
    seccompiler::apply_filter(&program).map_err(|e| seccomp_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_value_must_be_valid_json() {
        assert!(policy_from_value("{}".into()).is_ok());
        assert!(matches!(
            policy_from_value("{".into()),
            Err(PolicyError::Invalid(_))
        ));
        assert!(matches!(
            policy_from_value("{\"allowed_executable\":[]}".into()),
            Err(PolicyError::Invalid(_))
        ));
    }

    #[test]
    fn entries_must_be_absolute_existing_files() {
        for (entry, needle) in [
            ("bin/sh", "absolute"),
            ("/nonexistent/pincer", "No such file"),
            ("/tmp", "regular file"),
        ] {
            let err = validate_allowed(&[entry.to_string()]).unwrap_err();
            assert!(err.to_string().contains(needle), "{entry}: {err}");
        }
    }

    #[test]
    fn static_busybox_needs_no_interpreter() {
        let busybox = Path::new("/bin/busybox");
        if !busybox.exists() {
            eprintln!("skipped: /bin/busybox (busybox-static) is not installed");
            return;
        }
        if program_interpreter(busybox).unwrap().is_some() {
            eprintln!("skipped: /bin/busybox is not the static build");
            return;
        }
        let files = validate_allowed(&["/bin/busybox".into()]).unwrap();
        assert_eq!(files.len(), 1);
    }

    #[test]
    fn dynamic_program_needs_its_loader_listed() {
        let env = Path::new("/usr/bin/env");
        let interpreter = program_interpreter(env).unwrap().expect("env is dynamic");
        assert!(interpreter.to_string_lossy().contains("ld-linux"));
        let err = validate_allowed(&["/usr/bin/env".into()]).unwrap_err();
        assert!(err.to_string().contains("interpreter"), "{err}");
        let both = validate_allowed(&[
            "/usr/bin/env".into(),
            interpreter.to_string_lossy().into_owned(),
        ])
        .unwrap();
        assert_eq!(both.len(), 2);
    }

    #[test]
    fn script_interpreter_is_read() {
        let dir = std::env::temp_dir().join(format!("pincer-policy-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("s");
        std::fs::write(&script, "#!  /bin/sh -e\necho hi\n").unwrap();
        assert_eq!(
            program_interpreter(&script).unwrap(),
            Some(PathBuf::from("/bin/sh"))
        );
        std::fs::write(&script, "plain text").unwrap();
        assert_eq!(program_interpreter(&script).unwrap(), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unrestricted_allows_everything() {
        let enforcer = Enforcer::unrestricted();
        assert!(enforcer.check_program(Path::new("/nonexistent")).is_ok());
        assert!(!enforcer.restricts_executables());
        assert!(enforcer.child_restrictions().is_none());
    }
}
