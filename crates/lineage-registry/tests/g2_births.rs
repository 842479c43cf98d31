//! G2, S1, K1 (issue 10, fault 3): births are `starting` until their node confirms the start.
//! Every rule about a `starting` session, on the pure state machine: the start deadline, the
//! fenced `confirm_start`, what every other command does with it, `expire_start` and the
//! overdue-births query. Each refusal leaves the state (digest) untouched.

use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
use lineage_core::lifecycle::DEFAULT_START_WITHIN_MS;
use lineage_registry::state::OVERDUE_BIRTHS_PAGE;
use lineage_registry::{
    Command, CommandResponse, RegistryRefusal, RegistryState, SessionRecord, SessionState,
};

use lineage_core::ids::sid;
fn rid(s: &str) -> RequestId {
    RequestId::parse(s).unwrap()
}
fn node(s: &str) -> NodeId {
    NodeId::parse(s).unwrap()
}

fn register(n: u32, header: SessionHeader, at_ms: u64, within: Option<u64>) -> Command {
    Command::RegisterSession {
        request_id: rid(&format!("reg-{n}")),
        at_ms,
        header,
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: Some(node("n1")),
        run: None,
        start_within_ms: within,
        hosted: false,
    }
}
fn root(n: u32, at_ms: u64, within: Option<u64>) -> Command {
    register(
        n,
        SessionHeader::top_level(sid(n), None, None),
        at_ms,
        within,
    )
}
fn child(s: &RegistryState, parent: u32, n: u32, at_ms: u64, within: Option<u64>) -> Command {
    let p = s.session(&sid(parent)).unwrap();
    let header = child_session_meta(&p.header, sid(n), p.depth() + 1, 0, None).unwrap();
    register(n, header, at_ms, within)
}
fn confirm(req: &str, n: u32, by: &str, epoch: u64, at_ms: u64) -> Command {
    Command::ConfirmStart {
        request_id: rid(req),
        at_ms,
        session: sid(n),
        node: node(by),
        expected_epoch: epoch,
    }
}
fn expire(req: &str, n: u32, at_ms: u64) -> Command {
    Command::ExpireStart {
        request_id: rid(req),
        at_ms,
        session: sid(n),
    }
}
fn record(s: &RegistryState, n: u32) -> &SessionRecord {
    s.session(&sid(n)).unwrap()
}
fn refused(s: &mut RegistryState, cmd: &Command) -> RegistryRefusal {
    let before = s.digest();
    match s.apply(cmd) {
        CommandResponse::Refused(r) => {
            assert_eq!(s.digest(), before, "a refusal changed the state: {cmd:?}");
            let line = r.to_string();
            assert!(!line.contains('\n'), "one line: {line}");
            r
        }
        other => panic!("{cmd:?} was not refused: {other:?}"),
    }
}
fn overdue(s: &RegistryState, now: u64) -> Vec<SessionId> {
    s.overdue_births(now, OVERDUE_BIRTHS_PAGE)
        .into_iter()
        .map(|r| r.id().clone())
        .collect()
}

#[test]
fn s1_a_birth_is_starting_with_a_deadline_until_its_node_confirms() {
    let mut s = RegistryState::new();
    assert!(matches!(
        s.apply(&root(1, 1_000, None)),
        CommandResponse::Registered { depth: 0, .. }
    ));
    let r = record(&s, 1);
    assert_eq!(r.state, SessionState::Starting);
    assert_eq!(r.start_deadline_ms, Some(1_000 + DEFAULT_START_WITHIN_MS));
    assert_eq!(s.session_counts()["starting"], 1);
    assert_eq!(s.session_counts()["running"], 0);

    // Only the node it is placed on, with its epoch, confirms.
    assert!(matches!(
        refused(&mut s, &confirm("c-wrong-node", 1, "n2", 1, 1_500)),
        RegistryRefusal::WrongNode { placed_on, .. } if placed_on.as_str() == "n1"
    ));
    assert!(matches!(
        refused(&mut s, &confirm("c-wrong-epoch", 1, "n1", 2, 1_500)),
        RegistryRefusal::EpochMismatch {
            expected: 2,
            current: 1,
            ..
        }
    ));
    let ok = s.apply(&confirm("c1", 1, "n1", 1, 1_500));
    assert!(
        matches!(&ok, CommandResponse::Started { placement, .. } if placement.epoch == 1 && placement.node.as_str() == "n1"),
        "{ok:?}"
    );
    let r = record(&s, 1);
    assert_eq!((r.state, r.updated_at_ms), (SessionState::Running, 1_500));
    // The deadline stays on the record (a record of the birth), but it is no longer overdue.
    assert_eq!(r.start_deadline_ms, Some(1_000 + DEFAULT_START_WITHIN_MS));
    assert!(overdue(&s, u64::MAX).is_empty());
    // A retry of the same confirmation returns its first result; another one is refused.
    assert_eq!(s.apply(&confirm("c1", 1, "n1", 1, 1_500)), ok);
    assert!(matches!(
        refused(&mut s, &confirm("c2", 1, "n1", 1, 1_600)),
        RegistryRefusal::NotStarting {
            state: SessionState::Running,
            ..
        }
    ));
}

