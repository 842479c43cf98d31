//! `lineage a2a` (issue 38, A1): an A2A gateway in front of a cluster. Each agent profile an
//! operator marks `a2a = true` is an A2A agent with its Agent Card; a task is a lineage
//! session, its context the root of its tree.
//!
//! | route | what |
//! |---|---|
//! | `GET /agents/<profile>/.well-known/agent-card.json` | the profile's card ([`card`]), public |
//! | `POST /agents/<profile>` | A2A over JSON-RPC (`SendMessage`, `SendStreamingMessage` as SSE, `GetTask`, `ListTasks`, `CancelTask`, `SubscribeToTask`): [`handler`], served by the official `a2a-server-lf` router |
//! | `GET /agents` | the agents and their card URLs |
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the verb: the profiles from the nodes, the routes, the bearer check, serving |
//! | [`card`] | a profile's card, pure |
//! | [`task`] | a session's record and log as an A2A task and its stream updates, pure |
//! | [`handler`] | the operations, over the registry, the logs and the control service |
//! | [`follow`] | a blocking send's wait, and the streams, following the log |
//! | [`list`] | `ListTasks`, paged by the registry's listing |
//! | `tls.rs` | HTTPS and mutual TLS (`--tls-cert`, `--tls-key`, `--client-ca`) |
//! | [`push`] | push notifications: the configs in a NATS bucket, delivered once per state change |
//!
//! The gateway keeps no task state: every answer is read from the cluster, so gateways can run
//! side by side behind one address, and one that dies loses nothing (a client subscribes again
//! at another). It is a separate process (like `lineage ui` and `lineage acp`), not a route of
//! the node: it speaks for the cluster, needs no agent slots, and scales apart from the nodes.
//!
//! Auth fails closed: every JSON-RPC call needs `Authorization: Bearer <token>` (the token from
//! `LINEAGE_A2A_TOKEN` or `--token-file`), or a client certificate signed by `--client-ca`
//! (mutual TLS, checked in the handshake), or both when both are given; the cards declare what
//! is asked. With neither the gateway does not start unless `--allow-anonymous` says so (and
//! then only on a loopback address).
//! Push notifications are on (`capabilities.pushNotifications`): [`push`].

pub mod card;
pub mod follow;
pub mod handler;
pub mod list;
pub mod push;
pub mod task;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::events::EventLogStore;
use lineage_protocol::agent::ProfileInfo;
use lineage_registry::{Consistency, RegistryClient};
use serde_json::json;

use crate::client::{now_ms, registry_error};
use crate::global::{cluster, subjects, Global};
use crate::output::usage;
use handler::{Agent, Cluster};

/// `a2a` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to serve on.
    #[arg(long, default_value = "127.0.0.1:8484")]
    pub listen: String,
    /// The URL clients reach this gateway at, as the cards give it (default: http://<listen>).
    #[arg(long)]
    pub public_url: Option<String>,
    /// A file holding the bearer token every call must carry (LINEAGE_A2A_TOKEN gives it too).
    #[arg(long)]
    pub token_file: Option<std::path::PathBuf>,
    /// Serve without a token (loopback addresses only): anyone who reaches the port may start
    /// agents.
    #[arg(long)]
    pub allow_anonymous: bool,
    /// How long a blocking SendMessage (or a stream) waits for its turn, in seconds; then the
    /// task is answered as it is (still working).
    #[arg(long, default_value_t = 1800)]
    pub turn_timeout_s: u64,
    /// Let push notification webhooks be on loopback or private addresses (trusted networks
    /// and tests only: a client could make the gateway call anything it reaches).
    #[arg(long)]
    pub push_allow_private: bool,
    /// Replicas of the push config bucket (1, or 3 on a clustered NATS).
    #[arg(long, default_value_t = 1)]
    pub push_replicas: usize,
    /// Serve HTTPS with this certificate chain (PEM); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    pub tls_cert: Option<std::path::PathBuf>,
    /// The private key of --tls-cert (PEM).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub tls_key: Option<std::path::PathBuf>,
    /// Mutual TLS: every client must show a certificate signed by this CA (PEM); the cards
    /// declare the mtls scheme, and a client certificate authenticates without a token.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    pub client_ca: Option<std::path::PathBuf>,
}

