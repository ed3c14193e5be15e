//! ARM64 boot flow: console, device tree (or UEFI + ACPI: `acpi_boot`),
//! identity map, heap, GIC, all CPUs up, an IPI round trip to every CPU, then a
//! periodic tick and idle.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use gic::{Acknowledged, Gic, GicV2, GicV3, GicVersion, IntId, SgiTarget};
use hv::boot_checks::{self, BootCounters};
use hv::boot_options::BootOptions;
use hv::sibling_view::Identity;
use log::{error, info, warn};
use platform::arch::aarch64::{boot, console, cpu, efi, exceptions, psci, spin_table, timer};
use platform::dt::{MachineDescription, PsciMethod, StartMethod};
use platform::sync::Once;
use sched::{MAX_CPUS, Topology};

use crate::heap;
use runtime::RUNTIME;

mod acpi_boot;
mod debug_regs;
mod domain;
mod exit;
mod guest_timer;
mod input;
mod memory;
mod passthrough;
mod runtime;
mod speculation;
mod switchcost;
mod sysregs;
mod vcpu;
mod vgic;

/// How long a vCPU that waits with no timer armed sleeps before it is woken to
/// look again (until virtual interrupts can wake it).
const IDLE_VCPU_NAP_NS: u64 = 1_000_000;

/// SGI the boot CPU sends to test a CPU (and, later, the scheduler's kick).
const SGI_PING: u8 = 1;
/// SGI a CPU answers a ping with.
const SGI_PONG: u8 = 2;
/// The EL2 physical timer's PPI (Arm BSA: INTID 26; an ACPI boot takes the
/// GTDT's).
static HYP_TIMER_PPI: AtomicU32 = AtomicU32::new(26);
/// The GIC's virtual CPU interface maintenance interrupt (Arm BSA: INTID
/// 25, the PPI QEMU virt, the Raspberry Pi 4's GIC-400 and Ampere Altra
/// use). It only has to make the vCPU exit: the exit path folds the list
/// registers back and refills them (`vgic`), and samples the timer lines.
const MAINTENANCE_PPI: u32 = 25;

/// The EL2 physical timer's PPI.
fn hyp_timer_ppi() -> u32 {
    HYP_TIMER_PPI.load(Ordering::Relaxed)
}

/// How often (in ticks of the boot CPU) the co-residency logs are checked.
const CORESIDENCY_CHECK_TICKS: u32 = 200;
/// How often (in ticks of the boot CPU) each domain's run time is logged.
const RUNTIME_LOG_TICKS: u32 = 100;
/// Tick period.
const TICK_NS: u64 = 10_000_000;
/// How long a starting CPU may take to report in, in ns of counter time.
const CPU_START_TIMEOUT_NS: u64 = 5_000_000_000;
/// Heap to take from RAM after the bootstrap region.
const HEAP_BYTES: u64 = 512 << 20;

static GIC: Once<Gic> = Once::new();
/// GICv2 hosts: the virtual CPU interface (GICV) that guests see as their GICC.
static GICV_BASE: AtomicU64 = AtomicU64::new(0);
/// When each CPU's next housekeeping tick is due (ns).
static NEXT_TICK: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static ONLINE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// The pings, answers and ticks the boot checks wait for.
static BOOT_COUNTERS: BootCounters = BootCounters::new();
/// Logical index of the CPU the firmware booted (not always 0 in DT order).
static BOOT_CPU: AtomicUsize = AtomicUsize::new(0);
/// Per CPU: MPIDR_EL1 as the CPU read it at bring-up (0: not up; bit 31 is
/// RES1, so a real value is never 0), for the co-residency checker's own
/// view of SMT siblings.
static RAW_MPIDRS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Waits until `done()` or `timeout_ns` passes; true if it became done.
fn wait_until(timeout_ns: u64, done: impl FnMut() -> bool) -> bool {
    boot_checks::wait_until(&timer::now_ns, timeout_ns, done)
}

fn stop(reason: core::fmt::Arguments<'_>) -> ! {
    error!("{reason}; stopping");
    cpu::park()
}

