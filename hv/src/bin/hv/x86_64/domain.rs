//! Domains on x86-64: guest RAM from the heap at guest-physical 0, nested
//! page tables and an ASID, the boot structures (`hv::x86::boot` for the
//! test guest, the Linux x86 boot protocol with per-domain ACPI tables for a
//! bzImage, `hv::x86::linux_boot`), a VMCB and
//! virtual APIC per vCPU, and the emulated 16550 (COM1) with the 8259A PIC
//! pair its IRQ 4 goes through. A stopped domain gives
//! all of it back once its vCPUs have left every CPU.

use alloc::alloc::{Layout, alloc_zeroed};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use guest_abi::x86::{BOOT_INFO, BootInfo};
use hv::config::DomainConfig;
use hv::domain_table::DomainTable;
use hv::page_table::{Table, TableAllocator};
use hv::x86::acpi_pm::AcpiPm;
use hv::x86::acpi_tables::{self, AcpiBuildError, GuestAcpiSpec};
use hv::x86::boot::{self, VmcbSetup};
use hv::x86::cmos_rtc::CmosRtc;
use hv::x86::debugregs::DebugRegisters;
use hv::x86::guest_paging::GuestPhysRead;
use hv::x86::ioapic::{self, IoApic};
use hv::x86::linux_boot::{self, BzImage, LinuxImageError};
use hv::x86::memory::{AsidAllocator, DomainMemory, MemoryError};
use hv::x86::multiboot::{self, MultibootError, MultibootImage};
use hv::x86::pic8259::Pic8259;
use hv::x86::pit8254::Pit8254;
use hv::x86::power::Power;
use hv::x86::uart16550::Uart16550;
use hv::x86::vlapic::{ApicMode, VLapic};
use hv::x86::vmcb::{IOPM_BYTES, MSRPM_BYTES};
use log::{error, info, warn};
use platform::arch::x86_64::{cpu, timer};
use platform::sync::{Mutex, Once};
use sched::{DomainId, VcpuId};

use super::runtime::RUNTIME;
use super::vcpu::{self, Gprs, VcpuState};

/// One running domain's hypervisor-side state.
pub struct Domain {
    /// The scheduler's id, also the domain number in logs (`[domN]`).
    pub id: DomainId,
    /// Name from the config.
    pub name: String,
    /// Its RAM, nested page tables and ASID, given back by the teardown.
    pub memory: DomainMemory,
    /// The vCPUs, by index in the domain (= x2APIC id).
    pub vcpus: Vec<VcpuId>,
    /// Its console's line buffer, and its emulated COM1 when it has one.
    pub uart: Uart16550,
    /// Whether COM1's ports reach [`Domain::uart`] (config `console`
    /// other than `"none"`); without it they float high like an empty ISA
    /// bus, and the guest's console is the `CONSOLE_WRITE` hypercall.
    pub emulated_uart: bool,
    /// Its emulated 8259A pair (COM1's IRQ 4; INTR to vCPU 0).
    pub pic: Pic8259,
    /// Its emulated I/O APIC at `hv::x86::ioapic::BASE`, when its ACPI
    /// tables describe one (Linux domains); COM1 drives pin 4.
    pub ioapic: Option<IoApic>,
    /// Its emulated 8254 PIT and port 0x61 (Linux domains: what the kernel
    /// calibrates its TSC against).
    pub pit: Option<Pit8254>,
    /// How many vCPUs its guest sees as one core's threads (its sched
    /// units at core granularity; CPUID leaf 0xB).
    pub threads_per_core: u32,
    /// Its CMOS clock (Linux domains).
    pub rtc: Option<CmosRtc>,
    /// Its PM1a registers, PM timer and reset ports (Linux domains).
    pub acpi_pm: Option<AcpiPm>,
    /// The domain clock (ns) up to which the PIT's IRQ 0 edges were raised.
    pub pit_polled_ns: u64,
    /// A PIC warning was logged already (one per domain).
    pub pic_warned: bool,
    /// May use privileged hypercalls.
    pub privileged: bool,
    /// May use the test hooks (config `test_hooks`).
    pub test_hooks: bool,
    /// Thins out the log lines this domain's guest can provoke at will.
    pub log_budget: hv::ratelimit::LogBudget,
    /// Intercepted exceptions handed back (#DB, #AC) and emulated debug
    /// register accesses, for the log.
    pub traps: TrapCounts,
    /// Set once the domain is stopped; its vCPUs are not entered again.
    pub stopped: bool,
    /// The image it boots (kept for a restart).
    pub image: &'static [u8],
    /// The initramfs given to a Linux image (kept for a restart).
    pub initramfs: Option<&'static [u8]>,
    /// How its vCPUs start (from what the image is).
    pub entry: Entry,
    /// Its command line (kept for a restart).
    pub bootargs: String,
    /// Set while a restart waits for its vCPUs to leave their CPUs.
    pub restart_pending: bool,
    /// Set when it is stopped and waits for its vCPUs to leave their CPUs
    /// before its memory is freed.
    pub teardown: bool,
}

/// The most domains built at once.
const MAX_DOMAINS: usize = 256;

