//! Several processors: per-CPU state, starting the application processors (APs), running
//! jobs on them, and the TLB shootdown.
//!
//! # Bring-up
//!
//! QEMU reports how many CPUs it was given through `fw_cfg` (`FW_CFG_NB_CPUS`); with its
//! default topology their local APIC ids are `0 .. n`. The boot processor (BSP, CPU 0) starts
//! the others one at a time with INIT, SIPI, SIPI at a real-mode trampoline copied to
//! [`TRAMPOLINE`] (below 1 MiB, in the identity map): it loads a GDT of its own, enters
//! protected mode, turns on PAE, loads the kernel's CR3, sets EFER.LME and EFER.NXE, enables
//! paging, jumps to 64-bit code and calls [`ap_main`] on the stack the BSP left in the
//! trampoline's data. Each AP then loads its own GDT and TSS (`gdt::init(cpu)`), the shared
//! IDT, its GS base (its [`PerCpu`]), enables its local APIC, says it is online and waits for
//! jobs ([`run_on`]). All CPUs share the kernel's page tables and the one engine
//! (`objects::ENGINE`).
//!
//! # TLB shootdown
//!
//! The kernel never dereferences a user slot address (it reaches object frames through the
//! identity map), so a CPU can only use a stale user translation while it runs in ring 3.
//! Every CPU publishes whether it is in user mode ([`MODE`]) and the flush generation it has
//! caught up with ([`DONE`]). [`shootdown`] (called after the page-table entries changed,
//! with the page-table lock held) bumps [`FLUSH_GEN`], sends the shootdown IPI to every other
//! CPU that is in user mode and has not caught up, and waits, with a deadline, until each has
//! acknowledged by storing the new generation. A CPU catches up (reloads CR3, which drops
//! every non-global translation, then stores the generation) on every entry to the kernel and
//! on every entry to user mode, after publishing its mode; sequentially consistent atomics
//! on both sides make sure that a CPU the requester saw in kernel mode reads the new
//! generation before it next runs user code, and a CPU it saw in user mode acknowledges
//! through its next kernel entry, which the IPI forces. A CPU that does not acknowledge
//! within [`SHOOTDOWN_TIMEOUT_NS`] ends the run with a message and a failure exit: a
//! revocation never returns while a CPU may still use what it took away, and never hangs.

use alloc::boxed::Box;
use alloc::sync::Arc;
use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use spin::Mutex;

use crate::exit::{self, Outcome};
use crate::{apic, clock, cpu, gdt, port, println, serial, trap};

/// The most CPUs the kernel brings up (more are left halted).
pub const MAX_CPUS: usize = 8;
/// Bytes of kernel stack per application processor (the engine's misses verify signatures
/// on it, as the BSP's 512 KiB stack does).
const AP_STACK_BYTES: usize = 512 * 1024;
/// Physical address the real-mode trampoline is copied to (a page below 1 MiB: SIPI vector 8).
const TRAMPOLINE: u64 = 0x8000;
/// How long a shootdown waits for acknowledgements before the run fails. A hang detector,
/// not a bound the design relies on: under TCG a virtual CPU is a host thread, and on a
/// loaded 2-core host (four virtual CPUs, other builds beside) one was seen descheduled past
/// the 500 ms this used to be, failing a correct run. An acknowledgement takes microseconds.
pub const SHOOTDOWN_TIMEOUT_NS: u64 = 10_000_000_000;
/// How long the BSP waits for one AP to come online (a hang detector too: 500 ms failed
/// correct runs on a loaded host).
const AP_START_TIMEOUT_NS: u64 = 10_000_000_000;

const IA32_GS_BASE: u32 = 0xc000_0101;
const IA32_KERNEL_GS_BASE: u32 = 0xc000_0102;

/// What GS points at in the kernel. The trap stubs use `saved_rsp` (offset 0); `index`
/// (offset 8) is the CPU number.
#[repr(C)]
pub struct PerCpu {
    saved_rsp: UnsafeCell<u64>,
    index: u64,
}

// SAFETY: `saved_rsp` is only accessed by the assembly of `trap` on the CPU that owns the
// entry (through its own GS base); `index` is immutable.
unsafe impl Sync for PerCpu {}

