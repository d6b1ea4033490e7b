//! Providers named litellm-style (`openai/gpt-4o-mini`) and the outgoing
//! HTTP request of one deployment. The API key only ever goes into the
//! `Authorization` / `x-api-key` header built here.

use std::fmt;
use std::time::Duration;

use http::Uri;
use http::header::{AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue};

use super::error::LlmError;
use super::local::ModelSpec;
use super::types::DeploymentId;
use crate::config::ModelDeployment;

/// The Anthropic API version we speak.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Provider {
    /// `openai/<model>`, default base `https://api.openai.com/v1`.
    OpenAi,
    /// `openai_compatible/<model>`, `api_base` required (vLLM, DeepSeek,
    /// llama.cpp server, …).
    OpenAiCompatible,
    /// `ollama/<model>`, default base `http://localhost:11434/v1` (Ollama's
    /// OpenAI-compatible endpoint).
    Ollama,
    /// `anthropic/<model>`, default base `https://api.anthropic.com`, Messages
    /// API.
    Anthropic,
    /// `local/<name-or-path>`: a GGUF model run in-process (see
    /// [`super::local`]).
    Local,
}

impl Provider {
    pub const ALL: [Provider; 5] = [
        Provider::OpenAi,
        Provider::OpenAiCompatible,
        Provider::Ollama,
        Provider::Anthropic,
        Provider::Local,
    ];

    pub fn prefix(self) -> &'static str {
        match self {
            Provider::OpenAi => "openai",
            Provider::OpenAiCompatible => "openai_compatible",
            Provider::Ollama => "ollama",
            Provider::Anthropic => "anthropic",
            Provider::Local => "local",
        }
    }

    pub fn default_api_base(self) -> Option<&'static str> {
        match self {
            Provider::OpenAi => Some("https://api.openai.com/v1"),
            Provider::OpenAiCompatible => None,
            Provider::Ollama => Some("http://localhost:11434/v1"),
            Provider::Anthropic => Some("https://api.anthropic.com"),
            Provider::Local => None,
        }
    }

    /// Speaks OpenAI Chat Completions (no translation needed).
    pub fn is_openai_style(self) -> bool {
        !matches!(self, Provider::Anthropic)
    }

    /// Splits `openai/gpt-4o` into the provider and the upstream model name.
    pub fn parse(model: &str) -> Option<(Provider, &str)> {
        let (prefix, name) = model.split_once('/')?;
        let provider = Provider::ALL.into_iter().find(|p| p.prefix() == prefix)?;
        (!name.is_empty()).then_some((provider, name))
    }
}

/// Where a deployment's calls go.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// The full endpoint URL of a remote provider.
    Http(Uri),
    /// A model run in this process.
    Local(ModelSpec),
}

/// One entry of `model_list`, ready to call.
pub(crate) struct Deployment {
    pub id: DeploymentId,
    pub provider: Provider,
    /// The model name sent upstream (without the provider prefix).
    pub upstream_model: String,
    /// Where calls go.
    pub target: Target,
    /// Only ever put into a request header.
    api_key: Option<String>,
    pub timeout: Duration,
}

impl fmt::Debug for Deployment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Deployment")
            .field("id", &self.id.to_string())
            .field("target", &self.target)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// A positive, finite number of seconds.
pub(crate) fn seconds(value: f64) -> Option<Duration> {
    if value > 0.0 {
        Duration::try_from_secs_f64(value).ok()
    } else {
        None
    }
}

