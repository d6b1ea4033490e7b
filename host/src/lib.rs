//! pincer: a container-isolated plugin host for AI assistants.
//!
//! One folder per subsystem; each exposes a small typed API (see docs/architecture.md).

pub mod approvals;
pub mod audit;
pub mod channels;
pub mod cli;
pub mod config;
pub mod containers;
pub mod daemon;
pub mod db;
pub mod events;
pub mod file_watch;
pub mod gateway;
pub mod listener;
pub mod memory;
pub mod plugins;
pub mod policy;
pub mod preflight;
pub mod router;
pub mod scheduler;
pub mod sessions;
pub mod suggest;
pub mod turn;
