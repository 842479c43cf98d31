//! docs/deploy.md (every block needs docker or Kubernetes: skipped by the page),
//! docs/security.md and docs/monitoring.md.

use super::Expect::{self, Exits, Sets, Skip};

pub fn expectations() -> Vec<(&'static str, Expect)> {
    vec![
        // docs/security.md: the passwords the natscli contexts of docs/nats.md use.
        (
            r#"export LINEAGE_NATS_VOTER_PASSWORD="p$(openssl rand -hex 24)" \
       LINEAGE_NATS_NODE_4_PASSWORD="p$(openssl rand -hex 24)" \
       LINEAGE_NATS_OPERATOR_PASSWORD="p$(openssl rand -hex 24)" \
       LINEAGE_NATS_OBSERVER_PASSWORD="p$(openssl rand -hex 24)""#,
            Sets {
                var: "LINEAGE_NATS_OPERATOR_PASSWORD",
                value: "p*",
            },
        ),
        (
            r#"config/nats/run-nats-server.sh config/nats-server.conf     # then: exec nats-server -c FILE"#,
            Skip("starts a second nats-server from config/nats-server.conf on its fixed port 4222 and store; z2_permissions and o3_natscli test that file"),
        ),
        // docs/monitoring.md: node-1's endpoints.
        (
            r#"curl -s http://127.0.0.1:<http-port>/healthz                       # ok: the process is up"#,
            Exits(0, "ok"),
        ),
        (
            r#"curl -s http://127.0.0.1:<http-port>/readyz                        # ready: NATS connected and the registry reachable; else 503 and why"#,
            Exits(0, "ready"),
        ),
        (
            r#"curl -s http://127.0.0.1:<http-port>/metrics | grep '^lineage_sessions'   # the registry's sessions by state"#,
            Exits(0, "lineage_sessions{*state=\"disposed\"}"),
        ),
    ]
}
