//! The child's creation-window composition (C1, seed §6.1).
//!
//! In the creation window, before the child is published, [`apply_child_composition`] builds
//! what the child runs with, in three layers:
//!
//! 1. it joins the parent's composed preset (tools and prompt sections);
//! 2. it adds the fixed delegation statement [`SUBAGENT_DELEGATION_CONTEXT`] as section
//!    `subagent:delegation` (order 120);
//! 3. it adds the optional persona as section `deployment:persona` (order 0) and narrows the
//!    tools to the optional filter.
//!
//! The two sections this module writes are per child: sections of the same names in the
//! parent's preset (present when the parent is itself a subagent) are not inherited, so a
//! grandchild gets exactly one delegation statement and only its own persona.

use serde::{Deserialize, Serialize};

use crate::header::{AgentPreset, PromptSection};

/// The fixed statement every delegated child gets in its system prompt (C1).
pub const SUBAGENT_DELEGATION_CONTEXT: &str = "You are a delegated subagent: another agent, your parent, started you to carry out one task on its behalf. Your permissions were fixed when you were delegated: the sandbox and approval policy you run under cannot be widened, and no human is available to approve actions for you, so an action that needs approval will be refused; work within those limits rather than trying to get around them. Stay on the task you were given and report your results, including what you could not do and why, to your parent.";

/// Name of the prompt section that holds [`SUBAGENT_DELEGATION_CONTEXT`].
pub const DELEGATION_SECTION: &str = "subagent:delegation";
/// Sort order of the delegation section.
pub const DELEGATION_SECTION_ORDER: i64 = 120;
/// Name of the prompt section that holds a child's persona.
pub const PERSONA_SECTION: &str = "deployment:persona";
/// Sort order of the persona section (first).
pub const PERSONA_SECTION_ORDER: i64 = 0;

/// The per-child part of a composition: an optional persona and tool filter.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ChildComposition {
    /// Persona text, added as the `deployment:persona` section.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persona: Option<String>,
    /// Tool names the child may use; `None` keeps all of the parent's tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_filter: Option<Vec<String>>,
}

/// What a child runs with after composition.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ComposedChild {
    /// The child's tools, in the parent's order.
    pub tools: Vec<String>,
    /// The child's prompt sections, sorted by `order` (stable: ties keep their order).
    pub prompt_sections: Vec<PromptSection>,
}

impl ComposedChild {
    /// The composition as a preset named `name`: what a grandchild joins.
    pub fn to_preset(&self, name: impl Into<String>) -> AgentPreset {
        AgentPreset {
            name: name.into(),
            tools: self.tools.clone(),
            prompt_sections: self.prompt_sections.clone(),
        }
    }
}

/// The preset a child runs with (C1): its parent's preset composed with the child's
/// composition, named after the parent's preset (`subagent` when the parent has none). The
/// same at birth and at every resume.
pub fn child_preset(
    parent_preset: Option<&AgentPreset>,
    composition: &ChildComposition,
) -> AgentPreset {
    let name = parent_preset
        .map(|p| p.name.clone())
        .unwrap_or_else(|| "subagent".to_owned());
    apply_child_composition(parent_preset, composition).to_preset(name)
}

/// The tool filter a child is born with (C1: it joins its parent's composition, so it can only
/// narrow): its own filter within its parent's, the parent's when it names none, its own when
/// the parent has none, `None` (every tool) when neither has one. Kept in the parent's order
/// for an own filter narrowed by the parent's; names outside the parent's filter are dropped.
pub fn inherit_tool_filter(
    parent: Option<&[String]>,
    own: Option<Vec<String>>,
) -> Option<Vec<String>> {
    match (parent, own) {
        (None, own) => own,
        (Some(parent), None) => Some(parent.to_vec()),
        (Some(parent), Some(own)) => Some(
            parent
                .iter()
                .filter(|tool| own.contains(tool))
                .cloned()
                .collect(),
        ),
    }
}

