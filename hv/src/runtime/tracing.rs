//! Scheduler tracing in the runtime: the per-CPU rings ([`trace::Rings`],
//! built at boot, [`TRACE_EVENTS_PER_CPU`] each), where events come from
//! (switches, kicks, timers and rendezvous through [`sched::Platform`];
//! wake/block/yield in [`super::events`]; pool operations in
//! [`super::pool_ops`]) and the console's `trace` commands.
//!
//! Always compiled in: while nothing records, an event costs one relaxed
//! load and a branch ([`trace::Rings::wants`] is asked before the clock is
//! read or a vCPU looked up). Recording never locks or allocates.

use core::sync::atomic::Ordering;

use log::info;
use sched::{CpuContext, CpuSet, DomainId, VcpuId};
use trace::{ClassSet, CpuPlace, Event, IDLE_DOMAIN, Kind, Rings, Trace, UNKNOWN_DOMAIN};

use super::{Arch, Runtime};

/// Events each CPU's ring holds by default (32 bytes each: 128 KiB per
/// CPU). At the default classes a busy core-scheduled CPU records about
/// 2000 events a second, so a few seconds of trace fit; a full ring drops
/// and counts. `hv.trace-events=N` sets another size.
pub const TRACE_EVENTS_PER_CPU: usize = 4096;

/// The largest ring `hv.trace-events` may ask for (32 MiB per CPU).
pub const MAX_TRACE_EVENTS_PER_CPU: usize = 1 << 20;

impl<A: Arch> Runtime<A> {
    /// `hv.trace=CLASSES` on the command line: record `classes` from the
    /// moment the scheduler is built, before any guest runs.
    pub fn trace_from_boot(&self, classes: ClassSet) {
        self.trace_at_boot.store(classes.0, Ordering::Relaxed);
    }

    /// `hv.trace-events=N`: each CPU's ring holds `events` (at most
    /// [`MAX_TRACE_EVENTS_PER_CPU`]) instead of [`TRACE_EVENTS_PER_CPU`].
    pub fn trace_ring_size(&self, events: usize) {
        let events = events.clamp(1, MAX_TRACE_EVENTS_PER_CPU);
        self.trace_capacity.store(events, Ordering::Relaxed);
    }

    /// `hv.trace-dump=SECONDS`: the boot session stops and is dumped on the
    /// console `seconds` after the boot's domains start
    /// ([`Runtime::boot_domains_started`]; for a capture nobody types at, such
    /// as `cargo xtask trace`), at the boot CPU's next housekeeping tick.
    pub fn trace_dump_after(&self, seconds: u32) {
        self.trace_dump_after_ns
            .store(u64::from(seconds) * 1_000_000_000, Ordering::Relaxed);
    }

    /// The boot CPU's housekeeping tick: dumps the boot session once its
    /// time is up ([`Runtime::trace_dump_after`]).
    pub fn trace_housekeeping(&self) {
        let due = self.trace_dump_at.load(Ordering::Relaxed);
        if due != 0 && self.arch.now_ns() >= due && self.trace.get().is_some() {
            self.trace_dump_at.store(0, Ordering::Relaxed);
            self.trace_dump();
        }
    }

    /// Builds the rings for `cpus` CPUs and starts the boot session if one
    /// was asked for.
    pub(super) fn trace_init(&self, cpus: usize) {
        let asked = match self.trace_capacity.load(Ordering::Relaxed) {
            0 => TRACE_EVENTS_PER_CPU,
            n => n,
        };
        // A size from the command line the heap cannot hold falls back to
        // the default, then to no tracing: never an allocation failure.
        let built = [asked, TRACE_EVENTS_PER_CPU]
            .into_iter()
            .find_map(|capacity| Rings::try_new(cpus, capacity).map(|r| (r, capacity)));
        let Some((rings, capacity)) = built else {
            log::error!("trace: no memory for the trace rings of {cpus} CPUs; tracing is off");
            return;
        };
        if capacity != asked {
            log::error!(
                "trace: no memory for {asked} events on each of {cpus} CPUs; using {capacity}"
            );
        }
        let rings = self.trace.call_once(|| rings);
        let classes = ClassSet(self.trace_at_boot.load(Ordering::Relaxed));
        if classes.0 == 0 {
            return;
        }
        rings.start(classes, self.arch.now_ns(), true);
        info!("trace: recording {classes} from boot ({capacity} events per CPU)");
    }

    /// The boot's domains (if any) are built and started: the co-residency
    /// groups are published to the CPUs that replay them, and a boot session with
    /// `hv.trace-dump` is timed from here, not from the scheduler's start,
    /// because building the domains (copying images, clearing their memory)
    /// takes a time that depends on the host (seconds on a loaded one under
    /// QEMU) and would otherwise eat the traced run.
    pub fn boot_domains_started(&self) {
        self.publish_coresidency_groups();
        let length = self.trace_dump_after_ns.load(Ordering::Relaxed);
        let recording = self.trace_at_boot.load(Ordering::Relaxed) != 0;
        if length != 0 && recording && self.trace.get().is_some() {
            self.trace_dump_at
                .store(self.arch.now_ns().saturating_add(length), Ordering::Relaxed);
            info!("trace: dumping in {} s", length / 1_000_000_000);
        }
    }

