//! Gates, table-driven: construction with checked arithmetic, page coverage, entry points,
//! containment, and gates inside encoded capabilities.

use twizzler_capsec::{
    CAP_BODY_LEN, Cap, CapGrant, DecodeError, Gate, GateError, MAX_OBJECT_SIZE, ObjID, PAGE_SIZE,
    Protections, SigningKey, SigningScheme,
};

const GIB: u64 = 1 << 30;
const PAGE: u64 = 4096;

/// A row of the `Gate::new` table: name, offset, length, align, expected outcome.
type NewCase = (&'static str, u64, u64, u64, Result<(), GateError>);
/// A row of the encoded-gate table: name, offset, length, align, expected decoded gate.
type DecodeCase = (&'static str, u64, u64, u64, Result<Gate, GateError>);

fn gate(offset: u64, length: u64, align: u64) -> Gate {
    Gate::new(offset, length, align)
        .unwrap_or_else(|e| panic!("test gate ({offset:#x}, {length:#x}, {align}): {e:?}"))
}

#[test]
fn constants() {
    assert_eq!(MAX_OBJECT_SIZE, GIB);
    assert_eq!(PAGE_SIZE, PAGE);
    assert_eq!(Gate::WHOLE, gate(0, GIB, 1));
    assert_eq!(Gate::default(), Gate::WHOLE);
    assert_eq!(Gate::WHOLE.end(), GIB);
}

#[test]
fn new_checks_its_arithmetic() {
    use GateError::*;
    let table: &[NewCase] = &[
        ("zero length", 0, 0, 1, Err(ZeroLength)),
        ("zero length at the end", GIB, 0, 1, Err(ZeroLength)),
        ("zero align", 0, 1, 0, Err(ZeroAlign)),
        ("zero align, whole object", 0, GIB, 0, Err(ZeroAlign)),
        ("offset u64::MAX", u64::MAX, 1, 1, Err(Overflow)),
        ("length u64::MAX", 1, u64::MAX, 1, Err(Overflow)),
        ("both u64::MAX", u64::MAX, u64::MAX, 1, Err(Overflow)),
        ("sum exactly 2^64", 1 << 63, 1 << 63, 1, Err(Overflow)),
        ("length u64::MAX from 0", 0, u64::MAX, 1, Err(OutOfRange)),
        ("end u64::MAX", u64::MAX - 1, 1, 1, Err(OutOfRange)),
        ("end 1 GiB + 1", 0, GIB + 1, 1, Err(OutOfRange)),
        ("starts at 1 GiB", GIB, 1, 1, Err(OutOfRange)),
        ("straddles 1 GiB", GIB - 1, 2, 1, Err(OutOfRange)),
        ("far beyond", 1 << 40, PAGE, 1, Err(OutOfRange)),
        ("exactly 1 GiB", 0, GIB, 1, Ok(())),
        ("last byte", GIB - 1, 1, 1, Ok(())),
        ("last page", GIB - PAGE, PAGE, PAGE, Ok(())),
        ("one byte", 0, 1, 1, Ok(())),
        ("huge align", 0, 1, u64::MAX, Ok(())),
        ("unaligned offset", 3, 5, 8, Ok(())),
    ];
    for &(name, offset, length, align, expected) in table {
        let got = Gate::new(offset, length, align);
        match expected {
            Ok(()) => {
                let g = got.unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(
                    (g.offset(), g.length(), g.align(), g.end()),
                    (offset, length, align, offset + length),
                    "{name}"
                );
            }
            Err(e) => assert_eq!(got, Err(e), "{name}"),
        }
    }
}

#[test]
fn covers_page() {
    let max_page = u64::MAX / PAGE;
    let table: &[(&str, Gate, u64, bool)] = &[
        ("exact page", gate(PAGE, PAGE, 1), 1, true),
        ("page before an exact gate", gate(PAGE, PAGE, 1), 0, false),
        ("page after an exact gate", gate(PAGE, PAGE, 1), 2, false),
        ("two pages, first", gate(PAGE, 2 * PAGE, 1), 1, true),
        ("two pages, second", gate(PAGE, 2 * PAGE, 1), 2, true),
        ("partial first page", gate(100, 2 * PAGE - 100, 1), 0, false),
        (
            "full page after a partial one",
            gate(100, 2 * PAGE - 100, 1),
            1,
            true,
        ),
        ("partial last page", gate(0, PAGE + 100, 1), 1, false),
        (
            "full page before a partial one",
            gate(0, PAGE + 100, 1),
            0,
            true,
        ),
        (
            "one byte short at the end",
            gate(PAGE, PAGE - 1, 1),
            1,
            false,
        ),
        (
            "one byte short at the start",
            gate(PAGE + 1, PAGE - 1, 1),
            1,
            false,
        ),
        ("gate smaller than a page", gate(10, 100, 1), 0, false),
        ("gate of one byte", gate(PAGE, 1, 1), 1, false),
        ("whole object, first page", Gate::WHOLE, 0, true),
        ("whole object, last page", Gate::WHOLE, GIB / PAGE - 1, true),
        ("whole object, beyond", Gate::WHOLE, GIB / PAGE, false),
        ("page * 4096 + 4096 overflows", Gate::WHOLE, max_page, false),
        ("page * 4096 overflows", Gate::WHOLE, max_page + 1, false),
        ("page u64::MAX", Gate::WHOLE, u64::MAX, false),
        ("page 2^52", Gate::WHOLE, 1 << 52, false),
        // Alignment does not matter for data.
        ("align is ignored", gate(0, PAGE, 1 << 20), 0, true),
    ];
    for &(name, g, page, expected) in table {
        assert_eq!(g.covers_page(page), expected, "{name}: {g:?} page {page}");
    }
}

#[test]
fn allows_entry() {
    let g = gate(PAGE, PAGE, 16);
    let odd = gate(4100, 100, 8);
    let table: &[(&str, Gate, u64, bool)] = &[
        ("at the start", g, PAGE, true),
        ("aligned inside", g, PAGE + 16, true),
        ("last aligned offset", g, 2 * PAGE - 16, true),
        ("misaligned by one", g, PAGE + 1, false),
        ("misaligned by half", g, PAGE + 8, false),
        ("last byte (misaligned)", g, 2 * PAGE - 1, false),
        ("at the end (exclusive)", g, 2 * PAGE, false),
        ("aligned beyond the end", g, 2 * PAGE + 16, false),
        ("aligned just before the start", g, PAGE - 16, false),
        ("zero, before the start", g, 0, false),
        ("u64::MAX", g, u64::MAX, false),
        // Alignment is absolute (a multiple of align), not relative to the gate's start.
        ("unaligned gate start", odd, 4100, false),
        ("first aligned offset of an unaligned gate", odd, 4104, true),
        ("last aligned offset of an unaligned gate", odd, 4192, true),
        ("end of an unaligned gate", odd, 4200, false),
        ("align 1, every byte", gate(5, 3, 1), 7, true),
        ("align 1, at the end", gate(5, 3, 1), 8, false),
        ("align 1, before", gate(5, 3, 1), 4, false),
        ("whole object, last byte", Gate::WHOLE, GIB - 1, true),
        ("whole object, at 1 GiB", Gate::WHOLE, GIB, false),
        ("huge align, offset 0", gate(0, 16, u64::MAX), 0, true),
        ("huge align, offset 1", gate(0, 16, u64::MAX), 1, false),
    ];
    for &(name, g, offset, expected) in table {
        assert_eq!(
            g.allows_entry(offset),
            expected,
            "{name}: {g:?} at {offset:#x}"
        );
    }
}

#[test]
fn contains() {
    let outer = gate(PAGE, 4 * PAGE, 16);
    let table: &[(&str, Gate, Gate, bool)] = &[
        ("equal", outer, outer, true),
        ("narrower start", outer, gate(2 * PAGE, 3 * PAGE, 16), true),
        ("narrower end", outer, gate(PAGE, PAGE, 16), true),
        ("narrower both", outer, gate(2 * PAGE, PAGE, 16), true),
        ("one byte inside", outer, gate(3 * PAGE, 1, 16), true),
        ("stricter align", outer, gate(PAGE, 4 * PAGE, 32), true),
        ("multiple align", outer, gate(PAGE, 4 * PAGE, 48), true),
        (
            "misaligned align (8 under 16)",
            outer,
            gate(PAGE, 4 * PAGE, 8),
            false,
        ),
        (
            "misaligned align (24 under 16)",
            outer,
            gate(PAGE, 4 * PAGE, 24),
            false,
        ),
        ("align 1 under 16", outer, gate(PAGE, 4 * PAGE, 1), false),
        (
            "wider at the start",
            outer,
            gate(PAGE - 1, 4 * PAGE + 1, 16),
            false,
        ),
        (
            "wider at the end",
            outer,
            gate(PAGE, 4 * PAGE + 1, 16),
            false,
        ),
        ("wider both", outer, gate(0, GIB, 16), false),
        ("disjoint before", outer, gate(0, PAGE, 16), false),
        ("disjoint after", outer, gate(5 * PAGE, PAGE, 16), false),
        (
            "straddles the end",
            outer,
            gate(4 * PAGE, 2 * PAGE, 16),
            false,
        ),
        (
            "whole object contains anything",
            Gate::WHOLE,
            gate(7, 9, 3),
            true,
        ),
        (
            "whole object contains itself",
            Gate::WHOLE,
            Gate::WHOLE,
            true,
        ),
        (
            "nothing smaller contains the whole",
            outer,
            Gate::WHOLE,
            false,
        ),
        (
            "align 1 outer, any inner align",
            gate(0, PAGE, 1),
            gate(0, PAGE, 7),
            true,
        ),
    ];
    for &(name, outer, inner, expected) in table {
        assert_eq!(
            outer.contains(&inner),
            expected,
            "{name}: {outer:?} ⊇ {inner:?}"
        );
    }
}

#[test]
fn display_and_debug() {
    let g = gate(0x1000, 0x2000, 16);
    assert_eq!(g.to_string(), "0x1000:0x2000:16");
    assert_eq!(format!("{g:?}"), "Gate(0x1000..0x3000, align 16)");
}

#[test]
fn gates_inside_encoded_capabilities_are_checked() {
    use rand_core::SeedableRng;
    let sk = SigningKey::generate(
        SigningScheme::Ed25519,
        &mut rand_chacha::ChaCha20Rng::seed_from_u64(1),
    );
    let mut grant = CapGrant::new(ObjID::new(1), ObjID::new(2), Protections::READ);
    grant.gate = gate(PAGE, PAGE, 8);
    let cap = Cap::mint(grant, &sk).unwrap();
    let valid = cap.encode();
    // The gate sits just before the expiry, at the end of the body.
    const GATE_AT: usize = CAP_BODY_LEN - 8 - 24;
    assert_eq!(&valid[GATE_AT..GATE_AT + 8], &PAGE.to_le_bytes());
    assert_eq!(Cap::decode(&valid).unwrap().gate(), grant.gate);

    let table: &[DecodeCase] = &[
        ("zero length", 0, 0, 1, Err(GateError::ZeroLength)),
        ("zero align", 0, 1, 0, Err(GateError::ZeroAlign)),
        ("overflow", u64::MAX, u64::MAX, 1, Err(GateError::Overflow)),
        ("beyond 1 GiB", 0, GIB + 1, 1, Err(GateError::OutOfRange)),
        ("exactly 1 GiB", 0, GIB, 1, Ok(Gate::WHOLE)),
    ];
    for &(name, offset, length, align, expected) in table {
        let mut b = valid;
        b[GATE_AT..GATE_AT + 8].copy_from_slice(&offset.to_le_bytes());
        b[GATE_AT + 8..GATE_AT + 16].copy_from_slice(&length.to_le_bytes());
        b[GATE_AT + 16..GATE_AT + 24].copy_from_slice(&align.to_le_bytes());
        match expected {
            Ok(g) => {
                let decoded = Cap::decode(&b).unwrap_or_else(|e| panic!("{name}: {e:?}"));
                assert_eq!(decoded.gate(), g, "{name}");
                // The gate is signed: the edited capability no longer verifies.
                assert!(decoded.verify(&sk.verifying_key(), 0).is_err(), "{name}");
            }
            Err(e) => assert_eq!(Cap::decode(&b), Err(DecodeError::Gate(e)), "{name}"),
        }
    }
}
