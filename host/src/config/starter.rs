//! The configuration pincer starts from when there is no file (and that
//! `pincer init` writes): the built-in text with a `default` model alias
//! chosen from the environment — the first provider whose key is set, else
//! the offline local model.

use super::DEFAULT_CONFIG;

/// Where the `default` model alias points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultModel {
    /// A cloud provider; its key is read from this variable at every start.
    Provider {
        env: &'static str,
        model: &'static str,
    },
    /// SmolLM2-135M-Instruct, run in-process (`pincer model fetch smollm2`).
    Local,
}

/// The local model's provider/model name.
pub const LOCAL_DEFAULT: &str = "local/smollm2";

/// In order of preference when several keys are set.
const PROVIDERS: &[DefaultModel] = &[
    DefaultModel::Provider {
        env: "OPENAI_API_KEY",
        model: "openai/gpt-4o-mini",
    },
    DefaultModel::Provider {
        env: "ANTHROPIC_API_KEY",
        model: "anthropic/claude-3-5-haiku-latest",
    },
];

/// The starting configuration text for an environment where `key_set`
/// tells which variables are set (and not empty).
pub fn starter_config(key_set: &dyn Fn(&str) -> bool) -> (String, DefaultModel) {
    let chosen = PROVIDERS
        .iter()
        .copied()
        .find(|p| matches!(p, DefaultModel::Provider { env, .. } if key_set(env)))
        .unwrap_or(DefaultModel::Local);
    let params = match chosen {
        DefaultModel::Provider { env, model } => {
            format!("        model: {model}\n        api_key: \"${{{env}}}\"\n")
        }
        DefaultModel::Local => format!(
            "        model: {LOCAL_DEFAULT}        # offline; `pincer model fetch smollm2`\n"
        ),
    };
    let list = format!("  model_list:\n    - model_name: default\n      litellm_params:\n{params}");
    (
        DEFAULT_CONFIG.replacen("  model_list: []\n", &list, 1),
        chosen,
    )
}
