//! Controller identity and its durable version.
//!
//! A node's controller is named by [`ControllerId`] `(node, version)`. The version is bumped at
//! every start and made durable *before* the node serves, so every token the node issued in an
//! earlier life names an older version and is rejected ([`InvokeError::StaleController`]).
//!
//! # The version file
//!
//! [`VersionFile::open_and_bump`] keeps the version in one small file (little-endian,
//! [`VERSION_FILE_LEN`] bytes):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 4 | magic `DBCV` |
//! | 4 | 2 | format version (1) |
//! | 6 | 2 | reserved, 0 |
//! | 8 | 8 | node id |
//! | 16 | 8 | controller version (≥ 1) |
//! | 24 | 32 | BLAKE3 (derive-key mode, own context) of bytes 0..24 |
//!
//! Writing: the new content goes to `<file>.tmp` (created or truncated), which is fsynced,
//! renamed over `<file>`, and then the directory is fsynced; only then does `open_and_bump`
//! return. A crash at any point leaves either the old file or the new one in place (rename is
//! atomic), so the version read at the next start is one this node already made durable, or
//! the one it was about to write and never served with. Either way the next version is new.
//! A leftover `<file>.tmp` is simply overwritten.
//!
//! Reading never guesses: a file that is short, long, has a bad magic, an unknown format, a
//! bad checksum, version 0 or another node's id is an error naming the file
//! ([`VersionFileError::Corrupt`], [`VersionFileError::NodeMismatch`]); it is never reset to
//! 0, because that would let versions go backwards. An operator who really wants to start over
//! must delete the file, knowingly. A *missing* file means the first start (version 1).
//!
//! `<file>.lock` is locked exclusively ([`std::fs::File::try_lock`]) for as long as the
//! returned [`VersionFile`] lives, so two processes cannot run the same controller from the
//! same file (the second gets [`VersionFileError::Locked`]).
//!
//! [`InvokeError::StaleController`]: crate::InvokeError::StaleController

use std::ffi::OsString;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use twizzler_capsec::DecodeError;
use twizzler_capsec::codec::{Reader, Writer};

use crate::crypto;

/// A controller: a node id and the version of the node's current life.
///
/// Encoding ([`ControllerId::ENCODED_LEN`] bytes, no magic or version: it is a field of the
/// token and the upgrade notice, and a message field on the wire):
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 8 | node, little-endian |
/// | 8 | 8 | controller version, little-endian |
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ControllerId {
    /// The node, as the cluster names it.
    pub node: u64,
    /// The controller version: bumped at every start of the node, never reused.
    pub version: u64,
}

impl ControllerId {
    /// Encoded length: node and version, little-endian.
    pub const ENCODED_LEN: usize = 16;

    /// A controller id.
    pub const fn new(node: u64, version: u64) -> Self {
        Self { node, version }
    }

    /// The wire encoding: node then version, each a little-endian `u64`.
    pub fn encode(&self) -> [u8; Self::ENCODED_LEN] {
        let mut out = [0u8; Self::ENCODED_LEN];
        Writer::new(&mut out).u64(self.node).u64(self.version);
        out
    }

    /// Decodes the wire encoding: exactly [`Self::ENCODED_LEN`] bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(bytes);
        let id = Self::decode_from(&mut r)?;
        r.finish()?;
        Ok(id)
    }

    /// Reads the encoding from `r`, leaving what follows it: for the formats that hold a
    /// controller id as a field.
    pub fn decode_from(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            node: r.u64()?,
            version: r.u64()?,
        })
    }
}

impl fmt::Display for ControllerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} v{}", self.node, self.version)
    }
}

/// Magic of the version file (`"DBCV"`).
pub const VERSION_FILE_MAGIC: [u8; 4] = *b"DBCV";
/// Format version of the version file.
pub const VERSION_FILE_FORMAT: u16 = 1;
/// Length of the version file.
pub const VERSION_FILE_LEN: usize = BODY_LEN + 32;
/// Length of the checksummed part of the version file.
const BODY_LEN: usize = 24;

/// Why bytes are not a version file (see the [module docs](self)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum VersionFileDecodeError {
    /// Not [`VERSION_FILE_LEN`] bytes.
    Length(usize),
    /// Not a version file (bad magic).
    BadMagic,
    /// The checksum does not match: a torn or damaged write.
    Checksum,
    /// A format version this build does not read.
    UnsupportedFormat(u16),
    /// The reserved field is not zero.
    Reserved(u16),
    /// Controller version 0, which is never written.
    VersionZero,
    /// The bytes do not frame (cannot happen once the length is checked).
    Framing(DecodeError),
}

