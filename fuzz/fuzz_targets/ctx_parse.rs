//! `SecCtx::parse` on arbitrary bytes, then every lookup, every record, the editor round trip
//! and the permission rule against the fixed authority, with real signatures (the oracles
//! are `twizzler_capsec_fuzz::check_context`).
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec_fuzz::{RealSignatures, RuleParams, check_context};

fuzz_target!(|data: &[u8]| {
    check_context(data, RuleParams::from_ctx_bytes, &RealSignatures);
});
