//! Several daemons on one shared state (PostgreSQL): who runs what, by
//! leases with fencing tokens. See docs/architecture.md, "Past one machine".

mod leases;

pub use leases::{Fence, Holder, Lease, LeaseError, Leases};
