//! The security-context format: the validating parser (every rejection, with its exact error),
//! the editor (generation, round trips, lookups), a model-based property test of the editor and
//! the reader, and robustness of the reader and the rule against corrupted bytes.

use std::collections::{BTreeMap, BTreeSet};

use crate::fixture::*;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use twizzler_capsec::ctx::{
    CTX_MAGIC, CTX_VERSION_LABEL, ENTRY_LEN, HEADER_LEN, MASK_LEN, WRITING,
};
use twizzler_capsec::{
    Access, Cap, CtxError, CtxFlags, DecodeError, Del, DelGrant, Gate, Mask, ObjID, Protections,
    Record, RecordId, RecordKind, SecCtx, SecCtxEditor, Signature, SigningKey, SigningScheme,
    evaluate,
};

const C: ObjID = ObjID::new(0xC0);
const P: ObjID = ObjID::new(0xB0);
const NOW: u64 = 1_000;

// Header field offsets (see the layout table in `twizzler_capsec::ctx`).
const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 4;
const OFF_FLAGS: usize = 6;
const OFF_GENERATION: usize = 8;
const OFF_GLOBAL: usize = 16;
const OFF_RESERVED_A: usize = 18;
const OFF_ENTRY_COUNT: usize = 20;
const OFF_MASK_COUNT: usize = 24;
const OFF_ENTRIES: usize = 28;
const OFF_MASKS: usize = 32;
const OFF_HEAP: usize = 36;
const OFF_HEAP_LEN: usize = 40;
const OFF_RESERVED_B: usize = 44;

// Entry row field offsets.
const E_TARGET: usize = 0;
const E_KIND: usize = 16;
const E_OFFSET: usize = 20;
const E_LEN: usize = 24;

fn t(raw: u128) -> ObjID {
    ObjID::new(raw)
}

/// A signature to build unsigned records with (layout tests do not verify).
fn template_sig() -> Signature {
    *cap(t(1), C, R, &key(SigningScheme::Ed25519, 100)).signature()
}

/// A distinct (unverifiable) capability for `target`, distinguished by `n`.
fn fake_cap(target: ObjID, n: u64, sig: Signature) -> Cap {
    Cap::from_parts(grant(target, C, R, Gate::WHOLE, n + 1), sig)
}

/// The base context most parser tests corrupt: 3 entries (targets 10, 20, 20), 2 masks
/// (targets 10, 30), global mask R|W.
fn base() -> Vec<u8> {
    let sig = template_sig();
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&fake_cap(t(20), 1, sig));
    ed.add_cap(&fake_cap(t(10), 2, sig));
    ed.add_cap(&fake_cap(t(20), 3, sig));
    ed.set_mask(t(30), R, W);
    ed.set_mask(t(10), R | W, NONE);
    ed.set_global_mask(R | W);
    encode(&ed)
}

fn entry_field(index: usize, field: usize) -> usize {
    HEADER_LEN + index * ENTRY_LEN + field
}

fn mask_row(bytes: &[u8], index: usize) -> usize {
    get_u32(bytes, OFF_MASKS) as usize + index * MASK_LEN
}

fn parse_err(bytes: &[u8]) -> CtxError {
    match SecCtx::parse(bytes) {
        Ok(ctx) => panic!("parse accepted corrupted bytes: {ctx:?}"),
        Err(e) => e,
    }
}

fn patched(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = base();
    f(&mut b);
    b
}

#[test]
fn base_context_parses() {
    let b = base();
    let ctx = SecCtx::parse(&b).unwrap();
    assert_eq!(ctx.entry_count(), 3);
    assert_eq!(ctx.mask_count(), 2);
    assert_eq!(ctx.global_mask(), R | W);
    assert_eq!(ctx.flags(), CtxFlags::empty());
    assert_eq!(ctx.generation(), 6);
    let targets: Vec<u128> = ctx.entries().map(|e| e.target.raw()).collect();
    assert_eq!(targets, vec![10, 20, 20]);
    assert_eq!(get_u32(&b, OFF_ENTRIES) as usize, HEADER_LEN);
}

#[test]
fn header_errors() {
    let b = base();
    assert_eq!(
        parse_err(&[]),
        CtxError::Header(DecodeError::Truncated {
            at: 0,
            needed: HEADER_LEN,
            available: 0
        })
    );
    assert_eq!(
        parse_err(&b[..HEADER_LEN - 1]),
        CtxError::Header(DecodeError::Truncated {
            at: 0,
            needed: HEADER_LEN,
            available: HEADER_LEN - 1
        })
    );
    assert_eq!(
        parse_err(&b[..1]),
        CtxError::Header(DecodeError::Truncated {
            at: 0,
            needed: HEADER_LEN,
            available: 1
        })
    );
    assert_eq!(
        parse_err(&patched(|b| put_u32(
            b,
            OFF_MAGIC,
            u32::from_le_bytes(*b"TCAP")
        ))),
        CtxError::Header(DecodeError::BadMagic {
            expected: CTX_MAGIC,
            found: u32::from_le_bytes(*b"TCAP")
        })
    );
    // Versions 1 and 2 are read (2 adds an overflow table, here empty).
    assert!(SecCtx::parse(&patched(|b| put_u16(b, OFF_VERSION, 2))).is_ok());
    // Version 3 (a label section) is read too: see `difc_context.rs`.
    for v in [0u16, 4, u16::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u16(b, OFF_VERSION, v))),
            CtxError::Header(DecodeError::UnsupportedVersion {
                found: v,
                supported: CTX_VERSION_LABEL
            })
        );
    }
    for f in [2u16, 3, 0x8000, u16::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u16(b, OFF_FLAGS, f))),
            CtxError::UnknownFlags(f)
        );
    }
    for g in [8u16, 0x0f, 0x100, u16::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u16(b, OFF_GLOBAL, g))),
            CtxError::UnknownGlobalMask(g)
        );
    }
    for v in [1u16, 0x8000] {
        assert_eq!(
            parse_err(&patched(|b| put_u16(b, OFF_RESERVED_A, v))),
            CtxError::NonZeroReserved
        );
    }
    for v in [1u32, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, OFF_RESERVED_B, v))),
            CtxError::NonZeroReserved
        );
    }
    // The generation is free-form below the WRITING bit…
    let gen_at = |g: u64| {
        patched(|b| b[OFF_GENERATION..OFF_GENERATION + 8].copy_from_slice(&g.to_le_bytes()))
    };
    let top = WRITING - 1;
    assert_eq!(SecCtx::parse(&gen_at(top)).unwrap().generation(), top);
    // …and a header with it set is a rewrite in progress: refused, whatever else it says.
    for g in [WRITING, WRITING | 7, u64::MAX] {
        assert_eq!(parse_err(&gen_at(g)), CtxError::WriteInProgress);
    }
    // Flags: the known bit is accepted.
    let f = patched(|b| put_u16(b, OFF_FLAGS, 1));
    assert_eq!(SecCtx::parse(&f).unwrap().flags(), CtxFlags::UNDETACHABLE);
}

