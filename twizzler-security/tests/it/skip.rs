//! The lazy scan's fast path: `Grant::adds` answers what `Grant::contribution` does, and
//! `EntryIter::skip_useless_caps` passes over exactly what `EntryIter::skip_caps` does with the
//! same question asked of each peeked capability, over hostile contexts (damaged bodies, wrong
//! holders and targets, gates at the edges, ownership records, delegations, overflow-table
//! rows) and every kind of access.

use crate::fixture::*;
use proptest::prelude::*;
use twizzler_capsec::ctx::{CTX_VERSION_OVERFLOW, ENTRY_LEN, EntryIter, HEADER_LEN};
use twizzler_capsec::{
    Access, Cap, CapGrant, Del, DelGrant, Entry, Expiry, Gate, Grant, MAX_OBJECT_SIZE, ObjID,
    PAGE_SIZE, Protections, Record, SecCtx, SecCtxEditor, SigningScheme,
};

const C: ObjID = ObjID::new(0xc0);
const P: ObjID = ObjID::new(0xb0);

/// Offsets near the edges of an object and of the address space.
fn edge_offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..6 * PAGE_SIZE,
        Just(PAGE_SIZE - 1),
        Just(MAX_OBJECT_SIZE - PAGE_SIZE),
        Just(MAX_OBJECT_SIZE - 1),
        Just(MAX_OBJECT_SIZE),
        Just(MAX_OBJECT_SIZE + PAGE_SIZE),
        Just(u64::MAX - PAGE_SIZE),
        Just(u64::MAX - 1),
        Just(u64::MAX),
    ]
}

fn access() -> impl Strategy<Value = Access> {
    (0u8..4, edge_offset()).prop_map(|(k, offset)| match k {
        0 => Access::read(offset),
        1 => Access::write(offset),
        2 => Access::exec(offset),
        _ => Access::enter(offset),
    })
}

fn prots() -> impl Strategy<Value = Protections> {
    (0u16..8).prop_map(Protections::from_bits_truncate)
}

/// A valid gate, often at an edge (one page, the last page, the whole object, odd alignments).
fn gate() -> impl Strategy<Value = Gate> {
    prop_oneof![
        (0u64..6, 1u64..3, 1u64..5).prop_map(|(p, n, a)| Gate::new(
            p * PAGE_SIZE,
            n * PAGE_SIZE,
            a * 8 - 7
        )
        .unwrap()),
        (0u64..6 * PAGE_SIZE, 1u64..3 * PAGE_SIZE, 1u64..64)
            .prop_map(|(o, l, a)| Gate::new(o, l, a).unwrap()),
        Just(Gate::new(MAX_OBJECT_SIZE - PAGE_SIZE, PAGE_SIZE, 1).unwrap()),
        Just(Gate::new(MAX_OBJECT_SIZE - 1, 1, 1).unwrap()),
        Just(Gate::WHOLE),
    ]
}

/// The lazy scan's question asked the long way: does `contribution` share a right with
/// `want`.
fn adds_by_contribution(g: &Grant, access: &Access, want: Protections) -> bool {
    g.contribution(access).is_ok_and(|c| c.intersects(want))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2048, failure_persistence: None, ..ProptestConfig::default() })]

    /// `Grant::adds` is `contribution` intersected with the rights wanted, for data and code
    /// accesses, entries on and off an entry point, pages at the edges.
    #[test]
    fn adds_is_contribution_intersecting_want(
        prots in prots(),
        gate in gate(),
        access in access(),
        want in prots(),
    ) {
        let g = Grant { prots, gate };
        prop_assert_eq!(g.adds(&access, want), adds_by_contribution(&g, &access, want));
    }
}

/// One record of a generated context.
#[derive(Clone, Debug)]
enum Item {
    /// A capability for target `0x70 + target`, held by `C` (or `P` when `foreign`).
    Cap {
        target: u8,
        foreign: bool,
        prots: Protections,
        gate: Gate,
    },
    /// A delegation (never a capability to the peek).
    Del { target: u8 },
}

fn item() -> impl Strategy<Value = Item> {
    prop_oneof![
        8 => (0u8..2, prop::bool::weighted(0.15), prots(), gate()).prop_map(
            |(target, foreign, prots, gate)| Item::Cap { target, foreign, prots, gate }
        ),
        1 => (0u8..2).prop_map(|target| Item::Del { target }),
    ]
}

