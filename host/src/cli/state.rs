//! `pincer state prune [--dry-run]`: one prune now ([`crate::daemon::prune`]).

use std::path::Path;

use crate::daemon::prune::{lines, prune};

pub fn run_prune(config_flag: Option<&Path>, dry_run: bool) -> anyhow::Result<()> {
    let ctx = super::Context::load(config_flag)?;
    let retention = ctx.config.state.retention;
    let report = prune(&ctx.state()?, &retention, crate::db::now_ms(), dry_run)?;
    for line in lines(&report, &retention, dry_run) {
        println!("{line}");
    }
    Ok(())
}
