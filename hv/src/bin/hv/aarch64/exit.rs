//! Synchronous exits from guests: decode the syndrome (`hv::arm::trap`), then emulate
//! (PSCI, hypercalls, MMIO devices), block, or stop the domain.

use core::arch::asm;

use aarch64_cpu::registers::{
    ELR_EL1, ESR_EL1, ESR_EL2, FAR_EL1, FAR_EL2, HPFAR_EL2, SPSR_EL1, VBAR_EL1,
};
use tock_registers::interfaces::{Readable, Writeable};

// The emulated PL011 each domain sees is where its device tree says.
use hv::arm::guest_dt::{UART_BASE as UART_IPA, UART_SIZE};
use hv::arm::idregs::{self, IdRegister};
use hv::arm::inject::Access;
use hv::arm::trap::{self, Exit, MmioAccess, SysRegAccess, SysRegEncoding};
use hv::arm::vpsci::PsciAction;
use hv::hypercall::{self, Caller, HypercallAction, Service};
use hv::runtime::VCPU_RELEASE_TIMEOUT_NS;
use hv::runtime::calls::DomainCalls;
use log::{error, info, warn};
use platform::arch::aarch64::exceptions::{GuestAsync, TrapFrame};
use platform::arch::aarch64::{console, cpu, timer};
use sched::driver::CpuEvent;
use sched::{DomainId, VcpuId};

use super::guest_timer::GuestTimer;
use super::runtime::RUNTIME;
use super::{domain, vcpu};

/// SMCCC "not supported" (-1).
const NOT_SUPPORTED: u64 = u64::MAX;

fn read_esr_far_hpfar() -> (u64, u64, u64) {
    (ESR_EL2.get(), FAR_EL2.get(), HPFAR_EL2.get())
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
    super::vgic::after_exit(me);
    RUNTIME.trace_exit(domain, index, trap::exception_class(esr));
    let exit = trap::decode(esr, far, hpfar);
    // The instruction that trapped. Wrapping: a guest may run code at the
    // very top of its address space, as the CPU itself would wrap.
    let pc = frame.elr;
    frame.elr = pc.wrapping_add(exit.pc_advance_bytes(esr));
    match exit {
        Exit::Hvc { imm } => smccc_call(frame, domain, index, imm),
        Exit::Smc { imm } => smccc_call(frame, domain, index, imm),
        Exit::Wfi => block_until_event(me, domain, index),
        Exit::Wfe => yield_cpu(me),
        Exit::DataAbort(access) if emulate_mmio(frame, domain, index, &access) => {}
        Exit::SysReg(access) if access.is(SysRegEncoding::ICC_SGI1R_EL1) && !access.read => {
            let value = if usize::from(access.rt) < 31 {
                frame.x[usize::from(access.rt)]
            } else {
                0
            };
            send_sgi(domain, index, value);
        }
        Exit::SysReg(access) if super::debug_regs::is_debug_access(&access) => {
            debug_access(me, frame, pc, &access);
        }
        Exit::SysReg(access)
            if access.read
                && let Some(id) = IdRegister::from_encoding(
                    access.op0, access.op1, access.crn, access.crm, access.op2,
                ) =>
        {
            // HCR_EL2.TID3: the guest reads the CPU's ID registers with the
            // features the hypervisor does not virtualise hidden.
            if usize::from(access.rt) < 31 {
                frame.x[usize::from(access.rt)] = idregs::sanitise(id, read_id_register(id));
            }
        }
        Exit::SysReg(access) if access.read => {
            // Other trapped reads (implementation-defined registers under
            // TIDCP) read as zero rather than killing the guest.
            if usize::from(access.rt) < 31 {
                frame.x[usize::from(access.rt)] = 0;
            }
        }
        Exit::SysReg(_) => {}
        Exit::CacheMaintenanceAbort { .. } => {}
        Exit::DataAbort(access) => {
            let kind = if access.write {
                "store to"
            } else {
                "load from"
            };
            let what = format_args!(
                "vCPU {index}: {}-byte {kind} IPA {:#x}, outside its memory and devices (instruction at PC {pc:#x}, register x{})",
                access.width.bytes(),
                access.ipa,
                access.register
            );
            let access = if access.write {
                Access::Write
            } else {
                Access::Read
            };
            unbacked_access(frame, domain, pc, far, access, what);
        }
        Exit::DataAbortNoSyndrome {
            ipa,
            write,
            stage1_walk,
            ..
        } if !in_ram(domain, ipa)
            && domain::with_domain(domain, |d| emulated_device_at(d, ipa))
                .flatten()
                .is_none() =>
        {
            // Its page tables (or an access the CPU could not describe)
            // point at guest-physical space with nothing behind it: an
            // external abort, as KVM injects for a walk outside memory.
            let what = if stage1_walk {
                "stage-1 table walk to"
            } else {
                "access without syndrome to"
            };
            unbacked_access(
                frame,
                domain,
                pc,
                far,
                if write && !stage1_walk {
                    Access::Write
                } else {
                    Access::Read
                },
                format_args!(
                    "vCPU {index}: {what} IPA {ipa:#x}, outside its memory and devices (PC {pc:#x})"
                ),
            )
        }
        Exit::InstructionAbort { ipa, .. } if !in_ram(domain, ipa) => unbacked_access(
            frame,
            domain,
            pc,
            far,
            Access::Fetch,
            format_args!(
                "vCPU {index}: instruction fetch from IPA {ipa:#x}, outside its memory (PC {pc:#x})"
            ),
        ),
        other => {
            stop_domain(
                domain,
                format_args!("vCPU {index}: {other:?} at PC {pc:#x}"),
            );
        }
    }
    super::vgic::before_entry(me, frame);
    vcpu::leave_handler(me);
}

