//! What a hosted agent's driver is given of its session's creation window (C4) and of its
//! request: [`driver_composition`], the same at birth and at every resume.

use super::AgentInit;

/// What the driver is given of the session's creation window (C4): its preset's prompt
/// sections (the delegation statement and persona included), its tool filter, and its policy
/// view (a child's is its delegated snapshot: sandbox mode, and approval `never` when its
/// parent had an approval service). The same at birth and at every resume.
pub(crate) fn driver_composition(init: &AgentInit) -> lineage_drivers::driver::DriverComposition {
    let delegated = init.header.parent_session().is_some();
    lineage_drivers::driver::DriverComposition {
        delegated,
        prompt_sections: init
            .preset
            .as_ref()
            .map(|p| p.prompt_sections.clone())
            .unwrap_or_default(),
        tool_filter: init
            .descriptor
            .as_ref()
            .and_then(|d| d.composition().tool_filter),
        sandbox_mode: init.policy_view.sandbox_override,
        approval: (delegated && init.policy_view.has_approval_service)
            .then_some(lineage_core::policy::ApprovalPolicy::Never),
        approval_service: !delegated && init.policy_view.has_approval_service,
        // A root's request directory (relative, no `..`); a child inherits the header's `cwd`
        // but works in its own working directory (its subdirectory need not exist there).
        cwd: match delegated {
            true => None,
            false => lineage_drivers::profiles::request_subdir(init.header.cwd())
                .ok()
                .flatten(),
        },
        mcp_servers: match delegated {
            true => Vec::new(),
            false => init.mcp_servers.clone(),
        },
    }
}
