//! G5: a registry group does not mix lineage builds on openraft 0.9 and 0.10. A member of this
//! build hears a Raft request as the 0.9 build sends it (its subject and its bytes, recorded in
//! `tests/fixtures/registry-0.9/wire`), does not answer it (the old member's RPC times out, so
//! it never counts this one in its quorum) and says in one line of its log what to do. Its own
//! registry keeps working.

use std::time::Duration;

use lineage_testkit::prelude::*;

const LINE: &str = "a registry member of an older lineage (openraft 0.9) is sending to this one and is not answered";

fn wire(name: &str) -> Vec<u8> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/registry-0.9/wire")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn g5_a_member_of_the_openraft_09_build_is_not_answered_and_the_log_says_what_to_do() {
    let c = Cluster::start(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let nats = rt
        .block_on(async_nats::connect(c.nats.url()))
        .expect("connect");
    for (file, rpc) in [("append-3.json", "append"), ("vote-1.json", "vote")] {
        let subject = format!("lineage.{}.raft.1.{rpc}", c.cluster);
        let asked = rt.block_on(async {
            tokio::time::timeout(
                Duration::from_secs(2),
                nats.request(subject.clone(), wire(file).into()),
            )
            .await
        });
        // Heard (the member subscribes to every Raft subject of its id), never answered.
        match asked {
            Err(_elapsed) => {}
            Ok(Err(e)) if e.kind() == async_nats::RequestErrorKind::TimedOut => {}
            Ok(other) => panic!("{subject} was answered: {other:?}\n{}", c.logs()),
        }
    }
    let logs = c.nodes[0].log_text();
    assert!(
        logs.contains(LINE),
        "no line about the old member:\n{}",
        c.logs()
    );
    assert!(
        logs.contains("stop every voter, start them all on this version"),
        "the line says what to do:\n{}",
        c.logs()
    );
    // Said once for both requests (repeated at most every 30 s), on one line.
    assert_eq!(logs.matches(LINE).count(), 1, "{}", c.logs());

    // The registry still answers.
    let (code, out, err) = c.cli(&["--json", "status"]);
    assert_eq!(code, 0, "{out}{err}");
}
