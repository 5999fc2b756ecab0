//! The neutral text form of one upstream capability: a JSON object with exactly these fields
//! (no others, none twice):
//!
//! ```json
//! {
//!   "format": "twizzler-upstream-cap/1",
//!   "target": "0x1234",
//!   "accessor": "0x5678",
//!   "protections": 1,
//!   "flags": 2,
//!   "revocation": 0,
//!   "gate": { "offset": 0, "length": 1000000000, "align": 1 },
//!   "signature": "<128 hex digits: r then s, big-endian>"
//! }
//! ```
//!
//! - `target`, `accessor`: object ids, up to 32 hex digits, `0x` optional;
//! - `protections`, `flags`: the 16-bit fields as integers;
//! - `revocation`: upstream's 128-bit time (ns since the epoch) as an integer, or as a string
//!   of decimal digits for values JSON integers cannot carry;
//! - `gate`: three 64-bit integers;
//! - `signature`: upstream's 64 signature bytes, as hex or as a list of 64 integers 0..=255
//!   (the form upstream's `Debug` prints them in).
//!
//! The parser checks the form only; what the values mean is [`super::convert`]'s to judge.

use serde::Deserialize;
use serde_json::Value;
use twizzler_capsec::ObjID;

/// The value of the `format` field.
pub(crate) const FORMAT: &str = "twizzler-upstream-cap/1";

/// The longest input accepted, in bytes: a capability in this form is well under 1 KiB even
/// with its signature as a list; anything larger is not one.
pub(crate) const MAX_LEN: usize = 16 * 1024;

/// The length of upstream's ECDSA P-256 signature: `r` then `s`, 32 bytes each, big-endian.
pub(crate) const SIG_LEN: usize = 64;

/// Upstream's gate: a byte range with an entry alignment, unchecked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamGate {
    /// The first byte.
    pub offset: u64,
    /// The length in bytes.
    pub length: u64,
    /// The entry alignment.
    pub align: u64,
}

/// One upstream capability, field for field as upstream signs it; nothing is checked beyond
/// the form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct UpstreamCap {
    /// The object the capability grants access to.
    pub target: u128,
    /// The security context it is for.
    pub accessor: u128,
    /// Upstream's protection bits (`READ` 1, `WRITE` 2, `EXEC` 4).
    pub protections: u16,
    /// Upstream's `CapFlags` bits (`Blake3` 1, `Sha256` 2).
    pub flags: u16,
    /// Upstream's `Revoc`: when the capability stops being valid, ns since the epoch.
    pub revocation: u128,
    /// Upstream's gate.
    pub gate: UpstreamGate,
    /// Upstream's signature bytes.
    pub signature: [u8; SIG_LEN],
}

/// The JSON document as written: serde refuses unknown, missing and repeated fields (here and
/// in the gate); each value is then checked by hand, so that an error names its field.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    format: Value,
    target: Value,
    accessor: Value,
    protections: Value,
    flags: Value,
    revocation: Value,
    gate: RawGate,
    signature: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGate {
    offset: Value,
    length: Value,
    align: Value,
}

/// Parses the neutral form. The error is one line saying what is wrong.
pub(crate) fn parse(text: &str) -> Result<UpstreamCap, String> {
    if text.len() > MAX_LEN {
        return Err(format!(
            "{} bytes is too long for an upstream capability (at most {MAX_LEN})",
            text.len()
        ));
    }
    // serde's message can quote a field name from the input, which may hold a line break.
    let raw: Raw = serde_json::from_str(text).map_err(|e| {
        let e = e.to_string().replace(['\n', '\r'], " ");
        format!("not the neutral form: {}", truncate_to(&e, 200))
    })?;
    if raw.format.as_str() != Some(FORMAT) {
        return Err(format!(
            "format is {}, expected {FORMAT:?}",
            truncate(&raw.format.to_string())
        ));
    }
    Ok(UpstreamCap {
        target: id(&raw.target, "target")?,
        accessor: id(&raw.accessor, "accessor")?,
        protections: u16_field(&raw.protections, "protections")?,
        flags: u16_field(&raw.flags, "flags")?,
        revocation: revocation(&raw.revocation)?,
        gate: UpstreamGate {
            offset: u64_field(&raw.gate.offset, "gate offset")?,
            length: u64_field(&raw.gate.length, "gate length")?,
            align: u64_field(&raw.gate.align, "gate align")?,
        },
        signature: signature(&raw.signature)?,
    })
}

fn id(v: &Value, field: &str) -> Result<u128, String> {
    let s = v.as_str().ok_or_else(|| {
        format!(
            "{field}: expected an object id as a string of hex digits, got {}",
            truncate(&v.to_string())
        )
    })?;
    s.parse::<ObjID>()
        .map(ObjID::raw)
        .map_err(|e| format!("{field}: {e}"))
}

fn u64_field(v: &Value, field: &str) -> Result<u64, String> {
    v.as_u64().ok_or_else(|| {
        format!(
            "{field}: expected an integer 0..=18446744073709551615, got {}",
            truncate(&v.to_string())
        )
    })
}

