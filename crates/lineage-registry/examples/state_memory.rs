//! Where the registry's memory per session goes (issue 13, scale): the state machine alone, no
//! Raft, no NATS. Applies `N` registrations (trees of 1,000, depth 4, fan-out 6; children with
//! the descriptor a spawn records, placed round-robin on three known nodes; each command
//! decoded from its JSON as a member applies it) to a [`RegistryState`],
//! counting every byte allocated (a counting global allocator), then times the snapshot
//! encoding and decoding (the derived indexes rebuilt) of that state, in both layouts: version
//! 1 (one JSON object) as the baseline, version 3 (parts with checksums on every core,
//! `snapshot_codec`), and what its checksums cost (CRC-32 over every part, one core).
//!
//! Run: `cargo run --release -p lineage-registry --example state_memory -- 1000000`. With
//! `STATE_MEMORY_RESULTS_KEPT_MS=60000` the registrations' request results are forgotten after
//! the load (`forget_results`, as the retention sweeper does once they are older than
//! `retention.request_results_ms`), so the figures are those of the sessions alone.
//! `lineage bench scale` measures the same on a running cluster (RSS, Raft, disk).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::time::Instant;

use lineage_core::header::{child_session_meta, SessionHeader};
use lineage_core::ids::{NodeId, RequestId, SessionId};
use lineage_registry::{Command, RegistryState};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size(), Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Relaxed);
        // SAFETY: the caller's contract is passed on.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

static NEXT: AtomicU64 = AtomicU64::new(1);

/// A snapshot layout's encoder.
type Encode = fn(&RegistryState) -> Vec<u8>;

fn id() -> SessionId {
    let n = NEXT.fetch_add(1, Relaxed);
    lineage_registry::bench::bench_session_id(0x0190_0000, n).expect("a valid bench id")
}