#[test]
fn table_bounds_errors() {
    let b = base();
    let len = b.len() as u32;
    let entry_table = CtxError::TableOutOfBounds("entry table");
    let mask_table = CtxError::TableOutOfBounds("mask table");
    let heap = CtxError::TableOutOfBounds("item heap");

    // Entry count too large for the buffer.
    for n in [len / ENTRY_LEN as u32 + 1, 1 << 28, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, OFF_ENTRY_COUNT, n))),
            entry_table,
            "count {n}"
        );
    }
    // Entry table offset past the end, or such that the table crosses the end.
    for off in [len, len - 1, len - 3 * ENTRY_LEN as u32 + 1, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, OFF_ENTRIES, off))),
            entry_table,
            "offset {off}"
        );
    }
    // An empty table may sit at the very end, but not beyond it.
    let ok = patched(|b| {
        put_u32(b, OFF_ENTRY_COUNT, 0);
        put_u32(b, OFF_ENTRIES, len);
    });
    assert_eq!(SecCtx::parse(&ok).unwrap().entry_count(), 0);
    let beyond = patched(|b| {
        put_u32(b, OFF_ENTRY_COUNT, 0);
        put_u32(b, OFF_ENTRIES, len + 1);
    });
    assert_eq!(parse_err(&beyond), entry_table);

    for n in [len / MASK_LEN as u32 + 1, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, OFF_MASK_COUNT, n))),
            mask_table,
            "count {n}"
        );
    }
    for off in [len, len - 2 * MASK_LEN as u32 + 1, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, OFF_MASKS, off))),
            mask_table,
            "offset {off}"
        );
    }

    let heap_off = get_u32(&b, OFF_HEAP);
    let heap_len = get_u32(&b, OFF_HEAP_LEN);
    assert_eq!(heap_off + heap_len, len, "the editor puts the heap last");
    for hl in [heap_len + 1, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, OFF_HEAP_LEN, hl))),
            heap,
            "heap len {hl}"
        );
    }
    for ho in [heap_off + 1, len + 1, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, OFF_HEAP, ho))),
            heap,
            "heap offset {ho}"
        );
    }
    // Truncating the buffer cuts the heap.
    assert_eq!(parse_err(&b[..b.len() - 1]), heap);
    // Entry checks come before mask checks, table checks before both.
    let both = patched(|b| {
        put_u32(b, OFF_HEAP_LEN, u32::MAX);
        put_u32(b, OFF_MASK_COUNT, u32::MAX);
    });
    assert_eq!(parse_err(&both), mask_table);
}

#[test]
fn entry_errors() {
    let b = base();
    let heap_len = get_u32(&b, OFF_HEAP_LEN);
    for (name, at, v) in [
        ("offset at the heap end", E_OFFSET, heap_len),
        ("offset far out", E_OFFSET, u32::MAX),
        ("length past the heap end", E_LEN, heap_len),
        ("length u32::MAX", E_LEN, u32::MAX),
    ] {
        let bad = patched(|b| put_u32(b, entry_field(1, at), v));
        if name == "offset at the heap end" {
            // Entry 1's length is non-zero, so an item starting at the heap end does not fit.
            assert_ne!(get_u32(&bad, entry_field(1, E_LEN)), 0);
        }
        assert_eq!(
            parse_err(&bad),
            CtxError::ItemOutOfBounds { index: 1 },
            "{name}"
        );
    }
    // An item that ends exactly at the heap end is fine; one byte further is not.
    let last = patched(|b| {
        let off = get_u32(b, entry_field(2, E_OFFSET));
        put_u32(b, entry_field(2, E_LEN), heap_len - off);
    });
    SecCtx::parse(&last).unwrap();
    let over = patched(|b| {
        let off = get_u32(b, entry_field(2, E_OFFSET));
        put_u32(b, entry_field(2, E_LEN), heap_len - off + 1);
    });
    assert_eq!(parse_err(&over), CtxError::ItemOutOfBounds { index: 2 });
    // A zero-length item at the heap end is inside; it just does not decode.
    let empty_item = patched(|b| {
        put_u32(b, entry_field(0, E_OFFSET), heap_len);
        put_u32(b, entry_field(0, E_LEN), 0);
    });
    let ctx = SecCtx::parse(&empty_item).unwrap();
    let e = ctx.entries().next().unwrap();
    assert!(e.bytes().is_empty());
    assert!(matches!(e.record(), Err(DecodeError::Truncated { .. })));

    for kind in [2u32, 3, u32::MAX] {
        assert_eq!(
            parse_err(&patched(|b| put_u32(b, entry_field(2, E_KIND), kind))),
            CtxError::BadEntryKind { index: 2, kind }
        );
    }
    // The kind of a valid entry may be changed to the other known kind: the record then does
    // not decode, but the table is valid.
    let other = patched(|b| put_u32(b, entry_field(0, E_KIND), RecordKind::Del.raw()));
    let ctx = SecCtx::parse(&other).unwrap();
    assert_eq!(ctx.entries().next().unwrap().kind, RecordKind::Del);

    // Sorting.
    let unsorted = patched(|b| patch_entry_target(b, 2, t(15)));
    assert_eq!(parse_err(&unsorted), CtxError::UnsortedEntries { index: 2 });
    let unsorted = patched(|b| patch_entry_target(b, 0, t(u128::MAX)));
    assert_eq!(parse_err(&unsorted), CtxError::UnsortedEntries { index: 1 });
    let unsorted = patched(|b| patch_entry_target(b, 1, t(9)));
    assert_eq!(parse_err(&unsorted), CtxError::UnsortedEntries { index: 1 });
    // Equal neighbours are fine (several records per target).
    let equal = patched(|b| patch_entry_target(b, 0, t(20)));
    let ctx = SecCtx::parse(&equal).unwrap();
    assert_eq!(ctx.entries_for(t(20)).count(), 3);
    assert_eq!(ctx.entries_for(t(10)).count(), 0);
    // The first entry of a per-entry problem is the one reported.
    let two = patched(|b| {
        put_u32(b, entry_field(1, E_KIND), 7);
        put_u32(b, entry_field(2, E_LEN), u32::MAX);
    });
    assert_eq!(
        parse_err(&two),
        CtxError::BadEntryKind { index: 1, kind: 7 }
    );
}

