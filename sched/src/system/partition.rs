//! Per-pool locking: the [`System`] split into **parts**, one per cpupool
//! (and one for the free CPUs), each behind its own lock, so CPUs of
//! different pools decide, switch, block and wake at the same time.
//!
//! A part is itself a [`System`] holding one pool's share of the machine:
//! its CPUs' entries, its resources, its scheduler, its domains, their
//! units and vCPUs (the other entries of its tables are empty). Every
//! per-CPU event and every vCPU event stays inside one pool, so the same
//! code runs on a part exactly as it ran on the whole machine
//! ([`SharedSystem::with_cpu`], [`SharedSystem::with_vcpu`],
//! [`SharedSystem::with_domain`]). What spans pools (creating and
//! destroying pools and domains, moving CPUs and domains between pools,
//! parameters, views of the whole machine) takes the machine's lock
//! exclusively, which waits for every part's user to leave, merges the
//! parts back into one [`System`], runs there and splits the result again
//! ([`SharedSystem::with_whole`]): such operations are rare (a toolstack's
//! or the console's), and they reuse the code the host tests check.
//!
//! One thing can tie two pools together: a vCPU still loaded on a CPU of
//! another pool (its domain just moved, or the CPU just left the pool) or
//! on a free CPU. The CPU's next switch releases the vCPU, which writes
//! the vCPU's entry and may kick its new resource, so until then both
//! pools are one part (the split joins them); the next whole-machine
//! operation separates them again.
//!
//! Lock order: the machine lock (shared for a part's user, exclusive for a
//! whole-machine operation), then at most one part lock. Machine-wide
//! counters (rendezvous generations, the diagnostics' sequence) are shared
//! atomics, so numbers never repeat across parts.

use super::*;
use crate::sync::{Mutex, RwLock};

/// The group of the free CPUs; pool `p` is group `1 + p`.
const FREE_GROUP: usize = 0;

fn pool_group(pool: PoolId) -> usize {
    1 + pool.0 as usize
}

/// A CPU entry that belongs to another part.
fn absent_cpu() -> Cpu {
    Cpu {
        online: false,
        pool: None,
        resource: None,
        slot: 0,
        loaded: CpuContext::Idle,
        switching: None,
    }
}

/// Which part holds each CPU's, vCPU's and domain's state.
#[derive(Debug, Default)]
struct Routing {
    cpu: Vec<usize>,
    /// By vCPU id; ids without a vCPU go to `fallback`.
    vcpu: Vec<usize>,
    /// Sorted by id.
    domain: Vec<(DomainId, usize)>,
    /// The free CPUs' part (always the first): where anything unknown is
    /// looked up (and not found, as in the whole system).
    fallback: usize,
}

impl Routing {
    fn cpu(&self, cpu: usize) -> usize {
        self.cpu.get(cpu).copied().unwrap_or(self.fallback)
    }

    fn vcpu(&self, vcpu: VcpuId) -> usize {
        self.vcpu
            .get(vcpu.0 as usize)
            .copied()
            .unwrap_or(self.fallback)
    }

    fn domain(&self, domain: DomainId) -> usize {
        self.domain
            .binary_search_by_key(&domain, |&(id, _)| id)
            .map_or(self.fallback, |i| self.domain[i].1)
    }
}

/// Union-find over the groups (free, pool 0, pool 1, ...).
struct Groups(Vec<usize>);

impl Groups {
    fn find(&mut self, mut g: usize) -> usize {
        while self.0[g] != g {
            self.0[g] = self.0[self.0[g]];
            g = self.0[g];
        }
        g
    }

    fn join(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        // The smaller root wins: the free CPUs' group stays its part's root.
        let (low, high) = (a.min(b), a.max(b));
        self.0[high] = low;
    }
}

impl System {
    /// An empty part sharing this system's machine-wide state.
    fn empty_part(&self) -> System {
        System {
            topology: Arc::clone(&self.topology),
            blocked_hints: self.blocked_hints.clone(),
            config: self.config,
            factory: self.factory,
            table: Arc::clone(&self.table),
            generations: Arc::clone(&self.generations),
            next_domain: self.next_domain,
            active: self.active,
            cpus: (0..self.cpus.len()).map(|_| absent_cpu()).collect(),
            resources: (0..self.resources.len()).map(|_| None).collect(),
            pools: (0..self.pools.len()).map(|_| None).collect(),
            free: IdleScheduler::new(),
            domains: Vec::new(),
            units: (0..self.units.len()).map(|_| None).collect(),
            vcpus: (0..self.vcpus.len()).map(|_| None).collect(),
            diagnostics: [None; DIAGNOSTIC_RING],
            diagnostics_recorded: 0,
            diagnostic_sequence: Arc::clone(&self.diagnostic_sequence),
            cosched_broken: self.cosched_broken,
            pending_rewakes: 0,
        }
    }

