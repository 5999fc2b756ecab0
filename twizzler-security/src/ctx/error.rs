//! [`CtxError`]: why the reader refused a context's bytes, and how it displays.
//!
//! One variant per check of [`SecCtx::parse`](super::SecCtx::parse) and
//! [`CtxHeader::read`](super::CtxHeader::read): the header's own, the bounds of each table,
//! the order and contents of the rows, and the version 3 label section.

use core::fmt;

use crate::error::DecodeError;

/// Why context bytes were rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CtxError {
    /// The header itself is malformed (short, bad magic, unsupported version).
    Header(DecodeError),
    /// Flags with unknown bits.
    UnknownFlags(u16),
    /// A global mask with unknown bits.
    UnknownGlobalMask(u16),
    /// A reserved header field is not zero.
    NonZeroReserved,
    /// A table lies (partly) outside the buffer, or its size overflows.
    TableOutOfBounds(&'static str),
    /// Entry `index` has a smaller target than the entry before it.
    UnsortedEntries {
        /// Index of the offending entry.
        index: usize,
    },
    /// Entry `index` has an unknown kind.
    BadEntryKind {
        /// Index of the offending entry.
        index: usize,
        /// The kind found.
        kind: u32,
    },
    /// Entry `index` points outside the item heap.
    ItemOutOfBounds {
        /// Index of the offending entry.
        index: usize,
    },
    /// Mask `index` does not have a strictly greater target than the mask before it.
    UnsortedMasks {
        /// Index of the offending mask.
        index: usize,
    },
    /// Mask `index` has unknown protection bits.
    BadMask {
        /// Index of the offending mask.
        index: usize,
    },
    /// [`SecCtx::reopen`](super::SecCtx::reopen): the bytes are no longer those validated
    /// (another generation or length); parse them again.
    Changed,
    /// The generation has the [`WRITING`](super::WRITING) bit set: a writer is rewriting the
    /// context in place. Read it again once the writer is done.
    WriteInProgress,
    /// A version 3 context whose label section is empty (a context without a label is
    /// written as version 1 or 2).
    EmptyLabelSection,
    /// The label section overlaps the named part of the context.
    LabelOverlaps(&'static str),
    /// The label section is not exactly one valid `TLBL` encoding.
    BadLabel(DecodeError),
}

impl fmt::Display for CtxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Header(e) => write!(f, "context header: {e}"),
            Self::UnknownFlags(b) => write!(f, "context flags {b:#x} have unknown bits"),
            Self::UnknownGlobalMask(b) => write!(f, "global mask {b:#x} has unknown bits"),
            Self::NonZeroReserved => f.write_str("a reserved context header field is not zero"),
            Self::Changed => f.write_str("the context changed since it was validated"),
            Self::WriteInProgress => f.write_str("the context is being rewritten"),
            Self::TableOutOfBounds(t) => write!(f, "the {t} lies outside the context"),
            Self::UnsortedEntries { index } => {
                write!(
                    f,
                    "entry {index} is out of order (entries must be sorted by target)"
                )
            }
            Self::BadEntryKind { index, kind } => {
                write!(f, "entry {index} has unknown record kind {kind}")
            }
            Self::ItemOutOfBounds { index } => {
                write!(f, "entry {index} points outside the item heap")
            }
            Self::UnsortedMasks { index } => write!(
                f,
                "mask {index} is out of order or duplicated (masks must be strictly sorted)"
            ),
            Self::BadMask { index } => write!(f, "mask {index} has unknown protection bits"),
            Self::EmptyLabelSection => {
                f.write_str("a version 3 context has an empty label section")
            }
            Self::LabelOverlaps(what) => write!(f, "the label section overlaps the {what}"),
            Self::BadLabel(e) => write!(f, "the label section is not a label: {e}"),
        }
    }
}

impl core::error::Error for CtxError {}

impl From<DecodeError> for CtxError {
    fn from(e: DecodeError) -> Self {
        Self::Header(e)
    }
}
