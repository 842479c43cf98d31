//! Issue 13 (scale: memory per session at a million sessions): the inline size of what the
//! registry holds per session stays within the allocator's size class it was fitted to.
//!
//! A record is boxed (`Box<SessionRecord>`): an allocation of its inline size, rounded up to
//! the allocator's class (mimalloc's classes around it: 224, 256, 320 bytes), so a field that
//! pushes it past 256 costs every session 64 bytes. Fields most records never set are boxed
//! (usage, budget), numbers a header may omit take 8 bytes (`u64::MAX` for none), ids are
//! one thin pointer, runs a `ThinVec`. Adding a field: keep it under the bound, or measure
//! with `lineage bench scale` and move the bound with the figures (benches/README.md).

use lineage_core::header::SessionHeader;
use lineage_core::ids::{NodeId, SessionId};
use lineage_registry::{Placement, SessionRecord};

#[test]
fn scale_a_record_fits_the_256_byte_size_class() {
    let record = std::mem::size_of::<SessionRecord>();
    assert!(
        record <= 256,
        "SessionRecord is {record} B inline: past 256 B every session costs 64 B more (see this file's docs)"
    );
}

#[test]
fn scale_ids_headers_and_placements_are_compact() {
    assert_eq!(std::mem::size_of::<SessionId>(), 8);
    assert_eq!(std::mem::size_of::<NodeId>(), 8);
    assert_eq!(std::mem::size_of::<Option<Placement>>(), 24);
    let header = std::mem::size_of::<SessionHeader>();
    assert!(header <= 104, "SessionHeader is {header} B inline");
}
