//! The property test's ports: the event log with injected faults, and the inbox, lifecycle
//! and turn-output wrappers that check what is published against the durable log.

use super::*;

// ---- faults -------------------------------------------------------------------------------

/// The switch the test flips: appends fail while `all` is set, and the next `next` ones.
#[derive(Default)]
pub(crate) struct Faults {
    pub(crate) all: AtomicBool,
    pub(crate) next: AtomicUsize,
}

impl Faults {
    /// Whether this append fails (consuming one of the `next` failures).
    pub(crate) fn trip(&self) -> bool {
        self.all.load(Ordering::SeqCst)
            || self
                .next
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
    }

    /// Appends succeed again.
    pub(crate) fn heal(&self) {
        self.all.store(false, Ordering::SeqCst);
        self.next.store(0, Ordering::SeqCst);
    }
}

/// The event log port with injected faults: a tripped append does not land and fails as an
/// unreachable JetStream does; everything else goes to the twin.
pub(crate) struct FaultyLog {
    pub(crate) inner: Arc<dyn EventLog>,
    pub(crate) faults: Arc<Faults>,
}

impl EventLog for FaultyLog {
    fn append_all<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: Option<LogCursor>,
    ) -> BoxFuture<'a, Result<LogCursor, BusError>> {
        if self.faults.trip() {
            return Box::pin(async {
                Err(BusError::JetStream {
                    op: "append to a session log",
                    reason: "injected fault: the append did not land".to_owned(),
                })
            });
        }
        self.inner.append_all(session, events, expected)
    }

    fn read_log<'a>(&'a self, session: &'a SessionId) -> BoxFuture<'a, Result<LogRead, BusError>> {
        self.inner.read_log(session)
    }

    /// A compaction is an append: it trips as one.
    fn compact<'a>(
        &'a self,
        session: &'a SessionId,
        events: &'a [SessionEvent],
        expected: LogCursor,
    ) -> BoxFuture<'a, Result<Option<LogCursor>, BusError>> {
        if self.faults.trip() {
            return Box::pin(async {
                Err(BusError::JetStream {
                    op: "compact a session log",
                    reason: "injected fault: the compaction did not land".to_owned(),
                })
            });
        }
        self.inner.compact(session, events, expected)
    }

    fn drop_superseded<'a>(
        &'a self,
        session: &'a SessionId,
        compaction: LogCursor,
    ) -> BoxFuture<'a, Result<(), BusError>> {
        self.inner.drop_superseded(session, compaction)
    }

    fn purge<'a>(&'a self, sessions: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>> {
        self.inner.purge(sessions)
    }
}

// ---- what the ports see -------------------------------------------------------------------

/// What the wrapped ports saw: violations, and what was published.
#[derive(Default)]
pub(crate) struct Seen {
    /// Broken promises, one line each.
    pub(crate) violations: Vec<String>,
    /// Every report and notice published: its dedup id, and (sender, parent).
    pub(crate) published: BTreeMap<String, (SessionId, SessionId)>,
    /// Runs whose `subagent/start` was published, and their session.
    pub(crate) started: BTreeMap<RunId, SessionId>,
}

/// Reads the durable truth (the events twin, the registry) when a port publishes, and records
/// what it finds.
pub(crate) struct Probe {
    pub(crate) events: lineage_bus::memory::MemoryEventLog,
    pub(crate) registry: MemoryRegistry,
    pub(crate) seen: Mutex<Seen>,
}

impl Probe {
    /// The durable log of `session` (the twin's, never faulted).
    pub(crate) async fn durable(&self, session: &SessionId) -> Vec<SessionEvent> {
        self.events
            .read(session)
            .await
            .map(|(events, _)| events)
            .unwrap_or_default()
    }

    /// `session`'s registry state, if it is registered.
    pub(crate) async fn state(&self, session: &SessionId) -> Option<SessionState> {
        self.registry
            .session(session.clone())
            .await
            .ok()
            .flatten()
            .map(|r| r.state)
    }

