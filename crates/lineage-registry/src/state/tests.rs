//! Unit tests of the state machine.

use super::*;
use crate::types::ClaimedSession;
use lineage_core::header::child_session_meta;

mod results;

use lineage_core::ids::sid;
fn rid(s: &str) -> RequestId {
    RequestId::parse(s).unwrap()
}
fn root_cmd(n: u32, max: Option<u64>) -> Command {
    Command::RegisterSession {
        request_id: rid(&format!("r{n}")),
        at_ms: 1,
        header: SessionHeader::top_level(sid(n), None, None),
        descriptor: None,
        max_depth: max.map(|m| MaxDepth::new(m).unwrap()),
        fan_out: Default::default(),
        budget: None,
        node: Some(NodeId::parse("n1").unwrap()),
        run: None,
        start_within_ms: None,
        hosted: false,
    }
}
/// Confirms the start of session `n` on `n1` (a root is placed there at epoch 1; a child
/// registered without a node is placed by the confirmation).
fn start(s: &mut RegistryState, n: u32) {
    let epoch = s
        .session(&sid(n))
        .unwrap()
        .placement
        .as_ref()
        .map_or(0, |p| p.epoch);
    let confirm = Command::ConfirmStart {
        request_id: rid(&format!("start-{n}")),
        at_ms: 2,
        session: sid(n),
        node: NodeId::parse("n1").unwrap(),
        expected_epoch: epoch,
    };
    assert!(
        matches!(s.apply(&confirm), CommandResponse::Started { .. }),
        "start of {n}"
    );
}
fn child_cmd(state: &RegistryState, parent: u32, n: u32) -> Command {
    let p = state.session(&sid(parent)).unwrap();
    let header = child_session_meta(&p.header, sid(n), p.depth() + 1, 0, None).unwrap();
    Command::RegisterSession {
        request_id: rid(&format!("r{n}")),
        at_ms: 2,
        header,
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: None,
        run: None,
        start_within_ms: None,
        hosted: false,
    }
}

#[test]
fn s1_k1_a_hosted_registration_is_running_at_once_with_no_deadline() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    let Command::RegisterSession {
        request_id,
        at_ms,
        header,
        ..
    } = child_cmd(&s, 1, 2)
    else {
        unreachable!()
    };
    let hosted = |node: Option<&str>| Command::RegisterSession {
        request_id: request_id.clone(),
        at_ms,
        header: header.clone(),
        descriptor: None,
        max_depth: None,
        fan_out: Default::default(),
        budget: None,
        node: node.map(|n| NodeId::parse(n).unwrap()),
        run: None,
        start_within_ms: Some(5),
        hosted: true,
    };
    // Hosted without naming the node that hosts it: refused, nothing changes.
    let CommandResponse::Refused(refusal) = s.apply(&hosted(None)) else {
        panic!("a hosted birth needs its node")
    };
    assert_eq!(refusal.kind(), "malformed");
    assert!(refusal.to_string().contains("name the node that hosts it"));
    assert!(s.session(&sid(2)).is_none());
    // Hosted on n2: running, placed at epoch 1, never an overdue birth.
    assert!(matches!(
        s.apply(&hosted(Some("n2"))),
        CommandResponse::Registered { depth: 1, .. }
    ));
    let record = s.session(&sid(2)).unwrap();
    assert_eq!(record.state, SessionState::Running);
    assert_eq!(record.start_deadline_ms, None);
    assert_eq!(record.placement.as_ref().map(|p| p.epoch), Some(1));
    assert!(s.overdue_births(u64::MAX, 10).is_empty());
    // Its node has nothing to confirm: it started.
    let confirm = Command::ConfirmStart {
        request_id: rid("confirm-2"),
        at_ms: 3,
        session: sid(2),
        node: NodeId::parse("n2").unwrap(),
        expected_epoch: 1,
    };
    assert!(matches!(s.apply(&confirm), CommandResponse::Refused(_)));
    assert!(s.session(&sid(1)).unwrap().children.contains(&sid(2)));
}

