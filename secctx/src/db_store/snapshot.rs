//! [`SnapshotReader`]: ranged and whole-object reads from one read snapshot, kept while no
//! commit has changed the database file; [`SnapshotView`]: one such snapshot, named by its
//! serial, for several reads from one commit (and for caching what was derived from it).
//!
//! In redb's multi-writer mode every read transaction costs a lock of the file header (an
//! in-process mutex and an `fcntl` range lock, taken and released), a read of the header, and
//! an `fcntl` lock and unlock announcing the transaction to writers in other processes. A
//! server serving many small reads pays that for each. A [`SnapshotReader`] keeps one read
//! transaction (and its open tables) and serves reads from it for as long as the file's
//! header is byte for byte what it was when the transaction began, checking that with one
//! `pread` of the header and no lock.
//!
//! # Why a reused snapshot is never stale
//!
//! The promise is the one a fresh transaction gives: a read sees every commit that completed
//! (whose `commit` returned, in any process) before the read began.
//!
//! 1. Every commit rewrites the file header, at offset 0, before it returns: redb's commit
//!    writes the new commit slot, with a transaction id greater than any before it, into the
//!    header (and flips the primary slot and its flags there), in the first
//!    [`HEADER_BYTES`] bytes. Transaction ids only grow, so after a commit the header never
//!    again holds the bytes it held before it. (A test, `a_commit_changes_the_header_bytes`,
//!    checks this of the redb in use, so that an upgrade that moved the slots fails it.)
//! 2. A `pread` issued after a `pwrite` returned, by any process, reads what it wrote (one
//!    page cache per file). So a read that begins after a commit returned reads a header that
//!    differs from every header read before that commit.
//! 3. The header is read **before** the transaction begins, and the snapshot is kept with
//!    those bytes. The transaction therefore shows at least the commit those bytes describe;
//!    a later read that finds the same bytes knows that no commit has completed since they were
//!    read, so the snapshot is the latest commit (or a commit in flight is not yet complete,
//!    which the read may or may not see, as with a fresh transaction).
//! 4. Reading the header without its lock may see a write in progress torn. Bytes that match
//!    the kept ones exactly are bytes of no completed later commit (1, 2); bytes that do not
//!    match, torn or not, only cost a fresh transaction, which takes the lock.
//! 5. The kept transaction holds its pages: redb never reuses pages a live read transaction in
//!    any process can reach, so the snapshot stays readable however long it is kept.
//!
//! 6. A read made for a request may skip the header read when a header read that **began
//!    after the request arrived** ([`SnapshotReader::read_at_arrived`]) found the kept bytes:
//!    by (2) that read saw every commit that completed before the request arrived, so the
//!    snapshot shows them all, as if this read had read the header itself. Under load several
//!    requests arrive before any of them is served, and one header read answers for all of
//!    them. The times are the monotonic clock's, the same in every thread; a check that began
//!    at the very nanosecond the request arrived does not count.
//!
//! Anything unusual (the header cannot be read) makes a read begin a fresh transaction, which
//! then reports the error if there is one.
//!
//! A read of a small object may then be answered from the reader's [`CacheLimits`]-bounded
//! cache of objects' bytes, but only by bytes read from the very snapshot the read is to use
//! (the same serial): see `db_store/byte_cache.rs`. Which snapshot that is, the points above
//! decide.
//!
//! # Pinning
//!
//! A kept transaction stops writers (in every process) from reusing the pages that later
//! commits free. So a snapshot is kept at most [`SnapshotReader::max_age`], and a long-lived
//! holder calls [`SnapshotReader::release_stale`] now and then, so that an idle reader pins
//! nothing for long.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use redb::{ReadOnlyTable, ReadTransaction};
use twizzler_capsec::ObjID;

use super::DbStore;
use super::byte_cache::{ByteCache, CacheLimits};
use super::layout::{OBJECTS, PAGES};
use super::read::{self, ReadError};
use crate::store::{ObjInfo, Object, ReadState, StoreError, check_range};

/// How many bytes at the start of the database file are compared: redb 4.6's header (its god
/// byte, and both commit slots with their transaction ids) is the first 320; the rest of the
/// first 512 is padding before the first region, which nothing else writes.
pub(super) const HEADER_BYTES: usize = 512;

