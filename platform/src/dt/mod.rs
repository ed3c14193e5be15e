//! Device-tree parsing: CPUs and topology (`/cpus`, `cpu-map`), memory, GIC, PSCI,
//! console UART, architected timer and `/chosen`.
//!
//! [`parse`] turns a flattened device tree into a [`MachineDescription`] that owns
//! its data. Problems the hypervisor can work around (a cpu node without `reg`, a
//! broken `cpu-map`, an unknown GIC, ...) are [`DtWarning`]s carried in the result,
//! each naming the node and property; only a blob that cannot be read, or that has
//! no usable CPU, is a [`DtError`]. Nothing here panics on any input.
//!
//! [`MachineDescription::topology`] is the one conversion to a `sched` [`Topology`]
//! and [`write_topology_report`] the one printer: the boot banner and
//! `cargo xtask topology` both use them, so they always agree.

#![forbid(unsafe_code)]

mod classes;
mod cpus;
mod devices;
mod error;
mod fdt;
mod report;
pub mod xen_cpupool;

use alloc::string::String;
use alloc::vec::Vec;

use sched::Topology;

pub use classes::{ClassKind, CpuClass, rank_classes, write_cpu_list};
pub use error::{DtError, DtWarning, StructureProblem};
pub use fdt::{FDT_MAGIC, is_fdt};
pub use report::write_topology_report;

/// Everything the ARM boot needs from a device tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MachineDescription {
    /// The root `model` string.
    pub model: Option<String>,
    /// The root `compatible` strings.
    pub compatible: Vec<String>,
    /// Every cpu node with a valid, unique `reg`, in device-tree order, whether
    /// available or not. [`Self::logical_cpus`] gives the ones that get an index.
    pub cpus: Vec<CpuNode>,
    /// Where the socket/cluster/core/thread positions came from.
    pub topology_source: TopologySource,
    /// RAM from the `/memory*` nodes, translated to CPU addresses.
    pub memory: Vec<MemoryRegion>,
    /// Memory the hypervisor must not hand out: the FDT reservation block and
    /// `/reserved-memory` children with a static `reg`.
    pub reserved: Vec<ReservedRegion>,
    /// The interrupt controller, if a supported GIC was found.
    pub gic: Option<Gic>,
    /// PSCI firmware interface, if `/psci` is present and usable.
    pub psci: Option<Psci>,
    /// The console UART (`/chosen/stdout-path`, else the first `arm,pl011`).
    pub console: Option<Uart>,
    /// The architected timer's interrupts.
    pub timer: Option<Timer>,
    /// `/chosen/bootargs`.
    pub bootargs: Option<String>,
    /// `/chosen` `linux,initrd-start` and `linux,initrd-end`.
    pub initrd: Option<MemoryRegion>,
    /// Every other available node with a `compatible` and a decodable
    /// `reg` (the devices a domain may be given), in tree order.
    pub devices: Vec<DeviceNode>,
    /// Everything that was wrong but worked around, in the order found.
    pub warnings: Vec<DtWarning>,
}

/// A device node: what a pass-through device's guest node is made from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceNode {
    /// Node path, e.g. `/pl031@9010000`.
    pub path: String,
    /// `compatible` strings, most specific first.
    pub compatible: Vec<String>,
    /// `reg`, translated to CPU addresses.
    pub regions: Vec<MemoryRegion>,
    /// `interrupts` (empty when absent or not GIC specifiers).
    pub interrupts: Vec<Interrupt>,
}

impl DeviceNode {
    /// The node's name without its unit address (`pl031`).
    pub fn base_name(&self) -> &str {
        let name = self.path.rsplit('/').next().unwrap_or("");
        name.split('@').next().unwrap_or(name)
    }
}

