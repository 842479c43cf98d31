//! Z3, end to end, NATS faults under real `lineage node` processes:
//! - nodes finding R1 streams with `nats.stream_replicas = 3`: refuse to start (one line), or
//!   update them with `nats.update_streams = true`;
//! - a 3-server JetStream cluster with R3 streams (the nodes' `nats_url` lists all three
//!   servers), one server SIGKILLed under a concurrent
//!   spawn + report load: every acknowledged spawn is in the registry, every message the inbox
//!   stream acknowledged is accepted by its parent exactly once, the nodes reconnect, new
//!   spawns succeed within a bound, and the restarted server rejoins;
//! - a single nats-server restarted (same port and store) under a live parent and child: the
//!   nodes reconnect, the child's reports still reach the parent exactly once and a new spawn
//!   works;
//! - a parent's inbox refusing a child's settlement notice for a while: the notice is
//!   published once the inbox takes it, and accepted once; and when the child's node dies
//!   meanwhile, its re-adoption sends the notice again from the child's log.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use lineage_core::ids::SessionId;
use lineage_registry::{Consistency, RegistryClient};
use lineage_testkit::prelude::*;
use serde_json::{json, Value};

const T: Duration = Duration::from_secs(60);

/// One load operation: its index, when it started, the acknowledged child or the last error.
type Outcome = (usize, Instant, Result<String, String>);

/// The messages of `stream` on `subject`, in order: (dedup id `<sender>-<seq>`, JSON payload).
fn stream_messages(c: &Cluster, stream: &str, subject: &str) -> Vec<(String, Value)> {
    use async_nats::jetstream::consumer::{pull::OrderedConfig, DeliverPolicy};
    let bus = c.bus();
    bus.rt.block_on(async {
        let js = async_nats::jetstream::new(bus.client.clone());
        let stream = js.get_stream(stream).await.expect("stream");
        let mut consumer = stream
            .create_consumer(OrderedConfig {
                filter_subject: subject.to_owned(),
                deliver_policy: DeliverPolicy::All,
                ..Default::default()
            })
            .await
            .expect("ordered consumer");
        let pending = consumer.info().await.expect("consumer info").num_pending;
        let mut out = Vec::new();
        if pending == 0 {
            return out;
        }
        let mut messages = consumer.messages().await.expect("messages");
        while (out.len() as u64) < pending {
            let msg = tokio::time::timeout(Duration::from_secs(10), messages.next())
                .await
                .unwrap_or_else(|_| panic!("reading {subject} timed out"))
                .expect("open")
                .expect("message");
            let body: Value = serde_json::from_slice(&msg.payload).expect("JSON");
            let id = format!(
                "{}-{}",
                body["sender_session_id"].as_str().unwrap_or("?"),
                body["seq"]
            );
            if let Some(header) = msg
                .headers
                .as_ref()
                .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
            {
                assert_eq!(header.as_str(), id, "Nats-Msg-Id is the dedup id");
            }
            out.push((id, body));
        }
        out
    })
}

fn inbox_stream(c: &Cluster) -> String {
    format!("LINEAGE_{}_INBOX", c.cluster.to_ascii_uppercase())
}

/// The dedup ids `parent` accepted into its log, with how often each was accepted.
fn accepted_ids(log: &[Event]) -> BTreeMap<String, usize> {
    let mut ids = BTreeMap::new();
    for e in of_kind(log, "inbox/accepted") {
        if let Some(id) = e.data["dedup_id"].as_str() {
            *ids.entry(id.to_owned()).or_default() += 1;
        }
    }
    ids
}

/// `nats stream info NAME` via the test's connection: (configured replicas, peers current).
fn stream_replicas(c: &Cluster, name: &str) -> (usize, Vec<(String, bool)>, Option<String>) {
    let bus = c.bus();
    bus.rt.block_on(async {
        let js = async_nats::jetstream::new(bus.client.clone());
        let mut stream = js.get_stream(name).await.expect("stream");
        let info = stream.info().await.expect("stream info").clone();
        let cluster = info.cluster.unwrap_or_default();
        (
            info.config.num_replicas,
            cluster
                .replicas
                .iter()
                .map(|p| (p.name.clone(), p.current && !p.offline))
                .collect(),
            cluster.leader,
        )
    })
}

