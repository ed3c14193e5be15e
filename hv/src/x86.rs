//! x86-64 boot flow: COM1 console, PVH start info, heap, descriptor tables,
//! TSC, local APIC, SVM, ACPI (MADT) and CPUID topology, all CPUs up with
//! INIT-SIPI-SIPI, an IPI round trip to every CPU, then a 10 ms APIC tick and
//! idle. Prints the same banner lines as the ARM64 flow.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write as _;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};

use apic::encode::TimerMode;
use apic::{ApicFeatures, LocalApic};
use log::{error, info, warn};
use platform::arch::x86_64::{boot, console, cpu, exceptions, svm, timer};
use sched::{CpuTopology, MAX_CPUS, Topology};
use spin::Once;

use crate::heap;

/// Vector of the local APIC timer tick.
const VECTOR_TICK: u8 = 0x40;
/// Vector the boot CPU pings a CPU with (and, later, the scheduler's kick).
const VECTOR_PING: u8 = 0x41;
/// Vector a CPU answers a ping with.
const VECTOR_PONG: u8 = 0x42;
/// Spurious-interrupt vector (low nibble all ones, as older APICs require).
const VECTOR_SPURIOUS: u8 = 0xff;
/// Tick period.
const TICK_NS: u64 = 10_000_000;
/// How long a starting CPU may take to report in.
const CPU_START_TIMEOUT_NS: u64 = 5_000_000_000;
/// How long an IPI round trip may take.
const IPI_TIMEOUT_NS: u64 = 1_000_000_000;
/// How long to wait for every CPU's first ticks.
const TICK_TIMEOUT_NS: u64 = 5_000_000_000;
/// Heap to take from RAM after the bootstrap region.
const HEAP_BYTES: u64 = 64 << 20;
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
    /// Periodic mode with this initial count (divide by 16).
    Periodic(u32),
}

static APIC: Once<LocalApic> = Once::new();
static TICK: Once<Tick> = Once::new();
static ONLINE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static PINGS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
static TICKS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
static PONGS: AtomicU32 = AtomicU32::new(0);
/// APIC id each logical CPU read from its own APIC at bring-up.
static APIC_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; MAX_CPUS];
/// What each CPU's CPUID said its APIC id is (for the MADT cross-check).
static CPUID_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(u32::MAX) }; MAX_CPUS];
/// Logical index of the boot CPU.
static BOOT_CPU: AtomicUsize = AtomicUsize::new(0);

/// Waits until `done()` or `timeout_ns` passes; true if it became done.
fn wait_until(timeout_ns: u64, mut done: impl FnMut() -> bool) -> bool {
    let deadline = timer::now_ns().saturating_add(timeout_ns);
    while timer::now_ns() < deadline {
        if done() {
            return true;
        }
        core::hint::spin_loop();
    }
    done()
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
    let apic = init_apic();
    report_virtualization();
    let (mut topology, madt_ids) = read_topology(start.rsdp);
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
    info!("topology: {}", topology.counts());
    for line in topology_report(&topology).lines() {
        info!("{line}");
    }
    bring_up_this_cpu(boot_cpu);
    start_secondaries(&mut topology);
    cross_check(&topology, &madt_ids);
    ipi_round_trips(&topology);
    wait_for_ticks(&topology);
    idle()
}

