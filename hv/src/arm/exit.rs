//! Synchronous exits from guests: decode the syndrome (`hv::trap`), then emulate
//! (PSCI, hypercalls, MMIO devices), block, or stop the domain.

use core::arch::asm;

use hv::trap::{self, Exit, MmioAccess};
use hv::vpsci::{self, PsciAction};
use log::{error, info, warn};
use platform::arch::aarch64::exceptions::TrapFrame;
use platform::arch::aarch64::{cpu, timer};
use sched::driver::CpuEvent;
use sched::{DomainId, VcpuId};

use super::{domain, schedule, vcpu};

/// The emulated PL011 each domain sees (QEMU virt's address).
const UART_IPA: u64 = 0x0900_0000;
const UART_SIZE: u64 = 0x1000;

fn read_esr_far_hpfar() -> (u64, u64, u64) {
    let (esr, far, hpfar): (u64, u64, u64);
    // SAFETY: reading the fault syndrome registers has no side effects.
    unsafe {
        asm!("mrs {}, esr_el2", out(reg) esr);
        asm!("mrs {}, far_el2", out(reg) far);
        asm!("mrs {}, hpfar_el2", out(reg) hpfar);
    }
    (esr, far, hpfar)
}

/// The guest-exit handler (registered with the exception vectors).
pub fn handle(frame: &mut TrapFrame) {
    let me = cpu::index();
    vcpu::enter_handler(me, frame);
    let (esr, far, hpfar) = read_esr_far_hpfar();
    let Some((domain, index)) = vcpu::with_loaded(me, |s| (DomainId(s.domain.domain), s.index))
    else {
        error!("exit: cpu {me} took a guest exit with no vCPU loaded (ESR {esr:#x}); ignored");
        vcpu::leave_handler(me);
        return;
    };
    let exit = trap::decode(esr, far, hpfar);
    frame.elr += exit.pc_advance_bytes();
    match exit {
        Exit::Hvc { .. } | Exit::Smc { .. } => smccc_call(frame, domain, index),
        Exit::Wfi => block_until_event(me, domain, index),
        Exit::Wfe => yield_cpu(me),
        Exit::DataAbort(access) if (UART_IPA..UART_IPA + UART_SIZE).contains(&access.ipa) => {
            uart_access(frame, domain, &access);
        }
        Exit::CacheMaintenanceAbort { .. } => {}
        other => {
            let pc = frame.elr - exit_pc_adjust(&other);
            stop_domain(
                me,
                domain,
                format_args!("vCPU {index}: {other:?} at PC {pc:#x}"),
            );
        }
    }
    vcpu::leave_handler(me);
}

fn exit_pc_adjust(exit: &Exit) -> u64 {
    exit.pc_advance_bytes()
}

/// PSCI calls go to the domain's virtual PSCI; everything else is a hypercall.
fn smccc_call(frame: &mut TrapFrame, domain: DomainId, index: u32) {
    let x = frame.x;
    if !vpsci::is_psci_or_arch_call(x[0]) {
        // Hypercalls are wired when the dispatcher lands; until then the ABI's
        // "not supported" answer, never a crash.
        frame.x[0] = u64::MAX; // -1: NOT_SUPPORTED
        return;
    }
    let outcome = domain::with_domain(domain, |d| {
        let ram = d.ram.clone();
        (
            d.psci.call(index as usize, x[0], x[1], x[2], x[3], &ram),
            d.vcpus.clone(),
        )
    });
    let Some((outcome, vcpus)) = outcome else {
        return;
    };
    match outcome.action {
        PsciAction::Resume => frame.x[0] = outcome.x0,
        PsciAction::WaitForInterrupt => {
            frame.x[0] = outcome.x0;
            block_until_event(cpu::index(), domain, index);
        }
        PsciAction::StartVcpu {
            vcpu: target,
            entry,
            context_id,
        } => {
            frame.x[0] = outcome.x0;
            let Some(&id) = vcpus.get(target) else { return };
            start_vcpu(domain, target, id, entry, context_id);
        }
        PsciAction::VcpuOff => {
            info!("domain {}: vCPU {index} off (PSCI CPU_OFF)", domain.0);
            if let Some(&id) = vcpus.get(index as usize) {
                block(cpu::index(), id);
            }
        }
        PsciAction::StopDomain => stop_domain(
            cpu::index(),
            domain,
            format_args!("powered off (PSCI SYSTEM_OFF)"),
        ),
        PsciAction::RestartDomain => stop_domain(
            cpu::index(),
            domain,
            format_args!("asked for a reset (PSCI SYSTEM_RESET); restart is not supported yet"),
        ),
        _ => frame.x[0] = outcome.x0,
    }
}

