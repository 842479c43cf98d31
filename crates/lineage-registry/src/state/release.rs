//! K1, graceful shutdown: a node hands a session off (`release_placement`).
//!
//! A node that shuts down lets its running turns finish, then stops each idle agent without
//! settling it and releases its placement: the record keeps its node and epoch (re-adoption on
//! that node's restart still finds it) and is marked `released`. A released session is hosted
//! nowhere: requests about it are served (it is resumed) wherever they land, at once, without
//! waiting for the node's lease to expire, and nothing was cut short, so re-adoption resumes it
//! as it was instead of deciding as if a turn had just ended. The next claim (any node) makes a
//! new placement, not released.
//!
//! Only the node the session is placed on, at the epoch it holds, may release it: a node that
//! lost the placement meanwhile (another node claimed it) is refused with the current epoch.

use lineage_core::ids::{NodeId, SessionId};

use super::{Refusal, RegistryState};
use crate::types::{CommandResponse, RegistryRefusal, SessionState};

impl RegistryState {
    /// Marks `session`'s placement released by `node` at `expected_epoch`.
    pub(super) fn release_placement(
        &mut self,
        at_ms: u64,
        session: &SessionId,
        node: &NodeId,
        expected_epoch: u64,
    ) -> Refusal {
        let record = self.live(session)?;
        if record.state == SessionState::Starting {
            return Err(RegistryRefusal::NotStarted {
                session: session.clone(),
                refused: "a placement release (it was never hosted)".to_owned(),
            });
        }
        let Some(placement) = record.placement.as_mut() else {
            return Err(RegistryRefusal::EpochMismatch {
                session: session.clone(),
                expected: expected_epoch,
                current: 0,
            });
        };
        if placement.epoch != expected_epoch {
            return Err(RegistryRefusal::EpochMismatch {
                session: session.clone(),
                expected: expected_epoch,
                current: placement.epoch,
            });
        }
        if &placement.node != node {
            return Err(RegistryRefusal::WrongNode {
                session: session.clone(),
                node: node.clone(),
                placed_on: placement.node.clone(),
            });
        }
        placement.released = true;
        let placement = placement.clone();
        record.updated_at_ms = at_ms;
        Ok(CommandResponse::Released { placement })
    }
}

#[cfg(test)]
mod tests {
    use lineage_core::header::SessionHeader;
    use lineage_core::ids::{NodeId, RequestId};

    use crate::state::RegistryState;
    use crate::types::{Command, CommandResponse, Placement, RegistryRefusal, SessionState};

    use lineage_core::ids::sid;

    fn rid(s: &str) -> RequestId {
        RequestId::parse(s).unwrap()
    }

    fn node(n: &str) -> NodeId {
        NodeId::parse(n).unwrap()
    }

    /// A top-level session hosted by `n1` (running, placed at epoch 1).
    fn hosted() -> RegistryState {
        let mut s = RegistryState::default();
        let birth = Command::RegisterSession {
            request_id: rid("birth"),
            at_ms: 1,
            header: SessionHeader::top_level(sid(1), None, None),
            descriptor: None,
            max_depth: None,
            fan_out: Default::default(),
            budget: None,
            node: Some(node("n1")),
            run: None,
            start_within_ms: None,
            hosted: true,
        };
        assert!(matches!(
            s.apply(&birth),
            CommandResponse::Registered { .. }
        ));
        s
    }

    fn release(request: &str, by: &str, epoch: u64) -> Command {
        Command::ReleasePlacement {
            request_id: rid(request),
            at_ms: 5,
            session: sid(1),
            node: node(by),
            expected_epoch: epoch,
        }
    }

    fn placement(s: &RegistryState) -> Placement {
        s.session(&sid(1)).unwrap().placement.clone().unwrap()
    }

    #[test]
    fn k1_the_hosting_node_releases_and_the_next_claim_hosts_it_anew() {
        let mut s = hosted();
        let got = s.apply(&release("rel-1", "n1", 1));
        let released = Placement {
            node: node("n1"),
            epoch: 1,
            released: true,
        };
        assert_eq!(
            got,
            CommandResponse::Released {
                placement: released.clone()
            }
        );
        assert_eq!(placement(&s), released);
        assert_eq!(placement(&s).host(), None, "released: hosted nowhere");
        let record = s.session(&sid(1)).unwrap();
        assert_eq!(record.state, SessionState::Running, "the state is kept");
        assert_eq!(record.updated_at_ms, 5);
        // Still listed on its node: its restart finds it.
        assert_eq!(s.sessions_on_node(&node("n1")).len(), 1);
        // A retry is answered the same; the state does not change.
        let digest = s.digest();
        assert_eq!(
            s.apply(&release("rel-1", "n1", 1)),
            CommandResponse::Released {
                placement: released
            }
        );
        assert_eq!(s.digest(), digest);
        // Any node claims it at the epoch it saw; the new placement is not released.
        let claim = Command::ClaimPlacement {
            request_id: rid("claim"),
            at_ms: 6,
            session: sid(1),
            node: node("n2"),
            expected_epoch: 1,
            run: None,
            activate: false,
        };
        assert!(matches!(s.apply(&claim), CommandResponse::Placed { .. }));
        assert_eq!(
            placement(&s),
            Placement {
                node: node("n2"),
                epoch: 2,
                released: false
            }
        );
        assert_eq!(placement(&s).host(), Some(&node("n2")));
    }

    #[test]
    fn k1_only_the_node_holding_the_epoch_releases() {
        let mut s = hosted();
        let digest = s.digest();
        assert!(matches!(
            s.apply(&release("rel-a", "n2", 1)),
            CommandResponse::Refused(RegistryRefusal::WrongNode { .. })
        ));
        assert!(matches!(
            s.apply(&release("rel-b", "n1", 2)),
            CommandResponse::Refused(RegistryRefusal::EpochMismatch { current: 1, .. })
        ));
        assert_eq!(s.digest(), digest, "a refusal changes nothing");
        assert!(!placement(&s).released);
        // Unknown and disposed sessions are refused.
        let mut unknown = release("rel-c", "n1", 1);
        if let Command::ReleasePlacement { session, .. } = &mut unknown {
            *session = sid(9);
        }
        assert!(matches!(
            s.apply(&unknown),
            CommandResponse::Refused(RegistryRefusal::UnknownSession { .. })
        ));
        let dispose = Command::Dispose {
            stop_reason: None,
            request_id: rid("dispose"),
            at_ms: 7,
            session: sid(1),
        };
        assert!(matches!(
            s.apply(&dispose),
            CommandResponse::Disposed { .. }
        ));
        assert!(matches!(
            s.apply(&release("rel-d", "n1", 1)),
            CommandResponse::Refused(RegistryRefusal::SessionDisposed { .. })
        ));
    }

    #[test]
    fn k1_a_released_placement_round_trips_and_an_unreleased_one_keeps_its_bytes() {
        let plain = Placement {
            node: node("n1"),
            epoch: 3,
            released: false,
        };
        let json = serde_json::to_string(&plain).unwrap();
        assert_eq!(
            json, r#"{"node":"n1","epoch":3}"#,
            "older readers see no new field"
        );
        let released = Placement {
            released: true,
            ..plain
        };
        let json = serde_json::to_string(&released).unwrap();
        assert_eq!(json, r#"{"node":"n1","epoch":3,"released":true}"#);
        assert_eq!(serde_json::from_str::<Placement>(&json).unwrap(), released);
    }
}
