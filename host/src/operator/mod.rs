//! What an operator of this `PINCER_HOME` does, in one place for the CLI
//! and the web console: decide approval requests and revoke rules, read a
//! workspace's policy report, list and steer scheduled tasks.

mod approvals;
mod policy;
mod schedule;

pub use approvals::{Operator, as_json, decide, revoke};
pub use policy::policy_report;
pub(crate) use schedule::queue_run;
pub use schedule::{
    decide_agent_task, history_rows as task_history, listing as schedule_listing,
    run_soon as run_task_soon, set_paused as set_task_paused,
};
pub(crate) use schedule::{delivery, find_task, fire_time, open_store, run_json};
