//! The faults a chaos run injects, one at a time, each healed before the next, on a seeded
//! schedule: every kind once per round, in a seeded order.
//!
//! Process faults (by pid): SIGKILL (then a restart on the same data dir) or SIGSTOP (then
//! SIGCONT) of the registry leader, a follower, a worker or a nats-server. Link faults between
//! one node and NATS, through its toxiproxy proxies (every server's): latency, slicing into
//! small delayed pieces, a byte limit per connection (the connection dropped mid-stream, what
//! a drop is over TCP), a blackhole (a partition: bytes stop both ways, sockets stay open),
//! connection resets and a cut (connections refused).

use std::time::{Duration, Instant};

use lineage_testkit::seeded::Rng;
use lineage_testkit::toxiproxy::both_ways;
use serde_json::{json, Value};

use super::rig::{proxy_name, Rig, NODES, VOTERS};

/// Whose process a process fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// The registry leader (a voter).
    Leader,
    /// A registry follower (a voter).
    Follower,
    /// A worker (registry client, agent host).
    Worker,
    /// A nats-server of the three.
    NatsServer,
}

/// What a link fault does to a node's connections to NATS.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Link {
    /// 300 ± 100 ms added both ways.
    Latency,
    /// Data cut into 1–64 byte pieces, 2 ms apart.
    Slicer,
    /// Each connection dropped after 4 KiB either way (it reconnects, and is dropped again).
    LimitData,
    /// Bytes stop both ways, sockets stay open.
    Blackhole,
    /// Every connection reset as soon as data flows.
    Reset,
    /// The proxy disabled: connections cut, new ones refused.
    Cut,
}

/// One kind of fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Fault {
    /// SIGKILL, then a restart.
    Kill(Role),
    /// SIGSTOP, then SIGCONT.
    Stop(Role),
    /// A link fault on one node (a voter, the leader included, or a worker).
    Link(Link),
}

impl Fault {
    /// Every kind, in a fixed order.
    pub const ALL: [Fault; 14] = [
        Fault::Kill(Role::Leader),
        Fault::Kill(Role::Follower),
        Fault::Kill(Role::Worker),
        Fault::Kill(Role::NatsServer),
        Fault::Stop(Role::Leader),
        Fault::Stop(Role::Follower),
        Fault::Stop(Role::Worker),
        Fault::Stop(Role::NatsServer),
        Fault::Link(Link::Latency),
        Fault::Link(Link::Slicer),
        Fault::Link(Link::LimitData),
        Fault::Link(Link::Blackhole),
        Fault::Link(Link::Reset),
        Fault::Link(Link::Cut),
    ];

    /// Its short name, as `--faults` takes it (`kill-leader`, `limit-data`, ...).
    pub fn slug(self) -> &'static str {
        match self {
            Fault::Kill(Role::Leader) => "kill-leader",
            Fault::Kill(Role::Follower) => "kill-follower",
            Fault::Kill(Role::Worker) => "kill-worker",
            Fault::Kill(Role::NatsServer) => "kill-nats",
            Fault::Stop(Role::Leader) => "stop-leader",
            Fault::Stop(Role::Follower) => "stop-follower",
            Fault::Stop(Role::Worker) => "stop-worker",
            Fault::Stop(Role::NatsServer) => "stop-nats",
            Fault::Link(Link::Latency) => "latency",
            Fault::Link(Link::Slicer) => "slicer",
            Fault::Link(Link::LimitData) => "limit-data",
            Fault::Link(Link::Blackhole) => "blackhole",
            Fault::Link(Link::Reset) => "reset",
            Fault::Link(Link::Cut) => "cut",
        }
    }

    /// The kinds a comma-separated `--faults` list names (`all`: every kind); an unknown name
    /// is refused with the list of known ones.
    pub fn parse_list(text: &str) -> Result<Vec<Fault>, String> {
        if text.trim() == "all" {
            return Ok(Fault::ALL.to_vec());
        }
        let mut kinds = Vec::new();
        for name in text.split(',').map(str::trim).filter(|n| !n.is_empty()) {
            let Some(kind) = Fault::ALL.iter().copied().find(|k| k.slug() == name) else {
                let known: Vec<&str> = Fault::ALL.iter().map(|k| k.slug()).collect();
                return Err(format!(
                    "--faults names {name:?}, which is not a fault kind; use all or some of {}",
                    known.join(",")
                ));
            };
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        if kinds.is_empty() {
            return Err("--faults is empty; give all, or kinds such as kill-leader,latency".into());
        }
        Ok(kinds)
    }

    /// Its name in the report.
    pub fn name(self) -> String {
        let role = |r: Role| match r {
            Role::Leader => "registry leader",
            Role::Follower => "registry follower",
            Role::Worker => "worker",
            Role::NatsServer => "nats-server",
        };
        match self {
            Fault::Kill(r) => format!("SIGKILL {} + restart", role(r)),
            Fault::Stop(r) => format!("SIGSTOP {} + SIGCONT", role(r)),
            Fault::Link(l) => format!(
                "link to NATS: {}",
                match l {
                    Link::Latency => "latency 300 ± 100 ms",
                    Link::Slicer => "sliced (1-64 B pieces)",
                    Link::LimitData => "dropped after 4 KiB",
                    Link::Blackhole => "blackhole (partition)",
                    Link::Reset => "connections reset",
                    Link::Cut => "cut (refused)",
                }
            ),
        }
    }

    /// The toxics of a link fault (none for a cut, which disables the proxy).
    fn toxics(link: Link) -> Vec<Value> {
        match link {
            Link::Latency => both_ways("slow", "latency", json!({"latency": 300, "jitter": 100})),
            Link::Slicer => both_ways(
                "slice",
                "slicer",
                json!({"average_size": 32, "size_variation": 31, "delay": 2000}),
            ),
            Link::LimitData => both_ways("limit", "limit_data", json!({"bytes": 4096})),
            Link::Blackhole => both_ways("hole", "timeout", json!({"timeout": 0})),
            Link::Reset => both_ways("reset", "reset_peer", json!({"timeout": 0})),
            Link::Cut => Vec::new(),
        }
    }
}

