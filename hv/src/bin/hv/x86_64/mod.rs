//! x86-64 boot flow: COM1 console, PVH start info, heap, descriptor tables,
//! TSC, local APIC, SVM, ACPI (MADT) and CPUID topology, all CPUs up with
//! INIT-SIPI-SIPI, an IPI round trip to every CPU, a 10 ms APIC tick, COM1
//! console input (its IRQ through the I/O APIC, or polled), then the config's
//! cpupools and SVM domains, and every CPU in its run loop (enter the loaded
//! vCPU, handle its exit, take scheduling events and, on the boot CPU, typed
//! input). Prints the same banner lines as the ARM64 flow.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use apic::encode::TimerMode;
use apic::{ApicFeatures, LocalApic};
use hv::boot_checks::{self, BootCounters};
use hv::boot_options::BootOptions;
use hv::sibling_view::Identity;
use log::{error, info, warn};
use platform::acpi;
use platform::arch::x86_64::{boot, console, cpu, exceptions, svm, timer};
use platform::sync::Once;
use sched::{MAX_CPUS, Topology};

use crate::heap;
use runtime::RUNTIME;

mod domain;
mod exit;
mod input;
mod runtime;
mod speculation;
mod vcpu;

/// Vector of the local APIC timer tick.
const VECTOR_TICK: u8 = 0x40;
/// Vector the boot CPU pings a CPU with (and, later, the scheduler's kick).
const VECTOR_PING: u8 = 0x41;
/// Vector a CPU answers a ping with.
const VECTOR_PONG: u8 = 0x42;
/// Vector that only makes a CPU leave its guest (to see a new virtual
/// interrupt); `runtime::VECTOR_KICK` (0x43) runs the scheduler.
pub const VECTOR_NUDGE: u8 = 0x44;
/// How often (in ticks of the boot CPU) the co-residency logs are checked.
const CORESIDENCY_CHECK_TICKS: u32 = 200;
/// How often (in ticks of the boot CPU) each domain's run time is logged.
const RUNTIME_LOG_TICKS: u32 = 100;
/// Spurious-interrupt vector (low nibble all ones, as older APICs require).
const VECTOR_SPURIOUS: u8 = 0xff;
/// Tick period.
const TICK_NS: u64 = 10_000_000;
/// How long a starting CPU may take to report in.
const CPU_START_TIMEOUT_NS: u64 = 5_000_000_000;
/// Heap to take from RAM after the bootstrap region (guest RAM comes from it).
const HEAP_BYTES: u64 = 512 << 20;
/// Stack of each AP (debug builds keep large values on the stack).
const AP_STACK_BYTES: usize = 256 << 10;
/// Memory below this is left alone: the real-mode IVT/BDA, the AP trampoline,
/// EBDA and BIOS.
const LOW_MEMORY_END: u64 = 1 << 20;

/// How the tick is driven.
#[derive(Clone, Copy, Debug)]
enum Tick {
    /// TSC-deadline mode: re-armed in each tick.
    Deadline,
    /// One-shot mode, re-armed for each deadline; this many counts (divide
    /// by 16) make a tick period.
    OneShot(u32),
}

static APIC: Once<LocalApic> = Once::new();
static TICK: Once<Tick> = Once::new();
static ONLINE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// The pings, answers and ticks the boot checks wait for.
static BOOT_COUNTERS: BootCounters = BootCounters::new();
/// APIC id each logical CPU read from its own APIC at bring-up.
static APIC_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; MAX_CPUS];
/// The MADT APIC id each logical CPU was started for.
static MADT_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; MAX_CPUS];
/// What each CPU's CPUID said at bring-up, by logical index (for the MADT
/// cross-check; bring-up only, not a hot path).
static OBSERVATIONS: platform::sync::Mutex<Vec<(usize, acpi::CpuidObservation)>> =
    platform::sync::Mutex::new(Vec::new());
/// Logical index of the boot CPU.
static BOOT_CPU: AtomicUsize = AtomicUsize::new(0);

/// Waits until `done()` or `timeout_ns` passes; true if it became done.
fn wait_until(timeout_ns: u64, done: impl FnMut() -> bool) -> bool {
    boot_checks::wait_until(&timer::now_ns, timeout_ns, done)
}

fn stop(reason: core::fmt::Arguments<'_>) -> ! {
    error!("{reason}; stopping");
    cpu::park()
}

fn apic() -> &'static LocalApic {
    match APIC.get() {
        Some(apic) => apic,
        None => stop(format_args!("apic: not initialised")),
    }
}

