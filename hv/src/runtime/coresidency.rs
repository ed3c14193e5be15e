//! The co-residency checker: proof, from what the CPUs actually loaded, that
//! the CPUs of one core- or cluster-scheduled resource never held vCPUs of two
//! different domains at the same moment (the security promise of core
//! scheduling).
//!
//! Every CPU logs `(time, what it holds)` into its own ring whenever that
//! changes; [`find_overlaps`] replays the logs of a resource's CPUs in time
//! order and reports every moment two of them held different domains.
//!
//! What a CPU holds is what it actually entered, not what the scheduler
//! planned: the arch code reports the address-space tag it is about to enter
//! the guest with (the VMID in VTTBR_EL2, the ASID in the VMCB it runs,
//! [`SwitchLogs::entering`]), and the log names the domain that owns that tag
//! ([`SwitchLogs::tag_given`]). A CPU holds that domain from its entry until
//! its next context switch ([`SwitchLogs::switched`]), which the scheduler
//! makes before a CPU may join a rendezvous, so the span covers all the time
//! the guest could run.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering, fence};

use sched::{Granularity, System, Topology};

use super::{Arch, Runtime};
use crate::sibling_view::{
    Disagreement, GroupsBuilder, Identity, checked_groups, disagreements, names_threads,
    sibling_groups,
};

/// One context switch on one CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SwitchEvent {
    /// Counter value (a clock shared by all CPUs) when the CPU switched.
    pub time: u64,
    /// The domain whose vCPU the CPU loaded, or `None` for idle.
    pub domain: Option<u32>,
}

/// Two CPUs of one resource holding different domains at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// When it started.
    pub time: u64,
    /// The two CPUs.
    pub cpus: (usize, usize),
    /// The domains they held.
    pub domains: (u32, u32),
}

/// Replays the switch logs of the CPUs of one resource (`logs[i]` is CPU
/// `cpus[i]`'s log, oldest first) and returns the overlaps. A CPU is idle until
/// its first logged switch. Switches with the same timestamp are applied
/// together before checking, since the clock cannot order them.
pub fn find_overlaps(cpus: &[usize], logs: &[&[SwitchEvent]]) -> Vec<Overlap> {
    let mut overlaps = Vec::new();
    let mut held: Vec<Option<u32>> = alloc::vec![None; cpus.len()];
    let mut next: Vec<usize> = alloc::vec![0; cpus.len()];
    while let Some(now) = logs
        .iter()
        .zip(&next)
        .filter_map(|(log, &i)| log.get(i).map(|e| e.time))
        .min()
    {
        for (slot, log) in logs.iter().enumerate() {
            while let Some(event) = log.get(next[slot]).filter(|e| e.time == now) {
                held[slot] = event.domain;
                next[slot] += 1;
            }
        }
        for a in 0..cpus.len() {
            for b in a + 1..cpus.len() {
                if let (Some(da), Some(db)) = (held[a], held[b])
                    && da != db
                {
                    overlaps.push(Overlap {
                        time: now,
                        cpus: (cpus[a], cpus[b]),
                        domains: (da, db),
                    });
                }
            }
        }
    }
    overlaps
}

/// Switches each CPU's ring keeps: enough for the switching between two
/// checks (each check consumes the new ones); older ones are overwritten and
/// counted as lost.
pub const RING_EVENTS: usize = 8192;

/// "Idle" in a ring slot's domain word (domains are stored + 1).
const IDLE: u64 = 0;

/// Address-space tags (VMIDs, ASIDs) whose owner is tracked; the allocators
/// hand out the lowest free tag, so a machine runs out of domains long
/// before it reaches this.
pub const TRACKED_TAGS: usize = 256;

/// The domain logged for a CPU that entered a tag no domain owns (a freed
/// or untracked VMID/ASID): different from every real domain, so any
/// sibling running a real domain at that moment is reported.
pub const UNKNOWN_DOMAIN: u32 = u32::MAX - 1;

