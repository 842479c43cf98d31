//! The writer's identity (Z2): a node's registry writes arrive on
//! `lineage.<cluster>.registry.write.<node>` (NATS permissions can give each worker exactly its
//! own subject), and the serving member refuses a command that acts as another node before it
//! is proposed. Pure: a function of the command and the subject's identity token.
//!
//! Acting *as a node* means: renewing its lease (`heartbeat`), claiming a placement onto it
//! (`claim_placement`) and confirming that it hosts a session (`confirm_start`, or a
//! `register_session` that says `hosted`). Other commands name sessions, not nodes, and are
//! fenced by the state machine's own rules (epochs, admission, lineage); a registration that
//! is not `hosted` may place a child on another node (`starting`, until that node confirms it),
//! so it is not an identity claim.

use lineage_core::ids::NodeId;

use crate::types::{Command, RegistryRefusal};

/// Refuses `cmd` written by `sender` when it acts as another node; a sender token that is not
/// a node id is refused as malformed.
pub fn check_sender(cmd: &Command, sender: &str) -> Result<(), RegistryRefusal> {
    let sender = NodeId::parse(sender).map_err(|e| RegistryRefusal::Malformed {
        reason: format!("the write subject's identity token is not a node id: {e}"),
    })?;
    let acts_as = match cmd {
        Command::Heartbeat { node, .. }
        | Command::ClaimPlacement { node, .. }
        | Command::ReleasePlacement { node, .. }
        | Command::ConfirmStart { node, .. } => Some(node),
        Command::RegisterSession {
            node: Some(node),
            hosted: true,
            ..
        } => Some(node),
        Command::RegisterSession { .. }
        | Command::ExpireStart { .. }
        | Command::SetState { .. }
        | Command::RecordUsage { .. }
        | Command::CloseAdmission { .. }
        | Command::Dispose { .. }
        | Command::AppendRun { .. }
        | Command::SetDescriptor { .. }
        | Command::Purge { .. }
        | Command::ForgetResults { .. } => None,
    };
    match acts_as {
        Some(node) if node != &sender => Err(RegistryRefusal::SenderMismatch {
            sender,
            node: node.clone(),
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_core::ids::RequestId;

    fn heartbeat(node: &str) -> Command {
        Command::Heartbeat {
            request_id: RequestId::parse("01936c1e-7a3b-7cde-8f00-0000000000aa").unwrap(),
            at_ms: 1,
            node: NodeId::parse(node).unwrap(),
            lease_ms: 1000,
            info: None,
        }
    }

    #[test]
    fn z2_a_node_heartbeats_only_as_itself() {
        assert!(check_sender(&heartbeat("node-4"), "node-4").is_ok());
        let refused = check_sender(&heartbeat("node-1"), "node-4").unwrap_err();
        assert_eq!(refused.kind(), "sender_mismatch");
        assert_eq!(
            refused.to_string(),
            "node node-4 cannot act as node node-1: a node heartbeats and claims placements only as itself"
        );
        assert_eq!(
            check_sender(&heartbeat("node-1"), "bad token!")
                .unwrap_err()
                .kind(),
            "malformed"
        );
    }

    #[test]
    fn z2_only_the_hosting_node_registers_a_hosted_birth() {
        let register = |hosted: bool| Command::RegisterSession {
            request_id: RequestId::parse("01936c1e-7a3b-7cde-8f00-0000000000ab").unwrap(),
            at_ms: 1,
            header: lineage_core::header::SessionHeader::top_level(
                lineage_core::ids::SessionId::parse("01936c1e-7a3b-7cde-8f00-0000000000ac")
                    .unwrap(),
                None,
                None,
            ),
            descriptor: None,
            max_depth: None,
            fan_out: Default::default(),
            budget: None,
            node: Some(NodeId::parse("node-2").unwrap()),
            run: None,
            start_within_ms: None,
            hosted,
        };
        assert!(check_sender(&register(true), "node-2").is_ok());
        assert_eq!(
            check_sender(&register(true), "node-1").unwrap_err().kind(),
            "sender_mismatch"
        );
        // Not hosted: node-1 may place a `starting` birth on node-2.
        assert!(check_sender(&register(false), "node-1").is_ok());
    }
}
