//! Physical frames and the page tables: the kernel's identity map and the user object slots.
//!
//! Layout of the address space (one, shared by every task; the kernel clears the user half
//! between tasks):
//!
//! - `0 .. 1 GiB`: identity map of physical memory with 2 MiB pages, supervisor-only: the
//!   kernel image, its stacks and heap, the page tables and the frames backing objects.
//! - slot `n` (`1 ..= MAX_SLOTS`): `n GiB .. (n+1) GiB`, one object per slot, so an object's
//!   byte offset is `vaddr - n GiB`. Nothing is mapped there until the engine decides a fault;
//!   then exactly one 4 KiB page is mapped with exactly the decided protections.
//!
//! Every page table is reached through the identity map, so frames are only handed out below
//! 1 GiB.

use core::fmt;

use twizzler_security::Protections;

/// Bytes per page.
pub const PAGE: u64 = 4096;
/// Bytes per object slot (the largest object).
pub const SLOT_SIZE: u64 = 1 << 30;
/// Object slots (slot 0 is the kernel's identity map).
pub const MAX_SLOTS: u64 = 64;
/// The identity map's extent.
const IDENTITY_LIMIT: u64 = 1 << 30;

const PTE_PRESENT: u64 = 1 << 0;
const PTE_WRITABLE: u64 = 1 << 1;
const PTE_USER: u64 = 1 << 2;
const PTE_HUGE: u64 = 1 << 7;
const PTE_NX: u64 = 1 << 63;
const PTE_ADDR: u64 = 0x000f_ffff_ffff_f000;

/// Page-table and frame errors.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagingError {
    /// No free frame is left in the pool.
    OutOfFrames,
    /// The address is not inside an object slot.
    NotInSlot(u64),
}

impl fmt::Display for PagingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::OutOfFrames => f.write_str("out of physical frames"),
            Self::NotInSlot(v) => write!(f, "address {v:#x} is not in an object slot"),
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
/// writable only with `WRITE`, executable only with `EXEC`.
pub fn user_pte(phys: u64, prots: Protections) -> u64 {
    let mut pte = (phys & PTE_ADDR) | PTE_PRESENT | PTE_USER;
    if prots.contains(Protections::WRITE) {
        pte |= PTE_WRITABLE;
    }
    if !prots.contains(Protections::EXEC) {
        pte |= PTE_NX;
    }
    pte
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

/// The kernel's page tables.
pub struct PageTables {
    pml4: u64,
    /// The PDPT under PML4[0]: entry 0 is the identity map, entries `1..=MAX_SLOTS` the slots.
    pdpt: u64,
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
        Ok(Self { pml4, pdpt, frames })
    }

    /// Switches the processor to these tables.
    pub fn activate(&self) {
        // SAFETY: the tables identity-map the whole first GiB, where the kernel image, its
        // stacks, heap and page tables live, at the addresses the boot tables used.
        unsafe { crate::cpu::write_cr3(self.pml4) };
    }

    /// A zeroed frame for object contents.
    pub fn alloc_frame(&mut self) -> Result<Frame, PagingError> {
        self.frames.alloc().map(Frame)
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

    /// The next-level table under `entry` of `table`, creating it if `create`.
    fn next_table(
        &mut self,
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
        let t = self.frames.alloc()?;
        write_entry(table, index, t | PTE_PRESENT | PTE_WRITABLE | PTE_USER);
        Ok(Some(t))
    }

    /// Maps the 4 KiB user page at `vaddr` to `frame` with exactly `prots`, replacing any
    /// existing mapping, and flushes the old translation.
    pub fn map_user(
        &mut self,
        vaddr: u64,
        frame: &Frame,
        prots: Protections,
    ) -> Result<(), PagingError> {
        let slot = Self::slot_of(vaddr).ok_or(PagingError::NotInSlot(vaddr))?;
        let (pdi, pti) = Self::indices(vaddr);
        let pd = self
            .next_table(self.pdpt, slot, true)?
            .ok_or(PagingError::OutOfFrames)?;
        let pt = self
            .next_table(pd, pdi, true)?
            .ok_or(PagingError::OutOfFrames)?;
        write_entry(pt, pti, user_pte(frame.addr(), prots));
        crate::cpu::invlpg(vaddr);
        Ok(())
    }

    /// The leaf entry for user address `vaddr` (0 if none).
    pub fn user_entry(&mut self, vaddr: u64) -> u64 {
        let Some(slot) = Self::slot_of(vaddr) else {
            return 0;
        };
        let (pdi, pti) = Self::indices(vaddr);
        let Ok(Some(pd)) = self.next_table(self.pdpt, slot, false) else {
            return 0;
        };
        let Ok(Some(pt)) = self.next_table(pd, pdi, false) else {
            return 0;
        };
        read_entry(pt, pti)
    }

    /// Unmaps every page of slot `slot` (flushing each); returns how many were mapped.
    pub fn unmap_slot(&mut self, slot: u64) -> usize {
        if !(1..=MAX_SLOTS).contains(&slot) {
            return 0;
        }
        let Ok(Some(pd)) = self.next_table(self.pdpt, slot, false) else {
            return 0;
        };
        let mut cleared = 0;
        for pdi in 0..512 {
            let Ok(Some(pt)) = self.next_table(pd, pdi, false) else {
                continue;
            };
            for pti in 0..512 {
                if read_entry(pt, pti) & PTE_PRESENT != 0 {
                    write_entry(pt, pti, 0);
                    crate::cpu::invlpg(slot * SLOT_SIZE + (pdi << 21) + (pti << 12));
                    cleared += 1;
                }
            }
        }
        cleared
    }

    /// Unmaps every user page; returns how many were mapped.
    pub fn unmap_all_user(&mut self) -> usize {
        (1..=MAX_SLOTS).map(|s| self.unmap_slot(s)).sum()
    }
}