/// One CPU's ring of `(time, domain + 1 or IDLE)` pairs.
struct Ring {
    /// Number of events ever written.
    head: AtomicUsize,
    /// Number of events whose writing has begun (`head`, or one more while
    /// the CPU writes a slot): a reader that finds it has moved on while it
    /// read knows which of the slots it read may have been overwritten.
    claimed: AtomicUsize,
    slots: Box<[[AtomicU64; 2]]>,
}

/// The switch logs of every CPU and the incremental check over them. Each
/// CPU appends to its own ring without locks ([`SwitchLogs::record`]); one
/// CPU periodically replays what was added since the last check
/// ([`SwitchLogs::check`]). Shared by the ARM and x86 glue, which only add
/// their clock and their logging.
pub struct SwitchLogs {
    rings: Vec<Ring>,
    /// How far each CPU's ring has been checked (also: how many of its
    /// switches were checked, in total).
    checked: Vec<AtomicUsize>,
    total_switches: AtomicU64,
    total_overlaps: AtomicU64,
    /// Per CPU: a replay is reading its log ([`SwitchLogs::replay`]).
    replaying: Vec<AtomicBool>,
    /// Per tag: its owning domain + 1, or 0.
    owners: Box<[AtomicU64]>,
    /// Per CPU: what it holds now (domain + 1, or IDLE), as last logged.
    holding: Vec<AtomicU64>,
}

/// What one [`SwitchLogs::replay`] of one group found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupReplay {
    /// Overlaps found in the new events.
    pub overlaps: Vec<Overlap>,
    /// Events overwritten before this replay could read them.
    pub lost: usize,
    /// Switches replayed.
    pub switches: usize,
}

/// What one [`SwitchLogs::check`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Overlaps found in the new events.
    pub overlaps: Vec<Overlap>,
    /// Events overwritten before this check could read them.
    pub lost: usize,
    /// Resources checked.
    pub resources: usize,
    /// Switches checked since boot.
    pub total_switches: u64,
    /// Overlaps found since boot.
    pub total_overlaps: u64,
    /// The shared resource of this check with the most switches checked
    /// since boot (its CPUs' switches added up), and that number: a test
    /// that needs the promise exercised asks for a minimum here, since a
    /// total over idle resources proves nothing.
    pub busiest: Option<(Vec<usize>, u64)>,
}

