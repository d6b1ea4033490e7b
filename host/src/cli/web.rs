//! `pincer web login|logout`: one-time sign-in links to the console of
//! `pincer start`, and signing every browser out. Works while the daemon
//! runs in another process: both use `pincer.db`.

use clap::Subcommand;

use super::Context;
use crate::web::WebAuth;

#[derive(Debug, Subcommand)]
pub enum WebCommand {
    /// Print a one-time sign-in URL (valid 10 minutes, works once)
    Login,
    /// Sign browsers out
    Logout {
        /// Every signed-in browser, and every unused sign-in URL
        #[arg(long)]
        all: bool,
    },
}

pub fn run(config_flag: Option<&std::path::Path>, command: WebCommand) -> anyhow::Result<()> {
    let ctx = Context::load(config_flag)?;
    let auth = WebAuth::open_at(&ctx.state()?)?;
    match command {
        WebCommand::Login => {
            if !ctx.config.web.enabled {
                anyhow::bail!("the web console is off (`web.enabled: false`)");
            }
            let running = crate::daemon::status::read(&ctx.home).and_then(|s| s.console);
            if running.is_none() && ctx.config.web.address().port() == 0 {
                anyhow::bail!(
                    "the web console's port is picked when `pincer start` runs (`web.listen` has port 0), \
                     and no daemon is running: start it, then sign in"
                );
            }
            let token = auth.issue_login_token(crate::db::now_ms())?;
            eprintln!(
                "Open this link within {} minutes to sign in (it works once):",
                crate::web::LOGIN_TOKEN_TTL.as_secs() / 60
            );
            println!(
                "{}",
                crate::web::login_url(&ctx.config, running.as_deref(), &token)
            );
            Ok(())
        }
        WebCommand::Logout { all } => {
            if !all {
                anyhow::bail!(
                    "say `--all` to sign every browser out (one browser signs itself out with its Sign out button)"
                );
            }
            let ended = auth.sign_out_all()?;
            println!("signed out {ended} browser session(s); unused sign-in links no longer work");
            Ok(())
        }
    }
}
