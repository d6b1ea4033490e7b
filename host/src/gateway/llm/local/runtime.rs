//! Models loaded once per process and shared, a bounded queue in front of
//! the CPU, and the OpenAI-shaped answers of a local deployment.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use futures_util::stream::{self, BoxStream};
use serde_json::{Map, Value, json};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc, oneshot};

use pincer_infer::{Finished, Generator, GgufFile, Limits, Meta, Model, Sampling, Tokenizer};

use super::error::LocalError;
use super::fetch;
use super::request::LocalRequest;
use super::template::ChatTemplate;
use crate::gateway::llm::types::Usage;

/// How a deployment names its model: `local/smollm2` (a model `pincer model
/// fetch` knows, in the models folder), `local/<name>` (`<name>.gguf` in the
/// models folder) or `local//abs/path.gguf` (any GGUF file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    Named(String),
    Path(PathBuf),
}

impl ModelSpec {
    /// `name` is what follows `local/`.
    // String: the text becomes `LlmError::LocalModel`, itself a sentence.
    pub fn parse(name: &str) -> Result<Self, String> {
        if name.starts_with('/')
            || name.starts_with("./")
            || name.starts_with("../")
            || name.ends_with(".gguf")
        {
            return Ok(ModelSpec::Path(PathBuf::from(name)));
        }
        if let Some(rest) = name.strip_prefix("~/") {
            let home =
                dirs::home_dir().ok_or("`~` cannot be expanded: the home directory is unknown")?;
            return Ok(ModelSpec::Path(home.join(rest)));
        }
        if name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
            && !name.starts_with('.')
        {
            return Ok(ModelSpec::Named(name.to_owned()));
        }
        Err(format!(
            "`local/{name}`: use local/<name> for $PINCER_HOME/models/<name>.gguf (or a known model \
             such as smollm2), or local//absolute/path/model.gguf"
        ))
    }

    /// The file, and the name `pincer model fetch` would take to get it.
    pub fn resolve(&self, models_dir: &Path) -> (PathBuf, Option<String>) {
        match self {
            ModelSpec::Path(p) => (p.clone(), None),
            ModelSpec::Named(name) => match fetch::known(name) {
                Some(known) => (
                    models_dir.join(known.file_name),
                    Some(known.name.to_owned()),
                ),
                None => (models_dir.join(format!("{name}.gguf")), None),
            },
        }
    }
}

/// A model ready to generate: weights, tokenizer and chat template.
#[derive(Debug)]
pub struct LocalModel {
    pub path: PathBuf,
    pub model: Model,
    pub tokenizer: Tokenizer,
    template: ChatTemplate,
}

impl LocalModel {
    /// Reads and checks a GGUF file (blocking; ~0.2 s for SmolLM2).
    pub fn load(path: &Path, default_name: Option<&str>) -> Result<Self, LocalError> {
        let file = GgufFile::open(path, default_name)?;
        let model = Model::load(&file)?;
        let tokenizer = Tokenizer::from_gguf(&file)?;
        let source = file.meta("tokenizer.chat_template").and_then(Meta::as_str);
        let template = ChatTemplate::new(source).map_err(|reason| LocalError::Template {
            path: path.to_owned(),
            reason: reason.0,
        })?;
        Ok(LocalModel {
            path: path.to_owned(),
            model,
            tokenizer,
            template,
        })
    }

    pub fn context_length(&self) -> usize {
        self.model.hyper.context
    }

    /// The prompt text: `messages` through the model's chat template.
    pub fn render(&self, messages: &[Value], tools: Option<&Value>) -> Result<String, LocalError> {
        let text = |id: Option<u32>| {
            id.and_then(|i| self.tokenizer.token_text(i))
                .unwrap_or_default()
                .to_owned()
        };
        self.template
            .render(
                messages,
                tools,
                &text(self.tokenizer.bos),
                &text(self.tokenizer.eos),
            )
            .map_err(|reason| LocalError::Template {
                path: self.path.clone(),
                reason: reason.0,
            })
    }

