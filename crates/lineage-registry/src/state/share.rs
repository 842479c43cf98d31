//! One copy of each id's text in a state read from a snapshot (issue 13, memory per session).
//!
//! Ids are shared text (one thin reference-counted pointer): a state built by `apply` keeps one copy of each session id
//! (the map key, the header, the parent's child set, the indexes and the idempotency result
//! all point at it) and of each node id. A state decoded from a snapshot has a copy per place
//! instead (serde reads each occurrence on its own): about six copies of each session id, which
//! made a member's memory grow by some 300 B per session after a restart or a snapshot
//! install. [`share_ids`] makes them one again before the derived indexes are built. It
//! changes no value, so the digest is unchanged.

use std::collections::{BTreeMap, HashSet};

use lineage_core::ids::{NodeId, RequestId, SessionId};

use super::RequestOutcome;
use crate::types::{CommandResponse, NodeRecord, SessionRecord};

type Sessions = BTreeMap<SessionId, Box<SessionRecord>>;

/// Shares every id of `sessions` (and the sessions named in `requests`' results) with the
/// record's own id, and every placement's node id with `nodes`' keys.
pub(super) fn share_ids(
    sessions: &mut Sessions,
    nodes: &BTreeMap<NodeId, NodeRecord>,
    requests: &mut BTreeMap<RequestId, RequestOutcome>,
) {
    // Every id once, hashed: a lookup per parent, root and child at a million records costs
    // a hash, not a walk down the map.
    let known: HashSet<SessionId> = sessions.keys().cloned().collect();
    let shared = |id: &SessionId| known.get(id).cloned().unwrap_or_else(|| id.clone());
    for (key, record) in sessions.iter_mut() {
        // The header's own id shares the map's key.
        let parent = record.header.parent_session().map(&shared);
        let root = shared(record.header.root_session());
        record.header.share_ids(key, parent.as_ref(), &root);
        if !record.children.is_empty() {
            record.children = record.children.iter().map(&shared).collect();
        }
        if let Some(placement) = record.placement.as_mut() {
            if let Some((node, _)) = nodes.get_key_value(&placement.node) {
                placement.node = node.clone();
            }
        }
    }
    for outcome in requests.values_mut() {
        if let CommandResponse::Registered { session, .. } = &mut outcome.response {
            *session = shared(session);
        }
    }
}

#[cfg(test)]
mod tests {
    use lineage_core::header::{child_session_meta, SessionHeader};
    use lineage_core::ids::{NodeId, RequestId, SessionId};
    use serde_json::json;

    use crate::state::RegistryState;
    use crate::types::{Command, CommandResponse};

    use lineage_core::ids::sid;

    /// The same text, not only an equal one.
    fn same(a: &SessionId, b: &SessionId) -> bool {
        std::ptr::eq(a.as_str().as_ptr(), b.as_str().as_ptr())
    }

    /// `cmd` as a member applies it: decoded from JSON, every id its own copy.
    fn applied(state: &mut RegistryState, cmd: Command) -> CommandResponse {
        let bytes = serde_json::to_vec(&cmd).expect("encode");
        state.apply(&serde_json::from_slice(&bytes).expect("decode"))
    }

    fn register(header: SessionHeader, n: u32) -> Command {
        Command::RegisterSession {
            request_id: RequestId::parse(&format!("r{n}")).expect("request id"),
            at_ms: 1,
            header,
            descriptor: Some(
                serde_json::from_value(
                    json!({"provider": "script", "mode": "continuable", "label": "x"}),
                )
                .unwrap(),
            ),
            max_depth: None,
            fan_out: Default::default(),
            budget: None,
            node: Some(NodeId::parse("node-1").expect("node")),
            run: None,
            start_within_ms: None,
            hosted: true,
        }
    }

    /// A root, a child and a grandchild on a known node, each command decoded as a member
    /// does.
    fn tree() -> RegistryState {
        let mut state = RegistryState::new();
        applied(
            &mut state,
            Command::Heartbeat {
                request_id: RequestId::parse("hb").expect("request id"),
                at_ms: 1,
                node: NodeId::parse("node-1").expect("node"),
                lease_ms: 60_000,
                info: None,
            },
        );
        let root = SessionHeader::top_level(sid(1), None, None);
        applied(&mut state, register(root.clone(), 1));
        let child = child_session_meta(&root, sid(2), 1, 0, None).expect("child");
        applied(&mut state, register(child.clone(), 2));
        let grandchild = child_session_meta(&child, sid(3), 2, 0, None).expect("grandchild");
        applied(&mut state, register(grandchild, 3));
        state
    }

    fn assert_shared(state: &RegistryState, when: &str) {
        let root = state.session(&sid(1)).expect("root");
        let child = state.session(&sid(2)).expect("child");
        let grandchild = state.session(&sid(3)).expect("grandchild");
        let g = &grandchild.header;
        assert!(
            same(g.parent_session().expect("parent"), child.id()),
            "{when}: parent"
        );
        assert!(same(g.root_session(), root.id()), "{when}: root");
        assert!(same(child.header.root_session(), root.id()), "{when}: root");
        assert!(
            same(root.header.root_session(), root.id()),
            "{when}: own root"
        );
        let listed = child.children.iter().next().expect("a child");
        assert!(same(listed, grandchild.id()), "{when}: child set");
        let node = |r: &crate::types::SessionRecord| {
            r.placement.as_ref().expect("placed").node.as_str().as_ptr()
        };
        assert!(std::ptr::eq(node(root), node(child)), "{when}: node");
        assert!(std::ptr::eq(node(root), node(grandchild)), "{when}: node");
    }

    #[test]
    fn apply_keeps_one_copy_of_each_id() {
        assert_shared(&tree(), "applied");
    }

    #[test]
    fn a_decoded_snapshot_keeps_one_copy_of_each_id_and_the_same_digest() {
        let state = tree();
        let snapshot = serde_json::to_vec(&state).expect("encode");
        let decoded: RegistryState = serde_json::from_slice(&snapshot).expect("decode");
        assert_shared(&decoded, "decoded");
        assert_eq!(decoded.digest(), state.digest());
        assert_eq!(decoded, state);
    }
}
