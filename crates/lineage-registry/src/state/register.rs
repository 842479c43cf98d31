//! Births (G2, D3, L2, S1, Q1, Q2, Q3, Z2): `register` and the lineage checks it runs.

use super::*;

impl RegistryState {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn register(
        &mut self,
        at_ms: u64,
        header: &SessionHeader,
        descriptor: &Option<lineage_core::descriptor::SubagentDescriptor>,
        limits: BirthLimits,
        node: &Option<NodeId>,
        run: &Option<RunId>,
        birth: Birth,
    ) -> Refusal {
        let BirthLimits {
            max_depth,
            fan_out,
            budget,
        } = limits;
        header.validate().map_err(refusal_from_core)?;
        let id = header.id().clone();
        if birth == Birth::Hosted && node.is_none() {
            return Err(RegistryRefusal::Malformed {
                reason: format!(
                    "register_session of {id} says hosted but names no node; name the node that hosts it"
                ),
            });
        }
        if self.sessions.contains_key(&id) {
            return Err(RegistryRefusal::DuplicateSession { session: id });
        }
        if self.tombstone.refuses(&id) {
            return Err(RegistryRefusal::IdPurged { session: id });
        }
        let (depth, effective_max, effective_fan_out) = match header.parent_session() {
            None => (0, max_depth.map(MaxDepth::get), fan_out),
            Some(parent_id) => {
                let parent =
                    self.sessions
                        .get(parent_id)
                        .ok_or_else(|| RegistryRefusal::ParentMissing {
                            parent: parent_id.clone(),
                        })?;
                // Q3: no birth under a spent budget (the parent's own, or an ancestor's). First,
                // so a tree drained because its budget was spent still says so.
                if let Some(spent) = self.spent_budget_over(parent_id) {
                    return Err(RegistryRefusal::BudgetSpent(spent));
                }
                if let Some(refusal) = parent.child_refusal_by_state() {
                    return Err(refusal);
                }
                let parent_root = parent.header.root_session();
                if header.root_session() != parent_root {
                    return Err(RegistryRefusal::RootMismatch {
                        expected: parent_root.clone(),
                        found: header.root_session().clone(),
                    });
                }
                if let Some(closed_at) = self.closed_ancestor(parent_id) {
                    return Err(RegistryRefusal::AdmissionClosed {
                        parent: parent_id.clone(),
                        closed_at,
                    });
                }
                let recorded = parent.max_depth;
                let effective = match (max_depth.map(MaxDepth::get), recorded) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                let cap = effective.and_then(|m| MaxDepth::new(m).ok());
                let expected =
                    resolve_child_depth(parent.depth(), cap).map_err(refusal_from_core)?;
                let found = header.delegation_depth().unwrap_or(0);
                if found != expected {
                    return Err(RegistryRefusal::DepthMismatch { expected, found });
                }
                // Q2: a child never outlives its parent's deadline.
                if let Some(parent_deadline) = parent.header.deadline_at_ms() {
                    let found = header.deadline_at_ms();
                    if found.is_none_or(|d| d > parent_deadline) {
                        return Err(RegistryRefusal::DeadlineBeyondParent {
                            parent: parent_id.clone(),
                            parent_deadline_ms: parent_deadline,
                            found,
                        });
                    }
                }
                // Q1: the tree's caps, tightened by the caller's, against the live counts.
                let caps = fan_out.stricter(parent.fan_out);
                if caps.is_capped() {
                    let live_children = self.live_count(parent.children.iter());
                    let live_descendants = match caps.max_descendants {
                        Some(_) => self.live_descendants(parent_root),
                        None => 0,
                    };
                    caps.admit(live_children, live_descendants)
                        .map_err(|exceeded| RegistryRefusal::FanOutExceeded {
                            parent: parent_id.clone(),
                            exceeded,
                        })?;
                }
                (expected, effective, caps)
            }
        };
        // The record keeps one copy of each id's text: the parent's and root's are shared with
        // the parent's record, the node's with its node record (memory per session, issue 13).
        let mut header = header.clone();
        if header.parent_session().is_none() {
            header.share_ids(&id, None, &id);
        }
        if let Some(parent_id) = header.parent_session().cloned() {
            if let Some(parent) = self.sessions.get_mut(&parent_id) {
                parent.children.insert(id.clone());
                parent.updated_at_ms = at_ms;
                header.share_ids(&id, Some(parent.header.id()), parent.header.root_session());
            }
        }
        let node = node.as_ref().map(|n| self.shared_node_id(n));
        let record = SessionRecord {
            header,
            descriptor: descriptor.as_ref().map(StoredDescriptor::of),
            placement: node.as_ref().map(|n| Placement {
                node: n.clone(),
                epoch: 1,
                released: false,
            }),
            state: match birth {
                Birth::Hosted => SessionState::Running,
                Birth::Due(_) => SessionState::Starting,
            },
            admission: Admission::Open,
            children: BTreeSet::new(),
            runs: run.iter().cloned().collect(),
            max_depth: effective_max,
            created_at_ms: at_ms,
            updated_at_ms: at_ms,
            start_deadline_ms: match birth {
                Birth::Hosted => None,
                Birth::Due(within) => Some(at_ms.saturating_add(within)),
            },
            usage: None,
            fan_out: effective_fan_out,
            budget: budget.filter(|b| !b.is_unlimited()).map(Box::new),
            purged_usage: None,
            stop_reason: None,
        };
        if let Some(deadline) = record.start_deadline_ms {
            self.births_by_deadline.insert((deadline, id.clone()));
        }
        if let Some(deadline) = record.header.deadline_at_ms() {
            self.sessions_by_deadline.insert((deadline, id.clone()));
        }
        self.index.insert(&record);
        self.sessions.insert(id.clone(), Box::new(record));
        Ok(CommandResponse::Registered { session: id, depth })
    }

