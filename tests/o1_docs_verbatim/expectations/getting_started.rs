//! docs/getting-started.md: install, the local cluster, a first spawn, reading a reply, ending
//! a root, following a tree, files, configuration, profiles, benchmarks.

use super::Expect::{self, DevCluster, Exits, Sets, Skip};

pub fn expectations() -> Vec<(&'static str, Expect)> {
    vec![
        // "Install".
        (
            r#"scripts/install-deps.sh                          # nats-server, and what the tests use"#,
            Skip("installs tools from the network; scripts/test.sh runs it before the tests"),
        ),
        (
            r#"cargo build --workspace --bins                   # target/debug/lineage, its test agent and its lab"#,
            Skip("this test runs on that build (the testkit refuses a lineage older than its sources)"),
        ),
        (
            r#"export PATH="$PWD/target/debug:$PATH""#,
            Sets {
                var: "PATH",
                value: "/target/debug:",
            },
        ),
        // "Start a local cluster".
        (
            r#"lineage dev                                      # nats-server and three nodes, a demo, then up until Ctrl-C"#,
            DevCluster("the cluster stays up; try:"),
        ),
        // "A first spawn".
        (
            r#"lineage spawn --prompt hi --wait --script '{"turns":[[{"do":"reply","content":"hello"}]]}'   # the first turn's reply; exit 1 if it did not complete"#,
            Exits(0, "hello"),
        ),
        (
            r#"lineage script check '{"turns":[[{"do":"reply","content":"hi"}]]}'   # script ok: 1 turn(s), 1 step(s)"#,
            Exits(0, "script ok: 1 turn(s), 1 step(s)"),
        ),
        // "Reading a reply": the followup's turn echoes it.
        (
            r#"S=$(lineage --json spawn --wait --prompt 'say ready' --script '{"turns":[[{"do":"reply","content":"ready"}]],"after":{"do":"echo"}}' | jq -r .spawn.session)"#,
            Sets {
                var: "S",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"lineage show $S                                  # state, shape, node@epoch, turns and how the last ended, its last reply"#,
            Exits(0, "reply*ready"),
        ),
        (
            r#"lineage send $S 'say it again'                   # a followup: the next user message, so the next turn"#,
            Exits(0, "delivered to"),
        ),
        (
            r#"lineage logs $S                                  # the transcript: each turn's message and reply, from the event log"#,
            Exits(0, "assistant: ready"),
        ),
        // "Ending a root".
        (
            r#"lineage drain $S                                 # admission closed, then disposed, leaves first"#,
            Exits(0, "drained 1 sessions"),
        ),
        (
            r#"lineage send $S 'are you there?'                 # refused: it is disposed (exit 4)"#,
            Exits(4, "is disposed; start a new session instead"),
        ),
        (
            r#"I=$(lineage --json spawn --idle-ttl 2s --prompt hi --script '{"turns":[[{"do":"reply","content":"hi"}]],"after":{"do":"echo"}}' | jq -r .session)"#,
            Sets {
                var: "I",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"lineage logs -f $I                               # its transcript, until the idle drain disposes it"#,
            Exits(0, "assistant: hi"),
        ),
        (
            r#"lineage tree $I                                  # ... disposed ... stop=idle"#,
            Exits(0, "disposed*stop=idle"),
        ),
        // "Following a tree": two starts, one report, two settlements.
        (
            r#"T=$(lineage --json spawn --node node-1 --prompt 'fan out' --script '{"turns":[[{"do":"spawn","shape":"continuable","node":"node-2","label":"left","prompt":"go left","agent":{"driver":"script","script":{"turns":[[{"do":"report","content":"left half way","delivery":"quiet"},{"do":"reply","content":"left done"}]]}}},{"do":"spawn","shape":"continuable","node":"node-3","label":"right","prompt":"go right","agent":{"driver":"script","script":{"turns":[[{"do":"reply","content":"right done"}]]}}},{"do":"await_children","timeout_ms":10000},{"do":"reply_result"}]]}' | jq -r .session)"#,
            Sets {
                var: "T",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"lineage tree $T                                  # the root and its children: shape, state, depth, node@epoch, owner, label, age"#,
            Exits(0, "continuable*depth=1*node=node-3@1*label=right"),
        ),
        (
            r#"lineage ls --root $T --label left                # search: --root --parent --state --node --label --older-than, paged"#,
            Exits(0, "continuable*depth=1*node=node-2*label=left"),
        ),
        (
            r#"lineage watch $T --count 5                       # its children's starts, reports and settlements; --count stops it"#,
            Exits(0, "subagent-report*left half way"),
        ),
        (r#"lineage drain $T"#, Exits(0, "drained 3 sessions")),
        // "Files travel with the session".
        (
            r#"rm -rf /tmp/lineage-files /tmp/lineage-copy && mkdir /tmp/lineage-files && echo hello | tee /tmp/lineage-files/a.txt"#,
            Exits(0, "hello"),
        ),
        (
            r#"W=$(lineage --json spawn --node node-1 --profile delegator --workspace /tmp/lineage-files | jq -r .session)"#,
            Sets {
                var: "W",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"C=$(lineage --json spawn --parent $W --shape one-shot --node node-2 --profile delegator --prompt 'sh: echo changed > a.txt' | jq -r .session)"#,
            Sets {
                var: "C",
                value: "*-*-*-*-*",
            },
        ),
        (
            r#"lineage workspace diff $C                        # its changes as a unified diff: -hello +changed"#,
            Exits(0, "+changed"),
        ),
        (
            r#"lineage workspace diff $C > /tmp/lineage-c.patch && (cd /tmp/lineage-files && git apply --check --stat /tmp/lineage-c.patch)  # a patch git applies"#,
            Exits(0, "1 file changed, 1 insertion"),
        ),
        (
            r#"lineage workspace apply $C --into /tmp/lineage-files   # all of them, or none and the conflicts (exit 4)"#,
            Exits(0, "applied*1 path(s) changed"),
        ),
        (
            r#"lineage workspace pull $W --into /tmp/lineage-copy     # a session's latest files into an empty directory"#,
            Exits(0, "pulled*/tmp/lineage-copy"),
        ),
        // "Configuration".
        (
            r#"lineage config show --config config/lineage.toml # effective config with each value's source"#,
            Exits(0, "nats_url*NATS_URL environment variable"),
        ),
        // "Agent profiles".
        (
            r#"lineage agents                                   # each node's profiles (names and drivers only)"#,
            Exits(0, "acp-testagent*acp"),
        ),
        (
            r#"lineage spawn --profile acp-testagent --node node-2 --prompt hello"#,
            Exits(0, "spawned * on node-2"),
        ),
        // "Benchmarks and the fault harness".
        (
            r#"cargo build --release -p lineage -p lineage-lab -p lineage-acp-testagent && target/release/lineage bench all   # see benches/README.md"#,
            Skip("a release build takes minutes; bench_smoke runs the benches on the debug build"),
        ),
        (
            r#"target/release/lineage bench scale               # the registry at 1M sessions (~4 min, ~7 GB RAM)"#,
            Skip("needs a release build, ~7 GB of RAM and ~4 minutes"),
        ),
        (
            r#"lineage chaos --seed 12 --duration 30m           # its own cluster under every fault kind, checked"#,
            Skip("runs 30 minutes; x1_lineage_chaos and g1_chaos_registry run it for 75 s and 40 s"),
        ),
    ]
}