#[unsafe(no_mangle)]
fn hv_primary_main(dtb: usize, exception_level: u64) -> ! {
    match board().early_uart {
        // SAFETY: the board's early UART is a PL011 at this address and nothing
        // else drives it.
        boards::EarlyUart::Pl011(base) => unsafe { console::init_pl011(base) },
        // SAFETY: as above, for a mini UART.
        boards::EarlyUart::MiniUart(base) => unsafe { console::init_mini_uart(base) },
        boards::EarlyUart::None => {}
    }
    heap::init_bootstrap();
    // A UEFI boot: the console is the SPCR's UART, so read the tables first.
    let uefi = efi::handoff();
    let prepared = uefi.map(acpi_boot::prepare);
    console::init_logger(log::LevelFilter::Info);
    info!(
        "hv: hypervisor booting on board {} at EL{exception_level}{}",
        crate::BOARD_NAME,
        if uefi.is_some() { " (UEFI, ACPI)" } else { "" }
    );
    if exception_level != 2 {
        stop(format_args!(
            "hv: entered at EL{exception_level}, but the hypervisor needs EL2 \
             (QEMU: -machine virt,virtualization=on; real boards: boot firmware must not drop to EL1)"
        ));
    }
    if let (Some(handoff), Some(prepared)) = (uefi, prepared) {
        let Some(tables) = prepared.tables else {
            if let Err(reason) = prepared.memory {
                stop(format_args!("{reason}"));
            }
            stop(format_args!(
                "acpi: the tables at RSDP {:#x} (from UEFI) cannot be read",
                handoff.rsdp
            ))
        };
        let machine = acpi_boot::read_machine(handoff, prepared.memory, &tables);
        let mut topology = machine.topology;
        let boot_cpu = find_boot_cpu(&topology, "the MADT");
        info!("topology: {}", topology.counts());
        let gic = install_gic(machine.gic, "MADT");
        info!(
            "gic: {} driver up, {} interrupt ids",
            gic_name(gic.version()),
            gic.num_interrupts()
        );
        bring_up_this_cpu(boot_cpu);
        match machine.console_spi {
            Some(spi) => input::init_spi(spi),
            None => {
                info!("console: the SPCR gives no GIC interrupt for the UART; no console input")
            }
        }
        speculation::init_firmware(machine.conduit);
        speculation::init_this_cpu(boot_cpu);
        start_secondaries(&mut topology, None, machine.conduit);
        // Efficiency classes shape the automatic pools as capacities do on
        // a device tree. There is no host description to check
        // pass-through devices against, nor Xen cpupool nodes.
        run(topology, &machine.classes, None, &Default::default())
    }
    let (machine, dtb_size, cpupools) = read_device_tree(dtb);
    setup_memory(dtb, dtb_size, &machine);
    apply_boot_options(machine.bootargs.as_deref().unwrap_or(""));
    let mut topology = match machine.topology() {
        Ok(topology) => topology,
        Err(e) => stop(format_args!("device tree: {e}")),
    };
    let boot_cpu = find_boot_cpu(&topology, "the device tree");
    info!("topology: {}", topology.counts());
    // The same report `cargo xtask topology` prints for this device tree.
    let mut report = String::new();
    let _ = platform::dt::write_topology_report(&mut report, &machine, &topology);
    for line in report.lines() {
        info!("{line}");
    }
    let gic = init_gic(&machine);
    info!(
        "gic: {} driver up, {} interrupt ids",
        gic_name(gic.version()),
        gic.num_interrupts()
    );
    bring_up_this_cpu(boot_cpu);
    input::init(&machine);
    let conduit = machine.psci.as_ref().map(|p| match p.method {
        PsciMethod::Smc => psci::Conduit::Smc,
        PsciMethod::Hvc => psci::Conduit::Hvc,
    });
    speculation::init_firmware(conduit);
    speculation::init_this_cpu(boot_cpu);
    start_secondaries(&mut topology, Some(&machine), conduit);
    let host = passthrough::host_machine(&machine, gic);
    run(topology, &machine.cpu_classes(), Some(host), &cpupools)
}

/// The hypervisor's `hv.` words on the host's `/chosen/bootargs` (`-append`
/// under QEMU; see `hv::boot_options`).
fn apply_boot_options(bootargs: &str) {
    if !bootargs.is_empty() {
        info!("boot: command line \"{bootargs}\"");
    }
    let options = BootOptions::parse(bootargs, |unknown| warn!("boot: {unknown}"));
    RUNTIME.apply_boot_options(&options);
    if options.no_speculation_flush {
        speculation::turn_flushes_off();
    }
    if options.break_debug_switch {
        debug_regs::break_switch();
    }
    if options.break_fpu_switch {
        vcpu::break_fp_switch();
    }
    for (set, word) in [
        (options.fault_test, "hv.fault-test"),
        (options.silent_ap.is_some(), "hv.test-silent-ap"),
        (options.console_poll, "hv.console-input"),
    ] {
        if set {
            warn!("boot: {word} is not implemented on this architecture; ignored");
        }
    }
}

