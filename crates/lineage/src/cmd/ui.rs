//! `lineage ui` (issue 36, U1): a web page of the cluster, served from this process with the
//! CLI's flags and credentials (an observer's credentials read as much as the observer may).
//!
//! One page ([`PAGE`], built into the binary: nothing comes from a CDN) with four views, read
//! from a small JSON API that answers what the verbs answer:
//!
//! | route | what |
//! |---|---|
//! | `/` | the page; its views are `#/` (sessions, searchable as `lineage ls`, paged), `#/tree/<root>` (the whole tree, refreshed every second), `#/session/<id>` (its record and its transcript from the event log) and `#/cluster` |
//! | `/api/sessions?root&parent&state&node&label&older_than&after` | `lineage ls --json` |
//! | `/api/tree/<root>` | `lineage tree --json` |
//! | `/api/session/<id>` | the registry's record and the session's log events |
//! | `/api/cluster` | `lineage status --json` |
//! | `/api/events?parents=<id>,<id>` | server-sent events: each lifecycle message (start, end, report, settled) published for those parents' children, as `lineage watch` shows it |
//! | `/api/output/<id>` | server-sent events: the session's turn output as it comes (turn-start, text chunks, turn-end), as its node publishes it |
//! | `POST /api/drain/<root>` | `lineage drain <root>`: newline-delimited JSON, each progress message (the plan, each wave's disposals) as it comes, then the report (waves, leaves first); the page asks for confirmation first and draws the waves' bars |
//! | `POST /api/send/<id>` `{"content"}` | `lineage send`: a followup (a fresh request id per call) |
//! | `POST /api/interrupt/<id>` | `lineage interrupt`, as its parent (its user when top-level); the page asks first |
//!
//! With `--read-only`, or credentials that may not publish the drain request (an observer's:
//! [`rights`] asks the NATS server at start), the page is read only: `/api/mode` says so, the
//! page shows no actions and the server refuses them (403). An error is `{"error": "<one line>"}` with the status of its kind (400 bad input, 404
//! unknown, 503 the cluster), shown on the page; nothing is changed by a read. It listens on
//! 127.0.0.1 by default; any other address needs `--token` (every API call then carries it as
//! `Authorization: Bearer`; the page takes it from its URL's `#token=`), and says so at start.

use std::net::SocketAddr;

use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::events::EventLogStore;
use lineage_registry::{Consistency, RegistryClient};
use serde::Deserialize;
use serde_json::json;

use crate::client::{connect, parse_session, registry_error};
use crate::global::{cluster, subjects, Global};
use crate::output::usage;

mod actions;
mod rights;

/// The page, with its script and style inline.
pub const PAGE: &str = include_str!("ui/page.html");

/// `ui` arguments.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to serve on; anything but a loopback address needs --token.
    #[arg(long, default_value = "127.0.0.1:7474")]
    pub listen: String,
    /// No actions: the page shows no drain, followup or interrupt, and the server refuses them
    /// (for an observer's credentials, which may read but not act).
    #[arg(long)]
    pub read_only: bool,
    /// A token every API call must carry (`Authorization: Bearer TOKEN`; the page reads it from
    /// `#token=TOKEN` in its URL). Prefer LINEAGE_UI_TOKEN over the flag.
    #[arg(long, env = "LINEAGE_UI_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

/// What the handlers share: the CLI's flags and credentials, and the token.
#[derive(Clone)]
pub(crate) struct Ui {
    g: Global,
    token: Option<String>,
    read_only: bool,
}

