//! Request and reply bodies of the `lineage` control service (N3): a re-export of
//! `lineage_protocol::control`, where both ends of the wire find them (the CLI does not compile
//! the host). Routing is not in the bodies: a node forwarding a request sets the
//! `Lineage-Forwarded` header ([`lineage_protocol::envelope::FORWARDED_HEADER`]), and the
//! service hands the handlers a [`Hop`].

pub use lineage_protocol::control::*;
pub use lineage_protocol::envelope::Hop;
