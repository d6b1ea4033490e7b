//! pincer: a container-isolated plugin host for AI assistants.
//!
//! One folder per subsystem; each exposes a small typed API (see docs/architecture.md).

/// A typed error that is one sentence for a person (what is wrong and what
/// to write instead); the caller adds where. `From<String>` and `From<&str>`
/// let the function that finds the problem say it with `?`.
macro_rules! sentence_error {
    ($(#[$doc:meta])* $vis:vis struct $name:ident;) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
        #[error("{0}")]
        $vis struct $name(pub String);

        impl From<String> for $name {
            fn from(why: String) -> Self {
                Self(why)
            }
        }

        impl From<&str> for $name {
            fn from(why: &str) -> Self {
                Self(why.to_owned())
            }
        }
    };
}

/// `println!` / `eprintln!` for code that outlives its terminal: a daemon
/// whose stdout reader went away (`pincer start | head -1`, a supervisor
/// that closed the pipe) keeps serving instead of panicking on EPIPE.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}

macro_rules! say_err {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

pub mod approvals;
pub mod audit;
pub mod channels;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod containers;
pub mod daemon;
pub mod db;
pub mod egress;
pub mod events;
pub mod file_watch;
pub mod gateway;
pub mod hosts;
pub mod listener;
pub mod memory;
pub mod operator;
pub mod pairing;
pub mod plugins;
pub mod policy;
pub mod preflight;
pub mod private_file;
pub mod router;
pub mod scheduler;
pub mod sessions;
pub mod suggest;
pub mod turn;
pub mod web;