    /// Whether `session` is a one-shot run (its turn is written at its barriers, not first).
    pub(crate) async fn one_shot(&self, session: &SessionId) -> bool {
        self.registry
            .session(session.clone())
            .await
            .ok()
            .flatten()
            .is_some_and(|r| r.is_one_shot())
    }

    /// Runs `f` on what was seen.
    pub(crate) fn with<T>(&self, f: impl FnOnce(&mut Seen) -> T) -> T {
        f(&mut self.seen.lock().expect("probe lock"))
    }

    /// Records a broken promise.
    pub(crate) fn violation(&self, what: String) {
        self.with(|s| s.violations.push(what));
    }

    /// How many runs of `session` were announced (`subagent/start`).
    pub(crate) fn starts(&self, session: &SessionId) -> usize {
        self.with(|s| s.started.values().filter(|c| *c == session).count())
    }

    /// M1, M2, X2: what an inbox message depends on is durable, and a notice is committed.
    pub(crate) async fn check_inbox(&self, message: &InboxMessage) {
        let sender = message.sender_session_id();
        let log = self.durable(sender).await;
        let dedup = message.dedup_id();
        match message {
            InboxMessage::Report(r) => {
                if !has(&log, "outbox/report", |d| d["seq"] == r.seq) {
                    self.violation(format!(
                        "report {dedup} published before its outbox/report is durable: {}",
                        kinds(&log)
                    ));
                }
            }
            InboxMessage::Settled(n) => {
                if !has(&log, "outbox/settled", |d| d["seq"] == n.seq) {
                    self.violation(format!(
                        "notice {dedup} published before its outbox/settled is durable: {}",
                        kinds(&log)
                    ));
                }
                let state = self.state(sender).await;
                if !matches!(state, Some(SessionState::Settled | SessionState::Disposed)) {
                    self.violation(format!(
                        "notice {dedup} published before the settlement commit (state {state:?})"
                    ));
                }
            }
        }
        let route = (sender.clone(), message.parent_session_id().clone());
        self.with(|s| s.published.insert(dedup, route));
    }

    /// E1: a child is announced with its creation window durable; it ends after its start and
    /// after its settlement commit, with its notice (a continuable child) durable.
    pub(crate) async fn check_lifecycle(&self, event: &LifecycleEvent) {
        match event {
            LifecycleEvent::Start(info) => {
                let log = self.durable(&info.child_id).await;
                if !has(&log, "host/agent", |_| true) || self.state(&info.child_id).await.is_none()
                {
                    self.violation(format!(
                        "subagent/start of {} before its birth is durable: {}",
                        info.child_id,
                        kinds(&log)
                    ));
                }
                self.with(|s| s.started.insert(info.run_id.clone(), info.child_id.clone()));
            }
            LifecycleEvent::End(end) => {
                if !self.with(|s| s.started.contains_key(&end.run_id)) {
                    self.violation(format!(
                        "subagent/end of {} (run {}) before its subagent/start",
                        end.child_id, end.run_id
                    ));
                }
                let state = self.state(&end.child_id).await;
                if !matches!(state, Some(SessionState::Settled | SessionState::Disposed)) {
                    self.violation(format!(
                        "subagent/end of {} before the settlement commit (state {state:?})",
                        end.child_id
                    ));
                }
                let log = self.durable(&end.child_id).await;
                if end.shape == SubagentShape::Continuable && !has(&log, "outbox/settled", |_| true)
                {
                    self.violation(format!(
                        "subagent/end of {} before its notice is durable: {}",
                        end.child_id,
                        kinds(&log)
                    ));
                }
            }
        }
    }

