//! The global descriptor table and the task-state segment.
//!
//! Segments: kernel code and data (ring 0), user data and code (ring 3), and the TSS, whose
//! `RSP0` is the stack the processor switches to when a ring-3 task traps, and whose `IST1` is
//! a known-good stack for double faults.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::mem::size_of;

use crate::smp::MAX_CPUS;

/// Kernel code selector.
pub const KERNEL_CS: u16 = 0x08;
/// Kernel data selector.
pub const KERNEL_DS: u16 = 0x10;
/// User data (and stack) selector, RPL 3.
pub const USER_DS: u16 = 0x18 | 3;
/// User 64-bit code selector, RPL 3.
pub const USER_CS: u16 = 0x20 | 3;
/// TSS selector.
const TSS_SEL: u16 = 0x28;

/// The 64-bit TSS (Intel SDM vol. 3, 8.7). Packed: the stack pointers sit at 4-byte offsets.
#[repr(C, packed(4))]
struct Tss {
    _reserved0: u32,
    rsp: [u64; 3],
    _reserved1: u64,
    ist: [u64; 7],
    _reserved2: u64,
    _reserved3: u16,
    iomap_base: u16,
}

const DOUBLE_FAULT_STACK_BYTES: usize = 16 * 1024;

#[repr(C, align(16))]
struct Stack([u8; DOUBLE_FAULT_STACK_BYTES]);

/// One processor's tables. Written only by this module, during [`init`] and by [`set_rsp0`],
/// each processor writing only its own (indexed by its kernel CPU number), with interrupts
/// disabled.
struct Tables {
    gdt: [u64; 7],
    tss: Tss,
}

/// The double-fault stack: written only by the processor, on a double fault. Kept apart from
/// [`Tables`] (whose initialiser is not all zeros) so its 16 KiB are `.bss`, not `.data`.
struct StackCell(UnsafeCell<Stack>);

// SAFETY: Rust code never reads or writes the stack; only its address is taken.
unsafe impl Sync for StackCell {}

static DF_STACKS: [StackCell; MAX_CPUS] =
    [const { StackCell(UnsafeCell::new(Stack([0; DOUBLE_FAULT_STACK_BYTES]))) }; MAX_CPUS];

struct TablesCell(UnsafeCell<Tables>);

// SAFETY: each processor reads and writes only the cell of its own CPU number (`init(cpu)` on
// that processor, once, then `set_rsp0` on it between user entries, with interrupts
// disabled); the processor itself reads the GDT and TSS it was given with `lgdt`/`ltr`. So no
// two processors ever access one cell's contents.
unsafe impl Sync for TablesCell {}

static TABLES: [TablesCell; MAX_CPUS] = [const { TablesCell(UnsafeCell::new(INITIAL)) }; MAX_CPUS];

const INITIAL: Tables = Tables {
    gdt: [
        0,
        0x00af_9a00_0000_ffff, // 0x08: kernel code, 64-bit, DPL 0
        0x00cf_9200_0000_ffff, // 0x10: kernel data, DPL 0
        0x00cf_f200_0000_ffff, // 0x18: user data, DPL 3
        0x00af_fa00_0000_ffff, // 0x20: user code, 64-bit, DPL 3
        0,                     // 0x28: TSS (low half), filled in by `init`
        0,                     //       TSS (high half)
    ],
    tss: Tss {
        _reserved0: 0,
        rsp: [0; 3],
        _reserved1: 0,
        ist: [0; 7],
        _reserved2: 0,
        _reserved3: 0,
        iomap_base: size_of::<Tss>() as u16, // no I/O permission bitmap: ring 3 gets no ports
    },
};

/// The IST slot (1-based, as the IDT names it) of the double-fault stack.
pub const DOUBLE_FAULT_IST: u8 = 1;

#[repr(C, packed)]
struct Pointer {
    limit: u16,
    base: u64,
}

/// Loads processor `cpu`'s GDT and TSS (its own copy), reloading every segment register.
/// Called once on each processor, by that processor, with its CPU number (`< MAX_CPUS`).
pub fn init(cpu: usize) {
    let tables = TABLES[cpu].0.get();
    // SAFETY: only processor `cpu` touches `TABLES[cpu]` and `DF_STACKS[cpu]` (see
    // `TablesCell`), with interrupts disabled, so nothing else reads or writes them while they
    // are filled in; the descriptors written are well-formed (a 64-bit available TSS covering
    // exactly `Tss`), and the segment reload keeps the kernel running with equivalent flat
    // segments.
    unsafe {
        let tss_addr = &raw const (*tables).tss as u64;
        let df_top = DF_STACKS[cpu].0.get() as u64 + DOUBLE_FAULT_STACK_BYTES as u64;
        (&raw mut (*tables).tss.ist[usize::from(DOUBLE_FAULT_IST) - 1]).write_unaligned(df_top);
        let limit = (size_of::<Tss>() - 1) as u64;
        let low = (limit & 0xffff)
            | (tss_addr & 0xff_ffff) << 16
            | 0x89 << 40 // present, DPL 0, type 9: available 64-bit TSS
            | ((limit >> 16) & 0xf) << 48
            | ((tss_addr >> 24) & 0xff) << 56;
        (*tables).gdt[5] = low;
        (*tables).gdt[6] = tss_addr >> 32;

        let ptr = Pointer {
            limit: (size_of::<[u64; 7]>() - 1) as u16,
            base: &raw const (*tables).gdt as u64,
        };
        asm!(
            "lgdt [{ptr}]",
            // Reload CS with a far return, then the data segments.
            "push {cs}",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov ds, {ds:x}",
            "mov es, {ds:x}",
            "mov ss, {ds:x}",
            "ltr {tss:x}",
            ptr = in(reg) &raw const ptr,
            cs = const KERNEL_CS as u64,
            ds = in(reg) u64::from(KERNEL_DS),
            tss = in(reg) u64::from(TSS_SEL),
            tmp = out(reg) _,
        );
    }
}

/// Sets the stack the processor switches to when ring 3 traps (`TSS.RSP0`).
///
/// # Safety
/// `top` must be 16-byte aligned and the top of writable memory the processor may push an
/// interrupt frame (and the trap stubs a register frame) into, and it must stay valid until
/// the next call.
pub unsafe fn set_rsp0(top: u64) {
    let tables = TABLES[crate::smp::current()].0.get();
    // SAFETY: the running processor's own TSS (see `TablesCell`), interrupts disabled: no
    // concurrent access; the field write is unaligned-safe through `write_unaligned` (the TSS
    // is packed).
    unsafe { (&raw mut (*tables).tss.rsp[0]).write_unaligned(top) };
}