/// Every built domain, each behind its own lock (`hv::domain_table`).
static DOMAINS: DomainTable<Domain, MAX_DOMAINS> = DomainTable::new();
/// The ASIDs in use (0 is the host's); created with the CPU's ASID count.
static ASIDS: Mutex<Option<AsidAllocator>> = Mutex::new(None);
/// Set when some domain waits for its teardown or restart, so the tick
/// skips the lock otherwise.
static WORK_DUE: AtomicBool = AtomicBool::new(false);
/// Ticks the oldest waiting teardown or restart has waited.
static WAITED_TICKS: AtomicU32 = AtomicU32::new(0);
/// How many ticks a teardown or restart may wait for the vCPUs before it
/// says so.
const WORK_WARN_TICKS: u32 = 500;
/// The I/O and MSR permission maps every guest shares: all ones, so every
/// port and MSR access exits (host-physical addresses).
static PERMISSION_MAPS: Once<(u64, u64)> = Once::new();

/// Why a domain could not be created.
#[derive(Debug)]
pub enum DomainError {
    /// Not enough heap for its RAM or tables.
    OutOfMemory,
    /// The config names an image this build does not carry.
    NoImage,
    /// The boot structures or the image do not fit.
    Boot(boot::BootError),
    /// Its RAM, nested page tables or ASID could not be had.
    Memory(MemoryError),
    /// This CPU cannot run guests (no SVM).
    NoSvm,
    /// The image is a Linux bzImage that cannot boot in this domain.
    Linux(LinuxImageError),
    /// The domain's ACPI tables could not be built.
    Acpi(AcpiBuildError),
    /// The image is a multiboot ELF kernel that cannot boot in this domain.
    Multiboot(MultibootError),
    /// The domain table refused it (full).
    Table(hv::domain_table::InsertError),
}

impl core::fmt::Display for DomainError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfMemory => write!(f, "not enough memory for its RAM"),
            Self::NoImage => write!(
                f,
                "its image is not in this build (build with cargo xtask build)"
            ),
            Self::Boot(e) => write!(f, "boot memory: {e}"),
            Self::Memory(e) => write!(f, "{e}"),
            Self::NoSvm => write!(f, "this machine cannot run SVM guests"),
            Self::Linux(e) => write!(f, "Linux image: {e}"),
            Self::Table(e) => write!(f, "{e}"),
            Self::Acpi(e) => write!(f, "ACPI tables: {e}"),
            Self::Multiboot(e) => write!(f, "multiboot image: {e}"),
        }
    }
}

/// Nested page tables from the heap (identity-mapped: a heap address is the
/// physical address).
struct HeapTables;

impl TableAllocator for HeapTables {
    fn allocate(&mut self, pages: usize) -> Option<u64> {
        zeroed_pages(pages)
    }

    fn free(&mut self, address: u64, pages: usize) {
        if let Ok(layout) = Layout::from_size_align(pages * 4096, 4096) {
            // SAFETY: `address` came from `allocate` with this page count.
            unsafe { alloc::alloc::dealloc(address as *mut u8, layout) };
        }
    }

    fn table(&self, address: u64) -> Option<&Table> {
        if address == 0 || !address.is_multiple_of(4096) {
            return None;
        }
        // SAFETY: tables are only addresses from `allocate` (the NPT code
        // walks entries it wrote itself), identity-mapped heap memory.
        Some(unsafe { &*(address as *const Table) })
    }

    fn table_mut(&mut self, address: u64) -> Option<&mut Table> {
        if address == 0 || !address.is_multiple_of(4096) {
            return None;
        }
        // SAFETY: as in `table`; `&mut self` makes this the only reference.
        Some(unsafe { &mut *(address as *mut Table) })
    }
}

/// The ASID count this CPU reports (CPUID 0x8000000A EBX), ASID 0 included.
fn asid_limit() -> u32 {
    match platform::arch::x86_64::svm::detect() {
        platform::arch::x86_64::svm::Virtualization::Svm(svm) => svm.asids,
        _ => 0,
    }
}

/// Takes a domain's RAM, nested tables and ASID.
fn build_memory(ram_bytes: u64) -> Result<DomainMemory, MemoryError> {
    cpu::without_irqs(|| {
        let mut asids = ASIDS.lock();
        DomainMemory::build(
            ram_bytes,
            &mut crate::heap::HeapRam,
            &mut HeapTables,
            asids.get_or_insert_with(|| AsidAllocator::new(asid_limit())),
        )
    })
}

/// Gives a domain's RAM, nested tables and ASID back.
fn release_memory(memory: DomainMemory) -> hv::x86::memory::Released {
    RUNTIME.tag_returned(memory.asid);
    cpu::without_irqs(|| {
        let mut asids = ASIDS.lock();
        memory.release(
            &mut crate::heap::HeapRam,
            &mut HeapTables,
            asids.get_or_insert_with(|| AsidAllocator::new(asid_limit())),
        )
    })
}

/// `pages` zeroed, page-aligned heap pages (their address is physical).
fn zeroed_pages(pages: usize) -> Option<u64> {
    let layout = Layout::from_size_align(pages.checked_mul(4096)?, 4096).ok()?;
    // SAFETY: the layout has a non-zero size (`pages` is at least 1 here).
    let ptr = unsafe { alloc_zeroed(layout) };
    (!ptr.is_null()).then_some(ptr as u64)
}