/// Serves the page until interrupted.
pub(crate) async fn run(g: &Global, args: Args) -> Result<(), ControlError> {
    let addr = listen_address(&args.listen, args.token.as_deref())?;
    // Fail now, not at the first page, when the cluster cannot be reached; then every call
    // uses this one connection.
    let mut g = g.clone();
    let nats = connect(&g).await?;
    // An observer's credentials give a read-only page, as --read-only does.
    let rights = rights::ask(&nats, &cluster(&g), std::time::Duration::from_secs(2)).await;
    let read_only = match &rights {
        rights::Rights::ReadOnly { user, subject } if !args.read_only => {
            println!(
                "lineage ui: read only: NATS user {user} may not publish {subject} (an observer's \
                 credentials); the page offers no actions"
            );
            true
        }
        _ => args.read_only,
    };
    g.shared_nats = Some(nats);
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("cannot listen on {addr} ({e}); pick a free port with --listen"),
        )
    })?;
    let local = listener.local_addr().unwrap_or(addr);
    let guarded = match args.token.is_some() {
        true => " (API calls need the token: open the page with #token=...)",
        false => "",
    };
    let mode = match read_only {
        true => ", read only",
        false => "",
    };
    println!("lineage ui: http://{local}/{guarded}{mode}");
    let app = router(Ui {
        g,
        token: args.token,
        read_only,
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(crate::client::wait_for_signal())
        .await
        .map_err(|e| ControlError::new(ErrorCode::Internal, format!("the page stopped: {e}")))
}

/// The address to serve on: a loopback address, or any other with a token (not empty).
fn listen_address(listen: &str, token: Option<&str>) -> Result<SocketAddr, ControlError> {
    let addr: SocketAddr = listen.parse().map_err(|e| {
        usage(format!(
            "--listen {listen:?} is not an address ({e}); give host:port, e.g. 127.0.0.1:7474"
        ))
    })?;
    if token.is_some_and(|t| t.trim().is_empty()) {
        return Err(usage(
            "--token is empty; give a long random token (or none, on 127.0.0.1)",
        ));
    }
    if !addr.ip().is_loopback() && token.is_none() {
        return Err(usage(format!(
            "--listen {addr} is reachable from other machines; give --token (or LINEAGE_UI_TOKEN), or listen on 127.0.0.1"
        )));
    }
    Ok(addr)
}

/// Whether `given` is `token`, in time that does not depend on where they differ.
pub(crate) fn same_token(given: &str, token: &str) -> bool {
    given.len() == token.len()
        && given
            .bytes()
            .zip(token.bytes())
            .fold(0u8, |diff, (a, b)| diff | (a ^ b))
            == 0
}

fn router(ui: Ui) -> Router {
    let api = Router::new()
        .route("/api/sessions", get(sessions))
        .route("/api/tree/{root}", get(tree))
        .route("/api/session/{id}", get(session))
        .route("/api/cluster", get(cluster_status))
        .route("/api/mode", get(mode))
        .route("/api/drain/{root}", post(actions::drain))
        .route("/api/send/{id}", post(actions::send))
        .route("/api/interrupt/{id}", post(actions::interrupt))
        .route("/api/events", get(events))
        .route("/api/output/{id}", get(output))
        .route_layer(middleware::from_fn_with_state(ui.clone(), authorized));
    Router::new()
        .route("/", get(|| async { Html(PAGE) }))
        .merge(api)
        .fallback(|| async { failure(ErrorCode::NotFound, "no such page; open /".into()) })
        .with_state(ui)
}

async fn mode(State(ui): State<Ui>) -> Response {
    Json(json!({"read_only": ui.read_only})).into_response()
}

/// Refuses an API call without the token, when there is one: in the `Authorization` header,
/// or (for the event stream, which a browser opens without headers) as `token=` in the query.
async fn authorized(State(ui): State<Ui>, request: Request, next: Next) -> Response {
    if ui.read_only && request.method() != axum::http::Method::GET {
        return failure(
            ErrorCode::Refused,
            "this page is read only (lineage ui --read-only); act with an operator's page or the CLI".into(),
        );
    }
    let Some(token) = &ui.token else {
        return next.run(request).await;
    };
    let header = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let query = request.uri().query().and_then(|q| {
        q.split('&')
            .find_map(|kv| kv.strip_prefix("token="))
            .map(str::to_owned)
    });
    let given = header.or(query);
    match given.is_some_and(|g| same_token(&g, token)) {
        true => next.run(request).await,
        false => (
            StatusCode::UNAUTHORIZED,
            Json(json!({"error": "this page needs its token: open it with #token=... in its URL"})),
        )
            .into_response(),
    }
}

/// The HTTP status of an error code.
pub(crate) fn status_of(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::BadRequest => StatusCode::BAD_REQUEST,
        ErrorCode::NotFound => StatusCode::NOT_FOUND,
        ErrorCode::Refused => StatusCode::FORBIDDEN,
        ErrorCode::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Internal => StatusCode::INTERNAL_SERVER_ERROR,
    }
}

pub(crate) fn failure(code: ErrorCode, message: String) -> Response {
    (status_of(code), Json(json!({ "error": message }))).into_response()
}

pub(crate) fn answer(result: Result<serde_json::Value, ControlError>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(e) => failure(e.code, e.message),
    }
}

/// `/api/sessions`'s query: `lineage ls`'s flags.
#[derive(Debug, Default, Deserialize)]
struct Search {
    root: Option<String>,
    parent: Option<String>,
    state: Option<String>,
    node: Option<String>,
    label: Option<String>,
    older_than: Option<String>,
    after: Option<String>,
}

async fn sessions(State(ui): State<Ui>, Query(search): Query<Search>) -> Response {
    let blank = |v: Option<String>| v.filter(|s| !s.trim().is_empty());
    let args = super::ls::Args {
        root: blank(search.root),
        parent: blank(search.parent),
        state: blank(search.state),
        node: blank(search.node),
        label: blank(search.label),
        older_than: blank(search.older_than),
        limit: 50,
        after: blank(search.after),
        all: false,
    };
    answer(super::ls::ls_json(&ui.g, &args).await)
}

async fn tree(State(ui): State<Ui>, Path(root): Path<String>) -> Response {
    answer(super::tree::tree_json(&ui.g, &root).await)
}

async fn cluster_status(State(ui): State<Ui>) -> Response {
    answer(super::status::status_json(&ui.g).await)
}

async fn session(State(ui): State<Ui>, Path(id): Path<String>) -> Response {
    answer(session_json(&ui.g, &id).await)
}

