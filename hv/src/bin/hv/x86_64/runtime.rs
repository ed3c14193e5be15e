//! The x86 back-end of the runtime ([`hv::runtime`]: the scheduler, the
//! deadlines and wake-ups, the block/wake protocol, the co-residency logs,
//! pool operations and the console's commands): APIC IPI kicks, the APIC
//! timer, switches that the per-CPU run loop enters, the virtual APIC's
//! (and PIC's) view of a vCPU's pending interrupts.

use alloc::string::String;
use alloc::vec::Vec;

use hv::runtime::{Arch, Runtime};
use platform::arch::x86_64::{console, cpu, timer};
use sched::{CpuContext, CpuSet, DomainId, Time, VcpuId};

/// The IPI vector that asks a CPU to run its scheduler (Xen's
/// SCHEDULE_SOFTIRQ IPI).
pub const VECTOR_KICK: u8 = 0x43;

/// What the runtime needs from x86: APIC IPIs, the APIC timer, switches
/// the run loop enters, IF masking, the COM1 console.
pub struct X86Arch;

/// The scheduler, its pools and the console's commands (a line typed at
/// the hypervisor console goes to [`Runtime::run_command`]).
pub static RUNTIME: Runtime<X86Arch> = Runtime::new(X86Arch);

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

    fn rearm_timer(&self, deadline: Option<Time>) {
        super::arm_timer(deadline);
    }

    fn nudge(&self, cpu: usize) {
        super::send_ipi(cpu, super::VECTOR_NUDGE);
    }

    fn loaded_on(&self, vcpu: VcpuId) -> Option<usize> {
        super::vcpu::loaded_on(vcpu)
    }

    fn interrupt_pending(&self, vcpu: VcpuId) -> bool {
        super::vcpu::power(vcpu).wakes_on_interrupt() && super::exit::interrupt_requested(vcpu)
    }

    fn switch_clock(&self) -> u64 {
        timer::tsc()
    }

    fn console_line(&self, args: core::fmt::Arguments<'_>) {
        console::write_fmt(format_args!("{args}\n"));
    }

    fn domain_console_write(&self, id: DomainId, bytes: &[u8]) {
        super::domain::with_domain(id, |d| {
            d.uart
                .console_write(bytes, &mut |line: &[u8]| console::write_bytes(line));
        });
    }

    fn domain_ids(&self) -> Vec<DomainId> {
        super::domain::ids()
    }

    fn domain_destroy(&self, id: DomainId) -> Result<(), &'static str> {
        super::exit::end_domain(
            id,
            log::Level::Info,
            format_args!("destroyed by the toolstack"),
        );
        Ok(())
    }

    fn domain_restart(&self, id: DomainId) -> Result<(), &'static str> {
        super::domain::request_restart(id, "toolstack")
    }

    fn domain_summary(&self, id: DomainId) -> Option<(String, bool)> {
        super::domain::with_domain(id, |d| (d.name.clone(), d.stopped))
    }

    fn vcpu_runtime_ns(&self, vcpu: VcpuId) -> u64 {
        super::vcpu::runtime_ns(vcpu)
    }

    fn vcpu_identity(&self, vcpu: VcpuId) -> Option<(DomainId, u32)> {
        super::vcpu::identity(vcpu)
    }
}