#[test]
fn g2_register_root_and_child_links_lineage() {
    let mut s = RegistryState::new();
    assert!(matches!(
        s.apply(&root_cmd(1, Some(2))),
        CommandResponse::Registered { depth: 0, .. }
    ));
    start(&mut s, 1);
    let c = child_cmd(&s, 1, 2);
    assert!(matches!(
        s.apply(&c),
        CommandResponse::Registered { depth: 1, .. }
    ));
    assert!(s.session(&sid(1)).unwrap().children.contains(&sid(2)));
    assert!(s.is_ancestor(&sid(1), &sid(2)));
    assert!(!s.is_ancestor(&sid(2), &sid(1)));
    assert_eq!(s.subtree(&sid(1)).len(), 2);
}

#[test]
fn subtree_pages_cover_the_subtree_parents_first() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    // 1 -> {2, 3}, 2 -> {4, 5}, 3 -> {6}, 6 -> {7}
    start(&mut s, 1);
    for (parent, child) in [(1, 3), (1, 2), (3, 6), (2, 5), (2, 4), (6, 7)] {
        let c = child_cmd(&s.clone(), parent, child);
        assert!(matches!(s.apply(&c), CommandResponse::Registered { .. }));
        if [2, 3, 6].contains(&child) {
            start(&mut s, child);
        }
    }
    for limit in 1..=8 {
        let mut all = Vec::new();
        let mut after: Option<SessionId> = None;
        loop {
            let (page, more) = s.subtree_page(&sid(1), after.as_ref(), limit);
            assert!(page.len() <= limit);
            after = page.last().map(|r| r.id().clone());
            all.extend(page.into_iter().map(|r| r.id().clone()));
            if !more {
                break;
            }
        }
        let expected: Vec<SessionId> = [1, 2, 3, 4, 5, 6, 7].into_iter().map(sid).collect();
        assert_eq!(all, expected, "limit {limit}");
    }
    let (page, more) = s.subtree_page(&sid(3), None, 10);
    assert_eq!(page.len(), 3);
    assert!(!more);
    // A cursor outside the subtree, or an unknown root: an empty last page.
    assert_eq!(s.subtree_page(&sid(3), Some(&sid(2)), 10), (vec![], false));
    assert_eq!(s.subtree_page(&sid(99), None, 10), (vec![], false));
}

#[test]
fn g2_depth_over_the_recorded_max_is_refused() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, Some(1)));
    start(&mut s, 1);
    s.apply(&child_cmd(&s.clone(), 1, 2));
    start(&mut s, 2);
    let before = s.digest();
    let r = s.apply(&child_cmd(&s.clone(), 2, 3));
    assert_eq!(
        r,
        CommandResponse::Refused(RegistryRefusal::DepthExceeded {
            attempted_depth: 2,
            max_depth: 1
        })
    );
    assert_eq!(s.digest(), before);
}

#[test]
fn x1_dispose_refused_while_children_live_and_admission_blocks_children() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    s.apply(&child_cmd(&s.clone(), 1, 2));
    start(&mut s, 2);
    let d = Command::Dispose {
        stop_reason: None,
        request_id: rid("d1"),
        at_ms: 3,
        session: sid(1),
    };
    assert!(matches!(
        s.apply(&d),
        CommandResponse::Refused(RegistryRefusal::UndisposedChildren { count: 1, .. })
    ));
    let close = Command::CloseAdmission {
        request_id: rid("c1"),
        at_ms: 3,
        roots: vec![sid(1)],
    };
    assert!(
        matches!(s.apply(&close), CommandResponse::AdmissionClosed { ref sessions } if sessions.len() == 2)
    );
    assert!(matches!(
        s.apply(&child_cmd(&s.clone(), 2, 3)),
        CommandResponse::Refused(RegistryRefusal::AdmissionClosed { .. })
    ));
    let d2 = Command::Dispose {
        stop_reason: None,
        request_id: rid("d2"),
        at_ms: 4,
        session: sid(2),
    };
    assert!(matches!(
        s.apply(&d2),
        CommandResponse::Disposed { already: false, .. }
    ));
    let d1b = Command::Dispose {
        stop_reason: None,
        request_id: rid("d1b"),
        at_ms: 5,
        session: sid(1),
    };
    assert!(matches!(
        s.apply(&d1b),
        CommandResponse::Disposed { already: false, .. }
    ));
}

