//! The device tree a guest domain boots with (passed in x0).
//!
//! Same shape as QEMU `virt` and Xen dom0less describe a VM, so one guest
//! image runs on QEMU bare and under the hypervisor: `/memory@…`, `/cpus`
//! with PSCI-started `cpu@…` nodes whose `reg` is the virtual MPIDR
//! ([`crate::arm::vgic::vcpu_affinity`]) and a `cpu-map` exposing the domain's
//! sched units, `/psci` over HVC, the GIC at the [`crate::arm::vgic`] addresses,
//! the architected timer, the PL011 console with its `apb-pclk` (unless the
//! domain has no console), its pass-through devices (compatible, reg,
//! interrupts; AMBA ones clocked from `apb-pclk`), `/chosen`.
//!
//! ```text
//! let blob = guest_device_tree(&GuestDtSpec {
//!     vcpus: 4,
//!     ..GuestDtSpec::new(0x4000_0000, 256 << 20, GuestGicVersion::V3)
//! })?;
//! ```

pub mod writer;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::arm::vgic::{
    GICC_BASE_V2, GICD_BASE, GICR_BASE, GICR_STRIDE, GuestGicVersion, MAX_VCPUS_V2, MAX_VCPUS_V3,
    vcpu_affinity,
};
pub use writer::{FdtWriteError, FdtWriter};

use crate::config::Trigger;
use crate::passthrough::PlannedDevice;

/// Guest-physical base of the console PL011 (QEMU `virt`).
pub const UART_BASE: u64 = 0x0900_0000;
/// Size of the PL011 register frame.
pub const UART_SIZE: u64 = 0x1000;
// The redistributors of the largest GICv3 guest end before the UART.
const _: () = assert!(GICR_BASE + GICR_STRIDE * MAX_VCPUS_V3 as u64 <= UART_BASE);
/// The PL011's SPI number (INTID 33), as on QEMU `virt`.
pub const UART_SPI: u32 = 1;
/// Frequency of the fixed `apb-pclk` the PL011 is clocked from (QEMU `virt`).
pub const APB_PCLK_HZ: u32 = 24_000_000;
/// GICv2 distributor frame size given to the guest.
pub const GICD_SIZE_V2: u64 = 0x1000;
/// GICv2 CPU interface size (two 4 KiB pages: GICC_DIR is in the second).
pub const GICC_SIZE_V2: u64 = 0x2000;
/// GICv3 distributor frame size.
pub const GICD_SIZE_V3: u64 = crate::arm::vgic::GICD_SIZE;
/// Longest `bootargs` accepted, NUL excluded: Linux arm64 `COMMAND_LINE_SIZE`
/// is 2048 including the NUL.
pub const MAX_BOOTARGS: usize = 2047;
/// The `model` string when the spec gives none.
pub const DEFAULT_MODEL: &str = "hv guest (QEMU virt layout)";
/// Guest-physical range holding the emulated GIC and UART, `[start, end)`:
/// RAM and pass-through devices must stay clear of it.
pub const EMULATED_WINDOW: (u64, u64) = (GICD_BASE, UART_BASE + UART_SIZE);
const DEVICE_WINDOW: (u64, u64) = EMULATED_WINDOW;

/// The architected timer PPIs, in `arm,armv8-timer` binding order:
/// secure physical, non-secure physical, virtual, hypervisor.
pub const TIMER_PPIS: [u32; 4] = [13, 14, 11, 10];

const PHANDLE_GIC: u32 = 1;
const PHANDLE_APB_PCLK: u32 = 2;
/// vCPU `i`'s node gets phandle `PHANDLE_CPU_BASE + i`.
const PHANDLE_CPU_BASE: u32 = 0x100;
/// Cluster `n`'s shared L2 cache node gets phandle `PHANDLE_L2_BASE + n`.
const PHANDLE_L2_BASE: u32 = 0x200;

/// GIC interrupt specifier type cells and flags (`arm,gic` binding).
const GIC_SPI: u32 = 0;
const GIC_PPI: u32 = 1;
const IRQ_TYPE_LEVEL_HIGH: u32 = 4;
const IRQ_TYPE_EDGE_RISING: u32 = 1;

