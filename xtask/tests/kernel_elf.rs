//! Property tests of the QEMU kernel's ELF reader (`kernel-hooks/kernel/src/elf.rs`), which
//! loads the user programs: it is compiled here, on the host (the kernel crate builds only for
//! bare metal). Whatever the bytes, it returns an image or an error, never panics, and every
//! segment it returns lies inside the bytes it was given.

#![allow(unreachable_pub)]

extern crate alloc;

#[allow(dead_code)]
#[path = "../../kernel-hooks/kernel/src/elf.rs"]
mod elf;

use proptest::prelude::*;

/// A minimal valid image: an ELF64 x86_64 executable header, `phnum` program headers from
/// byte 64, and `data` after them; each header loads `data` at `0x2000_0000_1000`.
fn image(phnum: u16, data: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 64];
    b[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
    b[16..18].copy_from_slice(&2u16.to_le_bytes());
    b[18..20].copy_from_slice(&62u16.to_le_bytes());
    b[24..32].copy_from_slice(&0x2000_0000_1000u64.to_le_bytes());
    b[32..40].copy_from_slice(&64u64.to_le_bytes());
    b[54..56].copy_from_slice(&56u16.to_le_bytes());
    b[56..58].copy_from_slice(&phnum.to_le_bytes());
    let data_at = 64 + 56 * u64::from(phnum);
    for _ in 0..phnum {
        let mut ph = [0u8; 56];
        ph[0..4].copy_from_slice(&1u32.to_le_bytes());
        ph[4..8].copy_from_slice(&5u32.to_le_bytes());
        ph[8..16].copy_from_slice(&data_at.to_le_bytes());
        ph[16..24].copy_from_slice(&0x2000_0000_1000u64.to_le_bytes());
        ph[32..40].copy_from_slice(&(data.len() as u64).to_le_bytes());
        ph[40..48].copy_from_slice(&(data.len() as u64 + 16).to_le_bytes());
        b.extend_from_slice(&ph);
    }
    b.extend_from_slice(data);
    b
}

#[test]
fn a_valid_image_parses() {
    let data = [0x90u8; 100];
    let img = image(2, &data);
    let parsed = elf::parse(&img).map_err(|e| e.to_string());
    let parsed = parsed.as_ref().map(|p| {
        (
            p.entry,
            p.segments.len(),
            p.segments
                .first()
                .map(|s| (s.vaddr, s.mem_len, s.bytes.len(), s.flags)),
        )
    });
    assert_eq!(
        parsed,
        Ok((0x2000_0000_1000, 2, Some((0x2000_0000_1000, 116, 100, 5))))
    );
}

#[test]
fn bad_headers_are_errors() {
    let img = image(1, &[1, 2, 3]);
    // Truncated anywhere inside the headers or the segment.
    for cut in 0..img.len() {
        assert!(elf::parse(&img[..cut]).is_err(), "cut at {cut}");
    }
    // Not an executable: a shared object, another machine, 32-bit.
    for (at, byte) in [(16, 3u8), (18, 3), (4, 1)] {
        let mut bad = img.clone();
        bad[at] = byte;
        assert_eq!(
            elf::parse(&bad).err(),
            Some(elf::ElfError::NotExecutable),
            "byte {at}"
        );
    }
    // A segment smaller in memory than in the file.
    let mut bad = img.clone();
    bad[64 + 40..64 + 48].copy_from_slice(&1u64.to_le_bytes());
    assert_eq!(elf::parse(&bad).err(), Some(elf::ElfError::BadSegment));
}

proptest! {
    /// Random bytes never panic, and what parses lies inside them.
    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(img) = elf::parse(&bytes) {
            for s in &img.segments {
                let start = s.bytes.as_ptr() as usize - bytes.as_ptr() as usize;
                prop_assert!(start + s.bytes.len() <= bytes.len());
                prop_assert!(s.mem_len >= s.bytes.len() as u64);
            }
        }
    }

    /// A valid image with any bytes overwritten (offsets, counts, sizes) never panics, and
    /// every segment it still returns lies inside the image.
    #[test]
    fn mutated_images_never_panic(
        edits in proptest::collection::vec((0usize..300, any::<u8>()), 1..12),
        phnum in 0u16..4,
    ) {
        let mut img = image(phnum, &[0xcc; 40]);
        for (at, byte) in edits {
            if let Some(b) = img.get_mut(at) {
                *b = byte;
            }
        }
        if let Ok(parsed) = elf::parse(&img) {
            for s in &parsed.segments {
                let start = s.bytes.as_ptr() as usize - img.as_ptr() as usize;
                prop_assert!(start + s.bytes.len() <= img.len());
                prop_assert!(s.vaddr.checked_add(s.mem_len).is_some());
            }
        }
    }
}