fn u16_field(v: &Value, field: &str) -> Result<u16, String> {
    v.as_u64()
        .and_then(|n| u16::try_from(n).ok())
        .ok_or_else(|| {
            format!(
                "{field}: expected an integer 0..=65535, got {}",
                truncate(&v.to_string())
            )
        })
}

fn revocation(v: &Value) -> Result<u128, String> {
    let bad = || {
        "revocation: not an integer of at most 128 bits (ns since the epoch; a string of decimal digits for large values)"
            .to_string()
    };
    match v {
        Value::Number(n) => n.as_u64().map(u128::from).ok_or_else(bad),
        Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) => {
            s.parse::<u128>().map_err(|_| bad())
        }
        _ => Err(bad()),
    }
}

fn signature(v: &Value) -> Result<[u8; SIG_LEN], String> {
    let mut out = [0u8; SIG_LEN];
    match v {
        Value::String(s) => {
            let digits = s.strip_prefix("0x").unwrap_or(s);
            if digits.len() != 2 * SIG_LEN || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "signature: expected {} hex digits, got {:?}",
                    2 * SIG_LEN,
                    truncate(s)
                ));
            }
            for (o, pair) in out.iter_mut().zip(digits.as_bytes().chunks_exact(2)) {
                let pair =
                    std::str::from_utf8(pair).map_err(|_| "signature: not hex".to_string())?;
                *o = u8::from_str_radix(pair, 16).map_err(|_| "signature: not hex".to_string())?;
            }
        }
        Value::Array(a) => {
            if a.len() != SIG_LEN {
                return Err(format!(
                    "signature: expected a list of {SIG_LEN} bytes, got {}",
                    a.len()
                ));
            }
            for (o, b) in out.iter_mut().zip(a) {
                *o = b
                    .as_u64()
                    .and_then(|b| u8::try_from(b).ok())
                    .ok_or_else(|| {
                        format!(
                            "signature: {} is not a byte (0..=255)",
                            truncate(&b.to_string())
                        )
                    })?;
            }
        }
        _ => {
            return Err(format!(
                "signature: expected {} hex digits or a list of {SIG_LEN} bytes",
                2 * SIG_LEN
            ));
        }
    }
    Ok(out)
}

/// At most 40 characters of `s`, for messages about long input.
fn truncate(s: &str) -> String {
    truncate_to(s, 40)
}

/// At most `n` characters of `s`, with `…` when cut.
fn truncate_to(s: &str, n: usize) -> String {
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", s.get(..i).unwrap_or_default()),
        None => s.to_owned(),
    }
}

