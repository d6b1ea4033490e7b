//! `read`, `write` and `edit`. Only regular files are opened (a FIFO or a
//! device would block or never end).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::Deserialize;

use super::{ToolContext, ToolOutput};

const DEFAULT_READ_LINES: usize = 2000;
/// Longest line `read` shows whole.
const MAX_LINE_CHARS: usize = 2000;
/// Largest file `edit` rewrites.
const MAX_EDIT_BYTES: u64 = 16 * 1024 * 1024;
/// A NUL byte in this much of a file's start makes it binary.
pub const BINARY_SNIFF_BYTES: usize = 8192;
/// Bytes of one line kept in memory (the rest of a longer line is skipped).
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most text `read` returns at once.
const MAX_READ_BYTES: usize = 1024 * 1024;
/// Lines between two looks at the deadline.
pub const LINES_PER_CHECK: usize = 4096;

#[derive(Debug, Deserialize)]
pub struct ReadArgs {
    path: String,
    offset: Option<usize>,
    limit: Option<usize>,
}

#[derive(Debug, Deserialize)]
pub struct WriteArgs {
    path: String,
    content: String,
}

#[derive(Debug, Deserialize)]
pub struct EditArgs {
    path: String,
    old_string: String,
    new_string: String,
    #[serde(default)]
    replace_all: bool,
}

/// Opens `path` if it is a regular file.
fn open_regular(path: &Path, shown: &str) -> Result<File, String> {
    let meta = path.metadata().map_err(|e| format!("{shown}: {e}"))?;
    if meta.is_dir() {
        return Err(format!("{shown} is a directory"));
    }
    if !meta.is_file() {
        return Err(format!("{shown} is not a regular file"));
    }
    File::open(path).map_err(|e| format!("{shown}: {e}"))
}

pub fn is_binary(head: &[u8]) -> bool {
    head[..head.len().min(BINARY_SNIFF_BYTES)].contains(&0)
}

/// Reads one line into `line` (cleared first), keeping at most
/// [`MAX_LINE_BYTES`] of it; false at the end of the input.
pub fn next_line<R: BufRead>(reader: &mut R, line: &mut Vec<u8>) -> std::io::Result<bool> {
    line.clear();
    let mut any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(any);
        }
        any = true;
        let (part, used, done) = match available.iter().position(|&b| b == b'\n') {
            Some(i) => (&available[..i], i + 1, true),
            None => (available, available.len(), false),
        };
        let room = MAX_LINE_BYTES.saturating_sub(line.len());
        line.extend_from_slice(&part[..room.min(part.len())]);
        reader.consume(used);
        if done {
            return Ok(true);
        }
    }
}

pub fn read(args: ReadArgs, ctx: &ToolContext) -> ToolOutput {
    match read_lines(&args, ctx) {
        Ok(text) => ToolOutput::ok(text),
        Err(e) => ToolOutput::error(e),
    }
}

fn read_lines(args: &ReadArgs, ctx: &ToolContext) -> Result<String, String> {
    let path = ctx.resolve(&args.path)?;
    let shown = ctx.show(&path);
    let mut reader = BufReader::new(open_regular(&path, &shown)?);
    let head = reader.fill_buf().map_err(|e| format!("{shown}: {e}"))?;
    if is_binary(head) {
        return Err(format!("{shown} is a binary file"));
    }
    let first = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_READ_LINES).max(1);
    let last = first.saturating_add(limit - 1);
    let mut out = String::new();
    let mut number = 0usize;
    let mut line = Vec::new();
    let mut last = last;
    while next_line(&mut reader, &mut line).map_err(|e| format!("{shown}: {e}"))? {
        number += 1;
        if number.is_multiple_of(LINES_PER_CHECK)
            && let Some(why) = ctx.expired()
        {
            return Err(why);
        }
        // Past the range, lines are only counted, to tell how far the file goes.
        if number < first || number > last {
            continue;
        }
        if out.len() >= MAX_READ_BYTES {
            last = number - 1;
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches('\r');
        let shown_line = match text.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => format!("{} [... line cut]", &text[..cut]),
            None => text.to_string(),
        };
        out.push_str(&format!("{number}\t{shown_line}\n"));
    }
    if number == 0 {
        return Ok(format!("({shown} is empty)"));
    }
    if first > number {
        return Err(format!(
            "offset {first} is past the end of {shown}, which has {number} lines"
        ));
    }
    if number > last {
        out.push_str(&format!(
            "[... lines {first}-{last} of {number} shown; read on with offset {}]\n",
            last + 1
        ));
    }
    Ok(out)
}