static PER_CPU: [PerCpu; MAX_CPUS] = {
    let mut a = [const {
        PerCpu {
            saved_rsp: UnsafeCell::new(0),
            index: 0,
        }
    }; MAX_CPUS];
    let mut i = 0;
    while i < MAX_CPUS {
        a[i].index = i as u64;
        i += 1;
    }
    a
};

const MODE_OFFLINE: u8 = 0;
const MODE_KERNEL: u8 = 1;
const MODE_USER: u8 = 2;

/// Each CPU's mode (offline, kernel, user).
static MODE: [AtomicU8; MAX_CPUS] = [const { AtomicU8::new(MODE_OFFLINE) }; MAX_CPUS];
/// The flush generation each CPU has caught up with.
static DONE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Bumped by every shootdown, after the page-table entries changed.
static FLUSH_GEN: AtomicU64 = AtomicU64::new(0);
/// Each CPU's local APIC id.
static APIC_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
/// CPUs online (numbered `0 .. ONLINE`).
static ONLINE: AtomicUsize = AtomicUsize::new(1);
/// Shootdowns, IPIs sent, CR3 reloads made to catch up.
static SHOOTDOWNS: AtomicU64 = AtomicU64::new(0);
static IPIS: AtomicU64 = AtomicU64::new(0);
static CATCH_UPS: AtomicU64 = AtomicU64::new(0);

/// Sets the running processor's GS base to its [`PerCpu`]. Call first thing on each CPU.
pub fn init_cpu(index: usize) {
    let base = &raw const PER_CPU[index] as u64;
    // SAFETY: writing GS_BASE / KERNEL_GS_BASE changes only what `gs:` addresses; the kernel
    // uses `gs:` solely in the trap stubs and `current`, which expect exactly this value;
    // KERNEL_GS_BASE (the user's GS base, swapped in on the way to ring 3) starts at 0.
    unsafe {
        wrmsr(IA32_GS_BASE, base);
        wrmsr(IA32_KERNEL_GS_BASE, 0);
    }
    MODE[index].store(MODE_KERNEL, Ordering::SeqCst);
}

/// # Safety
/// `msr` must exist and `value` be valid for it.
unsafe fn wrmsr(msr: u32, value: u64) {
    // SAFETY: the caller's guarantee.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") value as u32, in("edx") (value >> 32) as u32,
             options(nostack, preserves_flags));
    }
}

/// The running CPU's number.
pub fn current() -> usize {
    let i: u64;
    // SAFETY: in the kernel GS holds this CPU's `PerCpu` (set by `init_cpu` before anything
    // calls this; the stubs swap the user's base in only while ring 3 runs), whose `index`
    // is at offset 8.
    unsafe { asm!("mov {}, gs:[8]", out(reg) i, options(readonly, nostack, preserves_flags)) };
    usize::try_from(i).unwrap_or(0).min(MAX_CPUS - 1)
}

/// How many CPUs are online.
pub fn online() -> usize {
    ONLINE.load(Ordering::Acquire)
}

/// Reloads CR3 if a shootdown happened since this CPU last caught up.
fn catch_up(me: usize) {
    let generation = FLUSH_GEN.load(Ordering::SeqCst);
    if DONE[me].load(Ordering::SeqCst) < generation {
        cpu::flush_tlb();
        CATCH_UPS.fetch_add(1, Ordering::Relaxed);
        DONE[me].store(generation, Ordering::SeqCst);
    }
}

/// Flushes this CPU's TLB if a shootdown happened since it last did (from a ring-0
/// interrupt: atomics and a CR3 reload only).
pub fn catch_up_here() {
    catch_up(current());
}

/// Called just before this CPU enters ring 3 (interrupts disabled).
pub fn entering_user() {
    let me = current();
    MODE[me].store(MODE_USER, Ordering::SeqCst);
    catch_up(me);
}

/// Called as soon as this CPU is back in the kernel from ring 3.
pub fn entered_kernel() {
    let me = current();
    MODE[me].store(MODE_KERNEL, Ordering::SeqCst);
    catch_up(me);
}

/// Prints `msg` and ends the run with a failure exit (a bounded wait expired).
pub fn fatal(args: core::fmt::Arguments<'_>) -> ! {
    serial::force_unlock();
    println!();
    println!("FATAL on CPU {}: {args}", current());
    exit::exit(Outcome::Failure)
}

