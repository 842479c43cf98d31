//! [`NatsWorkspaces`]: the [`WorkspaceStore`] on JetStream's Object Store (issue 39).
//!
//! One bucket per cluster ([`Subjects::workspace_bucket`]), made with the cluster's stream
//! replicas by the nodes as they start ([`NatsWorkspaces::open_with`]; a client opens it on
//! first use (a read or a delete of a cluster without it finds nothing, and creates nothing). Objects
//! are named by [`lineage_core::workspace`]; a put replaces the object. The store records a
//! SHA-256 digest per object and checks it as the object is read (a damaged object is an error,
//! never bytes); the caller checks it again against the digest it recorded.

use async_nats::jetstream::{self, object_store};
use tokio::sync::OnceCell;

use crate::error::BusError;
use crate::ports::{BoxFuture, StoredWorkspace, WorkspaceStore};
use crate::streams::StreamOptions;
use crate::subjects::Subjects;

/// The workspace snapshots of one cluster, in its Object Store bucket.
pub struct NatsWorkspaces {
    client: async_nats::Client,
    js: jetstream::Context,
    bucket: String,
    options: StreamOptions,
    store: OnceCell<object_store::ObjectStore>,
}

impl NatsWorkspaces {
    /// The store of `subjects`' cluster on `client`; the bucket is opened on first use.
    pub fn new(client: async_nats::Client, subjects: &Subjects, options: StreamOptions) -> Self {
        NatsWorkspaces {
            js: jetstream::new(client.clone()),
            client,
            bucket: subjects.workspace_bucket(),
            options,
            store: OnceCell::new(),
        }
    }

    /// [`NatsWorkspaces::new`], the bucket opened now, or made with the cluster's replicas
    /// when absent (a node's start: the voters make it, as they make the streams). A node that
    /// may not make it (a worker before any voter ran) logs why and opens it on first use.
    pub async fn open_with(
        client: async_nats::Client,
        subjects: &Subjects,
        options: StreamOptions,
    ) -> Self {
        let store = Self::new(client, subjects, options);
        if let Err(e) = store.store().await {
            tracing::warn!(bucket = %store.bucket, error = %e, "cannot open the workspace bucket now; it is opened on first use");
        }
        store
    }

    async fn store(&self) -> Result<&object_store::ObjectStore, BusError> {
        self.store
            .get_or_try_init(|| async {
                match self.js.get_object_store(&self.bucket).await {
                    Ok(store) => Ok(store),
                    Err(_) => self
                        .js
                        .create_object_store(object_store::Config {
                            bucket: self.bucket.clone(),
                            description: Some("lineage session workspaces (issue 39)".into()),
                            num_replicas: self.options.replicas,
                            ..Default::default()
                        })
                        .await
                        .map_err(|e| BusError::js("open the workspace bucket", e)),
                }
            })
            .await
    }

    /// The bucket if it exists (a read or a delete never creates it): `None` when the
    /// cluster has never stored a workspace.
    async fn existing(&self) -> Result<Option<&object_store::ObjectStore>, BusError> {
        if let Some(store) = self.store.get() {
            return Ok(Some(store));
        }
        // The bucket's stream; absent: no bucket. Anything else is an error, not an absence.
        match self.js.get_stream(format!("OBJ_{}", self.bucket)).await {
            Ok(_) => self.store().await.map(Some),
            Err(e) => match e.kind() {
                jetstream::context::GetStreamErrorKind::JetStream(js)
                    if js.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
                {
                    Ok(None)
                }
                _ => Err(BusError::js("open the workspace bucket", e)),
            },
        }
    }
}

impl WorkspaceStore for NatsWorkspaces {
    fn put<'a>(
        &'a self,
        object: &'a str,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, Result<String, BusError>> {
        Box::pin(async move {
            let store = self.store().await?;
            let mut reader = bytes;
            let info = store
                .put(object, &mut reader)
                .await
                .map_err(|e| BusError::js("store a workspace", e))?;
            info.digest.ok_or_else(|| {
                BusError::js(
                    "store a workspace",
                    std::io::Error::other("the store recorded no digest"),
                )
            })
        })
    }

    fn get<'a>(
        &'a self,
        object: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredWorkspace>, BusError>> {
        Box::pin(async move {
            let Some(store) = self.existing().await? else {
                return Ok(None);
            };
            let info = match store.info(object).await {
                Ok(info) if !info.deleted => info,
                Ok(_) => return Ok(None),
                Err(e) if e.kind() == object_store::InfoErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(BusError::js("read a workspace", e)),
            };
            // The chunks by batched direct gets (no consumer: nothing to permit or leave behind),
            // checked against the size and digest the store recorded.
            let mut bytes = Vec::with_capacity(info.size);
            crate::direct::read_subject(
                &self.client,
                &format!("OBJ_{}", self.bucket),
                &format!("$O.{}.C.{}", self.bucket, info.nuid),
                0,
                "read a workspace",
                |_, chunk| {
                    bytes.extend_from_slice(chunk);
                    Ok(())
                },
            )
            .await?;
            let digest = info.digest.clone().unwrap_or_default();
            let found = lineage_workspace::Digest::of(&bytes).to_string();
            if bytes.len() != info.size || found != digest {
                return Err(BusError::JetStream {
                    op: "read a workspace",
                    reason: format!(
                        "object {object} is damaged: {} bytes with digest {found} read, {} bytes with digest {digest} recorded",
                        bytes.len(),
                        info.size
                    ),
                });
            }
            Ok(Some(StoredWorkspace { bytes, digest }))
        })
    }

    fn delete<'a>(&'a self, objects: &'a [String]) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            let Some(store) = self.existing().await? else {
                return Ok(());
            };
            for object in objects {
                match store.delete(object).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == object_store::DeleteErrorKind::NotFound => {}
                    Err(e) => return Err(BusError::js("delete a workspace", e)),
                }
            }
            Ok(())
        })
    }
}