#[test]
fn mask_errors() {
    let b = base();
    let m0 = mask_row(&b, 0);
    let m1 = mask_row(&b, 1);
    assert_eq!(get_u32(&b, m0), 10);
    assert_eq!(get_u32(&b, m1), 30);
    let set_target =
        |b: &mut Vec<u8>, at: usize, v: u128| b[at..at + 16].copy_from_slice(&v.to_le_bytes());

    let dup = patched(|b| set_target(b, m1, 10));
    assert_eq!(parse_err(&dup), CtxError::UnsortedMasks { index: 1 });
    let desc = patched(|b| set_target(b, m1, 5));
    assert_eq!(parse_err(&desc), CtxError::UnsortedMasks { index: 1 });
    let desc = patched(|b| set_target(b, m0, u128::MAX));
    assert_eq!(parse_err(&desc), CtxError::UnsortedMasks { index: 1 });

    for (index, field, v) in [
        (0, 16, 8u16),
        (0, 16, 0xff),
        (1, 18, 0x10),
        (1, 18, u16::MAX),
    ] {
        let at = if index == 0 { m0 } else { m1 } + field;
        assert_eq!(
            parse_err(&patched(|b| put_u16(b, at, v))),
            CtxError::BadMask { index },
            "mask {index} field {field} = {v:#x}"
        );
    }
    // Unsorted is reported before the bad bits of the same mask.
    let both = patched(|b| {
        set_target(b, m1, 10);
        put_u16(b, m1 + 16, 8);
    });
    assert_eq!(parse_err(&both), CtxError::UnsortedMasks { index: 1 });
    // Entries are validated before masks.
    let both = patched(|b| {
        set_target(b, m1, 10);
        put_u32(b, entry_field(0, E_KIND), 9);
    });
    assert_eq!(
        parse_err(&both),
        CtxError::BadEntryKind { index: 0, kind: 9 }
    );
}

