//! Raft RPCs over direct TCP links between the members (issue 35), when `registry.direct` is
//! configured: the append-entries and votes go member to member instead of through
//! nats-server, which takes two broker hops off every registry write (see benches/README.md,
//! "Issue 35: direct Raft links between the voters").
//!
//! | item | what |
//! |---|---|
//! | [`DirectRaft`] | where this member listens, where the others do, the shared token |
//! | [`Link`] | the dialing side: one connection per openraft network client, dialed lazily |
//! | [`serve_direct`] | the listening side: one task per connection, one RPC at a time |
//! | [`handshake`] | the handshake and frames, pure |
//! | [`tls`] | mutual TLS on the links (`registry.direct.tls_*`), when configured |
//!
//! A member with no address in `peers` is reached over NATS as before, so a group can switch
//! one member at a time. Failures map as on NATS: a refused connection or handshake is
//! `Unreachable` (openraft backs off), a timeout or a broken connection is a network error (the
//! connection is dropped and dialed again on the next RPC).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::{
    AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader, BufWriter, ReadHalf, WriteHalf,
};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::serve::answer;
use super::snapshot::Assembly;
use super::{CallError, WireError};
use crate::error::RegistryError;
use crate::raft_types::RegistryRaft;
use crate::subjects::RaftRpc;

pub mod handshake;
pub mod tls;

pub use tls::LinkTls;

use handshake::{
    check_hello, nonce, proof, proves, rpc_byte, rpc_of, wrong_token, Answer, End, Hello,
    RaftToken, Reply, ANSWERED, FRAME_MAX, HANDSHAKE_FRAME_MAX, UNDECODABLE, VERSION,
};

/// How long a dialer has to finish its handshake before the listener drops the connection.
const HANDSHAKE_WITHIN: Duration = Duration::from_secs(5);

/// How often the listener repeats a line about refused dialers while they keep dialing.
const REFUSED_LINE_EVERY: Duration = Duration::from_secs(30);

/// This member's direct Raft links.
#[derive(Debug, Clone)]
pub struct DirectRaft {
    /// Where this member listens for the others' links.
    pub listen: SocketAddr,
    /// Where the other members listen, by Raft id (`host:port`); a member not named here is
    /// reached over NATS.
    pub peers: BTreeMap<u64, String>,
    /// The secret every member proves to the others.
    pub token: RaftToken,
    /// Mutual TLS on every link; `None`: the links are authenticated (the token) but not
    /// encrypted.
    pub tls: Option<LinkTls>,
}

/// A connection's byte stream: TCP, or TLS over it.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// A connection's two halves, buffered.
type Halves = (
    BufReader<ReadHalf<Box<dyn Io>>>,
    BufWriter<WriteHalf<Box<dyn Io>>>,
);

fn halves(stream: Box<dyn Io>) -> Halves {
    let (read, write) = tokio::io::split(stream);
    (BufReader::new(read), BufWriter::new(write))
}

/// A connection after its handshake.
struct Conn {
    read: BufReader<ReadHalf<Box<dyn Io>>>,
    write: BufWriter<WriteHalf<Box<dyn Io>>>,
}

/// The dialing side of one link: this member to `to` at `addr`.
pub(crate) struct Link {
    hello: Hello,
    addr: String,
    token: RaftToken,
    tls: Option<LinkTls>,
    conn: tokio::sync::Mutex<Option<Conn>>,
}

impl Link {
    /// The link from member `from` of `cluster` to member `to` at `addr`, with `direct`'s
    /// token and TLS.
    pub(crate) fn new(
        cluster: &str,
        from: u64,
        to: u64,
        addr: String,
        direct: &DirectRaft,
    ) -> Self {
        Self {
            hello: Hello {
                version: VERSION,
                cluster: cluster.to_owned(),
                from,
                to,
                nonce: [0; 32],
            },
            addr,
            token: direct.token.clone(),
            tls: direct.tls.clone(),
            conn: tokio::sync::Mutex::new(None),
        }
    }

    /// Sends one RPC and returns the answer's JSON, within `deadline` (dial and handshake
    /// included when the link has no connection).
    pub(crate) async fn call(
        &self,
        rpc: RaftRpc,
        body: &[u8],
        deadline: Duration,
    ) -> Result<Vec<u8>, CallError> {
        let mut conn = self.conn.lock().await;
        let to = self.hello.to;
        let sent = tokio::time::timeout(deadline, async {
            if conn.is_none() {
                *conn = Some(self.dial().await?);
            }
            let c = conn.as_mut().expect("dialed above");
            let mut frame = Vec::with_capacity(1 + body.len());
            frame.push(rpc_byte(rpc));
            frame.extend_from_slice(body);
            write_frame(&mut c.write, &frame).await.map_err(broken)?;
            read_frame(&mut c.read, FRAME_MAX).await.map_err(broken)
        })
        .await;
        let answer = match sent {
            Ok(Ok(answer)) => answer,
            Ok(Err(e)) => {
                *conn = None;
                return Err(e);
            }
            Err(_) => {
                // Half a request may be on the wire: the connection is not reused.
                *conn = None;
                return Err(CallError::Network(WireError(format!(
                    "{} to raft member {to} over its direct link timed out after {deadline:?}",
                    rpc.token()
                ))));
            }
        };
        match answer.split_first() {
            Some((&ANSWERED, json)) => Ok(json.to_vec()),
            Some((&UNDECODABLE, _)) => Err(CallError::Network(WireError(format!(
                "raft member {to} could not decode a {} request",
                rpc.token()
            )))),
            _ => {
                *conn = None;
                Err(CallError::Network(WireError(format!(
                    "raft member {to} sent an answer frame this version does not know"
                ))))
            }
        }
    }

