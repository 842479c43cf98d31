//! Shared fixture: a real nats-server, a real one-voter registry, hosts on named nodes.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lineage_bus::Subjects;
use lineage_core::ids::{NodeId, SessionId};
use lineage_core::log::SessionEvent;
use lineage_drivers::driver::AgentSpec;
use lineage_drivers::script::Script;
use lineage_host::control::SpawnRequest;
use lineage_host::{Host, HostConfig, HostDeps, RegistryPort, ScriptDrivers, SystemClock};
use lineage_registry::{RegistryClient, RegistryNode, RegistryNodeConfig};
#[allow(unused_imports)]
pub use lineage_testkit::wait_for_async;
use lineage_testkit::NatsServer;
use tokio_util::sync::CancellationToken;

mod observed;
#[allow(unused_imports)]
pub use observed::ObservedRegistry;

pub const CLUSTER: &str = "t";

pub struct Cluster {
    pub nats: NatsServer,
    pub registry_node: Option<RegistryNode>,
    pub registry: RegistryClient,
    pub client: async_nats::Client,
    _dir: tempfile::TempDir,
}

pub fn node(name: &str) -> NodeId {
    NodeId::parse(name).unwrap()
}

/// A host's configuration in these tests: a 3 s lease renewed every 500 ms.
pub fn host_config(name: &str) -> HostConfig {
    let mut cfg = HostConfig::new(node(name), Subjects::new(CLUSTER).unwrap());
    cfg.lease = Duration::from_secs(3);
    cfg.heartbeat_every = Duration::from_millis(500);
    cfg.request_timeout = Duration::from_secs(10);
    cfg.one_shot_timeout = Duration::from_secs(30);
    cfg
}

impl Cluster {
    pub async fn start() -> Cluster {
        let nats = NatsServer::start().expect("nats-server");
        let client = async_nats::connect(nats.url()).await.expect("connect");
        let dir = tempfile::tempdir().unwrap();
        let cfg = RegistryNodeConfig::new(CLUSTER, 1, node("reg-1"), dir.path().join("r1")).fast();
        let reg = RegistryNode::start(cfg, client.clone())
            .await
            .expect("registry");
        reg.initialize(BTreeMap::from([(1, node("reg-1"))]))
            .await
            .expect("initialize");
        let registry = reg.client();
        Cluster {
            nats,
            registry_node: Some(reg),
            registry,
            client,
            _dir: dir,
        }
    }

    pub async fn host(&self, name: &str) -> Host {
        let nats = async_nats::connect(self.nats.url()).await.expect("connect");
        let cfg = host_config(name);
        let host = Host::start(
            cfg,
            HostDeps::nats(
                nats,
                Arc::new(self.registry.clone()) as Arc<dyn RegistryPort>,
                Arc::new(SystemClock),
                Arc::new(ScriptDrivers),
            ),
            CancellationToken::new(),
        )
        .await
        .expect("host");
        lineage_host::service::serve(host.clone())
            .await
            .expect("service");
        host
    }

    pub async fn log(&self, session: &SessionId) -> Vec<SessionEvent> {
        let store = lineage_bus::events::EventLogStore::open(
            self.client.clone(),
            Subjects::new(CLUSTER).unwrap(),
        )
        .await
        .unwrap();
        store.read(session).await.unwrap().0
    }

    pub async fn record(&self, session: &SessionId) -> lineage_registry::SessionRecord {
        self.registry
            .session(session.clone(), lineage_registry::Consistency::Linearizable)
            .await
            .unwrap()
            .expect("registered")
    }
}

pub fn script(json: &str) -> AgentSpec {
    AgentSpec::Script {
        script: Script::from_json(json).unwrap(),
    }
}

pub fn root_request(agent: AgentSpec, prompt: &str) -> SpawnRequest {
    SpawnRequest {
        cwd: Some("work".into()),
        policy: Some(lineage_core::policy::ParentPolicyView {
            sandbox_override: Some(lineage_core::policy::SandboxMode::WorkspaceWrite),
            has_approval_service: true,
        }),
        ..SpawnRequest::new(agent, prompt)
    }
}

