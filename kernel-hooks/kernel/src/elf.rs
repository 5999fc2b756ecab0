//! Reading a user program's ELF image: its entry point and its loadable segments.
//!
//! Only what the loader needs, from a static x86_64 executable (what the userspace crate
//! links): every offset and length is checked against the image, so a malformed image is an
//! error, never a panic or a read out of bounds.

use alloc::vec::Vec;
use core::fmt;

/// A loadable segment.
pub struct Segment<'a> {
    /// Where it starts in the task's address space.
    pub vaddr: u64,
    /// Its size in memory (the bytes past `bytes.len()` are zero).
    pub mem_len: u64,
    /// Its bytes in the image.
    pub bytes: &'a [u8],
    /// `PF_X` (1), `PF_W` (2), `PF_R` (4).
    pub flags: u32,
}

/// Executable segment flag.
pub const PF_X: u32 = 1;
/// Writable segment flag.
pub const PF_W: u32 = 2;

/// A parsed image.
pub struct Image<'a> {
    /// The entry point.
    pub entry: u64,
    /// Its `PT_LOAD` segments, in order.
    pub segments: Vec<Segment<'a>>,
}

/// Why an image does not load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElfError {
    /// Not a little-endian ELF64 x86_64 executable.
    NotExecutable,
    /// A header or segment lies outside the image.
    Truncated,
    /// A segment whose size in memory is smaller than in the file, or whose end overflows.
    BadSegment,
}

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::NotExecutable => "not a little-endian ELF64 x86_64 executable",
            Self::Truncated => "a header or segment lies outside the image",
            Self::BadSegment => "a segment's sizes are inconsistent",
        })
    }
}

fn bytes<const N: usize>(b: &[u8], at: u64) -> Result<[u8; N], ElfError> {
    let at = usize::try_from(at).map_err(|_| ElfError::Truncated)?;
    let end = at.checked_add(N).ok_or(ElfError::Truncated)?;
    b.get(at..end)
        .and_then(|s| s.try_into().ok())
        .ok_or(ElfError::Truncated)
}

fn u16_at(b: &[u8], at: u64) -> Result<u16, ElfError> {
    bytes::<2>(b, at).map(u16::from_le_bytes)
}

fn u32_at(b: &[u8], at: u64) -> Result<u32, ElfError> {
    bytes::<4>(b, at).map(u32::from_le_bytes)
}

fn u64_at(b: &[u8], at: u64) -> Result<u64, ElfError> {
    bytes::<8>(b, at).map(u64::from_le_bytes)
}

/// Parses `image`.
pub fn parse(image: &[u8]) -> Result<Image<'_>, ElfError> {
    let ident = bytes::<6>(image, 0)?;
    // Magic, ELFCLASS64, ELFDATA2LSB; ET_EXEC; EM_X86_64.
    if ident != [0x7f, b'E', b'L', b'F', 2, 1]
        || u16_at(image, 16)? != 2
        || u16_at(image, 18)? != 62
    {
        return Err(ElfError::NotExecutable);
    }
    let entry = u64_at(image, 24)?;
    let phoff = u64_at(image, 32)?;
    let phentsize = u64::from(u16_at(image, 54)?);
    let phnum = u64::from(u16_at(image, 56)?);
    let mut segments = Vec::new();
    for i in 0..phnum {
        let ph = i
            .checked_mul(phentsize)
            .and_then(|o| o.checked_add(phoff))
            .ok_or(ElfError::Truncated)?;
        if u32_at(image, ph)? != 1 {
            continue; // not PT_LOAD
        }
        let flags = u32_at(image, ph + 4)?;
        let offset = u64_at(image, ph + 8)?;
        let vaddr = u64_at(image, ph + 16)?;
        let file_len = u64_at(image, ph + 32)?;
        let mem_len = u64_at(image, ph + 40)?;
        if mem_len < file_len || vaddr.checked_add(mem_len).is_none() {
            return Err(ElfError::BadSegment);
        }
        let start = usize::try_from(offset).map_err(|_| ElfError::Truncated)?;
        let len = usize::try_from(file_len).map_err(|_| ElfError::Truncated)?;
        let seg = start
            .checked_add(len)
            .and_then(|end| image.get(start..end))
            .ok_or(ElfError::Truncated)?;
        segments.push(Segment {
            vaddr,
            mem_len,
            bytes: seg,
            flags,
        });
    }
    Ok(Image { entry, segments })
}
