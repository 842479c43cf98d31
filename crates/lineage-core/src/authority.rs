//! Who may interrupt a child (M4), and the O(1) ancestry it relies on (R3, seed §3.2, §5.3).
//!
//! `interrupt(target, authority)` cancels a live child's current turn. The authority is either
//! the user acting for the target's durable parent ([`InterruptAuthority::User`]) or a session
//! claiming to be one of the target's ancestors ([`InterruptAuthority::Ancestor`]); the claim is
//! verified with an [`Ancestry`]. [`check_interrupt_authority`] refuses anything else with
//! [`CoreError::NotAuthorized`] and a one-line reason naming both ids; it changes nothing.
//!
//! [`LocalAncestry`] is the in-process answer: the seed keeps a `WeakSet<Agent>` of the live
//! ancestors at materialization, for O(1) checks that keep no dead ancestor alive. Here the
//! set holds ids, never agents, so it keeps nothing alive at all; an ancestor counts only
//! while it is materialized, as with the weak set. Across nodes the registry answers.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};

use crate::error::CoreError;
use crate::ids::SessionId;

/// The authority an interrupt is sent with (M4).
///
/// Wire forms: `{"kind":"user","parent_session_id":"…"}`, `{"kind":"ancestor","session":"…"}`
/// and `{"kind":"top_level"}`.
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum InterruptAuthority {
    /// The user, acting for the target's durable parent.
    User {
        /// Must equal the target's durable parent.
        parent_session_id: SessionId,
    },
    /// A session claiming to be a strict ancestor of the target.
    Ancestor {
        /// The claiming session.
        session: SessionId,
    },
    /// The user of a top-level session, cancelling its own turn (an ACP client's
    /// `session/cancel`): valid only when the target has no parent.
    TopLevel,
}

/// Answers "is X an ancestor of Y" (R3).
///
/// Locally ([`LocalAncestry`]) both methods are O(1) hash lookups over live sessions; across
/// nodes the registry answers them from the durable lineage. A `false` or `None` means "not
/// known to be", which is enough to refuse: authority fails closed.
pub trait Ancestry {
    /// True if `ancestor` is a strict ancestor of `descendant` (never true for a session and
    /// itself).
    fn is_ancestor(&self, ancestor: &SessionId, descendant: &SessionId) -> bool;
    /// The durable parent of `session`, if known.
    fn parent_of(&self, session: &SessionId) -> Option<SessionId>;
}

/// Checks an interrupt's authority over `target` (M4).
///
/// `target_parent` is the target's durable parent from its frozen header (`None` for a
/// top-level session). User authority is valid only if its `parent_session_id` equals that
/// parent. Ancestor authority is valid only if the claimed session is a strict ancestor of the
/// target: the durable parent itself, or one `ancestry` confirms. A session claiming itself, a
/// sibling, a descendant or an unknown id is refused with [`CoreError::NotAuthorized`].
pub fn check_interrupt_authority(
    target: &SessionId,
    target_parent: Option<&SessionId>,
    authority: &InterruptAuthority,
    ancestry: &impl Ancestry,
) -> Result<(), CoreError> {
    let refuse = |reason: String| Err(CoreError::NotAuthorized { reason });
    match authority {
        InterruptAuthority::User { parent_session_id } => match target_parent {
            Some(parent) if parent == parent_session_id => Ok(()),
            Some(parent) => refuse(format!(
                "user authority names parent {parent_session_id}, but the parent of {target} is {parent}; name the target's own parent"
            )),
            None => refuse(format!(
                "user authority names parent {parent_session_id}, but {target} is a top-level session with no parent; interrupt it with top-level authority (`lineage interrupt --top-level`)"
            )),
        },
        InterruptAuthority::TopLevel => match target_parent {
            None => Ok(()),
            Some(parent) => refuse(format!(
                "top-level authority is for top-level sessions, but {target} is a child of {parent}; act as the user of its parent or as an ancestor"
            )),
        },
        InterruptAuthority::Ancestor { session } => {
            if session == target {
                return refuse(format!(
                    "session {session} claims ancestor authority over itself ({target}); a session is not its own ancestor"
                ));
            }
            if target_parent == Some(session) || ancestry.is_ancestor(session, target) {
                return Ok(());
            }
            let what = if ancestry.is_ancestor(target, session) {
                "is a descendant of"
            } else if ancestry
                .parent_of(session)
                .is_some_and(|p| Some(&p) == target_parent)
            {
                "is a sibling of"
            } else {
                "is not a known ancestor of"
            };
            refuse(format!(
                "session {session} {what} {target}; only an ancestor of the target, or the user acting for its parent, may interrupt it"
            ))
        }
    }
}

/// The in-process [`Ancestry`]: parents and ancestor sets of the live (materialized) sessions.
///
/// Each session's ancestor set is computed once, at [`LocalAncestry::materialize`]: its durable
/// parent plus the parent's own set when the parent is live here. It holds only ids, so it keeps
/// no agent alive; [`LocalAncestry::forget`] drops a session in O(1). A forgotten ancestor no
/// longer counts (its id may stay in descendants' sets, but membership is checked against the
/// live sessions), exactly like the seed's `WeakSet`.
#[derive(Debug, Clone, Default)]
pub struct LocalAncestry {
    parents: HashMap<SessionId, Option<SessionId>>,
    ancestors: HashMap<SessionId, HashSet<SessionId>>,
}

