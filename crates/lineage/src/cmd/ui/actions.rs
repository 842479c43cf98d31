//! What the page does with the operator's rights (issue 36, U1): drain a tree, send a session a
//! followup, interrupt its turn. Each sends what its verb sends (`lineage drain`, `send`,
//! `interrupt`) and answers its reply, or the one-line error the cluster gave; the page asks for
//! confirmation before a drain or an interrupt.
//!
//! A drain answers as it goes, as `lineage drain` draws its bars: newline-delimited JSON, one
//! `{"progress": ...}` line per drain progress message (the plan, then each wave's disposals),
//! then `{"report": ...}` or `{"error": ..., "status": ...}`. A bad root id is refused before
//! anything starts, with its HTTP status. The drain goes on if the page goes away.

use axum::body::Body;
use axum::extract::{Path, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::Json;
use lineage_bus::control::{ControlError, ErrorCode};
use lineage_core::authority::InterruptAuthority;
use lineage_protocol::control::InterruptRequest;
use lineage_registry::{Consistency, RegistryClient};
use serde::Deserialize;
use serde_json::json;

use super::{answer, failure, status_of, Ui};
use crate::client::{control, parse_session, registry_error};
use crate::global::{cluster, Global};

fn encoded(value: impl serde::Serialize) -> Result<serde_json::Value, ControlError> {
    serde_json::to_value(value).map_err(|e| {
        ControlError::new(ErrorCode::Internal, format!("cannot encode the reply: {e}"))
    })
}

/// `POST /api/drain/<root>`: the drain's progress as it comes, then its report.
pub(super) async fn drain(State(ui): State<Ui>, Path(root): Path<String>) -> Response {
    let started = async {
        let root = parse_session("root", &root)?;
        let id = crate::cmd::drain::new_drain_id()?;
        let client = control(&ui.g)
            .await?
            .with_timeout(std::time::Duration::from_millis(
                ui.g.timeout_ms.max(60_000),
            ));
        Ok::<_, ControlError>((root, id, client))
    };
    let (root, id, client) = match started.await {
        Ok(started) => started,
        Err(e) => return failure(e.code, e.message),
    };
    let (lines, rx) = tokio::sync::mpsc::unbounded_channel::<serde_json::Value>();
    tokio::spawn(async move {
        let outcome = client
            .drain_with_progress(vec![root], id, |msg| {
                if let Ok(progress) = msg {
                    let _ = lines.send(json!({ "progress": progress }));
                }
            })
            .await;
        let last = match outcome.and_then(encoded) {
            Ok(report) => json!({ "report": report }),
            Err(e) => json!({ "error": e.message, "status": status_of(e.code).as_u16() }),
        };
        let _ = lines.send(last);
    });
    let body = futures::stream::unfold(rx, |mut rx| async move {
        let line = rx.recv().await?;
        Some((Ok::<_, std::convert::Infallible>(format!("{line}\n")), rx))
    });
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(body),
    )
        .into_response()
}

/// `POST /api/send/<id>`'s body.
#[derive(Debug, Deserialize)]
pub(super) struct Followup {
    content: String,
}

/// `POST /api/send/<id>`.
pub(super) async fn send(
    State(ui): State<Ui>,
    Path(id): Path<String>,
    Json(body): Json<Followup>,
) -> Response {
    answer(followup(&ui.g, &id, body.content).await)
}

async fn followup(
    g: &Global,
    id: &str,
    content: String,
) -> Result<serde_json::Value, ControlError> {
    if content.trim().is_empty() {
        return Err(ControlError::new(
            ErrorCode::BadRequest,
            "the followup is empty; write what the session should do next",
        ));
    }
    let reply = crate::cmd::send::followup(g, id, content, None).await?;
    let mut json = encoded(&reply)?;
    json["words"] = crate::output::followup_words(&reply).into();
    Ok(json)
}

/// `POST /api/interrupt/<id>`.
pub(super) async fn interrupt(State(ui): State<Ui>, Path(id): Path<String>) -> Response {
    answer(interrupt_turn(&ui.g, &id).await)
}

/// Interrupts as the session's parent, or as its user when it is top-level.
async fn interrupt_turn(g: &Global, id: &str) -> Result<serde_json::Value, ControlError> {
    let target = parse_session("session", id)?;
    let client = control(g).await?;
    let registry = RegistryClient::new(client.nats().clone(), cluster(g));
    let record = registry
        .session(target.clone(), Consistency::Linearizable)
        .await
        .map_err(registry_error)?
        .ok_or_else(|| {
            ControlError::new(
                ErrorCode::NotFound,
                format!("session {target} is not in the registry; check the id"),
            )
        })?;
    let authority = match record.header.parent_session() {
        Some(parent) => InterruptAuthority::User {
            parent_session_id: parent.clone(),
        },
        None => InterruptAuthority::TopLevel,
    };
    encoded(
        client
            .interrupt(&InterruptRequest { target, authority })
            .await?,
    )
}
