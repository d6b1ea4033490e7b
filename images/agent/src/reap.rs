//! Children and signals. As PID 1 of its container the runner inherits every
//! orphan, so it reaps zombies; it must not steal the exit status of the
//! commands it waits for itself. Commands are spawned and registered under one
//! lock, and the reaper only reaps exited children it does not know, peeking
//! with `waitid(WNOWAIT)` under that same lock. When the runner is not PID 1
//! (tests), it has no unknown children and the reaper does nothing.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The commands the runner is running (pid → registrations, in case a pid is
/// reused before its previous owner has let go of it).
#[derive(Debug, Default)]
pub struct Children {
    pids: Mutex<HashMap<libc::pid_t, usize>>,
}

/// A registered child; unregisters on drop. Drop it only after the child has
/// been waited for.
#[derive(Debug)]
pub struct Registration<'a> {
    children: &'a Children,
    pid: libc::pid_t,
}

impl Registration<'_> {
    pub fn pid(&self) -> libc::pid_t {
        self.pid
    }
}

impl Drop for Registration<'_> {
    fn drop(&mut self) {
        let mut pids = self.children.lock();
        if let Some(count) = pids.get_mut(&self.pid) {
            *count -= 1;
            if *count == 0 {
                pids.remove(&self.pid);
            }
        }
    }
}

impl Children {
    fn lock(&self) -> MutexGuard<'_, HashMap<libc::pid_t, usize>> {
        self.pids.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Spawns `command` and registers its pid before the reaper can look.
    pub fn spawn(&self, command: &mut Command) -> io::Result<(Child, Registration<'_>)> {
        let mut pids = self.lock();
        let child = command.spawn()?;
        let pid = child.id() as libc::pid_t;
        *pids.entry(pid).or_default() += 1;
        Ok((
            child,
            Registration {
                children: self,
                pid,
            },
        ))
    }

    /// Reaps every exited child that is not a registered command. Returns how
    /// many it reaped.
    pub fn reap_orphans(&self) -> usize {
        let pids = self.lock();
        let mut reaped = 0;
        loop {
            // SAFETY: an all-zero siginfo_t is valid; waitid fills it in.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: plain syscall on a valid out-pointer.
            let rc = unsafe {
                libc::waitid(
                    libc::P_ALL,
                    0,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
                )
            };
            if rc != 0 {
                break; // ECHILD: no children at all
            }
            // SAFETY: waitid succeeded, so si_pid is the field to read (0 if none exited).
            let pid = unsafe { info.si_pid() };
            if pid == 0 || pids.contains_key(&pid) {
                // Nothing exited, or the first exited child is a command whose
                // owner reaps it shortly; look again on the next round.
                break;
            }
            let mut status = 0;
            // SAFETY: plain syscall; pid is an exited child of ours.
            if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } <= 0 {
                break;
            }
            reaped += 1;
        }
        reaped
    }

    /// Kills the process group of every registered command.
    pub fn kill_all(&self) {
        for &pid in self.lock().keys() {
            // SAFETY: plain syscall. Commands lead their own process group.
            unsafe { libc::killpg(pid, libc::SIGKILL) };
        }
    }
}

/// Write end of the self-pipe the signal handler reports to (-1 until set).
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    // SAFETY: only async-signal-safe calls; errno is preserved for the
    // interrupted code.
    unsafe {
        let errno = *libc::__errno_location();
        let byte = signal as u8;
        libc::write(
            SIGNAL_PIPE.load(Ordering::Relaxed),
            (&raw const byte).cast(),
            1,
        );
        *libc::__errno_location() = errno;
    }
}

/// Catches SIGTERM, SIGINT and SIGCHLD with a handler that writes the signal
/// number to a self-pipe, and returns its read end. A handler (rather than a
/// blocked mask and `sigwait`) because commands inherit the signal mask but
/// not handlers (reset to the default by `execve`), and because the kernel
/// drops signals with the default disposition sent to a namespace's PID 1.
pub fn catch_signals() -> io::Result<OwnedFd> {
    let mut fds = [0; 2];
    // SAFETY: fds is a valid array of two ints.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two fresh descriptors; the write end is kept
    // open for the process's lifetime.
    let read_end = unsafe { OwnedFd::from_raw_fd(fds[0]) };
    SIGNAL_PIPE.store(fds[1], Ordering::Relaxed);
    for signal in [libc::SIGTERM, libc::SIGINT, libc::SIGCHLD] {
        // SAFETY: an all-zero sigaction is valid; the handler is an extern "C"
        // fn doing only async-signal-safe work. No SA_NOCLDWAIT: exit
        // statuses stay collectable.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(read_end)
}

/// Starts the thread that reaps orphans (on SIGCHLD, and every second in case
/// of a missed wake-up) and ends the runner on SIGTERM/SIGINT: kills the
/// commands' process groups, removes the socket, exits 0.
pub fn spawn_signal_thread(
    signals: OwnedFd,
    children: Arc<Children>,
    socket: PathBuf,
) -> io::Result<()> {
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut buf = [0u8; 64];
            loop {
                let mut fds = [libc::pollfd {
                    fd: signals.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                // SAFETY: valid pollfd array of length 1.
                unsafe { libc::poll(fds.as_mut_ptr(), 1, 1000) };
                // SAFETY: reading into a valid buffer from our pipe (non-blocking).
                let n =
                    unsafe { libc::read(signals.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                let received = usize::try_from(n).map_or(&buf[..0], |n| &buf[..n]);
                if let Some(&signal) = received
                    .iter()
                    .find(|&&s| i32::from(s) == libc::SIGTERM || i32::from(s) == libc::SIGINT)
                {
                    eprintln!("pincer-agent: signal {signal}, exiting");
                    children.kill_all();
                    let _ = std::fs::remove_file(&socket);
                    std::process::exit(0);
                }
                children.reap_orphans();
            }
        })
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registered_children_are_not_reaped_by_the_reaper() {
        let children = Children::default();
        let (mut child, registration) = children
            .spawn(Command::new("/bin/sh").args(["-c", "exit 7"]))
            .unwrap();
        // Let it exit, then run the reaper: it must leave the status alone.
        std::thread::sleep(std::time::Duration::from_millis(200));
        children.reap_orphans();
        assert_eq!(child.wait().unwrap().code(), Some(7));
        assert!(children.lock().contains_key(&registration.pid()));
        drop(registration);
        assert!(children.lock().is_empty());
    }
}
