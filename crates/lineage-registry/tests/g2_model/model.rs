//! The reference model: sessions, placements and the idempotency table, written apart from
//! `RegistryState`, rule by rule.

use super::*;

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct MSession {
    pub(crate) parent: Option<u8>,
    pub(crate) root: u8,
    pub(crate) depth: u64,
    pub(crate) max: Option<u64>,
    pub(crate) state: u8, // 0 running, 1 waiting, 2 settled, 3 disposed, 4 starting
    pub(crate) closed: bool,
    pub(crate) placement: Option<(u8, u64)>,
    pub(crate) children: BTreeSet<u8>,
}

#[derive(Default)]
pub(crate) struct Model {
    pub(crate) sessions: BTreeMap<u8, MSession>,
    pub(crate) leases: BTreeMap<u8, u64>,
    /// request -> (kind, first result, at_ms)
    pub(crate) requests: BTreeMap<u8, (&'static str, String, u64)>,
    /// The callers' clock (ms).
    pub(crate) clock: u64,
}

impl Model {
    pub(crate) fn subtree(&self, root: u8) -> BTreeSet<u8> {
        let mut out = BTreeSet::new();
        let mut stack = vec![root];
        while let Some(s) = stack.pop() {
            if out.insert(s) {
                if let Some(m) = self.sessions.get(&s) {
                    stack.extend(m.children.iter().copied());
                }
            }
        }
        out
    }

    /// Header (id, parent, root, depth) the test builds for a Register op; None = skip op.
    pub(crate) fn header_for(
        &self,
        id: u8,
        parent: Option<u8>,
        bump: bool,
        wrong_root: Option<u8>,
    ) -> Option<(u8, u64)> {
        match parent {
            None => Some((id, 0)),
            Some(p) => {
                if p == id {
                    return None;
                }
                let (proot, pdepth) = self
                    .sessions
                    .get(&p)
                    .map(|m| (m.root, m.depth))
                    .unwrap_or((p, 0));
                let root = wrong_root.unwrap_or(proot);
                if root == id {
                    return None;
                }
                Some((root, pdepth + 1 + u64::from(bump)))
            }
        }
    }

    pub(crate) fn apply(
        &mut self,
        kind: &'static str,
        req: u8,
        at: u64,
        f: impl FnOnce(&mut Model) -> Result<String, &'static str>,
    ) -> String {
        if let Some((k, first, _)) = self.requests.get(&req) {
            if *k != kind {
                return "refused:request_id_reused".into();
            }
            return first.clone();
        }
        match f(self) {
            Ok(s) => {
                // Accepted: results more than the window older than this command are forgotten.
                self.requests
                    .retain(|_, (_, _, stored)| *stored + REQUEST_RETENTION_MS >= at);
                // A heartbeat's result is not kept (applied again, it changes nothing), nor
                // a forget's.
                if kind != "heartbeat" && kind != "forget_results" {
                    self.requests.insert(req, (kind, s.clone(), at));
                }
                s
            }
            Err(r) => format!("refused:{r}"),
        }
    }

