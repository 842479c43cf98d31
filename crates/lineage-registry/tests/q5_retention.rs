//! Q5: retention on the pure state machine. Disposed sessions become purge candidates once the
//! retention has passed, leaves before parents; a purge command re-checks each one (a live or
//! not-yet-due session is left alone) and purges a whole disposed subtree in one command when
//! named leaves first; purged ids are refused for ever (and so is any id minted before the
//! horizon), fresh ones are not; a purged child's usage stays in its ancestors' sums and
//! budgets, also after a snapshot; a retried purge returns its first result; a steady churn
//! keeps the registry's session count bounded.

use lineage_core::budget::Budget;
use lineage_core::fanout::FanOut;
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_core::retention::PURGE_BATCH;
use lineage_core::usage::SessionUsage;
use lineage_registry::listing::ListFilter;
use lineage_registry::{Command, CommandResponse, RegistryRefusal, RegistryState, SessionState};

/// A UUIDv7 minted at `ms`, number `n`.
fn sid_at(ms: u64, n: u32) -> SessionId {
    let hex = format!("{ms:012x}");
    SessionId::parse(&format!("{}-{}-7cde-8f00-{n:012}", &hex[..8], &hex[8..])).unwrap()
}

const T0: u64 = 1_733_000_000_000;
const KEEP: u64 = 1_000;

fn rid(what: &str, n: u64) -> RequestId {
    RequestId::parse(&format!("{what}-{n}")).unwrap()
}

fn register(
    s: &mut RegistryState,
    at: u64,
    header: SessionHeader,
    budget: Option<Budget>,
) -> CommandResponse {
    s.apply(&Command::RegisterSession {
        request_id: RequestId::parse(&format!("reg-{}-{at}", header.id())).unwrap(),
        at_ms: at,
        header,
        descriptor: None,
        max_depth: None,
        fan_out: FanOut::NONE,
        budget,
        node: Some(NodeId::parse("n1").unwrap()),
        run: None,
        start_within_ms: None,
        hosted: true,
    })
}

fn child(s: &mut RegistryState, at: u64, parent: &SessionId, id: SessionId) {
    let p = s.session(parent).unwrap();
    let header = child_session_meta(&p.header, id, p.depth() + 1, 0, None).unwrap();
    let got = register(s, at, header, None);
    assert!(matches!(got, CommandResponse::Registered { .. }), "{got:?}");
}

fn dispose(s: &mut RegistryState, at: u64, id: &SessionId) {
    let got = s.apply(&Command::Dispose {
        stop_reason: None,
        request_id: rid(&format!("dispose-{id}"), at),
        at_ms: at,
        session: id.clone(),
    });
    assert!(
        matches!(got, CommandResponse::Disposed { already: false, .. }),
        "{got:?}"
    );
}

fn purge(s: &mut RegistryState, at: u64, ids: &[SessionId]) -> Vec<SessionId> {
    match s.apply(&Command::Purge {
        request_id: rid("purge", at),
        at_ms: at,
        sessions: ids.to_vec(),
        disposed_after_ms: KEEP,
    }) {
        CommandResponse::Purged { sessions } => sessions,
        other => panic!("{other:?}"),
    }
}

#[test]
fn q5_a_disposed_subtree_is_purged_after_the_retention_leaves_first_and_its_ids_never_return() {
    let mut s = RegistryState::new();
    let (root, kid, grandkid, live) = (
        sid_at(T0, 1),
        sid_at(T0 + 1, 2),
        sid_at(T0 + 2, 3),
        sid_at(T0 + 3, 4),
    );
    register(
        &mut s,
        T0,
        SessionHeader::top_level(root.clone(), None, None),
        None,
    );
    child(&mut s, T0 + 1, &root, kid.clone());
    child(&mut s, T0 + 2, &kid, grandkid.clone());
    register(
        &mut s,
        T0 + 3,
        SessionHeader::top_level(live.clone(), None, None),
        None,
    );
    dispose(&mut s, T0 + 10, &grandkid);
    dispose(&mut s, T0 + 20, &kid);
    dispose(&mut s, T0 + 30, &root);
    // Not due yet: no candidate, and a purge naming them changes nothing.
    assert!(s.purge_candidates(T0 + 10 + KEEP - 1, KEEP, 256).is_empty());
    assert!(purge(
        &mut s,
        T0 + 500,
        &[grandkid.clone(), kid.clone(), root.clone(), live.clone()]
    )
    .is_empty());
    assert_eq!(s.session_count(), 4);
    assert_eq!(s.purged_count(), 0);
    // Due: only the leaf is a candidate (its parent still has a child record).
    let now = T0 + 30 + KEEP;
    assert_eq!(s.purge_candidates(now, KEEP, 256), vec![grandkid.clone()]);
    // Named leaves first, the whole disposed subtree goes in one command; the live root stays.
    let named = vec![grandkid.clone(), kid.clone(), root.clone(), live.clone()];
    assert_eq!(
        purge(&mut s, now, &named),
        vec![grandkid.clone(), kid.clone(), root.clone()]
    );
    assert_eq!(s.session_count(), 1);
    assert!(s.session(&live).is_some());
    assert_eq!(s.purged_count(), 3);
    assert_eq!(s.session_counts()["purged"], 3);
    assert_eq!(s.session_counts()["disposed"], 0);
    assert!(s.purge_candidates(now + 10 * KEEP, KEEP, 256).is_empty());
    let listed: Vec<SessionId> = s
        .list_page(&ListFilter::default(), None, 100)
        .0
        .iter()
        .map(|r| r.id().clone())
        .collect();
    assert_eq!(listed, vec![live.clone()]);
    assert!(s.subtree(&root).is_empty());
    // A retry of the same purge returns its first result.
    assert_eq!(
        purge(&mut s, now, &named),
        vec![grandkid.clone(), kid.clone(), root.clone()]
    );
    assert_eq!(s.purged_count(), 3);

    // The ids never come back, nor any id minted before the horizon; a fresh one is fine.
    let digest = s.digest();
    for id in [
        root.clone(),
        kid.clone(),
        grandkid.clone(),
        sid_at(T0 - 5, 9),
    ] {
        let got = register(
            &mut s,
            now + 1,
            SessionHeader::top_level(id.clone(), None, None),
            None,
        );
        match got {
            CommandResponse::Refused(r @ RegistryRefusal::IdPurged { .. }) => {
                let line = r.to_string();
                assert!(line.contains("mint a fresh session id"), "{line}");
                assert!(!line.contains('\n'));
            }
            other => panic!("{id}: {other:?}"),
        }
    }
    assert_eq!(s.digest(), digest, "a refused registration changes nothing");
    let fresh = sid_at(now, 10);
    assert!(matches!(
        register(
            &mut s,
            now + 2,
            SessionHeader::top_level(fresh, None, None),
            None
        ),
        CommandResponse::Registered { .. }
    ));
    // The tombstone survives a snapshot.
    let restored: RegistryState =
        serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(restored, s);
    assert_eq!(restored.purged_count(), 3);
}

