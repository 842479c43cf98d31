//! How the CLI authenticates to NATS (Z1): natscli's flags and environment variables
//! (`--creds`/`NATS_CREDS`, `--nkey`/`NATS_NKEY`, `--user`/`NATS_USER`,
//! `--password`/`NATS_PASSWORD`, `--token`/`NATS_TOKEN`, `--tlsca`/`NATS_CA`,
//! `--tlscert`/`NATS_CERT`, `--tlskey`/`NATS_KEY`), and natscli contexts (`--context NAME`,
//! `NATS_CONTEXT`, or the one `nats context select` chose), read the way `nats` reads them:
//! flags and environment win over the context's values.
//!
//! For `lineage node` and `config show` the same flags become overrides of the node's `[nats]`
//! keys ([`node_overrides`]), so `config show` names them as the source.

use std::path::{Path, PathBuf};

use lineage_bus::control::{ControlError, ErrorCode};
use lineage_bus::{NatsAuth, NatsConnect, NatsTls};
use lineage_node::config::FlagValue;
use serde::Deserialize;

use crate::global::Global;
use crate::output::usage;

/// The fields of a natscli context file (`~/.config/nats/context/<name>.json`) lineage uses.
#[derive(Debug, Default, Deserialize)]
struct NatsContext {
    #[serde(default)]
    url: String,
    #[serde(default)]
    token: String,
    #[serde(default)]
    user: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    creds: String,
    #[serde(default)]
    nkey: String,
    #[serde(default)]
    cert: String,
    #[serde(default)]
    key: String,
    #[serde(default)]
    ca: String,
}

/// natscli's config directory: `$XDG_CONFIG_HOME/nats`, else `~/.config/nats`.
fn nats_config_dir() -> Option<PathBuf> {
    if let Some(x) = std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        return Some(PathBuf::from(x).join("nats"));
    }
    std::env::var_os("HOME").map(|h| Path::new(&h).join(".config").join("nats"))
}

/// The context to use: `--context`/`NATS_CONTEXT`, else the selected one (`context.txt`),
/// else none. A named context that does not exist is an error; a missing selection is not.
fn load_context(g: &Global) -> Result<Option<(String, NatsContext)>, ControlError> {
    let dir = nats_config_dir();
    let (name, explicit) = match &g.context {
        Some(name) => (name.clone(), true),
        None => match dir
            .as_ref()
            .and_then(|d| std::fs::read_to_string(d.join("context.txt")).ok())
        {
            Some(selected) if !selected.trim().is_empty() => (selected.trim().to_owned(), false),
            _ => return Ok(None),
        },
    };
    if name.contains('/') || name.contains("..") {
        return Err(usage(format!(
            "--context {name:?}: a context name has no '/' or '..'"
        )));
    }
    let Some(dir) = dir else {
        return Err(usage(
            "--context: HOME is not set, so there is no natscli context directory",
        ));
    };
    let path = dir.join("context").join(format!("{name}.json"));
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(_) if !explicit => return Ok(None),
        Err(e) => {
            return Err(usage(format!(
                "natscli context {name:?} not found at {}: {e}; list them with `nats context ls`",
                path.display()
            )))
        }
    };
    let context: NatsContext = serde_json::from_str(&text).map_err(|e| {
        usage(format!(
            "natscli context {} is not valid JSON: {e}; fix it with `nats context edit {name}`",
            path.display()
        ))
    })?;
    Ok(Some((name, context)))
}

fn pick(flag: &Option<String>, context: &str) -> Option<String> {
    flag.clone()
        .filter(|v| !v.is_empty())
        .or_else(|| (!context.is_empty()).then(|| context.to_owned()))
}

/// The URL a client verb uses: `--nats`/`NATS_URL`, else the context's, else the default.
fn client_url(g: &Global, context: Option<&NatsContext>) -> String {
    pick(&g.nats, context.map(|c| c.url.as_str()).unwrap_or(""))
        .unwrap_or_else(|| crate::global::DEFAULT_NATS.to_owned())
}

