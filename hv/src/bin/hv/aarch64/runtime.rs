//! The ARM back-end of the runtime ([`hv::runtime`]: the scheduler, the
//! deadlines and wake-ups, the block/wake protocol, the co-residency logs,
//! pool operations and the console's commands): GIC SGI kicks, the EL2
//! timer, vCPU switches on the exception frame, the vGIC's view of a
//! vCPU's pending interrupts.

use alloc::string::String;
use alloc::vec::Vec;

use gic::SgiTarget;
use hv::runtime::{Arch, Runtime};
use log::error;
use platform::arch::aarch64::{console, cpu, timer};
use sched::driver::DriveReport;
use sched::{CpuContext, CpuSet, DomainId, System, Time, VcpuId};

use super::GIC;

/// The SGI that asks a CPU to run its scheduler (Xen's SCHEDULE_SOFTIRQ IPI).
pub const SGI_KICK: u8 = 0;

/// The SGI that only makes a CPU leave its guest, so that the next entry
/// refills the list registers from the vGIC (Xen's `vcpu_kick`, an event
/// check): no scheduling decision, no scheduler lock.
pub const SGI_NUDGE: u8 = 3;

/// What the runtime needs from ARM: GIC SGIs, the EL2 timer, vCPU
/// switches on the exception frame, DAIF masking, the PL011 console.
pub struct ArmArch;

/// The scheduler, its pools and the console's commands.
pub static RUNTIME: Runtime<ArmArch> = Runtime::new(ArmArch);

impl Arch for ArmArch {
    fn now_ns(&self) -> Time {
        timer::now_ns()
    }

    fn kick(&self, cpus: &CpuSet) {
        for cpu in cpus.iter() {
            send_kick(cpu);
        }
    }

    fn nudge(&self, cpu: usize) {
        send_sgi(SGI_NUDGE, cpu, "nudge");
    }

    fn loaded_on(&self, vcpu: VcpuId) -> Option<usize> {
        super::vcpu::loaded_on(vcpu)
    }

    fn interrupt_pending(&self, vcpu: VcpuId) -> bool {
        let Some((domain, index)) = super::vcpu::identity(vcpu) else {
            return false;
        };
        super::domain::with_domain(domain, |d| {
            d.vgic.has_deliverable(index as usize).unwrap_or(false)
        }) == Some(true)
    }

    fn switch_clock(&self) -> u64 {
        timer::counter()
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

    fn domain_summary(&self, id: DomainId) -> Option<(String, bool)> {
        super::domain::with_domain(id, |d| (d.name.clone(), d.stopped))
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
        let vcpus = super::domain::with_domain(id, |d| d.vcpus.clone()).unwrap_or_default();
        if super::exit::request_restart(id, &vcpus, "toolstack") {
            Ok(())
        } else {
            Err("a restart or teardown of this domain is under way")
        }
    }

    fn vcpu_runtime_ns(&self, vcpu: VcpuId) -> u64 {
        super::vcpu::runtime_ns(vcpu)
    }

    fn vcpu_identity(&self, vcpu: VcpuId) -> Option<(DomainId, u32)> {
        super::vcpu::identity(vcpu)
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

/// Sends the scheduling SGI to `cpu` (its delivery timed).
fn send_kick(cpu: usize) {
    super::switchcost::kick_sent(cpu);
    send_sgi(SGI_KICK, cpu, "kick");
}

/// Sends SGI `sgi` to `cpu`; a refusal is logged with `what` it was for.
fn send_sgi(sgi: u8, cpu: usize, what: &str) {
    let Some(gic) = GIC.get() else { return };
    if let Err(e) = gic.send_sgi(sgi, SgiTarget::Cpu(cpu)) {
        error!("sched: cannot {what} cpu {cpu}: {e}");
    }
}