/// `/api/events`'s query: the parents whose children's lifecycle to stream.
#[derive(Debug, Deserialize)]
struct Parents {
    parents: String,
}

async fn events(State(ui): State<Ui>, Query(q): Query<Parents>) -> Response {
    let parents: Result<std::collections::BTreeSet<String>, ControlError> = q
        .parents
        .split(',')
        .filter(|p| !p.is_empty())
        .map(|p| parse_session("parents", p).map(|s| s.to_string()))
        .collect();
    let parents = match parents {
        Ok(parents) => parents,
        Err(e) => return failure(e.code, e.message),
    };
    let subject = format!("lineage.{}.parent.*.*", cluster(&ui.g));
    let subscriber = match subscribe(&ui.g, subject).await {
        Ok(subscriber) => subscriber,
        Err(e) => return failure(e.code, e.message),
    };
    let stream = futures::StreamExt::filter_map(subscriber, move |msg| {
        // lineage.<cluster>.parent.<parent>.<kind>
        let mut tokens = msg.subject.as_str().rsplit('.');
        let kind = tokens.next().unwrap_or("?").to_owned();
        let parent = tokens.next().unwrap_or_default().to_owned();
        let event = parents.contains(&parent).then(|| {
            let body: serde_json::Value = serde_json::from_slice(&msg.payload)
                .unwrap_or_else(|_| json!({"raw": String::from_utf8_lossy(&msg.payload)}));
            let (what, who, detail) = super::watch::describe_event(&kind, &body);
            let data = json!({"parent": parent, "what": what, "who": who, "detail": detail});
            Ok::<_, std::convert::Infallible>(Event::default().data(data.to_string()))
        });
        std::future::ready(event)
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// A session's registry record and its log's events.
/// A subscription on the page's NATS connection.
async fn subscribe(g: &Global, subject: String) -> Result<async_nats::Subscriber, ControlError> {
    let nats = connect(g).await?;
    nats.subscribe(subject.clone()).await.map_err(|e| {
        ControlError::new(
            ErrorCode::Unavailable,
            format!("cannot subscribe to {subject}: {e}"),
        )
    })
}

/// `/api/output/<id>`: the session's turn output as its node publishes it (F1: turn-start,
/// chunks, turn-end), one server-sent event per message, its JSON as is.
async fn output(State(ui): State<Ui>, Path(id): Path<String>) -> Response {
    let session = match parse_session("session", &id) {
        Ok(session) => session,
        Err(e) => return failure(e.code, e.message),
    };
    let subject = format!("lineage.{}.session.{session}.output", cluster(&ui.g));
    let subscriber = match subscribe(&ui.g, subject).await {
        Ok(subscriber) => subscriber,
        Err(e) => return failure(e.code, e.message),
    };
    let stream = futures::StreamExt::map(subscriber, |msg| {
        let text = String::from_utf8_lossy(&msg.payload).into_owned();
        Ok::<_, std::convert::Infallible>(Event::default().data(text))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn session_json(g: &Global, id: &str) -> Result<serde_json::Value, ControlError> {
    let session = parse_session("session", id)?;
    let nats = connect(g).await?;
    let registry = RegistryClient::new(nats.clone(), cluster(g));
    let record = registry
        .session(session.clone(), Consistency::Linearizable)
        .await
        .map_err(registry_error)?;
    let Some(record) = record else {
        return Err(ControlError::new(
            ErrorCode::NotFound,
            format!("session {session} is not in the registry of cluster {}; check the id (the sessions view lists them)", cluster(g)),
        ));
    };
    let logs = EventLogStore::reader(nats, subjects(g)?);
    let (events, _) = logs.read(&session).await.map_err(ControlError::from)?;
    Ok(json!({
        "record": record,
        "events": events,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u1_another_address_needs_a_token_and_bad_values_are_one_line() {
        assert!(listen_address("127.0.0.1:7474", None).is_ok());
        assert!(listen_address("[::1]:7474", None).is_ok());
        assert!(listen_address("0.0.0.0:7474", Some("s3cret")).is_ok());
        for (listen, token, says) in [
            ("0.0.0.0:7474", None, "give --token"),
            ("localhost", None, "is not an address"),
            ("127.0.0.1:7474", Some(" "), "--token is empty"),
        ] {
            let e = listen_address(listen, token).unwrap_err();
            assert!(
                e.message.contains(says) && !e.message.contains('\n'),
                "{}",
                e.message
            );
            assert_eq!(e.code, ErrorCode::BadRequest);
        }
        assert!(same_token("abc", "abc"));
        assert!(!same_token("abd", "abc") && !same_token("ab", "abc"));
    }

    #[test]
    fn u1_the_page_is_built_in_and_names_its_views() {
        for view in ["#/tree/", "#/session/", "#/cluster", "/api/sessions"] {
            assert!(PAGE.contains(view), "{view}");
        }
        assert!(
            !PAGE.contains("http://") && !PAGE.contains("https://"),
            "nothing from a CDN"
        );
    }
}