/// After every CPU is up: IPIs, ticks, the config's pools and domains (the
/// device tree's Xen `cpupools`, else laid out by the CPUs' capacity
/// `classes`, when the config lists no pool; pass-through devices checked
/// against `host`, none without it), idle.
fn run(
    topology: Topology,
    classes: &[platform::dt::CpuClass],
    host: Option<hv::passthrough::HostMachine>,
    cpupools: &platform::dt::xen_cpupool::XenCpupools,
) -> ! {
    ipi_round_trips(&topology);
    wait_for_ticks(&topology);
    let mpidrs: Vec<Option<u64>> = (0..topology.len().min(MAX_CPUS))
        .map(|c| Some(RAW_MPIDRS[c].load(Ordering::Relaxed)).filter(|&m| m != 0))
        .collect();
    let identities = mpidrs
        .iter()
        .map(|m| m.map(|mpidr| Identity::Arm { mpidr }))
        .collect();
    RUNTIME.coresidency_init(identities, &topology);
    let (config, lines) = hv::config::with_xen_cpupools(
        hv::runtime::boot::load_config(CONFIG_BLOB, &topology),
        cpupools,
    );
    for line in lines {
        info!("{line}");
    }
    let config = hv::runtime::boot::with_pool_layout(config, classes, &topology);
    let applied = RUNTIME.boot(&topology, config.as_ref());
    if let Some(config) = &config {
        start_domains(config, &applied, host.as_ref());
    }
    RUNTIME.boot_domains_started();
    enter_idle_loop()
}

/// The logical index of the CPU the firmware booted (its place in the
/// firmware's list: it need not be the first), recorded as this CPU's.
fn find_boot_cpu(topology: &Topology, source: &str) -> usize {
    let boot_cpu = topology
        .cpus()
        .iter()
        .position(|c| c.hw_id == cpu::mpidr())
        .unwrap_or_else(|| {
            warn!(
                "smp: boot CPU (mpidr {:#x}) is not in {source}; calling it cpu 0",
                cpu::mpidr()
            );
            0
        });
    cpu::set_index(boot_cpu);
    BOOT_CPU.store(boot_cpu, Ordering::Relaxed);
    boot_cpu
}

#[unsafe(no_mangle)]
fn hv_secondary_main(cpu_index: usize) -> ! {
    bring_up_this_cpu(cpu_index);
    speculation::init_this_cpu(cpu_index);
    info!("cpu {cpu_index} online (mpidr {:#x})", cpu::mpidr());
    ONLINE[cpu_index].store(true, Ordering::Release);
    enter_idle_loop()
}

fn board() -> &'static boards::Board {
    boards::by_name(crate::BOARD_NAME).unwrap_or(&boards::QEMU_VIRT)
}

fn gic_name(version: GicVersion) -> &'static str {
    match version {
        GicVersion::V2 => "GICv2",
        GicVersion::V3 => "GICv3",
    }
}

/// GIC, timer and interrupts for the calling CPU.
fn bring_up_this_cpu(cpu_index: usize) {
    let Some(gic) = GIC.get() else {
        stop(format_args!("gic: not initialised"))
    };
    RAW_MPIDRS[cpu_index].store(cpu::mpidr_raw(), Ordering::Relaxed);
    if let Err(e) = gic.init_cpu(cpu_index, cpu::mpidr()) {
        stop(format_args!("gic: cpu {cpu_index}: {e}"));
    }
    for sgi in [runtime::SGI_KICK, runtime::SGI_NUDGE, SGI_PING, SGI_PONG] {
        if let Ok(intid) = IntId::sgi(sgi) {
            let _ = gic.enable_interrupt(intid);
        }
    }
    for ppi in [hyp_timer_ppi(), MAINTENANCE_PPI] {
        if let Ok(ppi) = IntId::new(ppi) {
            let _ = gic.enable_interrupt(ppi);
        }
    }
    guest_timer::enable_host_ppis(gic, cpu_index == BOOT_CPU.load(Ordering::Relaxed));
    exceptions::set_irq_handler(handle_irq);
    exceptions::set_guest_exit_handler(exit::handle);
    exceptions::set_guest_async_handler(exit::handle_async);
    let pa_size = hv::arm::stage2::PhysicalAddressSize::from_parange(cpu::physical_address_range());
    match pa_size.map(|pa| hv::arm::stage2::vtcr(hv::arm::stage2::IpaSize::Bits40, pa)) {
        Some(Ok(vtcr)) => cpu::configure_for_guests(vtcr),
        other => {
            error!("cpu {cpu_index}: cannot configure stage 2 ({other:?}); guests cannot run here")
        }
    }
    NEXT_TICK[cpu_index].store(timer::now_ns() + TICK_NS, Ordering::Relaxed);
    RUNTIME.rearm_timer();
    cpu::enable_irqs();
}

/// Whether each CPU has reached its idle loop (boot work is done).
static IN_IDLE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// A kick that arrived while the CPU ran boot code, to replay from idle.
static DEFERRED_KICK: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// A switch replaces the interrupted context with another one, which is only
/// right for a guest or the idle loop, never for EL2 boot code that has work
/// left (it would be lost).
fn interrupted_switchable_context(me: usize, frame: &exceptions::TrapFrame) -> bool {
    frame.returns_to_guest() || IN_IDLE[me].load(Ordering::Acquire)
}