    /// Generates on the calling thread (see [`generate`]).
    pub fn generate(
        &self,
        pool: &pincer_infer::ThreadPool,
        prompt: &[u32],
        limits: &Limits,
        sampling: &Sampling,
        cancel: &AtomicBool,
        emit: impl FnMut(&str) -> bool,
    ) -> Finished {
        Generator {
            model: &self.model,
            tokenizer: &self.tokenizer,
            pool,
        }
        .run(prompt, limits, sampling, cancel, emit)
    }
}

/// Settings of the local provider.
#[derive(Debug, Clone)]
pub struct LocalSettings {
    /// Where `local/<name>` looks; default `$PINCER_HOME/models`.
    pub models_dir: Option<PathBuf>,
    /// Generations running at once. Default 1.
    pub concurrency: usize,
    /// Requests waiting for a slot; beyond that the answer is "busy" (429).
    /// Default 4.
    pub queue: usize,
    /// Compute threads (shared by all generations). Default: the CPU count.
    pub threads: usize,
    /// `max_tokens` when the request sets none. Default 512.
    pub default_max_tokens: usize,
    /// A failed load is answered from memory this long before it is retried.
    pub retry_load_after: Duration,
}

impl Default for LocalSettings {
    fn default() -> Self {
        LocalSettings {
            models_dir: None,
            concurrency: 1,
            queue: 4,
            threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
            default_max_tokens: 512,
            retry_load_after: Duration::from_secs(5),
        }
    }
}

enum Slot {
    Ready(Arc<LocalModel>),
    Failed(LocalError, Instant),
}

/// Everything local deployments share in one process.
pub struct LocalRuntime {
    settings: LocalSettings,
    models: tokio::sync::Mutex<HashMap<PathBuf, Slot>>,
    pool: Mutex<Option<Arc<pincer_infer::ThreadPool>>>,
    permits: Arc<Semaphore>,
    waiting: Arc<AtomicUsize>,
}