impl SwitchLogs {
    /// Empty logs for `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        Self {
            rings: (0..cpus)
                .map(|_| Ring {
                    head: AtomicUsize::new(0),
                    claimed: AtomicUsize::new(0),
                    slots: (0..RING_EVENTS)
                        .map(|_| [AtomicU64::new(0), AtomicU64::new(0)])
                        .collect(),
                })
                .collect(),
            checked: (0..cpus).map(|_| AtomicUsize::new(0)).collect(),
            replaying: (0..cpus).map(|_| AtomicBool::new(false)).collect(),
            total_switches: AtomicU64::new(0),
            total_overlaps: AtomicU64::new(0),
            owners: (0..TRACKED_TAGS).map(|_| AtomicU64::new(IDLE)).collect(),
            holding: (0..cpus).map(|_| AtomicU64::new(IDLE)).collect(),
        }
    }

    /// The allocator gave address-space `tag` to `domain` (call before any
    /// CPU can enter it).
    pub fn tag_given(&self, tag: u32, domain: u32) {
        if let Some(owner) = self.owners.get(tag as usize) {
            owner.store(u64::from(domain) + 1, Ordering::Release);
        }
    }

    /// `tag` went back to its allocator (its domain is gone).
    pub fn tag_returned(&self, tag: u32) {
        if let Some(owner) = self.owners.get(tag as usize) {
            owner.store(IDLE, Ordering::Release);
        }
    }

    /// The domain that owns `tag`, if any.
    pub fn owner_of(&self, tag: u32) -> Option<u32> {
        let packed = self.owners.get(tag as usize)?.load(Ordering::Acquire);
        (packed != IDLE).then(|| (packed - 1) as u32)
    }

    /// `cpu` is about to enter a guest with address-space `tag` at `time()`:
    /// logs the tag's owner if the CPU held something else. Only `cpu`
    /// itself calls this, on every guest entry (cheap when nothing changed:
    /// the clock is read only for a record).
    pub fn entering(&self, cpu: usize, time: impl FnOnce() -> u64, tag: u32) {
        let domain = self.owner_of(tag).unwrap_or(UNKNOWN_DOMAIN);
        let Some(holding) = self.holding.get(cpu) else {
            return;
        };
        if holding.load(Ordering::Relaxed) != u64::from(domain) + 1 {
            self.record(cpu, time(), Some(domain));
        }
    }

    /// `cpu` made a context switch at `time`: whatever it entered before is
    /// no longer loaded (it holds nothing until its next guest entry).
    pub fn switched(&self, cpu: usize, time: u64) {
        if self
            .holding
            .get(cpu)
            .is_some_and(|h| h.load(Ordering::Relaxed) != IDLE)
        {
            self.record(cpu, time, None);
        }
    }

    /// Logs that `cpu` holds `domain` (or nothing) from `time`. Only `cpu`
    /// itself calls this for its own ring; the arch code goes through
    /// [`SwitchLogs::entering`] and [`SwitchLogs::switched`].
    pub fn record(&self, cpu: usize, time: u64, domain: Option<u32>) {
        let Some(ring) = self.rings.get(cpu) else {
            return;
        };
        let head = ring.head.load(Ordering::Relaxed);
        // Claimed before the slot is written (a seqlock's first half): a
        // reader that sees the new slot sees the claim after its fence.
        ring.claimed.store(head + 1, Ordering::Relaxed);
        fence(Ordering::Release);
        let slot = &ring.slots[head % RING_EVENTS];
        let packed = domain.map_or(IDLE, |d| u64::from(d) + 1);
        slot[0].store(time, Ordering::Relaxed);
        slot[1].store(packed, Ordering::Relaxed);
        if let Some(holding) = self.holding.get(cpu) {
            holding.store(packed, Ordering::Relaxed);
        }
        ring.head.store(head + 1, Ordering::Release);
    }

    /// CPU `cpu`'s events `from..to` that are still in its ring, oldest
    /// first, and how many of them it overwrote while they were read (left
    /// out: a lapped slot holds a newer event, and replaying it in the old
    /// one's place would invent overlaps).
    fn events(&self, cpu: usize, from: usize, to: usize) -> (Vec<SwitchEvent>, usize) {
        let Some(ring) = self.rings.get(cpu) else {
            return (Vec::new(), 0);
        };
        let start = from.max(to.saturating_sub(RING_EVENTS));
        let events: Vec<SwitchEvent> = (start..to)
            .map(|i| {
                let slot = &ring.slots[i % RING_EVENTS];
                let packed = slot[1].load(Ordering::Relaxed);
                SwitchEvent {
                    time: slot[0].load(Ordering::Relaxed),
                    domain: (packed != IDLE).then(|| (packed - 1) as u32),
                }
            })
            .collect();
        // The seqlock's second half: slot `i` may have been rewritten once
        // event `i + RING_EVENTS` was claimed.
        fence(Ordering::Acquire);
        let claimed = ring.claimed.load(Ordering::Relaxed);
        let lapped = claimed
            .saturating_sub(RING_EVENTS)
            .saturating_sub(start)
            .min(events.len());
        (events[lapped..].to_vec(), lapped)
    }

    /// How many of CPU `cpu`'s logged switches no check has read yet.
    fn unchecked(&self, cpu: usize) -> usize {
        match (self.rings.get(cpu), self.checked.get(cpu)) {
            (Some(ring), Some(checked)) => ring
                .head
                .load(Ordering::Relaxed)
                .saturating_sub(checked.load(Ordering::Relaxed)),
            _ => 0,
        }
    }

    /// Whether some CPU has logged so much since the last check that its
    /// ring is half full: checking now, rather than at the next periodic
    /// check, loses nothing (a core-scheduled CPU switching every slice
    /// fills 8192 events in a few seconds).
    pub fn check_due(&self) -> bool {
        (0..self.rings.len()).any(|cpu| self.unchecked(cpu) > RING_EVENTS / 2)
    }

    /// Whether group `cpus` has enough unread switches to be worth a
    /// replay between the periodic checks (an eighth of a ring on one of
    /// its CPUs).
    pub fn group_due(&self, cpus: &[usize]) -> bool {
        cpus.iter()
            .any(|&cpu| self.unchecked(cpu) > RING_EVENTS / 8)
    }

    /// Replays the switches logged since the last replay on the CPUs of
    /// one group, if no other CPU is replaying any of them right now
    /// (`None`: it is, and will read these too). Any CPU may call this: a
    /// group is replayed by one of its own CPUs between the periodic
    /// checks, so the work grows with a resource's switches, not with the
    /// machine's.
    pub fn replay(&self, cpus: &[usize]) -> Option<GroupReplay> {
        let cpus: Vec<usize> = cpus
            .iter()
            .copied()
            .filter(|&c| c < self.rings.len())
            .collect();
        // Claim every CPU of the group, in order; back off if one is taken.
        for (i, &c) in cpus.iter().enumerate() {
            if self.replaying[c].swap(true, Ordering::Acquire) {
                for &taken in &cpus[..i] {
                    self.replaying[taken].store(false, Ordering::Release);
                }
                return None;
            }
        }
        let mut replay = GroupReplay::default();
        // Each CPU's log up to a snapshot of its head; the previous
        // replay's last event is replayed again so a CPU's state carries
        // over.
        let heads: Vec<usize> = cpus
            .iter()
            .map(|&c| self.rings[c].head.load(Ordering::Acquire))
            .collect();
        let logs: Vec<Vec<SwitchEvent>> = cpus
            .iter()
            .zip(&heads)
            .map(|(&c, &head)| {
                let from = self.checked[c].load(Ordering::Relaxed).saturating_sub(1);
                let (events, lapped) = self.events(c, from, head);
                replay.lost += lapped;
                events
            })
            .collect();
        let slices: Vec<&[SwitchEvent]> = logs.iter().map(Vec::as_slice).collect();
        replay.overlaps = find_overlaps(&cpus, &slices);
        for (&c, &head) in cpus.iter().zip(&heads) {
            let previous = self.checked[c].swap(head, Ordering::Relaxed);
            let new = head.saturating_sub(previous);
            replay.lost += new.saturating_sub(RING_EVENTS);
            replay.switches += new;
        }
        for &c in &cpus {
            self.replaying[c].store(false, Ordering::Release);
        }
        self.total_switches
            .fetch_add(replay.switches as u64, Ordering::Relaxed);
        self.total_overlaps
            .fetch_add(replay.overlaps.len() as u64, Ordering::Relaxed);
        Some(replay)
    }

    /// Replays the switches logged since the last check on every group of
    /// CPUs that must never hold two domains at once (see
    /// [`shared_resources`]), and sums up.
    pub fn check(&self, groups: &[Vec<usize>]) -> CheckReport {
        let mut report = CheckReport {
            resources: groups.len(),
            ..CheckReport::default()
        };
        for cpus in groups {
            if let Some(replay) = self.replay(cpus) {
                report.overlaps.extend(replay.overlaps);
                report.lost += replay.lost;
            }
            let on_resource: u64 = cpus
                .iter()
                .filter_map(|&c| self.rings.get(c))
                .map(|ring| ring.head.load(Ordering::Acquire) as u64)
                .sum();
            if report
                .busiest
                .as_ref()
                .is_none_or(|(_, n)| on_resource > *n)
            {
                report.busiest = Some((cpus.clone(), on_resource));
            }
        }
        report.total_switches = self.total_switches.load(Ordering::Relaxed);
        report.total_overlaps = self.total_overlaps.load(Ordering::Relaxed);
        report
    }

    /// [`SwitchLogs::check`], logged: an ERROR line per overlap (the QEMU
    /// tests fail on it), one for lost events, and the running totals.
    pub fn check_and_log(&self, groups: &[Vec<usize>]) {
        if groups.is_empty() {
            return;
        }
        let report = self.check(groups);
        log_findings(&report.overlaps, report.lost);
        let (cpus, busiest) = report.busiest.clone().unwrap_or_default();
        log::info!(
            "coresidency: {} switches checked on {} shared resources (busiest: {busiest} on cpus {}), {} overlaps",
            report.total_switches,
            report.resources,
            crate::config::format_cpu_list(&cpus.iter().copied().collect::<sched::CpuSet>()),
            report.total_overlaps
        );
    }
}