    /// Dials the member and runs the handshake as the dialer.
    async fn dial(&self) -> Result<Conn, CallError> {
        let (to, addr) = (self.hello.to, &self.addr);
        let unreachable = |what: String| CallError::Unreachable(WireError(what));
        let stream = TcpStream::connect(addr)
            .await
            .map_err(|e| unreachable(format!("raft member {to} at {addr}: {e}")))?;
        stream.set_nodelay(true).map_err(broken)?;
        let stream: Box<dyn Io> = match &self.tls {
            None => Box::new(stream),
            Some(tls) => {
                let name = tls::server_name(addr).map_err(unreachable)?;
                Box::new(tls.connector.connect(name, stream).await.map_err(|e| {
                    unreachable(format!(
                        "TLS with raft member {to} at {addr}: {e}; check registry.direct.tls_* on both"
                    ))
                })?)
            }
        };
        let (mut read, mut write) = halves(stream);
        let hello = Hello {
            nonce: nonce().map_err(|e| CallError::Network(WireError(e.to_string())))?,
            ..self.hello.clone()
        };
        send_json(&mut write, &hello).await.map_err(broken)?;
        let theirs = match recv_json::<Reply>(&mut read).await.map_err(broken)? {
            Reply::Challenge { nonce, proof: p }
                if proves(&self.token, End::Listener, &hello.nonce, &hello, &p) =>
            {
                nonce
            }
            Reply::Challenge { .. } => {
                return Err(unreachable(format!(
                    "raft member {to} at {addr} did not prove the registry's Raft token: give every voter the same registry.direct token"
                )))
            }
            Reply::Refused { why } => return Err(unreachable(why)),
            Reply::Welcome => {
                return Err(unreachable(format!(
                    "raft member {to} at {addr} welcomed this member without a handshake"
                )))
            }
        };
        let answer = Answer {
            proof: proof(&self.token, End::Dialer, &theirs, &hello),
        };
        send_json(&mut write, &answer).await.map_err(broken)?;
        match recv_json::<Reply>(&mut read).await.map_err(broken)? {
            Reply::Welcome => Ok(Conn { read, write }),
            Reply::Refused { why } => Err(unreachable(why)),
            Reply::Challenge { .. } => Err(unreachable(format!(
                "raft member {to} at {addr} challenged twice"
            ))),
        }
    }
}

/// Binds this member's listener (before the member is started, so a taken port fails the
/// start in one line).
pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener, RegistryError> {
    TcpListener::bind(addr).await.map_err(|e| {
        RegistryError::Config(format!(
            "cannot listen for direct Raft links on {addr}: {e}; pick a free address in registry.direct.listen"
        ))
    })
}

/// What the listening side knows about itself.
#[derive(Clone)]
pub(crate) struct Listening {
    /// The cluster name.
    pub(crate) cluster: String,
    /// This member's Raft id.
    pub(crate) me: u64,
    /// The shared token.
    pub(crate) token: RaftToken,
    /// Mutual TLS, when configured.
    pub(crate) tls: Option<LinkTls>,
}

/// Serves the direct links of the other members until `stop` fires.
pub(crate) async fn serve_direct(
    listener: TcpListener,
    listening: Listening,
    raft: RegistryRaft,
    mut stop: watch::Receiver<bool>,
) {
    let assembly = Arc::new(tokio::sync::Mutex::new(Assembly::default()));
    let refused_said = Arc::new(std::sync::Mutex::new(None::<Instant>));
    loop {
        tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a direct Raft link failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (listening, raft, assembly, said, stop) = (
                    listening.clone(), raft.clone(), assembly.clone(), refused_said.clone(), stop.clone(),
                );
                tokio::spawn(async move {
                    if let Err(why) = serve_conn(stream, &listening, &raft, &assembly, stop).await {
                        let mut said = said.lock().unwrap_or_else(|p| p.into_inner());
                        if said.is_none_or(|at| at.elapsed() >= REFUSED_LINE_EVERY) {
                            *said = Some(Instant::now());
                            tracing::warn!(%peer, "refused a direct Raft link: {why}");
                        }
                    }
                });
            }
        }
    }
}