/// How each sched unit's vCPUs appear in `cpu-map`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnitShape {
    /// A unit is one core, its vCPUs that core's threads (core granularity).
    Threads,
    /// A unit is one cluster, its vCPUs that cluster's cores (cluster granularity).
    Cores,
}

/// The domain's sched units as the guest should see them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnitTopology<'a> {
    /// vCPU indices of each unit. Empty: one flat cluster of single-thread
    /// cores. Otherwise every vCPU must be in exactly one unit.
    pub units: &'a [&'a [usize]],
    /// How a unit is shown.
    pub shape: UnitShape,
}

impl UnitTopology<'_> {
    /// No units: one cluster, one core per vCPU.
    pub const FLAT: UnitTopology<'static> = UnitTopology {
        units: &[],
        shape: UnitShape::Cores,
    };
}

/// What the guest's device tree describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuestDtSpec<'a> {
    /// Number of vCPUs (vCPU `i` has the [`vcpu_affinity`] of `i`).
    pub vcpus: usize,
    /// Guest-physical base of RAM.
    pub ram_base: u64,
    /// RAM size in bytes.
    pub ram_size: u64,
    /// Which GIC the guest is given.
    pub gic: GuestGicVersion,
    /// Root `model`.
    pub model: &'a str,
    /// `/chosen/bootargs` (omitted when empty).
    pub bootargs: &'a str,
    /// Guest-physical initrd `(start, end)`, end exclusive, inside RAM.
    pub initrd: Option<(u64, u64)>,
    /// Whether the domain has the emulated PL011 console (and so the
    /// `pl011@9000000` node, its clock, the `serial0` alias and `stdout-path`).
    pub console: bool,
    /// The sched units shown in `cpu-map`.
    pub topology: UnitTopology<'a>,
    /// Pass-through devices, each a node at its guest address.
    pub devices: &'a [PlannedDevice],
}

impl GuestDtSpec<'static> {
    /// One vCPU, flat topology, no bootargs, no initrd, [`DEFAULT_MODEL`].
    pub const fn new(ram_base: u64, ram_size: u64, gic: GuestGicVersion) -> Self {
        Self {
            vcpus: 1,
            ram_base,
            ram_size,
            gic,
            model: DEFAULT_MODEL,
            bootargs: "",
            initrd: None,
            console: true,
            topology: UnitTopology::FLAT,
            devices: &[],
        }
    }
}

impl<'a> GuestDtSpec<'a> {
    /// The spec for a configured domain: its vCPUs, RAM, bootargs and
    /// console, with the given GIC and sched-unit layout (no initrd).
    pub fn for_domain(
        domain: &'a crate::config::DomainConfig,
        gic: GuestGicVersion,
        topology: UnitTopology<'a>,
    ) -> Self {
        Self {
            vcpus: domain.vcpus as usize,
            ram_base: domain.memory_base,
            // An absurd size saturates, and `guest_device_tree` rejects it.
            ram_size: domain.memory_mib.saturating_mul(1 << 20),
            gic,
            model: DEFAULT_MODEL,
            bootargs: &domain.bootargs,
            initrd: None,
            console: domain.console == crate::config::Console::Vpl011,
            topology,
            devices: &[],
        }
    }
}

/// Why a guest device tree could not be built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestDtError {
    /// A domain needs at least one vCPU.
    NoVcpus,
    /// More vCPUs than the guest's GIC can address.
    TooManyVcpus {
        /// Requested.
        vcpus: usize,
        /// The limit for `gic`.
        max: usize,
        /// The GIC version that limits it.
        gic: GuestGicVersion,
    },
    /// RAM is empty, wraps around, or overlaps the GIC/UART window.
    BadRam {
        /// Base.
        base: u64,
        /// Size.
        size: u64,
    },
    /// `bootargs` longer than [`MAX_BOOTARGS`].
    BootargsTooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The initrd is empty/reversed or not inside RAM.
    BadInitrd {
        /// Start.
        start: u64,
        /// End (exclusive).
        end: u64,
    },
    /// A unit names a vCPU the domain does not have.
    UnitVcpuOutOfRange {
        /// The unit's index.
        unit: usize,
        /// The bad vCPU index.
        vcpu: usize,
    },
    /// A vCPU is listed twice (in one unit or in two).
    VcpuInTwoUnits {
        /// The vCPU.
        vcpu: usize,
    },
    /// A vCPU is in no unit (while units are given).
    VcpuInNoUnit {
        /// The vCPU.
        vcpu: usize,
    },
    /// A unit with no vCPU.
    EmptyUnit {
        /// The unit's index.
        unit: usize,
    },
    /// The encoder refused the tree (a NUL in a string, ...).
    Encoding(FdtWriteError),
}