impl fmt::Display for VersionFileDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Length(n) => write!(f, "{n} bytes, expected {VERSION_FILE_LEN}"),
            Self::BadMagic => f.write_str("bad magic"),
            Self::Checksum => f.write_str("checksum mismatch (torn or damaged write)"),
            Self::UnsupportedFormat(v) => write!(
                f,
                "unsupported format version {v} (this build reads {VERSION_FILE_FORMAT})"
            ),
            Self::Reserved(v) => write!(f, "reserved field is {v:#06x}, not 0"),
            Self::VersionZero => f.write_str("controller version 0 is never written"),
            Self::Framing(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for VersionFileDecodeError {}

impl From<DecodeError> for VersionFileDecodeError {
    fn from(e: DecodeError) -> Self {
        Self::Framing(e)
    }
}

/// Why the controller version could not be read or made durable. Every variant names the file.
#[derive(Debug)]
#[non_exhaustive]
pub enum VersionFileError {
    /// The operating system refused an operation.
    Io {
        /// The path involved.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The file exists but is not a valid version file. It is left as it is: resetting it
    /// would let the version go backwards.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: VersionFileDecodeError,
    },
    /// The file belongs to another node.
    NodeMismatch {
        /// The file.
        path: PathBuf,
        /// The node id in the file.
        found: u64,
        /// The node id of this node.
        expected: u64,
    },
    /// The version space is used up (`u64::MAX` starts).
    Exhausted {
        /// The file.
        path: PathBuf,
    },
    /// Another process holds the file's lock: it runs this controller already.
    Locked {
        /// The lock file.
        path: PathBuf,
    },
}

impl fmt::Display for VersionFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io { path, op, source } => write!(f, "{op} {}: {source}", path.display()),
            Self::Corrupt { path, why } => write!(
                f,
                "controller version file {} is corrupt ({why}); refusing to start, since \
                 resetting it would let the controller version go backwards",
                path.display()
            ),
            Self::NodeMismatch {
                path,
                found,
                expected,
            } => write!(
                f,
                "controller version file {} belongs to node {found}, not node {expected}",
                path.display()
            ),
            Self::Exhausted { path } => write!(
                f,
                "controller version file {}: the controller version space is exhausted",
                path.display()
            ),
            Self::Locked { path } => write!(
                f,
                "{} is locked: another process runs this controller",
                path.display()
            ),
        }
    }
}

impl std::error::Error for VersionFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// The durable controller version of a running node: the version this life serves under,
/// already fsynced, and the lock that keeps a second process off the same file. Keep it alive
/// while the node serves.
#[derive(Debug)]
pub struct VersionFile {
    id: ControllerId,
    path: PathBuf,
    _lock: File,
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name: OsString = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> VersionFileError + 'a {
    move |source| VersionFileError::Io {
        path: path.to_owned(),
        op,
        source,
    }
}

impl VersionFile {
    /// Starts a new life of controller `node` from the version file at `path`: reads the
    /// persisted version (none if the file is missing: first start), increments it, and makes
    /// the new version durable (temp file, fsync, rename, fsync of the directory) before
    /// returning it. See the [module docs](self) for the format and the crash argument.
    pub fn open_and_bump(
        path: impl AsRef<Path>,
        node: u64,
    ) -> Result<VersionFile, VersionFileError> {
        let path = path.as_ref();
        let lock_path = with_suffix(path, ".lock");
        let lock = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&lock_path)
            .map_err(io_err(&lock_path, "open lock file"))?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(fs::TryLockError::WouldBlock) => {
                return Err(VersionFileError::Locked { path: lock_path });
            }
            Err(fs::TryLockError::Error(e)) => return Err(io_err(&lock_path, "lock")(e)),
        }

        let previous = read_version(path, node)?;
        let version = previous
            .checked_add(1)
            .ok_or_else(|| VersionFileError::Exhausted {
                path: path.to_owned(),
            })?;
        write_version(path, node, version)?;
        Ok(VersionFile {
            id: ControllerId { node, version },
            path: path.to_owned(),
            _lock: lock,
        })
    }

    /// The controller this life serves as.
    pub fn controller_id(&self) -> ControllerId {
        self.id
    }

    /// The version file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The encoded content of a version file.
