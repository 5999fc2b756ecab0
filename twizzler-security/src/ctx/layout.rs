//! The context's header and entry rows as plain fields, encoded and decoded through the codec
//! without any check beyond length: for writers that patch a stored context in place (a
//! store appending one overflow row) and must not know the offsets. [`SecCtx`](super::SecCtx)
//! and [`CtxHeader`](super::CtxHeader) are the validating readers.

use super::{ENTRY_LEN, HEADER_LEN, MASK_LEN};
use crate::codec::{Reader, Writer};
use crate::error::DecodeError;

/// Every field of a context header as stored (see the layout table in [`ctx`](super)),
/// unchecked: a writer patching a context decides itself what it accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct HeaderFields {
    /// Magic number.
    pub magic: u32,
    /// Format version.
    pub version: u16,
    /// Flags, raw.
    pub flags: u16,
    /// Generation, with its [`WRITING`](super::WRITING) bit.
    pub generation: u64,
    /// Global mask, raw.
    pub global_mask: u16,
    /// Reserved (zero in a valid context).
    pub reserved: u16,
    /// Entry count.
    pub entry_count: u32,
    /// Mask count.
    pub mask_count: u32,
    /// Entry table offset.
    pub entries: u32,
    /// Mask table offset.
    pub masks: u32,
    /// Item heap offset.
    pub heap: u32,
    /// Item heap length.
    pub heap_len: u32,
    /// Version 2: the overflow table's entry count; version 1: reserved, zero.
    pub overflow: u32,
}

impl HeaderFields {
    /// Reads the header's fields from exactly [`HEADER_LEN`] bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let h = Self {
            magic: r.u32()?,
            version: r.u16()?,
            flags: r.u16()?,
            generation: r.u64()?,
            global_mask: r.u16()?,
            reserved: r.u16()?,
            entry_count: r.u32()?,
            mask_count: r.u32()?,
            entries: r.u32()?,
            masks: r.u32()?,
            heap: r.u32()?,
            heap_len: r.u32()?,
            overflow: r.u32()?,
        };
        r.finish()?;
        Ok(h)
    }

    /// Whether the entry table starts right after the header and the mask table right after
    /// the entry table, as the editor writes them.
    pub fn tables_packed(&self) -> bool {
        let entries = u64::from(self.entries);
        entries == HEADER_LEN as u64
            && u64::from(self.masks) == entries + u64::from(self.entry_count) * ENTRY_LEN as u64
    }

    /// Where the overflow table starts: right after the mask table.
    pub fn overflow_offset(&self) -> u64 {
        u64::from(self.masks) + u64::from(self.mask_count) * MASK_LEN as u64
    }

    /// Where an overflow table of `rows` rows ends.
    pub fn overflow_end(&self, rows: u32) -> u64 {
        self.overflow_offset() + u64::from(rows) * ENTRY_LEN as u64
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        let mut w = Writer::new(&mut out);
        w.u32(self.magic)
            .u16(self.version)
            .u16(self.flags)
            .u64(self.generation)
            .u16(self.global_mask)
            .u16(self.reserved)
            .u32(self.entry_count)
            .u32(self.mask_count)
            .u32(self.entries)
            .u32(self.masks)
            .u32(self.heap)
            .u32(self.heap_len)
            .u32(self.overflow);
        debug_assert_eq!(w.position(), HEADER_LEN);
        out
    }
}

/// One row of the entry table (or the overflow table) as stored, unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct EntryRow {
    /// The target object, raw.
    pub target: u128,
    /// The record kind, raw ([`RecordKind::raw`](crate::RecordKind::raw)).
    pub kind: u32,
    /// The item's offset within the heap.
    pub offset: u32,
    /// The item's length.
    pub len: u32,
}

impl EntryRow {
    /// Reads a row from exactly [`ENTRY_LEN`] bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let row = Self {
            target: r.u128()?,
            kind: r.u32()?,
            offset: r.u32()?,
            len: r.u32()?,
        };
        r.finish()?;
        Ok(row)
    }

    /// The row's bytes.
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut out = [0u8; ENTRY_LEN];
        let mut w = Writer::new(&mut out);
        w.u128(self.target)
            .u32(self.kind)
            .u32(self.offset)
            .u32(self.len);
        debug_assert_eq!(w.position(), ENTRY_LEN);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn header_round_trips(b in proptest::collection::vec(any::<u8>(), HEADER_LEN)) {
            let h = HeaderFields::decode(&b).unwrap();
            prop_assert_eq!(&h.encode()[..], &b[..]);
        }

        #[test]
        fn row_round_trips(b in proptest::collection::vec(any::<u8>(), ENTRY_LEN)) {
            let r = EntryRow::decode(&b).unwrap();
            prop_assert_eq!(&r.encode()[..], &b[..]);
        }

        #[test]
        fn other_lengths_are_refused(n in 0usize..100) {
            prop_assert_eq!(HeaderFields::decode(&std::vec![0; n]).is_ok(), n == HEADER_LEN);
            prop_assert_eq!(EntryRow::decode(&std::vec![0; n]).is_ok(), n == ENTRY_LEN);
        }
    }

    #[test]
    fn table_positions_follow_the_layout() {
        let h = HeaderFields {
            entry_count: 2,
            mask_count: 3,
            entries: HEADER_LEN as u32,
            masks: (HEADER_LEN + 2 * ENTRY_LEN) as u32,
            ..HeaderFields::default()
        };
        assert!(h.tables_packed());
        let overflow = (HEADER_LEN + 2 * ENTRY_LEN + 3 * MASK_LEN) as u64;
        assert_eq!(h.overflow_offset(), overflow);
        assert_eq!(h.overflow_end(4), overflow + 4 * ENTRY_LEN as u64);
        assert!(
            !HeaderFields {
                masks: h.masks + 1,
                ..h
            }
            .tables_packed()
        );
        assert!(
            !HeaderFields {
                entries: h.entries + 1,
                ..h
            }
            .tables_packed()
        );
    }

    #[test]
    fn fields_land_where_the_layout_says() {
        let h = HeaderFields {
            version: 2,
            generation: 7,
            heap_len: 9,
            overflow: 3,
            ..HeaderFields::default()
        };
        let b = h.encode();
        assert_eq!(b[super::super::field::VERSION], 2);
        assert_eq!(b[super::super::field::GENERATION], 7);
        assert_eq!(b[super::super::field::HEAP_LEN], 9);
        assert_eq!(b[super::super::field::OVERFLOW], 3);
    }
}
