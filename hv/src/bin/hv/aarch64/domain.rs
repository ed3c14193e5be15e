//! Domains on ARM64: guest RAM, stage-2 map, the scheduler's domain, and the
//! per-domain emulation state (PSCI, UART) that guest exits reach.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use hv::arm::guest_dt::{GuestDtSpec, UnitShape, UnitTopology, guest_device_tree};
use hv::arm::stage2::{self, IpaSize, VmidAllocator};
use hv::arm::vgic::{Vgic, VgicConfig};
use hv::arm::vpl011::VPl011;
use hv::arm::vpsci::VPsci;
use hv::config::DomainConfig;
use hv::domain_memory::DomainMemory;
use hv::domain_table::DomainTable;
use hv::guest_image::DTB_SLOT;
use hv::passthrough::PlannedDevice;
use log::{error, info, warn};
use platform::arch::aarch64::cpu;
use platform::sync::Mutex;
use sched::{DomainId, VcpuId};

use super::memory::{self, HeapTables};
use super::runtime::RUNTIME;
use super::vcpu::{self, DomainContext, VcpuState};

/// One running domain's hypervisor-side state.
pub struct Domain {
    /// The scheduler's id, also the domain number in logs (`[domN]`).
    pub id: DomainId,
    /// Name from the config.
    pub name: String,
    /// Guest RAM as guest-physical addresses.
    pub ram: Range<u64>,
    /// Host-physical base of guest RAM.
    #[expect(
        dead_code,
        reason = "read by the hypercalls that copy guest memory, wired next"
    )]
    pub ram_pa: u64,
    /// Its RAM, stage-2 map and VMID, given back by the teardown.
    pub memory: DomainMemory,
    /// What a restart reloads: the image and the device tree.
    pub boot: BootImage,
    /// A teardown or restart waiting for the vCPUs to leave their CPUs.
    pub pending: Option<Pending>,
    /// The vCPUs, by index in the domain.
    pub vcpus: Vec<VcpuId>,
    /// PSCI state of the vCPUs.
    pub psci: VPsci,
    /// Its virtual GIC.
    pub vgic: Vgic,
    /// Its emulated PL011 (also the line buffer of its hypercall console
    /// writes, so those are prefixed alike).
    pub uart: VPl011,
    /// Whether the guest sees the PL011 at all (config `console = "vpl011"`):
    /// with `"none"` the window is unmapped, as any other hole, and its
    /// device tree has no UART.
    pub emulated_uart: bool,
    /// May use privileged hypercalls.
    pub privileged: bool,
    /// May use the test hooks (config `test_hooks`).
    pub test_hooks: bool,
    /// Stopped, not given an abort, on an access to guest-physical space
    /// with nothing behind it (config `fail_stop`).
    pub fail_stop: bool,
    /// Thins out the log lines this domain's guest can provoke at will.
    pub log_budget: hv::ratelimit::LogBudget,
    /// Set once the domain is stopped; its exits are ignored.
    pub stopped: bool,
}

/// What a domain (re)starts from.
pub struct BootImage {
    /// The guest image, loaded at `image_offset` in its RAM.
    image: &'static [u8],
    /// Where the image goes: its arm64 header's text offset, or the RAM
    /// base for a raw binary (`hv::guest_image`).
    image_offset: u64,
    /// The initramfs (possibly empty), loaded at `initrd_offset`.
    initrd: &'static [u8],
    /// Offset of the initramfs in its RAM: page-aligned, right below the
    /// device tree.
    initrd_offset: u64,
    /// Its device tree, loaded at `dtb_offset`.
    dtb: Vec<u8>,
    /// Offset of the device tree in its RAM.
    dtb_offset: u64,
    /// vCPU 0's entry point (IPA).
    entry: u64,
    /// vCPU 0's `x0`: the device tree's IPA.
    dtb_ipa: u64,
    /// Each vCPU's virtual MPIDR.
    mpidrs: Vec<u64>,
    /// The vGIC's shape.
    vgic: VgicConfig,
}

/// Work left for the housekeeping tick once the domain's vCPUs are off
/// every CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pending {
    /// Free everything (PSCI SYSTEM_OFF, or stopped for a fault).
    Destroy,
    /// Reload the image and start vCPU 0 again (PSCI SYSTEM_RESET).
    Restart,
}

/// The most domains built at once: as many as there are VMIDs (8-bit).
const MAX_DOMAINS: usize = 256;