/// Writes `cap` in the neutral form (what [`parse`] reads back to the same value). The
/// revocation is an integer when it fits 64 bits, else a string of decimal digits. For the
/// tests: adopters write the form from upstream's `Debug` output.
#[cfg(test)]
pub(crate) fn render(cap: &UpstreamCap) -> String {
    let revocation = match u64::try_from(cap.revocation) {
        Ok(r) => serde_json::json!(r),
        Err(_) => serde_json::json!(cap.revocation.to_string()),
    };
    let sig: String = cap.signature.iter().map(|b| format!("{b:02x}")).collect();
    let doc = serde_json::json!({
        "format": FORMAT,
        "target": format!("{:#x}", cap.target),
        "accessor": format!("{:#x}", cap.accessor),
        "protections": cap.protections,
        "flags": cap.flags,
        "revocation": revocation,
        "gate": { "offset": cap.gate.offset, "length": cap.gate.length, "align": cap.gate.align },
        "signature": sig,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use serde_json::json;

    use super::*;

    fn sample() -> UpstreamCap {
        UpstreamCap {
            target: 0x1234,
            accessor: 0x5678,
            protections: 1,
            flags: 2,
            revocation: 0,
            gate: UpstreamGate {
                offset: 0,
                length: 1_000_000_000,
                align: 1,
            },
            signature: [7; SIG_LEN],
        }
    }

    fn doc() -> Value {
        serde_json::from_str(&render(&sample())).unwrap()
    }

    /// A change to a document.
    type Edit = Box<dyn Fn(&mut Value)>;

    fn parse_value(v: &Value) -> Result<UpstreamCap, String> {
        parse(&v.to_string())
    }

    #[test]
    fn the_documented_form_parses() {
        let sig = "07".repeat(SIG_LEN);
        let text = format!(
            r#"{{
              "format": "twizzler-upstream-cap/1",
              "target": "0x1234",
              "accessor": "5678",
              "protections": 1,
              "flags": 2,
              "revocation": 0,
              "gate": {{ "offset": 0, "length": 1000000000, "align": 1 }},
              "signature": "{sig}"
            }}"#
        );
        assert_eq!(parse(&text).unwrap(), sample());
    }

    #[test]
    fn signature_as_a_list_and_revocation_as_a_string() {
        let mut v = doc();
        v["signature"] = json!(vec![7u8; SIG_LEN]);
        v["revocation"] = json!("340282366920938463463374607431768211455");
        let c = parse_value(&v).unwrap();
        assert_eq!(c.signature, [7; SIG_LEN]);
        assert_eq!(c.revocation, u128::MAX);
    }

    #[test]
    fn malformed_documents_are_refused() {
        let cases: Vec<(Edit, &str)> = vec![
            (
                Box::new(|v| v["format"] = json!("twizzler-upstream-cap/2")),
                "format",
            ),
            (Box::new(|v| v["extra"] = json!(1)), "unknown field"),
            (
                Box::new(|v| {
                    v.as_object_mut().unwrap().remove("flags");
                }),
                "missing field",
            ),
            (Box::new(|v| v["protections"] = json!(65536)), "protections"),
            (Box::new(|v| v["protections"] = json!(-1)), "protections"),
            (Box::new(|v| v["flags"] = json!(1.5)), "flags"),
            (Box::new(|v| v["target"] = json!("0x")), "target"),
            (Box::new(|v| v["target"] = json!("1".repeat(33))), "target"),
            (Box::new(|v| v["accessor"] = json!(5)), "accessor"),
            (Box::new(|v| v["revocation"] = json!(-1)), "revocation"),
            (Box::new(|v| v["revocation"] = json!(1e30)), "revocation"),
            (
                Box::new(|v| v["revocation"] = json!("340282366920938463463374607431768211456")),
                "revocation",
            ),
            (Box::new(|v| v["revocation"] = json!("+5")), "revocation"),
            (Box::new(|v| v["revocation"] = json!("")), "revocation"),
            (Box::new(|v| v["gate"]["align"] = json!(null)), "align"),
            (Box::new(|v| v["gate"]["extra"] = json!(0)), "unknown field"),
            (
                Box::new(|v| v["gate"]["length"] = json!(18446744073709551616u128 as f64)),
                "length",
            ),
            (
                Box::new(|v| v["signature"] = json!("07".repeat(63))),
                "signature",
            ),
            (
                Box::new(|v| v["signature"] = json!("zz".repeat(64))),
                "signature",
            ),
            (
                Box::new(|v| v["signature"] = json!(vec![7u8; 63])),
                "signature",
            ),
            (
                Box::new(|v| v["signature"] = json!(vec![256u16; 64])),
                "signature",
            ),
            (Box::new(|v| v["signature"] = json!(true)), "signature"),
        ];
        for (edit, needle) in cases {
            let mut v = doc();
            edit(&mut v);
            let e = parse_value(&v).expect_err(&v.to_string());
            assert!(e.contains(needle), "{e:?} does not mention {needle:?}");
            assert!(!e.contains('\n'), "{e:?} is not one line");
        }
        // A repeated field, trailing text, and input too long.
        let text = render(&sample());
        let twice = text.replacen("\"flags\": 2", "\"flags\": 2, \"flags\": 1", 1);
        assert!(parse(&twice).unwrap_err().contains("duplicate field"));
        assert!(parse(&format!("{text} {{}}")).is_err());
        assert!(
            parse(&" ".repeat(MAX_LEN + 1))
                .unwrap_err()
                .contains("too long")
        );
        assert!(parse("").is_err());
    }

    fn any_cap() -> impl Strategy<Value = UpstreamCap> {
        (
            any::<u128>(),
            any::<u128>(),
            any::<u16>(),
            any::<u16>(),
            prop_oneof![
                Just(0u128),
                any::<u64>().prop_map(u128::from),
                any::<u128>()
            ],
            (any::<u64>(), any::<u64>(), any::<u64>()),
            prop::collection::vec(any::<u8>(), SIG_LEN),
        )
            .prop_map(
                |(target, accessor, protections, flags, revocation, g, sig)| {
                    let mut signature = [0u8; SIG_LEN];
                    signature.copy_from_slice(&sig);
                    UpstreamCap {
                        target,
                        accessor,
                        protections,
                        flags,
                        revocation,
                        gate: UpstreamGate {
                            offset: g.0,
                            length: g.1,
                            align: g.2,
                        },
                        signature,
                    }
                },
            )
    }

    proptest! {
        /// Every capability survives the round trip through the text form.
        #[test]
        fn render_then_parse_is_the_identity(c in any_cap()) {
            prop_assert_eq!(parse(&render(&c)).unwrap(), c);
        }

        /// Any text gives a value or a one-line error, never a panic.
        #[test]
        fn arbitrary_text_never_panics(s in ".{0,400}") {
            if let Err(e) = parse(&s) {
                prop_assert!(!e.contains('\n'));
            }
        }

        /// Cutting a valid document anywhere, or changing one byte of it, gives a value or an
        /// error, never a panic; a parsed value renders back to a document that parses to it.
        #[test]
        fn damaged_documents_never_panic(c in any_cap(), at in any::<prop::sample::Index>(), b in any::<u8>()) {
            let text = render(&c);
            let i = at.index(text.len());
            let mut cut = text.as_bytes()[..i].to_vec();
            let _ = parse(&String::from_utf8_lossy(&cut));
            cut = text.as_bytes().to_vec();
            cut[i] = b;
            if let Ok(d) = parse(&String::from_utf8_lossy(&cut)) {
                prop_assert_eq!(parse(&render(&d)).unwrap(), d);
            }
        }
    }
}
