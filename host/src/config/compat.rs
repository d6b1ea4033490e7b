//! Pynchy's `config.yaml` shapes, accepted as written and rewritten on the
//! located tree into pincer's own before anything else reads it (so every
//! later error still points at the line the user wrote):
//!
//! | written (Pynchy) | becomes (pincer) |
//! | --- | --- |
//! | `litellm: {model, api_key, api_base}` | `gateway.model_list` entry with `model_name: default` |
//! | `litellm.fallbacks: [names]` | one `gateway.model_list` entry per name (its own alias) and `gateway.fallbacks: [{default: [names]}]` |
//! | `litellm.num_retries`, `timeout`, `routing_strategy` | the same keys of `gateway` |
//! | bare model names (`claude-*`, `gpt-*`, `o1*`/`o3*`/`o4*`, `gemini-*`) | `anthropic/…`, `openai/…`, `openai_compatible/…` on Google's OpenAI-compatible endpoint |
//! | `containers.default_runtime` | `containers.runtime` |
//! | `"allowed_executables: [/usr/bin/python3]"` (a string) in `policies` | the mapping `{allowed_executables: [/usr/bin/python3]}` |
//! | `mcp_servers.NAME.type: docker` with `image`, `volumes` | `mcp_servers.NAME.container: {image, volumes}` |
//! | `mcp_servers.NAME.type: stdio` / `http` | dropped (`command` / `url` say it) |
//!
//! A fallback whose provider key is not set in the environment is left out
//! with a warning (the router would only fail on it). Using a Pynchy key and
//! pincer's own for the same thing is an error naming both places.

use super::error::{ConfigError, Position, Site};
use super::node::{Kind, Node};

/// How one Pynchy-style key was understood (`pincer config explain`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explained {
    pub at: Position,
    /// The key as written, e.g. `litellm.model`.
    pub written: String,
    /// The pincer setting it became, e.g.
    /// `gateway.model_list[0] (model_name: default) litellm_params.model: anthropic/claude-3-5-sonnet`.
    pub became: String,
}

/// Something that loads but deserves a look.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    pub at: Position,
    pub message: String,
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: warning: {}", self.at, self.message)
    }
}

/// What the rewrite did.
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    pub explained: Vec<Explained>,
    pub warnings: Vec<Warning>,
    pub errors: Vec<ConfigError>,
}

/// Google's OpenAI-compatible endpoint (what LiteLLM's `gemini/` reaches).
pub const GEMINI_API_BASE: &str = "https://generativelanguage.googleapis.com/v1beta/openai";

/// A model name resolved the way LiteLLM does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedModel {
    /// Provider-qualified, e.g. `anthropic/claude-3-5-sonnet-20241022`.
    pub model: String,
    pub api_base: Option<&'static str>,
    /// The environment variable LiteLLM reads the key from.
    pub key_env: Option<&'static str>,
}

/// `claude-*` → Anthropic, `gpt-*`/`chatgpt-*`/`o1*`/`o3*`/`o4*` → OpenAI,
/// `gemini-*` → Google's OpenAI-compatible endpoint; `provider/model` is kept.
///
/// # Errors
/// A bare name pincer has no provider for, saying what to write.
pub fn resolve_model(name: &str) -> Result<ResolvedModel, super::Invalid> {
    let name = name.trim();
    if let Some((prefix, _)) = name.split_once('/') {
        let key_env = match prefix {
            "openai" => Some("OPENAI_API_KEY"),
            "anthropic" => Some("ANTHROPIC_API_KEY"),
            _ => None,
        };
        return Ok(ResolvedModel {
            model: name.to_owned(),
            api_base: None,
            key_env,
        });
    }
    let lower = name.to_ascii_lowercase();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|p| lower.starts_with(p));
    if starts(&["claude"]) {
        Ok(ResolvedModel {
            model: format!("anthropic/{name}"),
            api_base: None,
            key_env: Some("ANTHROPIC_API_KEY"),
        })
    } else if starts(&["gpt-", "chatgpt-", "o1", "o3", "o4"]) {
        Ok(ResolvedModel {
            model: format!("openai/{name}"),
            api_base: None,
            key_env: Some("OPENAI_API_KEY"),
        })
    } else if starts(&["gemini-"]) {
        Ok(ResolvedModel {
            model: format!("openai_compatible/{name}"),
            api_base: Some(GEMINI_API_BASE),
            key_env: Some("GEMINI_API_KEY"),
        })
    } else {
        Err(super::Invalid::from(format!(
            "no provider for this model: `{name}` is not a name pincer resolves (claude-* is \
             Anthropic, gpt-*/o1*/o3*/o4* OpenAI, gemini-* Google); write it as provider/model, \
             e.g. ollama/{name}, or openai_compatible/{name} with api_base"
        )))
    }
}

