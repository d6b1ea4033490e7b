//! The tunnel world: implement [`Guest`] and export it with
//! [`export_tunnel!`](crate::export_tunnel).

pub use crate::wit::tunnel_world::exports::pincer::plugin::tunnel::{Guest, TunnelError};

use crate::types::HttpError;

impl From<HttpError> for TunnelError {
    fn from(err: HttpError) -> Self {
        match err {
            HttpError::Denied(msg) => TunnelError::Denied(msg),
            other => TunnelError::Upstream(crate::http::describe(&other)),
        }
    }
}
