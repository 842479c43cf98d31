//! Connecting to NATS the way NATS users do (Z1): credentials file, nkey seed, user and
//! password, token, TLS (CA, client certificate and key, `tls_required`).
//!
//! [`NatsConnect`] says how; [`NatsConnect::check`] refuses a half-configured setting with one
//! line naming the key, before any connection is tried; [`connect_with`] connects. Secrets are
//! read from files where a file is given, never logged, and never part of an error: a URL with
//! `user:password@` is shown with the password replaced ([`redact_url`]).

use std::path::{Path, PathBuf};

use crate::error::BusError;

/// How to authenticate: at most one of these.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum NatsAuth {
    /// No credentials (a server without authorization, or credentials in the URL).
    #[default]
    None,
    /// A NATS `.creds` file (user JWT + nkey seed), as `nats --creds`.
    Creds(PathBuf),
    /// An nkey user seed (`SU...`), read from a file.
    Nkey {
        /// The seed itself (read from the file the config names).
        seed: String,
    },
    /// User and password.
    UserPassword {
        /// The user.
        user: String,
        /// The password.
        password: String,
    },
    /// A token.
    Token(String),
}

impl std::fmt::Debug for NatsAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NatsAuth::None => write!(f, "None"),
            NatsAuth::Creds(path) => write!(f, "Creds({})", path.display()),
            NatsAuth::Nkey { .. } => write!(f, "Nkey(<redacted>)"),
            NatsAuth::UserPassword { user, .. } => {
                write!(f, "UserPassword({user}, <redacted>)")
            }
            NatsAuth::Token(_) => write!(f, "Token(<redacted>)"),
        }
    }
}

impl NatsAuth {
    /// A short, secret-free description for logs: `none`, `creds <path>`, `nkey`,
    /// `user <name>`, `token`.
    pub fn describe(&self) -> String {
        match self {
            NatsAuth::None => "none".into(),
            NatsAuth::Creds(path) => format!("creds {}", path.display()),
            NatsAuth::Nkey { .. } => "nkey".into(),
            NatsAuth::UserPassword { user, .. } => format!("user {user}"),
            NatsAuth::Token(_) => "token".into(),
        }
    }
}

/// TLS settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NatsTls {
    /// Refuse to talk to the server without TLS.
    pub required: bool,
    /// A PEM CA bundle that verifies the server's certificate.
    pub ca: Option<PathBuf>,
    /// A PEM client certificate and its key (mutual TLS).
    pub client: Option<(PathBuf, PathBuf)>,
}

impl NatsTls {
    /// True when any TLS setting is given.
    pub fn any(&self) -> bool {
        self.required || self.ca.is_some() || self.client.is_some()
    }
}

/// Everything needed to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NatsConnect {
    /// Server URL(s): `nats://host:port`, `tls://host:port`, comma-separated for a cluster.
    pub url: String,
    /// The connection name (`nats server report connections` shows it).
    pub name: String,
    /// Authentication.
    pub auth: NatsAuth,
    /// TLS.
    pub tls: NatsTls,
}

impl NatsConnect {
    /// No credentials, no TLS.
    pub fn plain(url: &str, name: &str) -> Self {
        NatsConnect {
            url: url.to_owned(),
            name: name.to_owned(),
            auth: NatsAuth::None,
            tls: NatsTls::default(),
        }
    }

    /// Refuses settings that cannot work, naming the key (`key_of` maps a setting to the name
    /// the caller's user knows it by, e.g. `nats.tls_cert` or `--tlscert`): files that do not
    /// exist, a `tls://` URL with TLS explicitly off is fine (the URL asks for TLS).
    pub fn check(&self, key_of: impl Fn(&str) -> String) -> Result<(), BusError> {
        let bad = |key: &str, what: String| BusError::Config(format!("{}: {what}", key_of(key)));
        let file = |key: &str, path: &Path| -> Result<(), BusError> {
            if path.is_file() {
                Ok(())
            } else {
                Err(bad(
                    key,
                    format!(
                        "{} is not a readable file; give the path of an existing file",
                        path.display()
                    ),
                ))
            }
        };
        if let NatsAuth::Creds(path) = &self.auth {
            file("creds", path)?;
        }
        if let Some(ca) = &self.tls.ca {
            file("tls_ca", ca)?;
        }
        if let Some((cert, key)) = &self.tls.client {
            file("tls_cert", cert)?;
            file("tls_key", key)?;
        }
        if self.url.trim().is_empty() {
            return Err(bad("url", "is empty; give nats://host:port".into()));
        }
        Ok(())
    }
}

/// Connects to NATS with the name lineage components use, so `nats server report connections`
/// tells them apart. No credentials, no TLS.
pub async fn connect(url: &str, name: &str) -> Result<async_nats::Client, BusError> {
    connect_with(&NatsConnect::plain(url, name)).await
}