/// The shared permission maps, allocated on first use.
fn permission_maps() -> Option<(u64, u64)> {
    if let Some(&maps) = PERMISSION_MAPS.get() {
        return Some(maps);
    }
    let iopm = zeroed_pages(IOPM_BYTES / 4096)?;
    let msrpm = zeroed_pages(MSRPM_BYTES / 4096)?;
    // SAFETY: both were just allocated with these sizes and are leaked (the
    // processor reads them for as long as guests run).
    unsafe {
        core::ptr::write_bytes(iopm as *mut u8, 0xff, IOPM_BYTES);
        core::ptr::write_bytes(msrpm as *mut u8, 0xff, MSRPM_BYTES);
    }
    Some(*PERMISSION_MAPS.call_once(|| (iopm, msrpm)))
}

/// The wall-clock time at the hypervisor's time 0, in seconds since
/// 1970-01-01 UTC: the start of every domain's CMOS clock.
static WALL_CLOCK_START: AtomicU64 = AtomicU64::new(hv::x86::cmos_rtc::EPOCH_SECONDS);

/// Reads the machine's own CMOS clock once (the boot CPU, after the TSC is
/// calibrated), so that the domains' clocks show the date and time, not
/// 2000-01-01 plus the uptime; without a readable clock they keep that.
pub fn read_wall_clock() {
    match hv::x86::cmos_rtc::read_host_clock(platform::arch::x86_64::cmos::read_register) {
        Ok(seconds) => {
            let start = seconds.saturating_sub(timer::now_ns() / 1_000_000_000);
            WALL_CLOCK_START.store(start, Ordering::Relaxed);
            info!(
                "rtc: the host's CMOS clock reads {seconds} s since 1970 (UTC); the domains' clocks follow it"
            );
        }
        Err(e) => warn!(
            "rtc: the host's CMOS clock gave no time ({e}); the domains' clocks start at 2000-01-01"
        ),
    }
}

/// A PC domain's CMOS clock at power-on, showing the wall-clock time
/// ([`read_wall_clock`]); other domains have none.
fn fresh_rtc(entry: Entry) -> Option<CmosRtc> {
    entry
        .is_pc()
        .then(|| CmosRtc::new(WALL_CLOCK_START.load(Ordering::Relaxed)))
}

/// TSC frequency in kHz, as the guests are told.
pub fn tsc_khz() -> u64 {
    timer::tsc_hz() / 1000
}

/// Builds the hypervisor side of domain `id` (already created in the
/// scheduler from `config`) and starts its vCPU 0.
pub fn create(
    id: DomainId,
    config: &DomainConfig,
    image: &'static [u8],
    initramfs: Option<&'static [u8]>,
) -> Result<(), DomainError> {
    if image.is_empty() {
        return Err(DomainError::NoImage);
    }
    if !vcpu::svm_ready(cpu::index()) {
        return Err(DomainError::NoSvm);
    }
    let Some((iopm_pa, msrpm_pa)) = permission_maps() else {
        return Err(DomainError::OutOfMemory);
    };
    let memory = build_memory(config.memory_mib << 20).map_err(DomainError::Memory)?;
    let (ram_pa, ram_bytes, asid) = (memory.ram_pa, memory.ram_bytes, memory.asid);
    RUNTIME.tag_given(asid, id.0);
    // SAFETY: the range was just allocated for this domain and nothing else
    // refers to it; the heap is identity-mapped.
    let ram = unsafe { core::slice::from_raw_parts_mut(ram_pa as *mut u8, ram_bytes as usize) };
    let boot = BootCommand {
        name: &config.name,
        bootargs: &config.bootargs,
    };
    let entry = match write_memory(ram, image, initramfs, boot, config.vcpus) {
        Ok(entry) => entry,
        Err(e) => {
            release_memory(memory);
            return Err(e);
        }
    };
    let setup = vmcb_setup((iopm_pa, msrpm_pa), &memory);
    let vcpus = RUNTIME
        .with_domain(id, |system, _| {
            system.domain_vcpus(id).map(<[VcpuId]>::to_vec)
        })
        .flatten()
        .unwrap_or_default();
    for (index, &v) in vcpus.iter().enumerate() {
        let index = index as u32;
        vcpu::with_power(v, |p| *p = Power::at_creation(index));
        vcpu::reset_runtime(v);
        vcpu::install(
            v,
            boot_state(&setup, id, index, entry),
            fresh_apic(entry, index),
        );
    }
    let domain = Domain {
        id,
        name: config.name.clone(),
        memory,
        vcpus: vcpus.clone(),
        image,
        initramfs,
        entry,
        bootargs: config.bootargs.clone(),
        restart_pending: false,
        uart: Uart16550::new(id.0),
        emulated_uart: config.console != hv::config::Console::None,
        pic: Pic8259::new(),
        ioapic: io_apic(entry, config.vcpus),
        pit: entry.is_pc().then(Pit8254::new),
        pit_polled_ns: 0,
        threads_per_core: threads_per_core(id),
        rtc: fresh_rtc(entry),
        acpi_pm: entry.is_pc().then(AcpiPm::new),
        pic_warned: false,
        privileged: config.privileged,
        test_hooks: config.test_hooks,
        log_budget: hv::ratelimit::LogBudget::default(),
        traps: TrapCounts::default(),
        stopped: false,
        teardown: false,
    };
    // IRQs masked: exit handlers take these locks too.
    if let Err((e, domain)) = cpu::without_irqs(|| DOMAINS.insert(id, Box::new(domain))) {
        for &v in &vcpus {
            vcpu::uninstall(v);
        }
        release_memory(domain.memory);
        return Err(DomainError::Table(e));
    }
    info!(
        "domain {} ({}): {} vCPUs, {} MiB at {:#x}, asid {asid}, pool {}{}",
        id.0,
        config.name,
        config.vcpus,
        config.memory_mib,
        ram_pa,
        config.pool,
        match entry {
            Entry::TestGuest => "",
            Entry::Linux { .. } => ", Linux boot protocol",
            Entry::Multiboot { .. } => ", multiboot",
        }
    );
    Ok(())
}