pub fn write(args: WriteArgs, ctx: &ToolContext) -> ToolOutput {
    let path = match ctx.resolve(&args.path) {
        Ok(path) => path,
        Err(e) => return ToolOutput::error(e),
    };
    let shown = ctx.show(&path);
    if path.metadata().is_ok_and(|meta| !meta.is_file()) {
        return ToolOutput::error(format!("{shown} exists and is not a regular file"));
    }
    if let Some(parent) = path.parent()
        && let Err(e) = std::fs::create_dir_all(parent)
    {
        return ToolOutput::error(format!("creating the directory of {shown}: {e}"));
    }
    match std::fs::write(&path, args.content.as_bytes()) {
        Ok(()) => ToolOutput::ok(format!("wrote {} bytes to {shown}", args.content.len())),
        Err(e) => ToolOutput::error(format!("{shown}: {e}")),
    }
}

pub fn edit(args: EditArgs, ctx: &ToolContext) -> ToolOutput {
    match edit_file(&args, ctx) {
        Ok(text) => ToolOutput::ok(text),
        Err(e) => ToolOutput::error(e),
    }
}

fn edit_file(args: &EditArgs, ctx: &ToolContext) -> Result<String, String> {
    let path = ctx.resolve(&args.path)?;
    let shown = ctx.show(&path);
    if args.old_string.is_empty() {
        return Err("old_string is empty; use write to create a file".into());
    }
    if args.old_string == args.new_string {
        return Err("old_string and new_string are the same; nothing to change".into());
    }
    let file = open_regular(&path, &shown)?;
    let mut bytes = Vec::new();
    file.take(MAX_EDIT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{shown}: {e}"))?;
    if bytes.len() as u64 > MAX_EDIT_BYTES {
        return Err(format!(
            "{shown} is larger than {} MiB; edit it with bash instead",
            MAX_EDIT_BYTES / (1024 * 1024)
        ));
    }
    let text = String::from_utf8(bytes).map_err(|_| format!("{shown} is not UTF-8 text"))?;
    let count = text.matches(args.old_string.as_str()).count();
    let updated = match count {
        0 => return Err(format!("old_string was not found in {shown}")),
        1 => text.replacen(&args.old_string, &args.new_string, 1),
        _ if args.replace_all => text.replace(&args.old_string, &args.new_string),
        n => {
            return Err(format!(
                "old_string occurs {n} times in {shown}; include more surrounding text to \
                 make it unique, or set replace_all to replace every occurrence"
            ));
        }
    };
    std::fs::write(&path, updated).map_err(|e| format!("{shown}: {e}"))?;
    Ok(format!(
        "replaced {count} occurrence{} in {shown}",
        if count == 1 { "" } else { "s" }
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_lines_are_capped() {
        let long = "x".repeat(MAX_LINE_BYTES * 3);
        let text = format!("a\r\n{long}\nlast");
        let mut reader = BufReader::with_capacity(1000, text.as_bytes());
        let mut line = Vec::new();
        assert!(next_line(&mut reader, &mut line).unwrap());
        assert_eq!(line, b"a\r");
        assert!(next_line(&mut reader, &mut line).unwrap());
        assert_eq!(line.len(), MAX_LINE_BYTES);
        assert!(next_line(&mut reader, &mut line).unwrap());
        assert_eq!(line, b"last");
        assert!(!next_line(&mut reader, &mut line).unwrap());
        assert!(line.is_empty());
    }
}
