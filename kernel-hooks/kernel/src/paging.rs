//! Physical frames and the page tables: the kernel's identity map and the user object slots.
//!
//! Layout of every address space (the kernel's, and each program task's own):
//!
//! - `0 .. 1 GiB`: identity map of physical memory with 2 MiB pages, supervisor-only: the
//!   kernel image, its stacks and heap, the page tables and the frames backing objects.
//! - slot `n` (`1 ..= MAX_SLOTS`): `n GiB .. (n+1) GiB`, one object per slot, so an object's
//!   byte offset is `vaddr - n GiB`. Nothing is mapped there until the engine decides a fault;
//!   then exactly one 4 KiB page is mapped with exactly the decided protections, tagged with
//!   the security context that granted it (see [`CtxTag`]).
//! - [`KERNEL_MMIO_SLOT`] GiB: device registers (the local APIC), supervisor-only, uncached.
//!
//! **Address spaces.** The kernel's space is the one the assembly probes share (the kernel
//! clears its user half between tasks, and probe tasks that run at the same time on several
//! CPUs run under one context). Each program task gets a space of its own ([`SpaceId`]): its
//! own PML4 and PDPT, whose kernel entries (the identity map and the device registers) point
//! at the kernel's own page directories, so the kernel half is shared and only the slots
//! differ. A page is mapped only into the space loaded on the CPU whose fault decided it;
//! every unmap and write-protection reaches every space, and the shootdown that follows it
//! flushes every CPU whatever space it runs (without PCIDs, a CR3 reload drops all non-global
//! translations). A task space is loaded only by the CPU running its task, between
//! [`PageTables::enter_space`] and [`PageTables::leave_space`], and is cleared and reused
//! only after that CPU has loaded the kernel's tables again: a space's tables are never
//! recycled while a CPU may still run on them.
//!
//! Every page table is reached through the identity map, so frames are only handed out below
//! 1 GiB.

use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use twizzler_capsec::Protections;

/// Bytes per page.
pub const PAGE: u64 = 4096;
/// Bytes per object slot (the largest object).
pub const SLOT_SIZE: u64 = 1 << 30;
/// Object slots (slot 0 is the kernel's identity map): 1 ..= 128 for the boot-built objects,
/// 129 ..= 400 for user programs and the objects they create (`crate::program`).
pub const MAX_SLOTS: u64 = 400;

// The user programs' ABI names the last slot too.
const _: () = assert!(MAX_SLOTS == crate::user_abi::LAST_SLOT);
/// The identity map's extent.
const IDENTITY_LIMIT: u64 = 1 << 30;

/// The 1 GiB region (PDPT index, past every object slot) where device registers are mapped.
pub const KERNEL_MMIO_SLOT: u64 = 510;

const PTE_PRESENT: u64 = 1 << 0;
const PTE_WRITABLE: u64 = 1 << 1;
const PTE_USER: u64 = 1 << 2;
const PTE_WRITE_THROUGH: u64 = 1 << 3;
const PTE_CACHE_DISABLE: u64 = 1 << 4;
const PTE_HUGE: u64 = 1 << 7;
const PTE_NX: u64 = 1 << 63;
const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;
/// Bits 52..=58 of a leaf entry are ignored by the MMU (with protection keys off, which the
/// kernel never turns on): the kernel keeps a page's [`CtxTag`] there.
const PTE_TAG_SHIFT: u64 = 52;
const PTE_TAG_MASK: u64 = 0x7f << PTE_TAG_SHIFT;

/// Which security context a user page was granted under, kept in the page-table entry so that
/// the engine's `Unmap::Object { ctx, .. }` and `Unmap::Context(ctx)` remove exactly the pages
/// granted under `ctx` (the kernel's unmap granularity is per context).
///
/// `1..=127` name a context (its index in the object table, plus one); [`CtxTag::UNKNOWN`] (0)
/// is a page whose context has no tag, which every per-context unmap removes: more than
/// needed, never less.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtxTag(u8);

