//! The end-to-end tests, one module per subject, built as one test binary
//! so that `support/` and wasmtime are compiled and linked once. Run one
//! subject with `cargo test -p pincer --test e2e slack::` (see
//! `tests/README.md`).

// All of this binary is tests, its helpers too: a panic is the failure report.
#![allow(clippy::unwrap_used)]

mod support;

mod agent;
mod approvals;
mod budget;
mod chat;
mod cli;
mod cluster;
mod containers;
mod egress;
mod embeddings;
mod feishu;
mod gateway;
mod idle;
mod listeners;
mod local_model;
mod mcp;
mod memory;
mod plugin_build;
mod plugin_host;
mod policy_audit;
mod pynchy;
mod reach;
mod registry;
mod slack;
mod state;
mod weather;
mod web;
