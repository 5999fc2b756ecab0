//! `SecCtx::reopen` and `SecCtx::peek_generation`: the constant-time paths the kernel's fault
//! path uses after a full validation.

use crate::fixture::*;
use proptest::prelude::*;
use twizzler_capsec::{CapGrant, CtxError, ObjID, SecCtx, SecCtxEditor, SigningScheme};

fn two_caps() -> Vec<u8> {
    let k = key(SigningScheme::Ed25519, 1);
    let mut e = SecCtxEditor::new();
    for t in [0x10u128, 0x20] {
        let cap = twizzler_capsec::Cap::mint(CapGrant::new(ObjID::new(t), ObjID::new(0x99), R), &k)
            .unwrap();
        e.add_cap(&cap);
    }
    e.encode().unwrap()
}

#[test]
fn reopen_accepts_the_validated_bytes_and_reads_the_same() {
    let bytes = two_caps();
    let parsed = SecCtx::parse(&bytes).unwrap();
    let stamp = parsed.validated();
    assert_eq!(stamp.generation(), parsed.generation());
    let reopened = SecCtx::reopen(&bytes, stamp).unwrap();
    assert_eq!(reopened.entry_count(), 2);
    for t in [0x10u128, 0x20] {
        let a: Vec<_> = parsed.entries_for(ObjID::new(t)).collect();
        let b: Vec<_> = reopened.entries_for(ObjID::new(t)).collect();
        assert_eq!(a, b);
    }
    assert_eq!(SecCtx::peek_generation(&bytes), Ok(parsed.generation()));
}

#[test]
fn reopen_refuses_another_generation_or_length() {
    let bytes = two_caps();
    let stamp = SecCtx::parse(&bytes).unwrap().validated();
    let mut bumped = bytes.clone();
    bumped[8] ^= 1; // generation, little-endian at offset 8
    assert_eq!(
        SecCtx::reopen(&bumped, stamp).unwrap_err(),
        CtxError::Changed
    );
    let mut longer = bytes.clone();
    longer.push(0);
    assert_eq!(
        SecCtx::reopen(&longer, stamp).unwrap_err(),
        CtxError::Changed
    );
    assert!(SecCtx::reopen(&bytes[..40], stamp).is_err());
    assert!(SecCtx::peek_generation(&bytes[..15]).is_err());
    let mut bad_magic = bytes.clone();
    bad_magic[0] ^= 0xff;
    assert!(SecCtx::peek_generation(&bad_magic).is_err());
}

proptest! {
    /// Rows changed behind an unchanged generation (a writer breaking its promise) never
    /// make the reader panic or read out of bounds.
    #[test]
    fn reopen_of_corrupted_rows_never_panics(
        flips in proptest::collection::vec((48usize..400, any::<u8>()), 1..8),
        probe in any::<u128>(),
    ) {
        let bytes = two_caps();
        let stamp = SecCtx::parse(&bytes).unwrap().validated();
        let mut b = bytes.clone();
        for (at, x) in flips {
            if let Some(byte) = b.get_mut(at) {
                *byte ^= x;
            }
        }
        if let Ok(ctx) = SecCtx::reopen(&b, stamp) {
            for t in [probe, 0x10, 0x20] {
                for e in ctx.entries_for(ObjID::new(t)) {
                    let _ = e.record();
                }
                let _ = ctx.mask(ObjID::new(t));
            }
            let _ = ctx.entries().count();
        }
    }
}