/// Programs this CPU's EL2 timer for the earlier of its housekeeping tick and
/// `deadline` (the runtime's: scheduling deadline and timed wake-ups).
fn arm_timer(deadline: Option<sched::Time>) {
    let me = cpu::index();
    let tick = NEXT_TICK[me].load(Ordering::Relaxed);
    let deadline = deadline.map_or(tick, |d| d.min(tick));
    timer::arm_in_ns(deadline.saturating_sub(timer::now_ns()));
}

/// Whether this CPU is still in its boot code (not yet idle): switching there
/// would lose the boot work, so scheduling events wait for the idle loop.
fn on_el2_boot_path() -> bool {
    !IN_IDLE[cpu::index()].load(Ordering::Acquire)
}

/// The EL2 timer fired: housekeeping tick and/or scheduling deadline.
///
/// Out of line, as [`on_kick`]: with whole-program optimisation both were
/// inlined into [`handle_irq`], whose frame grew to 7 KiB and whose setup
/// for them ran on every interrupt exit (the guest timer's and the IPI's
/// included).
#[inline(never)]
fn on_timer_interrupt(me: usize) {
    let now = timer::now_ns();
    if NEXT_TICK[me].load(Ordering::Relaxed) <= now {
        let ticks = BOOT_COUNTERS.tick(me);
        if me == BOOT_CPU.load(Ordering::Relaxed) && ticks.is_multiple_of(CORESIDENCY_CHECK_TICKS) {
            RUNTIME.check_coresidency();
            switchcost::log();
        } else if me == BOOT_CPU.load(Ordering::Relaxed) && RUNTIME.coresidency_check_due() {
            RUNTIME.check_coresidency();
        } else {
            RUNTIME.replay_own_coresidency(me);
        }
        if me == BOOT_CPU.load(Ordering::Relaxed) && ticks.is_multiple_of(RUNTIME_LOG_TICKS) {
            RUNTIME.log_runtimes();
            RUNTIME.log_lock_wait();
            RUNTIME.log_starving();
        }
        if me == BOOT_CPU.load(Ordering::Relaxed) {
            RUNTIME.trace_housekeeping();
        }
        if me == BOOT_CPU.load(Ordering::Relaxed) {
            domain::do_pending_work();
        }
        NEXT_TICK[me].store(now + TICK_NS, Ordering::Relaxed);
    }
    RUNTIME.expire_wakeups(me, now);
    if RUNTIME.deadline(me).is_some_and(|d| d <= now) {
        if !on_el2_boot_path() {
            RUNTIME.on_event(sched::driver::CpuEvent::Timer);
        } else {
            DEFERRED_KICK[me].store(true, Ordering::Release);
        }
    }
    RUNTIME.rearm_timer();
}

/// Another CPU's scheduling decision kicked this one (`kick`, acknowledged;
/// this ends it): the event runs now if the interrupted context may be
/// switched, or from the idle loop. Out of line (see
/// [`on_timer_interrupt`]).
#[inline(never)]
fn on_kick(gic: &Gic, kick: Acknowledged, me: usize, frame: &exceptions::TrapFrame) {
    switchcost::kick_received(me);
    gic.end_of_interrupt(kick);
    if interrupted_switchable_context(me, frame) {
        RUNTIME.on_event(sched::driver::CpuEvent::Kick);
    } else {
        DEFERRED_KICK[me].store(true, Ordering::Release);
    }
}

