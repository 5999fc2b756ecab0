//! secctx's byte formats read from a store another party may have written, selected by the
//! first input byte: the revocation list, a verifying-key object, the label table (`TZLT`,
//! whose rows hold `TLBL` labels) and a signing-key object's header (its key is `key_decode`'s; unsealing is left out: a hostile sealed key may ask
//! Argon2 for up to 4 GiB, which is refused past that bound before any allocation).
//!
//! Oracles: no panic; whatever a decoder accepts re-encodes to exactly the input (one
//! encoding per value); a re-encoded value decodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use secctx::keypair::{parse_verifying_key, signing_key_info, verifying_key_object};
use secctx::labels::LabelTable;
use secctx::revocations::RevocationList;
use secctx::{ObjMeta, Object};
use twizzler_capsec::ObjID;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let id = ObjID::new(0x5eed);
    let object = || Object {
        id,
        meta: ObjMeta::plain(),
        data: rest.to_vec(),
    };
    match sel % 4 {
        0 => {
            if let Ok(list) = RevocationList::decode(rest) {
                let again = list.encode();
                assert_eq!(
                    &again[..],
                    rest,
                    "revocation list encoding is not canonical"
                );
                assert_eq!(
                    RevocationList::decode(&again).map(|l| l.encode()),
                    Ok(again)
                );
            }
        }
        1 => {
            if let Ok(key) = parse_verifying_key(&object()) {
                let again = verifying_key_object(id, &key);
                assert_eq!(
                    &again.data[..],
                    rest,
                    "verifying-key object is not canonical"
                );
                assert!(parse_verifying_key(&again).is_ok_and(|k| k == key));
            }
        }
        2 => {
            if let Ok(table) = LabelTable::decode(rest) {
                let again = table.encode();
                assert_eq!(&again[..], rest, "label table encoding is not canonical");
                assert!(LabelTable::decode(&again).is_ok_and(|t| t == table));
            }
        }
        _ => {
            let _ = signing_key_info(&object());
        }
    }
});
