//! Splits a Markdown reply into parts of at most a platform's size, at the
//! best boundary available (paragraph, line, sentence, word, character),
//! closing a code fence at the end of a part and reopening it at the start
//! of the next so every part renders on its own.

/// Room kept for a fence closed and reopened across parts.
const FENCE_ROOM: usize = 8;

pub fn split(text: &str, max_bytes: usize) -> Vec<String> {
    let max = max_bytes.max(FENCE_ROOM * 4);
    if text.len() <= max {
        return vec![text.to_string()];
    }
    let mut parts = Vec::new();
    let mut rest = text;
    let mut reopen: Option<String> = None;
    while !rest.is_empty() {
        let prefix = reopen.take().unwrap_or_default();
        let budget = max - prefix.len() - FENCE_ROOM;
        if prefix.len() + rest.len() <= max {
            parts.push(format!("{prefix}{rest}"));
            break;
        }
        let cut = best_cut(rest, budget);
        let (head, tail) = rest.split_at(cut);
        let mut part = format!("{prefix}{}", head.trim_end());
        if let Some(fence) = open_fence(&part) {
            part.push_str("\n```");
            reopen = Some(format!("{fence}\n"));
        }
        parts.push(part);
        rest = tail.trim_start_matches(['\n', ' ']);
    }
    parts.retain(|p| !p.trim().is_empty());
    parts
}

/// The byte index to cut `text` at, at most `budget`.
fn best_cut(text: &str, budget: usize) -> usize {
    let limit = text.floor_char_boundary(budget);
    let window = &text[..limit];
    // Not too early: a cut in the first half wastes a whole part.
    let floor = limit / 2;
    for sep in ["\n\n", "\n", ". ", "。", " "] {
        if let Some(at) = window.rfind(sep)
            && at >= floor
        {
            return at + sep.len();
        }
    }
    limit.max(1)
}

/// The opening line of a fence left open in `text` (e.g. "```rust"), if any.
fn open_fence(text: &str) -> Option<String> {
    let mut open: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("```") {
            open = match open {
                Some(_) => None,
                None => Some(trimmed.to_string()),
            };
        }
    }
    open
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_one_part() {
        assert_eq!(split("hello", 100), vec!["hello".to_string()]);
    }

    #[test]
    fn parts_fit_keep_every_word_and_prefer_paragraphs() {
        let paragraph = "word ".repeat(30);
        let text = format!("{paragraph}\n\n{paragraph}\n\n{paragraph}");
        let parts = split(&text, 200);
        assert!(parts.iter().all(|p| p.len() <= 200), "{parts:?}");
        let words: usize = parts.iter().map(|p| p.split_whitespace().count()).sum();
        assert_eq!(words, 90);
        assert!(parts.len() >= 3);
    }

    #[test]
    fn a_code_block_across_parts_is_closed_and_reopened() {
        let code = (0..40)
            .map(|i| format!("let x{i} = {i};"))
            .collect::<Vec<_>>()
            .join("\n");
        let text = format!("Here:\n```rust\n{code}\n```\nDone.");
        let parts = split(&text, 300);
        assert!(parts.len() > 1);
        for part in &parts {
            assert!(part.len() <= 300, "{part}");
            assert_eq!(part.matches("```").count() % 2, 0, "unbalanced: {part}");
        }
        assert!(parts[1].starts_with("```rust\n"));
    }

    #[test]
    fn text_without_spaces_is_cut_on_char_boundaries() {
        let text = "汉字".repeat(200);
        let parts = split(&text, 100);
        assert!(parts.iter().all(|p| p.len() <= 100));
        assert_eq!(parts.concat(), text);
    }
}