/// A top-level session on `host` running `json` (a script), first prompt `go`.
#[allow(dead_code)]
pub async fn scripted_root(host: &Host, json: &str) -> SessionId {
    host.spawn(root_request(script(json), "go"))
        .await
        .expect("a scripted root")
        .session
}

/// An echoing top-level session on `host` and one continuable child of it running
/// `child_script` (JSON). Returns (root, child).
#[allow(dead_code)]
pub async fn root_and_continuable_child(
    host: &Host,
    child_script: &str,
    prompt: &str,
) -> (SessionId, SessionId) {
    let root = host
        .spawn(root_request(
            script(r#"{"turns": [], "after": {"do": "echo"}}"#),
            "hi",
        ))
        .await
        .expect("root");
    let child = host
        .spawn(child_request(
            &root.session,
            lineage_core::descriptor::SubagentShape::Continuable,
            script(child_script),
            prompt,
        ))
        .await
        .expect("child");
    (root.session, child.session)
}

pub fn child_request(
    parent: &SessionId,
    shape: lineage_core::descriptor::SubagentShape,
    agent: AgentSpec,
    prompt: &str,
) -> SpawnRequest {
    SpawnRequest {
        parent: Some(parent.clone()),
        shape: Some(shape),
        label: Some("worker".into()),
        ..SpawnRequest::new(agent, prompt)
    }
}

pub fn kinds(log: &[SessionEvent]) -> Vec<String> {
    log.iter().map(|e| e.kind.clone()).collect()
}

pub fn count_kind(log: &[SessionEvent], kind: &str) -> usize {
    log.iter().filter(|e| e.kind == kind).count()
}

/// The same fixture without a nats-server or Raft: hosts on the in-memory bus twins
/// (`lineage_bus::memory`) and the registry's own state machine (`MemoryRegistry`). Hosts of
/// one `MemCluster` share the bus (its control transport included: a host that serves,
/// `lineage_host::service::serve`, is reachable from the others) and the registry.
pub struct MemCluster {
    pub bus: lineage_bus::memory::MemoryBus,
    pub registry: lineage_host::MemoryRegistry,
}

impl MemCluster {
    pub fn start() -> MemCluster {
        MemCluster {
            bus: lineage_bus::memory::MemoryBus::new(),
            registry: lineage_host::MemoryRegistry::new(),
        }
    }

    pub async fn host(&self, name: &str) -> Host {
        self.host_with(name, |ports| ports).await
    }

    /// [`MemCluster::host`] with its bus ports changed by `ports` (say an inbox that fails).
    pub async fn host_with(
        &self,
        name: &str,
        ports: impl FnOnce(lineage_bus::BusPorts) -> lineage_bus::BusPorts,
    ) -> Host {
        let cfg = host_config(name);
        Host::start(
            cfg,
            HostDeps::with_ports(
                ports(lineage_bus::BusPorts::memory(&self.bus)),
                Arc::new(self.registry.clone()) as Arc<dyn RegistryPort>,
                Arc::new(SystemClock),
                Arc::new(ScriptDrivers),
            ),
            CancellationToken::new(),
        )
        .await
        .expect("host")
    }

    pub async fn log(&self, session: &SessionId) -> Vec<SessionEvent> {
        use lineage_bus::EventLog;
        self.bus.events().read(session).await.unwrap().0
    }

    pub async fn record(&self, session: &SessionId) -> lineage_registry::SessionRecord {
        self.registry
            .session(session.clone())
            .await
            .unwrap()
            .expect("registered")
    }

    /// Waits (up to 10 s) until `session`'s first turn has started.
    pub async fn first_turn_started(&self, session: &SessionId) {
        wait_for_async(
            Duration::from_secs(10),
            "the child's turn under way",
            || async { count_kind(&self.log(session).await, "turn/start") == 1 },
        )
        .await;
    }
}
