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
//! trap stubs, ring-3 entry), [`paging`], [`heap`], [`apic`] (local APIC, PIC, PIT, IPIs),
//! [`smp`] (per-CPU GS base, the AP trampoline and stacks), the watched counter in [`timer`],
//! and the one `CtxBytes::shared` in [`objects`]. Everything else is safe Rust.
//!
//! With several CPUs (QEMU's `-smp`), [`smp`] starts the application processors, each with
//! its own GDT, TSS, stacks and local APIC, all on the kernel's page tables and the one
//! engine; every unmap shoots down the other CPUs' TLBs before it returns, and the fault path
//! installs a page only under the page-table lock while the decision's `MapTicket` is
//! current and the context that granted it is still the thread's active one (a detach,
//! [`task::detach`], detaches first and then unmaps that context's pages). The 33 scenarios
//! run on the boot CPU; [`smp_scenarios`] then races tasks on the other CPUs against
//! revocations, evictions with the cache full and detaches, and prints a second table.
//!
//! Last, [`program_scenarios`] runs the user programs written in Rust (`kernel-hooks/user`,
//! embedded by `build.rs` when `cargo xtask` built them): [`program`] loads each into objects
//! and runs it in ring 3, [`syscall`] serves its system calls (every pointer checked), and a
//! third table compares what each program reports with what the kernel expects and saw.
//!
//! Then [`difc_scenarios`] runs information flow control on real faults (`docs/DIFC.md`
//! §7.2): objects and contexts at labels in the kernel's table ([`labels`]), label changes by
//! the system call's kernel side ([`difc`]), a fourth table, and the label change's cost at
//! `N` mapped pages.

#![no_std]
#![no_main]
#![warn(missing_docs)]

extern crate alloc;

mod apic;
mod boot;
mod clock;
mod conformance;
mod cpu;
mod difc;
mod difc_scenarios;
mod elf;
mod exit;
mod gdt;
mod heap;
mod labels;
mod objects;
mod paging;
mod port;
mod program;
mod program_scenarios;
mod rng;
mod scenarios;
mod serial;
mod smp;
mod smp_scenarios;
mod syscall;
mod task;
mod timer;
mod trap;
mod user;
// The system-call ABI, shared with the user programs (one file, so the two sides agree). Not
// every constant is used on this side (some only name what a program passes).
#[allow(dead_code)]
#[path = "../../user/src/abi.rs"]
mod user_abi;
mod world;

use exit::Outcome;
use paging::{FrameAllocator, PageTables};

/// Physical memory the frame pool starts at or above: past the kernel image, 2 MiB aligned.
const POOL_ALIGN: u64 = 2 * 1024 * 1024;

/// The Rust entry point, called by the boot stub in long mode on the kernel stack.
///
/// Contract (`boot.rs`, `pvh_start32`): the bootstrap CPU only; 64-bit mode on the boot page
/// tables (the first GiB identity-mapped with 2 MiB pages); `.bss` zeroed; `rsp` at the top
/// of the 16-byte-aligned boot stack ([`boot::KERNEL_STACK_BYTES`]) with `rbp` 0; interrupts
/// masked (`cli`), direction flag clear, no IDT, GDT or TSS of the kernel's yet; `edi` the
/// physical address of the PVH `start_info`. Never returns (the stub halts if it did).
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

    smp::init_cpu(0);
    gdt::init(0);
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
    // The engine is const-constructed from all-zero values, so it must land in .bss: a field
    // whose empty value is not zero bytes would move it (194 KB once) into .data.
    let engine_at = (&raw const objects::ENGINE) as u64;
    let engine_size = core::mem::size_of::<kernel_hooks::Engine<objects::KernelHost>>();
    if !boot::in_bss(engine_at) {
        return Err(format!(
            "the engine static ({engine_size} bytes at {engine_at:#x}) is not in .bss: a \
             field's empty value is not all zero bytes"
        ));
    }
    println!("engine: size_of::<Engine<KernelHost>>() = {engine_size} bytes, in .bss");

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

    // The APs start on the kernel's page tables (now final but for user entries).
    let cpus = smp::start_aps()?;
    println!(
        "smp: {cpus} CPU(s) online (boot CPU + {} started with INIT/SIPI), per-CPU GDT, TSS, \
         GS base and stack; TLB shootdown IPI vector {:#x}",
        cpus - 1,
        trap::SHOOTDOWN_VECTOR
    );

    // The conformance suite first: its clock check waits for a deadline set at boot.
    let conformant = conformance::run();
    let results = scenarios::run_all();
    let smp_results = smp_scenarios::run_all();
    let program_results = program_scenarios::run_all();
    let difc_results = difc_scenarios::run_all();
    let ok = report(&results);
    let smp_ok = report_smp(smp_results.as_ref());
    let programs_ok = report_programs(program_results.as_ref());
    let difc_ok = report_difc(&difc_results);
    Ok(conformant && ok && smp_ok && programs_ok && difc_ok)
}

