//! Bounded capture of one output stream: keeps the head and the tail, counts
//! what falls in between, never buffers more than its limit.

use std::collections::VecDeque;

#[derive(Debug)]
pub struct Capture {
    head: Vec<u8>,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    /// A capture keeping at most `limit` bytes (half head, half tail).
    pub fn new(limit: usize) -> Self {
        let tail_cap = limit / 2;
        let head_cap = limit - tail_cap;
        Capture {
            head: Vec::with_capacity(head_cap.min(64 * 1024)),
            head_cap,
            tail: VecDeque::new(),
            tail_cap,
            total: 0,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        self.total += data.len() as u64;
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let n = room.min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if self.tail_cap == 0 || data.is_empty() {
            return;
        }
        if data.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
            return;
        }
        let excess = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..excess);
        self.tail.extend(data);
    }

    /// The captured text (lossy UTF-8) and whether bytes were dropped.
    pub fn finish(self) -> (String, bool) {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let dropped = self.total - kept;
        let mut head = self.head;
        let tail = Vec::from(self.tail);
        if dropped == 0 {
            head.extend_from_slice(&tail);
            return (String::from_utf8_lossy(&head).into_owned(), false);
        }
        let mut text = String::from_utf8_lossy(&head).into_owned();
        text.push_str(&format!("\n[... {dropped} bytes truncated ...]\n"));
        text.push_str(&String::from_utf8_lossy(&tail));
        (text, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn capture(limit: usize, chunks: &[&[u8]]) -> (String, bool) {
        let mut c = Capture::new(limit);
        for chunk in chunks {
            c.push(chunk);
        }
        c.finish()
    }

    #[test]
    fn under_the_limit_keeps_everything() {
        assert_eq!(
            capture(10, &[b"hello", b" you"]),
            ("hello you".into(), false)
        );
        assert_eq!(capture(10, &[b"0123456789"]), ("0123456789".into(), false));
        assert_eq!(capture(0, &[]), (String::new(), false));
    }

    #[test]
    fn over_the_limit_keeps_head_and_tail() {
        let (text, truncated) = capture(10, &[b"0123456789", b"abcdefghij"]);
        assert!(truncated);
        assert_eq!(text, "01234\n[... 10 bytes truncated ...]\nfghij");
        // Small chunks through the tail ring.
        let chunks: Vec<&[u8]> = b"0123456789abcdefghij".chunks(3).collect();
        assert_eq!(
            capture(10, &chunks).0,
            "01234\n[... 10 bytes truncated ...]\nfghij"
        );
        assert_eq!(capture(0, &[b"abc"]).0, "\n[... 3 bytes truncated ...]\n");
        assert_eq!(capture(1, &[b"abc"]).0, "a\n[... 2 bytes truncated ...]\n");
    }

    #[test]
    fn non_utf8_is_lossy() {
        assert_eq!(capture(10, &[b"a\xffb"]).0, "a\u{FFFD}b");
        // A character split by the boundary is not split when nothing is dropped.
        let crab = "\u{1F980}".as_bytes();
        assert_eq!(capture(4, &[&crab[..1], &crab[1..]]).0, "\u{1F980}");
    }
}