fn handle_irq(frame: &mut exceptions::TrapFrame) {
    let Some(gic) = GIC.get() else { return };
    let me = cpu::index();
    vcpu::enter_handler(me, frame);
    // The exit's fold-back (`vgic::fold_back`) comes before the first
    // interrupt that is not a nudge is acknowledged: it samples the guest
    // timers' and pass-through devices' PPIs and SPIs as the guest left
    // them, and an acknowledge changes their pending and active states.
    // (Acknowledged first, a guest timer's fresh rise looked like the PPI
    // the guest still owed: the sample deactivated it, the next exit took
    // the inactive PPI for the guest's end of a rise it had not yet taken
    // and withdrew it, and a Linux CPU idled on a lost timer interrupt.)
    // A look at the highest pending interrupt decides without
    // acknowledging it, so an exit for nudges alone (the IPI's receiving
    // path) folds back and flushes in one go (`vgic::fold_back_then_enter`).
    let mut fold_back_pending = frame.returns_to_guest() && vgic::exit_needs_fold_back(me);
    // Bounded: at most a few interrupts per entry, then return and re-enter.
    for _ in 0..16 {
        if fold_back_pending {
            match gic.highest_pending() {
                None => break,
                Some(id) if id.raw() == u32::from(runtime::SGI_NUDGE) => {}
                Some(_) => {
                    vgic::fold_back(me);
                    fold_back_pending = false;
                }
            }
        }
        let Some(intid) = gic.acknowledge() else {
            break;
        };
        let id = intid.intid().raw();
        if fold_back_pending && id != u32::from(runtime::SGI_NUDGE) {
            // One that arrived between the look and the acknowledge with
            // a lower INTID (all host interrupts share one priority): an
            // SGI, which the fold-back does not sample.
            vgic::fold_back(me);
            fold_back_pending = false;
        }
        match id {
            id if id == u32::from(SGI_PING) => {
                BOOT_COUNTERS.ping_received(me);
                let _ = gic.send_sgi(SGI_PONG, SgiTarget::Cpu(BOOT_CPU.load(Ordering::Relaxed)));
            }
            id if id == u32::from(SGI_PONG) => {
                BOOT_COUNTERS.pong_received();
            }
            id if id == u32::from(runtime::SGI_KICK) => {
                on_kick(gic, intid, me, frame);
                continue;
            }
            id if id == u32::from(runtime::SGI_NUDGE) => {
                // The exit itself was the point: the entry below delivers
                // what arrived for the loaded vCPU.
                gic.end_of_interrupt(intid);
                continue;
            }
            id if id == hyp_timer_ppi() => {
                gic.end_of_interrupt(intid);
                on_timer_interrupt(me);
                continue;
            }
            id if let Some(timer) = guest_timer::by_host_ppi(id) => {
                // A switch earlier in this very handler may have replaced
                // the vCPU whose timer raised it: `on_host_interrupt` looks
                // at the timer loaded now.
                guest_timer::on_host_interrupt(gic, me, timer, intid);
                continue;
            }
            MAINTENANCE_PPI => {
                // The exit itself was the point (see MAINTENANCE_PPI).
                gic.end_of_interrupt(intid);
                continue;
            }
            id if let Some(route) = passthrough::route(id) => {
                passthrough::on_interrupt(gic, intid, route);
                continue;
            }
            id if Some(id) == input::intid() => {
                // Level-triggered: drain the UART first, so the line is low
                // when the interrupt ends.
                input::on_interrupt();
            }
            other => warn!("irq: unexpected interrupt {other}"),
        }
        gic.end_of_interrupt(intid);
    }
    if fold_back_pending {
        vgic::fold_back_then_enter(me);
    } else {
        vgic::before_entry(me, frame);
    }
    vcpu::leave_handler(me);
}

/// The test guest, built by xtask and embedded (empty when built without one).
static GUEST_IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guest.bin"));

/// The Linux guest's kernel `Image` and initramfs (empty unless the config
/// runs the built-in `linux` image). 8-byte alignment is all the copy needs.
static LINUX_IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux-image.bin"));
static LINUX_INITRAMFS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux-initramfs.cpio"));

/// The configuration compiled into the image (empty when built without one).
static CONFIG_BLOB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/config.hvcfg"));

/// Builds and starts the domains the config created in the scheduler, with
/// the pass-through devices `host` lets them have; then hands the devices'
/// SPIs to the GIC.
fn start_domains(
    config: &hv::config::Config,
    applied: &hv::config::Applied,
    host: Option<&hv::passthrough::HostMachine>,
) {
    let mut with_console = Vec::new();
    let mut routes = Vec::new();
    let mut built = Vec::new();
    for (spec, id) in config.domains.iter().zip(&applied.domains) {
        let Some(id) = id else { continue };
        let devices = plan_devices(*id, spec, host);
        let (image, initrd) = match &spec.image {
            hv::config::GuestImage::Builtin(name) if name == "test-guest" => (GUEST_IMAGE, &[][..]),
            hv::config::GuestImage::Builtin(name) if name == hv::config::LINUX_IMAGE => {
                (LINUX_IMAGE, LINUX_INITRAMFS)
            }
            hv::config::GuestImage::File { path, initramfs } => (
                crate::user_images::find(path).unwrap_or(&[]),
                initramfs
                    .as_deref()
                    .and_then(crate::user_images::find)
                    .unwrap_or(&[]),
            ),
            _ => (&[][..], &[][..]),
        };
        match domain::create(*id, spec, image, initrd, &devices) {
            Ok(()) => {
                built.push(*id);
                if spec.console == hv::config::Console::Vpl011 {
                    with_console.push(id.0);
                }
                routes.extend(devices.iter().flat_map(|d| d.routes(id.0)));
            }
            Err(e) => error!("domain {} ({}): not started: {e}", id.0, spec.name),
        }
    }
    input::start_domains(&with_console);
    if let Some(gic) = GIC.get() {
        let boot_cpu = BOOT_CPU.load(Ordering::Relaxed);
        let cpu_of = |id: sched::DomainId| {
            RUNTIME
                .with_system(|s, _| {
                    let pool = s.domain_pool(id)?;
                    s.pool_info(pool)?.cpus.first()
                })
                .flatten()
                .unwrap_or(boot_cpu)
        };
        passthrough::install(gic, routes, cpu_of);
    }
    start_built(&built);
}

