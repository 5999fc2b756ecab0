//! The object-file format: encoding and total decoding, with a typed error. The layout is
//! documented with the store ([`super`], "File format").

use twizzler_capsec::codec::{Reader, VecWriter};
use twizzler_capsec::{DecodeError, ObjID, Protections};

use crate::store::{ObjMeta, Object, StoreError};

/// The first four bytes of every object file.
pub const MAGIC: [u8; 4] = *b"TZOB";
/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 1;
/// Flag bit: the object has a `kuid`.
pub const FLAG_HAS_KUID: u16 = 1 << 0;
/// Flag bit: the object is secret (its file has mode 0600).
pub const FLAG_SECRET: u16 = 1 << 1;
/// Length of the header that precedes the data.
pub const HEADER_LEN: usize = 52;
/// Length of the BLAKE3 checksum that follows the data.
pub const CHECKSUM_LEN: usize = 32;
/// Length of the smallest object file (no data).
pub const MIN_FILE_LEN: usize = HEADER_LEN + CHECKSUM_LEN;

const KNOWN_FLAGS: u16 = FLAG_HAS_KUID | FLAG_SECRET;

/// Encodes `obj` in the object-file format (see the [module documentation](super)).
///
/// The default protections are written as they are; an object whose protections have bits
/// that name no right encodes to bytes that [`decode_object`] rejects.
/// [`DirStore`](super::DirStore) refuses to write such an object.
pub fn encode_object(obj: &Object) -> Vec<u8> {
    let mut flags = 0;
    if obj.meta.kuid.is_some() {
        flags |= FLAG_HAS_KUID;
    }
    if obj.meta.secret {
        flags |= FLAG_SECRET;
    }
    let kuid = obj.meta.kuid.unwrap_or_default();
    // usize is at most 64 bits on every supported target, so this never truncates.
    let data_len = obj.data.len() as u64;

    let mut w = VecWriter::with_capacity(MIN_FILE_LEN.saturating_add(obj.data.len()));
    w.bytes(&MAGIC)
        .u16(FORMAT_VERSION)
        .u16(flags)
        .u128(obj.id.raw())
        .u128(kuid.raw())
        .u16(obj.meta.default_prots.bits())
        .u16(0)
        .u64(data_len)
        .bytes(&obj.data);
    let mut out = w.into_vec();
    let sum = blake3::hash(&out);
    out.extend_from_slice(sum.as_bytes());
    out
}

/// Decodes an object file that should hold object `id` (the id its name says).
///
/// Total: any byte string gives the object or [`StoreError::Corrupt`] naming `id` and what is
/// wrong ([`ObjectFileError`]'s message), never a panic. Accepts exactly the outputs of
/// [`encode_object`] for objects whose id is `id`.
pub fn decode_object(id: ObjID, bytes: &[u8]) -> Result<Object, StoreError> {
    decode_object_file(id, bytes).map_err(|e| StoreError::Corrupt {
        id,
        why: e.to_string(),
    })
}

/// Why bytes are not the object file of an object (see the [module documentation](super)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ObjectFileError {
    /// The file does not start with `TZOB` (as far as it goes).
    BadMagic {
        /// The first bytes, up to four.
        found: [u8; 4],
        /// How many of them there are.
        len: usize,
    },
    /// Shorter than a header and checksum.
    TooShort(usize),
    /// A format version this build does not read.
    UnsupportedVersion(u16),
    /// A data length whose file would not fit a `u64`.
    DataLengthOverflow(u64),
    /// Shorter than the header says.
    Truncated {
        /// The file's length.
        len: usize,
        /// What the header says.
        expected: u64,
    },
    /// Longer than the header says.
    TrailingBytes {
        /// The file's length.
        len: usize,
        /// What the header says.
        expected: u64,
    },
    /// The checksum does not match.
    Checksum,
    /// Flag bits that name nothing.
    UnknownFlags(u16),
    /// The file holds another object than its name says.
    WrongObject(ObjID),
    /// A kuid without the flag that says there is one.
    KuidWithoutFlag(ObjID),
    /// Default protections with bits that name no right.
    UnknownProtections(u16),
    /// The reserved field is not zero.
    Reserved(u16),
}

