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
        out[..8].copy_from_slice(&self.node.to_le_bytes());
        out[8..].copy_from_slice(&self.version.to_le_bytes());
        out
    }

    /// Decodes the wire encoding; `None` unless `bytes` is exactly [`Self::ENCODED_LEN`] long.
    pub fn decode(bytes: &[u8]) -> Option<Self> {
        let bytes: &[u8; Self::ENCODED_LEN] = bytes.try_into().ok()?;
        let (node, version) = bytes.split_at(8);
        Some(Self {
            node: u64::from_le_bytes(node.try_into().ok()?),
            version: u64::from_le_bytes(version.try_into().ok()?),
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
pub const VERSION_FILE_LEN: usize = 24 + 32;

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
        why: String,
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
    out[0..4].copy_from_slice(&VERSION_FILE_MAGIC);
    out[4..6].copy_from_slice(&VERSION_FILE_FORMAT.to_le_bytes());
    out[8..16].copy_from_slice(&node.to_le_bytes());
    out[16..24].copy_from_slice(&version.to_le_bytes());
    let sum = crypto::version_file_checksum(&out[..24]);
    out[24..].copy_from_slice(&sum);
    out
}

/// Decodes a version file's content: `(node, version)`, or what is wrong with it.
pub fn decode_version_file(bytes: &[u8]) -> Result<(u64, u64), String> {
    let bytes: &[u8; VERSION_FILE_LEN] = bytes
        .try_into()
        .map_err(|_| format!("{} bytes, expected {VERSION_FILE_LEN}", bytes.len()))?;
    let (body, sum) = bytes.split_at(24);
    let u64_at = |at: usize| -> u64 {
        let mut b = [0u8; 8];
        if let Some(src) = body.get(at..at + 8) {
            b.copy_from_slice(src);
        }
        u64::from_le_bytes(b)
    };
    if body.get(0..4) != Some(&VERSION_FILE_MAGIC[..]) {
        return Err("bad magic".into());
    }
    if !crypto::version_file_checksum_matches(body, sum) {
        return Err("checksum mismatch (torn or damaged write)".into());
    }
    if body.get(4..8) != Some(&[1, 0, 0, 0][..]) {
        return Err("unsupported format version or non-zero reserved field".into());
    }
    let (node, version) = (u64_at(8), u64_at(16));
    if version == 0 {
        return Err("controller version 0 is never written".into());
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
        assert_eq!(ControllerId::decode(&id.encode()), Some(id));
        assert_eq!(ControllerId::decode(&[0; 15]), None);
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