/// Starts the built domains together, as Xen's dom0less boot unpauses its
/// domains once all are constructed: no guest sees a machine whose later
/// domains (or their devices' interrupts) do not exist yet.
fn start_built(built: &[sched::DomainId]) {
    if !built.is_empty() {
        info!("domains: {} built; starting them", built.len());
    }
    for &id in built {
        domain::start(id);
    }
}

/// The devices of domain `id` that it may have: each checked against what
/// the hypervisor keeps and completed from the host's node (a refused one
/// is left out with a warning, and the domain boots without it).
fn plan_devices(
    id: sched::DomainId,
    spec: &hv::config::DomainConfig,
    host: Option<&hv::passthrough::HostMachine>,
) -> Vec<hv::passthrough::PlannedDevice> {
    let mut planned = Vec::new();
    for device in &spec.devices {
        match hv::passthrough::plan(device, host) {
            Ok(device) => {
                info!("domain {} ({}): device {device}", id.0, spec.name);
                planned.push(device);
            }
            Err(why) => warn!(
                "domain {} ({}): device '{}' not passed through: {why}",
                id.0, spec.name, device.name
            ),
        }
    }
    planned
}

/// Per CPU: the stack pointer its idle loop starts from (0: not yet entered).
static IDLE_STACK: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// How far below its starting point the idle loop's stack may be: its own
/// frame and a little slack. Deeper means an entry kept the stack of the
/// context it replaced, which run after run overflows the CPU's stack.
const IDLE_STACK_SLACK_BYTES: u64 = 1024;

/// Enters the idle loop for good from a CPU's boot path, recording where its
/// stack starts: every later entry (`vcpu::switch_to` to idle) restarts from
/// there, since nothing on the stack below is live once a CPU goes idle.
fn enter_idle_loop() -> ! {
    let me = cpu::index();
    if let Some(slot) = IDLE_STACK.get(me) {
        // 16-byte aligned, as AArch64 requires of SP.
        slot.store(cpu::stack_pointer() & !0xf, Ordering::Release);
    }
    idle()
}

/// The stack pointer CPU `cpu`'s idle loop starts from (0 if it has not
/// reached it yet).
fn idle_stack(cpu: usize) -> u64 {
    IDLE_STACK
        .get(cpu)
        .map_or(0, |slot| slot.load(Ordering::Acquire))
}

/// The idle loop every CPU runs when it has no vCPU (entered afresh by
/// `vcpu::switch_to` on the stack [`enter_idle_loop`] recorded, so it must
/// not rely on anything on its stack).
fn idle() -> ! {
    let me = cpu::index();
    let base = idle_stack(me);
    let depth = base.saturating_sub(cpu::stack_pointer());
    if base != 0 && depth > IDLE_STACK_SLACK_BYTES {
        error!(
            "idle: cpu {me} entered its idle loop {depth} bytes below where it started: \
             a switch to idle kept the stack of what it replaced"
        );
    }
    IN_IDLE[me].store(true, Ordering::Release);
    if DEFERRED_KICK[me].swap(false, Ordering::AcqRel)
        && let Some(gic) = GIC.get()
    {
        let _ = gic.send_sgi(runtime::SGI_KICK, SgiTarget::Cpu(me));
    }
    loop {
        cpu::wait_for_interrupt();
    }
}