#[test]
fn ctx_error_messages_name_the_problem() {
    let cases = [
        (CtxError::UnknownFlags(2), "0x2"),
        (CtxError::UnknownGlobalMask(8), "0x8"),
        (CtxError::TableOutOfBounds("mask table"), "mask table"),
        (CtxError::UnsortedEntries { index: 4 }, "entry 4"),
        (CtxError::BadEntryKind { index: 3, kind: 9 }, "kind 9"),
        (CtxError::ItemOutOfBounds { index: 5 }, "entry 5"),
        (CtxError::UnsortedMasks { index: 6 }, "mask 6"),
        (CtxError::BadMask { index: 7 }, "mask 7"),
    ];
    for (e, needle) in cases {
        let s = e.to_string();
        assert!(s.contains(needle), "{s:?} should mention {needle:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Editor

struct Records {
    sig: Signature,
    ka: SigningKey,
    kp: SigningKey,
}

impl Records {
    fn new() -> Self {
        Self {
            sig: template_sig(),
            ka: key(SigningScheme::Ed25519, 200),
            kp: key(SigningScheme::Ed25519, 201),
        }
    }
    fn del(&self, target: ObjID) -> Del {
        Del::from_cap(
            &cap(target, P, R | W, &self.ka),
            DelGrant::new(C, R),
            &self.kp,
        )
        .unwrap()
    }
}

#[test]
fn generation_bumps_by_exactly_one_per_change() {
    let rs = Records::new();
    let mut ed = SecCtxEditor::new();
    assert_eq!(ed.generation(), 0);
    assert_eq!(SecCtx::parse(&encode(&ed)).unwrap().generation(), 0);
    let mut expect = 0u64;
    let mut check = |ed: &SecCtxEditor, changed: bool, what: &str| {
        if changed {
            expect += 1;
        }
        assert_eq!(ed.generation(), expect, "after {what}");
        assert_eq!(
            SecCtx::parse(&encode(ed)).unwrap().generation(),
            expect,
            "encoded after {what}"
        );
    };
    let a = fake_cap(t(5), 0, rs.sig);
    let b = fake_cap(t(5), 1, rs.sig);
    let d = rs.del(t(7));

    ed.add_cap(&a);
    check(&ed, true, "add_cap");
    ed.add_cap(&a);
    check(&ed, true, "add_cap of a duplicate");
    ed.add_cap(&b);
    check(&ed, true, "add_cap");
    ed.add_del(&d);
    check(&ed, true, "add_del");
    ed.add_record(&Record::Cap(fake_cap(t(9), 0, rs.sig)));
    check(&ed, true, "add_record");
    assert_eq!(ed.len(), 5);

    assert_eq!(ed.remove(t(5), &fake_cap(t(5), 99, rs.sig).id()), 0);
    check(&ed, false, "remove of an absent id");
    assert_eq!(ed.remove(t(6), &a.id()), 0);
    check(&ed, false, "remove under the wrong target");
    assert_eq!(ed.remove(t(5), &a.id()), 2);
    check(&ed, true, "remove of two duplicates");
    assert_eq!(ed.remove(t(5), &a.id()), 0);
    check(&ed, false, "remove again");
    assert_eq!(ed.remove(t(7), &d.id()), 1);
    check(&ed, true, "remove of a delegation");
    assert_eq!(ed.len(), 2);

    assert_eq!(ed.remove_target(t(1234)), 0);
    check(&ed, false, "remove_target of an absent target");
    ed.add_cap(&fake_cap(t(9), 1, rs.sig));
    check(&ed, true, "add_cap");
    assert_eq!(ed.remove_target(t(9)), 2);
    check(&ed, true, "remove_target");
    assert_eq!(ed.len(), 1);

    ed.set_mask(t(5), R, NONE);
    check(&ed, true, "set_mask");
    ed.set_mask(t(5), R, NONE);
    check(&ed, true, "set_mask with the same value");
    ed.set_mask(t(5), R | W, X);
    check(&ed, true, "set_mask overwrite");
    assert!(ed.remove_mask(t(5)));
    check(&ed, true, "remove_mask");
    assert!(!ed.remove_mask(t(5)));
    check(&ed, false, "remove_mask of an absent mask");

    ed.set_global_mask(R);
    check(&ed, true, "set_global_mask");
    ed.set_global_mask(R);
    check(&ed, true, "set_global_mask with the same value");
    ed.set_flags(CtxFlags::UNDETACHABLE);
    check(&ed, true, "set_flags");
    ed.set_flags(CtxFlags::empty());
    check(&ed, true, "set_flags clear");

    // Encoding does not change the generation.
    let g = ed.generation();
    let _ = encode(&ed);
    assert_eq!(ed.generation(), g);
}

#[test]
fn from_ctx_keeps_generation_and_contents_and_round_trips() {
    let rs = Records::new();
    let mut ed = SecCtxEditor::new();
    for (i, target) in [30u128, 10, 20, 10, 30, 10].into_iter().enumerate() {
        ed.add_cap(&fake_cap(t(target), i as u64, rs.sig));
    }
    ed.add_del(&rs.del(t(20)));
    ed.set_mask(t(20), R, X);
    ed.set_mask(t(40), R | W | X, NONE);
    ed.set_global_mask(R | X);
    ed.set_flags(CtxFlags::UNDETACHABLE);
    let bytes = encode(&ed);

    let ctx = SecCtx::parse(&bytes).unwrap();
    let ed2 = SecCtxEditor::from_ctx(&ctx);
    assert_eq!(ed2.generation(), ed.generation());
    assert_eq!(ed2.generation(), 11);
    assert_eq!(ed2.flags(), CtxFlags::UNDETACHABLE);
    assert_eq!(ed2.global_mask(), R | X);
    assert_eq!(ed2.len(), 7);
    assert!(!ed2.is_empty());
    assert_eq!(
        ed2.masks().collect::<Vec<_>>(),
        ed.masks().collect::<Vec<_>>()
    );
    // Same records, per target in the same order.
    let per_target = |e: &SecCtxEditor| {
        let mut m: BTreeMap<ObjID, Vec<RecordId>> = BTreeMap::new();
        for (target, id, rec) in e.records() {
            assert_eq!(rec.unwrap().target(), target);
            m.entry(target).or_default().push(id);
        }
        m
    };
    assert_eq!(per_target(&ed2), per_target(&ed));

    // Byte-identical round trip, twice.
    let again = encode(&ed2);
    assert_eq!(again, bytes);
    let third = encode(&SecCtxEditor::from_ctx(&SecCtx::parse(&again).unwrap()));
    assert_eq!(third, bytes);

    // Editing the loaded context continues from its generation.
    let mut ed3 = SecCtxEditor::from_ctx(&ctx);
    ed3.remove_target(t(30));
    assert_eq!(ed3.generation(), 12);
    let bytes3 = encode(&ed3);
    let ctx3 = SecCtx::parse(&bytes3).unwrap();
    assert_eq!(ctx3.generation(), 12);
    assert_eq!(ctx3.entry_count(), 5);
    assert_eq!(ctx3.entries_for(t(30)).count(), 0);

    // An empty editor round-trips too.
    let empty = encode(&SecCtxEditor::new());
    assert_eq!(empty.len(), HEADER_LEN);
    assert_eq!(
        encode(&SecCtxEditor::from_ctx(&SecCtx::parse(&empty).unwrap())),
        empty
    );
    assert_eq!(SecCtxEditor::default().generation(), 0);
    assert!(SecCtxEditor::default().is_empty());
}

#[test]
fn entries_for_returns_exactly_the_records_of_a_target_in_insertion_order() {
    let rs = Records::new();
    let order = [30u128, 10, 20, 10, 30, 10, 5, 20, u128::MAX, 0];
    let mut ed = SecCtxEditor::new();
    let mut expected: BTreeMap<u128, Vec<Vec<u8>>> = BTreeMap::new();
    for (i, &target) in order.iter().enumerate() {
        let c = fake_cap(t(target), i as u64, rs.sig);
        ed.add_cap(&c);
        expected
            .entry(target)
            .or_default()
            .push(c.encode().to_vec());
    }
    let d = rs.del(t(20));
    ed.add_del(&d);
    expected.get_mut(&20).unwrap().push(d.encode().to_vec());
    let bytes = encode(&ed);
    let ctx = SecCtx::parse(&bytes).unwrap();
    assert_eq!(ctx.entry_count(), order.len() + 1);

    for (&target, want) in &expected {
        let got: Vec<Vec<u8>> = ctx
            .entries_for(t(target))
            .map(|e| e.bytes().to_vec())
            .collect();
        assert_eq!(&got, want, "target {target}");
        for e in ctx.entries_for(t(target)) {
            assert_eq!(e.target, t(target));
            let rec = e.record().unwrap();
            assert_eq!(rec.target(), t(target));
            assert_eq!(rec.kind(), e.kind);
        }
    }
    for absent in [1u128, 4, 6, 11, 19, 21, 29, 31, u128::MAX - 1] {
        assert_eq!(ctx.entries_for(t(absent)).count(), 0, "target {absent}");
    }
    // The whole table is sorted, with index matching position.
    let all: Vec<_> = ctx.entries().collect();
    assert!(all.windows(2).all(|w| w[0].target <= w[1].target));
    assert!(all.iter().enumerate().all(|(i, e)| e.index == i));
    let kinds: Vec<RecordKind> = ctx.entries_for(t(20)).map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        vec![RecordKind::Cap, RecordKind::Cap, RecordKind::Del]
    );
}

#[test]
fn mask_lookup_hits_and_misses() {
    let mut ed = SecCtxEditor::new();
    ed.set_mask(t(50), R, W);
    ed.set_mask(t(0), NONE, NONE);
    ed.set_mask(t(u128::MAX), R | W | X, R | W | X);
    ed.set_mask(t(7), X, R);
    ed.set_mask(t(50), R | X, NONE); // overwrite
    let bytes = encode(&ed);
    let ctx = SecCtx::parse(&bytes).unwrap();
    assert_eq!(ctx.mask_count(), 4);
    let m = |target: u128, permmask, ovrmask| Mask {
        target: t(target),
        permmask,
        ovrmask,
    };
    assert_eq!(ctx.mask(t(50)), Some(m(50, R | X, NONE)));
    assert_eq!(ctx.mask(t(0)), Some(m(0, NONE, NONE)));
    assert_eq!(
        ctx.mask(t(u128::MAX)),
        Some(m(u128::MAX, R | W | X, R | W | X))
    );
    assert_eq!(ctx.mask(t(7)), Some(m(7, X, R)));
    for miss in [1u128, 6, 8, 49, 51, u128::MAX - 1] {
        assert_eq!(ctx.mask(t(miss)), None, "target {miss}");
    }
    let all: Vec<Mask> = ctx.masks().collect();
    assert_eq!(
        all,
        vec![
            m(0, NONE, NONE),
            m(7, X, R),
            m(50, R | X, NONE),
            m(u128::MAX, R | W | X, R | W | X)
        ]
    );
    assert_eq!(
        SecCtx::parse(&encode(&SecCtxEditor::new()))
            .unwrap()
            .mask(t(0)),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// Model-based property test: random edits against a reference model.

/// Targets the property tests draw from (with duplicates, extremes and neighbours).
const TARGETS: [u128; 12] = [
    0,
    1,
    2,
    0xA1,
    0xA2,
    1 << 64,
    (1 << 64) + 1,
    1 << 127,
    0x1234_5678_9abc_def0_1122_3344_5566_7788,
    0xffff_0000,
    u128::MAX - 1,
    u128::MAX,
];

#[derive(Clone, Debug)]
enum Op {
    AddCap { t: usize, prots: u16, expires: u64 },
    AddDel { t: usize },
    Remove { t: usize, nth: usize },
    RemoveTarget { t: usize },
    SetMask { t: usize, perm: u16, ovr: u16 },
    RemoveMask { t: usize },
    SetGlobal(u16),
    SetFlags(bool),
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let ti = 0..TARGETS.len();
    prop_oneof![
        6 => (ti.clone(), 0u16..8, 0u64..4).prop_map(|(t, prots, expires)| Op::AddCap { t, prots, expires }),
        1 => ti.clone().prop_map(|t| Op::AddDel { t }),
        2 => (ti.clone(), any::<usize>()).prop_map(|(t, nth)| Op::Remove { t, nth }),
        1 => ti.clone().prop_map(|t| Op::RemoveTarget { t }),
        2 => (ti.clone(), 0u16..8, 0u16..8).prop_map(|(t, perm, ovr)| Op::SetMask { t, perm, ovr }),
        1 => ti.prop_map(|t| Op::RemoveMask { t }),
        1 => (0u16..8).prop_map(Op::SetGlobal),
        1 => any::<bool>().prop_map(Op::SetFlags),
    ]
}

fn prots(bits: u16) -> Protections {
    Protections::from_raw(bits).unwrap()
}

#[derive(Default)]
struct Model {
    /// Insertion order: (target, kind, bytes).
    entries: Vec<(u128, RecordKind, Vec<u8>)>,
    masks: BTreeMap<u128, (Protections, Protections)>,
    global: Option<Protections>,
    flags: CtxFlags,
    generation: u64,
}

#[test]
fn random_edits_match_a_reference_model() {
    let rs = Records::new();
    let dels: Vec<Del> = TARGETS.iter().map(|&x| rs.del(t(x))).collect();
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&proptest::collection::vec(op_strategy(), 0..80), |ops| {
            let mut ed = SecCtxEditor::new();
            let mut m = Model::default();
            for op in &ops {
                let before = ed.generation();
                let changed = match *op {
                    Op::AddCap {
                        t: ti,
                        prots: p,
                        expires,
                    } => {
                        let c = Cap::from_parts(
                            grant(t(TARGETS[ti]), C, prots(p), Gate::WHOLE, expires),
                            rs.sig,
                        );
                        ed.add_cap(&c);
                        m.entries
                            .push((TARGETS[ti], RecordKind::Cap, c.encode().to_vec()));
                        true
                    }
                    Op::AddDel { t: ti } => {
                        ed.add_del(&dels[ti]);
                        m.entries
                            .push((TARGETS[ti], RecordKind::Del, dels[ti].encode().to_vec()));
                        true
                    }
                    Op::Remove { t: ti, nth } => {
                        let target = TARGETS[ti];
                        let under: Vec<&Vec<u8>> = m
                            .entries
                            .iter()
                            .filter(|e| e.0 == target)
                            .map(|e| &e.2)
                            .collect();
                        let id = if under.is_empty() {
                            // An id that is present under another target, or nowhere.
                            m.entries
                                .get(nth % m.entries.len().max(1))
                                .map(|e| RecordId::of(&e.2))
                                .unwrap_or(RecordId([7; 32]))
                        } else {
                            RecordId::of(under[nth % under.len()])
                        };
                        let before_len = m.entries.len();
                        m.entries
                            .retain(|e| !(e.0 == target && RecordId::of(&e.2) == id));
                        let n = before_len - m.entries.len();
                        prop_assert_eq!(ed.remove(t(target), &id), n);
                        n > 0
                    }
                    Op::RemoveTarget { t: ti } => {
                        let before_len = m.entries.len();
                        m.entries.retain(|e| e.0 != TARGETS[ti]);
                        let n = before_len - m.entries.len();
                        prop_assert_eq!(ed.remove_target(t(TARGETS[ti])), n);
                        n > 0
                    }
                    Op::SetMask { t: ti, perm, ovr } => {
                        ed.set_mask(t(TARGETS[ti]), prots(perm), prots(ovr));
                        m.masks.insert(TARGETS[ti], (prots(perm), prots(ovr)));
                        true
                    }
                    Op::RemoveMask { t: ti } => {
                        let had = m.masks.remove(&TARGETS[ti]).is_some();
                        prop_assert_eq!(ed.remove_mask(t(TARGETS[ti])), had);
                        had
                    }
                    Op::SetGlobal(g) => {
                        ed.set_global_mask(prots(g));
                        m.global = Some(prots(g));
                        true
                    }
                    Op::SetFlags(f) => {
                        let flags = if f {
                            CtxFlags::UNDETACHABLE
                        } else {
                            CtxFlags::empty()
                        };
                        ed.set_flags(flags);
                        m.flags = flags;
                        true
                    }
                };
                if changed {
                    m.generation += 1;
                }
                prop_assert_eq!(ed.generation(), before + u64::from(changed), "op {:?}", op);
            }
            prop_assert_eq!(ed.generation(), m.generation);
            prop_assert_eq!(ed.len(), m.entries.len());

            let bytes = ed.encode().unwrap();
            let expected_len = HEADER_LEN
                + m.entries.len() * ENTRY_LEN
                + m.masks.len() * MASK_LEN
                + m.entries.iter().map(|e| e.2.len()).sum::<usize>();
            prop_assert_eq!(bytes.len(), expected_len);
            let ctx = SecCtx::parse(&bytes).unwrap();
            prop_assert_eq!(ctx.generation(), m.generation);
            prop_assert_eq!(ctx.flags(), m.flags);
            prop_assert_eq!(ctx.global_mask(), m.global.unwrap_or(Protections::all()));
            prop_assert_eq!(ctx.entry_count(), m.entries.len());
            prop_assert_eq!(ctx.mask_count(), m.masks.len());

            // Reference lookups, for every target and its neighbours.
            let mut by_target: BTreeMap<u128, Vec<(RecordKind, &[u8])>> = BTreeMap::new();
            // In the order the editor writes them.
            let mut written: Vec<(u128, RecordKind, &[u8])> = m
                .entries
                .iter()
                .map(|(t, k, b)| (*t, *k, b.as_slice()))
                .collect();
            writer_order(&mut written);
            for (target, kind, b) in written {
                by_target.entry(target).or_default().push((kind, b));
            }
            let mut probes: BTreeSet<u128> = BTreeSet::new();
            for &x in &TARGETS {
                probes.extend([x, x.wrapping_add(1), x.wrapping_sub(1)]);
            }
            for &probe in &probes {
                let got: Vec<(RecordKind, &[u8])> = ctx
                    .entries_for(t(probe))
                    .map(|e| (e.kind, e.bytes()))
                    .collect();
                let want = by_target.get(&probe).cloned().unwrap_or_default();
                prop_assert_eq!(got, want, "entries for {:#x}", probe);
                let mask = ctx.mask(t(probe)).map(|x| (x.permmask, x.ovrmask));
                prop_assert_eq!(mask, m.masks.get(&probe).copied(), "mask for {:#x}", probe);
            }
            // Full iteration: sorted by target, stable.
            let all: Vec<(u128, RecordKind, &[u8])> = ctx
                .entries()
                .map(|e| (e.target.raw(), e.kind, e.bytes()))
                .collect();
            let want: Vec<(u128, RecordKind, &[u8])> = by_target
                .iter()
                .flat_map(|(&tt, v)| v.iter().map(move |&(k, b)| (tt, k, b)))
                .collect();
            prop_assert_eq!(all, want);
            let masks: Vec<(u128, Protections, Protections)> = ctx
                .masks()
                .map(|x| (x.target.raw(), x.permmask, x.ovrmask))
                .collect();
            let want: Vec<(u128, Protections, Protections)> =
                m.masks.iter().map(|(&k, &(p, o))| (k, p, o)).collect();
            prop_assert_eq!(masks, want);

            // And the round trip through the reader is byte-identical.
            prop_assert_eq!(SecCtxEditor::from_ctx(&ctx).encode().unwrap(), bytes);
            Ok(())
        })
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Robustness: corrupted contexts never panic the reader or the rule.

struct Robust {
    bases: Vec<Vec<u8>>,
    auth: TestAuth,
}

fn robust_setup() -> Robust {
    let ka = key(SigningScheme::Ed25519, 300);
    let kb = key(SigningScheme::EcdsaP256, 301);
    let kp = key(SigningScheme::Ed25519, 302);
    let (a, b) = (t(0xA1), t(0xA2));
    let auth = TestAuth::new()
        .with_key(a, &ka)
        .with_key(b, &kb)
        .with_key(P, &kp)
        .with_memo();

    let mut small = SecCtxEditor::new();
    small.add_cap(&cap(a, C, R, &ka));
    small.add_cap(&mint(
        grant(a, C, R | W | X, gate(0x1000, 0x100, 0x10), 0),
        &ka,
    ));
    small.add_cap(&cap(b, C, R | W, &kb));
    small.add_del(&Del::from_cap(&cap(b, P, R | W, &kb), DelGrant::new(C, R), &kp).unwrap());
    small.set_mask(a, R | X, W);
    small.set_mask(t(0xA3), R, NONE);
    small.set_global_mask(R | X);

    let mut masks_only = SecCtxEditor::new();
    masks_only.set_mask(a, R, R);
    masks_only.set_flags(CtxFlags::UNDETACHABLE);

    let sig = template_sig();
    let mut wide = SecCtxEditor::new();
    for i in 0..20u64 {
        wide.add_cap(&fake_cap(t(u128::from(i % 7) * 0x1111), i, sig));
    }
    wide.add_cap(&cap(a, C, R, &ka));

    Robust {
        bases: vec![
            encode(&SecCtxEditor::new()),
            encode(&small),
            encode(&masks_only),
            encode(&wide),
        ],
        auth,
    }
}

/// Parses `bytes`; if accepted, exercises every accessor, the rule and the editor on it, and
/// checks their results are consistent. Returns whether the bytes were accepted.
fn exercise(bytes: &[u8], auth: &TestAuth) -> bool {
    let Ok(ctx) = SecCtx::parse(bytes) else {
        return false;
    };
    let all: Vec<_> = ctx.entries().collect();
    assert_eq!(all.len(), ctx.entry_count());
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.index, i);
        if i > 0 {
            assert!(all[i - 1].target <= e.target, "accepted an unsorted table");
        }
        if let Ok(rec) = e.record() {
            let _ = (
                rec.id(),
                rec.target(),
                rec.holder(),
                rec.gate(),
                rec.expires(),
            );
        }
    }
    let targets: BTreeSet<u128> = all.iter().map(|e| e.target.raw()).collect();
    let masks: Vec<Mask> = ctx.masks().collect();
    assert_eq!(masks.len(), ctx.mask_count());
    for m in &masks {
        assert_eq!(ctx.mask(m.target), Some(*m));
    }
    let mut probes = targets.clone();
    for &x in &targets {
        probes.extend([x.wrapping_add(1), x.wrapping_sub(1)]);
    }
    probes.extend(masks.iter().map(|m| m.target.raw()));
    probes.extend([0, 0xA1, 0xA2, u128::MAX]);
    for &p in &probes {
        let got: Vec<usize> = ctx.entries_for(t(p)).map(|e| e.index).collect();
        let want: Vec<usize> = all
            .iter()
            .filter(|e| e.target.raw() == p)
            .map(|e| e.index)
            .collect();
        assert_eq!(got, want, "entries_for({p:#x})");
        for access in [
            Access::read(0x1000),
            Access::write(0),
            Access::exec(0x5000),
            Access::enter(0x1010),
        ] {
            let info = evaluate(C, &ctx, t(p), R, auth, access, NOW);
            assert_eq!(info.ctx, C);
            assert!(
                (info.provide & info.restrict).is_empty(),
                "provide {info:?} not masked"
            );
        }
    }
    // Whatever the reader accepts, the editor can load and rewrite into an equivalent context.
    let ed = SecCtxEditor::from_ctx(&ctx);
    let re = ed.encode().expect("re-encode");
    let ctx2 = SecCtx::parse(&re).expect("the editor wrote an invalid context");
    assert_eq!(ctx2.generation(), ctx.generation());
    assert_eq!(ctx2.flags(), ctx.flags());
    assert_eq!(ctx2.global_mask(), ctx.global_mask());
    let again: Vec<_> = ctx2
        .entries()
        .map(|e| (e.target, e.kind, e.bytes()))
        .collect();
    // The same entries, in the order the editor writes them.
    let mut orig: Vec<_> = all.iter().map(|e| (e.target, e.kind, e.bytes())).collect();
    writer_order(&mut orig);
    assert_eq!(again, orig);
    assert_eq!(ctx2.masks().collect::<Vec<_>>(), masks);
    true
}

#[test]
fn every_single_byte_corruption_is_handled() {
    let r = robust_setup();
    let (mut accepted, mut rejected) = (0usize, 0usize);
    // Every base but the wide one (the property test below covers that one).
    for base in &r.bases[..3] {
        assert!(exercise(base, &r.auth), "base context must parse");
        for i in 0..base.len() {
            for v in [0u8, 0xff, base[i] ^ 1, base[i] ^ 0x80] {
                if v == base[i] {
                    continue;
                }
                let mut b = base.clone();
                b[i] = v;
                if exercise(&b, &r.auth) {
                    accepted += 1;
                } else {
                    rejected += 1;
                }
            }
        }
        for len in 0..base.len() {
            assert!(
                !exercise(&base[..len], &r.auth),
                "truncation to {len} accepted"
            );
        }
    }
    eprintln!("single-byte corruptions: {accepted} accepted, {rejected} rejected");
    // Corruption in record bytes is accepted by the reader (records are decoded lazily),
    // corruption of the header and tables mostly is not.
    assert!(accepted > 1_000, "accepted {accepted}");
    assert!(rejected > 300, "rejected {rejected}");
}

#[derive(Clone, Debug)]
enum Mutation {
    Byte(usize, u8),
    HeaderField(usize, u32),
    EntryField(usize, usize, u32),
    Truncate(usize),
    Append(Vec<u8>),
}

const HEADER_U32S: [usize; 7] = [
    OFF_ENTRY_COUNT,
    OFF_MASK_COUNT,
    OFF_ENTRIES,
    OFF_MASKS,
    OFF_HEAP,
    OFF_HEAP_LEN,
    OFF_RESERVED_B,
];
const HEADER_U16S: [usize; 5] = [
    OFF_VERSION,
    OFF_FLAGS,
    OFF_GLOBAL,
    OFF_RESERVED_A,
    OFF_GENERATION,
];

fn value32() -> impl Strategy<Value = u32> {
    prop_oneof![
        any::<u32>(),
        0u32..300,
        Just(u32::MAX),
        Just(u32::MAX - 27),
        (0u32..64).prop_map(|s| 1u32.wrapping_shl(s)),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => (any::<usize>(), any::<u8>()).prop_map(|(i, v)| Mutation::Byte(i, v)),
        3 => (0..HEADER_U32S.len() + HEADER_U16S.len(), value32()).prop_map(|(f, v)| Mutation::HeaderField(f, v)),
        3 => (0usize..24, prop_oneof![Just(E_TARGET), Just(E_KIND), Just(E_OFFSET), Just(E_LEN)], value32())
            .prop_map(|(i, f, v)| Mutation::EntryField(i, f, v)),
        1 => any::<usize>().prop_map(Mutation::Truncate),
        1 => proptest::collection::vec(any::<u8>(), 0..64).prop_map(Mutation::Append),
    ]
}

fn apply(b: &mut Vec<u8>, m: &Mutation) {
    match m {
        Mutation::Byte(i, v) => {
            if !b.is_empty() {
                let i = i % b.len();
                b[i] = *v;
            }
        }
        Mutation::HeaderField(f, v) => {
            if b.len() >= HEADER_LEN {
                if let Some(&at) = HEADER_U32S.get(*f) {
                    put_u32(b, at, *v);
                } else {
                    put_u16(b, HEADER_U16S[f - HEADER_U32S.len()], *v as u16);
                }
            }
        }
        Mutation::EntryField(i, f, v) => {
            let at = entry_field(*i, *f);
            if at + 4 <= b.len() {
                put_u32(b, at, *v);
            }
        }
        Mutation::Truncate(n) => {
            let n = n % (b.len() + 1);
            b.truncate(n);
        }
        Mutation::Append(extra) => b.extend_from_slice(extra),
    }
}

#[test]
fn random_corruption_never_panics_and_accepted_contexts_are_consistent() {
    let r = robust_setup();
    let mut runner = TestRunner::new(Config {
        cases: 2048,
        failure_persistence: None,
        ..Config::default()
    });
    let accepted = std::cell::Cell::new(0usize);
    runner
        .run(
            &(
                0..r.bases.len(),
                proptest::collection::vec(mutation(), 1..6),
            ),
            |(which, muts)| {
                let mut b = r.bases[which].clone();
                for m in &muts {
                    apply(&mut b, m);
                }
                if exercise(&b, &r.auth) {
                    accepted.set(accepted.get() + 1);
                }
                Ok(())
            },
        )
        .unwrap();
    eprintln!("random corruptions: {} of 2048 accepted", accepted.get());
    assert!(
        accepted.get() > 20,
        "only {} mutated contexts parsed",
        accepted.get()
    );
}

#[test]
fn arbitrary_bytes_never_panic() {
    let auth = robust_setup().auth;
    let mut runner = TestRunner::new(Config {
        cases: 1024,
        failure_persistence: None,
        ..Config::default()
    });
    // A valid header followed by random tables and heap, with random counts and offsets.
    let strat = (
        proptest::collection::vec(any::<u8>(), 0..400),
        0u32..8,
        0u32..8,
        0u32..64,
        0u32..64,
        0u32..64,
        0u32..400,
    );
    runner
        .run(&strat, |(body, n, m, eo, mo, ho, hl)| {
            let mut b = encode(&SecCtxEditor::new());
            put_u32(&mut b, OFF_ENTRY_COUNT, n);
            put_u32(&mut b, OFF_MASK_COUNT, m);
            put_u32(&mut b, OFF_ENTRIES, HEADER_LEN as u32 + eo);
            put_u32(&mut b, OFF_MASKS, HEADER_LEN as u32 + mo);
            put_u32(&mut b, OFF_HEAP, HEADER_LEN as u32 + ho);
            put_u32(&mut b, OFF_HEAP_LEN, hl);
            b.extend_from_slice(&body);
            exercise(&b, &auth);
            // And raw garbage.
            exercise(&body, &auth);
            Ok(())
        })
        .unwrap();
}

#[test]
fn peek_cap_reads_what_the_record_says_and_nothing_from_bytes_that_are_not_a_capability() {
    let k = key(SigningScheme::Ed25519, 41);
    let t = ObjID::new(0x77);
    let mut g = twizzler_capsec::CapGrant::new(t, C, Protections::READ | Protections::WRITE);
    g.gate = gate(0x3000, 0x2000, 8);
    let c = mint(g, &k);
    let d = Del::from_cap(
        &cap(t, P, Protections::READ, &k),
        DelGrant::new(C, Protections::READ),
        &key(SigningScheme::Ed25519, 42),
    )
    .unwrap();
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&c);
    ed.add_del(&d);
    let mut bytes = encode(&ed);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let entries: Vec<_> = ctx.entries_for(t).collect();
    assert_eq!(entries.len(), 2);
    let (cap_entry, del_entry) = if entries[0].kind == RecordKind::Cap {
        (entries[0], entries[1])
    } else {
        (entries[1], entries[0])
    };
    let (target, holder, peeked) = cap_entry.peek_cap().expect("a capability's body peeks");
    assert_eq!((target, holder), (t, C));
    assert_eq!(
        peeked,
        twizzler_capsec::Grant::of(&cap_entry.record().unwrap())
    );
    assert_eq!(
        del_entry.peek_cap(),
        None,
        "a delegation does not peek as a capability"
    );
    // A capability whose magic is damaged does not peek (its record says why).
    let at = cap_entry.bytes().as_ptr() as usize - bytes.as_ptr() as usize;
    assert_eq!(&bytes[at..at + 4], b"TCAP");
    bytes[at] ^= 0xff;
    let ctx = SecCtx::parse(&bytes).unwrap();
    let e = ctx
        .entries_for(t)
        .find(|e| e.kind == RecordKind::Cap)
        .unwrap();
    assert_eq!(e.peek_cap(), None);
    assert!(e.record().is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

    /// `EntryIter::skip_caps` passes over exactly the leading entries of the run that peek as
    /// capabilities and that the predicate skips, and `next` then returns the entry after
    /// them: the same as peeking each entry in turn.
    #[test]
    fn skip_caps_is_peek_in_turn(
        records in prop::collection::vec((0u8..3, 0u64..8, 1u64..4, any::<bool>()), 0..24),
        keep_page in 0u64..8,
    ) {
        let k = key(SigningScheme::Ed25519, 43);
        let mut ed = SecCtxEditor::new();
        for (target, page, pages, del) in &records {
            let t = ObjID::new(0x70 + u128::from(*target));
            if *del {
                let d = Del::from_cap(
                    &cap(t, P, Protections::READ, &k),
                    DelGrant::new(C, Protections::READ),
                    &key(SigningScheme::Ed25519, 42),
                )
                .unwrap();
                ed.add_del(&d);
            } else {
                let mut g = twizzler_capsec::CapGrant::new(t, C, Protections::READ);
                g.gate = gate((page + 1) * 0x1000, pages * 0x1000, 1);
                ed.add_cap(&mint(g, &k));
            }
        }
        let bytes = encode(&ed);
        let ctx = SecCtx::parse(&bytes).unwrap();
        // Skip a capability unless its gate starts at `keep_page`.
        let skip = |_: ObjID, _: ObjID, g: &twizzler_capsec::Grant| g.gate.offset() != (keep_page + 1) * 0x1000;
        for t in 0..3u128 {
            let t = ObjID::new(0x70 + t);
            let all: Vec<_> = ctx.entries_for(t).map(|e| e.index).collect();
            let want = ctx
                .entries_for(t)
                .take_while(|e| e.peek_cap().is_some_and(|(a, b, g)| skip(a, b, &g)))
                .count();
            let mut it = ctx.entries_for(t);
            prop_assert_eq!(it.skip_caps(skip), want);
            let rest: Vec<_> = it.map(|e| e.index).collect();
            prop_assert_eq!(&rest[..], &all[want..]);
        }
    }
}

/// The editor writes a target's capabilities by the offset of their gate (ties in insertion
/// order, an ownership record among them by its own gate), then its other records in
/// insertion order; targets in order. Without ties, what it writes depends only on the
/// records, not on the order they were added in.
#[test]
fn the_editor_lists_a_targets_capabilities_by_gate_then_its_other_records() {
    let k = key(SigningScheme::Ed25519, 51);
    let (t, u) = (ObjID::new(0x77), ObjID::new(0x66));
    let gated = |offset: u64, prots: Protections| {
        let mut g = twizzler_capsec::CapGrant::new(t, C, prots);
        g.gate = gate(offset, 4096, 1);
        mint(g, &k)
    };
    let whole = cap(t, C, R, &k);
    let (page5, page1, page1_again) = (gated(5 * 4096, R), gated(4096, R), gated(4096, R | W));
    let own = Cap::mint_ownership(
        twizzler_capsec::OwnershipGrant::new(t, C, twizzler_capsec::OwnRights::PLUS),
        &k,
    )
    .unwrap();
    let del = |n: u64| {
        Del::from_cap(
            &cap(t, P, R, &k),
            DelGrant::new(C, R),
            &key(SigningScheme::Ed25519, 60 + n),
        )
        .unwrap()
    };
    let (d1, d2) = (del(1), del(2));
    let other = cap(u, C, R, &k);
    let mut ed = SecCtxEditor::new();
    ed.add_del(&d1);
    ed.add_cap(&page5);
    ed.add_cap(&page1);
    ed.add_cap(&own);
    ed.add_del(&d2);
    ed.add_cap(&whole);
    ed.add_cap(&page1_again);
    ed.add_cap(&other);
    let bytes = encode(&ed);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let listed: Vec<Vec<u8>> = ctx.entries().map(|e| e.bytes().to_vec()).collect();
    // The ownership record's gate is the whole object's, as `whole`'s: it ties, and keeps
    // its place (added before `whole`).
    let want: Vec<Vec<u8>> = vec![
        other.encode().to_vec(),
        own.encode().to_vec(),
        whole.encode().to_vec(),
        page1.encode().to_vec(),
        page1_again.encode().to_vec(),
        page5.encode().to_vec(),
        d1.encode().to_vec(),
        d2.encode().to_vec(),
    ];
    assert_eq!(listed, want);
    // Loaded and written again: the same bytes.
    assert!(encode(&SecCtxEditor::from_ctx(&ctx)) == bytes);

    // Without ties (one record per gate offset), the order of the adds does not matter.
    let distinct = [&page5, &page1, &whole, &other];
    let written = |order: &[usize]| {
        let mut ed = SecCtxEditor::new();
        for &i in order {
            ed.add_cap(distinct[i]);
        }
        ed.add_del(&d1);
        encode(&ed)
    };
    let first = written(&[0, 1, 2, 3]);
    for order in [[3, 2, 1, 0], [1, 3, 0, 2], [2, 0, 3, 1]] {
        assert!(written(&order) == first, "{order:?}");
    }
}
