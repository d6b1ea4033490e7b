//! A located YAML tree.
//!
//! `serde-saphyr` parses the text (syntax, duplicate keys, anchors, merge
//! keys, nesting budget) into this tree; every node keeps the line/column
//! where it is used and the byte span of its definition in the source. The
//! tree is then interpolated (`interpolate.rs`), deserialized into the typed
//! schema (`de.rs`) and used to find positions for semantic errors
//! (`validate.rs`).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_saphyr::{MessageFormatter, NonFiniteFloatPolicy, Spanned, UserMessageFormatter};

use super::error::{ConfigError, Site};

/// One YAML node.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Node {
    pub kind: Kind,
    /// 1-based line/column where the node is used (for an alias: the alias).
    pub pos: (usize, usize),
    /// Byte range of the node's definition in the source (for an alias: the
    /// anchored node), when known.
    pub span: Option<(usize, usize)>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Kind {
    Null,
    Bool(bool),
    Int(i64),
    UInt(u64),
    Float(f64),
    /// A string. `template` is the original text when `${...}` references
    /// were expanded into `value` (the value then came, at least partly, from
    /// the environment or a default, and must not be echoed in messages).
    Str {
        value: String,
        template: Option<String>,
    },
    Seq(Vec<Node>),
    Map(Vec<(Node, Node)>),
}

impl Kind {
    pub(crate) fn str(value: String) -> Self {
        Kind::Str {
            value,
            template: None,
        }
    }
}

/// One step of a path into the tree.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Seg<'a> {
    Key(&'a str),
    Index(usize),
}

