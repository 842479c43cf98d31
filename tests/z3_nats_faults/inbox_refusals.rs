//! Z3: a parent's inbox or log that refuses for a while (a stream at its message limit): the
//! message is taken once it can be, exactly once; and a notice a dead node never published
//! reaches the parent when the node is back.

use super::*;

pub(crate) fn limit_log_messages(c: &Cluster, limit: Option<i64>) {
    limit_messages(c, &c.events_stream(), limit)
}

/// [`limit_log_messages`] on any stream (`name`): a subject at the limit takes no message.
pub(crate) fn limit_messages(c: &Cluster, name: &str, limit: Option<i64>) {
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
pub(crate) fn log_messages(c: &Cluster, session: &str) -> usize {
    stream_messages_raw(
        c,
        &c.events_stream(),
        &format!("lineage.{}.session.{session}.events", c.cluster),
    )
}

/// How many messages `stream` holds on `subject`.
pub(crate) fn stream_messages_raw(c: &Cluster, stream: &str, subject: &str) -> usize {
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
pub(crate) fn z3_a_parent_that_cannot_log_for_a_while_accepts_its_inbox_once_it_can() {
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
pub(crate) struct RefusedNotice {
    pub(crate) root: String,
    pub(crate) first: String,
    pub(crate) second: String,
    pub(crate) inbox: String,
    pub(crate) subject: String,
}

/// The two notice tests' start: a root on node-1 whose first continuable child (on node-2)
/// settled, its notice the one message on the root's inbox subject; then that subject is
/// limited to one message ([`limit_messages`]) and a second child on node-2 settles, its
/// notice logged and refused.
pub(crate) fn refused_notice(c: &Cluster) -> RefusedNotice {
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
pub(crate) fn z3_a_settlement_notice_the_inbox_refuses_for_a_while_reaches_the_parent_once_it_can()
{
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
pub(crate) fn z3_k1_a_notice_a_dead_node_never_published_reaches_the_parent_when_the_node_is_back()
{
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
