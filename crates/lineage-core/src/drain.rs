//! The leaves-first drain planner (X1, H2, seed §7.1).
//!
//! `drain(parents)` closes admission under the given roots, stops every live descendant, and
//! disposes the tree child-first, so a settlement always finds its parent's inbox. The
//! executor (in the host) does the work; [`plan_drain`] decides it, from a snapshot of the
//! lineage (typically read from the registry):
//!
//! 1. [`DrainPlan::close_admission`]: every session of the subtree (roots included, disposed
//!    ones too, so nothing under the roots can be resumed into a new parent), in one registry
//!    write.
//! 2. [`DrainPlan::cancel`]: the live strict descendants of the roots, grouped by the node that
//!    hosts them. The roots themselves are not cancelled here: their owner (a node shutting
//!    down, an operator) decides about their current turn; they are disposed last.
//! 3. [`DrainPlan::waves`]: disposal waves. A live session's wave index is its height: the
//!    largest number of live sessions on a path strictly below it (disposed sessions are passed
//!    through, not counted). Wave 0 holds the leaves; every session comes after all of its live
//!    descendants. Disposed sessions appear in no wave.
//!
//! The planner is total and deterministic: ids and nodes come out sorted, a cycle in the given
//! links is refused with [`CoreError::InvalidTree`] (never an endless walk), and so are missing
//! roots and duplicate sessions. [`verify_child_first`] checks a disposal order afterwards, for
//! example the disposals read back from the registry log.

pub mod progress;

pub use progress::{ProgressThrottle, PROGRESS_INTERVAL_MS};

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::ids::{NodeId, SessionId};

/// Whether a session still has to be disposed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrainSessionState {
    /// Not yet disposed: running, waiting or settled with its record still open.
    Live,
    /// Already disposed: appears in no wave and is not cancelled.
    Disposed,
}

/// One session of the lineage snapshot handed to the planner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainSession {
    /// The session.
    pub id: SessionId,
    /// Its durable parent; a parent absent from the snapshot is fine (it is above the roots).
    pub parent: Option<SessionId>,
    /// The node that hosts it, `None` when it is cold (passivated, or its node is gone).
    pub node: Option<NodeId>,
    /// Live or already disposed.
    pub state: DrainSessionState,
}

/// What to drain: the roots, and a snapshot that holds at least their subtrees.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DrainInput {
    /// The parents to drain (X1's `parents`). Each must be in `sessions`.
    pub roots: Vec<SessionId>,
    /// The lineage snapshot; each id at most once.
    pub sessions: Vec<DrainSession>,
}

/// One disposal wave: every session in it may be disposed in parallel, once every earlier wave
/// is done.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DrainWave {
    /// Hosted sessions, per node, each list sorted.
    pub by_node: BTreeMap<NodeId, Vec<SessionId>>,
    /// Cold sessions (no node): disposed by a registry write alone; sorted.
    pub unplaced: Vec<SessionId>,
}

impl DrainWave {
    /// Every session of the wave: per node in node order, then the unplaced ones.
    pub fn sessions(&self) -> impl Iterator<Item = &SessionId> {
        self.by_node.values().flatten().chain(self.unplaced.iter())
    }

    /// How many sessions the wave disposes.
    pub fn len(&self) -> usize {
        self.by_node.values().map(Vec::len).sum::<usize>() + self.unplaced.len()
    }

    /// True when the wave disposes nothing (the planner never emits such a wave).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The drain decided by [`plan_drain`].
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DrainPlan {
    /// The whole subtree, sorted: close admission on all of it first.
    pub close_admission: Vec<SessionId>,
    /// Live strict descendants of the roots, per hosting node, each list sorted.
    pub cancel: BTreeMap<NodeId, Vec<SessionId>>,
    /// Disposal waves, leaves first; the roots come in their own height's wave.
    pub waves: Vec<DrainWave>,
    /// Sessions of the subtree that were disposed before the drain began (one-shot children
    /// that settled, an earlier drain): in no wave, counted so the report adds up.
    pub already_disposed: u64,
}

impl DrainPlan {
    /// The disposal order the waves describe: wave by wave, in [`DrainWave::sessions`] order.
    pub fn disposal_order(&self) -> Vec<SessionId> {
        self.waves
            .iter()
            .flat_map(DrainWave::sessions)
            .cloned()
            .collect()
    }

