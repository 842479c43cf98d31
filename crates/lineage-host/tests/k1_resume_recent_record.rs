//! Issue 35, K1: a cold resume decides its claim on a record read from any member (no round to
//! a quorum), and such a record never decides anything else. A lagging member is played by a
//! registry port whose recent read answers a record the test chose (`ObservedRegistry`); the
//! real rules (the registry's state machine) answer everything else.
//!
//! - Fresh enough: the resume makes no linearizable read of the session, and what it carries
//!   on with that no epoch fences (usage, children) comes from the claim's answer, not from
//!   the record it read.
//! - Lagging: a claim refused on an old epoch, a session shown running on a live node that is
//!   cold now, a session disposed since: each is decided again on a linearizable read, so the
//!   resume wins or is refused exactly as it would have been without the recent read.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use lineage_core::descriptor::SubagentShape;
use lineage_core::ids::{RequestId, SessionId};
use lineage_host::control::{FollowupRequest, ResumeOutcome};
use lineage_host::{service, Host, HostDeps, HostError, RegistryPort, ScriptDrivers, SystemClock};
use lineage_registry::types::{Command, CommandResponse, SessionRecord};
use lineage_registry::SessionState;
use tokio_util::sync::CancellationToken;

/// A host on `name`, serving its control subjects (the others reach it).
async fn host(
    cluster: &MemCluster,
    registry: &ObservedRegistry,
    name: &str,
) -> (Host, service::ServiceHandle) {
    let host = Host::start(
        host_config(name),
        HostDeps::with_ports(
            lineage_bus::BusPorts::memory(&cluster.bus),
            Arc::new(registry.clone()) as Arc<dyn RegistryPort>,
            Arc::new(SystemClock),
            Arc::new(ScriptDrivers),
        ),
        CancellationToken::new(),
    )
    .await
    .expect("host");
    let served = service::serve(host.clone()).await.expect("serves");
    (host, served)
}