/// Where a domain's vCPUs start, from what its image is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The test guest (`guest_abi::x86`): every vCPU in 64-bit mode at the
    /// image base, the others started by the paravirtual STARTUP.
    TestGuest,
    /// A Linux bzImage: vCPU 0 at the boot protocol's 64-bit `entry` with
    /// `rsi` = the zero page; the others as a PC starts them, INIT then
    /// STARTUP into real mode at the vector's page.
    Linux {
        /// The 64-bit entry point.
        entry: u64,
        /// The zero page.
        boot_params: u64,
    },
    /// A multiboot ELF kernel (`hv::x86::multiboot`; kvm-unit-tests' x86
    /// images): vCPU 0 at the 32-bit `entry` in protected mode with `EAX` =
    /// the boot loader magic and `EBX` = `info`; the others as on a PC.
    Multiboot {
        /// The 32-bit entry point.
        entry: u32,
        /// The multiboot information structure.
        info: u32,
    },
}

impl Entry {
    /// Whether the domain is a PC as its kernel expects one: ACPI tables,
    /// an I/O APIC, the PIT, the CMOS clock, the ACPI PM registers, xAPIC
    /// mode at boot and the other vCPUs started by INIT and STARTUP (the
    /// test guest has its own paravirtual platform instead).
    pub fn is_pc(self) -> bool {
        !matches!(self, Self::TestGuest)
    }
}

impl Domain {
    /// Raises the PIT's IRQ 0 (PIC IRQ 0 and I/O APIC pin 2, as the MADT's
    /// override says) if channel 0's output rose since the last poll, once
    /// however many edges passed (ticks a PC loses, the guest's clock
    /// catches up from its TSC); `now` is the domain clock (ns). Returns
    /// the I/O APIC's message, whether the PIC now requests an interrupt,
    /// and when the next edge comes.
    pub fn poll_pit(&mut self, now: u64) -> (Option<ioapic::Delivery>, bool, Option<u64>) {
        let Some(pit) = self.pit.as_ref() else {
            return (None, false, None);
        };
        let due = pit
            .next_irq0(self.pit_polled_ns)
            .is_some_and(|edge| edge <= now);
        let next = pit.next_irq0(now);
        self.pit_polled_ns = now;
        if !due {
            return (None, false, next);
        }
        self.pic.set_irq(PIT_IRQ, true);
        self.pic.set_irq(PIT_IRQ, false);
        let delivery = self.ioapic.as_mut().and_then(|io| {
            let delivery = io.set_pin(PIT_GSI, true);
            io.set_pin(PIT_GSI, false);
            delivery
        });
        (delivery, self.pic.intr(), next)
    }

    /// Drives COM1's interrupt output into IRQ 4 of the domain's PIC and pin
    /// 4 of its I/O APIC (an ISA line reaches both; the guest masks the
    /// one it does not use): vCPU 0 if the PIC now requests an interrupt,
    /// and the I/O APIC's message if the pin's edge sends one.
    pub fn drive_com1_irq(&mut self) -> (Option<VcpuId>, Option<ioapic::Delivery>) {
        let level = self.uart.irq_level();
        self.pic.set_irq(hv::x86::pic8259::COM1_IRQ, level);
        let delivery = self
            .ioapic
            .as_mut()
            .and_then(|io| io.set_pin(usize::from(hv::x86::pic8259::COM1_IRQ), level));
        let wake = self
            .pic
            .intr()
            .then(|| self.vcpus.first().copied())
            .flatten();
        (wake, delivery)
    }
}

/// How many vCPUs of domain `id` its guest sees as one core's threads: the
/// size of its sched units when its pool schedules whole cores (they always
/// run together on one core's threads, as the ARM guests' `cpu-map` says),
/// else 1. A unit size that is no power of two cannot be an APIC id field:
/// then 1 as well.
fn threads_per_core(id: DomainId) -> u32 {
    let size = RUNTIME
        .with_system(|s, _| {
            let pool = s.domain_pool(id)?;
            if s.pool_info(pool)?.granularity != sched::Granularity::Core {
                return None;
            }
            let unit = *s.domain_units(id)?.first()?;
            Some(s.unit_vcpus(unit)?.len() as u32)
        })
        .flatten()
        .unwrap_or(1);
    if size.is_power_of_two() { size } else { 1 }
}

/// The PIT's ISA IRQ, and the I/O APIC pin it reaches (the MADT's
/// interrupt source override, as on a PC).
const PIT_IRQ: u8 = 0;
const PIT_GSI: usize = 2;

/// A fresh I/O APIC for a domain that boots as `entry` with `vcpus` vCPUs:
/// Linux domains have one (their MADT says so), the test guest does not.
fn io_apic(entry: Entry, vcpus: u32) -> Option<IoApic> {
    entry.is_pc().then(|| IoApic::new(io_apic_id(vcpus)))
}

/// The I/O APIC's id: after the vCPUs' (APIC ids are one space).
fn io_apic_id(vcpus: u32) -> u8 {
    vcpus as u8
}