#[unsafe(no_mangle)]
fn hv_x86_primary_main(start_info: usize) -> ! {
    // SAFETY: COM1 is the PC's first serial port; only the console drives it.
    unsafe { console::init_com1() };
    console::init_logger(log::LevelFilter::Info);
    info!(
        "hv: hypervisor booting on board {} (x86-64, PVH entry, long mode)",
        crate::BOARD_NAME
    );
    heap::init_bootstrap();
    exceptions::init_this_cpu();
    // SAFETY: `start_info` is what the PVH loader passed in %ebx.
    let start = match unsafe { boot::read_start_info(start_info) } {
        Ok(start) => start,
        Err(e) => stop(format_args!("boot: {e}")),
    };
    if !start.cmdline.is_empty() {
        info!("boot: command line \"{}\"", start.cmdline);
    }
    let options = BootOptions::parse(&start.cmdline, |unknown| warn!("boot: {unknown}"));
    RUNTIME.apply_boot_options(&options);
    if options.break_fpu_switch {
        warn!("test: vCPU switches leave the AVX state alone (hv.test-break-fpu-switch=on)");
        vcpu::break_fpu_switch();
    }
    if let Some(cpu) = options.silent_ap {
        warn!("test: cpu {cpu} will park without reporting in (hv.test-silent-ap={cpu})");
        SILENT_AP.store(cpu, Ordering::Relaxed);
    }
    setup_memory(&start);
    match timer::calibrate() {
        Ok(hz) => info!(
            "tsc: {} MHz (calibrated against PIT channel 2)",
            hz / 1_000_000
        ),
        Err(e) => warn!(
            "tsc: calibration failed ({e}); assuming {} MHz",
            timer::FALLBACK_TSC_HZ / 1_000_000
        ),
    }
    domain::read_wall_clock();
    let apic = init_apic();
    report_virtualization();
    if matches!(svm::detect(), svm::Virtualization::Svm(_)) {
        speculation::init();
        if options.no_speculation_flush {
            speculation::turn_flushes_off();
        }
    }
    let (mut topology, madt_ids, madt) = read_topology(start.rsdp);
    // The firmware booted some CPU; its logical index is its place in the MADT.
    let my_id = apic.id();
    let boot_cpu = topology
        .cpus()
        .iter()
        .position(|c| c.hw_id == u64::from(my_id))
        .unwrap_or_else(|| {
            warn!("smp: boot CPU (apic id {my_id:#x}) is not in the MADT; calling it cpu 0");
            0
        });
    cpu::set_index(boot_cpu);
    BOOT_CPU.store(boot_cpu, Ordering::Relaxed);
    for c in topology.cpus() {
        MADT_IDS[c.index].store(c.hw_id as u32, Ordering::Relaxed);
    }
    info!("topology: {}", topology.counts());
    for line in REPORT.get().map_or("", String::as_str).lines() {
        info!("{line}");
    }
    bring_up_this_cpu(boot_cpu);
    start_secondaries(&mut topology);
    cross_check(&topology, &madt_ids);
    ipi_round_trips(&topology);
    ipi_broadcasts(&topology);
    wait_for_ticks(&topology);
    input::init(&madt, boot_cpu, my_id, options.console_poll);
    if options.fault_test {
        fault_on_purpose();
    }
    RUNTIME.coresidency_init(cpu_identities(topology.len()), &topology);
    let classes = CLASSES.get().map_or(&[][..], Vec::as_slice);
    let config = hv::runtime::boot::with_pool_layout(
        hv::runtime::boot::load_config(CONFIG_BLOB, &topology),
        classes,
        &topology,
    );
    let applied = RUNTIME.boot(&topology, config.as_ref());
    if let Some(config) = &config {
        start_domains(config, &applied);
    }
    RUNTIME.boot_domains_started();
    run_loop(boot_cpu)
}

/// The command-line word behind [`BootOptions::fault_test`] (for the log).
const FAULT_TEST_OPTION: &str = "hv.fault-test=page-fault";

/// The CPU that `hv.test-silent-ap` keeps from reporting in (none: `usize::MAX`).
static SILENT_AP: AtomicUsize = AtomicUsize::new(usize::MAX);

/// An address the boot identity map does not cover (64 GiB).
const UNMAPPED_ADDRESS: u64 = 0x10_0000_0000;

/// Reads an unmapped address: the page-fault handler reports it and parks
/// this CPU; the other CPUs keep ticking.
fn fault_on_purpose() {
    warn!("test: reading {UNMAPPED_ADDRESS:#x} on purpose ({FAULT_TEST_OPTION})");
    // SAFETY: a byte read changes no memory; it faults by design (nothing is
    // mapped there) and the exception handler parks this CPU instead of
    // returning, so no value is ever produced from unmapped memory.
    let value = unsafe { core::ptr::read_volatile(UNMAPPED_ADDRESS as *const u8) };
    error!("test: the read of {UNMAPPED_ADDRESS:#x} did not fault (got {value})");
}

