//! Benchmarks of what a program does to make its policy, inside the OS: one signature,
//! capability creation, key-pair object creation, context creation, a context edit, and
//! attach + switch, for Ed25519 and P-256. Each is timed with `rdtsc` in ring 3, five times
//! after one untimed run;
//! the minimum and the median are reported (`abi::BENCH_STEP`), and the kernel converts them
//! with its calibrated TSC frequency and prints them beside the thesis's figures.
//!
//! Signing-key objects are created readable and writable by default (a real program would
//! keep them under a capability); nothing else here is.

#![no_std]
#![no_main]

extern crate alloc;

use kernel_hooks_user::abi::{self, BENCH_STEP, KIND_CONTEXT, KIND_DATA, report};
use kernel_hooks_user::heap::{self, PAGE};
use kernel_hooks_user::own::Own;
use kernel_hooks_user::rt::try_read;
use kernel_hooks_user::{Error, ctx, entry, sys};
use twizzler_capsec::{Cap, CapGrant, Protections, SigningKey, SigningScheme};

entry!(main);

/// Runs of each operation.
const RUNS: usize = abi::BENCH_RUNS as usize;
/// Pages of each context object (room for every capability the edit benchmark adds).
const CTX_PAGES: u64 = abi::self_info::CONTEXT_PAGES;

fn main(_args: [u64; 4]) -> u64 {
    let Ok(me) = heap::init() else {
        return 1;
    };
    let schemes = [(0, SigningScheme::Ed25519), (1, SigningScheme::EcdsaP256)];
    for (i, scheme) in schemes {
        if let Err(e) = bench(&me, i, scheme) {
            sys::report(BENCH_STEP - 1, report::ERROR, e as u64);
            return 2;
        }
    }
    0
}

/// Reports the minimum and median of `runs` for operation `op` of scheme `s`.
fn report_op(s: u64, op: u64, mut runs: [u64; RUNS]) {
    runs.sort_unstable();
    let step = BENCH_STEP + s * 100 + op * 2;
    sys::report(step, report::OK, runs[0]);
    sys::report(step + 1, report::OK, runs[RUNS / 2]);
}

/// Times `f` `RUNS` times, after one untimed run (which faults in the code and data it
/// touches for the first time).
fn time(mut f: impl FnMut() -> Result<(), Error>) -> Result<[u64; RUNS], Error> {
    f()?;
    let mut runs = [0u64; RUNS];
    for r in &mut runs {
        let t0 = sys::rdtsc();
        f()?;
        *r = sys::rdtsc().wrapping_sub(t0);
    }
    Ok(runs)
}

fn key(scheme: SigningScheme) -> Result<SigningKey, Error> {
    let mut seed = [0u8; 32];
    sys::entropy(&mut seed)?;
    SigningKey::from_entropy(scheme, &seed).map_err(|_| Error::Malformed)
}

fn bench(me: &Own, s: u64, scheme: SigningScheme) -> Result<(), Error> {
    let sk = key(scheme)?;
    let kuid = sys::create_key(&sk.verifying_key().encode())?;
    let target = sys::create_object(KIND_DATA, 1, Protections::empty(), Some(kuid))?;
    // The holder is switched to below: one of the program's private contexts (no other task
    // may attach it), granting the program its own code, stack and heap (the loader's
    // objects have no default rights).
    let holder = me.context(s as usize)?;
    let holder_base = sys::map(holder)?;
    let mine = me.caps_for(holder)?;
    ctx::edit(holder_base, CTX_PAGES, |ed| {
        for c in &mine {
            ed.add_cap(c);
        }
    })?;

    // Setup done: the next report's counts start here.
    sys::report(BENCH_STEP + s * 100 + 99, report::OK, 0);

    // 0. One signature, for the ratios.
    let msg = [0x5au8; 32];
    report_op(
        s,
        0,
        time(|| sk.sign(&msg).map(|_| ()).map_err(|_| Error::Malformed))?,
    );

    // 1. A capability: the grant, hashed and signed.
    let grant = CapGrant::new(target, holder, Protections::READ);
    report_op(
        s,
        1,
        time(|| {
            Cap::mint(grant, &sk)
                .map(|_| ())
                .map_err(|_| Error::Malformed)
        })?,
    );

    // 2. Key-pair objects: a key pair from kernel entropy, its verifying key as a key object,
    // its signing key written into a data object of its own.
    report_op(
        s,
        2,
        time(|| {
            let pair = key(scheme)?;
            sys::create_key(&pair.verifying_key().encode())?;
            let private =
                sys::create_object(KIND_DATA, 1, Protections::READ | Protections::WRITE, None)?;
            let base = sys::map(private)?;
            let secret = pair.encode();
            // SAFETY: the fresh object's first page past the null page is this program's,
            // mapped read-write by default, and no Rust reference points into it.
            unsafe {
                core::ptr::copy_nonoverlapping(
                    secret.as_ptr(),
                    (base + PAGE) as *mut u8,
                    secret.len(),
                )
            };
            Ok(())
        })?,
    );

    // 3. A context: the object (an empty context), mapped, its first page faulted in.
    report_op(
        s,
        3,
        time(|| {
            let c = sys::create_object(KIND_CONTEXT, 1, Protections::all(), None)?;
            let base = sys::map(c)?;
            try_read(base + PAGE).map_err(|_| Error::Denied)?;
            Ok(())
        })?,
    );

    // 4. An edit: one more capability in an inactive context, in place.
    let cap = Cap::mint(grant, &sk).map_err(|_| Error::Malformed)?;
    report_op(
        s,
        4,
        time(|| ctx::edit(holder_base, CTX_PAGES, |ed| ed.add_cap(&cap)))?,
    );

    // 5. Attach and switch (then, untimed, switch back and detach).
    let start = sys::active()?;
    let mut runs = [0u64; RUNS + 1];
    for r in &mut runs {
        let t0 = sys::rdtsc();
        sys::attach(holder)?;
        sys::switch(holder)?;
        *r = sys::rdtsc().wrapping_sub(t0);
        sys::switch(start)?;
        sys::detach(holder)?;
    }
    // The first run was the warm-up.
    let mut timed = [0u64; RUNS];
    timed.copy_from_slice(runs.get(1..).unwrap_or(&[0; RUNS]));
    report_op(s, 5, timed);
    Ok(())
}
