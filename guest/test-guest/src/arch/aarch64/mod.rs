//! The bare-metal guest on aarch64: entered at EL1 by the Linux arm64 boot
//! protocol, it brings up its vCPUs with PSCI and runs the workloads the
//! boot arguments (or the compiled-in default) choose; [`Aarch64`] gives
//! the workloads the GIC, the virtual timer, `HVC` and PSCI.

mod console;
mod device_uart;
mod dtb;
mod exceptions;
mod gic;
mod hvc;
mod pl011;
mod timer;
mod top;

use core::arch::{asm, global_asm};
use core::fmt;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use aarch64_cpu::asm::{sev, wfe, wfi};
use aarch64_cpu::registers::{CNTKCTL_EL1, MPIDR_EL1, TPIDR_EL1};
use guest_abi::{Args, Call, CallError, Regs, version_parts};
use test_guest::config::{Config, ConsoleKind, End};
use test_guest::interrupt::{Interrupt, Ipi, Taken, TimerRound};
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

pub use console::print_line;

use super::Machine;
use crate::{say, workloads};

global_asm!(include_str!("entry.S"), max_vcpus = const MAX_VCPUS);

/// The most vCPUs the guest uses (link.ld reserves a stack for each).
pub const MAX_VCPUS: usize = 8;

/// How long the primary waits for a started vCPU to say it is online.
const ONLINE_TIMEOUT_MS: u64 = 5000;

/// MPIDR affinity bits (Aff3, Aff2, Aff1, Aff0).
const MPIDR_AFFINITY: u64 = 0xFF_00FF_FFFF;

unsafe extern "C" {
    /// Where PSCI CPU_ON starts a secondary vCPU (entry.S).
    fn secondary_entry();
}

static PLATFORM: spin::Once<dtb::Platform> = spin::Once::new();
static CONFIG: spin::Once<Config> = spin::Once::new();
static ONLINE: [AtomicBool; MAX_VCPUS] = [const { AtomicBool::new(false) }; MAX_VCPUS];

/// This vCPU's index (0 = the boot vCPU), kept in TPIDR_EL1.
pub fn vcpu_index() -> usize {
    (TPIDR_EL1.get() as usize).min(MAX_VCPUS - 1)
}

/// `timerlevel`: how far ahead the timer is armed, and how long each wait
/// around the EOI and the mask lasts.
const TIMER_LEVEL_DELAY_US: u64 = 100;

/// Whether vCPU `index` came online.
pub fn is_online(index: usize) -> bool {
    ONLINE.get(index).is_some_and(|o| o.load(Ordering::Acquire))
}

/// Stops this vCPU for good: waits in `WFI`, acknowledging and dropping any
/// interrupt so a pending one does not turn the wait into a busy loop.
pub fn halt() -> ! {
    timer::disarm();
    loop {
        aarch64_cpu::asm::wfi();
        while let Some(acked) = gic::ack() {
            gic::eoi(acked);
        }
    }
}

fn platform() -> &'static dtb::Platform {
    PLATFORM
        .get()
        .expect("the primary sets the platform before starting others")
}

fn config() -> &'static Config {
    CONFIG
        .get()
        .expect("the primary sets the config before starting others")
}

fn own_mpidr() -> u64 {
    MPIDR_EL1.get() & MPIDR_AFFINITY
}

/// Wakes WFE about every 2^(EVNTI+1) counter ticks, so no WFE waits forever
/// for an SEV that never comes.
fn enable_event_stream() {
    CNTKCTL_EL1.modify(CNTKCTL_EL1::EVNTEN::Enable + CNTKCTL_EL1::EVNTI.val(11));
}

/// Puts the boot CPU first; the others keep device-tree order.
fn boot_cpu_first(platform: &mut dtb::Platform, own: u64) {
    let cpus = &mut platform.mpidrs[..platform.cpus];
    match cpus.iter().position(|&m| m & MPIDR_AFFINITY == own) {
        Some(i) => cpus[..=i].rotate_right(1),
        None => {
            say!("test-guest: boot CPU {own:#x} is not in the device tree; using it alone");
            platform.mpidrs[0] = own;
            platform.cpus = 1;
        }
    }
}

