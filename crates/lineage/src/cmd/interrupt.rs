//! `lineage interrupt`: cancel a live session's current turn, as its parent's user or as an
//! ancestor (M4, R3). Exit 0 when a turn was cancelled or the session is live and idle; exit 3
//! (not found) when it is not live anywhere, so nothing could be cancelled.

use lineage_bus::control::ControlError;
use lineage_core::authority::InterruptAuthority;
use lineage_protocol::control::{InterruptOutcome, InterruptRequest};
use lineage_protocol::envelope::ErrorCode;

use crate::client::{control, parse_session, print_json};
use crate::global::Global;
use crate::output::usage;

/// `interrupt` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The session to interrupt.
    pub target: String,
    /// Act as the user of this parent session.
    #[arg(long, conflicts_with = "as_ancestor")]
    pub as_user: Option<String>,
    /// Act as this ancestor session.
    #[arg(long, conflicts_with = "top_level")]
    pub as_ancestor: Option<String>,
    /// Act as the user of a top-level target (cancel its own turn).
    #[arg(long, conflicts_with = "as_user")]
    pub top_level: bool,
}

/// Sends the interrupt and prints what it did.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let Args {
        target,
        as_user,
        as_ancestor,
        top_level,
    } = args;
    let target = parse_session("target", &target)?;
    let authority = match (as_user, as_ancestor, top_level) {
        (Some(p), None, false) => InterruptAuthority::User {
            parent_session_id: parse_session("--as-user", &p)?,
        },
        (None, Some(a), false) => InterruptAuthority::Ancestor {
            session: parse_session("--as-ancestor", &a)?,
        },
        (None, None, true) => InterruptAuthority::TopLevel,
        _ => {
            return Err(usage(
                "say who interrupts: --as-user PARENT_SESSION, --as-ancestor SESSION, or --top-level for a top-level session",
            ))
        }
    };
    let reply = control(g)
        .await?
        .interrupt(&InterruptRequest { target, authority })
        .await?;
    let on = reply
        .node
        .as_ref()
        .map(|n| format!(" on {n}"))
        .unwrap_or_default();
    let words = match reply.outcome {
        InterruptOutcome::Cancelled => format!("cancelled the running turn of {}{on}", reply.target),
        InterruptOutcome::NothingRunning => format!(
            "nothing to cancel: {} is live{on} but no turn is running",
            reply.target
        ),
        // Nothing was interrupted because nothing of it runs anywhere: not found (exit 3).
        InterruptOutcome::NotLive => {
            return Err(ControlError::new(
                ErrorCode::NotFound,
                format!(
                    "nothing to cancel: {} is not live on any node (cold, settled or disposed); `lineage send` resumes a continuable session",
                    reply.target
                ),
            ))
        }
    };
    if g.json {
        print_json(&reply);
    } else {
        println!("{words}");
    }
    Ok(())
}