#[test]
fn k1_an_unplaced_birth_is_placed_by_the_node_that_confirms_it() {
    let mut s = RegistryState::new();
    let cmd = Command::RegisterSession {
        request_id: rid("reg"),
        at_ms: 5,
        header: SessionHeader::top_level(sid(1), None, None),
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: None,
        run: None,
        start_within_ms: Some(100),
        hosted: false,
    };
    s.apply(&cmd);
    assert_eq!(record(&s, 1).start_deadline_ms, Some(105));
    assert!(matches!(
        refused(&mut s, &confirm("c0", 1, "n7", 1, 6)),
        RegistryRefusal::EpochMismatch { current: 0, .. }
    ));
    assert!(matches!(
        s.apply(&confirm("c1", 1, "n7", 0, 6)),
        CommandResponse::Started { placement, .. } if placement.epoch == 1 && placement.node.as_str() == "n7"
    ));
}

#[test]
fn g2_a_starting_session_cannot_be_claimed_change_state_or_take_children() {
    let mut s = RegistryState::new();
    s.apply(&root(1, 10, None));
    let claim = Command::ClaimPlacement {
        request_id: rid("claim"),
        at_ms: 20,
        session: sid(1),
        node: node("n2"),
        expected_epoch: 1,
        run: Some(RunId::parse("01ARZ3NDEKTSV4RRFFQ69G5FAV").unwrap()),
        activate: true,
    };
    let r = refused(&mut s, &claim);
    assert_eq!(r.kind(), "not_started");
    assert!(r.to_string().contains("still starting"), "{r}");
    assert!(r.to_string().contains("placement claim"), "{r}");
    for state in [
        SessionState::Running,
        SessionState::Waiting,
        SessionState::Settled,
    ] {
        for fence in [None, Some(1)] {
            let set = Command::SetState {
                stop_reason: None,
                request_id: rid(
                    &format!("set-{}-{fence:?}", state.as_str()).replace(['(', ')'], "")
                ),
                at_ms: 20,
                session: sid(1),
                state,
                expected_epoch: fence,
            };
            let r = refused(&mut s, &set);
            assert_eq!(r.kind(), "not_started", "{state:?}");
            assert!(r.to_string().contains(state.as_str()), "{r}");
        }
    }
    // set_state disposed is still use_dispose (the rule about the command, first).
    let set_disposed = Command::SetState {
        stop_reason: None,
        request_id: rid("set-disposed"),
        at_ms: 20,
        session: sid(1),
        state: SessionState::Disposed,
        expected_epoch: None,
    };
    assert_eq!(refused(&mut s, &set_disposed).kind(), "use_dispose");
    // No child under a parent that no node hosts yet.
    let c = child(&s, 1, 2, 20, None);
    assert!(matches!(
        refused(&mut s, &c),
        RegistryRefusal::NotStarted { session, refused } if session == sid(1) && refused == "a child"
    ));
    // Run, descriptor and admission changes are allowed (a drain closes it like any other).
    assert!(matches!(
        s.apply(&Command::AppendRun {
            request_id: rid("run"),
            at_ms: 21,
            session: sid(1),
            run: RunId::parse("01ARZ3NDEKTSV4RRFFQ69G5FAV").unwrap(),
        }),
        CommandResponse::RunAppended { runs: 1, .. }
    ));
    assert!(matches!(
        s.apply(&Command::CloseAdmission {
            request_id: rid("close"),
            at_ms: 22,
            roots: vec![sid(1)],
        }),
        CommandResponse::AdmissionClosed { .. }
    ));
    assert_eq!(record(&s, 1).state, SessionState::Starting);
    // Once started, the same child registers.
    let mut s2 = RegistryState::new();
    s2.apply(&root(1, 10, None));
    s2.apply(&confirm("c", 1, "n1", 1, 11));
    assert!(matches!(
        s2.apply(&child(&s2, 1, 2, 12, None)),
        CommandResponse::Registered { depth: 1, .. }
    ));
    assert_eq!(record(&s2, 2).state, SessionState::Starting);
}