/// A trapped debug register access: the vCPU takes over its debug
/// registers and runs the instruction again (`debug_regs`), or it read
/// MDRAR_EL1 (zero: no ROM table).
fn debug_access(me: usize, frame: &mut TrapFrame, pc: u64, access: &SysRegAccess) {
    let outcome = vcpu::with_loaded(me, |s| {
        super::debug_regs::on_trapped_access(&mut s.debug, access)
    });
    match outcome {
        Some(super::debug_regs::Trapped::Retry) => frame.elr = pc,
        Some(super::debug_regs::Trapped::Emulated) | None => {
            if access.read && usize::from(access.rt) < 31 {
                frame.x[usize::from(access.rt)] = 0;
            }
        }
    }
}

/// Whether `ipa` is in domain `domain`'s RAM.
fn in_ram(domain: DomainId, ipa: u64) -> bool {
    domain::with_domain(domain, |d| d.ram.contains(&ipa)).unwrap_or(false)
}

/// The guest touched guest-physical space with nothing behind it (`what`
/// says how). As real hardware and KVM do, it takes a synchronous external
/// abort at EL1 (a prefetch abort for a fetch): ELR_EL1 = the faulting
/// `pc`, FAR_EL1 = the virtual address `far`, ESR_EL1 from
/// [`hv::arm::inject::external_abort`], and it resumes at its vector. Logged
/// within the domain's warning budget. A domain whose config says
/// `fail_stop` is stopped instead (a strict partition).
fn unbacked_access(
    frame: &mut TrapFrame,
    domain: DomainId,
    pc: u64,
    far: u64,
    access: Access,
    what: core::fmt::Arguments<'_>,
) {
    if domain::with_domain(domain, |d| d.fail_stop).unwrap_or(true) {
        stop_domain(domain, what);
        return;
    }
    domain::guest_warn(
        domain,
        format_args!("{what}: synchronous external abort injected"),
    );
    let abort = hv::arm::inject::external_abort(frame.spsr, access);
    // These are the guest's own EL1 registers, live on this CPU while it
    // handles the guest's exit (saved from here at its next switch): they
    // receive the exception exactly as the hardware would have written them.
    ELR_EL1.set(pc);
    SPSR_EL1.set(frame.spsr);
    ESR_EL1.set(abort.esr);
    FAR_EL1.set(far);
    frame.elr = VBAR_EL1.get().wrapping_add(abort.vector_offset);
    frame.spsr = hv::arm::inject::HANDLER_PSTATE;
}

