//! `lineage bench drain`: trees registered straight into the registry, drained end to end.

use std::sync::Arc;
use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::descriptor::{SubagentDescriptor, SubagentShape};
use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{RequestId, SessionId};
use lineage_registry::client::NewSession;
use lineage_registry::{Consistency, SessionState};

use crate::bench::{concurrent, Samples};

use super::{internal, scaled, unavailable, Bench};

/// `drain`: trees registered straight into the registry, drained end to end.
pub(super) async fn drain(b: &Bench) -> Result<(), ControlError> {
    println!("trees registered straight into the registry (depth 4, placements round-robin over the 3 nodes, state running, no live agents: each node's stop/release finds nothing live); timed: one `drain` request naming the roots, sent to node-1, from send to reply (close admission, per-node stop and release, a registry dispose per session, 256 to a write of several commands, 4 writes in flight per wave, leaves first; subtrees read in pages)");
    let each = scaled(1_000).max(10);
    // One tree, ten trees, then one tree as large as the ten (its subtree is read in pages).
    for (trees, per_tree) in [(1usize, each), (10, each), (1, 10 * each)] {
        let size = trees * per_tree;
        let built = Instant::now();
        let (roots, depth) = build_forest(b, trees, per_tree).await?;
        println!(
            "{trees} tree(s) of {per_tree} sessions ({size} in all), depth {depth}, registered in {:.1?}",
            built.elapsed()
        );
        drain_roots(
            b,
            &format!("drain {size} sessions ({trees} root(s))"),
            roots,
            size,
        )
        .await?;
    }
    Ok(())
}

/// One `drain` request of `roots`, timed to its reply; when the reply is lost, timed to the
/// moment the last root is disposed (polled every 50 ms) instead, and said so.
pub(super) async fn drain_roots(
    b: &Bench,
    name: &str,
    roots: Vec<SessionId>,
    size: usize,
) -> Result<(), ControlError> {
    let drainer = b
        .ctl
        .control
        .on(b.node(0))
        .with_timeout(Duration::from_secs(180));
    let request = drainer.drain(roots.clone());
    tokio::pin!(request);
    let t = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(50));
    let mut disposed_at: Option<Duration> = None;
    let outcome = loop {
        tokio::select! {
            r = &mut request => break Some(r),
            _ = tick.tick() => {
                if let Some(at) = disposed_at {
                    if t.elapsed() > at + Duration::from_secs(5) {
                        break None;
                    }
                    continue;
                }
                let mut all = true;
                for root in &roots {
                    let state = b
                        .registry
                        .session(root.clone(), Consistency::Linearizable)
                        .await
                        .ok()
                        .flatten()
                        .map(|r| r.state);
                    if state != Some(SessionState::Disposed) {
                        all = false;
                        break;
                    }
                }
                if all {
                    disposed_at = Some(t.elapsed());
                }
            }
        }
    };
    let reply_wall = t.elapsed();
    let (wall, note) = match (outcome, disposed_at) {
        (Some(Ok(report)), _) => {
            let disposed = report.disposed();
            let warnings = if report.warnings.is_empty() {
                String::new()
            } else {
                format!("; warnings: {}", report.warnings.join("; "))
            };
            (
                reply_wall,
                format!(
                    "{disposed} disposed in {} waves (report: {} listed{}){warnings}",
                    report.summary.len(),
                    report.listed(),
                    if report.truncated { ", truncated" } else { "" }
                ),
            )
        }
        (Some(Err(e)), Some(at)) => (
            at,
            format!("the reply was lost ({e}); timed to the last root disposed in the registry"),
        ),
        (None, Some(at)) => (
            at,
            "no reply within 5 s after every root was disposed (a report for this many sessions is larger than the server's max_payload); timed to the last root disposed in the registry".to_owned(),
        ),
        (Some(Err(e)), None) => {
            println!("{name}: FAILED after {reply_wall:.1?}: {e}");
            return Err(ControlError::new(e.code, format!("{name}: {}", e.message)));
        }
        (None, None) => return Err(internal(format!("{name}: no reply"))),
    };
    b.report(
        name,
        &Samples {
            latencies: vec![wall],
            wall,
        },
    );
    println!(
        "  {note}; {:.0} sessions/s",
        size as f64 / wall.as_secs_f64().max(1e-9)
    );
    Ok(())
}

/// Registers `trees` trees of `each` sessions (depth 4 when large enough), level by level
/// across all trees; returns the roots and the depth reached.
pub(super) async fn build_forest(
    b: &Bench,
    trees: usize,
    each: usize,
) -> Result<(Vec<SessionId>, usize), ControlError> {
    let new_id =
        || SessionId::parse(&uuid::Uuid::now_v7().to_string()).map_err(|e| internal(e.to_string()));
    let fanout = ((each as f64).powf(0.25).ceil() as usize).max(2);
    let descriptor = SubagentDescriptor {
        provider: "script".to_owned(),
        label: None,
        mode: SubagentShape::Continuable,
        tool_filter: None,
        persona: None,
    };
    // levels[tree][depth]: the headers of one tree's level.
    let mut levels: Vec<Vec<Vec<SessionHeader>>> = Vec::with_capacity(trees);
    let mut roots = Vec::with_capacity(trees);
    for _ in 0..trees {
        let root = SessionHeader::top_level(new_id()?, None, None);
        roots.push(root.id().clone());
        levels.push(vec![vec![root]]);
    }
    register_level(b, levels.iter().map(|t| t[0][0].clone()).collect(), None, 0).await?;
    let mut made = 1;
    let mut depth = 0;
    while made < each {
        depth += 1;
        let want = if depth < 4 {
            (levels[0][depth - 1].len() * fanout).min(each - made)
        } else {
            each - made
        };
        let mut batch = Vec::with_capacity(want * trees);
        for tree in &mut levels {
            let prev = &tree[depth - 1];
            let mut level = Vec::with_capacity(want);
            for i in 0..want {
                let parent = &prev[i % prev.len()];
                level.push(
                    child_session_meta(parent, new_id()?, depth as u64, 0, None)
                        .map_err(|e| internal(e.to_string()))?,
                );
            }
            batch.extend(level.iter().cloned());
            tree.push(level);
        }
        register_level(b, batch, Some(descriptor.clone()), made).await?;
        made += want;
    }
    Ok((roots, depth))
}

/// Registers one level (64 writers); placement round-robin over the nodes from `offset`.
pub(super) async fn register_level(
    b: &Bench,
    level: Vec<SessionHeader>,
    descriptor: Option<SubagentDescriptor>,
    offset: usize,
) -> Result<(), ControlError> {
    let level = Arc::new(level);
    let nodes = Arc::new(b.nodes.clone());
    let registry = b.registry.clone();
    concurrent(level.len(), 64, move |i| {
        let header = level[i].clone();
        let node = nodes[(offset + i) % nodes.len()].clone();
        let registry = registry.clone();
        let descriptor = descriptor.clone();
        async move {
            let request = RequestId::parse(&uuid::Uuid::now_v7().to_string())
                .map_err(|e| internal(e.to_string()))?;
            registry
                .register_session(
                    request,
                    lineage::client::now_ms(),
                    header,
                    NewSession {
                        descriptor,
                        node: Some(node.clone()),
                        // Registered as its node would (running, no live agent): it takes
                        // children and the birth sweeper leaves it alone.
                        hosted: true,
                        ..NewSession::default()
                    },
                )
                .await
                .map(|_| ())
                .map_err(|e| unavailable("register a drain-tree session", e))
        }
    })
    .await
    .map(|_| ())
}
