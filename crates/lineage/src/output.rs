//! Output: human text on a terminal, JSON with `--json`; errors are one line on stderr with a
//! distinct exit code per class (usage 2, not found 3, refused 4, unavailable 5, other 1).

use lineage_bus::control::{ControlError, ErrorCode};

/// Prints an error line and returns its exit code.
pub fn fail(json: bool, error: &ControlError) -> i32 {
    if json {
        println!("{}", error_body(error));
    }
    eprintln!("error: {}", error.message);
    error.code.exit_code()
}

/// The `--json` form of an error: its code, its message and, when the server gave one, its
/// retry hint (K1), as on the wire.
pub fn error_body(error: &ControlError) -> serde_json::Value {
    let mut body = serde_json::json!({"error": {"code": error.code, "message": error.message}});
    if let Some(ms) = error.retry_after_ms {
        body["error"]["retry_after_ms"] = ms.into();
    }
    body
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn k1_the_json_error_carries_the_retry_hint_only_when_the_server_gave_one() {
        let plain = ControlError::new(ErrorCode::Unavailable, "no lease");
        assert_eq!(
            error_body(&plain),
            serde_json::json!({"error": {"code": "unavailable", "message": "no lease"}})
        );
        let hinted = plain.with_retry_after(std::time::Duration::from_millis(250));
        assert_eq!(
            error_body(&hinted),
            serde_json::json!({"error": {"code": "unavailable", "message": "no lease", "retry_after_ms": 250}})
        );
        assert_eq!(fail(false, &hinted), ErrorCode::Unavailable.exit_code());
    }
}
