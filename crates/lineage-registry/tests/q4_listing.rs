//! Q4: listing and search on the pure state machine. For many filters and page sizes, walking
//! every page returns exactly what a brute-force scan of all records keeps, in
//! `(created_at_ms, id)` order, each once; the indexes follow state changes, moves, label
//! changes and disposal; they are rebuilt identically from a snapshot; a page examines a
//! bounded number of entries; a malformed cursor is refused in one line.

use lineage_core::fanout::FanOut;
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_registry::listing::{ListCursor, ListFilter, LIST_SCAN_MAX};
use lineage_registry::{Command, CommandResponse, RegistryState, SessionRecord, SessionState};
use serde_json::json;

use lineage_core::ids::sid;

fn node(n: u32) -> NodeId {
    NodeId::parse(&format!("node-{n}")).unwrap()
}

fn rid(what: &str, n: u32) -> RequestId {
    RequestId::parse(&format!("{what}-{n}")).unwrap()
}

/// A small deterministic generator (no dependency): the same trees every run.
struct Lcg(u64);

impl Lcg {
    fn below(&mut self, n: u32) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((self.0 >> 33) % u64::from(n)) as u32
    }
}

fn register(s: &mut RegistryState, n: u32, header: SessionHeader, label: &str, on: u32, at: u64) {
    let got = s.apply(&Command::RegisterSession {
        request_id: rid("reg", n),
        at_ms: at,
        header,
        descriptor: Some(
            serde_json::from_value(
                json!({"provider": "scripted", "label": label, "mode": "continuable"}),
            )
            .unwrap(),
        ),
        max_depth: None,
        fan_out: FanOut::NONE,
        budget: None,
        node: Some(node(on)),
        run: None,
        start_within_ms: None,
        hosted: true,
    });
    assert!(matches!(got, CommandResponse::Registered { .. }), "{got:?}");
}

/// 3 trees, 300 sessions, random parents, labels, nodes and times (several per ms).
fn forest(rng: &mut Lcg) -> RegistryState {
    let mut s = RegistryState::new();
    let mut ids: Vec<u32> = Vec::new();
    for n in 1..=300u32 {
        let at = 1_000 + u64::from(n / 3);
        let label = ["reviewer", "worker", "leaf"][rng.below(3) as usize];
        let on = 1 + rng.below(3);
        if n <= 3 {
            register(
                &mut s,
                n,
                SessionHeader::top_level(sid(n), None, None),
                label,
                on,
                at,
            );
        } else {
            let parent = ids[rng.below(ids.len() as u32) as usize];
            let p = s.session(&sid(parent)).unwrap();
            let header = child_session_meta(&p.header, sid(n), p.depth() + 1, 0, None).unwrap();
            register(&mut s, n, header, label, on, at);
        }
        ids.push(n);
    }
    s
}

/// Every page of `filter` with pages of `limit`; panics if the walk does not end.
fn walk(s: &RegistryState, filter: &ListFilter, limit: u32) -> Vec<SessionId> {
    let mut out = Vec::new();
    let mut after: Option<ListCursor> = None;
    for _ in 0..10_000 {
        let (page, next) = s.list_page(filter, after.as_ref(), limit);
        assert!(page.len() <= limit as usize);
        out.extend(page.iter().map(|r| r.id().clone()));
        match next {
            Some(c) => after = Some(c),
            None => return out,
        }
    }
    panic!("the walk of {filter:?} did not end");
}

fn brute(s: &RegistryState, filter: &ListFilter) -> Vec<SessionId> {
    let mut all: Vec<&SessionRecord> = s.sessions().filter(|r| filter.matches(r)).collect();
    all.sort_by_key(|r| (r.created_at_ms, r.id().clone()));
    all.into_iter().map(|r| r.id().clone()).collect()
}