fn start_vcpu(domain: DomainId, index: usize, id: VcpuId, entry: u64, context_id: u64) {
    let Some((context, mpidr)) = vcpu::domain_context_of(id) else {
        return;
    };
    vcpu::install(
        id,
        vcpu::VcpuState::new(context, index as u32, mpidr, entry, context_id),
    );
    domain::with_domain(domain, |d| d.psci.vcpu_started(index));
    if let Some(Err(e)) = schedule::with_system(|s, p| s.vcpu_wake(id, p)) {
        error!("domain {}: cannot start vCPU {index}: {e}", domain.0);
    }
}

/// The guest executed WFI: if its virtual timer is armed in the future, block
/// the vCPU until then (or until another event wakes it); otherwise resume.
fn block_until_event(me: usize, _domain: DomainId, _index: u32) {
    let (ctl, cval): (u64, u64);
    // SAFETY: reading the running vCPU's virtual timer registers.
    unsafe {
        asm!("mrs {}, cntv_ctl_el0", out(reg) ctl);
        asm!("mrs {}, cntv_cval_el0", out(reg) cval);
    }
    let enabled = ctl & 1 != 0 && ctl & 2 == 0;
    if enabled && cval <= timer::counter() {
        return; // Already due: the interrupt is pending, no need to sleep.
    }
    let Some(id) = vcpu::loaded(me) else { return };
    if enabled {
        super::wakeup::add(me, id, timer::counter_to_ns(cval));
    } else {
        // No timer armed: it sleeps until something else wakes it. Without
        // virtual interrupts wired yet, give it a bounded nap instead.
        super::wakeup::add(me, id, timer::now_ns() + super::IDLE_VCPU_NAP_NS);
    }
    block(me, id);
}

fn block(me: usize, id: VcpuId) {
    if let Some(Err(e)) = schedule::with_system(|s, p| s.vcpu_block(id, p)) {
        warn!("exit: cannot block vCPU {}: {e}", id.0);
    }
    schedule::on_event(CpuEvent::Kick);
    let _ = me;
}

fn yield_cpu(me: usize) {
    if let Some(id) = vcpu::loaded(me) {
        if let Some(Err(e)) = schedule::with_system(|s, p| s.vcpu_yield(id, p)) {
            warn!("exit: cannot yield vCPU {}: {e}", id.0);
        }
        schedule::on_event(CpuEvent::Kick);
    }
}

/// Stops a domain after a fault it cannot recover from; the others go on.
pub fn stop_domain(me: usize, domain: DomainId, reason: core::fmt::Arguments<'_>) {
    let name = domain::with_domain(domain, |d| {
        d.stopped = true;
        d.name.clone()
    });
    error!(
        "domain {} ({}): stopped: {reason}",
        domain.0,
        name.as_deref().unwrap_or("?")
    );
    if let Some(Err(e)) = schedule::with_system(|s, p| s.domain_destroy(domain, p)) {
        error!(
            "domain {}: cannot remove it from the scheduler: {e}",
            domain.0
        );
    }
    schedule::on_event(CpuEvent::Kick);
    let _ = me;
}

/// Minimal PL011 for the console until the full emulation is wired: data
/// register writes go to the console with the domain's prefix; the flag
/// register reads "transmit FIFO empty, receive FIFO empty".
fn uart_access(frame: &mut TrapFrame, domain: DomainId, access: &MmioAccess) {
    const DATA: u64 = 0x00;
    const FLAGS: u64 = 0x18;
    const FLAGS_TXFE_RXFE: u64 = 0x90;
    let offset = access.ipa - UART_IPA;
    let register = usize::from(access.register);
    if access.write {
        if offset == DATA && register < 31 {
            super::console_out(domain, frame.x[register] as u8);
        }
    } else if register < 31 {
        let raw = if offset == FLAGS { FLAGS_TXFE_RXFE } else { 0 };
        frame.x[register] = access.load_value(raw);
    }
}
