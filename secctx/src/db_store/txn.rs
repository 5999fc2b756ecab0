//! [`DbTxn`]: a [`Txn`] over a redb write transaction. Every change goes through the open
//! tables; nothing is visible to anyone until the transaction commits.

use std::path::Path;

use redb::{ReadableTable, StorageError, Table, WriteTransaction};
use twizzler_capsec::ObjID;

use super::layout::{self, NAMES, OBJECTS, PAGE, PAGES, encode_meta, page_of, pages_in, trimmed};
use super::read::{self, ReadError};
use crate::store::{self, ObjInfo, Object, StoreError, Txn};

/// A database failure during `op`, naming the store.
fn db<'a>(path: &'a Path, op: &'static str) -> impl Fn(StorageError) -> StoreError + 'a {
    move |e| super::db_error(path, op, e)
}

/// The open tables of one write transaction.
pub(super) struct DbTxn<'t> {
    pub(super) path: &'t Path,
    pub(super) objects: Table<'t, u128, &'static [u8]>,
    pub(super) pages: Table<'t, (u128, u32), &'static [u8]>,
    pub(super) names: Table<'t, &'static str, u128>,
}

impl<'t> DbTxn<'t> {
    /// Opens the tables of `txn`.
    pub(super) fn open(path: &'t Path, txn: &'t WriteTransaction) -> Result<Self, StoreError> {
        let err = |e: redb::TableError| super::db_error(path, "open a table", e);
        Ok(Self {
            path,
            objects: txn.open_table(OBJECTS).map_err(err)?,
            pages: txn.open_table(PAGES).map_err(err)?,
            names: txn.open_table(NAMES).map_err(err)?,
        })
    }

    fn read(&self, op: &'static str) -> impl Fn(ReadError) -> StoreError + '_ {
        move |e| match e {
            ReadError::Store(e) => e,
            ReadError::Db(e) => super::db_error(self.path, op, e),
        }
    }

    fn put_meta(&mut self, id: ObjID, info: &ObjInfo) -> Result<(), StoreError> {
        self.objects
            .insert(id.raw(), &encode_meta(info)[..])
            .map_err(db(self.path, "write metadata"))?;
        Ok(())
    }

    /// Stores page `index` of `id` as `bytes` (at most a page), unless it holds that already.
    fn put_page(&mut self, id: ObjID, index: u32, bytes: &[u8]) -> Result<(), StoreError> {
        let new = trimmed(bytes);
        let same = match self
            .pages
            .get((id.raw(), index))
            .map_err(db(self.path, "read a page"))?
        {
            Some(old) => old.value() == new,
            None => new.is_empty(),
        };
        if same {
            return Ok(());
        }
        if new.is_empty() {
            self.pages
                .remove((id.raw(), index))
                .map_err(db(self.path, "remove a page"))?;
        } else {
            self.pages
                .insert((id.raw(), index), new)
                .map_err(db(self.path, "write a page"))?;
        }
        Ok(())
    }

    /// Removes the pages of `id` from index `from` on.
    fn drop_pages(&mut self, id: ObjID, from: u32) -> Result<(), StoreError> {
        let keys: Vec<u32> = self
            .pages
            .range((id.raw(), from)..=(id.raw(), u32::MAX))
            .map_err(db(self.path, "list pages"))?
            .map(|e| e.map(|(k, _)| k.value().1))
            .collect::<Result<_, _>>()
            .map_err(db(self.path, "list pages"))?;
        for index in keys {
            self.pages
                .remove((id.raw(), index))
                .map_err(db(self.path, "remove a page"))?;
        }
        Ok(())
    }

    /// Writes `obj` (metadata and bytes) over an object of `old_len` bytes.
    fn put_whole(&mut self, obj: &Object, old_len: u64) -> Result<(), StoreError> {
        let len = store::check_range(obj.id, 0, obj.data.len() as u64)?;
        self.put_meta(
            obj.id,
            &ObjInfo {
                meta: obj.meta,
                len,
            },
        )?;
        self.put_data(obj.id, old_len, &obj.data)
    }

    /// Writes `data` as the whole of `id`'s bytes: only the pages that differ.
    fn put_data(&mut self, id: ObjID, old_len: u64, data: &[u8]) -> Result<(), StoreError> {
        for (index, chunk) in (0u32..).zip(data.chunks(PAGE as usize)) {
            self.put_page(id, index, chunk)?;
        }
        let n = pages_in(data.len() as u64);
        if pages_in(old_len) > n {
            self.drop_pages(id, n)?;
        }
        Ok(())
    }
}

impl Txn for DbTxn<'_> {
    fn get(&mut self, id: ObjID) -> Result<Object, StoreError> {
        read::get(&self.objects, &self.pages, id).map_err(self.read("read an object"))
    }

