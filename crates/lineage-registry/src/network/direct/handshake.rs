//! The direct link's handshake and frames, as pure functions: what each end sends, and
//! whether what it got proves that the other end holds the cluster's Raft token.
//!
//! Neither end sends the token. Each sends a fresh random nonce and proves the token with an
//! HMAC-SHA256 over the other's nonce and the link's context (version, cluster, the dialing
//! member, the dialed member), so a proof is good for one link and one connection only:
//!
//! 1. dialer -> listener: [`Hello`] (version, cluster, from, to, the dialer's nonce);
//! 2. listener -> dialer: [`Reply::Challenge`] (the listener's nonce and its proof over the
//!    dialer's nonce), or [`Reply::Refused`] (wrong cluster, wrong member, other version);
//! 3. the dialer checks the proof (a listener without the token gets nothing), then
//!    dialer -> listener: [`Answer`] (its proof over the listener's nonce);
//! 4. the listener checks it: [`Reply::Welcome`], or [`Reply::Refused`] and the connection
//!    closes.
//!
//! After the handshake every request is one frame: a byte naming the RPC ([`rpc_byte`]), then
//! the request's JSON; every answer is one frame: [`ANSWERED`] and the result's JSON, or
//! [`UNDECODABLE`] alone. A frame is a 4-byte big-endian length, then that many bytes, at most
//! [`FRAME_MAX`] ([`HANDSHAKE_FRAME_MAX`] before the handshake is done).

use std::fmt;
use std::sync::Arc;

use ring::hmac;
use serde::{Deserialize, Serialize};

use crate::error::RegistryError;
use crate::subjects::RaftRpc;

/// The direct link's protocol version; both ends must speak the same.
pub const VERSION: u32 = 1;

/// The most bytes of a handshake frame (a scanner's garbage is refused without a large read).
pub const HANDSHAKE_FRAME_MAX: usize = 4096;

/// The most bytes of one request or answer frame: well above an append's cap and a snapshot
/// chunk, far below what a garbage length could make a member allocate.
pub const FRAME_MAX: usize = 64 << 20;

/// The fewest bytes a Raft token may have.
pub const TOKEN_MIN_BYTES: usize = 16;

/// An answer frame's first byte: the result's JSON follows.
pub const ANSWERED: u8 = 0;
/// An answer frame's only byte: the request could not be decoded (the sender maps it to a
/// network error, as a NATS request that got no reply).
pub const UNDECODABLE: u8 = 1;

/// The shared secret the members of one registry group prove to each other on a direct link.
#[derive(Clone)]
pub struct RaftToken(Arc<hmac::Key>);

impl RaftToken {
    /// A token from its bytes (surrounding whitespace, such as a file's last newline, is not
    /// part of it); refused when shorter than [`TOKEN_MIN_BYTES`].
    pub fn new(secret: &[u8]) -> Result<Self, RegistryError> {
        let secret = secret.trim_ascii();
        if secret.len() < TOKEN_MIN_BYTES {
            return Err(RegistryError::Config(format!(
                "the registry's Raft token has {} bytes, fewer than {TOKEN_MIN_BYTES}: use a long random one (openssl rand -hex 32)",
                secret.len()
            )));
        }
        Ok(Self(Arc::new(hmac::Key::new(hmac::HMAC_SHA256, secret))))
    }
}

impl fmt::Debug for RaftToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RaftToken(<redacted>)")
    }
}

/// A nonce: 32 random bytes, fresh for every connection.
pub type Nonce = [u8; 32];

/// A fresh nonce from the system's random source.
pub fn nonce() -> Result<Nonce, RegistryError> {
    let mut n = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut n)
        .map_err(|_| RegistryError::Unexpected("the system's random source failed".into()))?;
    Ok(n)
}

/// The dialer's first frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// [`VERSION`] of the dialer.
    pub version: u32,
    /// The dialer's cluster.
    pub cluster: String,
    /// The dialer's Raft id.
    pub from: u64,
    /// The Raft id the dialer means to reach.
    pub to: u64,
    /// The dialer's nonce.
    pub nonce: Nonce,
}

/// What the listener answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// Its nonce, and its proof over the dialer's.
    Challenge {
        /// The listener's nonce.
        nonce: Nonce,
        /// HMAC over the dialer's nonce and the context, as the listener.
        proof: Vec<u8>,
    },
    /// The dialer proved the token: RPCs follow.
    Welcome,
    /// Refused, in one line; the connection closes.
    Refused {
        /// What was wrong and what to do.
        why: String,
    },
}

/// The dialer's proof over the listener's nonce.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    /// HMAC over the listener's nonce and the context, as the dialer.
    pub proof: Vec<u8>,
}

/// Which end makes a proof (each signs under its own label, so one's proof is never the
/// other's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The member that dialed.
    Dialer,
    /// The member that listens.
    Listener,
}

fn signed(end: End, nonce: &Nonce, hello: &Hello) -> Vec<u8> {
    let label: &[u8] = match end {
        End::Dialer => b"lineage raft link: dialer",
        End::Listener => b"lineage raft link: listener",
    };
    let mut m = Vec::with_capacity(label.len() + 32 + hello.cluster.len() + 24);
    m.extend_from_slice(label);
    m.extend_from_slice(&hello.version.to_be_bytes());
    m.extend_from_slice(&(hello.cluster.len() as u64).to_be_bytes());
    m.extend_from_slice(hello.cluster.as_bytes());
    m.extend_from_slice(&hello.from.to_be_bytes());
    m.extend_from_slice(&hello.to.to_be_bytes());
    m.extend_from_slice(nonce);
    m
}

