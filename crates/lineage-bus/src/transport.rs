//! [`NatsControl`]: the control transport ([`ControlTransport`]) on NATS (N3, R2).
//!
//! - A call is a NATS request to `lineage.<cluster>.ctl.<op>` ([`ControlTarget::Any`]) or
//!   `lineage.<cluster>.node.<node>.<op>` ([`ControlTarget::Node`]), with the trace context as
//!   its `traceparent` header and `Lineage-Forwarded: 1` when a node forwards it
//!   ([`crate::control::request_bytes`]).
//! - Serving a node registers the `lineage` NATS micro service (`nats micro ls` shows one
//!   instance per node, with its cluster and node as metadata): one endpoint per cluster-wide
//!   op in the queue group `lineage-<cluster>` (any one node serves each request), and one per
//!   per-node op in `lineage-<cluster>-<node>`. Every endpoint feeds one channel, in arrival
//!   order per endpoint.
//! - Drain progress is core NATS on `lineage.<cluster>.drain.<drain>.progress`.

use std::time::Duration;

use async_nats::service::ServiceExt;
use futures::StreamExt;
use lineage_core::ids::{DrainId, NodeId};
use lineage_protocol::control::ops;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::control::{
    heartbeat_interval, ControlError, Hop, FORWARDED_HEADER, HEARTBEAT_HEADER, SERVICE_NAME,
    STATUS_HEADER, STATUS_WORKING,
};
use crate::error::BusError;
use crate::ports::{
    BoxFuture, ControlCall, ControlEndpoints, ControlTarget, ControlTransport, IncomingCall,
    ProgressFeed,
};
use crate::service::Sink;
use crate::subjects::Subjects;
use crate::trace::TraceContext;

/// Calls one endpoint may have waiting before its task stops reading from NATS.
const PENDING_CALLS: usize = 256;

/// The control transport of one cluster on a NATS connection.
#[derive(Debug, Clone)]
pub struct NatsControl {
    client: async_nats::Client,
    subjects: Subjects,
}

impl NatsControl {
    /// The control transport of `subjects`' cluster on `client`.
    pub fn new(client: async_nats::Client, subjects: Subjects) -> Self {
        NatsControl { client, subjects }
    }

    fn subject(&self, target: &ControlTarget, op: &str) -> String {
        match target {
            ControlTarget::Any => self.subjects.control(op),
            ControlTarget::Node(node) => self.subjects.node_control(node, op),
        }
    }

    async fn start(&self, node: &NodeId) -> Result<NatsEndpoints, BusError> {
        let cluster = self.subjects.cluster().to_owned();
        let unavailable = |what: String| BusError::Nats {
            op: "serve the lineage control service",
            reason: what,
        };
        let service = self
            .client
            .service_builder()
            .description(format!("lineage control, cluster {cluster}, node {node}"))
            .metadata(
                [
                    ("cluster".to_owned(), cluster.clone()),
                    ("node".to_owned(), node.to_string()),
                ]
                .into_iter()
                .collect(),
            )
            .start(SERVICE_NAME, env!("CARGO_PKG_VERSION"))
            .await
            .map_err(|e| unavailable(format!("cannot start the lineage service: {e}")))?;
        let (tx, rx) = mpsc::channel(PENDING_CALLS);
        let mut tasks = Vec::new();
        let mut group = Vec::new();
        let sink = Sink(self.subjects.node_errors(node));
        let cluster_queue = format!("lineage-{cluster}");
        for op in ops::CLUSTER {
            let endpoint = service
                .endpoint_builder()
                .name(format!("ctl-{op}"))
                .metadata(describe(op))
                .queue_group(&cluster_queue)
                .add(self.subjects.control(op))
                .await
                .map_err(|e| unavailable(format!("cannot add endpoint {op}: {e}")))?;
            group.push(feed(
                op,
                endpoint,
                tx.clone(),
                self.client.clone(),
                sink.clone(),
            ));
        }
        let node_queue = format!("lineage-{cluster}-{node}");
        for op in ops::NODE {
            let endpoint = service
                .endpoint_builder()
                .name(format!("node-{op}"))
                .metadata(describe(op))
                .queue_group(&node_queue)
                .add(self.subjects.node_control(node, op))
                .await
                .map_err(|e| unavailable(format!("cannot add endpoint {op}: {e}")))?;
            tasks.push(feed(
                op,
                endpoint,
                tx.clone(),
                self.client.clone(),
                sink.clone(),
            ));
        }
        // Every subscription is on the server once a flush returns: calls sent after this
        // reach the endpoints.
        self.client
            .flush()
            .await
            .map_err(|e| unavailable(format!("cannot flush the endpoint subscriptions: {e}")))?;
        Ok(NatsEndpoints {
            calls: rx,
            group,
            tasks,
            service: Some(service),
            client: self.client.clone(),
        })
    }
}

