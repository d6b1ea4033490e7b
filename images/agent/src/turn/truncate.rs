//! Capping a tool's output before it enters the model's context: the head
//! and the tail are kept around a marker saying how much was cut.

/// `text` cut to at most `max` bytes (plus the marker) by dropping its
/// middle at character boundaries, and whether anything was dropped.
pub fn head_tail(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_string(), false);
    }
    let head_end = text.floor_char_boundary(max - max / 2);
    let tail_start = text.ceil_char_boundary(text.len() - max / 2);
    let dropped = tail_start - head_end;
    let mut out = String::with_capacity(max + 48);
    out.push_str(&text[..head_end]);
    out.push_str(&format!("\n[... {dropped} bytes truncated ...]\n"));
    out.push_str(&text[tail_start..]);
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept() {
        assert_eq!(head_tail("hello", 5), ("hello".into(), false));
        assert_eq!(head_tail("", 0), (String::new(), false));
    }

    #[test]
    fn long_text_keeps_head_and_tail() {
        assert_eq!(
            head_tail("0123456789abcdefghij", 10),
            ("01234\n[... 10 bytes truncated ...]\nfghij".into(), true)
        );
        assert_eq!(
            head_tail("abc", 0),
            ("\n[... 3 bytes truncated ...]\n".into(), true)
        );
    }

    #[test]
    fn never_splits_a_character() {
        let text = "ééééé"; // 10 bytes
        let (out, truncated) = head_tail(text, 5);
        assert!(truncated);
        assert_eq!(out, "é\n[... 6 bytes truncated ...]\né");
    }
}