fn filters() -> Vec<ListFilter> {
    let mut out = vec![ListFilter::default()];
    for root in [1, 2, 3, 999] {
        out.push(ListFilter {
            root: Some(sid(root)),
            ..Default::default()
        });
    }
    for parent in [1, 4, 7, 999] {
        out.push(ListFilter {
            parent: Some(sid(parent)),
            ..Default::default()
        });
    }
    for state in SessionState::ALL {
        out.push(ListFilter {
            state: Some(state),
            ..Default::default()
        });
        out.push(ListFilter {
            state: Some(state),
            node: Some(node(2)),
            label: Some("worker".into()),
            ..Default::default()
        });
    }
    for n in [1, 2, 3, 9] {
        out.push(ListFilter {
            node: Some(node(n)),
            created_before_ms: Some(1_050),
            ..Default::default()
        });
    }
    for label in ["reviewer", "leaf", "nobody"] {
        out.push(ListFilter {
            label: Some(label.into()),
            root: Some(sid(2)),
            ..Default::default()
        });
    }
    out.push(ListFilter {
        created_before_ms: Some(1_020),
        ..Default::default()
    });
    out
}

fn check_all(s: &RegistryState) {
    for filter in filters() {
        let want = brute(s, &filter);
        for limit in [1, 7, 1_000] {
            assert_eq!(
                walk(s, &filter, limit),
                want,
                "{filter:?} in pages of {limit}"
            );
        }
    }
}

#[test]
fn q4_every_filter_walked_in_pages_returns_exactly_the_matching_sessions_oldest_first() {
    let mut rng = Lcg(7);
    let s = forest(&mut rng);
    let everyone = walk(&s, &ListFilter::default(), 1_000);
    assert_eq!(everyone.len(), 300);
    check_all(&s);
    // Not vacuous: the filters do select different, non-empty sets.
    let workers = brute(
        &s,
        &ListFilter {
            label: Some("worker".into()),
            ..Default::default()
        },
    );
    assert!(!workers.is_empty() && workers.len() < 300);
}

#[test]
fn q4_the_indexes_follow_state_changes_moves_label_changes_and_disposal() {
    let mut rng = Lcg(11);
    let mut s = forest(&mut rng);
    let mut changed = 0;
    for n in 1..=300u32 {
        let record = s.session(&sid(n)).unwrap().clone();
        let epoch = record.placement.as_ref().map_or(0, |p| p.epoch);
        let cmd = match rng.below(4) {
            0 => Command::SetState {
                stop_reason: None,
                request_id: rid("state", n),
                at_ms: 5_000,
                session: sid(n),
                state: SessionState::Settled,
                expected_epoch: None,
            },
            1 => Command::ClaimPlacement {
                request_id: rid("claim", n),
                at_ms: 5_000,
                session: sid(n),
                node: node(3 + rng.below(2)),
                expected_epoch: epoch,
                run: None,
                activate: false,
            },
            2 => Command::SetDescriptor {
                request_id: rid("desc", n),
                at_ms: 5_000,
                session: sid(n),
                descriptor: json!({"provider": "scripted", "label": "renamed", "mode": "continuable"}),
            },
            _ => continue,
        };
        assert!(!matches!(s.apply(&cmd), CommandResponse::Refused(_)));
        changed += 1;
    }
    assert!(changed > 100);
    // Dispose leaves first: every childless live session, twice over.
    for _ in 0..2 {
        for n in (1..=300u32).rev() {
            let r = s.session(&sid(n)).unwrap();
            if r.children
                .iter()
                .all(|c| s.session(c).unwrap().state == SessionState::Disposed)
                && rng.below(2) == 0
            {
                s.apply(&Command::Dispose {
                    stop_reason: None,
                    request_id: rid(&format!("dispose-{}", rng.below(1_000_000)), n),
                    at_ms: 6_000,
                    session: sid(n),
                });
            }
        }
    }
    let disposed = brute(
        &s,
        &ListFilter {
            state: Some(SessionState::Disposed),
            ..Default::default()
        },
    );
    assert!(!disposed.is_empty());
    check_all(&s);
    let renamed = ListFilter {
        label: Some("renamed".into()),
        ..Default::default()
    };
    assert!(!walk(&s, &renamed, 10).is_empty());
    // A snapshot round trip rebuilds the same indexes.
    let restored: RegistryState =
        serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(restored, s);
    for filter in filters() {
        assert_eq!(
            walk(&restored, &filter, 7),
            walk(&s, &filter, 7),
            "{filter:?}"
        );
    }
}

