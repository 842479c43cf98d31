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

#[path = "z3_nats_faults/inbox_refusals.rs"]
mod inbox_refusals;
#[path = "z3_nats_faults/support.rs"]
mod support;
use support::*;

pub(crate) const T: Duration = Duration::from_secs(60);

/// One load operation: its index, when it started, the acknowledged child or the last error.
pub(crate) type Outcome = (usize, Instant, Result<String, String>);

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
