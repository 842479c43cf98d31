//! The agent a session runs, as a request names it (P1, T4), and what a node offers.

use serde::{Deserialize, Serialize};

/// What kind of agent a session runs: the provider in its descriptor (P1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "driver", rename_all = "kebab-case")]
pub enum AgentSpec {
    /// The deterministic scripted agent.
    Script {
        /// The script.
        script: crate::script::Script,
    },
    /// An ACP agent subprocess from a raw command line: refused unless the hosting node sets
    /// `agents.allow_raw_commands` (T4).
    Acp {
        /// Program and arguments.
        command: Vec<String>,
    },
    /// A profile of the hosting node's config (`[agents.<name>]`, T4): the node decides what
    /// runs.
    Profile {
        /// The profile's name.
        profile: String,
    },
}

/// Which driver a profile runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ProfileDriver {
    /// The scripted agent (no process).
    Script,
    /// An Agent Client Protocol agent subprocess on stdio.
    Acp,
    /// A remote A2A agent, reached at the card URL its profile names (A2): no process here.
    A2a,
}

impl ProfileDriver {
    /// `script`, `acp` or `a2a`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProfileDriver::Script => "script",
            ProfileDriver::Acp => "acp",
            ProfileDriver::A2a => "a2a",
        }
    }
}

/// One profile as `lineage agents` shows it: no command line, no environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct ProfileInfo {
    /// The name a spawn uses.
    pub name: String,
    /// `script` or `acp`.
    pub driver: ProfileDriver,
    /// Whether it gets the delegation tools.
    pub tools: bool,
    /// The operator's description.
    pub description: String,
    /// Whether `lineage a2a` offers it as an A2A agent (A1; absent: false).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub a2a: bool,
}