/// A raw spawn request to `via`'s per-node subject; `Ok(child id)` when acknowledged.
async fn spawn_child(
    client: &async_nats::Client,
    cluster: &str,
    via: &str,
    body: &Value,
) -> Result<String, String> {
    let subject = format!("lineage.{cluster}.node.{via}.spawn");
    let reply = tokio::time::timeout(
        Duration::from_secs(30),
        client.request(subject, body.to_string().into()),
    )
    .await
    .map_err(|_| "no reply within 30 s".to_owned())?
    .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&reply.payload).map_err(|e| e.to_string())?;
    match v["result"]["session"].as_str() {
        Some(id) => Ok(id.to_owned()),
        None => Err(v.to_string()),
    }
}

/// A continuable child on `node` of `parent`: one turn that reports `tag` and replies, then
/// settles (its notice goes to the parent's inbox).
fn child_body(parent: &str, node: &str, tag: &str) -> Value {
    json!({
        "parent": parent,
        "shape": "continuable",
        "node": node,
        "prompt": "go",
        "agent": agent(json!({"turns": [[
            {"do": "report", "content": tag, "delivery": "quiet"},
            {"do": "reply", "text": format!("{tag} done")}
        ]]})),
    })
}

/// Waits until every dedup id of `parent`'s inbox stream messages is accepted in its log, and
/// checks each is accepted exactly once; returns the stream's ids.
fn assert_inbox_accepted_exactly_once(c: &Cluster, parent: &str) -> BTreeSet<String> {
    let subject = format!("lineage.{}.parent.{parent}.inbox", c.cluster);
    let deadline = Instant::now() + T;
    loop {
        let in_stream: BTreeSet<String> = stream_messages(c, &inbox_stream(c), &subject)
            .into_iter()
            .map(|(id, _)| id)
            .collect();
        let log = c.log(parent);
        let accepted = accepted_ids(&log);
        let twice: Vec<_> = accepted.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            twice.is_empty(),
            "{parent} accepted messages more than once: {twice:?}"
        );
        let missing: Vec<&String> = in_stream
            .iter()
            .filter(|id| !accepted.contains_key(*id))
            .collect();
        let unknown: Vec<&String> = accepted
            .keys()
            .filter(|id| !in_stream.contains(*id))
            .collect();
        assert!(
            unknown.is_empty(),
            "{parent} accepted messages the inbox stream does not hold: {unknown:?}; stream: {in_stream:?}"
        );
        if missing.is_empty() {
            return in_stream;
        }
        if Instant::now() > deadline {
            panic!(
                "{parent}: {} of {} acknowledged inbox messages never accepted (first {:?}); node logs:\n{}",
                missing.len(),
                in_stream.len(),
                missing.first(),
                c.logs()
            );
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Every node log line that names `id`, for failure messages.
fn lines_naming(c: &Cluster, id: &str) -> String {
    c.nodes
        .iter()
        .flat_map(|n| {
            n.log_text()
                .lines()
                .filter(|l| l.contains(id))
                .map(|l| format!("{}: {l}", n.id))
                .collect::<Vec<_>>()
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The dedup ids of what `child` staged for its parent (`outbox/report`, `outbox/settled`).
fn outbox_ids(log: &[Event], child: &str) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "outbox/report" || e.kind == "outbox/settled")
        .filter_map(|e| e.data["seq"].as_u64())
        .map(|seq| format!("{child}-{seq}"))
        .collect()
}

#[test]
fn z3_sigkill_one_of_three_nats_servers_under_spawn_and_report_load_loses_nothing_acknowledged() {
    const PARENTS: usize = 6;
    const OPS: usize = 150;
    const IN_FLIGHT: usize = 12;
    const SPAWN_WITHIN: Duration = Duration::from_secs(20);
    const RETRY_FOR: Duration = Duration::from_secs(40);
    let mut c = Cluster::start_opts(
        3,
        ClusterOptions {
            nats_cluster: true,
            env: vec![("LINEAGE_NATS__STREAM_REPLICAS".into(), "3".into())],
            ..ClusterOptions::default()
        },
    );
    let events_stream = c.events_stream();
    let inbox = inbox_stream(&c);
    for name in [&events_stream, &inbox] {
        let (replicas, peers, _) = stream_replicas(&c, name);
        assert_eq!(replicas, 3, "{name}");
        assert_eq!(peers.len(), 2, "{name}: {peers:?}");
    }
    let nodes = ["node-1", "node-2", "node-3"];
    let roots: Vec<(String, &str)> = (0..PARENTS)
        .map(|k| {
            let node = nodes[k % 3];
            let root = c.spawn_root(
                node,
                &json!({"turns": [[{"do": "reply", "text": "root"}]], "after": {"do": "reply", "text": "ok"}}),
            );
            (root, node)
        })
        .collect();

    // The load: OPS spawns of continuable children (each reports, replies and settles), up to
    // IN_FLIGHT at once, the child on another node than its parent.
    let done = Arc::new(AtomicUsize::new(0));
    let outcomes: Arc<Mutex<Vec<Outcome>>> = Arc::default();
    let load = {
        let bus = c.bus();
        let client = bus.client.clone();
        let cluster = c.cluster.clone();
        let roots = roots.clone();
        let done = done.clone();
        let outcomes = outcomes.clone();
        bus.rt.spawn(async move {
            futures::stream::iter(0..OPS)
                .map(|i| {
                    let (parent, pn) = roots[i % roots.len()].clone();
                    let cn = nodes[(nodes.iter().position(|n| *n == pn).unwrap() + 1 + i % 2) % 3];
                    let body = child_body(&parent, cn, &format!("r-{i}"));
                    let client = client.clone();
                    let cluster = cluster.clone();
                    let done = done.clone();
                    let outcomes = outcomes.clone();
                    async move {
                        // A client that retries an unacknowledged spawn for up to RETRY_FOR,
                        // each attempt a new spawn (no request id: a retry of a birth whose
                        // start failed is refused, see e2e_births.rs).
                        let started = Instant::now();
                        let outcome = loop {
                            match spawn_child(&client, &cluster, pn, &body).await {
                                Ok(id) => break Ok(id),
                                Err(e) if started.elapsed() < RETRY_FOR => {
                                    tokio::time::sleep(Duration::from_millis(250)).await;
                                    let _ = e;
                                }
                                Err(e) => break Err(e),
                            }
                        };
                        outcomes.lock().unwrap().push((i, started, outcome));
                        done.fetch_add(1, Ordering::SeqCst);
                    }
                })
                .buffer_unordered(IN_FLIGHT)
                .collect::<Vec<()>>()
                .await;
        })
    };

    // A third of the way in: SIGKILL the server leading the inbox stream.
    wait_for(T, "a third of the load", || {
        (done.load(Ordering::SeqCst) >= OPS / 3).then_some(())
    });
    let (_, _, leader) = stream_replicas(&c, &inbox);
    let leader = leader.expect("the inbox stream has a leader");
    let victim = (0..3)
        .find(|&i| c.nats.cluster().server(i).name() == leader)
        .expect("the leader is one of ours");
    c.nats.cluster().kill(victim);
    let killed = Instant::now();
    eprintln!(
        "killed nats-server {victim} (inbox stream leader) after {} operations",
        done.load(Ordering::SeqCst)
    );

    // The cluster keeps serving: a spawn sent after the kill succeeds within SPAWN_WITHIN,
    // through each node.
    let probe_root = roots[0].0.clone();
    for (k, via) in nodes.iter().enumerate() {
        let cn = nodes[(k + 1) % 3];
        let body = child_body(&probe_root, cn, &format!("probe-{k}"));
        let bus = c.bus();
        let took = bus.rt.block_on(async {
            loop {
                match spawn_child(&bus.client, &c.cluster, via, &body).await {
                    Ok(_) => return killed.elapsed(),
                    Err(e) if killed.elapsed() < SPAWN_WITHIN => {
                        eprintln!("spawn via {via} after the kill: {e}");
                        tokio::time::sleep(Duration::from_millis(250)).await;
                    }
                    Err(e) => panic!(
                        "no spawn via {via} succeeded within {SPAWN_WITHIN:?} of the kill: {e}\n{}",
                        c.logs()
                    ),
                }
            }
        });
        eprintln!("a spawn via {via} succeeded {took:?} after the kill");
    }
    c.bus()
        .rt
        .block_on(async { tokio::time::timeout(T * 3, load).await })
        .expect("the load finished")
        .expect("the load task");

    let outcomes = outcomes.lock().unwrap().clone();
    let acked: Vec<String> = outcomes
        .iter()
        .filter_map(|(_, _, o)| o.as_ref().ok().cloned())
        .collect();
    let failed: Vec<&String> = outcomes
        .iter()
        .filter_map(|(_, _, o)| o.as_ref().err())
        .collect();
    let after_kill_ok = outcomes
        .iter()
        .filter(|(_, started, o)| *started > killed && o.is_ok())
        .count();
    eprintln!(
        "load: {} spawns acknowledged, {} failed ({:?}), {after_kill_ok} acknowledged after the kill",
        acked.len(),
        failed.len(),
        failed.first()
    );
    assert!(
        failed.is_empty(),
        "{} spawns never acknowledged within {RETRY_FOR:?} of retries: {:?}\n{}",
        failed.len(),
        failed.first(),
        c.logs()
    );
    // How the nodes rode it out: messages sent again after an unknown outcome, inbox messages
    // offered again to a parent that could not log them yet; never a publish given up (a
    // settled child whose parent is never told) or a live session stopped as fenced.
    for n in &c.nodes {
        let text = n.log_text();
        let count = |needle: &str| text.matches(needle).count();
        eprintln!(
            "{}: {} JetStream publishes sent again, {} inbox messages offered again",
            n.id,
            count("outcome unknown; sending it again"),
            count("message not accepted yet; offering it again")
        );
        assert_eq!(
            count("the parent will not hear of it"),
            0,
            "{}: a notice was given up\n{}",
            n.id,
            c.logs()
        );
        assert_eq!(
            count("log fenced by another node"),
            0,
            "{}: a live session stopped as fenced\n{}",
            n.id,
            c.logs()
        );
        assert_eq!(
            count("message not accepted; leaving it in the inbox"),
            0,
            "{}: a parent stopped reading its inbox\n{}",
            n.id,
            c.logs()
        );
    }
    assert!(after_kill_ok > 0, "no load spawn succeeded after the kill");

    // Every acknowledged spawn is in the registry, under its parent, and settles.
    let registry = RegistryClient::new(c.bus().client.clone(), c.cluster.clone());
    let bus = c.bus();
    let deadline = Instant::now() + T;
    for child in &acked {
        let id = SessionId::parse(child).unwrap();
        loop {
            let record = bus
                .rt
                .block_on(registry.session(id.clone(), Consistency::Linearizable));
            match record {
                Ok(Some(r)) if r.state.as_str() == "settled" => break,
                Ok(None) => panic!("acknowledged spawn {child} is not in the registry"),
                other if Instant::now() > deadline => panic!(
                    "acknowledged child {child} did not settle within {T:?}: {other:?}\nits log:\n{}\nnode log lines naming it:\n{}",
                    render_log(&c.log(child)),
                    lines_naming(&c, child)
                ),
                _ => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    // Exactly once: what the inbox stream acknowledged, each parent accepted once; and what
    // each settled child staged for its parent (its report and its notice) is in the stream.
    let mut in_streams = BTreeSet::new();
    for (root, _) in &roots {
        in_streams.extend(assert_inbox_accepted_exactly_once(&c, root));
    }
    let mut lost = Vec::new();
    for child in &acked {
        for id in outbox_ids(&c.log(child), child) {
            if !in_streams.contains(&id) {
                lost.push(id);
            }
        }
    }
    if let Some(first) = lost.first() {
        let child = &first[..first.rfind('-').unwrap()];
        panic!(
            "{} staged reports/notices of settled children never reached the inbox stream: {:?}\nlog of {child}:\n{}\nnode log lines naming it:\n{}",
            lost.len(),
            &lost[..lost.len().min(5)],
            render_log(&c.log(child)),
            lines_naming(&c, child)
        );
    }
    eprintln!(
        "{} inbox messages, each accepted exactly once",
        in_streams.len()
    );
    assert!(in_streams.len() >= 2 * acked.len());

    // The nodes reconnected: all ready, each on a live server.
    c.wait_ready(T);
    for node in &c.nodes {
        let (code, body) = node.http_get("/readyz").unwrap_or((0, String::new()));
        assert_eq!(code, 200, "{}: {body}", node.id);
    }

    // The killed server comes back (same ports, name and store) and rejoins: healthy, the
    // same meta leader, and a current replica of both streams again.
    c.nats.cluster().restart(victim).expect("restart rejoins");
    let name = c.nats.cluster().server(victim).name().to_owned();
    for stream in [&events_stream, &inbox] {
        wait_for(T, format!("{name} current in {stream}"), || {
            let (replicas, peers, leader) = stream_replicas(&c, stream);
            let all: Vec<(String, bool)> = peers;
            let rejoined = leader.as_deref() == Some(name.as_str())
                || all.iter().any(|(n, current)| n == &name && *current);
            (replicas == 3 && all.len() == 2 && all.iter().all(|(_, ok)| *ok) && rejoined)
                .then_some(())
        });
    }
    // And it serves: a spawn by a client connected to it alone.
    let url = c.nats.cluster().url(victim);
    let (code, out, err) = {
        let out = std::process::Command::new(lineage_bin())
            .args(["--json", "--nats", &url, "--cluster", &c.cluster, "spawn"])
            .args([
                "--parent",
                &roots[1].0,
                "--shape",
                "continuable",
                "--node",
                "node-3",
            ])
            .args([
                "--prompt",
                "after rejoin",
                "--script",
                r#"{"turns":[[{"do":"reply","text":"ok"}]]}"#,
            ])
            .output()
            .expect("run lineage");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, 0, "spawn through the rejoined server: {err}\n{out}");
}

/// Waits until every node answers 200 on `/readyz` and the CLI can list all three as live.
fn wait_all_live(c: &Cluster) {
    c.wait_ready(T);
    wait_for(T, "all three nodes live", || {
        let (code, out, _) = c.cli(&["--json", "status"]);
        if code != 0 {
            return None;
        }
        let status: Value = serde_json::from_str(out.trim()).ok()?;
        let live = status["nodes"]
            .as_array()?
            .iter()
            .filter(|n| n["lease_live"] == true)
            .count();
        (live == 3).then_some(())
    });
}

#[test]
fn z3_nodes_reconnect_after_a_nats_restart_and_reports_still_reach_the_parent_once() {
    let mut c = Cluster::start(3);
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "root"}]], "after": {"do": "reply", "text": "ok"}}),
    );
    // A continuable child on node-2: reports r1, works 8 s (the outage happens then),
    // reports r2 and settles; a followup later gives it a turn that reports r3.
    let reply = c.spawn(&[
        "--parent", &root, "--shape", "continuable", "--node", "node-2", "--prompt", "go",
        "--script", r#"{"turns":[[{"do":"report","content":"r1"},{"do":"sleep","ms":8000},{"do":"report","content":"r2"},{"do":"reply","text":"t1"}],[{"do":"report","content":"r3"},{"do":"reply","text":"t2"}]]}"#,
    ]);
    let kid = id_of(&reply["session"]);
    let report_of = |log: &[Event], content: &str| {
        log.iter()
            .filter(|e| {
                e.kind == "inbox/accepted"
                    && e.data["message"]["kind"] == "subagent-report"
                    && e.data["message"]["content"] == content
            })
            .count()
    };
    c.wait_log(&root, T, "r1 accepted", |l| report_of(l, "r1") == 1);

    // nats-server dies (SIGKILL), stays down 3 s, and comes back on the same port with the
    // same store.
    c.nats.server().kill();
    std::thread::sleep(Duration::from_secs(3));
    c.nats.restart().expect("restart nats-server");
    let restarted = Instant::now();

    // r2 (sent after the restart) and the settlement reach the parent, once each.
    let log = c.wait_log(&root, T, "r2 and the settlement accepted", |l| {
        report_of(l, "r2") == 1 && !accepted(l, "subagent-settled", Some(&kid)).is_empty()
    });
    eprintln!(
        "r2 and the settlement accepted {:?} after the restart",
        restarted.elapsed()
    );
    assert_eq!(report_of(&log, "r1"), 1, "{}", render_log(&log));
    assert_eq!(accepted(&log, "subagent-settled", Some(&kid)).len(), 1);
    wait_all_live(&c);

    // A followup resumes the settled child: r3 and its second notice, once each.
    let sent = c.cli_json(&["send", &kid, "again"]);
    assert!(
        sent["outcome"] == "resumed_and_delivered" || sent["outcome"] == "delivered",
        "{sent}"
    );
    let log = c.wait_log(&root, T, "r3 and the second settlement", |l| {
        report_of(l, "r3") == 1 && accepted(l, "subagent-settled", Some(&kid)).len() == 2
    });
    let ids = accepted_ids(&log);
    assert!(
        ids.values().all(|n| *n == 1),
        "accepted twice: {ids:?}\n{}",
        render_log(&log)
    );
    assert_eq!(report_of(&log, "r2"), 1);

    // A new spawn works, and its notice reaches the parent too.
    let reply = c.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--node",
        "node-3",
        "--prompt",
        "new",
        "--script",
        r#"{"turns":[[{"do":"report","content":"r4"},{"do":"reply","text":"new"}]]}"#,
    ]);
    let new_kid = id_of(&reply["session"]);
    c.wait_log(&root, T, "the new child's report and settlement", |l| {
        report_of(l, "r4") == 1 && accepted(l, "subagent-settled", Some(&new_kid)).len() == 1
    });
    assert_inbox_accepted_exactly_once(&c, &root);
}

