//! Query strings for SQLite built from user text, so no user input is ever
//! parsed as FTS5 query syntax or as a LIKE wildcard.

/// What every index term of a workspace starts with: the hex of its name and
/// an `x`, which is not a hex digit, so no two workspaces share a prefix. A
/// term stays one token for the `ascii` tokenizer, and each workspace gets
/// its own posting lists: a query reads only its workspace's rows and a term
/// is common or rare by that workspace's own count.
pub fn term_prefix(workspace: &str) -> String {
    format!("{}x", hex::encode(workspace.as_bytes()))
}

/// `term` as stored in the index for `workspace`.
pub fn index_term(workspace: &str, term: &str) -> String {
    format!("{}{term}", term_prefix(workspace))
}

/// What every second-list term ([`super::segment::variants`]) of a
/// workspace starts with: as [`term_prefix`], with `y` for `x`, so the two
/// lists never share a term.
pub fn variant_prefix(workspace: &str) -> String {
    format!("{}y", hex::encode(workspace.as_bytes()))
}

/// `term` as an FTS5 string: quoted, inner quotes doubled.
pub fn quoted(term: &str) -> String {
    format!("\"{}\"", term.replace('"', "\"\""))
}

/// `"<prefix>t1" OR "<prefix>t2" …`: rows of the workspace that contain any
/// of the terms. `None` when there are no terms.
#[cfg(test)]
pub fn match_expression(workspace: &str, terms: &[String]) -> Option<String> {
    prefixed_expression(&term_prefix(workspace), terms)
}

/// [`match_expression`] with another prefix.
pub fn prefixed_expression(prefix: &str, terms: &[String]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    let any: Vec<String> = terms
        .iter()
        .map(|t| quoted(&format!("{prefix}{t}")))
        .collect();
    Some(any.join(" OR "))
}

/// A `LIKE … ESCAPE '\'` pattern matching `text` anywhere, literally.
pub fn like_pattern(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('%');
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('%');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expressions_quote_every_term() {
        let terms = vec!["座位".to_string(), "偏好".to_string()];
        assert_eq!(
            match_expression("main", &terms).as_deref(),
            Some(r#""6d61696ex座位" OR "6d61696ex偏好""#)
        );
        assert_eq!(match_expression("main", &[]), None);
        assert_eq!(
            match_expression("x", &[r#"a"b"#.to_string()]).as_deref(),
            Some(r#""78xa""b""#)
        );
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_pattern(r"50%_a\b"), r"%50\%\_a\\b%");
    }
}
