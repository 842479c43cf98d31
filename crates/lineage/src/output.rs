//! Output: human text on a terminal, JSON with `--json`; errors are one line on stderr with a
//! distinct exit code per class (usage 2, not found 3, refused 4, unavailable 5, other 1).

use lineage_bus::control::{ControlError, ErrorCode};

/// Prints an error line and returns its exit code.
pub fn fail(json: bool, error: &ControlError) -> i32 {
    if json {
        let body = serde_json::json!({"error": {"code": error.code, "message": error.message}});
        println!("{body}");
    }
    eprintln!("error: {}", error.message);
    error.code.exit_code()
}

/// A usage error (bad flags or input): exit 2.
pub fn usage(message: impl Into<String>) -> ControlError {
    ControlError::new(ErrorCode::BadRequest, message)
}

/// A followup's outcome in words (`lineage send`, the demo): never an enum name.
pub fn followup_words(reply: &lineage_protocol::control::FollowupReply) -> String {
    use lineage_protocol::control::FollowupOutcome;
    let (session, node) = (&reply.session, &reply.node);
    match reply.outcome {
        FollowupOutcome::Delivered => format!("delivered to {session} on {node}"),
        FollowupOutcome::ResumedAndDelivered => {
            format!("resumed {session} on {node} and delivered the message")
        }
        FollowupOutcome::AlreadyDelivered => format!(
            "already delivered: this request id was accepted before by {session} on {node}; nothing was added"
        ),
    }
}
