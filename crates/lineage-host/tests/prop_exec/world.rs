//! The property test's operations, their strategies, and the world they run in.

use super::*;

// ---- operations ---------------------------------------------------------------------------

/// The children the test spawns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Continuable: each turn reports (`wakeup`) and echoes.
    Reporter,
    /// Continuable: each turn reports (`quiet`), sleeps 150 ms, echoes (interrupted mid-turn).
    Sleeper,
    /// Continuable: each turn spawns a one-shot grandchild and replies with its result.
    Spawner,
    /// One-shot: reports (`quiet`) and replies.
    OneShot,
}

impl Kind {
    /// Its script (JSON).
    pub(crate) fn script(self) -> &'static str {
        match self {
            Kind::Reporter => {
                r#"{"turns": [[{"do": "report", "content": "progress", "delivery": "wakeup"},
                               {"do": "echo"}]], "after": {"do": "repeat_last"}}"#
            }
            Kind::Sleeper => {
                r#"{"turns": [[{"do": "report", "content": "working", "delivery": "quiet"},
                               {"do": "sleep", "ms": 150},
                               {"do": "echo"}]], "after": {"do": "repeat_last"}}"#
            }
            Kind::Spawner => {
                r#"{"turns": [[{"do": "spawn", "shape": "one-shot", "prompt": "sub",
                                "agent": {"driver": "script", "script": {"turns": [[
                                    {"do": "reply", "content": "sub done"}]]}}},
                               {"do": "reply_result"}]], "after": {"do": "repeat_last"}}"#
            }
            Kind::OneShot => {
                r#"{"turns": [[{"do": "report", "content": "one-shot", "delivery": "quiet"},
                               {"do": "reply", "content": "one-shot done"}]]}"#
            }
        }
    }

    /// Its shape.
    pub(crate) fn shape(self) -> SubagentShape {
        match self {
            Kind::OneShot => SubagentShape::OneShot,
            Kind::Reporter | Kind::Sleeper | Kind::Spawner => SubagentShape::Continuable,
        }
    }
}

/// One generated step. Indices pick among what exists (modulo), and are no-ops when nothing
/// does.
#[derive(Debug, Clone)]
pub(crate) enum Op {
    /// A new top-level session (it echoes every turn).
    Root,
    /// A child of a root.
    Child { parent: u8, kind: Kind },
    /// A followup to a continuable child; `request`: its request id, from a pool of three.
    Followup { child: u8, request: Option<u8> },
    /// The user, for its parent, interrupts a continuable child's turn.
    Interrupt { child: u8 },
    /// Drain a root's subtree.
    Drain { root: u8 },
    /// Every append fails from now on (until `Heal`).
    FailAll,
    /// The next `n` appends fail.
    FailNext(u8),
    /// Appends succeed again.
    Heal,
    /// Background work (turns, reports, settlements) runs for `10 * n` ms.
    Pause(u8),
}

/// A child kind, continuable ones more often.
pub(crate) fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        3 => Just(Kind::Reporter),
        2 => Just(Kind::Sleeper),
        1 => Just(Kind::Spawner),
        2 => Just(Kind::OneShot),
    ]
}

/// One operation: spawns and followups most often, faults and pauses between them.
pub(crate) fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        1 => Just(Op::Root),
        4 => (any::<u8>(), kind()).prop_map(|(parent, kind)| Op::Child { parent, kind }),
        5 => (any::<u8>(), proptest::option::of(0u8..3))
            .prop_map(|(child, request)| Op::Followup { child, request }),
        1 => any::<u8>().prop_map(|child| Op::Interrupt { child }),
        1 => any::<u8>().prop_map(|root| Op::Drain { root }),
        2 => Just(Op::FailAll),
        2 => (1u8..4).prop_map(Op::FailNext),
        2 => Just(Op::Heal),
        3 => (1u8..15).prop_map(Op::Pause),
    ]
}

/// A root the case spawned.
pub(crate) struct Root {
    pub(crate) id: SessionId,
    /// A drain was asked for (it may have disposed it): its messages may never be taken.
    pub(crate) drained: bool,
}

/// A child the case spawned.
pub(crate) struct Child {
    pub(crate) id: SessionId,
    pub(crate) parent: SessionId,
    pub(crate) kind: Kind,
}

/// One case's host, its fixture and what it spawned.
pub(crate) struct World {
    pub(crate) cluster: MemCluster,
    pub(crate) host: Host,
    pub(crate) faults: Arc<Faults>,
    pub(crate) probe: Arc<Probe>,
    pub(crate) roots: Vec<Root>,
    pub(crate) children: Vec<Child>,
    /// Broken promises seen at reply time.
    pub(crate) violations: Vec<String>,
}

