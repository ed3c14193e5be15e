//! Domains on ARM64: guest RAM, stage-2 map, the scheduler's domain, and the
//! per-domain emulation state (PSCI, UART) that guest exits reach.

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use hv::config::DomainConfig;
use hv::guest_dt::{GuestDtSpec, UnitShape, UnitTopology, guest_device_tree};
use hv::stage2::{self, IpaSize, Stage2, VmidAllocator};
use hv::vgic::{Vgic, VgicConfig};
use hv::vpl011::VPl011;
use hv::vpsci::VPsci;
use log::{error, info};
use platform::arch::aarch64::cpu;
use sched::{DomainId, VcpuId};
use spin::Mutex;

use super::memory::{self, HeapTables};
use super::schedule;
use super::vcpu::{self, DomainContext, VcpuState};

/// Linux arm64 image load offset within RAM.
pub const IMAGE_OFFSET: u64 = 0x8_0000;

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
    /// Its stage-2 map: owns the tables while the domain exists.
    #[expect(dead_code, reason = "freed by domain teardown, wired next")]
    pub stage2: Stage2,
    /// The vCPUs, by index in the domain.
    pub vcpus: Vec<VcpuId>,
    /// PSCI state of the vCPUs.
    pub psci: VPsci,
    /// Its virtual GIC.
    pub vgic: Vgic,
    /// Its emulated PL011.
    pub uart: VPl011,
    /// May use privileged hypercalls.
    pub privileged: bool,
    /// Set once the domain is stopped; its exits are ignored.
    pub stopped: bool,
}

static DOMAINS: Mutex<Vec<Domain>> = Mutex::new(Vec::new());
static VMIDS: Mutex<Option<VmidAllocator>> = Mutex::new(None);

/// Why a domain could not be created.
#[derive(Debug)]
pub enum DomainError {
    /// Not enough heap for its RAM.
    OutOfMemory,
    /// The config names an image this build does not carry.
    NoImage,
    /// The vGIC could not be built.
    Vgic(hv::vgic::VgicError),
    /// Its device tree could not be built.
    DeviceTree(hv::guest_dt::GuestDtError),
    /// The image does not fit its RAM.
    ImageTooLarge,
    /// Stage-2 setup failed.
    Stage2(stage2::Stage2Error),
    /// PSCI state could not be built.
    Psci(hv::vpsci::VPsciError),
}

impl core::fmt::Display for DomainError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfMemory => write!(f, "not enough memory for its RAM"),
            Self::NoImage => write!(
                f,
                "its image is not in this build (build with cargo xtask build)"
            ),
            Self::Vgic(e) => write!(f, "vGIC: {e}"),
            Self::DeviceTree(e) => write!(f, "device tree: {e}"),
            Self::ImageTooLarge => write!(f, "the image does not fit its RAM"),
            Self::Stage2(e) => write!(f, "stage 2: {e:?}"),
            Self::Psci(e) => write!(f, "PSCI: {e:?}"),
        }
    }
}