/// `end`'s proof over the other end's `nonce` on the link `hello` opened.
pub fn proof(token: &RaftToken, end: End, nonce: &Nonce, hello: &Hello) -> Vec<u8> {
    hmac::sign(&token.0, &signed(end, nonce, hello))
        .as_ref()
        .to_vec()
}

/// Whether `proof` is `end`'s proof over `nonce` on this link (compared in constant time).
pub fn proves(token: &RaftToken, end: End, nonce: &Nonce, hello: &Hello, proof: &[u8]) -> bool {
    hmac::verify(&token.0, &signed(end, nonce, hello), proof).is_ok()
}

/// Whether the listener, member `me` of `cluster`, takes this hello; the refusal otherwise,
/// in one line.
pub fn check_hello(hello: &Hello, cluster: &str, me: u64) -> Result<(), String> {
    if hello.version != VERSION {
        return Err(format!(
            "raft member {me} speaks direct-link version {VERSION}, the dialer (member {}) {}: run one lineage version on every voter",
            hello.from, hello.version
        ));
    }
    if hello.cluster != cluster {
        return Err(format!(
            "this is cluster {cluster:?}, the dialer (member {}) is in {:?}: check registry.direct.peers",
            hello.from, hello.cluster
        ));
    }
    if hello.to != me {
        return Err(format!(
            "this address is raft member {me}, the dialer (member {}) meant member {}: check registry.direct.peers",
            hello.from, hello.to
        ));
    }
    Ok(())
}

/// The refusal of a dialer whose proof is wrong.
pub fn wrong_token(me: u64, from: u64) -> String {
    format!("raft member {from} did not prove the registry's Raft token to member {me}: give every voter the same registry.direct token")
}

/// The byte that names `rpc` in a request frame.
pub fn rpc_byte(rpc: RaftRpc) -> u8 {
    match rpc {
        RaftRpc::Append => 1,
        RaftRpc::Vote => 2,
        RaftRpc::PreVote => 3,
        RaftRpc::Snapshot => 4,
        RaftRpc::TransferLeader => 5,
    }
}

/// The RPC a request frame's first byte names, if any.
pub fn rpc_of(byte: u8) -> Option<RaftRpc> {
    RaftRpc::ALL.into_iter().find(|r| rpc_byte(*r) == byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> Hello {
        Hello {
            version: VERSION,
            cluster: "prod".into(),
            from: 1,
            to: 2,
            nonce: [7; 32],
        }
    }

    fn token(s: &str) -> RaftToken {
        RaftToken::new(s.as_bytes()).unwrap()
    }

    #[test]
    fn a_proof_holds_for_its_end_nonce_and_link_only() {
        let (t, h, n) = (token("0123456789abcdef0123"), hello(), [9; 32]);
        let p = proof(&t, End::Dialer, &n, &h);
        assert!(proves(&t, End::Dialer, &n, &h, &p));
        assert!(!proves(&t, End::Listener, &n, &h, &p), "the other end's");
        assert!(!proves(&t, End::Dialer, &[8; 32], &h, &p), "another nonce");
        let other_link = Hello { to: 3, ..hello() };
        assert!(
            !proves(&t, End::Dialer, &n, &other_link, &p),
            "another link"
        );
        let other_cluster = Hello {
            cluster: "staging".into(),
            ..hello()
        };
        assert!(!proves(&t, End::Dialer, &n, &other_cluster, &p));
        assert!(
            !proves(
                &token("another token, long enough"),
                End::Dialer,
                &n,
                &h,
                &p
            ),
            "another token"
        );
        assert!(!proves(&t, End::Dialer, &n, &h, &p[..31]), "a cut proof");
    }

    #[test]
    fn a_short_token_is_refused_and_never_shown() {
        let e = RaftToken::new(b"short\n").unwrap_err().to_string();
        assert!(e.contains("5 bytes") && e.contains("openssl rand"), "{e}");
        assert!(!e.contains("short"), "{e}");
        let t = token("  0123456789abcdef0123\n");
        assert_eq!(format!("{t:?}"), "RaftToken(<redacted>)");
        // Surrounding whitespace is not part of the token.
        let (h, n) = (hello(), [1; 32]);
        assert!(proves(
            &token("0123456789abcdef0123"),
            End::Listener,
            &n,
            &h,
            &proof(&t, End::Listener, &n, &h)
        ));
    }

    #[test]
    fn a_hello_for_another_cluster_member_or_version_is_refused_in_one_line() {
        assert_eq!(check_hello(&hello(), "prod", 2), Ok(()));
        for (h, says) in [
            (Hello { to: 3, ..hello() }, "meant member 3"),
            (
                Hello {
                    cluster: "x".into(),
                    ..hello()
                },
                "is in \"x\"",
            ),
            (
                Hello {
                    version: 9,
                    ..hello()
                },
                "version 1",
            ),
        ] {
            let why = check_hello(&h, "prod", 2).unwrap_err();
            assert!(why.contains(says) && !why.contains('\n'), "{why}");
        }
    }

    #[test]
    fn every_rpc_has_its_own_byte() {
        for rpc in RaftRpc::ALL {
            assert_eq!(rpc_of(rpc_byte(rpc)), Some(rpc));
        }
        assert_eq!(rpc_of(0), None);
        assert_eq!(rpc_of(200), None);
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
