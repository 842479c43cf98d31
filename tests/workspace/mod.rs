//! What the workspace suites share (issue 39): the ACP test agent's replies, a client's
//! project, the snapshots a session's log names, the cluster's bucket.

#![allow(dead_code)]

use std::path::Path;
use std::time::Duration;

use lineage_testkit::prelude::{Cluster, Event};

/// How long a suite waits for what it expects.
pub const T: Duration = Duration::from_secs(60);

/// The replies in a log, turn by turn.
pub fn replies(log: &[Event]) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "turn/assistant")
        .map(|e| e.data["text"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// The reply of the session's turn number `n` (1 first), once it is there.
pub fn reply_n(c: &Cluster, session: &str, n: usize) -> String {
    let log = c.wait_log(session, T, &format!("reply {n}"), |log| {
        replies(log).len() >= n
    });
    replies(&log)[n - 1].clone()
}

/// Writes `text` at `rel` under `root`, making its directories.
pub fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The client's project: two files, and a build output `.gitignore` leaves out.
pub fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "a.txt", "hello from the client\n");
    write(dir.path(), "src/lib.rs", "fn main() {}\n");
    write(dir.path(), ".gitignore", "target/\n");
    write(dir.path(), "target/huge.bin", "ignored build output\n");
    dir
}

pub fn snapshots(c: &Cluster, session: &str) -> Vec<Event> {
    c.log(session)
        .into_iter()
        .filter(|e| e.kind == "workspace/snapshot")
        .collect()
}

/// The names of the objects in the cluster's workspace bucket.
pub fn bucket_objects(c: &Cluster) -> Vec<String> {
    let subjects = lineage_bus::Subjects::new(&c.cluster).unwrap();
    let url = c.nats.url();
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        use futures::StreamExt;
        let nats = async_nats::connect(url).await.unwrap();
        let js = async_nats::jetstream::new(nats);
        let store = js
            .get_object_store(subjects.workspace_bucket())
            .await
            .unwrap();
        let mut names: Vec<String> = store
            .list()
            .await
            .unwrap()
            .map(|info| info.unwrap().name)
            .collect()
            .await;
        names.sort();
        names
    })
}

/// `dir` packed as `lineage spawn --workspace` packs it.
pub fn lineage_workspace_bytes(dir: &Path) -> Vec<u8> {
    lineage_workspace::pack(dir, lineage_workspace::Caps::default())
        .unwrap()
        .bytes
}
