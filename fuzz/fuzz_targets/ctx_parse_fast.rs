//! `ctx_parse` without signature work: byte 0 selects the [`CheckRule`] by which the cheap
//! authority answers every signature check, byte 1 which eighth of the access grid the rule
//! is evaluated on; the rest is the context, checked by the same oracles as `ctx_parse`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use twizzler_capsec_fuzz::{CheapSignatures, CheckRule, RuleParams, check_context};

fuzz_target!(|data: &[u8]| {
    let [rule, phase, ctx @ ..] = data else {
        return;
    };
    check_context(
        ctx,
        |c| RuleParams::from_ctx_bytes(c).sampled(*phase),
        &CheapSignatures(CheckRule::from_byte(*rule)),
    );
});
