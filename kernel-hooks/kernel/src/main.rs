//! A bare-metal x86_64 kernel that enforces `kernel-hooks` decisions on real page faults.
//!
//! QEMU boots it through the PVH entry note (see [`boot`]). It sets up its own GDT, TSS, IDT
//! and page tables, builds keys, capabilities, delegations and security contexts with
//! `twizzler-security`, presents objects in 1 GiB virtual slots, and then runs scenarios:
//! each is a ring-3 task that touches an object, faults, and is either given a page mapped
//! with exactly the protections the engine decided or stopped with the violation. It is the
//! reference host of `kernel-hooks`' contract: context objects are user-visible memory lent to
//! the engine with `CtxBytes::shared` and write-protected while it reads them, the local APIC
//! timer drives `Engine::expire` from `Engine::next_deadline`, and the kernel applies the
//! engine's `switch_to` itself. It prints a table (scenario, expected, got), the cycles of
//! cache hits and misses, and exits QEMU through `isa-debug-exit`: status 33 when every row
//! matches, anything else otherwise.
//!
//! Hardware boundaries, each in its own module, are the only places with `unsafe`: [`port`]
//! (port I/O), [`cpu`] (single instructions), [`boot`] (entry stub), [`gdt`], [`trap`] (IDT,
//! trap stubs, ring-3 entry), [`paging`], [`heap`], [`apic`] (local APIC, PIC, PIT), and the
//! one `CtxBytes::shared` in [`objects`]. Everything else is safe Rust.

#![no_std]
#![no_main]
#![warn(missing_docs)]

extern crate alloc;

mod apic;
mod boot;
mod clock;
mod cpu;
mod exit;
mod gdt;
mod heap;
mod objects;
mod paging;
mod port;
mod rng;
mod scenarios;
mod serial;
mod task;
mod timer;
mod trap;
mod user;
mod world;

use exit::Outcome;
use paging::{FrameAllocator, PageTables};

/// Physical memory the frame pool starts at or above: past the kernel image, 2 MiB aligned.
const POOL_ALIGN: u64 = 2 * 1024 * 1024;

/// The Rust entry point, called by the boot stub in long mode on the kernel stack.
#[unsafe(no_mangle)]
extern "C" fn kmain(start_info: u32) -> ! {
    serial::init();
    println!();
    println!("kernel-hooks-qemu: booted (PVH), x86_64, ring 0");
    let outcome = match run(u64::from(start_info)) {
        Ok(true) => Outcome::Success,
        Ok(false) => Outcome::Failure,
        Err(e) => {
            println!("kernel-hooks-qemu: cannot run the scenarios: {e}");
            Outcome::Failure
        }
    };
    exit::exit(outcome)
}

