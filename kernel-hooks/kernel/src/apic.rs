//! Interrupt hardware: the local APIC and its timer, the legacy 8259 PICs (remapped and
//! masked, so nothing but the local APIC timer interrupts), and the PIT, used once at boot as
//! the reference clock that calibrates both the TSC and the local APIC timer.
//!
//! The local APIC's registers are mapped at [`LAPIC_VIRT`] (supervisor-only, uncached); this
//! module is the only code that touches them, its MSR and the PIC/PIT ports.

use core::arch::asm;
use core::arch::x86_64::__cpuid;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use crate::paging::{KERNEL_MMIO_SLOT, PageTables, PagingError, SLOT_SIZE};
use crate::{cpu, port, trap};

/// Where the local APIC's registers are mapped.
pub const LAPIC_VIRT: u64 = KERNEL_MMIO_SLOT * SLOT_SIZE;

const IA32_APIC_BASE: u32 = 0x1b;
const APIC_BASE_ENABLE: u64 = 1 << 11;
const APIC_BASE_ADDR: u64 = 0x000f_ffff_ffff_f000;

// Local APIC registers (byte offsets).
const REG_ID: u64 = 0x20;
const REG_TPR: u64 = 0x80;
const REG_ICR_LOW: u64 = 0x300;
const REG_ICR_HIGH: u64 = 0x310;
const REG_EOI: u64 = 0xb0;
const REG_SVR: u64 = 0xf0;
const REG_LVT_TIMER: u64 = 0x320;
const REG_LVT_LINT0: u64 = 0x350;
const REG_LVT_ERROR: u64 = 0x370;
const REG_TIMER_INIT: u64 = 0x380;
const REG_TIMER_CURRENT: u64 = 0x390;
const REG_TIMER_DIVIDE: u64 = 0x3e0;
const REG_IRR: u64 = 0x200;

const SVR_ENABLE: u32 = 1 << 8;
const LVT_MASKED: u32 = 1 << 16;
/// Divide configuration 0b0011: the timer counts at the bus clock / 16.
const DIVIDE_BY_16: u32 = 0b0011;

// The PIT (8254) and the port-0x61 gate of its channel 2.
const PIT_HZ: u64 = 1_193_182;
const PIT_CH2: u16 = 0x42;
const PIT_CMD: u16 = 0x43;
const PORT_61: u16 = 0x61;
/// The calibration window: 50 ms of PIT ticks (fits the 16-bit counter).
const CALIBRATION_PIT_TICKS: u64 = PIT_HZ / 20;
/// How often port 0x61 is polled before the PIT counts as missing.
const CALIBRATION_POLLS: u64 = 50_000_000;

// The 8259 PICs.
const PIC1_CMD: u16 = 0x20;
const PIC1_DATA: u16 = 0x21;
const PIC2_CMD: u16 = 0xa0;
const PIC2_DATA: u16 = 0xa1;

/// Local APIC timer ticks per second (bus clock / 16), measured at boot.
static LAPIC_TIMER_HZ: AtomicU64 = AtomicU64::new(0);

/// Why the interrupt hardware could not be brought up.
#[derive(Clone, Copy, Debug)]
pub enum ApicError {
    /// CPUID reports no local APIC.
    NoApic,
    /// Mapping its registers failed.
    Paging(PagingError),
    /// The PIT's channel 2 never finished counting: no reference clock.
    NoPit,
    /// The measurement gave a zero rate.
    Calibration,
}

impl fmt::Display for ApicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoApic => f.write_str("the processor has no local APIC"),
            Self::Paging(e) => write!(f, "mapping the local APIC: {e}"),
            Self::NoPit => f.write_str("the PIT did not count (no reference clock)"),
            Self::Calibration => f.write_str("calibrating the TSC and the APIC timer failed"),
        }
    }
}

/// What the boot calibration measured.
#[derive(Clone, Copy, Debug)]
pub struct Calibration {
    /// Time stamp counter ticks per second.
    pub tsc_hz: u64,
    /// Local APIC timer ticks per second.
    pub lapic_timer_hz: u64,
}

fn read_reg(reg: u64) -> u32 {
    // SAFETY: `init` mapped the local APIC's 4 KiB register page at LAPIC_VIRT (uncached,
    // supervisor) before any caller can run; `reg` is one of the 16-byte-aligned register
    // offsets above, inside the page, and registers are read as aligned 32-bit values.
    unsafe { core::ptr::read_volatile((LAPIC_VIRT + reg) as *const u32) }
}

