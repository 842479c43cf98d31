//! The demo workload of `lineage dev` (written against the running cluster).

use lineage_bus::control::ControlError;

use crate::cli::Global;
use crate::dev::DevCluster;

/// Runs the demo.
pub async fn run(_g: &Global, _cluster: &mut DevCluster) -> Result<(), ControlError> {
    Ok(())
}
