//! The interrupt descriptor table, the trap entry stubs, and entering ring 3.
//!
//! Ring 3 is entered as a function call: [`enter_user`] saves the kernel's callee-saved
//! registers and stack pointer (in the running CPU's `smp::PerCpu`, reached through GS, which
//! the stubs `swapgs` on every ring crossing), loads a task's registers from its [`UserFrame`] and `iretq`s.
//! `TSS.RSP0` points just past that same frame, so when the task traps (page fault, `int
//! 0x80`, any exception) the processor pushes its interrupt frame into the tail of the
//! `UserFrame`, the stub pushes the vector and the general registers below it, and then
//! returns from [`enter_user`] on the kernel stack. The kernel handles the trap in ordinary
//! Rust, outside any interrupt context, and resumes the task by entering it again.
//!
//! Hardware interrupts (the local APIC timer, and spurious vectors) are taken in ring 3 and,
//! since issue 21, in ring 0 too: user tasks run with interrupts enabled, and so does the
//! kernel while the engine decides a fault ([`with_interrupts`]), the longest thing it does,
//! as Twizzler's kernel takes interrupts in kernel mode. From ring 3 they come back through
//! the same path as traps, so the kernel handles the timer in ordinary code, holding no
//! lock. From ring 0 they run [`kernel_interrupt`] on the interrupted stack, which may have
//! interrupted the engine holding one of its spin locks: it only acknowledges, counts and
//! defers (`timer::on_kernel_interrupt`), and never calls into the engine.
//!
//! An exception taken in ring 0 is a kernel bug: it is reported and QEMU exits with failure.
//! The double fault runs on its own stack (IST1) and is always fatal.

use core::arch::{asm, global_asm};
use core::cell::UnsafeCell;
use core::mem::size_of;

use crate::exit::{self, Outcome};
use crate::gdt;

/// The vector user tasks call the kernel with (`int 0x80`).
pub const SYSCALL_VECTOR: u8 = 0x80;
/// Page fault.
pub const PAGE_FAULT: u8 = 14;
/// General protection fault.
pub const GENERAL_PROTECTION: u8 = 13;
/// Invalid opcode.
pub const INVALID_OPCODE: u8 = 6;
/// Double fault.
pub const DOUBLE_FAULT: u8 = 8;
/// The local APIC timer.
pub const TIMER_VECTOR: u8 = 0x30;
/// The TLB shootdown IPI (see [`crate::smp::shootdown`]).
pub const SHOOTDOWN_VECTOR: u8 = 0x31;
/// The local APIC's spurious-interrupt vector.
pub const SPURIOUS_VECTOR: u8 = 0xff;
/// Where the (masked) legacy PICs are remapped to: `PIC_BASE .. PIC_BASE + 16`. Masked lines
/// still raise spurious IRQ 7 and 15 ([`PIC_SPURIOUS`]).
pub const PIC_BASE: u8 = 0x20;
/// The legacy PICs' spurious vectors (IRQ 7 and IRQ 15).
pub const PIC_SPURIOUS: [u8; 2] = [PIC_BASE + 7, PIC_BASE + 15];

/// Why a task came back from [`enter_user`], as both run loops (the probes' and the
/// programs') tell it apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Return {
    /// A late TLB shootdown IPI: `enter_user` already caught up on the way in; acknowledge
    /// and resume.
    Shootdown,
    /// The local APIC timer.
    Timer,
    /// A spurious vector (the APIC's or the PICs'): resume.
    Spurious,
    /// An exception or a system call, by vector.
    Trap(u8),
}

impl Return {
    /// What `vector` (the `UserFrame`'s) means.
    pub fn of(vector: u64) -> Self {
        match u8::try_from(vector) {
            Ok(SHOOTDOWN_VECTOR) => Self::Shootdown,
            Ok(TIMER_VECTOR) => Self::Timer,
            Ok(v) if v == SPURIOUS_VECTOR || PIC_SPURIOUS.contains(&v) => Self::Spurious,
            Ok(v) => Self::Trap(v),
            // The stubs push only vectors below 256.
            Err(_) => Self::Trap(0),
        }
    }
}

