//! Several daemons on one shared state (PostgreSQL): who runs what, by
//! leases with fencing tokens, and the wake-ups that tell a daemon there is
//! work for it. See docs/architecture.md, "Past one machine".

mod leases;
mod wakeups;

pub use leases::{Fence, Holder, Lease, LeaseError, Leases};
pub use wakeups::{Wake, Wakeups};
