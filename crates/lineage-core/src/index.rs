//! The client-side descendant index (I1, seed §9.1).
//!
//! A client holding session summaries (from a listing of the registry) wants, for each
//! session, how many subagent descendants it has and how many of them run.
//! [`index_subagent_descendants`] is a faithful port of the seed's `indexSubagentDescendants`:
//! for every subagent, walk `parent_id` upward, adding one to each ancestor met; the walk goes
//! on only while the current session is itself a subagent, so a plain (non-subagent) session
//! receives the counts of its subagent children but cuts propagation above it. A `seen` set
//! ends the walk on cycles from corrupt data, and a parent missing from the summaries still
//! receives the count but ends the walk.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::header::Origin;
use crate::ids::SessionId;

/// What the index needs to know about one session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSummary {
    /// The session.
    pub id: SessionId,
    /// Its durable parent, if any.
    #[serde(default)]
    pub parent_id: Option<SessionId>,
    /// `Some(Origin::Subagent)` for a child; `None` for a top-level or plain session.
    #[serde(default)]
    pub origin: Option<Origin>,
    /// True while a turn runs (or the session is otherwise active).
    #[serde(default)]
    pub running: bool,
}

/// The subagent descendants of one session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SubagentDescendantSummary {
    /// How many subagent descendants reach this session.
    pub count: u64,
    /// How many of them are running.
    pub running_count: u64,
}

/// For each ancestor, the `count` and `running_count` of its subagent descendants (I1).
///
/// Sessions with no subagent descendant are absent from the result. Terminates on any input,
/// cyclic parent links included (each walk visits a session at most once).
pub fn index_subagent_descendants(
    summaries: &BTreeMap<SessionId, SessionSummary>,
) -> BTreeMap<SessionId, SubagentDescendantSummary> {
    let mut indexed: BTreeMap<SessionId, SubagentDescendantSummary> = BTreeMap::new();
    for descendant in summaries.values() {
        match descendant.origin {
            Some(Origin::Subagent) => {}
            None => continue,
        }
        let mut seen: BTreeSet<&SessionId> = BTreeSet::new();
        let mut current: Option<&SessionSummary> = Some(descendant);
        while let Some(session) = current {
            let Some(parent_id) = &session.parent_id else {
                break;
            };
            if session.origin != Some(Origin::Subagent) || !seen.insert(&session.id) {
                break;
            }
            let entry = indexed.entry(parent_id.clone()).or_default();
            entry.count = entry.count.saturating_add(1);
            if descendant.running {
                entry.running_count = entry.running_count.saturating_add(1);
            }
            current = summaries.get(parent_id);
        }
    }
    indexed
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ids::sid;

    fn summary(id: u32, parent: Option<u32>, subagent: bool, running: bool) -> SessionSummary {
        SessionSummary {
            id: sid(id),
            parent_id: parent.map(sid),
            origin: subagent.then_some(Origin::Subagent),
            running,
        }
    }

    fn map(list: Vec<SessionSummary>) -> BTreeMap<SessionId, SessionSummary> {
        list.into_iter().map(|s| (s.id.clone(), s)).collect()
    }

    fn counts(count: u64, running_count: u64) -> SubagentDescendantSummary {
        SubagentDescendantSummary {
            count,
            running_count,
        }
    }

    #[test]
    fn i1_counts_every_subagent_descendant_of_each_ancestor() {
        // 1 (top) -> 2 (running) -> {3 (running), 4}
        let index = index_subagent_descendants(&map(vec![
            summary(1, None, false, false),
            summary(2, Some(1), true, true),
            summary(3, Some(2), true, true),
            summary(4, Some(2), true, false),
        ]));
        assert_eq!(
            index,
            BTreeMap::from([(sid(1), counts(3, 2)), (sid(2), counts(2, 1))])
        );
    }

    #[test]
    fn i1_plain_session_receives_counts_but_stops_propagation() {
        // 1 (top) -> 2 (subagent) -> 3 (plain fork, parent recorded) -> 4 (subagent, running)
        let index = index_subagent_descendants(&map(vec![
            summary(1, None, false, false),
            summary(2, Some(1), true, false),
            summary(3, Some(2), false, false),
            summary(4, Some(3), true, true),
        ]));
        assert_eq!(
            index,
            BTreeMap::from([(sid(1), counts(1, 0)), (sid(3), counts(1, 1))])
        );
    }

    #[test]
    fn i1_missing_parent_receives_the_count_and_ends_the_walk() {
        let index = index_subagent_descendants(&map(vec![
            summary(2, Some(1), true, true),
            summary(3, Some(2), true, false),
        ]));
        assert_eq!(
            index,
            BTreeMap::from([(sid(1), counts(2, 1)), (sid(2), counts(1, 0))])
        );
    }

    #[test]
    fn i1_cycles_from_corrupt_data_terminate() {
        // 1 <-> 2, and 3 is its own parent.
        let index = index_subagent_descendants(&map(vec![
            summary(1, Some(2), true, true),
            summary(2, Some(1), true, false),
            summary(3, Some(3), true, false),
        ]));
        // Each walk visits each session once: as in the seed, a session on a cycle counts
        // itself once through the loop.
        assert_eq!(
            index,
            BTreeMap::from([
                (sid(1), counts(2, 1)),
                (sid(2), counts(2, 1)),
                (sid(3), counts(1, 0)),
            ])
        );
    }

    #[test]
    fn i1_non_subagents_and_parentless_subagents_count_nothing() {
        let index = index_subagent_descendants(&map(vec![
            summary(1, None, false, true),
            summary(2, Some(1), false, true),
            summary(3, None, true, true),
        ]));
        assert!(index.is_empty());
    }

    #[test]
    fn i1_summary_json_uses_seed_field_names() {
        let s = summary(2, Some(1), true, true);
        let json = serde_json::to_value(&s).unwrap();
        assert_eq!(json["parent_id"], sid(1).as_str());
        assert_eq!(json["origin"], "subagent");
        let back: SessionSummary =
            serde_json::from_str(&format!(r#"{{"id":"{}"}}"#, sid(1))).unwrap();
        assert_eq!(back, summary(1, None, false, false));
        assert_eq!(
            serde_json::to_string(&counts(2, 1)).unwrap(),
            r#"{"count":2,"running_count":1}"#
        );
    }
}
