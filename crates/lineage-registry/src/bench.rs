//! The register-child benchmark's method, shared by `cargo bench -p lineage-registry --bench
//! registry` (in-process voters) and `lineage bench registry` (the voters of a running cluster).
//!
//! Method: one top-level root, then child sessions registered under it (one Raft entry each,
//! acknowledged after the leader's and a follower's fsync), by `concurrency` clients that each
//! send their next write when the previous one is acknowledged. Every write has its own
//! request id; ids are unique per run (`run` prefix), so runs against the same registry do not
//! collide. A raw fsync on the same disk is measured by [`fsync_probe`].

use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};

use crate::client::{NewSession, RegistryClient};
use crate::error::RegistryError;

/// Latencies of one batch and its wall time.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// One latency per operation.
    pub latencies: Vec<Duration>,
    /// Wall time of the whole batch.
    pub wall: Duration,
}

/// A session id unique to run `run` and number `n` (UUID text).
pub fn bench_session_id(run: u32, n: u64) -> Result<SessionId, RegistryError> {
    let text = format!("{run:08x}-7a3b-7cde-8f00-{:012x}", n & 0xffff_ffff_ffff);
    SessionId::parse(&text).map_err(|e| RegistryError::Unexpected(e.to_string()))
}

/// A run prefix from the clock, so ids differ between runs.
pub fn run_prefix() -> u32 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| (d.as_millis() & 0xffff_ffff) as u32)
        .unwrap_or(0)
}

/// `n` appends of 512 B, each followed by `sync_data`, in a file under `dir`.
pub fn fsync_probe(dir: &Path, n: usize) -> std::io::Result<Batch> {
    let path = dir.join(format!("fsync-probe-{}", run_prefix()));
    let mut f = std::fs::File::create(&path)?;
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        f.write_all(&[0u8; 512])?;
        f.sync_data()?;
        latencies.push(t.elapsed());
    }
    let wall = start.elapsed();
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(Batch { latencies, wall })
}

/// The register-child workload against one registry.
pub struct RegisterBench {
    client: RegistryClient,
    root: SessionHeader,
    run: u32,
    next: Arc<AtomicU64>,
}

impl RegisterBench {
    /// Registers the root (run `run`) and warms up with `warmup` children (leader discovery,
    /// connections).
    pub async fn new(
        client: RegistryClient,
        run: u32,
        warmup: u64,
    ) -> Result<RegisterBench, RegistryError> {
        let root = SessionHeader::top_level(bench_session_id(run, 0)?, None, None);
        client
            .register_session(request_id(run, 0)?, 0, root.clone(), NewSession::default())
            .await?;
        // A birth is `starting` until a node confirms it; only then does it take children.
        let starter =
            NodeId::parse("bench").map_err(|e| RegistryError::Unexpected(e.to_string()))?;
        client
            .confirm_start(request_id(run, u64::MAX)?, 0, root.id().clone(), starter, 0)
            .await?;
        let bench = RegisterBench {
            client,
            root,
            run,
            next: Arc::new(AtomicU64::new(1)),
        };
        bench.run_batch(warmup, 1).await?;
        Ok(bench)
    }

    /// The root's header.
    pub fn root(&self) -> &SessionHeader {
        &self.root
    }

    /// `total` child registrations by `concurrency` clients, each sequential.
    pub async fn run_batch(&self, total: u64, concurrency: usize) -> Result<Batch, RegistryError> {
        let concurrency = concurrency.max(1) as u64;
        let start = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..concurrency {
            let share = total / concurrency + u64::from(c < total % concurrency);
            let client = self.client.clone();
            let root = self.root.clone();
            let next = self.next.clone();
            let run = self.run;
            tasks.push(tokio::spawn(async move {
                let mut latencies = Vec::with_capacity(share as usize);
                for _ in 0..share {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    let header = child_session_meta(&root, bench_session_id(run, n)?, 1, 0, None)
                        .map_err(|e| RegistryError::Unexpected(e.to_string()))?;
                    let request = request_id(run, n)?;
                    let t = Instant::now();
                    client
                        .register_session(request, n, header, NewSession::default())
                        .await?;
                    latencies.push(t.elapsed());
                }
                Ok::<_, RegistryError>(latencies)
            }));
        }
        let mut latencies = Vec::with_capacity(total as usize);
        for t in tasks {
            let lat = t
                .await
                .map_err(|e| RegistryError::Unexpected(format!("bench client failed: {e}")))??;
            latencies.extend(lat);
        }
        Ok(Batch {
            latencies,
            wall: start.elapsed(),
        })
    }
}

fn request_id(run: u32, n: u64) -> Result<RequestId, RegistryError> {
    RequestId::parse(&format!("bench-{run:08x}-{n}"))
        .map_err(|e| RegistryError::Unexpected(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bench_ids_are_valid_and_distinct() {
        let a = bench_session_id(0xdead_beef, 1).unwrap();
        let b = bench_session_id(0xdead_beef, 2).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.as_str(), "deadbeef-7a3b-7cde-8f00-000000000001");
        assert_eq!(request_id(1, 2).unwrap().as_str(), "bench-00000001-2");
    }

    #[test]
    fn fsync_probe_measures_each_sync() {
        let dir = tempfile::tempdir().unwrap();
        let b = fsync_probe(dir.path(), 3).unwrap();
        assert_eq!(b.latencies.len(), 3);
        assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none());
    }
}
