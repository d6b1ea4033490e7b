//! The real `pincer start` as a child process: its banner, its log (stderr),
//! its stdout lines, SIGTERM. Killed and waited for when dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};

pub struct Daemon {
    pub child: Child,
    /// The first line it printed (`pincer is running: …`).
    pub banner: String,
    /// Kept open to read what the daemon prints later (the console's line,
    /// reloads); a daemon whose reader went away keeps serving
    /// (`agent::with_a_daemon_running_message_hands_the_turn_to_it`).
    stdout: BufReader<ChildStdout>,
    /// `127.0.0.1:PORT` of the webhook listener, when it has channels.
    pub webhooks: String,
    /// `http://127.0.0.1:PORT` of the gateway's TCP listener.
    pub gateway: String,
    pub log: PathBuf,
}

impl Daemon {
    /// Spawns `command` (a `pincer … start …` command) with its stderr in
    /// `log`, and reads its banner.
    pub fn spawn(mut command: Command, log: PathBuf) -> Daemon {
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("daemon log file"))
            .spawn()
            .expect("start pincer");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut banner = String::new();
        stdout.read_line(&mut banner).expect("read the banner");
        assert!(
            banner.contains("pincer is running"),
            "{banner}\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        let webhooks = banner
            .split("webhooks on http://")
            .nth(1)
            .and_then(|rest| rest.split("/channels/").next())
            .unwrap_or_default()
            .to_string();
        let gateway = banner
            .split("gateway on ")
            .nth(1)
            .and_then(|rest| rest.split("/v1").next())
            .unwrap_or_default()
            .to_string();
        Daemon {
            child,
            gateway,
            banner,
            stdout,
            webhooks,
            log,
        }
    }

    /// Reads the daemon's stdout until a line contains `wanted`.
    pub fn wait_for_line(&mut self, wanted: &str) -> String {
        let mut seen = String::new();
        loop {
            let mut line = String::new();
            let n = self
                .stdout
                .read_line(&mut line)
                .expect("read daemon output");
            assert!(
                n > 0,
                "the daemon ended before saying {wanted:?}:\n{seen}\n{}",
                self.log()
            );
            seen.push_str(&line);
            if line.contains(wanted) {
                return seen;
            }
        }
    }

    /// SIGTERM, then the exit status. An exit other than success is
    /// printed with the end of the log (the first thing a failing test's
    /// output shows).
    pub fn stop(&mut self) -> ExitStatus {
        // Signalled only while not reaped: a pid reaped already may be
        // another test's process now.
        if let Ok(None) = self.child.try_wait() {
            unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        }
        let status = self.child.wait().expect("wait for pincer");
        if !status.success() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!(
                "pincer (pid {}) stopped with {status}; the end of its log:\n{}",
                self.child.id(),
                lines[lines.len().saturating_sub(40)..].join("\n")
            );
        }
        status
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