/// A fault as injected: what, on whom, and when (nanoseconds since the run began).
#[derive(Debug, Clone)]
pub struct Injected {
    /// The kind.
    pub fault: Fault,
    /// The process or link hit, in words (`node-2`, `nats-server 3`).
    pub target: String,
    /// When it began and when it was healed.
    pub from_ns: i64,
    /// When it was healed.
    pub to_ns: i64,
    /// From the heal until every node answered `/readyz` again (`None`: not within the bound).
    pub recovered: Option<Duration>,
}

/// The seeded order: every kind (of those chosen) once per round, shuffled per round.
pub struct Schedule {
    rng: Rng,
    kinds: Vec<Fault>,
    round: Vec<Fault>,
}

impl Schedule {
    /// A schedule of `kinds` from `seed`.
    pub fn new(seed: u64, kinds: Vec<Fault>) -> Schedule {
        Schedule {
            rng: Rng::new(seed ^ 0x5eed_fa17),
            kinds,
            round: Vec::new(),
        }
    }

    /// The next fault kind.
    pub fn next_fault(&mut self) -> Fault {
        if self.round.is_empty() {
            let mut all = self.kinds.clone();
            // Fisher–Yates, seeded; popped from the back.
            for i in (1..all.len()).rev() {
                all.swap(i, self.rng.below(i + 1));
            }
            self.round = all;
        }
        self.round.pop().unwrap_or(Fault::Kill(Role::Worker))
    }

    /// A seeded duration in `[from_ms, from_ms + spread_ms)`.
    pub fn pause(&mut self, from_ms: u64, spread_ms: u64) -> Duration {
        Duration::from_millis(from_ms + self.rng.below(spread_ms.max(1) as usize) as u64)
    }

