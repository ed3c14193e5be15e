//! What a trace proves and measures, from its events alone: each CPU's run
//! intervals, the core-scheduling promise checked a second, independent way
//! (no two CPUs of one sched resource ever ran different domains at the same
//! moment; the hypervisor's own co-residency checker works from guest
//! entries, this one from the scheduler's switches), the rendezvous skew
//! (last sibling's arrival minus the first's) and wake-to-run latency.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::event::{IDLE_DOMAIN, Kind};
use crate::text::Trace;

/// One stretch of time a CPU held one vCPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunInterval {
    /// The CPU.
    pub cpu: usize,
    /// The domain.
    pub domain: u32,
    /// The vCPU's index in it.
    pub vcpu: u32,
    /// From (ns, inclusive).
    pub start_ns: u64,
    /// To (ns, exclusive).
    pub end_ns: u64,
    /// Why the CPU switched to it: the last event on that CPU that made it
    /// schedule (a timer, a kick, a block or yield of the vCPU it ran), if
    /// the trace holds one.
    pub reason: Option<Kind>,
}

/// The events that make a CPU run its scheduler: what a switch's reason
/// can be.
fn is_reason(kind: Kind) -> bool {
    matches!(
        kind,
        Kind::TimerFire | Kind::KickReceived | Kind::Block | Kind::Yield
    )
}

/// Up to when `cpu`'s record is complete: the session's end, or, if it
/// dropped events, its last recorded event (what came after is unknown).
pub fn known_until(trace: &Trace, cpu: usize) -> u64 {
    let Some(record) = trace.cpus.get(cpu) else {
        return trace.started_ns;
    };
    if record.dropped == 0 {
        return trace.stopped_ns;
    }
    record.events.last().map_or(trace.started_ns, |e| e.time_ns)
}

/// Each CPU's run intervals, in time order. A CPU holds what its last
/// [`Kind::Switch`] loaded, from that switch to the next (or to
/// [`known_until`]). Before its first switch it holds nothing if the trace
/// started at boot; otherwise what it held is unknown and no interval is
/// made for it (so nothing there can be checked).
pub fn run_intervals(trace: &Trace) -> Vec<Vec<RunInterval>> {
    (0..trace.cpus.len())
        .map(|cpu| {
            let end = known_until(trace, cpu);
            let mut intervals = Vec::new();
            // Idle (from boot) and unknown (started later) both make no
            // interval until the first switch.
            let mut holding: Option<(u32, u32, u64, Option<Kind>)> = None;
            let close =
                |holding: Option<(u32, u32, u64, Option<Kind>)>, at: u64, out: &mut Vec<_>| {
                    if let Some((domain, vcpu, since, reason)) = holding
                        && at > since
                    {
                        out.push(RunInterval {
                            cpu,
                            domain,
                            vcpu,
                            start_ns: since,
                            end_ns: at,
                            reason,
                        });
                    }
                };
            let mut reason = None;
            for event in &trace.cpus[cpu].events {
                if event.time_ns > end {
                    break;
                }
                if is_reason(event.kind) {
                    reason = Some(event.kind);
                }
                if event.kind != Kind::Switch {
                    continue;
                }
                close(holding, event.time_ns, &mut intervals);
                holding = (event.domain != IDLE_DOMAIN).then_some((
                    event.domain,
                    event.vcpu,
                    event.time_ns,
                    reason,
                ));
            }
            close(holding, end, &mut intervals);
            intervals
        })
        .collect()
}

/// Two CPUs of one sched resource that held different domains at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiblingOverlap {
    /// The resource (its master CPU).
    pub resource: u32,
    /// The two CPUs.
    pub cpus: (usize, usize),
    /// The domains they held.
    pub domains: (u32, u32),
    /// When the overlap started and ended (ns).
    pub start_ns: u64,
    /// See `start_ns`.
    pub end_ns: u64,
}

