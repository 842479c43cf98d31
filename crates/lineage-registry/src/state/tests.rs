//! Unit tests of the state machine.

use super::*;
use lineage_core::header::child_session_meta;

fn sid(n: u32) -> SessionId {
    SessionId::parse(&format!("01936c1e-7a3b-7cde-8f00-{n:012}")).unwrap()
}
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
fn g2_retry_with_same_request_id_returns_first_result() {
    let mut s = RegistryState::new();
    let cmd = root_cmd(1, None);
    let first = s.apply(&cmd);
    let digest = s.digest();
    assert_eq!(s.apply(&cmd), first);
    assert_eq!(s.digest(), digest);
}

#[test]
fn g2_stored_results_are_pruned_after_the_retention_window() {
    let mut s = RegistryState::new();
    let heartbeat = |r: &str, at_ms: u64| Command::Heartbeat {
        request_id: rid(r),
        at_ms,
        node: NodeId::parse("n1").unwrap(),
        lease_ms: 10,
        info: None,
    };
    let root = root_cmd(1, None); // r1 at 1 ms
    let first = s.apply(&root);
    assert!(matches!(first, CommandResponse::Registered { .. }));
    // Heartbeats move the callers' clock on (and prune), but their results are not kept.
    let mut second = root_cmd(2, None); // r2, at 2 ms
    if let Command::RegisterSession { at_ms, .. } = &mut second {
        *at_ms = 2;
    }
    s.apply(&second);
    assert_eq!(s.request_count(), 2);
    s.apply(&heartbeat("h1", 5));
    assert_eq!(s.request_count(), 2);

    // Exactly one window later nothing is pruned: a retry still gets the first result.
    s.apply(&heartbeat("h2", 1 + REQUEST_RETENTION_MS));
    assert_eq!(s.request_count(), 2);
    assert_eq!(s.apply(&root), first);

    // A refusal or a retry far in the future prunes nothing (it changes nothing).
    let digest = s.digest();
    let late_dispose = Command::Dispose {
        request_id: rid("d-late"),
        at_ms: 100 * REQUEST_RETENTION_MS,
        session: sid(9),
    };
    assert!(matches!(
        s.apply(&late_dispose),
        CommandResponse::Refused(_)
    ));
    assert_eq!(s.digest(), digest);

    // One past the window: r1 is forgotten (r2, at 2 ms, is still within it).
    s.apply(&heartbeat("h3", 2 + REQUEST_RETENTION_MS));
    assert!(s.request_outcome(&rid("r1")).is_none());
    assert_eq!(s.request_outcome(&rid("r2")).map(|o| o.at_ms), Some(2));
    assert!(s.request_outcome(&rid("h1")).is_none());
    assert_eq!(s.request_count(), 1);
    // A retry after the window is a new command: the session exists, so it is refused.
    assert!(matches!(
        s.apply(&root),
        CommandResponse::Refused(RegistryRefusal::DuplicateSession { .. })
    ));

    // The age index is derived: a snapshot round trip restores it, and both copies prune
    // the same way afterwards.
    let mut restored: RegistryState =
        serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
    assert_eq!(restored, s);
    let later = heartbeat("h4", 10 * REQUEST_RETENTION_MS);
    assert_eq!(restored.apply(&later), s.apply(&later));
    assert_eq!(restored, s);
    assert_eq!(s.request_count(), 0);
    assert_eq!(restored.digest(), s.digest());
}

#[test]
fn g2_a_heartbeat_keeps_no_result_and_applied_again_changes_nothing() {
    let mut s = RegistryState::new();
    let heartbeat = |r: &str, at_ms: u64| Command::Heartbeat {
        request_id: rid(r),
        at_ms,
        node: NodeId::parse("n1").unwrap(),
        lease_ms: 10,
        info: None,
    };
    let first = s.apply(&heartbeat("h1", 100));
    s.apply(&heartbeat("h2", 200));
    assert_eq!(s.request_count(), 0);
    let digest = s.digest();
    // The first again (a client's retry, a replay): the lease stays where the later one put it.
    let again = s.apply(&heartbeat("h1", 100));
    assert_eq!(s.digest(), digest);
    assert!(
        matches!(
            again,
            CommandResponse::LeaseRenewed {
                lease_expires_at_ms: 210,
                ..
            }
        ),
        "{again:?} (first: {first:?})"
    );
    // A request id kept for another kind is still refused to a heartbeat.
    s.apply(&root_cmd(1, None));
    let reused = Command::Heartbeat {
        request_id: rid("r1"),
        at_ms: 300,
        node: NodeId::parse("n1").unwrap(),
        lease_ms: 10,
        info: None,
    };
    assert!(matches!(
        s.apply(&reused),
        CommandResponse::Refused(RegistryRefusal::RequestIdReused { .. })
    ));
}

