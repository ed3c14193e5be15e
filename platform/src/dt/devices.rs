//! Memory, reserved memory, GIC, PSCI, console UART, architected timer and `/chosen`.

use alloc::string::String;
use alloc::vec::Vec;

use super::cpus::address_cells;
use super::error::DtWarning;
use super::fdt::{Tree, join_cells};
use super::{
    DeviceNode, EnableMethod, Gic, GicVersion, Interrupt, InterruptKind, MachineDescription,
    MemoryRegion, Psci, PsciMethod, ReservedRegion, Timer, Uart,
};

/// GIC compatibles we drive, with their version (Linux `irq-gic.c` / `irq-gic-v3.c`).
const KNOWN_GICS: &[(&str, GicVersion)] = &[
    ("arm,gic-v3", GicVersion::V3),
    ("arm,gic-400", GicVersion::V2),
    ("arm,cortex-a15-gic", GicVersion::V2),
    ("arm,cortex-a9-gic", GicVersion::V2),
    ("arm,cortex-a7-gic", GicVersion::V2),
    ("arm,pl390", GicVersion::V2),
    ("qcom,msm-qgic2", GicVersion::V2),
];

/// Fills in everything but the CPUs.
pub(super) fn parse_devices(
    tree: &Tree<'_>,
    description: &mut MachineDescription,
    warnings: &mut Vec<DtWarning>,
) {
    description.memory = memory(tree, warnings);
    description.reserved = reserved(tree, warnings);
    description.gic = gic(tree, warnings);
    description.psci = psci(tree, warnings);
    if description.psci.is_none()
        && description
            .logical_cpus()
            .any(|cpu| cpu.enable_method == EnableMethod::Psci)
    {
        warnings.push(DtWarning::PsciMissing);
    }
    description.console = console(tree, warnings);
    description.timer = timer(tree, warnings);
    description.devices = device_nodes(tree);
    if let Some(chosen) = tree.find("/chosen") {
        description.bootargs = tree.str_property(chosen, "bootargs").map(String::from);
        let number = |name| {
            tree.cells(chosen, name)
                .and_then(|cells| join_cells(&cells))
        };
        if let (Some(start), Some(end)) = (number("linux,initrd-start"), number("linux,initrd-end"))
            && end > start
        {
            description.initrd = Some(MemoryRegion {
                base: start,
                size: end - start,
            });
        }
    }
}

/// Every available node with a `compatible` and a decodable `reg`, except
/// the CPUs, memory, the GIC and PSCI (described on their own). No
/// warnings: a node the hypervisor does not use may be odd in ways that do
/// not matter; one a config names is checked when it is given out.
fn device_nodes(tree: &Tree<'_>) -> Vec<DeviceNode> {
    (1..tree.nodes.len())
        .filter(|&n| tree.is_available(n) && !is_interrupt_controller(tree, n))
        .filter_map(|n| {
            let compatible: Vec<String> = tree
                .strings(n, "compatible")
                .into_iter()
                .map(String::from)
                .collect();
            if compatible.is_empty() || tree.str_property(n, "device_type").is_some() {
                return None;
            }
            Some(DeviceNode {
                path: tree.path(n),
                compatible,
                regions: decode_reg(tree, n)?,
                interrupts: interrupts(tree, n).unwrap_or_default(),
            })
        })
        .collect()
}

/// `#size-cells` of `node` (1 when absent, per DTSpec 2.3.5).
fn size_cells(tree: &Tree<'_>, node: usize) -> u32 {
    tree.u32_property(node, "#size-cells").unwrap_or(1)
}

fn parent(tree: &Tree<'_>, node: usize) -> Option<usize> {
    tree.nodes.get(node).and_then(|n| n.parent)
}