/// A vCPU's APIC as its domain's boot hands it over: a PC's firmware leaves
/// xAPIC mode, the test guest's ABI x2APIC.
fn fresh_apic(entry: Entry, index: u32) -> VLapic {
    match entry {
        Entry::TestGuest => VLapic::new(index),
        Entry::Linux { .. } | Entry::Multiboot { .. } => VLapic::with_mode(index, ApicMode::XApic),
    }
    .with_tsc_khz(tsc_khz())
}

/// Where a Linux domain's ACPI tables go: the BIOS area, which its e820 map
/// reserves (where a PC's firmware keeps its RSDP).
const LINUX_ACPI_BASE: u64 = 0xE_0000;

/// Writes a domain's boot memory into its zeroed `ram`: a bzImage boots by
/// the Linux boot protocol (zero page, command line, `initramfs`, ACPI
/// tables describing `vcpus` vCPUs and an I/O APIC), a multiboot ELF
/// kernel by multiboot (its segments, the information with its command
/// line and `initramfs` as its module, the same ACPI tables in the BIOS
/// area), anything else as the test guest. Returns where its vCPUs start.
fn write_memory(
    ram: &mut [u8],
    image: &[u8],
    initramfs: Option<&[u8]>,
    boot: BootCommand<'_>,
    vcpus: u32,
) -> Result<Entry, DomainError> {
    let bz_image = match BzImage::parse(image) {
        Ok(bz_image) => bz_image,
        Err(LinuxImageError::NotBzImage) if MultibootImage::looks_like_elf(image) => {
            let kernel = MultibootImage::parse(image).map_err(DomainError::Multiboot)?;
            write_pc_acpi_tables(ram, vcpus)?;
            // A boot loader puts the kernel's name first (kvm-unit-tests
            // takes argv[0] for the program's name).
            let cmdline = alloc::format!("{} {}", boot.name, boot.bootargs);
            let layout = multiboot::write_memory(ram, &kernel, cmdline.trim_end(), initramfs)
                .map_err(DomainError::Multiboot)?;
            return Ok(Entry::Multiboot {
                entry: layout.entry,
                info: layout.info,
            });
        }
        Err(LinuxImageError::NotBzImage) => {
            let info = BootInfo {
                vcpus,
                ram_bytes: ram.len() as u64,
                tsc_khz: tsc_khz(),
                cmdline: boot.bootargs,
            };
            boot::write_boot_memory(ram, image, &info).map_err(DomainError::Boot)?;
            return Ok(Entry::TestGuest);
        }
        Err(e) => return Err(DomainError::Linux(e)),
    };
    let acpi = pc_acpi_tables(vcpus)?;
    let cmdline = linux_boot::command_line(boot.bootargs, tsc_khz());
    let layout = linux_boot::write_linux_memory(ram, &bz_image, initramfs, &cmdline, Some(&acpi))
        .map_err(DomainError::Linux)?;
    Ok(Entry::Linux {
        entry: layout.entry,
        boot_params: layout.boot_params,
    })
}

/// What a domain's kernel is told on its command line: its bootargs, and
/// for a multiboot kernel its name first.
#[derive(Clone, Copy)]
struct BootCommand<'a> {
    /// The domain's name (a multiboot kernel's argv[0]).
    name: &'a str,
    /// The config's bootargs.
    bootargs: &'a str,
}

/// The ACPI tables of a PC domain of `vcpus` vCPUs, for [`LINUX_ACPI_BASE`]:
/// each vCPU's local APIC and the I/O APIC in the MADT, the PM registers
/// in the FADT.
fn pc_acpi_tables(vcpus: u32) -> Result<acpi_tables::GuestAcpi, DomainError> {
    let spec = GuestAcpiSpec {
        apic_ids: (0..vcpus).collect(),
        // The I/O APIC's id follows the vCPUs' (ids are one space).
        io_apic: (io_apic_id(vcpus), ioapic::BASE as u32),
    };
    acpi_tables::build(&spec, LINUX_ACPI_BASE).map_err(DomainError::Acpi)
}

/// Writes [`pc_acpi_tables`] at [`LINUX_ACPI_BASE`], where a kernel that
/// scans the BIOS area for the RSDP finds them.
fn write_pc_acpi_tables(ram: &mut [u8], vcpus: u32) -> Result<(), DomainError> {
    let acpi = pc_acpi_tables(vcpus)?;
    let at = acpi.base as usize;
    let end = at + acpi.bytes.len();
    let ram_bytes = ram.len() as u64;
    ram.get_mut(at..end)
        .ok_or(DomainError::Multiboot(MultibootError::DoesNotFit {
            end: end as u64,
            ram: ram_bytes,
        }))?
        .copy_from_slice(&acpi.bytes);
    Ok(())
}

/// Starts built domain `id`: vCPU 0 runs, the others wait for STARTUP.
/// Boot calls it once every domain is built (see `start_domains`).
pub fn start(id: DomainId) {
    let first = with_domain(id, |d| d.vcpus.first().copied()).flatten();
    if let Some(first) = first
        && let Some(Err(e)) =
            RUNTIME.with_vcpu(first, |system, platform| system.vcpu_wake(first, platform))
    {
        error!("domain {}: cannot start vCPU 0: {e}", id.0);
    }
}

/// The ids of every domain built (stopped ones included), in creation order.
pub fn ids() -> Vec<DomainId> {
    DOMAINS.ids()
}