/// The bearer token: `--token-file`, else LINEAGE_A2A_TOKEN; `None` with `--allow-anonymous`,
/// or with mutual TLS and no token given (the client certificate authenticates).
fn token_of(args: &Args, addr: &SocketAddr) -> Result<Option<String>, ControlError> {
    let from_file = match &args.token_file {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .map_err(|e| usage(format!("--token-file {}: {e}", path.display())))?
                .trim()
                .to_owned(),
        ),
        None => None,
    };
    let token = from_file.or_else(|| std::env::var("LINEAGE_A2A_TOKEN").ok());
    match (token, args.allow_anonymous) {
        (Some(t), false) if t.trim().is_empty() => Err(usage(
            "the A2A token is empty; put a long random token in LINEAGE_A2A_TOKEN or --token-file",
        )),
        (Some(t), false) => Ok(Some(t.trim().to_owned())),
        (Some(_), true) => Err(usage(
            "--allow-anonymous and a token (LINEAGE_A2A_TOKEN or --token-file) contradict each other; give one",
        )),
        (None, true) if !addr.ip().is_loopback() => Err(usage(format!(
            "--allow-anonymous on {addr} would let anyone reachable start agents; listen on 127.0.0.1 or give a token"
        ))),
        (None, true) => Ok(None),
        (None, false) if args.client_ca.is_some() => Ok(None),
        (None, false) => Err(usage(
            "lineage a2a needs a bearer token or client certificates: set LINEAGE_A2A_TOKEN or --token-file, or --client-ca with --tls-cert (or --allow-anonymous on 127.0.0.1)",
        )),
    }
}

/// The profiles the live nodes offer with `a2a = true`, by name (the first node's wins).
async fn a2a_profiles(
    control: &lineage_bus::ControlClient,
    registry: &RegistryClient,
) -> Result<Vec<ProfileInfo>, ControlError> {
    let nodes = registry
        .nodes(Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let per_node = control.with_timeout(Duration::from_secs(5));
    let now = now_ms();
    let mut found: Vec<ProfileInfo> = Vec::new();
    for n in nodes.iter().filter(|n| n.lease_expires_at_ms > now) {
        let Ok(reply) = per_node.on(&n.node).agents().await else {
            continue;
        };
        for p in reply.profiles.into_iter().filter(|p| p.a2a) {
            if !found.iter().any(|f| f.name == p.name) {
                found.push(p);
            }
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(found)
}

/// Serves until interrupted.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let addr: SocketAddr = args.listen.parse().map_err(|e| {
        usage(format!(
            "--listen {:?} is not an address ({e}); give host:port, e.g. 127.0.0.1:8484",
            args.listen
        ))
    })?;
    if args.allow_anonymous && args.client_ca.is_some() {
        return Err(usage(
            "--allow-anonymous and --client-ca contradict each other; give one",
        ));
    }
    let tls = match (&args.tls_cert, &args.tls_key) {
        (Some(cert), Some(key)) => Some(tls::server_config(&tls::TlsFiles {
            cert: cert.clone(),
            key: key.clone(),
            client_ca: args.client_ca.clone(),
        })?),
        _ => None,
    };
    let token = token_of(&args, &addr)?;
    let scheme = match tls.is_some() {
        true => "https",
        false => "http",
    };
    let public = match &args.public_url {
        Some(url) if url.starts_with("http://") || url.starts_with("https://") => {
            url.trim_end_matches('/').to_owned()
        }
        Some(url) => {
            return Err(usage(format!(
                "--public-url {url:?} is not an http(s) URL; give the address clients use, e.g. https://agents.example.com"
            )))
        }
        None => format!("{scheme}://{addr}"),
    };
    let _telemetry = crate::telemetry::init(None);
    let control = crate::client::control(g).await?;
    let registry = RegistryClient::new(control.nats().clone(), cluster(g));
    let profiles = a2a_profiles(&control, &registry).await?;
    if profiles.is_empty() {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            "no live node offers a profile with a2a = true; mark one in its [agents.NAME] table and restart the node",
        ));
    }
    if !matches!(args.push_replicas, 1..=5) {
        return Err(usage(format!(
            "--push-replicas {} is not 1 to 5; give 1, or 3 on a clustered NATS",
            args.push_replicas
        )));
    }
    let logs = EventLogStore::reader(control.nats().clone(), subjects(g)?);
    let push = push::store::PushStore::open(
        control.nats().clone(),
        subjects(g)?.a2a_push_bucket(),
        args.push_replicas,
    )
    .await
    .map_err(|e| ControlError::new(ErrorCode::Unavailable, e.message))?;
    let shared = Arc::new(Cluster {
        control,
        registry,
        logs,
        push: push.clone(),
        push_allow_private: args.push_allow_private,
        turn_timeout: Duration::from_secs(args.turn_timeout_s.max(1)),
    });
    let sender = a2a_server::HttpPushSender::new(Some(a2a_server::HttpPushSenderConfig {
        timeout: Duration::from_secs(10),
        fail_on_error: true,
        validate_urls: !args.push_allow_private,
    }));
    let stop_push = tokio_util::sync::CancellationToken::new();
    let delivering = tokio::spawn(push::deliver::run(
        shared.clone(),
        push,
        sender,
        stop_push.clone(),
    ));
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("cannot listen on {addr} ({e}); pick a free port with --listen"),
        )
    })?;
    let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    let auth = card::Auth {
        bearer: token.is_some(),
        mtls: args.client_ca.is_some(),
    };
    let said = match (auth.bearer, auth.mtls) {
        (true, true) => "client certificate and bearer token required",
        (true, false) => "bearer token required",
        (false, true) => "client certificate required",
        (false, false) => "anonymous",
    };
    println!(
        "lineage a2a: {} at {public}/agents/<name> ({said})",
        names.join(", ")
    );
    let app = router(shared, &profiles, &public, token, auth);
    let served = match tls {
        None => {
            axum::serve(listener, app)
                .with_graceful_shutdown(crate::client::wait_for_signal())
                .await
        }
        Some(config) => {
            let listener = tls::TlsListener::new(listener, config).map_err(|e| {
                ControlError::new(ErrorCode::Unavailable, format!("cannot serve TLS: {e}"))
            })?;
            axum::serve(listener, app)
                .with_graceful_shutdown(crate::client::wait_for_signal())
                .await
        }
    };
    stop_push.cancel();
    let _ = delivering.await;
    served.map_err(|e| {
        ControlError::new(ErrorCode::Internal, format!("the A2A gateway stopped: {e}"))
    })
}

