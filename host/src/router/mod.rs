//! The drivers: what starts turns. [`inbound`] runs a turn for each message
//! a channel stored; [`scheduled`] runs what `schedules.yaml` and the
//! agent's approved tasks make due. Both hand the turn itself to
//! [`crate::turn`], and both ask a person through `asking`.

mod asking;
pub mod inbound;
pub mod scheduled;