    /// Whether `kind` is being recorded now.
    #[inline]
    pub(super) fn tracing(&self, kind: Kind) -> bool {
        self.trace.get().is_some_and(|r| r.wants(kind))
    }

    /// Records `kind` on `cpu` now, if its class is being recorded.
    #[inline]
    pub(super) fn trace(&self, cpu: usize, kind: Kind, domain: u32, vcpu: u32, arg: u64) {
        let Some(rings) = self.trace.get() else {
            return;
        };
        if rings.wants(kind) {
            rings.record(
                cpu,
                Event {
                    time_ns: self.arch.now_ns(),
                    kind,
                    domain,
                    vcpu,
                    arg,
                },
            );
        }
    }

    /// Records `kind` for `vcpu` (by its domain and index) on the calling
    /// CPU, if its class is being recorded.
    #[inline]
    pub(super) fn trace_vcpu(&self, kind: Kind, vcpu: VcpuId) {
        if self.tracing(kind) {
            let (domain, index) = self.traced_identity(vcpu);
            self.trace(self.arch.cpu_index(), kind, domain, index, 0);
        }
    }

    /// `vcpu`'s domain and index as the trace names them (an uninstalled
    /// one: [`UNKNOWN_DOMAIN`] and its global id).
    fn traced_identity(&self, vcpu: VcpuId) -> (u32, u32) {
        self.arch
            .vcpu_identity(vcpu)
            .map_or((UNKNOWN_DOMAIN, vcpu.0), |(d, i)| (d.0, i))
    }

    /// A switch on `cpu` to `context`.
    pub(super) fn trace_switch(&self, cpu: usize, context: CpuContext) {
        if !self.tracing(Kind::Switch) {
            return;
        }
        let (domain, index) = match context {
            CpuContext::Idle => (IDLE_DOMAIN, 0),
            CpuContext::Vcpu(vcpu) => self.traced_identity(vcpu),
        };
        self.trace(cpu, Kind::Switch, domain, index, 0);
    }

    /// A kick sent to `cpus` from the calling CPU.
    pub(super) fn trace_kick(&self, cpus: &CpuSet) {
        if self.tracing(Kind::KickSent) {
            let mask = cpus
                .iter()
                .take_while(|&c| c < 64)
                .fold(0u64, |m, c| m | 1 << c);
            self.trace(self.arch.cpu_index(), Kind::KickSent, 0, 0, mask);
        }
    }

    /// A guest exit of class `class` (ARM: the exception class ESR_EL2.EC;
    /// x86: the VMCB exit code) by vCPU `index` of `domain` on the calling
    /// CPU; recorded only while the `exits` class is on.
    #[inline]
    pub fn trace_exit(&self, domain: DomainId, index: u32, class: u64) {
        self.trace(
            self.arch.cpu_index(),
            Kind::GuestExit,
            domain.0,
            index,
            class,
        );
    }

    /// `trace start CLASSES`.
    pub(super) fn trace_start(&self, classes: ClassSet) {
        let Some(rings) = self.trace.get() else {
            return self.say(format_args!(
                "error: tracing is not ready (no scheduler yet)"
            ));
        };
        rings.start(classes, self.arch.now_ns(), false);
        self.say(format_args!(
            "trace: recording {classes} ({} events per CPU)",
            rings.capacity()
        ));
    }

    /// `trace stop`.
    pub(super) fn trace_stop(&self) {
        if let Some(rings) = self.trace.get() {
            rings.stop(self.arch.now_ns());
        }
        self.trace_status();
    }

    /// `trace`: whether it records, and what the rings hold.
    pub(super) fn trace_status(&self) {
        let Some(rings) = self.trace.get() else {
            return self.say(format_args!("trace: not ready (no scheduler yet)"));
        };
        let (held, dropped) = rings.counts();
        let recording = rings.recording();
        if recording.0 == 0 {
            self.say(format_args!(
                "trace: stopped; {held} events held, {dropped} dropped"
            ));
        } else {
            self.say(format_args!(
                "trace: recording {recording}; {held} events held, {dropped} dropped"
            ));
        }
    }

    /// `trace dump`: stops recording and prints the rings in the text
    /// encoding ([`trace::text`]), with each CPU's pool and resource now.
    pub(super) fn trace_dump(&self) {
        let Some(rings) = self.trace.get() else {
            return self.say(format_args!(
                "error: tracing is not ready (no scheduler yet)"
            ));
        };
        rings.stop(self.arch.now_ns());
        let snapshot = rings.snapshot(self.arch.now_ns());
        let places = self
            .with_system(|s, _| {
                (0..rings.cpus())
                    .map(|cpu| {
                        let pool = s.pool_of_cpu(cpu);
                        let resource = pool.and_then(|p| {
                            s.resources(p)
                                .find(|r| r.cpus.contains(cpu))
                                .map(|r| r.id.0 as u32)
                        });
                        CpuPlace {
                            pool: pool.map(|p| p.0),
                            resource,
                        }
                    })
                    .collect::<alloc::vec::Vec<_>>()
            })
            .unwrap_or_default();
        let trace = Trace::from_snapshot(snapshot, &places);
        info!(
            "trace: dumping {} events ({} dropped)",
            trace.total_events(),
            trace.total_dropped()
        );
        trace.encode(|line| self.say(format_args!("{line}")));
    }
}
