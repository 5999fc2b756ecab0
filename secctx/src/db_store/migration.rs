//! Migrating a store of the old one-file-per-object format ([`crate::DirStore`]) into a
//! database store.

use super::DbStore;
use crate::store::{ObjectStore, StoreError};

/// Copies every object of the directory store at `from` into `to`, in one transaction, and
/// returns how many it copied; `progress` hears (objects done, objects in all) after each.
/// Objects already in `to` with the same bytes and metadata are skipped (so a migration that
/// was interrupted can be run again); one that differs is an error, and then nothing is
/// copied. `from` is only read, one object at a time.
pub fn migrate(
    from: &crate::DirStore,
    to: &DbStore,
    mut progress: impl FnMut(usize, usize),
) -> Result<usize, StoreError> {
    let ids = from.list()?;
    to.transact(|tx| {
        let mut copied = 0;
        for (done, &id) in ids.iter().enumerate() {
            let obj = from.get(id)?;
            match tx.get(id) {
                Ok(existing) if existing == obj => {}
                Ok(_) => {
                    return Err(StoreError::Rejected {
                        id,
                        why: "the database store holds a different object with this id".into(),
                    });
                }
                Err(StoreError::NotFound(_)) => {
                    tx.create(&obj)?;
                    copied += 1;
                }
                Err(e) => return Err(e),
            }
            progress(done + 1, ids.len());
        }
        Ok(copied)
    })
}
