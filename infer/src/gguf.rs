//! Reading a GGUF file (v2/v3): metadata, tensor directory, and the bounds
//! checks that turn a truncated or foreign file into a clear error.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::bytes::Reader;
use crate::error::ModelError;

const MAGIC: &[u8; 4] = b"GGUF";
const DEFAULT_ALIGNMENT: u64 = 32;
/// Caps on header counts so a corrupt header cannot make us allocate wildly.
const MAX_COUNT: u64 = 1 << 24;

/// A metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum Meta {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(String),
    Array(Vec<Meta>),
}

impl Meta {
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Meta::Int(i) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    pub fn as_f64(&self) -> Option<f64> {
        match self {
            Meta::Float(f) => Some(*f),
            Meta::Int(i) => Some(*i as f64),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Meta::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Meta]> {
        match self {
            Meta::Array(a) => Some(a),
            _ => None,
        }
    }
}

/// Tensor element types this runtime can compute with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TensorType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q8_0,
}

impl TensorType {
    fn from_id(id: u32) -> Result<Self, String> {
        Ok(match id {
            0 => TensorType::F32,
            1 => TensorType::F16,
            2 => TensorType::Q4_0,
            3 => TensorType::Q4_1,
            8 => TensorType::Q8_0,
            other => return Err(format!("tensor type {} is not supported", type_name(other))),
        })
    }

    /// (elements per block, bytes per block)
    fn block(self) -> (u64, u64) {
        match self {
            TensorType::F32 => (1, 4),
            TensorType::F16 => (1, 2),
            TensorType::Q4_0 => (32, 18),
            TensorType::Q4_1 => (32, 20),
            TensorType::Q8_0 => (32, 34),
        }
    }
}

fn type_name(id: u32) -> String {
    let name = match id {
        6 => "Q5_0",
        7 => "Q5_1",
        9 => "Q8_1",
        10 => "Q2_K",
        11 => "Q3_K",
        12 => "Q4_K",
        13 => "Q5_K",
        14 => "Q6_K",
        15 => "Q8_K",
        30 => "BF16",
        _ => return format!("#{id}"),
    };
    name.to_owned()
}

#[derive(Debug, Clone)]
pub struct TensorInfo {
    /// GGUF order: `dims[0]` is the innermost (row length).
    pub dims: Vec<u64>,
    pub kind: TensorType,
    /// Absolute offset in the file.
    pub offset: usize,
    pub bytes: usize,
}

impl TensorInfo {
    pub fn elements(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// A parsed GGUF file held in memory.
pub struct GgufFile {
    pub path: PathBuf,
    pub metadata: BTreeMap<String, Meta>,
    pub tensors: BTreeMap<String, TensorInfo>,
    pub data: Vec<u8>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish_non_exhaustive()
    }
}

/// GGUF's own reads: counts, strings and metadata values.
trait GgufReads {
    fn count(&mut self) -> Result<usize, String>;
    fn string(&mut self) -> Result<String, String>;
    fn value(&mut self, kind: u32, depth: u8) -> Result<Meta, String>;
}

impl GgufReads for Reader<'_> {
    fn count(&mut self) -> Result<usize, String> {
        let n = self.u64()?;
        if n > MAX_COUNT {
            return Err(format!("implausible count {n} in the header"));
        }
        usize::try_from(n).map_err(|_| "count too large".to_owned())
    }

    fn string(&mut self) -> Result<String, String> {
        let n = self.count()?;
        let bytes = self.take(n)?;
        Ok(String::from_utf8_lossy(bytes).into_owned())
    }

    fn value(&mut self, kind: u32, depth: u8) -> Result<Meta, String> {
        Ok(match kind {
            0 => Meta::Int(i64::from(self.array::<1>()?[0])),
            1 => Meta::Int(i64::from(i8::from_le_bytes(self.array()?))),
            2 => Meta::Int(i64::from(u16::from_le_bytes(self.array()?))),
            3 => Meta::Int(i64::from(i16::from_le_bytes(self.array()?))),
            4 => Meta::Int(i64::from(self.u32()?)),
            5 => Meta::Int(i64::from(i32::from_le_bytes(self.array()?))),
            6 => Meta::Float(f64::from(f32::from_le_bytes(self.array()?))),
            7 => Meta::Bool(self.array::<1>()?[0] != 0),
            8 => Meta::Str(self.string()?),
            9 if depth == 0 => {
                let item = self.u32()?;
                let n = self.count()?;
                let mut items = Vec::with_capacity(n.min(1 << 16));
                for _ in 0..n {
                    items.push(self.value(item, depth + 1)?);
                }
                Meta::Array(items)
            }
            10 => Meta::Int(u64::from_le_bytes(self.array()?) as i64),
            11 => Meta::Int(i64::from_le_bytes(self.array()?)),
            12 => Meta::Float(f64::from_le_bytes(self.array()?)),
            other => return Err(format!("unknown metadata type {other}")),
        })
    }
}

