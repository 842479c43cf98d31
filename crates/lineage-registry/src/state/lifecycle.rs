//! The lifecycle writes after a birth: placement claims (K1), state changes, admission
//! (X1), dispose, start confirmation and expiry (S1), heartbeats, runs and descriptors.

use super::*;
use crate::types::ClaimedSession;

impl RegistryState {
    /// K1: the claim, and with it (all or nothing) the new run and the `running` state of a
    /// cold resume.
    pub(super) fn claim(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        node: &NodeId,
        expected_epoch: u64,
        run: Option<&RunId>,
        activate: bool,
    ) -> Refusal {
        let node = &self.shared_node_id(node);
        let record = self.live(session)?;
        if record.state == SessionState::Starting {
            return Err(RegistryRefusal::NotStarted {
                session: session.clone(),
                refused: "a placement claim (cold resume)".to_owned(),
            });
        }
        let current = record.placement.as_ref().map_or(0, |p| p.epoch);
        if current != expected_epoch {
            return Err(RegistryRefusal::EpochMismatch {
                session: session.clone(),
                expected: expected_epoch,
                current,
            });
        }
        let placement = Placement {
            node: node.clone(),
            epoch: current.saturating_add(1),
            released: false,
        };
        record.placement = Some(placement.clone());
        if let Some(run) = run {
            if !record.runs.contains(run) {
                record.runs.push(run.clone());
            }
        }
        if activate {
            record.state = SessionState::Running;
        }
        record.updated_at_ms = at_ms;
        let claimed = ClaimedSession {
            usage: record.usage.as_deref().cloned(),
            has_children: !record.children.is_empty(),
        };
        Ok(CommandResponse::Placed {
            placement,
            claimed: Some(Box::new(claimed)),
        })
    }

    pub(super) fn set_state(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        (state, stop_reason): (SessionState, Option<StopReason>),
        expected_epoch: Option<u64>,
    ) -> Refusal {
        if state == SessionState::Disposed {
            // Check existence first so the error names the real problem.
            self.live(session)?;
            return Err(RegistryRefusal::UseDispose {
                session: session.clone(),
            });
        }
        let record = self.live(session)?;
        if record.state == SessionState::Starting {
            return Err(RegistryRefusal::NotStarted {
                session: session.clone(),
                refused: format!(
                    "set_state {} (only confirm_start moves it to running)",
                    state.as_str()
                ),
            });
        }
        fenced(record, session, expected_epoch)?;
        record.state = state;
        record.stop_reason = match state {
            SessionState::Settled => stop_reason.or(record.stop_reason),
            SessionState::Starting
            | SessionState::Running
            | SessionState::Waiting
            | SessionState::Disposed => None,
        };
        record.updated_at_ms = at_ms;
        Ok(CommandResponse::StateSet {
            session: session.clone(),
            state,
        })
    }

    pub(super) fn close_admission(&mut self, at_ms: u64, roots: &[SessionId]) -> Refusal {
        for root in roots {
            if !self.sessions.contains_key(root) {
                return Err(RegistryRefusal::UnknownSession {
                    session: root.clone(),
                });
            }
        }
        let mut closed = Vec::new();
        let mut seen = BTreeSet::new();
        for root in roots {
            for id in self.subtree_ids(root) {
                if seen.insert(id.clone()) {
                    closed.push(id);
                }
            }
        }
        for id in &closed {
            if let Some(record) = self.sessions.get_mut(id) {
                if record.admission != Admission::Closed {
                    record.admission = Admission::Closed;
                    record.updated_at_ms = at_ms;
                }
            }
        }
        Ok(CommandResponse::AdmissionClosed { sessions: closed })
    }

    pub(super) fn dispose(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        stop_reason: Option<StopReason>,
    ) -> Refusal {
        let record = self
            .sessions
            .get(session)
            .ok_or_else(|| RegistryRefusal::UnknownSession {
                session: session.clone(),
            })?;
        if record.state == SessionState::Disposed {
            return Ok(CommandResponse::Disposed {
                session: session.clone(),
                already: true,
            });
        }
        let undisposed: Vec<&SessionId> = record
            .children
            .iter()
            .filter(|c| {
                self.sessions
                    .get(*c)
                    .is_some_and(|r| r.state != SessionState::Disposed)
            })
            .collect();
        if let Some(first) = undisposed.first() {
            return Err(RegistryRefusal::UndisposedChildren {
                session: session.clone(),
                count: undisposed.len(),
                example: (*first).clone(),
            });
        }
        if let Some(record) = self.sessions.get_mut(session) {
            if record.state == SessionState::Starting {
                self.births_by_deadline
                    .remove(&(record.start_deadline_ms.unwrap_or(0), session.clone()));
            }
            if let Some(deadline) = record.header.deadline_at_ms() {
                self.sessions_by_deadline
                    .remove(&(deadline, session.clone()));
            }
            self.spent_budgets.remove(session);
            record.state = SessionState::Disposed;
            record.admission = Admission::Closed;
            record.stop_reason = record.stop_reason.or(stop_reason);
            record.updated_at_ms = at_ms;
            self.disposed_by_age.insert((at_ms, session.clone()));
        }
        Ok(CommandResponse::Disposed {
            session: session.clone(),
            already: false,
        })
    }

