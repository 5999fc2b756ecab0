//! [`MemStore`]: an object store in memory, for simulations and tests.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use twizzler_capsec::ObjID;

use crate::store::{self, ObjInfo, Object, ObjectStore, StoreError, Txn};

#[derive(Default)]
struct State {
    objects: BTreeMap<ObjID, Object>,
    names: BTreeMap<String, ObjID>,
}

/// Objects and names in maps behind one mutex. A transaction holds the mutex and stages its
/// changes beside the maps, which it applies only when it commits; so readers wait for a
/// transaction in progress here (the database store, [`crate::DbStore`], does not make them).
#[derive(Default)]
pub struct MemStore {
    state: Mutex<State>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic in a transaction leaves the maps as they were before it: it only staged.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// A transaction's view: the committed maps, and what it changed (`None`: removed).
struct MemTxn<'a> {
    base: &'a State,
    objects: BTreeMap<ObjID, Option<Object>>,
    names: BTreeMap<String, Option<ObjID>>,
}

impl MemTxn<'_> {
    fn object(&self, id: ObjID) -> Option<&Object> {
        match self.objects.get(&id) {
            Some(staged) => staged.as_ref(),
            None => self.base.objects.get(&id),
        }
    }

    fn object_mut(&mut self, id: ObjID) -> Result<&mut Object, StoreError> {
        let current = self.object(id).cloned().ok_or(StoreError::NotFound(id))?;
        let slot = self.objects.entry(id).or_insert(Some(current));
        slot.as_mut().ok_or(StoreError::NotFound(id))
    }
}

/// Applies a committed transaction's changes to the maps.
fn apply(
    state: &mut State,
    objects: BTreeMap<ObjID, Option<Object>>,
    names: BTreeMap<String, Option<ObjID>>,
) {
    for (id, o) in objects {
        match o {
            Some(o) => state.objects.insert(id, o),
            None => state.objects.remove(&id),
        };
    }
    for (name, id) in names {
        match id {
            Some(id) => state.names.insert(name, id),
            None => state.names.remove(&name),
        };
    }
}

impl Txn for MemTxn<'_> {
    fn get(&mut self, id: ObjID) -> Result<Object, StoreError> {
        self.object(id).cloned().ok_or(StoreError::NotFound(id))
    }

    fn info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError> {
        let o = self.object(id).ok_or(StoreError::NotFound(id))?;
        Ok(ObjInfo {
            meta: o.meta,
            len: o.data.len() as u64,
        })
    }

    fn read_at(&mut self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        let o = self.object(id).ok_or(StoreError::NotFound(id))?;
        store::read_range(id, &o.data, offset, len)
    }

    fn create(&mut self, obj: &Object) -> Result<(), StoreError> {
        if self.object(obj.id).is_some() {
            return Err(StoreError::AlreadyExists(obj.id));
        }
        store::check_range(obj.id, 0, obj.data.len() as u64)?;
        self.objects.insert(obj.id, Some(obj.clone()));
        Ok(())
    }

    fn put(&mut self, obj: &Object) -> Result<(), StoreError> {
        store::check_range(obj.id, 0, obj.data.len() as u64)?;
        *self.object_mut(obj.id)? = obj.clone();
        Ok(())
    }

    fn write_at(&mut self, id: ObjID, offset: u64, data: &[u8]) -> Result<u64, StoreError> {
        store::write_range(id, &mut self.object_mut(id)?.data, offset, data)
    }

    fn remove(&mut self, id: ObjID) -> Result<(), StoreError> {
        if self.object(id).is_none() {
            return Err(StoreError::NotFound(id));
        }
        self.objects.insert(id, None);
        let named: Vec<String> = self
            .base
            .names
            .iter()
            .filter(|&(_, &n)| n == id)
            .map(|(k, _)| k.clone())
            .chain(
                self.names
                    .iter()
                    .filter(|&(_, &n)| n == Some(id))
                    .map(|(k, _)| k.clone()),
            )
            .collect();
        for name in named {
            self.names.insert(name, None);
        }
        Ok(())
    }

    fn name(&mut self, name: &str) -> Result<Option<ObjID>, StoreError> {
        Ok(match self.names.get(name) {
            Some(staged) => *staged,
            None => self.base.names.get(name).copied(),
        })
    }

    fn set_name(&mut self, name: &str, id: ObjID) -> Result<(), StoreError> {
        store::check_name(name)?;
        if self.object(id).is_none() {
            return Err(StoreError::NotFound(id));
        }
        match self.name(name)? {
            Some(other) if other != id => Err(StoreError::NameTaken {
                name: name.to_owned(),
                id: other,
            }),
            _ => {
                self.names.insert(name.to_owned(), Some(id));
                Ok(())
            }
        }
    }
}

impl ObjectStore for MemStore {
    fn transact<R, E: From<StoreError>>(
        &self,
        f: impl FnOnce(&mut dyn Txn) -> Result<R, E>,
    ) -> Result<R, E> {
        let mut state = self.lock();
        let (r, objects, names) = {
            let mut txn = MemTxn {
                base: &state,
                objects: BTreeMap::new(),
                names: BTreeMap::new(),
            };
            let r = f(&mut txn)?;
            (r, txn.objects, txn.names)
        };
        apply(&mut state, objects, names);
        Ok(r)
    }

    fn get(&self, id: ObjID) -> Result<Object, StoreError> {
        self.lock()
            .objects
            .get(&id)
            .cloned()
            .ok_or(StoreError::NotFound(id))
    }

    fn info(&self, id: ObjID) -> Result<ObjInfo, StoreError> {
        let state = self.lock();
        let o = state.objects.get(&id).ok_or(StoreError::NotFound(id))?;
        Ok(ObjInfo {
            meta: o.meta,
            len: o.data.len() as u64,
        })
    }

    fn read_at(&self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        let state = self.lock();
        let o = state.objects.get(&id).ok_or(StoreError::NotFound(id))?;
        store::read_range(id, &o.data, offset, len)
    }

    fn list(&self) -> Result<Vec<ObjID>, StoreError> {
        Ok(self.lock().objects.keys().copied().collect())
    }

    fn name(&self, name: &str) -> Result<Option<ObjID>, StoreError> {
        Ok(self.lock().names.get(name).copied())
    }

    fn names(&self) -> Result<Vec<(String, ObjID)>, StoreError> {
        Ok(self
            .lock()
            .names
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect())
    }
}