/// One `/cpus/cpu@*` node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CpuNode {
    /// Node path, e.g. `/cpus/cpu@100`.
    pub path: String,
    /// The MPIDR affinity fields from `reg` (Aff3 in bits 39:32, Aff2..Aff0 in 23:0).
    pub mpidr: u64,
    /// How to start the CPU.
    pub enable_method: EnableMethod,
    /// `capacity-dmips-mhz`, as given.
    pub capacity: Option<u32>,
    /// The first `compatible` string (e.g. `arm,cortex-a72`).
    pub compatible: Option<String>,
    /// `status` is absent or "okay": the CPU gets a logical index.
    pub available: bool,
    /// `numa-node-id`.
    pub numa_node: Option<u32>,
    /// Raw position keys (before dense renumbering): cpu-map node order, or MPIDR
    /// fields for the fallback. Only their order matters.
    pub position: RawPosition,
}

pub use crate::position::RawPosition;

/// How the hypervisor starts a secondary CPU ([`MachineDescription::start_method`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartMethod {
    /// Write the entry point to `release_address`, then `sev`.
    SpinTable {
        /// `cpu-release-addr`.
        release_address: u64,
    },
    /// PSCI `CPU_ON` through this conduit.
    Psci(PsciMethod),
    /// The device tree gives no way to start it; the reason, for the log.
    Unstartable(&'static str),
}

/// A CPU node's `enable-method`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnableMethod {
    /// PSCI `CPU_ON`.
    Psci,
    /// Write the entry point to `release_address`, then `sev`.
    SpinTable {
        /// `cpu-release-addr`.
        release_address: u64,
    },
    /// No `enable-method`: only the boot CPU can use it.
    Missing,
    /// A method we cannot use (unknown name, or spin-table without a release address).
    Unsupported(String),
}

impl EnableMethod {
    /// Short name for reports.
    pub fn name(&self) -> &str {
        match self {
            Self::Psci => "psci",
            Self::SpinTable { .. } => "spin-table",
            Self::Missing => "none",
            Self::Unsupported(name) => name,
        }
    }
}

/// Where the topology came from; the boot log states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologySource {
    /// `/cpus/cpu-map`.
    CpuMap,
    /// One cluster per MPIDR Aff1 value (Aff2/Aff3 also separate clusters), one
    /// core per Aff0, no SMT, one socket.
    MpidrFallback {
        /// Why the cpu-map was not used.
        reason: FallbackReason,
    },
}

/// Why the MPIDR fallback was used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FallbackReason {
    /// The tree has no `/cpus/cpu-map`.
    NoCpuMap,
    /// The `cpu-map` is broken; the warnings say how.
    InvalidCpuMap,
}

/// A physical address range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    /// First byte.
    pub base: u64,
    /// Length in bytes.
    pub size: u64,
}

/// A range the hypervisor must not allocate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReservedRegion {
    /// The range.
    pub region: MemoryRegion,
    /// The `/reserved-memory` child, or `None` for the FDT reservation block.
    pub path: Option<String>,
    /// `no-map`: not even mapped.
    pub no_map: bool,
}

/// GIC architecture version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicVersion {
    /// GICv2 (GIC-400, Cortex-A15 GIC, ...): GICD, GICC, GICH, GICV.
    V2,
    /// GICv3/v4: GICD, redistributor regions, then optional GICC, GICH, GICV.
    V3,
}

/// The interrupt controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gic {
    /// Node path.
    pub path: String,
    /// The supported compatible string that matched.
    pub compatible: String,
    /// Version implied by `compatible`.
    pub version: GicVersion,
    /// All `reg` regions in order, translated to CPU addresses.
    pub regions: Vec<MemoryRegion>,
    /// `#redistributor-regions` (v3; 1 when absent; 0 for v2).
    pub redistributor_regions: usize,
    /// The maintenance interrupt (`interrupts`), used by the virtual interface.
    pub maintenance_interrupt: Option<Interrupt>,
}

impl Gic {
    /// GICD.
    pub fn distributor(&self) -> Option<MemoryRegion> {
        self.regions.first().copied()
    }