/// Every built domain, each behind its own lock (`hv::domain_table`).
static DOMAINS: DomainTable<Domain, MAX_DOMAINS> = DomainTable::new();
/// Set when some domain has [`Pending`] work, so the tick skips the lock
/// otherwise.
static PENDING_WORK: AtomicBool = AtomicBool::new(false);
/// How many ticks a teardown may wait for the vCPUs before it says so.
const RELEASE_WARN_TICKS: u32 = 500;
static VMIDS: Mutex<Option<VmidAllocator>> = Mutex::new(None);

/// Why a domain could not be created.
#[derive(Debug)]
pub enum DomainError {
    /// Its RAM, stage-2 map or VMID could not be had.
    Memory(hv::domain_memory::DomainMemoryError),
    /// The config names an image this build does not carry.
    NoImage,
    /// The vGIC could not be built.
    Vgic(hv::arm::vgic::VgicError),
    /// Its device tree could not be built.
    DeviceTree(hv::arm::guest_dt::GuestDtError),
    /// The image cannot be used (not an image, or too big for its RAM).
    Image(hv::guest_image::ImageError),
    /// Its device tree is larger than the slot kept for it.
    DeviceTreeTooLarge,
    /// PSCI state could not be built.
    Psci(hv::arm::vpsci::VPsciError),
    /// The domain table refused it (full).
    Table(hv::domain_table::InsertError),
}

impl core::fmt::Display for DomainError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Memory(e) => write!(f, "{e}"),
            Self::NoImage => write!(
                f,
                "its image is not in this build (build with cargo xtask build)"
            ),
            Self::Vgic(e) => write!(f, "vGIC: {e}"),
            Self::DeviceTree(e) => write!(f, "device tree: {e}"),
            Self::Image(e) => write!(f, "image: {e}"),
            Self::DeviceTreeTooLarge => {
                write!(f, "its device tree is larger than {} KiB", DTB_SLOT >> 10)
            }
            Self::Psci(e) => write!(f, "PSCI: {e:?}"),
            Self::Table(e) => write!(f, "{e}"),
        }
    }
}