impl fmt::Display for GuestDtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoVcpus => write!(f, "guest device tree: domain has no vCPU"),
            Self::TooManyVcpus { vcpus, max, gic } => write!(
                f,
                "guest device tree: {vcpus} vCPUs but a {gic:?} guest can have at most {max}"
            ),
            Self::BadRam { base, size } => write!(
                f,
                "guest device tree: RAM {base:#x}+{size:#x} is empty, wraps, or overlaps \
                 the device window {:#x}..{:#x}",
                DEVICE_WINDOW.0, DEVICE_WINDOW.1
            ),
            Self::BootargsTooLong { len } => write!(
                f,
                "guest device tree: bootargs are {len} bytes, at most {MAX_BOOTARGS}"
            ),
            Self::BadInitrd { start, end } => write!(
                f,
                "guest device tree: initrd {start:#x}..{end:#x} is empty or outside RAM"
            ),
            Self::UnitVcpuOutOfRange { unit, vcpu } => {
                write!(
                    f,
                    "guest device tree: unit {unit} names vCPU {vcpu}, which does not exist"
                )
            }
            Self::VcpuInTwoUnits { vcpu } => {
                write!(
                    f,
                    "guest device tree: vCPU {vcpu} is listed in more than one place"
                )
            }
            Self::VcpuInNoUnit { vcpu } => {
                write!(f, "guest device tree: vCPU {vcpu} is in no sched unit")
            }
            Self::EmptyUnit { unit } => write!(f, "guest device tree: unit {unit} is empty"),
            Self::Encoding(e) => write!(f, "guest device tree: {e}"),
        }
    }
}

impl From<FdtWriteError> for GuestDtError {
    fn from(e: FdtWriteError) -> Self {
        Self::Encoding(e)
    }
}

/// Builds the flattened device tree for a guest described by `spec`.
pub fn guest_device_tree(spec: &GuestDtSpec<'_>) -> Result<Vec<u8>, GuestDtError> {
    validate(spec)?;
    let mut w = FdtWriter::new();
    w.begin_node("")?;
    w.property_u32("#address-cells", 2)?;
    w.property_u32("#size-cells", 2)?;
    w.property_string("compatible", "linux,dummy-virt")?;
    w.property_string("model", spec.model)?;
    w.property_u32("interrupt-parent", PHANDLE_GIC)?;

    w.begin_node(&format!("memory@{:x}", spec.ram_base))?;
    w.property_string("device_type", "memory")?;
    w.property_cells("reg", &reg64(&[(spec.ram_base, spec.ram_size)]))?;
    w.end_node()?;

    write_cpus(&mut w, spec)?;

    w.begin_node("psci")?;
    w.property_strings("compatible", &["arm,psci-1.0", "arm,psci-0.2"])?;
    w.property_string("method", "hvc")?;
    w.end_node()?;

    write_gic(&mut w, spec)?;
    write_timer(&mut w, spec)?;

    let uart_path = format!("/pl011@{UART_BASE:x}");
    let amba = spec
        .devices
        .iter()
        .any(|d| d.compatible.iter().any(|c| c == "arm,primecell"));
    if spec.console || amba {
        write_apb_clock(&mut w)?;
    }
    if spec.console {
        write_console(&mut w, &uart_path)?;
    }
    for device in spec.devices {
        write_device(&mut w, device)?;
    }

    w.begin_node("chosen")?;
    if !spec.bootargs.is_empty() {
        w.property_string("bootargs", spec.bootargs)?;
    }
    if spec.console {
        w.property_string("stdout-path", &uart_path)?;
    }
    if let Some((start, end)) = spec.initrd {
        w.property_u64("linux,initrd-start", start)?;
        w.property_u64("linux,initrd-end", end)?;
    }
    w.end_node()?;

    w.end_node()?;
    Ok(w.finish()?)
}