/// An endpoint's metadata: its one-line `description` (`nats micro info` shows it) and the JSON
/// Schemas of its request body and reply envelope (`request_schema`, `response_schema`, compact
/// JSON; whole in `nats micro info lineage --json`).
fn describe(op: &str) -> std::collections::HashMap<String, String> {
    let mut metadata = std::collections::HashMap::from([(
        "description".to_owned(),
        ops::description(op).to_owned(),
    )]);
    if let Some(schemas) = lineage_protocol::schema::op_schemas(op) {
        metadata.insert("request_schema".to_owned(), schemas.request.to_string());
        metadata.insert("response_schema".to_owned(), schemas.response.to_string());
    }
    metadata
}

/// Reads one endpoint into the shared channel until the endpoint or the channel closes. A
/// request that asks for heartbeats ([`HEARTBEAT_HEADER`]) gets them from the moment it is read
/// until its reply is sent (or its responder dropped). An error reply (`{"v":1,"error":...}`)
/// also carries the `Nats-Service-Error` headers and counts in `$SRV.STATS`
/// ([`crate::service::respond`]; async-nats' own empty copy goes to `sink`).
fn feed(
    op: &'static str,
    mut endpoint: async_nats::service::endpoint::Endpoint,
    tx: mpsc::Sender<IncomingCall>,
    client: async_nats::Client,
    sink: Sink,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(request) = endpoint.next().await {
            let headers = request.message.headers.as_ref();
            let heartbeat = heartbeat_interval(
                headers
                    .and_then(|h| h.get(HEARTBEAT_HEADER))
                    .map(|v| v.as_str()),
            )
            .zip(request.message.reply.clone())
            .map(|(every, reply)| Heartbeat::start(client.clone(), reply, every));
            let call = ControlCall {
                op: op.to_owned(),
                body: request.message.payload.to_vec(),
                hop: Hop::from_header(
                    headers
                        .and_then(|h| h.get(FORWARDED_HEADER))
                        .map(|v| v.as_str()),
                ),
                trace: TraceContext::from_headers(headers),
            };
            let (client, sink) = (client.clone(), sink.clone());
            let respond: crate::ports::Responder = Box::new(move |body: Vec<u8>| {
                // The heartbeats stop before the reply goes (a client reads past any late one).
                drop(heartbeat);
                Box::pin(async move {
                    let failure = crate::service::control_failure(&body);
                    crate::service::respond(&client, request, body, failure, &sink).await
                })
            });
            if tx.send(IncomingCall { call, respond }).await.is_err() {
                break;
            }
        }
    })
}

/// The heartbeats of one request being served: stopped when dropped.
struct Heartbeat(JoinHandle<()>);

impl Heartbeat {
    /// The longest a request is heartbeaten: past it, its client has given up long ago.
    const MAX: Duration = Duration::from_secs(3600);

    /// Sends a heartbeat to `reply` now and every `every` until dropped (or [`Heartbeat::MAX`]).
    fn start(client: async_nats::Client, reply: async_nats::Subject, every: Duration) -> Self {
        Heartbeat(tokio::spawn(async move {
            let beats = Self::MAX.as_millis() / every.as_millis().max(1);
            for _ in 0..=beats {
                let mut headers = async_nats::HeaderMap::new();
                headers.insert(STATUS_HEADER, STATUS_WORKING);
                if client
                    .publish_with_headers(reply.clone(), headers, bytes::Bytes::new())
                    .await
                    .is_err()
                {
                    return;
                }
                tokio::time::sleep(every).await;
            }
        }))
    }
}