/// A damage done to the bytes of an encoded capability: `(field, value)`.
fn damage() -> impl Strategy<Value = (u8, u64)> {
    (
        0u8..10,
        prop_oneof![
            Just(0u64),
            Just(1),
            Just(MAX_OBJECT_SIZE),
            Just(MAX_OBJECT_SIZE + 1),
            Just(u64::MAX),
            any::<u64>()
        ],
    )
}

fn target(t: u8) -> ObjID {
    ObjID::new(0x70 + u128::from(t))
}

fn record(item: &Item, n: u64) -> Record {
    let k = key(SigningScheme::Ed25519, 44);
    let sig = *cap(target(0), C, Protections::READ, &k).signature();
    match item {
        Item::Cap {
            target: t,
            foreign,
            prots,
            gate,
        } => {
            let holder = if *foreign { P } else { C };
            let mut g = CapGrant::new(target(*t), holder, *prots);
            g.gate = *gate;
            g.expires = Expiry::from_raw(1_000 + n);
            Record::Cap(Cap::from_parts(g, sig))
        }
        Item::Del { target: t } => Record::Del(
            Del::from_cap(
                &cap(target(*t), P, Protections::READ, &k),
                DelGrant::new(C, Protections::READ),
                &key(SigningScheme::Ed25519, 42),
            )
            .unwrap(),
        ),
    }
}

/// A record's encoding.
fn encoded(r: &Record) -> Vec<u8> {
    match r {
        Record::Cap(c) => c.encode().to_vec(),
        Record::Del(d) => d.encode().to_vec(),
    }
}

/// A context of `main` through the editor, laid out with room, its rows listed in `main`'s
/// order within each target (not the editor's gate order: any order, as another writer's),
/// then (if any) `extra` appended by hand as a version-2 overflow table (rows sorted by
/// target, stably; items at the heap's end), as `ctx_overflow.rs` builds them.
fn context(main: &[Record], extra: &[Record]) -> Vec<u8> {
    let mut ed = SecCtxEditor::new();
    for r in main {
        ed.add_record(r);
    }
    let listed: Vec<Vec<u8>> = main.iter().map(encoded).collect();
    if extra.is_empty() {
        return as_listed(encode(&ed), &listed);
    }
    let mut b = as_listed(ed.encode_for_update(None).expect("encode"), &listed);
    let heap_len = get_u32(&b, 40) as usize;
    let overflow_at = HEADER_LEN + main.len() * ENTRY_LEN;
    let mut rows: Vec<(u128, u32, u32, u32)> = Vec::new();
    let mut heap_end = heap_len;
    for r in extra {
        let item = encoded(r);
        rows.push((
            r.target().raw(),
            r.kind().raw(),
            heap_end as u32,
            item.len() as u32,
        ));
        heap_end += item.len();
        b.extend_from_slice(&item);
    }
    rows.sort_by_key(|r| r.0);
    for (i, (t, kind, off, len)) in rows.iter().enumerate() {
        let at = overflow_at + i * ENTRY_LEN;
        b[at..at + 16].copy_from_slice(&t.to_le_bytes());
        put_u32(&mut b, at + 16, *kind);
        put_u32(&mut b, at + 20, *off);
        put_u32(&mut b, at + 24, *len);
    }
    put_u16(&mut b, 4, CTX_VERSION_OVERFLOW);
    put_u32(&mut b, 40, heap_end as u32);
    put_u32(&mut b, 44, extra.len() as u32);
    b
}

/// Damages the record at `at` (its entry row at `row`): a body field, or the row's length.
fn damage_at(bytes: &mut [u8], at: usize, row: usize, (field, v): (u8, u64)) {
    let put =
        |b: &mut [u8], off: usize, v: &[u8]| b[at + off..at + off + v.len()].copy_from_slice(v);
    match field {
        0 => put(bytes, 0, &[(v as u8) | 1]),          // magic
        1 => put(bytes, 6, &[bytes[at + 6] | 4]),      // the ownership (TAG) flag
        2 => put(bytes, 6, &(v as u16).to_le_bytes()), // any flags
        3 => put(bytes, 8 + (v % 16) as usize, &[(v >> 8) as u8 ^ 0x5a]), // the target
        4 => put(bytes, 24 + (v % 16) as usize, &[(v >> 8) as u8 ^ 0x5a]), // the holder
        5 => put(bytes, 40, &(v as u16).to_le_bytes()), // protections, unknown bits too
        6 => put(bytes, 42, &v.to_le_bytes()),         // gate offset
        7 => put(bytes, 50, &v.to_le_bytes()),         // gate length
        8 => put(bytes, 58, &v.to_le_bytes()),         // gate alignment
        // The row's length: one byte short (still inside the heap).
        _ => {
            let len = get_u32(bytes, row + 24);
            put_u32(bytes, row + 24, len.saturating_sub(1));
        }
    }
}