/// Prints one table of rows; returns how many did not match.
fn print_rows(rows: &[scenarios::Row]) -> usize {
    println!(
        "{:>2}  {:<38} {:<24} {:<68} {}",
        "#", "scenario", "expected", "got", "match"
    );
    println!("{}", "-".repeat(2 + 2 + 38 + 1 + 24 + 1 + 68 + 1 + 5));
    let mut bad = 0;
    for (i, row) in rows.iter().enumerate() {
        println!(
            "{:>2}  {:<38} {:<24} {:<68} {}",
            i + 1,
            row.name,
            row.expected,
            row.got,
            if row.ok { "ok" } else { "MISMATCH" }
        );
        if let Some(reason) = &row.reason {
            println!("{:>2}  {:<38} reason: {reason}", "", "");
        }
        if !row.ok {
            bad += 1;
        }
    }
    bad
}

/// Prints the several-CPU table and numbers; returns whether every row matched.
fn report_smp(results: Option<&smp_scenarios::SmpResults>) -> bool {
    println!();
    let cpus = smp::online();
    let Some(results) = results else {
        println!("several CPUs: skipped ({cpus} CPU online)");
        return true;
    };
    println!("several CPUs ({cpus} online): tasks on the APs race revocations on the boot CPU");
    let bad = print_rows(&results.rows);
    println!();
    let base = results
        .revoke_cycles
        .first()
        .map_or(1, |(_, c)| (*c).max(1));
    print!("revoke_key latency (rdtsc, shootdown included; ratio to 1 CPU):");
    for (n, c) in &results.revoke_cycles {
        print!(
            "  {n} CPU(s) busy {c} cycles ({}.{:02}x)",
            c / base,
            (c % base) * 100 / base
        );
    }
    println!();
    if let Some([hit1, hitn, miss1, missn]) = results.decide {
        let ratio = |a: u64, b: u64| {
            let b = b.max(1);
            alloc::format!("{}.{:02}x", a / b, (a % b) * 100 / b)
        };
        println!(
            "Engine::decide mean cycles, this CPU alone vs {cpus} CPUs deciding: hit {hit1} -> {hitn} ({}), miss (after invalidate_ctx) {miss1} -> {missn} ({})",
            ratio(hitn, hit1),
            ratio(missn, miss1)
        );
    }
    let (shootdowns, ipis, catch_ups) = smp::shootdown_counts();
    let (stale, give_ups) = task::ticket_counts();
    println!(
        "shootdowns {shootdowns}, IPIs sent {ipis}, CR3 reloads to catch up {catch_ups}; \
         map tickets found stale {stale}, faults given back to user mode {give_ups}"
    );
    let total = results.rows.len();
    if bad == 0 {
        println!("kernel-hooks-qemu: all {total} several-CPU scenarios match");
    } else {
        println!("kernel-hooks-qemu: {bad} of {total} several-CPU scenarios MISMATCH");
    }
    bad == 0
}

