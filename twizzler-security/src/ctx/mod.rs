//! The on-object security-context format.
//!
//! A context is an object whose bytes userspace writes and the kernel reads, so the reader
//! treats every byte as untrusted: [`SecCtx::parse`] validates the header, the bounds of every
//! table and item, and the ordering of the tables before anything is looked up, and never
//! panics or reads out of bounds. [`SecCtxEditor`] (with `alloc`) writes exactly this layout and
//! bumps the generation on every change.
//!
//! Layout (version 1, little-endian, offsets from the start of the context's base):
//!
//! | offset | size | header field |
//! |---|---|---|
//! | 0 | 4 | magic `TSCX` |
//! | 4 | 2 | version (1) |
//! | 6 | 2 | flags ([`CtxFlags`]) |
//! | 8 | 8 | generation: bumped on every change; its top bit ([`WRITING`]) set while a writer rewrites the context in place |
//! | 16 | 2 | global mask |
//! | 18 | 2 | reserved, zero |
//! | 20 | 4 | entry count |
//! | 24 | 4 | mask count |
//! | 28 | 4 | entry table offset (its length is count × [`ENTRY_LEN`]) |
//! | 32 | 4 | mask table offset (its length is count × [`MASK_LEN`]) |
//! | 36 | 4 | item heap offset |
//! | 40 | 4 | item heap length |
//! | 44 | 4 | reserved, zero (version 2: the overflow table's entry count, see [`CTX_VERSION_OVERFLOW`]) |
//!
//! - Entry ([`ENTRY_LEN`] bytes): target (16), kind (4: 0 capability, 1 delegation), item
//!   offset within the heap (4), item length (4). Sorted by target, several per target allowed.
//!   Within a target the order is free; [`SecCtxEditor`] writes the
//!   capabilities by the offset of their gate, then the other records, so that a data fault
//!   finds the record for its page by a search ([`EntryIter::start_near_page`]). Readers rely
//!   on no order within a target.
//! - Mask ([`MASK_LEN`] bytes): target (16), permmask (2), ovrmask (2). Strictly sorted by target.
//! - Heap: the encoded capabilities and delegations.
//!
//! Version 3 ([`CTX_VERSION_LABEL`], `docs/DIFC.md` §1.4) is version 2 with a 56-byte header
//! ([`HEADER_LEN_V3`]) naming a *label section*: the context's proposed initial principal
//! label, one `TLBL` encoding ([`crate::Label`]).
//!
//! | offset | size | header field (version 3) |
//! |---|---|---|
//! | 0..48 | | as version 2 (offset 44: overflow count) |
//! | 48 | 4 | label section offset |
//! | 52 | 4 | label section length (not 0) |
//!
//! The section lies inside the context and overlaps neither the header, the tables nor the
//! heap; the editor places it right after the header and writes version 3 only when the label
//! is not empty, so a context without a label is byte-for-byte a version 1 context. Versions 1
//! and 2 read with the empty initial label ([`SecCtx::initial_label`]).

mod bytes;
mod entry;
mod error;
mod iter;
mod layout;
mod mem;
mod reader;
pub use entry::{Entry, MAX_RECORD_LEN};
pub use error::CtxError;
pub use iter::EntryIter;
pub use layout::{EntryRow, HeaderFields};
pub use mem::CtxMem;
pub use reader::{CtxHeader, Mask, SecCtx, Validated};

#[cfg(feature = "alloc")]
mod editor;
#[cfg(feature = "alloc")]
pub use editor::{BuildError, SecCtxEditor};
#[cfg(feature = "test-support")]
mod relist;
#[cfg(feature = "test-support")]
pub use relist::as_listed;

/// Magic number of a context (`"TSCX"`).
pub const CTX_MAGIC: u32 = u32::from_le_bytes(*b"TSCX");
/// Format version this build writes with [`SecCtxEditor`] (and reads).
pub const CTX_VERSION: u16 = 1;
/// Format version 2, which this build also reads: version 1 plus an *overflow table*. The
/// header's last word (offset 44, reserved in version 1) is its entry count; its rows, in the
/// entry-row format and sorted by target like the entry table, lie right after the mask
/// table. A store appends a record to a large context by writing one overflow row, the
/// record at the heap's end and the header, instead of re-sorting the entry table; the next
/// full edit merges the overflow rows into the entry table and writes version 1 again. Every
/// lookup searches both tables; every check of the entry table applies to the overflow
/// table.
pub const CTX_VERSION_OVERFLOW: u16 = 2;
/// Format version 3, which this build reads and writes when a context proposes an initial
/// label: version 2 plus a label section (see the module documentation).
pub const CTX_VERSION_LABEL: u16 = 3;
/// The top bit of the generation: a writer that rewrites a context in place sets it (with the
/// old generation below it) before touching anything else, and writes the new generation,
/// without it, last. Readers refuse a header with it set ([`CtxError::WriteInProgress`]) and
/// compare the header before and after they read, so a cooperating writer can never be seen
/// half-way. The editor (`SecCtxEditor`) never produces a generation with this bit.
pub const WRITING: u64 = 1 << 63;
/// Length of the header (versions 1 and 2; the first part of version 3's).
pub const HEADER_LEN: usize = 48;
/// Length of the version 3 header: [`HEADER_LEN`] plus the label section's offset and length.
pub const HEADER_LEN_V3: usize = 56;

/// Byte offsets of the header's fields (see the layout table above), for writers that patch a
/// stored context in place rather than re-encode it.
pub mod field {
    /// Magic number, 4 bytes.
    pub const MAGIC: usize = 0;
    /// Format version, 2 bytes.
    pub const VERSION: usize = 4;
    /// Generation, 8 bytes.
    pub const GENERATION: usize = 8;
    /// Reserved, 2 bytes (zero).
    pub const RESERVED_A: usize = 18;
    /// Entry count, 4 bytes.
    pub const ENTRY_COUNT: usize = 20;
    /// Mask count, 4 bytes.
    pub const MASK_COUNT: usize = 24;
    /// Entry table offset, 4 bytes.
    pub const ENTRIES: usize = 28;
    /// Mask table offset, 4 bytes.
    pub const MASKS: usize = 32;
    /// Item heap offset, 4 bytes.
    pub const HEAP: usize = 36;
    /// Item heap length, 4 bytes.
    pub const HEAP_LEN: usize = 40;
    /// Version 2's overflow count (version 1: reserved, zero), 4 bytes.
    pub const OVERFLOW: usize = 44;
    /// Version 3: the label section's offset, 4 bytes.
    pub const LABEL_OFFSET: usize = 48;
    /// Version 3: the label section's length, 4 bytes.
    pub const LABEL_LEN: usize = 52;
}
/// Length of an entry-table row.
pub const ENTRY_LEN: usize = 16 + 4 + 4 + 4;
/// Length of a mask-table row.
pub const MASK_LEN: usize = 16 + 2 + 2;

bitflags::bitflags! {
    /// Flags of a security context.
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    #[cfg_attr(feature = "serde", derive(serde::Serialize, serde::Deserialize))]
    pub struct CtxFlags: u16 {
        /// A thread whose active context this is cannot switch to another: the kernel does not
        /// search its inactive contexts.
        const UNDETACHABLE = 1;
    }
}
