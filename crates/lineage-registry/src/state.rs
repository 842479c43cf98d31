//! [`RegistryState`]: the pure, deterministic state machine of the registry (G1, G2).
//!
//! `apply(&mut self, &Command) -> CommandResponse` is the only way to change it. It enforces
//! every lineage rule at apply time, so no node can bypass them:
//!
//! - L2: the header is revalidated ([`SessionHeader::validate`]).
//! - D3: a child's depth is the parent's depth + 1 ([`resolve_child_depth`]) and at most the
//!   stricter of the command's max depth and the one recorded on the tree.
//! - lineage integrity: the parent exists, is not disposed, shares the root; an id that exists is
//!   a duplicate (so no cycle can ever form).
//! - X1: a child is refused when admission is closed on any ancestor; dispose is refused while
//!   children are undisposed.
//! - S1, K1 (births): a session registered by the node that hosts it, after its creation
//!   window is durable (`hosted`, an identity claim), is `running` at once. Any other
//!   registration is `starting`, with a start deadline; only its hosting node moves it to
//!   `running` (`confirm_start`, fenced by node and epoch). Until then it cannot be claimed,
//!   change state or take children (`not_started`); the sweeper disposes it once overdue
//!   (`expire_start`, refused for a birth that started or is not due yet).
//! - idempotency: an accepted command's response is stored under its request id; a retry returns
//!   it unchanged (this table is part of the state, so it survives leader change and restart).
//!   The table is bounded by time: see [`REQUEST_RETENTION_MS`].
//!
//! A refused command returns [`CommandResponse::Refused`] and changes nothing (not even the
//! idempotency table). The state never reads a clock: time comes in the command.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod purge;
mod release;
mod share;

use lineage_core::budget::{Budget, BudgetSpent};
use lineage_core::depth::{resolve_child_depth, MaxDepth};
use lineage_core::fanout::FanOut;
use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, RequestId, RunId, SessionId};
use lineage_core::lifecycle::DEFAULT_START_WITHIN_MS;
use lineage_core::retention::Tombstone;
use lineage_core::usage::{SessionUsage, UsageTotal};
use lineage_core::CoreError;
use serde::{Deserialize, Serialize};

use crate::listing::{ListCursor, ListFilter, MutableKey, SessionIndex};
use crate::stored_descriptor::StoredDescriptor;
use crate::types::{
    Admission, ChildSummary, Command, CommandResponse, NodeRecord, Placement, RegistryRefusal,
    SessionRecord, SessionState,
};

/// How a registration is born: already hosted by the node that writes it, or due to be
/// confirmed within the given ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Birth {
    Hosted,
    Due(u64),
}

/// How long an accepted command's first result is kept for retries: 24 hours of the callers'
/// clock (`at_ms`).
///
/// Each time a command is accepted (and its result stored), the stored results whose `at_ms` is
/// more than this much older than that command's `at_ms` are dropped, oldest first. A retry
/// returns the first result while it is stored, so always within the window; once a command
/// more than the window newer has been accepted, a retry is evaluated as a new command (e.g. a
/// second `register_session` is refused as `duplicate_session`, a second `heartbeat` renews the
/// lease again, a reused id is no longer refused as `request_id_reused`). The cut-off follows the command being applied, not a running
/// maximum, so one command with a far-future clock prunes once but cannot keep every later
/// result from being stored; callers' clocks must still agree to well within the window.
/// Refused commands and retries change nothing, so they prune nothing.
pub const REQUEST_RETENTION_MS: u64 = 24 * 60 * 60 * 1000;

/// The stored first result of an accepted command, keyed by request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestOutcome {
    /// The command kind it was used for.
    pub kind: crate::types::CommandKind,
    /// The command's `at_ms` (caller's clock): the result is kept for [`REQUEST_RETENTION_MS`]
    /// after it.
    pub at_ms: u64,
    /// The response returned the first time.
    pub response: CommandResponse,
}