/// Makes sure no other CPU can still use a user translation the page tables no longer have.
/// Call after changing the entries (and `invlpg` on this CPU), holding the page-table lock.
pub fn shootdown() {
    SHOOTDOWNS.fetch_add(1, Ordering::Relaxed);
    let me = current();
    let generation = FLUSH_GEN.fetch_add(1, Ordering::SeqCst) + 1;
    let n = online();
    let mut pending = 0u32;
    for cpu in (0..n).filter(|&c| c != me) {
        if MODE[cpu].load(Ordering::SeqCst) == MODE_USER
            && DONE[cpu].load(Ordering::SeqCst) < generation
        {
            apic::send_ipi(
                APIC_IDS[cpu].load(Ordering::Relaxed),
                trap::SHOOTDOWN_VECTOR,
            );
            IPIS.fetch_add(1, Ordering::Relaxed);
            pending |= 1 << cpu;
        }
    }
    if pending == 0 {
        return;
    }
    let deadline = clock::monotonic_ns().saturating_add(SHOOTDOWN_TIMEOUT_NS);
    while pending != 0 {
        for (cpu, done) in DONE.iter().enumerate().take(n) {
            if pending & (1 << cpu) != 0 && done.load(Ordering::SeqCst) >= generation {
                pending &= !(1 << cpu);
            }
        }
        if pending != 0 && clock::monotonic_ns() > deadline {
            fatal(format_args!(
                "TLB shootdown (generation {generation}): CPUs {pending:#b} (bit = CPU number) did not \
                 acknowledge within {} ms",
                SHOOTDOWN_TIMEOUT_NS / 1_000_000
            ));
        }
        core::hint::spin_loop();
    }
}

/// (shootdowns, IPIs sent, CR3 reloads to catch up) since boot.
pub fn shootdown_counts() -> (u64, u64, u64) {
    (
        SHOOTDOWNS.load(Ordering::Relaxed),
        IPIS.load(Ordering::Relaxed),
        CATCH_UPS.load(Ordering::Relaxed),
    )
}

// ---------------------------------------------------------------------------------------------
// Jobs

type Job = Box<dyn FnOnce() + Send>;

static JOBS: [Mutex<Option<Job>>; MAX_CPUS] = [const { Mutex::new(None) }; MAX_CPUS];
static BUSY: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// A job's result, once it is done.
pub struct Pending<T> {
    cpu: usize,
    result: Arc<Mutex<Option<T>>>,
}

impl<T> Pending<T> {
    /// Whether the job finished.
    pub fn is_done(&self) -> bool {
        !BUSY[self.cpu].load(Ordering::Acquire)
    }

    /// Waits up to `timeout_ns` for the result; `None` if the job did not finish (or the CPU
    /// is not online).
    pub fn wait(self, timeout_ns: u64) -> Option<T> {
        let deadline = clock::monotonic_ns().saturating_add(timeout_ns);
        while !self.is_done() {
            if clock::monotonic_ns() > deadline {
                return None;
            }
            core::hint::spin_loop();
        }
        self.result.lock().take()
    }
}

/// Runs `f` on application processor `cpu` (which must be online and idle); `None` if it is
/// not.
pub fn run_on<T: Send + 'static>(
    cpu: usize,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<Pending<T>> {
    if cpu == 0 || cpu >= online() || BUSY[cpu].load(Ordering::Acquire) {
        return None;
    }
    let result = Arc::new(Mutex::new(None));
    let out = Arc::clone(&result);
    BUSY[cpu].store(true, Ordering::Release);
    *JOBS[cpu].lock() = Some(Box::new(move || {
        let r = f();
        *out.lock() = Some(r);
    }));
    Some(Pending { cpu, result })
}

/// How long [`race`] waits for the other CPU's half before it ends the run.
const RACE_TIMEOUT_NS: u64 = 10_000_000_000;

/// Runs `a` on application processor 1 and `b` on this CPU at the same time, and returns once
/// both have finished; `false` without running them if there is no idle second CPU. If CPU 1
/// does not finish within [`RACE_TIMEOUT_NS`], the run ends with a failure (it may still use
/// `a`, so this must not return).
pub fn race(a: &(dyn Fn() + Sync), b: &(dyn Fn() + Sync)) -> bool {
    // SAFETY: only the lifetime is extended. The job holding the reference runs on CPU 1 and
    // this function does not return before the job has finished (`Pending::wait` saw it done)
    // or the run has ended (`fatal` never returns), so `a` outlives every use. `dyn Fn + Sync`
    // may be called from another CPU.
    let a: &'static (dyn Fn() + Sync) = unsafe { core::mem::transmute(a) };
    let Some(job) = run_on(1, a) else {
        return false;
    };
    b();
    if job.wait(RACE_TIMEOUT_NS).is_none() {
        fatal(format_args!(
            "a race's job on CPU 1 did not finish within {} s",
            RACE_TIMEOUT_NS / 1_000_000_000
        ));
    }
    true
}

