//! A full snapshot over NATS, in chunks (openraft 0.10 hands the network the whole snapshot and
//! leaves its transport to it).
//!
//! Each chunk is one request on `snapshot-v2`, framed: the magic `LNSNAP2\n`, the length of the
//! head's JSON (u32, little endian), the head ([`ChunkHead`]: the leader's vote, the snapshot's
//! meta, the chunk's offset, whether it is the last), then the chunk's bytes raw (as JSON they
//! were an array of numbers, up to 4 characters a byte). The receiver ([`Assembly`]) keeps one
//! snapshot being received: a chunk at offset 0 starts one, a chunk must follow the bytes
//! received so far for the same vote and snapshot, and the last one installs it
//! (`Raft::install_full_snapshot`, which checks the vote) before it answers, so the last chunk
//! has [`INSTALL_WITHIN`] to be answered. A chunk out of order is refused; the leader's next
//! try starts again at offset 0.

use std::io::Cursor;
use std::time::Duration;

use openraft::error::{Fatal, ReplicationClosed, StreamingError};
use openraft::network::RPCOption;
use openraft::raft::SnapshotResponse;
use serde::{Deserialize, Serialize};

use super::{CallError, NatsNetwork, WireError};
use crate::raft_types::{RegistryRaft, Snapshot, SnapshotMeta, TypeConfig, Vote};
use crate::subjects::RaftRpc;

const MAGIC: &[u8; 8] = b"LNSNAP2\n";

/// How long the last chunk may take: the receiver answers it once the snapshot is installed,
/// which decodes and swaps the whole state (15 s for a million sessions, measured in
/// `lineage bench scale`). Other chunks get openraft's `install_snapshot_timeout`; a last chunk
/// under that deadline timed out while the install went on, and the leader sent the whole
/// snapshot again.
pub const INSTALL_WITHIN: Duration = Duration::from_secs(120);

/// The snapshot chunk size that fits in one NATS message of `max_payload` bytes with room for
/// the head's JSON (vote, snapshot meta, offset: far below 16 KiB).
pub fn chunk_size_for(max_payload: usize) -> usize {
    max_payload.saturating_sub(16 * 1024).max(1024)
}

/// What a chunk says besides its bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ChunkHead {
    /// The sending leader's vote.
    pub vote: Vote,
    /// The snapshot this chunk belongs to.
    pub meta: SnapshotMeta,
    /// Where its bytes start in the snapshot.
    pub offset: u64,
    /// Whether it is the last chunk.
    pub done: bool,
}

/// The receiver's answer to a chunk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) enum ChunkReply {
    /// Taken; the snapshot has this many bytes so far.
    Received(u64),
    /// The last chunk: the snapshot was installed (or refused by the vote check).
    Installed(SnapshotResponse<TypeConfig>),
}

/// One chunk as one message.
pub(crate) fn encode(head: &ChunkHead, data: &[u8]) -> Result<Vec<u8>, String> {
    let head = serde_json::to_vec(head).map_err(|e| e.to_string())?;
    let len = u32::try_from(head.len()).map_err(|_| "snapshot chunk head too large")?;
    let mut body = Vec::with_capacity(12 + head.len() + data.len());
    body.extend_from_slice(MAGIC);
    body.extend_from_slice(&len.to_le_bytes());
    body.extend_from_slice(&head);
    body.extend_from_slice(data);
    Ok(body)
}

/// A chunk's head and bytes.
pub(crate) fn decode(payload: &[u8]) -> Result<(ChunkHead, &[u8]), String> {
    let framed = payload
        .strip_prefix(MAGIC.as_slice())
        .ok_or("not a snapshot chunk (no LNSNAP2 magic)")?;
    let (len, rest) = framed
        .split_first_chunk::<4>()
        .ok_or("snapshot chunk cut short (no length)")?;
    let len = u32::from_le_bytes(*len) as usize;
    if rest.len() < len {
        return Err("snapshot chunk cut short (head)".into());
    }
    let (head, data) = rest.split_at(len);
    let head: ChunkHead = serde_json::from_slice(head).map_err(|e| e.to_string())?;
    Ok((head, data))
}

/// Sends `snapshot` chunk by chunk; stops when `cancel` fires (openraft closed the replication).
pub(super) async fn send(
    net: &NatsNetwork,
    vote: Vote,
    snapshot: Snapshot,
    cancel: impl std::future::Future<Output = ReplicationClosed> + Send + 'static,
    option: RPCOption,
) -> Result<SnapshotResponse<TypeConfig>, StreamingError<TypeConfig>> {
    let data = snapshot.snapshot.into_inner();
    let chunk = net.chunk_bytes.max(1);
    let deadline: Duration = option.hard_ttl();
    tokio::pin!(cancel);
    let mut offset = 0usize;
    loop {
        let end = (offset + chunk).min(data.len());
        let head = ChunkHead {
            vote,
            meta: snapshot.meta.clone(),
            offset: offset as u64,
            done: end == data.len(),
        };
        let body = encode(&head, &data[offset..end])
            .map_err(|e| StreamingError::from(CallError::Network(WireError(e))))?;
        let within = if head.done {
            deadline.max(INSTALL_WITHIN)
        } else {
            deadline
        };
        let reply = tokio::select! {
            biased;
            closed = &mut cancel => return Err(StreamingError::Closed(closed)),
            reply = net.call_body::<ChunkReply, String>(RaftRpc::Snapshot, body, within) => reply?,
        };
        match (reply, head.done) {
            (ChunkReply::Installed(resp), true) => return Ok(resp),
            (ChunkReply::Received(_), false) => offset = end,
            (other, _) => {
                return Err(StreamingError::from(CallError::Network(WireError(
                    format!(
                        "raft member {} answered {other:?} to the chunk at {offset} (last: {})",
                        net.target, head.done
                    ),
                ))))
            }
        }
    }
}