    pub(crate) fn run(&mut self, op: &Op) -> String {
        let at = at_ms(self.clock, op);
        match op.clone() {
            Op::Register {
                req,
                id,
                parent,
                max,
                bump,
                wrong_root,
            } => self.apply("register_session", req, at, |m| {
                let (root, depth) = m.header_for(id, parent, bump, wrong_root).ok_or("skip")?;
                if m.sessions.contains_key(&id) {
                    return Err("duplicate_session");
                }
                let mut eff = max.map(u64::from);
                if let Some(p) = parent {
                    let ps = m.sessions.get(&p).ok_or("parent_missing")?;
                    if ps.state == 3 {
                        return Err("parent_disposed");
                    }
                    if ps.state == 4 {
                        return Err("not_started");
                    }
                    if ps.root != root {
                        return Err("root_mismatch");
                    }
                    let mut cur = Some(p);
                    while let Some(c) = cur {
                        let cs = &m.sessions[&c];
                        if cs.closed {
                            return Err("admission_closed");
                        }
                        cur = cs.parent;
                    }
                    eff = match (eff, ps.max) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    let expected = ps.depth + 1;
                    if eff.is_some_and(|x| expected > x) {
                        return Err("depth_exceeded");
                    }
                    if depth != expected {
                        return Err("depth_mismatch");
                    }
                    m.sessions.get_mut(&p).unwrap().children.insert(id);
                }
                m.sessions.insert(
                    id,
                    MSession {
                        parent,
                        root,
                        depth,
                        max: eff,
                        state: 4,
                        closed: false,
                        placement: Some((1, 1)),
                        children: BTreeSet::new(),
                    },
                );
                Ok(format!("registered:{depth}"))
            }),
            Op::Claim {
                req,
                id,
                node,
                expected,
                activate,
            } => self.apply("claim_placement", req, at, |m| {
                let s = m.sessions.get_mut(&id).ok_or("unknown_session")?;
                if s.state == 3 {
                    return Err("session_disposed");
                }
                if s.state == 4 {
                    return Err("not_started");
                }
                let cur = s.placement.map_or(0, |p| p.1);
                if cur != u64::from(expected) {
                    return Err("epoch_mismatch");
                }
                s.placement = Some((node, cur + 1));
                if activate {
                    s.state = 0;
                }
                Ok(format!("placed:{node}:{}", cur + 1))
            }),
            Op::SetState {
                req,
                id,
                state,
                fence,
            } => self.apply("set_state", req, at, |m| {
                let s = m.sessions.get_mut(&id).ok_or("unknown_session")?;
                if s.state == 3 {
                    return Err("session_disposed");
                }
                if state == 3 {
                    return Err("use_dispose");
                }
                if s.state == 4 {
                    return Err("not_started");
                }
                let current = s.placement.map_or(0, |p| p.1);
                if fence.is_some_and(|f| u64::from(f) != current) {
                    return Err("epoch_mismatch");
                }
                s.state = state;
                Ok(format!("state:{state}"))
            }),
            Op::Close { req, ids } => self.apply("close_admission", req, at, |m| {
                if ids.iter().any(|i| !m.sessions.contains_key(i)) {
                    return Err("unknown_session");
                }
                let mut all = BTreeSet::new();
                for i in &ids {
                    all.extend(m.subtree(*i));
                }
                for i in &all {
                    m.sessions.get_mut(i).unwrap().closed = true;
                }
                Ok(format!("closed:{}", all.len()))
            }),
            Op::Dispose { req, id } => self.apply("dispose", req, at, |m| {
                let s = m.sessions.get(&id).ok_or("unknown_session")?;
                if s.state == 3 {
                    return Ok("disposed:true".into());
                }
                if s.children.iter().any(|c| m.sessions[c].state != 3) {
                    return Err("undisposed_children");
                }
                let s = m.sessions.get_mut(&id).unwrap();
                s.state = 3;
                s.closed = true;
                Ok("disposed:false".into())
            }),
            Op::Confirm {
                req,
                id,
                node,
                expected,
            } => self.apply("confirm_start", req, at, |m| {
                let s = m.sessions.get_mut(&id).ok_or("unknown_session")?;
                if s.state == 3 {
                    return Err("session_disposed");
                }
                if s.state != 4 {
                    return Err("not_starting");
                }
                // Registered on node 1 at epoch 1.
                let (pnode, epoch) = s.placement.unwrap_or((node, 0));
                if pnode != node {
                    return Err("wrong_node");
                }
                if epoch != u64::from(expected) {
                    return Err("epoch_mismatch");
                }
                s.state = 0;
                Ok(format!("started:{node}:{epoch}"))
            }),
            Op::Heartbeat {
                req, node, lease, ..
            } => self.apply("heartbeat", req, at, |m| {
                let end = at + u64::from(lease);
                let e = m.leases.entry(node).or_insert(end);
                *e = (*e).max(end);
                Ok(format!("lease:{e}"))
            }),
            Op::Forget { req, kept } => self.apply("forget_results", req, at, |m| {
                let kept = KEPT[usize::from(kept)];
                if kept < MIN_RESULTS_KEPT_MS {
                    return Err("malformed");
                }
                let before = m.requests.len();
                m.requests.retain(|_, (_, _, stored)| *stored + kept >= at);
                Ok(format!("forgotten:{}:false", before - m.requests.len()))
            }),
            Op::Advance { step } => {
                self.clock += STEPS[usize::from(step)];
                "advanced".into()
            }
        }
    }
}