#[unsafe(no_mangle)]
fn hv_x86_secondary_main(cpu_index: usize) -> ! {
    if SILENT_AP.load(Ordering::Relaxed) == cpu_index {
        // As an AP that never answers its SIPI looks to the boot CPU.
        cpu::park();
    }
    bring_up_this_cpu(cpu_index);
    info!(
        "cpu {cpu_index} online (apic id {:#x})",
        APIC_IDS[cpu_index].load(Ordering::Relaxed)
    );
    ONLINE[cpu_index].store(true, Ordering::Release);
    run_loop(cpu_index)
}

/// Picks xAPIC or x2APIC (x2APIC whenever the CPU has it), enables the boot
/// CPU's APIC and decides how the tick is driven.
fn init_apic() -> &'static LocalApic {
    // SAFETY: the xAPIC page (0xfee00000 on PCs) is in the uncached part of
    // the boot identity map and only this driver touches it.
    let apic = match unsafe { LocalApic::detect(true) } {
        Ok(apic) => apic,
        Err(e) => stop(format_args!("apic: {e}")),
    };
    let apic = APIC.call_once(|| apic);
    apic.enable(VECTOR_SPURIOUS);
    let features = ApicFeatures::read();
    let tick = if features.tsc_deadline {
        Tick::Deadline
    } else {
        let count = apic.calibrate_timer(TICK_NS, TICK_NS, |ns| {
            let start = timer::now_ns();
            timer::delay_us(ns / 1000);
            timer::now_ns() - start
        });
        match count {
            Ok(count) => Tick::OneShot(count),
            Err(e) => stop(format_args!("apic: timer calibration: {e}")),
        }
    };
    TICK.call_once(|| tick);
    let location = match apic.mode() {
        apic::ApicMode::XApic => alloc::format!("MMIO at {:#x}", apic.base()),
        apic::ApicMode::X2Apic => String::from("MSR interface"),
    };
    let tick_text = match tick {
        Tick::Deadline => String::from("TSC-deadline tick"),
        Tick::OneShot(count) => alloc::format!(
            "one-shot tick, {count} counts (/{}) per {} ms",
            apic::TIMER_DIVISOR,
            TICK_NS / 1_000_000
        ),
    };
    info!(
        "apic: {} driver up ({location}, version {:#x}, boot CPU apic id {:#x}, {tick_text})",
        apic.mode(),
        apic.version() & 0xff,
        apic.id()
    );
    apic
}

/// What QEMU's TCG reports as its hypervisor signature (CPUID 0x4000_0000).
const QEMU_TCG_SIGNATURE: &[u8; 12] = b"TCGTCGTCGTCG";

/// Logs what hardware virtualization the boot CPU offers.
fn report_virtualization() {
    if cpu::hypervisor_signature().as_ref() == Some(QEMU_TCG_SIGNATURE) {
        // README, "QEMU TCG defect": QEMU's x87 restore helpers clear a flag
        // in the boot CPU's state word from whichever CPU runs them, without
        // synchronisation, and can undo the boot CPU's own concurrent change
        // to that word (its GIF and nested-paging flags at VMRUN/#VMEXIT).
        warn!(
            "cpu: running under QEMU's TCG: an FXRSTOR/XRSTOR/FRSTOR/FLDENV on any CPU can undo the boot CPU's \
             SVM state changes (a QEMU defect); the hypervisor restores guest x87 state only for guests that changed it"
        );
    }
    match svm::detect() {
        svm::Virtualization::Svm(info) => {
            info!(
                "svm: available (npt {}, asids {}, revision {})",
                if info.npt { "yes" } else { "no" },
                info.asids,
                info.revision
            );
            exit::use_next_rip(info.nrips);
        }
        svm::Virtualization::VmxOnly => warn!(
            "svm: not available: this CPU has Intel VMX, whose support is a later step; \
             bringing up the host, topology and IPIs without guests"
        ),
        svm::Virtualization::None => warn!(
            "svm: not available: this CPU has neither SVM nor VMX; \
             bringing up the host, topology and IPIs without guests"
        ),
    }
}

/// APIC, SVM, the tick and interrupts for the calling CPU.
fn bring_up_this_cpu(cpu_index: usize) {
    let apic = apic();
    apic.enable(VECTOR_SPURIOUS);
    APIC_IDS[cpu_index].store(apic.id(), Ordering::Relaxed);
    let observation = acpi::CpuidObservation {
        madt_apic_id: MADT_IDS[cpu_index].load(Ordering::Relaxed),
        cpuid_apic_id: cpu::cpuid_apic_id(),
        layout: cpuid_layout().0,
    };
    OBSERVATIONS.lock().push((cpu_index, observation));
    if matches!(svm::detect(), svm::Virtualization::Svm(_)) {
        match svm::enable_on_this_cpu() {
            Ok(()) => vcpu::init_this_cpu(cpu_index),
            Err(e) => warn!("svm: cpu {cpu_index}: {e}"),
        }
    }
    exceptions::set_irq_handler(handle_irq);
    NEXT_TICK[cpu_index].store(timer::now_ns() + TICK_NS, Ordering::Relaxed);
    match TICK.get() {
        Some(Tick::Deadline) => {
            apic.start_tsc_deadline_timer(VECTOR_TICK);
            apic.set_tsc_deadline(timer::tsc_after_ns(TICK_NS));
        }
        Some(&Tick::OneShot(count)) => {
            apic.start_timer(VECTOR_TICK, TimerMode::OneShot, count, false)
        }
        None => warn!("tick: cpu {cpu_index}: no tick mode chosen"),
    }
    cpu::enable_irqs();
}

