//! The byte codec under the crate's two binary formats: the files of kept journals
//! ([`crate::durable::format`]) and the fan-out's messages ([`crate::fanout::wire`]).
//! Little-endian fixed-width integers, u32-length-prefixed strings, LEB128 varints (zigzag for
//! signed), and counts checked against the bytes left. Each format names a short read in its
//! own terms (`From<Short>`); what a format adds (magic, headers, checksums) stays with it.

/// Bytes being written.
pub struct Writer(pub Vec<u8>);

impl Writer {
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn i64(&mut self, v: i64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// A u32 length (saturated).
    pub fn len(&mut self, n: usize) {
        self.u32(u32::try_from(n).unwrap_or(u32::MAX));
    }
    /// A u32 length, then the UTF-8 bytes.
    pub fn str(&mut self, s: &str) {
        self.len(s.len());
        self.0.extend_from_slice(s.as_bytes());
    }
    /// LEB128.
    pub fn var(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    /// Zigzag LEB128.
    pub fn svar(&mut self, v: i64) {
        self.var(((v << 1) ^ (v >> 63)) as u64);
    }
    /// A varint length, then the UTF-8 bytes.
    pub fn vstr(&mut self, s: &str) {
        self.var(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }
}

/// Why a read stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Short {
    /// Fewer bytes left than the value (or the count read) needs.
    EndsEarly,
    /// A string that is not UTF-8.
    NotUtf8,
    /// A varint longer than 64 bits.
    LongVarint,
}

/// Bytes being read, from the front.
pub struct Reader<'a> {
    pub b: &'a [u8],
}

impl<'a> Reader<'a> {
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        if self.b.len() < n {
            return Err(Short::EndsEarly);
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        Ok(self.take(N)?.try_into().expect("N bytes taken"))
    }
    pub fn u8(&mut self) -> Result<u8, Short> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn i64(&mut self) -> Result<i64, Short> {
        Ok(i64::from_le_bytes(self.array()?))
    }
    /// A u32 count of items of at least `min_bytes` each: never more than the bytes left
    /// allow, so a corrupt count cannot make a reader allocate more than the input's size.
    pub fn count(&mut self, min_bytes: usize) -> Result<usize, Short> {
        let n = self.u32()? as usize;
        self.fits(n, min_bytes)
    }
    /// A varint count (see [`Reader::count`]).
    pub fn vcount(&mut self, min_bytes: usize) -> Result<usize, Short> {
        let n = usize::try_from(self.var()?).map_err(|_| Short::EndsEarly)?;
        self.fits(n, min_bytes)
    }
    fn fits(&self, n: usize, min_bytes: usize) -> Result<usize, Short> {
        if n.saturating_mul(min_bytes.max(1)) > self.b.len() {
            return Err(Short::EndsEarly);
        }
        Ok(n)
    }
    pub fn var(&mut self) -> Result<u64, Short> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= ((b & 0x7f) as u64) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Short::LongVarint)
    }
    pub fn svar(&mut self) -> Result<i64, Short> {
        let v = self.var()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }
    /// A u32-length-prefixed string.
    pub fn str(&mut self) -> Result<String, Short> {
        let n = self.count(1)?;
        self.utf8(n)
    }
    /// A varint-length-prefixed string.
    pub fn vstr(&mut self) -> Result<String, Short> {
        let n = self.vcount(1)?;
        self.utf8(n)
    }
    fn utf8(&mut self, n: usize) -> Result<String, Short> {
        String::from_utf8(self.take(n)?.to_vec()).map_err(|_| Short::NotUtf8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_short_reads_say_why() {
        let mut w = Writer(Vec::new());
        w.u8(7);
        w.u32(u32::MAX);
        w.i64(-5);
        w.var(300);
        w.svar(-3);
        w.str("é");
        w.vstr("x");
        let mut r = Reader { b: &w.0 };
        assert_eq!(r.u8(), Ok(7));
        assert_eq!(r.u32(), Ok(u32::MAX));
        assert_eq!(r.i64(), Ok(-5));
        assert_eq!(r.var(), Ok(300));
        assert_eq!(r.svar(), Ok(-3));
        assert_eq!(r.str().as_deref(), Ok("é"));
        assert_eq!(r.vstr().as_deref(), Ok("x"));
        assert!(r.b.is_empty());
        assert_eq!(Reader { b: &[1, 0] }.u32(), Err(Short::EndsEarly));
        assert_eq!(Reader { b: &[2, 0, 0, 0, 0xff, 0xfe] }.str(), Err(Short::NotUtf8));
        assert_eq!(Reader { b: &[0xff; 11] }.var(), Err(Short::LongVarint));
        // A count the rest cannot hold is refused before anything is allocated for it.
        assert_eq!(Reader { b: &[3, 0, 0, 0, 1, 2] }.count(1), Err(Short::EndsEarly));
    }
}