    /// GICv3 redistributor regions (empty for v2).
    pub fn redistributors(&self) -> &[MemoryRegion] {
        let end = (1 + self.redistributor_regions).min(self.regions.len());
        self.regions.get(1..end).unwrap_or(&[])
    }

    /// The regions after GICD (and the redistributors on v3): GICC, GICH, GICV.
    fn cpu_side(&self) -> &[MemoryRegion] {
        let start = (1 + self.redistributor_regions).min(self.regions.len());
        self.regions.get(start..).unwrap_or(&[])
    }

    /// GICC, the CPU interface (always on v2; legacy-compatibility only on v3).
    pub fn cpu_interface(&self) -> Option<MemoryRegion> {
        self.cpu_side().first().copied()
    }

    /// GICH, the virtual interface control registers.
    pub fn hypervisor_interface(&self) -> Option<MemoryRegion> {
        self.cpu_side().get(1).copied()
    }

    /// GICV, the virtual CPU interface.
    pub fn virtual_cpu_interface(&self) -> Option<MemoryRegion> {
        self.cpu_side().get(2).copied()
    }
}

/// PSCI conduit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsciMethod {
    /// `smc #0`.
    Smc,
    /// `hvc #0`.
    Hvc,
}

/// The `/psci` node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Psci {
    /// Node path.
    pub path: String,
    /// `method`.
    pub method: PsciMethod,
    /// `compatible` strings (`arm,psci-1.0`, `arm,psci-0.2`, `arm,psci`).
    pub compatible: Vec<String>,
    /// `cpu_on` function id (PSCI 0.1 only; 0.2+ use the standard id).
    pub cpu_on: Option<u32>,
}

/// The console UART.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Uart {
    /// Node path.
    pub path: String,
    /// `compatible` strings (`arm,pl011`, `arm,sbsa-uart`, `brcm,bcm2835-aux-uart`, ...).
    pub compatible: Vec<String>,
    /// Register base (CPU address) and size.
    pub region: MemoryRegion,
    /// The options after `:` in stdout-path, e.g. `115200n8`.
    pub options: Option<String>,
    /// Its interrupt (the first `interrupts` entry), for interrupt-driven
    /// console input; `None` when absent or not decodable.
    pub interrupt: Option<Interrupt>,
}

/// SPI or PPI, the first cell of a GIC interrupt specifier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InterruptKind {
    /// Shared peripheral interrupt (INTID 32 + number).
    Spi,
    /// Private peripheral interrupt (INTID 16 + number).
    Ppi,
}

/// A GIC interrupt specifier: type, number, flags (trigger in bits 3:0, PPI CPU mask
/// in bits 15:8), per the `arm,gic` binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interrupt {
    /// SPI or PPI.
    pub kind: InterruptKind,
    /// Number within its kind.
    pub number: u32,
    /// The raw flags cell.
    pub flags: u32,
}

impl Interrupt {
    /// The GIC INTID.
    pub fn intid(&self) -> u32 {
        match self.kind {
            InterruptKind::Ppi => self.number.saturating_add(16),
            InterruptKind::Spi => self.number.saturating_add(32),
        }
    }

    /// Trigger type: 1 edge rising, 2 edge falling, 4 level high, 8 level low.
    pub fn trigger(&self) -> u32 {
        self.flags & 0xf
    }

    /// Whether the interrupt is level-sensitive.
    pub fn is_level(&self) -> bool {
        self.flags & 0xc != 0
    }
}

/// The `arm,armv8-timer` node's PPIs, in the binding's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    /// Node path.
    pub path: String,
    /// Secure EL1 physical timer.
    pub secure_physical: Option<Interrupt>,
    /// Non-secure EL1 physical timer.
    pub physical: Option<Interrupt>,
    /// EL1 virtual timer (what guests use).
    pub virtual_timer: Option<Interrupt>,
    /// EL2 hypervisor physical timer (the 4th entry): the hypervisor's own tick.
    pub hypervisor_physical: Option<Interrupt>,
    /// EL2 hypervisor virtual timer (5th entry, ARMv8.1 VHE).
    pub hypervisor_virtual: Option<Interrupt>,
    /// `clock-frequency` (only when firmware failed to program CNTFRQ_EL0).
    pub clock_frequency: Option<u32>,
}