/// Starts every other CPU of the topology by its device-tree `enable-method`
/// (PSCI `CPU_ON`, or the spin table on the Raspberry Pi), or by PSCI on an
/// ACPI boot (`machine` is `None`); CPUs that cannot be started or that do not
/// report in are left out of the topology with a log line.
fn start_secondaries(
    topology: &mut Topology,
    machine: Option<&MachineDescription>,
    conduit: Option<psci::Conduit>,
) {
    let boot_cpu = cpu::index();
    let total = topology.len();
    let targets: Vec<(usize, u64)> = topology
        .cpus()
        .iter()
        .filter(|c| c.index != boot_cpu && c.enabled)
        .map(|c| (c.index, c.hw_id))
        .collect();
    if let Some(conduit) = conduit {
        let (major, minor) = psci::version(conduit);
        info!("psci: version {major}.{minor} via {conduit:?}");
    }
    for (index, mpidr) in targets {
        let method = match machine {
            Some(machine) => machine.start_method(mpidr),
            // ACPI: PSCI for every CPU, through the FADT's conduit (the
            // parking protocol is not supported); the method's own conduit
            // is not used below.
            None => StartMethod::Psci(PsciMethod::Smc),
        };
        let started = match (method, conduit) {
            (StartMethod::SpinTable { release_address }, _) => {
                spin_table::start_secondary_spin_table(release_address, index, mpidr).map_err(|e| {
                    error!(
                        "smp: cpu {index} (mpidr {mpidr:#x}), release address {release_address:#x}: {e}; leaving it out"
                    )
                })
            }
            (StartMethod::Psci(_), Some(conduit)) => boot::start_secondary(conduit, index, mpidr)
                .map_err(|e| {
                    error!(
                        "smp: PSCI CPU_ON for cpu {index} (mpidr {mpidr:#x}) failed: {e}; leaving it out"
                    )
                }),
            (StartMethod::Psci(_), None) => {
                error!(
                    "smp: cpu {index} (mpidr {mpidr:#x}): {}; leaving it out",
                    if machine.is_some() {
                        "no PSCI node in the device tree"
                    } else {
                        "the FADT offers no PSCI"
                    }
                );
                Err(())
            }
            (StartMethod::Unstartable(why), _) => {
                error!("smp: cpu {index} (mpidr {mpidr:#x}): {why}; leaving it out");
                Err(())
            }
        };
        if started.is_err() {
            topology.disable(index);
            continue;
        }
        if !wait_until(CPU_START_TIMEOUT_NS, || {
            ONLINE[index].load(Ordering::Acquire)
        }) {
            error!(
                "smp: cpu {index} (mpidr {mpidr:#x}) did not come online within 5 s; leaving it out"
            );
            topology.disable(index);
        }
    }
    ONLINE[boot_cpu].store(true, Ordering::Release);
    info!("cpu {boot_cpu} online (mpidr {:#x})", cpu::mpidr());
    info!("smp: {} of {} CPUs online", topology.enabled().len(), total);
}

/// The boot CPU pings every other online CPU with an SGI and waits for the answer.
fn ipi_round_trips(topology: &Topology) {
    let Some(gic) = GIC.get() else { return };
    let others: Vec<usize> = topology
        .enabled()
        .iter()
        .filter(|&c| c != cpu::index())
        .collect();
    boot_checks::ipi_round_trips(&BOOT_COUNTERS, &others, timer::now_ns, |target| {
        gic.send_sgi(SGI_PING, SgiTarget::Cpu(target))
    });
}

/// Waits until every online CPU has taken a few ticks.
fn wait_for_ticks(topology: &Topology) {
    boot_checks::wait_for_ticks(&BOOT_COUNTERS, &topology.enabled(), TICK_NS, timer::now_ns);
}

/// Largest device tree accepted (QEMU's are ~1 MiB at most with many CPUs).
const MAX_DTB_BYTES: usize = 2 << 20;

/// Copies the device tree into the heap and parses it. The copy uses byte reads:
/// before the final identity map the blob may sit in memory mapped as Device,
/// where the parser's unaligned word reads would fault.
fn read_device_tree(
    dtb: usize,
) -> (
    MachineDescription,
    usize,
    platform::dt::xen_cpupool::XenCpupools,
) {
    if dtb == 0 || !dtb.is_multiple_of(8) {
        stop(format_args!(
            "device tree: boot loader passed no usable DTB address (x0 = {dtb:#x})"
        ));
    }
    let read = |offset: usize| {
        // SAFETY: the boot protocol says x0 points at the DTB; the header is read
        // byte by byte and every read stays within the size the header gives.
        unsafe { core::ptr::read_volatile((dtb + offset) as *const u8) }
    };
    let header_word = |offset: usize| {
        u32::from_be_bytes([
            read(offset),
            read(offset + 1),
            read(offset + 2),
            read(offset + 3),
        ])
    };
    if header_word(0) != platform::dt::FDT_MAGIC {
        stop(format_args!(
            "device tree: no FDT magic at {dtb:#x} (found {:#x})",
            header_word(0)
        ));
    }
    let size = header_word(4) as usize;
    if size > MAX_DTB_BYTES {
        stop(format_args!(
            "device tree: header claims {size} bytes, more than the {MAX_DTB_BYTES} accepted"
        ));
    }
    let blob: Vec<u8> = (0..size).map(read).collect();
    let machine = match platform::dt::parse(&blob) {
        Ok(machine) => machine,
        Err(e) => stop(format_args!("device tree: {e}")),
    };
    for warning in &machine.warnings {
        warn!("device tree: {warning}");
    }
    if let Err(e) = machine.check_bootable() {
        stop(format_args!("device tree: {e}"));
    }
    // Xen's boot-time cpupools, if the tree has any (a bad node is left out,
    // with a warning; an unreadable tree gave its error above already).
    let cpupools = platform::dt::xen_cpupool::parse(&blob, &machine).unwrap_or_else(|e| {
        warn!("device tree: xen,cpupool nodes not read: {e}");
        Default::default()
    });
    for warning in &cpupools.warnings {
        warn!("device tree: {warning}");
    }
    (machine, size, cpupools)
}