impl CtxTag {
    /// A page granted under a context without a tag of its own.
    pub const UNKNOWN: CtxTag = CtxTag(0);
    /// The largest tag that fits the entry's ignored bits.
    pub const MAX: u8 = 0x7f;

    /// The tag `n` (`1..=`[`CtxTag::MAX`]), or [`CtxTag::UNKNOWN`] when it does not fit.
    pub fn new(n: usize) -> Self {
        match u8::try_from(n) {
            Ok(t) if (1..=Self::MAX).contains(&t) => Self(t),
            _ => Self::UNKNOWN,
        }
    }

    /// Whether a per-context unmap for `self` removes a page tagged `page`.
    fn covers(self, page: CtxTag) -> bool {
        page == self || page == Self::UNKNOWN
    }
}

/// Page-table and frame errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagingError {
    /// No free frame is left in the pool.
    OutOfFrames,
    /// The address is not inside an object slot.
    NotInSlot(u64),
    /// Frames that had to be consecutive were not.
    NotContiguous,
}

impl fmt::Display for PagingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfFrames => f.write_str("out of physical frames"),
            Self::NotInSlot(v) => write!(f, "address {v:#x} is not in an object slot"),
            Self::NotContiguous => f.write_str("the frame pool gave non-consecutive frames"),
        }
    }
}

/// A physical page frame that backs object contents. Only [`PageTables::alloc_frame`] makes
/// them, so a `Frame` is always a whole page of RAM in the identity map, past the kernel image,
/// that no other `Frame` or kernel data structure overlaps: that is what makes its accessors
/// safe. Not `Clone`: the object owning it is its only handle.
#[derive(Debug)]
pub struct Frame(u64);

impl Frame {
    /// Its physical address.
    pub fn addr(&self) -> u64 {
        self.0
    }

    /// Writes `byte` over the whole frame.
    pub fn fill(&mut self, byte: u8) {
        // SAFETY: a `Frame` is a page of identity-mapped RAM owned by this handle (see the
        // type's invariant), and `&mut self` excludes other writers through it.
        unsafe { core::ptr::write_bytes(self.0 as *mut u8, byte, PAGE as usize) };
    }

    /// Fills the frame with copies of `pattern` (the last one cut at the page's end).
    pub fn tile(&mut self, pattern: &[u8]) {
        if pattern.is_empty() {
            return;
        }
        for start in (0..PAGE as usize).step_by(pattern.len()) {
            let len = pattern.len().min(PAGE as usize - start);
            // SAFETY: as in `fill`; `start + len <= PAGE` keeps the copy inside the frame, and
            // `pattern` (kernel data) cannot overlap a frame.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    pattern.as_ptr(),
                    (self.0 as *mut u8).add(start),
                    len,
                )
            };
        }
    }

    /// Copies `bytes` to byte `at` of the frame; `false` (nothing written) if they do not fit.
    pub fn write_at(&mut self, at: usize, bytes: &[u8]) -> bool {
        if at
            .checked_add(bytes.len())
            .is_none_or(|end| end > PAGE as usize)
        {
            return false;
        }
        // SAFETY: as in `fill`; the check above keeps `at .. at + len` inside the frame, and
        // `bytes` (kernel data) cannot overlap a frame.
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), (self.0 as *mut u8).add(at), bytes.len())
        };
        true
    }

    /// The 64-bit word at byte `offset` (taken modulo the page size, rounded down to 8) as an
    /// atomic: user tasks on other CPUs may update it through their mappings at the same time.
    pub fn atomic_u64(&self, offset: u64) -> &AtomicU64 {
        let at = (offset % PAGE) & !7;
        // SAFETY: as in `fill`, the word lies inside the frame, which lives as long as `self`
        // and is 8-byte aligned; every concurrent access to it (user `lock xadd`, the kernel
        // through this) is atomic, which is what `AtomicU64::from_ptr` requires.
        unsafe { AtomicU64::from_ptr((self.0 + at) as *mut u64) }
    }

    /// Stores `byte` at `offset` (modulo the page size) atomically, for frames user tasks on
    /// other CPUs may be reading (or, for contexts, the engine).
    pub fn store_byte(&self, offset: u64, byte: u8) {
        // SAFETY: as in `atomic_u64`, for one byte.
        unsafe { AtomicU8::from_ptr((self.0 + offset % PAGE) as *mut u8) }
            .store(byte, Ordering::SeqCst);
    }

    /// The byte at `offset` (taken modulo the page size). User tasks may write the frame
    /// while it is mapped, so this is a volatile read of whatever is there.
    pub fn read_byte(&self, offset: u64) -> u8 {
        // SAFETY: as in `fill`; `offset % PAGE` stays inside the frame.
        unsafe { core::ptr::read_volatile((self.0 + offset % PAGE) as *const u8) }
    }
}