fn idle(me: usize) -> ! {
    loop {
        let job = JOBS[me].lock().take();
        match job {
            Some(job) => {
                job();
                BUSY[me].store(false, Ordering::Release);
            }
            None => {
                catch_up(me);
                core::hint::spin_loop();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bring-up

#[repr(C, align(16))]
struct ApStack(UnsafeCell<[u8; AP_STACK_BYTES]>);

// SAFETY: each stack is handed to exactly one AP (by index) and only that AP's code runs on
// it; Rust code never reads or writes it otherwise.
unsafe impl Sync for ApStack {}

static AP_STACKS: [ApStack; MAX_CPUS - 1] =
    [const { ApStack(UnsafeCell::new([0; AP_STACK_BYTES])) }; MAX_CPUS - 1];

global_asm!(
    r#"
    .section .rodata.ap_trampoline, "a"
    .p2align 4
    .global ap_trampoline_start
ap_trampoline_start:
    .code16
    cli
    cld
    xorw %ax, %ax
    movw %ax, %ds
    lgdtl (ap_gdt_ptr - ap_trampoline_start + {base})
    movl %cr0, %eax
    orl $1, %eax
    movl %eax, %cr0
    /* ljmpl $0x18, ap_pm32 */
    .byte 0x66, 0xea
    .long ap_pm32 - ap_trampoline_start + {base}
    .word 0x18

    .code32
ap_pm32:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    movl %cr4, %eax
    orl $(1 << 5), %eax
    movl %eax, %cr4
    movl (ap_cr3 - ap_trampoline_start + {base}), %eax
    movl %eax, %cr3
    movl $0xc0000080, %ecx
    rdmsr
    orl $((1 << 8) | (1 << 11)), %eax       /* LME, NXE */
    wrmsr
    movl %cr0, %eax
    orl $0x80000001, %eax
    movl %eax, %cr0
    /* ljmp $0x08, ap_lm64 */
    .byte 0xea
    .long ap_lm64 - ap_trampoline_start + {base}
    .word 0x08

    .code64
ap_lm64:
    movw $0x10, %ax
    movw %ax, %ds
    movw %ax, %es
    movw %ax, %ss
    xorw %ax, %ax
    movw %ax, %fs
    movw %ax, %gs
    movq (ap_stack - ap_trampoline_start + {base}), %rsp
    movq (ap_index - ap_trampoline_start + {base}), %rdi
    movq (ap_entry - ap_trampoline_start + {base}), %rax
    xorl %ebp, %ebp
    call *%rax
1:
    cli
    hlt
    jmp 1b

    .p2align 3
ap_gdt:
    .quad 0
    .quad 0x00af9a000000ffff            /* 0x08: 64-bit code */
    .quad 0x00cf92000000ffff            /* 0x10: data */
    .quad 0x00cf9a000000ffff            /* 0x18: 32-bit code */
ap_gdt_end:
    .p2align 2
ap_gdt_ptr:
    .word ap_gdt_end - ap_gdt - 1
    .long ap_gdt - ap_trampoline_start + {base}
    .p2align 3
    .global ap_trampoline_data
ap_trampoline_data:
ap_cr3:
    .quad 0
ap_stack:
    .quad 0
ap_index:
    .quad 0
ap_entry:
    .quad 0
    .global ap_trampoline_end
ap_trampoline_end:
    .code64
    "#,
    base = const TRAMPOLINE,
    options(att_syntax)
);

unsafe extern "C" {
    static ap_trampoline_start: u8;
    static ap_trampoline_data: u8;
    static ap_trampoline_end: u8;
}

/// The fields of the trampoline's data, in order.
#[repr(C)]
struct TrampolineData {
    cr3: u64,
    stack: u64,
    index: u64,
    entry: u64,
}

/// The number of CPUs QEMU was started with (`fw_cfg`), or 1 without `fw_cfg`.
fn fw_cfg_cpus() -> usize {
    const SELECTOR: u16 = 0x510;
    const DATA: u16 = 0x511;
    let read = |key: u16, n: usize| -> u64 {
        // SAFETY: QEMU's fw_cfg I/O ports: selecting an item and reading its bytes has no
        // effect on memory.
        unsafe {
            port::outw(SELECTOR, key);
            (0..n).fold(0u64, |acc, i| acc | u64::from(port::inb(DATA)) << (8 * i))
        }
    };
    if read(0, 4) != u64::from(u32::from_le_bytes(*b"QEMU")) {
        return 1;
    }
    usize::try_from(read(5, 2)).unwrap_or(1).max(1)
}

/// The AP entry point, called by the trampoline in long mode on its own stack.
///
/// Contract (`ap_trampoline_start`, copied to [`TRAMPOLINE`] and started by INIT-SIPI-SIPI):
/// 64-bit mode on the kernel's page tables (`ap_cr3`), EFER.NXE set; `rsp` at the top of
/// this AP's own stack in [`AP_STACKS`] (16-byte aligned) with `rbp` 0; `rdi` its index;
/// interrupts masked, direction flag clear, the trampoline's GDT loaded and no IDT yet, GS
/// base 0 until `init_cpu` sets it. Never returns (the trampoline halts if it did).
#[unsafe(no_mangle)]
extern "C" fn ap_main(index: u64) -> ! {
    let me = usize::try_from(index).unwrap_or(MAX_CPUS - 1);
    init_cpu(me);
    gdt::init(me);
    trap::load();
    apic::init_ap();
    APIC_IDS[me].store(apic::id(), Ordering::Relaxed);
    ONLINE.fetch_add(1, Ordering::AcqRel);
    idle(me)
}

/// Starts every application processor QEMU gave the machine (up to [`MAX_CPUS`]), one at a
/// time. Returns how many CPUs are online, or why one did not come up.
pub fn start_aps() -> Result<usize, alloc::string::String> {
    let wanted = fw_cfg_cpus().min(MAX_CPUS);
    let bsp_id = apic::id();
    APIC_IDS[0].store(bsp_id, Ordering::Relaxed);
    let start = &raw const ap_trampoline_start as u64;
    let data_off = &raw const ap_trampoline_data as u64 - start;
    let len = &raw const ap_trampoline_end as u64 - start;
    // SAFETY: the trampoline's bytes are a read-only section of the kernel image; the target
    // page at 0x8000 is conventional RAM below 1 MiB (identity-mapped, writable) that nothing
    // else uses (the kernel image starts at 1 MiB, the PVH start-of-day data is read before
    // this); `len` < 4 KiB.
    unsafe {
        core::ptr::copy_nonoverlapping(start as *const u8, TRAMPOLINE as *mut u8, len as usize);
    }
    let data = (TRAMPOLINE + data_off) as *mut TrampolineData;
    for (cpu, apic_id) in (1..).zip((0..wanted as u32).filter(|&id| id != bsp_id)) {
        let stack_top = AP_STACKS[cpu - 1].0.get() as u64 + AP_STACK_BYTES as u64;
        // SAFETY: `data` is inside the copied trampoline (8-byte aligned); no AP is running
        // the trampoline now (the previous one is online and past it).
        unsafe {
            data.write_volatile(TrampolineData {
                cr3: cpu::read_cr3(),
                stack: stack_top,
                index: cpu as u64,
                entry: ap_main as *const () as u64,
            });
        }
        let before = online();
        apic::send_init(apic_id);
        clock::delay_ns(10_000_000);
        apic::send_sipi(apic_id, (TRAMPOLINE >> 12) as u8);
        clock::delay_ns(200_000);
        if online() == before {
            apic::send_sipi(apic_id, (TRAMPOLINE >> 12) as u8);
        }
        let deadline = clock::monotonic_ns() + AP_START_TIMEOUT_NS;
        while online() == before {
            if clock::monotonic_ns() > deadline {
                return Err(alloc::format!(
                    "the CPU with local APIC id {apic_id} did not come online within {} ms",
                    AP_START_TIMEOUT_NS / 1_000_000
                ));
            }
            core::hint::spin_loop();
        }
    }
    Ok(online())
}