#[test]
fn x1_dispose_refused_while_children_live_and_admission_blocks_children() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    s.apply(&child_cmd(&s.clone(), 1, 2));
    start(&mut s, 2);
    let d = Command::Dispose {
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
        request_id: rid("d2"),
        at_ms: 4,
        session: sid(2),
    };
    assert!(matches!(
        s.apply(&d2),
        CommandResponse::Disposed { already: false, .. }
    ));
    let d1b = Command::Dispose {
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
        matches!(s.apply(&claim("a", "n2")), CommandResponse::Placed { placement } if placement.epoch == 2)
    );
    assert!(matches!(
        s.apply(&claim("b", "n3")),
        CommandResponse::Refused(RegistryRefusal::EpochMismatch { current: 2, .. })
    ));
}

#[test]
fn k1_claim_records_the_run_and_running_state_in_the_same_write() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    start(&mut s, 1);
    let set = Command::SetState {
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
        CommandResponse::Placed { placement } if placement.epoch == current + 1
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
fn g2_request_id_reused_for_another_kind_is_refused() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    let d = Command::Dispose {
        request_id: rid("r1"),
        at_ms: 3,
        session: sid(1),
    };
    assert!(matches!(
        s.apply(&d),
        CommandResponse::Refused(RegistryRefusal::RequestIdReused { .. })
    ));
}

#[test]
fn refusal_messages_are_one_line() {
    let r = RegistryRefusal::ParentMissing { parent: sid(1) };
    let m = r.to_string();
    assert!(m.contains("register the parent first") && !m.contains('\n'));
}

/// A root registration `r{n}` of session `n` at `at_ms`.
fn root_at(n: u32, at_ms: u64) -> Command {
    let mut cmd = root_cmd(n, None);
    if let Command::RegisterSession { at_ms: at, .. } = &mut cmd {
        *at = at_ms;
    }
    cmd
}

fn forget(r: &str, at_ms: u64, kept_ms: u64) -> Command {
    Command::ForgetResults {
        request_id: rid(r),
        at_ms,
        kept_ms,
    }
}

#[test]
fn q5_g2_forget_results_drops_the_results_kept_longer_than_the_window_and_keeps_its_own_none() {
    let mut s = RegistryState::new();
    let first = s.apply(&root_at(1, 1_000));
    s.apply(&root_at(2, 70_000));
    let third = s.apply(&root_at(3, 130_000));
    assert_eq!(s.request_count(), 3);

    // Too short a window is refused and changes nothing.
    let digest = s.digest();
    let refused = s.apply(&forget("f0", 131_000, MIN_RESULTS_KEPT_MS - 1));
    match refused {
        CommandResponse::Refused(RegistryRefusal::Malformed { reason }) => {
            assert!(reason.contains("at least 60000 ms"), "{reason}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.digest(), digest);

    // A minute at 131 s: r1 (1 s) and r2 (70 s) are older than 71 s; r3 stays.
    assert_eq!(
        s.apply(&forget("f1", 131_000, 60_000)),
        CommandResponse::ResultsForgotten {
            count: 2,
            more: false
        }
    );
    assert_eq!(s.request_count(), 1);
    assert!(
        s.request_outcome(&rid("f1")).is_none(),
        "its own is not kept"
    );
    // Applied again (a retry with its id, or the next sweep at the same time): nothing more.
    assert_eq!(
        s.apply(&forget("f1", 131_000, 60_000)),
        CommandResponse::ResultsForgotten {
            count: 0,
            more: false
        }
    );
    // A retry of a forgotten request is a new command; of a kept one, its first result.
    assert_ne!(s.apply(&root_at(1, 1_000)), first);
    assert!(matches!(
        s.apply(&root_at(1, 1_000)),
        CommandResponse::Refused(RegistryRefusal::DuplicateSession { .. })
    ));
    assert_eq!(s.apply(&root_at(3, 130_000)), third);

    // Both copies of a snapshot forget the same.
    let mut restored: RegistryState =
        serde_json::from_slice(&serde_json::to_vec(&s).unwrap()).unwrap();
    let later = forget("f2", 200_000, 60_000);
    assert_eq!(restored.apply(&later), s.apply(&later));
    assert_eq!(restored.digest(), s.digest());
    assert_eq!(s.request_count(), 0);
}

#[test]
fn q5_g2_forget_results_goes_in_batches() {
    let mut s = RegistryState::new();
    let n = u32::try_from(FORGET_BATCH).unwrap() + 5;
    for i in 0..n {
        s.apply(&root_at(i + 1, 1_000 + u64::from(i)));
    }
    assert_eq!(s.request_count(), FORGET_BATCH + 5);
    let at = 1_000_000;
    assert_eq!(
        s.apply(&forget("f1", at, 60_000)),
        CommandResponse::ResultsForgotten {
            count: FORGET_BATCH as u64,
            more: true
        }
    );
    assert_eq!(
        s.apply(&forget("f2", at, 60_000)),
        CommandResponse::ResultsForgotten {
            count: 5,
            more: false
        }
    );
    assert_eq!(s.request_count(), 0);
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
                    serde_json::json!({"provider": "scripted", "label": label, "mode": "continuable"}),
                );
            }
            s.apply(&child);
            if k != 3 {
                start(&mut s, root + k);
            }
        }
    }
    s.apply(&Command::Dispose {
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
