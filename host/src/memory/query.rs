//! Query strings for SQLite built from user text, so no user input is ever
//! parsed as FTS5 query syntax or as a LIKE wildcard.

/// The FTS5 token that stands for a workspace: `w` + hex of its name, a single
/// token for the `ascii` tokenizer that no other workspace name can produce.
pub fn workspace_token(workspace: &str) -> String {
    format!("w{}", hex::encode(workspace.as_bytes()))
}

/// `term` as an FTS5 string: quoted, inner quotes doubled.
pub fn quoted(term: &str) -> String {
    format!("\"{}\"", term.replace('"', "\"\""))
}

/// `space : "w…" AND terms : ("t1" OR "t2" …)`: rows of the workspace that
/// contain any of the terms. `None` when there are no terms.
pub fn match_expression(workspace: &str, terms: &[String]) -> Option<String> {
    if terms.is_empty() {
        return None;
    }
    let any: Vec<String> = terms.iter().map(|t| quoted(t)).collect();
    Some(format!(
        "space : {} AND terms : ({})",
        quoted(&workspace_token(workspace)),
        any.join(" OR ")
    ))
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
            Some(r#"space : "w6d61696e" AND terms : ("座位" OR "偏好")"#)
        );
        assert_eq!(match_expression("main", &[]), None);
        assert_eq!(
            match_expression("x", &[r#"a"b"#.to_string()]).as_deref(),
            Some(r#"space : "w78" AND terms : ("a""b")"#)
        );
    }

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_pattern(r"50%_a\b"), r"%50\%\_a\\b%");
    }
}
