//! Unit tests of the stored request results (G2, Q5): a retry answered from its result, a
//! request id reused for another command refused, results forgotten past their window.

use super::*;

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
        stop_reason: None,
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
fn g2_request_id_reused_for_another_kind_is_refused() {
    let mut s = RegistryState::new();
    s.apply(&root_cmd(1, None));
    let d = Command::Dispose {
        stop_reason: None,
        request_id: rid("r1"),
        at_ms: 3,
        session: sid(1),
    };
    assert!(matches!(
        s.apply(&d),
        CommandResponse::Refused(RegistryRefusal::RequestIdReused { .. })
    ));
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