/// One accepted connection: the handshake, then RPCs one at a time until the dialer closes or
/// `stop` fires. `Err`: the handshake refused the dialer (why, in one line).
async fn serve_conn(
    stream: TcpStream,
    listening: &Listening,
    raft: &RegistryRaft,
    assembly: &tokio::sync::Mutex<Assembly>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let _ = stream.set_nodelay(true);
    let stream: Box<dyn Io> = match &listening.tls {
        None => Box::new(stream),
        Some(tls) => {
            match tokio::time::timeout(HANDSHAKE_WITHIN, tls.acceptor.accept(stream)).await {
                Ok(Ok(tls)) => Box::new(tls),
                Ok(Err(e)) => return Err(format!("TLS: {e}; check registry.direct.tls_* on both")),
                Err(_) => return Err(format!("no TLS handshake within {HANDSHAKE_WITHIN:?}")),
            }
        }
    };
    let (mut read, mut write) = halves(stream);
    match tokio::time::timeout(HANDSHAKE_WITHIN, welcome(&mut read, &mut write, listening)).await {
        Ok(Ok(())) => {}
        Ok(Err(why)) => {
            let _ = send_json(&mut write, &Reply::Refused { why: why.clone() }).await;
            return Err(why);
        }
        Err(_) => return Err(format!("no handshake within {HANDSHAKE_WITHIN:?}")),
    }
    loop {
        let frame = tokio::select! {
            _ = stop.changed() => return Ok(()),
            frame = read_frame(&mut read, FRAME_MAX) => match frame {
                Ok(f) => f,
                Err(_) => return Ok(()), // closed by the dialer, or broken: it dials again
            },
        };
        let answered = match frame.split_first() {
            Some((&byte, body)) => match rpc_of(byte) {
                Some(rpc) => answer(rpc, body, raft, assembly).await,
                None => None,
            },
            None => None,
        };
        let out = match answered {
            Some(json) => [&[ANSWERED][..], &json].concat(),
            None => vec![UNDECODABLE],
        };
        if write_frame(&mut write, &out).await.is_err() {
            return Ok(());
        }
    }
}

/// The listener's side of the handshake; `Err`: why the dialer is refused.
async fn welcome(
    read: &mut (impl AsyncRead + Unpin),
    write: &mut (impl AsyncWrite + Unpin),
    listening: &Listening,
) -> Result<(), String> {
    let hello: Hello = recv_json(read)
        .await
        .map_err(|e| format!("no handshake: {e}"))?;
    check_hello(&hello, &listening.cluster, listening.me)?;
    let ours = nonce().map_err(|e| e.to_string())?;
    let challenge = Reply::Challenge {
        nonce: ours,
        proof: proof(&listening.token, End::Listener, &hello.nonce, &hello),
    };
    send_json(write, &challenge)
        .await
        .map_err(|e| e.to_string())?;
    let answer: Answer = recv_json(read)
        .await
        .map_err(|e| format!("no answer to the challenge: {e}"))?;
    if !proves(&listening.token, End::Dialer, &ours, &hello, &answer.proof) {
        return Err(wrong_token(listening.me, hello.from));
    }
    send_json(write, &Reply::Welcome)
        .await
        .map_err(|e| e.to_string())
}

fn broken(e: std::io::Error) -> CallError {
    CallError::Network(WireError(format!("direct Raft link: {e}")))
}

/// Writes one frame and flushes it.
async fn write_frame(
    w: &mut (impl AsyncWrite + Unpin),
    payload: &[u8],
) -> Result<(), std::io::Error> {
    let len = u32::try_from(payload.len())
        .ok()
        .filter(|l| *l as usize <= FRAME_MAX)
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("a frame of {} bytes is over {FRAME_MAX}", payload.len()),
            )
        })?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(payload).await?;
    w.flush().await
}

/// Reads one frame of at most `max` bytes (a longer length is refused before any read).
async fn read_frame(
    r: &mut (impl AsyncRead + Unpin),
    max: usize,
) -> Result<Vec<u8>, std::io::Error> {
    let len = r.read_u32().await? as usize;
    if len > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a frame of {len} bytes is over {max}"),
        ));
    }
    let mut buf = vec![0; len];
    r.read_exact(&mut buf).await?;
    Ok(buf)
}

async fn send_json<T: Serialize>(
    w: &mut (impl AsyncWrite + Unpin),
    value: &T,
) -> Result<(), std::io::Error> {
    let bytes = serde_json::to_vec(value).map_err(std::io::Error::other)?;
    write_frame(w, &bytes).await
}

async fn recv_json<T: DeserializeOwned>(
    r: &mut (impl AsyncRead + Unpin),
) -> Result<T, std::io::Error> {
    let frame = read_frame(r, HANDSHAKE_FRAME_MAX).await?;
    serde_json::from_slice(&frame)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidData, e))
}
