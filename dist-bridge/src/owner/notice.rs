//! [`UpgradeNotice`]: the version changes a range upgrade made, and its byte format.

use std::fmt;

use twizzler_capsec::DecodeError;
use twizzler_capsec::codec::{Reader, VecWriter};

use crate::controller::ControllerId;
use crate::table::VersionChange;

/// Version changes a range upgrade made: holders of tokens at an old version must
/// [`Owner::renew`](super::Owner::renew) them.
///
/// Encoding (version 1, little-endian, 28 + 20 × `n` bytes; [`UpgradeNotice::encode`]):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic `DBUP` |
/// | 4 | 2 | format version (1) |
/// | 6 | 2 | reserved, 0 |
/// | 8 | 16 | owner: [`ControllerId`] (node, controller version) |
/// | 24 | 4 | change count `n` |
/// | 28 | 20 × `n` | changes: guard index (4), old version (8), new version (8) |
///
/// Nothing is signed: the notice travels over the nodes' mutually authenticated channel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpgradeNotice {
    /// The owner.
    pub owner: ControllerId,
    /// The changes.
    pub changes: Vec<VersionChange>,
}

/// Magic of an encoded [`UpgradeNotice`] (`"DBUP"`).
pub const UPGRADE_MAGIC: [u8; 4] = *b"DBUP";
const UPGRADE_FORMAT: u16 = 1;
const UPGRADE_HEADER: usize = 4 + 2 + 2 + ControllerId::ENCODED_LEN + 4;
const CHANGE_LEN: usize = 4 + 8 + 8;

/// Why bytes are not an [`UpgradeNotice`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NoticeDecodeError {
    /// Shorter than the header.
    Truncated(usize),
    /// Bad magic, format version or reserved field.
    BadHeader,
    /// The length does not match the change count.
    BadLength {
        /// The change count.
        count: u32,
        /// The length.
        len: usize,
    },
}

impl fmt::Display for NoticeDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated(n) => write!(f, "upgrade notice truncated ({n} bytes)"),
            Self::BadHeader => {
                f.write_str("not an upgrade notice (bad magic, version or reserved)")
            }
            Self::BadLength { count, len } => {
                write!(
                    f,
                    "upgrade notice of {len} bytes cannot hold {count} changes"
                )
            }
        }
    }
}

impl std::error::Error for NoticeDecodeError {}

impl UpgradeNotice {
    /// The wire encoding: magic `DBUP`, format 1 (u16), reserved 0 (u16), owner (16), change
    /// count (u32), then per change index (u32), old (u64), new (u64); little-endian.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = VecWriter::with_capacity(UPGRADE_HEADER + self.changes.len() * CHANGE_LEN);
        let count = u32::try_from(self.changes.len()).unwrap_or(u32::MAX);
        w.bytes(&UPGRADE_MAGIC)
            .u16(UPGRADE_FORMAT)
            .u16(0)
            .bytes(&self.owner.encode())
            .u32(count);
        for c in self.changes.iter().take(count as usize) {
            w.u32(c.index).u64(c.old).u64(c.new);
        }
        w.into_vec()
    }

    /// Decodes the wire encoding (total and canonical).
    pub fn decode(bytes: &[u8]) -> Result<Self, NoticeDecodeError> {
        if bytes.len() < UPGRADE_HEADER {
            return Err(NoticeDecodeError::Truncated(bytes.len()));
        }
        // The header's length is checked: a short read below is a bad header (it cannot
        // happen), and a short change a bad length.
        let bad_header = |_: DecodeError| NoticeDecodeError::BadHeader;
        let mut r = Reader::new(bytes);
        if r.array::<4>().map_err(bad_header)? != UPGRADE_MAGIC
            || r.u16().map_err(bad_header)? != UPGRADE_FORMAT
            || r.u16().map_err(bad_header)? != 0
        {
            return Err(NoticeDecodeError::BadHeader);
        }
        let owner = ControllerId::decode_from(&mut r).map_err(bad_header)?;
        let count = r.u32().map_err(bad_header)?;
        let bad_len = NoticeDecodeError::BadLength {
            count,
            len: bytes.len(),
        };
        if (count as usize).checked_mul(CHANGE_LEN) != Some(r.remaining()) {
            return Err(bad_len);
        }
        let bad_len = |_: DecodeError| bad_len;
        let mut changes = Vec::with_capacity(count as usize);
        for _ in 0..count {
            changes.push(VersionChange {
                index: r.u32().map_err(bad_len)?,
                old: r.u64().map_err(bad_len)?,
                new: r.u64().map_err(bad_len)?,
            });
        }
        r.finish().map_err(bad_len)?;
        Ok(Self { owner, changes })
    }
}
