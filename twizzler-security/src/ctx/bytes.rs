//! Little-endian reads at fixed offsets of a row or body already in hand: the reader's table
//! rows and capability bodies have fixed layouts, so each field is read by offset. A field
//! past the end of the bytes reads as zeros (the fixed layouts never reach it); nothing here
//! panics.

/// The `N` bytes at `at` of a row already copied out (zeros past its end, which the callers'
/// fixed row layouts never reach).
#[inline]
fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(s) = at.checked_add(N).and_then(|end| b.get(at..end)) {
        a.copy_from_slice(s);
    }
    a
}

#[inline]
pub(super) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(le(b, at))
}

#[inline]
pub(super) fn le_u64(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(le(b, at))
}

#[inline]
pub(super) fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes(le(b, at))
}

#[inline]
pub(super) fn le_u128(b: &[u8], at: usize) -> u128 {
    u128::from_le_bytes(le(b, at))
}