/// A bump allocator over one range of RAM below 1 GiB. Frames are zeroed when handed out and
/// never freed (the kernel runs a fixed set of scenarios, then exits).
pub struct FrameAllocator {
    next: u64,
    end: u64,
}

impl FrameAllocator {
    /// Frames from `[start, end)`, rounded inwards to pages and clipped to the identity map.
    pub fn new(start: u64, end: u64) -> Self {
        let start = start.div_ceil(PAGE).saturating_mul(PAGE);
        let end = end.min(IDENTITY_LIMIT) & !(PAGE - 1);
        Self {
            next: start,
            end: end.max(start),
        }
    }

    /// Frames still free.
    pub fn remaining(&self) -> u64 {
        (self.end - self.next) / PAGE
    }

    /// A zeroed frame's physical address.
    pub fn alloc(&mut self) -> Result<u64, PagingError> {
        if self.next >= self.end {
            return Err(PagingError::OutOfFrames);
        }
        let frame = self.next;
        self.next += PAGE;
        // SAFETY: the frame lies in RAM the boot memory map reported, below 1 GiB (identity
        // mapped, writable), past the kernel image, and was never handed out before, so
        // nothing else references it.
        unsafe { core::ptr::write_bytes(frame as *mut u8, 0, PAGE as usize) };
        Ok(frame)
    }
}

/// Reads entry `index` of the table at physical address `table`.
fn read_entry(table: u64, index: u64) -> u64 {
    debug_assert!(index < 512 && table < IDENTITY_LIMIT);
    // SAFETY: `table` is a page-table frame this module allocated (identity-mapped, aligned)
    // and `index < 512` keeps the access inside it.
    unsafe { core::ptr::read_volatile((table + index * 8) as *const u64) }
}

/// Writes entry `index` of the table at physical address `table`.
fn write_entry(table: u64, index: u64, value: u64) {
    debug_assert!(index < 512 && table < IDENTITY_LIMIT);
    // SAFETY: as in `read_entry`; page-table frames are owned by `PageTables` and only written
    // here. Callers flush the TLB for any translation the write narrows.
    unsafe { core::ptr::write_volatile((table + index * 8) as *mut u64, value) };
}

/// The page-table entry for a user page with exactly `prots`: present and user-accessible,
/// writable only with `WRITE`, executable only with `EXEC`, tagged `tag`.
pub fn user_pte(phys: u64, prots: Protections, tag: CtxTag) -> u64 {
    let mut pte = (phys & PTE_ADDR)
        | PTE_PRESENT
        | PTE_USER
        | (u64::from(tag.0) << PTE_TAG_SHIFT) & PTE_TAG_MASK;
    if prots.contains(Protections::WRITE) {
        pte |= PTE_WRITABLE;
    }
    if !prots.contains(Protections::EXEC) {
        pte |= PTE_NX;
    }
    pte
}

/// The context tag of a leaf entry.
pub fn pte_tag(pte: u64) -> CtxTag {
    CtxTag(((pte & PTE_TAG_MASK) >> PTE_TAG_SHIFT) as u8)
}

