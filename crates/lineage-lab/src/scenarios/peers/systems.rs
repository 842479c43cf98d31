//! The peers of `lineage bench peers`: NATS KV (from here, with async-nats), etcd and Restate
//! (driven by the Go load generator `peers-load`), Temporal (its Python driver). Each starts its
//! processes, measures 1 and 64 callers, and stops them before returning; what fails becomes
//! the row's `skipped: why`.

use std::path::Path;
use std::time::Duration;

use super::procs::{http_post, ports, run_driver, Install, Proc};
use super::{Row, Work, SPAWNS, WRITES};
use crate::bench::concurrent;
use crate::scenarios::{scaled, unavailable};

/// The value of a write: about the size of a registry record.
const VALUE_BYTES: usize = 400;

/// How long one driver run may take before it is killed.
const DRIVER_LIMIT: Duration = Duration::from_secs(300);

/// Temporal's workloads (callers, workflows): fewer than the others', at ~250 ms each.
const TEMPORAL_SPAWNS: [(usize, usize); 2] = [(1, 40), (64, 192)];

/// Pushes one skipped row per concurrency level.
fn skip(rows: &mut Vec<Row>, work: Work, system: &str, levels: &[(usize, usize)], why: &str) {
    for (clients, _) in levels {
        rows.push(Row::new(work, *clients, system, Err(why.to_owned())));
    }
}

/// A temp dir for one peer's data and logs.
fn temp(name: &str) -> Result<tempfile::TempDir, String> {
    tempfile::Builder::new()
        .prefix(&format!("lineage-peer-{name}-"))
        .tempdir()
        .map_err(|e| format!("cannot create a temp dir: {e}"))
}

/// The first line of `program --version` (bounded: 10 s).
async fn version(program: &Path, args: &[&str]) -> String {
    let run = tokio::process::Command::new(program)
        .args(args)
        .kill_on_drop(true)
        .output();
    match tokio::time::timeout(Duration::from_secs(10), run).await {
        Ok(Ok(out)) => String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .unwrap_or("")
            .trim()
            .to_owned(),
        _ => "version not known".to_owned(),
    }
}

/// NATS KV, `replicas` 1 (one server) or 3 (a three-server cluster), file storage, every
/// server at `sync_interval: always`: a put of a new key per write.
pub(super) async fn nats_kv(replicas: usize, rows: &mut Vec<Row>) {
    let system = format!("NATS KV R{replicas}");
    if let Err(why) = nats_kv_rows(replicas, &system, rows).await {
        let done = rows
            .iter()
            .filter(|r| r.system == system && r.work == Work::Write)
            .count();
        skip(
            rows,
            Work::Write,
            &system,
            &WRITES[done.min(WRITES.len())..],
            &why,
        );
    }
}

async fn nats_kv_rows(replicas: usize, system: &str, rows: &mut Vec<Row>) -> Result<(), String> {
    use async_nats::jetstream::{self, kv, stream::StorageType};
    let (url, _single, _cluster) = if replicas == 1 {
        let server = tokio::task::block_in_place(lineage_testkit::NatsServer::start)
            .map_err(|e| format!("cannot start nats-server: {e}"))?;
        (server.url(), Some(server), None)
    } else {
        let mut cluster = tokio::task::block_in_place(lineage_testkit::NatsCluster::start)
            .map_err(|e| format!("cannot start a 3-server NATS cluster: {e}"))?;
        tokio::task::block_in_place(|| cluster.wait_ready(Duration::from_secs(60)))
            .map_err(|e| format!("the NATS cluster is not ready: {e}"))?;
        (cluster.url(0), None, Some(cluster))
    };
    let client = super::super::connect(&url)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "{system}: nats-server {} on loopback, sync_interval always, file storage",
        client.server_info().version
    );
    let js = jetstream::new(client);
    let store = tokio::time::timeout(
        Duration::from_secs(30),
        js.create_key_value(kv::Config {
            bucket: "lineage_bench".into(),
            history: 1,
            num_replicas: replicas,
            storage: StorageType::File,
            ..Default::default()
        }),
    )
    .await
    .map_err(|_| "creating the bucket took over 30 s".to_owned())?
    .map_err(|e| format!("cannot create the bucket: {e}"))?;
    let put = |prefix: &'static str| {
        let store = store.clone();
        move |i: usize| {
            let store = store.clone();
            async move {
                let put = store.put(format!("{prefix}.{i}"), vec![b'x'; VALUE_BYTES].into());
                tokio::time::timeout(Duration::from_secs(30), put)
                    .await
                    .map_err(|_| unavailable("KV put", "no ack within 30 s"))?
                    .map(|_| ())
                    .map_err(|e| unavailable("KV put", e))
            }
        }
    };
    concurrent(scaled(50), 1, put("warm"))
        .await
        .map_err(|e| e.to_string())?;
    for ((clients, ops), prefix) in WRITES.into_iter().zip(["one", "many"]) {
        let outcome = concurrent(scaled(ops).max(clients), clients, put(prefix))
            .await
            .map_err(|e| e.to_string());
        rows.push(Row::new(Work::Write, clients, system, outcome));
    }
    Ok(())
}

