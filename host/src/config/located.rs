//! A YAML file parsed into a located tree, for `pincer.yaml` and for the
//! per-workspace files (`schedules.yaml`) alike: the same parser, the same
//! deserializer and the same `FILE:LINE:COLUMN` positions for every error,
//! including the semantic ones a subsystem finds after deserializing.

use std::path::Path;

use serde::de::DeserializeOwned;

use super::de;
use super::error::{ConfigError, Site};
use super::interpolate;
use super::node::{self, Node, Seg};

/// One parsed file: its text and the located tree of it.
#[derive(Debug)]
pub(crate) struct Document<'t> {
    site: Site,
    text: &'t str,
    root: Node,
}

impl<'t> Document<'t> {
    /// Parses `text` (YAML syntax, duplicate keys, anchors, nesting limits).
    /// `file` is only used in messages.
    pub(crate) fn parse(text: &'t str, file: &Path) -> Result<Self, ConfigError> {
        let site = Site::new(file.display().to_string());
        let root = node::parse(text, &site)?;
        Ok(Document { site, text, root })
    }

    /// Expands `${NAME}` references in string values (see the module docs of
    /// [`crate::config`]); `lookup` returns `None` for an unset name. Every
    /// reference that cannot be expanded is an error; the positions of the
    /// strings holding one are returned too (they are left as written).
    pub(crate) fn interpolate_all(
        &mut self,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> (Vec<ConfigError>, Vec<(usize, usize)>) {
        let mut errors = Vec::new();
        let mut failed = Vec::new();
        interpolate::interpolate_tree(
            &mut self.root,
            self.text,
            &self.site,
            lookup,
            &mut errors,
            &mut failed,
        );
        (errors, failed)
    }

    /// Rewrites Pynchy's shapes into pincer's (`compat.rs`).
    pub(crate) fn rewrite_compat(
        &mut self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> super::compat::Outcome {
        super::compat::rewrite(&mut self.root, self.text, &self.site, env)
    }

    /// The string value at `path` as written, if there is one.
    pub(crate) fn string_at(&self, path: &[Seg<'_>]) -> Option<&str> {
        match &self.root.get(path, self.text)?.kind {
            node::Kind::Str { value, .. } => Some(value),
            _ => None,
        }
    }

    /// Deserializes the whole document (unknown keys, wrong types, missing
    /// keys are [`ConfigError::Schema`] at the offending node).
    pub(crate) fn deserialize<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        de::from_node(&self.root, self.text)
            .map_err(|err| self.site.schema(err.pos.unwrap_or((1, 1)), &err.message))
    }

    /// Deserializes the document, reporting every schema problem: each
    /// offending entry is left out and the rest deserialized again. Errors
    /// at a position in `quiet` (strings whose interpolation already
    /// failed) are not reported twice. The value is what remains.
    pub(crate) fn deserialize_all<T: DeserializeOwned>(
        &mut self,
        quiet: &[(usize, usize)],
    ) -> (Option<T>, Vec<ConfigError>) {
        const MAX_PROBLEMS: usize = 200;
        let mut errors = Vec::new();
        for _ in 0..MAX_PROBLEMS {
            let err = match de::from_node::<T>(&self.root, self.text) {
                Ok(value) => return (Some(value), errors),
                Err(err) => err,
            };
            let pos = err.pos.unwrap_or((1, 1));
            if !quiet.contains(&pos) {
                errors.push(self.site.schema(pos, &err.message));
            }
            match err.node {
                Some(address) if self.root.prune(address) => {}
                _ => break,
            }
        }
        (None, errors)
    }

    /// A semantic error ([`ConfigError::Invalid`]) about the node at `path`
    /// (with `at_key`, about the mapping key that holds it). A path that
    /// leaves the tree (a defaulted value) points at the deepest node that
    /// exists. A message quoting an interpolated value shows its `${...}`
    /// template instead.
    pub(crate) fn invalid(&self, path: &[Seg<'_>], at_key: bool, message: &str) -> ConfigError {
        let mut message = message.to_owned();
        if let Some(Node {
            kind:
                node::Kind::Str {
                    value,
                    template: Some(template),
                },
            ..
        }) = self.root.get(path, self.text)
        {
            message = de::redact(&message, value, template);
        }
        self.site
            .invalid(self.root.locate(path, at_key, self.text), &message)
    }

    /// The file name used in messages.
    pub(crate) fn file(&self) -> &str {
        self.site.file()
    }
}

/// Parses and deserializes `text` as a `T` without `${NAME}` interpolation
/// (values are taken as written), returning the document too so the caller
/// can report its own semantic errors with [`Document::invalid`].
///
/// # Errors
/// [`ConfigError::Syntax`] or [`ConfigError::Schema`], located.
pub(crate) fn parse_located<'t, T: DeserializeOwned>(
    text: &'t str,
    file: &Path,
) -> Result<(T, Document<'t>), ConfigError> {
    let doc = Document::parse(text, file)?;
    let value = doc.deserialize()?;
    Ok((value, doc))
}
