//! Server-sent events: an incremental parser for upstream streams and the
//! formatting helpers the server uses to write OpenAI streams.

/// The line that ends an OpenAI stream.
pub const OPENAI_SSE_DONE: &str = "data: [DONE]\n\n";

/// One parsed event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

/// A line longer than this is an error (no sane upstream sends one).
const MAX_LINE: usize = 16 * 1024 * 1024;

/// Incremental parser: feed it bytes as they arrive; events split across
/// chunks (even inside a UTF-8 character) are reassembled.
#[derive(Debug, Default)]
pub(crate) struct SseParser {
    buf: Vec<u8>,
    event: Option<String>,
    data: String,
    has_data: bool,
}

impl SseParser {
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, super::Malformed> {
        self.buf.extend_from_slice(bytes);
        let mut events = Vec::new();
        let mut start = 0;
        while let Some(pos) = self.buf[start..].iter().position(|b| *b == b'\n') {
            let end = start + pos;
            let mut line = &self.buf[start..end];
            if let [rest @ .., b'\r'] = line {
                line = rest;
            }
            let line = String::from_utf8_lossy(line).into_owned();
            start = end + 1;
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.buf.drain(..start);
        if self.buf.len() > MAX_LINE {
            return Err(super::Malformed::from("an event line is too long"));
        }
        Ok(events)
    }

    /// At end of input: the last event, if it was not followed by a blank
    /// line.
    pub fn finish(&mut self) -> Option<SseEvent> {
        if !self.buf.is_empty() {
            let rest = std::mem::take(&mut self.buf);
            let line = String::from_utf8_lossy(&rest).into_owned();
            let line = line.trim_end_matches('\r').to_owned();
            if let Some(event) = self.line(&line) {
                return Some(event);
            }
        }
        self.dispatch()
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None; // comment / keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {} // id, retry: not needed
        }
        None
    }

    fn dispatch(&mut self) -> Option<SseEvent> {
        let event = self.event.take();
        if !self.has_data {
            return None;
        }
        self.has_data = false;
        Some(SseEvent {
            event,
            data: std::mem::take(&mut self.data),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere() {
        let text = "event: message_start\ndata: {\"a\":\"é\"}\n\n: ping\r\ndata: x\r\ndata: y\r\n\r\ndata: [DONE]\n\n";
        let bytes = text.as_bytes();
        for split in 0..bytes.len() {
            let mut p = SseParser::default();
            let mut events = p.push(&bytes[..split]).unwrap();
            events.extend(p.push(&bytes[split..]).unwrap());
            assert!(p.finish().is_none());
            assert_eq!(
                events,
                vec![
                    SseEvent {
                        event: Some("message_start".into()),
                        data: "{\"a\":\"é\"}".into()
                    },
                    SseEvent {
                        event: None,
                        data: "x\ny".into()
                    },
                    SseEvent {
                        event: None,
                        data: "[DONE]".into()
                    },
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn last_event_without_blank_line() {
        let mut p = SseParser::default();
        assert!(p.push(b"data: tail").unwrap().is_empty());
        assert_eq!(p.finish().map(|e| e.data), Some("tail".to_owned()));
    }
}
