//! Workspaces (issue 39): which stored snapshot holds a session's files, and what it is called.
//!
//! A session with a workspace starts from a **base** snapshot (a root's upload, or its parent's
//! files at the spawn) and is checkpointed at each turn's end. Every snapshot is one object in
//! the cluster's Object Store bucket; the log names the one that counts with a
//! `workspace/snapshot` event ([`WorkspaceSnapshot`]: object and digest), the base in the
//! creation window and each checkpoint staged just before its turn's `turn/end` (one append:
//! the object is stored before the log says so). The last such event is what a resume
//! materializes (with the base under it when it is a delta: [`WorkspaceSnapshot::changed`]),
//! and each digest is checked first, so a damaged or stale object is refused. A checkpoint is
//! a delta against the base, so it is also the session's changes ([`WorkspaceChanges`]), which
//! a child's settlement and one-shot result carry.
//!
//! Names are derived here, never taken from the wire: `<session>.base`, and checkpoints
//! alternating between `<session>.tip-0` and `<session>.tip-1` (a checkpoint whose log write
//! never happened overwrites the other name, never the one the log names). A client's upload
//! for a root is `upload.<request id>` until the hosting node copies it to the base.

use serde::{Deserialize, Serialize};

use crate::ids::{RequestId, SessionId};

/// The log kind of a [`WorkspaceSnapshot`] event.
pub const SNAPSHOT_EVENT: &str = "workspace/snapshot";

/// A stored snapshot of a session's files: its object's name and digest
/// (`SHA-256=<base64url>`, NATS Object Store's form).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkspaceSnapshot {
    /// The object in the cluster's workspace bucket.
    pub object: String,
    /// Its digest as stored.
    pub digest: String,
    /// `Some(n)`: the object is a delta against the session's base (its log's first snapshot),
    /// changing `n` paths; `None`: a whole tree (the base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<u64>,
}

impl WorkspaceSnapshot {
    /// A whole tree stored as `object` with `digest` (a base).
    pub fn whole(object: String, digest: String) -> Self {
        WorkspaceSnapshot {
            object,
            digest,
            changed: None,
        }
    }
}

/// A reference to a session's changes against the files it started from: what a child's
/// settlement notice and one-shot result carry, so its parent knows there is something to
/// apply (`apply_child_changes`, `lineage workspace diff|apply`) without asking.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WorkspaceChanges {
    /// The files the session started from.
    pub base: WorkspaceSnapshot,
    /// Its latest checkpoint (the base itself when no turn ended since).
    pub latest: WorkspaceSnapshot,
    /// Paths added, changed or removed against the base (0: nothing to apply).
    pub changed: u64,
}

impl WorkspaceChanges {
    /// A session's changes from its `base` to its `latest` snapshot: a delta says how many
    /// paths it changes; the base itself changes none.
    pub fn new(base: WorkspaceSnapshot, latest: WorkspaceSnapshot) -> Self {
        let changed = match (&latest.changed, latest == base) {
            (_, true) => 0,
            (Some(n), false) => *n,
            // A whole checkpoint (a log from before deltas): at least it differs.
            (None, false) => u64::from(latest.digest != base.digest),
        };
        WorkspaceChanges {
            base,
            latest,
            changed,
        }
    }
}

/// The sentence a parent's notice of `child` ends with when `changed` paths of its files
/// changed (none when nothing did).
pub fn changes_sentence(child: &SessionId, changed: u64) -> Option<String> {
    (changed > 0).then(|| {
        format!(
            "Its files: {changed} path{} changed against the files it started from; apply_child_changes {{\"child\": \"{child}\"}} applies them to yours.",
            if changed == 1 { "" } else { "s" }
        )
    })
}

impl WorkspaceChanges {
    /// What materializes the latest files: a whole snapshot, and the delta laid over it when
    /// the latest is one (the base under it).
    pub fn latest_layers(&self) -> (&WorkspaceSnapshot, Option<&WorkspaceSnapshot>) {
        match self.latest.changed {
            Some(_) => (&self.base, Some(&self.latest)),
            None => (&self.latest, None),
        }
    }
}