struct Rewriter<'s> {
    source: &'s str,
    site: &'s Site,
    env: &'s dyn Fn(&str) -> Option<String>,
    out: Outcome,
}

fn key_is(key: &Node, name: &str) -> bool {
    matches!(&key.kind, Kind::Str { value, .. } if value == name)
}

fn entries(node: &mut Node) -> Option<&mut Vec<(Node, Node)>> {
    match &mut node.kind {
        Kind::Map(entries) => Some(entries),
        _ => None,
    }
}

fn find<'n>(node: &'n Node, key: &str) -> Option<&'n (Node, Node)> {
    match &node.kind {
        Kind::Map(entries) => entries.iter().find(|(k, _)| key_is(k, key)),
        _ => None,
    }
}

fn find_mut<'n>(node: &'n mut Node, key: &str) -> Option<&'n mut Node> {
    entries(node)?
        .iter_mut()
        .find(|(k, _)| key_is(k, key))
        .map(|(_, v)| v)
}

fn take(node: &mut Node, key: &str) -> Option<(Node, Node)> {
    let entries = entries(node)?;
    let i = entries.iter().position(|(k, _)| key_is(k, key))?;
    Some(entries.remove(i))
}

fn synth(kind: Kind, pos: (usize, usize)) -> Node {
    Node {
        kind,
        pos,
        span: None,
    }
}

fn text(value: &str, pos: (usize, usize)) -> Node {
    synth(Kind::str(value.to_owned()), pos)
}

fn map(entries: Vec<(&str, Node)>, pos: (usize, usize)) -> Node {
    synth(
        Kind::Map(
            entries
                .into_iter()
                .map(|(k, v)| (text(k, pos), v))
                .collect(),
        ),
        pos,
    )
}

/// The map under `key` of `node`, created empty (at `pos`) when absent or null.
fn child_map<'n>(node: &'n mut Node, key: &str, pos: (usize, usize)) -> Option<&'n mut Node> {
    let entries = entries(node)?;
    let i = match entries.iter().position(|(k, _)| key_is(k, key)) {
        Some(i) => i,
        None => {
            entries.push((text(key, pos), synth(Kind::Null, pos)));
            entries.len() - 1
        }
    };
    let value = &mut entries[i].1;
    if matches!(value.kind, Kind::Null) {
        value.kind = Kind::Map(Vec::new());
    }
    matches!(value.kind, Kind::Map(_)).then_some(value)
}

fn plain(node: &Node) -> Option<&str> {
    match &node.kind {
        Kind::Str { value, .. } => Some(value),
        _ => None,
    }
}