fn write_reg(reg: u64, value: u32) {
    // SAFETY: as in `read_reg`; writing the local APIC's registers affects only interrupt
    // delivery, which this module owns.
    unsafe { core::ptr::write_volatile((LAPIC_VIRT + reg) as *mut u32, value) };
}

fn outb(port_no: u16, value: u8) {
    // SAFETY: only called with the PIC, PIT and port-0x61 ports, which this module owns;
    // programming them cannot touch memory.
    unsafe { port::outb(port_no, value) };
}

fn inb(port_no: u16) -> u8 {
    // SAFETY: as in `outb`.
    unsafe { port::inb(port_no) }
}

fn apic_base_msr() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: IA32_APIC_BASE exists on every processor with a local APIC (checked by the
    // caller with CPUID); reading it has no side effects.
    unsafe {
        asm!("rdmsr", in("ecx") IA32_APIC_BASE, out("eax") lo, out("edx") hi,
             options(nomem, nostack, preserves_flags));
    }
    (u64::from(hi) << 32) | u64::from(lo)
}

/// Remaps the legacy PICs to vectors `PIC_BASE ..` (out of the exception range) and masks
/// every line, so the only interrupts the kernel takes are the local APIC's.
fn disable_pics() {
    let (v1, v2) = (trap::PIC_BASE, trap::PIC_BASE + 8);
    outb(PIC1_CMD, 0x11); // ICW1: initialise, ICW4 follows
    outb(PIC2_CMD, 0x11);
    outb(PIC1_DATA, v1); // ICW2: vector base
    outb(PIC2_DATA, v2);
    outb(PIC1_DATA, 4); // ICW3: slave on line 2
    outb(PIC2_DATA, 2);
    outb(PIC1_DATA, 1); // ICW4: 8086 mode
    outb(PIC2_DATA, 1);
    outb(PIC1_DATA, 0xff); // mask everything
    outb(PIC2_DATA, 0xff);
}

/// Counts 50 ms on the PIT's channel 2 and measures the TSC and the (masked, free-running)
/// local APIC timer over the same window.
fn calibrate() -> Result<Calibration, ApicError> {
    // Channel 2 gate off, speaker off; mode 0 (interrupt on terminal count), lo/hi byte.
    let gate = inb(PORT_61);
    outb(PORT_61, gate & !0x03);
    outb(PIT_CMD, 0b1011_0000);
    outb(PIT_CH2, (CALIBRATION_PIT_TICKS & 0xff) as u8);
    outb(PIT_CH2, (CALIBRATION_PIT_TICKS >> 8) as u8);

    write_reg(REG_LVT_TIMER, LVT_MASKED | u32::from(trap::TIMER_VECTOR));
    write_reg(REG_TIMER_DIVIDE, DIVIDE_BY_16);
    // Gate on: the count starts; start the APIC timer and read the TSC at the same moment.
    outb(PORT_61, (gate & !0x02) | 0x01);
    write_reg(REG_TIMER_INIT, u32::MAX);
    let tsc0 = cpu::rdtsc();
    let mut done = false;
    for _ in 0..CALIBRATION_POLLS {
        if inb(PORT_61) & 0x20 != 0 {
            done = true;
            break;
        }
    }
    let tsc1 = cpu::rdtsc();
    let lapic_ticks = u64::from(u32::MAX - read_reg(REG_TIMER_CURRENT));
    write_reg(REG_TIMER_INIT, 0);
    outb(PORT_61, gate & !0x03);
    if !done {
        return Err(ApicError::NoPit);
    }
    let per_second = |ticks: u64| ticks.saturating_mul(PIT_HZ) / CALIBRATION_PIT_TICKS;
    let c = Calibration {
        tsc_hz: per_second(tsc1.wrapping_sub(tsc0)),
        lapic_timer_hz: per_second(lapic_ticks),
    };
    if c.tsc_hz == 0 || c.lapic_timer_hz == 0 {
        return Err(ApicError::Calibration);
    }
    Ok(c)
}

