//! The context editor's memory stays within a small constant factor of the context's size,
//! whatever the context says (issue 12, item 5).
//!
//! A context's entries may point at overlapping ranges of its item heap: a hostile 1 MiB
//! context whose 37,000 entries all name the same 5 KiB range once made
//! `SecCtxEditor::from_ctx` copy 210 MB. This binary counts every allocation (its own global
//! allocator) and holds a single test, so no other test's allocations are counted.

// A test harness: a failed unwrap, expect or panic is a failed test, and its helpers are
// public to its modules only.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    unreachable_pub
)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use twizzler_capsec::ctx::{CTX_MAGIC, CTX_VERSION, ENTRY_LEN, HEADER_LEN};
use twizzler_capsec::{MAX_RECORD_LEN, RecordKind, SecCtx, SecCtxEditor};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the caller's layout and pointer unchanged; the
// counters are only statistics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let live = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(live, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Peak bytes allocated (beyond what was live before) while `f` runs.
fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

/// A context of about `size` bytes whose every entry names the same `MAX_RECORD_LEN`-byte heap
/// range, with `stride` > 0 shifting each entry's start by that many bytes (distinct but
/// overlapping ranges).
fn hostile_ctx(size: usize, stride: usize) -> Vec<u8> {
    let heap_len = MAX_RECORD_LEN + 4096;
    let n = (size - HEADER_LEN - heap_len) / ENTRY_LEN;
    let entries_offset = HEADER_LEN;
    let heap_offset = entries_offset + n * ENTRY_LEN;
    let mut out = Vec::with_capacity(heap_offset + heap_len);
    out.extend_from_slice(&CTX_MAGIC.to_le_bytes());
    out.extend_from_slice(&CTX_VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes()); // flags
    out.extend_from_slice(&1u64.to_le_bytes()); // generation
    out.extend_from_slice(&7u16.to_le_bytes()); // global mask
    out.extend_from_slice(&0u16.to_le_bytes());
    for v in [n, 0, entries_offset, heap_offset, heap_offset, heap_len, 0] {
        out.extend_from_slice(&(v as u32).to_le_bytes());
    }
    assert_eq!(out.len(), HEADER_LEN);
    for i in 0..n {
        out.extend_from_slice(&(0x1000u128 + i as u128).to_le_bytes());
        out.extend_from_slice(&RecordKind::Del.raw().to_le_bytes());
        out.extend_from_slice(&(((i * stride) % 4096) as u32).to_le_bytes());
        out.extend_from_slice(&(MAX_RECORD_LEN as u32).to_le_bytes());
    }
    out.extend((0..heap_len).map(|i| (i * 31 % 251) as u8));
    out
}

#[test]
fn editor_memory_is_linear_in_the_context_size_even_for_overlapping_entries() {
    for stride in [0, 1] {
        let bytes = hostile_ctx(1 << 20, stride);
        let ctx = SecCtx::parse(&bytes).expect("a well-formed (if hostile) context");
        let n = ctx.entry_count();
        assert!(n > 30_000, "{n} entries");

        let (ed, loaded) = peak_during(|| SecCtxEditor::from_ctx(&ctx));
        assert_eq!(ed.len(), n);
        assert!(
            loaded <= 4 * bytes.len(),
            "stride {stride}: loading a {} B context took {loaded} B",
            bytes.len()
        );

        let (encoded, written) = peak_during(|| ed.encode().expect("encodes"));
        assert!(
            encoded.len() <= bytes.len(),
            "stride {stride}: re-encoding grew {} B into {} B",
            bytes.len(),
            encoded.len()
        );
        assert!(
            written <= 4 * bytes.len(),
            "stride {stride}: encoding took {written} B"
        );

        // The same entries, in the same order, with the same bytes.
        let again = SecCtx::parse(&encoded).expect("re-parses");
        assert_eq!(again.entry_count(), n);
        for (a, b) in ctx.entries().zip(again.entries()) {
            assert_eq!((a.target, a.kind), (b.target, b.kind));
            assert_eq!(a.bytes(), b.bytes());
        }
        assert_eq!(again.generation(), ctx.generation());
    }
}
