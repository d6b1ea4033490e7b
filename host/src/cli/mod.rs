//! The `pincer` command line. Each subcommand lives in its own module and
//! calls subsystem APIs; nothing here owns behaviour of its own.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod config_cmd;
mod context;
mod demo;
mod doctor;
mod plugin;
mod skill;

pub use context::Context;

#[derive(Debug, Parser)]
#[command(
    name = "pincer",
    version,
    about = "Container-isolated plugin host for AI assistants",
    propagate_version = true
)]
pub struct Cli {
    /// Configuration file [default: $PINCER_CONFIG, else ./pincer.yaml, else $PINCER_HOME/pincer.yaml, else built-in defaults]
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check a configuration file and report every problem with file:line:column
    #[command(subcommand)]
    Config(ConfigCommand),
    /// List, inspect, install and scaffold plugins
    #[command(subcommand)]
    Plugin(PluginCommand),
    /// Call skills directly
    #[command(subcommand)]
    Skill(SkillCommand),
    /// Check what this machine is missing, and how to fix it
    Doctor,
    /// Load every built-in plugin and exercise each world once
    Demo,
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration (`--config FILE` or the default search)
    Check,
}

#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Plugins this host can load: built-in, installed and configured folders
    List(JsonFlag),
    /// Validate one plugin and show what it is and what it asks for
    Inspect {
        /// A plugin name, or a folder / plugin.toml / .wasm path
        target: String,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Validate a plugin and copy it into $PINCER_HOME/plugins, pinning its sha256
    Install {
        /// A folder holding plugin.toml and the component, or either file
        path: PathBuf,
    },
    /// Scaffold a plugin crate that builds with `cargo build --target wasm32-wasip2`
    New {
        #[arg(long, value_parser = ["skill", "channel", "observer", "tunnel"])]
        kind: String,
        /// Plugin name: a-z, 0-9 and `-`
        name: String,
        /// Parent folder of the new crate [default: .]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum SkillCommand {
    /// Call one tool of a skill plugin and print its JSON result
    Invoke {
        plugin: String,
        tool: String,
        /// The tool's arguments as a JSON object
        #[arg(long, default_value = "{}")]
        args: String,
    },
    /// List the tools a skill plugin offers, with their argument schemas
    Tools {
        plugin: String,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Config(ConfigCommand::Check) => config_cmd::check(cli.config.as_deref()),
        Command::Plugin(command) => plugin::run(cli.config.as_deref(), command).await,
        Command::Skill(command) => skill::run(cli.config.as_deref(), command).await,
        Command::Doctor => doctor::run(cli.config.as_deref()).await,
        Command::Demo => demo::run(cli.config.as_deref()).await,
    }
}