    /// The wave that disposes `session`, if any.
    pub fn wave_of(&self, session: &SessionId) -> Option<usize> {
        self.waves
            .iter()
            .position(|w| w.sessions().any(|s| s == session))
    }
}

/// Joins ids for a one-line error message.
fn join(ids: &[&SessionId]) -> String {
    ids.iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn invalid(reason: String) -> CoreError {
    CoreError::InvalidTree { reason }
}

/// Plans a drain of `input.roots` (X1, H2). See the module documentation for the rules.
///
/// Errors ([`CoreError::InvalidTree`]): a root missing from the snapshot (all are named), a
/// session listed twice, a cycle among the parent links (its members are named).
pub fn plan_drain(input: &DrainInput) -> Result<DrainPlan, CoreError> {
    let mut by_id: BTreeMap<&SessionId, &DrainSession> = BTreeMap::new();
    for session in &input.sessions {
        if by_id.insert(&session.id, session).is_some() {
            return Err(invalid(format!(
                "session {} is listed twice in the drain snapshot; pass each session once",
                session.id
            )));
        }
    }

    let roots: BTreeSet<&SessionId> = input.roots.iter().collect();
    let missing: Vec<&SessionId> = roots
        .iter()
        .copied()
        .filter(|r| !by_id.contains_key(r))
        .collect();
    if !missing.is_empty() {
        return Err(invalid(format!(
            "drain roots not found in the snapshot: {}; refresh the lineage snapshot and retry",
            join(&missing)
        )));
    }

    check_acyclic(&by_id)?;

    // Parent links inside the snapshot, as children lists (sorted: by_id iterates sorted).
    let parent_in_snapshot = |s: &DrainSession| -> Option<&SessionId> {
        s.parent
            .as_ref()
            .and_then(|p| by_id.get_key_value(p).map(|(k, _)| *k))
    };
    let mut children: BTreeMap<&SessionId, Vec<&SessionId>> = BTreeMap::new();
    for (id, session) in &by_id {
        if let Some(parent) = parent_in_snapshot(session) {
            children.entry(parent).or_default().push(*id);
        }
    }

    // Roots that are descendants of other roots are reached from those; start from the top
    // ones so that the breadth-first order lists every parent before its children.
    let has_root_above = |root: &SessionId| -> bool {
        let mut cursor = by_id.get(root).and_then(|s| parent_in_snapshot(s));
        // The links are acyclic (checked above), so this walk ends; the bound is a second guard.
        let mut steps = 0usize;
        while let Some(p) = cursor {
            if roots.contains(p) {
                return true;
            }
            steps += 1;
            if steps > by_id.len() {
                return false;
            }
            cursor = by_id.get(p).and_then(|s| parent_in_snapshot(s));
        }
        false
    };
    let mut order: Vec<&SessionId> = Vec::new();
    let mut in_tree: BTreeSet<&SessionId> = BTreeSet::new();
    let mut queue: VecDeque<&SessionId> = roots
        .iter()
        .copied()
        .filter(|r| !has_root_above(r))
        .collect();
    while let Some(id) = queue.pop_front() {
        if !in_tree.insert(id) {
            continue;
        }
        order.push(id);
        if let Some(kids) = children.get(id) {
            queue.extend(kids.iter().copied());
        }
    }

    // Heights, children first: H(s) = max over children c of H(c) + [c is live].
    let is_live = |id: &SessionId| {
        by_id
            .get(id)
            .is_some_and(|s| s.state == DrainSessionState::Live)
    };
    let mut height: BTreeMap<&SessionId, usize> = order.iter().map(|id| (*id, 0)).collect();
    for id in order.iter().rev() {
        let own = height.get(id).copied().unwrap_or(0);
        let contribution = own.saturating_add(usize::from(is_live(id)));
        let parent = by_id
            .get(id)
            .and_then(|s| parent_in_snapshot(s))
            .filter(|p| in_tree.contains(p));
        if let Some(parent) = parent {
            if let Some(h) = height.get_mut(parent) {
                *h = (*h).max(contribution);
            }
        }
    }

    let mut plan = DrainPlan {
        close_admission: in_tree.iter().map(|s| (*s).clone()).collect(),
        ..DrainPlan::default()
    };
    for id in &in_tree {
        let Some(session) = by_id.get(id) else {
            continue;
        };
        match session.state {
            DrainSessionState::Disposed => {
                plan.already_disposed += 1;
                continue;
            }
            DrainSessionState::Live => {}
        }
        let h = height.get(id).copied().unwrap_or(0);
        if plan.waves.len() <= h {
            plan.waves
                .resize_with(h.saturating_add(1), DrainWave::default);
        }
        if let Some(wave) = plan.waves.get_mut(h) {
            match &session.node {
                Some(node) => wave
                    .by_node
                    .entry(node.clone())
                    .or_default()
                    .push((*id).clone()),
                None => wave.unplaced.push((*id).clone()),
            }
        }
        if let (Some(node), false) = (&session.node, roots.contains(id)) {
            plan.cancel
                .entry(node.clone())
                .or_default()
                .push((*id).clone());
        }
    }
    plan.waves.retain(|w| !w.is_empty());
    Ok(plan)
}

/// Refuses any cycle among the parent links of the snapshot, naming its members.
fn check_acyclic(by_id: &BTreeMap<&SessionId, &DrainSession>) -> Result<(), CoreError> {
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Mark {
        OnPath,
        Done,
    }
    let mut marks: BTreeMap<&SessionId, Mark> = BTreeMap::new();
    for start in by_id.keys().copied() {
        let mut path: Vec<&SessionId> = Vec::new();
        let mut cursor = Some(start);
        while let Some(id) = cursor {
            match marks.get(id) {
                Some(Mark::Done) => break,
                Some(Mark::OnPath) => {
                    let from = path.iter().position(|p| *p == id).unwrap_or(0);
                    let cycle = path.get(from..).unwrap_or(&[]);
                    return Err(invalid(format!(
                        "sessions {} form a parent cycle; the lineage is corrupt, repair the registry",
                        join(cycle)
                    )));
                }
                None => {
                    marks.insert(id, Mark::OnPath);
                    path.push(id);
                    cursor = by_id
                        .get(id)
                        .and_then(|s| s.parent.as_ref())
                        .and_then(|p| by_id.get_key_value(p).map(|(k, _)| *k));
                }
            }
        }
        for id in path {
            marks.insert(id, Mark::Done);
        }
    }
    Ok(())
}

/// Checks that `order` (a disposal sequence, e.g. read back from the registry log) disposes
/// every session after all of its descendants that it also disposes (X1).
///
/// `parents` maps a child to its durable parent (top-level sessions are absent). Errors
/// ([`CoreError::InvalidTree`]): an ancestor disposed before one of its descendants, a session
/// disposed twice, a cycle in `parents` met while walking up.
pub fn verify_child_first(
    order: &[SessionId],
    parents: &BTreeMap<SessionId, SessionId>,
) -> Result<(), CoreError> {
    let mut position: BTreeMap<&SessionId, usize> = BTreeMap::new();
    for (i, id) in order.iter().enumerate() {
        if let Some(first) = position.insert(id, i) {
            return Err(invalid(format!(
                "session {id} is disposed twice (positions {first} and {i}); a session is disposed once"
            )));
        }
    }
    for (i, id) in order.iter().enumerate() {
        let mut seen: BTreeSet<&SessionId> = BTreeSet::new();
        seen.insert(id);
        let mut cursor = parents.get(id);
        while let Some(ancestor) = cursor {
            if !seen.insert(ancestor) {
                return Err(invalid(format!(
                    "the parent links above session {id} form a cycle through {ancestor}; the lineage is corrupt"
                )));
            }
            if position.get(ancestor).is_some_and(|p| *p < i) {
                return Err(invalid(format!(
                    "session {ancestor} was disposed before its descendant {id}; drain must dispose children first (X1)"
                )));
            }
            cursor = parents.get(ancestor);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