    fn cpu_group(&self, cpu: usize) -> usize {
        self.cpus
            .get(cpu)
            .and_then(|c| c.pool)
            .map_or(FREE_GROUP, pool_group)
    }

    fn domain_group(&self, domain: DomainId) -> Option<usize> {
        self.domain(domain).ok().map(|d| pool_group(d.pool))
    }

    /// A vCPU's group: its domain's pool's, or (dead, its domain gone) the
    /// CPU's that still holds it.
    fn vcpu_group(&self, v: &Vcpu) -> usize {
        self.domain_group(v.domain)
            .or_else(|| v.running_on.map(|c| self.cpu_group(c)))
            .unwrap_or(FREE_GROUP)
    }

    /// Splits the machine into its parts (see the module documentation).
    fn split(mut self) -> (Vec<System>, Routing) {
        let mut groups = Groups((0..1 + self.pools.len()).collect());
        for cpu in 0..self.cpus.len() {
            let group = self.cpu_group(cpu);
            for context in self.cpus[cpu].contexts() {
                if let Some(v) = context
                    .vcpu()
                    .and_then(|v| self.vcpus.get(v.0 as usize))
                    .and_then(Option::as_ref)
                {
                    groups.join(group, self.vcpu_group(v));
                }
            }
        }
        for v in self.vcpus.iter().flatten() {
            if let Some(cpu) = v.running_on {
                groups.join(self.vcpu_group(v), self.cpu_group(cpu));
            }
        }
        for u in self.units.iter().flatten() {
            if let Some(master) = u.on {
                groups.join(pool_group(u.pool), self.cpu_group(master));
            }
        }

        // Before anything moves (a dead vCPU's group is its CPU's).
        let vcpu_groups: Vec<Option<usize>> = self
            .vcpus
            .iter()
            .map(|v| v.as_ref().map(|v| self.vcpu_group(v)))
            .collect();

        // A part per root: the free CPUs' first, then the pools' in order.
        let mut part_of_root = alloc::vec![usize::MAX; groups.0.len()];
        let mut parts: Vec<System> = Vec::new();
        let live = core::iter::once(FREE_GROUP).chain(
            self.pools
                .iter()
                .enumerate()
                .filter(|(_, p)| p.is_some())
                .map(|(i, _)| pool_group(PoolId(i as u32))),
        );
        for group in live {
            let root = groups.find(group);
            if part_of_root[root] == usize::MAX {
                part_of_root[root] = parts.len();
                parts.push(self.empty_part());
            }
        }
        let mut part_of = |group: usize| part_of_root[groups.find(group)];

        let mut routing = Routing {
            cpu: Vec::with_capacity(self.cpus.len()),
            vcpu: alloc::vec![part_of(FREE_GROUP); self.vcpus.len()],
            domain: Vec::with_capacity(self.domains.len()),
            fallback: part_of(FREE_GROUP),
        };
        for cpu in 0..self.cpus.len() {
            let part = part_of(self.cpu_group(cpu));
            routing.cpu.push(part);
            parts[part].cpus[cpu] = core::mem::replace(&mut self.cpus[cpu], absent_cpu());
        }
        for (master, slot) in self.resources.iter_mut().enumerate() {
            if let Some(r) = slot.take() {
                let part = part_of(pool_group(r.pool));
                parts[part].resources[master] = Some(r);
            }
        }
        for (index, slot) in self.pools.iter_mut().enumerate() {
            if let Some(pool) = slot.take() {
                parts[part_of(pool_group(PoolId(index as u32)))].pools[index] = Some(pool);
            }
        }
        parts[routing.fallback].free = core::mem::replace(&mut self.free, IdleScheduler::new());
        for (index, group) in vcpu_groups.into_iter().enumerate() {
            let Some(group) = group else {
                continue;
            };
            let part = part_of(group);
            routing.vcpu[index] = part;
            parts[part].vcpus[index] = self.vcpus[index].take();
        }
        for (index, slot) in self.units.iter_mut().enumerate() {
            if let Some(u) = slot.take() {
                let part = part_of(pool_group(u.pool));
                if u.rewake {
                    parts[part].pending_rewakes += 1;
                }
                parts[part].units[index] = Some(u);
            }
        }
        for d in self.domains.drain(..) {
            let part = part_of(pool_group(d.pool));
            routing.domain.push((d.id, part));
            parts[part].domains.push(d);
        }
        routing.domain.sort_unstable_by_key(|&(id, _)| id);
        let free_part = &mut parts[routing.fallback];
        free_part.diagnostics = self.diagnostics;
        free_part.diagnostics_recorded = self.diagnostics_recorded;
        (parts, routing)
    }