/// The registry: sessions, nodes and the idempotency table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "StateRepr")]
pub struct RegistryState {
    sessions: BTreeMap<SessionId, Box<SessionRecord>>,
    nodes: BTreeMap<NodeId, NodeRecord>,
    requests: BTreeMap<RequestId, RequestOutcome>,
    /// The idempotency table ordered by age, for pruning: derived from `requests`, so it is not
    /// serialized (snapshots and digests are unchanged by it) and is rebuilt on load.
    #[serde(skip)]
    requests_by_age: BTreeSet<(u64, RequestId)>,
    /// The `starting` sessions by start deadline, for the overdue-births query: derived from
    /// `sessions` (not serialized, rebuilt on load) like `requests_by_age`.
    #[serde(skip)]
    births_by_deadline: BTreeSet<(u64, SessionId)>,
    /// The undisposed sessions with a deadline (Q2), by deadline, for the overdue-deadlines
    /// query: derived from `sessions` (not serialized, rebuilt on load).
    #[serde(skip)]
    sessions_by_deadline: BTreeSet<(u64, SessionId)>,
    /// Per session, the usage of its whole subtree (itself included, disposed sessions too:
    /// what was spent stays spent), for budget checks (Q3): derived from `sessions` (not
    /// serialized, rebuilt on load), updated by `record_usage` along the ancestors.
    #[serde(skip)]
    subtree_usage: BTreeMap<SessionId, UsageTotal>,
    /// The undisposed sessions whose budget is spent (Q3), for the budget sweeper: derived.
    #[serde(skip)]
    spent_budgets: BTreeSet<SessionId>,
    /// The listing indexes (Q4): derived from `sessions` (not serialized, rebuilt on load),
    /// kept up to date by `apply` (see [`crate::listing`]).
    #[serde(skip)]
    index: SessionIndex,
    /// Q5: the disposed sessions by disposal time (a disposed record never changes again, so
    /// its `updated_at_ms` is when it was disposed), for the purge sweep: derived.
    #[serde(skip)]
    disposed_by_age: BTreeSet<(u64, SessionId)>,
    /// Q5: what is remembered of purged sessions (their ids are refused for ever).
    #[serde(default)]
    tombstone: Tombstone,
}

/// What a birth is limited by (D3, Q1, Q3): the caller's max depth and fan-out caps (the
/// stricter of them and the tree's apply) and a budget over the new session's subtree.
#[derive(Debug, Clone, Copy, Default)]
struct BirthLimits {
    max_depth: Option<MaxDepth>,
    fan_out: FanOut,
    budget: Option<Budget>,
}

/// The most records one [`RegistryState::spent_budgets`] answer holds (the sweeper's page).
pub const SPENT_BUDGETS_PAGE: usize = 256;

/// The most records one [`RegistryState::overdue_deadlines`] answer holds (the sweeper's page).
pub const OVERDUE_DEADLINES_PAGE: usize = 256;

/// The most records one [`RegistryState::overdue_births`] answer holds (the sweeper's page).
pub const OVERDUE_BIRTHS_PAGE: usize = 256;

/// The serialized form of [`RegistryState`] (everything but the derived age index).
#[derive(Deserialize)]
struct StateRepr {
    sessions: BTreeMap<SessionId, Box<SessionRecord>>,
    nodes: BTreeMap<NodeId, NodeRecord>,
    requests: BTreeMap<RequestId, RequestOutcome>,
    #[serde(default)]
    tombstone: Tombstone,
}

