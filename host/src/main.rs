use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn main() -> ExitCode {
    let cli = pincer::cli::Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_env("PINCER_LOG").unwrap_or_else(|_| EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        tracing::debug!("a rustls crypto provider was already installed");
    }
    let runtime = if cli.one_thread() {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Runtime::new()
    };
    let runtime = match runtime {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(pincer::cli::run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => match e.downcast_ref::<pincer::cli::ExitStatus>() {
            Some(status) => ExitCode::from(u8::try_from(status.0).unwrap_or(1)),
            None => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}