/// What every VMCB of a domain with `memory` points at: the shared
/// permission maps, its ASID and its nested page tables.
fn vmcb_setup((iopm_pa, msrpm_pa): (u64, u64), memory: &DomainMemory) -> VmcbSetup {
    VmcbSetup {
        iopm_pa,
        msrpm_pa,
        asid: memory.asid,
        n_cr3: memory.npt.root(),
    }
}

/// A vCPU's state at its start, x87/SSE reset: for the test guest (see
/// `guest_abi::x86`) 64-bit mode at the image base, `rdi` = its index,
/// `rsi` = [`BOOT_INFO`]; for Linux, vCPU 0 at the 64-bit entry with `rsi`
/// = the zero page, the others as a STARTUP with vector 0 would leave them
/// (replaced by [`startup_vcpu`] when theirs comes).
fn boot_state(setup: &VmcbSetup, id: DomainId, index: u32, entry: Entry) -> VcpuState {
    let (vmcb, gprs) = match entry {
        Entry::TestGuest => (
            boot::initial_vmcb(setup),
            Gprs {
                rdi: u64::from(index),
                rsi: BOOT_INFO,
                ..Gprs::default()
            },
        ),
        Entry::Linux { entry, boot_params } if index == 0 => (
            boot::linux_entry_vmcb(setup, entry),
            Gprs {
                rsi: boot_params,
                ..Gprs::default()
            },
        ),
        Entry::Multiboot { entry, info } if index == 0 => {
            let mut vmcb = boot::multiboot_entry_vmcb(setup, entry);
            vmcb.save.rax = u64::from(multiboot::BOOTLOADER_MAGIC);
            (
                vmcb,
                Gprs {
                    rbx: u64::from(info),
                    ..Gprs::default()
                },
            )
        }
        Entry::Linux { .. } | Entry::Multiboot { .. } => {
            (boot::startup_vmcb(setup, 0), Gprs::default())
        }
    };
    VcpuState {
        fx: vcpu::FpuArea::reset(),
        xcr0: hv::x86::fpu::RESET_XCR0,
        vmcb: Box::new(vmcb),
        gprs,
        domain: id.0,
        index,
        injected: None,
        fpu_cpu: None,
        debug: DebugRegisters::RESET,
        tsc_aux: 0,
        misc_enable: hv::x86::policy::MISC_ENABLE_RESET,
        nmi: hv::x86::nmi::NmiState::default(),
    }
}

/// Why a vCPU's boot state could not be rebuilt.
#[derive(Debug)]
pub enum RestartVcpuError {
    /// The I/O and MSR permission maps were never set up (no SVM boot).
    NoPermissionMaps,
    /// The domain was torn down meanwhile.
    DomainGone,
    /// The vCPU's state could not be replaced.
    Reset(vcpu::ResetError),
}

impl core::fmt::Display for RestartVcpuError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoPermissionMaps => f.write_str("no permission maps"),
            Self::DomainGone => f.write_str("the domain is gone"),
            Self::Reset(e) => write!(f, "{e}"),
        }
    }
}

/// Puts domain `id`'s vCPU `index` (`vcpu`, which no CPU holds and the
/// hypervisor's pause keeps off every CPU) in the state a STARTUP with
/// `vector` gives it after an INIT, its APIC reset: the test guest's vCPUs
/// as at their first start, a Linux domain's in real mode at the vector's
/// page. Says why if it cannot.
pub fn startup_vcpu(
    id: DomainId,
    index: u32,
    vcpu: VcpuId,
    vector: u8,
) -> Result<(), RestartVcpuError> {
    let maps = PERMISSION_MAPS
        .get()
        .copied()
        .ok_or(RestartVcpuError::NoPermissionMaps)?;
    let (setup, entry) = with_domain(id, |d| (vmcb_setup(maps, &d.memory), d.entry))
        .ok_or(RestartVcpuError::DomainGone)?;
    let mut state = boot_state(&setup, id, index, entry);
    if entry.is_pc() {
        *state.vmcb = boot::startup_vmcb(&setup, vector);
        state.gprs = Gprs::default();
    }
    // An INIT keeps the APIC's mode (the caller's INIT reset it already).
    let apic =
        vcpu::with_apic(vcpu, |apic| apic.after_init()).unwrap_or_else(|| fresh_apic(entry, index));
    vcpu::reset(vcpu, state, apic).map_err(RestartVcpuError::Reset)
}

/// Whether domain `id` has the test device at port 0xf4 (multiboot
/// kernels: kvm-unit-tests ends its tests there).
pub fn has_test_exit(id: DomainId) -> bool {
    with_domain(id, |d| matches!(d.entry, Entry::Multiboot { .. })).unwrap_or(false)
}

/// Whether domain `id` starts its vCPUs as a PC does (any STARTUP vector,
/// real mode), rather than by the test guest's paravirtual STARTUP.
pub fn real_startup(id: DomainId) -> bool {
    with_domain(id, |d| d.entry.is_pc()).unwrap_or(false)
}

/// How often a domain's #DB, #AC and debug-register accesses went through
/// the hypervisor.
#[derive(Clone, Copy, Debug, Default)]
pub struct TrapCounts {
    /// Debug exceptions intercepted and handed back.
    pub debug: u64,
    /// Alignment checks intercepted and handed back.
    pub alignment: u64,
    /// MOVs to or from a debug register, emulated.
    pub debug_registers: u64,
    /// MOVs to CR4, checked.
    pub control_registers: u64,
    /// NMIs delivered.
    pub nmis: u64,
}