impl From<StateRepr> for RegistryState {
    fn from(mut repr: StateRepr) -> Self {
        share::share_ids(&mut repr.sessions, &repr.nodes, &mut repr.requests);
        let requests_by_age = repr
            .requests
            .iter()
            .map(|(id, outcome)| (outcome.at_ms, id.clone()))
            .collect();
        let births_by_deadline = repr
            .sessions
            .values()
            .filter(|r| r.state == SessionState::Starting)
            .map(|r| (r.start_deadline_ms.unwrap_or(0), r.id().clone()))
            .collect();
        let sessions_by_deadline = repr
            .sessions
            .values()
            .filter(|r| r.state != SessionState::Disposed)
            .filter_map(|r| Some((r.header.deadline_at_ms()?, r.id().clone())))
            .collect();
        let index = SessionIndex::build(repr.sessions.values().map(|r| &**r));
        let disposed_by_age = repr
            .sessions
            .values()
            .filter(|r| r.state == SessionState::Disposed)
            .map(|r| (r.updated_at_ms, r.id().clone()))
            .collect();
        let mut state = Self {
            index,
            disposed_by_age,
            tombstone: repr.tombstone,
            sessions: repr.sessions,
            nodes: repr.nodes,
            requests: repr.requests,
            requests_by_age,
            births_by_deadline,
            sessions_by_deadline,
            subtree_usage: BTreeMap::new(),
            spent_budgets: BTreeSet::new(),
        };
        let reported: Vec<(SessionId, SessionUsage)> = state
            .sessions
            .values()
            .filter_map(|r| Some((r.id().clone(), r.usage.as_deref()?.clone())))
            .collect();
        for (id, usage) in reported {
            state.add_usage_up(&id, None, &usage);
        }
        let carried: Vec<(SessionId, UsageTotal)> = state
            .sessions
            .values()
            .filter_map(|r| Some((r.id().clone(), r.purged_usage.as_deref()?.clone())))
            .collect();
        for (id, total) in carried {
            state.add_up(&id, |sum| sum.add_total(&total));
        }
        state
    }
}

type Refusal = Result<CommandResponse, RegistryRefusal>;

impl RegistryState {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Applies one command: returns the first stored result for a known request id, else
    /// evaluates the rules; on acceptance mutates the state and stores the response.
    pub fn apply(&mut self, cmd: &Command) -> CommandResponse {
        if let Some(first) = self.requests.get(cmd.request_id()) {
            if first.kind != cmd.command_kind() {
                return CommandResponse::Refused(RegistryRefusal::RequestIdReused {
                    request_id: cmd.request_id().clone(),
                    first_kind: first.kind.as_str().to_owned(),
                });
            }
            return first.response.clone();
        }
        // Q4: the indexed fields of the one session a command may change, to re-file it.
        let target = reindexed_session(cmd);
        let before = target.and_then(|id| self.sessions.get(id).map(|r| MutableKey::of(r)));
        let result = match cmd {
            Command::RegisterSession {
                at_ms,
                header,
                descriptor,
                max_depth,
                fan_out,
                budget,
                node,
                run,
                start_within_ms,
                hosted,
                ..
            } => self.register(
                *at_ms,
                header,
                descriptor,
                BirthLimits {
                    max_depth: *max_depth,
                    fan_out: *fan_out,
                    budget: *budget,
                },
                node,
                run,
                match hosted {
                    true => Birth::Hosted,
                    false => Birth::Due(start_within_ms.unwrap_or(DEFAULT_START_WITHIN_MS)),
                },
            ),
            Command::ConfirmStart {
                at_ms,
                session,
                node,
                expected_epoch,
                ..
            } => self.confirm_start(*at_ms, session, node, *expected_epoch),
            Command::ExpireStart { at_ms, session, .. } => self.expire_start(*at_ms, session),
            Command::ClaimPlacement {
                at_ms,
                session,
                node,
                expected_epoch,
                run,
                activate,
                ..
            } => self.claim(
                *at_ms,
                session,
                node,
                *expected_epoch,
                run.as_ref(),
                *activate,
            ),
            Command::ReleasePlacement {
                at_ms,
                session,
                node,
                expected_epoch,
                ..
            } => self.release_placement(*at_ms, session, node, *expected_epoch),
            Command::SetState {
                at_ms,
                session,
                state,
                expected_epoch,
                ..
            } => self.set_state(*at_ms, session, *state, *expected_epoch),
            Command::RecordUsage {
                at_ms,
                session,
                usage,
                expected_epoch,
                ..
            } => self.record_usage(*at_ms, session, usage, *expected_epoch),
            Command::CloseAdmission { at_ms, roots, .. } => self.close_admission(*at_ms, roots),
            Command::Dispose { at_ms, session, .. } => self.dispose(*at_ms, session),
            Command::Heartbeat {
                at_ms,
                node,
                lease_ms,
                info,
                ..
            } => Ok(self.heartbeat(*at_ms, node, *lease_ms, info)),
            Command::AppendRun {
                at_ms,
                session,
                run,
                ..
            } => self.append_run(*at_ms, session, run),
            Command::SetDescriptor {
                at_ms,
                session,
                descriptor,
                ..
            } => self.set_descriptor(*at_ms, session, descriptor),
            Command::Purge {
                at_ms,
                sessions,
                disposed_after_ms,
                ..
            } => self.purge(*at_ms, sessions, *disposed_after_ms),
        };
        if let (Some(id), Some(before)) = (target, before) {
            if let Some(record) = self.sessions.get(id) {
                self.index.update(record, &before);
            }
        }
        match result {
            Ok(response) => {
                let at_ms = cmd.at_ms();
                self.prune_requests(at_ms);
                self.requests.insert(
                    cmd.request_id().clone(),
                    RequestOutcome {
                        kind: cmd.command_kind(),
                        at_ms,
                        response: response.clone(),
                    },
                );
                self.requests_by_age
                    .insert((at_ms, cmd.request_id().clone()));
                response
            }
            Err(refusal) => CommandResponse::Refused(refusal),
        }
    }