#[unsafe(no_mangle)]
fn hv_x86_secondary_main(cpu_index: usize) -> ! {
    bring_up_this_cpu(cpu_index);
    info!(
        "cpu {cpu_index} online (apic id {:#x})",
        APIC_IDS[cpu_index].load(Ordering::Relaxed)
    );
    ONLINE[cpu_index].store(true, Ordering::Release);
    idle()
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
            Ok(count) => Tick::Periodic(count),
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
        Tick::Periodic(count) => alloc::format!(
            "periodic tick, {count} counts (/{}) per {} ms",
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

/// Logs what hardware virtualization the boot CPU offers.
fn report_virtualization() {
    match svm::detect() {
        svm::Virtualization::Svm(info) => info!(
            "svm: available (npt {}, asids {}, revision {})",
            if info.npt { "yes" } else { "no" },
            info.asids,
            info.revision
        ),
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
    CPUID_IDS[cpu_index].store(cpu::cpuid_apic_id(), Ordering::Relaxed);
    if matches!(svm::detect(), svm::Virtualization::Svm(_))
        && let Err(e) = svm::enable_on_this_cpu()
    {
        warn!("svm: cpu {cpu_index}: {e}");
    }
    exceptions::set_irq_handler(handle_irq);
    match TICK.get() {
        Some(Tick::Deadline) => {
            apic.start_tsc_deadline_timer(VECTOR_TICK);
            apic.set_tsc_deadline(timer::tsc_after_ns(TICK_NS));
        }
        Some(&Tick::Periodic(count)) => {
            apic.start_timer(VECTOR_TICK, TimerMode::Periodic, count, false)
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
            TICKS[me].fetch_add(1, Ordering::Relaxed);
            if let Some(Tick::Deadline) = TICK.get() {
                apic.set_tsc_deadline(timer::tsc_after_ns(TICK_NS));
            }
        }
        VECTOR_PING => {
            PINGS[me].fetch_add(1, Ordering::AcqRel);
            let boot = BOOT_CPU.load(Ordering::Relaxed);
            let _ = apic.send_fixed(VECTOR_PONG, APIC_IDS[boot].load(Ordering::Relaxed));
        }
        VECTOR_PONG => {
            PONGS.fetch_add(1, Ordering::AcqRel);
        }
        // Spurious interrupts take no EOI.
        VECTOR_SPURIOUS => return,
        other => warn!("irq: unexpected vector {other:#x}"),
    }
    apic.eoi();
}

fn idle() -> ! {
    loop {
        cpu::wait_for_interrupt();
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

/// Compares what each CPU's own APIC and CPUID say with the MADT, and logs
/// every disagreement (the MADT wins: it is what the CPUs were started by).
fn cross_check(topology: &Topology, madt_ids: &[u32]) {
    let mut disagreements = 0;
    for cpu in topology.cpus().iter().filter(|c| c.enabled) {
        let madt = cpu.hw_id as u32;
        let apic_id = APIC_IDS[cpu.index].load(Ordering::Relaxed);
        let cpuid_id = CPUID_IDS[cpu.index].load(Ordering::Relaxed);
        if apic_id != madt || cpuid_id != madt {
            disagreements += 1;
            warn!(
                "acpi: cpu {} started as MADT apic id {madt:#x} but its APIC says {apic_id:#x} and CPUID {cpuid_id:#x}",
                cpu.index
            );
        }
        if !madt_ids.contains(&apic_id) {
            disagreements += 1;
            warn!(
                "acpi: apic id {apic_id:#x} (cpu {}) is not in the MADT",
                cpu.index
            );
        }
    }
    if disagreements == 0 {
        info!("acpi: MADT and CPUID agree on every online CPU's APIC id");
    }
}

/// The boot CPU pings every other online CPU and waits for the answer.
fn ipi_round_trips(topology: &Topology) {
    let apic = apic();
    let others: Vec<usize> = topology
        .enabled()
        .iter()
        .filter(|&c| c != cpu::index())
        .collect();
    let mut ok = 0;
    for &target in &others {
        let pongs_before = PONGS.load(Ordering::Acquire);
        let pings_before = PINGS[target].load(Ordering::Acquire);
        let start = timer::now_ns();
        let apic_id = APIC_IDS[target].load(Ordering::Relaxed);
        if let Err(e) = apic.send_fixed(VECTOR_PING, apic_id) {
            error!("ipi: cannot send to cpu {target} (apic id {apic_id:#x}): {e}");
            continue;
        }
        let answered = wait_until(IPI_TIMEOUT_NS, || {
            PONGS.load(Ordering::Acquire) > pongs_before
                && PINGS[target].load(Ordering::Acquire) > pings_before
        });
        if answered {
            ok += 1;
            info!(
                "ipi: cpu {target} round trip ok ({} us)",
                (timer::now_ns() - start) / 1000
            );
        } else {
            error!(
                "ipi: cpu {target} did not answer within 1 s (pings seen {})",
                PINGS[target].load(Ordering::Acquire)
            );
        }
    }
    info!("ipi: {ok} of {} round trips ok", others.len());
}

/// Waits until every online CPU has taken a few ticks.
fn wait_for_ticks(topology: &Topology) {
    let online = topology.enabled();
    let all_ticking = wait_until(TICK_TIMEOUT_NS, || {
        online.iter().all(|c| TICKS[c].load(Ordering::Relaxed) >= 3)
    });
    if all_ticking {
        info!(
            "tick: all {} CPUs ticking every {} ms",
            online.len(),
            TICK_NS / 1_000_000
        );
    } else {
        let silent: Vec<usize> = online
            .iter()
            .filter(|&c| TICKS[c].load(Ordering::Relaxed) < 3)
            .collect();
        error!("tick: CPUs {silent:?} took no tick within 5 s");
    }
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

/// The topology tree with APIC ids, one line per core.
fn topology_report(topology: &Topology) -> String {
    let mut out = String::new();
    let mut last: Option<(u32, u32)> = None;
    let cpus = topology.cpus();
    let mut i = 0;
    while i < cpus.len() {
        let c = cpus[i];
        if last != Some((c.socket, c.cluster)) {
            let _ = writeln!(out, "socket {} cluster {}", c.socket, c.cluster);
            last = Some((c.socket, c.cluster));
        }
        let _ = write!(out, "  core {}:", c.core);
        let mut j = i;
        while j < cpus.len()
            && (cpus[j].socket, cpus[j].cluster, cpus[j].core) == (c.socket, c.cluster, c.core)
        {
            let _ = write!(out, " cpu {} (apic id {:#x})", cpus[j].index, cpus[j].hw_id);
            j += 1;
        }
        out.push('\n');
        i = j;
    }
    out
}

/// Reads the MADT and builds the topology from the APIC ids and this CPU's
/// CPUID APIC-id layout. Returns it with the MADT's enabled APIC ids.
fn read_topology(rsdp: Option<u64>) -> (Topology, Vec<u32>) {
    let madt_ids = match acpi_walk::enabled_apic_ids(rsdp) {
        Ok(ids) if !ids.is_empty() => ids,
        Ok(_) => stop(format_args!("acpi: the MADT names no enabled CPU")),
        Err(e) => stop(format_args!("acpi: {e}")),
    };
    let (smt_shift, core_shift) = acpi_walk::apic_id_layout();
    let cpus: Vec<CpuTopology> = madt_ids
        .iter()
        .enumerate()
        .map(|(index, &id)| CpuTopology {
            index,
            hw_id: u64::from(id),
            socket: id >> core_shift,
            cluster: 0,
            core: (id >> smt_shift) & ((1 << (core_shift - smt_shift)) - 1),
            thread: id & ((1 << smt_shift) - 1),
            capacity: None,
            enabled: true,
        })
        .collect();
    match Topology::new(cpus) {
        Ok(topology) => (topology, madt_ids),
        Err(e) => stop(format_args!("acpi: {e}")),
    }
}

/// A minimal RSDP/XSDT/MADT walk, until the shared ACPI parser lands.
mod acpi_walk {
    use alloc::string::String;
    use alloc::vec::Vec;

    fn read(address: u64, len: usize) -> Vec<u8> {
        (0..len as u64)
            // SAFETY: ACPI tables sit in low RAM or reserved ranges below
            // 4 GiB, all identity-mapped by boot.S.
            .map(|i| unsafe { core::ptr::read_volatile((address + i) as *const u8) })
            .collect()
    }

    fn u32_at(b: &[u8], o: usize) -> u32 {
        u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]])
    }

    fn find_rsdp() -> Option<u64> {
        (0xe0000u64..0x100000)
            .step_by(16)
            .find(|&a| read(a, 8) == b"RSD PTR ")
    }

    /// The enabled local APIC / x2APIC ids, in MADT order.
    pub fn enabled_apic_ids(rsdp: Option<u64>) -> Result<Vec<u32>, String> {
        let rsdp = rsdp.or_else(find_rsdp).ok_or("no RSDP")?;
        let r = read(rsdp, 36);
        let (root, entry_size) = if r[15] >= 2 {
            (
                u64::from_le_bytes(r[24..32].try_into().unwrap_or_default()),
                8,
            )
        } else {
            (u64::from(u32_at(&r, 16)), 4)
        };
        let header = read(root, 36);
        let len = u32_at(&header, 4) as usize;
        let root = read(root, len);
        for e in (36..len).step_by(entry_size) {
            let addr = if entry_size == 8 {
                u64::from_le_bytes(root[e..e + 8].try_into().unwrap_or_default())
            } else {
                u64::from(u32_at(&root, e))
            };
            if read(addr, 4) != b"APIC" {
                continue;
            }
            let madt_len = u32_at(&read(addr, 8), 4) as usize;
            let madt = read(addr, madt_len);
            let mut ids = Vec::new();
            let mut o = 44;
            while o + 2 <= madt_len {
                let (kind, elen) = (madt[o], madt[o + 1] as usize);
                if elen < 2 || o + elen > madt_len {
                    break;
                }
                match kind {
                    0 if madt[o + 4] & 1 != 0 => ids.push(u32::from(madt[o + 3])),
                    9 if madt[o + 8] & 1 != 0 => ids.push(u32_at(&madt, o + 4)),
                    _ => {}
                }
                o += elen;
            }
            return Ok(ids);
        }
        Err(String::from("no MADT"))
    }

    /// (SMT shift, core shift) from CPUID leaf 0xB on this CPU.
    pub fn apic_id_layout() -> (u32, u32) {
        let smt = platform::arch::x86_64::cpu::cpuid(0xb, 0);
        let core = platform::arch::x86_64::cpu::cpuid(0xb, 1);
        (smt.eax & 0x1f, (core.eax & 0x1f).max(smt.eax & 0x1f))
    }
}
