// TEMPORARY STUB (not committed): replaced by the memory branch.
use std::path::Path;
#[derive(Debug, thiserror::Error)]
#[error("stub")]
pub struct MemoryError;
pub struct MemoryStore;
pub struct Memory {
    pub id: i64,
    pub kind: String,
    pub text: String,
}
pub struct Recalled {
    pub memory: Memory,
}
impl MemoryStore {
    pub fn open(_home: &Path) -> Result<Self, MemoryError> {
        Ok(MemoryStore)
    }
    pub fn recall(&self, _w: &str, _q: &str, _l: usize) -> Result<Vec<Recalled>, MemoryError> {
        Ok(Vec::new())
    }
}