impl Rewriter<'_> {
    fn at(&self, pos: (usize, usize)) -> Position {
        self.site.at(pos)
    }

    fn explain(&mut self, pos: (usize, usize), written: &str, became: String) {
        let at = self.at(pos);
        self.out.explained.push(Explained {
            at,
            written: written.to_owned(),
            became,
        });
    }

    fn error(&mut self, pos: (usize, usize), message: &str) {
        let err = self.site.invalid(pos, message);
        self.out.errors.push(err);
    }

    fn warn(&mut self, pos: (usize, usize), message: String) {
        let at = self.at(pos);
        self.out.warnings.push(Warning { at, message });
    }

    fn shown(&self, pos: (usize, usize)) -> String {
        let at = self.at(pos);
        format!("{}:{}", at.line, at.column)
    }

    /// `litellm:` → a `default` alias (and one alias per fallback) in
    /// `gateway`.
    fn litellm(&mut self, root: &mut Node) {
        let Some((key, mut section)) = take(root, "litellm") else {
            return;
        };
        let top = key.pos;
        if matches!(section.kind, Kind::Null) {
            return;
        }
        if !matches!(section.kind, Kind::Map(_)) {
            self.error(
                section.pos,
                "litellm must be a mapping (model, api_key, api_base, num_retries, timeout, routing_strategy, fallbacks)",
            );
            return;
        }
        const KNOWN: [&str; 7] = [
            "model",
            "api_key",
            "api_base",
            "num_retries",
            "timeout",
            "routing_strategy",
            "fallbacks",
        ];
        let unknown: Vec<(String, (usize, usize))> = match &section.kind {
            Kind::Map(entries) => entries
                .iter()
                .filter(|(k, _)| !KNOWN.iter().any(|n| key_is(k, n)))
                .map(|(k, _)| (plain(k).unwrap_or("?").to_owned(), k.pos))
                .collect(),
            _ => Vec::new(),
        };
        for (name, pos) in unknown {
            self.error(
                pos,
                &format!(
                    "unknown key `{name}` in litellm (pincer reads model, api_key, api_base, num_retries, timeout, routing_strategy and fallbacks there; anything else goes under gateway:, e.g. gateway.model_list[].litellm_params.{name})"
                ),
            );
        }
        let existing = self.aliases(root);
        let Some(gateway) = child_map(root, "gateway", top) else {
            self.error(top, "gateway must be a mapping");
            return;
        };
        // Router settings.
        for setting in ["num_retries", "timeout", "routing_strategy"] {
            let Some((k, v)) = take(&mut section, setting) else {
                continue;
            };
            if let Some((other, _)) = find(gateway, setting) {
                let other = other.pos;
                let message = format!(
                    "`{setting}` is set in both litellm.{setting} and gateway.{setting} (at {}): keep one",
                    self.shown(other)
                );
                self.error(k.pos, &message);
                continue;
            }
            let shown = plain(&v)
                .map(str::to_owned)
                .or_else(|| {
                    v.source_text(self.source)
                        .map(str::trim)
                        .filter(|t| !t.is_empty())
                        .map(str::to_owned)
                })
                .unwrap_or_default();
            self.explain(
                k.pos,
                &format!("litellm.{setting}"),
                format!("gateway.{setting}: {shown}"),
            );
            if let Some(entries) = entries(gateway) {
                entries.push((text(setting, k.pos), v));
            }
        }
        // The `default` alias.
        let Some((model_key, model)) = take(&mut section, "model") else {
            self.error(
                top,
                "litellm needs `model` (e.g. claude-3-5-sonnet-20241022); it becomes the model alias `default`",
            );
            return;
        };
        if let Some(pos) = existing.get("default") {
            let message = format!(
                "litellm.model defines the model alias `default`, and gateway.model_list defines it too (at {}): keep one of the two",
                self.shown(*pos)
            );
            self.error(model_key.pos, &message);
            return;
        }
        let Some(name) = plain(&model).map(str::to_owned) else {
            self.error(model.pos, "litellm.model must be a model name");
            return;
        };
        let resolved = match resolve_model(&name) {
            Ok(resolved) => resolved,
            Err(message) => {
                self.error(model.pos, &message.0);
                return;
            }
        };
        let pos = model.pos;
        let mut params = vec![("model", text(&resolved.model, pos))];
        let api_key = take(&mut section, "api_key");
        let key_shown = match (&api_key, resolved.key_env) {
            (Some((_, v)), _) => match &v.kind {
                Kind::Str { value, .. } if value.contains("${") => value.clone(),
                _ => "(as written)".to_owned(),
            },
            (None, Some(var)) => format!("${{{var}}}"),
            (None, None) => "none".to_owned(),
        };
        match api_key {
            Some((_, v)) => params.push(("api_key", v)),
            None => {
                if let Some(var) = resolved.key_env {
                    params.push(("api_key", text(&format!("${{{var}}}"), pos)));
                }
            }
        }
        match take(&mut section, "api_base") {
            Some((_, v)) => params.push(("api_base", v)),
            None => {
                if let Some(base) = resolved.api_base {
                    params.push(("api_base", text(base, pos)));
                }
            }
        }
        let mut became = format!(
            "gateway.model_list entry model_name: default, litellm_params.model: {}, api_key: {key_shown}",
            resolved.model
        );
        if let Some(base) = resolved.api_base {
            became.push_str(&format!(", api_base: {base}"));
        }
        self.explain(model_key.pos, "litellm.model", became);
        let mut deployments = vec![map(
            vec![
                ("model_name", text("default", pos)),
                ("litellm_params", map(params, pos)),
            ],
            pos,
        )];
        // Fallbacks: each its own alias; `default` falls back to them in order.
        let mut kept: Vec<Node> = Vec::new();
        let mut fallbacks_pos = None;
        if let Some((fk, fv)) = take(&mut section, "fallbacks") {
            fallbacks_pos = Some(fk.pos);
            match fv.kind {
                Kind::Seq(items) => {
                    for item in items {
                        if let Some(node) = self.fallback(item, &existing, &mut deployments) {
                            kept.push(node);
                        }
                    }
                }
                Kind::Null => {}
                _ => self.error(
                    fv.pos,
                    "litellm.fallbacks must be a list of model names, e.g. [gpt-4-turbo, gemini-1.5-pro]",
                ),
            }
        }
        if let Some(fpos) = fallbacks_pos
            && !kept.is_empty()
        {
            let conflict = find(gateway, "fallbacks").and_then(|(_, list)| match &list.kind {
                Kind::Seq(items) => items
                    .iter()
                    .find_map(|item| find(item, "default").map(|(k, _)| k.pos)),
                _ => None,
            });
            if let Some(other) = conflict {
                let message = format!(
                    "litellm.fallbacks sets the fallbacks of `default`, and gateway.fallbacks does too (at {}): keep one of the two",
                    self.shown(other)
                );
                self.error(fpos, &message);
            } else {
                let names: Vec<String> = kept.iter().filter_map(plain).map(str::to_owned).collect();
                self.explain(
                    fpos,
                    "litellm.fallbacks",
                    format!("gateway.fallbacks: [{{default: [{}]}}]", names.join(", ")),
                );
                let entry = synth(
                    Kind::Map(vec![(text("default", fpos), synth(Kind::Seq(kept), fpos))]),
                    fpos,
                );
                if let Some(list) = child_seq(gateway, "fallbacks", fpos) {
                    list.push(entry);
                }
            }
        }
        if let Some(list) = child_seq(gateway, "model_list", top) {
            list.extend(deployments);
        }
    }

    /// One `litellm.fallbacks` item: the alias name to fall back to, adding
    /// its deployment; `None` when it is left out.
    fn fallback(
        &mut self,
        item: Node,
        existing: &std::collections::BTreeMap<String, (usize, usize)>,
        deployments: &mut Vec<Node>,
    ) -> Option<Node> {
        let Some(name) = plain(&item).map(str::to_owned) else {
            self.error(item.pos, "a fallback is a model name, e.g. gpt-4-turbo");
            return None;
        };
        let pos = item.pos;
        if existing.contains_key(&name) {
            self.explain(
                pos,
                &format!("litellm.fallbacks: {name}"),
                format!("the gateway.model_list alias `{name}` (a fallback of `default`)"),
            );
            return Some(item);
        }
        let resolved = match resolve_model(&name) {
            Ok(resolved) => resolved,
            Err(message) => {
                self.error(pos, &message.0);
                return None;
            }
        };
        let mut params = vec![("model", text(&resolved.model, pos))];
        if let Some(base) = resolved.api_base {
            params.push(("api_base", text(base, pos)));
        }
        match resolved.key_env {
            Some(var) if (self.env)(var).is_none_or(|v| v.is_empty()) => {
                self.warn(
                    pos,
                    format!(
                        "fallback `{name}` ({}) is left out: {var} is not set (set it, or define `{name}` in gateway.model_list with its api_key)",
                        resolved.model
                    ),
                );
                return None;
            }
            Some(var) => params.push(("api_key", text(&format!("${{{var}}}"), pos))),
            None => {}
        }
        self.explain(
            pos,
            &format!("litellm.fallbacks: {name}"),
            format!(
                "gateway.model_list entry model_name: {name}, litellm_params.model: {}{}{} (a fallback of `default`)",
                resolved.model,
                resolved
                    .key_env
                    .map(|v| format!(", api_key: ${{{v}}}"))
                    .unwrap_or_default(),
                resolved
                    .api_base
                    .map(|b| format!(", api_base: {b}"))
                    .unwrap_or_default(),
            ),
        );
        deployments.push(map(
            vec![
                ("model_name", text(&name, pos)),
                ("litellm_params", map(params, pos)),
            ],
            pos,
        ));
        Some(text(&name, pos))
    }

    /// Aliases of `gateway.model_list` as written, with where.
    fn aliases(&self, root: &Node) -> std::collections::BTreeMap<String, (usize, usize)> {
        let mut out = std::collections::BTreeMap::new();
        let Some((_, gateway)) = find(root, "gateway") else {
            return out;
        };
        let Some((_, list)) = find(gateway, "model_list") else {
            return out;
        };
        if let Kind::Seq(items) = &list.kind {
            for item in items {
                if let Some((k, v)) = find(item, "model_name")
                    && let Some(name) = v.scalar_text(self.source)
                {
                    out.entry(name).or_insert(k.pos);
                }
            }
        }
        out
    }

    /// `containers.default_runtime` → `containers.runtime`.
    fn containers(&mut self, root: &mut Node) {
        let Some(containers) = find_mut(root, "containers") else {
            return;
        };
        let Some(entries) = entries(containers) else {
            return;
        };
        let Some(i) = entries
            .iter()
            .position(|(k, _)| key_is(k, "default_runtime"))
        else {
            return;
        };
        if let Some((other, _)) = entries.iter().find(|(k, _)| key_is(k, "runtime")) {
            let other = other.pos;
            let pos = entries[i].0.pos;
            let message = format!(
                "`default_runtime` and `runtime` (at {}) are the same setting: keep one",
                self.shown(other)
            );
            self.error(pos, &message);
            // Reported once: not again as an unknown key.
            entries.remove(i);
            return;
        }
        let (key, value) = &mut entries[i];
        let pos = key.pos;
        *key = text("runtime", pos);
        let shown = plain(value).unwrap_or("?").to_owned();
        self.explain(
            pos,
            "containers.default_runtime",
            format!("containers.runtime: {shown}"),
        );
    }

    fn workspaces(&mut self, root: &mut Node) {
        let Some(workspaces) = find_mut(root, "workspaces") else {
            return;
        };
        let Some(list) = entries(workspaces) else {
            return;
        };
        for (name, ws) in list.iter_mut() {
            let ws_name = plain(name).unwrap_or("?").to_owned();
            if let Some((k, v)) = find(ws, "path") {
                let shown = plain(v).unwrap_or("?").to_owned();
                let pos = k.pos;
                self.explain(
                    pos,
                    &format!("workspaces.{ws_name}.path"),
                    format!(
                        "workspaces.{ws_name}.path: the workspace folder, mounted at /workspace ({shown})"
                    ),
                );
            }
            let Some(policies) = find_mut(ws, "policies") else {
                continue;
            };
            let Kind::Seq(items) = &mut policies.kind else {
                continue;
            };
            for (i, item) in items.iter_mut().enumerate() {
                let Some(written) = plain(item).map(str::to_owned) else {
                    continue;
                };
                let Some(rest) = written.trim().strip_prefix("allowed_executables") else {
                    continue;
                };
                let Some(list) = rest.trim_start().strip_prefix(':') else {
                    continue;
                };
                let pos = item.pos;
                // Unreadable: left as written, the schema reports it, once.
                if let Ok(paths) = parse_path_list(list) {
                    self.explain(
                        pos,
                        &format!("workspaces.{ws_name}.policies[{i}]: \"{written}\""),
                        format!(
                            "the policies entry {{allowed_executables: [{}]}}",
                            paths.join(", ")
                        ),
                    );
                    let seq = synth(Kind::Seq(paths.iter().map(|p| text(p, pos)).collect()), pos);
                    *item = synth(
                        Kind::Map(vec![(text("allowed_executables", pos), seq)]),
                        pos,
                    );
                }
            }
        }
    }

    /// `mcp_servers.NAME.type`.
    fn mcp_servers(&mut self, root: &mut Node) {
        let Some(servers) = find_mut(root, "mcp_servers") else {
            return;
        };
        let Some(list) = entries(servers) else {
            return;
        };
        for (name, server) in list.iter_mut() {
            let server_name = plain(name).unwrap_or("?").to_owned();
            let Some((type_key, kind)) = take(server, "type") else {
                continue;
            };
            let written = plain(&kind).unwrap_or("").to_owned();
            let base = format!("mcp_servers.{server_name}");
            match written.as_str() {
                "docker" => {
                    if let Some((other, _)) = find(server, "container") {
                        let message = format!(
                            "`type: docker` and `container:` (at {}) both describe the container: keep one",
                            self.shown(other.pos)
                        );
                        self.error(type_key.pos, &message);
                        // Reported once: not again as unknown keys.
                        for key in DOCKER_KEYS {
                            take(server, key);
                        }
                        continue;
                    }
                    let mut container = Vec::new();
                    for key in DOCKER_KEYS {
                        if let Some((k, v)) = take(server, key) {
                            self.explain(
                                k.pos,
                                &format!("{base}.{key}"),
                                format!("{base}.container.{key}"),
                            );
                            container.push((k, v));
                        }
                    }
                    self.explain(
                        type_key.pos,
                        &format!("{base}.type: docker"),
                        format!(
                            "{base}.container: the server runs in its own container, started by pincer and spoken to over stdio (Docker's attach stream)"
                        ),
                    );
                    let pos = type_key.pos;
                    if let Some(entries) = entries(server) {
                        entries.push((
                            text("container", pos),
                            synth(Kind::Map(container), kind.pos),
                        ));
                    }
                }
                "stdio" | "http" | "streamable-http" | "streamable_http" => {
                    let field = if written == "stdio" { "command" } else { "url" };
                    self.explain(
                        type_key.pos,
                        &format!("{base}.type: {written}"),
                        format!("nothing: pincer reads the kind from `{field}`"),
                    );
                }
                other => self.error(
                    kind.pos,
                    &format!(
                        "unknown MCP server type `{other}`: pincer runs `docker` (write `container: {{image: ...}}` or `type: docker` with `image`), `stdio` (`command: [program, args...]`) and `http` (`url: https://...`)"
                    ),
                ),
            }
        }
    }
}