impl Deployment {
    /// `position` is the entry's index in `model_list` (for error messages),
    /// `index` its index among the deployments of its alias.
    pub fn from_config(
        position: usize,
        index: usize,
        entry: &ModelDeployment,
        default_timeout: Duration,
    ) -> Result<Self, LlmError> {
        let params = &entry.litellm_params;
        let name = format!(
            "gateway.model_list[{position}] (`{}#{index}`, model `{}`)",
            entry.model_name, params.model
        );
        let (provider, upstream_model) = Provider::parse(&params.model).ok_or_else(|| {
            LlmError::Config(format!(
                "{name}: unknown provider; `model` must be one of openai/<model>, \
                 anthropic/<model>, ollama/<model>, openai_compatible/<model> or \
                 local/<name-or-path>"
            ))
        })?;
        let timeout = match params.timeout {
            Some(t) => seconds(t).ok_or_else(|| {
                LlmError::Config(format!("{name}: `timeout` must be a positive number"))
            })?,
            None => default_timeout,
        };
        let id = DeploymentId {
            alias: entry.model_name.clone(),
            index,
            model: params.model.clone(),
        };
        if provider == Provider::Local {
            let spec = ModelSpec::parse(upstream_model)
                .map_err(|e| LlmError::Config(format!("{name}: {e}")))?;
            if params.api_base.is_some() || params.api_key.is_some() {
                return Err(LlmError::Config(format!(
                    "{name}: local/ models take no `api_base` or `api_key`"
                )));
            }
            return Ok(Deployment {
                id,
                provider,
                upstream_model: upstream_model.to_owned(),
                target: Target::Local(spec),
                api_key: None,
                timeout,
            });
        }
        let base = match (params.api_base.as_deref(), provider.default_api_base()) {
            (Some(base), _) => base,
            (None, Some(default)) => default,
            (None, None) => {
                return Err(LlmError::Config(format!(
                    "{name}: `api_base` is required for {}/",
                    provider.prefix()
                )));
            }
        };
        let url = endpoint(provider, base)
            .ok_or_else(|| LlmError::Config(format!("{name}: `api_base` is not an http(s) URL")))?;
        let api_key = params.api_key.clone().filter(|k| !k.is_empty());
        if let Some(key) = &api_key
            && HeaderValue::from_str(key).is_err()
        {
            return Err(LlmError::Config(format!(
                "{name}: `api_key` contains characters not allowed in an HTTP header"
            )));
        }
        Ok(Deployment {
            id,
            provider,
            upstream_model: upstream_model.to_owned(),
            target: Target::Http(url),
            api_key,
            timeout,
        })
    }

    pub fn api_key(&self) -> Option<&str> {
        self.api_key.as_deref()
    }

    /// The headers of a POST of a JSON body (already in the provider's
    /// dialect): content type and the provider's key.
    pub fn request_headers(&self) -> HeaderMap {
        let mut headers = HeaderMap::with_capacity(3);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        headers.insert(
            http::header::USER_AGENT,
            HeaderValue::from_static(USER_AGENT),
        );
        match self.provider {
            Provider::Anthropic => {
                headers.insert(
                    "anthropic-version",
                    HeaderValue::from_static(ANTHROPIC_VERSION),
                );
                if let Some(key) = &self.api_key {
                    headers.insert("x-api-key", sensitive(key));
                }
            }
            _ => {
                if let Some(key) = &self.api_key {
                    headers.insert(AUTHORIZATION, sensitive(&format!("Bearer {key}")));
                }
            }
        }
        headers
    }
}

const USER_AGENT: &str = concat!("pincer/", env!("CARGO_PKG_VERSION"));

/// A header value marked sensitive (hidden from hyper's Debug output).
/// Validity was checked in [`Deployment::from_config`].
fn sensitive(value: &str) -> HeaderValue {
    let mut header = HeaderValue::from_str(value).unwrap_or_else(|_| HeaderValue::from_static(""));
    header.set_sensitive(true);
    header
}

