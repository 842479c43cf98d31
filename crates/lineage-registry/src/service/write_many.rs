//! Several commands in one write request: a JSON array of commands on any write subject,
//! answered by one [`WriteReply::DoneMany`] with a response per command, in order.
//!
//! Each command is queued for group commit on its own, in the array's order, so they are
//! applied in that order (the batcher proposes in arrival order); each keeps its own request
//! id, rules and refusal (this is not a transaction: a refused command leaves the others
//! applied). A command the member cannot take (not the leader, shutting down) makes the whole
//! request answer that, after every queued one has its answer: the client sends the whole
//! array again, and the commands already applied are recognised by their ids. What it saves is
//! a request, a reply and a round trip per command: a drain's wave of disposals goes in a few
//! requests instead of one per session.

use serde_json::value::RawValue;

use super::{shutting_down, Server};
use crate::types::{CommandResponse, RegistryRefusal};
use crate::wire::{WriteReply, WRITE_MANY_ARRAY, WRITE_MANY_MAX};

/// Whether a write's payload is an array of commands (its first byte after white space).
pub(super) fn is_many(payload: &[u8]) -> bool {
    payload
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[')
}

impl Server {
    /// Serves a write of several commands (see the module documentation).
    pub(super) async fn write_many(&self, payload: &[u8], sender: Option<&str>) -> WriteReply {
        let refused = |reason: String| WriteReply::Done {
            response: CommandResponse::Refused(RegistryRefusal::Malformed { reason }),
        };
        let commands: Vec<Box<RawValue>> = match serde_json::from_slice(payload) {
            Ok(commands) => commands,
            Err(e) => {
                return refused(format!(
                    "{WRITE_MANY_ARRAY}s is a JSON array of commands: {e}"
                ))
            }
        };
        if commands.len() > WRITE_MANY_MAX {
            return refused(format!(
                "{WRITE_MANY_ARRAY}s takes at most {WRITE_MANY_MAX}; this one has {}: send them in smaller writes",
                commands.len()
            ));
        }
        let mut queued = Vec::with_capacity(commands.len());
        for command in &commands {
            queued.push(self.enqueue(command.get().as_bytes(), sender).await);
        }
        let mut responses = Vec::with_capacity(queued.len());
        let mut not_taken = None;
        for answer in queued {
            let reply = match answer {
                Ok(answer) => answer.await.unwrap_or_else(|_| shutting_down()),
                Err(reply) => reply,
            };
            match reply {
                WriteReply::Done { response } => responses.push(response),
                other @ (WriteReply::NotLeader { .. } | WriteReply::Unavailable { .. }) => {
                    not_taken.get_or_insert(other);
                }
                // `enqueue` answers one command at a time.
                WriteReply::DoneMany { .. } => {
                    not_taken.get_or_insert(WriteReply::Unavailable {
                        reason: "a command of the array was answered as an array".to_owned(),
                    });
                }
            }
        }
        not_taken.unwrap_or(WriteReply::DoneMany { responses })
    }
}