/// An ERROR line per overlap (the QEMU tests fail on it) and one for lost
/// events.
fn log_findings(overlaps: &[Overlap], lost: usize) {
    for overlap in overlaps {
        log::error!(
            "coresidency: OVERLAP at counter {}: cpu {} ran dom{} while cpu {} ran dom{}",
            overlap.time,
            overlap.cpus.0,
            overlap.domains.0,
            overlap.cpus.1,
            overlap.domains.1
        );
    }
    if lost > 0 {
        log::error!("coresidency: {lost} switches were overwritten before they could be checked");
    }
}

/// The checker the arch code runs: the switch logs and the CPUs' own
/// identities, which decide (with the scheduler's resources) which CPUs are
/// replayed together ([`crate::sibling_view::checked_groups`]).
pub struct Checker {
    /// Every CPU's log.
    pub logs: SwitchLogs,
    /// The groups of CPUs that say they are threads of one core, from
    /// their identities (set once, after bring-up).
    siblings: platform::sync::Once<Vec<Vec<usize>>>,
    /// The groups the last periodic check replayed, for the CPUs that
    /// replay their own group in between ([`Runtime::replay_own_coresidency`]).
    groups: platform::sync::Mutex<Vec<Vec<usize>>>,
}

impl Checker {
    /// A checker for `cpus` CPUs that know nothing of their identities yet.
    pub fn new(cpus: usize) -> Self {
        Self {
            logs: SwitchLogs::new(cpus),
            siblings: platform::sync::Once::new(),
            groups: platform::sync::Mutex::new(Vec::new()),
        }
    }

