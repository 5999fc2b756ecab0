//! Single x86_64 instructions the kernel needs: CPUID, time stamp counter, random numbers,
//! model-specific registers, control registers and TLB flushes. Each wrapper is one
//! instruction; the ones that change how memory is translated stay `unsafe`.

use core::arch::asm;
use core::arch::x86_64::{__cpuid, _rdtsc};

/// The extended feature enable register.
const IA32_EFER: u32 = 0xc000_0080;
/// EFER.NXE: the no-execute bit in page-table entries is honoured.
const EFER_NXE: u64 = 1 << 11;

/// What the kernel needs from the processor.
#[derive(Clone, Copy, Debug)]
pub struct Features {
    /// `rdrand` (CPUID.1:ECX bit 30).
    pub rdrand: bool,
    /// The no-execute page bit (CPUID.80000001h:EDX bit 20).
    pub nx: bool,
}

/// Reads the features the kernel depends on.
pub fn features() -> Features {
    // CPUID is always available in long mode and has no side effects.
    let leaf1 = __cpuid(1);
    let max_ext = __cpuid(0x8000_0000).eax;
    let nx = max_ext >= 0x8000_0001 && __cpuid(0x8000_0001).edx & (1 << 20) != 0;
    Features {
        rdrand: leaf1.ecx & (1 << 30) != 0,
        nx,
    }
}

/// The time stamp counter.
pub fn rdtsc() -> u64 {
    // SAFETY: `rdtsc` only reads a counter (CR4.TSD is clear: the kernel never sets it).
    unsafe { _rdtsc() }
}

/// One `rdrand` attempt: `None` when the hardware had no entropy ready (retry).
pub fn rdrand64() -> Option<u64> {
    let value: u64;
    let ok: u8;
    // SAFETY: `rdrand` writes a register and CF only; the caller checked CPUID for it.
    unsafe {
        asm!("rdrand {v}", "setc {ok}", v = out(reg) value, ok = out(reg_byte) ok,
             options(nomem, nostack));
    }
    (ok != 0).then_some(value)
}

/// Turns on the no-execute bit (EFER.NXE), if the processor has it; returns whether it did.
/// Without it, NX in a page-table entry is a reserved bit and every fault on such a page would
/// be a reserved-bit fault.
pub fn enable_nx() -> bool {
    if !features().nx {
        return false;
    }
    let (lo, hi): (u32, u32);
    // SAFETY: EFER exists on every long-mode processor; setting NXE is allowed because NX is
    // supported (checked above) and changes no existing translation (no NX bits are set yet).
    unsafe {
        asm!("rdmsr", in("ecx") IA32_EFER, out("eax") lo, out("edx") hi, options(nomem, nostack));
        let efer = ((u64::from(hi) << 32) | u64::from(lo)) | EFER_NXE;
        asm!("wrmsr", in("ecx") IA32_EFER, in("eax") efer as u32, in("edx") (efer >> 32) as u32,
             options(nostack));
    }
    true
}

/// The faulting linear address of the last page fault.
pub fn read_cr2() -> u64 {
    let v: u64;
    // SAFETY: reading CR2 has no side effects.
    unsafe { asm!("mov {}, cr2", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Loads a new top-level page table, flushing all non-global TLB entries.
///
/// # Safety
/// `pml4_phys` must be the physical address of a valid PML4 that maps the running kernel
/// (code, stack, data) at the same addresses as the current one.
pub unsafe fn write_cr3(pml4_phys: u64) {
    // SAFETY: the caller guarantees the new tables keep the kernel mapped.
    unsafe { asm!("mov cr3, {}", in(reg) pml4_phys, options(nostack, preserves_flags)) };
}

/// The current top-level page table's physical address (CR3).
pub fn read_cr3() -> u64 {
    let v: u64;
    // SAFETY: reading CR3 has no side effects.
    unsafe { asm!("mov {}, cr3", out(reg) v, options(nomem, nostack, preserves_flags)) };
    v
}

/// Drops every non-global TLB entry of this CPU (reloads CR3 with its own value).
pub fn flush_tlb() {
    // SAFETY: reloading the same CR3 changes no translation; it only forces the next access
    // to each page to walk the tables.
    unsafe { write_cr3(read_cr3()) };
}

/// Drops the TLB entry for the page holding `vaddr`.
pub fn invlpg(vaddr: u64) {
    // SAFETY: invalidating a TLB entry never makes a translation more permissive than the page
    // tables say; it only forces the next access to walk them.
    unsafe { asm!("invlpg [{}]", in(reg) vaddr, options(nostack, preserves_flags)) };
}

/// Stops the processor for good (interrupts stay disabled).
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: `cli; hlt` only stops this processor.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
    }
}
