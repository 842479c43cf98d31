//! Warm sandboxes (V2): the node keeps two sandboxes made ahead for each sandboxed profile whose
//! sessions work in a directory of their own, so that a spawn does not wait for bubblewrap
//! (`lineage_drivers::acp::warm`). A new session of the profile takes it over: its working
//! directory `<data_dir>/work/<session>` becomes a link to the sandbox's fresh directory
//! (`<data_dir>/work/.spare-<id>`, which the sandbox shows at its own path, then and on every
//! later resume), and the node makes the next one. A resumed session (its directory exists),
//! or a spawn that finds none ready, makes its sandbox on its own path as before.

use std::path::PathBuf;

use lineage_core::ids::SessionId;
use lineage_drivers::acp::WarmSandbox;
use lineage_drivers::driver::AgentSpec;
use lineage_drivers::profiles::{AcpLaunch, Admitted, ProfileDriver};
use lineage_drivers::sandbox::Isolation;

use crate::drivers::{finish_plan, relocate, NodeDrivers};

/// How many sandboxes wait for each profile: with two, a session that takes one finds the
/// other ready while the node makes the next (which competes for the CPU for a few
/// milliseconds with the agents starting meanwhile).
const WARM_PER_PROFILE: usize = 2;

/// How long after a session took a warm sandbox of its profile the node makes the next.
const REFILL_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

/// The program a warm sandbox waits in (`crates/lineage/src/bin/lineage-sandbox-exec.rs`).
const WAITER: &str = "lineage-sandbox-exec";

/// The prefix of a warm sandbox's directory under `<data_dir>/work`.
const SPARE_PREFIX: &str = ".spare-";

impl NodeDrivers {
    /// Makes a warm sandbox for every profile that gets them (in the background), after
    /// removing the empty directories of sandboxes an earlier run made and nobody took.
    pub fn start_warming(&self) {
        let work = self.data_dir.join("work");
        if let Ok(entries) = std::fs::read_dir(&work) {
            let entries: Vec<std::fs::DirEntry> = entries.flatten().collect();
            // A sandbox a session took over is its working directory (linked from its name),
            // empty or not; only the others go.
            let taken: std::collections::HashSet<std::ffi::OsString> = entries
                .iter()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .map(PathBuf::into_os_string)
                .collect();
            for entry in &entries {
                let name = entry.file_name();
                if name.to_string_lossy().starts_with(SPARE_PREFIX) && !taken.contains(&name) {
                    // Only an empty one goes, whatever happened.
                    let _ = std::fs::remove_dir(entry.path());
                }
            }
        }
        for profile in self.warmed_profiles() {
            for _ in 0..WARM_PER_PROFILE {
                self.warm_up(profile.clone(), std::time::Duration::ZERO);
            }
        }
    }

    /// The profiles whose sessions get warm sandboxes: ACP, sandboxed on this node, a working
    /// directory of their own.
    fn warmed_profiles(&self) -> Vec<String> {
        if self.profiles.bwrap.is_none() {
            return Vec::new();
        }
        self.profiles
            .profiles
            .iter()
            .filter(|(_, p)| {
                p.driver == ProfileDriver::Acp
                    && p.isolation != Isolation::None
                    && p.workdir == "session"
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Takes the warm sandbox of `spec`'s profile for a new session (its working directory
    /// does not exist yet), moving `launch` into it; starts making the next one.
    pub(crate) fn claim_warm(
        &self,
        spec: &AgentSpec,
        session: &SessionId,
        launch: &mut AcpLaunch,
    ) -> Option<WarmSandbox> {
        let AgentSpec::Profile { profile } = spec else {
            return None;
        };
        let own = self.data_dir.join("work").join(session.as_str());
        if launch.sandbox.is_none()
            || launch.workdir != own
            || std::fs::symlink_metadata(&own).is_ok()
        {
            return None;
        }
        let warm = self.warm.take(profile)?;
        let spare = warm.workdir().to_path_buf();
        let linked = spare
            .file_name()
            .map(|name| std::os::unix::fs::symlink(name, &own));
        if !matches!(linked, Some(Ok(()))) {
            tracing::info!(%session, "cannot link the session's working directory to a warm sandbox; making one");
            return None;
        }
        relocate(launch, spare);
        if let Some(plan) = launch.sandbox.as_mut() {
            finish_plan(plan, launch.tools, self.tools.as_ref());
        }
        tracing::debug!(%session, %profile, "the session takes a warm sandbox over");
        // The next one a little later, once the agent that starts now had the CPU.
        self.warm_up(profile.clone(), REFILL_AFTER);
        Some(warm)
    }

    /// Makes one warm sandbox of `profile` after `delay`, in the background.
    fn warm_up(&self, profile: String, delay: std::time::Duration) {
        let drivers = self.clone();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            tokio::time::sleep(delay).await;
            match drivers.make_warm(&profile).await {
                Ok(warm) => drivers.warm.put(&profile, warm),
                Err(why) => {
                    tracing::info!(%profile, why = %why, "no warm sandbox: its spawns make their own")
                }
            }
        });
    }

    async fn make_warm(&self, profile: &str) -> Result<WarmSandbox, String> {
        let env = |name: &str| std::env::var(name).ok();
        let spec = AgentSpec::Profile {
            profile: profile.to_owned(),
        };
        let launch = match self.profiles.admit(&spec, None, &self.data_dir, &env) {
            Ok(Admitted::Acp(launch)) => *launch,
            Ok(Admitted::Script(_)) => return Err("a script profile runs no process".into()),
            Ok(Admitted::A2a(_)) => return Err("an a2a profile runs no process here".into()),
            Err(e) => return Err(e.to_string()),
        };
        let Some(mut plan) = launch.sandbox else {
            return Err("the profile runs without a sandbox".into());
        };
        let spare: PathBuf = self
            .data_dir
            .join("work")
            .join(format!("{SPARE_PREFIX}{}", uuid::Uuid::new_v4().simple()));
        {
            use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&spare)
                .and_then(|()| {
                    std::fs::set_permissions(&spare, std::fs::Permissions::from_mode(0o700))
                })
                .map_err(|e| format!("cannot create {}: {e}", spare.display()))?;
        }
        plan.workdir = spare;
        finish_plan(&mut plan, launch.tools, self.tools.as_ref());
        let lease = match &self.uids {
            Some(uids) => {
                let lease = uids
                    .take(rand_hint())
                    .ok_or("every uid of agents.sandbox_uids runs a live session")?;
                lineage_drivers::sandbox::chown_tree(&plan.workdir, lease.uid)
                    .map_err(|e| format!("cannot hand {} over: {e}", plan.workdir.display()))?;
                plan.uid = Some(lease.uid);
                Some(lease)
            }
            None => None,
        };
        let waiter = sandbox_waiter()?;
        plan.read_only.push(waiter.clone());
        let waiter = vec![waiter.display().to_string()];
        WarmSandbox::start(&plan, &waiter, lease, &format!("warm:{profile}"))
            .await
            .map_err(|e| e.to_string())
    }
}

/// A warm sandbox's first program: `lineage-sandbox-exec`, beside this node's `lineage`.
fn sandbox_waiter() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot name this program: {e}"))?;
    let waiter = exe.with_file_name(WAITER);
    if waiter.is_file() {
        Ok(waiter)
    } else {
        Err(format!(
            "{WAITER} is not beside {} (build it with `cargo build -p lineage --bins`, or install both)",
            exe.display()
        ))
    }
}

/// A uid slot to start probing from.
fn rand_hint() -> u64 {
    u64::from(uuid::Uuid::new_v4().as_u128() as u32)
}