/// A physical FIQ or SError taken while a guest ran (HCR_EL2.FMO/AMO route
/// them to EL2). An SError is the asynchronous abort of something the guest
/// did; the hypervisor raises no FIQ. Either way the domain that ran is
/// stopped, with the syndrome, and the CPU goes on with its next vCPU
/// instead of parking with this one loaded (QEMU's TCG raises neither from a
/// guest, so no scenario reaches this; see the README).
pub fn handle_async(frame: &mut TrapFrame, what: GuestAsync) {
    let me = cpu::index();
    vcpu::enter_handler(me, frame);
    let (esr, _, _) = read_esr_far_hpfar();
    let Some((domain, index)) = vcpu::with_loaded(me, |s| (DomainId(s.domain.domain), s.index))
    else {
        error!("exit: cpu {me} took a guest {what:?} with no vCPU loaded (ESR {esr:#x}); ignored");
        vcpu::leave_handler(me);
        return;
    };
    super::vgic::after_exit(me);
    stop_domain(
        domain,
        format_args!(
            "vCPU {index}: physical {what:?} taken while it ran (ESR {esr:#x}, PC {:#x})",
            frame.elr
        ),
    );
    super::vgic::before_entry(me, frame);
    vcpu::leave_handler(me);
}

/// PSCI calls go to the domain's virtual PSCI; the vendor range to the
/// hypercall dispatcher; anything else answers NOT_SUPPORTED.
fn smccc_call(frame: &mut TrapFrame, domain: DomainId, index: u32, imm: u16) {
    let x = frame.x;
    match hypercall::route(imm, x[0]) {
        Service::Psci => {}
        Service::Hypervisor => return hypercall(frame, domain, index),
        _ => {
            frame.x[0] = NOT_SUPPORTED;
            return;
        }
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
                power_off(id);
            }
        }
        PsciAction::StopDomain => end_domain(
            domain,
            log::Level::Info,
            format_args!("powered off (PSCI SYSTEM_OFF)"),
        ),
        PsciAction::RestartDomain => restart_domain(domain, &vcpus),
        PsciAction::ArchWorkaround => {
            super::speculation::flush(cpu::index());
            frame.x[0] = outcome.x0;
        }
        PsciAction::ForwardWorkaround2 { enable } => {
            super::speculation::forward_workaround_2(enable);
            frame.x[0] = outcome.x0;
        }
        _ => frame.x[0] = outcome.x0,
    }
}

fn start_vcpu(domain: DomainId, index: usize, id: VcpuId, entry: u64, context_id: u64) {
    let Some((context, mpidr)) = vcpu::domain_context_of(id) else {
        return;
    };
    if domain::is_pending(domain) {
        // A reset or power-off of the whole domain wins over CPU_ON.
        return;
    }
    // Its state is replaced below; a CPU that still holds it (a CPU_ON right
    // after its CPU_OFF) must have switched it out first, or it would save
    // into freed memory. That CPU was kicked by the block: wait, bounded.
    if !RUNTIME.wait_until_released(id, VCPU_RELEASE_TIMEOUT_NS) {
        error!(
            "domain {}: vCPU {index} is still held by a CPU; CPU_ON ignored",
            domain.0
        );
        return;
    }
    if let Err(why) = vcpu::reset(
        id,
        vcpu::VcpuState::new(context, index as u32, mpidr, entry, context_id),
    ) {
        error!(
            "domain {}: vCPU {index}: CPU_ON ignored: its state cannot be reset ({why})",
            domain.0
        );
        return;
    }
    domain::with_domain(domain, |d| d.psci.vcpu_started(index));
    // Drop the pause that held it off (see `power_off`), and any block.
    if let Some(Err(e)) = RUNTIME.with_vcpu(id, |s, p| {
        s.vcpu_wake(id, p).and_then(|()| s.vcpu_unpause(id, p))
    }) {
        error!("domain {}: cannot start vCPU {index}: {e}", domain.0);
    }
}

