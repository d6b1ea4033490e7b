//! `glob` and `grep`: walks of the workspace (symlinks not followed, `.git`
//! skipped) that stop at the call's deadline and cap what they return.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use globset::{GlobBuilder, GlobMatcher};
use regex::RegexBuilder;
use serde::Deserialize;
use walkdir::{DirEntry, WalkDir};

use super::files::{LINES_PER_CHECK, is_binary, next_line};
use super::{ToolContext, ToolOutput};

const MAX_GLOB_RESULTS: usize = 1000;
const MAX_GREP_MATCHES: usize = 200;
/// Longest matching line `grep` shows whole.
const MAX_MATCH_CHARS: usize = 300;
/// Files larger than this are not searched.
const MAX_GREP_FILE_BYTES: u64 = 32 * 1024 * 1024;
/// Compiled size limit of a `grep` regex.
const REGEX_SIZE_LIMIT: usize = 4 * 1024 * 1024;

#[derive(Debug, Deserialize)]
pub struct GlobArgs {
    pattern: String,
    path: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct GrepArgs {
    pattern: String,
    path: Option<String>,
    glob: Option<String>,
    #[serde(default)]
    ignore_case: bool,
}

fn base(path: Option<&str>, ctx: &ToolContext) -> Result<PathBuf, String> {
    match path {
        Some(path) => ctx.resolve(path),
        None => Ok(ctx.workspace.to_path_buf()),
    }
}

fn walk(root: &Path) -> impl Iterator<Item = DirEntry> {
    WalkDir::new(root)
        .follow_links(false)
        .sort_by_file_name()
        .into_iter()
        .filter_entry(|e| e.depth() == 0 || e.file_name() != ".git")
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
}

fn matcher(pattern: &str, literal_separator: bool) -> Result<GlobMatcher, String> {
    GlobBuilder::new(pattern)
        .literal_separator(literal_separator)
        .build()
        .map(|glob| glob.compile_matcher())
        .map_err(|e| format!("invalid glob {pattern:?}: {e}"))
}

pub fn glob(args: GlobArgs, ctx: &ToolContext) -> ToolOutput {
    match find(&args, ctx) {
        Ok(text) => ToolOutput::ok(text),
        Err(e) => ToolOutput::error(e),
    }
}

fn find(args: &GlobArgs, ctx: &ToolContext) -> Result<String, String> {
    let root = base(args.path.as_deref(), ctx)?;
    if !root.is_dir() {
        return Err(format!("{} is not a directory", ctx.show(&root)));
    }
    let pattern = args.pattern.strip_prefix("./").unwrap_or(&args.pattern);
    let absolute = pattern.starts_with('/');
    let matcher = matcher(pattern, true)?;
    let mut found = Vec::new();
    let mut more = false;
    for entry in walk(&root) {
        if let Some(why) = ctx.expired() {
            return Err(why);
        }
        let candidate = if absolute {
            entry.path()
        } else {
            entry.path().strip_prefix(&root).unwrap_or(entry.path())
        };
        if matcher.is_match(candidate) {
            if found.len() == MAX_GLOB_RESULTS {
                more = true;
                break;
            }
            found.push(ctx.show(entry.path()));
        }
    }
    if found.is_empty() {
        return Ok(format!("no files match {:?}", args.pattern));
    }
    let mut text = found.join("\n");
    text.push('\n');
    if more {
        text.push_str(&format!(
            "[stopped after {MAX_GLOB_RESULTS} files; use a narrower pattern]\n"
        ));
    }
    Ok(text)
}

pub fn grep(args: GrepArgs, ctx: &ToolContext) -> ToolOutput {
    match search(&args, ctx) {
        Ok(text) => ToolOutput::ok(text),
        Err(e) => ToolOutput::error(e),
    }
}

fn search(args: &GrepArgs, ctx: &ToolContext) -> Result<String, String> {
    let regex = RegexBuilder::new(&args.pattern)
        .case_insensitive(args.ignore_case)
        .size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid regular expression: {e}"))?;
    let filter = args
        .glob
        .as_deref()
        .map(|g| matcher(g, false))
        .transpose()?;
    let root = base(args.path.as_deref(), ctx)?;
    let meta = root
        .metadata()
        .map_err(|e| format!("{}: {e}", ctx.show(&root)))?;
    let files: Box<dyn Iterator<Item = PathBuf>> = if meta.is_file() {
        Box::new(std::iter::once(root.clone()))
    } else {
        Box::new(walk(&root).map(DirEntry::into_path))
    };
    let mut matches = Vec::new();
    for file in files {
        if let Some(why) = ctx.expired() {
            return Err(why);
        }
        if let Some(filter) = &filter {
            let relative = file.strip_prefix(&root).unwrap_or(&file);
            let name = file.file_name().map(Path::new).unwrap_or(relative);
            if !filter.is_match(name) && !filter.is_match(relative) {
                continue;
            }
        }
        if search_file(&file, &regex, ctx, &mut matches)? {
            let mut text = matches.join("\n");
            text.push_str(&format!(
                "\n[stopped after {MAX_GREP_MATCHES} matches; use a narrower pattern, path or glob]\n"
            ));
            return Ok(text);
        }
    }
    if matches.is_empty() {
        return Ok(format!("no matches for {:?}", args.pattern));
    }
    let mut text = matches.join("\n");
    text.push('\n');
    Ok(text)
}

/// Appends the matches in `path`; true once the cap is reached. Binary,
/// huge and unreadable files are skipped.
fn search_file(
    path: &Path,
    regex: &regex::Regex,
    ctx: &ToolContext,
    matches: &mut Vec<String>,
) -> Result<bool, String> {
    // Checked before opening: opening a FIFO would block.
    let searchable = path
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() <= MAX_GREP_FILE_BYTES);
    if !searchable {
        return Ok(false);
    }
    let Ok(file) = File::open(path) else {
        return Ok(false);
    };
    let mut reader = BufReader::new(file);
    match reader.fill_buf() {
        Ok(head) if !is_binary(head) => {}
        _ => return Ok(false),
    }
    let shown = ctx.show(path);
    let mut line = Vec::new();
    let mut number = 0usize;
    while let Ok(true) = next_line(&mut reader, &mut line) {
        number += 1;
        if number.is_multiple_of(LINES_PER_CHECK)
            && let Some(why) = ctx.expired()
        {
            return Err(why);
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\r');
        if !regex.is_match(text) {
            continue;
        }
        let text = match text.char_indices().nth(MAX_MATCH_CHARS) {
            Some((cut, _)) => format!("{} [... line cut]", &text[..cut]),
            None => text.to_string(),
        };
        matches.push(format!("{shown}:{number}:{text}"));
        if matches.len() >= MAX_GREP_MATCHES {
            return Ok(true);
        }
    }
    Ok(false)
}
