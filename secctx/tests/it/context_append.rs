//! Adding records to a stored context in place (`context_append`): what the kernel's reader
//! then sees must be exactly what a full edit would have written.

use std::collections::BTreeMap;

use rand_chacha::ChaCha20Rng;
use rand_chacha::rand_core::SeedableRng;
use secctx::context_append::MAX_OVERFLOW;
use secctx::{MemStore, ObjMeta, Object, ObjectStore, context};
use twizzler_capsec::ctx::{CTX_VERSION, CTX_VERSION_OVERFLOW};
use twizzler_capsec::{
    Cap, CapGrant, Expiry, ObjID, Protections, SecCtx, SecCtxEditor, SigningKey, SigningScheme,
};

const CTX: ObjID = ObjID::new(0xc0);

fn key() -> SigningKey {
    SigningKey::generate(SigningScheme::Ed25519, &mut ChaCha20Rng::seed_from_u64(9))
}

fn cap(key: &SigningKey, target: u128, n: u64) -> Cap {
    let mut g = CapGrant::new(ObjID::new(target), CTX, Protections::READ);
    g.expires = Expiry::from_raw(1_900_000_000_000_000_000 + n);
    Cap::mint(g, key).expect("mint")
}

/// Every target's records, as the reader finds them (by binary search).
fn by_target(bytes: &[u8], targets: &[u128]) -> BTreeMap<u128, Vec<Vec<u8>>> {
    let ctx = SecCtx::parse(bytes).expect("the kernel's reader accepts it");
    targets
        .iter()
        .map(|&t| {
            let mut recs: Vec<Vec<u8>> = ctx
                .entries_for(ObjID::new(t))
                .map(|e| e.bytes().to_vec())
                .collect();
            recs.sort();
            (t, recs)
        })
        .collect()
}

fn version(bytes: &[u8]) -> u16 {
    u16::from_le_bytes([bytes[4], bytes[5]])
}

#[test]
fn records_added_in_place_read_as_a_full_edit_would_write_them() {
    let key = key();
    let store = MemStore::new();
    context::create(&store, CTX, None).expect("create");
    // The reference: the same records through the editor.
    let mut reference = SecCtxEditor::new();
    let mut targets = Vec::new();
    let mut generation = 0;
    // Enough adds to fill the overflow table and go past it (a full edit merges it).
    for n in 0..(MAX_OVERFLOW as u64 + 40) {
        // Targets in every order, with repeats.
        let target = 0x100 + u128::from((n * 37) % 61);
        let c = cap(&key, target, n);
        let g = context::add_cap(&store, CTX, &c).expect("add");
        assert_eq!(g, generation + 1, "every add bumps the generation once");
        generation = g;
        reference.add_cap(&c);
        targets.push(target);
        let bytes = store.get(CTX).expect("get").data;
        if n == 0 {
            assert_eq!(version(&bytes), CTX_VERSION_OVERFLOW, "added in place");
        }
        if n == u64::from(MAX_OVERFLOW) {
            assert_eq!(version(&bytes), CTX_VERSION, "a full overflow was merged");
        }
        let ctx = SecCtx::parse(&bytes).expect("parse");
        assert_eq!(ctx.entry_count(), n as usize + 1);
        assert_eq!(ctx.generation(), generation);
    }
    targets.sort_unstable();
    targets.dedup();
    let stored = store.get(CTX).expect("get").data;
    let want = reference.encode().expect("encode");
    assert_eq!(by_target(&stored, &targets), by_target(&want, &targets));
    // And loading it and encoding it densely gives the reference byte for byte (records of
    // one target keep the order they were added in).
    let loaded = SecCtxEditor::from_ctx(&SecCtx::parse(&stored).expect("parse"));
    let mut dense = loaded.encode().expect("encode");
    let mut want = want;
    // The generations differ (the reference was never saved); everything else is equal.
    dense[8..16].fill(0);
    want[8..16].fill(0);
    assert_eq!(dense, want);
}

#[test]
fn a_context_not_laid_out_for_it_is_edited_in_full() {
    let key = key();
    let store = MemStore::new();
    // A dense context (another writer's): no room, so the add edits it in full.
    let mut ed = SecCtxEditor::new();
    ed.add_cap(&cap(&key, 0x100, 0));
    store
        .create(&Object {
            id: CTX,
            meta: ObjMeta::plain(),
            data: ed.encode().expect("encode"),
        })
        .expect("create");
    context::add_cap(&store, CTX, &cap(&key, 0x101, 1)).expect("add");
    let bytes = store.get(CTX).expect("get").data;
    assert_eq!(version(&bytes), CTX_VERSION);
    assert_eq!(SecCtx::parse(&bytes).expect("parse").entry_count(), 2);
    // Now it has room: the next add is in place.
    context::add_cap(&store, CTX, &cap(&key, 0x102, 2)).expect("add");
    assert_eq!(
        version(&store.get(CTX).expect("get").data),
        CTX_VERSION_OVERFLOW
    );
}

#[test]
fn a_damaged_overflow_table_is_not_appended_to() {
    let key = key();
    let store = MemStore::new();
    context::create(&store, CTX, None).expect("create");
    context::add_cap(&store, CTX, &cap(&key, 0x200, 0)).expect("add");
    context::add_cap(&store, CTX, &cap(&key, 0x100, 1)).expect("add");
    // Swap the two overflow rows: unsorted, which the reader refuses.
    store
        .update(CTX, |o| {
            let at = 48; // no entries or masks: the overflow table follows the header
            let (a, b) = o.data[at..at + 56].split_at_mut(28);
            a.swap_with_slice(b);
            Ok::<(), secctx::StoreError>(())
        })
        .expect("damage");
    assert!(SecCtx::parse(&store.get(CTX).expect("get").data).is_err());
    // The add does not write into it: it takes the full edit, which reports the damage.
    let e = context::add_cap(&store, CTX, &cap(&key, 0x300, 2))
        .expect_err("added to a damaged context");
    assert!(
        e.to_string().contains("malformed") || e.to_string().contains("sorted"),
        "{e}"
    );
}

mod hostile {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

        /// Whatever a context's header says (fields overwritten at random), an add never panics;
        /// a context the kernel's reader accepted before still reads after, with the new record
        /// found under its target.
        #[test]
        fn an_add_to_a_tampered_context_never_breaks_a_valid_one(
            n in 0u64..6,
            field in 0usize..12,
            value in any::<u32>(),
        ) {
            let key = key();
            let store = MemStore::new();
            context::create(&store, CTX, None).expect("create");
            for i in 0..n {
                context::add_cap(&store, CTX, &cap(&key, 0x100 + u128::from(i % 3), i)).expect("add");
            }
            // Overwrite one 32-bit header word (offsets 4..48).
            let at = 4 + field * 4;
            store
                .update(CTX, |o| {
                    o.data[at..at + 4].copy_from_slice(&value.to_le_bytes());
                    Ok::<(), secctx::StoreError>(())
                })
                .expect("tamper");
            let before = store.get(CTX).expect("get").data;
            let was_valid = SecCtx::parse(&before).is_ok();
            let c = cap(&key, 0x1ff, 99);
            let added = context::add_cap(&store, CTX, &c);
            let after = store.get(CTX).expect("get").data;
            if was_valid {
                prop_assert!(added.is_ok(), "{:?}", added.err());
                let ctx = SecCtx::parse(&after).expect("a valid context stays valid");
                let found = ctx
                    .entries_for(ObjID::new(0x1ff))
                    .any(|e| e.bytes() == c.encode().as_slice());
                prop_assert!(found);
            }
        }
    }
}
