//! `lineage bench workspace`, its second part (issue 39): what inheriting a 10 MB workspace adds
//! to a spawn on another node. A top-level `delegator` session (the ACP test agent) on node 1
//! starts in an uploaded 10 MB tree; one-shot `delegator` children on node 2 run one shell turn
//! (`sh: true`) and are waited for, one at a time, half of them inheriting the parent's files
//! (packed on node 1, stored, materialized on node 2 before the child starts, and checkpointed
//! at its turn's end) and half with an empty workspace, alternating in rounds so both meet the
//! same machine. What the workspace adds is the difference of the two. A third series inherits
//! on the parent's own node, where the child's base is unpacked from the snapshot the node just
//! packed (no get).

use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_bus::workspace::NatsWorkspaces;
use lineage_bus::{StreamOptions, WorkspaceStore};
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::RequestId;
use lineage_protocol::agent::AgentSpec;
use lineage_protocol::control::SpawnRequest;
use lineage_protocol::workspace::SpawnWorkspace;
use lineage_workspace::{pack, Caps};

use super::{internal, scaled, Bench};
use crate::bench::Samples;

/// The profile of the parent and the children (`lineage dev` ships it).
const PROFILE: &str = "delegator";
/// Rounds the two kinds of spawn alternate in.
const ROUNDS: usize = 4;

/// Spawns with an inherited 10 MB workspace vs with an empty one, on another node.
pub(super) async fn inherit(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let dir = tempfile::tempdir().map_err(|e| internal(format!("temp dir: {e}")))?;
    let files = super::workspace::make_tree(dir.path(), 10 << 20)?;
    let packed = pack(dir.path(), Caps::default()).map_err(|e| internal(e.to_string()))?;
    let request_id =
        RequestId::parse(&uuid::Uuid::now_v7().to_string()).map_err(|e| internal(e.to_string()))?;
    let store = NatsWorkspaces::new(
        b.ctl.client.clone(),
        &b.ctl.subjects,
        StreamOptions::default(),
    );
    let upload = lineage_core::workspace::upload_object(&request_id);
    let digest = store
        .put(&upload, &packed.bytes)
        .await
        .map_err(ControlError::from)?;
    let root = SpawnRequest {
        node: Some(pn.clone()),
        request_id: Some(request_id),
        workspace: Some(SpawnWorkspace::Uploaded { digest }),
        ..SpawnRequest::new(
            AgentSpec::Profile {
                profile: PROFILE.to_owned(),
            },
            "",
        )
    };
    let root = b.ctl.spawn(&pn, &root).await?.session;
    let _ = store.delete(&[upload]).await;
    let child = |workspace, node: &lineage_core::ids::NodeId| SpawnRequest {
        parent: Some(root.clone()),
        shape: Some(SubagentShape::OneShot),
        node: Some(node.clone()),
        workspace: Some(workspace),
        ..SpawnRequest::new(
            AgentSpec::Profile {
                profile: PROFILE.to_owned(),
            },
            "sh: true",
        )
    };
    let n = scaled(20).max(ROUNDS);
    println!(
        "one-shot `{PROFILE}` child on {cn} of a session on {pn} whose workspace is a 10 MB tree ({files} files, snapshot {} bytes), one at a time: inheriting it vs an empty workspace, alternating in {ROUNDS} rounds ({n} each)",
        packed.bytes.len()
    );
    // Warm-up: the first sandboxes and agent starts of each kind.
    for (workspace, node) in [
        (SpawnWorkspace::Inherit, &cn),
        (SpawnWorkspace::Empty, &cn),
        (SpawnWorkspace::Inherit, &pn),
    ] {
        b.ctl.spawn(&pn, &child(workspace, node)).await?;
    }
    let (mut inherit, mut empty, mut local) =
        (Samples::default(), Samples::default(), Samples::default());
    let wall = Instant::now();
    for round in 0..ROUNDS {
        let count = n / ROUNDS + usize::from(round < n % ROUNDS);
        for (samples, workspace, node) in [
            (&mut inherit, SpawnWorkspace::Inherit, &cn),
            (&mut empty, SpawnWorkspace::Empty, &cn),
            (&mut local, SpawnWorkspace::Inherit, &pn),
        ] {
            for _ in 0..count {
                let request = child(workspace.clone(), node);
                let t = Instant::now();
                let reply = b.ctl.spawn(&pn, &request).await?;
                samples.latencies.push(t.elapsed());
                if reply.result.is_none() {
                    return Err(internal("a one-shot child answered without its result"));
                }
            }
        }
    }
    for s in [&mut inherit, &mut empty, &mut local] {
        s.wall = wall.elapsed();
    }
    b.report("spawn on another node, inheriting 10 MB", &inherit);
    b.report("spawn on the parent's node, inheriting 10 MB", &local);
    b.report("spawn on another node, empty workspace", &empty);
    let added = inherit.p50().saturating_sub(empty.p50());
    println!(
        "what inheriting 10 MB adds to a spawn on another node: {:.1} ms at p50 (pack on {pn}, put, get and unpack on {cn}, and the child's checkpoint at its turn's end)",
        as_ms(added)
    );
    println!(
        "on the parent's node: {:.1} ms at p50 (pack and put; the snapshot just packed is unpacked from memory, no get)",
        as_ms(local.p50().saturating_sub(empty.p50()))
    );
    Ok(())
}

fn as_ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