    /// Takes what each CPU read about itself at bring-up and logs how it
    /// compares with the firmware `topology` the scheduler groups by: an
    /// ERROR line per disagreement (the scheduler may let two threads of
    /// one core run different domains), else one line saying what the
    /// check can rely on. Returns the disagreements.
    pub fn set_identities(
        &self,
        identities: Vec<Option<Identity>>,
        topology: &Topology,
    ) -> Vec<Disagreement> {
        let found = disagreements(&identities, topology);
        for disagreement in &found {
            log::error!("coresidency: the CPUs and the firmware topology disagree: {disagreement}");
        }
        if found.is_empty() {
            if names_threads(&identities) {
                log::info!(
                    "coresidency: the CPUs' own view of their SMT siblings agrees with the firmware topology"
                );
            } else {
                log::info!(
                    "coresidency: the CPUs do not name SMT threads (MPIDR.MT clear); checking the firmware topology's resources only"
                );
            }
        }
        self.siblings.call_once(|| sibling_groups(&identities));
        found
    }

    /// The groups of CPUs to replay together for `system` now
    /// ([`crate::sibling_view::checked_groups`]); cheap enough to compute
    /// under the scheduler's locks, unlike the replay itself.
    pub fn groups(&self, system: &System) -> Vec<Vec<usize>> {
        checked_groups(system, self.siblings.get().map_or(&[], Vec::as_slice))
    }

    /// [`Checker::groups`] from what `builder` gathered part by part.
    pub fn groups_from(&self, builder: GroupsBuilder) -> Vec<Vec<usize>> {
        builder.finish(self.siblings.get().map_or(&[], Vec::as_slice))
    }
}

impl<A: Arch> Runtime<A> {
    /// Sets up the checker once, on the boot CPU before guests run: switch
    /// logs for the CPUs of `topology`, and what each CPU read about itself
    /// at bring-up (`identities`, `None`: not online), compared with it.
    pub fn coresidency_init(&self, identities: Vec<Option<Identity>>, topology: &Topology) {
        let checker = self
            .checker
            .call_once(|| Checker::new(topology.len().min(sched::MAX_CPUS)));
        checker.set_identities(identities, topology);
    }