/// A short name for an exception vector.
pub fn vector_name(vector: u64) -> &'static str {
    match u8::try_from(vector) {
        Ok(INVALID_OPCODE) => "#UD",
        Ok(DOUBLE_FAULT) => "#DF",
        Ok(GENERAL_PROTECTION) => "#GP",
        Ok(PAGE_FAULT) => "#PF",
        Ok(SYSCALL_VECTOR) => "int 0x80",
        Ok(TIMER_VECTOR) => "timer",
        _ => "exception",
    }
}

/// RFLAGS for a user task: reserved bit 1 and IF (the timer may interrupt it), IOPL 0.
pub const USER_RFLAGS: u64 = 0x202;

/// A ring-3 task's registers, and the trap that last stopped it.
///
/// The layout is shared with the assembly below: general registers in the order the stubs push
/// them, then the vector and error code, then the processor's interrupt frame.
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default)]
#[allow(missing_docs)]
pub struct UserFrame {
    pub r15: u64,
    pub r14: u64,
    pub r13: u64,
    pub r12: u64,
    pub r11: u64,
    pub r10: u64,
    pub r9: u64,
    pub r8: u64,
    pub rbp: u64,
    pub rdi: u64,
    pub rsi: u64,
    pub rdx: u64,
    pub rcx: u64,
    pub rbx: u64,
    pub rax: u64,
    /// The vector of the trap that stopped the task.
    pub vector: u64,
    /// The error code the processor pushed (0 for vectors without one).
    pub error: u64,
    pub rip: u64,
    pub cs: u64,
    pub rflags: u64,
    pub rsp: u64,
    pub ss: u64,
}

// The processor aligns RSP0 down to 16 bytes before pushing: the frame's end must be aligned.
const _: () = assert!(size_of::<UserFrame>().is_multiple_of(16));
const _: () = assert!(size_of::<UserFrame>() == 22 * 8);

/// Where each entry stub is; filled by the assembly below.
const STUB_COUNT: usize = 38; // vectors 0..=31, 0x80, then the interrupts of `INTERRUPTS`
/// The interrupt vectors with a stub, in the order of the stub table's tail.
const INTERRUPTS: [u8; 5] = [
    TIMER_VECTOR,
    SHOOTDOWN_VECTOR,
    PIC_SPURIOUS[0],
    PIC_SPURIOUS[1],
    SPURIOUS_VECTOR,
];
// The stubs below spell these vectors out as numbers.
const _: () = assert!(
    TIMER_VECTOR == 48
        && SHOOTDOWN_VECTOR == 49
        && PIC_SPURIOUS[0] == 39
        && PIC_SPURIOUS[1] == 47
        && SPURIOUS_VECTOR == 255
);