fn handle_irq(vector: u8, _frame: &mut exceptions::TrapFrame) {
    let apic = apic();
    let me = cpu::index();
    match vector {
        VECTOR_TICK => {
            let now = timer::now_ns();
            if NEXT_TICK[me].load(Ordering::Relaxed) <= now {
                let ticks = BOOT_COUNTERS.tick(me);
                NEXT_TICK[me].store(now + TICK_NS, Ordering::Relaxed);
                if me == BOOT_CPU.load(Ordering::Relaxed) {
                    if ticks.is_multiple_of(CORESIDENCY_CHECK_TICKS) {
                        CHECK_DUE.store(true, Ordering::Release);
                    }
                    if ticks.is_multiple_of(RUNTIME_LOG_TICKS) {
                        RUNTIME_LOG_DUE.store(true, Ordering::Release);
                    }
                    input::on_tick();
                } else {
                    RUNTIME.replay_own_coresidency(me);
                }
            }
            TIMER_FIRED[me].store(true, Ordering::Release);
            program_timer(RUNTIME.timer_deadline(me), PassedDeadline::Skip);
        }
        runtime::VECTOR_KICK => KICK_PENDING[me].store(true, Ordering::Release),
        // The exit it caused is all it was for.
        VECTOR_NUDGE => {}
        input::VECTOR_CONSOLE => input::on_interrupt(),
        VECTOR_PING => {
            BOOT_COUNTERS.ping_received(me);
            let boot = BOOT_CPU.load(Ordering::Relaxed);
            let _ = apic.send_fixed(VECTOR_PONG, APIC_IDS[boot].load(Ordering::Relaxed));
        }
        VECTOR_PONG => {
            BOOT_COUNTERS.pong_received();
        }
        // Spurious interrupts take no EOI.
        VECTOR_SPURIOUS => return,
        other => warn!("irq: unexpected vector {other:#x}"),
    }
    apic.eoi();
}

/// When each CPU's next housekeeping tick is due (ns).
static NEXT_TICK: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// The TSC deadline of the virtual timer of the vCPU each CPU runs (0: none).
static GUEST_DEADLINE: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Set by the timer interrupt, taken by the run loop.
static TIMER_FIRED: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// Set by the kick IPI, taken by the run loop.
static KICK_PENDING: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
/// The boot CPU's tick asks its run loop for a co-residency check.
static CHECK_DUE: AtomicBool = AtomicBool::new(false);
/// The boot CPU's tick asks its run loop for the domains' run-time line.
static RUNTIME_LOG_DUE: AtomicBool = AtomicBool::new(false);
/// APIC id of each logical CPU, for IPIs (the MADT's, as started).
fn apic_id_of(cpu: usize) -> Option<u32> {
    let id = APIC_IDS.get(cpu)?.load(Ordering::Relaxed);
    (id != u32::MAX).then_some(id)
}

/// Sends `vector` to CPU `cpu` (to itself too).
pub fn send_ipi(cpu: usize, vector: u8) {
    let Some(id) = apic_id_of(cpu) else {
        error!("ipi: cpu {cpu} has no APIC id");
        return;
    };
    if let Err(e) = apic().send_fixed(vector, id) {
        error!("ipi: vector {vector:#x} to cpu {cpu} (apic id {id:#x}): {e}");
    }
}

/// What [`program_timer`] does with a deadline that has already passed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PassedDeadline {
    /// Fire at once: the caller goes on to enter a guest or to sleep, and
    /// the interrupt brings it back to the run loop's event processing.
    FireNow,
    /// Leave it out: the timer interrupt that just fired flagged it
    /// ([`TIMER_FIRED`]), and the run loop handles it and re-arms before
    /// the next guest entry. Armed again from the handler, a passed deadline
    /// interrupts the handler's own return before the interrupted code
    /// retires an instruction (under QEMU `-icount` a one-count APIC timer
    /// expires within the next instruction): the CPU livelocks in
    /// interrupts and never reaches the run loop that would move it.
    Skip,
}

/// Programs this CPU's APIC timer for the earliest of its housekeeping tick,
/// `deadline` (the runtime's: scheduling deadline and pending wake-ups) and
/// the running vCPU's virtual timer.
fn arm_timer(deadline: Option<sched::Time>) {
    program_timer(deadline, PassedDeadline::FireNow);
}