/// Builds the hypervisor side of domain `id` (already created in the
/// scheduler from `config`) and starts its first vCPU.
pub fn create(id: DomainId, config: &DomainConfig, image: &[u8]) -> Result<(), DomainError> {
    if image.is_empty() {
        return Err(DomainError::NoImage);
    }
    let memory_bytes = config.memory_mib << 20;
    let ram_ipa = config.memory_base;
    if image.len() as u64 + IMAGE_OFFSET > memory_bytes {
        return Err(DomainError::ImageTooLarge);
    }
    let ram_pa = memory::allocate_guest_ram(memory_bytes).ok_or(DomainError::OutOfMemory)?;
    let mut tables = HeapTables;
    let mut regions = config.stage2_regions(ram_pa);
    let gicv = super::GICV_BASE.load(core::sync::atomic::Ordering::Relaxed);
    if super::vgic::guest_version() == hv::vgic::GuestGicVersion::V2 && gicv != 0 {
        // GICv2: the guest's CPU interface is the host's virtual CPU interface,
        // mapped straight through; only the distributor is emulated.
        regions.push(stage2::Region {
            ipa: hv::vgic::GICC_BASE_V2,
            pa: gicv,
            size: GICV_SIZE,
            attrs: stage2::Attributes::DEVICE,
        });
    }
    let map = Stage2::with_regions(IpaSize::Bits40, &regions, &mut tables)
        .map_err(DomainError::Stage2)?;
    let vmid = cpu::without_irqs(|| {
        VMIDS
            .lock()
            .get_or_insert_with(VmidAllocator::new)
            .allocate()
    })
    .map_err(DomainError::Stage2)?;
    // SAFETY: the range was just allocated for this domain.
    unsafe { memory::load_image(ram_pa + IMAGE_OFFSET, image) };
    let dtb = device_tree(id, config)?;
    let dtb_offset = memory_bytes - DTB_SLOT;
    if image.len() as u64 + IMAGE_OFFSET > dtb_offset || dtb.len() as u64 > DTB_SLOT {
        return Err(DomainError::ImageTooLarge);
    }
    // SAFETY: the DTB slot lies in the domain's RAM, after the image.
    unsafe { memory::load_image(ram_pa + dtb_offset, &dtb) };
    let dtb_ipa = ram_ipa + dtb_offset;
    let vcpu_count = config.vcpus as usize;
    let mpidrs: Vec<u64> = (0..vcpu_count).map(hv::vgic::vcpu_mpidr).collect();
    let psci_mpidrs = VPsci::linear_mpidrs(vcpu_count);
    let psci = VPsci::new(&psci_mpidrs).map_err(DomainError::Psci)?;
    let vgic = Vgic::new(VgicConfig {
        version: super::vgic::guest_version(),
        num_vcpus: vcpu_count,
        num_spis: 64,
    })
    .map_err(DomainError::Vgic)?;
    let vcpus = schedule::with_system(|system, _| system.domain_vcpus(id).map(<[VcpuId]>::to_vec))
        .flatten()
        .unwrap_or_default();
    let context = DomainContext {
        vttbr: stage2::vttbr(map.root(), vmid),
        domain: id.0,
    };
    for (index, &v) in vcpus.iter().enumerate() {
        let entry = ram_ipa + IMAGE_OFFSET;
        // The arm64 boot protocol: x0 = the device tree's address (vCPU 0;
        // secondaries get their context id from PSCI CPU_ON).
        let x0 = if index == 0 { dtb_ipa } else { 0 };
        vcpu::install(
            v,
            VcpuState::new(context, index as u32, mpidrs[index], entry, x0),
        );
    }
    let domain = Domain {
        id,
        name: config.name.clone(),
        ram: ram_ipa..ram_ipa + memory_bytes,
        ram_pa,
        stage2: map,
        vcpus: vcpus.clone(),
        psci,
        vgic,
        uart: VPl011::new(id.0),
        privileged: config.privileged,
        stopped: false,
    };
    // IRQs masked: exit handlers take this lock too.
    cpu::without_irqs(|| DOMAINS.lock().push(domain));
    info!(
        "domain {} ({}): {} vCPUs, {} MiB at {:#x}, vmid {}, pool {}",
        id.0, config.name, config.vcpus, config.memory_mib, ram_pa, vmid.0, config.pool
    );
    start_boot_vcpu(id, &vcpus);
    Ok(())
}

/// Wakes vCPU 0; the others stay off (each holds the pause a PSCI `CPU_OFF`
/// would leave, so no interrupt runs them before their `CPU_ON`).
fn start_boot_vcpu(id: DomainId, vcpus: &[VcpuId]) {
    let result = schedule::with_system(|system, platform| {
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

/// The last 2 MiB of a domain's RAM hold its device tree (Linux requires it
/// 8-byte aligned and not crossing a 2 MiB boundary).
const DTB_SLOT: u64 = 2 << 20;

/// The device tree domain `id` boots with: its RAM, vCPUs (grouped as its
/// sched units: a unit's vCPUs appear as one core's threads at core
/// granularity, one cluster's cores at cluster/socket granularity), vGIC,
/// timer, PL011 and bootargs.
fn device_tree(id: DomainId, config: &DomainConfig) -> Result<Vec<u8>, DomainError> {
    let (units, granularity) = schedule::with_system(|s, _| {
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
        topology,
        ..GuestDtSpec::new(
            config.memory_base,
            config.memory_mib << 20,
            super::vgic::guest_version(),
        )
    };
    guest_device_tree(&spec).map_err(DomainError::DeviceTree)
}

/// Runs `f` on domain `id`.
pub fn with_domain<R>(id: DomainId, f: impl FnOnce(&mut Domain) -> R) -> Option<R> {
    cpu::without_irqs(|| DOMAINS.lock().iter_mut().find(|d| d.id == id).map(f))
}
