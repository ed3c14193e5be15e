//! The platform as the guest sees it: from its device tree
//! (`test_guest::devicetree`), or QEMU virt's layout without one.

use core::fmt;

use test_guest::devicetree::{self, DtError, GicKind};

use super::MAX_VCPUS;
use super::gic::{GicInfo, Version};

/// QEMU virt: GICv2/v3 distributor.
const DEFAULT_GICD: usize = 0x0800_0000;
/// QEMU virt: GICv2 CPU interface.
const DEFAULT_GICC: usize = 0x0801_0000;
/// QEMU virt: first GICv3 redistributor.
const DEFAULT_GICR: usize = 0x080A_0000;
/// Guest RAM base (QEMU virt and every domain).
pub const RAM_BASE: u64 = 0x4000_0000;
/// RAM assumed without a device tree.
const DEFAULT_RAM_SIZE: u64 = 128 << 20;

const _: () = assert!(MAX_VCPUS == devicetree::MAX_CPUS);

/// The platform as the guest sees it.
#[derive(Clone, Copy, Debug)]
pub struct Platform {
    /// MPIDR of each CPU, in device-tree order.
    pub mpidrs: [u64; MAX_VCPUS],
    /// How many of `mpidrs` are valid.
    pub cpus: usize,
    /// CPU nodes beyond [`MAX_VCPUS`] that are left out.
    pub cpus_left_out: usize,
    /// No device tree (so the RAM size is a guess too): `mpidrs` are guesses
    /// (Aff0 = 0, 1, 2...) that PSCI CPU_ON confirms or refuses, stopping at
    /// the first refusal.
    pub cpus_guessed: bool,
    /// The interrupt controller; `None` when the device tree has none (the
    /// workloads that need interrupts are then skipped).
    pub gic: Option<GicInfo>,
    /// Where it came from (`arm,gic-v3` or a fallback).
    pub gic_source: &'static str,
    /// End of the RAM region that holds the guest (first byte past it).
    pub ram_end: u64,
    /// PSCI conduit is SMC (`/psci` `method = "smc"`).
    pub psci_smc: bool,
    /// `/chosen/bootargs`, empty if none.
    pub bootargs: &'static str,
    /// A PL011 is there to print to (false: a domain without an emulated
    /// UART, which only has the `CONSOLE_WRITE` hypercall).
    pub pl011: bool,
    /// A second PL011 (passed through): base and INTID (`uartloop`).
    pub second_pl011: Option<(u64, u32)>,
}

/// ID_AA64PFR0_EL1.GIC says the GICv3 system registers exist.
pub fn cpu_has_gicv3_sysregs() -> bool {
    use aarch64_cpu::registers::ID_AA64PFR0_EL1;
    use tock_registers::interfaces::Readable;
    ID_AA64PFR0_EL1.get() >> 24 & 0xF != 0
}

/// The platform without a device tree: QEMU virt's layout, GIC version from
/// ID_AA64PFR0_EL1, and up to [`MAX_VCPUS`] CPUs guessed as Aff0 = 0, 1, 2...
/// in `own_mpidr`'s cluster (QEMU virt and the hypervisor number vCPUs so).
pub fn defaults(own_mpidr: u64) -> Platform {
    let mut mpidrs = [0; MAX_VCPUS];
    for (aff0, mpidr) in mpidrs.iter_mut().enumerate() {
        *mpidr = (own_mpidr & !0xFF) | aff0 as u64;
    }
    let v3 = cpu_has_gicv3_sysregs();
    Platform {
        mpidrs,
        cpus: MAX_VCPUS,
        cpus_left_out: 0,
        cpus_guessed: true,
        gic: Some(GicInfo {
            version: if v3 { Version::V3 } else { Version::V2 },
            gicd: DEFAULT_GICD,
            second: if v3 { DEFAULT_GICR } else { DEFAULT_GICC },
        }),
        gic_source: if v3 {
            "default (ID_AA64PFR0_EL1.GIC)"
        } else {
            "default (no GICv3 sysregs)"
        },
        ram_end: RAM_BASE + DEFAULT_RAM_SIZE,
        psci_smc: false,
        bootargs: "",
        pl011: true,
        second_pl011: None,
    }
}

/// Why the device tree was not used.
#[derive(Clone, Copy, Debug)]
pub enum DtbError {
    /// `x0` was 0: the loader passed none.
    Missing,
    /// Not 8-byte aligned or not in the guest's RAM gigabyte.
    BadAddress(u64),
    /// The blob itself.
    Tree(DtError),
}

impl fmt::Display for DtbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing => write!(f, "none passed (x0 = 0)"),
            Self::BadAddress(a) => write!(f, "address {a:#x} is not 8-byte aligned guest RAM"),
            Self::Tree(e) => e.fmt(f),
        }
    }
}

/// `len` bytes of guest RAM at `address`.
fn ram_bytes(address: u64, len: usize) -> &'static [u8] {
    // SAFETY: callers pass an address in the guest's own Normal-mapped RAM
    // gigabyte (checked in `parse`) and a length that stays inside it; the
    // boot protocol puts the DTB there and nothing in this guest writes to
    // it, so the bytes stay valid and unchanged for the guest's lifetime.
    unsafe { core::slice::from_raw_parts(address as *const u8, len) }
}

/// Reads the device tree at `address`.
pub fn parse(address: u64) -> Result<Platform, DtbError> {
    if address == 0 {
        return Err(DtbError::Missing);
    }
    // The tree must sit in the Normal-mapped gigabyte of RAM the guest runs
    // in: a wild pointer elsewhere would fault or read device registers.
    let gigabyte_end = (RAM_BASE >> 30 << 30) + (1 << 30);
    if !address.is_multiple_of(8) || address >> 30 != RAM_BASE >> 30 {
        return Err(DtbError::BadAddress(address));
    }
    let header_len = 40.min((gigabyte_end - address) as usize);
    let size = devicetree::blob_size(ram_bytes(address, header_len)).map_err(DtbError::Tree)?;
    if address + size as u64 > gigabyte_end {
        return Err(DtbError::BadAddress(address));
    }
    let dt = devicetree::parse(ram_bytes(address, size), RAM_BASE).map_err(DtbError::Tree)?;
    let (gic, gic_source) = match dt.gic {
        Some(node) => {
            let version = match node.kind {
                GicKind::V2 => Version::V2,
                GicKind::V3 => Version::V3,
            };
            let source = match node.kind {
                GicKind::V2 => "device tree GICv2",
                GicKind::V3 => "device tree arm,gic-v3",
            };
            let info = GicInfo {
                version,
                gicd: node.distributor as usize,
                second: node.second as usize,
            };
            (Some(info), source)
        }
        None => (None, "none in the device tree"),
    };
    Ok(Platform {
        mpidrs: dt.mpidrs,
        cpus: dt.cpus,
        cpus_left_out: dt.cpus_left_out,
        cpus_guessed: false,
        gic,
        gic_source,
        ram_end: dt.ram.map_or(RAM_BASE + DEFAULT_RAM_SIZE, |(_, end)| end),
        psci_smc: dt.psci_smc,
        bootargs: dt.bootargs,
        pl011: dt.pl011,
        second_pl011: dt.second_pl011,
    })
}