/// Parses a flattened device tree. The blob may be longer than its header's
/// `totalsize`; the rest is ignored.
pub fn parse(blob: &[u8]) -> Result<MachineDescription, DtError> {
    let tree = fdt::Tree::parse(blob)?;
    let mut warnings = Vec::new();
    let (cpus, topology_source) = cpus::parse_cpus(&tree, &mut warnings)?;
    let mut description = MachineDescription {
        model: tree.str_property(0, "model").map(String::from),
        compatible: tree
            .strings(0, "compatible")
            .into_iter()
            .map(String::from)
            .collect(),
        cpus,
        topology_source,
        memory: Vec::new(),
        reserved: Vec::new(),
        gic: None,
        psci: None,
        console: None,
        timer: None,
        bootargs: None,
        initrd: None,
        devices: Vec::new(),
        warnings: Vec::new(),
    };
    devices::parse_devices(&tree, &mut description, &mut warnings);
    description.warnings = warnings;
    // Guarantees that `topology()` succeeds on every description `parse` returns.
    description.topology()?;
    Ok(description)
}

impl MachineDescription {
    /// The CPUs that get a logical index, in index order (device-tree order of
    /// available CPUs): `logical_cpus().nth(i)` is topology CPU `i`.
    pub fn logical_cpus(&self) -> impl Iterator<Item = &CpuNode> {
        self.cpus.iter().filter(|cpu| cpu.available)
    }

    /// The scheduler topology: one CPU per available cpu node, indices in
    /// device-tree order, socket/cluster/core/thread renumbered densely from 0
    /// within their parent, `hw_id` = MPIDR affinity.
    pub fn topology(&self) -> Result<Topology, DtError> {
        cpus::build_topology(self)
    }

    /// How to start the available CPU whose MPIDR is `mpidr`: the spin table
    /// when its node says `spin-table` (the Raspberry Pi firmware's way), PSCI
    /// `CPU_ON` through the `/psci` conduit otherwise (also for a node with a
    /// missing or unknown `enable-method`, as Linux does when `/psci`
    /// exists), and nothing without either.
    pub fn start_method(&self, mpidr: u64) -> StartMethod {
        let node = self
            .logical_cpus()
            .find(|cpu| cpu.mpidr == mpidr)
            .map(|cpu| &cpu.enable_method);
        match (node, &self.psci) {
            (None, _) => StartMethod::Unstartable("no available cpu node has this MPIDR"),
            (Some(&EnableMethod::SpinTable { release_address }), _) => {
                StartMethod::SpinTable { release_address }
            }
            (Some(_), Some(psci)) => StartMethod::Psci(psci.method),
            (Some(EnableMethod::Psci), None) => StartMethod::Unstartable(
                "enable-method is psci but the device tree has no usable /psci node",
            ),
            (Some(_), None) => StartMethod::Unstartable(
                "no usable enable-method (spin-table with cpu-release-addr, or psci) and no /psci node",
            ),
        }
    }

    /// The device node whose first `reg` region starts at `base`.
    pub fn device_at(&self, base: u64) -> Option<&DeviceNode> {
        self.devices
            .iter()
            .find(|d| d.regions.first().is_some_and(|r| r.base == base))
    }

    /// Checks what booting the hypervisor needs beyond CPUs: memory and a GIC.
    pub fn check_bootable(&self) -> Result<(), DtError> {
        if self.memory.is_empty() {
            return Err(DtError::NoMemory);
        }
        if self.gic.is_none() {
            return Err(DtError::NoGic);
        }
        Ok(())
    }
}
