//! Opening the database file: a regular file only, without blocking and without following a
//! symbolic link.
//!
//! The store's directory is not trusted to hold what it should: a FIFO named `store.redb`
//! would block a reader's `open(2)` until some writer came (for ever), a device could do
//! anything on open, and a symbolic link would take the store's reads and writes somewhere
//! else. So the path is looked at first (`lstat`, which opens nothing), then opened with
//! `O_NOFOLLOW | O_NONBLOCK | O_NOCTTY`, and then what was opened is checked again (`fstat`):
//! if the path was replaced between the look and the open, the open still cannot block or
//! follow a link, and the check on the open file decides. `O_NONBLOCK` stays set on the
//! regular file that is kept; Linux (and every Unix we know of) ignores it for regular files.

use std::fs::{self, File, FileType, OpenOptions};
use std::io;
use std::path::Path;

use super::db_error;
use crate::store::StoreError;

/// Whether the database is opened for reading only, or for reading and writing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Access {
    /// `O_RDONLY`.
    Read,
    /// `O_RDWR`.
    ReadWrite,
}

/// Whether anything at all is at `path`: a regular file, a symbolic link (dangling or not),
/// anything else.
pub(super) fn exists(path: &Path) -> Result<bool, StoreError> {
    match fs::symlink_metadata(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(StoreError::Io {
            id: None,
            path: path.to_owned(),
            op: "inspect the database",
            source,
        }),
    }
}

/// Opens the existing database file at `path`, refusing anything that is not a regular file
/// (see the module documentation). A missing file is a [`StoreError::Database`] naming `path`.
pub(super) fn open(path: &Path, access: Access) -> Result<File, StoreError> {
    open_racing(path, access, || {})
}

/// [`open`], running `between` after the first look and before the open: where another
/// process may swap the file (tests swap it there).
fn open_racing(path: &Path, access: Access, between: impl FnOnce()) -> Result<File, StoreError> {
    // A first look, which opens nothing: a FIFO or a device is refused before anything
    // could happen to it.
    match fs::symlink_metadata(path) {
        Ok(m) => refuse_irregular(path, m.file_type())?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(missing(path)),
        Err(source) => {
            return Err(StoreError::Io {
                id: None,
                path: path.to_owned(),
                op: "inspect the database",
                source,
            });
        }
    }
    between();
    let mut opts = OpenOptions::new();
    opts.read(true).write(access == Access::ReadWrite);
    untrusting(&mut opts);
    let file = opts
        .open(path)
        .map_err(|source| match source.raw_os_error() {
            Some(e) if e == ELOOP => not_regular(path, "a symbolic link"),
            _ if source.kind() == io::ErrorKind::NotFound => missing(path),
            _ => StoreError::Io {
                id: None,
                path: path.to_owned(),
                op: "open the database",
                source,
            },
        })?;
    // The check that decides: on the file that was opened, whatever the path names now.
    let m = file.metadata().map_err(|source| StoreError::Io {
        id: None,
        path: path.to_owned(),
        op: "inspect the database",
        source,
    })?;
    refuse_irregular(path, m.file_type())?;
    Ok(file)
}

/// Creates a new, empty database file at `path` (mode 0600), which must not exist: nothing
/// there is followed or reused.
pub(super) fn create_new(path: &Path) -> io::Result<File> {
    let mut opts = OpenOptions::new();
    opts.read(true).write(true).create_new(true);
    untrusting(&mut opts);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    opts.open(path)
}

/// Sets the flags every open of the database file uses: `O_NOFOLLOW`, `O_NONBLOCK`,
/// `O_NOCTTY` (a no-op elsewhere than Unix).
fn untrusting(opts: &mut OpenOptions) {
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::custom_flags(
        opts,
        libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY,
    );
    #[cfg(not(unix))]
    let _ = opts;
}

/// `ELOOP`: what opening a symbolic link with `O_NOFOLLOW` fails with.
#[cfg(unix)]
const ELOOP: i32 = libc::ELOOP;
#[cfg(not(unix))]
const ELOOP: i32 = -1;

fn refuse_irregular(path: &Path, t: FileType) -> Result<(), StoreError> {
    if t.is_file() {
        Ok(())
    } else {
        Err(not_regular(path, kind(t)))
    }
}