    /// Joins the parts [`System::split`] made back into the whole machine
    /// (`parts[0]`, the free CPUs' part, becomes it).
    fn merge(parts: Vec<System>, routing: &Routing) -> System {
        let mut parts = parts.into_iter().enumerate();
        let (_, mut whole) = parts
            .next()
            .expect("split always makes the free CPUs' part");
        let mut diagnostics: Vec<(u64, Diagnostic)> =
            whole.diagnostics.iter().flatten().copied().collect();
        for (index, mut part) in parts {
            for (cpu, entry) in part.cpus.iter_mut().enumerate() {
                if routing.cpu(cpu) == index {
                    whole.cpus[cpu] = core::mem::replace(entry, absent_cpu());
                }
            }
            move_entries(&mut whole.resources, &mut part.resources);
            move_entries(&mut whole.pools, &mut part.pools);
            move_entries(&mut whole.units, &mut part.units);
            move_entries(&mut whole.vcpus, &mut part.vcpus);
            whole.domains.append(&mut part.domains);
            whole.next_domain = whole.next_domain.max(part.next_domain);
            whole.pending_rewakes += part.pending_rewakes;
            diagnostics.extend(part.diagnostics.iter().flatten().copied());
        }
        // Creation order, as one system keeps them (ids only grow).
        whole.domains.sort_unstable_by_key(|d| d.id);
        diagnostics.sort_unstable_by_key(|&(sequence, _)| sequence);
        let kept = &diagnostics[diagnostics.len().saturating_sub(DIAGNOSTIC_RING)..];
        whole.diagnostics = [None; DIAGNOSTIC_RING];
        for (slot, &d) in whole.diagnostics.iter_mut().zip(kept) {
            *slot = Some(d);
        }
        whole.diagnostics_recorded = kept.len() as u64;
        whole
    }
}

/// Which part an event belongs to ([`System::in_part`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartOf {
    /// A CPU's event (kick, timer, switch, rendezvous).
    Cpu(usize),
    /// A vCPU's event (block, wake, yield, pause).
    Vcpu(VcpuId),
    /// A domain's event (its pause).
    Domain(DomainId),
}

impl System {
    /// Runs `f` on only the part of this machine that a [`SharedSystem`]
    /// would give the event `of`, then joins the parts again: single-
    /// threaded, so the lockstep machine and the property tests can check
    /// that an event sees everything it needs in its part (a run through
    /// parts must match a run on the whole machine step for step).
    pub fn in_part<R>(&mut self, of: PartOf, f: impl FnOnce(&mut System) -> R) -> R {
        let placeholder = self.empty_part();
        let (mut parts, routing) = core::mem::replace(self, placeholder).split();
        let index = match of {
            PartOf::Cpu(cpu) => routing.cpu(cpu),
            PartOf::Vcpu(vcpu) => routing.vcpu(vcpu),
            PartOf::Domain(domain) => routing.domain(domain),
        };
        let result = f(&mut parts[index]);
        *self = System::merge(parts, &routing);
        result
    }

    /// How many parts a [`SharedSystem`] would split this machine into.
    pub fn part_count(&mut self) -> usize {
        let placeholder = self.empty_part();
        let (parts, routing) = core::mem::replace(self, placeholder).split();
        let count = parts.len();
        *self = System::merge(parts, &routing);
        count
    }
}

/// Moves every entry of `from` into the same index of `into`.
fn move_entries<T>(into: &mut Vec<Option<T>>, from: &mut [Option<T>]) {
    for (index, slot) in from.iter_mut().enumerate() {
        if let Some(value) = slot.take() {
            if into.len() <= index {
                into.resize_with(index + 1, || None);
            }
            into[index] = Some(value);
        }
    }
}

/// The parts and where everything lives, behind the machine lock.
struct Layout {
    routing: Routing,
    parts: Vec<Mutex<System>>,
}

/// How the user of a [`SharedSystem`] learns what its locks cost: a clock
/// and a sink for each acquisition's wait (`None`: taken at once).
pub trait LockWaits {
    /// The clock, in ns (read only when a lock is found held).
    fn now_ns(&self) -> Time;
    /// One acquisition of the machine lock and a part lock together: how
    /// long it spun, if it had to.
    fn acquired(&self, waited_ns: Option<Time>);
    /// Of an acquisition that spun, how long went on the machine lock alone
    /// (a whole-machine operation held or awaited it): what stops every
    /// pool at once, apart from what one pool's CPUs wait for each other.
    fn machine_waited(&self, waited_ns: Time) {
        let _ = waited_ns;
    }
    /// Called between two tries of a held lock: a CPU spins (the default);
    /// a host test's thread may give its core to the holder instead.
    fn relax(&self) {
        crate::sync::spin_hint();
    }
}

