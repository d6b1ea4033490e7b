//! The model gateway: keys, budgets, cost, cache, LLM routing and the HTTP
//! server that containers and external clients call and the MCP gateway.

pub mod budget;
pub mod cache;
pub mod cost;
pub mod keys;
pub mod lease;
pub mod llm;
pub mod mcp;
pub mod metrics;
pub mod server;
pub mod sockets;
pub mod writer;
