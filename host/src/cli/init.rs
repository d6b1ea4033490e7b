//! `pincer init`: a commented `pincer.yaml` in `PINCER_HOME` whose default
//! model uses the provider key found in the environment, and the default
//! workspace's folder with a starter `AGENTS.md`. Never overwrites without
//! `--force` (and then keeps the old file as `.bak`).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::config::Config;
use crate::config::starter::{DefaultModel, starter_config};

const AGENTS_MD: &str = "# Instructions for this workspace's agent\n\
\n\
pincer reads this file (AGENTS.md in the workspace folder) into every turn's\n\
system prompt. Say here who the assistant works for, what it should and\n\
should not do, and anything it should always keep in mind.\n";

pub fn run(home: &Path, force: bool) -> anyhow::Result<()> {
    let path = home.join("pincer.yaml");
    if path.exists() && !force {
        bail!(
            "{} already exists; `pincer init --force` replaces it (the current file is kept as pincer.yaml.bak)",
            path.display()
        );
    }
    let key_set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
    let (text, provider) = starter_config(&key_set);
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
        DefaultModel::Provider { env, model } => println!(
            "the default model is {model}, using ${env} (read from the environment at every start, never stored); try: pincer message --text \"hello\""
        ),
        DefaultModel::Local => println!(
            "no provider key found (OPENAI_API_KEY, ANTHROPIC_API_KEY): the default model is the offline local/smollm2 (SmolLM2-135M); get it with `pincer model fetch smollm2`. Set a key and run `pincer init --force` to use a cloud model instead"
        ),
    }
    Ok(())
}

fn workspace_folder(config: &Config, workspace: &str) -> PathBuf {
    config.workspace_dir(workspace)
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
        let (text, provider) = starter_config(&|name| name == "ANTHROPIC_API_KEY");
        assert!(matches!(
            provider,
            DefaultModel::Provider {
                env: "ANTHROPIC_API_KEY",
                ..
            }
        ));
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
    fn without_a_key_the_local_model_is_the_default() {
        let (text, provider) = starter_config(&|_| false);
        assert_eq!(provider, DefaultModel::Local);
        let config = Config::from_str_with_env(&text, Path::new("pincer.yaml"), |_| None).unwrap();
        assert_eq!(
            config.gateway.model_list[0].litellm_params.model,
            crate::config::starter::LOCAL_DEFAULT
        );
    }
}