/// Builds the hypervisor side of domain `id` (already created in the
/// scheduler from `config`) and starts its first vCPU. `initrd` (possibly
/// empty) is placed right below the device tree and named in `/chosen`.
pub fn create(
    id: DomainId,
    config: &DomainConfig,
    image: &'static [u8],
    initrd: &'static [u8],
    devices: &[PlannedDevice],
) -> Result<(), DomainError> {
    if image.is_empty() {
        return Err(DomainError::NoImage);
    }
    let memory_bytes = config.memory_mib << 20;
    let ram_ipa = config.memory_base;
    let kind = hv::guest_image::identify(image).map_err(DomainError::Image)?;
    let layout =
        hv::guest_image::layout(kind, image.len() as u64, initrd.len() as u64, memory_bytes)
            .map_err(DomainError::Image)?;
    let (image_offset, initrd_offset, dtb_offset) =
        (layout.image_offset, layout.initrd_offset, layout.dtb_offset);
    let gicv = super::GICV_BASE.load(core::sync::atomic::Ordering::Relaxed);
    let regions = |ram_pa: u64| {
        // Its RAM and the devices it was given (a refused one is not mapped).
        let mut regions = alloc::vec![config.ram_region(ram_pa)];
        regions.extend(devices.iter().map(PlannedDevice::stage2_region));
        if super::vgic::guest_version() == hv::arm::vgic::GuestGicVersion::V2 && gicv != 0 {
            // GICv2: the guest's CPU interface is the host's virtual CPU
            // interface, mapped straight through; only the distributor is emulated.
            regions.push(stage2::Region {
                ipa: hv::arm::vgic::GICC_BASE_V2,
                pa: gicv,
                size: GICV_SIZE,
                attrs: stage2::Attributes::DEVICE,
            });
        }
        regions
    };
    let initrd_range = (!initrd.is_empty()).then(|| {
        let start = ram_ipa + initrd_offset;
        (start, start + initrd.len() as u64)
    });
    let dtb = device_tree(id, config, initrd_range, devices)?;
    if dtb.len() as u64 > DTB_SLOT {
        return Err(DomainError::DeviceTreeTooLarge);
    }
    let domain_memory = cpu::without_irqs(|| {
        let mut vmids = VMIDS.lock();
        DomainMemory::build(
            memory_bytes,
            IpaSize::Bits40,
            regions,
            &mut crate::heap::HeapRam,
            &mut HeapTables,
            vmids.get_or_insert_with(VmidAllocator::new),
        )
    })
    .map_err(DomainError::Memory)?;
    let (ram_pa, vmid) = (domain_memory.ram_pa, domain_memory.vmid);
    RUNTIME.tag_given(u32::from(vmid.0), id.0);
    let vcpu_count = config.vcpus as usize;
    let boot = BootImage {
        image,
        image_offset,
        initrd,
        initrd_offset,
        dtb,
        dtb_offset,
        entry: ram_ipa + image_offset,
        dtb_ipa: ram_ipa + dtb_offset,
        mpidrs: (0..vcpu_count).map(hv::arm::vgic::vcpu_mpidr).collect(),
        vgic: VgicConfig {
            version: super::vgic::guest_version(),
            num_vcpus: vcpu_count,
            // QEMU virt's 64 SPIs at least, and every pass-through SPI.
            num_spis: hv::passthrough::guest_spis(devices, 64),
        },
    };
    let psci_mpidrs = VPsci::linear_mpidrs(vcpu_count);
    let parts = VPsci::new(&psci_mpidrs)
        .map(|psci| psci.with_workarounds(super::speculation::guest_workarounds()))
        .map_err(DomainError::Psci)
        .and_then(|psci| Ok((psci, new_vgic(boot.vgic).map_err(DomainError::Vgic)?)));
    let (psci, vgic) = match parts {
        Ok(parts) => parts,
        Err(e) => {
            release_memory(domain_memory);
            return Err(e);
        }
    };
    // SAFETY: the RAM was just allocated for this domain; nothing runs it yet.
    unsafe { load_boot_image(ram_pa, &boot) };
    let vcpus = RUNTIME
        .with_domain(id, |system, _| {
            system.domain_vcpus(id).map(<[VcpuId]>::to_vec)
        })
        .flatten()
        .unwrap_or_default();
    let context = DomainContext {
        vttbr: stage2::vttbr(domain_memory.stage2.root(), vmid),
        domain: id.0,
    };
    install_boot_states(context, &vcpus, &boot);
    let domain = Domain {
        id,
        name: config.name.clone(),
        ram: ram_ipa..ram_ipa + memory_bytes,
        ram_pa,
        memory: domain_memory,
        boot,
        pending: None,
        vcpus: vcpus.clone(),
        psci,
        vgic,
        uart: VPl011::new(id.0),
        emulated_uart: config.console == hv::config::Console::Vpl011,
        privileged: config.privileged,
        test_hooks: config.test_hooks,
        fail_stop: config.fail_stop,
        log_budget: hv::ratelimit::LogBudget::default(),
        stopped: false,
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
        "domain {} ({}): {} vCPUs, {} MiB at {:#x}, vmid {}, pool {}",
        id.0, config.name, config.vcpus, config.memory_mib, ram_pa, vmid.0, config.pool
    );
    Ok(())
}

/// Starts built domain `id`: vCPU 0 runs, the others wait for `CPU_ON`.
/// Boot calls it once every domain is built (see `start_domains`).
pub fn start(id: DomainId) {
    if let Some(vcpus) = with_domain(id, |d| d.vcpus.clone()) {
        start_boot_vcpu(id, &vcpus);
    }
}

/// Copies the image, the initramfs and the device tree into a domain's RAM
/// at `ram_pa`.
///
/// # Safety
/// The RAM must belong to the domain and no CPU may run it.
unsafe fn load_boot_image(ram_pa: u64, boot: &BootImage) {
    // SAFETY: the image, the initramfs below the DTB slot and the slot lie
    // in the domain's RAM (checked against its size when the domain was built).
    unsafe {
        memory::load_image(ram_pa + boot.image_offset, boot.image);
        memory::load_image(ram_pa + boot.initrd_offset, boot.initrd);
        memory::load_image(ram_pa + boot.dtb_offset, &boot.dtb);
    }
}

/// Gives every vCPU its boot state: vCPU 0 at the entry point with `x0` =
/// the device tree (the arm64 boot protocol), the others ready for PSCI
/// CPU_ON (which replaces their state with its entry point and context id).
/// A domain's vGIC as built and as reset: its timers hardware-linked.
fn new_vgic(config: VgicConfig) -> Result<Vgic, hv::arm::vgic::VgicError> {
    let mut vgic = Vgic::new(config)?;
    super::guest_timer::link(&mut vgic)?;
    Ok(vgic)
}

