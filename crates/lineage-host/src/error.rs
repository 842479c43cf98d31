//! [`HostError`]: the one error enum of `lineage-host`.
//!
//! Every message is one line that says what was wrong and what to do next; the control service
//! turns each variant into an error code with [`HostError::code`].

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::BusError;
use lineage_core::CoreError;
use lineage_drivers::DriverError;
use lineage_registry::types::RegistryRefusal;

/// Everything hosting an agent can fail with. Returned, never panicked.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The request or an input (script, spec, id) is invalid; nothing was changed.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// A lineage rule of the core refused it (depth, header, log, activation, authority).
    #[error(transparent)]
    Core(#[from] CoreError),
    /// The registry refused the command (a rule enforced at apply time); nothing changed.
    #[error("registry refused: {0}")]
    Refused(RegistryRefusal),
    /// The registry could not be reached or did not answer in time.
    #[error("registry unavailable: {0}; check that a registry quorum is up, then retry")]
    RegistryUnavailable(String),
    /// A NATS or JetStream operation failed.
    #[error(transparent)]
    Bus(#[from] BusError),
    /// A named session is not registered.
    #[error("session {0} is not registered; check the id")]
    UnknownSession(String),
    /// The session is registered but not hosted (live) on this node.
    #[error("session {session} is not live on node {node}; resume it first or ask the node that hosts it")]
    NotLive {
        /// The session.
        session: String,
        /// This node.
        node: String,
    },
    /// The session's node is down (its lease expired): it cannot take a child until it runs
    /// again somewhere (a followup resumes it).
    #[error("session {session} runs on node {node}, which is down (its lease expired); send it a followup to resume it on a live node, then spawn again")]
    NodeDown {
        /// The session.
        session: String,
        /// Its node.
        node: String,
    },
    /// The session is still `starting`: registered, but no node hosts it yet (its node is
    /// writing its creation window, or it never starts and the sweeper disposes it).
    #[error(
        "session {0} is still starting (registered, not yet hosted by any node); retry shortly"
    )]
    Starting(String),
    /// The session is disposed: it can take no message, no turn and no child any more.
    #[error("session {0} is disposed; start a new session instead")]
    Disposed(String),
    /// Another node won the placement claim of this session (K1): it hosts it now.
    #[error("session {session} was claimed by node {node} first; send the request to that node")]
    ClaimLost {
        /// The session.
        session: String,
        /// The winner, if known.
        node: String,
    },
    /// The caller has no authority over the target (M4); nothing was changed.
    #[error("not authorized: {0}")]
    NotAuthorized(String),
    /// The agent driver failed (start, turn or shutdown).
    #[error("agent {session} failed: {reason}")]
    Driver {
        /// The hosted session.
        session: String,
        /// What the driver reported.
        reason: String,
    },
    /// A driver kind is not available on this node (for example ACP without a command runner).
    #[error(
        "driver {0} is not available on this node; configure it or place the child on another node"
    )]
    DriverUnavailable(String),
    /// Another node answered a control request with an error.
    #[error("node replied: {0}")]
    Remote(ControlError),
    /// A peer node did not answer, or the operation did not finish in time.
    #[error("unavailable: {0}; check that the node runs and retry")]
    Unavailable(String),
    /// This node cannot renew its lease in time (the registry does not answer its heartbeats),
    /// so it delivers nothing to a session it hosts (K1: another node may claim the session
    /// once the lease runs out). Nothing was changed; the reply carries a retry hint.
    #[error("node {node} cannot renew its lease (the registry does not answer it in time), so it does not deliver to session {session} now; retry in {} ms (with the same request id), or check `lineage status`", retry_after.as_millis())]
    LeaseNotHeld {
        /// This node.
        node: String,
        /// The session.
        session: String,
        /// When a renewal is next due: the hint the caller gets.
        retry_after: std::time::Duration,
    },
    /// A session's files could not be stored or materialized (issue 39): one line saying why.
    #[error("{0}")]
    Workspace(#[from] lineage_workspace::WorkspaceError),
    /// The host is shutting down and takes no new work.
    #[error("host on node {0} is shutting down; send the request to another node")]
    ShuttingDown(String),
    /// An invariant of the host broke (a bug); the message says which.
    #[error("internal error: {0}; this is a bug, please report it")]
    Internal(String),
}