#[test]
fn q4_the_smallest_named_set_drives_and_every_page_is_bounded() {
    let mut s = RegistryState::new();
    let total = (LIST_SCAN_MAX as u32) * 2 + 5;
    for n in 1..=total {
        let label = if n == total { "last" } else { "many" };
        register(
            &mut s,
            n,
            SessionHeader::top_level(sid(n), None, None),
            label,
            1,
            u64::from(n),
        );
    }
    // Node 1 holds them all, label `last` one: the label's set drives, one look-up.
    let one = ListFilter {
        node: Some(node(1)),
        label: Some("last".into()),
        ..Default::default()
    };
    let (page, next) = s.list_page(&one, None, 10);
    assert_eq!(page.len(), 1);
    assert_eq!(next, None);
    // Everything matches: full pages, one cursor each, until the last.
    let running = ListFilter {
        state: Some(SessionState::Running),
        ..Default::default()
    };
    let mut pages = 0;
    let mut seen = 0;
    let mut after: Option<ListCursor> = None;
    loop {
        let (page, next) = s.list_page(&running, after.as_ref(), 1_000);
        pages += 1;
        seen += page.len();
        assert!(pages <= 100, "the walk ends");
        match next {
            Some(c) => after = Some(c),
            None => break,
        }
    }
    assert_eq!(seen, total as usize);
    assert_eq!(pages, (total as usize).div_ceil(1_000));
}

#[test]
fn q4_a_page_that_examines_its_bound_without_a_match_is_empty_and_says_where_to_go_on() {
    let mut s = RegistryState::new();
    let big = (LIST_SCAN_MAX as u32) + 10;
    // 1..=big: label a on node 2; then big label b on node 1; then 5 label a on node 1.
    for n in 1..=(2 * big + 5) {
        let (label, on) = match n {
            n if n <= big => ("a", 2),
            n if n <= 2 * big => ("b", 1),
            _ => ("a", 1),
        };
        register(
            &mut s,
            n,
            SessionHeader::top_level(sid(n), None, None),
            label,
            on,
            u64::from(n),
        );
    }
    // Label a and node 1 hold big + 5 each; the node's set drives (named first): its first
    // LIST_SCAN_MAX entries are all label b.
    let filter = ListFilter {
        node: Some(node(1)),
        label: Some("a".into()),
        ..Default::default()
    };
    let (page, next) = s.list_page(&filter, None, 100);
    assert!(page.is_empty());
    let next = next.expect("an empty page that examined its bound says where to go on");
    assert_eq!(next.id, sid(big + LIST_SCAN_MAX as u32));
    let (page, again) = s.list_page(&filter, Some(&next), 100);
    let ids: Vec<SessionId> = page.iter().map(|r| r.id().clone()).collect();
    assert_eq!(
        ids,
        ((2 * big + 1)..=(2 * big + 5)).map(sid).collect::<Vec<_>>()
    );
    assert_eq!(again, None);
}

#[test]
fn q4_a_cursor_is_written_and_read_back_and_a_bad_one_is_refused_in_one_line() {
    let c = ListCursor {
        created_at_ms: 1_733_000_000_123,
        id: sid(5),
    };
    let text = c.to_string();
    assert_eq!(text.parse::<ListCursor>().unwrap(), c);
    for bad in [
        "",
        "12",
        "x.01936c1e-7a3b-7cde-8f00-000000000005",
        "12.not-an-id",
    ] {
        let err = bad.parse::<ListCursor>().unwrap_err();
        assert!(
            err.contains("pass the `next` of the previous page"),
            "{err}"
        );
        assert!(!err.contains('\n'));
    }
}
