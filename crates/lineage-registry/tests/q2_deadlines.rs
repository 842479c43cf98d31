//! Q2: deadlines on the pure state machine. A header's deadline is frozen at birth; a child's is
//! never later than its parent's (refused with the numbers otherwise, and nothing changes);
//! the undisposed sessions are indexed by deadline for the sweeper's query, which forgets a
//! session once it is disposed and survives a snapshot round trip.

use lineage_core::fanout::FanOut;
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_registry::{Command, CommandResponse, RegistryRefusal, RegistryState};

use lineage_core::ids::sid;

fn register(n: u32, header: SessionHeader) -> Command {
    Command::RegisterSession {
        request_id: RequestId::parse(&format!("reg-{n}")).unwrap(),
        at_ms: u64::from(n),
        header,
        descriptor: None,
        max_depth: None,
        fan_out: FanOut::NONE,
        budget: None,
        node: Some(NodeId::parse("n1").unwrap()),
        run: None,
        start_within_ms: None,
        hosted: true,
    }
}

fn apply_ok(s: &mut RegistryState, cmd: Command) {
    let got = s.apply(&cmd);
    assert!(matches!(got, CommandResponse::Registered { .. }), "{got:?}");
}

fn child_header(s: &RegistryState, parent: u32, n: u32, requested: Option<u64>) -> SessionHeader {
    let p = s.session(&sid(parent)).unwrap();
    child_session_meta(&p.header, sid(n), p.depth() + 1, 0, None)
        .unwrap()
        .with_deadline(requested)
}

/// The same header with its deadline field replaced (as a forged or buggy writer would send).
fn with_raw_deadline(header: &SessionHeader, deadline: Option<u64>) -> SessionHeader {
    let mut json = serde_json::to_value(header).unwrap();
    let map = json.as_object_mut().unwrap();
    match deadline {
        Some(d) => map.insert("deadline_at_ms".into(), d.into()),
        None => map.remove("deadline_at_ms"),
    };
    serde_json::from_value(json).unwrap()
}

fn overdue(s: &RegistryState, now: u64) -> Vec<SessionId> {
    s.overdue_deadlines(now, 256)
        .iter()
        .map(|r| r.id().clone())
        .collect()
}

fn tree() -> RegistryState {
    let mut s = RegistryState::new();
    apply_ok(
        &mut s,
        register(
            1,
            SessionHeader::top_level(sid(1), None, None).with_deadline(Some(10_000)),
        ),
    );
    let h = child_header(&s, 1, 2, Some(60_000));
    apply_ok(&mut s, register(2, h));
    let h = child_header(&s, 2, 3, Some(4_000));
    apply_ok(&mut s, register(3, h));
    s
}

#[test]
fn q2_a_child_asking_for_a_later_deadline_gets_its_parents() {
    let s = tree();
    let deadline = |n| s.session(&sid(n)).unwrap().header.deadline_at_ms();
    assert_eq!(deadline(1), Some(10_000));
    assert_eq!(
        deadline(2),
        Some(10_000),
        "min(parent's 10 s, requested 60 s)"
    );
    assert_eq!(deadline(3), Some(4_000), "a child may shorten it");
}

#[test]
fn q2_a_header_with_a_later_or_no_deadline_is_refused_and_changes_nothing() {
    let mut s = tree();
    let honest = child_header(&s, 2, 4, None);
    for (forged, found) in [
        (with_raw_deadline(&honest, Some(10_001)), Some(10_001)),
        (with_raw_deadline(&honest, None), None),
    ] {
        let before = s.digest();
        let got = s.apply(&register(4, forged));
        let CommandResponse::Refused(refusal) = got else {
            panic!("a later deadline was accepted: {got:?}");
        };
        assert_eq!(
            refusal,
            RegistryRefusal::DeadlineBeyondParent {
                parent: sid(2),
                parent_deadline_ms: 10_000,
                found,
            }
        );
        assert_eq!(refusal.kind(), "deadline_beyond_parent");
        let line = refusal.to_string();
        assert!(
            line.contains("later than its parent")
                && line.contains("10000 ms")
                && !line.contains('\n'),
            "{line}"
        );
        assert_eq!(s.digest(), before);
        assert!(s.session(&sid(4)).is_none());
    }
    // The honest header (the parent's deadline) is accepted.
    apply_ok(&mut s, register(4, honest));
}

#[test]
fn q2_overdue_deadlines_are_indexed_earliest_first_and_forgotten_once_disposed() {
    let mut s = tree();
    assert!(overdue(&s, 3_999).is_empty());
    assert_eq!(overdue(&s, 4_000), vec![sid(3)]);
    assert_eq!(overdue(&s, 10_000), vec![sid(3), sid(1), sid(2)]);
    assert_eq!(
        s.overdue_deadlines(10_000, 1).len(),
        1,
        "the page is bounded"
    );
    // A snapshot round trip rebuilds the (unserialized) index.
    let back: RegistryState = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(overdue(&back, 10_000), overdue(&s, 10_000));
    assert_eq!(back.digest(), s.digest());
    let got = s.apply(&Command::Dispose {
        stop_reason: None,
        request_id: RequestId::parse("dispose-3").unwrap(),
        at_ms: 5_000,
        session: sid(3),
    });
    assert!(matches!(got, CommandResponse::Disposed { .. }), "{got:?}");
    assert_eq!(overdue(&s, 10_000), vec![sid(1), sid(2)]);
    // A session without a deadline is never listed.
    apply_ok(
        &mut s,
        register(9, SessionHeader::top_level(sid(9), None, None)),
    );
    assert_eq!(overdue(&s, u64::MAX), vec![sid(1), sid(2)]);
}