global_asm!(
    r#"
    .macro TRAP_NOERR n
    .p2align 4
trap_stub_\n:
    push 0
    push \n
    jmp trap_common
    .endm

    .macro TRAP_ERR n
    .p2align 4
trap_stub_\n:
    push \n
    jmp trap_common
    .endm

    .section .text.trap, "ax"
    TRAP_NOERR 0
    TRAP_NOERR 1
    TRAP_NOERR 2
    TRAP_NOERR 3
    TRAP_NOERR 4
    TRAP_NOERR 5
    TRAP_NOERR 6
    TRAP_NOERR 7
    .p2align 4
trap_stub_8:                         /* double fault: IST stack, always fatal */
    push 8
    jmp trap_kernel
    TRAP_NOERR 9
    TRAP_ERR 10
    TRAP_ERR 11
    TRAP_ERR 12
    TRAP_ERR 13
    TRAP_ERR 14
    TRAP_NOERR 15
    TRAP_NOERR 16
    TRAP_ERR 17
    TRAP_NOERR 18
    TRAP_NOERR 19
    TRAP_NOERR 20
    TRAP_ERR 21
    TRAP_NOERR 22
    TRAP_NOERR 23
    TRAP_NOERR 24
    TRAP_NOERR 25
    TRAP_NOERR 26
    TRAP_NOERR 27
    TRAP_NOERR 28
    TRAP_ERR 29
    TRAP_ERR 30
    TRAP_NOERR 31
    TRAP_NOERR 128
    TRAP_NOERR 48                    /* TIMER_VECTOR */
    TRAP_NOERR 49                    /* SHOOTDOWN_VECTOR */
    TRAP_NOERR 39                    /* PIC_SPURIOUS */
    TRAP_NOERR 47
    TRAP_NOERR 255                   /* SPURIOUS_VECTOR */

    /* [rsp] vector, [rsp+8] error, [rsp+16] rip, [rsp+24] cs, ... */
trap_common:
    test qword ptr [rsp + 24], 3
    jz trap_ring0
    /* From ring 3: rsp is inside the task's UserFrame. The kernel's GS base (this
       processor's `smp::PerCpu`) comes back first, then the registers are filled in. */
    swapgs
    push rax
    push rbx
    push rcx
    push rdx
    push rsi
    push rdi
    push rbp
    push r8
    push r9
    push r10
    push r11
    push r12
    push r13
    push r14
    push r15
    cld
    /* Back to this processor's kernel stack of enter_user, and return from it. */
    mov rsp, gs:[0]
    pop r15
    pop r14
    pop r13
    pop r12
    pop rbp
    pop rbx
    ret

    /* From ring 0: an exception (or int 0x80) is a kernel bug; an interrupt (the timer, a
       late shootdown IPI, a spurious vector) is handled on the interrupted stack and the
       interrupted code resumes. The processor aligned rsp to 16 before pushing its 40-byte
       frame; with the stub's 16 bytes and the nine registers below, rsp is aligned at the
       call. The red zone is off for this target, and the kernel uses no SSE registers. */
trap_ring0:
    cmp qword ptr [rsp], 32
    jb trap_kernel
    cmp qword ptr [rsp], 128
    je trap_kernel
    push rax
    push rcx
    push rdx
    push rsi
    push rdi
    push r8
    push r9
    push r10
    push r11
    mov rdi, [rsp + 72]
    cld
    call kernel_interrupt
    pop r11
    pop r10
    pop r9
    pop r8
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rax
    add rsp, 16
    iretq

    /* A trap in ring 0 (or a double fault): report and exit. Never returns. */
trap_kernel:
    cld
    mov rdi, rsp
    and rsp, -16
    call kernel_trap
2:
    cli
    hlt
    jmp 2b

    /* enter_user(frame: *mut UserFrame): run the task until it traps. */
    .global enter_user_asm
enter_user_asm:
    push rbx
    push rbp
    push r12
    push r13
    push r14
    push r15
    mov gs:[0], rsp                  /* this processor's `PerCpu::saved_rsp` */
    mov rsp, rdi
    pop r15
    pop r14
    pop r13
    pop r12
    pop r11
    pop r10
    pop r9
    pop r8
    pop rbp
    pop rdi
    pop rsi
    pop rdx
    pop rcx
    pop rbx
    pop rax
    add rsp, 16                      /* vector, error */
    swapgs                           /* the task's GS base; the kernel's waits in the MSR */
    iretq

    .section .rodata.trap_stubs, "a"
    .p2align 3
    .global trap_stub_table
trap_stub_table:
    .quad trap_stub_0, trap_stub_1, trap_stub_2, trap_stub_3
    .quad trap_stub_4, trap_stub_5, trap_stub_6, trap_stub_7
    .quad trap_stub_8, trap_stub_9, trap_stub_10, trap_stub_11
    .quad trap_stub_12, trap_stub_13, trap_stub_14, trap_stub_15
    .quad trap_stub_16, trap_stub_17, trap_stub_18, trap_stub_19
    .quad trap_stub_20, trap_stub_21, trap_stub_22, trap_stub_23
    .quad trap_stub_24, trap_stub_25, trap_stub_26, trap_stub_27
    .quad trap_stub_28, trap_stub_29, trap_stub_30, trap_stub_31
    .quad trap_stub_128
    .quad trap_stub_48, trap_stub_49, trap_stub_39, trap_stub_47, trap_stub_255
    "#
);

unsafe extern "C" {
    /// The entry stubs' addresses, for the IDT: vectors 0..=31, 0x80, then [`INTERRUPTS`].
    /// Contract of every stub: entered through an interrupt gate (interrupts masked) with
    /// the processor's frame on the stack (`TSS.RSP0`, the tail of the running task's
    /// [`UserFrame`], from ring 3; the interrupted stack, or IST1 for a double fault, from
    /// ring 0); it pushes the error code (0 where the processor pushes none) and the vector,
    /// then `trap_common` either fills the `UserFrame` and returns from `enter_user_asm`
    /// (ring 3, after `swapgs`), calls [`kernel_interrupt`] (ring 0, vector 32 or above, not
    /// 0x80) or [`kernel_trap`] (any other ring-0 trap).
    static trap_stub_table: [u64; STUB_COUNT];
    /// Runs the task whose registers are in `*frame` until it traps, then returns.
    ///
    /// Contract: called on a kernel stack with interrupts masked and the kernel's GS base
    /// (this CPU's `smp::PerCpu`, whose `saved_rsp` it overwrites); `frame` is the running
    /// task's `UserFrame`, 16-byte aligned, with `TSS.RSP0` pointing just past it, and its
    /// `cs`/`ss`/`rflags` ring-3 values (interrupts enabled in the task). It saves the
    /// callee-saved registers, `swapgs`es to the task's GS base and `iretq`s; it returns
    /// when the task traps, with the `UserFrame` filled in, the kernel's GS base back,
    /// interrupts masked and the callee-saved registers restored.
    fn enter_user_asm(frame: *mut UserFrame);
}

