//! README.md: the two commands, the five-minute tour and the A2A example. The watch sees the child's
//! interrupted turn end.

use super::Expect::{self, DevCluster, Exits, Sets, Skip, Until};

pub fn expectations() -> Vec<(&'static str, Expect)> {
    vec![
        // "Two commands".
        (
            r#"scripts/dev.sh"#,
            DevCluster("cluster dev up: NATS nats://127.0.0.1:"),
        ),
        (
            r#"scripts/test.sh"#,
            Skip("runs every test, this one included (it would recurse); CI runs it"),
        ),
        // "A five-minute tour".
        (
            r#"lineage status                                   # leader, voters, nodes and leases, sessions by state"#,
            Exits(0, "leader*term*applied"),
        ),
        (
            r#"ROOT=$(lineage --json spawn --node node-1 --prompt go \
  --script '{"turns":[[{"do":"spawn","shape":"continuable","node":"node-2","prompt":"work","agent":{"driver":"script","script":{"turns":[[{"do":"reply","content":"ready"}],[{"do":"sleep","ms":60000},{"do":"reply","content":"slept"}]]}}}]],"after":{"do":"echo"}}' \
  | jq -r .session)"#,
            Sets {
                var: "ROOT",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"lineage tree $ROOT                               # session, shape, state, depth, node@epoch, owner, label, age"#,
            Exits(0, "continuable*depth=1*node=node-2@1"),
        ),
        (
            r#"lineage show <child>                             # one session: in a turn or idle, turns, last reply and reports"#,
            Exits(0, "reply*ready"),
        ),
        (
            r#"lineage logs $ROOT                               # its transcript from the event log; -f follows it until it is disposed"#,
            Exits(0, "spawned*(continuable) on node-2"),
        ),
        (
            r#"lineage watch $ROOT                              # its children: starts, reports, settlements so far, then live"#,
            Until {
                ready: "watching lineage.dev.parent.",
                after: 3,
                line: "subagent/end*interrupted",
                code: 0,
            },
        ),
        (
            r#"lineage send <child> 'next step'                 # followup; cold-resumes a cold child"#,
            Exits(0, "delivered the message"),
        ),
        (
            r#"lineage interrupt <child> --as-user $ROOT        # cancels its turn (this child's second one sleeps a minute); or --as-ancestor <session>"#,
            Exits(0, "cancelled the running turn of * on node-2"),
        ),
        (
            r#"lineage drain $ROOT                              # admission closed, leaves first, across nodes;"#,
            Exits(0, "drained 2 sessions"),
        ),
        // "A2A": the gateway in front of `lineage dev` (its `echo` profile is marked), and the
        // official Python SDK's client against it (issue 38).
        (
            r#"export LINEAGE_A2A_TOKEN=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"#,
            Sets {
                var: "LINEAGE_A2A_TOKEN",
                value: "*",
            },
        ),
        (
            r#"lineage a2a                                      # serves each a2a profile at http://127.0.0.1:8484/agents/<name>"#,
            Until {
                ready: "lineage a2a: echo at http://127.0.0.1:8484/agents/<name> (bearer token required)",
                after: 1,
                line: "lineage a2a: echo",
                code: 0,
            },
        ),
        (
            r#"python3 examples/a2a_hello.py http://127.0.0.1:8484/agents/echo 'hello over A2A'"#,
            Exits(0, "reply: hello over A2A"),
        ),
    ]
}