/// [`arm_timer`], with what to do with passed deadlines.
fn program_timer(deadline: Option<sched::Time>, passed: PassedDeadline) {
    let Some(&tick_mode) = TICK.get() else {
        return;
    };
    let me = cpu::index();
    let now = timer::now_ns();
    let keep = passed == PassedDeadline::FireNow;
    let tick = NEXT_TICK[me].load(Ordering::Relaxed);
    let deadline = deadline.filter(|&d| keep || d > now);
    let deadline = deadline.map_or(tick, |d| d.min(tick));
    let mut tsc = timer::tsc_after_ns(deadline.saturating_sub(now));
    let guest = GUEST_DEADLINE[me].load(Ordering::Relaxed);
    if guest != 0 && (keep || guest > timer::tsc()) {
        tsc = tsc.min(guest.max(1));
    }
    match tick_mode {
        Tick::Deadline => apic().set_tsc_deadline(tsc),
        Tick::OneShot(per_tick) => {
            // TSC ticks to APIC counts: `per_tick` counts per TICK_NS.
            let delta = tsc.saturating_sub(timer::tsc());
            let tsc_per_tick = u128::from(timer::tsc_hz()) * u128::from(TICK_NS) / 1_000_000_000;
            let counts = u128::from(delta) * u128::from(per_tick) / tsc_per_tick.max(1);
            let counts = counts.clamp(1, u128::from(u32::MAX)) as u32;
            apic().start_timer(VECTOR_TICK, TimerMode::OneShot, counts, false);
        }
    }
}

/// Records the running vCPU's virtual timer deadline (guest TSC, which is
/// the host's) and re-arms this CPU's timer for it.
pub fn set_guest_deadline(me: usize, deadline: Option<u64>) {
    let new = deadline.unwrap_or(0);
    if GUEST_DEADLINE[me].swap(new, Ordering::Relaxed) != new {
        RUNTIME.rearm_timer();
    }
}

/// The scheduling events this CPU's interrupts left: kicks, the timer
/// (wake-ups, scheduling deadline), the co-residency check, and on the boot
/// CPU typed console input.
fn process_events(me: usize) {
    if KICK_PENDING[me].swap(false, Ordering::AcqRel) {
        RUNTIME.on_event(sched::driver::CpuEvent::Kick);
    }
    if TIMER_FIRED[me].swap(false, Ordering::AcqRel) {
        let now = timer::now_ns();
        RUNTIME.expire_wakeups(me, now);
        if RUNTIME.deadline(me).is_some_and(|d| d <= now) {
            RUNTIME.on_event(sched::driver::CpuEvent::Timer);
        }
        if me == BOOT_CPU.load(Ordering::Relaxed) {
            boot_cpu_housekeeping();
        }
        RUNTIME.rearm_timer();
    }
    if me == BOOT_CPU.load(Ordering::Relaxed) {
        // Typed input the console interrupt (or tick) queued.
        input::process();
    }
}

/// What the boot CPU's tick asked its run loop for: the co-residency check
/// (with interrupts on: it replays every core's log), the run-time line, and
/// the teardown of stopped domains whose vCPUs have left every CPU (cheap
/// when none waits).
fn boot_cpu_housekeeping() {
    if CHECK_DUE.swap(false, Ordering::AcqRel) || RUNTIME.coresidency_check_due() {
        cpu::enable_irqs();
        RUNTIME.check_coresidency();
        x86_64::instructions::interrupts::disable();
    }
    if RUNTIME_LOG_DUE.swap(false, Ordering::AcqRel) {
        RUNTIME.log_runtimes();
        RUNTIME.log_lock_wait();
        RUNTIME.log_starving();
    }
    RUNTIME.trace_housekeeping();
    domain::do_pending_work();
}

/// Every CPU's life after boot: take the scheduling events, then enter the
/// loaded vCPU until its next exit, or sleep until an interrupt when idle.
/// Interrupts are masked except while halted and while a guest runs (they
/// then exit it), so an event is never lost between the check and the wait.
fn run_loop(me: usize) -> ! {
    loop {
        x86_64::instructions::interrupts::disable();
        process_events(me);
        match vcpu::loaded(me) {
            Some(id) if vcpu::svm_ready(me) => {
                exit::run_once(me, id);
                // Let the interrupts the guest exited for run their handlers.
                x86_64::instructions::interrupts::enable();
                platform::sync::cpu_relax();
            }
            _ => {
                set_guest_deadline(me, None);
                cpu::wait_for_interrupt();
            }
        }
    }
}

/// The test guest, built by xtask and embedded (empty when built without one).
static GUEST_IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/guest.bin"));

/// Debian's amd64 kernel and its BusyBox initramfs (`cargo xtask guest-linux
/// --x86`), embedded only when the config runs the built-in `linux` image.
static LINUX_IMAGE: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux-image.bin"));
static LINUX_INITRAMFS: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/linux-initramfs.cpio"));

/// The configuration compiled into the image (empty when built without one).
static CONFIG_BLOB: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/config.hvcfg"));

