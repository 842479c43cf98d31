//! lineage-bus (skeleton: filled in by later issues).
#![deny(missing_docs)]
