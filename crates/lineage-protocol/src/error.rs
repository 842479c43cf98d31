//! [`ProtocolError`], the crate's one error enum.

/// What can go wrong reading protocol data outside a control request (a request's body errors
/// are [`crate::envelope::ControlError`]s, with a code).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A script's JSON did not parse (unknown field, wrong type): the parser's line.
    #[error("malformed script: {0}")]
    MalformedScript(String),
    /// A wire body (say an approval request) did not parse or has a version this lineage does
    /// not read: one line saying what was expected.
    #[error("malformed {0}")]
    Malformed(String),
    /// A cluster name is not a safe subject token.
    #[error("invalid cluster name {name:?}: {reason}; use letters, digits, '-' and '_'")]
    InvalidCluster {
        /// The refused name.
        name: String,
        /// What is wrong with it.
        reason: &'static str,
    },
}