fn live() -> usize {
    LIVE.load(Relaxed)
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(100_000);
    let descriptor: lineage_core::descriptor::SubagentDescriptor =
        serde_json::from_value(serde_json::json!({"provider": "script", "mode": "continuable"}))
            .expect("a descriptor");
    let nodes: Vec<NodeId> = ["node-1", "node-2", "node-3"]
        .iter()
        .map(|n| NodeId::parse(n).expect("a valid node id"))
        .collect();
    let mut state = RegistryState::new();
    // The nodes are known (they heartbeat), as in a cluster.
    for (i, node) in nodes.iter().enumerate() {
        state.apply(&Command::Heartbeat {
            request_id: RequestId::parse(&format!("0190abcd-0000-7000-9000-{i:012x}"))
                .expect("a valid request id"),
            at_ms: 1_000,
            node: node.clone(),
            lease_ms: 1_000_000_000,
            info: None,
        });
    }
    let before = live();
    let started = Instant::now();
    let mut made = 0usize;
    while made < n {
        let root = SessionHeader::top_level(id(), None, None);
        let mut level = vec![root.clone()];
        let mut tree = vec![(root, None)];
        for depth in 1..=4u64 {
            let left = 1000 - tree.len();
            let want = if depth < 4 {
                (level.len() * 6).min(left)
            } else {
                left
            };
            let next: Vec<SessionHeader> = (0..want)
                .map(|i| child_session_meta(&level[i % level.len()], id(), depth, 0, None))
                .collect::<Result<_, _>>()
                .expect("valid headers");
            tree.extend(next.iter().map(|h| (h.clone(), Some(descriptor.clone()))));
            level = next;
        }
        for (header, descriptor) in tree {
            made += 1;
            let cmd = Command::RegisterSession {
                request_id: RequestId::parse(&format!("0190abcd-0000-7000-8000-{made:012x}"))
                    .expect("a valid request id"),
                at_ms: 1_000 + made as u64,
                header,
                descriptor,
                max_depth: None,
                fan_out: Default::default(),
                budget: None,
                node: Some(nodes[made % 3].clone()),
                run: None,
                start_within_ms: None,
                hosted: true,
            };
            // As a member applies it: decoded from the Raft log entry's JSON, so the command's
            // ids are its own copies, not shared with the parent's record.
            let cmd: Command =
                serde_json::from_slice(&serde_json::to_vec(&cmd).expect("encode")).expect("decode");
            state.apply(&cmd);
        }
    }
    let apply = started.elapsed();
    if let Some(kept_ms) = std::env::var("STATE_MEMORY_RESULTS_KEPT_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        // Q5: the registration results a minute's window (or `kept_ms`) no longer keeps, as
        // the retention sweeper forgets them in a cluster once the load is that old.
        let at_ms = 1_000 + made as u64 + kept_ms + 1;
        let mut forgotten = 0u64;
        for batch in 0u64.. {
            let cmd = Command::ForgetResults {
                request_id: RequestId::parse(&format!("0190abcd-0000-7000-a000-{batch:012x}"))
                    .expect("a valid request id"),
                at_ms,
                kept_ms,
            };
            match state.apply(&cmd) {
                lineage_registry::CommandResponse::ResultsForgotten { count, more } => {
                    forgotten += count;
                    if !more {
                        break;
                    }
                }
                other => panic!("forget_results: {other:?}"),
            }
        }
        println!("forgot {forgotten} request results older than {kept_ms} ms (retention.request_results_ms)");
    }
    let bytes = live() - before;
    println!(
        "{} sessions applied in {apply:.2?} ({:.1} us each); {} B allocated per session (state machine alone: records, indexes, idempotency table)",
        state.session_count(),
        apply.as_secs_f64() * 1e6 / made as f64,
        bytes / made
    );
    println!(
        "inline sizes: SessionRecord {} B, SessionHeader {} B, RequestOutcome {} B",
        std::mem::size_of::<lineage_registry::SessionRecord>(),
        std::mem::size_of::<SessionHeader>(),
        std::mem::size_of::<lineage_registry::state::RequestOutcome>()
    );
    println!(
        "inline sizes of the record's parts: usage {} B, budget {} B, purged usage {} B, fan-out {} B, placement {} B, response {} B",
        std::mem::size_of::<Option<lineage_core::usage::SessionUsage>>(),
        std::mem::size_of::<Option<lineage_core::budget::Budget>>(),
        std::mem::size_of::<Option<lineage_core::usage::UsageTotal>>(),
        std::mem::size_of::<lineage_core::fanout::FanOut>(),
        std::mem::size_of::<Option<lineage_registry::Placement>>(),
        std::mem::size_of::<lineage_registry::CommandResponse>(),
    );
    let t = Instant::now();
    let copy = state.clone();
    println!("clone of the state: {:.2?}", t.elapsed());
    drop(copy);
    let layouts: [(&str, Encode); 2] = [
        ("version 1 (one JSON object, one core)", |s| {
            serde_json::to_vec(s).expect("the state encodes")
        }),
        (
            "version 3 (LZ4 parts with a CRC-32 each; encoded on every core but one, decoded on every core)",
            |s| s.encode_snapshot().expect("the state encodes"),
        ),
    ];
    for (layout, encode) in layouts {
        let t = Instant::now();
        let encoded = encode(&state);
        println!(
            "snapshot encode, {layout}: {:.1} MB in {:.2?} ({} B per session)",
            encoded.len() as f64 / 1e6,
            t.elapsed(),
            encoded.len() / made
        );
        if encoded.first() != Some(&b'{') {
            let t = Instant::now();
            let checksum = crc32fast::hash(&encoded);
            println!(
                "  of which checksums: CRC-32 of {:.1} MB on one core in {:.2?} ({checksum:08x})",
                encoded.len() as f64 / 1e6,
                t.elapsed()
            );
        }
        if let Ok(path) = std::env::var("STATE_MEMORY_DUMP") {
            std::fs::write(path, &encoded).expect("dump");
        }
        let t = Instant::now();
        let before_decode = live();
        let decoded = RegistryState::decode_snapshot(&encoded).expect("the state decodes");
        let decoded_bytes = live() - before_decode;
        println!(
            "snapshot decode, {layout}, indexes rebuilt: {:.2?}; digest equal: {}; {} B allocated per session by the decoded state",
            t.elapsed(),
            decoded.digest() == state.digest(),
            decoded_bytes / made
        );
    }
}