/// Builds and starts the domains the config created in the scheduler.
fn start_domains(config: &hv::config::Config, applied: &hv::config::Applied) {
    if !vcpu::svm_ready(cpu::index()) {
        if !config.domains.is_empty() {
            warn!(
                "svm: not available, so the config's {} domains are not started",
                config.domains.len()
            );
        }
        return;
    }
    let mut with_console = Vec::new();
    let mut built = Vec::new();
    for (spec, id) in config.domains.iter().zip(&applied.domains) {
        let Some(id) = id else { continue };
        let (image, initramfs) = match &spec.image {
            hv::config::GuestImage::Builtin(name) if name == "test-guest" => (GUEST_IMAGE, None),
            hv::config::GuestImage::Builtin(name) if name == hv::config::LINUX_IMAGE => {
                (LINUX_IMAGE, Some(LINUX_INITRAMFS))
            }
            hv::config::GuestImage::File { path, initramfs } => (
                crate::user_images::find(path).unwrap_or(&[]),
                initramfs.as_deref().and_then(crate::user_images::find),
            ),
            _ => (&[][..], None),
        };
        match domain::create(*id, spec, image, initramfs) {
            Ok(()) => {
                built.push(*id);
                if spec.console != hv::config::Console::None {
                    with_console.push(id.0);
                }
            }
            Err(e) => error!("domain {} ({}): not started: {e}", id.0, spec.name),
        }
    }
    input::start_domains(&with_console);
    // Together, once all are built (as on ARM; Xen's dom0less order).
    if !built.is_empty() {
        info!("domains: {} built; starting them", built.len());
    }
    for id in built {
        domain::start(id);
    }
}

/// Starts every other CPU of the topology with INIT-SIPI-SIPI, one at a time;
/// CPUs that do not report in are left out of the topology with a log line.
fn start_secondaries(topology: &mut Topology) {
    let boot_cpu = cpu::index();
    let total = topology.len();
    let targets: Vec<(usize, u64)> = topology
        .cpus()
        .iter()
        .filter(|c| c.index != boot_cpu && c.enabled)
        .map(|c| (c.index, c.hw_id))
        .collect();
    let apic = apic();
    for (index, apic_id) in targets {
        let stack: &'static mut [u8] =
            Box::leak(alloc::vec![0u8; AP_STACK_BYTES].into_boxed_slice());
        let stack_top = stack.as_ptr_range().end as u64;
        // SAFETY: the trampoline page is below LOW_MEMORY_END, which the heap
        // never uses, and the previous AP has reached Rust (or timed out and
        // is left out; a late one would read the new parameters and run as
        // the new CPU index, which the ONLINE check below then reports).
        let entry = unsafe { boot::prepare_ap(index, stack_top) };
        if let Err(e) = apic.start_ap(apic_id as u32, entry, timer::delay_us) {
            error!(
                "smp: INIT-SIPI-SIPI to cpu {index} (apic id {apic_id:#x}) failed: {e}; leaving it out"
            );
            topology.disable(index);
            continue;
        }
        if !wait_until(CPU_START_TIMEOUT_NS, || {
            ONLINE[index].load(Ordering::Acquire)
        }) {
            error!(
                "smp: cpu {index} (apic id {apic_id:#x}) did not come online within 5 s; leaving it out"
            );
            topology.disable(index);
        }
    }
    ONLINE[boot_cpu].store(true, Ordering::Release);
    info!(
        "cpu {boot_cpu} online (apic id {:#x})",
        APIC_IDS[boot_cpu].load(Ordering::Relaxed)
    );
    info!("smp: {} of {} CPUs online", topology.enabled().len(), total);
}

/// Compares what each online CPU's CPUID and APIC id register say with the
/// MADT and logs every disagreement (the MADT wins: it is what the CPUs were
/// started by).
fn cross_check(topology: &Topology, madt_ids: &[u32]) {
    let mut observations: Vec<(usize, acpi::CpuidObservation)> = OBSERVATIONS.lock().clone();
    observations.sort_by_key(|(index, _)| *index);
    let observations: Vec<acpi::CpuidObservation> =
        observations.into_iter().map(|(_, o)| o).collect();
    let mut disagreements = acpi::cross_check(madt_ids, &observations).len();
    for disagreement in acpi::cross_check(madt_ids, &observations) {
        warn!("acpi: MADT vs CPUID: {disagreement}");
    }
    for cpu in topology.cpus().iter().filter(|c| c.enabled) {
        let apic_id = APIC_IDS[cpu.index].load(Ordering::Relaxed);
        if u64::from(apic_id) != cpu.hw_id {
            disagreements += 1;
            warn!(
                "acpi: cpu {} started as MADT apic id {:#x} but its APIC id register says {apic_id:#x}",
                cpu.index, cpu.hw_id
            );
        }
    }
    if disagreements == 0 {
        info!(
            "acpi: MADT, CPUID and the APIC id registers agree on all {} online CPUs",
            observations.len()
        );
    }
}

