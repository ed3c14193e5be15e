//! Entering a vCPU and handling its `#VMEXIT`: interrupt injection through
//! V_IRQ from the emulated 8259A (vCPU 0, ExtINT) or the virtual APIC, then
//! the exit (`hv::x86::exit`): CPUID and MSR policy, the 16550 and the PIC,
//! `VMMCALL` through the shared hypercall dispatcher,
//! HLT blocking through the scheduler, and stopping the domain on a nested
//! page fault or any exit it cannot handle.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicBool, Ordering};

use guest_abi::x86::{BOOT_INFO, SIPI_VECTOR};
use hv::hypercall::{self, Caller, HypercallAction};
use hv::runtime::VCPU_RELEASE_TIMEOUT_NS;
use hv::runtime::calls::DomainCalls;
use hv::x86::acpi_pm::{AcpiPm, PowerAction};
use hv::x86::cmos_rtc::CmosRtc;
use hv::x86::debugregs::{self, DebugFault};
use hv::x86::exit::{self, Exit};
use hv::x86::fpu;
use hv::x86::guest_paging;
use hv::x86::insn::{self, Intercepted};
use hv::x86::ioapic::IoApic;
use hv::x86::mmio_insn::{self, MmioOperation};
use hv::x86::nmi::{DebugTrap, NmiEntry};
use hv::x86::pic8259::{Pic8259, PicWarning};
use hv::x86::pit8254::Pit8254;
use hv::x86::policy::{self, CpuidRegs, GuestCpu, MsrClass, VmcbMsr};
use hv::x86::power::{HaltOutcome, InitOutcome, Power, StartupOutcome};
use hv::x86::stop::MmioError;
use hv::x86::stop::{FaultRegisters, NestedTables, StopReason};
use hv::x86::uart16550::Uart16550;
use hv::x86::vlapic::{ApicMode, Destination, IcrCommand, WriteEffect};
use hv::x86::vmcb::cr::{self, RFLAGS_IF, RFLAGS_RF, RFLAGS_TF};
use hv::x86::vmcb::{event_inj, misc1, tlb_control, v_intr, vector};
use log::{error, info, warn};
use platform::arch::x86_64::{console, cpu, timer};
use sched::driver::CpuEvent;
use sched::{DomainId, VcpuId};

use super::domain;
use super::runtime::RUNTIME;
use super::vcpu::{self, Injected, VcpuState};

/// EXITINTINFO / EVENTINJ valid bit.
const EVENT_VALID: u64 = 1 << 31;

/// What the run loop does after an exit, once the vCPU's state is released.
enum After {
    /// Enter the guest again.
    Continue,
    /// Block until an interrupt for it, or the guest TSC reaches the deadline.
    Block(Option<u64>),
    /// Give up the rest of the slice.
    Yield,
    /// Stop the domain with this reason.
    Stop(StopReason),
    /// The guest powered its machine off: the domain ends (no fault).
    PoweredOff,
    /// A multiboot test kernel wrote its exit code to the test device
    /// ([`TEST_EXIT_PORT`]): the domain ends with it.
    TestExit(u32),
}

/// The test device's port in multiboot domains: a 32-bit write ends the
/// domain with that exit code, as QEMU's `isa-debug-exit` (iobase 0xf4)
/// ends QEMU, which is how kvm-unit-tests' x86 tests report their result.
const TEST_EXIT_PORT: u16 = 0xf4;

/// Enters the vCPU `vcpu` loaded on `me` once and handles its exit.
/// Interrupts are masked.
pub fn run_once(me: usize, vcpu: VcpuId) {
    let Some((domain, index, after)) = vcpu::with_loaded(me, |state| {
        let domain = DomainId(state.domain);
        let stopped = domain::with_domain(domain, |d| d.stopped).unwrap_or(true);
        if stopped {
            return (domain, state.index, After::Yield);
        }
        before_entry(me, vcpu, state);
        vcpu::run(me, vcpu, state);
        after_exit(vcpu, state);
        let after = handle(me, vcpu, state);
        (domain, state.index, after)
    }) else {
        return;
    };
    match after {
        After::Continue => {}
        After::Block(deadline) => block(me, vcpu, deadline),
        After::Yield => RUNTIME.yield_vcpu(vcpu),
        After::Stop(reason) => stop_domain(domain, format_args!("vCPU {index}: {reason}")),
        After::PoweredOff => end_domain(
            domain,
            log::Level::Info,
            format_args!("powered off (ACPI S5)"),
        ),
        After::TestExit(code) => end_domain(
            domain,
            if code == 0 {
                log::Level::Info
            } else {
                log::Level::Warn
            },
            // QEMU's isa-debug-exit status, which kvm-unit-tests' runner reads.
            format_args!(
                "exited through the test device (port {TEST_EXIT_PORT:#x}): code {code}, status {}",
                (u64::from(code) << 1) | 1
            ),
        ),
    }
}

/// Fires the virtual timer if due, offers the deliverable interrupt through
/// V_IRQ (on vCPU 0 the PIC's ExtINT request first: it bypasses the local
/// APIC's priorities, as KVM's `kvm_cpu_get_interrupt` takes it first, else
/// the APIC's highest), re-arms the host timer for the guest's deadline,
/// flushes the guest TLB if this CPU ran another vCPU last, and injects a
/// latched NMI when the guest can take it.
fn before_entry(me: usize, vcpu: VcpuId, state: &mut VcpuState) {
    let tsc = guest_tsc(state);
    state.nmi.settle(state.vmcb.save.rip);
    let nmi_blocked = state.nmi.blocked();
    let (apic_pending, deadline, task_priority, nmi_latched) = vcpu::with_apic(vcpu, |apic| {
        apic.poll_timer(tsc);
        if nmi_blocked {
            apic.merge_nmis_while_blocked();
        }
        (
            apic.pending(),
            host_deadline(state, apic.timer_deadline()),
            apic.task_priority_class(),
            apic.nmi_latched(),
        )
    })
    .unwrap_or((None, None, 0, false));
    // The guest's CR8 is its APIC's TPR (the MMIO or MSR TPR may have
    // changed it since the last run).
    state.vmcb.control.v_intr =
        (state.vmcb.control.v_intr & !v_intr::V_TPR) | u64::from(task_priority);
    let (pit_deadline, pit_delivery) = if state.index == 0 {
        poll_pit(DomainId(state.domain))
    } else {
        (None, None)
    };
    if let Some(delivery) = pit_delivery {
        deliver(DomainId(state.domain), delivery);
    }
    // The PIT's message (an I/O APIC entry may even make it an NMI) changed
    // what the APIC holds.
    let (apic_pending, deadline, nmi_latched) = if pit_delivery.is_some() {
        vcpu::with_apic(vcpu, |apic| {
            (
                apic.pending(),
                host_deadline(state, apic.timer_deadline()),
                apic.nmi_latched(),
            )
        })
        .unwrap_or((None, None, false))
    } else {
        (apic_pending, deadline, nmi_latched)
    };
    let deadline = earliest(deadline, pit_deadline);
    let pic_pending = if state.index == 0 {
        domain::with_domain(DomainId(state.domain), |d| d.pic.pending()).flatten()
    } else {
        None
    };
    let offer = match (pic_pending, apic_pending) {
        (Some(request), _) => Some((request.vector, Injected::Pic(request.irq))),
        (None, Some(vector)) => Some((vector, Injected::Apic(vector))),
        (None, None) => None,
    };
    let control = &mut state.vmcb.control;
    let mask = v_intr::V_IRQ | (0xff << v_intr::VECTOR_SHIFT) | (0xf << v_intr::PRIO_SHIFT);
    control.v_intr &= !mask;
    state.injected = None;
    if let Some((vector, source)) = offer
        && control.event_inj & EVENT_VALID == 0
    {
        control.v_intr |= v_intr::V_IRQ
            | v_intr::V_IGN_TPR
            | (0xf << v_intr::PRIO_SHIFT)
            | (u64::from(vector) << v_intr::VECTOR_SHIFT);
        state.injected = Some(source);
        if let Injected::Apic(vector) = source {
            vcpu::with_apic(vcpu, |apic| apic.offer(vector));
        }
    }
    super::set_guest_deadline(me, deadline);
    // A flush the exit's handler asked for (an emulated CR4 write) stands.
    if vcpu::note_entry(me, vcpu) {
        control.tlb_control = tlb_control::FLUSH_ASID;
    }
    nmi_before_entry(vcpu, state, nmi_latched);
}

