//! Property tests for the drain planner (X1) and the descendant index (I1).

use std::collections::{BTreeMap, BTreeSet};

use lineage_core::drain::{
    plan_drain, verify_child_first, DrainInput, DrainSession, DrainSessionState,
};
use lineage_core::header::Origin;
use lineage_core::ids::{NodeId, SessionId};
use lineage_core::index::{index_subagent_descendants, SessionSummary, SubagentDescendantSummary};
use lineage_core::CoreError;
use proptest::prelude::*;

fn sid(n: usize) -> SessionId {
    SessionId::parse(&format!("01936c1e-7a3b-7cde-8f00-{n:012}")).unwrap()
}

/// One generated session: parent index (< own index, so a forest), disposed?, node (0 = none).
type Row = (Option<usize>, bool, u8);

/// A random forest of up to 40 sessions plus a random non-empty set of roots.
fn forest() -> impl Strategy<Value = (Vec<Row>, Vec<usize>)> {
    (1usize..40).prop_flat_map(|n| {
        let rows = (0..n)
            .map(|i| {
                let parent = if i == 0 {
                    Just(None).boxed()
                } else {
                    proptest::option::weighted(0.8, 0..i).boxed()
                };
                (parent, proptest::bool::weighted(0.2), 0u8..4)
            })
            .collect::<Vec<_>>();
        let roots = proptest::collection::vec(0..n, 1..4);
        (rows, roots)
    })
}

fn drain_input(rows: &[Row], roots: &[usize]) -> DrainInput {
    DrainInput {
        roots: roots.iter().map(|r| sid(*r)).collect(),
        sessions: rows
            .iter()
            .enumerate()
            .map(|(i, (parent, disposed, node))| DrainSession {
                id: sid(i),
                parent: parent.map(sid),
                node: (*node > 0).then(|| NodeId::parse(&format!("node-{node}")).unwrap()),
                state: if *disposed {
                    DrainSessionState::Disposed
                } else {
                    DrainSessionState::Live
                },
            })
            .collect(),
    }
}

/// Naive reference: is `a` an ancestor-or-self of `d` (parents point to smaller indices).
fn reaches(rows: &[Row], d: usize, a: usize) -> bool {
    let mut cursor = Some(d);
    while let Some(x) = cursor {
        if x == a {
            return true;
        }
        cursor = rows[x].0;
    }
    false
}

/// Strict descendants of `a` among the rows.
fn descendants(rows: &[Row], a: usize) -> Vec<usize> {
    (0..rows.len())
        .filter(|d| *d != a && reaches(rows, *d, a))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn x1_waves_dispose_every_live_descendant_once_children_first((rows, roots) in forest()) {
        let plan = plan_drain(&drain_input(&rows, &roots)).unwrap();
        let in_subtree: BTreeSet<usize> = (0..rows.len())
            .filter(|d| roots.iter().any(|r| reaches(&rows, *d, *r)))
            .collect();

        // Close admission on exactly the subtree.
        let expected: Vec<SessionId> = in_subtree.iter().map(|i| sid(*i)).collect();
        prop_assert_eq!(&plan.close_admission, &expected);

        // Every live session of the subtree is disposed exactly once; nothing else is.
        let order = plan.disposal_order();
        let mut wave_of: BTreeMap<SessionId, usize> = BTreeMap::new();
        for (w, wave) in plan.waves.iter().enumerate() {
            prop_assert!(!wave.is_empty());
            for s in wave.sessions() {
                prop_assert!(wave_of.insert(s.clone(), w).is_none(), "{s} disposed twice");
            }
        }
        let live_subtree: BTreeSet<SessionId> = in_subtree
            .iter()
            .filter(|i| !rows[**i].1)
            .map(|i| sid(*i))
            .collect();
        prop_assert_eq!(wave_of.keys().cloned().collect::<BTreeSet<_>>(), live_subtree);
        prop_assert_eq!(order.len(), wave_of.len());

        // No session comes before (or with) any of its live descendants.
        for (s, w) in &wave_of {
            let i: usize = rows.iter().enumerate().position(|(i, _)| &sid(i) == s).unwrap();
            for d in descendants(&rows, i) {
                if let Some(dw) = wave_of.get(&sid(d)) {
                    prop_assert!(dw < w, "{} in wave {} not before its ancestor {} in wave {}", sid(d), dw, s, w);
                }
            }
        }

        // Cancel: the live, placed strict descendants of the roots, never a root.
        let cancelled: BTreeSet<SessionId> = plan.cancel.values().flatten().cloned().collect();
        let expected: BTreeSet<SessionId> = in_subtree
            .iter()
            .filter(|i| !rows[**i].1 && rows[**i].2 > 0 && !roots.contains(i))
            .map(|i| sid(*i))
            .collect();
        prop_assert_eq!(cancelled, expected);

        // Deterministic and sorted.
        prop_assert_eq!(&plan, &plan_drain(&drain_input(&rows, &roots)).unwrap());
        for wave in &plan.waves {
            for list in wave.by_node.values().chain(std::iter::once(&wave.unplaced)) {
                prop_assert!(list.windows(2).all(|p| p[0] < p[1]));
            }
        }

        // The checker agrees.
        let parents: BTreeMap<SessionId, SessionId> = rows
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.0.map(|p| (sid(i), sid(p))))
            .collect();
        prop_assert!(verify_child_first(&order, &parents).is_ok());
        let mut reversed = order.clone();
        reversed.reverse();
        let has_pair = order.iter().any(|a| order.iter().any(|b| a != b && {
            let ia = (0..rows.len()).find(|i| &sid(*i) == a).unwrap();
            let ib = (0..rows.len()).find(|i| &sid(*i) == b).unwrap();
            reaches(&rows, ia, ib)
        }));
        prop_assert_eq!(verify_child_first(&reversed, &parents).is_err(), has_pair);
    }

    #[test]
    fn x1_injected_cycle_is_refused((rows, roots) in forest(), pick in any::<proptest::sample::Index>()) {
        // Point the first row's parent at one of its descendants-or-self: a cycle.
        let mut rows = rows;
        let below: Vec<usize> = (0..rows.len()).filter(|d| reaches(&rows, *d, 0)).collect();
        let target = below[pick.index(below.len())];
        rows[0].0 = Some(target);
        let err = plan_drain(&drain_input(&rows, &roots)).unwrap_err();
        prop_assert!(matches!(err, CoreError::InvalidTree { .. }), "{:?}", err);
        prop_assert!(err.to_string().contains("cycle"));
    }
}