/// What each online CPU read from CPUID at bring-up: its initial APIC ID
/// and the SMT width of its topology leaves (`None`: not up, or its leaves
/// could not be decoded), by logical index.
fn cpu_identities(cpus: usize) -> Vec<Option<Identity>> {
    let mut ids = alloc::vec![None; cpus];
    for (index, observation) in OBSERVATIONS.lock().iter() {
        if let (Some(slot), Some(layout)) = (ids.get_mut(*index), observation.layout) {
            *slot = Some(Identity::X86 {
                apic_id: observation.cpuid_apic_id,
                smt_shift: layout.smt_shift,
            });
        }
    }
    ids
}

/// The boot CPU pings every other online CPU and waits for the answer.
fn ipi_round_trips(topology: &Topology) {
    let apic = apic();
    let others: Vec<usize> = topology
        .enabled()
        .iter()
        .filter(|&c| c != cpu::index())
        .collect();
    boot_checks::ipi_round_trips(&BOOT_COUNTERS, &others, timer::now_ns, |target| {
        let apic_id = APIC_IDS[target].load(Ordering::Relaxed);
        apic.send_fixed(VECTOR_PING, apic_id)
            .map_err(|e| alloc::format!("apic id {apic_id:#x}: {e}"))
    });
}

/// Pings a set of CPUs (every other online CPU) and then all but the boot CPU
/// with the shorthand, and checks each target answered: the two other ways
/// the scheduler kicks siblings.
fn ipi_broadcasts(topology: &Topology) {
    let apic = apic();
    let me = cpu::index();
    let others: Vec<usize> = topology.enabled().iter().filter(|&c| c != me).collect();
    if others.is_empty() {
        return;
    }
    let set: Vec<usize> = others.iter().copied().step_by(2).collect();
    let _ = boot_checks::ipi_broadcast(&BOOT_COUNTERS, "set", &set, timer::now_ns, || {
        apic.send_fixed_to_set(
            VECTOR_PING,
            set.iter().map(|&c| APIC_IDS[c].load(Ordering::Relaxed)),
        )
    });
    let _ = boot_checks::ipi_broadcast(
        &BOOT_COUNTERS,
        "all-but-self",
        &others,
        timer::now_ns,
        || apic.send_fixed_all_but_self(VECTOR_PING),
    );
}

/// Waits until every online CPU has taken a few ticks.
fn wait_for_ticks(topology: &Topology) {
    boot_checks::wait_for_ticks(&BOOT_COUNTERS, &topology.enabled(), TICK_NS, timer::now_ns);
}

