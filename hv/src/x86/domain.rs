//! Domains on x86-64: guest RAM from the heap at guest-physical 0, nested
//! page tables and an ASID, the boot structures (`hv::svm::boot`), a VMCB and
//! virtual APIC per vCPU, and the emulated 16550.

use alloc::alloc::{Layout, alloc_zeroed};
use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use guest_abi::x86::{BOOT_INFO, BootInfo};
use hv::config::DomainConfig;
use hv::stage2::{Table, TableAllocator};
use hv::svm::boot::{self, VmcbSetup};
use hv::svm::npt::{LARGE_PAGE, Npt, NptError};
use hv::svm::uart16550::Uart16550;
use hv::svm::vlapic::VLapic;
use hv::svm::vmcb::{IOPM_BYTES, MSRPM_BYTES};
use log::{error, info};
use platform::arch::x86_64::{cpu, timer};
use sched::{DomainId, VcpuId};
use spin::{Mutex, Once};

use super::schedule;
use super::vcpu::{self, Gprs, VcpuState};

/// One running domain's hypervisor-side state.
pub struct Domain {
    /// The scheduler's id, also the domain number in logs (`[domN]`).
    pub id: DomainId,
    /// Name from the config.
    pub name: String,
    /// Its nested page tables (owned while the domain exists).
    #[expect(dead_code, reason = "freed by domain teardown, which is not wired yet")]
    pub npt: Npt,
    /// The vCPUs, by index in the domain (= x2APIC id).
    pub vcpus: Vec<VcpuId>,
    /// Its emulated COM1.
    pub uart: Uart16550,
    /// May use privileged hypercalls.
    pub privileged: bool,
    /// Set once the domain is stopped; its vCPUs are not entered again.
    pub stopped: bool,
}

static DOMAINS: Mutex<Vec<Domain>> = Mutex::new(Vec::new());
/// The next ASID to hand out (0 is the host's).
static NEXT_ASID: AtomicU32 = AtomicU32::new(1);
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
    /// Nested paging setup failed.
    Npt(NptError),
    /// No ASID left.
    NoAsid,
    /// This CPU cannot run guests (no SVM).
    NoSvm,
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
            Self::Npt(e) => write!(f, "nested page tables: {e}"),
            Self::NoAsid => write!(f, "no ASID left"),
            Self::NoSvm => write!(f, "this machine cannot run SVM guests"),
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

/// TSC frequency in kHz, as the guests are told.
pub fn tsc_khz() -> u64 {
    timer::tsc_hz() / 1000
}

/// Builds the hypervisor side of domain `id` (already created in the
/// scheduler from `config`) and starts its vCPU 0.
pub fn create(id: DomainId, config: &DomainConfig, image: &[u8]) -> Result<(), DomainError> {
    if image.is_empty() {
        return Err(DomainError::NoImage);
    }
    if !vcpu::svm_ready(cpu::index()) {
        return Err(DomainError::NoSvm);
    }
    let ram_bytes = (config.memory_mib << 20).next_multiple_of(LARGE_PAGE);
    let layout = Layout::from_size_align(ram_bytes as usize, LARGE_PAGE as usize)
        .map_err(|_| DomainError::OutOfMemory)?;
    // SAFETY: the size is non-zero (config validation requires RAM).
    let ram_pa = unsafe { alloc_zeroed(layout) } as u64;
    if ram_pa == 0 {
        return Err(DomainError::OutOfMemory);
    }
    // SAFETY: the range was just allocated for this domain and nothing else
    // refers to it; the heap is identity-mapped.
    let ram = unsafe { core::slice::from_raw_parts_mut(ram_pa as *mut u8, ram_bytes as usize) };
    let info = BootInfo {
        vcpus: config.vcpus,
        ram_bytes,
        tsc_khz: tsc_khz(),
        cmdline: &config.bootargs,
    };
    boot::write_boot_memory(ram, image, &info).map_err(DomainError::Boot)?;
    let mut tables = HeapTables;
    let mut npt = Npt::new(&mut tables).map_err(DomainError::Npt)?;
    npt.map(&mut tables, 0, ram_pa, ram_bytes)
        .map_err(DomainError::Npt)?;
    let (iopm_pa, msrpm_pa) = permission_maps().ok_or(DomainError::OutOfMemory)?;
    let asid = NEXT_ASID.fetch_add(1, Ordering::Relaxed);
    if let platform::arch::x86_64::svm::Virtualization::Svm(svm) =
        platform::arch::x86_64::svm::detect()
        && asid >= svm.asids
    {
        return Err(DomainError::NoAsid);
    }
    let setup = VmcbSetup {
        iopm_pa,
        msrpm_pa,
        asid,
        n_cr3: npt.root(),
    };
    let vcpus = schedule::with_system(|system, _| system.domain_vcpus(id).map(<[VcpuId]>::to_vec))
        .flatten()
        .unwrap_or_default();
    for (index, &v) in vcpus.iter().enumerate() {
        let state = VcpuState {
            fx: vcpu::FxArea::reset(),
            vmcb: Box::new(boot::initial_vmcb(&setup)),
            gprs: Gprs {
                rdi: index as u64,
                rsi: BOOT_INFO,
                ..Gprs::default()
            },
            domain: id.0,
            index: index as u32,
            injected: None,
        };
        vcpu::STARTED[v.0 as usize].store(index == 0, Ordering::Release);
        vcpu::install(v, state, VLapic::new(index as u32));
    }
    let domain = Domain {
        id,
        name: config.name.clone(),
        npt,
        vcpus: vcpus.clone(),
        uart: Uart16550::new(id.0),
        privileged: config.privileged,
        stopped: false,
    };
    cpu::without_irqs(|| DOMAINS.lock().push(domain));
    info!(
        "domain {} ({}): {} vCPUs, {} MiB at {:#x}, asid {asid}, pool {}",
        id.0, config.name, config.vcpus, config.memory_mib, ram_pa, config.pool
    );
    if let Some(&first) = vcpus.first()
        && let Some(Err(e)) =
            schedule::with_system(|system, platform| system.vcpu_wake(first, platform))
    {
        error!("domain {}: cannot start vCPU 0: {e}", id.0);
    }
    Ok(())
}

/// Runs `f` on domain `id`.
pub fn with_domain<R>(id: DomainId, f: impl FnOnce(&mut Domain) -> R) -> Option<R> {
    cpu::without_irqs(|| DOMAINS.lock().iter_mut().find(|d| d.id == id).map(f))
}