/// Connects with `how` (credentials and TLS). With TLS required, a server that does not offer
/// it is refused: there is no plaintext fallback.
pub async fn connect_with(how: &NatsConnect) -> Result<async_nats::Client, BusError> {
    how.check(|k| format!("nats.{k}"))?;
    let shown = redact_url(&how.url);
    let tls_wanted = how.tls.required;
    let fail = |reason: String| {
        let lower = reason.to_ascii_lowercase();
        let hint = if lower.contains("authorization") || lower.contains("authentication") {
            "; check the NATS credentials (creds, nkey, user and password, or token)"
        } else if tls_wanted && (lower.contains("corrupt message") || lower.contains("tls")) {
            "; TLS is required but the server did not complete a TLS handshake: enable TLS on the server or check tls_ca"
        } else if lower.contains("tls") {
            "; the server requires TLS: use a tls:// URL or set tls_ca / tls_required"
        } else {
            "; start nats-server or pass --nats URL"
        };
        BusError::Connect {
            url: shown.clone(),
            reason: format!("{}{hint}", redact_text(&reason, how)),
        }
    };
    let mut options = async_nats::ConnectOptions::new().name(&how.name);
    options = match &how.auth {
        NatsAuth::None => options,
        NatsAuth::Creds(path) => options.credentials_file(path).await.map_err(|e| {
            fail(format!(
                "cannot read the creds file {}: {e}",
                path.display()
            ))
        })?,
        NatsAuth::Nkey { seed } => options.nkey(seed.trim().to_owned()),
        NatsAuth::UserPassword { user, password } => {
            options.user_and_password(user.clone(), password.clone())
        }
        NatsAuth::Token(token) => options.token(token.clone()),
    };
    let tls_url = how
        .url
        .split(',')
        .any(|u| u.trim().to_ascii_lowercase().starts_with("tls://"));
    if how.tls.required || tls_url {
        options = options.require_tls(true);
    }
    if let Some(ca) = &how.tls.ca {
        options = options.add_root_certificates(ca.clone());
    }
    if let Some((cert, key)) = &how.tls.client {
        options = options.add_client_certificate(cert.clone(), key.clone());
    }
    let addrs: Vec<async_nats::ServerAddr> = how
        .url
        .split(',')
        .map(|u| u.trim())
        .filter(|u| !u.is_empty())
        .map(|u| {
            u.parse::<async_nats::ServerAddr>()
                .map_err(|e| fail(format!("invalid server URL {}: {e}", redact_url(u))))
        })
        .collect::<Result<_, _>>()?;
    options
        .connect(addrs)
        .await
        .map_err(|e| fail(e.to_string()))
}

/// `url` with the password of a `user:password@` part replaced by `<redacted>` (a token-only
/// `token@` part too); each comma-separated URL on its own.
pub fn redact_url(url: &str) -> String {
    url.split(',')
        .map(|one| {
            let Some((scheme, rest)) = one.split_once("://") else {
                return one.to_owned();
            };
            let (authority, tail) = match rest.find('/') {
                Some(i) => rest.split_at(i),
                None => (rest, ""),
            };
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let shown = match userinfo.split_once(':') {
                        Some((user, _)) => format!("{user}:<redacted>"),
                        None => "<redacted>".to_owned(),
                    };
                    format!("{scheme}://{shown}@{host}{tail}")
                }
                None => one.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

/// `text` with every secret of `how` (password, token, nkey seed, URL passwords) replaced.
fn redact_text(text: &str, how: &NatsConnect) -> String {
    let mut out = text.replace(&how.url, &redact_url(&how.url));
    let mut secrets: Vec<String> = Vec::new();
    match &how.auth {
        NatsAuth::UserPassword { password, .. } => secrets.push(password.clone()),
        NatsAuth::Token(token) => secrets.push(token.clone()),
        NatsAuth::Nkey { seed } => secrets.push(seed.trim().to_owned()),
        NatsAuth::None | NatsAuth::Creds(_) => {}
    }
    for one in how.url.split(',') {
        if let Some((_, rest)) = one.split_once("://") {
            if let Some((userinfo, _)) = rest.rsplit_once('@') {
                match userinfo.split_once(':') {
                    Some((_, password)) => secrets.push(password.to_owned()),
                    None => secrets.push(userinfo.to_owned()),
                }
            }
        }
    }
    for secret in secrets.iter().filter(|s| s.len() >= 3) {
        out = out.replace(secret.as_str(), "<redacted>");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn z1_urls_are_shown_without_their_password() {
        assert_eq!(
            redact_url("nats://alice:s3cret@host:4222"),
            "nats://alice:<redacted>@host:4222"
        );
        assert_eq!(
            redact_url("nats://tok@host:4222,nats://h2:4222"),
            "nats://<redacted>@host:4222,nats://h2:4222"
        );
        assert_eq!(redact_url("nats://host:4222"), "nats://host:4222");
    }

    #[test]
    fn z1_debug_never_prints_a_secret() {
        let auth = NatsAuth::UserPassword {
            user: "u".into(),
            password: "hunter22".into(),
        };
        assert!(!format!("{auth:?}").contains("hunter22"));
        assert!(!format!("{:?}", NatsAuth::Token("tok-123".into())).contains("tok-123"));
        assert!(!format!(
            "{:?}",
            NatsAuth::Nkey {
                seed: "SUABC".into()
            }
        )
        .contains("SUABC"));
    }

    #[test]
    fn z1_missing_files_are_refused_naming_the_key() {
        let mut how = NatsConnect::plain("nats://127.0.0.1:1", "t");
        how.tls.client = Some(("/nonexistent/c.pem".into(), "/nonexistent/k.pem".into()));
        let err = how.check(|k| format!("nats.{k}")).unwrap_err().to_string();
        assert!(
            err.contains("nats.tls_cert") && err.contains("/nonexistent/c.pem"),
            "{err}"
        );
        how.tls.client = None;
        how.auth = NatsAuth::Creds("/nonexistent/u.creds".into());
        let err = how.check(|k| format!("--{k}")).unwrap_err().to_string();
        assert!(err.contains("--creds"), "{err}");
    }

    #[tokio::test]
    async fn z1_a_connect_error_never_echoes_the_password() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let how = NatsConnect::plain(&format!("nats://bob:pa55word@127.0.0.1:{port}"), "t");
        let err = connect_with(&how).await.unwrap_err().to_string();
        assert!(!err.contains("pa55word"), "{err}");
        assert!(err.contains("bob:<redacted>"), "{err}");
    }
}