/// Maps and enables the local APIC, silences the PICs, and calibrates the TSC and the APIC
/// timer against the PIT. The timer is left stopped, in one-shot mode on
/// [`trap::TIMER_VECTOR`]; interrupts stay disabled (the kernel only takes them in ring 3).
pub fn init(pt: &mut PageTables) -> Result<Calibration, ApicError> {
    if __cpuid(1).edx & (1 << 9) == 0 {
        return Err(ApicError::NoApic);
    }
    let base = apic_base_msr();
    if base & APIC_BASE_ENABLE == 0 {
        // Globally disabled by the firmware: not something this kernel turns back on.
        return Err(ApicError::NoApic);
    }
    pt.map_kernel_mmio(LAPIC_VIRT, base & APIC_BASE_ADDR)
        .map_err(ApicError::Paging)?;
    disable_pics();
    write_reg(REG_TPR, 0);
    write_reg(REG_LVT_LINT0, LVT_MASKED);
    write_reg(REG_LVT_ERROR, LVT_MASKED);
    write_reg(REG_SVR, SVR_ENABLE | u32::from(trap::SPURIOUS_VECTOR));
    let c = calibrate()?;
    LAPIC_TIMER_HZ.store(c.lapic_timer_hz, Ordering::Relaxed);
    // One-shot, unmasked, stopped (initial count 0) until the first `arm`.
    write_reg(REG_LVT_TIMER, u32::from(trap::TIMER_VECTOR));
    write_reg(REG_TIMER_INIT, 0);
    Ok(c)
}

/// Arms the one-shot timer to interrupt in `ns` nanoseconds (at least one tick, at most the
/// counter's range: an interrupt that comes early is re-armed by its handler).
pub fn arm_in(ns: u64) {
    let hz = LAPIC_TIMER_HZ.load(Ordering::Relaxed);
    let ticks = u128::from(ns) * u128::from(hz) / 1_000_000_000;
    let count = u32::try_from(ticks).unwrap_or(u32::MAX).max(1);
    write_reg(REG_TIMER_INIT, count);
}

/// Whether interrupt `vector` is pending on the running CPU (its bit in the local APIC's
/// interrupt request register): raised, not yet delivered (interrupts are masked).
pub fn pending(vector: u8) -> bool {
    // IRR: eight 32-bit registers from 0x200, 16 bytes apart.
    let reg = REG_IRR + u64::from(vector / 32) * 0x10;
    read_reg(reg) & (1 << (vector % 32)) != 0
}

/// The running CPU's local APIC id.
pub fn id() -> u32 {
    read_reg(REG_ID) >> 24
}

/// Enables an application processor's local APIC like [`init`] does the BSP's (the PICs are
/// already masked and the timer calibrated): timer one-shot, stopped.
pub fn init_ap() {
    write_reg(REG_TPR, 0);
    write_reg(REG_LVT_LINT0, LVT_MASKED);
    write_reg(REG_LVT_ERROR, LVT_MASKED);
    write_reg(REG_SVR, SVR_ENABLE | u32::from(trap::SPURIOUS_VECTOR));
    write_reg(REG_TIMER_DIVIDE, DIVIDE_BY_16);
    write_reg(REG_LVT_TIMER, u32::from(trap::TIMER_VECTOR));
    write_reg(REG_TIMER_INIT, 0);
}

/// ICR delivery status: the previous IPI is still being sent.
const ICR_PENDING: u32 = 1 << 12;
const ICR_ASSERT: u32 = 1 << 14;
const ICR_INIT: u32 = 0b101 << 8;
const ICR_STARTUP: u32 = 0b110 << 8;

/// Writes the interrupt command register (destination `apic_id`, physical mode), waiting
/// (bounded) for the previous IPI to leave first.
fn send(apic_id: u32, low: u32) {
    for _ in 0..1_000_000 {
        if read_reg(REG_ICR_LOW) & ICR_PENDING == 0 {
            break;
        }
        core::hint::spin_loop();
    }
    write_reg(REG_ICR_HIGH, apic_id << 24);
    write_reg(REG_ICR_LOW, low);
}

/// Sends fixed interrupt `vector` to the CPU with local APIC id `apic_id`.
pub fn send_ipi(apic_id: u32, vector: u8) {
    send(apic_id, ICR_ASSERT | u32::from(vector));
}

/// Sends INIT to `apic_id`.
pub fn send_init(apic_id: u32) {
    send(apic_id, ICR_ASSERT | ICR_INIT);
}

/// Sends a start-up IPI to `apic_id`: it starts in real mode at `page * 4 KiB`.
pub fn send_sipi(apic_id: u32, page: u8) {
    send(apic_id, ICR_ASSERT | ICR_STARTUP | u32::from(page));
}

/// Signals the end of the interrupt being handled.
pub fn eoi() {
    write_reg(REG_EOI, 0);
}
