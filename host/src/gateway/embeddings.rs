//! `POST /v1/embeddings` (OpenAI's shape) answered by the local embedding
//! model: the request's checks, one embedding at a time per workspace, and
//! the response (floats, or base64 as the official clients ask by default).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Once, OnceLock};

use base64::Engine as _;
use pincer_infer::Role;
use serde::Deserialize;
use serde_json::{Value, json};

use super::model_fetch::E5_SMALL;
use crate::memory::Embedder;

/// The embedding model in `home/models`, if it is there (not loaded yet).
pub fn local_embedder(home: &Path) -> Option<Arc<Embedder>> {
    let path = home.join("models").join(E5_SMALL.file_name);
    let id = format!("{}@{}", E5_SMALL.name, &E5_SMALL.sha256[..12]);
    path.is_file().then(|| Arc::new(Embedder::at(path, id)))
}

/// Memory's embedding model: [`local_embedder`] when `enabled`; why there
/// is none is said once per process.
pub fn memory_embedder(home: &Path, enabled: bool) -> Option<Arc<Embedder>> {
    static SAID: Once = Once::new();
    let say = |why: String| SAID.call_once(|| tracing::info!("memory: lexical recall only: {why}"));
    if !enabled {
        say("memory.embeddings is off".to_owned());
        return None;
    }
    let found = local_embedder(home);
    if found.is_none() {
        say(format!(
            "no embedding model ({} is absent; `pincer model fetch {}` gets it)",
            home.join("models").join(E5_SMALL.file_name).display(),
            E5_SMALL.name
        ));
    }
    found
}

/// Inputs of one request, at most.
pub const MAX_INPUTS: usize = 32;
/// Bytes of one input, at most.
pub const MAX_INPUT_BYTES: usize = 8 * 1024;
/// Tokens one request may feed the encoder at most: a few seconds of the
/// encoder on this project's 2-core machine, so a workspace waits at most
/// that long while another's request runs (requests take turns, below).
pub const MAX_REQUEST_TOKENS: usize = 8192;

/// A request the gateway refuses, with its OpenAI error code.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Refused {
    pub code: &'static str,
    pub message: String,
}

fn refused(code: &'static str, message: impl Into<String>) -> Refused {
    Refused {
        code,
        message: message.into(),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    #[allow(dead_code)] // the alias is read by the dispatcher
    model: String,
    input: Value,
    #[serde(default)]
    encoding_format: Option<String>,
    /// e5 models embed a query and a passage differently; `query` (the
    /// model card's choice for symmetric tasks) unless said.
    #[serde(default)]
    input_type: Option<String>,
    #[serde(default)]
    dimensions: Option<u64>,
    #[serde(default)]
    #[allow(dead_code)]
    user: Option<String>,
}

/// A checked request.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub inputs: Vec<String>,
    pub role: Role,
    pub base64: bool,
}

impl Request {
    /// The tokens the encoder would be fed (what usage reports), or why the
    /// request is too large to be one.
    pub fn tokens(&self, encoder: &pincer_infer::Encoder) -> Result<usize, Refused> {
        let tokens: usize = self
            .inputs
            .iter()
            .map(|text| encoder.token_count(text, self.role))
            .sum();
        if tokens > MAX_REQUEST_TOKENS {
            return Err(refused(
                "too_many_tokens",
                format!(
                    "the inputs come to {tokens} tokens; at most {MAX_REQUEST_TOKENS} in one \
                     request: split them over several requests"
                ),
            ));
        }
        Ok(tokens)
    }

    pub fn parse(body: Value, dim: usize) -> Result<Request, Refused> {
        let body: Body = serde_json::from_value(body).map_err(|e| {
            refused(
                "invalid_request",
                format!("invalid embeddings request: {e}"),
            )
        })?;
        let inputs = match body.input {
            Value::String(s) => vec![s],
            Value::Array(items) => items
                .into_iter()
                .map(|item| match item {
                    Value::String(s) => Ok(s),
                    _ => Err(refused(
                        "invalid_input",
                        "`input` must be a string or an array of strings (token arrays are not accepted)",
                    )),
                })
                .collect::<Result<_, _>>()?,
            _ => {
                return Err(refused(
                    "invalid_input",
                    "`input` must be a string or an array of strings",
                ));
            }
        };
        if inputs.is_empty() {
            return Err(refused("invalid_input", "`input` is empty"));
        }
        if inputs.len() > MAX_INPUTS {
            return Err(refused(
                "too_many_inputs",
                format!(
                    "{} inputs in one request; at most {MAX_INPUTS}: split the list",
                    inputs.len()
                ),
            ));
        }
        if let Some((i, s)) = inputs
            .iter()
            .enumerate()
            .find(|(_, s)| s.len() > MAX_INPUT_BYTES)
        {
            return Err(refused(
                "input_too_long",
                format!(
                    "input {i} has {} bytes; at most {MAX_INPUT_BYTES} per input",
                    s.len()
                ),
            ));
        }
        if let Some((i, _)) = inputs.iter().enumerate().find(|(_, s)| s.trim().is_empty()) {
            return Err(refused("invalid_input", format!("input {i} is empty")));
        }
        let base64 = match body.encoding_format.as_deref() {
            None | Some("float") => false,
            Some("base64") => true,
            Some(other) => {
                return Err(refused(
                    "invalid_request",
                    format!("encoding_format `{other}`: use float or base64"),
                ));
            }
        };
        let role = match body.input_type.as_deref() {
            None | Some("query") => Role::Query,
            Some("passage" | "document") => Role::Passage,
            Some(other) => {
                return Err(refused(
                    "invalid_request",
                    format!("input_type `{other}`: use query or passage"),
                ));
            }
        };
        if let Some(d) = body.dimensions
            && usize::try_from(d).ok() != Some(dim)
        {
            return Err(refused(
                "invalid_request",
                format!("dimensions {d}: this model gives {dim}"),
            ));
        }
        Ok(Request {
            inputs,
            role,
            base64,
        })
    }
}