/// Translates a bus address of a child of `bus` up to a CPU address through each
/// ancestor's `ranges` (DTSpec 2.3.8). `None` if some bus has no `ranges` or no
/// range covers the address.
fn translate(tree: &Tree<'_>, mut bus: usize, mut address: u64) -> Option<u64> {
    while let Some(grandparent) = parent(tree, bus) {
        let ranges = tree.cells(bus, "ranges")?;
        if !ranges.is_empty() {
            let child_cells = address_cells(tree, bus) as usize;
            let parent_cells = address_cells(tree, grandparent) as usize;
            let length_cells = size_cells(tree, bus) as usize;
            let entry = child_cells + parent_cells + length_cells;
            if child_cells > 4 || parent_cells > 4 || length_cells > 4 || entry == 0 {
                return None;
            }
            address = ranges.chunks_exact(entry).find_map(|range| {
                let child_base = join_cells(&range[..child_cells])?;
                let parent_base = join_cells(&range[child_cells..child_cells + parent_cells])?;
                let length = join_cells(&range[child_cells + parent_cells..])?;
                let offset = address
                    .checked_sub(child_base)
                    .filter(|&offset| offset < length)?;
                parent_base.checked_add(offset)
            })?;
        }
        bus = grandparent;
    }
    Some(address)
}

/// A node's `reg` as CPU-address regions; a warning names the node if it cannot be decoded.
fn reg(tree: &Tree<'_>, node: usize, warnings: &mut Vec<DtWarning>) -> Option<Vec<MemoryRegion>> {
    let regions = decode_reg(tree, node);
    if regions.is_none() && tree.property(node, "reg").is_some() {
        warnings.push(DtWarning::BadReg {
            path: tree.path(node),
            property: "reg",
        });
    }
    regions
}

fn decode_reg(tree: &Tree<'_>, node: usize) -> Option<Vec<MemoryRegion>> {
    let bus = parent(tree, node)?;
    let cells = tree.cells(node, "reg")?;
    let (address_cells, size_cells) = (
        address_cells(tree, bus) as usize,
        size_cells(tree, bus) as usize,
    );
    let entry = address_cells + size_cells;
    if address_cells == 0
        || address_cells > 4
        || size_cells > 4
        || cells.is_empty()
        || cells.len() % entry != 0
    {
        return None;
    }
    cells
        .chunks_exact(entry)
        .map(|chunk| {
            let address = join_cells(&chunk[..address_cells])?;
            let size = join_cells(&chunk[address_cells..])?;
            Some(MemoryRegion {
                base: translate(tree, bus, address)?,
                size,
            })
        })
        .collect()
}

fn memory(tree: &Tree<'_>, warnings: &mut Vec<DtWarning>) -> Vec<MemoryRegion> {
    let mut memory = Vec::new();
    let top_level = tree
        .nodes
        .first()
        .map(|root| root.children.clone())
        .unwrap_or_default();
    for node in top_level {
        let is_memory = tree.str_property(node, "device_type") == Some("memory")
            || tree.base_name(node) == "memory";
        if !is_memory || !tree.is_available(node) {
            continue;
        }
        for region in reg(tree, node, warnings).unwrap_or_default() {
            if region.size == 0 {
                warnings.push(DtWarning::EmptyMemoryRegion {
                    path: tree.path(node),
                });
            } else {
                memory.push(region);
            }
        }
    }
    if memory.is_empty() {
        warnings.push(DtWarning::NoMemoryNode);
    }
    memory
}

fn reserved(tree: &Tree<'_>, warnings: &mut Vec<DtWarning>) -> Vec<ReservedRegion> {
    let mut reserved: Vec<ReservedRegion> = tree
        .reservations
        .iter()
        .map(|&(base, size)| ReservedRegion {
            region: MemoryRegion { base, size },
            path: None,
            no_map: false,
        })
        .collect();
    if let Some(parent) = tree.find("/reserved-memory") {
        let children = tree
            .nodes
            .get(parent)
            .map(|n| n.children.clone())
            .unwrap_or_default();
        for node in children.into_iter().filter(|&node| tree.is_available(node)) {
            let no_map = tree.property(node, "no-map").is_some();
            // Children with only `size` are allocated dynamically by the OS: nothing fixed to avoid.
            // A zero size is a placeholder the bootloader fills in (Raspberry Pi's nvram).
            let regions = reg(tree, node, warnings).unwrap_or_default();
            for region in regions.into_iter().filter(|r| r.size != 0) {
                reserved.push(ReservedRegion {
                    region,
                    path: Some(tree.path(node)),
                    no_map,
                });
            }
        }
    }
    reserved
}