impl LocalAncestry {
    /// An empty registry of live sessions.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a live session and computes its ancestor set.
    ///
    /// Idempotent for the same parent. Refused with [`CoreError::InvalidTree`]: a session that is
    /// its own parent or ancestor (a cycle), and a session already live here with a different
    /// parent (durable lineage is frozen, L1).
    pub fn materialize(
        &mut self,
        session: SessionId,
        parent: Option<SessionId>,
    ) -> Result<(), CoreError> {
        if let Some(known) = self.parents.get(&session) {
            if known == &parent {
                return Ok(());
            }
            return Err(CoreError::InvalidTree {
                reason: format!(
                    "session {session} is already live with parent {}, not {}; durable lineage is frozen",
                    describe(known.as_ref()),
                    describe(parent.as_ref())
                ),
            });
        }
        let mut set = HashSet::new();
        if let Some(p) = &parent {
            let cyclic = p == &session
                || self
                    .ancestors
                    .get(p)
                    .is_some_and(|above| above.contains(&session));
            if cyclic {
                return Err(CoreError::InvalidTree {
                    reason: format!(
                        "session {session} would be its own ancestor through parent {p}; the lineage is corrupt"
                    ),
                });
            }
            if let Some(above) = self.ancestors.get(p) {
                set.extend(above.iter().cloned());
            }
            set.insert(p.clone());
        }
        self.ancestors.insert(session.clone(), set);
        self.parents.insert(session, parent);
        Ok(())
    }

    /// Drops a session (it was disposed); returns whether it was live. O(1).
    pub fn forget(&mut self, session: &SessionId) -> bool {
        self.ancestors.remove(session);
        self.parents.remove(session).is_some()
    }

    /// True if `session` is live here.
    pub fn contains(&self, session: &SessionId) -> bool {
        self.parents.contains_key(session)
    }

    /// How many sessions are live here.
    pub fn len(&self) -> usize {
        self.parents.len()
    }

    /// True when no session is live here.
    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }
}

fn describe(parent: Option<&SessionId>) -> String {
    match parent {
        Some(p) => p.to_string(),
        None => "none".to_owned(),
    }
}

impl Ancestry for LocalAncestry {
    /// O(1): both sessions must be live here, and `ancestor` in `descendant`'s set.
    fn is_ancestor(&self, ancestor: &SessionId, descendant: &SessionId) -> bool {
        ancestor != descendant
            && self.parents.contains_key(ancestor)
            && self
                .ancestors
                .get(descendant)
                .is_some_and(|set| set.contains(ancestor))
    }

