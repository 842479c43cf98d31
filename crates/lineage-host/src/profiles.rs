//! Agent profiles (T4): a re-export of [`lineage_drivers::profiles`], with the two checks the
//! host calls ([`check_offer`], [`request_subdir`]) answering in [`HostError`] (same text).

use std::path::PathBuf;

use lineage_drivers::driver::AgentSpec;

use crate::control::AgentsReply;
use crate::error::HostError;

pub use lineage_drivers::profiles::*;

/// [`lineage_drivers::profiles::check_offer`], its refusal as a [`HostError`].
pub fn check_offer(offer: &AgentsReply, spec: &AgentSpec) -> Result<(), HostError> {
    lineage_drivers::profiles::check_offer(offer, spec).map_err(HostError::from)
}

/// [`lineage_drivers::profiles::request_subdir`], its refusal as a [`HostError`].
pub fn request_subdir(cwd: Option<&str>) -> Result<Option<PathBuf>, HostError> {
    lineage_drivers::profiles::request_subdir(cwd).map_err(HostError::from)
}