/// A root on `a` and a continuable child of it on `b` (two one-reply turns), settled and gone
/// cold.
async fn cold_child(
    registry: &ObservedRegistry,
    a: &Host,
    b: &Host,
    b_name: &str,
) -> (SessionId, SessionId) {
    let root = a
        .spawn(root_request(
            script(r#"{"turns": [], "after": {"do": "echo"}}"#),
            "hi",
        ))
        .await
        .unwrap();
    let mut req = child_request(
        &root.session,
        SubagentShape::Continuable,
        script(
            r#"{"turns": [[{"do": "reply", "text": "one"}], [{"do": "reply", "text": "two"}]]}"#,
        ),
        "work",
    );
    req.node = Some(node(b_name));
    let child = a.spawn(req).await.unwrap();
    settled_and_cold(registry, b, &child.session).await;
    (root.session, child.session)
}

async fn settled_and_cold(registry: &ObservedRegistry, host: &Host, session: &SessionId) {
    wait_for_async(
        Duration::from_secs(20),
        "the child to settle and go cold",
        || async {
            record(registry, session).await.state == SessionState::Settled && !host.is_live(session)
        },
    )
    .await;
}

async fn record(registry: &ObservedRegistry, session: &SessionId) -> SessionRecord {
    registry
        .inner
        .session(session.clone())
        .await
        .unwrap()
        .expect("registered")
}

fn epoch(record: &SessionRecord) -> u64 {
    record.placement.as_ref().map_or(0, |p| p.epoch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_a_resume_claims_on_a_recent_record_and_carries_on_from_the_claims_answer() {
    let cluster = MemCluster::start();
    let registry = ObservedRegistry::over(cluster.registry.clone());
    let (a, _served_a) = host(&cluster, &registry, "node-a").await;
    let (b, _served_b) = host(&cluster, &registry, "node-b").await;
    let (c, _served_c) = host(&cluster, &registry, "node-c").await;
    let (_root, child) = cold_child(&registry, &a, &b, "node-b").await;
    // The member answering the recent read has not seen the usage written last.
    registry.lag_at(record(&registry, &child).await);
    let usage = lineage_core::usage::SessionUsage {
        used_tokens: 777,
        ..Default::default()
    };
    let recorded = registry
        .inner
        .write(Command::RecordUsage {
            request_id: RequestId::parse("0190abcd-0000-7000-8000-00000000a5a9").unwrap(),
            at_ms: 1,
            session: child.clone(),
            usage,
            expected_epoch: None,
        })
        .await
        .unwrap();
    assert!(matches!(recorded, CommandResponse::UsageRecorded { .. }));

    let before = registry.session_reads();
    let resumed = c.resume(child.clone()).await.expect("resumed");
    assert_eq!(resumed.outcome, ResumeOutcome::Resumed);
    assert_eq!(resumed.epoch, 2);
    assert_eq!(
        registry.session_reads(),
        before,
        "no linearizable read of the session: the recent record was enough"
    );
    // The usage it carries on with is the record's at the claim, not the recent read's.
    assert_eq!(c.context_tokens(), 777);
    a.shutdown().await;
    b.shutdown().await;
    c.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn k1_a_recent_record_that_lags_never_decides_a_refusal() {
    let cluster = MemCluster::start();
    let registry = ObservedRegistry::over(cluster.registry.clone());
    let (a, _served_a) = host(&cluster, &registry, "node-a").await;
    let (b, _served_b) = host(&cluster, &registry, "node-b").await;
    let (c, _served_c) = host(&cluster, &registry, "node-c").await;
    let (_root, child) = cold_child(&registry, &a, &b, "node-b").await;
    let at_epoch_1 = record(&registry, &child).await;
    assert_eq!(epoch(&at_epoch_1), 1);

    // 1. The recent record shows it running on node-b, a live node: decided again on a
    //    linearizable read, which shows it cold, so node-c resumes it.
    let mut running_on_b = at_epoch_1.clone();
    running_on_b.state = SessionState::Running;
    registry.lag_at(running_on_b);
    let before = registry.session_reads();
    let resumed = c.resume(child.clone()).await.expect("resumed on node-c");
    assert_eq!(
        (resumed.outcome, resumed.epoch),
        (ResumeOutcome::Resumed, 2)
    );
    assert!(registry.session_reads() > before, "read again linearizably");

    // Its second turn on node-c; it goes cold again, at epoch 2.
    c.followup(FollowupRequest {
        session: child.clone(),
        content: "again".into(),
        request_id: None,
    })
    .await
    .unwrap();
    settled_and_cold(&registry, &c, &child).await;

    // 2. The recent record still shows epoch 1: the claim on it is refused, the resume is
    //    decided again on the record as it is, and node-a wins epoch 3.
    registry.lag_at(at_epoch_1.clone());
    let before = registry.session_reads();
    let resumed = a.resume(child.clone()).await.expect("resumed on node-a");
    assert_eq!(
        (resumed.outcome, resumed.epoch),
        (ResumeOutcome::Resumed, 3)
    );
    assert!(registry.session_reads() > before, "read again linearizably");
    assert_eq!(epoch(&record(&registry, &child).await), 3);
    assert_eq!(record(&registry, &child).await.runs.len(), 3);

    // 3. Disposed since the recent record: refused as disposed, nothing changed.
    a.shutdown().await;
    wait_for_async(Duration::from_secs(10), "node-a to let it go", || async {
        !a.is_live(&child)
    })
    .await;
    let disposed = registry
        .inner
        .write(Command::Dispose {
            stop_reason: None,
            request_id: RequestId::parse("0190abcd-0000-7000-8000-00000000d15d").unwrap(),
            at_ms: 2,
            session: child.clone(),
        })
        .await
        .unwrap();
    assert!(matches!(disposed, CommandResponse::Disposed { .. }));
    registry.lag_at(at_epoch_1);
    let refused = b.resume(child.clone()).await;
    assert!(
        matches!(refused, Err(HostError::Disposed(_))),
        "{refused:?}"
    );
    assert_eq!(
        record(&registry, &child).await.state,
        SessionState::Disposed
    );
    b.shutdown().await;
    c.shutdown().await;
}