/// Sets (or, with `None`, lifts) a per-subject message limit with discard-new on the events
/// stream: a session log at the limit cannot take another message until it is lifted.
fn limit_log_messages(c: &Cluster, limit: Option<i64>) {
    limit_messages(c, &c.events_stream(), limit)
}

/// [`limit_log_messages`] on any stream (`name`): a subject at the limit takes no message.
fn limit_messages(c: &Cluster, name: &str, limit: Option<i64>) {
    use async_nats::jetstream::stream::DiscardPolicy;
    let bus = c.bus();
    bus.rt.block_on(async {
        let js = async_nats::jetstream::new(bus.client.clone());
        let mut stream = js.get_stream(name).await.expect("stream");
        let mut config = stream.info().await.expect("stream info").config.clone();
        match limit {
            Some(n) => {
                config.max_messages_per_subject = n;
                config.discard = DiscardPolicy::New;
                config.discard_new_per_subject = true;
            }
            None => {
                config.max_messages_per_subject = -1;
                config.discard = DiscardPolicy::Old;
                config.discard_new_per_subject = false;
            }
        }
        js.update_stream(config).await.expect("update the stream");
    });
}

/// How many messages `session`'s log has on the events stream.
fn log_messages(c: &Cluster, session: &str) -> usize {
    stream_messages_raw(
        c,
        &c.events_stream(),
        &format!("lineage.{}.session.{session}.events", c.cluster),
    )
}