impl Drop for Heartbeat {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// One node's endpoints on NATS.
struct NatsEndpoints {
    calls: mpsc::Receiver<IncomingCall>,
    /// The cluster-wide endpoints' tasks (queue group `lineage-<cluster>`).
    group: Vec<JoinHandle<()>>,
    /// The per-node endpoints' tasks.
    tasks: Vec<JoinHandle<()>>,
    service: Option<async_nats::service::Service>,
    client: async_nats::Client,
}

impl ControlEndpoints for NatsEndpoints {
    fn next(&mut self) -> BoxFuture<'_, Option<IncomingCall>> {
        Box::pin(self.calls.recv())
    }

    fn leave_group(&mut self) -> BoxFuture<'_, ()> {
        let group = std::mem::take(&mut self.group);
        for task in &group {
            task.abort();
        }
        Box::pin(async move {
            // As in `stop`: each aborted task drops its endpoint (its unsubscription) when it
            // is next polled; the flush puts them on the server.
            for task in group {
                let _ = task.await;
            }
            let _ = self.client.flush().await;
        })
    }

    fn stop(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        // The service first, while its endpoints are there to be told: async-nats' `stop`
        // returns before ending the `$SRV.PING`/`INFO`/`STATS` task when no endpoint listens,
        // and the instance would go on answering `nats micro ls`. It awaits nothing.
        if let Some(service) = self.service.take() {
            let _ = futures::FutureExt::now_or_never(service.stop());
        }
        let mut tasks = std::mem::take(&mut self.group);
        tasks.append(&mut self.tasks);
        for task in &tasks {
            task.abort();
        }
        let client = self.client.clone();
        Box::pin(async move {
            // An aborted task drops its endpoint (and so queues its unsubscription) only when
            // it is next polled: wait until each has, so the flush below comes after them.
            for task in tasks {
                let _ = task.await;
            }
            // The unsubscriptions are on the server once the flush returns: a call after
            // this finds nobody serving.
            let _ = client.flush().await;
        })
    }
}

impl Drop for NatsEndpoints {
    fn drop(&mut self) {
        for task in self.group.iter().chain(&self.tasks) {
            task.abort();
        }
    }
}

/// A drain's progress messages on core NATS.
struct NatsProgress(async_nats::Subscriber);

impl ProgressFeed for NatsProgress {
    fn next(&mut self) -> BoxFuture<'_, Option<Vec<u8>>> {
        Box::pin(async move { self.0.next().await.map(|m| m.payload.to_vec()) })
    }
}

impl ControlTransport for NatsControl {
    fn request<'a>(
        &'a self,
        target: &'a ControlTarget,
        call: ControlCall,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, ControlError>> {
        Box::pin(async move {
            let subject = self.subject(target, &call.op);
            crate::control::request_bytes(
                &self.client,
                subject,
                call.body,
                timeout,
                call.trace,
                call.hop,
            )
            .await
        })
    }

    fn serve<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> BoxFuture<'a, Result<Box<dyn ControlEndpoints>, BusError>> {
        Box::pin(async move {
            let endpoints = self.start(node).await?;
            Ok(Box::new(endpoints) as Box<dyn ControlEndpoints>)
        })
    }

    fn progress<'a>(
        &'a self,
        drain: &'a DrainId,
        body: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            self.client
                .publish(self.subjects.drain_progress(drain), body.into())
                .await
                .map_err(|e| BusError::Nats {
                    op: "publish drain progress",
                    reason: e.to_string(),
                })
        })
    }

    fn watch_progress<'a>(
        &'a self,
        drain: &'a DrainId,
    ) -> BoxFuture<'a, Result<Box<dyn ProgressFeed>, BusError>> {
        Box::pin(async move {
            let sub = self
                .client
                .subscribe(self.subjects.drain_progress(drain))
                .await
                .map_err(|e| BusError::Nats {
                    op: "watch drain progress",
                    reason: e.to_string(),
                })?;
            // The subscription is on the server once the flush returns: progress published
            // after this (from any connection) reaches the watch.
            self.client.flush().await.map_err(|e| BusError::Nats {
                op: "watch drain progress",
                reason: e.to_string(),
            })?;
            Ok(Box::new(NatsProgress(sub)) as Box<dyn ProgressFeed>)
        })
    }
}