/// Composes a child in its creation window (C1): the parent preset's tools and sections (none
/// without a preset), plus the delegation section, plus the persona section if given, with the
/// tools narrowed to the filter if given.
///
/// A filter can only narrow: the result is the intersection with the parent's tools, in the
/// parent's order, and filter names the parent does not have are ignored. Duplicate tool names
/// are kept once.
pub fn apply_child_composition(
    parent_preset: Option<&AgentPreset>,
    composition: &ChildComposition,
) -> ComposedChild {
    let mut tools: Vec<String> = Vec::new();
    for tool in parent_preset
        .map(|p| p.tools.as_slice())
        .unwrap_or_default()
    {
        let allowed = composition
            .tool_filter
            .as_ref()
            .is_none_or(|filter| filter.contains(tool));
        if allowed && !tools.contains(tool) {
            tools.push(tool.clone());
        }
    }

    let mut prompt_sections: Vec<PromptSection> = parent_preset
        .map(|p| p.prompt_sections.as_slice())
        .unwrap_or_default()
        .iter()
        .filter(|s| s.name != DELEGATION_SECTION && s.name != PERSONA_SECTION)
        .cloned()
        .collect();
    prompt_sections.push(PromptSection {
        name: DELEGATION_SECTION.to_owned(),
        order: DELEGATION_SECTION_ORDER,
        text: SUBAGENT_DELEGATION_CONTEXT.to_owned(),
    });
    if let Some(persona) = &composition.persona {
        prompt_sections.push(PromptSection {
            name: PERSONA_SECTION.to_owned(),
            order: PERSONA_SECTION_ORDER,
            text: persona.clone(),
        });
    }
    prompt_sections.sort_by_key(|s| s.order);

    ComposedChild {
        tools,
        prompt_sections,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(name: &str, order: i64) -> PromptSection {
        PromptSection {
            name: name.into(),
            order,
            text: format!("{name} text"),
        }
    }

    fn parent() -> AgentPreset {
        AgentPreset {
            name: "coder".into(),
            tools: vec!["read".into(), "write".into(), "shell".into()],
            prompt_sections: vec![
                section("base", 10),
                section("late", 200),
                section("tie", 120),
            ],
        }
    }

    fn names(c: &ComposedChild) -> Vec<&str> {
        c.prompt_sections.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn c1_child_joins_parent_preset_and_gets_delegation_statement() {
        let c = apply_child_composition(Some(&parent()), &ChildComposition::default());
        assert_eq!(c.tools, vec!["read", "write", "shell"]);
        assert_eq!(
            names(&c),
            vec!["base", "tie", "subagent:delegation", "late"]
        );
        let delegation = &c.prompt_sections[2];
        assert_eq!(delegation.order, 120);
        assert_eq!(delegation.text, SUBAGENT_DELEGATION_CONTEXT);
    }

    #[test]
    fn c1_without_parent_preset_only_the_delegation_statement_remains() {
        let c = apply_child_composition(None, &ChildComposition::default());
        assert!(c.tools.is_empty());
        assert_eq!(names(&c), vec!["subagent:delegation"]);
    }

    #[test]
    fn c1_persona_comes_first() {
        let comp = ChildComposition {
            persona: Some("You review code.".into()),
            tool_filter: None,
        };
        let c = apply_child_composition(Some(&parent()), &comp);
        assert_eq!(
            names(&c),
            vec![
                "deployment:persona",
                "base",
                "tie",
                "subagent:delegation",
                "late"
            ]
        );
        assert_eq!(c.prompt_sections[0].order, 0);
        assert_eq!(c.prompt_sections[0].text, "You review code.");
    }

    #[test]
    fn c1_tool_filter_intersects_in_parent_order_and_cannot_add_tools() {
        let comp = ChildComposition {
            persona: None,
            tool_filter: Some(vec!["shell".into(), "read".into(), "network".into()]),
        };
        let c = apply_child_composition(Some(&parent()), &comp);
        assert_eq!(c.tools, vec!["read", "shell"]);
        let empty = ChildComposition {
            persona: None,
            tool_filter: Some(vec![]),
        };
        assert!(apply_child_composition(Some(&parent()), &empty)
            .tools
            .is_empty());
    }

    #[test]
    fn c1_grandchild_gets_one_delegation_statement_and_its_own_persona() {
        let comp = ChildComposition {
            persona: Some("child persona".into()),
            tool_filter: None,
        };
        let child = apply_child_composition(Some(&parent()), &comp);
        let preset = child.to_preset("coder");
        assert_eq!(preset.tools, child.tools);
        let plain = apply_child_composition(Some(&preset), &ChildComposition::default());
        assert_eq!(
            names(&plain),
            vec!["base", "tie", "subagent:delegation", "late"]
        );
        let own = ChildComposition {
            persona: Some("grandchild persona".into()),
            tool_filter: None,
        };
        let grandchild = apply_child_composition(Some(&preset), &own);
        let personas: Vec<_> = grandchild
            .prompt_sections
            .iter()
            .filter(|s| s.name == PERSONA_SECTION)
            .map(|s| s.text.as_str())
            .collect();
        assert_eq!(personas, vec!["grandchild persona"]);
    }

    #[test]
    fn c1_c4_a_childs_tool_filter_never_widens_its_parents() {
        let v = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert_eq!(inherit_tool_filter(None, None), None);
        assert_eq!(
            inherit_tool_filter(None, Some(v(&["report_to_parent"]))),
            Some(v(&["report_to_parent"]))
        );
        // A grandchild spawned without a filter keeps its parent's.
        let parent = v(&["spawn_subagent", "report_to_parent"]);
        assert_eq!(
            inherit_tool_filter(Some(&parent), None),
            Some(parent.clone())
        );
        // One with a filter gets the part within its parent's, never more.
        assert_eq!(
            inherit_tool_filter(
                Some(&parent),
                Some(v(&["report_to_parent", "send_to_child"]))
            ),
            Some(v(&["report_to_parent"]))
        );
        assert_eq!(
            inherit_tool_filter(Some(&[]), Some(v(&["spawn_subagent"]))),
            Some(vec![])
        );
    }

    #[test]
    fn c1_duplicate_parent_tools_are_kept_once() {
        let mut p = parent();
        p.tools.push("read".into());
        let c = apply_child_composition(Some(&p), &ChildComposition::default());
        assert_eq!(c.tools, vec!["read", "write", "shell"]);
    }
}