#[test]
fn k1_claim_placement_has_one_winner() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    let claim = |r: &str, node: &str| Command::ClaimPlacement {
        request_id: rid(r),
        at_ms: 9,
        session: sid(1),
        node: NodeId::parse(node).unwrap(),
        expected_epoch: 1,
        run: None,
        activate: false,
    };
    assert!(
        matches!(s.apply(&claim("a", "n2")), CommandResponse::Placed { placement, .. } if placement.epoch == 2)
    );
    assert!(matches!(
        s.apply(&claim("b", "n3")),
        CommandResponse::Refused(RegistryRefusal::EpochMismatch { current: 2, .. })
    ));
}

#[test]
fn k1_a_winning_claim_answers_with_the_usage_and_children_it_found() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    let claim = |r: &str, epoch| Command::ClaimPlacement {
        request_id: rid(r),
        at_ms: 9,
        session: sid(1),
        node: NodeId::parse("n2").unwrap(),
        expected_epoch: epoch,
        run: None,
        activate: true,
    };
    let claimed = |response: CommandResponse| match response {
        CommandResponse::Placed { claimed, .. } => claimed.map(|c| *c),
        other => panic!("not placed: {other:?}"),
    };
    // Nothing reported, no children yet.
    assert_eq!(
        claimed(s.apply(&claim("c1", 1))),
        Some(ClaimedSession {
            usage: None,
            has_children: false
        })
    );
    // Usage written and a child registered since: the next claim answers with both.
    let usage = lineage_core::usage::SessionUsage {
        used_tokens: 1234,
        ..Default::default()
    };
    s.apply(&Command::RecordUsage {
        request_id: rid("u"),
        at_ms: 10,
        session: sid(1),
        usage: usage.clone(),
        expected_epoch: None,
    });
    s.apply(&child_cmd(&s, 1, 2));
    assert_eq!(
        claimed(s.apply(&claim("c2", 2))),
        Some(ClaimedSession {
            usage: Some(usage),
            has_children: true
        })
    );
}

#[test]
fn k1_claim_records_the_run_and_running_state_in_the_same_write() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    let set = Command::SetState {
        stop_reason: None,
        request_id: rid("s"),
        at_ms: 3,
        session: sid(1),
        state: SessionState::Settled,
        expected_epoch: None,
    };
    s.apply(&set);
    let run = RunId::parse("01ARZ3NDEKTSV4RRFFQ69G5FAV").unwrap();
    let claim = |r: &str, expected_epoch| Command::ClaimPlacement {
        request_id: rid(r),
        at_ms: 9,
        session: sid(1),
        node: NodeId::parse("n2").unwrap(),
        expected_epoch,
        run: Some(run.clone()),
        activate: true,
    };
    // A losing claim changes nothing: no run, state unchanged.
    assert!(matches!(
        s.apply(&claim("lose", 7)),
        CommandResponse::Refused(RegistryRefusal::EpochMismatch { .. })
    ));
    let r = s.session(&sid(1)).unwrap();
    assert_eq!((r.state, r.runs.len()), (SessionState::Settled, 0));
    let current = r.placement.as_ref().map_or(0, |p| p.epoch);
    assert!(matches!(
        s.apply(&claim("win", current)),
        CommandResponse::Placed { placement, .. } if placement.epoch == current + 1
    ));
    let r = s.session(&sid(1)).unwrap();
    assert_eq!(r.state, SessionState::Running);
    assert_eq!(r.runs.as_slice(), std::slice::from_ref(&run));
    assert_eq!(r.updated_at_ms, 9);
}

#[test]
fn k1_a_state_write_from_a_superseded_placement_is_refused() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    let epoch = s
        .session(&sid(1))
        .unwrap()
        .placement
        .as_ref()
        .map_or(0, |p| p.epoch);
    let claim = Command::ClaimPlacement {
        request_id: rid("c"),
        at_ms: 5,
        session: sid(1),
        node: NodeId::parse("n2").unwrap(),
        expected_epoch: epoch,
        run: None,
        activate: false,
    };
    assert!(matches!(s.apply(&claim), CommandResponse::Placed { .. }));
    let set = |r: &str, expected_epoch| Command::SetState {
        stop_reason: None,
        request_id: rid(r),
        at_ms: 6,
        session: sid(1),
        state: SessionState::Settled,
        expected_epoch,
    };
    // The old host (it still holds the old epoch) is fenced off; nothing changes.
    let before = s.digest();
    assert!(matches!(
        s.apply(&set("old", Some(epoch))),
        CommandResponse::Refused(RegistryRefusal::EpochMismatch { expected, current, .. })
            if expected == epoch && current == epoch + 1
    ));
    assert_eq!(s.digest(), before);
    // The new one is not; an unfenced write (an operator's) is not either.
    assert!(matches!(
        s.apply(&set("new", Some(epoch + 1))),
        CommandResponse::StateSet { .. }
    ));
    assert!(matches!(
        s.apply(&set("any", None)),
        CommandResponse::StateSet { .. }
    ));
}

