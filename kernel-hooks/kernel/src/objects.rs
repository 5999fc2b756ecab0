//! The kernel's objects, and the [`Host`] the engine sees them through.
//!
//! Every object has an id, an optional `kuid` (the key object that signs for it) and default
//! protections. Its body is one of:
//! - data or code: backing frames, presented to user tasks in a 1 GiB slot;
//! - a security context: the encoded bytes the engine reads (untrusted: they are whatever the
//!   context's writer put there);
//! - a key: the verifying key, parsed once at boot and kept parsed.
//!
//! The table is built at boot and published once ([`publish`]); after that it is read-only,
//! so the engine can borrow context bytes and keys from it for as long as it likes. The page
//! tables are the one mutable thing the engine reaches, through [`Host::unmap`].

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU64, Ordering};

use kernel_hooks::{Engine, Host, ObjectInfo, Unmap};
use spin::{Mutex, Once};
use twizzler_security::{ObjID, Protections, VerifyingKey};

use crate::clock;
use crate::paging::{Frame, PAGE, PageTables, SLOT_SIZE};

/// What an object holds.
pub enum Body {
    /// Data or code: one frame per page (index = page number; page 0 is the null page and
    /// has a frame too, which the engine never lets anyone map).
    Frames(Vec<Frame>),
    /// A security context's bytes.
    Context(Vec<u8>),
    /// A key object's verifying key.
    Key(VerifyingKey),
}

/// One object.
pub struct Object {
    /// Its id.
    pub id: ObjID,
    /// The key object that signs for it.
    pub kuid: Option<ObjID>,
    /// Rights every context has on it.
    pub default_prots: Protections,
    /// The slot it is presented in (data and code objects).
    pub slot: Option<u64>,
    /// Its contents.
    pub body: Body,
}

impl Object {
    /// The frame backing byte `offset`, if the object has one there.
    pub fn frame_at(&self, offset: u64) -> Option<&Frame> {
        match &self.body {
            Body::Frames(frames) => {
                let page = usize::try_from(offset / PAGE).ok()?;
                frames.get(page)
            }
            _ => None,
        }
    }

    /// The first byte of its slot.
    pub fn base(&self) -> Option<u64> {
        self.slot.map(|s| s * SLOT_SIZE)
    }
}

/// Every object, sorted by id.
pub struct ObjectTable {
    objects: Vec<Object>,
}

impl ObjectTable {
    /// A table of `objects` (sorted here).
    pub fn new(mut objects: Vec<Object>) -> Self {
        objects.sort_by_key(|o| o.id);
        Self { objects }
    }

    /// The object `id`.
    pub fn get(&self, id: ObjID) -> Option<&Object> {
        self.objects
            .binary_search_by_key(&id, |o| o.id)
            .ok()
            .and_then(|i| self.objects.get(i))
    }

    /// The object presented in slot `slot`.
    pub fn in_slot(&self, slot: u64) -> Option<&Object> {
        self.objects.iter().find(|o| o.slot == Some(slot))
    }
}

static OBJECTS: Once<ObjectTable> = Once::new();

/// The page tables (set once paging is up). The engine's unmap callbacks lock it, so the
/// kernel never holds it across a call into the engine.
pub static PAGING: Mutex<Option<PageTables>> = Mutex::new(None);

/// Publishes the object table; later calls are ignored.
pub fn publish(table: ObjectTable) {
    OBJECTS.call_once(|| table);
}

/// The published object table.
pub fn table() -> Option<&'static ObjectTable> {
    OBJECTS.get()
}

/// How many times the engine asked for an unmap, and how many present pages that cleared.
static UNMAP_CALLS: AtomicU64 = AtomicU64::new(0);
static PAGES_UNMAPPED: AtomicU64 = AtomicU64::new(0);

/// (unmap calls, pages cleared) so far.
pub fn unmap_counts() -> (u64, u64) {
    (
        UNMAP_CALLS.load(Ordering::Relaxed),
        PAGES_UNMAPPED.load(Ordering::Relaxed),
    )
}

/// The kernel as the engine's host: the object table, the clock, the page tables.
pub struct KernelHost;

/// The decision engine, with its caches, for the whole kernel.
pub static ENGINE: Engine<KernelHost> = Engine::new(KernelHost);

impl Host for KernelHost {
    fn object(&self, id: ObjID) -> Option<ObjectInfo> {
        table()?.get(id).map(|o| ObjectInfo {
            kuid: o.kuid,
            default_prots: o.default_prots,
        })
    }

    fn ctx_bytes(&self, ctx: ObjID) -> Option<&[u8]> {
        match &table()?.get(ctx)?.body {
            Body::Context(bytes) => Some(bytes),
            _ => None,
        }
    }

    fn verifying_key(&self, kuid: ObjID) -> Option<&VerifyingKey> {
        match &table()?.get(kuid)?.body {
            Body::Key(key) => Some(key),
            _ => None,
        }
    }

    fn now(&self) -> u64 {
        clock::now()
    }

    /// Unmaps conservatively: the kernel does not record which context each page was mapped
    /// under, so `Object` clears the object's whole slot and `Context` every user page. Taking
    /// away more than asked is safe: the next access simply faults and is decided again.
    fn unmap(&self, what: Unmap) {
        UNMAP_CALLS.fetch_add(1, Ordering::Relaxed);
        let mut paging = PAGING.lock();
        let Some(pt) = paging.as_mut() else { return };
        let cleared = match what {
            Unmap::Object { target, .. } => table()
                .and_then(|t| t.get(target))
                .and_then(|o| o.slot)
                .map_or(0, |slot| pt.unmap_slot(slot)),
            Unmap::Context(_) => pt.unmap_all_user(),
        };
        PAGES_UNMAPPED.fetch_add(cleared as u64, Ordering::Relaxed);
    }
}
