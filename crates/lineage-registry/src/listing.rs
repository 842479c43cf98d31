//! Q4: sessions listed and searched by root, parent, state, node, label and age, in pages.
//!
//! [`SessionIndex`] is derived from the state machine's records (never serialized, rebuilt on
//! load, kept up to date by [`crate::RegistryState::apply`]): one ordered set of
//! `(created_at_ms, id)` per root, parent, state, node and label. A query walks the smallest
//! set its filter names (oldest first); one that names none walks the per-state sets merged
//! (every session is in exactly one of them, so their merge is every session in order: no
//! set over all sessions is kept, which saved about 60 B per session, issue 13). It checks the
//! other filters on each record, and stops at the page's limit or after [`LIST_SCAN_MAX`] entries, whichever
//! comes first: a page costs at most that many look-ups whatever the registry holds, and may
//! be short (even empty) with a cursor to go on from. The age filter (`created_before_ms`) is
//! the upper bound of the range walked, so it costs nothing.
//!
//! Guarantee: walking every page from no cursor until `next` is `None` returns each session
//! that matched for the whole walk exactly once, in `(created_at_ms, id)` order. A session
//! whose state, node or label changes during the walk may be missed or seen with its new
//! values (each page is its own read).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::ops::Bound;

use lineage_core::ids::{NodeId, SessionId};
use serde::{Deserialize, Serialize};

use crate::types::{SessionRecord, SessionState};

/// The most records one page holds.
pub const LIST_PAGE_MAX: u32 = 1_000;

/// The most index entries one page examines (records checked against the filter).
pub const LIST_SCAN_MAX: usize = 10_000;

/// What a listing keeps (every field given must match; none: every session).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListFilter {
    /// Sessions of this tree (its root included).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<SessionId>,
    /// Direct children of this session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<SessionId>,
    /// Sessions in this state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<SessionState>,
    /// Sessions placed on this node (the latest placement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<NodeId>,
    /// Sessions whose descriptor's `label` is exactly this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// Sessions registered before this time (ms since the Unix epoch; the caller turns an age
    /// into it with its clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_before_ms: Option<u64>,
}

impl ListFilter {
    /// True when `record` passes every field of the filter.
    pub fn matches(&self, record: &SessionRecord) -> bool {
        // No allocation: this runs for every entry a page examines.
        self.root
            .as_ref()
            .is_none_or(|r| record.header.root_session() == r)
            && self
                .parent
                .as_ref()
                .is_none_or(|p| record.header.parent_session() == Some(p))
            && self.state.is_none_or(|s| record.state == s)
            && self
                .node
                .as_ref()
                .is_none_or(|n| record.placement.as_ref().map(|p| &p.node) == Some(n))
            && self
                .label
                .as_ref()
                .is_none_or(|l| label_of(record).as_deref() == Some(l.as_str()))
            && self
                .created_before_ms
                .is_none_or(|t| record.created_at_ms < t)
    }
}

/// Where a page ended: the `(created_at_ms, id)` of the last entry it examined. Its text form
/// is `<created_at_ms>.<id>` (what `lineage ls --after` takes).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct ListCursor {
    /// The registration time of the last entry examined.
    pub created_at_ms: u64,
    /// Its id.
    pub id: SessionId,
}

impl fmt::Display for ListCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.created_at_ms, self.id)
    }
}

impl std::str::FromStr for ListCursor {
    type Err = String;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!(
                "cursor {raw:?} is not <created_at_ms>.<session id>; pass the `next` of the previous page"
            )
        };
        let (ms, id) = raw.split_once('.').ok_or_else(bad)?;
        Ok(ListCursor {
            created_at_ms: ms.parse().map_err(|_| bad())?,
            id: SessionId::parse(id).map_err(|_| bad())?,
        })
    }
}

/// The descriptor's `label`, if any.
pub fn label_of(record: &SessionRecord) -> Option<std::borrow::Cow<'_, str>> {
    record.descriptor.as_ref()?.label()
}

/// One entry of an index: when a session was registered, and its id.
type Entry = (u64, SessionId);

/// The fields of a record that change after birth and are indexed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MutableKey {
    state: SessionState,
    node: Option<NodeId>,
    label: Option<String>,
}

