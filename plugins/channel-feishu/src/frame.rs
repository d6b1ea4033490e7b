//! The binary frames of Feishu's long connection: protobuf message `Frame` of
//! package `pbbp2` (proto2), as the official SDK defines it
//! (larksuite/oapi-sdk-python, `lark_oapi/ws/pb/pbbp2_pb2.py`, the compiled
//! `pbbp2.proto`):
//!
//! ```proto
//! message Header { required string key = 1; required string value = 2; }
//! message Frame {
//!   required uint64 SeqID = 1;   required uint64 LogID = 2;
//!   required int32 service = 3;  required int32 method = 4;
//!   repeated Header headers = 5;
//!   optional string payload_encoding = 6; optional string payload_type = 7;
//!   optional bytes payload = 8;           optional string LogIDNew = 9;
//! }
//! ```
//!
//! A small hand-written codec: proto2 `required` fields are always written
//! (even when zero), optional ones only when present, unknown fields are
//! skipped when reading.

/// `method` of control frames (ping, pong) — `FrameType.CONTROL` in
/// `lark_oapi/ws/enum.py`.
pub const METHOD_CONTROL: i32 = 0;
/// `method` of data frames (events, card callbacks) — `FrameType.DATA`.
pub const METHOD_DATA: i32 = 1;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    pub key: String,
    pub value: String,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frame {
    pub seq_id: u64,
    pub log_id: u64,
    pub service: i32,
    pub method: i32,
    pub headers: Vec<Header>,
    pub payload_encoding: Option<String>,
    pub payload_type: Option<String>,
    pub payload: Option<Vec<u8>>,
    pub log_id_new: Option<String>,
}

