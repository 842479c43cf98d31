//! `lineage bench SCENARIO`: benchmarks against a local cluster started for the run, each
//! printing p50/p90/p99, throughput, and a raw NATS request-reply baseline measured on the same
//! server in the same run, so figures compare as ratios on a noisy machine.
//!
//! Scenarios: `baseline`, `registry`, `spawn`, `settle`, `resume`, `drain`, `tools`, `all`;
//! not in `all`: `scale` (the registry at a million sessions) and `peers` (next to Restate,
//! Temporal, etcd and NATS KV; `scripts/bench-peers.sh` installs them).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use lineage_bus::control::{ControlError, ErrorCode};

/// Latency samples and the wall time they took.
#[derive(Default)]
pub struct Samples {
    /// Each operation's latency.
    pub latencies: Vec<Duration>,
    /// Wall time of the whole batch.
    pub wall: Duration,
}

impl Samples {
    fn pct(&self, p: f64) -> Duration {
        let mut v = self.latencies.clone();
        v.sort();
        if v.is_empty() {
            return Duration::ZERO;
        }
        let idx = ((p / 100.0) * (v.len() as f64 - 1.0)).round() as usize;
        v[idx.min(v.len() - 1)]
    }

    /// Median.
    pub fn p50(&self) -> Duration {
        self.pct(50.0)
    }

    /// 99th percentile.
    pub fn p99(&self) -> Duration {
        self.pct(99.0)
    }

    /// Operations per second over the wall time.
    pub fn throughput(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Prints one result line, with ratios to the baseline's p50.
pub fn report(name: &str, s: &Samples, baseline: &Samples) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let base = ms(baseline.p50()).max(1e-6);
    println!(
        "{name:<40} n={:<6} p50={:>8.3}ms p90={:>8.3}ms p99={:>8.3}ms  {:>9.1}/s   p50={:.1}x p99={:.1}x baseline",
        s.latencies.len(),
        ms(s.p50()),
        ms(s.pct(90.0)),
        ms(s.pct(99.0)),
        s.throughput(),
        ms(s.p50()) / base,
        ms(s.pct(99.0)) / base,
    );
}

/// Raw NATS request-reply round trips on the same server (the baseline).
pub async fn nats_round_trips(
    client: &async_nats::Client,
    n: usize,
) -> Result<Samples, ControlError> {
    let subject = format!("lineage.bench.echo.{}", lineage::client::now_ms());
    let mut sub = client
        .subscribe(subject.clone())
        .await
        .map_err(|e| ControlError::new(ErrorCode::Unavailable, e.to_string()))?;
    let responder = client.clone();
    let task = tokio::spawn(async move {
        while let Some(msg) = sub.next().await {
            if let Some(reply) = msg.reply {
                let _ = responder.publish(reply, msg.payload).await;
            }
        }
    });
    client
        .flush()
        .await
        .map_err(|e| ControlError::new(ErrorCode::Unavailable, e.to_string()))?;
    let mut latencies = Vec::with_capacity(n);
    let start = Instant::now();
    for _ in 0..n {
        let t = Instant::now();
        client
            .request(subject.clone(), "x".into())
            .await
            .map_err(|e| ControlError::new(ErrorCode::Unavailable, e.to_string()))?;
        latencies.push(t.elapsed());
    }
    let wall = start.elapsed();
    task.abort();
    Ok(Samples { latencies, wall })
}

/// Runs `ops` operations with `concurrency` workers; each op's latency is recorded.
pub async fn concurrent<F, Fut>(
    ops: usize,
    concurrency: usize,
    op: F,
) -> Result<Samples, ControlError>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<(), ControlError>> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let op = op.clone();
        let next = next.clone();
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= ops {
                    break;
                }
                let t = Instant::now();
                op(i).await?;
                lat.push(t.elapsed());
            }
            Ok::<_, ControlError>(lat)
        }));
    }
    let mut latencies = Vec::with_capacity(ops);
    for w in workers {
        let lat = w.await.map_err(|e| {
            ControlError::new(ErrorCode::Internal, format!("bench worker failed: {e}"))
        })??;
        latencies.extend(lat);
    }
    Ok(Samples {
        latencies,
        wall: start.elapsed(),
    })
}