/// Brings up the machine, builds the world, runs the scenarios and prints the table.
/// `Ok(true)` when every row matched.
fn run(start_info: u64) -> Result<bool, alloc::string::String> {
    use alloc::format;

    gdt::init();
    trap::init();
    heap::init();
    clock::init();

    if !cpu::enable_nx() {
        return Err("the processor has no NX bit (run QEMU with -cpu max)".into());
    }

    let pool_start = boot::kernel_end().div_ceil(POOL_ALIGN) * POOL_ALIGN;
    let mut pool = None;
    boot::for_each_ram_range(start_info, |r| {
        if r.start <= pool_start && pool_start < r.end {
            pool = Some(FrameAllocator::new(pool_start, r.end));
        }
    })
    .map_err(|e| format!("{e}"))?;
    let frames = pool.ok_or("no RAM above the kernel image in the boot memory map")?;
    let mut pt = PageTables::new(frames).map_err(|e| format!("page tables: {e}"))?;
    pt.activate();
    println!(
        "paging: own tables active, NXE on, {} frames free, slots of 1 GiB from 1 GiB",
        pt.frames_remaining()
    );
    let cal = apic::init(&mut pt).map_err(|e| format!("{e}"))?;
    clock::set_tsc_hz(cal.tsc_hz);
    // The engine's time is the monotonic clock plus the Unix time the kernel booted at.
    objects::ENGINE.set_wall_clock_offset(clock::BOOT_EPOCH_NS);
    println!(
        "clock: TSC {} MHz, local APIC timer {} kHz (one-shot, vector {:#x}), both measured \
         against the PIT; PICs masked",
        cal.tsc_hz / 1_000_000,
        cal.lapic_timer_hz / 1_000,
        trap::TIMER_VECTOR
    );
    println!(
        "engine: size_of::<Engine<KernelHost>>() = {} bytes (a static, in .bss)",
        core::mem::size_of::<kernel_hooks::Engine<objects::KernelHost>>()
    );

    let mut rng = rng::RdRand::new().ok_or("the processor has no working rdrand")?;
    let t0 = cpu::rdtsc();
    let table = world::build(&mut rng, &mut pt).map_err(|e| format!("building objects: {e}"))?;
    let t1 = cpu::rdtsc();
    println!(
        "world: 5 keys generated (4 Ed25519, 1 P-256) with rdrand, caps, a delegation and \
         {} contexts built in their own frames and slots ({} Mcycles), heap in use {} KiB",
        table.contexts(),
        (t1 - t0) / 1_000_000,
        heap::used() / 1024
    );
    *objects::PAGING.lock() = Some(pt);
    objects::publish(table);

    let results = scenarios::run_all();
    Ok(report(&results))
}

/// Prints the table and the cycle counts; returns whether every row matched.
fn report(results: &scenarios::Results) -> bool {
    println!();
    println!(
        "{:>2}  {:<36} {:<24} {:<68} {}",
        "#", "scenario", "expected", "got", "match"
    );
    println!("{}", "-".repeat(2 + 2 + 36 + 1 + 24 + 1 + 68 + 1 + 5));
    let mut bad = 0;
    for (i, row) in results.rows.iter().enumerate() {
        println!(
            "{:>2}  {:<36} {:<24} {:<68} {}",
            i + 1,
            row.name,
            row.expected,
            row.got,
            if row.ok { "ok" } else { "MISMATCH" }
        );
        if let Some(reason) = &row.reason {
            println!("{:>2}  {:<36} reason: {reason}", "", "");
        }
        if !row.ok {
            bad += 1;
        }
    }
    let stats = objects::ENGINE.stats();
    let (unmap_calls, pages_unmapped) = objects::unmap_counts();
    println!();
    println!(
        "Engine::decide, rdtsc cycles, minimum of 3 misses / 5 hits (QEMU TCG: emulated time; \
         compare within this table only):"
    );
    println!(
        "  Ed25519: miss {:>10}  hit {:>8}",
        results.ed25519.miss, results.ed25519.hit
    );
    println!(
        "  P-256:   miss {:>10}  hit {:>8}",
        results.p256.miss, results.p256.hit
    );
    println!(
        "  host calls per decision: miss {}; hit {}",
        scenarios::show_calls(&results.p256.miss_calls),
        scenarios::show_calls(&results.p256.hit_calls)
    );
    let (interrupts, expires) = timer::counts();
    println!(
        "engine: {} hits, {} misses, {} signature verifications, {} memo hits, {} evictions, \
         {} invalidated, {} torn reads; host unmap calls {unmap_calls}, pages unmapped \
         {pages_unmapped}, context pages write-protected again {}; timer interrupts \
         {interrupts}, expire() from the timer {expires}",
        stats.hits,
        stats.misses,
        stats.verifies,
        stats.memo_hits,
        stats.evictions,
        stats.invalidated,
        stats.torn_reads,
        objects::reprotected_pages()
    );
    println!();
    let total = results.rows.len();
    if bad == 0 {
        println!("kernel-hooks-qemu: all {total} scenarios match");
    } else {
        println!("kernel-hooks-qemu: {bad} of {total} scenarios MISMATCH");
    }
    bad == 0
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    println!();
    println!("KERNEL PANIC: {info}");
    exit::exit(Outcome::Failure)
}
