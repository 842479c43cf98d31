//! An A2A profile's Agent Card, pure (A1): its name and description from the profile, one
//! skill, JSON-RPC at the agent's URL, streaming and push notifications on, and the bearer and
//! mutual TLS schemes the gateway asks for.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill,
    HttpAuthSecurityScheme, MutualTlsSecurityScheme, SecurityScheme, TRANSPORT_PROTOCOL_JSONRPC,
};
use lineage_protocol::agent::ProfileInfo;

/// The name of the bearer scheme in a card.
pub(crate) const BEARER: &str = "bearer";

/// The name of the mutual TLS scheme in a card.
pub(crate) const MTLS: &str = "mtls";

/// How a gateway authenticates its callers: a bearer token, a client certificate, both (each
/// call must show both), or neither (`--allow-anonymous` on loopback).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Auth {
    /// `Authorization: Bearer <token>`.
    pub bearer: bool,
    /// A client certificate signed by `--client-ca`.
    pub mtls: bool,
}

/// The card of `profile`, served at `url` (the agent's JSON-RPC endpoint).
pub(crate) fn card_of(profile: &ProfileInfo, url: &str, auth: Auth) -> AgentCard {
    let description = match profile.description.trim() {
        "" => format!("the lineage agent profile {}", profile.name),
        d => d.to_owned(),
    };
    let mut schemes = HashMap::new();
    if auth.bearer {
        schemes.insert(
            BEARER.to_owned(),
            SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                scheme: "Bearer".into(),
                bearer_format: None,
                description: Some("the token the gateway was started with".into()),
            }),
        );
    }
    if auth.mtls {
        schemes.insert(
            MTLS.to_owned(),
            SecurityScheme::MutualTls(MutualTlsSecurityScheme {
                description: Some(
                    "a client certificate signed by the CA the gateway trusts (--client-ca)".into(),
                ),
            }),
        );
    }
    // One requirement naming every scheme: a call shows all of them.
    let requirement: HashMap<String, Vec<String>> =
        schemes.keys().map(|k| (k.clone(), Vec::new())).collect();
    let (schemes, requirements) = match schemes.is_empty() {
        true => (None, None),
        false => (Some(schemes), Some(vec![requirement])),
    };
    AgentCard {
        name: profile.name.clone(),
        description: description.clone(),
        version: env!("CARGO_PKG_VERSION").into(),
        supported_interfaces: vec![AgentInterface::new(url, TRANSPORT_PROTOCOL_JSONRPC)],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(true),
            extensions: None,
            extended_agent_card: None,
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into()],
        skills: vec![AgentSkill {
            id: profile.name.clone(),
            name: profile.name.clone(),
            description,
            tags: vec!["lineage".into(), profile.driver.as_str().into()],
            examples: None,
            input_modes: None,
            output_modes: None,
            security_requirements: None,
        }],
        provider: Some(AgentProvider {
            organization: "lineage".into(),
            url: "https://github.com/lineage".into(),
        }),
        documentation_url: None,
        icon_url: None,
        security_schemes: schemes,
        security_requirements: requirements,
        signatures: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lineage_protocol::agent::ProfileDriver;

    #[test]
    fn a1_a_profile_is_a_card_with_its_skill_and_scheme() {
        let profile = ProfileInfo {
            name: "echo".into(),
            driver: ProfileDriver::Script,
            tools: false,
            description: "replies with its prompt".into(),
            a2a: true,
        };
        let bearer = Auth {
            bearer: true,
            mtls: false,
        };
        let card = card_of(&profile, "http://127.0.0.1:1/agents/echo", bearer);
        let json = serde_json::to_value(&card).unwrap();
        assert_eq!(json["name"], "echo");
        assert_eq!(json["skills"][0]["description"], "replies with its prompt");
        assert_eq!(json["capabilities"]["streaming"], true);
        assert_eq!(
            json["supportedInterfaces"][0]["url"],
            "http://127.0.0.1:1/agents/echo"
        );
        assert!(json["securitySchemes"][BEARER].is_object(), "{json}");
        let none = Auth {
            bearer: false,
            mtls: false,
        };
        let open = serde_json::to_value(card_of(&profile, "http://x/", none)).unwrap();
        assert!(open.get("securitySchemes").is_none());
        let both = Auth {
            bearer: true,
            mtls: true,
        };
        let json = serde_json::to_value(card_of(&profile, "https://x/", both)).unwrap();
        assert!(
            json["securitySchemes"][MTLS]["mtlsSecurityScheme"].is_object(),
            "{json}"
        );
        let wanted = &json["securityRequirements"][0]["schemes"];
        assert!(
            wanted[MTLS].is_object() && wanted[BEARER].is_object(),
            "{json}"
        );
    }
}
