//! Server-sent events, as the gateway streams them: `data:` lines, events
//! separated by blank lines. Only the data of each event matters here.

/// Incremental parser: feed it the body as it arrives.
#[derive(Debug)]
pub struct SseParser {
    line: Vec<u8>,
    data: Option<String>,
    max_line: usize,
}

impl SseParser {
    /// A parser refusing lines longer than `max_line` bytes.
    pub fn new(max_line: usize) -> Self {
        SseParser {
            line: Vec::new(),
            data: None,
            max_line,
        }
    }

    /// The data of every event completed by `bytes`.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<String>, String> {
        let mut events = Vec::new();
        for chunk in bytes.split_inclusive(|&b| b == b'\n') {
            let (part, complete) = match chunk.strip_suffix(b"\n") {
                Some(part) => (part, true),
                None => (chunk, false),
            };
            if self.line.len() + part.len() > self.max_line {
                return Err(format!(
                    "an event-stream line is longer than {} bytes",
                    self.max_line
                ));
            }
            self.line.extend_from_slice(part);
            if complete {
                let line = std::mem::take(&mut self.line);
                if let Some(data) = self.line_done(&line) {
                    events.push(data);
                }
            }
        }
        Ok(events)
    }

    /// The data of an event the stream ended without a blank line after.
    pub fn finish(&mut self) -> Option<String> {
        let line = std::mem::take(&mut self.line);
        let from_line = self.line_done(&line);
        from_line.or_else(|| self.data.take())
    }

    fn line_done(&mut self, line: &[u8]) -> Option<String> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return self.data.take();
        }
        let (field, value) = match line.iter().position(|&b| b == b':') {
            Some(i) => (&line[..i], &line[i + 1..]),
            None => (line, &b""[..]),
        };
        if field == b"data" {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            let value = String::from_utf8_lossy(value);
            match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(&value);
                }
                None => self.data = Some(value.into_owned()),
            }
        }
        // Comments (`:`), `event:`, `id:` and `retry:` carry nothing needed here.
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere() {
        let stream = b": keep-alive\n\ndata: {\"a\":1}\n\ndata: one\r\ndata:two\r\n\r\nevent: x\ndata: [DONE]\n\n";
        let expected = vec!["{\"a\":1}", "one\ntwo", "[DONE]"];
        for size in [1, 2, 7, stream.len()] {
            let mut parser = SseParser::new(1024);
            let mut got = Vec::new();
            for chunk in stream.chunks(size) {
                got.extend(parser.feed(chunk).unwrap());
            }
            assert_eq!(parser.finish(), None);
            assert_eq!(got, expected, "chunk size {size}");
        }
        let mut parser = SseParser::new(1024);
        assert!(parser.feed(b"data: tail").unwrap().is_empty());
        assert_eq!(parser.finish().as_deref(), Some("tail"));
    }

    #[test]
    fn long_lines_are_refused() {
        let mut parser = SseParser::new(8);
        assert!(parser.feed(b"data: 12").is_ok());
        assert!(parser.feed(b"345").is_err());
    }
}