fn install_boot_states(context: DomainContext, vcpus: &[VcpuId], boot: &BootImage) {
    for (index, &v) in vcpus.iter().enumerate() {
        let x0 = if index == 0 { boot.dtb_ipa } else { 0 };
        let mpidr = boot.mpidrs.get(index).copied().unwrap_or_default();
        vcpu::reset_runtime(v);
        vcpu::install(
            v,
            VcpuState::new(context, index as u32, mpidr, boot.entry, x0),
        );
    }
}

/// Gives a domain's RAM, tables and VMID back; logs what was freed.
fn release_memory(domain_memory: DomainMemory) -> hv::domain_memory::Released {
    let vttbr = stage2::vttbr(domain_memory.stage2.root(), domain_memory.vmid);
    RUNTIME.tag_returned(u32::from(domain_memory.vmid.0));
    cpu::without_irqs(|| {
        let mut vmids = VMIDS.lock();
        domain_memory.release(
            &mut crate::heap::HeapRam,
            &mut HeapTables,
            vmids.get_or_insert_with(VmidAllocator::new),
            &mut |_| memory::invalidate_vmid(vttbr),
        )
    })
}

/// Marks domain `id` for a teardown or a restart by the housekeeping tick,
/// once its vCPUs have left every CPU (the caller has already taken them out
/// of the scheduler, or paused them).
pub fn schedule_work(id: DomainId, work: Pending) {
    with_domain(id, |d| d.pending = Some(work));
    PENDING_WORK.store(true, Ordering::Release);
}

/// Whether domain `id` is being torn down or restarted.
pub fn is_pending(id: DomainId) -> bool {
    with_domain(id, |d| d.pending.is_some()).unwrap_or(false)
}

/// Ticks the oldest pending work has waited.
static WAITED_TICKS: AtomicU32 = AtomicU32::new(0);

/// The housekeeping tick (boot CPU): finishes the teardowns and restarts
/// whose domains no CPU runs any more. Cheap when there is nothing to do.
pub fn do_pending_work() {
    if !PENDING_WORK.load(Ordering::Acquire) {
        return;
    }
    let work: Vec<(DomainId, Pending, Vec<VcpuId>)> =
        cpu::without_irqs(|| DOMAINS.map_each(|d| d.pending.map(|p| (d.id, p, d.vcpus.clone()))))
            .into_iter()
            .flatten()
            .collect();
    if work.is_empty() {
        PENDING_WORK.store(false, Ordering::Release);
        return;
    }
    let mut waiting = false;
    for (id, pending, vcpus) in work {
        // Each vCPU of a torn-down domain is in the part of the CPU still
        // holding it, if any.
        let released = vcpus.iter().all(|&v| {
            RUNTIME
                .with_vcpu(v, |s, _| s.vcpu_running_on(v).is_none())
                .unwrap_or(false)
        });
        if !released {
            waiting = true;
            continue;
        }
        for &v in &vcpus {
            RUNTIME.cancel_wakeups(v);
        }
        match pending {
            Pending::Destroy => destroy(id, &vcpus),
            Pending::Restart => restart(id, &vcpus),
        }
    }
    if waiting {
        let ticks = WAITED_TICKS.fetch_add(1, Ordering::Relaxed) + 1;
        if ticks == RELEASE_WARN_TICKS {
            warn!(
                "domain: a stopped domain's vCPUs have not left their CPUs after {ticks} ticks; still waiting"
            );
        }
    } else {
        WAITED_TICKS.store(0, Ordering::Relaxed);
    }
}

/// Frees everything domain `id` held; its vCPUs run nowhere.
fn destroy(id: DomainId, vcpus: &[VcpuId]) {
    let heap_before = crate::heap::allocated_bytes();
    let taken = cpu::without_irqs(|| DOMAINS.remove(id));
    let Some(domain) = taken else { return };
    for &v in vcpus {
        vcpu::uninstall(v);
    }
    if let Some(gic) = super::GIC.get() {
        super::passthrough::on_destroy(gic, id);
    }
    let Domain {
        name,
        memory: domain_memory,
        ..
    } = domain;
    let released = release_memory(domain_memory);
    info!(
        "domain {} ({name}): torn down: {} MiB of RAM, {} stage-2 tables and VMID {} freed; heap in use {} -> {} KiB",
        id.0,
        released.ram_bytes >> 20,
        released.tables + 1,
        released.vmid.0,
        heap_before >> 10,
        crate::heap::allocated_bytes() >> 10
    );
}