/// Whether the `n`th event of a kind is logged: the first, then every
/// 10 000th (a guest looping on a trap must not flood the console).
pub fn worth_logging(n: u64) -> bool {
    n == 1 || n.is_multiple_of(10_000)
}

/// Counts one more intercepted event of domain `id` with `which`, and logs
/// it if [`worth_logging`].
pub fn count_trap(id: DomainId, what: &str, which: impl FnOnce(&mut TrapCounts) -> &mut u64) {
    let n = with_domain(id, |d| {
        let n = which(&mut d.traps);
        *n += 1;
        *n
    });
    if let Some(n) = n
        && worth_logging(n)
    {
        info!("domain {}: {n} {what} so far", id.0);
    }
}

/// A domain's RAM as the hypervisor reads guest code from it (the
/// instruction at RIP, for its length).
pub struct GuestRam {
    /// Host-physical (identity-mapped) address of guest-physical 0.
    pa: u64,
    /// Its size.
    bytes: u64,
}

impl GuestRam {
    /// Its size: the guest's RAM is guest-physical `0..bytes()`.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl GuestPhysRead for GuestRam {
    fn read(&self, gpa: u64, buffer: &mut [u8]) -> bool {
        match gpa.checked_add(buffer.len() as u64) {
            Some(end) if end <= self.bytes => {}
            _ => return false,
        }
        for (i, byte) in buffer.iter_mut().enumerate() {
            // SAFETY: the range is inside the domain's RAM (checked above),
            // identity-mapped heap memory that lives until the domain is torn
            // down, which waits until none of its vCPUs runs: the caller
            // handles an exit of one of them. The guest may write it
            // meanwhile, hence volatile byte reads.
            *byte = unsafe { core::ptr::read_volatile((self.pa + gpa + i as u64) as *const u8) };
        }
        true
    }
}

/// Domain `id`'s RAM, for reads of its code.
pub fn guest_ram(id: DomainId) -> Option<GuestRam> {
    with_domain(id, |d| GuestRam {
        pa: d.memory.ram_pa,
        bytes: d.memory.ram_bytes,
    })
}

/// Logs a warning a guest of domain `id` provoked, within the domain's
/// [`hv::ratelimit::LogBudget`] (a looping guest must not flood the console).
pub fn guest_warn(id: DomainId, what: core::fmt::Arguments<'_>) {
    match with_domain(id, |d| d.log_budget.ask()) {
        Some(hv::ratelimit::Verdict::Print { dropped: 0 }) | None => {
            warn!("domain {}: {what}", id.0)
        }
        Some(hv::ratelimit::Verdict::Print { dropped }) => {
            warn!("domain {}: {what} ({dropped} similar lines left out)", id.0)
        }
        Some(hv::ratelimit::Verdict::Drop) => {}
    }
}

/// Runs `f` on domain `id`.
pub fn with_domain<R>(id: DomainId, f: impl FnOnce(&mut Domain) -> R) -> Option<R> {
    cpu::without_irqs(|| DOMAINS.with(id, f))
}

/// Marks stopped domain `id` for teardown by the boot CPU's tick, once its
/// vCPUs have left every CPU (the caller took them out of the scheduler).
pub fn schedule_teardown(id: DomainId) {
    with_domain(id, |d| d.teardown = true);
    WORK_DUE.store(true, Ordering::Release);
}

/// The boot CPU's tick: frees the stopped domains no CPU runs any more.
/// Cheap when none waits.
pub fn do_pending_work() {
    if !WORK_DUE.load(Ordering::Acquire) {
        return;
    }
    let waiting: Vec<(DomainId, Vec<VcpuId>, bool)> = cpu::without_irqs(|| {
        DOMAINS.map_each(|d| {
            (d.teardown || d.restart_pending).then(|| (d.id, d.vcpus.clone(), d.teardown))
        })
    })
    .into_iter()
    .flatten()
    .collect();
    if waiting.is_empty() {
        WORK_DUE.store(false, Ordering::Release);
        return;
    }
    let mut still_waiting = false;
    for (id, vcpus, teardown) in waiting {
        // Each vCPU of a torn-down domain is in the part of the CPU still
        // holding it, if any.
        let off_every_cpu = vcpus.iter().all(|&v| {
            RUNTIME
                .with_vcpu(v, |s, _| s.vcpu_running_on(v).is_none())
                .unwrap_or(false)
        }) && !vcpus.iter().any(|&v| vcpu::loaded_anywhere(v));
        if off_every_cpu && teardown {
            destroy(id, &vcpus);
        } else if off_every_cpu {
            restart(id, &vcpus);
        } else {
            still_waiting = true;
        }
    }
    if still_waiting {
        let ticks = WAITED_TICKS.fetch_add(1, Ordering::Relaxed) + 1;
        if ticks == WORK_WARN_TICKS {
            warn!(
                "domain: a stopped or restarting domain's vCPUs have not left their CPUs after {ticks} ticks; still waiting"
            );
        }
    } else {
        WAITED_TICKS.store(0, Ordering::Relaxed);
    }
}

