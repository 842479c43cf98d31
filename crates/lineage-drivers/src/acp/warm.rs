//! Warm sandboxes (V2): a sandbox made before its session asks for one, so that a spawn does
//! not wait for bubblewrap to build it (user and pid namespaces, a mount namespace with a few
//! dozen bind mounts: some milliseconds, which would otherwise be on every ACP spawn's path).
//!
//! A [`WarmSandbox`] is a sandbox whose program is the node's `lineage-sandbox-exec`, waiting
//! on its stdin; its working directory is a fresh, empty directory the session takes over
//! (the node links `<data_dir>/work/<session>` to it). [`WarmSandbox::launch`] writes the
//! launch line ([`lineage_protocol::sandbox::SandboxLaunch`]: the profile's command,
//! environment and directory) and the waiter becomes the agent, on the same stdio. The
//! node keeps two per sandboxed profile in a [`WarmPool`] and makes the next one when a
//! session takes it.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use lineage_protocol::sandbox::SandboxLaunch;
use tokio::io::AsyncWriteExt;

use super::process::{Process, Spawned};
use crate::error::DriverError;
use crate::sandbox::{SandboxPlan, UidLease};

/// A sandbox waiting for its agent.
pub struct WarmSandbox {
    spawned: Spawned,
    workdir: PathBuf,
}

impl std::fmt::Debug for WarmSandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmSandbox")
            .field("workdir", &self.workdir)
            .finish_non_exhaustive()
    }
}

impl WarmSandbox {
    /// Starts `plan`'s sandbox with `waiter` (program, then arguments: the node's
    /// `lineage-sandbox-exec`) as its program, holding `lease` (its uid) as long as it lives.
    pub async fn start(
        plan: &SandboxPlan,
        waiter: &[String],
        lease: Option<UidLease>,
        label: &str,
    ) -> Result<WarmSandbox, DriverError> {
        // The waiter's own environment: only a PATH; the agent's comes with the launch line.
        let env = BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]);
        let mut spawned =
            Process::spawn(waiter, &plan.workdir, Some(&env), Some(plan), label).await?;
        spawned.process.hold(lease);
        Ok(WarmSandbox {
            spawned,
            workdir: plan.workdir.clone(),
        })
    }

    /// The working directory its session takes over.
    pub fn workdir(&self) -> &std::path::Path {
        &self.workdir
    }

    /// Whether it still waits (its first program has not exited).
    pub fn is_waiting(&mut self) -> bool {
        self.spawned.process.is_running()
    }

    /// Makes it run `command` (program, then arguments) with exactly `env` in `cwd`, for
    /// session `label`; the agent speaks on the returned stdio.
    pub(super) async fn launch(
        mut self,
        command: &[String],
        env: Option<&BTreeMap<String, String>>,
        cwd: &std::path::Path,
    ) -> Result<Spawned, String> {
        let launch = SandboxLaunch {
            argv: command.to_vec(),
            env: env
                .map(|e| e.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
                .unwrap_or_default(),
            cwd: cwd.display().to_string(),
        };
        let mut line = serde_json::to_vec(&launch).map_err(|e| e.to_string())?;
        line.push(b'\n');
        self.spawned
            .stdin
            .write_all(&line)
            .await
            .map_err(|e| format!("its warm sandbox did not take the launch: {e}"))?;
        self.spawned
            .stdin
            .flush()
            .await
            .map_err(|e| format!("its warm sandbox did not take the launch: {e}"))?;
        Ok(self.spawned)
    }
}

/// Warm sandboxes by profile name. Cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct WarmPool(Arc<Mutex<HashMap<String, Vec<WarmSandbox>>>>);

impl WarmPool {
    /// A waiting sandbox of `profile`, when there is one (dead ones are dropped).
    pub fn take(&self, profile: &str) -> Option<WarmSandbox> {
        let mut pool = self.0.lock().ok()?;
        let ready = pool.get_mut(profile)?;
        // Bounded: each pass removes one.
        while let Some(mut warm) = ready.pop() {
            if warm.is_waiting() {
                return Some(warm);
            }
        }
        None
    }

    /// Keeps `warm` for `profile`.
    pub fn put(&self, profile: &str, warm: WarmSandbox) {
        if let Ok(mut pool) = self.0.lock() {
            pool.entry(profile.to_owned()).or_default().push(warm);
        }
    }

    /// How many wait for `profile`.
    pub fn ready(&self, profile: &str) -> usize {
        self.0
            .lock()
            .ok()
            .and_then(|p| p.get(profile).map(Vec::len))
            .unwrap_or(0)
    }
}