/// The protections a leaf entry grants (`READ` whenever it is present).
pub fn pte_prots(pte: u64) -> Protections {
    let mut p = Protections::empty();
    if pte & PTE_PRESENT != 0 {
        p |= Protections::READ;
        if pte & PTE_WRITABLE != 0 {
            p |= Protections::WRITE;
        }
        if pte & PTE_NX == 0 {
            p |= Protections::EXEC;
        }
    }
    p
}

/// One address space: a PML4 whose entry 0 is its PDPT (the other entries are empty).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Space {
    pml4: u64,
    /// Entry 0 is the identity map, entries `1..=MAX_SLOTS` the slots.
    pdpt: u64,
}

/// A program task's address space (see the module's documentation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpaceId(usize);

/// A task space and whether a task holds it (a free one has an empty user half).
struct TaskSpace {
    space: Space,
    in_use: bool,
    /// The CPU that has it loaded (between [`PageTables::enter_space`] and
    /// [`PageTables::leave_space`]): the only one that may leave and recycle it.
    loaded_on: Option<usize>,
}

/// Why a task space could not be left and recycled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpaceError {
    /// No task holds that space.
    NotInUse,
    /// Another CPU has it loaded (or none does): recycling it could leave a CPU on it.
    NotLoadedHere,
}

/// The page tables: the kernel's address space and the program tasks' spaces.
pub struct PageTables {
    kernel: Space,
    /// Task spaces, never freed: a retired one is cleared and handed to the next task.
    tasks: Vec<TaskSpace>,
    frames: FrameAllocator,
}

impl PageTables {
    /// Builds the identity map of the first GiB (supervisor-only) and empty slots.
    pub fn new(mut frames: FrameAllocator) -> Result<Self, PagingError> {
        let pml4 = frames.alloc()?;
        let pdpt = frames.alloc()?;
        let pd = frames.alloc()?;
        for i in 0..512 {
            write_entry(pd, i, (i << 21) | PTE_PRESENT | PTE_WRITABLE | PTE_HUGE);
        }
        write_entry(pdpt, 0, pd | PTE_PRESENT | PTE_WRITABLE);
        // User bit on the upper levels: the leaf entries decide who may access what.
        write_entry(pml4, 0, pdpt | PTE_PRESENT | PTE_WRITABLE | PTE_USER);
        Ok(Self {
            kernel: Space { pml4, pdpt },
            tasks: Vec::new(),
            frames,
        })
    }

    /// Switches the processor to these tables.
    pub fn activate(&self) {
        // SAFETY: the tables identity-map the whole first GiB, where the kernel image, its
        // stacks, heap and page tables live, at the addresses the boot tables used.
        unsafe { crate::cpu::write_cr3(self.kernel.pml4) };
    }

    /// A task space with an empty user half, for a task about to run: a retired one, or a
    /// new one whose kernel entries are the kernel's.
    pub fn new_space(&mut self) -> Result<SpaceId, PagingError> {
        if let Some(i) = self.tasks.iter().position(|t| !t.in_use) {
            if let Some(t) = self.tasks.get_mut(i) {
                t.in_use = true;
            }
            return Ok(SpaceId(i));
        }
        let pml4 = self.frames.alloc()?;
        let pdpt = self.frames.alloc()?;
        // The kernel half: every PDPT entry outside the slots (the identity map, the device
        // registers) points at the kernel's own directory, so it is one set of tables.
        for i in (0..512).filter(|i| !(1..=MAX_SLOTS).contains(i)) {
            write_entry(pdpt, i, read_entry(self.kernel.pdpt, i));
        }
        write_entry(pml4, 0, pdpt | PTE_PRESENT | PTE_WRITABLE | PTE_USER);
        self.tasks.push(TaskSpace {
            space: Space { pml4, pdpt },
            in_use: true,
            loaded_on: None,
        });
        Ok(SpaceId(self.tasks.len() - 1))
    }