impl World {
    /// A host on fresh twins, its ports wrapped.
    pub(crate) async fn start() -> World {
        let cluster = MemCluster::start();
        let faults = Arc::new(Faults::default());
        let probe = Arc::new(Probe {
            events: cluster.bus.events(),
            registry: cluster.registry.clone(),
            seen: Mutex::default(),
        });
        let mut ports = lineage_bus::BusPorts::memory(&cluster.bus);
        ports.events = Arc::new(FaultyLog {
            inner: ports.events,
            faults: faults.clone(),
        });
        ports.inbox = Arc::new(CheckedInbox {
            inner: ports.inbox,
            probe: probe.clone(),
        });
        ports.lifecycle = Arc::new(CheckedLifecycle {
            inner: ports.lifecycle,
            probe: probe.clone(),
        });
        ports.output = Arc::new(CheckedOutput {
            inner: ports.output,
            probe: probe.clone(),
        });
        // `MemCluster::host_with`, with a shorter request deadline (finding 4).
        let mut config = host_config("node-a");
        config.request_timeout = Duration::from_secs(3);
        let host = Host::start(
            config,
            HostDeps::with_ports(
                ports,
                Arc::new(cluster.registry.clone()) as Arc<dyn RegistryPort>,
                Arc::new(SystemClock),
                Arc::new(ScriptDrivers),
            ),
            CancellationToken::new(),
        )
        .await
        .expect("a host");
        World {
            cluster,
            host,
            faults,
            probe,
            roots: Vec::new(),
            children: Vec::new(),
            violations: Vec::new(),
        }
    }

    /// The `pick`th continuable child (modulo), if any.
    pub(crate) fn continuable(&self, pick: u8) -> Option<&Child> {
        let continuable: Vec<&Child> = self
            .children
            .iter()
            .filter(|c| c.kind.shape() == SubagentShape::Continuable)
            .collect();
        match continuable.len() {
            0 => None,
            n => Some(continuable[usize::from(pick) % n]),
        }
    }