/// etcd, three members on loopback (fsync on, etcd's default): a put of a new 400 B key per
/// write, through the official Go client given all three endpoints.
pub(super) async fn etcd(install: &Install, rows: &mut Vec<Row>) {
    let system = "etcd (3 members)";
    let outcome = etcd_rows(install, system, rows).await;
    if let Err(why) = outcome {
        skip(rows, Work::Write, system, &WRITES, &why);
    }
}

async fn etcd_rows(install: &Install, system: &str, rows: &mut Vec<Row>) -> Result<(), String> {
    let etcd = install.program("etcd")?;
    let load = install.program("peers-load")?;
    let dir = temp("etcd")?;
    let p = ports(6)?;
    let peer_url = |i: usize| format!("http://127.0.0.1:{}", p[3 + i]);
    let client_url = |i: usize| format!("http://127.0.0.1:{}", p[i]);
    let initial: Vec<String> = (0..3).map(|i| format!("m{i}={}", peer_url(i))).collect();
    println!("{system}: {}", version(&etcd, &["--version"]).await);
    let mut members = Vec::new();
    for i in 0..3 {
        let args: Vec<String> = [
            "--name".into(),
            format!("m{i}"),
            "--data-dir".into(),
            dir.path().join(format!("m{i}")).display().to_string(),
            "--listen-client-urls".into(),
            client_url(i),
            "--advertise-client-urls".into(),
            client_url(i),
            "--listen-peer-urls".into(),
            peer_url(i),
            "--initial-advertise-peer-urls".into(),
            peer_url(i),
            "--initial-cluster".into(),
            initial.join(","),
            "--initial-cluster-state".into(),
            "new".into(),
            "--initial-cluster-token".into(),
            "lineage-bench".into(),
            "--log-level".into(),
            "warn".into(),
        ]
        .into();
        members.push(Proc::start(
            &format!("etcd-m{i}"),
            &etcd,
            &args,
            &[],
            dir.path(),
        )?);
    }
    for (i, m) in members.iter_mut().enumerate() {
        m.wait_port(p[i], Duration::from_secs(30)).await?;
    }
    let endpoints: Vec<String> = (0..3).map(client_url).collect();
    for (clients, ops) in WRITES {
        let args = vec![
            "-peer".into(),
            "etcd".into(),
            "-endpoints".into(),
            endpoints.join(","),
            "-ops".into(),
            scaled(ops).max(clients).to_string(),
            "-clients".into(),
            clients.to_string(),
            "-warmup".into(),
            "50".into(),
        ];
        let outcome = run_driver(&load, &args, DRIVER_LIMIT).await;
        rows.push(Row::new(Work::Write, clients, system, outcome));
    }
    Ok(())
}

/// Restate: restate-server (single node, its defaults: fsync'd log) and the Python SDK service
/// of `benches/peers/restate_service.py` on hypercorn, registered through the admin API; a
/// call of the parent handler (which calls the child handler and awaits it) per spawn,
/// through the ingress, by the Go load generator.
pub(super) async fn restate(install: &Install, rows: &mut Vec<Row>) {
    let system = "Restate (Python SDK)";
    if let Err(why) = restate_rows(install, system, rows).await {
        skip(rows, Work::Spawn, system, &SPAWNS, &why);
    }
}

