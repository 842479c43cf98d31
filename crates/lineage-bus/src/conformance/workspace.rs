//! The workspace store's cases (issue 39): a snapshot reads back with the digest it was stored
//! with (`SHA-256=<base64url>` of its bytes, as NATS' Object Store records it); a put replaces;
//! an absent one is `None`; a purge removes only the purged sessions' objects.

use super::{sid, Backend};
use crate::ports::StoredWorkspace;

fn digest_of(bytes: &[u8]) -> String {
    lineage_workspace::Digest::of(bytes).to_string()
}

/// Round trip, replacement and absence, across handles.
pub async fn workspace_round_trip(b: &dyn Backend) {
    let (writer, reader) = (b.workspaces().await, b.workspaces().await);
    let one = lineage_core::workspace::base_object(&sid(301));
    assert_eq!(
        reader.get(&one).await.expect("get"),
        None,
        "absent at first"
    );
    // Larger than one object-store chunk (128 KiB), so chunks are joined in order.
    let big: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let digest = writer.put(&one, &big).await.expect("put");
    assert_eq!(digest, digest_of(&big));
    assert_eq!(
        reader.get(&one).await.expect("get"),
        Some(StoredWorkspace {
            bytes: big.clone(),
            digest
        })
    );
    let digest = writer.put(&one, b"second").await.expect("replace");
    assert_eq!(
        reader.get(&one).await.expect("get"),
        Some(StoredWorkspace {
            bytes: b"second".to_vec(),
            digest
        }),
        "a put replaces the snapshot"
    );
}

/// A purge removes the purged sessions' snapshots and no other.
pub async fn workspace_purge_removes_only_the_purged_sessions(b: &dyn Backend) {
    let store = b.workspaces().await;
    use lineage_core::workspace::{base_object, checkpoint_object};
    let (gone, kept, never) = (sid(311), sid(312), sid(313));
    store.put(&base_object(&gone), b"gone").await.expect("put");
    store
        .put(&checkpoint_object(&gone, 1), b"gone too")
        .await
        .expect("put");
    store.put(&base_object(&kept), b"kept").await.expect("put");
    crate::ports::purge_workspaces(&*store, &[gone.clone(), never.clone()])
        .await
        .expect("purge, an absent one included");
    assert_eq!(store.get(&base_object(&gone)).await.expect("get"), None);
    assert_eq!(
        store.get(&checkpoint_object(&gone, 1)).await.expect("get"),
        None
    );
    assert_eq!(
        store
            .get(&base_object(&kept))
            .await
            .expect("get")
            .map(|w| w.bytes),
        Some(b"kept".to_vec())
    );
}