fn validate(spec: &GuestDtSpec<'_>) -> Result<(), GuestDtError> {
    if spec.vcpus == 0 {
        return Err(GuestDtError::NoVcpus);
    }
    let max = match spec.gic {
        GuestGicVersion::V2 => MAX_VCPUS_V2,
        GuestGicVersion::V3 => MAX_VCPUS_V3,
    };
    if spec.vcpus > max {
        return Err(GuestDtError::TooManyVcpus {
            vcpus: spec.vcpus,
            max,
            gic: spec.gic,
        });
    }
    let bad_ram = GuestDtError::BadRam {
        base: spec.ram_base,
        size: spec.ram_size,
    };
    let ram_end = spec
        .ram_base
        .checked_add(spec.ram_size)
        .ok_or(bad_ram.clone())?;
    if spec.ram_size == 0 || (spec.ram_base < DEVICE_WINDOW.1 && DEVICE_WINDOW.0 < ram_end) {
        return Err(bad_ram);
    }
    if spec.bootargs.len() > MAX_BOOTARGS {
        return Err(GuestDtError::BootargsTooLong {
            len: spec.bootargs.len(),
        });
    }
    if let Some((start, end)) = spec.initrd
        && !(start < end && spec.ram_base <= start && end <= ram_end)
    {
        return Err(GuestDtError::BadInitrd { start, end });
    }
    let mut seen = alloc::vec![false; spec.vcpus];
    for (unit, vcpus) in spec.topology.units.iter().enumerate() {
        if vcpus.is_empty() {
            return Err(GuestDtError::EmptyUnit { unit });
        }
        for &vcpu in vcpus.iter() {
            let slot = seen
                .get_mut(vcpu)
                .ok_or(GuestDtError::UnitVcpuOutOfRange { unit, vcpu })?;
            if *slot {
                return Err(GuestDtError::VcpuInTwoUnits { vcpu });
            }
            *slot = true;
        }
    }
    if !spec.topology.units.is_empty()
        && let Some(vcpu) = seen.iter().position(|&listed| !listed)
    {
        return Err(GuestDtError::VcpuInNoUnit { vcpu });
    }
    Ok(())
}

/// `reg` cells for `#address-cells = 2`, `#size-cells = 2`.
fn reg64(ranges: &[(u64, u64)]) -> Vec<u32> {
    ranges
        .iter()
        .flat_map(|&(base, size)| {
            [
                (base >> 32) as u32,
                base as u32,
                (size >> 32) as u32,
                size as u32,
            ]
        })
        .collect()
}

fn write_cpus(w: &mut FdtWriter, spec: &GuestDtSpec<'_>) -> Result<(), FdtWriteError> {
    w.begin_node("cpus")?;
    // Aff2 and Aff3 are always 0 in the virtual layout, so one cell holds it.
    w.property_u32("#address-cells", 1)?;
    w.property_u32("#size-cells", 0)?;
    for vcpu in 0..spec.vcpus {
        let mpidr = vcpu_affinity(vcpu).to_mpidr() as u32;
        w.begin_node(&format!("cpu@{mpidr:x}"))?;
        w.property_string("device_type", "cpu")?;
        w.property_string("compatible", "arm,armv8")?;
        w.property_u32("reg", mpidr)?;
        w.property_string("enable-method", "psci")?;
        w.property_u32("next-level-cache", PHANDLE_L2_BASE + cluster_of(spec, vcpu))?;
        w.property_u32("phandle", PHANDLE_CPU_BASE + vcpu as u32)?;
        w.end_node()?;
    }
    write_cpu_map(w, spec)?;
    // One unified L2 per cpu-map cluster, shared by its vCPUs. Without cache
    // nodes Linux sees every CPU's last-level cache as private, so its
    // multi-core sched domain shrinks to one CPU and no longer contains the
    // SMT siblings ("BUG: arch topology borken").
    for cluster in 0..cluster_count(spec) {
        w.begin_node(&format!("l2-cache{cluster}"))?;
        w.property_string("compatible", "cache")?;
        w.property_u32("cache-level", 2)?;
        w.property_empty("cache-unified")?;
        w.property_u32("phandle", PHANDLE_L2_BASE + cluster)?;
        w.end_node()?;
    }
    w.end_node()
}