    /// O(1): the durable parent of a live session.
    fn parent_of(&self, session: &SessionId) -> Option<SessionId> {
        self.parents.get(session).cloned().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::ids::sid;

    /// 1 -> 2 -> {3, 4}; 3 -> 5.
    fn family() -> LocalAncestry {
        let mut a = LocalAncestry::new();
        a.materialize(sid(1), None).unwrap();
        a.materialize(sid(2), Some(sid(1))).unwrap();
        a.materialize(sid(3), Some(sid(2))).unwrap();
        a.materialize(sid(4), Some(sid(2))).unwrap();
        a.materialize(sid(5), Some(sid(3))).unwrap();
        a
    }

    fn ancestor(n: u32) -> InterruptAuthority {
        InterruptAuthority::Ancestor { session: sid(n) }
    }

    fn reason(err: CoreError) -> String {
        match err {
            CoreError::NotAuthorized { reason } => reason,
            other => panic!("expected NotAuthorized, got {other:?}"),
        }
    }

    #[test]
    fn m4_authority_wire_forms_are_tagged_by_kind() {
        let user = InterruptAuthority::User {
            parent_session_id: sid(1),
        };
        assert_eq!(
            serde_json::to_string(&user).unwrap(),
            format!(r#"{{"kind":"user","parent_session_id":"{}"}}"#, sid(1))
        );
        assert_eq!(
            serde_json::to_string(&ancestor(2)).unwrap(),
            format!(r#"{{"kind":"ancestor","session":"{}"}}"#, sid(2))
        );
        let back: InterruptAuthority =
            serde_json::from_str(&format!(r#"{{"kind":"ancestor","session":"{}"}}"#, sid(2)))
                .unwrap();
        assert_eq!(back, ancestor(2));
        assert!(serde_json::from_str::<InterruptAuthority>(r#"{"kind":"root"}"#).is_err());
        assert!(serde_json::from_str::<InterruptAuthority>(
            r#"{"kind":"ancestor","session":"a.b"}"#
        )
        .is_err());
    }

    #[test]
    fn m4_user_authority_must_name_the_durable_parent() {
        let a = family();
        let user = |n| InterruptAuthority::User {
            parent_session_id: sid(n),
        };
        check_interrupt_authority(&sid(3), Some(&sid(2)), &user(2), &a).unwrap();
        let msg =
            reason(check_interrupt_authority(&sid(3), Some(&sid(2)), &user(1), &a).unwrap_err());
        assert!(
            msg.contains(sid(1).as_str()) && msg.contains(sid(3).as_str()),
            "{msg}"
        );
        let msg = reason(check_interrupt_authority(&sid(1), None, &user(2), &a).unwrap_err());
        assert!(
            msg.contains("top-level") && msg.contains(sid(1).as_str()),
            "{msg}"
        );
    }

    #[test]
    fn f1_m4_top_level_authority_cancels_a_top_level_turn_only() {
        let a = family();
        assert_eq!(
            serde_json::to_string(&InterruptAuthority::TopLevel).unwrap(),
            r#"{"kind":"top_level"}"#
        );
        check_interrupt_authority(&sid(1), None, &InterruptAuthority::TopLevel, &a).unwrap();
        let msg = reason(
            check_interrupt_authority(&sid(3), Some(&sid(2)), &InterruptAuthority::TopLevel, &a)
                .unwrap_err(),
        );
        assert!(
            msg.contains("top-level authority")
                && msg.contains(sid(3).as_str())
                && msg.contains(sid(2).as_str()),
            "{msg}"
        );
    }

    #[test]
    fn m4_true_ancestors_may_interrupt() {
        let a = family();
        for claimed in [1, 2, 3] {
            check_interrupt_authority(&sid(5), Some(&sid(3)), &ancestor(claimed), &a).unwrap();
        }
        // The durable parent counts even when it is not live on this node (R2).
        check_interrupt_authority(&sid(9), Some(&sid(8)), &ancestor(8), &a).unwrap();
    }

    #[test]
    fn m4_self_sibling_descendant_and_unknown_claims_are_refused_naming_both_ids() {
        let a = family();
        for (claimed, target, target_parent, expect) in [
            (3, 3, 2, "itself"),
            (4, 3, 2, "sibling"),
            (5, 3, 2, "descendant"),
            (77, 3, 2, "not a known ancestor"),
            (4, 5, 3, "not a known ancestor"),
        ] {
            let err = check_interrupt_authority(
                &sid(target),
                Some(&sid(target_parent)),
                &ancestor(claimed),
                &a,
            )
            .unwrap_err();
            let msg = err.to_string();
            assert!(msg.starts_with("not authorized: "), "{msg}");
            assert!(!msg.contains('\n'), "{msg}");
            let msg = reason(err);
            assert!(msg.contains(expect), "{claimed}->{target}: {msg}");
            assert!(
                msg.contains(sid(claimed).as_str()) && msg.contains(sid(target).as_str()),
                "{msg}"
            );
        }
    }

    #[test]
    fn r3_local_ancestry_is_strict_and_forget_drops_the_ancestor() {
        let mut a = family();
        assert!(a.is_ancestor(&sid(1), &sid(5)));
        assert!(!a.is_ancestor(&sid(5), &sid(5)));
        assert!(!a.is_ancestor(&sid(5), &sid(1)));
        assert!(!a.is_ancestor(&sid(4), &sid(5)));
        assert_eq!(a.parent_of(&sid(5)), Some(sid(3)));
        assert_eq!(a.parent_of(&sid(1)), None);
        assert_eq!(a.len(), 5);
        // A disposed ancestor no longer counts and keeps nothing alive.
        assert!(a.forget(&sid(2)));
        assert!(!a.forget(&sid(2)));
        assert!(!a.is_ancestor(&sid(2), &sid(5)));
        assert!(a.is_ancestor(&sid(1), &sid(5)));
        assert_eq!(a.parent_of(&sid(2)), None);
        // Re-materialized (resumed here), it counts again: lineage is durable.
        a.materialize(sid(2), Some(sid(1))).unwrap();
        assert!(a.is_ancestor(&sid(2), &sid(5)));
        for n in 1..=5 {
            a.forget(&sid(n));
        }
        assert!(a.is_empty());
    }

    #[test]
    fn r3_materialize_is_idempotent_and_refuses_cycles_and_changed_parents() {
        let mut a = family();
        a.materialize(sid(3), Some(sid(2))).unwrap();
        let msg = a.materialize(sid(3), Some(sid(1))).unwrap_err().to_string();
        assert!(msg.contains("frozen"), "{msg}");
        assert!(a.materialize(sid(6), Some(sid(6))).is_err());
        a.forget(&sid(1));
        let msg = a.materialize(sid(1), Some(sid(5))).unwrap_err().to_string();
        assert!(msg.contains("its own ancestor"), "{msg}");
        // A cold-resumed child whose parent lives elsewhere: owner none, parent still known.
        a.materialize(sid(10), Some(sid(11))).unwrap();
        assert_eq!(a.parent_of(&sid(10)), Some(sid(11)));
        assert!(!a.is_ancestor(&sid(11), &sid(10)));
    }
}
