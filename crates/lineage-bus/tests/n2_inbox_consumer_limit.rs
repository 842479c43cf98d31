//! N2 (issue 12, found by `lineage chaos`): the inbox stream holds one durable consumer per
//! parent with children, and nats-server 2.15 caps a stream that sets no limit of its own at
//! 1,000 consumers. Both streams are created with [`MAX_CONSUMERS`], and an existing stream
//! without it (made by an older node) is raised when a node opens it; a 1,001st parent opens
//! its inbox. Against a real nats-server.

use async_nats::jetstream::{self, consumer, stream};
use lineage_bus::events::EventLogStore;
use lineage_bus::inbox::ParentInbox;
use lineage_bus::streams::MAX_CONSUMERS;
use lineage_bus::Subjects;
use lineage_testkit::NatsServer;

use lineage_core::ids::sid;

async fn max_consumers(js: &jetstream::Context, name: &str) -> i32 {
    js.get_stream(name)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .config
        .max_consumers
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn n2_a_parent_past_the_thousandth_opens_its_inbox_on_a_stream_made_without_a_limit() {
    let server = NatsServer::start().unwrap();
    let client = lineage_bus::connect(&server.url(), "n2-limit-test")
        .await
        .unwrap();
    let js = jetstream::new(client.clone());
    let s = Subjects::new("n2").unwrap();
    // An inbox stream as an older node made it: no consumer limit of its own.
    js.create_stream(stream::Config {
        name: s.inbox_stream(),
        subjects: vec![s.all_inboxes()],
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(max_consumers(&js, &s.inbox_stream()).await <= 0);
    let inbox = ParentInbox::open(client.clone(), s.clone()).await.unwrap();
    assert_eq!(max_consumers(&js, &s.inbox_stream()).await, MAX_CONSUMERS);
    // A thousand parents' durable consumers (made directly: the limit is what is tested)...
    let stream = js.get_stream(s.inbox_stream()).await.unwrap();
    for n in 0..1000 {
        let parent = sid(n);
        stream
            .create_consumer(consumer::pull::Config {
                durable_name: Some(s.inbox_consumer(&parent)),
                filter_subject: s.parent_inbox(&parent),
                ..Default::default()
            })
            .await
            .unwrap_or_else(|e| panic!("consumer {n}: {e}"));
    }
    // ...and the next parent's, through lineage's own path.
    inbox
        .consumer(&sid(1000))
        .await
        .unwrap_or_else(|e| panic!("the 1,001st parent's inbox: {e}"));
    // The events stream is made with the limit too.
    EventLogStore::open(client.clone(), s.clone())
        .await
        .unwrap();
    assert_eq!(max_consumers(&js, &s.events_stream()).await, MAX_CONSUMERS);
}