impl HostError {
    /// When this error refuses what was asked (a rule said no, or the request was bad), the
    /// rule's short name for `lineage_refusals_total{reason}`: a registry refusal's kind (e.g.
    /// `fan_out_exceeded`), `depth_exceeded`, `not_authorized` or `bad_request`. `None` for
    /// what is not a refusal (unavailable, internal, ...).
    pub fn refusal_reason(&self) -> Option<&'static str> {
        match self {
            HostError::Refused(refusal) => Some(refusal.kind()),
            HostError::Core(CoreError::DepthOverflow { .. } | CoreError::Depth(_)) => {
                Some("depth_exceeded")
            }
            HostError::Core(CoreError::NotAuthorized { .. }) | HostError::NotAuthorized(_) => {
                Some("not_authorized")
            }
            other => match other.code() {
                ErrorCode::BadRequest => Some("bad_request"),
                _ => None,
            },
        }
    }

    /// The control-service error code of this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            HostError::BadRequest(_) => ErrorCode::BadRequest,
            HostError::Core(core) => match core {
                CoreError::InvalidId { .. }
                | CoreError::InvalidNumber { .. }
                | CoreError::InvalidPayload { .. }
                | CoreError::UnsupportedVersion { .. }
                | CoreError::InvalidHeader { .. } => ErrorCode::BadRequest,
                CoreError::DepthOverflow { .. }
                | CoreError::Depth(_)
                | CoreError::IllegalTransition { .. }
                | CoreError::NotAuthorized { .. } => ErrorCode::Refused,
                CoreError::InvalidLog { .. } | CoreError::InvalidTree { .. } => ErrorCode::Internal,
            },
            HostError::Refused(refusal) => match refusal {
                RegistryRefusal::UnknownSession { .. } | RegistryRefusal::ParentMissing { .. } => {
                    ErrorCode::NotFound
                }
                RegistryRefusal::Malformed { .. } | RegistryRefusal::InvalidHeader { .. } => {
                    ErrorCode::BadRequest
                }
                RegistryRefusal::DuplicateSession { .. }
                | RegistryRefusal::IdPurged { .. }
                | RegistryRefusal::PurgeBatchTooLarge { .. }
                | RegistryRefusal::ParentDisposed { .. }
                | RegistryRefusal::RootMismatch { .. }
                | RegistryRefusal::DepthMismatch { .. }
                | RegistryRefusal::DepthExceeded { .. }
                | RegistryRefusal::DepthOverflow { .. }
                | RegistryRefusal::FanOutExceeded { .. }
                | RegistryRefusal::DeadlineBeyondParent { .. }
                | RegistryRefusal::BudgetSpent(_)
                | RegistryRefusal::AdmissionClosed { .. }
                | RegistryRefusal::SessionDisposed { .. }
                | RegistryRefusal::EpochMismatch { .. }
                | RegistryRefusal::UndisposedChildren { .. }
                | RegistryRefusal::UseDispose { .. }
                | RegistryRefusal::RequestIdReused { .. }
                | RegistryRefusal::NotStarting { .. }
                | RegistryRefusal::StartNotDue { .. }
                | RegistryRefusal::WrongNode { .. }
                | RegistryRefusal::SenderMismatch { .. } => ErrorCode::Refused,
                // Transient: it runs shortly, or is disposed at its start deadline.
                RegistryRefusal::NotStarted { .. } => ErrorCode::Unavailable,
            },
            HostError::RegistryUnavailable(_)
            | HostError::Starting(_)
            | HostError::Unavailable(_)
            | HostError::ShuttingDown(_)
            | HostError::DriverUnavailable(_) => ErrorCode::Unavailable,
            HostError::Bus(bus) => match bus {
                BusError::Connect { .. }
                | BusError::Timeout { .. }
                | BusError::JetStream { .. }
                | BusError::Nats { .. } => ErrorCode::Unavailable,
                BusError::Protocol(_)
                | BusError::Config(_)
                | BusError::Json { .. }
                | BusError::Core(_) => ErrorCode::BadRequest,
                BusError::LogConflict { .. } | BusError::StreamReplicas { .. } => {
                    ErrorCode::Refused
                }
            },
            HostError::UnknownSession(_) | HostError::NotLive { .. } => ErrorCode::NotFound,
            HostError::NodeDown { .. } | HostError::LeaseNotHeld { .. } => ErrorCode::Unavailable,
            HostError::Disposed(_) | HostError::ClaimLost { .. } | HostError::NotAuthorized(_) => {
                ErrorCode::Refused
            }
            HostError::Driver { .. } | HostError::Internal(_) => ErrorCode::Internal,
            HostError::Remote(e) => e.code,
            HostError::Workspace(e) => match e {
                lineage_workspace::WorkspaceError::NotADirectory { .. }
                | lineage_workspace::WorkspaceError::BadDigest(_)
                | lineage_workspace::WorkspaceError::BadEntry { .. } => ErrorCode::BadRequest,
                lineage_workspace::WorkspaceError::OverCap { .. }
                | lineage_workspace::WorkspaceError::DigestMismatch { .. }
                | lineage_workspace::WorkspaceError::Conflicts { .. } => ErrorCode::Refused,
                lineage_workspace::WorkspaceError::TargetNotEmpty { .. }
                | lineage_workspace::WorkspaceError::Io { .. } => ErrorCode::Internal,
            },
        }
    }

    /// The error as a control-service error (code plus one line).
    pub fn to_control(&self) -> ControlError {
        match self {
            HostError::Remote(e) => e.clone(),
            HostError::LeaseNotHeld { retry_after, .. } => {
                ControlError::new(self.code(), self.to_string()).with_retry_after(*retry_after)
            }
            other => ControlError::new(other.code(), other.to_string()),
        }
    }
}

