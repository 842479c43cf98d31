//! [`MemoryWorkspaces`]: the in-memory twin of the workspace store, with digests written as
//! NATS' Object Store writes them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::error::BusError;
use crate::ports::{BoxFuture, StoredWorkspace, WorkspaceStore};

/// Snapshots by object name, shared by every handle of one [`super::MemoryBus`].
#[derive(Clone, Default)]
pub struct MemoryWorkspaces {
    objects: Arc<Mutex<HashMap<String, StoredWorkspace>>>,
}

fn poisoned() -> BusError {
    BusError::JetStream {
        op: "workspace twin",
        reason: "its lock was poisoned".into(),
    }
}

impl WorkspaceStore for MemoryWorkspaces {
    fn put<'a>(
        &'a self,
        object: &'a str,
        bytes: &'a [u8],
    ) -> BoxFuture<'a, Result<String, BusError>> {
        Box::pin(async move {
            let digest = lineage_workspace::Digest::of(bytes).to_string();
            let mut objects = self.objects.lock().map_err(|_| poisoned())?;
            objects.insert(
                object.to_owned(),
                StoredWorkspace {
                    bytes: bytes.to_vec(),
                    digest: digest.clone(),
                },
            );
            Ok(digest)
        })
    }

    fn get<'a>(
        &'a self,
        object: &'a str,
    ) -> BoxFuture<'a, Result<Option<StoredWorkspace>, BusError>> {
        Box::pin(async move {
            let objects = self.objects.lock().map_err(|_| poisoned())?;
            Ok(objects.get(object).cloned())
        })
    }

    fn delete<'a>(&'a self, names: &'a [String]) -> BoxFuture<'a, Result<(), BusError>> {
        Box::pin(async move {
            let mut objects = self.objects.lock().map_err(|_| poisoned())?;
            for name in names {
                objects.remove(name);
            }
            Ok(())
        })
    }
}