/// Logs the memory map and grows the heap into RAM below the identity map's end.
fn setup_memory(start: &boot::StartInfo) {
    let ram: Vec<(u64, u64)> = start
        .memory
        .iter()
        .filter(|r| r.kind == boot::E820_RAM)
        .filter_map(|r| {
            let base = r.base.max(LOW_MEMORY_END);
            let end = r.base.saturating_add(r.size).min(boot::IDENTITY_MAP_END);
            (end > base).then(|| (base, end - base))
        })
        .collect();
    for region in &start.memory {
        info!(
            "memory: {:#x}-{:#x} ({} KiB, e820 type {})",
            region.base,
            region.base.saturating_add(region.size),
            region.size >> 10,
            region.kind
        );
    }
    let (image_start, image_end) = boot::image_range();
    let reserved = [(image_start, image_end)];
    match platform::memory::choose_heap_region(&ram, &reserved, HEAP_BYTES) {
        Some((start, size)) => {
            // SAFETY: the region is E820 RAM above 1 MiB and below 4 GiB (so
            // identity-mapped write-back by boot.S), clear of the image.
            unsafe { heap::add_region(start as usize, size as usize) };
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

/// Copies `buffer.len()` bytes from physical `address`: the ACPI reader.
/// Only the identity-mapped low 4 GiB is readable.
fn read_physical(address: u64, buffer: &mut [u8]) -> bool {
    let Some(end) = address.checked_add(buffer.len() as u64) else {
        return false;
    };
    if address == 0 || end > boot::IDENTITY_MAP_END {
        return false;
    }
    for (i, byte) in buffer.iter_mut().enumerate() {
        // SAFETY: the range is inside the boot identity map (checked above);
        // byte reads are valid on RAM and on the BIOS/ACPI areas alike.
        *byte = unsafe { core::ptr::read_volatile((address + i as u64) as *const u8) };
    }
    true
}

/// The RSDP: from the PVH start info, else the BIOS search of 0xE0000-0xFFFFF.
fn find_rsdp(from_loader: Option<u64>) -> Option<u64> {
    if from_loader.is_some() {
        return from_loader;
    }
    const BIOS_AREA: u64 = 0xe_0000;
    let mut area = alloc::vec![0u8; 0x2_0000];
    if !read_physical(BIOS_AREA, &mut area) {
        return None;
    }
    acpi::Rsdp::scan(&area).map(|(offset, _)| BIOS_AREA + offset as u64)
}

/// This CPU's APIC-id layout from CPUID: leaf 0x1F, else 0xB, else AMD's
/// 0x8000_0008/0x8000_001E, else the legacy leaves 1 and 4. Returns it with
/// the leaf it came from.
fn cpuid_layout() -> (Option<acpi::ApicIdLayout>, &'static str) {
    let (max, max_ext) = cpu::max_leaves();
    for leaf in [0x1f, 0xb] {
        if max < leaf {
            continue;
        }
        let levels: Vec<acpi::TopologyLevel> = (0..8)
            .map_while(|subleaf| {
                let r = cpu::cpuid(leaf, subleaf);
                acpi::decode_topology_level(r.eax, r.ebx, r.ecx, r.edx)
            })
            .collect();
        if levels.is_empty() {
            continue;
        }
        let name = if leaf == 0x1f {
            "leaf 0x1F"
        } else {
            "leaf 0xB"
        };
        return (acpi::layout_from_topology_levels(&levels).ok(), name);
    }
    if max_ext >= 0x8000_0008 {
        let topoext = cpu::cpuid(0x8000_0001, 0).ecx & (1 << 22) != 0;
        let ebx_1e = (topoext && max_ext >= 0x8000_001e).then(|| cpu::cpuid(0x8000_001e, 0).ebx);
        let ecx_8 = cpu::cpuid(0x8000_0008, 0).ecx;
        return (
            Some(acpi::layout_from_amd(ecx_8, ebx_1e)),
            "AMD leaves 0x80000008/0x8000001E",
        );
    }
    if max >= 4 {
        let layout = acpi::layout_from_legacy(cpu::cpuid(1, 0).ebx, cpu::cpuid(4, 0).eax);
        return (Some(layout), "legacy leaves 1 and 4");
    }
    (None, "no topology leaf")
}

/// Reads the ACPI tables and builds the topology from the MADT and the boot
/// CPU's CPUID layout (every CPU checks its own at bring-up). Returns it with
/// the MADT's enabled APIC ids, and the MADT (its I/O APICs route COM1).
fn read_topology(rsdp: Option<u64>) -> (Topology, Vec<u32>, acpi::Madt) {
    let Some(rsdp) = find_rsdp(rsdp) else {
        stop(format_args!(
            "acpi: no RSDP (none in the PVH start info or the BIOS area)"
        ))
    };
    let mut memory = read_physical;
    let tables = match acpi::AcpiTables::load(&mut memory, rsdp) {
        Ok(tables) => tables,
        Err(e) => stop(format_args!("acpi: RSDP at {rsdp:#x}: {e}")),
    };
    for problem in &tables.unreadable {
        warn!("acpi: {problem}");
    }
    let names: Vec<String> = tables
        .list()
        .map(|(signature, address)| alloc::format!("{signature}@{address:#x}"))
        .collect();
    info!("acpi: RSDP at {rsdp:#x}; tables {}", names.join(" "));
    let madt = match tables.get(acpi::Signature::MADT) {
        Ok(Some(sdt)) => match acpi::Madt::from_sdt(&sdt) {
            Ok(madt) => madt,
            Err(e) => stop(format_args!("acpi: {e}")),
        },
        Ok(None) => stop(format_args!("acpi: no MADT: the CPUs cannot be found")),
        Err(e) => stop(format_args!("acpi: {e}")),
    };
    let (layout, leaf) = cpuid_layout();
    match layout {
        Some(layout) => info!("cpuid: APIC id layout {layout} (from {leaf})"),
        None => warn!("cpuid: no APIC id layout ({leaf}); guessing SMT from the MADT ids"),
    }
    let cpus = match acpi::AcpiCpus::x86(&madt, layout) {
        Ok(cpus) => cpus,
        Err(e) => stop(format_args!("acpi: {e}")),
    };
    for warning in &cpus.warnings {
        warn!("acpi: {warning}");
    }
    let topology = match cpus.topology() {
        Ok(topology) => topology,
        Err(e) => stop(format_args!("acpi: {e}")),
    };
    let madt_ids: Vec<u32> = cpus.logical_cpus().map(|c| c.hw_id as u32).collect();
    let mut report = String::new();
    let _ = acpi::write_topology_report(&mut report, &cpus, &topology);
    REPORT.call_once(|| report);
    CLASSES.call_once(|| cpus.cpu_classes(&topology));
    (topology, madt_ids, madt)
}

/// The topology report, printed after the `topology:` line.
static REPORT: Once<String> = Once::new();
/// The CPUs' classes (a hybrid part's P- and E-cores), fastest first.
static CLASSES: Once<Vec<platform::dt::CpuClass>> = Once::new();
