//! Steps 3 and 4 of `lineage bench scale`: a follower restarted on its own disk, and a follower
//! that catches up from the leader's snapshot ([`restart`]).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lineage_bus::control::ControlError;
use lineage_core::ids::NodeId;

use super::{http_ports, internal, node_rss, register_forest, scrape, unavailable, Bench, TREE};

/// Concurrent writers while a follower is down (catch-up phase).
const LAG_WRITERS: usize = 32;
/// How long a restarted member may take to catch up before the bench gives up.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(300);

/// Restarts a follower (not the leader, not node-1, which bootstraps): on the same disk, or
/// (`lag`: with `made` sessions registered) after the others registered enough to snapshot
/// and purge the log it lacks, so it catches up from the leader's snapshot.
///
/// (Not a voter whose disk was wiped: Raft assumes a voter keeps what it acknowledged, and
/// openraft's leader, which remembers the follower's matching index, never sends the snapshot
/// to an empty log under the same id; a replaced disk is a membership change.)
pub(super) async fn restart(
    b: &Bench,
    sessions: usize,
    lag: Option<(usize, &[NodeId])>,
) -> Result<(), ControlError> {
    let lagging = lag.is_some();
    let ports = http_ports(b).await;
    let leader = ports
        .iter()
        .map(|(_, p)| scrape(*p))
        .collect::<futures::future::JoinAll<_>>()
        .await
        .iter()
        .filter_map(|m| m.get("lineage_raft_leader").copied())
        .find(|l| *l > 0.0)
        .map(|l| l as usize)
        .ok_or_else(|| unavailable("restart", "no member names a leader"))?;
    let victim = if leader == 3 { 2 } else { 3 };
    let (name, port) = ports[victim - 1].clone();
    let leader_port = ports[leader - 1].1;
    let what = if lagging {
        "catch-up from a snapshot (SIGKILL; the others register until the leader snapshots past it and purges its log; start)"
    } else {
        "restart (SIGKILL, start on the same disk)"
    };
    println!("-- {what}: {name} (leader: node-{leader}) --");
    // Its log may hold entries it has not applied yet: the purge must pass those too.
    let victim_last_before = scrape(port)
        .await
        .get("lineage_raft_last_log_index")
        .copied()
        .unwrap_or(0.0);
    let url = {
        let mut cluster = b.cluster.lock().await;
        let c = cluster.as_mut().ok_or_else(|| internal("no own cluster"))?;
        let url = c.nats.url();
        let node = &mut c.nodes[victim - 1];
        node.kill();
        url
    };
    let victim_last = victim_last_before;
    let mut sessions = sessions;
    if let Some((made, places)) = lag {
        // Until the leader purged its log past what the stopped follower holds: then only a
        // snapshot can bring it back.
        let index = |m: &BTreeMap<String, f64>, k: &str| m.get(k).copied().unwrap_or(0.0);
        let t = Instant::now();
        let mut more = 0usize;
        // A snapshot is due after a quarter of the records in commands, and the purge keeps
        // 1,000 entries behind it: well within this many more sessions. Fewer writers than the
        // bulk load, so an entry batches fewer commands and 1,000 entries come sooner.
        let bound = made / 2 + 100 * TREE;
        while index(&scrape(leader_port).await, "lineage_raft_purged_index") <= victim_last {
            if more > bound {
                return Err(unavailable(
                    what,
                    format!("the leader purged no log past index {victim_last} after {more} more sessions"),
                ));
            }
            register_forest(b, 10, places, LAG_WRITERS).await?;
            more += 10 * TREE;
        }
        sessions += more;
        println!(
            "  with {name} down: {more} more sessions registered in {:.1} s ({:.0} writes/s, two voters of three)",
            t.elapsed().as_secs_f64(),
            more as f64 / t.elapsed().as_secs_f64().max(1e-9)
        );
    }
    let leader_metrics = scrape(leader_port).await;
    let target = leader_metrics
        .get("lineage_raft_applied_index")
        .copied()
        .unwrap_or(0.0);
    let leader_bytes = leader_metrics
        .get("lineage_registry_snapshot_bytes")
        .copied()
        .unwrap_or(f64::NAN);
    let started = Instant::now();
    {
        let mut cluster = b.cluster.lock().await;
        let c = cluster.as_mut().ok_or_else(|| internal("no own cluster"))?;
        c.nodes[victim - 1].start(&url)?;
    }
    let mut answered = None;
    loop {
        let m = scrape(port).await;
        if !m.is_empty() && answered.is_none() {
            answered = Some(started.elapsed());
        }
        if m.get("lineage_raft_applied_index").copied().unwrap_or(0.0) >= target {
            let caught_up = started.elapsed();
            println!(
                "  first answer on /metrics after {:.2} s; applied the leader's index {target} after {:.2} s",
                answered.unwrap_or(caught_up).as_secs_f64(),
                caught_up.as_secs_f64()
            );
            let get = |k: &str| m.get(k).copied().unwrap_or(f64::NAN);
            if lagging && get("lineage_registry_snapshots_installed_total") < 1.0 {
                println!("  no snapshot was installed: it caught up from the log");
            } else if lagging {
                println!(
                    "  snapshot installed in {:.2} s ({} installs; the leader's last snapshot: {:.1} MB)",
                    get("lineage_registry_snapshot_install_seconds"),
                    get("lineage_registry_snapshots_installed_total"),
                    leader_bytes / 1e6,
                );
            } else {
                println!(
                    "  load at open (read the snapshot, rebuild the state): {:.2} s",
                    get("lineage_registry_load_seconds")
                );
            }
            break;
        }
        if started.elapsed() > CATCH_UP_LIMIT {
            return Err(unavailable(
                what,
                format!("{name} did not catch up within {CATCH_UP_LIMIT:?}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A member that just loaded its state holds no history of the load: its RSS is what the
    // state costs (plus the request results the window still keeps, and the allocator's).
    if let Some((_, rss)) = node_rss(b).await.get(victim - 1) {
        println!(
            "  {name}'s RSS once caught up: {:.0} MiB ({:.0} B per session of {})",
            *rss as f64 / 1048576.0,
            *rss as f64 / sessions.max(1) as f64,
            sessions
        );
    }
    let ready = Instant::now();
    let c = b.cluster.lock().await;
    if let Some(c) = c.as_ref() {
        c.wait_ready(Duration::from_secs(60)).await?;
    }
    println!(
        "  every node ready {:.2} s later",
        ready.elapsed().as_secs_f64()
    );
    Ok(())
}