fn read_config(bootargs: &'static str) -> Config {
    let parsed = Config::parse(bootargs, |word| {
        say!("test-guest: ignoring boot argument {word:?}");
    });
    match parsed {
        Ok(config) => config,
        Err(e) => {
            say!("test-guest: bad boot arguments ({e}); using the built-in workloads");
            Config::DEFAULT
        }
    }
}

/// Asks the hypervisor for its ABI version; says what it found.
fn probe_hypervisor() -> bool {
    match hvc::hypercall(&Call::Version) {
        Ok(regs) => {
            let (major, minor) = version_parts(regs[0]);
            say!("test-guest: hypervisor ABI {major}.{minor}");
            true
        }
        Err(CallError::Hv(e)) => {
            say!(
                "test-guest: no hypervisor ABI (VERSION returned {}): bare mode, console only",
                e.code()
            );
            false
        }
        Err(CallError::Unknown(code)) => {
            say!(
                "test-guest: no hypervisor ABI (VERSION returned {code}): bare mode, console only"
            );
            false
        }
    }
}

/// Rust entry of the boot vCPU (entry.S, MMU on, stack 0).
#[unsafe(no_mangle)]
extern "C" fn guest_primary_main(dtb_address: u64) -> ! {
    TPIDR_EL1.set(0);
    enable_event_stream();
    let own = own_mpidr();
    // The device tree first, silently: it says whether there is a UART to
    // print to at all (a domain with `console = "none"` has none, and a
    // store to where it would be is an abort).
    let parsed = dtb::parse(dtb_address);
    if parsed.as_ref().is_ok_and(|p| !p.pl011) {
        console::use_hypercall(true);
    }
    say!("test-guest: started at EL1, dtb at {dtb_address:#x}");
    let mut platform = parsed.unwrap_or_else(|e| {
        say!("test-guest: device tree not used ({e}); assuming QEMU virt");
        dtb::defaults(own)
    });
    boot_cpu_first(&mut platform, own);
    if platform.cpus_left_out > 0 {
        say!(
            "test-guest: only {MAX_VCPUS} vCPUs used, {} left out",
            platform.cpus_left_out
        );
    }
    hvc::set_psci_smc(platform.psci_smc);
    if let Some((base, intid)) = platform.second_pl011 {
        device_uart::init(base, intid);
    }
    let platform = PLATFORM.call_once(|| platform);
    if !platform.bootargs.is_empty() {
        say!("test-guest: bootargs {:?}", platform.bootargs);
    }
    let config = CONFIG.call_once(|| read_config(platform.bootargs));
    let hypervisor = probe_hypervisor();
    if !platform.pl011 {
        say!("test-guest: no PL011 in the device tree: console through CONSOLE_WRITE");
    } else if hypervisor && config.console == ConsoleKind::Hypercall {
        console::use_hypercall(true);
        say!("test-guest: console through CONSOLE_WRITE");
    }

    match platform.gic {
        None => say!(
            "test-guest: no interrupt controller in the device tree: sleeper and ping-pong will be skipped"
        ),
        Some(gic) if gic.version == gic::Version::V3 && !dtb::cpu_has_gicv3_sysregs() => say!(
            "test-guest: GICv3 in the device tree but ID_AA64PFR0_EL1.GIC is 0: sleeper and ping-pong will be skipped"
        ),
        Some(gic) => {
            if let Err(e) = gic::init_distributor(gic).and_then(|()| gic::init_cpu(0, own)) {
                say!("test-guest: GIC setup failed: {e}; stopping");
                halt();
            }
            let version = match gic.version {
                gic::Version::V2 => "GICv2",
                gic::Version::V3 => "GICv3",
            };
            say!(
                "test-guest: gic {version} from {} (distributor {:#x})",
                platform.gic_source,
                gic.gicd
            );
        }
    }
    say!("test-guest: virtual counter {} Hz", timer::frequency());

    ONLINE[0].store(true, Ordering::Release);
    say!("test-guest: vcpu 0 online (mpidr {own:#x})");
    let mut wanted = match config.vcpus {
        0 => platform.cpus,
        n => (n as usize).min(platform.cpus),
    };
    if platform.cpus_guessed {
        say!("test-guest: no device tree CPUs: probing with PSCI CPU_ON");
    }
    for index in 1..wanted {
        if !start_secondary(index, platform.mpidrs[index], platform.cpus_guessed) {
            // A guessed CPU that PSCI refuses does not exist: stop there.
            wanted = index;
            break;
        }
    }
    let online = (0..wanted).filter(|&i| is_online(i)).count();
    say!("test-guest: {online} of {wanted} vCPUs online");
    workloads::start(wanted);
    workloads::run(0, config)
}

