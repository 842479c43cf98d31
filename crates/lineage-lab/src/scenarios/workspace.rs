//! `lineage bench workspace` (issue 39): what a session's workspace costs to travel, for trees of
//! 10 MB and 100 MB, on the bench's own nats-server (JetStream, `sync_interval` always):
//! snapshot it (`lineage_workspace::pack`: a gzip'd tar honouring `.gitignore`), store it in the
//! Object Store (`NatsWorkspaces::put`), and read and materialize it on another "node"
//! (`get`, then `unpack`: digest, entry checks, staging). The aim (issue 39): under a second for
//! 100 MB end to end on this machine.
//!
//! The trees are half source-like text (compressible, as code is) and half random bytes (as
//! images and binaries are), in files of 4 to 64 KiB spread over nested directories.

use std::path::Path;
use std::time::Instant;

use lineage_bus::control::ControlError;
use lineage_bus::workspace::NatsWorkspaces;
use lineage_bus::{StreamOptions, WorkspaceStore};
use lineage_core::ids::SessionId;
use lineage_workspace::{pack, unpack, Caps, Digest};

use super::{internal, scaled, Bench};
use crate::bench::Samples;

/// `workspace`: pack, put, get + unpack of 10 MB and 100 MB trees.
pub(super) async fn workspace(b: &Bench) -> Result<(), ControlError> {
    let (store, caps) = store_and_caps(b);
    println!("trees: half source-like text, half random bytes, files of 4-64 KiB in nested directories; one object per snapshot in LINEAGE_<CLUSTER>_WORKSPACES");
    for (label, mib, runs) in [("10 MB", 10u64, 20usize), ("100 MB", 100, 5)] {
        let dir = tempfile::tempdir().map_err(|e| internal(format!("temp dir: {e}")))?;
        let files = make_tree(dir.path(), mib << 20)?;
        let session = SessionId::parse(&uuid::Uuid::now_v7().to_string())
            .map_err(|e| internal(e.to_string()))?;
        let object = lineage_core::workspace::base_object(&session);
        let n = scaled(runs).max(3);
        let (mut packs, mut puts, mut gets, mut unpacks, mut totals) = (
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
            Samples::default(),
        );
        let mut size = 0;
        let wall = Instant::now();
        for _ in 0..n {
            let t0 = Instant::now();
            let snap = pack(dir.path(), caps).map_err(|e| internal(e.to_string()))?;
            let t1 = Instant::now();
            store
                .put(&object, &snap.bytes)
                .await
                .map_err(|e| internal(e.to_string()))?;
            let t2 = Instant::now();
            let stored = store
                .get(&object)
                .await
                .map_err(|e| internal(e.to_string()))?
                .ok_or_else(|| internal("the snapshot just stored is not there"))?;
            let t3 = Instant::now();
            let into = tempfile::tempdir().map_err(|e| internal(format!("temp dir: {e}")))?;
            let digest = Digest::parse(&stored.digest).map_err(|e| internal(e.to_string()))?;
            unpack(&stored.bytes, &digest, &into.path().join("work"), caps)
                .map_err(|e| internal(e.to_string()))?;
            let t4 = Instant::now();
            size = snap.bytes.len();
            packs.latencies.push(t1 - t0);
            puts.latencies.push(t2 - t1);
            gets.latencies.push(t3 - t2);
            unpacks.latencies.push(t4 - t3);
            totals.latencies.push(t4 - t0);
        }
        for s in [&mut packs, &mut puts, &mut gets, &mut unpacks, &mut totals] {
            s.wall = wall.elapsed();
        }
        println!(
            "tree {label}: {files} files, {} bytes of content, snapshot {size} bytes ({:.2}x smaller)",
            mib << 20,
            (mib << 20) as f64 / size.max(1) as f64
        );
        b.report(&format!("workspace {label}: pack"), &packs);
        b.report(&format!("workspace {label}: put"), &puts);
        b.report(&format!("workspace {label}: get"), &gets);
        b.report(&format!("workspace {label}: unpack"), &unpacks);
        b.report(&format!("workspace {label}: end to end"), &totals);
        let _ = store.delete(&[object]).await;
    }
    Ok(())
}

/// The bench's workspace store, and caps no bench tree reaches.
pub(super) fn store_and_caps(b: &Bench) -> (NatsWorkspaces, Caps) {
    let store = NatsWorkspaces::new(
        b.ctl.client.clone(),
        &b.ctl.subjects,
        StreamOptions::default(),
    );
    let caps = Caps {
        max_bytes: 1 << 30,
        max_files: 1_000_000,
    };
    (store, caps)
}

/// Writes `bytes` of files under `root` (see the module docs); returns how many files.
pub(super) fn make_tree(root: &Path, bytes: u64) -> Result<u64, ControlError> {
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let line = b"    let value = compute(input, &config).map_err(|e| Error::new(e))?; // step\n";
    let (mut written, mut files) = (0u64, 0u64);
    while written < bytes {
        let len = (4096 + next() % (60 * 1024)).min(bytes - written) as usize;
        let dir = root.join(format!("m{}/s{}", files % 16, files % 7));
        std::fs::create_dir_all(&dir).map_err(|e| internal(format!("{}: {e}", dir.display())))?;
        let mut data = Vec::with_capacity(len);
        if files % 2 == 0 {
            while data.len() < len {
                data.extend_from_slice(line);
                data.extend_from_slice(format!("// {}\n", next() % 100_000).as_bytes());
            }
            data.truncate(len);
        } else {
            while data.len() < len {
                data.extend_from_slice(&next().to_le_bytes());
            }
            data.truncate(len);
        }
        let path = dir.join(format!("f{files}.dat"));
        std::fs::write(&path, &data).map_err(|e| internal(format!("{}: {e}", path.display())))?;
        written += len as u64;
        files += 1;
    }
    Ok(files)
}