/// Prints the information-flow table and the label change's cost; returns whether every row
/// matched.
fn report_difc(results: &difc_scenarios::DifcResults) -> bool {
    println!();
    println!(
        "information flow control (docs/DIFC.md 7.2; labels in the kernel's table, label \
         changes by sys_sctx_label's kernel side):"
    );
    let bad = print_rows(&results.rows);
    let mhz = (clock::tsc_hz() / 1_000_000).max(1);
    println!(
        "label change at N pages mapped rw- under the context ({}); rdtsc cycles, minimum of \
         3 runs per part (QEMU TCG: emulated time); sweep = relabel_ctx minus the host's unmap",
        results.scale_note
    );
    println!(
        "  {:>6}  {:>10} {:>10} {:>10} {:>10} {:>7} | {:>10} {:>10} {:>10} {:>10} {:>7}",
        "N",
        "raise us",
        "sweep",
        "host walk",
        "shootdown",
        "PTEs",
        "drop us",
        "sweep",
        "host walk",
        "shootdown",
        "PTEs"
    );
    for (n, raise, drop) in &results.scale {
        println!(
            "  {n:>6}  {:>10} {:>10} {:>10} {:>10} {:>7} | {:>10} {:>10} {:>10} {:>10} {:>7}",
            raise.total / mhz,
            raise.sweep(),
            raise.walk,
            raise.shootdown,
            raise.pages,
            drop.total / mhz,
            drop.sweep(),
            drop.walk,
            drop.shootdown,
            drop.pages
        );
    }
    if let Some([plain, labelled, denial]) = results.decide {
        let ratio = |a: u64, b: u64| {
            let b = b.max(1);
            alloc::format!("{}.{:02}x", a / b, (a % b) * 100 / b)
        };
        println!(
            "Engine::decide cycles, interleaved, min / median: hit unlabelled {} / {}; hit \
             labelled (S, I of 4 tags) {} / {} ({} / {}); repeated flow denial {} / {} ({} / {})",
            plain.0,
            plain.1,
            labelled.0,
            labelled.1,
            ratio(labelled.0, plain.0),
            ratio(labelled.1, plain.1),
            denial.0,
            denial.1,
            ratio(denial.0, plain.0),
            ratio(denial.1, plain.1)
        );
    }
    println!(
        "labels interned {}, pages write-protected by label changes {}",
        labels::interned(),
        objects::write_protected_pages()
    );
    let total = results.rows.len();
    if bad == 0 {
        println!("kernel-hooks-qemu: all {total} information-flow rows match");
    } else {
        println!("kernel-hooks-qemu: {bad} of {total} information-flow rows MISMATCH");
    }
    bad == 0
}

/// Prints the user programs' table; returns whether every row matched.
fn report_programs(results: Option<&program_scenarios::ProgramResults>) -> bool {
    println!();
    let Some(results) = results else {
        println!(
            "user programs: not embedded (the kernel was built without \
             KERNEL_HOOKS_USER_BIN_DIR; `cargo xtask` builds them)"
        );
        return true;
    };
    println!(
        "user programs (Rust, ring 3, code/data/stack/heap in objects; each step reported by \
         the program, checked by the kernel):"
    );
    let bad = print_rows(&results.rows);
    let mhz = (clock::tsc_hz() / 1_000_000).max(1);
    for (name, faults, calls, cycles) in &results.runs {
        println!(
            "  {name}: {faults} page faults, {calls} system calls, {cycles} cycles = {} us",
            cycles / mhz
        );
    }
    if !results.pair_ran {
        println!("  two microservices at once (owner and reader): skipped (1 CPU online)");
    }
    report_user_bench(&results.bench);
    let total = results.rows.len();
    if bad == 0 {
        println!("kernel-hooks-qemu: all {total} user-program rows match");
    } else {
        println!("kernel-hooks-qemu: {bad} of {total} user-program rows MISMATCH");
    }
    bad == 0
}

/// The thesis's userspace figures (Twizzler under QEMU on a Ryzen 5 2600), per operation of
/// `user_abi::BENCH_OPS`, in microseconds.
const THESIS_US: [Option<&str>; 6] = [
    None,
    Some("347.97"),
    Some("651.69"),
    Some("282.10"),
    None,
    None,
];