#[test]
fn q3_usage_is_recorded_replaced_and_fenced_by_the_epoch() {
    use lineage_core::usage::SessionUsage;
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    let epoch = s
        .session(&sid(1))
        .unwrap()
        .placement
        .as_ref()
        .map_or(0, |p| p.epoch);
    let record = |r: &str, tokens, expected_epoch| Command::RecordUsage {
        request_id: rid(r),
        at_ms: 7,
        session: sid(1),
        usage: SessionUsage {
            used_tokens: tokens,
            ..Default::default()
        },
        expected_epoch,
    };
    assert!(matches!(
        s.apply(&record("u1", 10, Some(epoch))),
        CommandResponse::UsageRecorded { .. }
    ));
    assert!(matches!(
        s.apply(&record("u2", 25, Some(epoch))),
        CommandResponse::UsageRecorded { .. }
    ));
    assert_eq!(
        s.session(&sid(1))
            .unwrap()
            .usage
            .as_ref()
            .unwrap()
            .used_tokens,
        25,
        "replaced, not added: a report is the usage so far"
    );
    let before = s.digest();
    assert!(matches!(
        s.apply(&record("u3", 99, Some(epoch + 1))),
        CommandResponse::Refused(RegistryRefusal::EpochMismatch { .. })
    ));
    let unknown = Command::RecordUsage {
        request_id: rid("u4"),
        at_ms: 8,
        session: sid(9),
        usage: SessionUsage::default(),
        expected_epoch: None,
    };
    assert!(matches!(
        s.apply(&unknown),
        CommandResponse::Refused(RegistryRefusal::UnknownSession { .. })
    ));
    assert_eq!(s.digest(), before, "refusals change nothing");
    // A report that arrives after its session was disposed (a drain raced the turn that
    // spent it) still counts, fenced by the epoch as before.
    s.apply(&Command::Dispose {
        stop_reason: None,
        request_id: rid("d1"),
        at_ms: 9,
        session: sid(1),
    });
    assert!(matches!(
        s.apply(&record("u5", 40, Some(epoch))),
        CommandResponse::UsageRecorded { .. }
    ));
    assert_eq!(s.subtree_usage(&sid(1)).used_tokens, 40);
    assert!(matches!(
        s.apply(&record("u6", 50, Some(epoch + 1))),
        CommandResponse::Refused(RegistryRefusal::EpochMismatch { .. })
    ));
}

#[test]
fn refusal_messages_are_one_line() {
    let r = RegistryRefusal::ParentMissing { parent: sid(1) };
    let m = r.to_string();
    assert!(m.contains("register the parent first") && !m.contains('\n'));
}

#[test]
fn q4_the_index_rebuilt_at_load_is_the_index_apply_keeps() {
    let mut s = RegistryState::new();
    for root in [1u32, 100] {
        s.apply(&root_cmd(root, None));
        start(&mut s, root);
        for k in 1..=5 {
            let mut child = child_cmd(&s, root, root + k);
            if let Command::RegisterSession { descriptor, .. } = &mut child {
                let label = if k % 2 == 0 { "even" } else { "odd" };
                *descriptor = Some(
                    serde_json::from_value(serde_json::json!({"provider": "scripted", "label": label, "mode": "continuable"})).unwrap(),
                );
            }
            s.apply(&child);
            if k != 3 {
                start(&mut s, root + k);
            }
        }
    }
    s.apply(&Command::Dispose {
        stop_reason: None,
        request_id: rid("d5"),
        at_ms: 9,
        session: sid(5),
    });
    let built = crate::listing::SessionIndex::build(s.sessions.values().map(|r| &**r));
    assert_eq!(built, s.index);
    assert_eq!(built.entries(), s.index.entries());
    assert!(
        built.count_in(SessionState::Disposed) == 1 && built.count_in(SessionState::Starting) == 2
    );
}