/// A session's changes ([`WorkspaceChanges`]) as its own events (after any fork seed) name
/// them; `None` without a workspace.
pub fn changes<'a>(
    events: impl IntoIterator<Item = &'a crate::log::SessionEvent> + Clone,
) -> Option<WorkspaceChanges> {
    let base = base_snapshot(events.clone())?;
    let (latest, _) = latest_snapshot(events)?;
    Some(WorkspaceChanges::new(base, latest))
}

/// The object holding the files `session` started from.
pub fn base_object(session: &SessionId) -> String {
    format!("{session}.base")
}

/// The object of `session`'s checkpoint number `n` (1 first): two names in turn.
pub fn checkpoint_object(session: &SessionId, n: u64) -> String {
    format!("{session}.tip-{}", n % 2)
}

/// The object a client uploads a root's files to before it asks for the spawn `request`.
pub fn upload_object(request: &RequestId) -> String {
    format!("upload.{request}")
}

/// Every object `session` can have (what retention purges with it, Q5).
pub fn session_objects(session: &SessionId) -> [String; 3] {
    [
        base_object(session),
        checkpoint_object(session, 0),
        checkpoint_object(session, 1),
    ]
}

/// Whether `object` is one of `session`'s own (a birth may name no other session's files).
pub fn belongs_to(object: &str, session: &SessionId) -> bool {
    session_objects(session).iter().any(|o| o == object)
}

/// What a spawn asked for its child's files, in the core's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildChoice {
    /// Nothing said.
    Unsaid,
    /// `inherit`.
    Inherit,
    /// `empty`.
    Empty,
    /// An upload or a clone: for a top-level session only.
    RootOnly,
}

/// What a child starts in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildFiles {
    /// A copy of its parent's files as they are at the spawn (stored as its base).
    ParentCopy,
    /// No files (an empty directory, or none at all).
    Nothing,
}

/// The files a child of `parent` starts in (issue 39, C1): a copy of its parent's when it asks
/// for one, or says nothing and both sides hold files (a coding agent under a coding agent:
/// `inherit` is the default); nothing when it asks for `empty` or one side holds no files. A
/// refusal is one line saying what to give instead.
pub fn child_files(
    choice: ChildChoice,
    parent: &SessionId,
    parent_has_files: bool,
    child_holds_files: bool,
) -> Result<ChildFiles, String> {
    match (choice, parent_has_files, child_holds_files) {
        (ChildChoice::RootOnly, _, _) => Err(
            "a child's workspace is inherit or empty; an upload or a git clone is for a top-level session (lineage spawn --workspace DIR or --git URL without --parent)".into(),
        ),
        (ChildChoice::Empty, _, _) | (ChildChoice::Unsaid, false, _) | (ChildChoice::Unsaid, true, false) => {
            Ok(ChildFiles::Nothing)
        }
        (ChildChoice::Inherit, false, _) => Err(format!(
            "workspace inherit: parent {parent} has no workspace to copy; give workspace empty, or start the root with lineage spawn --workspace DIR"
        )),
        (ChildChoice::Inherit, true, false) => Err(
            "workspace inherit: the child's agent has no directory of its own (a scripted agent, or a profile whose workdir is shared), so it cannot hold a copy; give workspace empty, or a profile whose workdir is \"session\"".into(),
        ),
        (ChildChoice::Inherit | ChildChoice::Unsaid, true, true) => Ok(ChildFiles::ParentCopy),
    }
}