/// The routes: per profile its card (public) and its JSON-RPC endpoint (behind the token).
fn router(
    cluster: Arc<Cluster>,
    profiles: &[ProfileInfo],
    public: &str,
    token: Option<String>,
    auth: card::Auth,
) -> Router {
    let mut app = Router::new();
    let mut index = Vec::new();
    for profile in profiles {
        let url = format!("{public}/agents/{}", profile.name);
        let card = card::card_of(profile, &url, auth);
        index.push(
            json!({"name": profile.name, "card": format!("{url}/.well-known/agent-card.json")}),
        );
        let agent = Arc::new(Agent {
            cluster: cluster.clone(),
            profile: profile.name.clone(),
        });
        let rpc = a2a_server::jsonrpc::jsonrpc_router(agent)
            .route_layer(middleware::from_fn_with_state(token.clone(), authorized));
        let cards = a2a_server::agent_card::agent_card_router(Arc::new(
            a2a_server::StaticAgentCard::new(card),
        ));
        app = app.nest(&format!("/agents/{}", profile.name), rpc.merge(cards));
    }
    app.route(
        "/agents",
        get(move || async move { Json(json!({ "agents": index })) }),
    )
    .fallback(|| async {
        (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "no such route; GET /agents lists the agents and their cards"})),
        )
    })
}

/// Refuses a call without the token (401, `WWW-Authenticate: Bearer`), when there is one.
async fn authorized(State(token): State<Option<String>>, request: Request, next: Next) -> Response {
    let Some(token) = token else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    match given {
        Some(given) if crate::cmd::ui::same_token(given, &token) => next.run(request).await,
        Some(_) => refused("the bearer token is not this gateway's; check LINEAGE_A2A_TOKEN"),
        None => {
            refused("this A2A agent needs Authorization: Bearer <token> (the card's bearer scheme)")
        }
    }
}

fn refused(line: &str) -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(json!({"error": line})),
    )
        .into_response()
}