/// Injects a latched NMI (`latched`: the APIC holds one, as read at the
/// start of `before_entry`) if the guest can take one now, else
/// single-steps it towards where it can (`hv::x86::nmi`); intercepts IRET
/// while an NMI handler runs. Through EVENTINJ, so it goes in before an
/// interrupt offered through V_IRQ, as an NMI has priority on hardware.
fn nmi_before_entry(vcpu: VcpuId, state: &mut VcpuState, latched: bool) {
    let control = &mut state.vmcb.control;
    let shadow = control.interrupt_shadow & 1 != 0;
    let event_pending = control.event_inj & EVENT_VALID != 0;
    match state
        .nmi
        .at_entry(latched, state.vmcb.save.rip, shadow, event_pending)
    {
        NmiEntry::Inject => {
            vcpu::with_apic(vcpu, |apic| apic.take_nmi());
            control.event_inj = EVENT_VALID | event_inj::TYPE_NMI | u64::from(vector::NMI);
            domain::count_trap(DomainId(state.domain), "NMIs delivered", |t| &mut t.nmis);
        }
        NmiEntry::Step => state.vmcb.save.rflags = state.nmi.start_step(state.vmcb.save.rflags),
        NmiEntry::Nothing => {}
    }
    let control = &mut state.vmcb.control;
    if state.nmi.intercept_iret() {
        control.intercept_misc1 |= misc1::IRET;
    } else {
        control.intercept_misc1 &= !misc1::IRET;
    }
}

/// The vCPU's TSC now: the host's plus its VMCB TSC offset (what its
/// RDTSC reads, and the clock of its APIC's timer).
fn guest_tsc(state: &VcpuState) -> u64 {
    timer::tsc().wrapping_add(state.vmcb.control.tsc_offset)
}

/// A deadline in the vCPU's TSC (its APIC timer's) on the host's TSC,
/// which the host timer and the block's wake-up count in.
fn host_deadline(state: &VcpuState, guest: Option<u64>) -> Option<u64> {
    guest.map(|d| d.wrapping_sub(state.vmcb.control.tsc_offset))
}

