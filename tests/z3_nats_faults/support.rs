//! The NATS fault tests' helpers: what the streams hold, spawning a reporting child, the
//! exactly-once checks on a parent's inbox.

use super::*;

/// The messages of `stream` on `subject`, in order: (dedup id `<sender>-<seq>`, JSON payload).
pub(crate) fn stream_messages(c: &Cluster, stream: &str, subject: &str) -> Vec<(String, Value)> {
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

pub(crate) fn inbox_stream(c: &Cluster) -> String {
    format!("LINEAGE_{}_INBOX", c.cluster.to_ascii_uppercase())
}

/// The dedup ids `parent` accepted into its log, with how often each was accepted.
pub(crate) fn accepted_ids(log: &[Event]) -> BTreeMap<String, usize> {
    let mut ids = BTreeMap::new();
    for e in of_kind(log, "inbox/accepted") {
        if let Some(id) = e.data["dedup_id"].as_str() {
            *ids.entry(id.to_owned()).or_default() += 1;
        }
    }
    ids
}

/// `nats stream info NAME` via the test's connection: (configured replicas, peers current).
pub(crate) fn stream_replicas(
    c: &Cluster,
    name: &str,
) -> (usize, Vec<(String, bool)>, Option<String>) {
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
pub(crate) async fn spawn_child(
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
pub(crate) fn child_body(parent: &str, node: &str, tag: &str) -> Value {
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
pub(crate) fn assert_inbox_accepted_exactly_once(c: &Cluster, parent: &str) -> BTreeSet<String> {
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
pub(crate) fn lines_naming(c: &Cluster, id: &str) -> String {
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
pub(crate) fn outbox_ids(log: &[Event], child: &str) -> Vec<String> {
    log.iter()
        .filter(|e| e.kind == "outbox/report" || e.kind == "outbox/settled")
        .filter_map(|e| e.data["seq"].as_u64())
        .map(|seq| format!("{child}-{seq}"))
        .collect()
}

pub(crate) fn wait_all_live(c: &Cluster) {
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