impl GgufFile {
    /// Reads and validates `path`. `default_name` (e.g. `smollm2`) makes the
    /// errors suggest `pincer model fetch`.
    pub fn open(path: &Path, default_name: Option<&str>) -> Result<Self, ModelError> {
        let data = match std::fs::read(path) {
            Ok(data) => data,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(ModelError::Missing {
                    path: path.to_owned(),
                    default_name: default_name.map(str::to_owned),
                });
            }
            Err(e) => {
                return Err(ModelError::Unreadable {
                    path: path.to_owned(),
                    reason: e.to_string(),
                });
            }
        };
        Self::parse(path, data, default_name)
    }

    pub fn parse(
        path: &Path,
        data: Vec<u8>,
        default_name: Option<&str>,
    ) -> Result<Self, ModelError> {
        let not_gguf = |reason: &str| ModelError::NotGguf {
            path: path.to_owned(),
            reason: reason.to_owned(),
        };
        let truncated = |reason: String| ModelError::Truncated {
            path: path.to_owned(),
            reason,
            default_name: default_name.map(str::to_owned),
        };
        if data.len() < 4 || &data[..4] != MAGIC {
            return Err(not_gguf("it does not start with the GGUF magic bytes"));
        }
        let mut r = Reader::new(&data, 4, "the GGUF header");
        let version = r.u32().map_err(&truncated)?;
        if !(2..=3).contains(&version) {
            return Err(ModelError::Unsupported {
                path: path.to_owned(),
                reason: format!("GGUF version {version} (supported: 2 and 3)"),
            });
        }
        let n_tensors = r.count().map_err(&truncated)?;
        let n_meta = r.count().map_err(&truncated)?;
        let mut metadata = BTreeMap::new();
        for _ in 0..n_meta {
            let key = r.string().map_err(&truncated)?;
            let kind = r.u32().map_err(&truncated)?;
            let value = r.value(kind, 0).map_err(&truncated)?;
            metadata.insert(key, value);
        }
        let mut raw = Vec::with_capacity(n_tensors);
        for _ in 0..n_tensors {
            let name = r.string().map_err(&truncated)?;
            let n_dims = r.u32().map_err(&truncated)?;
            if n_dims > 4 {
                return Err(truncated(format!(
                    "tensor `{name}` has {n_dims} dimensions"
                )));
            }
            let mut dims = Vec::new();
            for _ in 0..n_dims {
                dims.push(r.u64().map_err(&truncated)?);
            }
            let kind = r.u32().map_err(&truncated)?;
            let offset = r.u64().map_err(&truncated)?;
            raw.push((name, dims, kind, offset));
        }
        let alignment = metadata
            .get("general.alignment")
            .and_then(Meta::as_u64)
            .filter(|a| *a > 0)
            .unwrap_or(DEFAULT_ALIGNMENT);
        let start = (r.pos as u64).div_ceil(alignment) * alignment;
        let mut tensors = BTreeMap::new();
        for (name, dims, kind, offset) in raw {
            let kind = TensorType::from_id(kind).map_err(|reason| ModelError::Unsupported {
                path: path.to_owned(),
                reason: format!("tensor `{name}`: {reason}"),
            })?;
            let elements: u64 = dims
                .iter()
                .try_fold(1u64, |a, d| a.checked_mul(*d))
                .unwrap_or(u64::MAX);
            let (block_elems, block_bytes) = kind.block();
            if !elements.is_multiple_of(block_elems) {
                return Err(truncated(format!(
                    "tensor `{name}` size is not a whole number of blocks"
                )));
            }
            let bytes = (elements / block_elems).saturating_mul(block_bytes);
            let begin = start.saturating_add(offset);
            let end = begin.saturating_add(bytes);
            if end > data.len() as u64 {
                return Err(truncated(format!(
                    "tensor `{name}` ends at byte {end} but the file has {} bytes",
                    data.len()
                )));
            }
            tensors.insert(
                name,
                TensorInfo {
                    dims,
                    kind,
                    offset: begin as usize,
                    bytes: bytes as usize,
                },
            );
        }
        Ok(GgufFile {
            path: path.to_owned(),
            metadata,
            tensors,
            data,
        })
    }

    pub fn meta(&self, key: &str) -> Option<&Meta> {
        self.metadata.get(key)
    }

    pub fn tensor_bytes(&self, info: &TensorInfo) -> &[u8] {
        &self.data[info.offset..info.offset + info.bytes]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny valid GGUF: one string key and one F32 tensor of 4 elements.
    pub(crate) fn tiny() -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        b.extend_from_slice(&1u64.to_le_bytes());
        let key = b"general.architecture";
        b.extend_from_slice(&(key.len() as u64).to_le_bytes());
        b.extend_from_slice(key);
        b.extend_from_slice(&8u32.to_le_bytes());
        b.extend_from_slice(&5u64.to_le_bytes());
        b.extend_from_slice(b"llama");
        let name = b"t";
        b.extend_from_slice(&(name.len() as u64).to_le_bytes());
        b.extend_from_slice(name);
        b.extend_from_slice(&1u32.to_le_bytes());
        b.extend_from_slice(&4u64.to_le_bytes());
        b.extend_from_slice(&0u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        while b.len() % 32 != 0 {
            b.push(0);
        }
        for v in [1.0f32, 2.0, 3.0, 4.0] {
            b.extend_from_slice(&v.to_le_bytes());
        }
        b
    }

    #[test]
    fn parses_metadata_and_tensors() {
        let f = GgufFile::parse(Path::new("/m.gguf"), tiny(), None).unwrap();
        assert_eq!(
            f.meta("general.architecture").and_then(Meta::as_str),
            Some("llama")
        );
        let t = &f.tensors["t"];
        assert_eq!(t.elements(), 4);
        assert_eq!(f.tensor_bytes(t).len(), 16);
    }

    #[test]
    fn truncation_anywhere_is_a_clear_error() {
        let full = tiny();
        for cut in [6, 20, 40, full.len() - 1] {
            let err = GgufFile::parse(Path::new("/m.gguf"), full[..cut].to_vec(), Some("smollm2"))
                .unwrap_err();
            let msg = err.to_string();
            assert!(
                matches!(err, ModelError::Truncated { .. }),
                "cut {cut}: {msg}"
            );
            assert!(
                msg.contains("/m.gguf") && msg.contains("pincer model fetch smollm2"),
                "{msg}"
            );
        }
    }

    #[test]
    fn foreign_files_are_not_gguf() {
        let err =
            GgufFile::parse(Path::new("/x.txt"), b"hello world\n".to_vec(), None).unwrap_err();
        assert!(matches!(err, ModelError::NotGguf { .. }));
        assert!(err.to_string().contains("/x.txt"));
        let err = GgufFile::parse(Path::new("/e"), Vec::new(), None).unwrap_err();
        assert!(matches!(err, ModelError::NotGguf { .. }));
    }

    #[test]
    fn missing_file_names_the_fix() {
        let err = GgufFile::open(Path::new("/nonexistent/m.gguf"), Some("smollm2")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("/nonexistent/m.gguf") && msg.contains("pincer model fetch smollm2"),
            "{msg}"
        );
    }

    #[test]
    fn unsupported_tensor_types_are_named() {
        let mut b = tiny();
        // magic, version, two counts, the key, its type and value, the tensor
        // name, n_dims and one dim come before the tensor type.
        let idx = 4 + 4 + 16 + (8 + 20) + 4 + (8 + 5) + (8 + 1) + 4 + 8;
        b[idx..idx + 4].copy_from_slice(&14u32.to_le_bytes());
        let err = GgufFile::parse(Path::new("/q.gguf"), b, None).unwrap_err();
        assert!(err.to_string().contains("Q6_K"), "{err}");
    }
}