/// How many messages `stream` holds on `subject`.
fn stream_messages_raw(c: &Cluster, stream: &str, subject: &str) -> usize {
    let bus = c.bus();
    bus.rt.block_on(async {
        let js = async_nats::jetstream::new(bus.client.clone());
        let stream = js.get_stream(stream).await.expect("stream");
        let info = stream
            .info_with_subjects(subject)
            .await
            .expect("stream info with subjects");
        let mut info = info;
        let mut total = 0usize;
        while let Some(Ok((_, n))) = info.next().await {
            total += n;
        }
        total
    })
}

/// A parent whose log JetStream refuses to extend for a while (a full log: a per-subject limit
/// with discard-new, set and then lifted by the test) while reports arrive in its inbox keeps
/// its inbox: each message is offered again until the parent can log it, then accepted once.
/// Before, the parent's inbox reader stopped at the first message it could not log, and the
/// parent never read its inbox again.
#[test]
fn z3_a_parent_that_cannot_log_for_a_while_accepts_its_inbox_once_it_can() {
    let c = Cluster::start(3);
    // A parent log longer (in messages) than the child's will be, so a limit at its length
    // stops only it. A turn's end compacts a log spread over many messages into one (issue
    // 35, `lineage_core::log::compaction_due`: at least 8 messages and one for every four
    // events), so the first turn makes many events (60 replies, compacted at its end) and the
    // next four, a few messages each, are then too few to be compacted again.
    let replies: Vec<serde_json::Value> = (0..60)
        .map(|i| json!({"do": "reply", "text": format!("root {i}")}))
        .collect();
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [replies], "after": {"do": "reply", "text": "ok"}}),
    );
    for i in 0..4 {
        c.cli_json(&["send", &root, &format!("m{i}")]);
        c.wait_log(&root, T, "the followup's turn", |l| {
            of_kind(l, "turn/end").len() > i + 1
        });
    }
    let full = log_messages(&c, &root);
    assert!(full >= 12, "the parent's log has {full} messages");
    limit_log_messages(&c, Some(full as i64));
    let reply = c.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--node",
        "node-2",
        "--prompt",
        "go",
        "--script",
        r#"{"turns":[[{"do":"report","content":"held"},{"do":"reply","text":"done"}]]}"#,
    ]);
    let kid = id_of(&reply["session"]);
    // The report and the settlement are in the parent's inbox; the parent cannot log them.
    let subject = format!("lineage.{}.parent.{root}.inbox", c.cluster);
    wait_for(T, "the report and the notice in the inbox stream", || {
        (stream_messages(&c, &inbox_stream(&c), &subject).len() == 2).then_some(())
    });
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        log_messages(&c, &root),
        full,
        "the parent's log stayed full"
    );
    assert!(
        log_messages(&c, &kid) < full,
        "the child's log stayed under the limit (else the test stops the child too)"
    );
    limit_log_messages(&c, None);
    let log = c.wait_log(&root, T, "the report and the notice accepted", |l| {
        accepted(l, "subagent-report", Some(&kid)).len() == 1
            && accepted(l, "subagent-settled", Some(&kid)).len() == 1
    });
    assert!(
        accepted_ids(&log).values().all(|n| *n == 1),
        "{}",
        render_log(&log)
    );
    assert_inbox_accepted_exactly_once(&c, &root);
    assert!(
        c.nodes[0]
            .log_text()
            .contains("message not accepted yet; offering it again"),
        "node-1 offered the message again"
    );
}

