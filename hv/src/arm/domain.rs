//! Domains on ARM64: guest RAM, stage-2 map, the scheduler's domain, and the
//! per-domain emulation state (PSCI, UART) that guest exits reach.

use alloc::string::String;
use alloc::vec::Vec;
use core::ops::Range;

use hv::stage2::{self, Attributes, IpaSize, Stage2, VmidAllocator};
use hv::vpsci::VPsci;
use log::{error, info};
use platform::arch::aarch64::cpu;
use sched::{DomainId, PoolId, SchedParams, VcpuId};
use spin::Mutex;

use super::memory::{self, HeapTables};
use super::schedule;
use super::vcpu::{self, DomainContext, VcpuState};

/// Guest-physical base of RAM: where QEMU virt puts it, so guests built for
/// that machine run unchanged.
pub const GUEST_RAM_IPA: u64 = 0x4000_0000;
/// Linux arm64 image load offset within RAM.
pub const IMAGE_OFFSET: u64 = 0x8_0000;

/// What a domain is built from.
pub struct DomainSpec<'a> {
    /// Name for logs.
    pub name: &'a str,
    /// The guest image (an arm64 Image or flat binary, entered at its start).
    pub image: &'a [u8],
    /// vCPUs.
    pub vcpus: u32,
    /// Guest RAM in bytes.
    pub memory_bytes: u64,
    /// Pool to run in.
    pub pool: PoolId,
    /// Scheduling parameters.
    pub params: SchedParams,
}

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
    /// The image does not fit its RAM.
    ImageTooLarge,
    /// Stage-2 setup failed.
    Stage2(stage2::Stage2Error),
    /// The scheduler refused it.
    Sched(sched::SystemError),
    /// PSCI state could not be built.
    Psci(hv::vpsci::VPsciError),
}

impl core::fmt::Display for DomainError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::OutOfMemory => write!(f, "not enough memory for its RAM"),
            Self::ImageTooLarge => write!(f, "the image does not fit its RAM"),
            Self::Stage2(e) => write!(f, "stage 2: {e:?}"),
            Self::Sched(e) => write!(f, "scheduler: {e}"),
            Self::Psci(e) => write!(f, "PSCI: {e:?}"),
        }
    }
}

/// Creates a domain and starts its first vCPU.
pub fn create(spec: &DomainSpec<'_>) -> Result<DomainId, DomainError> {
    if spec.image.len() as u64 + IMAGE_OFFSET > spec.memory_bytes {
        return Err(DomainError::ImageTooLarge);
    }
    let ram_pa = memory::allocate_guest_ram(spec.memory_bytes).ok_or(DomainError::OutOfMemory)?;
    let mut tables = HeapTables;
    let mut map = Stage2::new(IpaSize::Bits40, &mut tables).map_err(DomainError::Stage2)?;
    map.map(
        &mut tables,
        GUEST_RAM_IPA,
        ram_pa,
        spec.memory_bytes,
        Attributes::RAM,
    )
    .map_err(DomainError::Stage2)?;
    let vmid = {
        let mut vmids = VMIDS.lock();
        vmids
            .get_or_insert_with(VmidAllocator::new)
            .allocate()
            .map_err(DomainError::Stage2)?
    };
    // SAFETY: the range was just allocated for this domain.
    unsafe { memory::load_image(ram_pa + IMAGE_OFFSET, spec.image) };
    let mpidrs = VPsci::linear_mpidrs(spec.vcpus as usize);
    let psci = VPsci::new(&mpidrs).map_err(DomainError::Psci)?;
    let (id, vcpus) = schedule::with_system(|system, platform| {
        let id = system.domain_create(spec.pool, spec.vcpus, spec.params, platform)?;
        Ok((
            id,
            system
                .domain_vcpus(id)
                .map(<[VcpuId]>::to_vec)
                .unwrap_or_default(),
        ))
    })
    .unwrap_or(Err(sched::SystemError::NoVcpus))
    .map_err(DomainError::Sched)?;
    let context = DomainContext {
        vttbr: stage2::vttbr(map.root(), vmid),
        domain: id.0,
    };
    for (index, &v) in vcpus.iter().enumerate() {
        let entry = GUEST_RAM_IPA + IMAGE_OFFSET;
        vcpu::install(
            v,
            VcpuState::new(context, index as u32, mpidrs[index], entry, 0),
        );
    }
    let domain = Domain {
        id,
        name: spec.name.into(),
        ram: GUEST_RAM_IPA..GUEST_RAM_IPA + spec.memory_bytes,
        ram_pa,
        stage2: map,
        vcpus: vcpus.clone(),
        psci,
        stopped: false,
    };
    // IRQs masked: exit handlers take this lock too.
    cpu::without_irqs(|| DOMAINS.lock().push(domain));
    info!(
        "domain {} ({}): {} vCPUs, {} MiB at {:#x}, vmid {}",
        id.0,
        spec.name,
        spec.vcpus,
        spec.memory_bytes >> 20,
        ram_pa,
        vmid.0
    );
    if let Some(&first) = vcpus.first()
        && let Some(Err(e)) =
            schedule::with_system(|system, platform| system.vcpu_wake(first, platform))
    {
        error!("domain {}: cannot start vCPU 0: {e}", id.0);
    }
    Ok(id)
}

/// Runs `f` on domain `id`.
pub fn with_domain<R>(id: DomainId, f: impl FnOnce(&mut Domain) -> R) -> Option<R> {
    cpu::without_irqs(|| DOMAINS.lock().iter_mut().find(|d| d.id == id).map(f))
}
