//! [`MemoryControl`]: the in-memory twin of the control transport.
//!
//! One hub per [`super::MemoryBus`]: a node that serves registers a channel under its id; a
//! call to a node goes to one of that node's channels, a call to any node to one channel of
//! any serving node (in turn, as a queue group spreads requests). A stopped or dropped set of
//! endpoints no longer receives calls. Drain progress goes to the watches open when it is
//! published, as on core NATS.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use lineage_core::ids::{DrainId, NodeId};
use tokio::sync::{mpsc, oneshot};

use crate::control::{no_reply, no_responders, ControlError};
use crate::error::BusError;
use crate::ports::{
    BoxFuture, ControlCall, ControlEndpoints, ControlTarget, ControlTransport, IncomingCall,
    ProgressFeed,
};

/// Progress messages one watch may have queued before new ones are dropped for it.
const PROGRESS_BACKLOG: usize = 1024;

/// One serving channel and whether it is still in the group of calls to any node.
type Serving = (mpsc::UnboundedSender<IncomingCall>, Arc<AtomicBool>);

#[derive(Default)]
struct Hub {
    /// The serving channels of each node (a node may serve more than once, as more than one
    /// process may join a NATS queue group), each with whether it still takes calls to any
    /// node (false once it left the group).
    nodes: BTreeMap<NodeId, Vec<Serving>>,
    /// Spreads calls to any node over the serving channels in turn.
    next_any: usize,
    /// The open progress watches of each drain.
    progress: HashMap<DrainId, Vec<mpsc::Sender<Vec<u8>>>>,
}

/// The control transport of one in-memory bus: every handle (clone) reaches the same nodes.
#[derive(Clone, Default)]
pub struct MemoryControl {
    hub: Arc<Mutex<Hub>>,
}

impl std::fmt::Debug for MemoryControl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryControl").finish_non_exhaustive()
    }
}

impl MemoryControl {
    /// A hub nobody serves yet.
    pub fn new() -> Self {
        MemoryControl::default()
    }

    fn hub(&self) -> MutexGuard<'_, Hub> {
        // A panic while holding the lock cannot leave the hub half-changed (every change is
        // one push, retain or counter step), so a poisoned lock is still usable.
        self.hub.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The channel the next call to `target` goes to, if anyone serves it.
    fn route(&self, target: &ControlTarget) -> Option<mpsc::UnboundedSender<IncomingCall>> {
        let mut hub = self.hub();
        for channels in hub.nodes.values_mut() {
            channels.retain(|(c, _)| !c.is_closed());
        }
        hub.nodes.retain(|_, channels| !channels.is_empty());
        match target {
            ControlTarget::Node(node) => hub
                .nodes
                .get(node)
                .and_then(|c| c.first().map(|(c, _)| c.clone())),
            ControlTarget::Any => {
                let all: Vec<_> = hub
                    .nodes
                    .values()
                    .flatten()
                    .filter(|(_, in_group)| in_group.load(Ordering::SeqCst))
                    .map(|(c, _)| c.clone())
                    .collect();
                if all.is_empty() {
                    return None;
                }
                let pick = hub.next_any % all.len();
                hub.next_any = hub.next_any.wrapping_add(1);
                all.into_iter().nth(pick)
            }
        }
    }
}

fn subject_of(target: &ControlTarget, op: &str) -> String {
    match target {
        ControlTarget::Any => format!("ctl.{op}"),
        ControlTarget::Node(node) => format!("node.{node}.{op}"),
    }
}

/// One node's endpoints on the in-memory hub.
struct MemoryEndpoints {
    calls: mpsc::UnboundedReceiver<IncomingCall>,
    /// Whether the hub still routes calls to any node here.
    in_group: Arc<AtomicBool>,
}

impl ControlEndpoints for MemoryEndpoints {
    fn next(&mut self) -> BoxFuture<'_, Option<IncomingCall>> {
        Box::pin(self.calls.recv())
    }

    fn stop(mut self: Box<Self>) -> BoxFuture<'static, ()> {
        // Closing the receiver closes the node's sender: the hub stops routing to it.
        self.calls.close();
        Box::pin(async {})
    }

    fn leave_group(&mut self) -> BoxFuture<'_, ()> {
        self.in_group.store(false, Ordering::SeqCst);
        Box::pin(async {})
    }
}

struct MemoryProgress(mpsc::Receiver<Vec<u8>>);

impl ProgressFeed for MemoryProgress {
    fn next(&mut self) -> BoxFuture<'_, Option<Vec<u8>>> {
        Box::pin(self.0.recv())
    }
}

impl ControlTransport for MemoryControl {
    fn request<'a>(
        &'a self,
        target: &'a ControlTarget,
        call: ControlCall,
        timeout: Duration,
    ) -> BoxFuture<'a, Result<Vec<u8>, ControlError>> {
        Box::pin(async move {
            let subject = subject_of(target, &call.op);
            let channel = self.route(target).ok_or_else(|| no_responders(&subject))?;
            let (tx, rx) = oneshot::channel::<Vec<u8>>();
            let respond: crate::ports::Responder = Box::new(move |body: Vec<u8>| {
                Box::pin(async move {
                    // The caller may have given up already (its deadline passed): as on NATS,
                    // a reply nobody waits for is dropped.
                    let _ = tx.send(body);
                    Ok::<(), BusError>(())
                })
            });
            channel
                .send(IncomingCall { call, respond })
                .map_err(|_| no_responders(&subject))?;
            match tokio::time::timeout(timeout, rx).await {
                Ok(Ok(body)) => Ok(body),
                // The node dropped the call unanswered (it stopped): as unanswered on NATS.
                Ok(Err(_)) | Err(_) => Err(no_reply(&subject, timeout)),
            }
        })
    }

    fn serve<'a>(
        &'a self,
        node: &'a NodeId,
    ) -> BoxFuture<'a, Result<Box<dyn ControlEndpoints>, BusError>> {
        Box::pin(async move {
            let (tx, rx) = mpsc::unbounded_channel();
            let in_group = Arc::new(AtomicBool::new(true));
            self.hub()
                .nodes
                .entry(node.clone())
                .or_default()
                .push((tx, in_group.clone()));
            Ok(Box::new(MemoryEndpoints {
                calls: rx,
                in_group,
            }) as Box<dyn ControlEndpoints>)
        })
    }

    fn progress<'a>(
        &'a self,
        drain: &'a DrainId,
        body: Vec<u8>,
    ) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            let mut hub = self.hub();
            if let Some(watches) = hub.progress.get_mut(drain) {
                watches.retain(|w| !w.is_closed());
                for w in watches.iter() {
                    // A watch that fell PROGRESS_BACKLOG behind loses this one (core NATS drops
                    // messages for a slow consumer too).
                    let _ = w.try_send(body.clone());
                }
            }
            Ok(())
        })
    }

    fn watch_progress<'a>(
        &'a self,
        drain: &'a DrainId,
    ) -> BoxFuture<'a, Result<Box<dyn ProgressFeed>, BusError>> {
        Box::pin(async move {
            let (tx, rx) = mpsc::channel(PROGRESS_BACKLOG);
            self.hub()
                .progress
                .entry(drain.clone())
                .or_default()
                .push(tx);
            Ok(Box::new(MemoryProgress(rx)) as Box<dyn ProgressFeed>)
        })
    }
}
