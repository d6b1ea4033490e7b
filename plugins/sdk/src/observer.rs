//! The observer world: implement [`Guest`] and export it with
//! [`export_observer!`](crate::export_observer). An observer's outcome never
//! affects a turn.

pub use crate::wit::observer_world::exports::pincer::plugin::observer::Guest;
