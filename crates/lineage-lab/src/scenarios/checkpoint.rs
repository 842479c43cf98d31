//! `lineage bench workspace`, part two (issue 39): what a turn's end costs in a workspace of
//! 10 MB and 100 MB when the turn edited one file, with a checkpoint as a **delta** against the
//! base (what the nodes do: `pack_delta` against the base's manifest, then a put) against a
//! **whole** snapshot per turn (`pack`, then a put), alternating rounds in the same run; what
//! reading the base's manifest costs (once per launch); and, as the peer format for git
//! workspaces, `git add -A && git commit && git bundle create` of the same tree (each round
//! committing the one edited file).

use std::path::Path;
use std::time::Instant;

use lineage_bus::control::ControlError;
use lineage_bus::WorkspaceStore;
use lineage_workspace::{pack, pack_delta, Layer, Manifest};

use super::workspace::make_tree;
use super::{internal, scaled, Bench};
use crate::bench::Samples;

/// The checkpoint comparison (module docs).
pub(super) async fn checkpoint(b: &Bench) -> Result<(), ControlError> {
    let (store, caps) = super::workspace::store_and_caps(b);
    let fail = |e: lineage_workspace::WorkspaceError| internal(e.to_string());
    println!("a turn's end after the turn edited one file: delta against the base vs whole snapshot (alternating), then git bundle of the same tree");
    for (label, mib, runs) in [("10 MB", 10u64, 20usize), ("100 MB", 100, 5)] {
        let dir = tempfile::tempdir().map_err(|e| internal(format!("temp dir: {e}")))?;
        make_tree(dir.path(), mib << 20)?;
        let base = pack(dir.path(), caps).map_err(fail)?;
        let t = Instant::now();
        let manifest = Manifest::read(
            Layer {
                bytes: &base.bytes,
                digest: &base.digest,
            },
            caps,
        )
        .map_err(fail)?;
        println!(
            "tree {label}: base's manifest read in {:.1} ms ({} paths), once per launch",
            t.elapsed().as_secs_f64() * 1e3,
            manifest.len()
        );
        let object = format!("bench-checkpoint-{}", uuid::Uuid::now_v7());
        let n = scaled(runs).max(3);
        let (mut deltas, mut wholes) = (Samples::default(), Samples::default());
        let (mut delta_size, mut whole_size) = (0, 0);
        let wall = Instant::now();
        for round in 0..n {
            edit_one_file(dir.path(), round)?;
            let t0 = Instant::now();
            let delta = pack_delta(dir.path(), &manifest, caps).map_err(fail)?;
            store
                .put(&object, &delta.snapshot.bytes)
                .await
                .map_err(|e| internal(e.to_string()))?;
            let t1 = Instant::now();
            let whole = pack(dir.path(), caps).map_err(fail)?;
            store
                .put(&object, &whole.bytes)
                .await
                .map_err(|e| internal(e.to_string()))?;
            let t2 = Instant::now();
            deltas.latencies.push(t1 - t0);
            wholes.latencies.push(t2 - t1);
            (delta_size, whole_size) = (delta.snapshot.bytes.len(), whole.bytes.len());
        }
        deltas.wall = wall.elapsed();
        wholes.wall = wall.elapsed();
        println!("tree {label}: checkpoint object {delta_size} bytes as a delta, {whole_size} bytes whole");
        b.report(
            &format!("checkpoint {label}: delta (pack_delta + put)"),
            &deltas,
        );
        b.report(
            &format!("checkpoint {label}: whole (pack + put), peer"),
            &wholes,
        );
        let _ = store.delete(&[object]).await;
        git_bundle(b, dir.path(), label, n)?;
    }
    Ok(())
}

/// Rewrites one file of the tree (a different one each round).
fn edit_one_file(root: &Path, round: usize) -> Result<(), ControlError> {
    let path = root.join(format!("m{}/s{}/f{}.dat", round % 16, round % 7, round));
    let text = format!("edited in round {round}\n").repeat(200);
    std::fs::write(&path, text).map_err(|e| internal(format!("{}: {e}", path.display())))
}

/// `git add -A; git commit; git bundle create` of the tree, `n` rounds each editing one file.
fn git_bundle(b: &Bench, root: &Path, label: &str, n: usize) -> Result<(), ControlError> {
    let git = |args: &[&str]| -> Result<(), ControlError> {
        let out = std::process::Command::new("git")
            .args(["-c", "user.name=bench", "-c", "user.email=bench@lineage"])
            .args(args)
            .current_dir(root)
            .output()
            .map_err(|e| internal(format!("git: {e}")))?;
        match out.status.success() {
            true => Ok(()),
            false => Err(internal(format!(
                "git {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            ))),
        }
    };
    let bundle = root
        .join("..")
        .join(format!("bench-{}.bundle", std::process::id()));
    let bundle_arg = bundle.display().to_string();
    git(&["init", "-q"])?;
    let t = Instant::now();
    git(&["add", "-A"])?;
    git(&["commit", "-qm", "base"])?;
    git(&["bundle", "create", "-q", &bundle_arg, "HEAD"])?;
    let first = t.elapsed();
    let full = std::fs::metadata(&bundle).map(|m| m.len()).unwrap_or(0);
    git(&["tag", "base"])?;
    let mut rounds = Samples::default();
    let wall = Instant::now();
    for round in 0..n {
        edit_one_file(root, round + 1000)?;
        let t0 = Instant::now();
        git(&["add", "-A"])?;
        git(&["commit", "-qm", "turn"])?;
        git(&["bundle", "create", "-q", &bundle_arg, "base..HEAD"])?;
        rounds.latencies.push(t0.elapsed());
    }
    rounds.wall = wall.elapsed();
    let incremental = std::fs::metadata(&bundle).map(|m| m.len()).unwrap_or(0);
    let _ = std::fs::remove_file(&bundle);
    println!(
        "tree {label}: git bundle of the whole tree {full} bytes in {:.0} ms; an incremental bundle (base..HEAD) {incremental} bytes",
        first.as_secs_f64() * 1e3
    );
    b.report(
        &format!("checkpoint {label}: git add+commit+bundle base..HEAD, peer (no put)"),
        &rounds,
    );
    Ok(())
}
