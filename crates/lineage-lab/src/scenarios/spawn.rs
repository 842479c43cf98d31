//! `lineage bench spawn`: a parent awaiting a one-shot child on another node, 1 and 64
//! parents; the same with the child an ACP test agent process, in its sandbox and without one
//! (V2: what the sandbox costs a spawn); and the cost of nats-server's `sync_interval: always`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::descriptor::SubagentShape;
use lineage_core::messages::StopReason;
use lineage_protocol::Script;

use crate::bench::{concurrent, Samples};

use super::{internal, scaled, spawn_request, unavailable, Bench};

/// `spawn`: a one-shot child on node 2 of a parent on node 1, settled when the reply comes;
/// then (own cluster only) the same with nats-server's `sync_interval` at its default (2m)
/// and at `always`, the server restarted between them, and the cost of `always`.
pub(super) async fn spawn(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    println!("one-shot child on {cn} of a top-level parent on {pn}; the spawn request goes to {pn} and returns the settled child's result");
    for (name, parents, ops) in SPAWN_PHASES {
        let samples = spawn_phase(b, parents, ops).await?;
        b.report(name, &samples);
    }
    sandbox_cost(b).await?;
    sync_cost(b).await
}

/// The pause between spawns in [`sandbox_cost`]'s second phase.
const SPACED: Duration = Duration::from_millis(50);

/// Spawns of one kind in a row in [`sandbox_cost`].
const SANDBOX_BLOCK: usize = 10;

/// The ACP test agent's profiles in `lineage dev`'s config: in its sandbox (`auto` where the
/// node can make one), and without.
const ACP_PROFILES: [(&str, &str); 2] = [
    ("sandboxed", "acp-testagent"),
    ("unsandboxed", "acp-testagent-unsandboxed"),
];

/// One-shot ACP test agent children (a process each: started, `initialize`, `session/new`,
/// one prompt, stopped) of one parent, sequential, in blocks of each profile in turn; prints
/// both and what the sandbox adds at p50 and p99.
async fn sandbox_cost(b: &Bench) -> Result<(), ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let offer = b.ctl.control.on(&cn).agents().await?;
    if !ACP_PROFILES
        .iter()
        .all(|(_, p)| offer.profiles.iter().any(|o| o.name == *p))
    {
        println!("sandbox cost: skipped ({cn} offers no acp-testagent and acp-testagent-unsandboxed profiles: build lineage-acp-testagent next to lineage)");
        return Ok(());
    }
    let parent = b.root(&pn).await?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    // Back to back, then with a pause between spawns (a node whose CPU is not all taken
    // by spawning: the warm sandbox's replacement is made in the pause).
    for (how, pause) in [("back to back", Duration::ZERO), ("50 ms apart", SPACED)] {
        let [sandboxed, unsandboxed] = sandbox_phase(b, &parent, pause).await?;
        b.report(
            &format!("spawn one-shot ACP test agent, sandboxed, {how}"),
            &sandboxed,
        );
        b.report(
            &format!("spawn one-shot ACP test agent, unsandboxed, {how}"),
            &unsandboxed,
        );
        println!(
            "the sandbox adds to a spawn of an ACP agent, {how}: p50 {:+.3} ms ({:.3} vs {:.3} ms), p99 {:+.3} ms (aim: p50 under +1 ms)",
            ms(sandboxed.p50()) - ms(unsandboxed.p50()),
            ms(sandboxed.p50()),
            ms(unsandboxed.p50()),
            ms(sandboxed.p99()) - ms(unsandboxed.p99()),
        );
    }
    Ok(())
}

/// One phase of [`sandbox_cost`]: the two profiles' one-shot children of `parent`, `pause`
/// between spawns (not timed); their samples, sandboxed first.
async fn sandbox_phase(
    b: &Bench,
    parent: &lineage_core::ids::SessionId,
    pause: Duration,
) -> Result<[Samples; 2], ControlError> {
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let ops = scaled(100).max(SANDBOX_BLOCK);
    let mut samples: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let mut walls = [Duration::ZERO; 2];
    // Blocks of each in turn (ABBA: the order flips every round), so that both see the same
    // machine, and the node's making of the next warm sandbox after each sandboxed spawn
    // (some milliseconds of CPU) weighs on the sandboxed spawns, not on the others. One
    // warm-up spawn of each first.
    let blocks = ops / SANDBOX_BLOCK;
    let order = (0..blocks * 2).map(|k| match (k / 2 + k) % 2 {
        0 => 0,
        _ => 1,
    });
    let plan: Vec<(usize, bool)> = [(0, false), (1, false)]
        .into_iter()
        .chain(order.flat_map(|which| (0..SANDBOX_BLOCK).map(move |_| (which, true))))
        .collect();
    for (which, kept) in plan {
        let mut request = spawn_request(
            Some(parent),
            Some(SubagentShape::OneShot),
            Script::done(),
            &cn,
        );
        request.agent = lineage_protocol::agent::AgentSpec::Profile {
            profile: ACP_PROFILES[which].1.to_owned(),
        };
        let sent = Instant::now();
        let reply = b.ctl.spawn(&pn, &request).await?;
        let took = sent.elapsed();
        walls[which] += took;
        match reply.result {
            Some(r) if r.stop_reason == StopReason::Completed => {}
            other => {
                return Err(internal(format!(
                    "one-shot {} child {} did not complete: {other:?}",
                    ACP_PROFILES[which].0, reply.session
                )))
            }
        }
        if kept {
            samples[which].push(took);
        }
        tokio::time::sleep(pause).await;
    }
    let [sandboxed, unsandboxed] = [0, 1].map(|which| Samples {
        latencies: std::mem::take(&mut samples[which]),
        wall: walls[which],
    });
    Ok([sandboxed, unsandboxed])
}

