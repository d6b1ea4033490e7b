//! Several daemons on one shared state (PostgreSQL): who runs what, by
//! leases with fencing tokens, who is alive, and the wake-ups that tell a
//! daemon there is work for it. See docs/architecture.md, "Past one
//! machine".

mod leases;
mod members;
mod node;
mod wakeups;

pub use leases::{Fence, Holder, Lease, LeaseError, Leases};
pub use members::{Member, Members};
pub use node::{Change, Membership, Node, Solo, daemon_id};
pub use wakeups::{Wake, Wakeups};