/// Takes a vCPU out of scheduling until PSCI `CPU_ON` starts it again. Like
/// Xen's `_VPF_down`, a powered-off vCPU holds one pause (a block would be
/// undone by the next interrupt or timer wake-up aimed at it): only
/// [`start_vcpu`] drops it. The rest of its sched unit keeps running; its
/// CPU runs idle in the unit's slot.
fn power_off(id: VcpuId) {
    if let Some(Err(e)) = RUNTIME.with_vcpu(id, |s, p| s.vcpu_pause(id, p).map(|_| ())) {
        warn!("exit: cannot power off vCPU {}: {e}", id.0);
    }
    RUNTIME.on_event(CpuEvent::Kick);
}

/// Reads the real ID group 3 register `id` (`S3_0_C0_C<crm>_<op2>`). The
/// encoding must be an immediate of MRS, hence one arm per register.
fn read_id_register(id: IdRegister) -> u64 {
    macro_rules! read {
        ($($crm:literal => [$($op2:literal),*]),* $(,)?) => {
            match (id.crm, id.op2) {
                $($(
                    ($crm, $op2) => {
                        let value: u64;
                        // SAFETY: reading an ID register from EL2 has no side
                        // effects (unallocated ones in this space read as zero).
                        unsafe {
                            asm!(concat!("mrs {}, S3_0_C0_C", $crm, "_", $op2), out(reg) value)
                        };
                        value
                    }
                )*)*
                _ => 0,
            }
        };
    }
    read! {
        1 => [0, 1, 2, 3, 4, 5, 6, 7],
        2 => [0, 1, 2, 3, 4, 5, 6, 7],
        3 => [0, 1, 2, 3, 4, 5, 6, 7],
        4 => [0, 1, 2, 3, 4, 5, 6, 7],
        5 => [0, 1, 2, 3, 4, 5, 6, 7],
        6 => [0, 1, 2, 3, 4, 5, 6, 7],
        7 => [0, 1, 2, 3, 4, 5, 6, 7],
    }
}

/// The guest executed WFI: if its virtual timer is armed in the future, block
/// the vCPU until then (or until another event wakes it); otherwise resume.
fn block_until_event(me: usize, domain: DomainId, index: u32) {
    let deliverable = domain::with_domain(domain, |d| {
        d.vgic.has_deliverable(index as usize).unwrap_or(false)
    });
    if deliverable == Some(true) {
        return; // An interrupt is already waiting: WFI completes at once.
    }
    // Both EL1 timers count the physical counter (CNTVOFF_EL2 is 0).
    let armed = GuestTimer::ALL
        .into_iter()
        .filter_map(GuestTimer::armed_deadline)
        .min();
    if armed.is_some_and(|cval| cval <= timer::counter()) {
        return; // Already due: the interrupt is pending, no need to sleep.
    }
    let Some(id) = vcpu::loaded(me) else { return };
    if let Some(cval) = armed {
        RUNTIME.wake_at(me, id, timer::counter_to_ns(cval));
    } else if !super::vgic::delivers_interrupts() {
        // No timer armed and no virtual interrupt can wake it on this host
        // (GICv2 without list-register save/restore): a bounded nap instead.
        RUNTIME.wake_at(me, id, timer::now_ns() + super::IDLE_VCPU_NAP_NS);
    }
    RUNTIME.block(id);
}

fn yield_cpu(me: usize) {
    if let Some(id) = vcpu::loaded(me) {
        RUNTIME.yield_vcpu(id);
    }
}

/// Stops a domain after a fault it cannot recover from; the others go on.
pub fn stop_domain(domain: DomainId, reason: core::fmt::Arguments<'_>) {
    end_domain(domain, log::Level::Error, reason);
}