    /// Injects `fault`, holds it 1–2.5 s, heals it, and waits (at most `recover_within`) until
    /// every node answers `/readyz`. Times are taken against `began`.
    pub fn inject(
        &mut self,
        rig: &mut Rig,
        fault: Fault,
        began: Instant,
        recover_within: Duration,
    ) -> Injected {
        let hold = self.pause(1000, 1500);
        let leader = rig.leader(Duration::from_secs(20)).unwrap_or(0);
        let follower = (leader + 1 + self.rng.below(VOTERS - 1)) % VOTERS;
        let worker = VOTERS + self.rng.below(NODES.len() - VOTERS);
        let node_of = |role: Role| match role {
            Role::Leader => leader,
            Role::Follower => follower,
            _ => worker,
        };
        let from_ns = began.elapsed().as_nanos() as i64;
        let target = match fault {
            Fault::Kill(Role::NatsServer) => {
                let server = self.rng.below(3);
                rig.cluster.nats.cluster().kill(server);
                std::thread::sleep(hold);
                if let Err(e) = rig.cluster.nats.cluster().restart(server) {
                    eprintln!("chaos: restarting nats-server {}: {e}", server + 1);
                }
                format!("nats-server {}", server + 1)
            }
            Fault::Stop(Role::NatsServer) => {
                let server = self.rng.below(3);
                let pid = rig.cluster.nats.cluster().server(server).pid();
                signal(pid, libc::SIGSTOP);
                std::thread::sleep(hold);
                signal(pid, libc::SIGCONT);
                format!("nats-server {}", server + 1)
            }
            Fault::Kill(role) => {
                let node = node_of(role);
                rig.cluster.nodes[node].kill();
                std::thread::sleep(hold);
                rig.cluster.restart(node);
                NODES[node].to_owned()
            }
            Fault::Stop(role) => {
                let node = node_of(role);
                rig.cluster.nodes[node].stop();
                std::thread::sleep(hold);
                rig.cluster.nodes[node].cont();
                NODES[node].to_owned()
            }
            Fault::Link(link) => {
                let node = self.rng.below(NODES.len());
                let proxies: Vec<String> = (0..3).map(|k| proxy_name(node, k)).collect();
                let toxics = Fault::toxics(link);
                for p in &proxies {
                    match link {
                        Link::Cut => rig.proxy.set_enabled(p, false),
                        _ => rig.proxy.add_toxics(p, &toxics),
                    }
                }
                std::thread::sleep(hold);
                for p in &proxies {
                    match link {
                        Link::Cut => rig.proxy.set_enabled(p, true),
                        _ => rig.proxy.remove_toxics(p, &toxics),
                    }
                }
                let role = if node == leader {
                    " (leader)"
                } else if node < VOTERS {
                    " (voter)"
                } else {
                    " (worker)"
                };
                format!("{}{role}", NODES[node])
            }
        };
        let to_ns = began.elapsed().as_nanos() as i64;
        let healed = Instant::now();
        let mut recovered = None;
        while healed.elapsed() < recover_within {
            if rig.all_ready() {
                recovered = Some(healed.elapsed());
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        Injected {
            fault,
            target,
            from_ns,
            to_ns,
            recovered,
        }
    }
}

/// Sends `sig` to `pid` (a process this run started).
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) with a pid of a child this process started and a valid signal number.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    if rc != 0 {
        eprintln!(
            "chaos: kill({pid}, {sig}): {}",
            std::io::Error::last_os_error()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x1_every_kind_comes_once_per_round_in_a_seeded_order() {
        let mut a = Schedule::new(7, Fault::ALL.to_vec());
        let mut b = Schedule::new(7, Fault::ALL.to_vec());
        let round: Vec<Fault> = (0..Fault::ALL.len()).map(|_| a.next_fault()).collect();
        let again: Vec<Fault> = (0..Fault::ALL.len()).map(|_| b.next_fault()).collect();
        assert_eq!(round, again, "the same seed, the same order");
        let mut sorted = round.clone();
        sorted.sort();
        let mut all = Fault::ALL.to_vec();
        all.sort();
        assert_eq!(sorted, all, "every kind once per round");
        let other: Vec<Fault> = {
            let mut c = Schedule::new(8, Fault::ALL.to_vec());
            (0..Fault::ALL.len()).map(|_| c.next_fault()).collect()
        };
        assert_ne!(round, other, "another seed, another order");
    }

    #[test]
    fn x1_faults_lists_parse_and_refuse_unknown_names_in_one_line() {
        assert_eq!(Fault::parse_list("all").unwrap().len(), Fault::ALL.len());
        assert_eq!(
            Fault::parse_list("latency, kill-leader,latency").unwrap(),
            vec![Fault::Link(Link::Latency), Fault::Kill(Role::Leader)]
        );
        for kind in Fault::ALL {
            assert_eq!(Fault::parse_list(kind.slug()).unwrap(), vec![kind]);
        }
        let e = Fault::parse_list("latency,nope").unwrap_err();
        assert!(
            e.contains("\"nope\"") && e.contains("kill-leader") && !e.contains('\n'),
            "{e}"
        );
        assert!(Fault::parse_list(" , ").unwrap_err().contains("empty"));
        let mut only = Schedule::new(1, vec![Fault::Link(Link::Cut)]);
        assert!((0..5).all(|_| only.next_fault() == Fault::Link(Link::Cut)));
    }
}