/// Starts vCPU `index`; false if PSCI refused and the MPIDR was a guess.
fn start_secondary(index: usize, mpidr: u64, guessed: bool) -> bool {
    let entry = secondary_entry as *const () as u64;
    let ret = hvc::psci(hvc::PSCI_CPU_ON, mpidr, entry, index as u64);
    if ret != 0 {
        if guessed {
            return false;
        }
        say!("test-guest: CPU_ON vcpu {index} (mpidr {mpidr:#x}) failed: PSCI {ret}");
        return true;
    }
    let deadline = timer::now() + timer::ms_to_ticks(ONLINE_TIMEOUT_MS);
    while !is_online(index) {
        if timer::now() > deadline {
            say!(
                "test-guest: vcpu {index} (mpidr {mpidr:#x}) did not come online in {ONLINE_TIMEOUT_MS} ms"
            );
            return true;
        }
        core::hint::spin_loop();
    }
    true
}

/// Rust entry of a secondary vCPU (entry.S, MMU on, its own stack).
#[unsafe(no_mangle)]
extern "C" fn guest_secondary_main(index: u64) -> ! {
    TPIDR_EL1.set(index);
    enable_event_stream();
    let index = index as usize;
    let mpidr = own_mpidr();
    if let Err(e) = gic::init_cpu(index, mpidr) {
        say!("test-guest: vcpu {index} GIC setup failed: {e}; stopping");
        halt();
    }
    ONLINE[index].store(true, Ordering::Release);
    say!("test-guest: vcpu {index} online (mpidr {mpidr:#x})");
    workloads::rejoin_if_restarted(index, config());
    workloads::wait_start(index);
    workloads::run(index, config())
}

/// The aarch64 side of [`Machine`].
pub struct Aarch64;

/// PSCI `AFFINITY_INFO`'s answer for a powered-off vCPU.
const AFFINITY_OFF: i64 = 1;

/// PSCI `AFFINITY_INFO` of one vCPU (lowest affinity level).
fn affinity_info(index: usize) -> i64 {
    hvc::psci(hvc::PSCI_AFFINITY_INFO, platform().mpidrs[index], 0, 0)
}

/// What PSCI `AFFINITY_INFO` said of a vCPU.
pub struct AffinityInfo(i64);

impl fmt::Display for AffinityInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "AFFINITY_INFO {}", self.0)
    }
}

/// One 64-bit load from `address` into x0 (the exception handler zeroes x0
/// and skips the load if it faults).
fn probe_load(address: u64) -> u64 {
    let value: u64;
    // SAFETY: deliberately reads an address outside the guest's RAM; the
    // address is identity-mapped (Device or Normal), so any abort comes from
    // the hypervisor or the platform and is caught by `expect_fault`. The
    // value lands in x0, which the handler sets on a fault.
    unsafe {
        asm!("ldr x0, [{a}]", a = in(reg) address, out("x0") value, options(nostack, readonly));
    }
    value
}

impl Machine for Aarch64 {
    const TIMER_NAME: &'static str = "virtual timer";
    const IDLE_NAME: &'static str = "WFI";
    const IPI_NAME: &'static str = "an SGI";
    const POWER_OFF_NAME: &'static str = "CPU_OFF";
    const POWER_ON_NAME: &'static str = "CPU_ON";
    const RESTARTS_RUNNING: bool = false;
    const CONSOLE_INTERRUPT_NAME: &'static str = "the PL011 interrupt";
    const SIMD_LEAK_REGISTER: &'static str = "V31[127:64]";