/// Takes a domain out of the scheduler (its vCPUs leave their CPUs at once);
/// the other domains go on. `level`: an error for a fault, info for a guest
/// that powered itself off.
pub(super) fn end_domain(domain: DomainId, level: log::Level, reason: core::fmt::Arguments<'_>) {
    let name = domain::with_domain(domain, |d| {
        d.stopped = true;
        d.name.clone()
    });
    super::input::remove_domain(domain);
    log::log!(
        level,
        "domain {} ({}): stopped: {reason}",
        domain.0,
        name.as_deref().unwrap_or("?")
    );
    if let Some(Err(e)) = RUNTIME.with_system(|s, p| s.domain_destroy(domain, p)) {
        error!(
            "domain {}: cannot remove it from the scheduler: {e}",
            domain.0
        );
    }
    // Its memory, tables and VMID go back once its vCPUs are off every CPU.
    domain::schedule_work(domain, domain::Pending::Destroy);
    RUNTIME.on_event(CpuEvent::Kick);
}

/// PSCI SYSTEM_RESET: every vCPU of the domain is paused (each leaves its
/// CPU on its own kick); once none runs, the housekeeping tick reloads the
/// domain from its image and starts vCPU 0. The other domains go on.
fn restart_domain(domain: DomainId, vcpus: &[VcpuId]) {
    request_restart(domain, vcpus, "PSCI SYSTEM_RESET");
}

/// A restart of `domain` asked for by `by` (the guest's reset, the
/// console); false if one is under way already.
pub(super) fn request_restart(domain: DomainId, vcpus: &[VcpuId], by: &str) -> bool {
    if domain::is_pending(domain) {
        return false;
    }
    let name = domain::with_domain(domain, |d| d.name.clone());
    info!(
        "domain {} ({}): restarting ({by})",
        domain.0,
        name.as_deref().unwrap_or("?")
    );
    if let Err(e) = RUNTIME.pause_for_restart(vcpus) {
        error!("domain {}: cannot pause it for the reset: {e}", domain.0);
    }
    domain::schedule_work(domain, domain::Pending::Restart);
    RUNTIME.on_event(CpuEvent::Kick);
    true
}

/// The emulated PL011's interrupt (the guest DT's SPI, as on QEMU virt).
pub(super) const UART_INTID: u32 = hv::arm::guest_dt::UART_SPI + 32;

/// The domain's devices the hypervisor emulates.
#[derive(Clone, Copy)]
enum EmulatedDevice {
    /// Its PL011 (absent with `console = "none"`).
    Uart,
    /// Its virtual distributor and redistributors.
    Vgic,
}

/// Which of `d`'s emulated devices `ipa` falls in, if any.
fn emulated_device_at(d: &domain::Domain, ipa: u64) -> Option<EmulatedDevice> {
    if d.emulated_uart && (UART_IPA..UART_IPA + UART_SIZE).contains(&ipa) {
        return Some(EmulatedDevice::Uart);
    }
    d.vgic
        .mmio_regions()
        .iter()
        .any(|&(base, size)| ipa >= base && ipa - base < size)
        .then_some(EmulatedDevice::Vgic)
}

/// What an emulated MMIO access came to (see [`emulate_mmio`]).
enum MmioOutcome {
    /// Neither the domain's PL011 nor its vGIC is there.
    Unclaimed,
    /// The PL011's (an error if the guest's access was wrong).
    Uart(Option<hv::arm::vpl011::Pl011Error>),
    /// The vGIC's: vCPUs a write made something deliverable for, or the
    /// guest's mistake.
    Vgic(Result<Option<hv::arm::vgic::VcpuMask>, hv::arm::vgic::VgicError>),
}

