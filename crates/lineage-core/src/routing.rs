//! Where a request about a session is served (R2, T4, M3, M4): the node-local rules the host
//! used to decide inline, as pure functions.
//!
//! - [`route`]: forward-once routing. A request about a session that is active (running or
//!   waiting) on another node whose lease is current goes to that node, once: a request that
//!   was forwarded already is served where it landed, so two nodes that disagree about a
//!   placement never bounce a request between them.
//! - [`owner_of`]: the owner of a newly hosted agent. Its parent owns it (results go straight
//!   to the parent's mailbox) only when the parent is live on the same node; otherwise it has
//!   no local owner and its reports and settlements travel through the parent's inbox.

use crate::ids::{NodeId, SessionId};
use crate::lifecycle::SessionState;

/// Where to serve a request about one session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Serve it on this node (hosted here, cold, or already forwarded once).
    Here,
    /// Forward it to the node hosting the session.
    Forward(NodeId),
}

/// Forward-once routing: [`Route::Forward`] to the placement node when the session is active
/// (running or waiting) there, that node is another one, and the request was not forwarded
/// already. The caller then checks that node's lease: when it has expired the session is cold
/// and is served (resumed) here.
pub fn route(
    state: SessionState,
    placement: Option<&NodeId>,
    here: &NodeId,
    already_forwarded: bool,
) -> Route {
    let active = match state {
        SessionState::Running | SessionState::Waiting => true,
        SessionState::Starting | SessionState::Settled | SessionState::Disposed => false,
    };
    match placement {
        Some(node) if active && !already_forwarded && node != here => Route::Forward(node.clone()),
        Some(_) | None => Route::Here,
    }
}

/// Where a followup goes (M3, K1): like [`route`], and a settled continuable session goes back
/// to the node it was on, so it is resumed where it ran (its working directory, warm caches)
/// rather than wherever the request landed. The caller checks that node's lease as for
/// [`route`]: a dead node's session is resumed here.
pub fn route_followup(
    state: SessionState,
    placement: Option<&NodeId>,
    here: &NodeId,
    already_forwarded: bool,
) -> Route {
    match state {
        SessionState::Settled => route(SessionState::Waiting, placement, here, already_forwarded),
        SessionState::Running
        | SessionState::Waiting
        | SessionState::Starting
        | SessionState::Disposed => route(state, placement, here, already_forwarded),
    }
}

/// Where a new session is born (K1, graceful shutdown): the node the request names, else this
/// one, unless this node winds down: then another live node (`live_others`, this node left
/// out, in any order), picked by `spread` (say a hash of the new id) so births spread over
/// them, and this one only when there is no other. A birth here during the wind-down would
/// wait, quiesced, for the hand-off before its first turn, and a turn waiting for it would
/// wait with it.
pub fn birth_target(
    requested: Option<&NodeId>,
    here: &NodeId,
    winding_down: bool,
    live_others: &[NodeId],
    spread: usize,
) -> NodeId {
    match requested {
        Some(node) => node.clone(),
        None if winding_down && !live_others.is_empty() => {
            let mut others: Vec<&NodeId> = live_others.iter().filter(|n| *n != here).collect();
            others.sort();
            others.dedup();
            match others.is_empty() {
                true => here.clone(),
                false => others[spread % others.len()].clone(),
            }
        }
        None => here.clone(),
    }
}

/// The owner of an agent being hosted: its parent when the parent is live on this node, else
/// none (a top-level session has none either).
pub fn owner_of(parent: Option<&SessionId>, parent_live_here: bool) -> Option<SessionId> {
    parent.filter(|_| parent_live_here).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn m3_a_followup_to_a_settled_session_goes_back_to_its_node() {
        let (here, there) = (node("node-1"), node("node-2"));
        assert_eq!(
            route_followup(SessionState::Settled, Some(&there), &here, false),
            Route::Forward(there.clone())
        );
        // Plain routing serves a settled session where the request is.
        assert_eq!(
            route(SessionState::Settled, Some(&there), &here, false),
            Route::Here
        );
        // Forwarded once already, or placed here: here.
        assert_eq!(
            route_followup(SessionState::Settled, Some(&there), &here, true),
            Route::Here
        );
        assert_eq!(
            route_followup(SessionState::Settled, Some(&here), &here, false),
            Route::Here
        );
        for state in [SessionState::Starting, SessionState::Disposed] {
            assert_eq!(
                route_followup(state, Some(&there), &here, false),
                Route::Here
            );
        }
        assert_eq!(
            route_followup(SessionState::Running, Some(&there), &here, false),
            Route::Forward(there)
        );
    }

    fn node(n: &str) -> NodeId {
        NodeId::parse(n).unwrap()
    }

    #[test]
    fn k1_a_winding_down_node_births_elsewhere_unless_told_or_alone() {
        let (a, b, c) = (node("node-a"), node("node-b"), node("node-c"));
        let others = [c.clone(), b.clone(), a.clone()];
        // Serving: here, or the node asked for.
        assert_eq!(birth_target(None, &a, false, &others, 0), a);
        assert_eq!(birth_target(Some(&c), &a, true, &others, 0), c);
        // Winding down: another live node, spread, never this one.
        assert_eq!(birth_target(None, &a, true, &others, 0), b);
        assert_eq!(birth_target(None, &a, true, &others, 1), c);
        assert_eq!(birth_target(None, &a, true, &others, 2), b);
        // Nobody else is live: here after all.
        assert_eq!(birth_target(None, &a, true, &[], 5), a);
        assert_eq!(birth_target(None, &a, true, std::slice::from_ref(&a), 5), a);
    }

    fn routed(
        state: SessionState,
        placement: Option<&NodeId>,
        alive: bool,
        here: &NodeId,
        fwd: bool,
    ) -> Route {
        // The caller's lease check, as the host does it.
        match route(state, placement, here, fwd) {
            Route::Forward(node) if alive => Route::Forward(node),
            Route::Forward(_) | Route::Here => Route::Here,
        }
    }

    #[test]
    fn r2_active_elsewhere_is_forwarded_once() {
        let (a, b) = (node("node-a"), node("node-b"));
        for state in [SessionState::Running, SessionState::Waiting] {
            assert_eq!(
                routed(state, Some(&b), true, &a, false),
                Route::Forward(b.clone())
            );
            assert_eq!(
                routed(state, Some(&b), true, &a, true),
                Route::Here,
                "a forwarded request is never forwarded again"
            );
        }
    }

    #[test]
    fn r2_served_here_when_hosted_here_dead_elsewhere_or_not_active() {
        let (a, b) = (node("node-a"), node("node-b"));
        assert_eq!(
            routed(SessionState::Running, Some(&a), true, &a, false),
            Route::Here
        );
        assert_eq!(
            routed(SessionState::Running, Some(&b), false, &a, false),
            Route::Here,
            "its node's lease expired: cold, served (resumed) here"
        );
        assert_eq!(
            routed(SessionState::Running, None, true, &a, false),
            Route::Here
        );
        for state in [
            SessionState::Starting,
            SessionState::Settled,
            SessionState::Disposed,
        ] {
            assert_eq!(
                routed(state, Some(&b), true, &a, false),
                Route::Here,
                "{state:?}"
            );
        }
    }

    #[test]
    fn owner_is_the_parent_only_when_live_here() {
        let p = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap();
        assert_eq!(owner_of(Some(&p), true), Some(p.clone()));
        assert_eq!(owner_of(Some(&p), false), None);
        assert_eq!(owner_of(None, true), None);
        assert_eq!(owner_of(None, false), None);
    }
}
