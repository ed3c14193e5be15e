//! What the guest learns from its device tree: CPUs, GIC, RAM, PSCI conduit
//! and boot arguments. Without a usable tree it assumes QEMU virt's layout.

use fdt::Fdt;

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

/// The platform as the guest sees it.
#[derive(Clone, Copy, Debug)]
pub struct Platform {
    /// MPIDR of each CPU node, in device-tree order.
    pub mpidrs: [u64; MAX_VCPUS],
    /// How many of `mpidrs` are valid.
    pub cpus: usize,
    /// CPU nodes beyond [`MAX_VCPUS`] that are left out.
    pub cpus_left_out: usize,
    /// No device tree (so the RAM size is a guess too): `mpidrs` are guesses (Aff0 = 0, 1, 2...) that
    /// PSCI CPU_ON confirms or refuses, stopping at the first refusal.
    pub cpus_guessed: bool,
    /// The interrupt controller.
    pub gic: GicInfo,
    /// Where it came from (`arm,gic-v3` or a fallback).
    pub gic_source: &'static str,
    /// End of the RAM region that holds the guest (first byte past it).
    pub ram_end: u64,
    /// PSCI conduit is SMC (`/psci` `method = "smc"`).
    pub psci_smc: bool,
    /// `/chosen/bootargs`, empty if none.
    pub bootargs: &'static str,
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
        gic: GicInfo {
            version: if v3 { Version::V3 } else { Version::V2 },
            gicd: DEFAULT_GICD,
            second: if v3 { DEFAULT_GICR } else { DEFAULT_GICC },
        },
        gic_source: if v3 {
            "default (ID_AA64PFR0_EL1.GIC)"
        } else {
            "default (no GICv3 sysregs)"
        },
        ram_end: RAM_BASE + DEFAULT_RAM_SIZE,
        psci_smc: false,
        bootargs: "",
    }
}

/// Why the device tree was not used.
#[derive(Clone, Copy, Debug)]
pub enum DtbError {
    /// `x0` was 0: the loader passed none.
    Missing,
    /// Not 8-byte aligned or not in the guest's RAM gigabyte.
    BadAddress(u64),
    /// The blob does not parse.
    Invalid,
    /// No CPU node with a `reg`.
    NoCpus,
    /// No GICv2/v3 node with two `reg` regions.
    NoGic,
}

impl core::fmt::Display for DtbError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Missing => write!(f, "none passed (x0 = 0)"),
            Self::BadAddress(a) => write!(f, "address {a:#x} is not 8-byte aligned guest RAM"),
            Self::Invalid => write!(f, "not a valid flattened device tree"),
            Self::NoCpus => write!(f, "no CPU nodes"),
            Self::NoGic => write!(f, "no GICv2/GICv3 node with two reg regions"),
        }
    }
}

fn first_two_regions(node: fdt::node::FdtNode<'_, '_>) -> Option<(usize, usize)> {
    let mut reg = node.reg()?;
    let a = reg.next()?.starting_address as usize;
    let b = reg.next()?.starting_address as usize;
    Some((a, b))
}

/// Reads the device tree at `address`.
pub fn parse(address: u64) -> Result<Platform, DtbError> {
    // The tree must sit in the Normal-mapped gigabyte of RAM the guest runs
    // in: a wild pointer elsewhere would fault or read device registers.
    if address == 0 {
        return Err(DtbError::Missing);
    }
    if !address.is_multiple_of(8) || address >> 30 != RAM_BASE >> 30 {
        return Err(DtbError::BadAddress(address));
    }
    // SAFETY: the address is in guest RAM (checked above), identity-mapped;
    // the boot protocol puts the DTB there and nothing in this guest writes
    // to it, so it lives as long as the guest ('static).
    let fdt: Fdt<'static> =
        unsafe { Fdt::from_ptr(address as *const u8) }.map_err(|_| DtbError::Invalid)?;

    let mut mpidrs = [0; MAX_VCPUS];
    let mut cpus = 0;
    let mut cpus_left_out = 0;
    let cpu_nodes = fdt.find_node("/cpus").ok_or(DtbError::NoCpus)?;
    for node in cpu_nodes.children() {
        let is_cpu = node
            .property("device_type")
            .and_then(|p| p.as_str())
            .is_some_and(|t| t == "cpu");
        let Some(mpidr) = node.reg().and_then(|mut r| r.next()) else {
            continue;
        };
        if !is_cpu {
            continue;
        }
        if cpus == MAX_VCPUS {
            cpus_left_out += 1;
            continue;
        }
        mpidrs[cpus] = mpidr.starting_address as u64;
        cpus += 1;
    }
    if cpus == 0 {
        return Err(DtbError::NoCpus);
    }

    let (gic, gic_source) = if let Some(node) = fdt.find_compatible(&["arm,gic-v3"]) {
        let (gicd, gicr) = first_two_regions(node).ok_or(DtbError::NoGic)?;
        let gic = GicInfo {
            version: Version::V3,
            gicd,
            second: gicr,
        };
        (gic, "device tree arm,gic-v3")
    } else if let Some(node) =
        fdt.find_compatible(&["arm,cortex-a15-gic", "arm,gic-400", "arm,cortex-a9-gic"])
    {
        let (gicd, gicc) = first_two_regions(node).ok_or(DtbError::NoGic)?;
        let gic = GicInfo {
            version: Version::V2,
            gicd,
            second: gicc,
        };
        (gic, "device tree GICv2")
    } else {
        return Err(DtbError::NoGic);
    };

    let mut ram_end = RAM_BASE + DEFAULT_RAM_SIZE;
    for node in fdt.all_nodes() {
        let is_memory = node
            .property("device_type")
            .and_then(|p| p.as_str())
            .is_some_and(|t| t == "memory");
        if !is_memory {
            continue;
        }
        for region in node.reg().into_iter().flatten() {
            let start = region.starting_address as u64;
            let end = start + region.size.unwrap_or(0) as u64;
            if (start..end).contains(&RAM_BASE) || start == RAM_BASE {
                ram_end = end;
            }
        }
    }

    let psci_smc = fdt
        .find_node("/psci")
        .and_then(|n| n.property("method"))
        .and_then(|p| p.as_str())
        .is_some_and(|m| m == "smc");
    let bootargs = fdt
        .find_node("/chosen")
        .and_then(|n| n.property("bootargs"))
        .and_then(|p| p.as_str())
        .unwrap_or("");

    Ok(Platform {
        mpidrs,
        cpus,
        cpus_left_out,
        cpus_guessed: false,
        gic,
        gic_source,
        ram_end,
        psci_smc,
        bootargs,
    })
}
