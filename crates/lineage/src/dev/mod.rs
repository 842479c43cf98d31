//! `lineage dev`: a local cluster for a newcomer — nats-server plus N `lineage node` processes
//! (all registry voters), then the demo workload, then up until Ctrl-C.
//!
//! | file | what |
//! |---|---|
//! | [`cluster`] | [`DevCluster`]: nats-server and the node processes |
//! | [`demo`] | the demo workload |

pub mod cluster;
pub mod demo;

pub use cluster::{http_get, lineage_program, DevCluster, DevNode, RaftLinks};

use std::path::PathBuf;

use lineage_bus::control::ControlError;

use crate::global::Global;

/// `lineage dev`. SIGINT or SIGTERM at any point (start-up, demo, idle) stops the nodes and
/// nats-server it started (by pid) before it exits.
pub async fn dev(
    g: &Global,
    nodes: u8,
    demo: bool,
    exit_after_demo: bool,
    dir: Option<PathBuf>,
    nats_port: Option<u16>,
    links: RaftLinks,
) -> Result<(), ControlError> {
    tokio::select! {
        outcome = run_dev(g, nodes, demo, exit_after_demo, dir, nats_port, links) => outcome,
        _ = crate::client::wait_for_signal() => {
            println!("stopping ...");
            Ok(())
        }
    }
}

async fn run_dev(
    g: &Global,
    nodes: u8,
    demo: bool,
    exit_after_demo: bool,
    dir: Option<PathBuf>,
    nats_port: Option<u16>,
    links: RaftLinks,
) -> Result<(), ControlError> {
    let cluster_name = crate::global::cluster(g);
    println!("starting nats-server and {nodes} lineage nodes ...");
    println!(
        "dev: agents.allow_raw_commands = true on every node (development only: requests may name any agent command line)"
    );
    println!(
        "dev: limits.idle_root_ms = {} (30 min): a top-level session idle that long is drained with its tree (stop reason idle); lineage spawn --idle-ttl sets it per root",
        cluster::DEV_IDLE_ROOT_MS
    );
    let mut cluster = DevCluster::start(nodes, dir, nats_port, &cluster_name, links).await?;
    println!(
        "cluster {cluster_name} up: NATS {} ; data and logs in {}",
        cluster.nats.url(),
        cluster.dir.display()
    );
    for n in &cluster.nodes {
        println!(
            "  {}  http://127.0.0.1:{}/metrics  log {}",
            n.id,
            n.http_port,
            n.log.display()
        );
    }
    println!(
        "in another terminal: export NATS_URL={}",
        cluster.nats.url()
    );
    let mut g = g.clone();
    g.nats = Some(cluster.nats.url());
    g.cluster = Some(cluster_name.clone());
    if demo {
        demo::run(&g, &mut cluster).await?;
    }
    if exit_after_demo {
        return Ok(());
    }
    println!();
    println!("the cluster stays up; try:");
    println!(
        "  lineage --nats {} --cluster {cluster_name} status",
        cluster.nats.url()
    );
    println!("Ctrl-C stops everything.");
    std::future::pending::<()>().await;
    Ok(())
}