/// The two spawn workloads: name, parents (= concurrent workers), spawns.
pub(super) const SPAWN_PHASES: [(&str, usize, usize); 2] = [
    ("spawn one-shot, 1 parent", 1, 200),
    ("spawn one-shot, 64 parents", 64, 640),
];

/// One spawn workload: `parents` top-level parents on node 1, `ops` (scaled) one-shot
/// children on node 2 by `parents` concurrent workers, after one warm-up spawn per parent.
pub(super) async fn spawn_phase(
    b: &Bench,
    parents: usize,
    ops: usize,
) -> Result<Samples, ControlError> {
    let ops = scaled(ops).max(parents);
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    let mut roots = Vec::with_capacity(parents);
    for _ in 0..parents {
        roots.push(b.root(&pn).await?);
    }
    let roots = Arc::new(roots);
    let op = {
        let ctl = b.ctl.clone();
        let roots = roots.clone();
        move |i: usize| {
            let ctl = ctl.clone();
            let (pn, cn) = (pn.clone(), cn.clone());
            let parent = roots[i % roots.len()].clone();
            async move {
                let request = spawn_request(
                    Some(&parent),
                    Some(SubagentShape::OneShot),
                    Script::done(),
                    &cn,
                );
                let reply = ctl.spawn(&pn, &request).await?;
                match reply.result {
                    Some(r) if r.stop_reason == StopReason::Completed => Ok(()),
                    other => Err(internal(format!(
                        "one-shot child {} did not complete: {other:?}",
                        reply.session
                    ))),
                }
            }
        }
    };
    // Warm up: one spawn per parent.
    concurrent(parents, parents, op.clone()).await?;
    concurrent(ops, parents, op).await
}

/// The sync phase of `spawn`: restarts the bench's own nats-server (same port and store) with
/// `sync_interval` 2m (nats-server's default), then `always`, measures both spawn workloads
/// after each restart, and prints what `always` costs.
pub(super) async fn sync_cost(b: &Bench) -> Result<(), ControlError> {
    let mut guard = b.cluster.lock().await;
    let Some(cluster) = guard.as_mut() else {
        println!("sync_interval 2m vs always: skipped (the server is given with --nats; the bench restarts only its own)");
        return Ok(());
    };
    println!("sync_interval 2m vs always: the same workloads, nats-server restarted (same port and store) with each");
    let mut results: Vec<(&str, Vec<Samples>)> = Vec::new();
    for sync in ["2m", "always"] {
        let options = lineage_testkit::NatsOptions {
            sync_interval: sync.to_owned(),
            ..cluster.nats.options().clone()
        };
        tokio::task::block_in_place(|| cluster.nats.restart_with(options))
            .map_err(|e| unavailable("cannot restart nats-server", e))?;
        cluster.wait_ready(Duration::from_secs(60)).await?;
        wait_spawns(b).await?;
        let mut phases = Vec::new();
        for (name, parents, ops) in SPAWN_PHASES {
            let samples = spawn_phase(b, parents, ops).await?;
            b.report(&format!("{name}, sync {sync}"), &samples);
            phases.push(samples);
        }
        results.push((sync, phases));
    }
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    if let [(_, lazy), (_, always)] = &results[..] {
        for (((name, _, _), lazy), always) in SPAWN_PHASES.iter().zip(lazy).zip(always) {
            let (p50a, p50l) = (ms(always.p50()), ms(lazy.p50()));
            let (p99a, p99l) = (ms(always.p99()), ms(lazy.p99()));
            println!(
                "cost of sync_interval always, {name}: p50 {p50a:.3} vs {p50l:.3} ms ({:+.3} ms, {:+.0}%), p99 {p99a:.3} vs {p99l:.3} ms ({:+.3} ms), throughput {:.0} vs {:.0} /s",
                p50a - p50l,
                100.0 * (p50a - p50l) / p50l.max(1e-9),
                p99a - p99l,
                always.throughput(),
                lazy.throughput(),
            );
        }
    }
    Ok(())
}

/// After a nats-server restart: waits (up to 30 s) until a spawn goes through again (the nodes
/// reconnected, the registry has a leader).
pub(super) async fn wait_spawns(b: &Bench) -> Result<(), ControlError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let (pn, cn) = (b.node(0).clone(), b.node(1).clone());
    loop {
        let attempt = async {
            let root = b.root(&pn).await?;
            let request = spawn_request(
                Some(&root),
                Some(SubagentShape::OneShot),
                Script::done(),
                &cn,
            );
            b.ctl.spawn(&pn, &request).await
        }
        .await;
        match attempt {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                tracing::debug!(error = %e, "spawn not served yet after the restart");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => {
                return Err(unavailable(
                    "no spawn within 30 s of the nats-server restart",
                    e,
                ))
            }
        }
    }
}