/// The snapshot being received, if any.
#[derive(Default)]
pub(crate) struct Assembly {
    receiving: Option<(ChunkHead, Vec<u8>)>,
}

/// What the receiver does with a chunk (pure: [`Assembly::take`] decides, the caller installs).
#[derive(Debug)]
pub(crate) enum Taken {
    /// More chunks to come; this many bytes so far.
    More(u64),
    /// The whole snapshot: install it.
    Whole(Vote, Snapshot),
}

impl std::fmt::Debug for Assembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let bytes = self.receiving.as_ref().map(|(_, b)| b.len());
        f.debug_struct("Assembly").field("bytes", &bytes).finish()
    }
}

impl Assembly {
    /// Takes one chunk: starts, continues or completes the snapshot; refuses a chunk that does
    /// not follow what was received (the sender starts again).
    pub(crate) fn take(&mut self, head: ChunkHead, data: &[u8]) -> Result<Taken, String> {
        if head.offset == 0 {
            self.receiving = Some((head.clone(), Vec::new()));
        }
        let Some((started, bytes)) = self.receiving.as_mut() else {
            return Err(format!(
                "snapshot chunk at offset {} but no snapshot is being received: send again from 0",
                head.offset
            ));
        };
        if started.vote != head.vote
            || started.meta != head.meta
            || bytes.len() as u64 != head.offset
        {
            let had = bytes.len();
            self.receiving = None;
            return Err(format!(
                "snapshot chunk at offset {} does not follow the {had} bytes received: send again from 0",
                head.offset
            ));
        }
        bytes.extend_from_slice(data);
        if !head.done {
            return Ok(Taken::More(bytes.len() as u64));
        }
        let (_, bytes) = self.receiving.take().expect("checked above");
        Ok(Taken::Whole(
            head.vote,
            Snapshot {
                meta: head.meta,
                snapshot: Cursor::new(bytes),
            },
        ))
    }
}

/// Serves one chunk: the reply's JSON (`Result<ChunkReply, String>`).
pub(super) async fn serve_chunk(
    payload: &[u8],
    assembly: &tokio::sync::Mutex<Assembly>,
    raft: &RegistryRaft,
) -> Vec<u8> {
    let taken = match decode(payload) {
        Ok((head, data)) => assembly.lock().await.take(head, data),
        Err(e) => Err(e),
    };
    let reply: Result<ChunkReply, String> = match taken {
        Ok(Taken::More(n)) => Ok(ChunkReply::Received(n)),
        Ok(Taken::Whole(vote, snapshot)) => raft
            .install_full_snapshot(vote, snapshot)
            .await
            .map(ChunkReply::Installed)
            .map_err(|e: Fatal<TypeConfig>| e.to_string()),
        Err(e) => Err(e),
    };
    serde_json::to_vec(&reply).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(offset: u64, done: bool) -> ChunkHead {
        ChunkHead {
            vote: Vote::new_committed(3, 1),
            meta: SnapshotMeta::default(),
            offset,
            done,
        }
    }

    #[test]
    fn a_chunk_carries_its_bytes_raw_and_decodes_back() {
        let data: Vec<u8> = (0..=255u8).cycle().take(10_000).collect();
        let body = encode(&head(4096, false), &data).unwrap();
        assert!(body.len() < data.len() + 1024, "raw bytes: {}", body.len());
        let (h, d) = decode(&body).unwrap();
        assert_eq!((h, d), (head(4096, false), data.as_slice()));
    }

    #[test]
    fn a_cut_or_foreign_chunk_is_refused() {
        let body = encode(&head(0, true), &[9; 100]).unwrap();
        assert!(decode(&body[..10]).unwrap_err().contains("cut short"));
        assert!(decode(&body[..20]).unwrap_err().contains("cut short"));
        assert!(decode(b"{\"vote\":1}").unwrap_err().contains("magic"));
    }

    #[test]
    fn chunks_in_order_make_the_snapshot() {
        let mut a = Assembly::default();
        assert!(matches!(a.take(head(0, false), b"abc"), Ok(Taken::More(3))));
        assert!(matches!(a.take(head(3, false), b"de"), Ok(Taken::More(5))));
        let Taken::Whole(vote, snap) = a.take(head(5, true), b"f").unwrap() else {
            panic!("whole")
        };
        assert_eq!(vote, Vote::new_committed(3, 1));
        assert_eq!(snap.snapshot.into_inner(), b"abcdef".to_vec());
        assert!(a.receiving.is_none());
    }

    #[test]
    fn a_chunk_out_of_order_is_refused_and_the_next_try_starts_again() {
        let mut a = Assembly::default();
        a.take(head(0, false), b"abc").unwrap();
        assert!(a
            .take(head(7, false), b"x")
            .unwrap_err()
            .contains("send again from 0"));
        assert!(a
            .take(head(3, true), b"x")
            .unwrap_err()
            .contains("no snapshot"));
        assert!(matches!(
            a.take(head(0, true), b"xyz"),
            Ok(Taken::Whole(..))
        ));
        let mut other = head(3, true);
        other.vote = Vote::new_committed(4, 2);
        a.take(head(0, false), b"abc").unwrap();
        assert!(a.take(other, b"x").is_err());
    }

    #[test]
    fn chunks_fill_the_message_but_stay_under_max_payload() {
        assert_eq!(chunk_size_for(1024 * 1024), 1024 * 1024 - 16 * 1024);
        assert_eq!(chunk_size_for(0), 1024);
    }
}