#[test]
fn q5_a_purged_childs_usage_stays_in_its_ancestors_sums_and_budgets_after_a_snapshot() {
    let mut s = RegistryState::new();
    let (root, kid, other) = (sid_at(T0, 1), sid_at(T0 + 1, 2), sid_at(T0 + 2, 3));
    let budget = Budget {
        max_tokens: Some(100),
        max_cost_micros: None,
    };
    register(
        &mut s,
        T0,
        SessionHeader::top_level(root.clone(), None, None),
        Some(budget),
    );
    child(&mut s, T0 + 1, &root, kid.clone());
    let got = s.apply(&Command::RecordUsage {
        request_id: rid("use", 1),
        at_ms: T0 + 5,
        session: kid.clone(),
        usage: SessionUsage {
            used_tokens: 150,
            ..Default::default()
        },
        expected_epoch: None,
    });
    assert!(
        matches!(got, CommandResponse::UsageRecorded { .. }),
        "{got:?}"
    );
    let spent = s.spent_budget_over(&root).expect("spent");
    dispose(&mut s, T0 + 10, &kid);
    assert_eq!(
        purge(&mut s, T0 + 10 + KEEP, std::slice::from_ref(&kid)),
        vec![kid.clone()]
    );
    assert_eq!(s.subtree_usage(&root).used_tokens, 150);
    assert_eq!(s.spent_budget_over(&root), Some(spent.clone()));
    let restored: RegistryState =
        serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
    assert_eq!(restored.subtree_usage(&root), s.subtree_usage(&root));
    assert_eq!(restored.spent_budget_over(&root), Some(spent));
    // Still refused a child, with the numbers.
    let p = restored.session(&root).unwrap();
    let header = child_session_meta(&p.header, other, 1, 0, None).unwrap();
    let mut r = restored.clone();
    assert!(matches!(
        register(&mut r, T0 + 2 * KEEP, header, None),
        CommandResponse::Refused(RegistryRefusal::BudgetSpent(_))
    ));
}

#[test]
fn q5_a_purge_naming_too_many_is_refused_and_changes_nothing() {
    let mut s = RegistryState::new();
    let ids: Vec<SessionId> = (0..=PURGE_BATCH as u32).map(|n| sid_at(T0, n)).collect();
    let digest = s.digest();
    match s.apply(&Command::Purge {
        request_id: rid("big", 1),
        at_ms: T0,
        sessions: ids,
        disposed_after_ms: KEEP,
    }) {
        CommandResponse::Refused(r @ RegistryRefusal::PurgeBatchTooLarge { .. }) => {
            assert_eq!(
                r.to_string(),
                format!(
                    "a purge names {} sessions but takes at most {PURGE_BATCH}; split it",
                    PURGE_BATCH + 1
                )
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(s.digest(), digest);
}

#[test]
fn q5_a_churn_of_20000_births_and_disposals_keeps_the_registry_bounded() {
    let mut s = RegistryState::new();
    let root = sid_at(T0, 0);
    register(
        &mut s,
        T0,
        SessionHeader::top_level(root.clone(), None, None),
        None,
    );
    let mut peak = 0usize;
    let mut at = T0;
    for n in 1..=20_000u32 {
        at += 1; // 1 ms per cycle: with a 1 s retention, ~1,000 disposed wait at any time
        let id = sid_at(at, n);
        child(&mut s, at, &root, id.clone());
        dispose(&mut s, at, &id);
        if n % 100 == 0 {
            let due = s.purge_candidates(at, KEEP, PURGE_BATCH);
            purge(&mut s, at, &due);
        }
        peak = peak.max(s.session_count());
    }
    assert!(peak <= 1_000 + 300, "peak {peak}");
    assert!(s.purged_count() >= 18_700, "{}", s.purged_count());
    assert_eq!(s.session(&root).unwrap().state, SessionState::Running);
    assert!(s.session(&root).unwrap().children.len() <= 1_300);
}
