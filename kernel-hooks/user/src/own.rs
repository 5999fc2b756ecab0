//! The program's own objects, and the key that signs for them.
//!
//! The loader makes every object of a program (its code and data segments, its stack, its
//! heap) with **no default protections**, keyed by a signing key it generates for that
//! program alone, and starts the program in a context holding capabilities signed by that key
//! for exactly those objects. Another program that learns their ids (ids are not secrets)
//! holds no capability for them and gets no default rights: it is denied.
//!
//! [`Own::get`] asks the kernel for that key (its private half, as the seed it was derived
//! from) and the objects' ids (`SYS_SELF`), so the program can sign capabilities for its own
//! code, stack and heap into every context it builds and switches to ([`Own::caps_for`]): a
//! program that switches its active context still reaches its own memory, under the new
//! context, through capabilities like any other.
//!
//! Such a context must be attachable by the program only: a context object readable by
//! default can be attached by any task that learns its id, and would hand it the program's
//! memory. So the loader also makes [`self_info::CONTEXTS_N`] private context objects (no
//! default protections, keyed by the program's key, `rw-` in its start context):
//! [`Own::contexts`]. A program builds the contexts it switches to in those, and gives a
//! context it edits or attaches from `rw-` on them with [`Own::context_caps_for`].

use alloc::vec::Vec;

use twizzler_capsec::{Cap, CapGrant, ObjID, Protections, SigningKey, SigningScheme};

use crate::abi::{Error, self_info};
use crate::sys;

/// The program's key and objects, as the loader made them.
pub struct Own {
    key: SigningKey,
    /// The key object of the program's key (its `kuid`).
    pub kuid: ObjID,
    /// The heap object.
    pub heap: ObjID,
    /// The address of the heap object's byte 0.
    pub heap_base: u64,
    /// Pages of the heap after its null page.
    pub heap_pages: u64,
    /// The stack object.
    pub stack: ObjID,
    contexts: [ObjID; self_info::CONTEXTS_N],
    objects: [(ObjID, Protections); self_info::MAX_OBJECTS],
    count: usize,
}

fn id_at(words: &[u64], i: usize) -> ObjID {
    let w = |j: usize| words.get(j).copied().unwrap_or(0);
    crate::abi::id_from_words(w(i), w(i + 1))
}

impl Own {
    /// Asks the kernel (`SYS_SELF`).
    pub fn get() -> Result<Self, Error> {
        let mut words = [0u64; self_info::WORDS];
        sys::self_info(&mut words)?;
        let mut seed = [0u8; 32];
        for (chunk, w) in seed.chunks_mut(8).zip(&words[self_info::SEED..]) {
            chunk.copy_from_slice(&w.to_le_bytes());
        }
        let key =
            SigningKey::from_entropy(SigningScheme::Ed25519, &seed).map_err(|_| Error::Malformed);
        seed.fill(0);
        for w in words.iter_mut().take(self_info::SEED + 4) {
            *w = 0;
        }
        let count = usize::try_from(words[self_info::COUNT])
            .ok()
            .filter(|&n| n <= self_info::MAX_OBJECTS)
            .ok_or(Error::Malformed)?;
        let mut objects = [(ObjID::new(0), Protections::empty()); self_info::MAX_OBJECTS];
        for (i, o) in objects.iter_mut().enumerate().take(count) {
            let at = self_info::OBJECTS + 3 * i;
            let prots = u16::try_from(words[at + 2])
                .ok()
                .and_then(Protections::from_raw)
                .ok_or(Error::Malformed)?;
            *o = (id_at(&words, at), prots);
        }
        let mut contexts = [ObjID::new(0); self_info::CONTEXTS_N];
        for (i, c) in contexts.iter_mut().enumerate() {
            *c = id_at(&words, self_info::CONTEXTS + 2 * i);
        }
        Ok(Self {
            contexts,
            key: key?,
            kuid: id_at(&words, self_info::KUID),
            heap: id_at(&words, self_info::HEAP),
            heap_base: words[self_info::HEAP_BASE],
            heap_pages: words[self_info::HEAP_PAGES],
            stack: id_at(&words, self_info::STACK),
            objects,
            count,
        })
    }

    /// The key that signs for the program's own objects.
    pub fn key(&self) -> &SigningKey {
        &self.key
    }

    /// The program's own objects and the rights it holds on each (code `r-x`, data as its
    /// segment says, stack and heap `rw-`).
    pub fn objects(&self) -> &[(ObjID, Protections)] {
        self.objects.get(..self.count).unwrap_or(&[])
    }

    /// The program's private context objects ([`self_info::CONTEXT_PAGES`] pages each, empty
    /// when it starts).
    pub fn contexts(&self) -> &[ObjID] {
        &self.contexts
    }

    /// Private context `i`, or [`Error::NoObject`].
    pub fn context(&self, i: usize) -> Result<ObjID, Error> {
        self.contexts.get(i).copied().ok_or(Error::NoObject)
    }

    /// Capabilities for context `ctx` granting `rw-` on each of the program's private
    /// contexts (to attach and edit them while `ctx` is active).
    pub fn context_caps_for(&self, ctx: ObjID) -> Result<Vec<Cap>, Error> {
        let rw = Protections::READ | Protections::WRITE;
        self.contexts
            .iter()
            .map(|&id| {
                Cap::mint(CapGrant::new(id, ctx, rw), &self.key).map_err(|_| Error::Malformed)
            })
            .collect()
    }

    /// Capabilities for context `ctx` on each of the program's own objects, with the rights
    /// the loader gave it: add them to a context before switching to it.
    pub fn caps_for(&self, ctx: ObjID) -> Result<Vec<Cap>, Error> {
        self.objects()
            .iter()
            .map(|&(id, prots)| {
                Cap::mint(CapGrant::new(id, ctx, prots), &self.key).map_err(|_| Error::Malformed)
            })
            .collect()
    }
}