/// Installs the final identity map and grows the heap into RAM.
fn setup_memory(dtb: usize, dtb_size: usize, machine: &MachineDescription) {
    let ram: Vec<(u64, u64)> = machine.memory.iter().map(|r| (r.base, r.size)).collect();
    if let Err(e) = boot::install_identity_map(&ram) {
        stop(format_args!("mmu: {e}"));
    }
    let (image_start, image_end) = boot::image_range();
    let mut reserved: Vec<(u64, u64)> = machine
        .reserved
        .iter()
        .map(|r| (r.region.base, r.region.base.saturating_add(r.region.size)))
        .collect();
    reserved.push((image_start, image_end));
    reserved.push((dtb as u64, dtb as u64 + dtb_size as u64));
    if let Some(initrd) = machine.initrd {
        reserved.push((initrd.base, initrd.base.saturating_add(initrd.size)));
    }
    match platform::memory::choose_heap_region(&ram, &reserved, HEAP_BYTES) {
        Some((start, size)) => {
            // SAFETY: the region is RAM from the device tree, mapped Normal by the
            // identity map just installed, and overlaps no reservation, the image
            // or the device tree.
            unsafe { heap::add_region(start as usize, size as usize) };
            for region in &machine.memory {
                info!(
                    "memory: {:#x}-{:#x} ({} MiB)",
                    region.base,
                    region.base + region.size,
                    region.size >> 20
                );
            }
            info!(
                "memory: heap {} MiB at {start:#x}",
                heap::total_bytes() >> 20
            );
        }
        None => warn!(
            "memory: no free RAM for the heap; staying on the {} MiB bootstrap heap",
            heap::total_bytes() >> 20
        ),
    }
}

/// Creates the GIC driver the device tree names and initialises its distributor.
fn init_gic(machine: &MachineDescription) -> &'static Gic {
    let Some(node) = machine.gic.as_ref() else {
        stop(format_args!(
            "gic: the device tree has no interrupt controller this hypervisor knows"
        ))
    };
    let Some(version) = GicVersion::from_compatible(&node.compatible) else {
        stop(format_args!(
            "gic: {}: unknown GIC compatible \"{}\"",
            node.path, node.compatible
        ))
    };
    let gic = match version {
        GicVersion::V2 => {
            let (Some(gicd), Some(gicc)) = (node.distributor(), node.cpu_interface()) else {
                stop(format_args!(
                    "gic: {}: GICv2 needs distributor and CPU interface regions in reg",
                    node.path
                ))
            };
            if let Some(gicv) = node.virtual_cpu_interface() {
                GICV_BASE.store(gicv.base, Ordering::Relaxed);
            }
            // Guests need both: GICH to list their interrupts, GICV as their CPU interface.
            match (node.hypervisor_interface(), node.virtual_cpu_interface()) {
                (Some(gich), Some(gicv)) => info!(
                    "gic: {}: virtualization interface GICH at {:#x}, GICV at {:#x}",
                    node.compatible, gich.base, gicv.base
                ),
                _ => warn!(
                    "gic: {}: reg has no GICH/GICV regions; guests get no virtual interrupts",
                    node.path
                ),
            }
            match node.hypervisor_interface() {
                // SAFETY: the device tree names these as the GIC's distributor, CPU
                // interface and (banked per CPU) hypervisor interface; the identity
                // map makes them Device memory at the same addresses.
                Some(gich) => Gic::V2(unsafe {
                    GicV2::with_virtual_interface(
                        gicd.base as usize,
                        gicc.base as usize,
                        gich.base as usize,
                    )
                }),
                // SAFETY: as above, for the distributor and CPU interface.
                None => Gic::V2(unsafe { GicV2::new(gicd.base as usize, gicc.base as usize) }),
            }
        }
        GicVersion::V3 => {
            let (Some(gicd), Some(gicr)) =
                (node.distributor(), node.redistributors().first().copied())
            else {
                stop(format_args!(
                    "gic: {}: GICv3 needs distributor and redistributor regions in reg",
                    node.path
                ))
            };
            // SAFETY: as above, for the distributor and the first redistributor region.
            Gic::V3(unsafe {
                GicV3::new(gicd.base as usize, gicr.base as usize, gicr.size as usize)
            })
        }
    };
    install_gic(gic, &node.path)
}

/// Initialises the distributor of `gic` (named by `source` in errors) and makes
/// it the hypervisor's GIC.
fn install_gic(gic: Gic, source: &str) -> &'static Gic {
    if let Err(e) = gic.init_distributor() {
        stop(format_args!("gic: {source}: {e}"));
    }
    GIC.call_once(|| gic)
}