/// Where each entry's row and record lie in `bytes`, in table order.
fn layout(bytes: &[u8]) -> Vec<(usize, usize)> {
    let ctx = SecCtx::parse(bytes).unwrap();
    let main = ctx.entry_count() - ctx.overflow_count();
    let overflow_at = HEADER_LEN + main * ENTRY_LEN;
    ctx.entries()
        .map(|e| {
            let row = if e.index < main {
                HEADER_LEN + e.index * ENTRY_LEN
            } else {
                overflow_at + (e.index - main) * ENTRY_LEN
            };
            (row, e.bytes().as_ptr() as usize - bytes.as_ptr() as usize)
        })
        .collect()
}

/// The context of `items` (and `overflow` in a version-2 overflow table), with `damages`
/// done to records picked by index.
fn damaged_context(
    items: &[Item],
    overflow: &[Item],
    damages: &[(prop::sample::Index, (u8, u64))],
) -> Vec<u8> {
    let (main, extra): (Vec<_>, Vec<_>) = (
        items
            .iter()
            .enumerate()
            .map(|(i, it)| record(it, i as u64))
            .collect(),
        overflow
            .iter()
            .enumerate()
            .map(|(i, it)| record(it, 100 + i as u64))
            .collect(),
    );
    let mut bytes = context(&main, &extra);
    let places = layout(&bytes);
    if !places.is_empty() {
        for (i, d) in damages {
            let (row, at) = places[i.index(places.len())];
            damage_at(&mut bytes, at, row, *d);
        }
    }
    bytes
}

