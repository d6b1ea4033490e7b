//! Cancelling long work when the host goes away: a flag, set explicitly or
//! when the host's connection is found closed.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How often long-running work looks at [`Cancel::is_cancelled`].
pub const CHECK_INTERVAL: Duration = Duration::from_millis(100);

#[derive(Debug)]
pub struct Cancel<'a> {
    flag: AtomicBool,
    /// The host's connection: once the host has closed it, nobody is
    /// listening for the result any more.
    conn: Option<BorrowedFd<'a>>,
}

impl<'a> Cancel<'a> {
    /// Never fires on its own (only through [`Cancel::cancel`]).
    pub fn never() -> Self {
        Cancel {
            flag: AtomicBool::new(false),
            conn: None,
        }
    }

    /// Fires when the peer of `conn` has closed its end.
    pub fn on_hangup(conn: BorrowedFd<'a>) -> Self {
        Cancel {
            flag: AtomicBool::new(false),
            conn: Some(conn),
        }
    }

    pub fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
    }

    /// Whether a waiting loop must also wake up every [`CHECK_INTERVAL`].
    pub fn is_watched(&self) -> bool {
        self.conn.is_some() || self.flag.load(Ordering::SeqCst)
    }

    pub fn is_cancelled(&self) -> bool {
        if self.flag.load(Ordering::SeqCst) {
            return true;
        }
        let Some(conn) = self.conn else {
            return false;
        };
        // No events asked for: poll reports only POLLHUP/POLLERR/POLLNVAL,
        // i.e. the peer closed the socket entirely (a half-close for
        // writing, which some clients do after their request, is not one).
        let mut fds = [libc::pollfd {
            fd: conn.as_raw_fd(),
            events: 0,
            revents: 0,
        }];
        // SAFETY: a valid array of one pollfd; zero timeout.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
        if ready > 0 && fds[0].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            self.cancel();
            return true;
        }
        false
    }
}

/// Waits until `conn` has something to read (or its peer closed it, which
/// reads as the end), checking `cancel` every [`CHECK_INTERVAL`]; `false`
/// once cancelled.
pub fn wait_readable(conn: BorrowedFd<'_>, cancel: &Cancel<'_>) -> bool {
    let interval = i32::try_from(CHECK_INTERVAL.as_millis()).unwrap_or(100);
    loop {
        let mut fds = [libc::pollfd {
            fd: conn.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        // SAFETY: a valid array of one pollfd.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), 1, interval) };
        if ready > 0 && fds[0].revents & libc::POLLIN != 0 {
            return true;
        }
        if cancel.is_cancelled() {
            return false;
        }
        if ready > 0 {
            // POLLHUP/POLLERR without data: the peer is gone.
            cancel.cancel();
            return false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    fn fires_on_peer_close_not_on_half_close() {
        let (ours, theirs) = UnixStream::pair().unwrap();
        let cancel = Cancel::on_hangup(ours.as_fd());
        assert!(!cancel.is_cancelled());
        theirs.shutdown(std::net::Shutdown::Write).unwrap();
        assert!(!cancel.is_cancelled());
        drop(theirs);
        assert!(cancel.is_cancelled());

        let never = Cancel::never();
        assert!(!never.is_cancelled() && !never.is_watched());
        never.cancel();
        assert!(never.is_cancelled());
    }
}