/// The promise checked over a whole trace.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct SiblingCheck {
    /// Every overlap found.
    pub overlaps: Vec<SiblingOverlap>,
    /// Resources of two or more CPUs checked.
    pub resources: usize,
    /// Times a CPU of such a resource went from one domain to another:
    /// without any, there was nothing the promise could have broken.
    pub handovers: usize,
    /// Run intervals on such resources.
    pub intervals: usize,
}

/// Checks, for every resource with two or more CPUs (by the CPUs' places in
/// the trace), that no two of its CPUs held different domains at the same
/// moment, up to the earliest [`known_until`] of its CPUs.
pub fn sibling_overlaps(trace: &Trace) -> SiblingCheck {
    let intervals = run_intervals(trace);
    let resources = resources(trace);
    let mut check = SiblingCheck::default();
    for (&resource, cpus) in resources.iter().filter(|(_, cpus)| cpus.len() > 1) {
        check.resources += 1;
        let window_end = cpus
            .iter()
            .map(|&c| known_until(trace, c))
            .min()
            .unwrap_or(0);
        for &cpu in cpus {
            check.intervals += intervals[cpu].len();
            check.handovers += intervals[cpu]
                .windows(2)
                .filter(|w| w[0].domain != w[1].domain)
                .count();
        }
        for (i, &a) in cpus.iter().enumerate() {
            for &b in &cpus[i + 1..] {
                overlaps_of(
                    resource,
                    &intervals[a],
                    &intervals[b],
                    window_end,
                    &mut check.overlaps,
                );
            }
        }
    }
    check
}

/// The CPUs of each sched resource (by master), from the CPUs' places.
fn resources(trace: &Trace) -> BTreeMap<u32, Vec<usize>> {
    let mut resources: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (cpu, record) in trace.cpus.iter().enumerate() {
        if let Some(resource) = record.place.resource {
            resources.entry(resource).or_default().push(cpu);
        }
    }
    resources
}

/// The overlaps of two CPUs' sorted intervals before `window_end`.
fn overlaps_of(
    resource: u32,
    a: &[RunInterval],
    b: &[RunInterval],
    window_end: u64,
    out: &mut Vec<SiblingOverlap>,
) {
    let (mut i, mut j) = (0, 0);
    while let (Some(x), Some(y)) = (a.get(i), b.get(j)) {
        let start = x.start_ns.max(y.start_ns);
        let end = x.end_ns.min(y.end_ns).min(window_end);
        if start < end && x.domain != y.domain {
            out.push(SiblingOverlap {
                resource,
                cpus: (x.cpu, y.cpu),
                domains: (x.domain, y.domain),
                start_ns: start,
                end_ns: end,
            });
        }
        if x.end_ns <= y.end_ns {
            i += 1;
        } else {
            j += 1;
        }
    }
}

/// How a domain's vCPUs shared sched resources: `shared_ns` is the time
/// two CPUs of one resource both ran vCPUs of the domain (summed over CPU
/// pairs), `run_ns` the domain's run time on resources of two or more CPUs.
/// Spread placement keeps `shared_ns` at 0 while the pool has a free
/// resource; fixed placement packs a unit's vCPUs onto one resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sharing {
    /// Time two of its vCPUs ran on one resource at once, ns.
    pub shared_ns: u64,
    /// Its run time on multi-CPU resources, ns.
    pub run_ns: u64,
}

