//! `pincer init`: a commented `pincer.yaml` in `PINCER_HOME` whose default
//! model uses the provider key found in the environment, and the default
//! workspace's folder with a starter `AGENTS.md`. Never overwrites without
//! `--force` (and then keeps the old file as `.bak`).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::config::{self, Config, DEFAULT_CONFIG};

/// A provider whose key may be in the environment.
struct Provider {
    env: &'static str,
    model: &'static str,
}

/// In order of preference when several keys are set.
const PROVIDERS: &[Provider] = &[
    Provider {
        env: "OPENAI_API_KEY",
        model: "openai/gpt-4o-mini",
    },
    Provider {
        env: "ANTHROPIC_API_KEY",
        model: "anthropic/claude-3-5-haiku-latest",
    },
];

const AGENTS_MD: &str = "# Instructions for this workspace's agent\n\
\n\
pincer reads this file (AGENTS.md in the workspace folder) into every turn's\n\
system prompt. Say here who the assistant works for, what it should and\n\
should not do, and anything it should always keep in mind.\n";

/// The configuration text `init` writes: the built-in file with a
/// `default` model alias for the provider whose key is set, if any.
pub fn config_text(env: &dyn Fn(&str) -> bool) -> (String, Option<&'static str>) {
    let Some(provider) = PROVIDERS.iter().find(|p| env(p.env)) else {
        return (DEFAULT_CONFIG.to_string(), None);
    };
    let list = format!(
        "  model_list:\n    - model_name: default\n      litellm_params:\n        model: {}\n        api_key: \"${{{}}}\"\n",
        provider.model, provider.env
    );
    (
        DEFAULT_CONFIG.replacen("  model_list: []\n", &list, 1),
        Some(provider.env),
    )
}

pub fn run(home: &Path, force: bool) -> anyhow::Result<()> {
    let path = home.join("pincer.yaml");
    if path.exists() && !force {
        bail!(
            "{} already exists; `pincer init --force` replaces it (the current file is kept as pincer.yaml.bak)",
            path.display()
        );
    }
    let key_set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let (text, provider) = config_text(&key_set);
    // What is written must load: check before touching anything.
    let config = Config::from_str_with_env(&text, &path, |name| std::env::var(name).ok())
        .context("the generated configuration does not load (a bug in pincer init)")?;
    std::fs::create_dir_all(home).with_context(|| format!("creating {}", home.display()))?;
    if path.exists() {
        let backup = home.join("pincer.yaml.bak");
        std::fs::rename(&path, &backup)
            .with_context(|| format!("keeping the old file as {}", backup.display()))?;
        println!("kept the previous configuration as {}", backup.display());
    }
    write_new(&path, &text)?;
    println!("wrote {}", path.display());
    let folder = workspace_folder(&config, "default");
    std::fs::create_dir_all(&folder).with_context(|| format!("creating {}", folder.display()))?;
    let agents = folder.join("AGENTS.md");
    if !agents.exists() {
        write_new(&agents, AGENTS_MD)?;
        println!("wrote {}", agents.display());
    }
    match provider {
        Some(env) => println!(
            "the default model uses ${env} (read from the environment at every start, never stored); try: pincer message --text \"hello\""
        ),
        None => println!(
            "no provider key found: set OPENAI_API_KEY or ANTHROPIC_API_KEY and run `pincer init --force`, or add an entry to gateway.model_list in {}",
            path.display()
        ),
    }
    Ok(())
}

fn workspace_folder(config: &Config, workspace: &str) -> PathBuf {
    config::expand_tilde(&config.containers.workspace_base_path).join(workspace)
}

fn write_new(path: &Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_key_becomes_the_default_alias_and_the_file_loads() {
        let (text, provider) = config_text(&|name| name == "ANTHROPIC_API_KEY");
        assert_eq!(provider, Some("ANTHROPIC_API_KEY"));
        let config = Config::from_str_with_env(&text, Path::new("pincer.yaml"), |name| {
            (name == "ANTHROPIC_API_KEY").then(|| "sk-ant-test".to_string())
        })
        .unwrap();
        assert_eq!(config.gateway.model_list.len(), 1);
        assert_eq!(config.gateway.model_list[0].model_name, "default");
        assert!(text.contains("${ANTHROPIC_API_KEY}"));
        assert!(!text.contains("sk-ant-test"));
    }

    #[test]
    fn without_a_key_the_built_in_file_is_written() {
        let (text, provider) = config_text(&|_| false);
        assert_eq!(provider, None);
        assert_eq!(text, DEFAULT_CONFIG);
    }
}
