//! `${NAME}` interpolation.
//!
//! Runs on the parsed tree, never on the YAML text: each string *value*
//! (mapping keys are left alone) is expanded after the YAML parser has
//! decided what is a string, so a substituted value cannot add keys, items or
//! documents, whatever it contains (`: `, newlines, `#`, `{`, quotes...).
//! Substituted text is not scanned again either.
//!
//! Syntax, applied in every scalar style (plain, quoted, block):
//! - `${NAME}`: the variable's value; an error if it is not set
//!   (set-but-empty gives the empty string);
//! - `${NAME:-default}`: `default` when `NAME` is unset or empty; the default
//!   is literal text up to the first `}` and may not contain `${`;
//! - `$${` is a literal `${`;
//! - `NAME` is `[A-Za-z_][A-Za-z0-9_]*`; any other `${` is an error;
//! - a `$` not followed by `{` is literal.

use super::error::{ConfigError, Site};
use super::node::{Kind, Node, line_col};

/// A problem with one reference, at byte `offset` of the string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RefError {
    pub offset: usize,
    pub kind: RefErrorKind,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RefErrorKind {
    Missing(String),
    Malformed(String),
}

/// Outcome of expanding one string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Expanded {
    pub value: String,
    /// At least one `${...}` reference was substituted.
    pub substituted: bool,
}

fn is_name_start(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphabetic()
}

fn is_name_continue(c: u8) -> bool {
    c == b'_' || c.is_ascii_alphanumeric()
}

/// A `${...}` reference starting at some `$`.
struct Reference<'a> {
    name: &'a str,
    default: Option<&'a str>,
    /// Byte length of the whole reference, `$` to `}` inclusive.
    len: usize,
}

/// Parses the reference whose `${` starts at `rest[0]`.
fn parse_reference(rest: &str) -> Result<Reference<'_>, super::Invalid> {
    let bytes = rest.as_bytes();
    let mut end = 2;
    if bytes.get(end).copied().is_some_and(is_name_start) {
        end += 1;
        while bytes.get(end).copied().is_some_and(is_name_continue) {
            end += 1;
        }
    }
    let name = rest.get(2..end).unwrap_or("");
    let after = rest.get(end..).unwrap_or("");
    if name.is_empty() {
        return Err(super::Invalid::from(format!(
            "invalid reference `{}`: the variable name must match [A-Za-z_][A-Za-z0-9_]* \
             (write `$${{` for a literal `${{`)",
            excerpt(rest)
        )));
    }
    if after.starts_with('}') {
        return Ok(Reference {
            name,
            default: None,
            len: end + 1,
        });
    }
    if let Some(tail) = after.strip_prefix(":-") {
        let Some(close) = tail.find('}') else {
            return Err(super::Invalid(format!(
                "unterminated reference `{}`: missing `}}`",
                excerpt(rest)
            )));
        };
        let default = tail.get(..close).unwrap_or("");
        if default.contains("${") {
            return Err(super::Invalid(format!(
                "invalid reference `{}`: a default cannot contain another `${{`",
                excerpt(rest)
            )));
        }
        return Ok(Reference {
            name,
            default: Some(default),
            len: end + 2 + close + 1,
        });
    }
    if after.is_empty() || !after.contains('}') {
        return Err(super::Invalid(format!(
            "unterminated reference `{}`: missing `}}` (write `$${{` for a literal `${{`)",
            excerpt(rest)
        )));
    }
    Err(super::Invalid(format!(
        "invalid reference `{}`: expected `${{{name}}}` or `${{{name}:-default}}`",
        excerpt(rest)
    )))
}

/// The start of a malformed reference, short enough for a message.
fn excerpt(rest: &str) -> String {
    let line = rest.lines().next().unwrap_or("");
    let cut: String = line.chars().take(40).collect();
    if cut.len() < line.len() {
        format!("{cut}...")
    } else {
        cut
    }
}