pub fn encode_version_file(node: u64, version: u64) -> [u8; VERSION_FILE_LEN] {
    let mut out = [0u8; VERSION_FILE_LEN];
    let mut body = [0u8; BODY_LEN];
    Writer::new(&mut body)
        .bytes(&VERSION_FILE_MAGIC)
        .u16(VERSION_FILE_FORMAT)
        .u16(0)
        .u64(node)
        .u64(version);
    let sum = crypto::version_file_checksum(&body);
    Writer::new(&mut out).bytes(&body).bytes(&sum);
    out
}

/// Decodes a version file's content: `(node, version)`, or what is wrong with it.
///
/// Checks, in this order: the length, the magic, the checksum, then the fields; so random
/// damage is reported as a checksum mismatch, and a field error means it was written so.
pub fn decode_version_file(bytes: &[u8]) -> Result<(u64, u64), VersionFileDecodeError> {
    if bytes.len() != VERSION_FILE_LEN {
        return Err(VersionFileDecodeError::Length(bytes.len()));
    }
    let mut r = Reader::new(bytes);
    let body: [u8; BODY_LEN] = r.array()?;
    let sum = r.rest();
    let mut r = Reader::new(&body);
    if r.array::<4>()? != VERSION_FILE_MAGIC {
        return Err(VersionFileDecodeError::BadMagic);
    }
    if !crypto::version_file_checksum_matches(&body, sum) {
        return Err(VersionFileDecodeError::Checksum);
    }
    let format = r.u16()?;
    if format != VERSION_FILE_FORMAT {
        return Err(VersionFileDecodeError::UnsupportedFormat(format));
    }
    let reserved = r.u16()?;
    if reserved != 0 {
        return Err(VersionFileDecodeError::Reserved(reserved));
    }
    let (node, version) = (r.u64()?, r.u64()?);
    r.finish()?;
    if version == 0 {
        return Err(VersionFileDecodeError::VersionZero);
    }
    Ok((node, version))
}

/// The persisted version, or 0 when there is no file yet.
fn read_version(path: &Path, node: u64) -> Result<u64, VersionFileError> {
    let mut file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_err(path, "open")(e)),
    };
    // Read at most one byte more than a valid file, so a huge file cannot exhaust memory.
    let mut bytes = Vec::with_capacity(VERSION_FILE_LEN + 1);
    (&mut file)
        .take(VERSION_FILE_LEN as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err(path, "read"))?;
    let (found, version) =
        decode_version_file(&bytes).map_err(|why| VersionFileError::Corrupt {
            path: path.to_owned(),
            why,
        })?;
    if found != node {
        return Err(VersionFileError::NodeMismatch {
            path: path.to_owned(),
            found,
            expected: node,
        });
    }
    Ok(version)
}

fn write_version(path: &Path, node: u64, version: u64) -> Result<(), VersionFileError> {
    let temp = with_suffix(path, ".tmp");
    let bytes = encode_version_file(node, version);
    {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&temp)
            .map_err(io_err(&temp, "create temporary file"))?;
        file.write_all(&bytes)
            .map_err(io_err(&temp, "write temporary file"))?;
        file.sync_all()
            .map_err(io_err(&temp, "fsync temporary file"))?;
    }
    fs::rename(&temp, path).map_err(io_err(path, "rename into place"))?;
    sync_parent(path)
}

/// Makes the rename durable by fsyncing the directory that holds `path`.
fn sync_parent(path: &Path) -> Result<(), VersionFileError> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    #[cfg(unix)]
    {
        let d = File::open(dir).map_err(io_err(dir, "open directory"))?;
        d.sync_all().map_err(io_err(dir, "fsync directory"))?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controller_id_round_trips() {
        let id = ControllerId::new(7, 9);
        assert_eq!(ControllerId::decode(&id.encode()), Ok(id));
        assert!(ControllerId::decode(&[0; 15]).is_err());
        assert!(ControllerId::decode(&[0; 17]).is_err());
    }

    #[test]
    fn file_round_trips_and_rejects_damage() {
        let b = encode_version_file(3, 42);
        assert_eq!(decode_version_file(&b), Ok((3, 42)));
        for i in 0..b.len() {
            let mut d = b;
            d[i] ^= 1;
            assert!(decode_version_file(&d).is_err(), "flip at {i} accepted");
        }
        assert!(decode_version_file(&b[..40]).is_err());
        assert!(decode_version_file(&encode_version_file(3, 0)).is_err());
    }
}