/// One 16-byte IDT gate.
#[repr(C)]
#[derive(Clone, Copy)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    type_attr: u8,
    offset_mid: u16,
    offset_high: u32,
    _reserved: u32,
}

const MISSING: Gate = Gate {
    offset_low: 0,
    selector: 0,
    ist: 0,
    type_attr: 0,
    offset_mid: 0,
    offset_high: 0,
    _reserved: 0,
};

/// Present, 64-bit interrupt gate (interrupts stay disabled in the handler), DPL 0.
const INTERRUPT_GATE: u8 = 0x8e;
/// The same with DPL 3: ring 3 may raise it with `int`.
const USER_INTERRUPT_GATE: u8 = 0xee;

#[repr(C, align(16))]
struct Idt([Gate; 256]);

struct IdtCell(UnsafeCell<Idt>);

// SAFETY: written only by `init`, once, at boot, on the boot processor with interrupts disabled
// and before any other processor is started; afterwards only read (by `load` and the CPUs).
unsafe impl Sync for IdtCell {}

static IDT: IdtCell = IdtCell(UnsafeCell::new(Idt([MISSING; 256])));

fn gate(handler: u64, ist: u8, type_attr: u8) -> Gate {
    Gate {
        offset_low: handler as u16,
        selector: gdt::KERNEL_CS,
        ist,
        type_attr,
        offset_mid: (handler >> 16) as u16,
        offset_high: (handler >> 32) as u32,
        _reserved: 0,
    }
}

/// Fills and loads the IDT: exceptions 0..=31 (double fault on IST1), `int 0x80` for ring 3,
/// and the interrupt vectors (DPL 0: ring 3 cannot raise them with `int`).
pub fn init() {
    // SAFETY: `trap_stub_table` is initialised read-only data defined above.
    let stubs = unsafe { &trap_stub_table };
    let idt = IDT.0.get();
    // SAFETY: boot is single-threaded with interrupts disabled: nothing else touches the IDT;
    // every gate points at a stub above; `lidt` gets the table's exact size.
    unsafe {
        for (vector, handler) in stubs.iter().enumerate().take(32) {
            let ist = if vector == usize::from(DOUBLE_FAULT) {
                gdt::DOUBLE_FAULT_IST
            } else {
                0
            };
            (*idt).0[vector] = gate(*handler, ist, INTERRUPT_GATE);
        }
        (*idt).0[usize::from(SYSCALL_VECTOR)] = gate(stubs[32], 0, USER_INTERRUPT_GATE);
        for (vector, handler) in INTERRUPTS.iter().zip(&stubs[33..]) {
            (*idt).0[usize::from(*vector)] = gate(*handler, 0, INTERRUPT_GATE);
        }
    }
    load();
}

/// Loads the (shared, already filled) IDT on the running processor.
pub fn load() {
    #[repr(C, packed)]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let ptr = Pointer {
        limit: (size_of::<Idt>() - 1) as u16,
        base: IDT.0.get() as u64,
    };
    // SAFETY: the IDT is static, filled by `init` before any processor loads it, and never
    // written again; `lidt` gets its exact size.
    unsafe {
        asm!("lidt [{}]", in(reg) &raw const ptr, options(readonly, nostack, preserves_flags));
    }
}

