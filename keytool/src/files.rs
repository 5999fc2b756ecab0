//! Output files written whole or not at all ([`secctx::out_file`], in keytool's words), and
//! record files.

use std::fs;
use std::path::Path;

use secctx::out_file::{self, OutFileError};
use twizzler_capsec::{Cap, Del, Record};

use crate::error::{Error, Result, io};
use crate::fail;

/// File mode of public output files.
pub(crate) const PUBLIC: u32 = 0o644;
/// File mode of secret output files.
pub(crate) const SECRET: u32 = 0o600;

/// keytool's words for an output file that was not written.
fn out_error(e: OutFileError) -> Error {
    match e {
        OutFileError::Exists(path) => fail!(
            "{} already exists (use --force to replace it)",
            path.display()
        ),
        OutFileError::Io { op, path, source } => io(op, &path, source),
        other => fail!("{other}"),
    }
}

/// Refuses an output path that exists, unless `force`: checked before any work is done, so a
/// command fails fast instead of after signing or asking for a passphrase.
pub(crate) fn refuse_existing(path: &Path, force: bool) -> Result<()> {
    out_file::refuse_existing(path, force).map_err(out_error)
}

/// Writes `bytes` to `path` atomically with `mode` ([`out_file::write_new`]); refuses to
/// replace an existing file unless `force`.
pub(crate) fn write_new(path: &Path, bytes: &[u8], mode: u32, force: bool) -> Result<()> {
    out_file::write_new(path, bytes, mode, force).map_err(out_error)
}

/// Reads a file, naming it in the error.
pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| io("read", path, e))
}

/// Decodes a record file: a capability (`TCAP`) or a delegation (`TDEL`) in its canonical
/// encoding.
pub(crate) fn decode_record(path: &Path, bytes: &[u8]) -> Result<Record> {
    let what = |e: twizzler_capsec::DecodeError| fail!("{}: {e}", path.display());
    match bytes.get(..4) {
        Some(b"TCAP") => Cap::decode(bytes).map(Record::Cap).map_err(what),
        Some(b"TDEL") => Del::decode(bytes).map(Record::Del).map_err(what),
        _ if bytes.len() < 4 => Err(fail!(
            "{}: truncated: {} bytes is not a capability or a delegation",
            path.display(),
            bytes.len()
        )),
        _ => Err(fail!(
            "{}: not a capability or delegation file (bad magic)",
            path.display()
        )),
    }
}

/// Reads and decodes a record file.
pub(crate) fn read_record(path: &Path) -> Result<Record> {
    decode_record(path, &read(path)?)
}

/// The canonical encoding of a record.
pub(crate) fn encode_record(r: &Record) -> Vec<u8> {
    match r {
        Record::Cap(c) => c.encode().to_vec(),
        Record::Del(d) => d.encode().to_vec(),
    }
}