async fn restate_rows(install: &Install, system: &str, rows: &mut Vec<Row>) -> Result<(), String> {
    let server = install.program("restate-server")?;
    let hypercorn = install.program("hypercorn")?;
    let load = install.program("peers-load")?;
    let service = install.source("restate_service.py")?;
    let dir = temp("restate")?;
    std::fs::copy(&service, dir.path().join("restate_service.py"))
        .map_err(|e| format!("cannot copy {}: {e}", service.display()))?;
    let [ingress, admin, node, svc] = ports(4)?[..] else {
        return Err("not enough free ports".into());
    };
    println!("{system}: {}", version(&server, &["--version"]).await);
    let env = [
        ("RESTATE_DISABLE_TELEMETRY", "true".to_owned()),
        ("RESTATE_BIND_ADDRESS", format!("127.0.0.1:{node}")),
        ("RESTATE_ADMIN__BIND_ADDRESS", format!("127.0.0.1:{admin}")),
        (
            "RESTATE_INGRESS__BIND_ADDRESS",
            format!("127.0.0.1:{ingress}"),
        ),
        ("RESTATE_LOG_FORMAT", "compact".to_owned()),
    ];
    let args: Vec<String> = vec![
        "--no-logo".into(),
        "--listen-mode".into(),
        "tcp".into(),
        "--node-name".into(),
        "bench".into(),
        "--base-dir".into(),
        dir.path().join("data").display().to_string(),
    ];
    let mut server = Proc::start("restate-server", &server, &args, &env, dir.path())?;
    let svc_args = vec![
        "--bind".into(),
        format!("127.0.0.1:{svc}"),
        "restate_service:app".into(),
    ];
    let mut service = Proc::start("hypercorn", &hypercorn, &svc_args, &[], dir.path())?;
    server.wait_port(admin, Duration::from_secs(60)).await?;
    server.wait_port(ingress, Duration::from_secs(60)).await?;
    service.wait_port(svc, Duration::from_secs(30)).await?;
    let deployment = format!("{{\"uri\":\"http://127.0.0.1:{svc}\"}}");
    until_ok("registering the service", || {
        http_post(admin, "/deployments", &deployment)
    })
    .await?;
    until_ok("the first call", || {
        http_post(ingress, "/parent/spawn", "\"go\"")
    })
    .await?;
    let url = format!("http://127.0.0.1:{ingress}/parent/spawn");
    for (clients, ops) in SPAWNS {
        let args = vec![
            "-peer".into(),
            "http".into(),
            "-url".into(),
            url.clone(),
            "-ops".into(),
            scaled(ops).max(clients).to_string(),
            "-clients".into(),
            clients.to_string(),
            "-warmup".into(),
            "20".into(),
        ];
        let outcome = run_driver(&load, &args, DRIVER_LIMIT).await;
        rows.push(Row::new(Work::Spawn, clients, system, outcome));
    }
    drop(service);
    drop(server);
    Ok(())
}

/// Retries `post` (each blocking, up to 30 s) every 500 ms until it answers 2xx, for up to 60 s.
async fn until_ok(
    what: &str,
    post: impl Fn() -> Result<(u16, String), String>,
) -> Result<(), String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let last = match tokio::task::block_in_place(&post) {
            Ok((status, _)) if (200..300).contains(&status) => return Ok(()),
            Ok((status, body)) => format!("HTTP {status}: {:.300}", body),
            Err(e) => e,
        };
        if std::time::Instant::now() >= deadline {
            return Err(format!("{what}: no success within 60 s; last: {last}"));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Temporal: `temporal server start-dev` (the CLI's dev server, SQLite in a file) and the
/// Python driver of `benches/peers/temporal_driver.py` (a worker and a client in one process):
/// a parent workflow that runs a child workflow and awaits its result per spawn.
pub(super) async fn temporal(install: &Install, rows: &mut Vec<Row>) {
    let system = "Temporal dev server (Python SDK)";
    if let Err(why) = temporal_rows(install, system, rows).await {
        skip(rows, Work::Spawn, system, &TEMPORAL_SPAWNS, &why);
    }
}

async fn temporal_rows(install: &Install, system: &str, rows: &mut Vec<Row>) -> Result<(), String> {
    let temporal = install.program("temporal")?;
    let python = install.program("python")?;
    let driver = install.source("temporal_driver.py")?;
    let dir = temp("temporal")?;
    let [grpc, http, metrics] = ports(3)?[..] else {
        return Err("not enough free ports".into());
    };
    println!("{system}: {}", version(&temporal, &["--version"]).await);
    let args: Vec<String> = vec![
        "server".into(),
        "start-dev".into(),
        "--db-filename".into(),
        dir.path().join("temporal.db").display().to_string(),
        "--ip".into(),
        "127.0.0.1".into(),
        "--port".into(),
        grpc.to_string(),
        "--http-port".into(),
        http.to_string(),
        "--metrics-port".into(),
        metrics.to_string(),
        "--headless".into(),
        "--log-level".into(),
        "warn".into(),
    ];
    let mut server = Proc::start("temporal", &temporal, &args, &[], dir.path())?;
    server.wait_port(grpc, Duration::from_secs(60)).await?;
    for (clients, ops) in TEMPORAL_SPAWNS {
        let args = vec![
            driver.display().to_string(),
            "--address".into(),
            format!("127.0.0.1:{grpc}"),
            "--ops".into(),
            scaled(ops).max(clients).to_string(),
            "--clients".into(),
            clients.to_string(),
            "--warmup".into(),
            "5".into(),
        ];
        let outcome = run_driver(&python, &args, DRIVER_LIMIT).await;
        rows.push(Row::new(Work::Spawn, clients, system, outcome));
    }
    drop(server);
    Ok(())
}
