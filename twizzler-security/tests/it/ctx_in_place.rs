//! `SecCtxEditor::encode_for_update`: a layout a page-granular store can change in place. It
//! must read exactly like the dense encoding, and an added record must leave the old heap's
//! bytes where they were.

use crate::fixture::*;
use proptest::prelude::*;
use twizzler_capsec::ctx::HEADER_LEN;
use twizzler_capsec::{ObjID, Protections, SecCtx, SecCtxEditor, SigningScheme};

const CTX: ObjID = ObjID::new(0xc0);

/// An editor with `targets` capabilities (one per target, in this order) and masks on some.
fn editor(targets: &[u16], masked: &[u16]) -> SecCtxEditor {
    let key = key(SigningScheme::Ed25519, 1);
    let first = cap(ObjID::new(1), CTX, Protections::READ, &key);
    let mut ed = SecCtxEditor::new();
    for &t in targets {
        let g = twizzler_capsec::CapGrant::new(
            ObjID::new(u128::from(t) + 0x100),
            CTX,
            Protections::READ,
        );
        ed.add_cap(&twizzler_capsec::Cap::from_parts(g, *first.signature()));
    }
    for &t in masked {
        ed.set_mask(
            ObjID::new(u128::from(t) + 0x100),
            Protections::READ,
            Protections::empty(),
        );
    }
    ed
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// The in-place layout reads as the dense one does: loading it and encoding densely gives
    /// the dense encoding, byte for byte.
    #[test]
    fn reads_like_the_dense_encoding(
        targets in prop::collection::vec(any::<u16>(), 0..40),
        masked in prop::collection::vec(any::<u16>(), 0..5),
        hint in prop::option::of(0u64..20_000),
    ) {
        let ed = editor(&targets, &masked);
        let dense = ed.encode().expect("dense");
        let in_place = ed.encode_for_update(hint).expect("in place");
        let parsed = SecCtx::parse(&in_place).expect("the in-place layout parses");
        prop_assert_eq!(SecCtxEditor::from_ctx(&parsed).encode().expect("re-encode"), dense);
        prop_assert!(parsed.heap_offset().is_multiple_of(4096) || Some(parsed.heap_offset()) == hint);
    }

    /// Adding a record to a loaded in-place context keeps the heap where it was and every
    /// byte of it: only the header, the tables and the heap's new end change.
    #[test]
    fn an_added_record_leaves_the_heap_in_place(
        targets in prop::collection::vec(any::<u16>(), 1..40),
        new_target in any::<u16>(),
    ) {
        let before = editor(&targets, &[]).encode_for_update(None).expect("encode");
        let parsed = SecCtx::parse(&before).expect("parse");
        let heap_at = parsed.heap_offset() as usize;
        let mut ed = SecCtxEditor::from_ctx(&parsed);
        let key = key(SigningScheme::Ed25519, 2);
        let added = cap(ObjID::new(u128::from(new_target) + 0x100), CTX, Protections::WRITE, &key);
        ed.add_cap(&added);
        let after = ed.encode_for_update(Some(heap_at as u64)).expect("encode");
        let reparsed = SecCtx::parse(&after).expect("parse");
        // Room was left for the tables to grow: the heap did not move.
        prop_assert_eq!(reparsed.heap_offset() as usize, heap_at);
        prop_assert_eq!(&after[heap_at..before.len()], &before[heap_at..]);
        prop_assert_eq!(after.len(), before.len() + added.encode().len());
        prop_assert_eq!(reparsed.entry_count(), targets.len() + 1);
        // The room between the tables and the heap is zero.
        let tables_end = HEADER_LEN + reparsed.entry_count() * twizzler_capsec::ctx::ENTRY_LEN;
        prop_assert!(after[tables_end..heap_at].iter().all(|&b| b == 0));
    }
}

/// When the tables outgrow the room, the heap moves past them (with room again), and the
/// context still reads the same.
#[test]
fn tables_that_outgrow_the_room_move_the_heap() {
    let small = editor(&[1, 2, 3], &[])
        .encode_for_update(None)
        .expect("encode");
    let heap_at = SecCtx::parse(&small).expect("parse").heap_offset();
    let tables_end = (HEADER_LEN + 3 * twizzler_capsec::ctx::ENTRY_LEN) as u64;
    assert!(
        heap_at.is_multiple_of(4096) && heap_at - tables_end >= 4096,
        "at least a page of room past 3 entries, on a page boundary: {heap_at}"
    );
    let targets: Vec<u16> = (0..400).collect();
    let big = editor(&targets, &[]);
    let moved = big.encode_for_update(Some(heap_at)).expect("encode");
    let parsed = SecCtx::parse(&moved).expect("parse");
    assert!(parsed.heap_offset() > heap_at && parsed.heap_offset().is_multiple_of(4096));
    assert_eq!(
        SecCtxEditor::from_ctx(&parsed).encode().expect("dense"),
        big.encode().expect("dense")
    );
}