impl std::fmt::Debug for LocalRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalRuntime")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// Counts a request as queued until dropped (also when the client leaves).
struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Stops the generation when the stream is dropped.
struct CancelOnDrop(Arc<AtomicBool>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

enum Piece {
    Text(String, usize),
    Done(Finished),
}

/// A local answer, before the router wraps it.
pub enum LocalOutcome {
    Complete {
        response: Value,
        usage: Usage,
    },
    Stream {
        events: BoxStream<'static, Value>,
        usage: oneshot::Receiver<Usage>,
    },
}

impl LocalRuntime {
    pub fn new(settings: LocalSettings) -> Self {
        let concurrency = settings.concurrency.max(1);
        LocalRuntime {
            permits: Arc::new(Semaphore::new(concurrency)),
            settings: LocalSettings {
                concurrency,
                threads: settings.threads.max(1),
                ..settings
            },
            models: tokio::sync::Mutex::new(HashMap::new()),
            pool: Mutex::new(None),
            waiting: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn models_dir(&self) -> PathBuf {
        self.settings.models_dir.clone().unwrap_or_else(|| {
            crate::config::pincer_home()
                .map(|h| h.join("models"))
                .unwrap_or_else(|_| PathBuf::from("models"))
        })
    }

    fn pool(&self) -> Result<Arc<pincer_infer::ThreadPool>, LocalError> {
        let mut pool = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = &*pool {
            return Ok(p.clone());
        }
        let built = pincer_infer::compute_pool(self.settings.threads)
            .map_err(|e| LocalError::Internal(format!("cannot start compute threads: {e}")))?;
        let built = Arc::new(built);
        *pool = Some(built.clone());
        Ok(built)
    }

    /// The loaded model for `spec`, loading it on first use.
    pub async fn model(&self, spec: &ModelSpec) -> Result<Arc<LocalModel>, LocalError> {
        let (path, default_name) = spec.resolve(&self.models_dir());
        let mut models = self.models.lock().await;
        match models.get(&path) {
            Some(Slot::Ready(m)) => return Ok(m.clone()),
            Some(Slot::Failed(e, at)) if at.elapsed() < self.settings.retry_load_after => {
                return Err(e.clone());
            }
            _ => {}
        }
        let load_path = path.clone();
        let loaded = tokio::task::spawn_blocking(move || {
            LocalModel::load(&load_path, default_name.as_deref())
        })
        .await
        .map_err(|e| LocalError::Internal(format!("the loader stopped: {e}")))?;
        match loaded {
            Ok(model) => {
                let model = Arc::new(model);
                tracing::info!(path = %path.display(), "local model loaded");
                models.insert(path, Slot::Ready(model.clone()));
                Ok(model)
            }
            Err(e) => {
                tracing::warn!(error = %e, "local model failed to load");
                models.insert(path, Slot::Failed(e.clone(), Instant::now()));
                Err(e)
            }
        }
    }

    /// Waits for a generation slot, or fails at once with `Busy` when the
    /// queue is full.
    async fn slot(&self) -> Result<OwnedSemaphorePermit, LocalError> {
        if let Ok(permit) = self.permits.clone().try_acquire_owned() {
            return Ok(permit);
        }
        let ahead = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(self.waiting.clone());
        if ahead >= self.settings.queue {
            return Err(LocalError::Busy {
                running: self.settings.concurrency,
                queued: self.settings.queue,
            });
        }
        self.permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LocalError::Internal("the generation queue is closed".into()))
    }

    /// Answers one OpenAI chat request (`body`) with the model of `spec`.
    pub async fn chat(
        &self,
        spec: &ModelSpec,
        body: &Map<String, Value>,
        alias: &str,
        stream: bool,
        include_usage: bool,
    ) -> Result<LocalOutcome, LocalError> {
        let request = LocalRequest::parse(body)?;
        let model = self.model(spec).await?;
        let text = model.render(&request.messages, request.tools.as_ref())?;
        let prompt = model.tokenizer.encode(&text);
        let context = model.context_length();
        if prompt.len() >= context {
            return Err(LocalError::BadRequest(format!(
                "the prompt is {} tokens but {} holds {context}; shorten the conversation",
                prompt.len(),
                model.path.display()
            )));
        }
        let room = context - prompt.len();
        let limits = Limits {
            max_tokens: request
                .max_tokens
                .unwrap_or(self.settings.default_max_tokens)
                .min(room),
            stop: request.stop.clone(),
            ignore_eos: false,
        };
        let sampling = Sampling {
            temperature: request.temperature,
            top_p: request.top_p,
            seed: request.seed.unwrap_or_else(|| {
                SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            }),
        };
        let prompt_tokens = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        let permit = self.slot().await?;
        let pool = self.pool()?;
        let cancel = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel::<Piece>(64);
        let worker_cancel = cancel.clone();
        let worker_model = model.clone();
        tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let mut tokens = 0;
            let finished =
                worker_model.generate(&pool, &prompt, &limits, &sampling, &worker_cancel, |text| {
                    tokens += 1;
                    tx.blocking_send(Piece::Text(text.to_owned(), tokens))
                        .is_ok()
                });
            let _ = tx.blocking_send(Piece::Done(finished));
        });
        let ids = Ids::new(alias);
        if stream {
            let (events, usage) =
                stream_chunks(rx, ids, prompt_tokens, include_usage, CancelOnDrop(cancel));
            return Ok(LocalOutcome::Stream { events, usage });
        }
        let _cancel = CancelOnDrop(cancel);
        let mut rx = rx;
        let mut content = String::new();
        let mut done = None;
        while let Some(piece) = rx.recv().await {
            match piece {
                Piece::Text(t, _) => content.push_str(&t),
                Piece::Done(f) => done = Some(f),
            }
        }
        let finished =
            done.ok_or_else(|| LocalError::Internal("the generation stopped unexpectedly".into()))?;
        let usage = Usage {
            prompt_tokens,
            completion_tokens: u32::try_from(finished.completion_tokens).unwrap_or(u32::MAX),
        };
        let response = json!({
            "id": ids.id,
            "object": "chat.completion",
            "created": ids.created,
            "model": ids.alias,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finished.reason.openai(),
            }],
            "usage": crate::gateway::llm::openai::usage_json(usage),
        });
        Ok(LocalOutcome::Complete { response, usage })
    }
}

struct Ids {
    id: String,
    created: u64,
    alias: String,
}

