//! Tests of [`super`] (`drain.rs`).

use super::*;

use crate::ids::sid;

fn node(n: u32) -> NodeId {
    NodeId::parse(&format!("node-{n}")).unwrap()
}

fn live(id: u32, parent: Option<u32>, on: Option<u32>) -> DrainSession {
    DrainSession {
        id: sid(id),
        parent: parent.map(sid),
        node: on.map(node),
        state: DrainSessionState::Live,
    }
}

fn disposed(id: u32, parent: Option<u32>) -> DrainSession {
    DrainSession {
        state: DrainSessionState::Disposed,
        ..live(id, parent, None)
    }
}

fn ids(ns: &[u32]) -> Vec<SessionId> {
    ns.iter().copied().map(sid).collect()
}

/// 1 -> {2 -> {4, 5 -> 7}, 3 -> 6}; 8 is an unrelated root; 9 is 1's parent.
fn tree() -> Vec<DrainSession> {
    vec![
        live(9, None, Some(1)),
        live(1, Some(9), Some(1)),
        live(2, Some(1), Some(1)),
        live(3, Some(1), Some(2)),
        live(4, Some(2), Some(2)),
        live(5, Some(2), None),
        live(6, Some(3), Some(1)),
        live(7, Some(5), Some(2)),
        live(8, None, Some(1)),
    ]
}

#[test]
fn x1_plan_closes_admission_cancels_descendants_and_disposes_leaves_first() {
    let plan = plan_drain(&DrainInput {
        roots: vec![sid(1)],
        sessions: tree(),
    })
    .unwrap();
    assert_eq!(plan.close_admission, ids(&[1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(
        plan.cancel,
        BTreeMap::from([(node(1), ids(&[2, 6])), (node(2), ids(&[3, 4, 7]))])
    );
    assert_eq!(
        plan.waves,
        vec![
            DrainWave {
                by_node: BTreeMap::from([(node(1), ids(&[6])), (node(2), ids(&[4, 7]))]),
                unplaced: vec![],
            },
            DrainWave {
                by_node: BTreeMap::from([(node(2), ids(&[3]))]),
                unplaced: ids(&[5]),
            },
            DrainWave {
                by_node: BTreeMap::from([(node(1), ids(&[2]))]),
                unplaced: vec![],
            },
            DrainWave {
                by_node: BTreeMap::from([(node(1), ids(&[1]))]),
                unplaced: vec![],
            },
        ]
    );
    assert_eq!(plan.disposal_order(), ids(&[6, 4, 7, 3, 5, 2, 1]));
    let parents: BTreeMap<SessionId, SessionId> = tree()
        .into_iter()
        .filter_map(|s| s.parent.map(|p| (s.id, p)))
        .collect();
    verify_child_first(&plan.disposal_order(), &parents).unwrap();
}

#[test]
fn x1_disposed_sessions_are_skipped_but_their_live_children_still_drain_first() {
    // 1 -> 2 (disposed) -> 3; 1 -> 4 (disposed leaf).
    let plan = plan_drain(&DrainInput {
        roots: vec![sid(1)],
        sessions: vec![
            live(1, None, Some(1)),
            disposed(2, Some(1)),
            live(3, Some(2), Some(2)),
            disposed(4, Some(1)),
        ],
    })
    .unwrap();
    assert_eq!(plan.close_admission, ids(&[1, 2, 3, 4]));
    assert_eq!(plan.cancel, BTreeMap::from([(node(2), ids(&[3]))]));
    assert_eq!(plan.disposal_order(), ids(&[3, 1]));
    assert_eq!(plan.wave_of(&sid(3)), Some(0));
    assert_eq!(plan.wave_of(&sid(1)), Some(1));
    assert_eq!(plan.wave_of(&sid(2)), None);
}

#[test]
fn x1_lone_root_is_its_own_only_wave_and_is_not_cancelled() {
    let plan = plan_drain(&DrainInput {
        roots: vec![sid(8)],
        sessions: tree(),
    })
    .unwrap();
    assert_eq!(plan.close_admission, ids(&[8]));
    assert!(plan.cancel.is_empty());
    assert_eq!(plan.disposal_order(), ids(&[8]));
}

#[test]
fn x1_nested_and_repeated_roots_dispose_each_session_once() {
    let plan = plan_drain(&DrainInput {
        roots: vec![sid(5), sid(1), sid(2), sid(1)],
        sessions: tree(),
    })
    .unwrap();
    assert_eq!(plan.close_admission, ids(&[1, 2, 3, 4, 5, 6, 7]));
    assert_eq!(plan.disposal_order(), ids(&[6, 4, 7, 3, 5, 2, 1]));
    // Roots are never cancelled, even when nested under another root.
    assert_eq!(
        plan.cancel,
        BTreeMap::from([(node(1), ids(&[6])), (node(2), ids(&[3, 4, 7]))])
    );
}

#[test]
fn x1_missing_roots_are_named() {
    let err = plan_drain(&DrainInput {
        roots: vec![sid(42), sid(1), sid(41)],
        sessions: tree(),
    })
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CoreError::InvalidTree { .. }));
    assert!(
        msg.contains(sid(41).as_str()) && msg.contains(sid(42).as_str()),
        "{msg}"
    );
    assert!(!msg.contains(sid(1).as_str()), "{msg}");
}

#[test]
fn x1_cycles_and_duplicates_are_refused_not_looped() {
    let cyclic = vec![
        live(1, Some(3), None),
        live(2, Some(1), None),
        live(3, Some(2), None),
    ];
    let err = plan_drain(&DrainInput {
        roots: vec![sid(1)],
        sessions: cyclic,
    })
    .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("cycle") && msg.contains(sid(2).as_str()),
        "{msg}"
    );
    let own_parent = vec![live(1, Some(1), None)];
    assert!(plan_drain(&DrainInput {
        roots: vec![sid(1)],
        sessions: own_parent
    })
    .is_err());
    let twice = vec![live(1, None, None), live(1, None, None)];
    let msg = plan_drain(&DrainInput {
        roots: vec![sid(1)],
        sessions: twice,
    })
    .unwrap_err()
    .to_string();
    assert!(msg.contains("listed twice"), "{msg}");
}

