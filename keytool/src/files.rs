//! Output files written whole or not at all, and record files.
//!
//! A file is written to a temporary file in the same directory (created with its final mode,
//! fsynced), then moved into place: without `--force` with a hard link, which fails if the name
//! exists, so an existing file is never replaced, not even by a racing writer; with `--force`
//! with a rename over it. A failure removes the temporary file.

use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use twizzler_capsec::{Cap, Del, Record};

use crate::error::{Result, io};
use crate::fail;

/// File mode of public output files.
pub const PUBLIC: u32 = 0o644;
/// File mode of secret output files.
pub const SECRET: u32 = 0o600;

static COUNTER: AtomicU32 = AtomicU32::new(0);

/// Removes the temporary file unless disarmed.
struct Temp(Option<PathBuf>);

impl Drop for Temp {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = fs::remove_file(p);
        }
    }
}

/// Refuses an output path that exists, unless `force`: checked before any work is done, so a
/// command fails fast instead of after signing or asking for a passphrase.
pub fn refuse_existing(path: &Path, force: bool) -> Result<()> {
    if !force && path.symlink_metadata().is_ok() {
        return Err(exists(path));
    }
    Ok(())
}

fn exists(path: &Path) -> crate::error::Error {
    fail!(
        "{} already exists (use --force to replace it)",
        path.display()
    )
}

/// Writes `bytes` to `path` atomically with `mode`; refuses to replace an existing file
/// unless `force`.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32, force: bool) -> Result<()> {
    refuse_existing(path, force)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| fail!("{} is not a file name", path.display()))?;
    let (mut file, temp) = create_temp(&dir, name, mode)?;
    let tpath = temp.0.clone().unwrap_or_default();
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| io("write", &tpath, e))?;
    drop(file);
    if force {
        fs::rename(&tpath, path).map_err(|e| io("replace", path, e))?;
    } else {
        match fs::hard_link(&tpath, path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => return Err(exists(path)),
            // No hard links here (some file systems): fall back to a rename after the check
            // above.
            Err(_) => fs::rename(&tpath, path).map_err(|e| io("create", path, e))?,
        }
    }
    // Renamed: the temporary name is gone; linked: removing it leaves the new name.
    drop(temp);
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn create_temp(dir: &Path, name: &std::ffi::OsStr, mode: u32) -> Result<(File, Temp)> {
    for _ in 0..64 {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut tname = std::ffi::OsString::from(".");
        tname.push(name);
        tname.push(format!(".{}.{n}.tmp", std::process::id()));
        let tpath = dir.join(tname);
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(mode);
        }
        #[cfg(not(unix))]
        let _ = mode;
        match opts.open(&tpath) {
            Ok(f) => return Ok((f, Temp(Some(tpath)))),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("create", &tpath, e)),
        }
    }
    Err(fail!(
        "could not find a free temporary file name in {}",
        dir.display()
    ))
}

/// Reads a file, naming it in the error.
pub fn read(path: &Path) -> Result<Vec<u8>> {
    fs::read(path).map_err(|e| io("read", path, e))
}

/// Decodes a record file: a capability (`TCAP`) or a delegation (`TDEL`) in its canonical
/// encoding.
pub fn decode_record(path: &Path, bytes: &[u8]) -> Result<Record> {
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
pub fn read_record(path: &Path) -> Result<Record> {
    decode_record(path, &read(path)?)
}

/// The canonical encoding of a record.
pub fn encode_record(r: &Record) -> Vec<u8> {
    match r {
        Record::Cap(c) => c.encode().to_vec(),
        Record::Del(d) => d.encode().to_vec(),
    }
}