    type Fault = exceptions::Fault;
    type OffState = AffinityInfo;

    fn vcpu_index() -> usize {
        vcpu_index()
    }

    fn is_online(index: usize) -> bool {
        is_online(index)
    }

    fn halt() -> ! {
        halt()
    }

    fn now() -> u64 {
        timer::now()
    }

    fn us_to_ticks(us: u64) -> u64 {
        timer::us_to_ticks(us)
    }

    fn ms_to_ticks(ms: u64) -> u64 {
        timer::ms_to_ticks(ms)
    }

    fn delay(ticks: u64) {
        timer::delay(ticks)
    }

    fn hypercall(call: &Call) -> Result<Regs, CallError> {
        hvc::hypercall(call)
    }

    fn raw_call(id: u64, args: Args) -> Regs {
        hvc::hvc(id, args)
    }

    fn interrupts_usable() -> bool {
        gic::present()
    }

    fn arm_timer(deadline: u64) {
        timer::arm(deadline)
    }

    fn disarm_timer() {
        timer::disarm()
    }

    fn idle() {
        wfi();
    }

    fn take_interrupt() -> Option<Taken> {
        let acked = gic::ack()?;
        let taken = match acked.intid {
            gic::VTIMER_PPI => {
                // Before the EOI: the level it holds up drops.
                timer::disarm();
                Taken::Known(Interrupt::Timer)
            }
            gic::SGI_PING => Taken::Known(Interrupt::Ping),
            gic::SGI_PONG => Taken::Known(Interrupt::Pong),
            console::PL011_INTID => Taken::Known(Interrupt::ConsoleRx),
            id if Some(id) == device_uart::intid() => Taken::Known(Interrupt::DeviceRx),
            _ => Taken::Unknown,
        };
        gic::eoi(acked);
        Some(taken)
    }

    fn send_ipi(target: usize, ipi: Ipi) {
        let intid = match ipi {
            Ipi::Ping => gic::SGI_PING,
            Ipi::Pong => gic::SGI_PONG,
        };
        gic::send_sgi(target, intid);
    }

    fn event_wait() {
        // The event stream (set up at each vCPU's entry) bounds each WFE.
        wfe();
    }

    fn event_signal() {
        sev();
    }

    fn ram_end() -> u64 {
        platform().ram_end
    }