impl Frame {
    pub fn header(&self, key: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|h| h.key == key)
            .map(|h| h.value.as_str())
    }

    /// Sets a header, replacing one of the same key.
    pub fn set_header(&mut self, key: &str, value: &str) {
        match self.headers.iter_mut().find(|h| h.key == key) {
            Some(h) => h.value = value.into(),
            None => self.headers.push(Header {
                key: key.into(),
                value: value.into(),
            }),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.payload.as_ref().map_or(0, Vec::len));
        put_varint_field(&mut out, 1, self.seq_id);
        put_varint_field(&mut out, 2, self.log_id);
        // int32 is sign-extended to 64 bits on the wire.
        put_varint_field(&mut out, 3, i64::from(self.service) as u64);
        put_varint_field(&mut out, 4, i64::from(self.method) as u64);
        for h in &self.headers {
            let mut inner = Vec::with_capacity(h.key.len() + h.value.len() + 4);
            put_bytes_field(&mut inner, 1, h.key.as_bytes());
            put_bytes_field(&mut inner, 2, h.value.as_bytes());
            put_bytes_field(&mut out, 5, &inner);
        }
        if let Some(v) = &self.payload_encoding {
            put_bytes_field(&mut out, 6, v.as_bytes());
        }
        if let Some(v) = &self.payload_type {
            put_bytes_field(&mut out, 7, v.as_bytes());
        }
        if let Some(v) = &self.payload {
            put_bytes_field(&mut out, 8, v);
        }
        if let Some(v) = &self.log_id_new {
            put_bytes_field(&mut out, 9, v.as_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<Frame, String> {
        let mut frame = Frame::default();
        let mut reader = Reader { bytes, pos: 0 };
        let mut seen = [false; 4];
        while !reader.done() {
            let (field, wire) = reader.key()?;
            match (field, wire) {
                (1, 0) => frame.seq_id = reader.varint()?,
                (2, 0) => frame.log_id = reader.varint()?,
                (3, 0) => frame.service = reader.varint()? as i32,
                (4, 0) => frame.method = reader.varint()? as i32,
                (5, 2) => frame.headers.push(decode_header(reader.bytes()?)?),
                (6, 2) => frame.payload_encoding = Some(reader.string()?),
                (7, 2) => frame.payload_type = Some(reader.string()?),
                (8, 2) => frame.payload = Some(reader.bytes()?.to_vec()),
                (9, 2) => frame.log_id_new = Some(reader.string()?),
                (_, wire) => reader.skip(wire)?,
            }
            if (1..=4).contains(&field) {
                seen[field as usize - 1] = true;
            }
        }
        if let Some(missing) = seen.iter().position(|s| !s) {
            return Err(format!(
                "frame lacks the required field {}",
                ["SeqID", "LogID", "service", "method"][missing]
            ));
        }
        Ok(frame)
    }
}

/// The ping the client sends (`_new_ping_frame` in `lark_oapi/ws/client.py`):
/// a control frame with header `type: ping` for the connection's service.
pub fn ping(service: i32) -> Frame {
    Frame {
        seq_id: 0,
        log_id: 0,
        service,
        method: METHOD_CONTROL,
        headers: vec![Header {
            key: "type".into(),
            value: "ping".into(),
        }],
        ..Frame::default()
    }
}

/// The answer to a data frame (`_handle_data_frame` in
/// `lark_oapi/ws/client.py`): the same frame, with header `biz_rt` (the
/// processing time in ms) added and the payload replaced by the JSON of the
/// SDK's `Response` (`{"code": 200, "headers": null, "data": null}` there; the
/// server reads `code`), carrying the handler's answer `data` (a card
/// callback's toast) base64 in `data`, as the SDK's client sends it.
pub fn response(mut frame: Frame, code: u16, biz_rt_ms: u64, data: Option<&[u8]>) -> Frame {
    use base64::Engine as _;
    frame.set_header("biz_rt", &biz_rt_ms.to_string());
    let mut payload = serde_json::json!({ "code": code });
    if let Some(data) = data {
        payload["data"] = base64::engine::general_purpose::STANDARD
            .encode(data)
            .into();
    }
    frame.payload = Some(payload.to_string().into_bytes());
    frame
}

fn decode_header(bytes: &[u8]) -> Result<Header, String> {
    let mut header = Header::default();
    let mut reader = Reader { bytes, pos: 0 };
    while !reader.done() {
        match reader.key()? {
            (1, 2) => header.key = reader.string()?,
            (2, 2) => header.value = reader.string()?,
            (_, wire) => reader.skip(wire)?,
        }
    }
    Ok(header)
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_varint_field(out: &mut Vec<u8>, field: u32, v: u64) {
    put_varint(out, u64::from(field) << 3);
    put_varint(out, v);
}

fn put_bytes_field(out: &mut Vec<u8>, field: u32, v: &[u8]) {
    put_varint(out, (u64::from(field) << 3) | 2);
    put_varint(out, v.len() as u64);
    out.extend_from_slice(v);
}

struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn done(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = *self
                .bytes
                .get(self.pos)
                .ok_or("frame ends inside a varint")?;
            self.pos += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("varint longer than 10 bytes".into())
    }

    fn key(&mut self) -> Result<(u32, u8), String> {
        let key = self.varint()?;
        let field = u32::try_from(key >> 3).map_err(|_| "field number too large")?;
        if field == 0 {
            return Err("field number 0".into());
        }
        Ok((field, (key & 7) as u8))
    }

    fn bytes(&mut self) -> Result<&'a [u8], String> {
        let len = usize::try_from(self.varint()?).map_err(|_| "length too large")?;
        let end = self
            .pos
            .checked_add(len)
            .filter(|end| *end <= self.bytes.len())
            .ok_or("frame ends inside a length-delimited field")?;
        let slice = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(slice)
    }

    fn string(&mut self) -> Result<String, String> {
        String::from_utf8(self.bytes()?.to_vec()).map_err(|_| "string field is not UTF-8".into())
    }

    fn skip(&mut self, wire: u8) -> Result<(), String> {
        let width = match wire {
            0 => return self.varint().map(|_| ()),
            1 => 8,
            2 => return self.bytes().map(|_| ()),
            5 => 4,
            other => return Err(format!("unsupported wire type {other}")),
        };
        if self.pos + width > self.bytes.len() {
            return Err("frame ends inside a fixed-width field".into());
        }
        self.pos += width;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A ping for service 7, written byte by byte from the proto definition.
    const PING_7: [u8; 18] = [
        0x08, 0x00, // 1: SeqID = 0
        0x10, 0x00, // 2: LogID = 0
        0x18, 0x07, // 3: service = 7
        0x20, 0x00, // 4: method = 0 (control)
        0x2a, 0x0c, // 5: headers, 12 bytes
        0x0a, 0x04, b't', b'y', b'p', b'e', // key "type"
        0x12, 0x04, // value, 4 bytes …
    ];

    #[test]
    fn ping_frame_bytes() {
        let mut expected = PING_7.to_vec();
        expected.extend_from_slice(b"ping");
        assert_eq!(ping(7).encode(), expected);
        assert_eq!(Frame::decode(&expected), Ok(ping(7)));
    }

    #[test]
    fn data_frame_from_hand_built_bytes() {
        let payload = br#"{"schema":"2.0"}"#;
        let mut bytes = vec![
            0x08, 0x96, 0x01, // SeqID = 150
            0x10, 0xac, 0x02, // LogID = 300
            0x18, 0xd2, 0x09, // service = 1234
            0x20, 0x01, // method = 1 (data)
        ];
        for (k, v) in [("type", "event"), ("message_id", "m1"), ("sum", "1")] {
            bytes.push(0x2a);
            bytes.push((4 + k.len() + v.len()) as u8);
            bytes.extend_from_slice(&[0x0a, k.len() as u8]);
            bytes.extend_from_slice(k.as_bytes());
            bytes.extend_from_slice(&[0x12, v.len() as u8]);
            bytes.extend_from_slice(v.as_bytes());
        }
        bytes.extend_from_slice(&[0x42, payload.len() as u8]);
        bytes.extend_from_slice(payload);
        // An unknown field 15 (varint) is skipped.
        bytes.extend_from_slice(&[0x78, 0x05]);
        bytes.extend_from_slice(&[0x4a, 0x03, b'l', b'i', b'd']);
        let frame = Frame::decode(&bytes).expect("decodes");
        assert_eq!((frame.seq_id, frame.log_id), (150, 300));
        assert_eq!((frame.service, frame.method), (1234, METHOD_DATA));
        assert_eq!(frame.header("type"), Some("event"));
        assert_eq!(frame.header("message_id"), Some("m1"));
        assert_eq!(frame.header("seq"), None);
        assert_eq!(frame.payload.as_deref(), Some(&payload[..]));
        assert_eq!(frame.log_id_new.as_deref(), Some("lid"));
        assert_eq!(frame.payload_type, None);
        // Re-encoding (without the unknown field) decodes to the same frame.
        assert_eq!(Frame::decode(&frame.encode()), Ok(frame));
    }

    #[test]
    fn negative_and_large_values_round_trip() {
        let frame = Frame {
            seq_id: u64::MAX,
            log_id: 1 << 40,
            service: -1,
            method: 1,
            payload_encoding: Some(String::new()),
            payload: Some(vec![0; 300]),
            ..Frame::default()
        };
        let bytes = frame.encode();
        // service -1: ten bytes of sign-extended varint.
        assert!(
            bytes
                .windows(11)
                .any(|w| w[0] == 0x18 && w[1..10].iter().all(|b| *b == 0xff) && w[10] == 0x01)
        );
        assert_eq!(Frame::decode(&bytes), Ok(frame));
    }

    #[test]
    fn malformed_frames() {
        assert!(Frame::decode(&[]).is_err(), "required fields missing");
        assert!(Frame::decode(&[0x08]).is_err(), "truncated varint");
        assert!(Frame::decode(&[0x08, 0, 0x10, 0, 0x18, 0, 0x20, 0, 0x42, 0x05, 1]).is_err());
        assert!(Frame::decode(&[0x0b]).is_err(), "wire type 3");
        assert!(Frame::decode(&[0x00, 0x00]).is_err(), "field 0");
    }

    #[test]
    fn responses_echo_the_frame() {
        let mut frame = Frame {
            seq_id: 9,
            service: 3,
            method: METHOD_DATA,
            payload: Some(b"{...}".to_vec()),
            ..Frame::default()
        };
        frame.set_header("type", "event");
        frame.set_header("type", "event");
        assert_eq!(frame.headers.len(), 1);
        let answer = response(frame, 200, 12, None);
        assert_eq!(answer.seq_id, 9);
        assert_eq!(answer.header("biz_rt"), Some("12"));
        assert_eq!(answer.header("type"), Some("event"));
        assert_eq!(answer.payload.as_deref(), Some(&br#"{"code":200}"#[..]));
        let toast = response(answer, 200, 3, Some(br#"{"toast":{}}"#));
        let payload: serde_json::Value =
            serde_json::from_slice(toast.payload.as_deref().unwrap_or_default()).expect("json");
        assert_eq!(payload["code"], 200);
        assert_eq!(payload["data"], "eyJ0b2FzdCI6e319", "base64 of the answer");
    }
}