impl MutableKey {
    /// The indexed mutable fields of `record`.
    pub(crate) fn of(record: &SessionRecord) -> Self {
        MutableKey {
            state: record.state,
            node: record.placement.as_ref().map(|p| p.node.clone()),
            label: label_of(record).map(std::borrow::Cow::into_owned),
        }
    }
}

/// The derived indexes a listing walks (see the module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SessionIndex {
    by_root: BTreeMap<SessionId, BTreeSet<Entry>>,
    by_parent: BTreeMap<SessionId, BTreeSet<Entry>>,
    by_state: BTreeMap<SessionState, BTreeSet<Entry>>,
    by_node: BTreeMap<NodeId, BTreeSet<Entry>>,
    by_label: BTreeMap<String, BTreeSet<Entry>>,
}

fn put<K: Ord>(map: &mut BTreeMap<K, BTreeSet<Entry>>, key: K, entry: Entry) {
    map.entry(key).or_default().insert(entry);
}

fn take<K: Ord>(map: &mut BTreeMap<K, BTreeSet<Entry>>, key: &K, entry: &Entry) {
    if let Some(set) = map.get_mut(key) {
        set.remove(entry);
        if set.is_empty() {
            map.remove(key);
        }
    }
}

impl SessionIndex {
    /// The index of `records`.
    pub fn build<'a>(records: impl IntoIterator<Item = &'a SessionRecord>) -> Self {
        let mut index = SessionIndex::default();
        for record in records {
            index.insert(record);
        }
        index
    }

    /// Adds a new record.
    pub(crate) fn insert(&mut self, record: &SessionRecord) {
        let entry: Entry = (record.created_at_ms, record.id().clone());
        put(
            &mut self.by_root,
            record.header.root_session().clone(),
            entry.clone(),
        );
        if let Some(parent) = record.header.parent_session() {
            put(&mut self.by_parent, parent.clone(), entry.clone());
        }
        self.insert_mutable(&MutableKey::of(record), entry);
    }

    fn insert_mutable(&mut self, key: &MutableKey, entry: Entry) {
        put(&mut self.by_state, key.state, entry.clone());
        if let Some(node) = &key.node {
            put(&mut self.by_node, node.clone(), entry.clone());
        }
        if let Some(label) = &key.label {
            put(&mut self.by_label, label.clone(), entry);
        }
    }

    fn remove_mutable(&mut self, key: &MutableKey, entry: &Entry) {
        take(&mut self.by_state, &key.state, entry);
        if let Some(node) = &key.node {
            take(&mut self.by_node, node, entry);
        }
        if let Some(label) = &key.label {
            take(&mut self.by_label, label, entry);
        }
    }

    /// Re-files `record`, whose mutable fields were `before`.
    pub(crate) fn update(&mut self, record: &SessionRecord, before: &MutableKey) {
        let after = MutableKey::of(record);
        if &after == before {
            return;
        }
        let entry: Entry = (record.created_at_ms, record.id().clone());
        self.remove_mutable(before, &entry);
        self.insert_mutable(&after, entry);
    }

    /// Removes a record (purged).
    pub fn remove(&mut self, record: &SessionRecord) {
        let entry: Entry = (record.created_at_ms, record.id().clone());
        take(&mut self.by_root, record.header.root_session(), &entry);
        if let Some(parent) = record.header.parent_session() {
            take(&mut self.by_parent, parent, &entry);
        }
        self.remove_mutable(&MutableKey::of(record), &entry);
    }

    /// The smallest index set the filter names: `Some(None)` when it names none (every
    /// session: the per-state sets, merged), `None` when a named key has no session at all.
    fn driving_set(&self, filter: &ListFilter) -> Option<Option<&BTreeSet<Entry>>> {
        let mut named: Vec<Option<&BTreeSet<Entry>>> = Vec::new();
        if let Some(root) = &filter.root {
            named.push(self.by_root.get(root));
        }
        if let Some(parent) = &filter.parent {
            named.push(self.by_parent.get(parent));
        }
        if let Some(state) = &filter.state {
            named.push(self.by_state.get(state));
        }
        if let Some(node) = &filter.node {
            named.push(self.by_node.get(node));
        }
        if let Some(label) = &filter.label {
            named.push(self.by_label.get(label));
        }
        if named.is_empty() {
            return Some(None);
        }
        let mut smallest: Option<&BTreeSet<Entry>> = None;
        for set in named {
            let set = set?;
            if smallest.is_none_or(|s| set.len() < s.len()) {
                smallest = Some(set);
            }
        }
        smallest.map(Some)
    }

    /// One page: the records after `after` (oldest first) that match `filter`, at most
    /// `limit` (clamped to 1..=[`LIST_PAGE_MAX`]), having examined at most [`LIST_SCAN_MAX`]
    /// entries; and the cursor to go on from (`None`: nothing further can match).
    pub fn page<R: std::borrow::Borrow<SessionRecord>>(
        &self,
        records: &BTreeMap<SessionId, R>,
        filter: &ListFilter,
        after: Option<&ListCursor>,
        limit: u32,
    ) -> (Vec<SessionRecord>, Option<ListCursor>) {
        let limit = limit.clamp(1, LIST_PAGE_MAX) as usize;
        let Some(driving) = self.driving_set(filter) else {
            return (Vec::new(), None);
        };
        let lower = match after {
            Some(c) => Bound::Excluded((c.created_at_ms, c.id.clone())),
            None => Bound::Unbounded,
        };
        let sets: Vec<&BTreeSet<Entry>> = match driving {
            Some(set) => vec![set],
            None => self.by_state.values().collect(),
        };
        let mut out = Vec::new();
        let mut examined = 0usize;
        let mut last: Option<&Entry> = None;
        let mut walk = Merged::new(
            sets.into_iter()
                .map(|set| set.range((lower.clone(), Bound::Unbounded))),
        )
        .take_while(|(at, _)| filter.created_before_ms.is_none_or(|t| *at < t))
        .peekable();
        for entry in walk.by_ref() {
            examined += 1;
            last = Some(entry);
            if let Some(record) = records.get(&entry.1).map(|r| r.borrow()) {
                if filter.matches(record) {
                    out.push(record.clone());
                }
            }
            if out.len() >= limit || examined >= LIST_SCAN_MAX {
                break;
            }
        }
        let more = walk.peek().is_some();
        let next = match (more, last) {
            (true, Some((at, id))) => Some(ListCursor {
                created_at_ms: *at,
                id: id.clone(),
            }),
            _ => None,
        };
        (out, next)
    }

    /// The sessions whose latest placement is on `node`, oldest first (disposed ones too,
    /// until they are purged).
    pub fn placed_on<'a>(&'a self, node: &NodeId) -> impl Iterator<Item = &'a SessionId> + 'a {
        self.by_node
            .get(node)
            .into_iter()
            .flat_map(|set| set.iter().map(|(_, id)| id))
    }

    /// How many sessions are in `state`.
    pub fn count_in(&self, state: SessionState) -> usize {
        self.by_state.get(&state).map_or(0, BTreeSet::len)
    }

    /// How many entries the indexes hold in all (for memory figures).
    pub fn entries(&self) -> usize {
        fn sum<K>(m: &BTreeMap<K, BTreeSet<Entry>>) -> usize {
            m.values().map(BTreeSet::len).sum()
        }
        sum(&self.by_root)
            + sum(&self.by_parent)
            + sum(&self.by_state)
            + sum(&self.by_node)
            + sum(&self.by_label)
    }
}

/// Ordered walks of disjoint sets merged into one ordered walk (a page over every session:
/// the per-state sets, a handful).
struct Merged<'a, I: Iterator<Item = &'a Entry>> {
    walks: Vec<std::iter::Peekable<I>>,
}

impl<'a, I: Iterator<Item = &'a Entry>> Merged<'a, I> {
    fn new(walks: impl IntoIterator<Item = I>) -> Self {
        Merged {
            walks: walks.into_iter().map(Iterator::peekable).collect(),
        }
    }
}

impl<'a, I: Iterator<Item = &'a Entry>> Iterator for Merged<'a, I> {
    type Item = &'a Entry;

    fn next(&mut self) -> Option<&'a Entry> {
        let mut smallest: Option<(usize, &'a Entry)> = None;
        for (i, walk) in self.walks.iter_mut().enumerate() {
            if let Some(&head) = walk.peek() {
                if smallest.is_none_or(|(_, s)| head < s) {
                    smallest = Some((i, head));
                }
            }
        }
        let (i, _) = smallest?;
        self.walks[i].next()
    }
}