/// Prints the benchmark program's measurements beside the thesis's figures.
fn report_user_bench(bench: &[program::StepReport]) {
    if bench.is_empty() {
        return;
    }
    let cycles = |scheme: u64, op: u64, median: u64| {
        let step = user_abi::BENCH_STEP + scheme * 100 + op * 2 + median;
        bench.iter().find(|r| r.step == step).map(|r| r.detail)
    };
    let khz = (clock::tsc_hz() / 1_000).max(1);
    let us = |c: Option<u64>| {
        c.map_or_else(
            || alloc::string::String::from("-"),
            |c| alloc::format!("{}.{:02}", c * 1_000 / khz, c * 100_000 / khz % 100),
        )
    };
    println!();
    println!(
        "user-space benchmarks: rdtsc in ring 3, min / median of 5 runs, us at the calibrated \
         TSC ({} MHz). QEMU TCG here, emulated time; the thesis measured Twizzler under QEMU \
         on a Ryzen 5 2600: compare ratios, not absolute times.",
        clock::tsc_hz() / 1_000_000
    );
    println!(
        "  {:<40} {:>12} {:>12} {:>12} {:>12} {:>10}",
        "operation", "Ed25519 min", "median", "P-256 min", "median", "thesis"
    );
    for (op, name) in (0u64..).zip(user_abi::BENCH_OPS) {
        println!(
            "  {:<40} {:>12} {:>12} {:>12} {:>12} {:>10}",
            name,
            us(cycles(0, op, 0)),
            us(cycles(0, op, 1)),
            us(cycles(1, op, 0)),
            us(cycles(1, op, 1)),
            THESIS_US.get(op as usize).copied().flatten().unwrap_or("-")
        );
    }
    // Ratios within this boot: each operation against one signature of its scheme (medians).
    for (scheme, name) in [(0, "Ed25519"), (1, "P-256")] {
        let Some(sign) = cycles(scheme, 0, 1).filter(|&c| c > 0) else {
            continue;
        };
        print!("  {name}, median / one signature:");
        for (op, label) in [
            (1, "cap"),
            (2, "key-pair objects"),
            (3, "context"),
            (4, "edit"),
            (5, "attach+switch"),
        ] {
            if let Some(c) = cycles(scheme, op, 1) {
                print!("  {label} {}.{:02}x", c / sign, c * 100 / sign % 100);
            }
        }
        println!();
    }
    println!(
        "  thesis ratios: key-pair objects / cap creation 1.87x, context / cap creation 0.81x"
    );
    // What each operation made the kernel do, per run (its warm-up run included).
    for (scheme, name) in [(0, "Ed25519"), (1, "P-256")] {
        print!("  {name}, per run: page faults / engine misses / signatures verified:");
        for (op, label) in (0u64..).zip([
            "sign",
            "cap",
            "key-pair",
            "context",
            "edit",
            "attach+switch",
        ]) {
            let step = user_abi::BENCH_STEP + scheme * 100 + op * 2;
            if let Some(r) = bench.iter().find(|r| r.step == step) {
                let runs = user_abi::BENCH_RUNS + 1;
                print!(
                    "  {label} {}/{}/{}",
                    r.faults / runs,
                    r.misses_verifies.0 / runs,
                    r.misses_verifies.1 / runs
                );
            }
        }
        println!();
    }
}

/// Prints the table and the cycle counts; returns whether every row matched.
fn report(results: &scenarios::Results) -> bool {
    println!();
    let bad = print_rows(&results.rows);
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
    let (ring0, in_engine, engine_in_irq, deferred) = timer::kernel_counts();
    println!(
        "interrupts in ring 0: {ring0} timer interrupts, {in_engine} of them inside the engine; \
         engine calls from interrupt context {engine_in_irq}; deferred expiries run {deferred}"
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
    serial::force_unlock();
    println!();
    println!("KERNEL PANIC on CPU {}: {info}", smp::current());
    exit::exit(Outcome::Failure)
}