    /// How many of `ids` are live (registered and not disposed).
    pub(super) fn live_count<'a>(&self, ids: impl Iterator<Item = &'a SessionId>) -> u64 {
        ids.filter(|id| {
            self.sessions
                .get(*id)
                .is_some_and(|r| r.state != SessionState::Disposed)
        })
        .count() as u64
    }

    /// Live descendants of `root` (not itself): a walk of its subtree, bounded by the number
    /// of sessions (a corrupt map can never loop forever).
    pub(super) fn live_descendants(&self, root: &SessionId) -> u64 {
        let mut stack: Vec<&SessionId> = match self.sessions.get(root) {
            Some(r) => r.children.iter().collect(),
            None => return 0,
        };
        let (mut live, mut steps) = (0u64, 0usize);
        while let Some(id) = stack.pop() {
            steps += 1;
            if steps > self.sessions.len() {
                break;
            }
            if let Some(record) = self.sessions.get(id) {
                if record.state != SessionState::Disposed {
                    live += 1;
                }
                stack.extend(record.children.iter());
            }
        }
        live
    }

    /// The nearest session at or above `id` whose admission is closed.
    pub(super) fn closed_ancestor(&self, id: &SessionId) -> Option<SessionId> {
        let mut cursor = Some(id);
        // Bounded walk: a corrupt map can never loop forever.
        let mut steps = 0usize;
        while let Some(current) = cursor {
            let record = self.sessions.get(current)?;
            if record.admission == Admission::Closed {
                return Some(current.clone());
            }
            steps += 1;
            if steps > self.sessions.len() {
                return None;
            }
            cursor = record.header.parent_session();
        }
        None
    }

    /// `node`, sharing the text of the known node record's id (one copy of each node id for
    /// all the placements on it), else `node` itself.
    pub(super) fn shared_node_id(&self, node: &NodeId) -> NodeId {
        self.nodes
            .get_key_value(node)
            .map(|(known, _)| known.clone())
            .unwrap_or_else(|| node.clone())
    }
}