/// No accounting (tests).
impl LockWaits for () {
    fn now_ns(&self) -> Time {
        0
    }
    fn acquired(&self, _: Option<Time>) {}
}

/// The [`System`] shared by every CPU with one lock per pool (see the
/// module documentation).
pub struct SharedSystem {
    layout: RwLock<Layout>,
    table: Arc<RendezvousTable>,
    blocked_hints: BlockedHints,
}

impl SharedSystem {
    /// Shares `system`, split into its pools' parts.
    pub fn new(system: System) -> Self {
        let table = system.rendezvous_table();
        let blocked_hints = system.blocked_hints();
        let (parts, routing) = system.split();
        Self {
            layout: RwLock::new(Layout {
                routing,
                parts: parts.into_iter().map(Mutex::new).collect(),
            }),
            table,
            blocked_hints,
        }
    }

    /// The rendezvous cells (as [`System::rendezvous_table`]).
    pub fn rendezvous_table(&self) -> Arc<RendezvousTable> {
        Arc::clone(&self.table)
    }

    /// The blocked hints (as [`System::blocked_hints`]).
    pub fn blocked_hints(&self) -> BlockedHints {
        self.blocked_hints.clone()
    }

    /// How many parts the machine is in now (tests, logs).
    pub fn parts(&self) -> usize {
        self.layout.read_with(&crate::sync::spin_hint).parts.len()
    }

    /// Runs `f` on the part that `pick` names, under the machine lock
    /// (shared) and that part's lock.
    fn with_part<R>(
        &self,
        waits: &dyn LockWaits,
        pick: impl FnOnce(&Routing) -> usize,
        f: impl FnOnce(&mut System) -> R,
    ) -> R {
        let mut started = None;
        let layout = match self.layout.try_read() {
            Some(layout) => layout,
            None => {
                let since = waits.now_ns();
                started = Some(since);
                let layout = self.layout.read_with(&|| waits.relax());
                waits.machine_waited(waits.now_ns().saturating_sub(since));
                layout
            }
        };
        let part = &layout.parts[pick(&layout.routing)];
        let mut system = match part.try_lock() {
            Some(system) => system,
            None => {
                started.get_or_insert_with(|| waits.now_ns());
                part.lock_with(&|| waits.relax())
            }
        };
        waits.acquired(started.map(|t| waits.now_ns().saturating_sub(t)));
        f(&mut system)
    }

    /// Runs `f` on the part that holds CPU `cpu` (its events: kicks,
    /// timers, switches, rendezvous).
    pub fn with_cpu<R>(
        &self,
        cpu: usize,
        waits: &dyn LockWaits,
        f: impl FnOnce(&mut System) -> R,
    ) -> R {
        self.with_part(waits, |r| r.cpu(cpu), f)
    }

    /// Runs `f` on the part that holds `vcpu` (block, wake, yield, pause).
    pub fn with_vcpu<R>(
        &self,
        vcpu: VcpuId,
        waits: &dyn LockWaits,
        f: impl FnOnce(&mut System) -> R,
    ) -> R {
        self.with_part(waits, |r| r.vcpu(vcpu), f)
    }

    /// Runs `f` on the part that holds `domain` (its pause, its vCPUs).
    pub fn with_domain<R>(
        &self,
        domain: DomainId,
        waits: &dyn LockWaits,
        f: impl FnOnce(&mut System) -> R,
    ) -> R {
        self.with_part(waits, |r| r.domain(domain), f)
    }

    /// Runs `f` on every part in turn, each under its own lock (per-part
    /// views: the watchdog's, the trace's).
    pub fn for_each_part(&self, waits: &dyn LockWaits, mut f: impl FnMut(&mut System)) {
        let layout = self.layout.read_with(&|| waits.relax());
        for part in &layout.parts {
            f(&mut part.lock_with(&|| waits.relax()));
        }
    }

    /// Runs `f` on the whole machine, exclusively: pool and domain
    /// operations, moves, machine-wide views.
    pub fn with_whole<R>(&self, waits: &dyn LockWaits, f: impl FnOnce(&mut System) -> R) -> R {
        let mut layout = match self.layout.try_write() {
            Some(layout) => {
                waits.acquired(None);
                layout
            }
            None => {
                let started = waits.now_ns();
                let layout = self.layout.write_with(&|| waits.relax());
                let waited = waits.now_ns().saturating_sub(started);
                waits.machine_waited(waited);
                waits.acquired(Some(waited));
                layout
            }
        };
        let parts: Vec<System> = layout.parts.drain(..).map(Mutex::into_inner).collect();
        let mut whole = System::merge(parts, &layout.routing);
        let result = f(&mut whole);
        let (parts, routing) = whole.split();
        layout.routing = routing;
        layout.parts = parts.into_iter().map(Mutex::new).collect();
        result
    }
}
