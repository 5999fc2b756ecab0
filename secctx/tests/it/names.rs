//! Names and ids never overlap: a string that reads as an object id is never accepted as a
//! name, so wherever an id is taken a name can be too and each string means one thing.

use proptest::prelude::*;
use secctx::store::{ObjRef, check_name, parse_obj_ref};
use twizzler_capsec::ObjID;

/// Found by the outside review: `0X` (upper case) was not stripped before the hex check, so
/// `0XDEAD` was accepted as a name that `ObjID::from_str` reads as object 0xdead.
#[test]
fn an_upper_case_0x_id_is_not_a_name() {
    for s in [
        "0XDEAD", "0Xdead", "0xDEAD", "0x0", "0X0", "DEAD", "dead", "0", "cafe",
    ] {
        assert!(s.parse::<ObjID>().is_ok(), "{s} should read as an id");
        let e = check_name(s).expect_err(s);
        assert!(e.to_string().contains("reads as an object id"), "{s}: {e}");
        assert!(matches!(parse_obj_ref(s), Ok(ObjRef::Id(_))), "{s}");
    }
}

#[test]
fn ordinary_names_are_names() {
    for s in [
        "alice",
        "alice.pub",
        "0xg",
        "0Xy",
        "x0",
        "a-b_c.d@e+f",
        "deadbeefg",
    ] {
        check_name(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        assert!(
            matches!(parse_obj_ref(s), Ok(ObjRef::Name(n)) if n == s),
            "{s}"
        );
    }
}

/// Strings near the boundary between ids and names: an optional `0x`/`0X`/`0` prefix, then hex
/// digits, `x`/`X` and the other characters names allow, of any length up to past 32 digits.
fn near_ids() -> impl Strategy<Value = String> {
    prop_oneof![
        "(0[xX])?[0-9a-fA-F]{0,36}",
        "(0[xX]|[xX])?[0-9a-fA-FxXgG._@+-]{0,36}",
        "[0-9a-zA-Z][0-9a-zA-Z._@+-]{0,70}",
        any::<String>(),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(4096))]

    /// No accepted name parses as an id, and every string that parses as an id is refused as
    /// a name; what resolves a string agrees with both.
    #[test]
    fn names_and_ids_are_disjoint(s in near_ids()) {
        let as_id = s.parse::<ObjID>();
        let as_name = check_name(&s);
        prop_assert!(
            !(as_id.is_ok() && as_name.is_ok()),
            "{:?} is both an id and a name", s
        );
        match parse_obj_ref(&s) {
            Ok(ObjRef::Id(id)) => prop_assert_eq!(Ok(id), as_id.map_err(|_| ())),
            Ok(ObjRef::Name(n)) => {
                prop_assert_eq!(n, s.as_str());
                prop_assert!(as_id.is_err() && as_name.is_ok());
            }
            Err(_) => prop_assert!(as_id.is_err() && as_name.is_err()),
        }
    }
}
