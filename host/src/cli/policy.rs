//! `pincer policy audit WORKSPACE`: what a workspace can and cannot touch.

use std::path::Path;

use super::Context;
use crate::policy;

pub async fn audit(config_flag: Option<&Path>, name: &str, json: bool) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let report = crate::operator::policy_report(&ctx, name)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", policy::render_text(&report));
        // Who may send this workspace's channels a message beyond the
        // YAML's allowed_senders: the pairing overlay, with its origin.
        for line in super::config_cmd::paired_senders(&ctx.config) {
            println!("{line}");
        }
    }
    Ok(())
}