impl From<ControlError> for HostError {
    fn from(e: ControlError) -> Self {
        HostError::Remote(e)
    }
}

/// A driver's error keeps its text and meaning: each variant maps to the host variant of the
/// same message (so the error code is the same too).
impl From<DriverError> for HostError {
    fn from(e: DriverError) -> Self {
        match e {
            DriverError::BadRequest(m) => HostError::BadRequest(m),
            DriverError::Agent { session, reason } => HostError::Driver { session, reason },
            DriverError::Unavailable(kind) => HostError::DriverUnavailable(kind),
            DriverError::ToolsSocket(m) => HostError::Unavailable(format!("tools socket: {m}")),
            DriverError::Internal(m) => HostError::Internal(m),
        }
    }
}

/// What [`HostError::Unavailable`] adds around its reason.
const UNAVAILABLE_PREFIX: &str = "unavailable: ";
const UNAVAILABLE_HINT: &str = "; check that the node runs and retry";

impl HostError {
    /// [`HostError::Unavailable`] of another node's `unavailable` answer: its reason once, not
    /// wrapped a second time (a forwarded request used to say "unavailable: unavailable: ...;
    /// check that the node runs and retry; check that the node runs and retry").
    pub(crate) fn unavailable_from_remote(message: String) -> Self {
        let reason = message
            .strip_prefix(UNAVAILABLE_PREFIX)
            .and_then(|m| m.strip_suffix(UNAVAILABLE_HINT))
            .map(str::to_owned)
            .unwrap_or(message);
        HostError::Unavailable(reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn o3_a_remote_unavailable_is_said_once() {
        let remote = HostError::Unavailable("nobody serves lineage.dev.node.node-4.start".into());
        let again = HostError::unavailable_from_remote(remote.to_string());
        assert_eq!(
            again.to_string(),
            "unavailable: nobody serves lineage.dev.node.node-4.start; check that the node runs and retry"
        );
        let other = HostError::unavailable_from_remote("no reply within 5 s".into());
        assert_eq!(
            other.to_string(),
            "unavailable: no reply within 5 s; check that the node runs and retry"
        );
    }

    #[test]
    fn k1_a_lease_not_held_is_unavailable_with_a_retry_hint_of_the_next_renewal() {
        let e = HostError::LeaseNotHeld {
            node: "node-5".into(),
            session: "s-1".into(),
            retry_after: std::time::Duration::from_millis(500),
        };
        let control = e.to_control();
        assert_eq!(control.code, ErrorCode::Unavailable);
        assert_eq!(control.retry_after_ms, Some(500));
        assert_eq!(
            control.message,
            "node node-5 cannot renew its lease (the registry does not answer it in time), so it does not deliver to session s-1 now; retry in 500 ms (with the same request id), or check `lineage status`"
        );
        // Passed on by a forwarding node as it came, hint included.
        assert_eq!(HostError::Remote(control.clone()).to_control(), control);
        // Other errors carry no hint.
        let plain = HostError::Unavailable("no reply".into()).to_control();
        assert_eq!(plain.retry_after_ms, None);
    }

    #[test]
    fn a_driver_error_keeps_its_line_and_gets_its_code() {
        let cases = [
            (DriverError::BadRequest("x".into()), ErrorCode::BadRequest),
            (
                DriverError::Agent {
                    session: "s".into(),
                    reason: "r".into(),
                },
                ErrorCode::Internal,
            ),
            (
                DriverError::Unavailable("acp".into()),
                ErrorCode::Unavailable,
            ),
            (DriverError::Internal("i".into()), ErrorCode::Internal),
        ];
        for (driver, code) in cases {
            let line = driver.to_string();
            let host = HostError::from(driver);
            assert_eq!(host.to_string(), line);
            assert_eq!(host.code(), code);
        }
    }
}