fn known_gic(tree: &Tree<'_>, node: usize) -> Option<(&'static str, GicVersion)> {
    KNOWN_GICS
        .iter()
        .copied()
        .find(|(name, _)| tree.is_compatible(node, name))
}

fn is_interrupt_controller(tree: &Tree<'_>, node: usize) -> bool {
    tree.property(node, "interrupt-controller").is_some() && tree.is_available(node)
}

fn gic(tree: &Tree<'_>, warnings: &mut Vec<DtWarning>) -> Option<Gic> {
    // The root's interrupt-parent is the primary controller; otherwise take the
    // first supported GIC in document order.
    let root_parent = tree
        .u32_property(0, "interrupt-parent")
        .and_then(|phandle| tree.by_phandle(phandle))
        .filter(|&node| is_interrupt_controller(tree, node));
    let chosen = root_parent
        .filter(|&node| known_gic(tree, node).is_some())
        .or_else(|| {
            (0..tree.nodes.len()).find(|&node| {
                is_interrupt_controller(tree, node) && known_gic(tree, node).is_some()
            })
        });
    let Some(node) = chosen else {
        let unknown = root_parent.or_else(|| {
            (0..tree.nodes.len()).find(|&node| {
                is_interrupt_controller(tree, node)
                    && tree
                        .strings(node, "compatible")
                        .iter()
                        .any(|c| c.contains("gic"))
            })
        });
        warnings.push(match unknown {
            Some(node) => DtWarning::UnknownGic {
                path: tree.path(node),
                compatible: tree.strings(node, "compatible").join(";"),
            },
            None => DtWarning::NoGic,
        });
        return None;
    };
    let (compatible, version) = known_gic(tree, node)?;
    let path = tree.path(node);
    let regions = reg(tree, node, warnings).unwrap_or_default();
    let redistributor_regions = match version {
        GicVersion::V2 => 0,
        GicVersion::V3 => tree
            .u32_property(node, "#redistributor-regions")
            .unwrap_or(1)
            .max(1) as usize,
    };
    let needed = 1 + redistributor_regions.max(1);
    if regions.len() < needed {
        warnings.push(DtWarning::GicMissingRegions {
            path,
            found: regions.len(),
            needed,
        });
        return None;
    }
    let maintenance_interrupt = interrupts(tree, node).and_then(|list| list.first().copied());
    Some(Gic {
        path,
        compatible: String::from(compatible),
        version,
        regions,
        redistributor_regions,
        maintenance_interrupt,
    })
}

/// Decodes `interrupts` with the interrupt parent's `#interrupt-cells` (at least 3:
/// type, number, flags; extra cells such as the PPI partition are ignored).
fn interrupts(tree: &Tree<'_>, node: usize) -> Option<Vec<Interrupt>> {
    let mut current = Some(node);
    let mut controller = None;
    while let Some(n) = current {
        if let Some(phandle) = tree.u32_property(n, "interrupt-parent") {
            controller = tree.by_phandle(phandle);
            break;
        }
        current = parent(tree, n);
    }
    let cells_per_entry = tree.u32_property(controller?, "#interrupt-cells")? as usize;
    let cells = tree.cells(node, "interrupts")?;
    if !(3..=8).contains(&cells_per_entry) || cells.is_empty() || cells.len() % cells_per_entry != 0
    {
        return None;
    }
    cells
        .chunks_exact(cells_per_entry)
        .map(|entry| {
            let kind = match entry[0] {
                0 => InterruptKind::Spi,
                1 => InterruptKind::Ppi,
                _ => return None,
            };
            Some(Interrupt {
                kind,
                number: entry[1],
                flags: entry[2],
            })
        })
        .collect()
}

