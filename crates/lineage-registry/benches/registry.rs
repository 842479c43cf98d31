//! Register-child throughput and latency: 3 voters on loopback over a real nats-server, redb
//! with fsync on every acknowledged write; 1 and 64 concurrent clients; beside a raw NATS
//! request-reply round trip and a raw fsync measured in the same run.
//!
//! Run: `cargo bench -p lineage-registry --bench registry` (env `BENCH_WRITES` scales it).
//! The workload itself is `lineage_registry::bench`, shared with `lineage bench registry`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lineage_core::ids::NodeId;
use lineage_registry::bench::{self, RegisterBench};
use lineage_registry::{RegistryClient, RegistryNode, RegistryNodeConfig};
use lineage_testkit::NatsServer;

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, mut lat: Vec<Duration>, wall: Duration) {
    lat.sort();
    println!(
        "{name:<34} n={:<6} p50={:>8.3} ms  p99={:>8.3} ms  {:>9.0} ops/s",
        lat.len(),
        pct(&lat, 0.50).as_secs_f64() * 1e3,
        pct(&lat, 0.99).as_secs_f64() * 1e3,
        lat.len() as f64 / wall.as_secs_f64()
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run());
}

async fn run() {
    let writes: u64 = std::env::var("BENCH_WRITES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6400);
    let server = NatsServer::start().unwrap();
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    println!(
        "machine: {} cores; store: redb on {} (fsync on)",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        base.path().display()
    );

    // Raw fsync on the same disk.
    let b = bench::fsync_probe(base.path(), 200).unwrap();
    report("raw fsync (512 B append)", b.latencies, b.wall);

    // Raw NATS request-reply round trip on the same server.
    {
        let responder = async_nats::connect(server.url()).await.unwrap();
        let mut sub = responder.subscribe("bench.echo").await.unwrap();
        responder.flush().await.unwrap();
        let r2 = responder.clone();
        tokio::spawn(async move {
            while let Some(msg) = sub.next().await {
                if let Some(reply) = msg.reply {
                    let _ = r2.publish(reply, msg.payload).await;
                }
            }
        });
        let client = async_nats::connect(server.url()).await.unwrap();
        let payload = bytes::Bytes::from(vec![b'x'; 400]);
        for _ in 0..100 {
            client.request("bench.echo", payload.clone()).await.unwrap();
        }
        let mut lat = Vec::new();
        let start = Instant::now();
        for _ in 0..2000 {
            let t = Instant::now();
            client.request("bench.echo", payload.clone()).await.unwrap();
            lat.push(t.elapsed());
        }
        report("raw NATS request-reply (400 B)", lat, start.elapsed());
    }

    // Three voters.
    let mut nodes = Vec::new();
    for id in 1..=3u64 {
        let node = NodeId::parse(&format!("node-{id}")).unwrap();
        let mut cfg =
            RegistryNodeConfig::new("bench", id, node, base.path().join(format!("r{id}")));
        if let Some(hb) = std::env::var("BENCH_HEARTBEAT_MS")
            .ok()
            .and_then(|v| v.parse().ok())
        {
            cfg.heartbeat_interval = Duration::from_millis(hb);
            cfg.election_timeout_min = Duration::from_millis(hb * 6);
            cfg.election_timeout_max = Duration::from_millis(hb * 12);
        }
        let nats = async_nats::connect(server.url()).await.unwrap();
        nodes.push(RegistryNode::start(cfg, nats).await.unwrap());
    }
    let members: BTreeMap<u64, NodeId> = (1..=3u64)
        .map(|id| (id, NodeId::parse(&format!("node-{id}")).unwrap()))
        .collect();
    nodes[0].initialize(members).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while nodes
        .iter()
        .any(|n| n.raft_metrics().current_leader.is_none())
    {
        assert!(Instant::now() < deadline, "no leader");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The client runs in a "hosting node": its own connection. The root and a warm-up of 50
    // children (leader discovery, connections) come first.
    let client = RegistryClient::new(async_nats::connect(server.url()).await.unwrap(), "bench");
    let workload = RegisterBench::new(client, bench::run_prefix(), 50)
        .await
        .unwrap();

    // 1 client, sequential.
    let b = workload.run_batch((writes / 8).max(200), 1).await.unwrap();
    report("register child, 1 client", b.latencies, b.wall);

    // 64 clients, each sequential.
    let b = workload
        .run_batch((writes / 64).max(10) * 64, 64)
        .await
        .unwrap();
    report("register child, 64 clients", b.latencies, b.wall);

    for n in nodes {
        n.shutdown().await.unwrap();
    }
}
