//! An A2A profile's Agent Card, pure (A1): its name and description from the profile, one
//! skill, JSON-RPC at the agent's URL, streaming and push notifications on, and the bearer
//! scheme when the gateway asks for a token.

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentProvider, AgentSkill,
    HttpAuthSecurityScheme, SecurityScheme, TRANSPORT_PROTOCOL_JSONRPC,
};
use lineage_protocol::agent::ProfileInfo;

/// The name of the bearer scheme in a card.
pub(crate) const BEARER: &str = "bearer";

/// The card of `profile`, served at `url` (the agent's JSON-RPC endpoint).
pub(crate) fn card_of(profile: &ProfileInfo, url: &str, bearer: bool) -> AgentCard {
    let description = match profile.description.trim() {
        "" => format!("the lineage agent profile {}", profile.name),
        d => d.to_owned(),
    };
    let (schemes, requirements) = match bearer {
        false => (None, None),
        true => (
            Some(HashMap::from([(
                BEARER.to_owned(),
                SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                    scheme: "Bearer".into(),
                    bearer_format: None,
                    description: Some("the token the gateway was started with".into()),
                }),
            )])),
            Some(vec![HashMap::from([(BEARER.to_owned(), Vec::new())])]),
        ),
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
        let card = card_of(&profile, "http://127.0.0.1:1/agents/echo", true);
        let json = serde_json::to_value(&card).unwrap();
        assert_eq!(json["name"], "echo");
        assert_eq!(json["skills"][0]["description"], "replies with its prompt");
        assert_eq!(json["capabilities"]["streaming"], true);
        assert_eq!(
            json["supportedInterfaces"][0]["url"],
            "http://127.0.0.1:1/agents/echo"
        );
        assert!(json["securitySchemes"][BEARER].is_object(), "{json}");
        let open = serde_json::to_value(card_of(&profile, "http://x/", false)).unwrap();
        assert!(open.get("securitySchemes").is_none());
    }
}
