//! Loading: defaults, the TOML file, `LINEAGE_` variables and flags merged with figment,
//! each value's source kept for errors and `lineage config show`.

use std::collections::BTreeMap;
use std::path::Path;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};

use crate::error::NodeError;

use super::explain;
use super::validate::validate;
use super::{NodeConfig, REDACTED, SECRET_KEYS};

/// Overrides from command-line flags (highest precedence).
#[derive(Debug, Clone, Default)]
pub struct FlagOverrides {
    /// `--nats`.
    pub nats_url: Option<String>,
    /// `--cluster`.
    pub cluster: Option<String>,
    /// `[nats]` keys set by flags (`--creds`, `--user`, ...): (key under `nats.`, value, flag).
    pub nats: Vec<(&'static str, FlagValue, &'static str)>,
    /// Flags whose value came from their environment variable, not the command line: flag
    /// (`--nats`) -> variable (`NATS_URL`), so a value's source is named truly.
    pub from_env: BTreeMap<String, String>,
}

impl FlagOverrides {
    /// How a value set through `flag` is labelled: `NATS_URL environment variable` when it
    /// came from the flag's variable, else `--nats flag`.
    fn label(&self, flag: &str) -> String {
        match self.from_env.get(flag) {
            Some(var) => format!("{var} environment variable"),
            None => format!("{flag} flag"),
        }
    }
}

/// A flag's value.
#[derive(Debug, Clone)]
pub enum FlagValue {
    /// A string.
    Str(String),
    /// A switch.
    Bool(bool),
}

/// The merged sources, kept so `lineage config show` can say where each value came from.
pub struct LoadedConfig {
    /// The validated config.
    pub config: NodeConfig,
    figment: Figment,
}

impl LoadedConfig {
    /// Each leaf key with its value and the source it came from, in key order.
    pub fn with_sources(&self) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let dict = match Serialized::defaults(&self.config).data() {
            Ok(mut profiles) => profiles
                .remove(&figment::Profile::Default)
                .unwrap_or_default(),
            Err(_) => Dict::new(),
        };
        flatten("", &dict, &mut out);
        out.into_iter()
            .map(|(key, value)| {
                let source = describe(self.figment.find_metadata(&key));
                (key, value, source)
            })
            .collect()
    }
}

fn flatten(prefix: &str, dict: &Dict, out: &mut Vec<(String, String)>) {
    for (k, v) in dict {
        let key = if prefix.is_empty() {
            k.clone()
        } else {
            format!("{prefix}.{k}")
        };
        match v {
            Value::Dict(_, inner)
                if !key.ends_with("voters")
                    && !key.ends_with(".peers")
                    && !key.ends_with(".env") =>
            {
                flatten(&key, inner, out)
            }
            Value::String(_, s) if SECRET_KEYS.contains(&key.as_str()) && !s.is_empty() => {
                out.push((key, REDACTED.to_owned()))
            }
            Value::String(_, s) if key == "nats_url" => {
                out.push((key, format!("{:?}", lineage_bus::redact_url(s))))
            }
            other => out.push((key, value_text(other))),
        }
    }
}

fn value_text(v: &Value) -> String {
    match v {
        Value::String(_, s) => format!("{s:?}"),
        Value::Char(_, c) => format!("{c:?}"),
        Value::Bool(_, b) => b.to_string(),
        Value::Num(_, n) => n
            .to_u128()
            .map(|u| u.to_string())
            .or_else(|| n.to_i128().map(|i| i.to_string()))
            .or_else(|| n.to_f64().map(|f| f.to_string()))
            .unwrap_or_else(|| format!("{n:?}")),
        Value::Empty(_, _) => "none".into(),
        Value::Dict(_, d) => {
            let inner: Vec<String> = d
                .iter()
                .map(|(k, v)| format!("{k} = {}", value_text(v)))
                .collect();
            format!("{{ {} }}", inner.join(", "))
        }
        Value::Array(_, items) => {
            let inner: Vec<String> = items.iter().map(value_text).collect();
            format!("[{}]", inner.join(", "))
        }
    }
}

/// One value set by a command-line flag (top level, or under a table), named after the flag
/// for `config show`.
struct Flag {
    table: Option<&'static str>,
    key: &'static str,
    value: Value,
    name: String,
}

impl Flag {
    fn new(key: &'static str, value: &str, name: String) -> Self {
        Flag {
            table: None,
            key,
            value: Value::from(value.to_owned()),
            name,
        }
    }
}

