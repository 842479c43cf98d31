//! `lineage config show`: the effective config with each value's source (O1).

use lineage_bus::control::ControlError;
use lineage_node::config::{self, FlagOverrides};
use serde_json::json;

use crate::client::print_json;
use crate::global::Global;
use crate::output::usage;

/// Prints every config key with its value and where it came from.
pub(crate) fn show(g: &Global, file: Option<std::path::PathBuf>) -> Result<(), ControlError> {
    let flags = FlagOverrides {
        nats_url: g.nats.clone(),
        cluster: g.cluster.clone(),
        nats: crate::nats_auth::node_overrides(g)?,
        from_env: g.from_env.clone(),
    };
    let loaded = config::load(file.as_deref(), &flags).map_err(|e| usage(e.to_string()))?;
    let rows = loaded.with_sources();
    if g.json {
        let items: Vec<_> = rows
            .iter()
            .map(|(k, v, s)| json!({"key": k, "value": v, "source": s}))
            .collect();
        print_json(&items);
    } else {
        let width = rows.iter().map(|(k, _, _)| k.len()).max().unwrap_or(0);
        for (k, v, s) in rows {
            println!("{k:width$} = {v:30}  # {s}");
        }
    }
    Ok(())
}