    /// Address-space tag `tag` (a VMID, an ASID) now belongs to `domain`.
    pub fn tag_given(&self, tag: u32, domain: u32) {
        if let Some(checker) = self.checker.get() {
            checker.logs.tag_given(tag, domain);
        }
    }

    /// `tag` is free again.
    pub fn tag_returned(&self, tag: u32) {
        if let Some(checker) = self.checker.get() {
            checker.logs.tag_returned(tag);
        }
    }

    /// `cpu` is about to enter a guest with address-space tag `tag`.
    pub fn entering(&self, cpu: usize, tag: u32) {
        if let Some(checker) = self.checker.get() {
            checker.logs.entering(cpu, || self.arch.switch_clock(), tag);
        }
    }

    /// `cpu` made a context switch: it holds nothing until it enters again.
    pub fn switched(&self, cpu: usize) {
        if let Some(checker) = self.checker.get() {
            checker.logs.switched(cpu, self.arch.switch_clock());
        }
    }

    /// Replays the switches logged since the last check and logs the totals
    /// (the QEMU tests read that line).
    pub fn check_coresidency(&self) {
        let Some(checker) = self.checker.get() else {
            return;
        };
        let groups = self.coresidency_groups(checker);
        checker.logs.check_and_log(&groups);
        *checker.groups.lock() = groups;
    }

    /// The groups to replay now, gathered part by part (the whole machine
    /// need not stop for a periodic check).
    fn coresidency_groups(&self, checker: &Checker) -> Vec<Vec<usize>> {
        let mut builder = GroupsBuilder::default();
        self.for_each_part(|s, _| builder.add(s));
        checker.groups_from(builder)
    }

    /// Tells the CPUs which groups they replay before the first periodic
    /// check (when the boot's domains start), so no log fills up waiting
    /// for it.
    pub fn publish_coresidency_groups(&self) {
        if let Some(checker) = self.checker.get() {
            let groups = self.coresidency_groups(checker);
            *checker.groups.lock() = groups;
        }
    }

    /// Replays, on CPU `me` (at its tick), the groups the last periodic
    /// check found whose first CPU it is, once they have enough new
    /// switches ([`SwitchLogs::group_due`]). So the replay work is spread
    /// over the machine: the periodic check on one CPU alone cannot keep
    /// up with 64 CPUs switching every slice, and it ran with that CPU's
    /// interrupts masked for as long as it took. Overlaps are logged at
    /// once; the periodic line adds them up.
    pub fn replay_own_coresidency(&self, me: usize) {
        let Some(checker) = self.checker.get() else {
            return;
        };
        // A busy list (the periodic check publishing) is looked at next tick.
        let Some(groups) = checker.groups.try_lock() else {
            return;
        };
        let mine = groups
            .iter()
            .find(|g| g.first() == Some(&me) && checker.logs.group_due(g))
            .cloned();
        drop(groups);
        if let Some(group) = mine
            && let Some(replay) = checker.logs.replay(&group)
        {
            log_findings(&replay.overlaps, replay.lost);
        }
    }

    /// Whether some CPU's log is half full, so [`Runtime::check_coresidency`]
    /// should run now rather than at its period (ask at every tick of the
    /// CPU that runs the check): a busy machine is checked as often as it
    /// needs, and nothing is overwritten unchecked.
    pub fn coresidency_check_due(&self) -> bool {
        self.checker
            .get()
            .is_some_and(|checker| checker.logs.check_due())
    }
}