/// What [`refused_notice`] set up: the root, its two children, the inbox stream and the root's
/// inbox subject.
struct RefusedNotice {
    root: String,
    first: String,
    second: String,
    inbox: String,
    subject: String,
}

/// The two notice tests' start: a root on node-1 whose first continuable child (on node-2)
/// settled, its notice the one message on the root's inbox subject; then that subject is
/// limited to one message ([`limit_messages`]) and a second child on node-2 settles, its
/// notice logged and refused.
fn refused_notice(c: &Cluster) -> RefusedNotice {
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "root"}]], "after": {"do": "reply", "text": "ok"}}),
    );
    let spawn_child = |tag: &str| {
        let script = json!({"turns": [[{"do": "reply", "text": tag}]]}).to_string();
        id_of(
            &c.spawn(&[
                "--parent",
                &root,
                "--shape",
                "continuable",
                "--node",
                "node-2",
                "--prompt",
                "go",
                "--script",
                &script,
            ])["session"],
        )
    };
    // A first child's notice puts one message on the parent's inbox subject...
    let first = spawn_child("first");
    c.wait_log(&root, T, "the first child's notice", |l| {
        accepted(l, "subagent-settled", Some(&first)).len() == 1
    });
    let inbox = inbox_stream(c);
    let subject = format!("lineage.{}.parent.{root}.inbox", c.cluster);
    assert_eq!(stream_messages_raw(c, &inbox, &subject), 1);
    // ...and a limit of one makes the subject refuse the next.
    limit_messages(c, &inbox, Some(1));
    let second = spawn_child("second");
    c.wait_log(&second, T, "the second child's settlement", |l| {
        !of_kind(l, "outbox/settled").is_empty()
    });
    RefusedNotice {
        root,
        first,
        second,
        inbox,
        subject,
    }
}

