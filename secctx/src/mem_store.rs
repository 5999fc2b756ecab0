//! [`MemStore`]: an object store in memory, for simulations and tests.

use std::collections::BTreeMap;
use std::sync::Mutex;

use twizzler_capsec::ObjID;

use crate::store::{Object, ObjectStore, StoreError};

/// Objects in a map behind a mutex: every operation is atomic, and updates are serialised.
#[derive(Default)]
pub struct MemStore {
    objects: Mutex<BTreeMap<ObjID, Object>>,
}

impl MemStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ObjID, Object>> {
        // A panic in another thread's edit leaves the map as it was before that edit.
        self.objects.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl ObjectStore for MemStore {
    fn get(&self, id: ObjID) -> Result<Object, StoreError> {
        self.lock()
            .get(&id)
            .cloned()
            .ok_or(StoreError::NotFound(id))
    }

    fn create(&self, obj: &Object) -> Result<(), StoreError> {
        let mut map = self.lock();
        if map.contains_key(&obj.id) {
            return Err(StoreError::AlreadyExists(obj.id));
        }
        map.insert(obj.id, obj.clone());
        Ok(())
    }

    fn update<E: From<StoreError>>(
        &self,
        id: ObjID,
        edit: impl FnOnce(&mut Object) -> Result<(), E>,
    ) -> Result<Object, E> {
        let mut map = self.lock();
        let mut obj = map.get(&id).cloned().ok_or(StoreError::NotFound(id))?;
        edit(&mut obj)?;
        obj.id = id;
        map.insert(id, obj.clone());
        Ok(obj)
    }

    fn remove(&self, id: ObjID) -> Result<(), StoreError> {
        self.lock()
            .remove(&id)
            .map(|_| ())
            .ok_or(StoreError::NotFound(id))
    }

    fn list(&self) -> Result<Vec<ObjID>, StoreError> {
        Ok(self.lock().keys().copied().collect())
    }
}