/// Runs the task whose registers are in `frame` in ring 3 until it traps; on return, `frame`
/// holds its registers at the trap and `frame.vector` / `frame.error` say which trap.
///
/// The segment selectors and flags are forced to ring-3 values before entry, so whatever the
/// frame held, the task runs unprivileged, with interrupts enabled and IOPL 0.
pub fn enter_user(frame: &mut UserFrame) {
    frame.cs = u64::from(gdt::USER_CS);
    frame.ss = u64::from(gdt::USER_DS);
    // Keep only the arithmetic flags and DF; IOPL, TF, NT, AC, VM... are cleared, IF set.
    frame.rflags = (frame.rflags & 0xcd5) | USER_RFLAGS;
    let frame_ptr: *mut UserFrame = frame;
    let top = frame_ptr as u64 + size_of::<UserFrame>() as u64;
    crate::smp::entering_user();
    // SAFETY: `frame` is 16-byte aligned (its type says so) and exclusively borrowed for this
    // call, so the processor and the stubs may write the whole of it; `enter_user_asm` keeps
    // the callee-saved registers of the System V ABI and returns on the kernel stack it left
    // (saved in this processor's `PerCpu`, which GS points at: `smp::init_cpu` set the GS base
    // before any task ran, and the stubs `swapgs` exactly once on each ring crossing).
    // The task runs in ring 3 with CS/SS forced to user selectors and IOPL 0, so it can only
    // come back through a trap or an interrupt (IF is set only for it: every gate clears IF
    // again, so the kernel never takes an interrupt itself).
    unsafe {
        gdt::set_rsp0(top);
        enter_user_asm(frame_ptr);
    }
    crate::smp::entered_kernel();
}

/// The frame a ring-0 trap pushes: vector, error code, then the processor's frame.
#[repr(C)]
pub struct KernelTrapFrame {
    vector: u64,
    error: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

/// A trap in ring 0 (or a double fault): a kernel bug. Reports it and exits with failure.
///
/// Contract (`trap_kernel`): `frame` points at the vector, the error code and the
/// processor's interrupt frame on the stack the trap came in on (IST1 for a double fault);
/// `rsp` 16-byte aligned; interrupts masked by the interrupt gate; the GS base may be the
/// task's or the kernel's (a ring-0 trap), so nothing here reads per-CPU state through GS.
/// Never returns: the stub halts if it did.
#[unsafe(no_mangle)]
extern "C" fn kernel_trap(frame: &KernelTrapFrame) -> ! {
    crate::serial::force_unlock();
    crate::println!();
    crate::println!(
        "KERNEL TRAP on the CPU with local APIC id {}: vector {} error {:#x} at rip {:#x} (cs {:#x}, rsp {:#x}, rflags {:#x}), cr2 {:#x}",
        crate::apic::id(),
        frame.vector,
        frame.error,
        frame.rip,
        frame.cs,
        frame.rsp,
        frame.rflags,
        crate::cpu::read_cr2()
    );
    exit::exit(Outcome::Failure)
}

/// An interrupt taken in ring 0 (see the module documentation): the code it interrupted may
/// hold any lock, the engine's included, so nothing here takes one.
///
/// Contract (`trap_ring0`): called on the interrupted kernel stack, 16-byte aligned, with
/// the caller-saved registers saved by the stub (which restores them and `iretq`s);
/// `vector` the interrupt's vector (32 or above, never 0x80); interrupts masked by the
/// interrupt gate for the whole call; the GS base is the kernel's (ring 0).
#[unsafe(no_mangle)]
extern "C" fn kernel_interrupt(vector: u64) {
    match u8::try_from(vector) {
        Ok(TIMER_VECTOR) => crate::timer::on_kernel_interrupt(),
        Ok(SHOOTDOWN_VECTOR) => {
            // Sent while this CPU ran user code; it has been in the kernel since, which
            // catches up before it returns to user mode. Catch up now as well.
            crate::smp::catch_up_here();
            crate::apic::eoi();
        }
        // Spurious vectors are not acknowledged.
        _ => {}
    }
}

/// Runs `f` with interrupts enabled on this CPU (they are disabled again before it returns):
/// the kernel code that may be interrupted in ring 0.
pub fn with_interrupts<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: `sti` only lets this CPU take the interrupts whose gates `init` filled; the
    // ring-0 path of the stubs saves every register the interrupted code may use and returns
    // to it (`kernel_interrupt` takes no lock).
    unsafe { asm!("sti", options(nomem, nostack)) };
    let r = f();
    // SAFETY: `cli` only masks interrupts again, as the rest of the kernel expects.
    unsafe { asm!("cli", options(nomem, nostack)) };
    r
}