    /// A resumable session's turn runs only once its `turn/start` is durable (a one-shot run
    /// writes its turn at its barriers); its `turn-end` output goes
    /// out only once its `turn/end` is durable (finding 1).
    pub(crate) async fn check_output(&self, output: &TurnOutput) {
        match output {
            TurnOutput::TurnStart {
                session_id, turn, ..
            } => {
                if self.one_shot(session_id).await {
                    return;
                }
                let log = self.durable(session_id).await;
                if !has(&log, "turn/start", |d| d["index"] == *turn) {
                    self.violation(format!(
                        "turn {turn} of {session_id} runs before its turn/start is durable: {}",
                        kinds(&log)
                    ));
                }
            }
            TurnOutput::TurnEnd {
                session_id,
                turn,
                outcome,
                ..
            } => {
                if self.one_shot(session_id).await {
                    return;
                }
                let log = self.durable(session_id).await;
                if !has(&log, "turn/end", |d| d["index"] == *turn) {
                    self.violation(format!(
                        "turn {turn} of {session_id} output ended ({outcome:?}) before its \
                         turn/end is durable: {}",
                        kinds(&log)
                    ));
                }
            }
            TurnOutput::Chunk { .. } => {}
        }
    }
}

/// Whether `log` has an event of `kind` whose data passes `pred`.
pub(crate) fn has(
    log: &[SessionEvent],
    kind: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> bool {
    log.iter().any(|e| e.kind == kind && pred(&e.data))
}

/// A log's kinds, for messages.
pub(crate) fn kinds(log: &[SessionEvent]) -> String {
    format!("{:?}", common::kinds(log))
}

/// The inbox port, checked at publish time.
pub(crate) struct CheckedInbox {
    pub(crate) inner: Arc<dyn Inbox>,
    pub(crate) probe: Arc<Probe>,
}

impl Inbox for CheckedInbox {
    fn publish<'a>(
        &'a self,
        message: &'a InboxMessage,
        traceparent: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Published, BusError>> {
        Box::pin(async move {
            self.probe.check_inbox(message).await;
            self.inner.publish(message, traceparent).await
        })
    }

    fn consumer<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn InboxReader>, BusError>> {
        self.inner.consumer(parent)
    }

    fn delete_consumer<'a>(&'a self, parent: &'a SessionId) -> BoxFuture<'a, Result<(), BusError>> {
        self.inner.delete_consumer(parent)
    }

    fn delete_consumers<'a>(
        &'a self,
        parents: &'a [SessionId],
    ) -> BoxFuture<'a, Result<usize, BusError>> {
        self.inner.delete_consumers(parents)
    }

    fn purge<'a>(&'a self, parents: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>> {
        self.inner.purge(parents)
    }
}

/// The lifecycle port, checked at publish time.
pub(crate) struct CheckedLifecycle {
    pub(crate) inner: Arc<dyn Lifecycle>,
    pub(crate) probe: Arc<Probe>,
}

impl Lifecycle for CheckedLifecycle {
    fn publish<'a>(&'a self, event: &'a LifecycleEvent) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            self.probe.check_lifecycle(event).await;
            self.inner.publish(event).await
        })
    }

    fn watch<'a>(
        &'a self,
        parent: &'a SessionId,
    ) -> BoxFuture<'a, Result<Box<dyn LifecycleFeed>, BusError>> {
        self.inner.watch(parent)
    }
}

/// The turn-output port, checked at publish time.
pub(crate) struct CheckedOutput {
    pub(crate) inner: Arc<dyn TurnOutputs>,
    pub(crate) probe: Arc<Probe>,
}

impl TurnOutputs for CheckedOutput {
    fn publish<'a>(&'a self, output: &'a TurnOutput) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            self.probe.check_output(output).await;
            self.inner.publish(output).await
        })
    }

    fn watch<'a>(
        &'a self,
        session: Option<&'a SessionId>,
    ) -> BoxFuture<'a, Result<Box<dyn TurnOutputFeed>, BusError>> {
        self.inner.watch(session)
    }
}