impl Node {
    /// The source text of the node's definition (plain scalars: exactly what
    /// was written, e.g. `1.10` rather than the float `1.1`).
    pub(crate) fn source_text<'s>(&self, source: &'s str) -> Option<&'s str> {
        let (start, len) = self.span?;
        source.get(start..start.checked_add(len)?)
    }

    /// The text of a scalar used as a string: strings as they are, other
    /// scalars as written in the source.
    pub(crate) fn scalar_text(&self, source: &str) -> Option<String> {
        match &self.kind {
            Kind::Str { value, .. } => Some(value.clone()),
            Kind::Bool(b) => Some(self.written(source, b)),
            Kind::Int(i) => Some(self.written(source, i)),
            Kind::UInt(u) => Some(self.written(source, u)),
            Kind::Float(f) => Some(self.written(source, f)),
            Kind::Null | Kind::Seq(_) | Kind::Map(_) => None,
        }
    }

    fn written(&self, source: &str, fallback: &dyn fmt::Display) -> String {
        match self.source_text(source) {
            Some(text) if !text.is_empty() && !text.contains(['\n', '#']) => text.trim().to_owned(),
            _ => fallback.to_string(),
        }
    }

    fn entry(&self, key: &str, source: &str) -> Option<&(Node, Node)> {
        match &self.kind {
            Kind::Map(entries) => entries
                .iter()
                .find(|(k, _)| k.scalar_text(source).as_deref() == Some(key)),
            _ => None,
        }
    }

    /// The node at `path`, if the path exists in the tree.
    pub(crate) fn get(&self, path: &[Seg<'_>], source: &str) -> Option<&Node> {
        let mut node = self;
        for seg in path {
            node = match seg {
                Seg::Key(key) => &node.entry(key, source)?.1,
                Seg::Index(i) => match &node.kind {
                    Kind::Seq(items) => items.get(*i)?,
                    _ => return None,
                },
            };
        }
        Some(node)
    }

    /// Position of the node at `path`; with `at_key`, of the mapping key that
    /// holds it. When the path leaves the tree (a defaulted value), the
    /// position of the deepest node that exists.
    pub(crate) fn locate(&self, path: &[Seg<'_>], at_key: bool, source: &str) -> (usize, usize) {
        let mut node = self;
        let mut key_pos = self.pos;
        for seg in path {
            match seg {
                Seg::Key(key) => match node.entry(key, source) {
                    Some((k, v)) => {
                        key_pos = k.pos;
                        node = v;
                    }
                    None => return node.pos,
                },
                Seg::Index(i) => match &node.kind {
                    Kind::Seq(items) if *i < items.len() => {
                        node = &items[*i];
                        key_pos = node.pos;
                    }
                    _ => return node.pos,
                },
            }
        }
        if at_key { key_pos } else { node.pos }
    }
}

impl Node {
    /// Removes the mapping entry whose key or value is the node at
    /// `address`, or the sequence item that is; `true` when one was found.
    pub(crate) fn prune(&mut self, address: usize) -> bool {
        let is = |node: &Node| std::ptr::from_ref(node) as usize == address;
        match &mut self.kind {
            Kind::Map(entries) => {
                if let Some(i) = entries.iter().position(|(k, v)| is(k) || is(v)) {
                    entries.remove(i);
                    return true;
                }
                entries.iter_mut().any(|(_, v)| v.prune(address))
            }
            Kind::Seq(items) => {
                if let Some(i) = items.iter().position(is) {
                    items.remove(i);
                    return true;
                }
                items.iter_mut().any(|item| item.prune(address))
            }
            _ => false,
        }
    }
}

/// Deepest nesting of mappings/sequences accepted. serde-saphyr descends
/// recursively (about 45 KiB of stack per level in debug builds), so its
/// default of 64 could overflow a 2 MiB thread, which aborts the process.
pub(crate) const MAX_DEPTH: usize = 32;

/// Stack for the parser thread: `MAX_DEPTH` levels fit with a wide margin.
const PARSER_STACK_BYTES: usize = 8 << 20;

/// Parses `text` into a located tree. An empty document is `Null`.
///
/// Runs on a scoped thread with a known stack size, so the result does not
/// depend on how much of the caller's stack (e.g. a 2 MiB tokio worker) is
/// already in use.
pub(crate) fn parse(text: &str, site: &Site) -> Result<Node, ConfigError> {
    std::thread::scope(|scope| {
        let spawned = std::thread::Builder::new()
            .name("pincer-config".to_owned())
            .stack_size(PARSER_STACK_BYTES)
            .spawn_scoped(scope, || parse_here(text, site));
        match spawned {
            Ok(handle) => handle.join().unwrap_or_else(|_| {
                Err(site.syntax((1, 1), "the YAML parser failed unexpectedly"))
            }),
            // No thread available: the depth budget still bounds the stack.
            Err(_) => parse_here(text, site),
        }
    })
}

fn parse_here(text: &str, site: &Site) -> Result<Node, ConfigError> {
    let mut budget = serde_saphyr::Budget::default();
    budget.max_depth = MAX_DEPTH;
    let mut options = serde_saphyr::Options::default();
    options.budget = Some(budget);
    // YAML 1.2 booleans only: `no`, `on`, `y` stay strings.
    options.strict_booleans = true;
    options.with_snippet = false;
    // `.inf`/`.nan` in free-form values become strings instead of errors.
    options.non_finite_float_policy = NonFiniteFloatPolicy::AsString;
    match serde_saphyr::from_str_with_options::<Spanned<Kind>>(text, options) {
        Ok(root) => Ok(to_node(root)),
        Err(err) => {
            let pos = err
                .location()
                .map(|l| (to_usize(l.line()), to_usize(l.column())))
                .unwrap_or((1, 1));
            Err(site.syntax(pos, &saphyr_message(&err)))
        }
    }
}

fn saphyr_message(err: &serde_saphyr::Error) -> String {
    use serde_saphyr::Error;
    use serde_saphyr::budget::BudgetBreach;
    let mut inner = err;
    while let Error::AliasError { error, .. } | Error::WithSnippet { error, .. } = inner {
        inner = error;
    }
    match inner {
        Error::UnknownAnchor { .. } => "alias refers to an unknown anchor".to_owned(),
        Error::Budget {
            breach: BudgetBreach::Depth { .. },
            ..
        } => format!("nested more than {MAX_DEPTH} levels deep"),
        _ => UserMessageFormatter.format_message(err).into_owned(),
    }
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn to_node(spanned: Spanned<Kind>) -> Node {
    let used = spanned.referenced;
    let span = spanned.defined.span();
    let span = match (span.byte_offset(), span.byte_len()) {
        (Some(start), Some(len)) => Some((to_usize(start), to_usize(len))),
        _ => None,
    };
    Node {
        kind: spanned.value,
        pos: (to_usize(used.line()), to_usize(used.column())),
        span,
    }
}

impl<'de> Deserialize<'de> for Kind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(KindVisitor)
    }
}

struct KindVisitor;

impl<'de> Visitor<'de> for KindVisitor {
    type Value = Kind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a YAML value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Kind, E> {
        Ok(Kind::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Kind, D::Error> {
        Kind::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Kind, E> {
        Ok(Kind::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Kind, E> {
        Ok(Kind::Int(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Kind, E> {
        Ok(Kind::UInt(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Kind, E> {
        Ok(Kind::Float(v))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Kind, E> {
        Ok(Kind::str(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Kind, E> {
        Ok(Kind::str(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Kind, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Spanned<Kind>>()? {
            items.push(to_node(item));
        }
        Ok(Kind::Seq(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Kind, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<Spanned<Kind>>()? {
            let value = map.next_value::<Spanned<Kind>>()?;
            entries.push((to_node(key), to_node(value)));
        }
        Ok(Kind::Map(entries))
    }
}

/// 1-based line and character column of byte offset `offset` in `source`.
pub(crate) fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before.get(line_start..).map_or(0, |s| s.chars().count()) + 1;
    (line, column)
}
