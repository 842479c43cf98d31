//! Writes of several commands in one request: [`RegistryClient::write_many`] sends a JSON
//! array of commands (see the members' side in `service/write_many.rs`). A member older than
//! arrays refuses one as a command it cannot read (malformed, in serde's words): then the
//! commands go one at a time, in order, so a client may be upgraded before the voters.

use super::RegistryClient;
use crate::error::RegistryError;
use crate::types::{Command, CommandResponse, RegistryRefusal};
use crate::wire::WRITE_MANY_ARRAY;

/// Whether `e` is an older member's refusal of an array it cannot read as one command: a
/// refusal of the request as a whole as malformed, in words no member that reads arrays uses
/// ([`WRITE_MANY_ARRAY`]).
fn takes_no_arrays(e: &RegistryError) -> bool {
    matches!(
        e,
        RegistryError::Refused(RegistryRefusal::Malformed { reason })
            if !reason.starts_with(WRITE_MANY_ARRAY)
    )
}

impl RegistryClient {
    /// Sends several commands in one request (at most [`crate::wire::WRITE_MANY_MAX`]) and
    /// returns one response per command, in order, refusals included. They are applied in
    /// that order, each on its own (not a transaction: a refused one leaves the others). The
    /// whole request is retried until the deadline like [`Self::write`]; commands already
    /// applied are recognised by their request ids. A member older than arrays gets them one
    /// at a time.
    pub async fn write_many(
        &self,
        cmds: &[Command],
    ) -> Result<Vec<CommandResponse>, RegistryError> {
        match cmds {
            [] => Ok(Vec::new()),
            [one] => Ok(vec![self.write(one).await?]),
            _ => match self.send_array(cmds).await {
                Err(e) if takes_no_arrays(&e) => {
                    tracing::debug!("the registry member takes no arrays of commands; writing them one at a time");
                    let mut responses = Vec::with_capacity(cmds.len());
                    for cmd in cmds {
                        responses.push(self.write(cmd).await?);
                    }
                    Ok(responses)
                }
                other => other,
            },
        }
    }
}
