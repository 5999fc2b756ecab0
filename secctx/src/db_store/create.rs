//! Creating a store: its directory, and a new database file that gets its name only once it
//! is complete, so that an interrupted creation leaves nothing that cannot be opened.

use std::fmt::Display;
use std::fs;
use std::path::Path;

use redb::backends::FileBackend;

use super::layout::{self, FORMAT_VERSION, INFO, NAMES, OBJECTS, PAGES};
use super::{DB_FILE, builder, db_error, file};
use crate::store::StoreError;

/// The name a process creates a new database under before it is complete.
fn creation_name(pid: u32) -> String {
    format!(".{DB_FILE}.{pid}.new")
}

/// Creates the database file at `path`, complete (tables and format version) before it gets
/// its name: under a temporary name (mode 0600), initialised, fsynced, then linked to `path`,
/// which fails if another process got there first (then theirs is kept). A process killed
/// half-way leaves only a temporary file, which the next open removes; never a `path` that
/// cannot be opened (redb writes its magic number last, and a file without it is refused for
/// good).
pub(super) fn create_database(dir: &Path, path: &Path) -> Result<(), StoreError> {
    let tmp = dir.join(creation_name(std::process::id()));
    let io = |op: &'static str, p: &Path| {
        let p = p.to_owned();
        move |source| StoreError::Io {
            id: None,
            path: p,
            op,
            source,
        }
    };
    // A file left by an earlier process with this pid, or anything planted under the name,
    // goes; the new file is created, never opened (no link followed, no FIFO waited on).
    let _ = fs::remove_file(&tmp);
    let file = file::create_new(&tmp).map_err(io("create the database", &tmp))?;
    let init = || -> Result<(), StoreError> {
        let synced = file.try_clone().map_err(io("create the database", &tmp))?;
        let backend = FileBackend::new(file).map_err(|e| db_error(&tmp, "create", e))?;
        let db = builder()
            .create_with_backend(backend)
            .map_err(|e| db_error(&tmp, "create", e))?;
        let e = |e: &dyn Display| db_error(&tmp, "initialise", e);
        let w = db.begin_write().map_err(|x| e(&x))?;
        {
            w.open_table(INFO)
                .map_err(|x| e(&x))?
                .insert(layout::FORMAT_KEY, FORMAT_VERSION)
                .map_err(|x| e(&x))?;
            // The other tables too, so that readers find them.
            w.open_table(OBJECTS).map_err(|x| e(&x))?;
            w.open_table(PAGES).map_err(|x| e(&x))?;
            w.open_table(NAMES).map_err(|x| e(&x))?;
        }
        w.commit().map_err(|x| e(&x))?;
        drop(db);
        synced.sync_all().map_err(io("sync the database", &tmp))
    };
    let result = init().and_then(|()| match fs::hard_link(&tmp, path) {
        Ok(()) => Ok(()),
        // Another process created it meanwhile: use theirs (the open that follows refuses
        // anything there that is not a regular file).
        Err(_) if file::exists(path).unwrap_or(false) => Ok(()),
        Err(source) => Err(StoreError::Io {
            id: None,
            path: path.to_owned(),
            op: "name the new database",
            source,
        }),
    });
    let _ = fs::remove_file(&tmp);
    #[cfg(unix)]
    if result.is_ok() {
        let _ = fs::File::open(dir).and_then(|d| d.sync_all());
    }
    result
}

/// Removes what interrupted creations left (see [`create_database`]). Called once the
/// database exists: a creation still in progress elsewhere then finds its file gone, and uses
/// the database that exists.
pub(super) fn remove_stale_creations(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let prefix = format!(".{DB_FILE}.");
    for e in entries.flatten() {
        let name = e.file_name();
        if let Some(n) = name.to_str()
            && n.starts_with(&prefix)
            && n.ends_with(".new")
        {
            let _ = fs::remove_file(e.path());
        }
    }
}

pub(super) fn create_dir(dir: &Path) -> std::io::Result<()> {
    let mut b = fs::DirBuilder::new();
    b.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
    b.create(dir)
}