/// [`Sharing`] of `domain` over the whole trace.
pub fn resource_sharing(trace: &Trace, domain: u32) -> Sharing {
    let intervals = run_intervals(trace);
    let ours = |cpu: usize| intervals[cpu].iter().filter(|i| i.domain == domain);
    let mut sharing = Sharing::default();
    for cpus in resources(trace).values().filter(|cpus| cpus.len() > 1) {
        for (i, &a) in cpus.iter().enumerate() {
            sharing.run_ns += ours(a).map(|r| r.end_ns - r.start_ns).sum::<u64>();
            for &b in &cpus[i + 1..] {
                // Both lists are sorted: walk them together.
                let (mut x, mut y) = (ours(a).peekable(), ours(b).peekable());
                while let (Some(p), Some(q)) = (x.peek(), y.peek()) {
                    let start = p.start_ns.max(q.start_ns);
                    sharing.shared_ns += p.end_ns.min(q.end_ns).saturating_sub(start);
                    if p.end_ns <= q.end_ns {
                        x.next();
                    } else {
                        y.next();
                    }
                }
            }
        }
    }
    sharing
}

/// Per rendezvous (resource and generation) that two or more CPUs arrived
/// at: the last arrival minus the first, in ns, keyed by resource.
pub fn rendezvous_skews(trace: &Trace) -> BTreeMap<u32, Vec<u64>> {
    let mut arrivals: BTreeMap<(u32, u64), (u64, u64, usize)> = BTreeMap::new();
    for event in trace
        .cpus
        .iter()
        .flat_map(|c| &c.events)
        .filter(|e| e.kind == Kind::RendezvousArrive)
    {
        let entry = arrivals
            .entry((event.domain, event.arg))
            .or_insert((u64::MAX, 0, 0));
        entry.0 = entry.0.min(event.time_ns);
        entry.1 = entry.1.max(event.time_ns);
        entry.2 += 1;
    }
    let mut skews: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
    for ((resource, _), (first, last, count)) in arrivals {
        if count > 1 {
            skews.entry(resource).or_default().push(last - first);
        }
    }
    skews
}

/// For every wake of a vCPU: the ns until a CPU next switched to it (wakes
/// it never ran after, within the trace, are left out).
pub fn wake_to_run(trace: &Trace) -> Vec<u64> {
    let mut runs: BTreeMap<(u32, u32), Vec<u64>> = BTreeMap::new();
    for event in trace.cpus.iter().flat_map(|c| &c.events) {
        if event.kind == Kind::Switch && event.domain != IDLE_DOMAIN {
            runs.entry((event.domain, event.vcpu))
                .or_default()
                .push(event.time_ns);
        }
    }
    for times in runs.values_mut() {
        times.sort_unstable();
    }
    trace
        .cpus
        .iter()
        .flat_map(|c| &c.events)
        .filter(|e| e.kind == Kind::Wake)
        .filter_map(|wake| {
            let times = runs.get(&(wake.domain, wake.vcpu))?;
            let next = times.get(times.partition_point(|&t| t < wake.time_ns))?;
            Some(next - wake.time_ns)
        })
        .collect()
}

/// How many guest exits each domain took, by exit class (the `arg` of
/// [`Kind::GuestExit`]: the ESR exception class on ARM, the SVM exit code
/// on x86), over the whole trace.
pub fn exits_by_class(trace: &Trace) -> BTreeMap<u32, BTreeMap<u64, u64>> {
    let mut exits: BTreeMap<u32, BTreeMap<u64, u64>> = BTreeMap::new();
    for event in trace.cpus.iter().flat_map(|c| &c.events) {
        if event.kind == Kind::GuestExit {
            *exits
                .entry(event.domain)
                .or_default()
                .entry(event.arg)
                .or_default() += 1;
        }
    }
    exits
}

/// Percentiles of a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Percentiles {
    /// Sample size.
    pub count: usize,
    /// Median.
    pub p50: u64,
    /// 90th percentile.
    pub p90: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest.
    pub max: u64,
}

