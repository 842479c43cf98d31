//! The state rebuilt from its serialized form (a snapshot, a restart): [`StateRepr`] is what is
//! stored; the derived structures (age and deadline indexes, the listing indexes, the usage
//! summed up every ancestor) are built again from it, the listing indexes on a thread of their
//! own past [`INDEX_ON_ITS_OWN_THREAD_PAST`] sessions.

use super::*;

/// The serialized form of [`RegistryState`] (everything but the derived age index).
#[derive(Deserialize)]
pub(super) struct StateRepr {
    pub(super) sessions: BTreeMap<SessionId, Box<SessionRecord>>,
    pub(super) nodes: BTreeMap<NodeId, NodeRecord>,
    pub(super) requests: BTreeMap<RequestId, RequestOutcome>,
    #[serde(default)]
    pub(super) tombstone: Tombstone,
}

/// Past this many sessions the listing indexes are rebuilt on a thread of their own while the
/// other derived structures are built (issue 13: restart time).
pub(super) const INDEX_ON_ITS_OWN_THREAD_PAST: usize = 10_000;

/// The derived structures of a decoded state but the listing indexes and the usage sums.
struct Derived {
    requests_by_age: BTreeSet<(u64, RequestId)>,
    births_by_deadline: BTreeSet<(u64, SessionId)>,
    sessions_by_deadline: BTreeSet<(u64, SessionId)>,
    disposed_by_age: BTreeSet<(u64, SessionId)>,
}

impl Derived {
    fn of(repr: &StateRepr) -> Derived {
        let sessions = || repr.sessions.values();
        Derived {
            requests_by_age: repr
                .requests
                .iter()
                .map(|(id, outcome)| (outcome.at_ms, id.clone()))
                .collect(),
            births_by_deadline: sessions()
                .filter(|r| r.state == SessionState::Starting)
                .map(|r| (r.start_deadline_ms.unwrap_or(0), r.id().clone()))
                .collect(),
            sessions_by_deadline: sessions()
                .filter(|r| r.state != SessionState::Disposed)
                .filter_map(|r| Some((r.header.deadline_at_ms()?, r.id().clone())))
                .collect(),
            disposed_by_age: sessions()
                .filter(|r| r.state == SessionState::Disposed)
                .map(|r| (r.updated_at_ms, r.id().clone()))
                .collect(),
        }
    }
}

impl From<StateRepr> for RegistryState {
    fn from(mut repr: StateRepr) -> Self {
        share::share_ids(&mut repr.sessions, &repr.nodes, &mut repr.requests);
        let sessions = &repr.sessions;
        let build_index = || SessionIndex::build(sessions.values().map(|r| &**r));
        let (index, derived) = if sessions.len() <= INDEX_ON_ITS_OWN_THREAD_PAST {
            (build_index(), Derived::of(&repr))
        } else {
            // The index is the largest derived structure: built beside the others.
            std::thread::scope(|scope| {
                let index = scope.spawn(build_index);
                let derived = Derived::of(&repr);
                match index.join() {
                    Ok(index) => (index, derived),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            })
        };
        let Derived {
            requests_by_age,
            births_by_deadline,
            sessions_by_deadline,
            disposed_by_age,
        } = derived;
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