/// Issue 12 (`lineage chaos --seed 22`: a parent never heard of a settled child): a child whose
/// parent's inbox refuses its settlement notice for longer than a few quick retries (a
/// nats-server restarting; here a per-subject limit with discard-new on the inbox stream, set
/// and then lifted by the test) keeps publishing it until the inbox takes it, and the parent
/// accepts it once. Before, the child gave up after five attempts (about 1.5 s) and the
/// committed settlement was never heard of.
#[test]
fn z3_a_settlement_notice_the_inbox_refuses_for_a_while_reaches_the_parent_once_it_can() {
    let c = Cluster::start(3);
    let RefusedNotice {
        root,
        second,
        inbox,
        subject,
        ..
    } = refused_notice(&c);
    // Longer than the five quick attempts the child used to make before giving up.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(
        stream_messages_raw(&c, &inbox, &subject),
        1,
        "the inbox took nothing while limited"
    );
    limit_messages(&c, &inbox, None);
    let log = c.wait_log(&root, T, "the second child's notice accepted", |l| {
        accepted(l, "subagent-settled", Some(&second)).len() == 1
    });
    assert!(
        accepted_ids(&log).values().all(|n| *n == 1),
        "{}",
        render_log(&log)
    );
    assert_inbox_accepted_exactly_once(&c, &root);
}