    fn info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError> {
        read::info(&self.objects, id).map_err(self.read("read metadata"))
    }

    fn read_at(&mut self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        read::read_at(&self.objects, &self.pages, id, offset, len)
            .map_err(self.read("read an object"))
    }

    fn create(&mut self, obj: &Object) -> Result<(), StoreError> {
        let exists = self
            .objects
            .get(obj.id.raw())
            .map_err(db(self.path, "read metadata"))?
            .is_some();
        if exists {
            return Err(StoreError::AlreadyExists(obj.id));
        }
        // Pages a removed object left would be read as this one's.
        self.drop_pages(obj.id, 0)?;
        self.put_whole(obj, 0)
    }

    fn put(&mut self, obj: &Object) -> Result<(), StoreError> {
        // Out of range before missing, as every store answers.
        store::check_range(obj.id, 0, obj.data.len() as u64)?;
        let old = self.info(obj.id)?;
        self.put_whole(obj, old.len)
    }

    fn write_at(&mut self, id: ObjID, offset: u64, data: &[u8]) -> Result<u64, StoreError> {
        let end = store::check_range(id, offset, data.len() as u64)?;
        let old = self.info(id)?;
        if data.is_empty() {
            return Ok(old.len);
        }
        // Each touched page: what it holds (zeros past the old length), with `data` laid over.
        let (first, last) = (page_of(offset), page_of(end - 1));
        for index in first..=last {
            let page_start = u64::from(index) * PAGE;
            let mut page = if page_start < old.len {
                self.read_at(id, page_start, PAGE)?
            } else {
                vec![0u8; PAGE as usize]
            };
            // Bytes past the old length must read as zeros, whatever the page held.
            if old.len < page_start + PAGE && old.len > page_start {
                page[(old.len - page_start) as usize..].fill(0);
            }
            let from = offset.max(page_start);
            let to = end.min(page_start + PAGE);
            page[(from - page_start) as usize..(to - page_start) as usize]
                .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
            self.put_page(id, index, &page)?;
        }
        let len = old.len.max(end);
        if len != old.len {
            self.put_meta(
                id,
                &ObjInfo {
                    meta: old.meta,
                    len,
                },
            )?;
        }
        Ok(len)
    }

    fn remove(&mut self, id: ObjID) -> Result<(), StoreError> {
        let old = self
            .objects
            .remove(id.raw())
            .map_err(db(self.path, "remove an object"))?;
        if old.is_none() {
            return Err(StoreError::NotFound(id));
        }
        drop(old);
        self.drop_pages(id, 0)?;
        let named: Vec<String> = self
            .names
            .iter()
            .map_err(db(self.path, "list names"))?
            .filter_map(|e| match e {
                Ok((k, v)) => (v.value() == id.raw()).then(|| Ok(k.value().to_owned())),
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_, _>>()
            .map_err(db(self.path, "list names"))?;
        for name in named {
            self.names
                .remove(name.as_str())
                .map_err(db(self.path, "remove a name"))?;
        }
        Ok(())
    }

    fn name(&mut self, name: &str) -> Result<Option<ObjID>, StoreError> {
        Ok(self
            .names
            .get(name)
            .map_err(db(self.path, "read a name"))?
            .map(|v| ObjID::new(v.value())))
    }

    fn set_name(&mut self, name: &str, id: ObjID) -> Result<(), StoreError> {
        store::check_name(name)?;
        self.info(id)?;
        match self.name(name)? {
            Some(other) if other != id => Err(StoreError::NameTaken {
                name: name.to_owned(),
                id: other,
            }),
            Some(_) => Ok(()),
            None => {
                self.names
                    .insert(name, id.raw())
                    .map_err(db(self.path, "write a name"))?;
                Ok(())
            }
        }
    }
}

/// The format version a store's `info` table holds, if any.
pub(super) fn format_of(
    info: &impl ReadableTable<&'static str, u64>,
) -> Result<Option<u64>, StorageError> {
    Ok(info.get(layout::FORMAT_KEY)?.map(|v| v.value()))
}