/// The keys of a Pynchy `type: docker` server that move under `container:`.
const DOCKER_KEYS: [&str; 4] = ["image", "volumes", "command", "policies"];

/// The sequence under `key`, created when absent or null.
fn child_seq<'n>(node: &'n mut Node, key: &str, pos: (usize, usize)) -> Option<&'n mut Vec<Node>> {
    let entries = entries(node)?;
    let i = match entries.iter().position(|(k, _)| key_is(k, key)) {
        Some(i) => i,
        None => {
            entries.push((text(key, pos), synth(Kind::Seq(Vec::new()), pos)));
            entries.len() - 1
        }
    };
    let value = &mut entries[i].1;
    if matches!(value.kind, Kind::Null) {
        value.kind = Kind::Seq(Vec::new());
    }
    match &mut value.kind {
        Kind::Seq(items) => Some(items),
        _ => None,
    }
}

/// `[/a, "/b c"]` → the paths; quotes allowed, nothing else.
pub(crate) fn parse_path_list(written: &str) -> Result<Vec<String>, super::Invalid> {
    let inner = written
        .trim()
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .ok_or("expected a [list] after `allowed_executables:`")?;
    let mut out = Vec::new();
    for part in inner.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let unquoted = part
            .strip_prefix('"')
            .and_then(|p| p.strip_suffix('"'))
            .or_else(|| part.strip_prefix('\'').and_then(|p| p.strip_suffix('\'')))
            .unwrap_or(part);
        if unquoted.contains(['"', '\'', '[', ']']) {
            return Err(super::Invalid::from(format!("`{part}` is not a path")));
        }
        out.push(unquoted.to_owned());
    }
    if out.is_empty() {
        return Err(super::Invalid::from("the list is empty"));
    }
    Ok(out)
}