/// How many `clusterN` nodes `cpu-map` has.
fn cluster_count(spec: &GuestDtSpec<'_>) -> u32 {
    match spec.topology.shape {
        UnitShape::Cores if !spec.topology.units.is_empty() => spec.topology.units.len() as u32,
        _ => 1,
    }
}

/// The `cpu-map` cluster holding `vcpu` (0 unless each unit is a cluster).
fn cluster_of(spec: &GuestDtSpec<'_>, vcpu: usize) -> u32 {
    match spec.topology.shape {
        UnitShape::Cores => spec
            .topology
            .units
            .iter()
            .position(|unit| unit.contains(&vcpu))
            .unwrap_or(0) as u32,
        UnitShape::Threads => 0,
    }
}

/// `cpu-map` (Linux `Documentation/devicetree/bindings/cpu/cpu-topology.txt`):
/// `clusterN/coreM[/threadK]` leaves pointing at the cpu nodes by phandle.
fn write_cpu_map(w: &mut FdtWriter, spec: &GuestDtSpec<'_>) -> Result<(), FdtWriteError> {
    let leaf = |w: &mut FdtWriter, name: &str, vcpu: usize| -> Result<(), FdtWriteError> {
        w.begin_node(name)?;
        w.property_u32("cpu", PHANDLE_CPU_BASE + vcpu as u32)?;
        w.end_node()
    };
    w.begin_node("cpu-map")?;
    let units = spec.topology.units;
    if units.is_empty() {
        w.begin_node("cluster0")?;
        for vcpu in 0..spec.vcpus {
            leaf(w, &format!("core{vcpu}"), vcpu)?;
        }
        w.end_node()?;
    } else {
        match spec.topology.shape {
            UnitShape::Threads => {
                w.begin_node("cluster0")?;
                for (core, unit) in units.iter().enumerate() {
                    w.begin_node(&format!("core{core}"))?;
                    for (thread, &vcpu) in unit.iter().enumerate() {
                        leaf(w, &format!("thread{thread}"), vcpu)?;
                    }
                    w.end_node()?;
                }
                w.end_node()?;
            }
            UnitShape::Cores => {
                for (cluster, unit) in units.iter().enumerate() {
                    w.begin_node(&format!("cluster{cluster}"))?;
                    for (core, &vcpu) in unit.iter().enumerate() {
                        leaf(w, &format!("core{core}"), vcpu)?;
                    }
                    w.end_node()?;
                }
            }
        }
    }
    w.end_node()
}

fn write_gic(w: &mut FdtWriter, spec: &GuestDtSpec<'_>) -> Result<(), FdtWriteError> {
    w.begin_node(&format!("intc@{GICD_BASE:x}"))?;
    match spec.gic {
        GuestGicVersion::V3 => {
            w.property_string("compatible", "arm,gic-v3")?;
            let gicr_size = GICR_STRIDE * spec.vcpus as u64;
            w.property_cells(
                "reg",
                &reg64(&[(GICD_BASE, GICD_SIZE_V3), (GICR_BASE, gicr_size)]),
            )?;
            w.property_u32("#redistributor-regions", 1)?;
        }
        GuestGicVersion::V2 => {
            w.property_string("compatible", "arm,cortex-a15-gic")?;
            w.property_cells(
                "reg",
                &reg64(&[(GICD_BASE, GICD_SIZE_V2), (GICC_BASE_V2, GICC_SIZE_V2)]),
            )?;
        }
    }
    w.property_u32("#interrupt-cells", 3)?;
    w.property_empty("interrupt-controller")?;
    // No child nodes (no ITS, no v2m): an interrupt provider with
    // `#address-cells = 0`, as dtc's `interrupt_provider` check wants.
    w.property_u32("#address-cells", 0)?;
    w.property_u32("phandle", PHANDLE_GIC)?;
    w.end_node()
}

