//! Benchmark scenarios.

use lineage_bus::control::ControlError;

use crate::cli::Global;

/// Runs a scenario.
pub async fn run(_g: &Global, _scenario: &str) -> Result<(), ControlError> {
    Ok(())
}
