//! docs/nats.md: natscli against `lineage dev`, `<parent>` a live parent the test spawns.

use super::Expect::{self, Exits, Until};

pub fn expectations() -> Vec<(&'static str, Expect)> {
    vec![
        // Against `lineage dev` (no authorization) any user gets in. natscli's `sub` dies of the
        // SIGINT (130).
        (
            r#"nats context save lineage-operator --server "$NATS_URL" --user operator --password "$LINEAGE_NATS_OPERATOR_PASSWORD""#,
            Exits(0, "Username: operator"),
        ),
        (
            r#"nats context save lineage-observer --server "$NATS_URL" --user observer --password "$LINEAGE_NATS_OBSERVER_PASSWORD""#,
            Exits(0, "Username: observer"),
        ),
        (
            r#"lineage --context lineage-operator status"#,
            Exits(0, "leader*term*applied"),
        ),
        (
            r#"nats --context lineage-observer sub 'lineage.dev.parent.<parent>.>'"#,
            Until {
                ready: "Subscribing on",
                after: 4,
                line: "\"event\":\"subagent/start\"",
                code: 130,
            },
        ),
        (
            r#"lineage --context lineage-operator --json watch <parent> --count 8   # the same, from lineage"#,
            Until {
                ready: "",
                after: 3,
                line: "\"kind\":\"subagent-settled\"",
                code: 0,
            },
        ),
        (
            r#"nats --context lineage-operator req lineage.dev.ctl.spawn \
  '{"parent":"<parent>","shape":"continuable","prompt":"work","agent":{"driver":"script","script":{"turns":[[{"do":"report","content":"half way","delivery":"quiet"},{"do":"reply","content":"child done"}]],"after":{"do":"echo"}}}}'"#,
            Exits(0, "{\"v\":1,\"result\":{\"session\":"),
        ),
        (
            r#"nats --context lineage-operator req lineage.dev.ctl.spawn 'not json'   # one line: {"v":1,"error":{"code":"bad_request","message":"malformed spawn request: ..."}}; on stderr the headers Nats-Service-Error-Code: 400 and Nats-Service-Error: <the message>"#,
            Exits(0, "{\"v\":1,\"error\":{\"code\":\"bad_request\",\"message\":\"malformed spawn request: "),
        ),
        (
            r#"nats --context lineage-observer req lineage.dev.ctl.status '{}'        # one node's live sessions (not the cluster's: that is `lineage status`); read-only ops are the observer's"#,
            Exits(0, "{\"v\":1,\"result\":{\"node\":\"node-*\"live\":["),
        ),
        (
            r#"nats --context lineage-observer micro ls"#,
            Exits(0, "lineage control, cluster dev, node node-3"),
        ),
        (
            r#"nats --context lineage-observer micro info lineage    # endpoints: lineage.dev.ctl.<op>, lineage.dev.node.<node>.<op>"#,
            Exits(0, "Subject: lineage.dev.ctl.spawn"),
        ),
        (
            r#"nats --context lineage-observer micro stats lineage   # requests and errors per endpoint, per instance"#,
            Exits(0, "ctl-spawn"),
        ),
        (
            r#"nats --context lineage-observer micro info lineage-registry"#,
            Exits(0, "Subject: lineage.dev.registry.read"),
        ),
        (
            r#"nats --context lineage-observer req lineage.dev.registry.read '{"consistency":"stale","query":{"query":"session_counts"}}'"#,
            Exits(0, "\"result\":\"counts\",\"value\":{\"disposed\":"),
        ),
        (
            r#"nats --context lineage-observer stream get LINEAGE_DEV_INBOX --last-for 'lineage.dev.parent.<parent>.inbox'"#,
            Exits(0, "\"kind\":\"subagent-settled\""),
        ),
        (
            r#"nats --context lineage-observer stream get LINEAGE_DEV_INBOX 1"#,
            Exits(0, "Item: LINEAGE_DEV_INBOX#1 "),
        ),
        (
            r#"nats --context lineage-observer stream get LINEAGE_DEV_EVENTS --last-for 'lineage.dev.session.<id>.events'"#,
            Exits(0, "{\"v\":1,\"events\":[{\"seq\":"),
        ),
        (
            r#"nats --context lineage-observer stream info LINEAGE_DEV_EVENTS"#,
            Exits(0, "Subjects: lineage.dev.session.*.events"),
        ),
        (
            r#"nats --context lineage-observer consumer info LINEAGE_DEV_INBOX inbox-<parent>   # "lineage inbox of session <parent> (cluster dev)""#,
            Exits(0, "lineage inbox of session * (cluster dev)"),
        ),
        (
            r#"nats --context lineage-operator sub 'lineage.dev.parent.<parent>.inbox' --stream LINEAGE_DEV_INBOX --all --count 4"#,
            Exits(0, "[#4] Received JetStream message: stream: LINEAGE_DEV_INBOX"),
        ),
        (
            r#"nats --context lineage-operator stream view LINEAGE_DEV_INBOX      # needs a terminal (it pages)"#,
            Exits(1, "interactive stream paging requires a valid terminal"),
        ),
        (
            r#"nats --context lineage-observer sub 'lineage.dev.drain.<drain>.progress'"#,
            Until {
                ready: "Subscribing on",
                after: 1,
                line: "\"phase\":\"wave_done\"",
                code: 130,
            },
        ),
        (
            r#"nats --context lineage-operator req lineage.dev.ctl.drain '{"roots":["<parent>"],"progress":"<drain>"}'"#,
            Exits(0, "\"closed_count\":3"),
        ),
    ]
}