impl Provider for Flag {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.name.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        let mut dict = Dict::new();
        dict.insert(self.key.to_owned(), self.value.clone());
        let dict = match self.table {
            None => dict,
            Some(table) => Dict::from([(table.to_owned(), Value::from(dict))]),
        };
        Ok(Profile::Default.collect(dict))
    }
}

/// The top-level config keys; `LINEAGE_*` variables outside them (say `LINEAGE_TEST_THREADS`
/// of the test script) are someone else's and are not read as config.
pub const TOP_LEVEL_KEYS: [&str; 11] = [
    "cluster",
    "nats_url",
    "node",
    "registry",
    "limits",
    "lease",
    "nats",
    "agents",
    "tools",
    "retention",
    "shutdown",
];

/// `LINEAGE_` environment variables, `__` for nesting, restricted to [`TOP_LEVEL_KEYS`].
pub fn lineage_env() -> Env {
    Env::prefixed("LINEAGE_").split("__").filter(|key| {
        let key = key.as_str().to_ascii_lowercase();
        let first = key.split(['.']).next().unwrap_or("");
        let first = first.split("__").next().unwrap_or("");
        TOP_LEVEL_KEYS.contains(&first)
    })
}

/// Loads the config: defaults, then `file` (if given; it must exist), then `LINEAGE_` env, then
/// flags; then validates it.
pub fn load(file: Option<&Path>, flags: &FlagOverrides) -> Result<LoadedConfig, NodeError> {
    load_with_env(file, flags, lineage_env())
}

/// [`load`] with an explicit environment provider (tests use `Env::prefixed` over a jail).
pub fn load_with_env(
    file: Option<&Path>,
    flags: &FlagOverrides,
    env: Env,
) -> Result<LoadedConfig, NodeError> {
    let mut figment = Figment::from(Serialized::defaults(NodeConfig::default()));
    if let Some(path) = file {
        if !path.is_file() {
            return Err(NodeError::Config(format!(
                "config file {} does not exist; pass an existing file to --config",
                path.display()
            )));
        }
        figment = figment.merge(Toml::file(path));
    }
    figment = figment.merge(env);
    if let Some(url) = &flags.nats_url {
        figment = figment.merge(Flag::new("nats_url", url, flags.label("--nats")));
    }
    if let Some(cluster) = &flags.cluster {
        figment = figment.merge(Flag::new("cluster", cluster, flags.label("--cluster")));
    }
    for (key, value, name) in &flags.nats {
        let value = match value {
            FlagValue::Str(s) => Value::from(s.clone()),
            FlagValue::Bool(b) => Value::from(*b),
        };
        figment = figment.merge(Flag {
            table: Some("nats"),
            key,
            value,
            name: flags.label(name),
        });
    }
    let config: NodeConfig = figment.extract().map_err(|e| config_error(&figment, e))?;
    validate(&config, &figment)?;
    Ok(LoadedConfig { config, figment })
}

fn config_error(figment: &Figment, e: figment::Error) -> NodeError {
    let mut lines = Vec::new();
    for err in e {
        let key = if err.path.is_empty() {
            String::new()
        } else {
            err.path.join(".")
        };
        let metadata = err
            .metadata
            .as_ref()
            .or_else(|| figment.find_metadata(&key));
        let source = match metadata {
            // The variable by its name, not "`LINEAGE_` environment variable(s)".
            Some(m) if m.name.contains("LINEAGE_") && !key.is_empty() => {
                format!("environment variable {}", explain::env_var_of(&key))
            }
            // The TOML file with the key's line, when it can be found.
            Some(Metadata {
                source: Some(figment::Source::File(path)),
                ..
            }) if !key.is_empty() => match explain::toml_line_in(path, &key) {
                Some(line) => format!("{}, line {line}", path.display()),
                None => describe(metadata),
            },
            _ => describe(metadata),
        };
        let what = explain::plain(&err.kind.to_string());
        if key.is_empty() {
            lines.push(format!("invalid config: {what} (from {source})"));
        } else {
            lines.push(format!("invalid config key {key}: {what} (from {source})"));
        }
    }
    NodeError::Config(lines.join("; "))
}

pub(super) fn source_of(figment: &Figment, key: &str) -> String {
    describe(figment.find_metadata(key))
}

/// Names a value's source for humans: `default`, `TOML file (path)`, `` `LINEAGE_` environment
/// variable(s) ``, `--nats flag`.
fn describe(metadata: Option<&Metadata>) -> String {
    match metadata {
        None => "default".into(),
        Some(m) if m.name.contains("NodeConfig") => "default".into(),
        Some(m) => match &m.source {
            Some(src) => format!("{} ({src})", m.name),
            None => m.name.to_string(),
        },
    }
}
