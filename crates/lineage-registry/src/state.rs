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
//!   The table is bounded by time: see [`REQUEST_RETENTION_MS`]. A heartbeat's result is not
//!   kept ([`Command::keeps_result`]): applied again, it changes nothing.
//!
//! A refused command returns [`CommandResponse::Refused`] and changes nothing (not even the
//! idempotency table). The state never reads a clock: time comes in the command.
//!
//! | file | what |
//! |---|---|
//! | `state.rs` | the state, `apply` (dispatch, idempotency, fencing) |
//! | `state/load.rs` | the serialized form, and the derived structures rebuilt from it on load |
//! | `state/results.rs` | the idempotency table's bounds: retention, `forget_results` |
//! | `state/register.rs` | births: `register` and the lineage checks |
//! | `state/lifecycle.rs` | claims, state changes, admission, dispose, start confirmation and expiry, heartbeats, runs, descriptors |
//! | `state/usage.rs` | usage summed up every ancestor, spent budgets (Q3) |
//! | `state/release.rs` | a placement handed off at shutdown (K1) |
//! | `state/purge.rs` | disposed sessions purged past their retention (Q5) |
//! | `state/queries.rs` | pages, subtrees, counts, sweeper reads, digest |
//! | `state/share.rs` | one copy of each id's text in a state read from a snapshot |
//! | `state/snapshot_codec.rs` | the snapshot's data in parts, encoded and decoded on every core |
//! | `state/tests.rs` | unit tests |

use std::collections::{BTreeMap, BTreeSet, VecDeque};

mod lifecycle;
mod load;
mod purge;
mod queries;
mod register;
mod release;
mod results;
mod share;
pub mod snapshot_codec;
mod usage;

use lineage_core::budget::BudgetSpent;
use lineage_core::depth::{resolve_child_depth, MaxDepth};
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

use load::StateRepr;
pub use results::{FORGET_BATCH, MIN_RESULTS_KEPT_MS, REQUEST_RETENTION_MS};

/// How a registration is born: already hosted by the node that writes it, or due to be
/// confirmed within the given ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Birth {
    Hosted,
    Due(u64),
}

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

use lineage_core::limits::BirthLimits;
use lineage_core::messages::StopReason;

/// The most records one [`RegistryState::spent_budgets`] answer holds (the sweeper's page).
pub const SPENT_BUDGETS_PAGE: usize = 256;

/// The most records one [`RegistryState::overdue_deadlines`] answer holds (the sweeper's page).
pub const OVERDUE_DEADLINES_PAGE: usize = 256;

/// The most records one [`RegistryState::overdue_births`] answer holds (the sweeper's page).
pub const OVERDUE_BIRTHS_PAGE: usize = 256;

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
                stop_reason,
                ..
            } => self.set_state(*at_ms, session, (*state, *stop_reason), *expected_epoch),
            Command::RecordUsage {
                at_ms,
                session,
                usage,
                expected_epoch,
                ..
            } => self.record_usage(*at_ms, session, usage, *expected_epoch),
            Command::CloseAdmission { at_ms, roots, .. } => self.close_admission(*at_ms, roots),
            Command::Dispose {
                at_ms,
                session,
                stop_reason,
                ..
            } => self.dispose(*at_ms, session, *stop_reason),
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
            Command::ForgetResults { at_ms, kept_ms, .. } => self.forget_results(*at_ms, *kept_ms),
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
                if cmd.keeps_result() {
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
                }
                response
            }
            Err(refusal) => CommandResponse::Refused(refusal),
        }
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
}

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
        | Command::Purge { .. }
        | Command::ForgetResults { .. } => None,
    }
}

/// FNV-1a over bytes.
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
mod tests;
