//! Host-side implementations of the capabilities plugins import. Each is
//! granted per plugin by its manifest; the WIT glue lives in `wit/`.

pub mod binding;
pub mod data;
pub mod fetch;
pub mod http;
pub mod kv;
pub mod multipart;
pub mod scrub;
pub mod secrets;