    /// Loads task space `id` on this CPU (the CPU that runs its task, and only it).
    pub fn enter_space(&mut self, id: SpaceId) -> Result<(), SpaceError> {
        let Some(t) = self
            .tasks
            .get_mut(id.0)
            .filter(|t| t.in_use && t.loaded_on.is_none())
        else {
            return Err(SpaceError::NotInUse);
        };
        t.loaded_on = Some(crate::smp::current());
        // SAFETY: the space's kernel half is the kernel's own tables (the identity map of the
        // first GiB, where the kernel image, its stacks, heap and page tables live, and the
        // device registers), so the kernel runs on unchanged; its user half only holds pages
        // the engine decided for the task.
        unsafe { crate::cpu::write_cr3(t.space.pml4) };
        Ok(())
    }

    /// Loads the kernel's tables on this CPU, leaving task space `id`, and retires the space:
    /// its user half is cleared and it goes to the next task. Only the CPU that entered it
    /// may (else nothing changes): it is the only one that has it loaded, and after its CR3
    /// write here no CPU has it loaded, nor any translation through it (the write drops them
    /// all), so the space's tables can be reused. Returns how many pages it still held.
    pub fn leave_space(&mut self, id: SpaceId) -> Result<usize, SpaceError> {
        let me = crate::smp::current();
        let t = self
            .tasks
            .get(id.0)
            .filter(|t| t.in_use)
            .ok_or(SpaceError::NotInUse)?;
        if t.loaded_on != Some(me) {
            return Err(SpaceError::NotLoadedHere);
        }
        let space = t.space;
        self.activate();
        let cleared = (1..=MAX_SLOTS)
            .map(|s| Self::rewrite_slot_in(space, s, |_| Some(0)))
            .sum();
        if let Some(t) = self.tasks.get_mut(id.0) {
            t.in_use = false;
            t.loaded_on = None;
        }
        Ok(cleared)
    }

    /// The space loaded on this CPU: the task space its CR3 names, else the kernel's.
    fn current(&self) -> Space {
        let root = crate::cpu::read_cr3() & PTE_ADDR;
        self.tasks
            .iter()
            .find(|t| t.in_use && t.space.pml4 == root)
            .map_or(self.kernel, |t| t.space)
    }

