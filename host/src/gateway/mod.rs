//! The model gateway: keys, budgets, cost, cache, LLM routing and the HTTP
//! server that containers and external clients call (MCP comes next).

pub mod budget;
pub mod cache;
pub mod cost;
pub mod keys;
pub mod llm;
pub mod server;