impl std::fmt::Display for ObjectFileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::BadMagic { found, len } => write!(
                f,
                "bad magic {}, expected \"TZOB\"",
                found.get(..*len).unwrap_or(found).escape_ascii()
            ),
            Self::TooShort(len) => write!(f, "truncated: {len} of at least {MIN_FILE_LEN} bytes"),
            Self::UnsupportedVersion(v) => write!(
                f,
                "unsupported format version {v} (this build reads {FORMAT_VERSION})"
            ),
            Self::DataLengthOverflow(n) => write!(f, "data length {n} is impossibly large"),
            Self::Truncated { len, expected } => {
                write!(f, "truncated: {len} of {expected} bytes")
            }
            Self::TrailingBytes { len, expected } => write!(
                f,
                "trailing bytes: {len} bytes where the header says {expected}"
            ),
            Self::Checksum => f.write_str("checksum mismatch"),
            Self::UnknownFlags(bits) => write!(f, "unknown flag bits {bits:#06x}"),
            Self::WrongObject(found) => write!(
                f,
                "the file holds object {found}, not the object its name says"
            ),
            Self::KuidWithoutFlag(kuid) => {
                write!(f, "kuid {kuid} is set but the has-kuid flag is clear")
            }
            Self::UnknownProtections(bits) => write!(
                f,
                "default protections {bits:#06x} have bits that name no right"
            ),
            Self::Reserved(v) => write!(f, "reserved field is {v:#06x}, not 0"),
        }
    }
}

impl std::error::Error for ObjectFileError {}

/// [`decode_object`] with its typed error. It checks, in this order, the magic, the version,
/// the length, the checksum and then every field.
pub fn decode_object_file(id: ObjID, bytes: &[u8]) -> Result<Object, ObjectFileError> {
    let len = bytes.len();

    // Compare as much of the magic as there is, so a short file of another kind is not
    // called a truncated object file.
    if bytes.iter().zip(MAGIC.iter()).any(|(a, b)| a != b) {
        let mut found = [0u8; 4];
        let shown = bytes.get(..MAGIC.len()).unwrap_or(bytes);
        for (dst, src) in found.iter_mut().zip(shown) {
            *dst = *src;
        }
        return Err(ObjectFileError::BadMagic {
            found,
            len: shown.len(),
        });
    }
    let Ok(header) = Header::parse(bytes) else {
        return Err(ObjectFileError::TooShort(len));
    };
    if header.version != FORMAT_VERSION {
        return Err(ObjectFileError::UnsupportedVersion(header.version));
    }

    let expected = (HEADER_LEN as u64)
        .checked_add(header.data_len)
        .and_then(|n| n.checked_add(CHECKSUM_LEN as u64))
        .ok_or(ObjectFileError::DataLengthOverflow(header.data_len))?;
    let actual = len as u64;
    if actual < expected {
        return Err(ObjectFileError::Truncated { len, expected });
    }
    if actual > expected {
        return Err(ObjectFileError::TrailingBytes { len, expected });
    }

    let Some((body, sum)) = bytes.split_last_chunk::<CHECKSUM_LEN>() else {
        // Unreachable: the length check above guarantees the checksum is there.
        return Err(ObjectFileError::Truncated { len, expected });
    };
    if blake3::hash(body) != blake3::Hash::from_bytes(*sum) {
        return Err(ObjectFileError::Checksum);
    }

    let unknown = header.flags & !KNOWN_FLAGS;
    if unknown != 0 {
        return Err(ObjectFileError::UnknownFlags(unknown));
    }
    if header.id != id {
        return Err(ObjectFileError::WrongObject(header.id));
    }
    let kuid = if header.flags & FLAG_HAS_KUID != 0 {
        Some(header.kuid)
    } else if header.kuid != ObjID::default() {
        return Err(ObjectFileError::KuidWithoutFlag(header.kuid));
    } else {
        None
    };
    let default_prots = Protections::from_raw(header.prots)
        .ok_or(ObjectFileError::UnknownProtections(header.prots))?;
    if header.reserved != 0 {
        return Err(ObjectFileError::Reserved(header.reserved));
    }
    let data = body.get(HEADER_LEN..).unwrap_or_default().to_vec();

    Ok(Object {
        id,
        meta: ObjMeta {
            kuid,
            default_prots,
            secret: header.flags & FLAG_SECRET != 0,
        },
        data,
    })
}

/// The fixed-size header, as read, before any field is checked.
struct Header {
    version: u16,
    flags: u16,
    id: ObjID,
    kuid: ObjID,
    prots: u16,
    reserved: u16,
    data_len: u64,
}

impl Header {
    /// Reads the header's fields from the start of `bytes`, after the magic (which the
    /// caller has checked); the bytes after the header are left alone.
    fn parse(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes.get(..HEADER_LEN).unwrap_or(bytes));
        let _magic: [u8; 4] = r.array()?;
        let header = Self {
            version: r.u16()?,
            flags: r.u16()?,
            id: ObjID::new(r.u128()?),
            kuid: ObjID::new(r.u128()?),
            prots: r.u16()?,
            reserved: r.u16()?,
            data_len: r.u64()?,
        };
        r.finish()?;
        Ok(header)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_fields_add_up_to_header_len() {
        assert_eq!(4 + 2 + 2 + 16 + 16 + 2 + 2 + 8, HEADER_LEN);
    }
}
