//! Lines for the host's log, tagged with the plugin's name.

pub use crate::wit::host::pincer::plugin::logging::Level;
use crate::wit::host::pincer::plugin::logging::log as host_log;

pub fn log(level: Level, message: &str) {
    host_log(level, message);
}

pub fn trace(message: &str) {
    host_log(Level::Trace, message);
}

pub fn debug(message: &str) {
    host_log(Level::Debug, message);
}

pub fn info(message: &str) {
    host_log(Level::Info, message);
}

pub fn warn(message: &str) {
    host_log(Level::Warn, message);
}

pub fn error(message: &str) {
    host_log(Level::Error, message);
}