/// Issue 12, the other half: a child whose node dies while it is still publishing its
/// settlement notice (the parent's inbox refuses it, as above) leaves the notice in its log
/// only, and a settled session is never resumed. When the node comes back, its re-adoption
/// sends the outboxes of the continuable children placed on it again, rebuilt from their logs:
/// the parent accepts the lost notice once, and the first child's notice, sent again too, is a
/// duplicate (accepted once in all). Before, the parent never heard of the second child.
#[test]
fn z3_k1_a_notice_a_dead_node_never_published_reaches_the_parent_when_the_node_is_back() {
    let mut c = Cluster::start(3);
    let RefusedNotice {
        root,
        first,
        second,
        inbox,
        subject,
    } = refused_notice(&c);
    std::thread::sleep(Duration::from_secs(1));
    // node-2 dies while it retries the publish; the inbox takes messages again afterwards.
    c.nodes[1].kill();
    limit_messages(&c, &inbox, None);
    assert_eq!(
        stream_messages_raw(&c, &inbox, &subject),
        1,
        "the notice never reached the inbox"
    );
    c.restart(1);
    let log = c.wait_log(&root, T, "the second child's notice accepted", |l| {
        accepted(l, "subagent-settled", Some(&second)).len() == 1
    });
    assert!(
        accepted_ids(&log).values().all(|n| *n == 1),
        "{}",
        render_log(&log)
    );
    assert_eq!(accepted(&log, "subagent-settled", Some(&first)).len(), 1);
    assert_inbox_accepted_exactly_once(&c, &root);
    assert!(
        c.nodes[1]
            .log_text()
            .contains("outboxes of adopted sessions sent again"),
        "node-2 sent the outboxes again"
    );
}

