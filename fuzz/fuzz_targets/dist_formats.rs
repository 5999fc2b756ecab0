//! dist-bridge's byte formats that cross a trust boundary, selected by the first input byte:
//! the guarded token (from clients), the controller version file (from disk), the upgrade
//! notice and the broadcast message (from other nodes), and the controller id inside them.
//!
//! Oracles: no panic; whatever a decoder accepts re-encodes to exactly the input (each format
//! has one encoding, as the golden fixtures pin); a re-encoded value decodes to itself.
#![no_main]

use dist_bridge::broadcast::BroadcastMessage;
use dist_bridge::controller::{ControllerId, decode_version_file, encode_version_file};
use dist_bridge::owner::UpgradeNotice;
use dist_bridge::token::GuardedToken;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    match sel % 5 {
        0 => {
            if let Ok(t) = GuardedToken::decode(rest) {
                let again = t.encode();
                assert_eq!(&again[..], rest, "token encoding is not canonical");
                assert_eq!(again.len(), t.encoded_len());
                assert_eq!(GuardedToken::decode(&again).map(|u| u.encode()), Ok(again));
            }
        }
        1 => {
            if let Ok((node, version)) = decode_version_file(rest) {
                let again = encode_version_file(node, version);
                assert_eq!(&again[..], rest, "version file encoding is not canonical");
            }
        }
        2 => {
            if let Ok(n) = UpgradeNotice::decode(rest) {
                let again = n.encode();
                assert_eq!(&again[..], rest, "upgrade notice encoding is not canonical");
                assert!(UpgradeNotice::decode(&again).is_ok());
            }
        }
        3 => {
            if let Ok(m) = BroadcastMessage::decode(rest) {
                let again = m.encode();
                assert_eq!(&again[..], rest, "broadcast encoding is not canonical");
                assert_eq!(BroadcastMessage::decode(&again), Ok(m));
            }
        }
        _ => {
            if let Ok(id) = ControllerId::decode(rest) {
                let again = id.encode();
                assert_eq!(&again[..], rest, "controller id encoding is not canonical");
                assert_eq!(ControllerId::decode(&again), Ok(id));
            }
        }
    }
});