/// Rewrites Pynchy's shapes in `root` into pincer's. `env` decides which
/// fallbacks have their provider key.
pub(crate) fn rewrite(
    root: &mut Node,
    source: &str,
    site: &Site,
    env: &dyn Fn(&str) -> Option<String>,
) -> Outcome {
    if !matches!(root.kind, Kind::Map(_)) {
        return Outcome::default();
    }
    let mut rewriter = Rewriter {
        source,
        site,
        env,
        out: Outcome::default(),
    };
    rewriter.litellm(root);
    rewriter.containers(root);
    rewriter.workspaces(root);
    rewriter.mcp_servers(root);
    rewriter.out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_resolve_as_litellm_does() {
        let r = resolve_model("claude-3-5-sonnet-20241022").unwrap();
        assert_eq!(r.model, "anthropic/claude-3-5-sonnet-20241022");
        assert_eq!(r.key_env, Some("ANTHROPIC_API_KEY"));
        assert_eq!(
            resolve_model("gpt-4-turbo").unwrap().model,
            "openai/gpt-4-turbo"
        );
        assert_eq!(resolve_model("o3-mini").unwrap().model, "openai/o3-mini");
        let g = resolve_model("gemini-1.5-pro").unwrap();
        assert_eq!(g.model, "openai_compatible/gemini-1.5-pro");
        assert_eq!(g.api_base, Some(GEMINI_API_BASE));
        assert_eq!(g.key_env, Some("GEMINI_API_KEY"));
        assert_eq!(
            resolve_model("ollama/llama3").unwrap().model,
            "ollama/llama3"
        );
        assert_eq!(
            resolve_model("mistral-large").unwrap_err().0,
            "no provider for this model: `mistral-large` is not a name pincer resolves (claude-* is \
             Anthropic, gpt-*/o1*/o3*/o4* OpenAI, gemini-* Google); write it as provider/model, \
             e.g. ollama/mistral-large, or openai_compatible/mistral-large with api_base"
        );
    }

    #[test]
    fn path_lists() {
        assert_eq!(
            parse_path_list(" [/usr/bin/python3, \"/bin/sh\"]").unwrap(),
            ["/usr/bin/python3", "/bin/sh"]
        );
        assert!(parse_path_list("/usr/bin/python3").is_err());
        assert!(parse_path_list("[]").is_err());
    }
}