#[test]
fn z3_a_node_refuses_r1_streams_when_three_replicas_are_configured_or_updates_them() {
    // The streams exist with one replica (made by nodes configured with the default).
    let mut c = Cluster::start_opts(
        3,
        ClusterOptions {
            nats_cluster: true,
            precreate_streams: Some(1),
            ..ClusterOptions::default()
        },
    );
    let events = c.events_stream();
    let inbox = inbox_stream(&c);
    for name in [&events, &inbox] {
        assert_eq!(stream_replicas(&c, name).0, 1, "{name}");
    }
    // A node configured for 3 replicas, without update_streams: refuses to start, one line.
    let refusing = c.add_client_node("node-4", &[("LINEAGE_NATS__STREAM_REPLICAS", "3")]);
    let code = c.nodes[refusing].wait_exit(T);
    assert!(
        matches!(code, Some(c) if c != 0),
        "the node must exit with an error, got {code:?}\n{}",
        c.nodes[refusing].log_text()
    );
    let log = c.nodes[refusing].log_text();
    let line = log
        .lines()
        .find(|l| l.contains("nats.update_streams = true"))
        .unwrap_or_else(|| panic!("no refusal naming the fix:\n{log}"));
    assert!(
        line.contains("has 1 replica but nats.stream_replicas = 3")
            && (line.contains(&format!("`nats stream edit {inbox} --replicas 3`"))
                || line.contains(&format!("`nats stream edit {events} --replicas 3`"))),
        "{line}"
    );
    for name in [&events, &inbox] {
        assert_eq!(stream_replicas(&c, name).0, 1, "{name} left as it was");
    }
    // With update_streams: the node updates both streams to 3 replicas and serves.
    let updating = c.add_client_node(
        "node-5",
        &[
            ("LINEAGE_NATS__STREAM_REPLICAS", "3"),
            ("LINEAGE_NATS__UPDATE_STREAMS", "true"),
        ],
    );
    c.wait_ready(T);
    for name in [&events, &inbox] {
        wait_for(T, format!("{name} with 3 current replicas"), || {
            let (replicas, peers, leader) = stream_replicas(&c, name);
            (replicas == 3
                && leader.is_some()
                && peers.len() == 2
                && peers.iter().all(|(_, ok)| *ok))
            .then_some(())
        });
    }
    assert!(
        c.nodes[updating]
            .log_text()
            .contains("updated the stream's replicas"),
        "the update is logged"
    );
    // And the cluster works on the updated streams: a child on the new node reports to its parent.
    let root = c.spawn_root(
        "node-1",
        &json!({"turns": [[{"do": "reply", "text": "root"}]], "after": {"do": "reply", "text": "ok"}}),
    );
    let reply = c.spawn(&[
        "--parent",
        &root,
        "--shape",
        "continuable",
        "--node",
        "node-5",
        "--prompt",
        "go",
        "--script",
        r#"{"turns":[[{"do":"report","content":"on r3"},{"do":"reply","text":"done"}]]}"#,
    ]);
    let kid = id_of(&reply["session"]);
    c.wait_log(&root, T, "the report and the settlement", |l| {
        accepted(l, "subagent-report", Some(&kid)).len() == 1
            && accepted(l, "subagent-settled", Some(&kid)).len() == 1
    });
}