/// Restarts domain `id` (console `restart`, POOL_OP `RestartDomain`, as
/// `xl reboot`): its vCPUs are paused at once, and once no CPU holds any
/// of them the boot CPU's tick reloads it from its image and starts vCPU 0
/// ([`restart`]). `Err` if a restart or teardown is already under way.
pub fn request_restart(id: DomainId, by: &str) -> Result<(), &'static str> {
    let claimed = with_domain(id, |d| {
        if d.stopped || d.teardown || d.restart_pending {
            return None;
        }
        d.restart_pending = true;
        Some((d.name.clone(), d.vcpus.clone()))
    })
    .flatten();
    let Some((name, vcpus)) = claimed else {
        return Err("a restart or teardown of this domain is under way");
    };
    info!("domain {} ({name}): restarting ({by})", id.0);
    if let Err(e) = RUNTIME.pause_for_restart(&vcpus) {
        error!("domain {}: cannot pause it for the restart: {e}", id.0);
    }
    WORK_DUE.store(true, Ordering::Release);
    Ok(())
}

/// Reloads domain `id` from its image and starts it again as at boot:
/// its RAM zeroed and rewritten (image, boot info, page tables), every
/// vCPU's state and APIC fresh, vCPU 0 running and the others waiting for
/// STARTUP, holding the pause an INIT leaves (so their STARTUP takes the
/// path of a restarted vCPU). Its vCPUs run nowhere (the caller checked).
fn restart(id: DomainId, vcpus: &[VcpuId]) {
    for &v in vcpus {
        RUNTIME.cancel_wakeups(v);
    }
    let found = with_domain(id, |d| {
        (
            d.memory.ram_pa,
            d.memory.ram_bytes,
            d.image,
            d.initramfs,
            d.bootargs.clone(),
            d.name.clone(),
        )
    });
    // The domain is gone (torn down meanwhile): nothing to restart.
    let Some((ram_pa, ram_bytes, image, initramfs, bootargs, name)) = found else {
        return;
    };
    // A domain exists only if the maps do; were they missing, the restart
    // could not finish: stop the domain instead of retrying every tick.
    let Some(&maps) = PERMISSION_MAPS.get() else {
        restart_failed(id, format_args!("no permission maps"));
        return;
    };
    // Outside the domain lock: rewriting the RAM takes a while.
    // SAFETY: the domain's own RAM (identity-mapped heap), which no CPU runs
    // (checked by the caller) and nothing else refers to.
    let ram = unsafe { core::slice::from_raw_parts_mut(ram_pa as *mut u8, ram_bytes as usize) };
    ram.fill(0);
    let boot = BootCommand {
        name: &name,
        bootargs: &bootargs,
    };
    let entry = match write_memory(ram, image, initramfs, boot, vcpus.len() as u32) {
        Ok(entry) => entry,
        Err(e) => {
            restart_failed(id, format_args!("boot memory: {e}"));
            return;
        }
    };
    // The vCPUs outside the domain lock, as at creation (their power
    // state and APIC have locks of their own).
    let Some(setup) = with_domain(id, |d| vmcb_setup(maps, &d.memory)) else {
        return;
    };
    for (index, &v) in vcpus.iter().enumerate() {
        let index = index as u32;
        let power = if index == 0 {
            Power::Running
        } else {
            Power::WaitForSipi
        };
        vcpu::with_power(v, |p| *p = power);
        if let Err(e) = vcpu::reset(
            v,
            boot_state(&setup, id, index, entry),
            fresh_apic(entry, index),
        ) {
            error!("domain {}: restart: vCPU {index}: {e}", id.0);
        }
        // Its guest page tables were rewritten: flush its TLB entries.
        vcpu::forget_last_run(v);
    }
    let name = with_domain(id, |d| {
        d.uart = Uart16550::new(id.0);
        d.pic = Pic8259::new();
        d.ioapic = io_apic(entry, vcpus.len() as u32);
        d.pit = entry.is_pc().then(Pit8254::new);
        d.pit_polled_ns = 0;
        d.acpi_pm = entry.is_pc().then(AcpiPm::new);
        d.rtc = fresh_rtc(entry);
        d.pic_warned = false;
        d.restart_pending = false;
        d.name.clone()
    });
    // vCPU 0 runs; the others hold exactly the pause of an INIT.
    RUNTIME.start_restarted(id, name.as_deref().unwrap_or("?"), vcpus);
}

/// A restart that cannot finish stops the domain (its teardown then wins
/// over the pending restart), rather than leaving it paused for good.
fn restart_failed(id: DomainId, why: core::fmt::Arguments<'_>) {
    with_domain(id, |d| d.restart_pending = false);
    super::exit::end_domain(id, log::Level::Error, format_args!("restart failed: {why}"));
}

/// Frees everything domain `id` held; its vCPUs run nowhere.
fn destroy(id: DomainId, vcpus: &[VcpuId]) {
    let heap_before = crate::heap::allocated_bytes();
    let taken = cpu::without_irqs(|| DOMAINS.remove(id));
    let Some(Domain { name, memory, .. }) = taken else {
        return;
    };
    for &v in vcpus {
        RUNTIME.cancel_wakeups(v);
        vcpu::uninstall(v);
    }
    let released = release_memory(memory);
    info!(
        "domain {} ({name}): torn down: {} MiB of RAM, {} nested page tables and ASID {} freed; heap in use {} -> {} KiB",
        id.0,
        released.ram_bytes >> 20,
        released.tables,
        released.asid,
        heap_before >> 10,
        crate::heap::allocated_bytes() >> 10
    );
}
