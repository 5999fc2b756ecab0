//! Booting: the PVH entry note, the 32-bit entry stub that enables long mode, and the PVH
//! start-of-day information.
//!
//! QEMU's `-kernel` loads this ELF64 image at its physical addresses (1 MiB up) and, because
//! of the `XEN_ELFNOTE_PHYS32_ENTRY` note, starts it at `pvh_start32` in 32-bit protected mode
//! with paging off and `ebx` holding the physical address of an `hvm_start_info`. The stub:
//!
//! 1. zeroes `.bss` (the boot page tables and stack live there);
//! 2. identity-maps the first 1 GiB with 2 MiB pages (PML4 -> PDPT -> PD);
//! 3. sets CR4.PAE, loads CR3, sets EFER.LME, sets CR0.PG;
//! 4. loads a minimal 64-bit GDT and far-jumps to 64-bit code, which loads the data segments,
//!    switches to the kernel stack and calls `kmain(start_info)`.
//!
//! The Rust side then replaces the boot GDT and page tables with its own (see `gdt` and
//! `paging`).

use core::arch::global_asm;

/// Bytes of the kernel's main stack (scenario code, the engine and the crypto run on it).
pub const KERNEL_STACK_BYTES: usize = 512 * 1024;

global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .p2align 2
    .long 4                 /* namesz: "Xen\0" */
    .long 4                 /* descsz */
    .long 18                /* XEN_ELFNOTE_PHYS32_ENTRY */
    .asciz "Xen"
    .long pvh_start32

    .section .boot.text, "ax"
    .code32
    .global pvh_start32
pvh_start32:
    cli
    cld
    mov %ebx, %esi                      /* keep the start_info pointer in esi */

    /* 1. zero .bss */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb

    /* 2. identity map 0..1 GiB: PML4[0] -> PDPT, PDPT[0] -> PD, PD[i] = i * 2 MiB, huge */
    mov $boot_pdpt, %eax
    or $0x3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $0x3, %eax
    mov %eax, boot_pdpt
    xor %ecx, %ecx
1:
    mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax                      /* present, writable, 2 MiB page */
    mov %eax, boot_pd(,%ecx,8)
    movl $0, boot_pd+4(,%ecx,8)
    inc %ecx
    cmp $512, %ecx
    jne 1b

    /* 3. PAE, CR3, EFER.LME, paging */
    mov %cr4, %eax
    or $(1 << 5), %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    rdmsr
    or $(1 << 8), %eax
    wrmsr
    mov %cr0, %eax
    or $0x80000001, %eax
    mov %eax, %cr0

    /* 4. 64-bit GDT, far jump into long mode */
    lgdt boot_gdt_ptr
    ljmp $0x08, $long_mode_entry

    .code64
long_mode_entry:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %ax, %ax
    mov %ax, %fs
    mov %ax, %gs
    mov $boot_stack_top, %rsp
    xor %ebp, %ebp
    mov %esi, %edi                      /* kmain(start_info_phys) */
    call kmain
2:
    cli
    hlt
    jmp 2b

    .section .rodata.boot_gdt, "a"
    .p2align 3
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff            /* 0x08: 64-bit code, ring 0 */
    .quad 0x00cf92000000ffff            /* 0x10: data, ring 0 */
boot_gdt_end:
    .p2align 2
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt

    .section .bss.boot, "aw", @nobits
    .p2align 12
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 4096
    .p2align 4
boot_stack_bottom:
    .skip {stack_bytes}
boot_stack_top:
    "#,
    stack_bytes = const KERNEL_STACK_BYTES,
    options(att_syntax)
);

/// `hvm_start_info.magic`.
const PVH_MAGIC: u32 = 0x336e_c578;
/// `hvm_memmap_table_entry.type` for usable RAM.
const E820_RAM: u32 = 1;

/// A usable RAM range from the PVH memory map.
#[derive(Clone, Copy, Debug)]
pub struct RamRange {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
}

/// Why the start-of-day information could not be used.
#[derive(Clone, Copy, Debug)]
pub enum BootInfoError {
    /// `start_info` is null or outside the identity-mapped first GiB.
    BadPointer(u64),
    /// The magic number is not PVH's.
    BadMagic(u32),
    /// The loader gave no memory map (PVH version 0).
    NoMemoryMap,
}

impl core::fmt::Display for BootInfoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::BadPointer(p) => write!(f, "PVH start_info pointer {p:#x} is not usable"),
            Self::BadMagic(m) => write!(f, "PVH start_info magic is {m:#x}, not {PVH_MAGIC:#x}"),
            Self::NoMemoryMap => f.write_str("the PVH loader passed no memory map"),
        }
    }
}

/// Reads 32 bits of boot information at physical address `addr`.
fn read_u32(addr: u64) -> u32 {
    // SAFETY: callers check `addr` lies in the identity-mapped first GiB, which the loader's
    // data lives in; `read_unaligned` needs no alignment; the loader's data is not mutated.
    unsafe { core::ptr::read_unaligned(addr as *const u32) }
}

fn read_u64(addr: u64) -> u64 {
    u64::from(read_u32(addr)) | u64::from(read_u32(addr + 4)) << 32
}

/// Highest physical address the boot tables map (1 GiB).
const IDENTITY_LIMIT: u64 = 1 << 30;

fn readable(addr: u64, len: u64) -> bool {
    addr != 0
        && addr
            .checked_add(len)
            .is_some_and(|end| end <= IDENTITY_LIMIT)
}

/// Calls `f` for every RAM range the PVH loader reports.
///
/// `hvm_start_info`: magic u32 @0, version u32 @4, ..., memmap_paddr u64 @40,
/// memmap_entries u32 @48; entries are `{addr u64, size u64, type u32, reserved u32}`.
pub fn for_each_ram_range(
    start_info: u64,
    mut f: impl FnMut(RamRange),
) -> Result<(), BootInfoError> {
    if !readable(start_info, 56) {
        return Err(BootInfoError::BadPointer(start_info));
    }
    let magic = read_u32(start_info);
    if magic != PVH_MAGIC {
        return Err(BootInfoError::BadMagic(magic));
    }
    let version = read_u32(start_info + 4);
    let map = read_u64(start_info + 40);
    let entries = u64::from(read_u32(start_info + 48));
    if version < 1 || entries == 0 {
        return Err(BootInfoError::NoMemoryMap);
    }
    let table_len = entries
        .checked_mul(24)
        .ok_or(BootInfoError::BadPointer(map))?;
    if !readable(map, table_len) {
        return Err(BootInfoError::BadPointer(map));
    }
    for i in 0..entries {
        let e = map + i * 24;
        let (addr, size, kind) = (read_u64(e), read_u64(e + 8), read_u32(e + 16));
        if kind == E820_RAM
            && let Some(end) = addr.checked_add(size)
        {
            f(RamRange { start: addr, end });
        }
    }
    Ok(())
}

/// Whether `addr` lies in the kernel's `.bss` (zero-initialised statics).
pub fn in_bss(addr: u64) -> bool {
    unsafe extern "C" {
        static __bss_start: u8;
        static __bss_end: u8;
    }
    // Taking the address of a linker-defined symbol reads nothing.
    let (start, end) = (
        (&raw const __bss_start) as u64,
        (&raw const __bss_end) as u64,
    );
    (start..end).contains(&addr)
}

/// The physical address one past the kernel image (code, data and `.bss`).
pub fn kernel_end() -> u64 {
    unsafe extern "C" {
        static __kernel_end: u8;
    }
    // Taking the address of a linker-defined symbol reads nothing.
    (&raw const __kernel_end) as u64
}