/// How a client verb connects: flags and environment over the natscli context. Half-configured
/// settings (a password without a user, two kinds of credentials, a certificate without its
/// key) are refused with one line naming the flag.
pub(crate) fn client_connect(g: &Global, name: &str) -> Result<NatsConnect, ControlError> {
    let loaded = load_context(g)?;
    let ctx = loaded.as_ref().map(|(_, c)| c);
    let empty = NatsContext::default();
    let c = ctx.unwrap_or(&empty);
    let creds = pick(&g.creds, &c.creds);
    let nkey = pick(&g.nkey, &c.nkey);
    let user = pick(&g.user, &c.user);
    let password = pick(&g.password, &c.password);
    let token = pick(&g.token, &c.token);
    let set: Vec<&str> = [
        ("--creds", creds.is_some()),
        ("--nkey", nkey.is_some()),
        ("--user", user.is_some()),
        ("--token", token.is_some()),
    ]
    .into_iter()
    .filter(|(_, s)| *s)
    .map(|(k, _)| k)
    .collect();
    if set.len() > 1 {
        return Err(usage(format!(
            "{} and {} are both set (flags, NATS_* environment or the natscli context); give one kind of NATS credentials",
            set[0], set[1]
        )));
    }
    let auth = if let Some(path) = creds {
        NatsAuth::Creds(PathBuf::from(path))
    } else if let Some(path) = nkey {
        let seed = std::fs::read_to_string(&path).map_err(|e| {
            usage(format!(
                "--nkey {path}: cannot read the seed file: {e}; give a readable file"
            ))
        })?;
        NatsAuth::Nkey { seed }
    } else if let Some(user) = user {
        let Some(password) = password else {
            return Err(usage(format!(
                "--user {user} has no password; pass --password (or NATS_PASSWORD)"
            )));
        };
        NatsAuth::UserPassword { user, password }
    } else if password.is_some() {
        return Err(usage(
            "--password is set but no user; pass --user (or NATS_USER) too",
        ));
    } else if let Some(token) = token {
        NatsAuth::Token(token)
    } else {
        NatsAuth::None
    };
    let cert = pick(&g.tlscert, &c.cert);
    let key = pick(&g.tlskey, &c.key);
    let client = match (cert, key) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
        (Some(_), None) => return Err(usage("--tlscert is set without --tlskey; pass both")),
        (None, Some(_)) => return Err(usage("--tlskey is set without --tlscert; pass both")),
    };
    let ca = pick(&g.tlsca, &c.ca).map(PathBuf::from);
    let tls = NatsTls {
        required: g.tls_required || ca.is_some() || client.is_some(),
        ca,
        client,
    };
    let how = NatsConnect {
        url: client_url(g, ctx),
        name: name.to_owned(),
        auth,
        tls,
    };
    how.check(|k| match k {
        "tls_ca" => "--tlsca".into(),
        "tls_cert" => "--tlscert".into(),
        "tls_key" => "--tlskey".into(),
        "url" => "--nats".into(),
        other => format!("--{other}"),
    })
    .map_err(|e| ControlError::new(ErrorCode::BadRequest, e.to_string()))?;
    Ok(how)
}

/// The auth flags as overrides of a node's `[nats]` keys (`lineage node`, `config show`). A
/// natscli context is a client's, not a node's: `--context` is refused here.
pub(crate) fn node_overrides(
    g: &Global,
) -> Result<Vec<(&'static str, FlagValue, &'static str)>, ControlError> {
    if g.context.is_some() {
        return Err(usage(
            "--context is for client verbs; a node reads its [nats] keys (config, LINEAGE_NATS__*, or --creds/--user/... flags)",
        ));
    }
    let mut out = Vec::new();
    let strings: [(&'static str, &Option<String>, &'static str); 8] = [
        ("creds", &g.creds, "--creds"),
        ("nkey_seed_file", &g.nkey, "--nkey"),
        ("user", &g.user, "--user"),
        ("password", &g.password, "--password"),
        ("token", &g.token, "--token"),
        ("tls_ca", &g.tlsca, "--tlsca"),
        ("tls_cert", &g.tlscert, "--tlscert"),
        ("tls_key", &g.tlskey, "--tlskey"),
    ];
    for (key, value, name) in strings {
        if let Some(v) = value {
            out.push((key, FlagValue::Str(v.clone()), name));
        }
    }
    if g.tls_required {
        out.push(("tls_required", FlagValue::Bool(true), "--tls-required"));
    }
    Ok(out)
}