fn psci(tree: &Tree<'_>, warnings: &mut Vec<DtWarning>) -> Option<Psci> {
    let node = tree.find("/psci").or_else(|| {
        (0..tree.nodes.len()).find(|&n| {
            tree.strings(n, "compatible")
                .iter()
                .any(|c| c.starts_with("arm,psci"))
        })
    })?;
    if !tree.is_available(node) {
        return None;
    }
    let method = match tree.str_property(node, "method") {
        Some("smc") => PsciMethod::Smc,
        Some("hvc") => PsciMethod::Hvc,
        other => {
            warnings.push(DtWarning::PsciBadMethod {
                path: tree.path(node),
                method: String::from(other.unwrap_or("")),
            });
            return None;
        }
    };
    Some(Psci {
        path: tree.path(node),
        method,
        compatible: tree
            .strings(node, "compatible")
            .into_iter()
            .map(String::from)
            .collect(),
        cpu_on: tree.u32_property(node, "cpu_on"),
    })
}

fn console(tree: &Tree<'_>, warnings: &mut Vec<DtWarning>) -> Option<Uart> {
    let chosen = tree.find("/chosen");
    let stdout = chosen.and_then(|c| {
        tree.str_property(c, "stdout-path")
            .or_else(|| tree.str_property(c, "linux,stdout-path"))
    });
    if let Some(stdout) = stdout {
        let (name, options) = match stdout.split_once(':') {
            Some((name, options)) => (name, Some(String::from(options))),
            None => (stdout, None),
        };
        let path = if name.starts_with('/') {
            Some(name)
        } else {
            tree.find("/aliases")
                .and_then(|aliases| tree.str_property(aliases, name))
        };
        match path.and_then(|path| tree.find(path)) {
            Some(node) => return uart(tree, node, options, warnings),
            None => warnings.push(DtWarning::ConsoleNotFound {
                stdout_path: String::from(stdout),
            }),
        }
    }
    match (0..tree.nodes.len())
        .find(|&n| tree.is_compatible(n, "arm,pl011") && tree.is_available(n))
    {
        Some(node) => uart(tree, node, None, warnings),
        None => {
            warnings.push(DtWarning::NoConsole);
            None
        }
    }
}

fn uart(
    tree: &Tree<'_>,
    node: usize,
    options: Option<String>,
    warnings: &mut Vec<DtWarning>,
) -> Option<Uart> {
    let region = reg(tree, node, warnings)?.first().copied()?;
    Some(Uart {
        path: tree.path(node),
        compatible: tree
            .strings(node, "compatible")
            .into_iter()
            .map(String::from)
            .collect(),
        region,
        options,
        interrupt: interrupts(tree, node).and_then(|list| list.first().copied()),
    })
}

fn timer(tree: &Tree<'_>, warnings: &mut Vec<DtWarning>) -> Option<Timer> {
    let Some(node) = (0..tree.nodes.len())
        .find(|&n| tree.is_compatible(n, "arm,armv8-timer") && tree.is_available(n))
    else {
        warnings.push(DtWarning::NoTimer);
        return None;
    };
    let list = interrupts(tree, node).unwrap_or_default();
    if list.len() < 4 || list.iter().any(|irq| irq.kind != InterruptKind::Ppi) {
        warnings.push(DtWarning::TimerBadInterrupts {
            path: tree.path(node),
        });
    }
    let entry = |i: usize| {
        list.get(i)
            .copied()
            .filter(|irq| irq.kind == InterruptKind::Ppi)
    };
    Some(Timer {
        path: tree.path(node),
        secure_physical: entry(0),
        physical: entry(1),
        virtual_timer: entry(2),
        hypervisor_physical: entry(3),
        hypervisor_virtual: entry(4),
        clock_frequency: tree.u32_property(node, "clock-frequency"),
    })
}