    /// S1, K1: the hosting node confirms a start: `starting -> running`.
    pub(super) fn confirm_start(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        node: &NodeId,
        expected_epoch: u64,
    ) -> Refusal {
        let node = &self.shared_node_id(node);
        let record = self.live(session)?;
        match record.state {
            SessionState::Starting => {}
            state @ (SessionState::Running
            | SessionState::Waiting
            | SessionState::Settled
            | SessionState::Disposed) => {
                return Err(RegistryRefusal::NotStarting {
                    session: session.clone(),
                    state,
                })
            }
        }
        let placement = match &record.placement {
            Some(p) if &p.node != node => {
                return Err(RegistryRefusal::WrongNode {
                    session: session.clone(),
                    node: node.clone(),
                    placed_on: p.node.clone(),
                })
            }
            Some(p) if p.epoch != expected_epoch => {
                return Err(RegistryRefusal::EpochMismatch {
                    session: session.clone(),
                    expected: expected_epoch,
                    current: p.epoch,
                })
            }
            Some(p) => p.clone(),
            None if expected_epoch != 0 => {
                return Err(RegistryRefusal::EpochMismatch {
                    session: session.clone(),
                    expected: expected_epoch,
                    current: 0,
                })
            }
            None => Placement {
                node: node.clone(),
                epoch: 1,
                released: false,
            },
        };
        let deadline = record.start_deadline_ms.unwrap_or(0);
        record.placement = Some(placement.clone());
        record.state = SessionState::Running;
        record.updated_at_ms = at_ms;
        self.births_by_deadline.remove(&(deadline, session.clone()));
        Ok(CommandResponse::Started {
            session: session.clone(),
            placement,
        })
    }

    /// S1: the sweeper disposes a birth whose start is overdue at `at_ms`.
    pub(super) fn expire_start(&mut self, at_ms: u64, session: &SessionId) -> Refusal {
        let record = self
            .sessions
            .get(session)
            .ok_or_else(|| RegistryRefusal::UnknownSession {
                session: session.clone(),
            })?;
        match record.state {
            SessionState::Starting => {}
            // Disposed meanwhile (a drain, the spawning node): nothing to expire, nobody to tell.
            SessionState::Disposed => {
                return Ok(CommandResponse::Disposed {
                    session: session.clone(),
                    already: true,
                })
            }
            state @ (SessionState::Running | SessionState::Waiting | SessionState::Settled) => {
                return Err(RegistryRefusal::NotStarting {
                    session: session.clone(),
                    state,
                })
            }
        }
        let deadline = record.start_deadline_ms.unwrap_or(0);
        if deadline > at_ms {
            return Err(RegistryRefusal::StartNotDue {
                session: session.clone(),
                start_deadline_ms: deadline,
            });
        }
        self.dispose(at_ms, session, Some(StopReason::Failed))
    }

    pub(super) fn heartbeat(
        &mut self,
        at_ms: u64,
        node: &NodeId,
        lease_ms: u64,
        info: &Option<String>,
    ) -> CommandResponse {
        let lease_expires_at_ms = at_ms.saturating_add(lease_ms);
        let record = self
            .nodes
            .entry(node.clone())
            .or_insert_with(|| NodeRecord {
                node: node.clone(),
                lease_expires_at_ms,
                last_heartbeat_ms: at_ms,
                info: None,
            });
        // A late, reordered heartbeat never shortens the lease.
        record.lease_expires_at_ms = record.lease_expires_at_ms.max(lease_expires_at_ms);
        record.last_heartbeat_ms = record.last_heartbeat_ms.max(at_ms);
        if info.is_some() {
            record.info = info.clone();
        }
        CommandResponse::LeaseRenewed {
            node: node.clone(),
            lease_expires_at_ms: record.lease_expires_at_ms,
        }
    }

    pub(super) fn append_run(&mut self, at_ms: u64, session: &SessionId, run: &RunId) -> Refusal {
        let record = self.live(session)?;
        if !record.runs.contains(run) {
            record.runs.push(run.clone());
            record.updated_at_ms = at_ms;
        }
        Ok(CommandResponse::RunAppended {
            session: session.clone(),
            runs: record.runs.len(),
        })
    }

    pub(super) fn set_descriptor(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        descriptor: &serde_json::Value,
    ) -> Refusal {
        let record = self.live(session)?;
        record.descriptor = Some(StoredDescriptor::from_value(descriptor));
        record.updated_at_ms = at_ms;
        Ok(CommandResponse::DescriptorSet {
            session: session.clone(),
        })
    }
}