impl Ids {
    fn new(alias: &str) -> Self {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        Ids {
            id: format!("chatcmpl-local-{:x}", now.as_nanos()),
            created: now.as_secs(),
            alias: alias.to_owned(),
        }
    }

    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.alias,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }
}

struct StreamState {
    rx: mpsc::Receiver<Piece>,
    ids: Ids,
    prompt_tokens: u32,
    completion_tokens: u32,
    include_usage: bool,
    started: bool,
    pending: std::collections::VecDeque<Value>,
    ended: bool,
    usage_tx: Option<oneshot::Sender<Usage>>,
    _cancel: CancelOnDrop,
}

impl StreamState {
    fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
        }
    }

    fn settle(&mut self) {
        if let Some(tx) = self.usage_tx.take() {
            let _ = tx.send(self.usage());
        }
    }
}

impl Drop for StreamState {
    fn drop(&mut self) {
        self.settle();
    }
}

fn stream_chunks(
    rx: mpsc::Receiver<Piece>,
    ids: Ids,
    prompt_tokens: u32,
    include_usage: bool,
    cancel: CancelOnDrop,
) -> (BoxStream<'static, Value>, oneshot::Receiver<Usage>) {
    let (usage_tx, usage_rx) = oneshot::channel();
    let state = StreamState {
        rx,
        ids,
        prompt_tokens,
        completion_tokens: 0,
        include_usage,
        started: false,
        pending: std::collections::VecDeque::new(),
        ended: false,
        usage_tx: Some(usage_tx),
        _cancel: cancel,
    };
    let events = stream::unfold(state, |mut s| async move {
        loop {
            if let Some(chunk) = s.pending.pop_front() {
                return Some((chunk, s));
            }
            if s.ended {
                s.settle();
                return None;
            }
            if !s.started {
                s.started = true;
                return Some((
                    s.ids
                        .chunk(json!({"role": "assistant", "content": ""}), None),
                    s,
                ));
            }
            match s.rx.recv().await {
                Some(Piece::Text(text, tokens)) => {
                    s.completion_tokens = u32::try_from(tokens).unwrap_or(u32::MAX);
                    return Some((s.ids.chunk(json!({"content": text}), None), s));
                }
                Some(Piece::Done(finished)) => {
                    s.completion_tokens =
                        u32::try_from(finished.completion_tokens).unwrap_or(u32::MAX);
                    s.ended = true;
                    let last = s.ids.chunk(json!({}), Some(finished.reason.openai()));
                    s.pending.push_back(last);
                    if s.include_usage {
                        let mut usage = json!({
                            "id": s.ids.id,
                            "object": "chat.completion.chunk",
                            "created": s.ids.created,
                            "model": s.ids.alias,
                            "choices": [],
                        });
                        if let Some(o) = usage.as_object_mut() {
                            o.insert(
                                "usage".into(),
                                crate::gateway::llm::openai::usage_json(s.usage()),
                            );
                        }
                        s.pending.push_back(usage);
                    }
                }
                None => {
                    // The worker ended without a result (it panicked).
                    s.ended = true;
                }
            }
        }
    })
    .boxed();
    (events, usage_rx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_specs() {
        assert_eq!(
            ModelSpec::parse("smollm2"),
            Ok(ModelSpec::Named("smollm2".into()))
        );
        assert_eq!(
            ModelSpec::parse("/m/x.gguf"),
            Ok(ModelSpec::Path("/m/x.gguf".into()))
        );
        assert_eq!(
            ModelSpec::parse("./x.gguf"),
            Ok(ModelSpec::Path("./x.gguf".into()))
        );
        assert!(ModelSpec::parse("a b").is_err());
        let dir = Path::new("/home/u/.pincer/models");
        let (p, name) = ModelSpec::Named("smollm2".into()).resolve(dir);
        assert_eq!(p, dir.join("SmolLM2-135M-Instruct.Q4_1.gguf"));
        assert_eq!(name.as_deref(), Some("smollm2"));
        let (p, name) = ModelSpec::Named("mine".into()).resolve(dir);
        assert_eq!((p, name), (dir.join("mine.gguf"), None));
    }
}