    /// Drops the stored results older than [`REQUEST_RETENTION_MS`] before `now_ms`, oldest
    /// first (amortized: each stored result is removed once).
    fn prune_requests(&mut self, now_ms: u64) {
        let cutoff = now_ms.saturating_sub(REQUEST_RETENTION_MS);
        while let Some((at_ms, _)) = self.requests_by_age.first() {
            if *at_ms >= cutoff {
                break;
            }
            if let Some((_, id)) = self.requests_by_age.pop_first() {
                self.requests.remove(&id);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn register(
        &mut self,
        at_ms: u64,
        header: &SessionHeader,
        descriptor: &Option<serde_json::Value>,
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
            descriptor: descriptor.as_ref().map(StoredDescriptor::from_value),
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
    fn live_count<'a>(&self, ids: impl Iterator<Item = &'a SessionId>) -> u64 {
        ids.filter(|id| {
            self.sessions
                .get(*id)
                .is_some_and(|r| r.state != SessionState::Disposed)
        })
        .count() as u64
    }

    /// Live descendants of `root` (not itself): a walk of its subtree, bounded by the number
    /// of sessions (a corrupt map can never loop forever).
    fn live_descendants(&self, root: &SessionId) -> u64 {
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
    fn closed_ancestor(&self, id: &SessionId) -> Option<SessionId> {
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
    fn shared_node_id(&self, node: &NodeId) -> NodeId {
        self.nodes
            .get_key_value(node)
            .map(|(known, _)| known.clone())
            .unwrap_or_else(|| node.clone())
    }

    /// `session`'s record, disposed or not; refused when there is none.
    fn known(&mut self, session: &SessionId) -> Result<&mut SessionRecord, RegistryRefusal> {
        self.sessions
            .get_mut(session)
            .map(|r| &mut **r)
            .ok_or_else(|| RegistryRefusal::UnknownSession {
                session: session.clone(),
            })
    }

    fn live(&mut self, session: &SessionId) -> Result<&mut SessionRecord, RegistryRefusal> {
        let record = self.known(session)?;
        if record.state == SessionState::Disposed {
            return Err(RegistryRefusal::SessionDisposed {
                session: session.clone(),
            });
        }
        Ok(record)
    }

    /// K1: the claim, and with it (all or nothing) the new run and the `running` state of a
    /// cold resume.
    fn claim(
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
        Ok(CommandResponse::Placed { placement })
    }

    fn set_state(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        state: SessionState,
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
        record.updated_at_ms = at_ms;
        Ok(CommandResponse::StateSet {
            session: session.clone(),
            state,
        })
    }

    /// Replaces the session's usage; fenced by the placement epoch like `set_state`.
    fn record_usage(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        usage: &lineage_core::usage::SessionUsage,
        expected_epoch: Option<u64>,
    ) -> Refusal {
        // Usage is a fact about work done, not a lifecycle change: a report that arrives after
        // its session was disposed (a drain, a budget's drain among them, raced the turn that
        // spent it) still counts, or a tree's sums would miss what it spent (issue 12, Q3).
        // The epoch still fences a host that lost the session.
        let record = self.known(session)?;
        fenced(record, session, expected_epoch)?;
        let old = record.usage.replace(Box::new(usage.clone()));
        record.updated_at_ms = at_ms;
        self.add_usage_up(session, old.as_deref(), usage);
        Ok(CommandResponse::UsageRecorded {
            session: session.clone(),
        })
    }

    /// Q3: `session`'s report changed from `old` to `new`: every sum from it up to its root
    /// follows, and an undisposed ancestor (or itself) whose budget that spends is listed in
    /// `spent_budgets`. Bounded by the number of sessions (a corrupt map never loops forever).
    fn add_usage_up(
        &mut self,
        session: &SessionId,
        old: Option<&SessionUsage>,
        new: &SessionUsage,
    ) {
        self.add_up(session, |total| {
            if let Some(old) = old {
                total.remove(old);
            }
            total.add(new);
        });
    }

    /// `change` applied to the subtree sum of `session` and of every ancestor, listing each
    /// undisposed one whose budget that spends (Q3). Bounded by the number of sessions.
    fn add_up(&mut self, session: &SessionId, change: impl Fn(&mut UsageTotal)) {
        let mut cursor = Some(session.clone());
        let mut steps = 0usize;
        while let Some(id) = cursor {
            steps += 1;
            if steps > self.sessions.len() {
                break;
            }
            let total = self.subtree_usage.entry(id.clone()).or_default();
            change(total);
            let Some(record) = self.sessions.get(&id) else {
                break;
            };
            if let Some(budget) = record.budget.as_deref() {
                if record.state != SessionState::Disposed && budget.check(&id, total).is_err() {
                    self.spent_budgets.insert(id.clone());
                }
            }
            cursor = record.header.parent_session().cloned();
        }
    }

    /// Q3: the first spent budget at or above `id` (nearest first), with the numbers: what a
    /// birth under `id` is refused with.
    pub fn spent_budget_over(&self, id: &SessionId) -> Option<BudgetSpent> {
        let mut cursor = Some(id);
        let mut steps = 0usize;
        while let Some(current) = cursor {
            steps += 1;
            if steps > self.sessions.len() {
                return None;
            }
            let record = self.sessions.get(current)?;
            if let Some(budget) = record.budget.as_deref() {
                let total = self.subtree_usage.get(current).cloned().unwrap_or_default();
                if let Err(spent) = budget.check(current, &total) {
                    return Some(spent);
                }
            }
            cursor = record.header.parent_session();
        }
        None
    }

    fn close_admission(&mut self, at_ms: u64, roots: &[SessionId]) -> Refusal {
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

    fn dispose(&mut self, at_ms: u64, session: &SessionId) -> Refusal {
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
            record.updated_at_ms = at_ms;
            self.disposed_by_age.insert((at_ms, session.clone()));
        }
        Ok(CommandResponse::Disposed {
            session: session.clone(),
            already: false,
        })
    }

    /// S1, K1: the hosting node confirms a start: `starting -> running`.
    fn confirm_start(
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
    fn expire_start(&mut self, at_ms: u64, session: &SessionId) -> Refusal {
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
        self.dispose(at_ms, session)
    }

    fn heartbeat(
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

    fn append_run(&mut self, at_ms: u64, session: &SessionId, run: &RunId) -> Refusal {
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

    fn set_descriptor(
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

    // ----- queries -----

    /// Q4: one page of the sessions `filter` keeps, oldest first, after `after` (see
    /// [`SessionIndex::page`]), and the cursor of the next page.
    pub fn list_page(
        &self,
        filter: &ListFilter,
        after: Option<&ListCursor>,
        limit: u32,
    ) -> (Vec<SessionRecord>, Option<ListCursor>) {
        self.index.page(&self.sessions, filter, after, limit)
    }

    /// One session's record.
    pub fn session(&self, id: &SessionId) -> Option<&SessionRecord> {
        self.sessions.get(id).map(|r| &**r)
    }

    /// Every session, by id.
    pub fn sessions(&self) -> impl Iterator<Item = &SessionRecord> {
        self.sessions.values().map(|r| &**r)
    }

    /// How many sessions are in each state (every state listed, zero included).
    pub fn session_counts(&self) -> std::collections::BTreeMap<String, u64> {
        let mut counts: std::collections::BTreeMap<String, u64> = SessionState::ALL
            .iter()
            .map(|s| (s.as_str().to_owned(), 0))
            .collect();
        for state in SessionState::ALL {
            counts.insert(state.as_str().to_owned(), self.index.count_in(state) as u64);
        }
        counts.insert("purged".to_owned(), self.tombstone.purged);
        counts
    }

    /// How many sessions the registry holds.
    pub fn session_count(&self) -> usize {
        self.sessions.len()
    }

    fn subtree_ids(&self, root: &SessionId) -> Vec<SessionId> {
        let mut out = Vec::new();
        let mut seen = BTreeSet::new();
        let mut queue = VecDeque::from([root.clone()]);
        while let Some(id) = queue.pop_front() {
            if !seen.insert(id.clone()) {
                continue;
            }
            if let Some(record) = self.sessions.get(&id) {
                queue.extend(record.children.iter().cloned());
                out.push(id);
            }
        }
        out
    }

    /// The subtree under `root` (inclusive), parents before children (breadth first).
    pub fn subtree(&self, root: &SessionId) -> Vec<SessionRecord> {
        self.subtree_ids(root)
            .iter()
            .filter_map(|id| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// One page of the subtree under `root` (inclusive), in (level below `root`, id) order, so
    /// parents come before children within a page and across pages. `after` is the cursor:
    /// the last id of the previous page (`None` for the first page); at most `limit` records
    /// (at least one) follow it. Returns the records and whether more follow.
    ///
    /// The order is stable while the tree grows: sessions are never removed and parent links
    /// never change, so the cursor stays in the subtree at the same level. A session registered
    /// between two page reads is included only if it sorts after the cursor. A cursor outside
    /// the subtree yields an empty last page.
    pub fn subtree_page(
        &self,
        root: &SessionId,
        after: Option<&SessionId>,
        limit: usize,
    ) -> (Vec<SessionRecord>, bool) {
        let mut ordered: Vec<&SessionId> = Vec::new();
        let mut seen = BTreeSet::new();
        let mut level: Vec<&SessionId> = match self.sessions.get(root) {
            Some(record) => vec![record.id()],
            None => Vec::new(),
        };
        while !level.is_empty() {
            level.sort_unstable();
            level.retain(|id| seen.insert(*id));
            let mut next = Vec::new();
            for id in &level {
                if let Some(record) = self.sessions.get(*id) {
                    next.extend(
                        record
                            .children
                            .iter()
                            .filter(|c| self.sessions.contains_key(*c)),
                    );
                }
            }
            ordered.append(&mut level);
            level = next;
        }
        let start = match after {
            None => 0,
            Some(cursor) => match ordered.iter().position(|id| *id == cursor) {
                Some(i) => i + 1,
                None => ordered.len(),
            },
        };
        let end = start.saturating_add(limit.max(1)).min(ordered.len());
        let page = ordered[start..end]
            .iter()
            .filter_map(|id| self.sessions.get(*id).map(|r| (**r).clone()))
            .collect();
        (page, end < ordered.len())
    }

    /// True when `ancestor` is a strict ancestor of `descendant` (R3).
    pub fn is_ancestor(&self, ancestor: &SessionId, descendant: &SessionId) -> bool {
        let mut cursor = self
            .sessions
            .get(descendant)
            .and_then(|r| r.header.parent_session());
        let mut steps = 0usize;
        while let Some(current) = cursor {
            if current == ancestor {
                return true;
            }
            steps += 1;
            if steps > self.sessions.len() {
                return false;
            }
            cursor = self
                .sessions
                .get(current)
                .and_then(|r| r.header.parent_session());
        }
        false
    }

    /// Sessions placed on `node` that are not disposed.
    pub fn sessions_on_node(&self, node: &NodeId) -> Vec<SessionRecord> {
        self.sessions
            .values()
            .filter(|r| r.state != SessionState::Disposed)
            .filter(|r| r.placement.as_ref().is_some_and(|p| &p.node == node))
            .map(|r| (**r).clone())
            .collect()
    }

    /// The `starting` sessions whose start deadline is at or before `now_ms` (the caller's
    /// clock), oldest deadline first, at most `limit` (at least 1, at most
    /// [`OVERDUE_BIRTHS_PAGE`]): one page for the sweeper, which disposes them and asks again.
    pub fn overdue_births(&self, now_ms: u64, limit: usize) -> Vec<SessionRecord> {
        self.births_by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(limit.clamp(1, OVERDUE_BIRTHS_PAGE))
            .filter_map(|(_, id)| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// The undisposed sessions whose deadline (Q2) is at or before `now_ms` (the caller's
    /// clock), earliest first, at most `limit` (at least 1, at most
    /// [`OVERDUE_DEADLINES_PAGE`]): one page for the deadline sweeper, which drains them and
    /// asks again.
    pub fn overdue_deadlines(&self, now_ms: u64, limit: usize) -> Vec<SessionRecord> {
        self.sessions_by_deadline
            .iter()
            .take_while(|(deadline, _)| *deadline <= now_ms)
            .take(limit.clamp(1, OVERDUE_DEADLINES_PAGE))
            .filter_map(|(_, id)| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// The undisposed sessions whose budget (Q3) is spent, at most `limit` (at least 1, at most
    /// [`SPENT_BUDGETS_PAGE`]): one page for the budget sweeper, which drains them.
    pub fn spent_budgets(&self, limit: usize) -> Vec<SessionRecord> {
        self.spent_budgets
            .iter()
            .take(limit.clamp(1, SPENT_BUDGETS_PAGE))
            .filter_map(|id| self.sessions.get(id).map(|r| (**r).clone()))
            .collect()
    }

    /// The usage of `id`'s whole subtree (Q3), itself and disposed sessions included.
    pub fn subtree_usage(&self, id: &SessionId) -> UsageTotal {
        self.subtree_usage.get(id).cloned().unwrap_or_default()
    }

    /// Direct children of `id`, each with counts of its subagent descendants (I1).
    pub fn children(&self, id: &SessionId) -> Vec<ChildSummary> {
        let Some(record) = self.sessions.get(id) else {
            return Vec::new();
        };
        record
            .children
            .iter()
            .filter_map(|c| self.sessions.get(c))
            .map(|child| {
                let below = self.subtree_ids(child.id());
                let mut count = 0;
                let mut running_count = 0;
                for d in below.iter().skip(1) {
                    if let Some(r) = self.sessions.get(d) {
                        if r.header.is_subagent() {
                            count += 1;
                            if r.state == SessionState::Running {
                                running_count += 1;
                            }
                        }
                    }
                }
                ChildSummary {
                    record: (**child).clone(),
                    count,
                    running_count,
                }
            })
            .collect()
    }

    /// Every node record.
    pub fn nodes(&self) -> Vec<NodeRecord> {
        self.nodes.values().cloned().collect()
    }

    /// The stored first result for a request id, if the command was accepted (and its result
    /// is still within [`REQUEST_RETENTION_MS`]).
    pub fn request_outcome(&self, request_id: &RequestId) -> Option<&RequestOutcome> {
        self.requests.get(request_id)
    }

    /// How many accepted commands' results are stored for retries.
    pub fn request_count(&self) -> usize {
        self.requests.len()
    }

    /// A stable 64-bit digest (FNV-1a) of the serialized state: equal states, equal digests.
    pub fn digest(&self) -> u64 {
        let bytes = serde_json::to_vec(self).unwrap_or_default();
        fnv1a(&bytes)
    }
}

/// FNV-1a over bytes.
/// The session whose state, placement or descriptor `cmd` may change (a birth is filed by
/// `register` itself).
fn reindexed_session(cmd: &Command) -> Option<&SessionId> {
    match cmd {
        Command::ConfirmStart { session, .. }
        | Command::ExpireStart { session, .. }
        | Command::ClaimPlacement { session, .. }
        | Command::ReleasePlacement { session, .. }
        | Command::SetState { session, .. }
        | Command::Dispose { session, .. }
        | Command::SetDescriptor { session, .. } => Some(session),
        Command::RegisterSession { .. }
        | Command::RecordUsage { .. }
        | Command::CloseAdmission { .. }
        | Command::Heartbeat { .. }
        | Command::AppendRun { .. }
        | Command::Purge { .. } => None,
    }
}

pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// Maps a core rule's error to the refusal naming that rule.
pub(crate) fn refusal_from_core(err: CoreError) -> RegistryRefusal {
    match err {
        CoreError::Depth(e) => RegistryRefusal::DepthExceeded {
            attempted_depth: e.attempted_depth,
            max_depth: e.max_depth,
        },
        CoreError::DepthOverflow { parent_depth } => {
            RegistryRefusal::DepthOverflow { parent_depth }
        }
        CoreError::InvalidHeader { field, reason } => RegistryRefusal::InvalidHeader {
            field: field.to_owned(),
            reason,
        },
        other => RegistryRefusal::Malformed {
            reason: other.to_string(),
        },
    }
}

/// An agent's write is fenced by the placement epoch it holds: refused (`epoch_mismatch`)
/// unless the session is placed at that epoch; an unfenced write (`None`) passes.
fn fenced(
    record: &SessionRecord,
    session: &SessionId,
    expected_epoch: Option<u64>,
) -> Result<(), RegistryRefusal> {
    let current = record.placement.as_ref().map_or(0, |p| p.epoch);
    match expected_epoch {
        Some(expected) if expected != current => Err(RegistryRefusal::EpochMismatch {
            session: session.clone(),
            expected,
            current,
        }),
        Some(_) | None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
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
        s.apply(&heartbeat("h1", 5));
        assert_eq!(s.request_count(), 2);

        // Exactly one window later nothing is pruned: a retry still gets the first result.
        s.apply(&heartbeat("h2", 1 + REQUEST_RETENTION_MS));
        assert_eq!(s.request_count(), 3);
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

        // One past the window: r1 is forgotten (h1 at 5 ms is still within it).
        s.apply(&heartbeat("h3", 2 + REQUEST_RETENTION_MS));
        assert!(s.request_outcome(&rid("r1")).is_none());
        assert_eq!(s.request_outcome(&rid("h1")).map(|o| o.at_ms), Some(5));
        assert_eq!(s.request_count(), 3);
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
        assert_eq!(s.request_count(), 1);
        assert_eq!(restored.digest(), s.digest());
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
        assert_eq!(r.runs, vec![run.clone()]);
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
}