/// The earlier of two optional deadlines.
fn earliest(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Polls domain `id`'s PIT (vCPU 0's job: the PC's boot processor takes
/// IRQ 0 while the PIT matters): the guest TSC its next IRQ 0 edge comes
/// at, and the I/O APIC message an edge that came sends.
fn poll_pit(id: DomainId) -> (Option<u64>, Option<hv::x86::ioapic::Delivery>) {
    let now = timer::now_ns();
    let Some((delivery, _, next)) = domain::with_domain(id, |d| d.poll_pit(now)) else {
        return (None, None);
    };
    let deadline = next.map(|edge| timer::tsc_after_ns(edge.saturating_sub(now)));
    (deadline, delivery)
}

/// Records a taken virtual interrupt and re-injects an event whose delivery
/// the exit interrupted.
fn after_exit(vcpu: VcpuId, state: &mut VcpuState) {
    let control = &mut state.vmcb.control;
    // VMRUN has done the flush it was asked for; the next entry's is decided
    // anew (by `before_entry`, or by the exit's handler).
    control.tlb_control = tlb_control::NOTHING;
    let taken = control.v_intr & v_intr::V_IRQ == 0;
    // A CR8 write in the guest went to V_TPR: it is the APIC's TPR.
    let cr8 = (control.v_intr & v_intr::V_TPR) as u8;
    let injected = state.injected.take();
    vcpu::with_apic(vcpu, |apic| {
        if apic.task_priority_class() != cr8 {
            apic.set_task_priority_class(cr8);
        }
        // Taken: in service (and requested again if it was meanwhile);
        // not taken: withdrawn, still requested.
        if let Some(Injected::Apic(_)) = injected {
            apic.offer_ended(taken);
        }
    });
    // The INTA cycle: the request goes in service in the PIC; the guest
    // ends it with a PIC EOI.
    if let Some(Injected::Pic(irq)) = injected
        && taken
    {
        domain::with_domain(DomainId(state.domain), |d| d.pic.acknowledge(irq));
    }
    control.event_inj = if control.exit_int_info & EVENT_VALID != 0 {
        control.exit_int_info
    } else {
        0
    };
}

/// Whether this CPU saves the next RIP on intercepts (NRIPS); set once at
/// boot by [`use_next_rip`].
static NEXT_RIP_SAVED: AtomicBool = AtomicBool::new(false);

/// Records whether intercepts save the next RIP (CPUID 0x8000000A EDX bit
/// 3), and says how instruction lengths will be found.
pub fn use_next_rip(saved: bool) {
    NEXT_RIP_SAVED.store(saved, Ordering::Relaxed);
    if saved {
        info!("svm: intercepts save the next RIP (NRIPS)");
    } else {
        info!(
            "svm: no next RIP saving (NRIPS): instruction lengths are decoded from the guest's code"
        );
    }
}

/// Where the guest goes on after `instruction`, whose intercept it exited
/// on: the VMCB's next RIP when the CPU saves it (as KVM does with NRIPS),
/// otherwise RIP plus the length decoded from the guest's code, read
/// through its page tables and its memory. If the bytes cannot be read or
/// are not that instruction, the reason to stop the domain: a guessed
/// length would run it from the middle of an instruction.
fn next_rip(state: &VcpuState, instruction: Intercepted) -> Result<u64, StopReason> {
    let save = &state.vmcb.save;
    let rip = save.rip;
    let saved = state.vmcb.control.next_rip;
    if NEXT_RIP_SAVED.load(Ordering::Relaxed)
        && saved > rip
        && saved - rip <= insn::MAX_INSTRUCTION_BYTES as u64
    {
        return Ok(saved);
    }
    let fetched = fetch_instruction(state, instruction)?;
    match insn::length(fetched.as_slice(), instruction, fetched.size) {
        Ok(len) => Ok(rip.wrapping_add(u64::from(len))),
        Err(error) => Err(StopReason::Undecodable {
            instruction,
            rip,
            fetched,
            error,
        }),
    }
}

/// The bytes of the intercepted `instruction` at the guest's RIP, read
/// through its page tables and memory.
fn fetch_instruction(
    state: &VcpuState,
    instruction: Intercepted,
) -> Result<guest_paging::Fetched, StopReason> {
    let rip = state.vmcb.save.rip;
    let Some(ram) = domain::guest_ram(DomainId(state.domain)) else {
        return Err(StopReason::DomainGone { instruction, rip });
    };
    guest_paging::fetch(&state.vmcb.save, &ram).map_err(|error| StopReason::Unreadable {
        instruction,
        rip,
        error,
    })
}

/// Fetches the intercepted `instruction` at RIP and decodes its operands
/// with `decode`; bytes that do not decode stop the domain with them.
fn decode_intercepted<T>(
    state: &VcpuState,
    instruction: Intercepted,
    decode: impl FnOnce(&[u8], insn::CodeSize) -> Result<T, insn::DecodeError>,
) -> Result<T, StopReason> {
    let fetched = fetch_instruction(state, instruction)?;
    decode(fetched.as_slice(), fetched.size).map_err(|error| StopReason::Undecodable {
        instruction,
        rip: state.vmcb.save.rip,
        fetched,
        error,
    })
}

/// Moves the guest past the instruction that exited. The interrupt shadow
/// of a preceding STI or MOV SS covered that instruction only, so it ends
/// too (as KVM's skip_emulated_instruction does): left set, it would hold
/// off an interrupt for one more instruction, e.g. the CLI after `sti; hlt`.
fn advance(state: &mut VcpuState, next_rip: u64) {
    state.vmcb.save.rip = next_rip;
    state.vmcb.control.interrupt_shadow &= !1;
}

/// Handles the exit `state` just made; an exit the domain cannot go on
/// from stops it with the reason.
fn handle(me: usize, vcpu: VcpuId, state: &mut VcpuState) -> After {
    handle_exit(me, vcpu, state).unwrap_or_else(After::Stop)
}

/// Moves the guest past the intercepted `instruction` (see [`next_rip`]).
fn skip(state: &mut VcpuState, instruction: Intercepted) -> Result<(), StopReason> {
    let next = next_rip(state, instruction)?;
    advance(state, next);
    Ok(())
}

/// [`handle`]'s work; `Err` is why the domain must stop.
fn handle_exit(me: usize, vcpu: VcpuId, state: &mut VcpuState) -> Result<After, StopReason> {
    RUNTIME.trace_exit(
        DomainId(state.domain),
        state.index,
        state.vmcb.control.exit_code,
    );
    let exit = exit::decode(&state.vmcb.control);
    let rip = state.vmcb.save.rip;
    match exit {
        // The host takes the SMI once this exit is over; an INIT is the
        // host CPU's, not the guest's. Neither is this domain's doing.
        Exit::Interrupt | Exit::Nmi | Exit::InterruptWindow | Exit::Smi | Exit::Init => {
            Ok(After::Continue)
        }
        // Intercepted so that a #AC or #DB recurring in its own delivery
        // exits each time (`hv::x86::boot::EXCEPTION_INTERCEPTS`): give it
        // to the guest, as if nothing had looked. An event whose delivery
        // it interrupted (already set up for re-injection by `after_exit`)
        // goes first; a recurring #AC or #DB comes back with it.
        Exit::Exception {
            vector: vector::DB, ..
        } => {
            let mut hardware_dr6 = state.vmcb.save.dr6;
            // The hypervisor's own single step towards an NMI (`hv::x86::nmi`):
            // the guest's TF back as it was, and the #DB stays the
            // hypervisor's unless the guest stepped or hit a breakpoint too
            // (then without the single-step status it did not ask for).
            if let DebugTrap::Step { tf, forward } = state.nmi.debug_trap(hardware_dr6) {
                if !tf {
                    state.vmcb.save.rflags &= !RFLAGS_TF;
                    hardware_dr6 &= !debugregs::DR6_BS;
                }
                if !forward {
                    state.vmcb.save.dr6 = debugregs::DR6_RESET;
                    return Ok(After::Continue);
                }
            }
            domain::count_trap(
                DomainId(state.domain),
                "#DB intercepted and handed back",
                |t| &mut t.debug,
            );
            state.debug.note_debug_exception(hardware_dr6);
            state.vmcb.save.dr6 = debugregs::DR6_RESET;
            if state.vmcb.control.event_inj & EVENT_VALID == 0 {
                inject_exception(state, vector::DB, None);
            }
            Ok(After::Continue)
        }
        Exit::Exception {
            vector: vector::AC,
            error_code,
        } => {
            domain::count_trap(
                DomainId(state.domain),
                "#AC intercepted and handed back",
                |t| &mut t.alignment,
            );
            if state.vmcb.control.event_inj & EVENT_VALID == 0 {
                inject_exception(state, vector::AC, Some(error_code as u32));
            }
            Ok(After::Continue)
        }
        Exit::DebugRegister { write, .. } => debug_register(state, write),
        // An NMI handler's IRET, about to execute: NMIs stay blocked until
        // it has (`hv::x86::nmi`).
        Exit::Iret => {
            state.nmi.iret_intercepted(rip);
            Ok(After::Continue)
        }
        Exit::ControlRegisterWrite { cr: 4 } => cr4_write(vcpu, state),
        // Only CR4 writes are intercepted.
        Exit::ControlRegisterWrite { cr } => Err(StopReason::UnhandledExit {
            code: exit::code::CR_WRITE_BASE + u64::from(cr),
            info1: state.vmcb.control.exit_info1,
            info2: state.vmcb.control.exit_info2,
            rip,
        }),
        Exit::Cpuid => {
            skip(state, Intercepted::Cpuid)?;
            cpuid(vcpu, state);
            Ok(After::Continue)
        }
        Exit::Xsetbv => {
            xsetbv(state)?;
            Ok(After::Continue)
        }
        Exit::Hlt => {
            skip(state, Intercepted::Hlt)?;
            let interrupts_on = state.vmcb.save.rflags & RFLAGS_IF != 0;
            let apic_deadline =
                vcpu::with_apic(vcpu, |a| host_deadline(state, a.timer_deadline())).flatten();
            let (pit_deadline, pit_delivery) = if state.index == 0 {
                poll_pit(DomainId(state.domain))
            } else {
                (None, None)
            };
            if let Some(delivery) = pit_delivery {
                deliver(DomainId(state.domain), delivery);
            }
            let deadline = earliest(apic_deadline, pit_deadline);
            let requested = interrupt_requested_in(vcpu, DomainId(state.domain), state.index);
            let nmi = vcpu::with_apic(vcpu, |a| a.nmi_latched()).unwrap_or(false);
            Ok(
                match vcpu::with_power(vcpu, |p| p.halt(interrupts_on, requested, nmi)) {
                    Some(HaltOutcome::Continue) => After::Continue,
                    Some(HaltOutcome::BlockUntilInterrupt) => After::Block(deadline),
                    // Neither its timer, an IPI nor the PIC ends it (`block` and
                    // `notify` see its power state): only INIT.
                    Some(HaltOutcome::BlockUntilInit) | None => After::Block(None),
                },
            )
        }
        Exit::Io(io) => {
            if io.string {
                return Err(StopReason::StringIo { port: io.port, rip });
            }
            if io.port == TEST_EXIT_PORT
                && !io.input
                && domain::has_test_exit(DomainId(state.domain))
            {
                advance(state, io.next_rip);
                let mask = match io.size {
                    1 => 0xff,
                    2 => 0xffff,
                    _ => 0xffff_ffff,
                };
                return Ok(After::TestExit((state.vmcb.save.rax & mask) as u32));
            }
            let action = port_io(state, io.port, io.input, io.size);
            advance(state, io.next_rip);
            Ok(match action {
                None => After::Continue,
                Some(action) => power_action(DomainId(state.domain), action),
            })
        }
        Exit::Msr { write } => msr(me, vcpu, state, write),
        Exit::Vmmcall => {
            skip(state, Intercepted::Vmmcall)?;
            Ok(vmmcall(vcpu, state))
        }
        Exit::NestedPageFault(fault) if !fault.fetch && emulated_page(vcpu, state, fault.gpa) => {
            mmio(vcpu, state, fault.gpa)
        }
        Exit::NestedPageFault(fault) => Err(StopReason::NestedPageFault {
            access: fault.access(),
            gpa: fault.gpa,
            rip,
        }),
        Exit::Shutdown => {
            // A nested CR3 other than the domain's NPT root would be the
            // hypervisor's bug, not the guest's: say which it is.
            let nested = state.vmcb.control.n_cr3;
            let root = domain::with_domain(DomainId(state.domain), |d| d.memory.npt.root());
            let tables = match root {
                Some(root) if root == nested => NestedTables::Own,
                Some(root) => NestedTables::Foreign {
                    nested_cr3: nested,
                    root,
                },
                None => NestedTables::DomainGone { nested_cr3: nested },
            };
            Err(StopReason::TripleFault {
                rip,
                registers: Box::new(FaultRegisters::of(&state.vmcb.save, &state.vmcb.control)),
                tables,
            })
        }
        Exit::Invalid => Err(StopReason::VmrunInvalid),
        Exit::Exception { vector, error_code } => Err(StopReason::UnexpectedException {
            vector,
            error_code,
            rip,
        }),
        Exit::Other { code, info1, info2 } => Err(StopReason::UnhandledExit {
            code,
            info1,
            info2,
            rip,
        }),
    }
}

/// XSETBV: a valid XCR0 becomes the vCPU's (loaded at its next entry);
/// anything else gets the #GP (or, without CR4.OSXSAVE, the #UD) the
/// processor would raise.
fn xsetbv(state: &mut VcpuState) -> Result<(), StopReason> {
    if state.vmcb.save.cr4 & hv::x86::vmcb::cr::CR4_OSXSAVE == 0 {
        inject_exception(state, vector::UD, None);
        return Ok(());
    }
    let value = (state.gprs.rdx << 32) | (state.vmcb.save.rax & 0xffff_ffff);
    let index = state.gprs.rcx as u32;
    match fpu::check_xsetbv(index, value, state.vmcb.save.cpl, vcpu::guest_xsave()) {
        Ok(xcr0) => {
            skip(state, Intercepted::Xsetbv)?;
            state.xcr0 = xcr0;
        }
        Err(e) => {
            domain::guest_warn(
                DomainId(state.domain),
                format_args!(
                    "vCPU {}: XSETBV refused ({e:?}); injecting #GP",
                    state.index
                ),
            );
            inject_gp(state);
        }
    }
    Ok(())
}

fn cpuid(vcpu: VcpuId, state: &mut VcpuState) {
    let r = guest_cpuid(
        vcpu,
        state,
        state.vmcb.save.rax as u32,
        state.gprs.rcx as u32,
    );
    state.vmcb.save.rax = u64::from(r.eax);
    state.gprs.rbx = u64::from(r.ebx);
    state.gprs.rcx = u64::from(r.ecx);
    state.gprs.rdx = u64::from(r.edx);
}

/// What the vCPU's CPUID answers for `leaf`/`subleaf` now (`policy::cpuid`).
fn guest_cpuid(vcpu: VcpuId, state: &VcpuState, leaf: u32, subleaf: u32) -> CpuidRegs {
    let host = cpu::cpuid(leaf, subleaf);
    let (vcpus, threads_per_core) = domain::with_domain(DomainId(state.domain), |d| {
        (d.vcpus.len() as u32, d.threads_per_core)
    })
    .unwrap_or((1, 1));
    policy::cpuid(
        leaf,
        subleaf,
        CpuidRegs {
            eax: host.eax,
            ebx: host.ebx,
            ecx: host.ecx,
            edx: host.edx,
        },
        &GuestCpu {
            apic_id: state.index,
            vcpus,
            threads_per_core,
            tsc_khz: domain::tsc_khz() as u32,
            xsave: vcpu::guest_xsave(),
            xcr0: state.xcr0,
            osxsave: state.vmcb.save.cr4 & hv::x86::vmcb::cr::CR4_OSXSAVE != 0,
            apic_enabled: vcpu::with_apic(vcpu, |a| a.mode() != ApicMode::Disabled).unwrap_or(true),
        },
    )
}

/// IN/OUT: COM1 is the domain's 16550 (unless its config says `console =
/// "none"`), 0x20/0x21 and 0xA0/0xA1 its 8259A pair; any other port reads
/// as all ones and ignores writes, as an empty ISA bus does. Only the first byte of a wider access reaches a device.
/// After every device access the UART's interrupt output is the PIC's IRQ
/// 4 again; if the PIC then requests an interrupt and the access came from
/// another vCPU than 0, vCPU 0 is told.
fn port_io(state: &mut VcpuState, port: u16, input: bool, size: u8) -> Option<PowerAction> {
    let domain = DomainId(state.domain);
    let size_mask: u64 = match size {
        1 => 0xff,
        2 => 0xffff,
        _ => 0xffff_ffff,
    };
    let written = state.vmcb.save.rax as u8;
    let from_vcpu0 = state.index == 0;
    if AcpiPm::claims(port) {
        let now = timer::now_ns();
        let written = state.vmcb.save.rax as u32;
        let outcome = domain::with_domain(domain, |d| {
            let pm = d.acpi_pm.as_mut()?;
            Some(if input {
                (pm.read(port, size, now), None)
            } else {
                (0, pm.write(port, size, written))
            })
        })
        .flatten();
        return match outcome {
            Some((value, action)) => {
                if input {
                    state.vmcb.save.rax =
                        (state.vmcb.save.rax & !size_mask) | (u64::from(value) & size_mask);
                }
                action
            }
            None => {
                if input {
                    state.vmcb.save.rax |= size_mask;
                }
                None
            }
        };
    }
    if CmosRtc::claims(port) {
        let now = timer::now_ns();
        let value = domain::with_domain(domain, |d| {
            let rtc = d.rtc.as_mut()?;
            if input {
                Some(rtc.read(port, now))
            } else {
                rtc.write(port, written);
                Some(0)
            }
        })
        .flatten();
        if input {
            state.vmcb.save.rax =
                (state.vmcb.save.rax & !size_mask) | u64::from(value.unwrap_or(0xff));
        }
        return None;
    }
    if Pit8254::claims(port) {
        let now = timer::now_ns();
        let outcome = domain::with_domain(domain, |d| {
            let pit = d.pit.as_mut()?;
            Some(if input {
                (pit.read(port, now), None)
            } else {
                (0, pit.write(port, written, now))
            })
        })
        .flatten();
        match outcome {
            Some((value, warning)) => {
                if let Some(warning) = warning {
                    domain::guest_warn(domain, format_args!("PIT: {warning}"));
                }
                if input {
                    state.vmcb.save.rax =
                        (state.vmcb.save.rax & !size_mask) | (u64::from(value) & size_mask);
                }
            }
            None if input => state.vmcb.save.rax |= size_mask,
            None => {}
        }
        return None;
    }
    // COM1 is a device only where the domain has its console UART.
    let outcome = if Pic8259::claims(port) || Uart16550::claims(port) {
        domain::with_domain(domain, |d| {
            (Pic8259::claims(port) || d.emulated_uart)
                .then(|| device_access(d, port, input, written, from_vcpu0))
        })
        .flatten()
    } else {
        None
    };
    // No device there (or the domain is gone): reads float high.
    let Some((value, warning, wake, delivery)) = outcome else {
        if input {
            state.vmcb.save.rax |= size_mask;
        }
        return None;
    };
    if let Some(warning) = warning {
        warn!("domain {}: {warning}", domain.0);
    }
    if let Some(vcpu0) = wake {
        notify(vcpu0);
    }
    if let Some(delivery) = delivery {
        deliver(domain, delivery);
    }
    if input {
        state.vmcb.save.rax = (state.vmcb.save.rax & !size_mask) | (u64::from(value) & size_mask);
    }
    None
}

/// One access to the domain's 16550 or 8259A at `port` (the caller checked
/// one claims it): the value read (0 for a write), a warning to log, and
/// vCPU 0 if the PIC now requests an interrupt and the access came from
/// another vCPU.
fn device_access(
    d: &mut domain::Domain,
    port: u16,
    input: bool,
    written: u8,
    from_vcpu0: bool,
) -> (
    u8,
    Option<PicWarning>,
    Option<VcpuId>,
    Option<hv::x86::ioapic::Delivery>,
) {
    let mut warning = None;
    let value = match (Uart16550::claims(port), input) {
        (true, true) => d.uart.read(port),
        (true, false) => {
            let mut sink = |line: &[u8]| console::write_bytes(line);
            d.uart.write(port, written, &mut sink);
            0
        }
        (false, true) => d.pic.read(port),
        (false, false) => {
            // One warning per domain: a guest must not flood the console.
            warning = d.pic.write(port, written).filter(|_| !d.pic_warned);
            d.pic_warned |= warning.is_some();
            0
        }
    };
    let (wake, delivery) = d.drive_com1_irq();
    (value, warning, wake.filter(|_| !from_vcpu0), delivery)
}

fn inject_gp(state: &mut VcpuState) {
    inject_exception(state, vector::GP, Some(0));
}

/// Delivers exception `vector` (with `error_code`, for the vectors that
/// push one) to the guest at its next entry.
fn inject_exception(state: &mut VcpuState, vector: u8, error_code: Option<u32>) {
    // A fault pushes RFLAGS with RF set (SDM vol. 3, 18.3.1.1), so that the
    // handler's IRET does not re-trigger an instruction breakpoint; EVENTINJ
    // pushes RFLAGS as it is. #DB here is a trap (the faults are never
    // injected: `debug_register` emulates them).
    if !matches!(vector, vector::DB | vector::BP | vector::OF) {
        state.vmcb.save.rflags |= RFLAGS_RF;
    }
    let mut event = EVENT_VALID | event_inj::TYPE_EXCEPTION | u64::from(vector);
    if let Some(code) = error_code {
        event |= event_inj::ERROR_CODE_VALID | (u64::from(code) << 32);
    }
    state.vmcb.control.event_inj = event;
}

/// An intercepted MOV to CR4: checked against the guest's CPUID and mode
/// (`policy::cr4_write`); what hardware would refuse gets #GP. The operand
/// comes from the instruction at RIP (no decode assists under QEMU's TCG).
fn cr4_write(vcpu: VcpuId, state: &mut VcpuState) -> Result<After, StopReason> {
    let rip = state.vmcb.save.rip;
    let instruction = Intercepted::MovToCr;
    let mov = decode_intercepted(state, instruction, insn::mov_to_cr)?;
    domain::count_trap(
        DomainId(state.domain),
        "control register writes checked",
        |t| &mut t.control_registers,
    );
    if mov.cr != 4 {
        // The exit said CR4 and the bytes say otherwise (a guest racing its
        // own code): refuse rather than guess.
        return Err(StopReason::Undecodable {
            instruction,
            rip,
            fetched: fetch_instruction(state, instruction)?,
            error: insn::DecodeError::Mismatch {
                expected: instruction,
                prefixes: 0,
            },
        });
    }
    let value = state.gpr(mov.gpr).unwrap_or(0);
    let context = policy::Cr4Context {
        leaf1: guest_cpuid(vcpu, state, 1, 0),
        leaf7: guest_cpuid(vcpu, state, 7, 0),
        long_mode: state.vmcb.save.efer & cr::EFER_LMA != 0,
        cr3: state.vmcb.save.cr3,
    };
    match policy::cr4_write(value, state.vmcb.save.cr4, &context) {
        Ok(cr4) => {
            state.vmcb.save.cr4 = cr4;
            // Paging-structure caching may have changed (PGE, PCIDE, SMEP).
            state.vmcb.control.tlb_control = tlb_control::FLUSH_ASID;
            advance(state, rip.wrapping_add(u64::from(mov.len)));
        }
        Err(fault) => {
            domain::guest_warn(
                DomainId(state.domain),
                format_args!(
                    "vCPU {}: MOV {value:#x} to CR4 at {rip:#x}: #GP ({fault})",
                    state.index
                ),
            );
            inject_gp(state);
        }
    }
    Ok(After::Continue)
}

/// An intercepted MOV to or from a debug register, served from the vCPU's
/// own copy (`hv::x86::debugregs`); what the CPU would fault with goes to
/// the guest instead. The operands come from the instruction at RIP (the
/// exit names only the debug register, without decode assists).
fn debug_register(state: &mut VcpuState, write: bool) -> Result<After, StopReason> {
    let instruction = if write {
        Intercepted::MovToDr
    } else {
        Intercepted::MovFromDr
    };
    let rip = state.vmcb.save.rip;
    let mov = decode_intercepted(state, instruction, |bytes, size| {
        insn::mov_dr(bytes, write, size)
    })?;
    domain::count_trap(
        DomainId(state.domain),
        "debug register accesses emulated",
        |t| &mut t.debug_registers,
    );
    let cpl = state.vmcb.save.cpl;
    let cr4_de = state.vmcb.save.cr4 & cr::CR4_DE != 0;
    let result = if write {
        let value = state.gpr(mov.gpr).unwrap_or(0);
        state.debug.write(mov.dr, value, cpl, cr4_de)
    } else {
        state.debug.read(mov.dr, cpl, cr4_de).map(|value| {
            state.set_gpr(mov.gpr, value);
        })
    };
    match result {
        Ok(()) => advance(state, rip.wrapping_add(u64::from(mov.len))),
        Err(DebugFault::Ud) => inject_exception(state, vector::UD, None),
        Err(DebugFault::Gp) => inject_gp(state),
    }
    Ok(After::Continue)
}

fn msr(me: usize, vcpu: VcpuId, state: &mut VcpuState, write: bool) -> Result<After, StopReason> {
    let instruction = if write {
        Intercepted::Wrmsr
    } else {
        Intercepted::Rdmsr
    };
    let next = next_rip(state, instruction)?;
    let number = state.gprs.rcx as u32;
    let value = (state.gprs.rdx << 32) | (state.vmcb.save.rax & 0xffff_ffff);
    let mut result: Option<u64> = None;
    let ok = match policy::classify_msr(number) {
        MsrClass::Apic => {
            let tsc = guest_tsc(state);
            let outcome = vcpu::with_apic(vcpu, |apic| {
                if write {
                    apic.write(number, value, tsc).map(Some)
                } else {
                    apic.read(number, tsc).map(|v| {
                        result = Some(v);
                        None
                    })
                }
            });
            match outcome {
                Some(Ok(Some(effect))) => {
                    apic_effect(DomainId(state.domain), state.index, effect);
                    true
                }
                Some(Ok(None)) => true,
                Some(Err(e)) => {
                    domain::guest_warn(
                        DomainId(state.domain),
                        format_args!("vCPU {}: APIC: {e}; injecting #GP", state.index),
                    );
                    false
                }
                None => false,
            }
        }
        MsrClass::ApicBase => {
            let ram_bytes = domain::guest_ram(DomainId(state.domain)).map_or(0, |r| r.bytes());
            let outcome = vcpu::with_apic(vcpu, |apic| {
                if write {
                    apic.set_base_outside(value, ram_bytes)
                } else {
                    result = Some(apic.base());
                    Ok(())
                }
            });
            match outcome {
                Some(Ok(())) => true,
                Some(Err(e)) => {
                    domain::guest_warn(
                        DomainId(state.domain),
                        format_args!("vCPU {}: {e}; injecting #GP", state.index),
                    );
                    false
                }
                None => false,
            }
        }
        MsrClass::TscAux if write && value >> 32 != 0 => false,
        MsrClass::TscAux => {
            if write {
                state.tsc_aux = value;
                // This CPU runs the vCPU: RDTSCP must see the new value now.
                if super::speculation::holds_tsc_aux(me, vcpu.0) {
                    super::speculation::write_tsc_aux(value);
                }
            } else {
                result = Some(state.tsc_aux);
            }
            true
        }
        MsrClass::Fixed(v) => {
            result = Some(v);
            true
        }
        MsrClass::MiscEnable if write => {
            match policy::misc_enable_write(state.misc_enable, value) {
                Some(new) => {
                    state.misc_enable = new;
                    true
                }
                None => false,
            }
        }
        MsrClass::MiscEnable => {
            result = Some(state.misc_enable);
            true
        }
        MsrClass::Tsc => {
            let host = timer::tsc();
            if write {
                state.vmcb.control.tsc_offset = value.wrapping_sub(host);
            } else {
                result = Some(host.wrapping_add(state.vmcb.control.tsc_offset));
            }
            true
        }
        MsrClass::Vmcb(which) if write && !policy::vmcb_msr_write_allowed(which, value) => false,
        MsrClass::Vmcb(which) => {
            let s = &mut state.vmcb.save;
            let field: &mut u64 = match which {
                VmcbMsr::Efer => {
                    if write {
                        s.efer = policy::efer_from_guest(value, s.efer);
                    } else {
                        result = Some(policy::guest_visible_efer(s.efer));
                    }
                    return Ok(finish_msr(state, write, result, next));
                }
                VmcbMsr::Pat => &mut s.g_pat,
                VmcbMsr::FsBase => &mut s.fs.base,
                VmcbMsr::GsBase => &mut s.gs.base,
                VmcbMsr::KernelGsBase => &mut s.kernel_gs_base,
                VmcbMsr::Star => &mut s.star,
                VmcbMsr::Lstar => &mut s.lstar,
                VmcbMsr::Cstar => &mut s.cstar,
                VmcbMsr::Sfmask => &mut s.sfmask,
                VmcbMsr::SysenterCs => &mut s.sysenter_cs,
                VmcbMsr::SysenterEsp => &mut s.sysenter_esp,
                VmcbMsr::SysenterEip => &mut s.sysenter_eip,
            };
            if write {
                *field = value;
            } else {
                result = Some(*field);
            }
            true
        }
        MsrClass::Unknown => {
            domain::guest_warn(
                DomainId(state.domain),
                format_args!(
                    "vCPU {}: {} of unknown MSR {number:#x}; injecting #GP",
                    state.index,
                    if write { "write" } else { "read" }
                ),
            );
            false
        }
    };
    if !ok {
        inject_gp(state);
        return Ok(After::Continue);
    }
    Ok(finish_msr(state, write, result, next))
}

fn finish_msr(state: &mut VcpuState, write: bool, result: Option<u64>, next: u64) -> After {
    if !write {
        let value = result.unwrap_or(0);
        state.vmcb.save.rax = value & 0xffff_ffff;
        state.gprs.rdx = value >> 32;
    }
    advance(state, next);
    After::Continue
}

/// Whether `gpa` is on a device page the domain of `state` has emulated:
/// the xAPIC page, and the I/O APIC's if its tables describe one.
fn emulated_page(vcpu: VcpuId, state: &VcpuState, gpa: u64) -> bool {
    vcpu::with_apic(vcpu, |apic| apic.claims(gpa)).unwrap_or(false)
        || (IoApic::claims(gpa)
            && domain::with_domain(DomainId(state.domain), |d| d.ioapic.is_some()).unwrap_or(false))
}

/// An access to an emulated MMIO page at `gpa`: the MOV at RIP is decoded
/// (`hv::x86::mmio_insn`), carried out on the device 32 bits at a time (as
/// both APICs' registers are) and skipped.
fn mmio(vcpu: VcpuId, state: &mut VcpuState, gpa: u64) -> Result<After, StopReason> {
    let rip = state.vmcb.save.rip;
    let domain = DomainId(state.domain);
    let stop = |fetched, error| StopReason::MmioInstruction {
        gpa,
        rip,
        fetched,
        error,
    };
    let Some(ram) = domain::guest_ram(domain) else {
        return Ok(After::Yield);
    };
    let fetched = guest_paging::fetch(&state.vmcb.save, &ram)
        .map_err(|e| stop(None, MmioError::Unreadable(e)))?;
    let instruction = mmio_insn::decode(fetched.as_slice(), fetched.size)
        .map_err(|e| stop(Some(fetched), MmioError::Decode(e)))?;
    let tsc = guest_tsc(state);
    let (store, load_into) = match instruction.operation {
        MmioOperation::Load {
            into,
            register_width,
        } => (None, Some((into, register_width))),
        _ => {
            let register = match instruction.operation {
                MmioOperation::Store { from } => state.gpr(from.index).unwrap_or(0),
                _ => 0,
            };
            (Some(mmio_insn::store_value(&instruction, register)), None)
        }
    };
    let apic_page =
        vcpu::with_apic(vcpu, |apic| apic.claims(gpa).then(|| apic.mmio_page())).flatten();
    let loaded = if let Some(page) = apic_page {
        let offset = gpa - page;
        let outcome = vcpu::with_apic(vcpu, |apic| match store {
            Some(value) => apic.write_mmio(offset, value as u32, tsc).map(|e| (0, e)),
            None => apic.read_mmio(offset, tsc).map(|v| (v, WriteEffect::None)),
        });
        match outcome {
            Some(Ok((value, effect))) => {
                apic_effect(domain, state.index, effect);
                value
            }
            Some(Err(e)) => {
                domain::guest_warn(
                    domain,
                    format_args!("vCPU {}: APIC: {e}; access ignored", state.index),
                );
                0
            }
            None => 0,
        }
    } else {
        let offset = gpa - hv::x86::ioapic::BASE;
        let outcome = domain::with_domain(domain, |d| {
            let ioapic = d.ioapic.as_mut()?;
            Some(match store {
                Some(value) => (0, ioapic.write(offset, value as u32)),
                None => (ioapic.read(offset), None),
            })
        })
        .flatten();
        let (value, delivery) = outcome.unwrap_or((u32::MAX, None));
        if let Some(delivery) = delivery {
            deliver(domain, delivery);
        }
        value
    };
    if let Some((into, width)) = load_into {
        let old = state.gpr(into.index).unwrap_or(0);
        let new = mmio_insn::load_result(into, width, old, u64::from(loaded));
        state.set_gpr(into.index, new);
    }
    advance(state, rip.wrapping_add(u64::from(instruction.len)));
    Ok(After::Continue)
}

/// Acts on what an APIC register write asked for.
fn apic_effect(domain: DomainId, sender: u32, effect: WriteEffect) {
    match effect {
        WriteEffect::Icr(command) => icr(domain, sender, command),
        WriteEffect::Eoi(vector) => {
            let again =
                domain::with_domain(domain, |d| d.ioapic.as_mut().and_then(|io| io.eoi(vector)))
                    .flatten();
            if let Some(delivery) = again {
                deliver(domain, delivery);
            }
        }
        WriteEffect::None | WriteEffect::TimerChanged => {}
    }
}

/// Sends an I/O APIC message to the vCPUs of `domain` its destination
/// names (fixed: each of them; lowest priority: the first).
pub fn deliver(domain: DomainId, delivery: hv::x86::ioapic::Delivery) {
    use apic::ioapic::IoDelivery;
    let Some(vcpus) = domain::with_domain(domain, |d| d.vcpus.clone()) else {
        return;
    };
    let destination = u32::from(delivery.destination);
    for &target in &vcpus {
        let taken = vcpu::with_apic(target, |apic| {
            let named = if delivery.logical {
                apic.accepts_logical(destination)
            } else {
                apic.accepts_physical(destination)
            };
            if named && delivery.mode == IoDelivery::Nmi {
                apic.request_nmi();
            } else if named {
                apic.accept(delivery.vector);
            }
            named
        })
        .unwrap_or(false);
        if taken && delivery.mode == IoDelivery::Nmi {
            wake_for_nmi(target);
        } else if taken {
            notify(target);
            if delivery.mode == IoDelivery::LowestPriority {
                return;
            }
        }
    }
}

/// An ICR write: fixed IPIs to the domain's vCPUs, or INIT/STARTUP.
fn icr(domain: DomainId, sender: u32, command: IcrCommand) {
    let Some(vcpus) = domain::with_domain(domain, |d| d.vcpus.clone()) else {
        return;
    };
    let to = match command {
        IcrCommand::Fixed { to, .. }
        | IcrCommand::Nmi { to }
        | IcrCommand::Init { to }
        | IcrCommand::Startup { to, .. } => to,
        // Ignored, as by every APIC since the 82489DX.
        IcrCommand::InitDeassert => return,
    };
    for (index, &target) in vcpus.iter().enumerate() {
        let index = index as u32;
        let chosen = match to {
            Destination::One(id) => id == index,
            Destination::Logical(mask) => {
                vcpu::with_apic(target, |apic| apic.accepts_logical(mask)).unwrap_or(false)
            }
            Destination::Itself => index == sender,
            Destination::All => true,
            Destination::AllButSelf => index != sender,
        };
        if !chosen {
            continue;
        }
        match command {
            IcrCommand::Fixed { vector, .. } => {
                vcpu::with_apic(target, |apic| apic.accept(vector));
                notify(target);
            }
            IcrCommand::Nmi { .. } => send_nmi(target),
            IcrCommand::Init { .. } => init_vcpu(domain, index == sender, index, target),
            IcrCommand::Startup { vector, .. } => start_vcpu(domain, index, target, vector),
            IcrCommand::InitDeassert => {}
        }
    }
}

/// An INIT IPI to vCPU `index` (`target`) of `domain` (see `guest_abi::x86`
/// and `hv::x86::power`): a started vCPU goes to wait-for-SIPI, held off
/// its CPU by a scheduler pause (as PSCI CPU_OFF on ARM, Xen's
/// `_VPF_down`), its pending interrupts and its timer dropped.
fn init_vcpu(domain: DomainId, from_itself: bool, index: u32, target: VcpuId) {
    match vcpu::with_power(target, |p| p.init(from_itself)) {
        Some(InitOutcome::TakeOff) => {
            info!(
                "domain {}: vCPU {index}: INIT: waiting for STARTUP",
                domain.0
            );
            // The pause kicks the CPU running it, which switches it out.
            if let Some(Err(e)) =
                RUNTIME.with_vcpu(target, |s, p| s.vcpu_pause(target, p).map(|_| ()))
            {
                error!(
                    "domain {}: vCPU {index}: INIT: cannot pause it: {e}",
                    domain.0
                );
            }
            // As after an INIT: nothing requested or in service, timer off.
            vcpu::with_apic(target, |apic| *apic = apic.after_init());
            RUNTIME.cancel_wakeups(target);
        }
        Some(InitOutcome::RefusedSelf) => warn!(
            "domain {}: vCPU {index}: INIT to itself refused (nothing could start it again)",
            domain.0
        ),
        Some(InitOutcome::AlreadyWaiting) | None => {}
    }
}

/// A paravirtual STARTUP (see `guest_abi::x86`): a vCPU waiting for it
/// starts in 64-bit mode at the image base, the first time as created, after
/// an INIT fresh in that same state once it has left the CPU that ran it.
/// A STARTUP to a running vCPU is ignored, as hardware does.
fn start_vcpu(domain: DomainId, index: u32, target: VcpuId, vector: u8) {
    let real = domain::real_startup(domain);
    let required = (!real).then_some(SIPI_VECTOR);
    let held = match vcpu::with_power(target, |p| p.startup(vector, required)) {
        Some(StartupOutcome::Start { held }) => held,
        Some(StartupOutcome::WrongVector(vector)) => {
            warn!(
                "domain {} vCPU {index}: STARTUP vector {vector:#x} ignored (this hypervisor starts vCPUs at vector {SIPI_VECTOR:#x}, see guest_abi::x86)",
                domain.0
            );
            return;
        }
        Some(StartupOutcome::IgnoredRunning) | None => return,
    };
    // A PC's STARTUP always sets the state (real mode at the vector's
    // page); the test guest's first one keeps the state it was created with.
    if held || real {
        // Its state is replaced below; the CPU that ran it before the INIT
        // (kicked by the pause) must have switched it out first, or it would
        // save into freed memory: wait, bounded.
        if !RUNTIME.wait_until_released(target, VCPU_RELEASE_TIMEOUT_NS) {
            error!(
                "domain {}: vCPU {index} is still held by a CPU; STARTUP ignored",
                domain.0
            );
            vcpu::with_power(target, |p| *p = Power::WaitForSipi);
            return;
        }
        if let Err(why) = domain::startup_vcpu(domain, index, target, vector) {
            warn!(
                "domain {}: vCPU {index}: STARTUP ignored: its boot state could not be rebuilt ({why})",
                domain.0
            );
            vcpu::with_power(target, |p| *p = Power::WaitForSipi);
            return;
        }
    }
    if real {
        info!(
            "domain {}: vCPU {index} started (STARTUP, real mode at {:#x})",
            domain.0,
            u32::from(vector) << 12
        );
    } else {
        info!(
            "domain {}: vCPU {index} started (SIPI, rsi = {BOOT_INFO:#x})",
            domain.0
        );
    }
    // Drop the INIT's pause, and the block it was created or halted with.
    let started = RUNTIME.with_vcpu(target, |s, p| {
        s.vcpu_wake(target, p)?;
        if held {
            s.vcpu_unpause(target, p)?;
        }
        Ok::<(), sched::SystemError>(())
    });
    if let Some(Err(e)) = started {
        error!("domain {}: cannot start vCPU {index}: {e}", domain.0);
    }
}

/// Wakes `target` if it waits, or makes the CPU running it exit so it sees
/// the new interrupt ([`hv::runtime::Runtime::notify`]).
pub fn notify(target: VcpuId) {
    // Not started, waiting for STARTUP, or halted with interrupts off: the
    // interrupt stays pending in its APIC and does not wake it.
    if vcpu::power(target).wakes_on_interrupt() {
        RUNTIME.notify(target);
    }
}

/// An NMI IPI to `target`: latched in its APIC, and it runs (or wakes)
/// to take it.
fn send_nmi(target: VcpuId) {
    vcpu::with_apic(target, |apic| apic.request_nmi());
    wake_for_nmi(target);
}

/// Makes `target` see its latched NMI: an NMI also ends a halt with
/// interrupts disabled; a vCPU waiting for STARTUP keeps it latched.
fn wake_for_nmi(target: VcpuId) {
    if vcpu::with_power(target, |p| p.nmi()) == Some(true) {
        RUNTIME.notify(target);
    }
}

/// Whether an interrupt waits for `vcpu` (the runtime's re-check, from any
/// CPU; see [`interrupt_requested_in`]).
pub fn interrupt_requested(vcpu: VcpuId) -> bool {
    vcpu::identity(vcpu).is_some_and(|(domain, index)| interrupt_requested_in(vcpu, domain, index))
}

/// Whether an interrupt waits for `vcpu` (index `index` of `domain`): one
/// its virtual APIC requests or a latched NMI, or, on vCPU 0, the PIC's
/// INTR.
fn interrupt_requested_in(vcpu: VcpuId, domain: DomainId, index: u32) -> bool {
    vcpu::with_apic(vcpu, |a| a.has_requested() || a.nmi_latched()) == Some(true)
        || (index == 0 && domain::with_domain(domain, |d| d.pic.intr()) == Some(true))
}

/// HLT (or BLOCK) with nothing pending: block the vCPU until an interrupt
/// for it arrives or its timer's deadline (guest TSC) passes.
fn block(me: usize, vcpu: VcpuId, deadline_tsc: Option<u64>) {
    if let Some(deadline) = deadline_tsc {
        let now_tsc = timer::tsc();
        let delta_ns = (u128::from(deadline.saturating_sub(now_tsc)) * 1_000_000_000
            / u128::from(timer::tsc_hz().max(1))) as u64;
        RUNTIME.wake_at(me, vcpu, timer::now_ns().saturating_add(delta_ns));
    }
    RUNTIME.block(vcpu);
}

/// A guest's ACPI power off or reset: only its own domain stops, or
/// restarts from its image (as PSCI SYSTEM_OFF and SYSTEM_RESET on ARM).
fn power_action(domain: DomainId, action: PowerAction) -> After {
    match action {
        // Ended once the vCPU's state is released (`run_once`).
        PowerAction::PowerOff => After::PoweredOff,
        PowerAction::Reset => {
            if let Err(why) = domain::request_restart(domain, "guest reset") {
                warn!("domain {}: reset ignored: {why}", domain.0);
            }
            After::Yield
        }
    }
}

/// Takes a domain out of the scheduler after a fault it cannot recover
/// from; the other domains go on.
pub fn stop_domain(domain: DomainId, reason: core::fmt::Arguments<'_>) {
    end_domain(domain, log::Level::Error, reason);
}

/// Takes a domain out of the scheduler (its vCPUs leave their CPUs at once);
/// the other domains go on. `level`: an error for a fault, info for a
/// domain the console destroyed.
pub(super) fn end_domain(domain: DomainId, level: log::Level, reason: core::fmt::Arguments<'_>) {
    let name = domain::with_domain(domain, |d| {
        d.stopped = true;
        let mut sink = |line: &[u8]| console::write_bytes(line);
        d.uart.flush(&mut sink);
        d.name.clone()
    });
    log::log!(
        level,
        "domain {} ({}): stopped: {reason}",
        domain.0,
        name.as_deref().unwrap_or("?")
    );
    super::input::remove_domain(domain);
    if let Some(Err(e)) = RUNTIME.with_system(|s, p| s.domain_destroy(domain, p)) {
        error!(
            "domain {}: cannot remove it from the scheduler: {e}",
            domain.0
        );
    }
    // Its RAM, tables, ASID and vCPU state go back once its vCPUs are off
    // every CPU (the boot CPU's tick checks).
    domain::schedule_teardown(domain);
    RUNTIME.on_event(CpuEvent::Kick);
}

/// VMMCALL: the shared dispatcher with the x86 register mapping of
/// `guest_abi::x86`.
fn vmmcall(vcpu: VcpuId, state: &mut VcpuState) -> After {
    let domain = DomainId(state.domain);
    let (privileged, test_hooks) =
        domain::with_domain(domain, |d| (d.privileged, d.test_hooks)).unwrap_or((false, false));
    let caller = Caller {
        domain: domain.0,
        vcpu: state.index,
        privileged,
        test_hooks,
    };
    let g = &state.gprs;
    let args = [g.rdi, g.rsi, g.rdx, g.r10, g.r8];
    let outcome = hypercall::dispatch(
        &caller,
        state.vmcb.save.rax,
        args,
        &mut DomainCalls::new(&RUNTIME, domain),
    );
    state.vmcb.save.rax = outcome.regs[0];
    state.gprs.rdi = outcome.regs[1];
    state.gprs.rsi = outcome.regs[2];
    state.gprs.rdx = outcome.regs[3];
    match outcome.action {
        HypercallAction::Resume => After::Continue,
        HypercallAction::Yield => After::Yield,
        HypercallAction::Block { timeout_ns } => {
            let deadline =
                vcpu::with_apic(vcpu, |a| host_deadline(state, a.timer_deadline())).flatten();
            if interrupt_requested_in(vcpu, domain, state.index) {
                return After::Continue;
            }
            let timeout = timeout_ns.map(timer::tsc_after_ns);
            let deadline = match (deadline, timeout) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            After::Block(deadline)
        }
    }
}
