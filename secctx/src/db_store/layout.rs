//! The database's tables and the encoding of what they hold.
//!
//! | table | key | value |
//! |---|---|---|
//! | `info` | `"format"` | the store's format version ([`FORMAT_VERSION`]) |
//! | `objects` | object id (`u128`) | its metadata record ([`encode_meta`], 28 bytes) |
//! | `pages` | (object id, page index `u32`) | the page's bytes, trailing zeros trimmed; a page of zeros is absent |
//! | `names` | name (`str`) | the object id it names |
//!
//! Pages are [`PAGE`] bytes, as Twizzler's. An object is up to 1 GiB, 262,144 pages, so a page
//! index fits a `u32`. Bytes past an object's length, and every byte of an absent page, read
//! as zeros.
//!
//! The metadata record (little-endian):
//!
//! | offset | size | field |
//! |---:|---:|---|
//! | 0 | 1 | record version, 1 |
//! | 1 | 1 | flags: bit 0 the object has a `kuid`, bit 1 it is secret; other bits rejected |
//! | 2 | 2 | default protections; bits that name no right are rejected |
//! | 4 | 8 | length in bytes, at most 1 GiB |
//! | 12 | 16 | `kuid`, zero when there is none |

use redb::TableDefinition;
use twizzler_capsec::codec::{Reader, Writer};
use twizzler_capsec::{DecodeError, ObjID, Protections};

use crate::store::{MAX_OBJECT_LEN, ObjInfo, ObjMeta, StoreError};

/// The store's format version, kept in `info`. A store with a greater one is refused.
pub const FORMAT_VERSION: u64 = 1;
/// The key of the format version in `info`.
pub(super) const FORMAT_KEY: &str = "format";
/// Bytes per page.
pub const PAGE: u64 = 4096;

pub(super) const INFO: TableDefinition<&str, u64> = TableDefinition::new("info");
pub(super) const OBJECTS: TableDefinition<u128, &[u8]> = TableDefinition::new("objects");
pub(super) const PAGES: TableDefinition<(u128, u32), &[u8]> = TableDefinition::new("pages");
pub(super) const NAMES: TableDefinition<&str, u128> = TableDefinition::new("names");

/// Length of a metadata record.
pub(super) const META_LEN: usize = 28;
const META_VERSION: u8 = 1;
const HAS_KUID: u8 = 1 << 0;
const SECRET: u8 = 1 << 1;

/// The metadata record of an object.
pub(super) fn encode_meta(info: &ObjInfo) -> [u8; META_LEN] {
    let mut b = [0u8; META_LEN];
    let mut flags = 0;
    if info.meta.kuid.is_some() {
        flags |= HAS_KUID;
    }
    if info.meta.secret {
        flags |= SECRET;
    }
    let mut w = Writer::new(&mut b);
    w.u8(META_VERSION)
        .u8(flags)
        .u16(info.meta.default_prots.bits())
        .u64(info.len)
        .u128(info.meta.kuid.map_or(0, ObjID::raw));
    b
}

/// Decodes object `id`'s metadata record; any damage is [`StoreError::Corrupt`].
pub(super) fn decode_meta(id: ObjID, bytes: &[u8]) -> Result<ObjInfo, StoreError> {
    decode_meta_record(bytes).map_err(|e| StoreError::Corrupt {
        id,
        why: e.to_string(),
    })
}

/// Why bytes are not a metadata record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MetaError {
    /// Not [`META_LEN`] bytes.
    Length(usize),
    /// A record version this build does not read.
    Version(u8),
    /// Flag bits that name nothing.
    Flags(u8),
    /// Protections with bits that name no right.
    Protections(u16),
    /// A length beyond the largest object.
    TooLong(u64),
    /// A kuid without the flag that says there is one.
    KuidWithoutFlag,
}

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Length(n) => write!(f, "metadata record is {n} bytes, not {META_LEN}"),
            Self::Version(v) => write!(f, "metadata record version {v}"),
            Self::Flags(b) => write!(f, "unknown metadata flags {b:#x}"),
            Self::Protections(p) => write!(f, "default protections {p:#x} name no right"),
            Self::TooLong(len) => write!(f, "length {len} is beyond the largest object"),
            Self::KuidWithoutFlag => f.write_str("a kuid without the flag that says there is one"),
        }
    }
}

impl std::error::Error for MetaError {}

fn decode_meta_record(bytes: &[u8]) -> Result<ObjInfo, MetaError> {
    if bytes.len() != META_LEN {
        return Err(MetaError::Length(bytes.len()));
    }
    // The length is checked: no read below can run short.
    let short = |_: DecodeError| MetaError::Length(bytes.len());
    let mut r = Reader::new(bytes);
    let version = r.u8().map_err(short)?;
    if version != META_VERSION {
        return Err(MetaError::Version(version));
    }
    let flags = r.u8().map_err(short)?;
    if flags & !(HAS_KUID | SECRET) != 0 {
        return Err(MetaError::Flags(flags));
    }
    let prots = r.u16().map_err(short)?;
    let default_prots = Protections::from_bits(prots).ok_or(MetaError::Protections(prots))?;
    let len = r.u64().map_err(short)?;
    if len > MAX_OBJECT_LEN {
        return Err(MetaError::TooLong(len));
    }
    let kuid = r.u128().map_err(short)?;
    r.finish().map_err(short)?;
    let kuid = if flags & HAS_KUID != 0 {
        Some(ObjID::new(kuid))
    } else if kuid != 0 {
        return Err(MetaError::KuidWithoutFlag);
    } else {
        None
    };
    Ok(ObjInfo {
        meta: ObjMeta {
            kuid,
            default_prots,
            secret: flags & SECRET != 0,
        },
        len,
    })
}