/// A scan as the engine makes it: a pass of `skip`, then one entry, until the run ends.
/// Returns, in order, each entry passed over (`true`) or returned (`false`).
fn scan(
    ctx: &SecCtx<'_>,
    t: ObjID,
    skip: impl FnMut(&mut EntryIter<'_>) -> usize,
) -> Vec<(usize, bool)> {
    scan_from(ctx.entries_for(t), skip)
}

/// [`scan`] from where `it` stands.
fn scan_from(
    mut it: EntryIter<'_>,
    mut skip: impl FnMut(&mut EntryIter<'_>) -> usize,
) -> Vec<(usize, bool)> {
    let mut seen = Vec::new();
    loop {
        let before = it.clone();
        let n = skip(&mut it);
        seen.extend(before.take(n).map(|e| (e.index, true)));
        match it.next() {
            Some(e) => seen.push((e.index, false)),
            None => return seen,
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// `skip_useless_caps` passes over exactly the entries `skip_caps` does when asked the same
    /// question of each peeked capability (same target, same holder, adds nothing wanted, not
    /// kept), in contexts with damaged records and overflow rows, for every kind of access;
    /// every entry passed over peeks as such a capability, and every entry of the run is
    /// either passed over or returned, in order.
    #[test]
    fn skip_useless_caps_is_skip_caps_asking_contribution(
        items in prop::collection::vec(item(), 0..20),
        overflow in prop::collection::vec(item(), 0..6),
        damages in prop::collection::vec((any::<prop::sample::Index>(), damage()), 0..4),
        access in access(),
        want in prots(),
        keep_offset in prop::option::of(0u64..6 * PAGE_SIZE),
    ) {
        let bytes = damaged_context(&items, &overflow, &damages);
        let ctx = SecCtx::parse(&bytes).unwrap();
        // `keep`: a grant whose gate starts at `keep_offset` (if any) is kept.
        let keep = |g: &Grant| keep_offset.is_some_and(|o| g.gate.offset() == o);
        let skippable = |e: &Entry<'_>, t: ObjID| {
            e.peek_cap().is_some_and(|(a, h, g)| {
                a == t && h == C && !adds_by_contribution(&g, &access, want) && !keep(&g)
            })
        };
        for t in [target(0), target(1), target(2)] {
            let fast = scan(&ctx, t, |it| {
                it.skip_useless_caps(C, &access, want, keep_offset.map(|_| keep))
            });
            let slow = scan(&ctx, t, |it| {
                it.skip_caps(|a, h, g| {
                    a == t && h == C && !adds_by_contribution(g, &access, want) && !keep(g)
                })
            });
            prop_assert_eq!(&fast, &slow);
            let all: Vec<_> = ctx.entries_for(t).collect();
            prop_assert_eq!(
                fast.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
                all.iter().map(|e| e.index).collect::<Vec<_>>()
            );
            for ((_, passed), e) in fast.iter().zip(&all) {
                if *passed {
                    prop_assert!(skippable(e, t), "passed over an entry that matters: {:?}", e);
                }
            }
        }
    }
}

/// Records a fetch could use are never passed over: a code grant whose entry points include
/// the fetch's offset, or any code grant for a fetch that does not enter; a data grant whose
/// gate covers the page. The ones around them are.
#[test]
fn skip_useless_caps_stops_at_the_record_that_adds() {
    let sig = *cap(
        target(0),
        C,
        Protections::READ,
        &key(SigningScheme::Ed25519, 44),
    )
    .signature();
    let t = target(0);
    let rx = Protections::READ | Protections::EXEC;
    let mk = |prots, gate: Gate, n: u64| {
        let mut g = CapGrant::new(t, C, prots);
        g.gate = gate;
        g.expires = Expiry::from_raw(1_000 + n);
        Cap::from_parts(g, sig)
    };
    let caps = [
        mk(Protections::READ, Gate::new(0x1000, 0x1000, 1).unwrap(), 0),
        mk(rx, Gate::new(0x2000, 0x100, 16).unwrap(), 1),
        mk(Protections::READ, Gate::new(0x3000, 0x1000, 1).unwrap(), 2),
    ];
    let bytes = ctx_with_caps(&caps);
    let ctx = SecCtx::parse(&bytes).unwrap();
    let skipped = |access: Access, want| {
        ctx.entries_for(t)
            .skip_useless_caps(C, &access, want, None::<fn(&Grant) -> bool>)
    };
    let all = Protections::all();
    // A read of page 3: the first two add nothing to it.
    assert_eq!(skipped(Access::read(0x3000), all), 2);
    // A fetch at an entry point of the code gate stops at it; off an entry point, it passes.
    assert_eq!(skipped(Access::enter(0x2010), all), 1);
    assert_eq!(skipped(Access::enter(0x2008), all), 3);
    // A fetch that does not enter may run the code anywhere.
    assert_eq!(skipped(Access::exec(0x9000), all), 1);
    // Nothing wanted: every capability is passed over.
    assert_eq!(skipped(Access::read(0x1000), Protections::empty()), 3);
    // Another holder's view: nothing is passed over.
    assert_eq!(
        ctx.entries_for(t).skip_useless_caps(
            P,
            &Access::read(0x3000),
            all,
            None::<fn(&Grant) -> bool>
        ),
        0
    );
    // `keep` keeps the first record that it is asked about.
    assert_eq!(
        ctx.entries_for(t)
            .skip_useless_caps(C, &Access::read(0x3000), all, Some(|_: &Grant| true)),
        0
    );
    // A read at the last page of the address space: no data grant covers it.
    assert_eq!(skipped(Access::read(u64::MAX), all), 3);
}

/// The entries a scan returns and passes over, in order, when it first asks
/// `start_near_page(page)` and then passes over what `skip_useless_caps` does.
fn scan_from_page(ctx: &SecCtx<'_>, t: ObjID, page: u64, access: &Access) -> Vec<(usize, bool)> {
    let mut it = ctx.entries_for(t);
    it.start_near_page(page);
    scan_from(it, |it| {
        it.skip_useless_caps(C, access, Protections::all(), None::<fn(&Grant) -> bool>)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    /// `start_near_page` only reorders: over hostile contexts (damaged records, foreign
    /// holders, delegations, overflow rows, gates in any order) the iterator returns each
    /// entry of the run exactly once, with or without `skip_useless_caps` passing over some;
    /// what it moved behind is the run's front, and when it moved anything the new front's
    /// gate starts at or before the page.
    #[test]
    fn start_near_page_returns_every_entry_once(
        items in prop::collection::vec(item(), 0..24),
        overflow in prop::collection::vec(item(), 0..6),
        damages in prop::collection::vec((any::<prop::sample::Index>(), damage()), 0..4),
        page in edge_offset(),
        access in access(),
    ) {
        let page = page & !(PAGE_SIZE - 1);
        let bytes = damaged_context(&items, &overflow, &damages);
        let ctx = SecCtx::parse(&bytes).unwrap();
        for t in [target(0), target(1), target(2)] {
            let plain: Vec<usize> = ctx.entries_for(t).map(|e| e.index).collect();
            let mut it = ctx.entries_for(t);
            let moved = it.start_near_page(page);
            let order: Vec<usize> = it.map(|e| e.index).collect();
            // The same entries; the first `moved` of the run come after the rest of the
            // entry table's run, before the overflow table's.
            let main_run = plain.iter().filter(|i| **i < ctx.entry_count() - ctx.overflow_count()).count();
            prop_assert!(moved < main_run.max(1));
            let mut expected = plain[moved..main_run].to_vec();
            expected.extend_from_slice(&plain[..moved]);
            expected.extend_from_slice(&plain[main_run..]);
            prop_assert_eq!(&order, &expected);
            // A capability's gate as written (the body need not be a valid capability's),
            // if the entry reads as one (kind, length).
            let gate_of = |e: &Entry<'_>| {
                let b = e.bytes();
                (e.kind == twizzler_capsec::RecordKind::Cap && b.len() == twizzler_capsec::CAP_LEN)
                    .then(|| {
                        let field = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap());
                        (field(42), field(50))
                    })
            };
            let covers = |(offset, length): (u64, u64)| {
                offset <= page
                    && offset
                        .checked_add(length)
                        .is_none_or(|end| end >= page.saturating_add(PAGE_SIZE))
            };
            let run: Vec<Entry<'_>> = ctx.entries_for(t).take(main_run).collect();
            if moved > 0 {
                let offset = gate_of(&run[moved]).unwrap().0;
                prop_assert!(offset <= page);
            }
            // Whenever a record of the run covers the page by its gate, the run starts at one
            // that does.
            if run.iter().any(|e| gate_of(e).is_some_and(covers)) {
                prop_assert!(gate_of(&run[moved]).is_some_and(covers), "front {}", moved);
            }
            // With the skip: every entry once, in the same order.
            let skipped = scan_from_page(&ctx, t, page, &access);
            prop_assert_eq!(skipped.iter().map(|(i, _)| *i).collect::<Vec<_>>(), expected);
        }
    }
}

/// A run of page-gated capabilities: `start_near_page` starts at the record for the page,
/// whichever it is, in page order (as a context built page by page is, found by the search),
/// in reverse, interleaved and in no order (found by reading the gates from the front); a scan
/// then finds the record for the page first, and still returns every record.
#[test]
fn start_near_page_finds_the_page_in_any_order() {
    let k = key(SigningScheme::Ed25519, 44);
    let sig = *cap(target(0), C, Protections::READ, &k).signature();
    let t = target(0);
    let page_cap = |page: u64| {
        let mut g = CapGrant::new(t, C, Protections::READ);
        g.gate = Gate::new(page * PAGE_SIZE, PAGE_SIZE, 1).unwrap();
        Cap::from_parts(g, sig)
    };
    let n = 1000u64;
    let ordered: Vec<Cap> = (1..=n).map(page_cap).collect();
    let bytes = ctx_with_caps(&ordered);
    let ctx = SecCtx::parse(&bytes).unwrap();
    for page in [1, 2, 3, 17, 500, 511, 512, 513, 999, 1000] {
        let mut it = ctx.entries_for(t);
        assert_eq!(
            it.start_near_page(page * PAGE_SIZE),
            page as usize - 1,
            "page {page}"
        );
        let front = it.next().unwrap();
        assert_eq!(front.peek_cap().unwrap().2.gate.offset(), page * PAGE_SIZE);
        // A scan for the page stops right there.
        let found = scan_from_page(&ctx, t, page * PAGE_SIZE, &Access::read(page * PAGE_SIZE));
        assert_eq!(
            found.first(),
            Some(&(page as usize - 1, false)),
            "page {page}"
        );
    }
    // Past the last record's page, and before the first: the last one, and nothing moved.
    assert_eq!(
        ctx.entries_for(t).start_near_page(5000 * PAGE_SIZE),
        n as usize - 1
    );
    assert_eq!(ctx.entries_for(t).start_near_page(0), 0);

    // In reverse order the search runs the other way: the record for the page is found,
    // and a scan for page 1 starts at it. Interleaved (odd pages, then even ones), the
    // front's run of odd pages is searched: it starts at the odd page nearest below, and a
    // scan reads on from there to the page's record.
    let reversed: Vec<Cap> = (1..=n).rev().map(page_cap).collect();
    let bytes = ctx_with_caps_as_listed(&reversed);
    let ctx = SecCtx::parse(&bytes).unwrap();
    for page in [1, 2, 500, 999, 1000] {
        let moved = ctx.entries_for(t).start_near_page(page * PAGE_SIZE);
        assert_eq!(moved, (n - page) as usize, "page {page}");
        let found = scan_from_page(&ctx, t, page * PAGE_SIZE, &Access::read(page * PAGE_SIZE));
        assert_eq!(
            found.first(),
            Some(&((n - page) as usize, false)),
            "page {page}"
        );
        assert_eq!(found.len(), n as usize);
    }
    let interleaved: Vec<Cap> = (1..=n)
        .step_by(2)
        .chain((2..=n).step_by(2))
        .map(page_cap)
        .collect();
    let bytes = ctx_with_caps_as_listed(&interleaved);
    let ctx = SecCtx::parse(&bytes).unwrap();
    // Page 100 (even, at index 549): the search stops at page 99 (index 49), which does not
    // cover it; the gates read from the front find page 100's record, and the run starts
    // there.
    assert_eq!(ctx.entries_for(t).start_near_page(100 * PAGE_SIZE), 549);
    let found = scan_from_page(&ctx, t, 100 * PAGE_SIZE, &Access::read(100 * PAGE_SIZE));
    assert_eq!(found.first(), Some(&(549, false)));
    assert_eq!(found.len(), n as usize);

    // In no order (i * 389 mod 999 over the pages but 500, then 500): page 500's record is
    // last, and found; every page's record is found wherever it is.
    let others: Vec<u64> = (1..=n).filter(|p| *p != 500).collect();
    let scattered: Vec<Cap> = (0..others.len())
        .map(|i| others[i * 389 % others.len()])
        .chain([500])
        .map(page_cap)
        .collect();
    let bytes = ctx_with_caps_as_listed(&scattered);
    let ctx = SecCtx::parse(&bytes).unwrap();
    assert_eq!(ctx.entries_for(t).start_near_page(500 * PAGE_SIZE), 999);
    // The editor itself writes the same records in gate order: the search finds them.
    let sorted = ctx_with_caps(&scattered);
    let sorted = SecCtx::parse(&sorted).unwrap();
    let gates: Vec<u64> = sorted
        .entries_for(t)
        .map(|e| e.peek_cap().unwrap().2.gate.offset())
        .collect();
    assert_eq!(gates, (1..=n).map(|p| p * PAGE_SIZE).collect::<Vec<_>>());
    assert_eq!(sorted.entries_for(t).start_near_page(500 * PAGE_SIZE), 499);
    for page in [1, 2, 17, 499, 501, 999, 1000] {
        let at = (0..others.len())
            .position(|i| others[i * 389 % others.len()] == page)
            .unwrap();
        let found = scan_from_page(&ctx, t, page * PAGE_SIZE, &Access::read(page * PAGE_SIZE));
        assert_eq!(found.first(), Some(&(at, false)), "page {page}");
        assert_eq!(found.len(), n as usize, "page {page}");
    }
    // No record covers the page: the run starts at some record before the page, and a scan
    // still reads every record.
    let found = scan_from_page(&ctx, t, 5000 * PAGE_SIZE, &Access::read(5000 * PAGE_SIZE));
    assert_eq!(found.len(), n as usize);

    // A front that covers the page (a whole-object grant first): nothing moves.
    let mut whole = vec![{
        let g = CapGrant::new(t, C, Protections::READ);
        Cap::from_parts(g, sig)
    }];
    whole.extend(ordered.iter().cloned());
    let bytes = ctx_with_caps_as_listed(&whole);
    let ctx = SecCtx::parse(&bytes).unwrap();
    assert_eq!(ctx.entries_for(t).start_near_page(700 * PAGE_SIZE), 0);
}