    /// Every space that may hold user pages: the kernel's and the task spaces in use.
    fn spaces(&self) -> impl Iterator<Item = Space> + '_ {
        core::iter::once(self.kernel).chain(self.tasks.iter().filter(|t| t.in_use).map(|t| t.space))
    }

    /// Task spaces made so far (in use or free), and how many are in use.
    pub fn space_counts(&self) -> (usize, usize) {
        (
            self.tasks.len(),
            self.tasks.iter().filter(|t| t.in_use).count(),
        )
    }

    /// A zeroed frame for object contents.
    pub fn alloc_frame(&mut self) -> Result<Frame, PagingError> {
        self.frames.alloc().map(Frame)
    }

    /// `n` zeroed frames at consecutive physical addresses, so the identity map shows them as
    /// one range (the kernel lends a context's bytes to the engine as one pointer and length).
    pub fn alloc_contiguous(&mut self, n: usize) -> Result<Vec<Frame>, PagingError> {
        let mut frames: Vec<Frame> = Vec::with_capacity(n);
        for _ in 0..n {
            let f = self.alloc_frame()?;
            // The bump allocator hands out consecutive frames; check rather than assume.
            if frames
                .last()
                .is_some_and(|last| last.addr() + PAGE != f.addr())
            {
                return Err(PagingError::NotContiguous);
            }
            frames.push(f);
        }
        Ok(frames)
    }

    /// Maps the 4 KiB of device registers at physical `phys` at `vaddr` (in
    /// [`KERNEL_MMIO_SLOT`]): supervisor-only, writable, uncached, not executable.
    pub fn map_kernel_mmio(&mut self, vaddr: u64, phys: u64) -> Result<(), PagingError> {
        if vaddr / SLOT_SIZE != KERNEL_MMIO_SLOT {
            return Err(PagingError::NotInSlot(vaddr));
        }
        let (pdi, pti) = Self::indices(vaddr);
        let pd = Self::next_table(&mut self.frames, self.kernel.pdpt, KERNEL_MMIO_SLOT, true)?
            .ok_or(PagingError::OutOfFrames)?;
        let pt =
            Self::next_table(&mut self.frames, pd, pdi, true)?.ok_or(PagingError::OutOfFrames)?;
        let pte = (phys & PTE_ADDR)
            | PTE_PRESENT
            | PTE_WRITABLE
            | PTE_WRITE_THROUGH
            | PTE_CACHE_DISABLE
            | PTE_NX;
        write_entry(pt, pti, pte);
        crate::cpu::invlpg(vaddr);
        Ok(())
    }

    /// Frames still free.
    pub fn frames_remaining(&self) -> u64 {
        self.frames.remaining()
    }

    /// The slot index of a user address, if it lies in one.
    pub fn slot_of(vaddr: u64) -> Option<u64> {
        let slot = vaddr / SLOT_SIZE;
        (1..=MAX_SLOTS).contains(&slot).then_some(slot)
    }

    /// Indices (PD, PT) of `vaddr` within its slot.
    fn indices(vaddr: u64) -> (u64, u64) {
        ((vaddr >> 21) & 511, (vaddr >> 12) & 511)
    }

    /// The next-level table under `entry` of `table`, creating it (from `frames`) if
    /// `create`.
    fn next_table(
        frames: &mut FrameAllocator,
        table: u64,
        index: u64,
        create: bool,
    ) -> Result<Option<u64>, PagingError> {
        let e = read_entry(table, index);
        if e & PTE_PRESENT != 0 {
            return Ok(Some(e & PTE_ADDR));
        }
        if !create {
            return Ok(None);
        }
        let t = frames.alloc()?;
        write_entry(table, index, t | PTE_PRESENT | PTE_WRITABLE | PTE_USER);
        Ok(Some(t))
    }

    /// The existing next-level table under `entry` of `table`.
    fn table_at(table: u64, index: u64) -> Option<u64> {
        let e = read_entry(table, index);
        (e & PTE_PRESENT != 0).then_some(e & PTE_ADDR)
    }

    /// Maps the 4 KiB user page at `vaddr` to `frame` with exactly `prots`, granted under the
    /// context tagged `tag`, in the space loaded on this CPU (the faulting task's), replacing
    /// any existing mapping there, and flushes the old translation.
    pub fn map_user(
        &mut self,
        vaddr: u64,
        frame: &Frame,
        prots: Protections,
        tag: CtxTag,
    ) -> Result<(), PagingError> {
        let slot = Self::slot_of(vaddr).ok_or(PagingError::NotInSlot(vaddr))?;
        let (pdi, pti) = Self::indices(vaddr);
        let space = self.current();
        let pd = Self::next_table(&mut self.frames, space.pdpt, slot, true)?
            .ok_or(PagingError::OutOfFrames)?;
        let pt =
            Self::next_table(&mut self.frames, pd, pdi, true)?.ok_or(PagingError::OutOfFrames)?;
        write_entry(pt, pti, user_pte(frame.addr(), prots, tag));
        crate::cpu::invlpg(vaddr);
        Ok(())
    }

    /// The leaf entry for user address `vaddr` in the space loaded on this CPU (0 if none).
    pub fn user_entry(&mut self, vaddr: u64) -> u64 {
        let Some(slot) = Self::slot_of(vaddr) else {
            return 0;
        };
        let (pdi, pti) = Self::indices(vaddr);
        Self::table_at(self.current().pdpt, slot)
            .and_then(|pd| Self::table_at(pd, pdi))
            .map_or(0, |pt| read_entry(pt, pti))
    }

    /// Rewrites every present leaf entry of slot `slot` in `space` for which `change` returns
    /// a new value (flushing each on this CPU, where it may be loaded); returns how many.
    fn rewrite_slot_in(
        space: Space,
        slot: u64,
        mut change: impl FnMut(u64) -> Option<u64>,
    ) -> usize {
        if !(1..=MAX_SLOTS).contains(&slot) {
            return 0;
        }
        let Some(pd) = Self::table_at(space.pdpt, slot) else {
            return 0;
        };
        let mut rewritten = 0;
        for pdi in 0..512 {
            let Some(pt) = Self::table_at(pd, pdi) else {
                continue;
            };
            for pti in 0..512 {
                let pte = read_entry(pt, pti);
                if pte & PTE_PRESENT == 0 {
                    continue;
                }
                if let Some(new) = change(pte) {
                    write_entry(pt, pti, new);
                    crate::cpu::invlpg(slot * SLOT_SIZE + (pdi << 21) + (pti << 12));
                    rewritten += 1;
                }
            }
        }
        rewritten
    }

    /// [`Self::rewrite_slot_in`] in every space that may hold user pages.
    fn rewrite_slot(&mut self, slot: u64, change: impl Fn(u64) -> Option<u64>) -> usize {
        self.spaces()
            .map(|space| Self::rewrite_slot_in(space, slot, &change))
            .sum()
    }

    /// Unmaps every page of slot `slot`, in every space (flushing each on this CPU; the
    /// caller shoots the others down); returns how many were mapped.
    pub fn unmap_slot(&mut self, slot: u64) -> usize {
        self.rewrite_slot(slot, |_| Some(0))
    }

    /// Unmaps every page of slot `slot` in the space loaded on this CPU only (a task's own
    /// unmap); returns how many were mapped.
    pub fn unmap_slot_here(&mut self, slot: u64) -> usize {
        Self::rewrite_slot_in(self.current(), slot, |_| Some(0))
    }

    /// Unmaps the pages of slot `slot` granted under the context tagged `tag`, in every space.
    pub fn unmap_slot_under(&mut self, slot: u64, tag: CtxTag) -> usize {
        self.rewrite_slot(slot, |pte| tag.covers(pte_tag(pte)).then_some(0))
    }

    /// Unmaps every user page granted under the context tagged `tag`, in every space.
    pub fn unmap_all_under(&mut self, tag: CtxTag) -> usize {
        (1..=MAX_SLOTS).map(|s| self.unmap_slot_under(s, tag)).sum()
    }

    /// Takes write access away from every page of slot `slot`, in every space (keeping the
    /// pages mapped with their other rights); returns how many were writable.
    pub fn write_protect_slot(&mut self, slot: u64) -> usize {
        self.rewrite_slot(slot, |pte| {
            (pte & PTE_WRITABLE != 0).then_some(pte & !PTE_WRITABLE)
        })
    }

    /// Takes write access away from every user page granted under the context tagged `tag`,
    /// in every space (the pages stay mapped with their other rights; each rewritten entry is
    /// flushed on this CPU, the caller shoots the others down); returns how many were writable.
    pub fn write_protect_all_under(&mut self, tag: CtxTag) -> usize {
        (1..=MAX_SLOTS)
            .map(|s| {
                self.rewrite_slot(s, |pte| {
                    (tag.covers(pte_tag(pte)) && pte & PTE_WRITABLE != 0)
                        .then_some(pte & !PTE_WRITABLE)
                })
            })
            .sum()
    }

    /// Unmaps every user page of the kernel's own space (the probes' space; task spaces are
    /// cleared when their task leaves them); returns how many were mapped.
    pub fn unmap_all_user(&mut self) -> usize {
        let kernel = self.kernel;
        (1..=MAX_SLOTS)
            .map(|s| Self::rewrite_slot_in(kernel, s, |_| Some(0)))
            .sum()
    }
}