/// Byte offsets of the `$` of every reference in `s` (escapes skipped), as
/// the expander sees them.
fn reference_starts(s: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut i = 0;
    while let Some(found) = s.get(i..).and_then(|rest| rest.find('$')) {
        let at = i + found;
        let rest = s.get(at..).unwrap_or("");
        if rest.starts_with("$${") {
            i = at + 3;
        } else if rest.starts_with("${") {
            starts.push(at);
            i = match parse_reference(rest) {
                Ok(reference) => at + reference.len,
                Err(_) => at + 2,
            };
        } else {
            i = at + 1;
        }
    }
    starts
}

/// Expands one string.
pub(crate) fn expand(s: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Expanded, RefError> {
    if !s.contains("${") {
        return Ok(Expanded {
            value: s.to_owned(),
            substituted: false,
        });
    }
    let mut out = String::with_capacity(s.len());
    let mut substituted = false;
    let mut i = 0;
    while let Some(found) = s.get(i..).and_then(|rest| rest.find('$')) {
        let at = i + found;
        out.push_str(s.get(i..at).unwrap_or(""));
        let rest = s.get(at..).unwrap_or("");
        if rest.starts_with("$${") {
            out.push_str("${");
            i = at + 3;
        } else if rest.starts_with("${") {
            let reference = parse_reference(rest).map_err(|message| RefError {
                offset: at,
                kind: RefErrorKind::Malformed(message.0),
            })?;
            let value = match (env(reference.name), reference.default) {
                (Some(value), Some(default)) if value.is_empty() => default.to_owned(),
                (Some(value), _) => value,
                (None, Some(default)) => default.to_owned(),
                (None, None) => {
                    return Err(RefError {
                        offset: at,
                        kind: RefErrorKind::Missing(reference.name.to_owned()),
                    });
                }
            };
            out.push_str(&value);
            substituted = true;
            i = at + reference.len;
        } else {
            out.push('$');
            i = at + 1;
        }
    }
    out.push_str(s.get(i..).unwrap_or(""));
    Ok(Expanded {
        value: out,
        substituted,
    })
}

/// Expands every string value in the tree (not mapping keys); every
/// reference that cannot be expanded is reported in `errors` (its string is
/// left as written) and the walk goes on.
pub(crate) fn interpolate_tree(
    node: &mut Node,
    source: &str,
    site: &Site,
    env: &dyn Fn(&str) -> Option<String>,
    errors: &mut Vec<ConfigError>,
    failed: &mut Vec<(usize, usize)>,
) {
    let pos = node.pos;
    let span = node.span;
    match &mut node.kind {
        Kind::Str { value, template } => {
            if !value.contains("${") {
                return;
            }
            match expand(value, env) {
                Ok(expanded) => {
                    if expanded.substituted {
                        *template = Some(std::mem::replace(value, expanded.value));
                    } else {
                        *value = expanded.value;
                    }
                }
                Err(err) => {
                    failed.push(pos);
                    let at = dollar_position(value, err.offset, source, span).unwrap_or(pos);
                    errors.push(match err.kind {
                        RefErrorKind::Missing(name) => site.missing_env(at, &name),
                        RefErrorKind::Malformed(message) => site.syntax(at, &message),
                    });
                    // Every other reference of the string is still checked.
                    let mut rest = err.offset + 2;
                    while let Some(next) = reference_starts(value).into_iter().find(|&s| s >= rest)
                    {
                        let Some(tail) = value.get(next..) else { break };
                        match expand(tail, env) {
                            Err(e) if e.offset == 0 => {
                                let at = dollar_position(value, next, source, span).unwrap_or(pos);
                                errors.push(match e.kind {
                                    RefErrorKind::Missing(name) => site.missing_env(at, &name),
                                    RefErrorKind::Malformed(message) => site.syntax(at, &message),
                                });
                            }
                            _ => {}
                        }
                        rest = next + 2;
                    }
                }
            }
        }
        Kind::Seq(items) => items
            .iter_mut()
            .for_each(|item| interpolate_tree(item, source, site, env, errors, failed)),
        Kind::Map(entries) => entries
            .iter_mut()
            .for_each(|(_, value)| interpolate_tree(value, source, site, env, errors, failed)),
        Kind::Null | Kind::Bool(_) | Kind::Int(_) | Kind::UInt(_) | Kind::Float(_) => {}
    }
}

/// Maps the reference at byte `offset` of the (decoded) string `value` to its
/// `$` in the source: it is the n-th reference written with the same
/// `${NAME` prefix in both the value and the scalar's source text. `None`
/// when the source does not show it literally (e.g. written with a `\u0024`
/// escape); the caller then falls back to the scalar's own position.
fn dollar_position(
    value: &str,
    offset: usize,
    source: &str,
    span: Option<(usize, usize)>,
) -> Option<(usize, usize)> {
    let (start, len) = span?;
    let text = source.get(start..start.checked_add(len)?)?;
    let rest = value.get(offset..)?;
    let name_len = rest
        .bytes()
        .skip(2)
        .take_while(|&c| is_name_continue(c))
        .count();
    let prefix = rest.get(..2 + name_len)?;
    let matches_prefix =
        |s: &str, at: usize| s.get(at..).is_some_and(|tail| tail.starts_with(prefix));
    let nth = reference_starts(value)
        .into_iter()
        .take_while(|&at| at < offset)
        .filter(|&at| matches_prefix(value, at))
        .count();
    let in_source = reference_starts(text)
        .into_iter()
        .filter(|&at| matches_prefix(text, at))
        .nth(nth)?;
    Some(line_col(source, start + in_source))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "A" => Some("alpha".into()),
            "EMPTY" => Some(String::new()),
            "TRICKY" => Some("key: value\nnext: ${A} $${B}".into()),
            _ => None,
        }
    }

    fn ok(s: &str) -> String {
        expand(s, &env).unwrap().value
    }

    fn err(s: &str) -> RefError {
        expand(s, &env).unwrap_err()
    }

    #[test]
    fn expands_references_and_escapes() {
        assert_eq!(ok("x ${A} y"), "x alpha y");
        assert_eq!(ok("${A}${A}"), "alphaalpha");
        assert_eq!(ok("$${A}"), "${A}");
        assert_eq!(ok("$$${A}"), "$${A}");
        assert_eq!(ok("cost $5 or $A or $"), "cost $5 or $A or $");
        assert_eq!(ok("${EMPTY}"), "");
        assert!(!expand("$${A}", &env).unwrap().substituted);
        assert!(expand("${A}", &env).unwrap().substituted);
    }

    #[test]
    fn defaults() {
        assert_eq!(ok("${NOPE:-fallback}"), "fallback");
        assert_eq!(ok("${EMPTY:-fallback}"), "fallback");
        assert_eq!(ok("${A:-fallback}"), "alpha");
        assert_eq!(ok("${NOPE:-}"), "");
        assert_eq!(ok("${NOPE:-a:b $c}"), "a:b $c");
    }

    #[test]
    fn substituted_values_are_not_rescanned() {
        assert_eq!(ok("${TRICKY}"), "key: value\nnext: ${A} $${B}");
    }

    #[test]
    fn errors_point_at_the_dollar() {
        assert_eq!(
            err("ab ${NOPE}"),
            RefError {
                offset: 3,
                kind: RefErrorKind::Missing("NOPE".into())
            }
        );
        for bad in [
            "${}",
            "${1A}",
            "${A",
            "${A-x}",
            "${A:-x",
            "${A:-${B}}",
            "${ A}",
        ] {
            let e = err(&format!("xy{bad}"));
            assert_eq!(e.offset, 2, "{bad}");
            assert!(matches!(e.kind, RefErrorKind::Malformed(_)), "{bad}");
        }
    }

    #[test]
    fn maps_positions_through_the_source() {
        // value decoded from a double-quoted scalar on line 2
        let source = "a: 1\nb: \"${A} \\u0024{NOPE} ${NOPE}\"\n";
        let span = Some((8, source.len() - 9));
        let value = "${A} ${NOPE} ${NOPE}";
        // the first ${NOPE} is not written literally in the source: the
        // first literal one is the second in the value
        assert_eq!(dollar_position(value, 5, source, span), Some((2, 23)));
        assert_eq!(dollar_position(value, 13, source, span), None);
        assert_eq!(dollar_position(value, 0, source, span), Some((2, 5)));
    }
}
