//! `lineage send`: the next user message to a session (followup, M3); a cold child is
//! cold-resumed first. Each invocation mints a request id, so a retried send is delivered once.

use lineage_bus::control::ControlError;
use lineage_core::ids::RequestId;
use lineage_protocol::control::{FollowupReply, FollowupRequest};

use crate::client::{control, parse_session, print_json};
use crate::global::Global;
use crate::output::usage;

/// `send` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session.
    pub session: String,
    /// The message.
    pub content: String,
    /// Idempotency key: a retried send with the same id is recognised and delivered once
    /// (default: a fresh UUIDv7 per invocation; print it with --json to retry by hand).
    #[arg(long)]
    pub request_id: Option<String>,
}

/// Sends `content` to `session` as a followup with `request_id` (a fresh UUIDv7 when `None`):
/// what `lineage send` and `lineage ui`'s followup box do.
pub(crate) async fn followup(
    g: &Global,
    session: &str,
    content: String,
    request_id: Option<RequestId>,
) -> Result<FollowupReply, ControlError> {
    let session = parse_session("session", session)?;
    let request_id = match request_id {
        Some(r) => r,
        None => RequestId::parse(&uuid::Uuid::now_v7().to_string())
            .map_err(|e| usage(format!("cannot mint a request id: {e}")))?,
    };
    control(g)
        .await?
        .followup(&FollowupRequest {
            session,
            content,
            request_id: Some(request_id),
        })
        .await
}

/// Sends the followup and prints how it was delivered.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let Args {
        session,
        content,
        request_id,
    } = args;
    let request_id = request_id
        .map(|r| RequestId::parse(&r).map_err(|e| usage(format!("--request-id: {e}"))))
        .transpose()?;
    let reply = followup(g, &session, content, request_id).await?;
    if g.json {
        print_json(&reply);
    } else {
        println!("{}", crate::output::followup_words(&reply));
    }
    Ok(())
}