impl Percentiles {
    /// The nearest-rank percentiles of `sample` (all 0 when empty).
    pub fn of(mut sample: Vec<u64>) -> Percentiles {
        sample.sort_unstable();
        let rank = |p: usize| {
            if sample.is_empty() {
                return 0;
            }
            let index = (p * sample.len()).div_ceil(100).saturating_sub(1);
            sample[index.min(sample.len() - 1)]
        };
        Percentiles {
            count: sample.len(),
            p50: rank(50),
            p90: rank(90),
            p99: rank(99),
            max: sample.last().copied().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ClassSet, Event};
    use crate::text::{CpuPlace, CpuTrace, Origin};
    use alloc::vec;

    fn ev(time_ns: u64, kind: Kind, domain: u32, vcpu: u32, arg: u64) -> Event {
        Event {
            time_ns,
            kind,
            domain,
            vcpu,
            arg,
        }
    }

    fn switch(time_ns: u64, domain: u32) -> Event {
        ev(time_ns, Kind::Switch, domain, 0, 0)
    }

    #[test]
    fn sharing_counts_the_time_two_vcpus_of_a_domain_held_one_resource() {
        // cpu0 runs dom1 10..500 then dom2; cpu1 runs dom1 10..300 then
        // dom2: dom1 shares the core 10..300, and runs 490 + 290 ns.
        let trace = core((500, 500), (300, 300));
        let one = resource_sharing(&trace, 1);
        assert_eq!(
            one,
            Sharing {
                shared_ns: 290,
                run_ns: 780
            }
        );
        let two = resource_sharing(&trace, 2);
        assert_eq!(two.shared_ns, 500, "dom2 on both from 500 to 1000");
        assert_eq!(resource_sharing(&trace, 9), Sharing::default());
    }

    /// Two CPUs of resource 0 switching dom1 -> idle -> dom2 at the given
    /// times: `(cpu0 to idle, cpu0 to dom2)`, `(cpu1 ...)`.
    fn core(cpu0: (u64, u64), cpu1: (u64, u64)) -> Trace {
        let place = CpuPlace {
            pool: Some(0),
            resource: Some(0),
        };
        let cpu = |(idle, next): (u64, u64)| CpuTrace {
            place,
            dropped: 0,
            events: vec![switch(10, 1), switch(idle, IDLE_DOMAIN), switch(next, 2)],
        };
        Trace {
            classes: ClassSet::DEFAULT,
            origin: Origin::Boot,
            started_ns: 0,
            stopped_ns: 1000,
            cpus: vec![cpu(cpu0), cpu(cpu1)],
        }
    }

    #[test]
    fn exits_are_counted_per_domain_and_class_on_every_cpu() {
        let mut trace = core((500, 500), (300, 300));
        trace.cpus[0].events.extend([
            ev(20, Kind::GuestExit, 1, 0, 0x16),
            ev(30, Kind::GuestExit, 1, 0, 0x24),
            ev(40, Kind::GuestExit, 1, 0, 0x16),
        ]);
        trace.cpus[1].events.extend([
            ev(20, Kind::GuestExit, 1, 1, 0x16),
            ev(600, Kind::GuestExit, 2, 0, 0x01),
        ]);
        let exits = exits_by_class(&trace);
        assert_eq!(exits[&1], BTreeMap::from([(0x16, 3), (0x24, 1)]));
        assert_eq!(exits[&2], BTreeMap::from([(0x01, 1)]));
        assert_eq!(exits.len(), 2, "switches are not exits");
    }

    #[test]
    fn siblings_that_switch_together_do_not_overlap() {
        let check = sibling_overlaps(&core((100, 120), (110, 115)));
        assert_eq!(check.overlaps, []);
        assert_eq!(check.resources, 1);
        assert_eq!(check.intervals, 4);
        assert_eq!(check.handovers, 2);
    }

    #[test]
    fn a_sibling_that_loads_the_next_domain_early_is_an_overlap() {
        // cpu 0 loads dom2 at 105 while cpu 1 holds dom1 until 110.
        let check = sibling_overlaps(&core((100, 105), (110, 115)));
        assert_eq!(
            check.overlaps,
            [SiblingOverlap {
                resource: 0,
                cpus: (0, 1),
                domains: (2, 1),
                start_ns: 105,
                end_ns: 110,
            }]
        );
    }

    #[test]
    fn cpus_of_different_resources_or_the_same_domain_never_overlap() {
        let mut trace = core((100, 105), (110, 115));
        trace.cpus[1].place.resource = Some(1);
        assert_eq!(sibling_overlaps(&trace).overlaps, []);
        assert_eq!(sibling_overlaps(&trace).resources, 0);
        let mut same = core((100, 105), (110, 115));
        same.cpus[0].events[2].domain = 1;
        same.cpus[1].events[2].domain = 1;
        assert_eq!(sibling_overlaps(&same).overlaps, []);
    }

    #[test]
    fn a_cpu_that_dropped_events_is_only_known_up_to_its_last_event() {
        // cpu 1's ring filled after its switch to idle at 110: its later
        // switch is lost, but it must not count as holding anything past 110.
        let mut trace = core((100, 120), (110, 115));
        trace.cpus[1].events.pop();
        trace.cpus[1].dropped = 1;
        assert_eq!(known_until(&trace, 1), 110);
        assert_eq!(known_until(&trace, 0), 1000);
        // Without the drop count the missing switch would go unnoticed, but
        // not with it: cpu 0's dom2 after 120 is beyond the window.
        assert_eq!(sibling_overlaps(&trace).overlaps, []);
        let intervals = run_intervals(&trace);
        assert_eq!(intervals[1].last().unwrap().end_ns, 110);
    }

    #[test]
    fn a_trace_started_on_a_running_machine_checks_nothing_before_a_switch() {
        let mut trace = core((100, 105), (110, 115));
        trace.origin = Origin::Start;
        trace.cpus[1].events.remove(0);
        // cpu 1's dom1 before 110 is unknown, so no overlap can be shown.
        assert_eq!(sibling_overlaps(&trace).overlaps, []);
    }

    #[test]
    fn skew_is_last_arrival_minus_first_per_generation() {
        let mut trace = core((100, 120), (110, 115));
        trace.cpus[0]
            .events
            .push(ev(101, Kind::RendezvousArrive, 0, 0, 7));
        trace.cpus[1]
            .events
            .push(ev(111, Kind::RendezvousArrive, 0, 0, 7));
        trace.cpus[1]
            .events
            .push(ev(300, Kind::RendezvousArrive, 0, 0, 8));
        let skews = rendezvous_skews(&trace);
        assert_eq!(skews.get(&0), Some(&vec![10]));
    }

    #[test]
    fn wake_to_run_is_the_time_to_the_next_switch_to_that_vcpu() {
        let mut trace = core((100, 120), (110, 115));
        trace.cpus[0].events.insert(0, ev(5, Kind::Wake, 2, 0, 0));
        trace.cpus[0].events.push(ev(500, Kind::Wake, 3, 0, 0));
        // dom2 vCPU 0 first runs at 115 (cpu 1); dom3 never does.
        assert_eq!(wake_to_run(&trace), [110]);
    }

    #[test]
    fn each_run_interval_names_what_made_its_cpu_switch() {
        let mut trace = core((100, 120), (110, 115));
        let events = &mut trace.cpus[0].events;
        events.insert(0, ev(5, Kind::KickReceived, 0, 0, 0));
        events.insert(2, ev(95, Kind::TimerFire, 0, 0, 0));
        let reasons: Vec<Option<Kind>> =
            run_intervals(&trace)[0].iter().map(|i| i.reason).collect();
        assert_eq!(reasons, [Some(Kind::KickReceived), Some(Kind::TimerFire)]);
        assert_eq!(run_intervals(&trace)[1][0].reason, None);
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let p = Percentiles::of((1..=100).rev().collect());
        assert_eq!(
            (p.count, p.p50, p.p90, p.p99, p.max),
            (100, 50, 90, 99, 100)
        );
        assert_eq!(Percentiles::of(vec![]), Percentiles::default());
        assert_eq!(Percentiles::of(vec![7]).p99, 7);
    }
}
