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
    /// [`crate::config`]); `env` returns `None` for an unset variable.
    pub(crate) fn interpolate<F>(&mut self, env: F) -> Result<(), ConfigError>
    where
        F: Fn(&str) -> Option<String>,
    {
        interpolate::interpolate_tree(&mut self.root, self.text, &self.site, &env)
    }

    /// Deserializes the whole document (unknown keys, wrong types, missing
    /// keys are [`ConfigError::Schema`] at the offending node).
    pub(crate) fn deserialize<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        de::from_node(&self.root, self.text)
            .map_err(|err| self.site.schema(err.pos.unwrap_or((1, 1)), &err.message))
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