/// `…/chat/completions` for OpenAI-style providers; `…/v1/messages` for
/// Anthropic (a base that already ends in `/v1` is accepted too).
fn endpoint(provider: Provider, base: &str) -> Option<Uri> {
    let base = base.trim_end_matches('/');
    let full = match provider {
        Provider::Anthropic if base.ends_with("/v1") => format!("{base}/messages"),
        Provider::Anthropic => format!("{base}/v1/messages"),
        _ => format!("{base}/chat/completions"),
    };
    let url = url::Url::parse(&full).ok()?;
    if !matches!(url.scheme(), "http" | "https") {
        return None;
    }
    url.as_str().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LitellmParams;

    fn entry(model: &str, api_base: Option<&str>) -> ModelDeployment {
        ModelDeployment {
            model_name: "default".into(),
            model_info: Default::default(),
            litellm_params: LitellmParams {
                model: model.into(),
                api_base: api_base.map(str::to_owned),
                api_key: Some("sk-test-secret-key-0123456789abcdef".into()),
                rpm: None,
                tpm: None,
                timeout: None,
            },
        }
    }

    fn url(d: &Deployment) -> String {
        match &d.target {
            Target::Http(url) => url.to_string(),
            Target::Local(_) => "local".into(),
        }
    }

    #[test]
    fn local_models_by_name_or_path() {
        let t = Duration::from_secs(5);
        let mut e = entry("local/smollm2", None);
        e.litellm_params.api_key = None;
        let d = Deployment::from_config(0, 0, &e, t).unwrap();
        assert!(matches!(&d.target, Target::Local(ModelSpec::Named(n)) if n == "smollm2"));
        e.litellm_params.model = "local//models/x.gguf".into();
        let d = Deployment::from_config(0, 0, &e, t).unwrap();
        assert!(
            matches!(&d.target, Target::Local(ModelSpec::Path(p)) if p.as_os_str() == "/models/x.gguf")
        );
        let err = Deployment::from_config(2, 0, &entry("local/smollm2", None), t)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("model_list[2]") && err.contains("api_key"),
            "{err}"
        );
    }

    #[test]
    fn providers_and_default_bases() {
        let t = Duration::from_secs(5);
        let d = Deployment::from_config(0, 0, &entry("openai/gpt-4o-mini", None), t).unwrap();
        assert_eq!(url(&d), "https://api.openai.com/v1/chat/completions");
        assert_eq!(d.upstream_model, "gpt-4o-mini");
        let d = Deployment::from_config(0, 0, &entry("ollama/llama3.2", None), t).unwrap();
        assert_eq!(url(&d), "http://localhost:11434/v1/chat/completions");
        let d = Deployment::from_config(0, 0, &entry("anthropic/claude-x", None), t).unwrap();
        assert_eq!(url(&d), "https://api.anthropic.com/v1/messages");
        let d = Deployment::from_config(
            0,
            0,
            &entry("anthropic/claude-x", Some("http://127.0.0.1:9/v1/")),
            t,
        )
        .unwrap();
        assert_eq!(url(&d), "http://127.0.0.1:9/v1/messages");
        let d = Deployment::from_config(
            0,
            1,
            &entry(
                "openai_compatible/org/model:7b",
                Some("http://127.0.0.1:8000/v1"),
            ),
            t,
        )
        .unwrap();
        assert_eq!(d.upstream_model, "org/model:7b");
        assert_eq!(
            d.id.to_string(),
            "default#1 (openai_compatible/org/model:7b)"
        );
    }

    #[test]
    fn configuration_errors_name_the_deployment() {
        let t = Duration::from_secs(5);
        let err = Deployment::from_config(3, 0, &entry("bedrock/claude", None), t).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("gateway.model_list[3]"), "{msg}");
        assert!(msg.contains("unknown provider"), "{msg}");
        let err = Deployment::from_config(1, 0, &entry("openai_compatible/x", None), t)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("api_base") && err.contains("model_list[1]"),
            "{err}"
        );
        let err = Deployment::from_config(0, 0, &entry("gpt-4o", None), t).unwrap_err();
        assert!(err.to_string().contains("unknown provider"));
        let err = Deployment::from_config(0, 0, &entry("openai/x", Some("ftp://h")), t)
            .unwrap_err()
            .to_string();
        assert!(err.contains("not an http(s) URL"), "{err}");
    }

    #[test]
    fn debug_hides_the_key() {
        let d =
            Deployment::from_config(0, 0, &entry("openai/gpt-4o", None), Duration::from_secs(1))
                .unwrap();
        let shown = format!("{d:?}");
        assert!(!shown.contains("sk-test-secret"), "{shown}");
        assert_eq!(d.api_key(), Some("sk-test-secret-key-0123456789abcdef"));
    }
}