/// Random summaries: parent pointers anywhere (cycles possible), or to a missing id, or none.
fn corrupt_summaries() -> impl Strategy<Value = Vec<(Option<usize>, bool, bool)>> {
    (1usize..30).prop_flat_map(|n| {
        proptest::collection::vec(
            (
                proptest::option::weighted(0.85, 0..n + 3),
                any::<bool>(),
                any::<bool>(),
            ),
            n,
        )
    })
}

fn summaries(rows: &[(Option<usize>, bool, bool)]) -> BTreeMap<SessionId, SessionSummary> {
    rows.iter()
        .enumerate()
        .map(|(i, (parent, subagent, running))| {
            (
                sid(i),
                SessionSummary {
                    id: sid(i),
                    parent_id: parent.map(sid),
                    origin: subagent.then_some(Origin::Subagent),
                    running: *running,
                },
            )
        })
        .collect()
}

/// A random forest (parents < own index) with random origins and running flags.
fn acyclic_summaries(
    all_subagent: bool,
) -> impl Strategy<Value = Vec<(Option<usize>, bool, bool)>> {
    (1usize..40).prop_flat_map(move |n| {
        (0..n)
            .map(|i| {
                let parent = if i == 0 {
                    Just(None).boxed()
                } else {
                    proptest::option::weighted(0.8, 0..i).boxed()
                };
                let subagent = if all_subagent {
                    Just(true).boxed()
                } else {
                    any::<bool>().boxed()
                };
                (parent, subagent, any::<bool>())
            })
            .collect::<Vec<_>>()
    })
}

/// Naive reference: ancestor `a` counts subagent `d` iff every session from `d` up to (not
/// including) `a` is a subagent.
fn naive_index(
    rows: &[(Option<usize>, bool, bool)],
) -> BTreeMap<SessionId, SubagentDescendantSummary> {
    let mut out: BTreeMap<SessionId, SubagentDescendantSummary> = BTreeMap::new();
    for a in 0..rows.len() {
        let mut entry = SubagentDescendantSummary::default();
        for d in 0..rows.len() {
            if d == a || !rows[d].1 {
                continue;
            }
            let mut cursor = d;
            let counted = loop {
                if !rows[cursor].1 {
                    break false;
                }
                match rows[cursor].0 {
                    Some(p) if p == a => break true,
                    Some(p) => cursor = p,
                    None => break false,
                }
            };
            if counted {
                entry.count += 1;
                entry.running_count += u64::from(rows[d].2);
            }
        }
        if entry.count > 0 {
            out.insert(sid(a), entry);
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn i1_terminates_on_corrupt_cyclic_summaries(rows in corrupt_summaries()) {
        let index = index_subagent_descendants(&summaries(&rows));
        // Each subagent walk adds at most one per visited session, so counts stay bounded.
        let bound = rows.len() as u64;
        for summary in index.values() {
            prop_assert!(summary.running_count <= summary.count);
            prop_assert!(summary.count <= bound * bound);
        }
    }

    #[test]
    fn i1_all_subagent_forest_counts_every_descendant(rows in acyclic_summaries(true)) {
        let index = index_subagent_descendants(&summaries(&rows));
        let forest: Vec<Row> = rows.iter().map(|r| (r.0, false, 0)).collect();
        for a in 0..rows.len() {
            let ds = descendants(&forest, a);
            let expected = SubagentDescendantSummary {
                count: ds.len() as u64,
                running_count: ds.iter().filter(|d| rows[**d].2).count() as u64,
            };
            let got = index.get(&sid(a)).copied().unwrap_or_default();
            prop_assert_eq!(got, expected, "session {}", a);
        }
    }

    #[test]
    fn i1_mixed_origins_match_the_naive_reference(rows in acyclic_summaries(false)) {
        prop_assert_eq!(index_subagent_descendants(&summaries(&rows)), naive_index(&rows));
    }
}
