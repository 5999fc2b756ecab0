//! Output files written whole or not at all (key files, records, certificates).
//!
//! A file is written to a temporary file in the same directory (created with its final mode,
//! fsynced), then moved into place: without `force` with a hard link, which fails if the name
//! exists, so an existing file is never replaced, not even by a racing writer; with `force`
//! with a rename over it. The directory is synced after. A failure removes the temporary file.
//!
//! ```
//! # let dir = std::env::temp_dir().join(format!("secctx-out-file-doc-{}", std::process::id()));
//! # std::fs::create_dir_all(&dir).unwrap();
//! use secctx::out_file::{OutFileError, write_new};
//! let path = dir.join("key.pem");
//! write_new(&path, b"secret", 0o600, false).unwrap();
//! assert!(matches!(write_new(&path, b"other", 0o600, false), Err(OutFileError::Exists(_))));
//! assert_eq!(std::fs::read(&path).unwrap(), b"secret");
//! # std::fs::remove_dir_all(&dir).unwrap();
//! ```

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

/// Why an output file was not written.
#[derive(Debug)]
#[non_exhaustive]
pub enum OutFileError {
    /// The file exists and `force` was not given.
    Exists(PathBuf),
    /// The path names no file.
    NoName(PathBuf),
    /// A file operation failed.
    Io {
        /// What was being done (`create`, `write`, `replace`).
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

impl fmt::Display for OutFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exists(p) => write!(f, "{} already exists", p.display()),
            Self::NoName(p) => write!(f, "{} is not a file name", p.display()),
            Self::Io { op, path, source } => write!(f, "{op} {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for OutFileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

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

fn io<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> OutFileError + 'a {
    move |source| OutFileError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// Whether `path` may be written: it does not exist, or `force`.
pub fn refuse_existing(path: &Path, force: bool) -> Result<(), OutFileError> {
    if !force && path.symlink_metadata().is_ok() {
        return Err(OutFileError::Exists(path.to_owned()));
    }
    Ok(())
}

/// Writes `bytes` to `path` atomically with `mode`; refuses to replace an existing file
/// unless `force`.
pub fn write_new(path: &Path, bytes: &[u8], mode: u32, force: bool) -> Result<(), OutFileError> {
    refuse_existing(path, force)?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| OutFileError::NoName(path.to_owned()))?;
    let (mut file, temp) = create_temp(&dir, name, mode)?;
    let tpath = temp.0.clone().unwrap_or_default();
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(io("write", &tpath))?;
    drop(file);
    if force {
        fs::rename(&tpath, path).map_err(io("replace", path))?;
    } else {
        match fs::hard_link(&tpath, path) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                return Err(OutFileError::Exists(path.to_owned()));
            }
            // No hard links here (some file systems): fall back to a rename after the check
            // above.
            Err(_) => fs::rename(&tpath, path).map_err(io("create", path))?,
        }
    }
    // Renamed: the temporary name is gone; linked: removing it leaves the new name.
    drop(temp);
    if let Ok(d) = File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

fn create_temp(
    dir: &Path,
    name: &std::ffi::OsStr,
    mode: u32,
) -> Result<(File, Temp), OutFileError> {
    let mut last = None;
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
            Err(e) if e.kind() == ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(io("create", &tpath)(e)),
        }
    }
    Err(OutFileError::Io {
        op: "find a free temporary file name in",
        path: dir.to_owned(),
        source: last.unwrap_or_else(|| std::io::Error::from(ErrorKind::AlreadyExists)),
    })
}
