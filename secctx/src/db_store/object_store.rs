//! [`DbStore`] as an [`ObjectStore`]: transactions, and the reads outside them.

use redb::ReadableTable;
use twizzler_capsec::ObjID;

use super::layout::{NAMES, OBJECTS, PAGES};
use super::txn::DbTxn;
use super::{DbStore, Handle, read};
use crate::store::{ObjInfo, Object, ObjectStore, ReadState, StoreError, Txn};

impl ObjectStore for DbStore {
    fn transact<R, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Txn) -> Result<R, E>,
    ) -> Result<R, E> {
        let Handle::ReadWrite(db) = &*self.db else {
            return Err(self.err("write", "the store was opened read-only").into());
        };
        let w = db.begin_write().map_err(|e| self.err("begin a write", e))?;
        let r = {
            let mut t = DbTxn::open(&self.path, &w)?;
            f(&mut t)?
        };
        // Returning the error drops (aborts) the transaction: nothing it did is kept.
        w.commit().map_err(|e| self.err("commit", e))?;
        Ok(r)
    }

    /// One redb read transaction: no write transaction is begun, nothing is committed, and a
    /// store opened read-only answers too.
    fn read_state<R>(&self, f: impl FnOnce(&mut dyn ReadState) -> R) -> Result<R, StoreError> {
        let r = self.read()?;
        let op = "read";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        let pages = r.open_table(PAGES).map_err(|e| self.err(op, e))?;
        Ok(f(&mut ReadTxnState {
            store: self,
            objects,
            pages,
        }))
    }

    fn get(&self, id: ObjID) -> Result<Object, StoreError> {
        let r = self.read()?;
        let op = "read an object";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        let pages = r.open_table(PAGES).map_err(|e| self.err(op, e))?;
        read::get(&objects, &pages, id).map_err(self.read_err(op))
    }

    fn info(&self, id: ObjID) -> Result<ObjInfo, StoreError> {
        let r = self.read()?;
        let op = "read metadata";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        read::info(&objects, id).map_err(self.read_err(op))
    }

    fn read_at(&self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        let r = self.read()?;
        let op = "read an object";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        let pages = r.open_table(PAGES).map_err(|e| self.err(op, e))?;
        read::read_at(&objects, &pages, id, offset, len).map_err(self.read_err(op))
    }

    fn list(&self) -> Result<Vec<ObjID>, StoreError> {
        let r = self.read()?;
        let op = "list objects";
        let objects = r.open_table(OBJECTS).map_err(|e| self.err(op, e))?;
        objects
            .iter()
            .map_err(|e| self.err(op, e))?
            .map(|e| e.map(|(k, _)| ObjID::new(k.value())))
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(op, e))
    }

    fn name(&self, name: &str) -> Result<Option<ObjID>, StoreError> {
        let r = self.read()?;
        let op = "read a name";
        let names = r.open_table(NAMES).map_err(|e| self.err(op, e))?;
        Ok(names
            .get(name)
            .map_err(|e| self.err(op, e))?
            .map(|v| ObjID::new(v.value())))
    }

    fn names(&self) -> Result<Vec<(String, ObjID)>, StoreError> {
        let r = self.read()?;
        let op = "list names";
        let names = r.open_table(NAMES).map_err(|e| self.err(op, e))?;
        names
            .iter()
            .map_err(|e| self.err(op, e))?
            .map(|e| e.map(|(k, v)| (k.value().to_owned(), ObjID::new(v.value()))))
            .collect::<Result<_, _>>()
            .map_err(|e| self.err(op, e))
    }
}

/// A redb read transaction's tables as a [`ReadState`] ([`DbStore`]'s
/// [`ObjectStore::read_state`]).
struct ReadTxnState<'s> {
    store: &'s DbStore,
    objects: redb::ReadOnlyTable<u128, &'static [u8]>,
    pages: redb::ReadOnlyTable<(u128, u32), &'static [u8]>,
}

impl ReadState for ReadTxnState<'_> {
    fn object(&mut self, id: ObjID) -> Result<Object, StoreError> {
        read::get(&self.objects, &self.pages, id).map_err(self.store.read_err("read an object"))
    }

    fn object_info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError> {
        read::info(&self.objects, id).map_err(self.store.read_err("read metadata"))
    }
}
