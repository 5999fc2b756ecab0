//! Format version 2: the overflow table. Lookups search it beside the entry table, and it is
//! checked like the entry table (sorted, known kinds, items inside the heap, inside the bytes).

use crate::fixture::*;
use proptest::prelude::*;
use twizzler_capsec::ctx::{CTX_VERSION_OVERFLOW, ENTRY_LEN, HEADER_LEN};
use twizzler_capsec::{
    Cap, CapGrant, CtxError, Expiry, ObjID, Protections, SecCtx, SecCtxEditor, SigningScheme,
};

const CTX: ObjID = ObjID::new(0xc0);

fn cap_for(target: u16, n: u64) -> Cap {
    let key = key(SigningScheme::Ed25519, 3);
    let first = cap(ObjID::new(1), CTX, Protections::READ, &key);
    let mut g = CapGrant::new(
        ObjID::new(u128::from(target) + 0x100),
        CTX,
        Protections::READ,
    );
    g.expires = Expiry::from_raw(n + 1);
    Cap::from_parts(g, *first.signature())
}

/// A version-2 context: `main` through the editor (laid out with room), then `extra` appended
/// by hand as overflow rows (sorted by target, stably) and items at the heap's end.
fn with_overflow(main: &[Cap], extra: &[Cap]) -> Vec<u8> {
    let mut ed = SecCtxEditor::new();
    for c in main {
        ed.add_cap(c);
    }
    let mut b = ed.encode_for_update(None).expect("encode");
    let heap_len = get_u32(&b, 40) as usize;
    let overflow_at = HEADER_LEN + main.len() * ENTRY_LEN;
    let mut rows: Vec<(u128, u32, u32)> = Vec::new();
    let mut heap_end = heap_len;
    for c in extra {
        let item = c.encode();
        rows.push((c.target().raw(), heap_end as u32, item.len() as u32));
        heap_end += item.len();
        b.extend_from_slice(&item);
    }
    rows.sort_by_key(|r| r.0);
    for (i, (t, off, len)) in rows.iter().enumerate() {
        let at = overflow_at + i * ENTRY_LEN;
        b[at..at + 16].copy_from_slice(&t.to_le_bytes());
        put_u32(&mut b, at + 16, 0);
        put_u32(&mut b, at + 20, *off);
        put_u32(&mut b, at + 24, *len);
    }
    put_u16(&mut b, 4, CTX_VERSION_OVERFLOW);
    put_u32(&mut b, 40, heap_end as u32);
    put_u32(&mut b, 44, extra.len() as u32);
    b
}

fn records_for(bytes: &[u8], target: ObjID) -> Vec<Vec<u8>> {
    let ctx = SecCtx::parse(bytes).expect("parse");
    let mut r: Vec<Vec<u8>> = ctx
        .entries_for(target)
        .map(|e| e.bytes().to_vec())
        .collect();
    r.sort();
    r
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every lookup finds in a version-2 context exactly the records a dense context of all of
    /// them holds, and `entries()` lists them all.
    #[test]
    fn lookups_search_both_tables(
        main in prop::collection::vec(0u16..40, 0..30),
        extra in prop::collection::vec(0u16..40, 0..30),
    ) {
        let main: Vec<Cap> = main.iter().enumerate().map(|(i, &t)| cap_for(t, i as u64)).collect();
        let extra: Vec<Cap> = extra.iter().enumerate().map(|(i, &t)| cap_for(t, 1000 + i as u64)).collect();
        if extra.len() * ENTRY_LEN > 4096 {
            return Ok(());
        }
        let v2 = with_overflow(&main, &extra);
        let mut all = SecCtxEditor::new();
        for c in main.iter().chain(&extra) {
            all.add_cap(c);
        }
        let dense = all.encode().expect("encode");
        for t in 0u16..41 {
            let target = ObjID::new(u128::from(t) + 0x100);
            prop_assert_eq!(records_for(&v2, target), records_for(&dense, target));
        }
        let ctx = SecCtx::parse(&v2).expect("parse");
        prop_assert_eq!(ctx.entry_count(), main.len() + extra.len());
        prop_assert_eq!(ctx.overflow_count(), extra.len());
        prop_assert_eq!(ctx.entries().count(), main.len() + extra.len());
    }
}

#[test]
fn a_damaged_overflow_table_is_refused() {
    let main = [cap_for(1, 0), cap_for(5, 1)];
    let extra = [cap_for(2, 2), cap_for(9, 3)];
    let good = with_overflow(&main, &extra);
    assert!(SecCtx::parse(&good).is_ok());
    let row = |i: usize| HEADER_LEN + (main.len() + i) * ENTRY_LEN;
    let err = |b: &[u8]| SecCtx::parse(b).expect_err("a damaged context parses");

    // Unsorted: the second overflow row's target below the first's.
    let mut b = good.clone();
    b[row(1)..row(1) + 16].copy_from_slice(&0u128.to_le_bytes());
    assert!(
        matches!(err(&b), CtxError::UnsortedEntries { index: 3 }),
        "{:?}",
        err(&b)
    );
    // An unknown kind.
    let mut b = good.clone();
    put_u32(&mut b, row(0) + 16, 7);
    assert!(
        matches!(err(&b), CtxError::BadEntryKind { index: 2, .. }),
        "{:?}",
        err(&b)
    );
    // An item past the heap.
    let mut b = good.clone();
    put_u32(&mut b, row(1) + 20, u32::MAX - 4);
    assert!(
        matches!(err(&b), CtxError::ItemOutOfBounds { index: 3 }),
        "{:?}",
        err(&b)
    );
    // More rows than the bytes hold.
    let mut b = good.clone();
    put_u32(&mut b, 44, u32::MAX);
    assert!(
        matches!(err(&b), CtxError::TableOutOfBounds("overflow table")),
        "{:?}",
        err(&b)
    );
    // Version 1 keeps the word reserved.
    let mut b = good.clone();
    put_u16(&mut b, 4, 1);
    assert!(
        matches!(err(&b), CtxError::NonZeroReserved),
        "{:?}",
        err(&b)
    );
}