#[test]
fn s1_a_starting_session_may_be_disposed_and_then_never_starts() {
    let mut s = RegistryState::new();
    s.apply(&root(1, 10, Some(50)));
    assert!(matches!(
        s.apply(&Command::Dispose {
            stop_reason: None,
            request_id: rid("d"),
            at_ms: 20,
            session: sid(1),
        }),
        CommandResponse::Disposed { already: false, .. }
    ));
    assert!(
        overdue(&s, 1_000).is_empty(),
        "a disposed birth is not overdue"
    );
    // The node's late confirmation is refused: it launches nothing.
    assert_eq!(
        refused(&mut s, &confirm("late", 1, "n1", 1, 30)).kind(),
        "session_disposed"
    );
    // Expiring it now changes nothing and says so (nobody is told twice).
    assert!(matches!(
        s.apply(&expire("x", 1, 1_000)),
        CommandResponse::Disposed { already: true, .. }
    ));
}

#[test]
fn s1_expire_start_disposes_only_an_overdue_birth() {
    let mut s = RegistryState::new();
    s.apply(&root(1, 10, None));
    s.apply(&confirm("c1", 1, "n1", 1, 11));
    s.apply(&child(&s, 1, 2, 100, Some(1_000)));
    s.apply(&child(&s, 1, 3, 100, Some(500)));
    s.apply(&child(&s, 1, 4, 200, Some(500)));
    // Overdue births: oldest deadline first, bounded by the page size, none before the time.
    assert!(overdue(&s, 599).is_empty());
    assert_eq!(overdue(&s, 600), [sid(3)]);
    assert_eq!(overdue(&s, 700), [sid(3), sid(4)]);
    assert_eq!(overdue(&s, 1_100), [sid(3), sid(4), sid(2)]);
    assert_eq!(
        s.overdue_births(1_100, 2).len(),
        2,
        "the page bounds the answer"
    );
    assert_eq!(s.overdue_births(1_100, 0).len(), 1, "at least one");

    // Not due yet: refused, with the deadline.
    assert!(matches!(
        refused(&mut s, &expire("x2-early", 2, 1_099)),
        RegistryRefusal::StartNotDue {
            start_deadline_ms: 1_100,
            ..
        }
    ));
    // A birth that started meanwhile is never disposed by the sweeper.
    s.apply(&Command::ConfirmStart {
        request_id: rid("c4"),
        at_ms: 650,
        session: sid(4),
        node: node("n1"),
        expected_epoch: 1,
    });
    assert!(matches!(
        refused(&mut s, &expire("x4", 4, 10_000)),
        RegistryRefusal::NotStarting {
            state: SessionState::Running,
            ..
        }
    ));
    // Overdue: disposed (and admission closed), gone from the query.
    let first = s.apply(&expire("x3", 3, 700));
    assert!(matches!(
        first,
        CommandResponse::Disposed { already: false, .. }
    ));
    assert_eq!(record(&s, 3).state, SessionState::Disposed);
    assert_eq!(record(&s, 3).updated_at_ms, 700);
    assert_eq!(overdue(&s, 1_100), [sid(2)]);
    // The same sweep retried (same request id) gets the first answer: two sweepers that race
    // with one request id per birth both learn that this birth was theirs to report.
    assert_eq!(s.apply(&expire("x3", 3, 900)), first);
    assert!(matches!(
        refused(&mut s, &expire("x-unknown", 9, 900)),
        RegistryRefusal::UnknownSession { .. }
    ));
}

#[test]
fn g2_the_births_index_survives_a_snapshot_round_trip() {
    let mut s = RegistryState::new();
    s.apply(&root(1, 10, Some(5)));
    s.apply(&root(2, 10, Some(50)));
    s.apply(&confirm("c2", 2, "n1", 1, 11));
    let restored: RegistryState = serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
    assert_eq!(restored, s);
    assert_eq!(overdue(&restored, 1_000), [sid(1)]);
    assert_eq!(restored.digest(), s.digest());
}

#[test]
fn g2_a_record_without_a_deadline_reads_as_before() {
    // Records written before births had deadlines carry no `start_deadline_ms` field; they
    // still decode, and a record without one serializes without it (digests unchanged).
    let mut s = RegistryState::new();
    s.apply(&root(1, 10, None));
    let mut json = serde_json::to_value(record(&s, 1)).unwrap();
    json.as_object_mut().unwrap().remove("start_deadline_ms");
    let old: SessionRecord = serde_json::from_value(json.clone()).unwrap();
    assert_eq!(old.start_deadline_ms, None);
    assert_eq!(serde_json::to_value(&old).unwrap(), json);
}