/// Reloads domain `id` from its image and starts vCPU 0 again; its vCPUs run
/// nowhere and each holds at least the pause the reset gave it.
fn restart(id: DomainId, vcpus: &[VcpuId]) {
    let found = with_domain(id, |d| {
        (
            d.memory.ram_pa,
            d.memory.ram_bytes,
            stage2::vttbr(d.memory.stage2.root(), d.memory.vmid),
        )
    });
    let Some((ram_pa, ram_bytes, vttbr)) = found else {
        return;
    };
    // Outside the domain lock: rewriting the RAM takes a while.
    // SAFETY: the domain's own RAM, which no CPU runs (checked by the caller).
    unsafe { memory::zero(ram_pa, ram_bytes) };
    memory::invalidate_vmid(vttbr);
    let name = with_domain(id, |d| {
        // SAFETY: as above.
        unsafe { load_boot_image(ram_pa, &d.boot) };
        d.psci.reset();
        match new_vgic(d.boot.vgic) {
            Ok(vgic) => d.vgic = vgic,
            Err(e) => error!("domain {}: restart: vGIC: {e}", id.0),
        }
        // Its virtual lines start low: the SPIs a high line left disabled
        // are enabled again.
        if let Some(gic) = super::GIC.get() {
            super::passthrough::on_restart(gic, id);
        }
        d.uart = VPl011::new(id.0);
        install_boot_states(
            DomainContext {
                vttbr,
                domain: id.0,
            },
            vcpus,
            &d.boot,
        );
        d.pending = None;
        d.name.clone()
    });
    // vCPU 0 runs; the others hold exactly the pause of a powered-off vCPU.
    RUNTIME.start_restarted(id, name.as_deref().unwrap_or("?"), vcpus);
}

/// Wakes vCPU 0; the others stay off (each holds the pause a PSCI `CPU_OFF`
/// would leave, so no interrupt runs them before their `CPU_ON`).
fn start_boot_vcpu(id: DomainId, vcpus: &[VcpuId]) {
    let result = RUNTIME.with_domain(id, |system, platform| {
        for &secondary in vcpus.iter().skip(1) {
            system.vcpu_pause(secondary, platform)?;
        }
        match vcpus.first() {
            Some(&first) => system.vcpu_wake(first, platform),
            None => Ok(()),
        }
    });
    if let Some(Err(e)) = result {
        error!("domain {}: cannot start vCPU 0: {e}", id.0);
    }
}

/// Size of the GICv2 virtual CPU interface the guest sees (two 4 KiB pages).
const GICV_SIZE: u64 = 0x2000;

/// The device tree domain `id` boots with: its RAM, vCPUs (grouped as its
/// sched units: a unit's vCPUs appear as one core's threads at core
/// granularity, one cluster's cores at cluster/socket granularity), vGIC,
/// timer, PL011 and bootargs.
fn device_tree(
    id: DomainId,
    config: &DomainConfig,
    initrd: Option<(u64, u64)>,
    devices: &[PlannedDevice],
) -> Result<Vec<u8>, DomainError> {
    let (units, granularity) = RUNTIME
        .with_system(|s, _| {
            let vcpus = s.domain_vcpus(id).unwrap_or(&[]).to_vec();
            let units: Vec<Vec<usize>> = s
                .domain_units(id)
                .unwrap_or(&[])
                .iter()
                .map(|&u| {
                    s.unit_vcpus(u)
                        .unwrap_or(&[])
                        .iter()
                        .filter_map(|v| vcpus.iter().position(|x| x == v))
                        .collect()
                })
                .collect();
            let granularity = s
                .domain_pool(id)
                .and_then(|p| s.pool_info(p))
                .map(|p| p.granularity);
            (units, granularity)
        })
        .unwrap_or_default();
    let unit_slices: Vec<&[usize]> = units.iter().map(Vec::as_slice).collect();
    let topology = match granularity {
        Some(sched::Granularity::Core) => UnitTopology {
            units: &unit_slices,
            shape: UnitShape::Threads,
        },
        Some(sched::Granularity::Cluster | sched::Granularity::Socket) => UnitTopology {
            units: &unit_slices,
            shape: UnitShape::Cores,
        },
        _ => UnitTopology::FLAT,
    };
    let spec = GuestDtSpec {
        vcpus: config.vcpus as usize,
        bootargs: &config.bootargs,
        initrd,
        topology,
        console: config.console == hv::config::Console::Vpl011,
        devices,
        ..GuestDtSpec::new(
            config.memory_base,
            config.memory_mib << 20,
            super::vgic::guest_version(),
        )
    };
    guest_device_tree(&spec).map_err(DomainError::DeviceTree)
}

/// The ids of every domain built (stopped ones included), in creation order.
pub fn ids() -> Vec<DomainId> {
    DOMAINS.ids()
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
