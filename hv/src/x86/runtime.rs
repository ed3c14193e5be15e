//! The x86 side of `sched`: the shared glue ([`hv::sched_glue`]: one global
//! [`System`] behind a spinlock, the rendezvous table, the deadlines, pool
//! operations and the console's commands) over APIC IPI kicks, the APIC
//! timer as scheduling timer and switches that the per-CPU run loop enters.

use alloc::string::String;
use alloc::vec::Vec;

use hv::config::{Applied, Config};
use hv::sched_glue::{Arch, Glue};
use platform::arch::x86_64::{console, cpu, timer};
use sched::driver::CpuEvent;
use sched::{CpuContext, CpuSet, DomainId, System, Time, Topology, VcpuId};

/// The IPI vector that asks a CPU to run its scheduler (Xen's
/// SCHEDULE_SOFTIRQ IPI).
pub const VECTOR_KICK: u8 = 0x43;

/// What the shared glue needs from x86: APIC IPIs, the APIC timer, switches
/// the run loop enters, IF masking, the COM1 console.
pub struct X86Arch;

/// The scheduler, its pools and the console's commands (a line typed at
/// the hypervisor console goes to [`Glue::run_command`]).
pub static GLUE: Glue<X86Arch> = Glue::new(X86Arch);

impl Arch for X86Arch {
    fn now_ns(&self) -> Time {
        timer::now_ns()
    }

    fn kick(&self, cpus: &CpuSet) {
        for cpu in cpus.iter() {
            super::send_ipi(cpu, VECTOR_KICK);
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
}

/// Runs `f` on the system, if it has been built.
pub fn with_system<R>(f: impl FnOnce(&mut System, &Glue<X86Arch>) -> R) -> Option<R> {
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
