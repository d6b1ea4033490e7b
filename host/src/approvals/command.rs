//! A `bash` tool call's command as approvals see it: one simple command,
//! split into argv the way the shell would, or not simple at all. Anything
//! the shell would expand, chain, redirect or substitute makes it not
//! simple, so no rule and no built-in read command can match it: it is
//! asked about (or refused) as a whole.

use std::fmt;

/// Why a command is not one simple command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotSimple(pub String);

impl fmt::Display for NotSimple {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "not one simple command: {}", self.0)
    }
}

impl std::error::Error for NotSimple {}

/// Splits `command` into argv: words separated by blanks, with `'…'`,
/// `"…"` (without `$`, `` ` `` or `\` inside) and `\x` quoting. Refused:
/// the shell's operators and expansions (`;`, `&`, `|`, `<`, `>`, `(`,
/// `)`, `$`, `` ` ``, unquoted globs `*?[` and `{`), newlines and other
/// control characters, `NAME=value` prefixes, and an empty command.
pub fn argv(command: &str) -> Result<Vec<String>, NotSimple> {
    let refuse = |why: &str| Err(NotSimple(why.to_owned()));
    let mut words: Vec<String> = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => {
                if let Some(done) = word.take() {
                    words.push(done);
                }
            }
            '\'' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) if c.is_control() => return refuse("a control character"),
                        Some(c) => w.push(c),
                        None => return refuse("an unterminated quote"),
                    }
                }
            }
            '"' => {
                let w = word.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('$' | '`') => return refuse("an expansion inside double quotes"),
                        Some('\\') => return refuse("a backslash inside double quotes"),
                        Some(c) if c.is_control() => return refuse("a control character"),
                        Some(c) => w.push(c),
                        None => return refuse("an unterminated quote"),
                    }
                }
            }
            '\\' => match chars.next() {
                Some(c) if !c.is_control() => word.get_or_insert_with(String::new).push(c),
                _ => return refuse("a backslash before a line end or control character"),
            },
            ';' | '&' | '|' => return refuse("a command separator or pipe"),
            '<' | '>' => return refuse("a redirection"),
            '(' | ')' => return refuse("a subshell"),
            '$' | '`' => return refuse("an expansion or substitution"),
            '*' | '?' | '[' | '{' => return refuse("a pattern the shell expands"),
            '#' if word.is_none() => return refuse("a comment"),
            c if c.is_control() => return refuse("a line break or control character"),
            c => word.get_or_insert_with(String::new).push(c),
        }
    }
    if let Some(done) = word {
        words.push(done);
    }
    match words.first() {
        None => refuse("an empty command"),
        Some(first) if is_assignment(first) => refuse("a variable assignment before the command"),
        Some(_) => Ok(words),
    }
}

/// `NAME=…` with a shell variable name.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// The program's name, as the shell would look it up (`/usr/bin/git` →
/// `git`).
pub fn program(argv: &[String]) -> Option<&str> {
    argv.first().map(|p| p.rsplit('/').next().unwrap_or(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(command: &str) -> Vec<String> {
        argv(command).unwrap_or_else(|e| panic!("{command:?}: {e}"))
    }

    #[test]
    fn simple_commands_split_as_the_shell_would() {
        assert_eq!(words("git status"), ["git", "status"]);
        assert_eq!(words("  ls   -la  src "), ["ls", "-la", "src"]);
        assert_eq!(
            words("cat 'a file' \"b file\""),
            ["cat", "a file", "b file"]
        );
        assert_eq!(words("grep -n fo\\ o x.rs"), ["grep", "-n", "fo o", "x.rs"]);
        assert_eq!(words("cat it''s"), ["cat", "its"]);
        assert_eq!(words("echo ''"), ["echo", ""]);
        assert_eq!(words("ls a#b"), ["ls", "a#b"]);
    }

    #[test]
    fn chains_expansions_and_redirections_are_not_simple() {
        for command in [
            "ls; curl evil.example",
            "git status && rm -rf /workspace",
            "cat x || true",
            "cat x | sh",
            "cat $(echo /etc/passwd)",
            "cat `id`",
            "echo \"$HOME\"",
            "echo \"`id`\"",
            "cat x > y",
            "cat < /etc/passwd",
            "sleep 1 &",
            "(ls)",
            "ls\nrm -rf /",
            "ls\rrm",
            "cat *",
            "ls ?",
            "ls [ab]",
            "echo {a,b}",
            "LD_PRELOAD=/tmp/x.so ls",
            "PATH=/tmp ls",
            "# only a comment",
            "ls #rest is a comment",
            "",
            "   ",
            "cat 'unterminated",
            "cat \"unterminated",
            "echo \"a\\\"b\"",
            "ls \\",
            "ls \u{1b}[31m",
        ] {
            assert!(argv(command).is_err(), "{command:?} should not be simple");
        }
    }

    #[test]
    fn the_program_is_the_last_path_segment() {
        assert_eq!(program(&words("/usr/bin/git log")), Some("git"));
        assert_eq!(program(&words("ls")), Some("ls"));
        assert_eq!(program(&[]), None);
    }
}
