//! [`NatsWorkspaces`]: the [`WorkspaceStore`] on JetStream's Object Store (issue 39).
//!
//! One bucket per cluster ([`Subjects::workspace_bucket`]), opened (or created, with the
//! cluster's stream replicas) on first use, so a node that never stores a workspace never makes
//! it. One object per session, named by its id; a put replaces the object. The store records a
//! SHA-256 digest per object and checks it as the object is read (a damaged object is an error,
//! never bytes); the caller checks it again against the digest it recorded.

use async_nats::jetstream::{self, object_store};
use lineage_core::ids::SessionId;
use tokio::io::AsyncReadExt;
use tokio::sync::OnceCell;

use crate::error::BusError;
use crate::ports::{BoxFuture, StoredWorkspace, WorkspaceStore};
use crate::streams::StreamOptions;
use crate::subjects::Subjects;

/// The workspace snapshots of one cluster, in its Object Store bucket.
pub struct NatsWorkspaces {
    js: jetstream::Context,
    bucket: String,
    options: StreamOptions,
    store: OnceCell<object_store::ObjectStore>,
}

impl NatsWorkspaces {
    /// The store of `subjects`' cluster on `client`; the bucket is opened on first use.
    pub fn new(client: async_nats::Client, subjects: &Subjects, options: StreamOptions) -> Self {
        NatsWorkspaces {
            js: jetstream::new(client),
            bucket: subjects.workspace_bucket(),
            options,
            store: OnceCell::new(),
        }
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
}

impl WorkspaceStore for NatsWorkspaces {
    fn put<'a>(
        &'a self,
        session: &'a SessionId,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, Result<String, BusError>> {
        Box::pin(async move {
            let store = self.store().await?;
            let mut reader = bytes;
            let info = store
                .put(session.as_str(), &mut reader)
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
        session: &'a SessionId,
    ) -> BoxFuture<'a, Result<Option<StoredWorkspace>, BusError>> {
        Box::pin(async move {
            let store = self.store().await?;
            let mut object = match store.get(session.as_str()).await {
                Ok(object) => object,
                Err(e) if e.kind() == object_store::GetErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(BusError::js("read a workspace", e)),
            };
            let digest = object.info.digest.clone().unwrap_or_default();
            let mut bytes = Vec::with_capacity(object.info.size);
            object
                .read_to_end(&mut bytes)
                .await
                .map_err(|e| BusError::js("read a workspace", e))?;
            Ok(Some(StoredWorkspace { bytes, digest }))
        })
    }

    fn purge<'a>(&'a self, sessions: &'a [SessionId]) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            let store = self.store().await?;
            for session in sessions {
                match store.delete(session.as_str()).await {
                    Ok(()) => {}
                    Err(e) if e.kind() == object_store::DeleteErrorKind::NotFound => {}
                    Err(e) => return Err(BusError::js("delete a workspace", e)),
                }
            }
            Ok(())
        })
    }
}
