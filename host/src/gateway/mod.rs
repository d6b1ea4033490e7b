//! The model gateway: keys, budgets, cost, cache, LLM routing and the HTTP
//! server that containers and external clients call and the MCP gateway.
//! Other rooms use what this facade exports; the modules are private.

mod budget;
mod cache;
mod cost;
mod embeddings;
mod keys;
mod lease;
mod llm;
mod mcp;
mod metrics;
mod revocations;
mod server;
mod sockets;
mod writer;

pub use budget::{Estimate, Ledger, utc_day};
pub use cost::PriceTable;
pub use embeddings::{local_embedder, memory_embedder};
pub use keys::{KeyInfo, KeyKind, KeyStore};
pub use llm::local::{LocalModel, fetch as model_fetch};
pub use llm::{check_deployment, default_client};
pub use server::{Gateway, Services, check_listen};
pub use sockets::WorkspaceSockets;
pub use writer::QUEUE_CAPACITY;