/// The PL011, its clock, and `serial0` so Linux names it `ttyAMA0`.
/// The fixed clock AMBA (PrimeCell) devices are clocked from, as on QEMU `virt`.
fn write_apb_clock(w: &mut FdtWriter) -> Result<(), FdtWriteError> {
    w.begin_node("apb-pclk")?;
    w.property_string("compatible", "fixed-clock")?;
    w.property_u32("#clock-cells", 0)?;
    w.property_u32("clock-frequency", APB_PCLK_HZ)?;
    w.property_string("clock-output-names", "clk24mhz")?;
    w.property_u32("phandle", PHANDLE_APB_PCLK)?;
    w.end_node()
}

/// A pass-through device's node: its compatible, guest `reg` and SPIs.
fn write_device(w: &mut FdtWriter, device: &PlannedDevice) -> Result<(), FdtWriteError> {
    w.begin_node(&format!("{}@{:x}", device.node_name, device.guest_base))?;
    let compatible: Vec<&str> = device.compatible.iter().map(String::as_str).collect();
    w.property_strings("compatible", &compatible)?;
    w.property_cells("reg", &reg64(&[(device.guest_base, device.size)]))?;
    if !device.interrupts.is_empty() {
        let cells: Vec<u32> = device
            .interrupts
            .iter()
            .flat_map(|&(intid, trigger)| {
                let flags = match trigger {
                    Trigger::Level => IRQ_TYPE_LEVEL_HIGH,
                    Trigger::Edge => IRQ_TYPE_EDGE_RISING,
                };
                [GIC_SPI, intid.saturating_sub(32), flags]
            })
            .collect();
        w.property_cells("interrupts", &cells)?;
    }
    if compatible.contains(&"arm,primecell") {
        // Linux's AMBA bus enables `apb_pclk` to read the peripheral ID.
        w.property_u32("clocks", PHANDLE_APB_PCLK)?;
        w.property_string("clock-names", "apb_pclk")?;
    }
    w.end_node()
}

fn write_console(w: &mut FdtWriter, uart_path: &str) -> Result<(), FdtWriteError> {
    w.begin_node(uart_path.trim_start_matches('/'))?;
    w.property_strings("compatible", &["arm,pl011", "arm,primecell"])?;
    w.property_cells("reg", &reg64(&[(UART_BASE, UART_SIZE)]))?;
    w.property_cells("interrupts", &[GIC_SPI, UART_SPI, IRQ_TYPE_LEVEL_HIGH])?;
    // Linux's AMBA bus reads the peripheral ID with `apb_pclk` enabled, and
    // the PL011 driver wants `uartclk`; both are the fixed 24 MHz clock.
    w.property_cells("clocks", &[PHANDLE_APB_PCLK, PHANDLE_APB_PCLK])?;
    w.property_strings("clock-names", &["uartclk", "apb_pclk"])?;
    w.end_node()?;

    w.begin_node("aliases")?;
    w.property_string("serial0", uart_path)?;
    w.end_node()
}

fn write_timer(w: &mut FdtWriter, spec: &GuestDtSpec<'_>) -> Result<(), FdtWriteError> {
    // GICv2 PPI specifiers carry the target CPU mask in bits 15:8 (QEMU
    // `virt` sets one bit per CPU); the GICv3 binding has no mask.
    let flags = match spec.gic {
        GuestGicVersion::V2 => (((1u32 << spec.vcpus) - 1) << 8) | IRQ_TYPE_LEVEL_HIGH,
        GuestGicVersion::V3 => IRQ_TYPE_LEVEL_HIGH,
    };
    let cells: Vec<u32> = TIMER_PPIS
        .iter()
        .flat_map(|&ppi| [GIC_PPI, ppi, flags])
        .collect();
    w.begin_node("timer")?;
    w.property_string("compatible", "arm,armv8-timer")?;
    w.property_cells("interrupts", &cells)?;
    w.property_empty("always-on")?;
    w.end_node()
}

#[cfg(test)]
mod tests;
