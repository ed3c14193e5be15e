//! The ARM side of `sched`: the shared glue ([`hv::sched_glue`]: one global
//! [`System`] behind a spinlock, the rendezvous table, the deadlines, pool
//! operations and the console's commands) over SGI kicks, the EL2 timer as
//! scheduling timer and context switches on the exception frame.

use alloc::string::String;
use alloc::vec::Vec;

use gic::SgiTarget;
use hv::config::{Applied, Config};
use hv::sched_glue::{Arch, Glue};
use log::error;
use platform::arch::aarch64::{console, cpu, timer};
use sched::driver::{CpuEvent, DriveReport};
use sched::{CpuContext, CpuSet, DomainId, System, Time, Topology, VcpuId};

use super::GIC;

/// The SGI that asks a CPU to run its scheduler (Xen's SCHEDULE_SOFTIRQ IPI).
pub const SGI_KICK: u8 = 0;

/// What the shared glue needs from ARM: GIC SGIs, the EL2 timer, vCPU
/// switches on the exception frame, DAIF masking, the PL011 console.
pub struct ArmArch;

/// The scheduler, its pools and the console's commands.
pub static GLUE: Glue<ArmArch> = Glue::new(ArmArch);

impl Arch for ArmArch {
    fn now_ns(&self) -> Time {
        timer::now_ns()
    }

    fn kick(&self, cpus: &CpuSet) {
        let Some(gic) = GIC.get() else { return };
        for cpu in cpus.iter() {
            if let Err(e) = gic.send_sgi(SGI_KICK, SgiTarget::Cpu(cpu)) {
                error!("sched: cannot kick cpu {cpu}: {e}");
            }
        }
    }

    fn switch_to(&self, cpu: usize, context: CpuContext) {
        super::vcpu::switch_to(cpu, context);
    }

    fn cpu_index(&self) -> usize {
        cpu::index()
    }

    fn without_irqs<R>(&self, f: impl FnOnce() -> R) -> R {
        cpu::without_irqs(f)
    }

    fn rearm_timer(&self) {
        super::rearm_timer();
    }

    fn console_line(&self, args: core::fmt::Arguments<'_>) {
        console::write_fmt(format_args!("{args}\n"));
    }

    fn domain_ids(&self) -> Vec<DomainId> {
        super::domain::ids()
    }

    fn domain_summary(&self, id: DomainId) -> Option<(String, bool)> {
        super::domain::with_domain(id, |d| (d.name.clone(), d.stopped))
    }

    fn vcpu_runtime_ns(&self, vcpu: VcpuId) -> u64 {
        super::vcpu::runtime_ns(vcpu)
    }

    fn on_boot(&self, system: &System) {
        for pool in system.pools().collect::<Vec<_>>() {
            for resource in system.resources(pool) {
                for cpu in resource.cpus.iter() {
                    super::switchcost::set_resource_size(cpu, resource.cpus.len());
                }
            }
        }
    }

    fn event_started(&self) -> u64 {
        super::switchcost::start()
    }

    fn event_done(&self, cpu: usize, started: u64, report: &DriveReport) {
        super::switchcost::event_done(cpu, started, report);
    }
}

/// Runs `f` on the system, if it has been built.
pub fn with_system<R>(f: impl FnOnce(&mut System, &Glue<ArmArch>) -> R) -> Option<R> {
    GLUE.with_system(f)
}

/// The CPU's scheduling deadline, if any.
pub fn deadline(cpu: usize) -> Option<Time> {
    GLUE.deadline(cpu)
}

/// Builds the scheduler once every CPU is up (see [`Glue::boot`]).
pub fn boot(topology: &Topology, config: Option<&Config>) -> Applied {
    GLUE.boot(topology, config)
}

/// A scheduling kick or timer on this CPU: run the scheduler to the end.
pub fn on_event(event: CpuEvent) {
    GLUE.on_event(event);
}