#[test]
fn x1_empty_roots_give_an_empty_plan() {
    let plan = plan_drain(&DrainInput {
        roots: vec![],
        sessions: tree(),
    })
    .unwrap();
    assert_eq!(plan, DrainPlan::default());
}

#[test]
fn x1_verify_child_first_refuses_parent_before_descendant() {
    let parents = BTreeMap::from([(sid(2), sid(1)), (sid(3), sid(2))]);
    verify_child_first(&ids(&[3, 2, 1]), &parents).unwrap();
    verify_child_first(&ids(&[3, 1]), &parents).unwrap();
    let msg = verify_child_first(&ids(&[2, 3]), &parents)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains(&format!(
            "{} was disposed before its descendant {}",
            sid(2),
            sid(3)
        )),
        "{msg}"
    );
    // A grandparent before its grandchild, the parent never disposed.
    assert!(verify_child_first(&ids(&[1, 3]), &parents).is_err());
    let msg = verify_child_first(&ids(&[3, 3]), &parents)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("disposed twice"), "{msg}");
    let cyclic = BTreeMap::from([(sid(1), sid(2)), (sid(2), sid(1))]);
    let msg = verify_child_first(&ids(&[1]), &cyclic)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("cycle"), "{msg}");
}

#[test]
fn x1_plan_json_is_readable() {
    let plan = plan_drain(&DrainInput {
        roots: vec![sid(5)],
        sessions: tree(),
    })
    .unwrap();
    let json = serde_json::to_value(&plan).unwrap();
    assert_eq!(json["cancel"]["node-2"][0], sid(7).as_str());
    assert_eq!(json["waves"][1]["unplaced"][0], sid(5).as_str());
    let back: DrainPlan = serde_json::from_value(json).unwrap();
    assert_eq!(back, plan);
}