/// The snapshot a session's files are in: the last `workspace/snapshot` of its log, and how
/// many checkpoints it had (the base is not one). `None` for a session without a workspace.
pub fn latest_snapshot<'a>(
    events: impl IntoIterator<Item = &'a crate::log::SessionEvent>,
) -> Option<(WorkspaceSnapshot, u64)> {
    let mut latest = None;
    let mut checkpoints = 0;
    for event in events {
        if event.kind != SNAPSHOT_EVENT {
            continue;
        }
        if let Ok(snapshot) = serde_json::from_value::<WorkspaceSnapshot>(event.data.clone()) {
            if latest.is_some() {
                checkpoints += 1;
            }
            latest = Some(snapshot);
        }
    }
    latest.map(|s| (s, checkpoints))
}

/// The base snapshot of a session (the first `workspace/snapshot` of its log).
pub fn base_snapshot<'a>(
    events: impl IntoIterator<Item = &'a crate::log::SessionEvent>,
) -> Option<WorkspaceSnapshot> {
    events
        .into_iter()
        .filter(|e| e.kind == SNAPSHOT_EVENT)
        .find_map(|e| serde_json::from_value(e.data.clone()).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::SessionEvent;

    fn session() -> SessionId {
        SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000001").unwrap()
    }

    fn event(seq: u64, kind: &str, object: &str) -> SessionEvent {
        SessionEvent {
            seq,
            kind: kind.into(),
            data: serde_json::json!({"object": object, "digest": "SHA-256=x"}),
            at_ms: 0,
        }
    }

    #[test]
    fn c1_a_child_inherits_when_it_asks_or_says_nothing_and_both_hold_files() {
        use ChildChoice::*;
        let p = session();
        let files = |choice, parent, child| child_files(choice, &p, parent, child);
        assert_eq!(files(Unsaid, true, true), Ok(ChildFiles::ParentCopy));
        assert_eq!(files(Inherit, true, true), Ok(ChildFiles::ParentCopy));
        // Nothing said: no copy when either side holds no files.
        assert_eq!(files(Unsaid, false, true), Ok(ChildFiles::Nothing));
        assert_eq!(files(Unsaid, true, false), Ok(ChildFiles::Nothing));
        assert_eq!(files(Empty, true, true), Ok(ChildFiles::Nothing));
        // Asked for what cannot be: one line saying what to give.
        for (choice, parent, child, says) in [
            (Inherit, false, true, "has no workspace to copy"),
            (Inherit, true, false, "no directory of its own"),
            (RootOnly, true, true, "for a top-level session"),
        ] {
            let line = files(choice, parent, child).unwrap_err();
            assert!(line.contains(says) && !line.contains('\n'), "{line}");
        }
    }

    #[test]
    fn checkpoints_alternate_between_two_names_beside_the_base() {
        let s = session();
        assert_ne!(checkpoint_object(&s, 1), checkpoint_object(&s, 2));
        assert_eq!(checkpoint_object(&s, 1), checkpoint_object(&s, 3));
        assert!(belongs_to(&base_object(&s), &s));
        assert!(belongs_to(&checkpoint_object(&s, 7), &s));
        let other = SessionId::parse("01936c1e-7a3b-7cde-8f00-000000000002").unwrap();
        assert!(!belongs_to(&base_object(&other), &s));
        assert!(!belongs_to("upload.x", &s));
    }

    #[test]
    fn the_last_snapshot_counts_and_the_first_is_the_base() {
        let s = session();
        let log = [
            event(1, "host/agent", "-"),
            event(2, SNAPSHOT_EVENT, &base_object(&s)),
            event(3, "turn/end", "-"),
            event(4, SNAPSHOT_EVENT, &checkpoint_object(&s, 1)),
            event(5, SNAPSHOT_EVENT, &checkpoint_object(&s, 2)),
        ];
        let (latest, n) = latest_snapshot(&log).unwrap();
        assert_eq!(latest.object, checkpoint_object(&s, 2));
        assert_eq!(n, 2);
        assert_eq!(base_snapshot(&log).unwrap().object, base_object(&s));
        assert_eq!(latest_snapshot(&log[..1]), None);
    }
}
