//! Little-endian reads from a model file held in memory, each one
//! bounds-checked: a truncated or foreign file is an error naming the part
//! being read, never a panic.

pub struct Reader<'a> {
    pub bytes: &'a [u8],
    pub pos: usize,
    /// What is being read, named in errors.
    pub section: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], pos: usize, section: &'static str) -> Self {
        Reader {
            bytes,
            pos,
            section,
        }
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.bytes.len())
            .ok_or_else(|| {
                format!(
                    "truncated: {} needs {n} bytes at offset {}, {} are left",
                    self.section,
                    self.pos,
                    self.bytes.len().saturating_sub(self.pos)
                )
            })?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    pub fn u8(&mut self) -> Result<u8, String> {
        Ok(self.array::<1>()?[0])
    }

    pub fn u16(&mut self) -> Result<u16, String> {
        self.array().map(u16::from_le_bytes)
    }

    pub fn u32(&mut self) -> Result<u32, String> {
        self.array().map(u32::from_le_bytes)
    }

    pub fn u64(&mut self) -> Result<u64, String> {
        self.array().map(u64::from_le_bytes)
    }

    pub fn f32(&mut self) -> Result<f32, String> {
        self.array().map(f32::from_le_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::Reader;

    #[test]
    fn reads_little_endian_and_names_what_was_cut_short() {
        let mut r = Reader::new(&[1, 0, 2, 0, 0, 0, 9], 0, "the header");
        assert_eq!(r.u16(), Ok(1));
        assert_eq!(r.u32(), Ok(2));
        assert_eq!(
            r.u32(),
            Err("truncated: the header needs 4 bytes at offset 6, 1 are left".to_owned())
        );
        assert_eq!(r.u8(), Ok(9));
    }
}