/// The OpenAI-shaped answer.
pub fn response(alias: &str, vectors: &[Vec<f32>], tokens: usize, base64: bool) -> Value {
    let data: Vec<Value> = vectors
        .iter()
        .enumerate()
        .map(|(index, v)| {
            let embedding = if base64 {
                let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                Value::String(base64::engine::general_purpose::STANDARD.encode(bytes))
            } else {
                json!(v)
            };
            json!({"object": "embedding", "index": index, "embedding": embedding})
        })
        .collect();
    json!({
        "object": "list",
        "data": data,
        "model": alias,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    })
}

/// The embedding model, one lock per workspace (concurrency 1 each) and
/// one turn at the encoder at a time, handed out first come first served:
/// with each workspace's requests one at a time and each request at most
/// [`MAX_REQUEST_TOKENS`], a workspace that keeps asking gets the encoder
/// every other turn at most while another waits, not both cores for as long
/// as it likes.
pub struct Embeddings {
    home: PathBuf,
    embedder: OnceLock<Arc<Embedder>>,
    running: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    encoder_turns: tokio::sync::Semaphore,
}

impl Embeddings {
    /// `shared`: the memory store's embedder, so the model is loaded once;
    /// without one, the model is looked for in `home/models` at each
    /// request until it is there (a fetch needs no restart).
    pub fn new(home: PathBuf, shared: Option<Arc<Embedder>>) -> Self {
        let embedder = OnceLock::new();
        if let Some(shared) = shared {
            let _ = embedder.set(shared);
        }
        Embeddings {
            home,
            embedder,
            running: Mutex::new(HashMap::new()),
            encoder_turns: tokio::sync::Semaphore::new(1),
        }
    }

    pub fn embedder(&self) -> Option<Arc<Embedder>> {
        if let Some(e) = self.embedder.get() {
            return Some(e.clone());
        }
        let found = local_embedder(&self.home)?;
        Some(self.embedder.get_or_init(|| found).clone())
    }

    /// Waits for `workspace`'s turn and then the encoder's, and embeds on
    /// a blocking thread.
    pub async fn embed(
        &self,
        workspace: &str,
        embedder: Arc<Embedder>,
        request: Request,
    ) -> Result<Vec<Vec<f32>>, String> {
        let lock = {
            let mut running = self
                .running
                .lock()
                .map_err(|_| "the embeddings lock is poisoned".to_owned())?;
            running.entry(workspace.to_owned()).or_default().clone()
        };
        let _turn = lock.lock().await;
        let _encoder = self
            .encoder_turns
            .acquire()
            .await
            .map_err(|e| format!("the encoder is closed: {e}"))?;
        tokio::task::spawn_blocking(move || {
            let texts: Vec<&str> = request.inputs.iter().map(String::as_str).collect();
            embedder.floats(&texts, request.role)
        })
        .await
        .map_err(|e| format!("the embedding task failed: {e}"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: Value) -> Result<Request, Refused> {
        Request::parse(body, 384)
    }

    #[test]
    fn accepts_a_string_or_strings_and_the_encodings() {
        let r = parse(json!({"model": "e", "input": "hello"})).unwrap();
        assert_eq!(r.inputs, ["hello"]);
        assert_eq!((r.role, r.base64), (Role::Query, false));
        let r = parse(
            json!({"model": "e", "input": ["a", "b"], "encoding_format": "base64",
            "input_type": "passage", "dimensions": 384, "user": "u"}),
        )
        .unwrap();
        assert_eq!(r.inputs, ["a", "b"]);
        assert_eq!((r.role, r.base64), (Role::Passage, true));
    }

    #[test]
    fn refuses_what_it_cannot_embed_with_the_reason() {
        let cases = [
            (json!({"model": "e"}), "missing field `input`"),
            (json!({"model": "e", "input": [1, 2]}), "token arrays"),
            (json!({"model": "e", "input": 5}), "string or an array"),
            (json!({"model": "e", "input": []}), "`input` is empty"),
            (
                json!({"model": "e", "input": ["a", " "]}),
                "input 1 is empty",
            ),
            (json!({"model": "e", "input": vec!["a"; 33]}), "at most 32"),
            (
                json!({"model": "e", "input": "x".repeat(8193)}),
                "at most 8192",
            ),
            (
                json!({"model": "e", "input": "a", "encoding_format": "int8"}),
                "float or base64",
            ),
            (
                json!({"model": "e", "input": "a", "input_type": "code"}),
                "query or passage",
            ),
            (
                json!({"model": "e", "input": "a", "dimensions": 256}),
                "gives 384",
            ),
            (
                json!({"model": "e", "input": "a", "extra": 1}),
                "unknown field",
            ),
        ];
        for (body, want) in cases {
            let err = parse(body.clone()).unwrap_err();
            assert!(err.message.contains(want), "{body}: {err}");
        }
    }

    #[test]
    fn base64_holds_the_little_endian_floats() {
        let v = vec![vec![0.5f32, -1.0, 0.25]];
        let r = response("emb", &v, 7, true);
        let text = r["data"][0]["embedding"].as_str().unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(text)
            .unwrap();
        let back: Vec<f32> = bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(back, v[0]);
        assert_eq!(r["usage"]["prompt_tokens"], 7);
        let r = response("emb", &v, 7, false);
        assert_eq!(r["data"][0]["embedding"], json!([0.5, -1.0, 0.25]));
        assert_eq!(r["model"], "emb");
    }
}
