//! The channel world: implement [`Guest`] and export it with
//! [`export_channel!`](crate::export_channel).

pub use crate::wit::host::exports::pincer::plugin::channel::*;