/// What a file that is not a regular file is, in words.
fn kind(t: FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if t.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if t.is_socket() {
            return "a socket";
        }
        if t.is_char_device() {
            return "a character device";
        }
        if t.is_block_device() {
            return "a block device";
        }
    }
    if t.is_dir() {
        "a directory"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "of an unknown kind"
    }
}

fn not_regular(path: &Path, kind: &str) -> StoreError {
    let why = if kind == "a symbolic link" {
        "it is a symbolic link, which a store never follows: the database must be a regular file (to keep a store elsewhere, name or link its directory)".to_owned()
    } else {
        format!("it is {kind}, not a regular file")
    };
    db_error(path, "open", why)
}

fn missing(path: &Path) -> StoreError {
    db_error(
        path,
        "open",
        "there is no store here (only a command that writes creates one)",
    )
}

#[cfg(test)]
#[cfg(unix)]
mod tests {
    use super::*;

    /// A scratch directory holding a regular file `db`, removed when dropped.
    struct Scratch(std::path::PathBuf);

    impl Scratch {
        fn new(tag: &str) -> Self {
            let d = std::env::temp_dir().join(format!("secctx-file-{}-{tag}", std::process::id()));
            let _ = fs::remove_dir_all(&d);
            fs::create_dir_all(&d).expect("mkdir");
            fs::write(d.join("db"), b"a regular file").expect("write");
            Self(d)
        }

        fn db(&self) -> std::path::PathBuf {
            self.0.join("db")
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    fn refused_as(e: StoreError, kind: &str) {
        assert!(
            matches!(e, StoreError::Database { .. }) && e.to_string().contains(kind),
            "{kind}: {e}"
        );
    }

    /// The race the first look cannot see: the regular file it saw is swapped for a FIFO
    /// before the open. The open does not block (`O_NONBLOCK`) and the check on the open file
    /// refuses it, for reading and for writing.
    #[test]
    fn a_fifo_swapped_in_after_the_look_is_refused_without_blocking() {
        for access in [Access::Read, Access::ReadWrite] {
            let s = Scratch::new(&format!("fifo-{access:?}"));
            let db = s.db();
            // On another thread, with a bounded wait: an open that blocks fails the test
            // (after a writer is opened to release it) instead of hanging it.
            let (tx, rx) = std::sync::mpsc::channel();
            let path = db.clone();
            std::thread::spawn(move || {
                let r = open_racing(&path, access, || {
                    fs::remove_file(&path).expect("remove");
                    let st = std::process::Command::new("mkfifo").arg(&path).status();
                    assert!(st.expect("mkfifo").success());
                });
                let _ = tx.send(r.map(drop));
            });
            let Ok(r) = rx.recv_timeout(std::time::Duration::from_secs(60)) else {
                let _release = OpenOptions::new().write(true).open(&db);
                panic!("opening a FIFO blocked ({access:?})");
            };
            refused_as(r.expect_err("opened a FIFO"), "FIFO");
        }
    }

    /// A symbolic link swapped in after the look is not followed (`O_NOFOLLOW`).
    #[test]
    fn a_symlink_swapped_in_after_the_look_is_not_followed() {
        let s = Scratch::new("symlink");
        let db = s.db();
        let target = s.0.join("elsewhere");
        fs::write(&target, b"elsewhere").expect("write");
        let e = open_racing(&db, Access::ReadWrite, || {
            fs::remove_file(&db).expect("remove");
            std::os::unix::fs::symlink(&target, &db).expect("symlink");
        })
        .expect_err("followed a symlink");
        refused_as(e, "symbolic link");
    }

    /// A directory swapped in after the look: refused on the open file's type. Without a
    /// swap, the regular file opens.
    #[test]
    fn a_directory_swapped_in_after_the_look_is_refused() {
        let s = Scratch::new("dir");
        let db = s.db();
        let e = open_racing(&db, Access::Read, || {
            fs::remove_file(&db).expect("remove");
            fs::create_dir(&db).expect("mkdir");
        })
        .expect_err("opened a directory");
        refused_as(e, "directory");
        let s = Scratch::new("plain");
        open(&s.db(), Access::ReadWrite).expect("a regular file opens");
    }
}