/// Emulates a data abort in the domain's PL011 or vGIC windows, with one
/// domain look-up (the exits of MMIO-heavy guests take this path); false
/// if the address is in neither (or the domain is gone).
fn emulate_mmio(frame: &mut TrapFrame, domain: DomainId, index: u32, access: &MmioAccess) -> bool {
    let outcome = domain::with_domain(domain, |d| {
        match emulated_device_at(d, access.ipa) {
            None => return MmioOutcome::Unclaimed,
            Some(EmulatedDevice::Uart) => {
                let offset = access.ipa.wrapping_sub(UART_IPA);
                let mut sink = |line: &[u8]| console::write_bytes(line);
                let result = d.uart.emulate(offset, access, &mut frame.x, &mut sink);
                let level = d.uart.irq_level();
                let _ = d.vgic.set_level(0, UART_INTID, level);
                return MmioOutcome::Uart(result.err());
            }
            Some(EmulatedDevice::Vgic) => {}
        }
        let offset = access.ipa.wrapping_sub(hv::arm::vgic::GICD_BASE);
        let width = access.width.bytes() as usize;
        MmioOutcome::Vgic(if access.write {
            let value = access.store_value_from(&frame.x);
            d.vgic
                .mmio_write(index as usize, offset, width, value)
                .map(|actions| Some(actions.kick))
        } else {
            let read = d.vgic.mmio_read(index as usize, offset, width);
            let value = read.as_ref().map_or(0, |r| r.value);
            access.complete_load(&mut frame.x, value);
            read.map(|_| None)
        })
    });
    match outcome {
        None | Some(MmioOutcome::Unclaimed) => false,
        Some(MmioOutcome::Uart(error)) => {
            if let Some(e) = error {
                let offset = access.ipa.wrapping_sub(UART_IPA);
                domain::guest_warn(domain, format_args!("PL011 access at {offset:#x}: {e}"));
            }
            true
        }
        Some(MmioOutcome::Vgic(Ok(Some(kick)))) => {
            notify_all(domain, kick);
            true
        }
        Some(MmioOutcome::Vgic(Ok(None))) => true,
        Some(MmioOutcome::Vgic(Err(e))) => {
            domain::guest_warn(
                domain,
                format_args!(
                    "vGIC {} at {:#x}: {e}",
                    if access.write { "write" } else { "read" },
                    access.ipa
                ),
            );
            true
        }
    }
}

/// Wakes or kicks every vCPU of `domain` in `kick` (by index in the domain).
/// One domain look-up per target, so the exit path copies nothing.
pub(super) fn notify_all(domain: DomainId, kick: hv::arm::vgic::VcpuMask) {
    for target in kick.iter() {
        if let Some(vcpu) = domain::with_domain(domain, |d| d.vcpus.get(target).copied()).flatten()
        {
            RUNTIME.notify(vcpu);
        }
    }
}

/// A GICv3 guest's ICC_SGI1R_EL1 write: deliver the SGI to its targets.
fn send_sgi(domain: DomainId, index: u32, value: u64) {
    // An IPI names one target most of the time: its vCPU is looked up
    // under the lock the send holds, not in a second one.
    let targets = domain::with_domain(domain, |d| {
        d.vgic.send_sgi(index as usize, value).map(|delivery| {
            let only = delivery.kick.only().and_then(|t| d.vcpus.get(t).copied());
            (delivery.kick, only)
        })
    });
    match targets {
        Some(Ok((_, Some(vcpu)))) => RUNTIME.notify(vcpu),
        Some(Ok((kick, None))) => notify_all(domain, kick),
        Some(Err(e)) => domain::guest_warn(domain, format_args!("SGI {value:#x}: {e}")),
        None => {}
    }
}

/// A call in the hypervisor's vendor range.
fn hypercall(frame: &mut TrapFrame, domain: DomainId, index: u32) {
    let (privileged, test_hooks) =
        domain::with_domain(domain, |d| (d.privileged, d.test_hooks)).unwrap_or((false, false));
    let caller = Caller {
        domain: domain.0,
        vcpu: index,
        privileged,
        test_hooks,
    };
    let args = [frame.x[1], frame.x[2], frame.x[3], frame.x[4], frame.x[5]];
    let outcome = hypercall::dispatch(
        &caller,
        frame.x[0],
        args,
        &mut DomainCalls::new(&RUNTIME, domain),
    );
    frame.x[..4].copy_from_slice(&outcome.regs);
    match outcome.action {
        HypercallAction::Resume => {}
        HypercallAction::Yield => yield_cpu(cpu::index()),
        HypercallAction::Block { .. } => block_until_event(cpu::index(), domain, index),
    }
}
