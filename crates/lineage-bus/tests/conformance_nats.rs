//! The bus conformance suite against the NATS ports on a real nats-server (JetStream): each
//! handle is a new connection, as another process would have.

use std::sync::Arc;
use std::time::Duration;

use lineage_bus::conformance::Backend;
use lineage_bus::events::EventLogStore;
use lineage_bus::inbox::ParentInbox;
use lineage_bus::lifecycle::NatsLifecycle;
use lineage_bus::output::NatsTurnOutputs;
use lineage_bus::ports::BoxFuture;
use lineage_bus::transport::NatsControl;
use lineage_bus::{ControlTransport, EventLog, Inbox, Lifecycle, Subjects, TurnOutputs};
use lineage_testkit::NatsServer;

struct Nats {
    server: NatsServer,
    subjects: Subjects,
}

/// Short enough to keep the redelivery cases quick, long enough for a loaded machine.
const ACK_WAIT: Duration = Duration::from_millis(1500);

impl Nats {
    fn start() -> Nats {
        Nats {
            server: NatsServer::start().expect("nats-server"),
            subjects: Subjects::new("conf").unwrap(),
        }
    }

    async fn connect(&self) -> async_nats::Client {
        async_nats::connect(self.server.url())
            .await
            .expect("connect")
    }
}

impl Backend for Nats {
    fn events(&self) -> BoxFuture<'_, Arc<dyn EventLog>> {
        Box::pin(async {
            let store = EventLogStore::open(self.connect().await, self.subjects.clone())
                .await
                .expect("open the events stream");
            Arc::new(store) as Arc<dyn EventLog>
        })
    }
    fn inbox(&self) -> BoxFuture<'_, Arc<dyn Inbox>> {
        Box::pin(async {
            let inbox = ParentInbox::open(self.connect().await, self.subjects.clone())
                .await
                .expect("open the inbox stream")
                .with_ack_wait(ACK_WAIT);
            Arc::new(inbox) as Arc<dyn Inbox>
        })
    }
    fn lifecycle(&self) -> BoxFuture<'_, Arc<dyn Lifecycle>> {
        Box::pin(async {
            Arc::new(NatsLifecycle::new(
                self.connect().await,
                self.subjects.clone(),
            )) as Arc<dyn Lifecycle>
        })
    }
    fn control(&self) -> BoxFuture<'_, Arc<dyn ControlTransport>> {
        Box::pin(async {
            Arc::new(NatsControl::new(
                self.connect().await,
                self.subjects.clone(),
            )) as Arc<dyn ControlTransport>
        })
    }
    fn output(&self) -> BoxFuture<'_, Arc<dyn TurnOutputs>> {
        Box::pin(async {
            Arc::new(NatsTurnOutputs::new(
                self.connect().await,
                self.subjects.clone(),
            )) as Arc<dyn TurnOutputs>
        })
    }
    fn workspaces(&self) -> BoxFuture<'_, Arc<dyn lineage_bus::WorkspaceStore>> {
        Box::pin(async {
            Arc::new(lineage_bus::workspace::NatsWorkspaces::new(
                self.connect().await,
                &self.subjects,
                lineage_bus::StreamOptions::default(),
            )) as Arc<dyn lineage_bus::WorkspaceStore>
        })
    }
    fn ack_wait(&self) -> Duration {
        ACK_WAIT
    }
}

lineage_bus::conformance_suite!(async { Nats::start() });