    fn ram_end_note() -> &'static str {
        if platform().cpus_guessed {
            " (RAM size assumed: no device tree)"
        } else {
            ""
        }
    }

    fn trap_at_top(resume_at: usize) -> Option<core::convert::Infallible> {
        say!(
            "test-guest: top: jumping to an MRS at {:#x}, which the hypervisor traps",
            top::TOP_PC
        );
        top::jump(resume_at as u64)
    }

    fn single_steps(_steps: u32) -> Option<u64> {
        None
    }

    fn debug_registers_round_trip() -> Option<Result<(), (u8, u64, u64)>> {
        None
    }

    fn timer_eoi_before_mask() -> Option<TimerRound> {
        if !gic::present() {
            return None;
        }
        timer::arm(timer::now() + timer::us_to_ticks(TIMER_LEVEL_DELAY_US));
        let give_up = timer::now() + timer::ms_to_ticks(100);
        let acked = loop {
            // The clock before the acknowledge: a vCPU stalled between the
            // two (an overloaded host, the very exit that lists the
            // interrupt) would otherwise give up with the interrupt pending.
            let late = timer::now() > give_up;
            match gic::ack() {
                Some(acked) if acked.intid == gic::VTIMER_PPI => break acked,
                Some(other) => gic::eoi(other),
                None if late => {
                    timer::disarm();
                    return Some(TimerRound::Missed);
                }
                None => core::hint::spin_loop(),
            }
        };
        // Ended while the timer still asserts: on bare metal the PPI is
        // pending again now, and stays so only as long as the line is high.
        gic::eoi(acked);
        timer::delay(timer::us_to_ticks(TIMER_LEVEL_DELAY_US));
        timer::disarm();
        timer::delay(timer::us_to_ticks(TIMER_LEVEL_DELAY_US));
        let mut again = false;
        while let Some(acked) = gic::ack() {
            again |= acked.intid == gic::VTIMER_PPI;
            gic::eoi(acked);
        }
        Some(if again {
            TimerRound::Again
        } else {
            TimerRound::Once
        })
    }

    fn debug_register_write(value: u64) -> bool {
        // SAFETY: DBGBVR0_EL1 only holds an address; with DBGBCR0_EL1.E
        // clear (its reset value) no breakpoint is armed by it.
        unsafe { core::arch::asm!("msr dbgbvr0_el1, {}", "isb", in(reg) value) };
        true
    }

    fn debug_register_read() -> u64 {
        let value: u64;
        // SAFETY: reading a debug register has no side effects.
        unsafe { core::arch::asm!("mrs {}, dbgbvr0_el1", out(reg) value) };
        value
    }

    fn simd_register_write(value: u64) -> bool {
        // V31's upper half: the compiler allocates SIMD registers from V0
        // up, and in this guest only core's character counting (string
        // padding in `say!`, which the workload's loop reaches only after
        // a failure) uses V31.
        // SAFETY: writes one SIMD register no code of the loop relies on.
        unsafe { core::arch::asm!("mov v31.d[1], {}", in(reg) value, options(nomem, nostack)) };
        true
    }

    fn simd_register_read() -> u64 {
        let value: u64;
        // SAFETY: reading a SIMD register has no side effects.
        unsafe { core::arch::asm!("mov {}, v31.d[1]", out(reg) value, options(nomem, nostack)) };
        value
    }

    fn probe_load(address: u64) -> (u64, Option<exceptions::Fault>) {
        exceptions::expect_fault(|| probe_load(address))
    }

    fn end(end: End) {
        match end {
            End::Idle => {}
            // Its load outside RAM (`misbehave`) is already the fault the
            // hypervisor stops it for; an undeliverable exception has no
            // exit of its own on ARM (it loops at EL1).
            End::Crash => say!("test-guest: end=crash: x86-64 only; idling"),
            End::Off => {
                let ret = hvc::psci(hvc::PSCI_SYSTEM_OFF, 0, 0, 0);
                say!("test-guest: SYSTEM_OFF returned {ret}");
            }
            End::Reset => {
                say!("test-guest: resetting (PSCI SYSTEM_RESET)");
                let ret = hvc::psci(hvc::PSCI_SYSTEM_RESET, 0, 0, 0);
                say!("test-guest: SYSTEM_RESET returned {ret}");
            }
        }
    }

    fn power_off_self(_wakes: &AtomicU64) -> i64 {
        // PSCI CPU_OFF does not return when it works: nothing wakes it.
        hvc::psci(hvc::PSCI_CPU_OFF, 0, 0, 0)
    }

    fn take_off(_target: usize) {
        // The target powered itself off with CPU_OFF.
    }

    fn is_off(target: usize) -> bool {
        affinity_info(target) == AFFINITY_OFF
    }

    fn off_state(target: usize) -> AffinityInfo {
        AffinityInfo(affinity_info(target))
    }

    fn power_on(target: usize) -> i64 {
        let entry = secondary_entry as *const () as u64;
        hvc::psci(
            hvc::PSCI_CPU_ON,
            platform().mpidrs[target],
            entry,
            target as u64,
        )
    }

    fn device_uart() -> Option<(u64, u32)> {
        device_uart::found()
    }

    fn device_uart_start() -> bool {
        device_uart::start(vcpu_index())
    }

    fn device_uart_send(byte: u8) {
        device_uart::send(byte);
    }

    fn device_uart_read() -> Option<u8> {
        device_uart::read()
    }

    fn console_rx_enable() -> bool {
        console::enable_rx_interrupts();
        gic::enable_spi(console::PL011_INTID, vcpu_index())
    }

    fn console_read_byte() -> Option<u8> {
        console::read_byte()
    }

    fn console_rx_done() {
        // The GIC's EOI came with the acknowledge.
    }
}