    /// Runs one operation and checks what its reply promises.
    pub(crate) async fn apply(&mut self, step: usize, op: &Op) {
        match *op {
            Op::Root => {
                let spawned = self
                    .host
                    .spawn(root_request(
                        script(r#"{"turns": [], "after": {"do": "echo"}}"#),
                        "hi",
                    ))
                    .await;
                if let Ok(reply) = spawned {
                    self.check_born(&reply.session).await;
                    self.roots.push(Root {
                        id: reply.session,
                        drained: false,
                    });
                }
            }
            Op::Child { parent, kind } => {
                let Some(root) = pick(&self.roots, parent) else {
                    return;
                };
                let parent = root.id.clone();
                let request = child_request(&parent, kind.shape(), script(kind.script()), "start");
                let Ok(reply) = self.host.spawn(request).await else {
                    return;
                };
                self.check_born(&reply.session).await;
                if let Some(result) = &reply.result {
                    self.check_result(&reply.session, result).await;
                }
                self.children.push(Child {
                    id: reply.session,
                    parent,
                    kind,
                });
            }
            Op::Followup { child, request } => {
                let Some(child) = self.continuable(child) else {
                    return;
                };
                let session = child.id.clone();
                let (content, request_id) = match request {
                    Some(r) => (format!("retry-{r}"), Some(format!("req-{r}"))),
                    None => (format!("{ONCE_PREFIX}{step}"), None),
                };
                let starts = self.probe.starts(&session);
                let reply = self
                    .host
                    .followup(FollowupRequest {
                        session: session.clone(),
                        content: content.clone(),
                        request_id: request_id
                            .as_deref()
                            .map(|r| RequestId::parse(r).expect("a request id")),
                    })
                    .await;
                // Open finding 4 (module docs): one followup, a few resumes at most.
                let resumes = self.probe.starts(&session) - starts;
                if resumes > MAX_RESUMES_PER_FOLLOWUP {
                    self.violations.push(format!(
                        "one followup to {session} resumed it {resumes} times ({reply:?})"
                    ));
                }
                if let Ok(reply) = reply {
                    self.check_followup(&session, &content, request_id.as_deref(), reply.outcome)
                        .await;
                }
            }
            Op::Interrupt { child } => {
                let Some(child) = self.continuable(child) else {
                    return;
                };
                let request = InterruptRequest {
                    target: child.id.clone(),
                    authority: InterruptAuthority::User {
                        parent_session_id: child.parent.clone(),
                    },
                };
                let _ = self.host.interrupt(request).await;
            }
            Op::Drain { root } => {
                let n = self.roots.len();
                if n == 0 {
                    return;
                }
                let root = &mut self.roots[usize::from(root) % n];
                root.drained = true;
                let id = root.id.clone();
                let _ = self.host.drain(vec![id]).await;
            }
            Op::FailAll => self.faults.all.store(true, Ordering::SeqCst),
            Op::FailNext(n) => {
                self.faults.next.fetch_add(usize::from(n), Ordering::SeqCst);
            }
            Op::Heal => self.faults.heal(),
            Op::Pause(n) => tokio::time::sleep(Duration::from_millis(10 * u64::from(n))).await,
        }
    }

    /// A spawn answered `Ok`: the session's creation window is durable.
    pub(crate) async fn check_born(&mut self, session: &SessionId) {
        let log = self.cluster.log(session).await;
        if !has(&log, "host/agent", |_| true) || !has(&log, "inbox/accepted", |_| true) {
            self.violations.push(format!(
                "spawn of {session} answered before its creation window is durable: {}",
                kinds(&log)
            ));
        }
    }

    /// S1: a one-shot result that says `completed` comes from a durable, disposed run.
    pub(crate) async fn check_result(
        &mut self,
        session: &SessionId,
        result: &lineage_host::control::OneShotResult,
    ) {
        if result.stop_reason != StopReason::Completed {
            return;
        }
        let log = self.cluster.log(session).await;
        let output = result.output.clone().unwrap_or_default();
        if !has(&log, "turn/end", |d| d["stop_reason"] == "completed")
            || !has(&log, "turn/assistant", |d| d["text"] == output.as_str())
        {
            self.violations.push(format!(
                "one-shot {session} returned {output:?} before its turn is durable: {}",
                kinds(&log)
            ));
        }
        let state = self.probe.state(session).await;
        if !matches!(state, Some(SessionState::Disposed | SessionState::Settled)) {
            self.violations.push(format!(
                "one-shot {session} returned its result before its commit (state {state:?})"
            ));
        }
    }

    /// M3: a followup answered `Ok` is in the durable log.
    pub(crate) async fn check_followup(
        &mut self,
        session: &SessionId,
        content: &str,
        request_id: Option<&str>,
        outcome: FollowupOutcome,
    ) {
        let log = self.cluster.log(session).await;
        let found = match (outcome, request_id) {
            (FollowupOutcome::AlreadyDelivered, Some(r)) => {
                has(&log, "inbox/accepted", |d| d["request_id"] == r)
            }
            (FollowupOutcome::AlreadyDelivered, None) => false,
            (FollowupOutcome::Delivered | FollowupOutcome::ResumedAndDelivered, _) => {
                has(&log, "inbox/accepted", |d| {
                    d["message"]["content"] == content
                        && request_id.is_none_or(|r| d["request_id"] == r)
                })
            }
        };
        if !found {
            self.violations.push(format!(
                "followup {content:?} (request {request_id:?}) to {session} answered {outcome:?} \
                 but is not in its durable log: {}",
                kinds(&log)
            ));
        }
    }

    /// Appends healed: every published report and notice reaches its undrained parent once;
    /// nothing is accepted twice.
    pub(crate) async fn check_end(&mut self) {
        let published = self.probe.with(|s| s.published.clone());
        let live_roots: BTreeSet<SessionId> = self
            .roots
            .iter()
            .filter(|r| !r.drained)
            .map(|r| r.id.clone())
            .collect();
        // Every child's parent reads its inbox: a continuable child is adopted, and a one-shot
        // child spawned from outside its parent's turn opens the parent's inbox (finding 3).
        let heard: BTreeSet<SessionId> = self.children.iter().map(|c| c.id.clone()).collect();
        let expected: Vec<(&String, &SessionId)> = published
            .iter()
            .filter(|(_, (sender, parent))| heard.contains(sender) && live_roots.contains(parent))
            .map(|(dedup, (_, parent))| (dedup, parent))
            .collect();
        let deadline = tokio::time::Instant::now() + DELIVERY_TIMEOUT;
        loop {
            let mut missing = Vec::new();
            for (dedup, parent) in &expected {
                let log = self.cluster.log(parent).await;
                if !has(&log, "inbox/accepted", |d| d["dedup_id"] == dedup.as_str()) {
                    missing.push(format!("{dedup} -> {parent}"));
                }
            }
            if missing.is_empty() {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                self.violations.push(format!(
                    "published, never accepted by the parent: {missing:?}"
                ));
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // At most once, in every log (a drained parent's included): each dedup id, each
        // followup request id, and (finding 2) each followup sent once without one.
        let sessions = self
            .roots
            .iter()
            .map(|r| r.id.clone())
            .chain(self.children.iter().map(|c| c.id.clone()));
        for session in sessions {
            let log = self.cluster.log(&session).await;
            let mut once: BTreeMap<String, usize> = BTreeMap::new();
            for event in log.iter().filter(|e| e.kind == "inbox/accepted") {
                let data = &event.data;
                let keys = [
                    data["dedup_id"].as_str().map(str::to_owned),
                    data["request_id"]
                        .as_str()
                        .map(|r| format!("request id {r}")),
                    data["message"]["content"]
                        .as_str()
                        .filter(|c| c.starts_with(ONCE_PREFIX))
                        .map(|c| format!("followup {c:?}")),
                ];
                for key in keys.into_iter().flatten() {
                    *once.entry(key).or_default() += 1;
                }
            }
            for (key, n) in once.into_iter().filter(|(_, n)| *n > 1) {
                self.violations.push(format!(
                    "{key} accepted {n} times by {session}: {}",
                    kinds(&log)
                ));
            }
        }
    }
}

/// The `pick`th of `items` (modulo), if any.
pub(crate) fn pick<T>(items: &[T], pick: u8) -> Option<&T> {
    match items.len() {
        0 => None,
        n => Some(&items[usize::from(pick) % n]),
    }
}