/// The bytes at the start of the database file.
pub(super) type Header = [u8; HEADER_BYTES];

/// How long [`SnapshotReader`] keeps a snapshot unless told otherwise.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_millis(200);

/// One read transaction, its tables, and the header read before it began.
struct Snapshot {
    /// The header read before it began; `None` when it could not be read, and then the
    /// snapshot serves one read and is not kept (nor is what is read from it cached).
    header: Option<Header>,
    taken: Instant,
    /// Which snapshot of its reader this is: 1 for the first, then one more for each.
    serial: u64,
    /// When the latest header read that found [`Snapshot::header`] began, in ns since the
    /// reader's epoch ([`Inner::epoch`]); see the module documentation (6).
    checked_ns: AtomicU64,
    // Dropped before the transaction (fields drop in order).
    objects: ReadOnlyTable<u128, &'static [u8]>,
    pages: ReadOnlyTable<(u128, u32), &'static [u8]>,
    _txn: ReadTransaction,
}

/// Ranged reads of a [`DbStore`] from a kept read snapshot (see the module documentation of
/// `db_store/snapshot.rs`): each read sees every commit that completed before it began, as
/// [`crate::ObjectStore::read_at`] does, at the cost of one header `pread` while no commit
/// intervenes. Clones share the kept snapshot.
#[derive(Clone)]
pub struct SnapshotReader {
    inner: Arc<Inner>,
}

struct Inner {
    store: DbStore,
    max_age: Duration,
    current: Mutex<Option<Arc<Snapshot>>>,
    taken: AtomicU64,
    /// Header reads made (each one `pread`).
    header_reads: AtomicU64,
    /// The origin of [`Snapshot::checked_ns`].
    epoch: Instant,
    /// Small objects' bytes, each as one kept snapshot holds it.
    cache: ByteCache,
}

impl std::fmt::Debug for SnapshotReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotReader")
            .field("store", &self.inner.store)
            .field("max_age", &self.inner.max_age)
            .finish()
    }
}

impl SnapshotReader {
    /// A reader of `store` that keeps a snapshot at most `max_age`, and small objects' bytes
    /// as [`CacheLimits::default`] bounds them.
    pub fn new(store: DbStore, max_age: Duration) -> SnapshotReader {
        Self::with_cache(store, max_age, CacheLimits::default())
    }

    /// A reader of `store` that keeps a snapshot at most `max_age`, and of the objects it
    /// reads as much as `cache` allows ([`CacheLimits::NONE`]: nothing).
    pub fn with_cache(store: DbStore, max_age: Duration, cache: CacheLimits) -> SnapshotReader {
        SnapshotReader {
            inner: Arc::new(Inner {
                store,
                max_age,
                current: Mutex::new(None),
                taken: AtomicU64::new(0),
                header_reads: AtomicU64::new(0),
                epoch: Instant::now(),
                cache: ByteCache::new(cache),
            }),
        }
    }

    /// How long a snapshot is kept at most.
    pub fn max_age(&self) -> Duration {
        self.inner.max_age
    }

    /// How many read transactions this reader has begun: once, and again after each commit
    /// (in any process) or when the kept one grew too old.
    pub fn snapshots_taken(&self) -> u64 {
        self.inner.taken.load(Ordering::Relaxed)
    }

    /// How many times this reader has read the file's header (one `pread` each).
    pub fn header_reads(&self) -> u64 {
        self.inner.header_reads.load(Ordering::Relaxed)
    }

    /// How many reads the cache of objects' bytes answered (without redb's lookups).
    pub fn cache_hits(&self) -> u64 {
        self.inner.cache.hits()
    }

    /// What the cache of objects' bytes holds now, in bytes charged (each entry its length
    /// plus a fixed overhead), at most [`CacheLimits::max_total_bytes`].
    pub fn cache_charged(&self) -> u64 {
        self.inner.cache.charged()
    }

    /// `len` bytes of object `id` at `offset`, as [`crate::ObjectStore::read_at`] reads them,
    /// from the latest commit.
    pub fn read_at(&self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        self.read(None, id, offset, len)
    }