/// The index of the page holding byte `offset` (`offset` is below 1 GiB: it fits).
pub(super) fn page_of(offset: u64) -> u32 {
    u32::try_from(offset / PAGE).unwrap_or(u32::MAX)
}

/// How many pages `len` bytes take.
pub(super) fn pages_in(len: u64) -> u32 {
    u32::try_from(len.div_ceil(PAGE)).unwrap_or(u32::MAX)
}

/// `page` with its trailing zeros removed: what the `pages` table stores (nothing at all when
/// it is empty).
pub(super) fn trimmed(page: &[u8]) -> &[u8] {
    let end = page.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    &page[..end]
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use twizzler_capsec::{ObjID, Protections};

    use super::{META_LEN, decode_meta, encode_meta};
    use crate::store::{MAX_OBJECT_LEN, ObjInfo, ObjMeta};

    proptest! {
        #[test]
        fn meta_round_trips(kuid in proptest::option::of(any::<u128>()), prots in 0u16..8, secret: bool, len in 0..=MAX_OBJECT_LEN) {
            let info = ObjInfo {
                meta: ObjMeta { kuid: kuid.map(ObjID::new), default_prots: Protections::from_bits_truncate(prots), secret },
                len,
            };
            prop_assert_eq!(decode_meta(ObjID::new(1), &encode_meta(&info)).ok(), Some(info));
        }

        /// Any bytes decode to metadata that encodes back to them, or are refused.
        #[test]
        fn meta_decoding_is_total_and_canonical(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            if let Ok(info) = decode_meta(ObjID::new(1), &bytes) {
                prop_assert_eq!(bytes.len(), META_LEN);
                prop_assert_eq!(&encode_meta(&info)[..], &bytes[..]);
            }
        }
    }

    /// The metadata record a store holds, and its golden file.
    fn golden_info() -> ObjInfo {
        ObjInfo {
            meta: ObjMeta {
                kuid: Some(ObjID::new(0x7777_0000_1111_2222_3333_4444_5555_6666)),
                default_prots: Protections::READ | Protections::WRITE,
                secret: true,
            },
            len: 0x0123_4567,
        }
    }

    const GOLDEN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/db-meta-v1.bin");

    /// The frozen metadata record (the practice of `tests/it/fixtures.rs`, here because the
    /// codec is private to the store): the golden file decodes to the expected value field by
    /// field, re-encodes to the same bytes, and every single-byte change (each byte, each of
    /// the 255 other values) is refused or reads as another value.
    #[test]
    fn meta_record_golden() {
        let bytes = std::fs::read(GOLDEN).expect("golden file");
        let id = ObjID::new(1);
        let info = decode_meta(id, &bytes).expect("decodes");
        assert_eq!(
            info.meta.kuid,
            Some(ObjID::new(0x7777_0000_1111_2222_3333_4444_5555_6666))
        );
        assert_eq!(
            info.meta.default_prots,
            Protections::READ | Protections::WRITE
        );
        assert!(info.meta.secret);
        assert_eq!(info.len, 0x0123_4567);
        assert_eq!(&encode_meta(&info)[..], &bytes[..]);
        assert_eq!(&encode_meta(&golden_info())[..], &bytes[..]);
        let mut changed = bytes.clone();
        for at in 0..bytes.len() {
            for v in 0..=u8::MAX {
                if v == bytes[at] {
                    continue;
                }
                changed[at] = v;
                let got = decode_meta(id, &changed).ok();
                assert_ne!(
                    got,
                    Some(golden_info()),
                    "byte {at} = {v:#x} reads the same"
                );
            }
            changed[at] = bytes[at];
        }
    }

    /// Writes the golden file if it does not exist: only together with a bump of the record's
    /// version. It never overwrites it: replacing it means deleting it, knowingly.
    #[test]
    #[ignore = "writes the golden file; run with REGENERATE_FIXTURES=1"]
    fn regenerate_meta_record() {
        assert!(
            std::env::var_os("REGENERATE_FIXTURES").is_some_and(|v| v == "1"),
            "set REGENERATE_FIXTURES=1 to write the missing golden file"
        );
        if std::path::Path::new(GOLDEN).exists() {
            eprintln!("kept {GOLDEN} (delete it to write it anew)");
            return;
        }
        std::fs::write(GOLDEN, encode_meta(&golden_info())).expect("write");
    }
}
