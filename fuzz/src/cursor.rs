//! [`Cursor`]: reads a fuzz input as a stream of small decisions. Past the end every read
//! gives 0, so every input, however short, is a valid program.

/// A forward reader over the input bytes.
pub struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    /// Reads `data` from its start.
    pub fn new(data: &'a [u8]) -> Self {
        Self { data, pos: 0 }
    }

    /// Whether every byte was read.
    pub fn is_empty(&self) -> bool {
        self.pos >= self.data.len()
    }

    /// The bytes not read yet.
    pub fn rest(&self) -> &'a [u8] {
        self.data.get(self.pos..).unwrap_or(&[])
    }

    /// Up to `n` bytes (fewer at the end).
    pub fn bytes(&mut self, n: usize) -> &'a [u8] {
        let rest = self.rest();
        let n = n.min(rest.len());
        self.pos += n;
        &rest[..n]
    }

    /// One byte (0 past the end).
    pub fn u8(&mut self) -> u8 {
        self.bytes(1).first().copied().unwrap_or(0)
    }

    /// Little-endian `u16`.
    pub fn u16(&mut self) -> u16 {
        self.uint(2) as u16
    }

    /// Little-endian `u32`.
    pub fn u32(&mut self) -> u32 {
        self.uint(4) as u32
    }

    /// Little-endian `u64`.
    pub fn u64(&mut self) -> u64 {
        self.uint(8)
    }

    fn uint(&mut self, n: usize) -> u64 {
        let mut b = [0u8; 8];
        let src = self.bytes(n);
        b[..src.len()].copy_from_slice(src);
        u64::from_le_bytes(b)
    }

    /// A number in `0..n` (`n > 0`) from one byte.
    pub fn below(&mut self, n: usize) -> usize {
        usize::from(self.u8()) % n
    }

    /// One element of `items` (non-empty), chosen by one byte.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len())]
    }
}