    /// [`SnapshotReader::read_at`] for a request that arrived at `arrived`: it sees every
    /// commit that completed before `arrived`, and skips the header read when one that began
    /// after `arrived` found the kept snapshot current (the module documentation, 6). A server
    /// passes the moment it received the request, before serving any of it.
    pub fn read_at_arrived(
        &self,
        arrived: Instant,
        id: ObjID,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, StoreError> {
        self.read(Some(arrived), id, offset, len)
    }

    fn read(
        &self,
        arrived: Option<Instant>,
        id: ObjID,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, StoreError> {
        let snap = self.snapshot(arrived)?;
        let store = &self.inner.store;
        self.read_from(&snap, id, offset, len)
            .map_err(store.read_err("read an object"))
    }

    /// [`read::read_at`] of `snap`, through the cache: bytes cached from `snap` itself, or
    /// read from it (and cached, for a small object of a kept snapshot).
    fn read_from(
        &self,
        snap: &Snapshot,
        id: ObjID,
        offset: u64,
        len: u64,
    ) -> Result<Vec<u8>, ReadError> {
        let end = check_range(id, offset, len)?;
        let cache = &self.inner.cache;
        if let Some(data) = cache.get(snap.serial, id) {
            return Ok(read::slice_of(&data, offset, end));
        }
        let info = read::info(&snap.objects, id)?;
        if !(snap.header.is_some() && cache.keeps(info.len)) {
            return read::read_range(&snap.pages, id, info.len, offset, end);
        }
        let data: Arc<[u8]> = read::read_range(&snap.pages, id, info.len, 0, info.len)?.into();
        let out = read::slice_of(&data, offset, end);
        cache.insert(snap.serial, id, data);
        Ok(out)
    }

    /// Object `id`, whole, as [`crate::ObjectStore::get`] reads it, from the latest commit.
    pub fn get(&self, id: ObjID) -> Result<Object, StoreError> {
        self.view()?.get(id)
    }

    /// The latest commit, to read several objects from (all from that one commit), and to
    /// know it again: see [`SnapshotView`]. The same promise as every read of this reader: the
    /// view shows every commit that completed (in any process) before this call began.
    pub fn view(&self) -> Result<SnapshotView, StoreError> {
        Ok(SnapshotView {
            snap: self.snapshot(None)?,
            reader: self.clone(),
        })
    }

    /// Drops the kept snapshot if it is older than [`SnapshotReader::max_age`], so that it pins
    /// no pages (a read in progress keeps it until it is done).
    pub fn release_stale(&self) {
        let old = match self.inner.current.lock() {
            Ok(mut cur) if cur.as_ref().is_some_and(|s| self.too_old(s)) => cur.take(),
            _ => None,
        };
        drop(old);
    }

    fn too_old(&self, s: &Snapshot) -> bool {
        s.taken.elapsed() >= self.inner.max_age
    }

    /// The kept snapshot if the file's header still holds the bytes it was taken with (and it
    /// is young enough), else a new one, kept.
    fn snapshot(&self, arrived: Option<Instant>) -> Result<Arc<Snapshot>, StoreError> {
        let store = &self.inner.store;
        if let Some(arrived) = arrived {
            // A header read that began after the request arrived answers for it (6).
            let arrived_ns = self.ns_since_epoch(arrived);
            if let Some(s) = self.kept(|s| s.checked_ns.load(Ordering::Acquire) > arrived_ns) {
                return Ok(s);
            }
        }
        // Taken before the header read, which therefore began no earlier.
        let began_ns = self.ns_since_epoch(Instant::now());
        // Read before anything else, and outside the lock: see the module documentation (3).
        self.inner.header_reads.fetch_add(1, Ordering::Relaxed);
        let Some(header) = store.header_bytes() else {
            // Not comparable: a fresh transaction, not kept.
            return self.begin(None, began_ns);
        };
        if let Some(s) = self.kept(|s| s.header == Some(header)) {
            s.checked_ns.fetch_max(began_ns, Ordering::AcqRel);
            return Ok(s);
        }
        self.begin(Some(header), began_ns)
    }

    /// The kept snapshot, if there is one, it is young enough and it `fits`.
    fn kept(&self, fits: impl Fn(&Snapshot) -> bool) -> Option<Arc<Snapshot>> {
        match self.inner.current.lock() {
            Ok(cur) => cur
                .as_ref()
                .filter(|s| fits(s) && !self.too_old(s))
                .cloned(),
            Err(_) => None,
        }
    }

    /// `at` in ns since the reader's epoch (0 for a moment before it).
    fn ns_since_epoch(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.inner.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// Begins a read transaction; keeps it (replacing the kept one) when `header`, read before
    /// it began (a read that began at `began_ns`), is known.
    fn begin(&self, header: Option<Header>, began_ns: u64) -> Result<Arc<Snapshot>, StoreError> {
        let store = &self.inner.store;
        let op = "read an object";
        let txn = store.read()?;
        let objects = txn.open_table(OBJECTS).map_err(|e| store.err(op, e))?;
        let pages = txn.open_table(PAGES).map_err(|e| store.err(op, e))?;
        let serial = self.inner.taken.fetch_add(1, Ordering::Relaxed) + 1;
        let snap = Arc::new(Snapshot {
            header,
            taken: Instant::now(),
            serial,
            checked_ns: AtomicU64::new(began_ns),
            objects,
            pages,
            _txn: txn,
        });
        if header.is_some() {
            let old = match self.inner.current.lock() {
                Ok(mut cur) => cur.replace(snap.clone()),
                Err(_) => None,
            };
            // Ends the old transaction (an fcntl) after the lock is released.
            drop(old);
        }
        Ok(snap)
    }
}

/// One snapshot of a [`SnapshotReader`]: every read through it sees the same commit, and
/// [`SnapshotView::serial`] names that snapshot, so that what a caller derived from one view (a
/// decoded table, say) can be reused for a later view with the same serial and is then exactly
/// what reading that view would give. A view keeps its snapshot's pages (see *Pinning*): hold
/// it for one request, not longer.
#[derive(Clone)]
pub struct SnapshotView {
    snap: Arc<Snapshot>,
    reader: SnapshotReader,
}

impl std::fmt::Debug for SnapshotView {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SnapshotView")
            .field("serial", &self.snap.serial)
            .finish()
    }
}

impl SnapshotView {
    /// Which snapshot of its reader (and the reader's clones) this is: each snapshot the
    /// reader takes gets a larger serial than every one before it, and a snapshot's contents
    /// never change. Two views of one reader with the same serial therefore read the same
    /// commit; views with different serials may or may not.
    pub fn serial(&self) -> u64 {
        self.snap.serial
    }

    /// Object `id`, whole, in this snapshot.
    pub fn get(&self, id: ObjID) -> Result<Object, StoreError> {
        let store = &self.reader.inner.store;
        read::get(&self.snap.objects, &self.snap.pages, id)
            .map_err(store.read_err("read an object"))
    }

    /// Object `id`'s metadata and length, in this snapshot.
    pub fn info(&self, id: ObjID) -> Result<ObjInfo, StoreError> {
        let store = &self.reader.inner.store;
        read::info(&self.snap.objects, id).map_err(store.read_err("read metadata"))
    }

    /// `len` bytes of object `id` at `offset`, in this snapshot (through the reader's cache of
    /// small objects, which serves only this snapshot's bytes).
    pub fn read_at(&self, id: ObjID, offset: u64, len: u64) -> Result<Vec<u8>, StoreError> {
        let store = &self.reader.inner.store;
        self.reader
            .read_from(&self.snap, id, offset, len)
            .map_err(store.read_err("read an object"))
    }
}

impl ReadState for &SnapshotView {
    fn object(&mut self, id: ObjID) -> Result<Object, StoreError> {
        self.get(id)
    }

    fn object_info(&mut self, id: ObjID) -> Result<ObjInfo, StoreError> {
        self.info(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::{ObjMeta, Object, ObjectStore};

    /// A fresh store in this process's scratch directory `name`, holding object `id` of `len`
    /// bytes of 1.
    fn store_with_object(name: &str, id: ObjID, len: usize) -> (std::path::PathBuf, DbStore) {
        let dir = std::env::temp_dir().join(format!("secctx-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = DbStore::open(&dir).expect("open");
        store
            .create(&Object {
                id,
                meta: ObjMeta::plain(),
                data: vec![1; len],
            })
            .expect("create");
        (dir, store)
    }

    #[test]
    fn a_reader_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<SnapshotReader>();
    }

    /// A view names its snapshot: the same serial while nothing is committed, a larger one
    /// after a commit by another handle, whose data the new view reads and the old one does not.
    #[test]
    fn a_view_names_its_snapshot_and_a_commit_makes_a_new_one() {
        let id = ObjID::new(7);
        let (dir, store) = store_with_object("view", id, 100);
        let reader = store.snapshot_reader(Duration::from_secs(3600));
        let a = reader.view().expect("view");
        let b = reader.view().expect("view");
        assert_eq!(a.serial(), b.serial());
        assert_eq!(reader.get(id).expect("get").data, vec![1; 100]);
        let other = DbStore::open(&dir).expect("a second handle");
        other.write_at(id, 0, &[2]).expect("write");
        let c = reader.view().expect("view");
        assert!(c.serial() > a.serial());
        assert_eq!(c.get(id).expect("get").data[0], 2);
        assert_eq!(c.info(id).expect("info").len, 100);
        assert_eq!(c.read_at(id, 0, 2).expect("read"), vec![2, 1]);
        // The old view still reads its own commit.
        assert_eq!(a.get(id).expect("get").data[0], 1);
        assert!(matches!(c.get(ObjID::new(8)), Err(StoreError::NotFound(_))));
        drop((a, b, c, reader, other, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The premise of the module (1): every commit leaves the first [`HEADER_BYTES`] of the file
    /// holding bytes they never held before. Fails if a redb upgrade moves its commit slots.
    #[test]
    fn a_commit_changes_the_header_bytes() {
        let dir = std::env::temp_dir().join(format!("secctx-snapshot-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = DbStore::open(&dir).expect("open");
        let id = ObjID::new(7);
        let mut seen = std::collections::HashSet::new();
        assert!(seen.insert(store.header_bytes().expect("header")));
        store
            .create(&Object {
                id,
                meta: ObjMeta::plain(),
                data: vec![1; 100],
            })
            .expect("create");
        assert!(seen.insert(store.header_bytes().expect("header")));
        for i in 0..50u8 {
            // The same bytes again, every other time: a commit that changes no data too.
            store.write_at(id, 0, &[i / 2]).expect("write");
            let h = store.header_bytes().expect("header");
            assert!(seen.insert(h), "commit {i} left a header seen before");
        }
        // Reading changes nothing.
        let h = store.header_bytes().expect("header");
        store.read_at(id, 0, 1).expect("read");
        assert_eq!(store.header_bytes().expect("header"), h);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The cache of objects' bytes answers a second read of the same snapshot, and never a read
    /// after a commit by another handle (an overwrite, a removal) or by its own: those take a
    /// new snapshot, whose serial no cached entry has. Every range it answers is what redb
    /// gives.
    #[test]
    fn a_cached_read_is_as_fresh_as_its_snapshot() {
        let id = ObjID::new(11);
        let (dir, store) = store_with_object("cache", id, 100);
        let reader = store.snapshot_reader(Duration::from_secs(3600));
        let plain =
            SnapshotReader::with_cache(store.clone(), Duration::from_secs(3600), CacheLimits::NONE);
        assert_eq!(reader.read_at(id, 0, 4).expect("read"), [1; 4]);
        assert_eq!(reader.cache_hits(), 0);
        assert_eq!(reader.read_at(id, 98, 4).expect("read"), [1, 1, 0, 0]);
        assert_eq!(reader.cache_hits(), 1);
        // Ranges inside, across and past the object's length, as redb reads them.
        for (offset, len) in [(0, 0), (0, 100), (50, 100), (100, 8), (4000, 16), (99, 1)] {
            assert_eq!(
                reader.read_at(id, offset, len).expect("cached"),
                plain.read_at(id, offset, len).expect("plain"),
                "{offset}+{len}"
            );
        }
        assert!(matches!(
            reader.read_at(id, u64::MAX, 2),
            Err(StoreError::OutOfRange { .. })
        ));
        let hits = reader.cache_hits();

        // An overwrite by another handle: the next read sees it, not the cached bytes.
        let other = DbStore::open(&dir).expect("a second handle");
        other.write_at(id, 0, &[2; 4]).expect("write");
        assert_eq!(reader.read_at(id, 0, 5).expect("read"), [2, 2, 2, 2, 1]);
        assert_eq!(reader.cache_hits(), hits, "a new snapshot: a miss");
        assert_eq!(reader.read_at(id, 0, 5).expect("read"), [2, 2, 2, 2, 1]);
        assert_eq!(reader.cache_hits(), hits + 1);
        // The reader's own handle.
        store.write_at(id, 1, &[3]).expect("write");
        assert_eq!(reader.read_at(id, 0, 3).expect("read"), [2, 3, 2]);
        // Removed by another handle: gone for the next read.
        other.remove(id).expect("remove");
        assert!(matches!(
            reader.read_at(id, 0, 1),
            Err(StoreError::NotFound(_))
        ));
        assert!(matches!(
            reader.read_at(id, 0, 1),
            Err(StoreError::NotFound(_))
        ));
        drop((reader, plain, other, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The cache keeps at most its bound, and only small objects; what it evicted is read
    /// again from the snapshot.
    #[test]
    fn the_cache_stays_within_its_bound() {
        let per = 100 + super::super::ENTRY_OVERHEAD;
        let (dir, store) = store_with_object("cache-bound", ObjID::new(1), 100);
        for i in 2..=6 {
            store
                .create(&Object {
                    id: ObjID::new(i),
                    meta: ObjMeta::plain(),
                    data: vec![i as u8; 100],
                })
                .expect("create");
        }
        store
            .create(&Object {
                id: ObjID::new(7),
                meta: ObjMeta::plain(),
                data: vec![7; 101],
            })
            .expect("create");
        let limits = CacheLimits {
            max_object_bytes: 100,
            max_total_bytes: 3 * per,
        };
        let reader = SnapshotReader::with_cache(store.clone(), Duration::from_secs(3600), limits);
        for round in 0..3 {
            for i in 1..=7u128 {
                let want = if i == 1 { 1 } else { i as u8 };
                assert_eq!(
                    reader.read_at(ObjID::new(i), 0, 2).expect("read"),
                    [want; 2]
                );
                assert!(
                    reader.cache_charged() <= 3 * per,
                    "round {round}, object {i}"
                );
            }
        }
        assert_eq!(reader.cache_charged(), 3 * per, "full, not over");
        // Too large to keep: every read of object 7 asks redb.
        let hits = reader.cache_hits();
        assert_eq!(reader.read_at(ObjID::new(7), 100, 2).expect("read"), [7, 0]);
        assert_eq!(reader.cache_hits(), hits);
        drop((reader, store));
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// (6): a request's read reuses a header read that began after it arrived, and reads the
    /// header itself otherwise; one that arrived after a commit sees it.
    #[test]
    fn a_read_reuses_a_header_read_made_after_its_request_arrived() {
        let id = ObjID::new(9);
        let (dir, store) = store_with_object("arrived", id, 8);
        let reader = store.snapshot_reader(Duration::from_secs(3600));
        let early = Instant::now();
        // The header read below must begin strictly after `early` (the clock counts ns).
        while Instant::now() <= early {
            std::hint::spin_loop();
        }
        assert_eq!(reader.read_at(id, 0, 1).expect("read"), [1]);
        assert_eq!(reader.header_reads(), 1);
        // Arrived before that header read began: answered by it.
        for _ in 0..3 {
            assert_eq!(reader.read_at_arrived(early, id, 0, 1).expect("read"), [1]);
        }
        assert_eq!(
            reader.header_reads(),
            1,
            "no header read for early requests"
        );
        // Arrived after it: reads the header (and is then itself a check for later ones).
        let late = Instant::now();
        assert_eq!(reader.read_at_arrived(late, id, 0, 1).expect("read"), [1]);
        assert_eq!(reader.header_reads(), 2);
        // A commit, then a request: it sees the commit.
        store.write_at(id, 0, &[2]).expect("write");
        let after = Instant::now();
        assert_eq!(reader.read_at_arrived(after, id, 0, 1).expect("read"), [2]);
        assert_eq!(reader.header_reads(), 3);
        assert_eq!(
            reader.snapshots_taken(),
            2,
            "a new transaction after the commit"
        );
        // A plain read always reads the header.
        assert_eq!(reader.read_at(id, 0, 1).expect("read"), [2]);
        assert_eq!(reader.header_reads(), 4);
        drop(reader);
        drop(store);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