/// The CPU groups whose members must never hold two domains at once: every
/// multi-CPU resource of a pool scheduled at core, cluster or socket
/// granularity.
pub fn shared_resources(system: &System) -> Vec<Vec<usize>> {
    let pools: Vec<_> = system.pools().collect();
    pools
        .into_iter()
        .filter(|&p| {
            system
                .pool_info(p)
                .is_some_and(|i| i.granularity != Granularity::Cpu)
        })
        .flat_map(|p| {
            system
                .resources(p)
                .map(|r| r.cpus.iter().collect::<Vec<_>>())
                .collect::<Vec<_>>()
        })
        .filter(|cpus| cpus.len() > 1)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logs_are_checked_incrementally_across_checks() {
        let logs = SwitchLogs::new(4);
        let groups = [alloc::vec![2, 3]];
        logs.record(2, 10, Some(1));
        logs.record(3, 11, Some(1));
        let first = logs.check(&groups);
        assert!(first.overlaps.is_empty());
        assert_eq!((first.total_switches, first.resources), (2, 1));
        assert_eq!(first.busiest, Some((alloc::vec![2, 3], 2)));
        // CPU 2 still holds dom1 from the first batch: CPU 3 loading dom2
        // now is an overlap only the carried-over state shows.
        logs.record(3, 20, None);
        logs.record(3, 30, Some(2));
        let second = logs.check(&groups);
        assert_eq!(second.busiest, Some((alloc::vec![2, 3], 4)));
        assert_eq!(second.overlaps.len(), 1);
        assert_eq!(second.overlaps[0].domains, (1, 2));
        assert_eq!((second.total_switches, second.total_overlaps), (4, 1));
        // CPUs outside every group, or beyond the logs, are not looked at;
        // the pair still overlaps (each check replays the last state).
        logs.record(0, 40, Some(9));
        logs.record(7, 40, Some(9));
        let third = logs.check(&[alloc::vec![2, 3, 9]]);
        assert_eq!(third.overlaps.len(), 1);
        assert_eq!(third.overlaps[0].domains, (1, 2));
    }

    #[test]
    fn a_ring_that_wraps_before_a_check_reports_the_loss() {
        let logs = SwitchLogs::new(2);
        for i in 0..RING_EVENTS + 5 {
            logs.record(0, i as u64, Some(1));
        }
        let report = logs.check(&[alloc::vec![0, 1]]);
        assert_eq!(report.lost, 5);
        assert!(report.overlaps.is_empty());
    }

    /// A CPU that laps its ring while the checker reads it (the checker
    /// took its snapshot of the head, then the CPU logged on): the slots it
    /// rewrote hold newer events, which must neither be replayed in the old
    /// ones' place (out of time order: phantom overlaps, as a 64-CPU run
    /// showed) nor go uncounted.
    #[test]
    fn slots_a_cpu_rewrites_while_they_are_read_are_left_out_and_counted() {
        let logs = SwitchLogs::new(1);
        for i in 0..RING_EVENTS + 10 {
            logs.record(0, i as u64, Some(1));
        }
        // Read as a check that snapshot the head at RING_EVENTS would.
        let (events, lapped) = logs.events(0, 0, RING_EVENTS);
        assert_eq!(lapped, 10);
        assert_eq!(events.len(), RING_EVENTS - 10);
        assert_eq!(
            events[0].time, 10,
            "the oldest event kept is the oldest not rewritten"
        );
        assert!(events.windows(2).all(|w| w[0].time < w[1].time));
    }

    /// A group replayed by its own CPU between the periodic checks: its
    /// overlaps are found there and counted in the next check's totals; a
    /// CPU already being replayed is left to that replay.
    #[test]
    fn a_group_replayed_between_checks_is_counted_once() {
        let logs = SwitchLogs::new(4);
        logs.record(2, 10, Some(1));
        logs.record(3, 20, Some(2));
        assert!(!logs.group_due(&[2, 3]));
        for i in 0..RING_EVENTS / 8 {
            logs.record(2, 30 + i as u64, Some(1));
        }
        assert!(logs.group_due(&[2, 3]));
        let replay = logs.replay(&[2, 3]).expect("nobody else replays");
        let found = replay.overlaps.len() as u64;
        assert!(found > 0);
        assert_eq!(replay.switches, RING_EVENTS / 8 + 2);
        logs.replaying[3].store(true, Ordering::Relaxed);
        assert_eq!(logs.replay(&[2, 3]), None, "cpu 3 is being replayed");
        logs.replaying[3].store(false, Ordering::Relaxed);
        let report = logs.check(&[alloc::vec![2, 3]]);
        // The check replays each CPU's last event again (its state carries
        // over), so an overlap that still lasts is reported again.
        assert_eq!(
            report.total_overlaps,
            found + report.overlaps.len() as u64,
            "the replay's overlaps are in the totals"
        );
        assert_eq!(report.total_switches, (RING_EVENTS / 8 + 2) as u64);
    }

    #[test]
    fn a_check_is_due_once_a_ring_is_half_full() {
        let logs = SwitchLogs::new(2);
        for i in 0..RING_EVENTS / 2 {
            logs.record(1, i as u64, Some(1));
        }
        assert!(!logs.check_due());
        logs.record(1, 0, None);
        assert!(logs.check_due());
        let _ = logs.check(&[alloc::vec![0, 1]]);
        assert!(!logs.check_due(), "checked: nothing waits");
    }

    #[test]
    fn what_a_cpu_entered_is_logged_by_the_owner_of_its_tag() {
        let logs = SwitchLogs::new(2);
        let groups = [alloc::vec![0, 1]];
        logs.tag_given(5, 1);
        logs.tag_given(6, 2);
        // Repeated entries with the same tag log once; a switch logs the
        // CPU empty until it enters again.
        logs.entering(0, || 10, 5);
        logs.entering(0, || 11, 5);
        logs.switched(0, 20);
        logs.switched(0, 21);
        logs.entering(1, || 30, 6);
        let report = logs.check(&groups);
        assert_eq!((report.total_switches, report.total_overlaps), (3, 0));
        // CPU 0 enters dom2's tag while CPU 1 still runs dom2: fine; then the
        // tag goes back and is given to dom3 while CPU 1 still holds dom2.
        logs.entering(0, || 40, 6);
        logs.switched(0, 41);
        logs.tag_returned(6);
        logs.tag_given(6, 3);
        logs.entering(0, || 50, 6);
        let report = logs.check(&groups);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].domains, (3, 2));
    }

    #[test]
    fn a_tag_nobody_owns_overlaps_with_any_domain() {
        let logs = SwitchLogs::new(2);
        logs.tag_given(1, 7);
        logs.entering(0, || 10, 1);
        logs.entering(1, || 11, 2);
        logs.entering(1, || 12, TRACKED_TAGS as u32 + 3);
        let report = logs.check(&[alloc::vec![0, 1]]);
        assert_eq!(report.overlaps.len(), 1);
        assert_eq!(report.overlaps[0].domains, (7, UNKNOWN_DOMAIN));
        assert_eq!(logs.owner_of(2), None);
    }

    fn ev(time: u64, domain: Option<u32>) -> SwitchEvent {
        SwitchEvent { time, domain }
    }

    #[test]
    fn same_domain_on_siblings_is_fine() {
        let a = [ev(10, Some(1)), ev(50, None)];
        let b = [ev(12, Some(1)), ev(40, None), ev(60, Some(2))];
        assert!(find_overlaps(&[0, 1], &[&a, &b]).is_empty());
    }

    #[test]
    fn different_domains_at_once_are_reported() {
        let a = [ev(10, Some(1)), ev(50, None)];
        let b = [ev(30, Some(2)), ev(60, None)];
        let overlaps = find_overlaps(&[4, 5], &[&a, &b]);
        assert_eq!(
            overlaps,
            vec![Overlap {
                time: 30,
                cpus: (4, 5),
                domains: (1, 2)
            }]
        );
    }

    #[test]
    fn a_hand_over_at_the_same_instant_is_not_an_overlap() {
        // A releases domain 1 and B loads domain 2 at the same counter value:
        // the clock cannot order them, and the rendezvous makes B wait for A.
        let a = [ev(10, Some(1)), ev(20, None)];
        let b = [ev(20, Some(2))];
        assert!(find_overlaps(&[0, 1], &[&a, &b]).is_empty());
    }

    #[test]
    fn three_cpus_and_empty_logs() {
        let a = [ev(1, Some(7))];
        let b: [SwitchEvent; 0] = [];
        let c = [ev(5, Some(8)), ev(6, Some(7))];
        let overlaps = find_overlaps(&[0, 1, 2], &[&a, &b, &c]);
        assert_eq!(overlaps.len(), 1);
        assert_eq!(overlaps[0].domains, (7, 8));
        assert!(find_overlaps(&[], &[]).is_empty());
    }
}
