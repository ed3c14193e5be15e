//! What the guest reads from its flattened device tree: CPUs, interrupt
//! controller, the RAM region it runs in, the PSCI conduit and the boot
//! arguments. Pure parsing over a byte slice (through the `fdt` crate), so
//! it is tested on the host with real device trees.

use core::fmt;

use fdt::Fdt;
use fdt::node::FdtNode;

/// CPU nodes kept (the guest runs at most this many vCPUs).
pub const MAX_CPUS: usize = 8;

/// The `fdt` header magic, big-endian.
pub const FDT_MAGIC: u32 = 0xD00D_FEED;

/// The largest blob accepted (QEMU pads its trees to 1 MiB).
pub const MAX_BLOB: usize = 2 << 20;

/// The interrupt controller's version.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicKind {
    /// GICv2 (`arm,cortex-a15-gic`, `arm,gic-400`, `arm,cortex-a9-gic`).
    V2,
    /// GICv3 (`arm,gic-v3`).
    V3,
}

/// The interrupt controller node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GicNode {
    /// Its version.
    pub kind: GicKind,
    /// The distributor (first `reg`).
    pub distributor: u64,
    /// GICv2: the CPU interface; GICv3: the first redistributor (second `reg`).
    pub second: u64,
}

/// What the guest uses from its device tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceTree<'a> {
    /// MPIDR (`reg`) of each CPU node, in tree order; `cpus` are valid.
    pub mpidrs: [u64; MAX_CPUS],
    /// CPU nodes kept.
    pub cpus: usize,
    /// CPU nodes beyond [`MAX_CPUS`].
    pub cpus_left_out: usize,
    /// The interrupt controller, if the tree has one this guest drives.
    pub gic: Option<GicNode>,
    /// The memory region holding `ram_base`, as (start, end).
    pub ram: Option<(u64, u64)>,
    /// `/psci` `method = "smc"` (else HVC).
    pub psci_smc: bool,
    /// `/chosen/bootargs`, empty if absent.
    pub bootargs: &'a str,
    /// The tree describes a PL011 (`arm,pl011`): without one (a domain
    /// configured with `console = "none"`) there is no UART to print to.
    pub pl011: bool,
    /// A PL011 other than the console's at [`CONSOLE_PL011`] (a device
    /// passed through to the domain): its base and SPI's INTID.
    pub second_pl011: Option<(u64, u32)>,
}

/// Where the console PL011 is, in QEMU virt and in every domain.
pub const CONSOLE_PL011: u64 = 0x0900_0000;

/// Base and INTID of a PL011 node other than the console's, if it has a
/// `reg` and an SPI.
fn second_pl011(fdt: &Fdt<'_>) -> Option<(u64, u32)> {
    fdt.all_nodes().find_map(|node| {
        if !node
            .compatible()
            .is_some_and(|c| c.all().any(|s| s == "arm,pl011"))
        {
            return None;
        }
        let base = node.reg()?.next()?.starting_address as u64;
        let cells = node.property("interrupts")?.value;
        let cell = |i: usize| {
            cells
                .get(i * 4..i * 4 + 4)
                .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
        };
        // An SPI: type 0, number, flags.
        (base != CONSOLE_PL011 && cell(0)? == 0).then_some((base, cell(1)?.checked_add(32)?))
    })
}

/// Why a device tree cannot be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DtError {
    /// Shorter than a header, wrong magic, or a size out of range.
    BadHeader,
    /// The `fdt` crate refused the blob.
    Invalid,
    /// No `/cpus` node, or no CPU node with a `reg`.
    NoCpus,
    /// A GIC node without two `reg` regions.
    BadGic,
}

impl fmt::Display for DtError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadHeader => write!(f, "no flattened device tree header"),
            Self::Invalid => write!(f, "not a valid flattened device tree"),
            Self::NoCpus => write!(f, "no CPU nodes"),
            Self::BadGic => write!(f, "a GIC node without two reg regions"),
        }
    }
}

/// The blob's total size from its header, after checking what the `fdt`
/// crate trusts without checking (it slices with these offsets and would
/// panic): magic, `totalsize` within [`MAX_BLOB`], and the structure block,
/// strings block and memory reservation map inside `totalsize`.
pub fn blob_size(header: &[u8]) -> Result<usize, DtError> {
    let word = |at: usize| -> Result<usize, DtError> {
        let bytes = header.get(at..at + 4).ok_or(DtError::BadHeader)?;
        Ok(u32::from_be_bytes(bytes.try_into().map_err(|_| DtError::BadHeader)?) as usize)
    };
    if word(0)? != FDT_MAGIC as usize {
        return Err(DtError::BadHeader);
    }
    let size = word(4)?;
    if !(40..=MAX_BLOB).contains(&size) {
        return Err(DtError::BadHeader);
    }
    let (off_struct, off_strings, off_rsvmap) = (word(8)?, word(12)?, word(16)?);
    let (size_strings, size_struct) = (word(32)?, word(36)?);
    let inside = |offset: usize, len: usize| offset.checked_add(len).is_some_and(|end| end <= size);
    if !inside(off_struct, size_struct)
        || !inside(off_strings, size_strings)
        || !inside(off_rsvmap, 16)
    {
        return Err(DtError::BadHeader);
    }
    Ok(size)
}

fn is_device_type(node: FdtNode<'_, '_>, wanted: &str) -> bool {
    node.property("device_type")
        .and_then(|p| p.as_str())
        .is_some_and(|t| t.trim_end_matches('\0') == wanted)
}

/// The first node named `name` (unit address ignored) in tree order; the
/// nodes looked up this way (`cpus`, `psci`, `chosen`) only exist at the top.
/// `Fdt::find_node` is not used: in fdt 0.1.5 it misses nodes that follow
/// `FDT_NOP` tokens, which QEMU leaves when it edits a tree given with `-dtb`
/// (see testdata/README.md); `all_nodes` walks them correctly.
fn top_level<'b, 'a>(fdt: &'b Fdt<'a>, name: &str) -> Option<FdtNode<'b, 'a>> {
    fdt.all_nodes()
        .find(|n| n.name.split('@').next() == Some(name))
}

fn first_two_regions(node: FdtNode<'_, '_>) -> Option<(u64, u64)> {
    let mut reg = node.reg()?;
    let a = reg.next()?.starting_address as u64;
    let b = reg.next()?.starting_address as u64;
    Some((a, b))
}

/// Reads `blob`; `ram_base` picks the memory region reported in `ram`.
pub fn parse(blob: &[u8], ram_base: u64) -> Result<DeviceTree<'_>, DtError> {
    let size = blob_size(blob)?;
    let blob = blob.get(..size).ok_or(DtError::BadHeader)?;
    let fdt = Fdt::new(blob).map_err(|_| DtError::Invalid)?;

    let mut mpidrs = [0; MAX_CPUS];
    let mut cpus = 0;
    let mut cpus_left_out = 0;
    let cpu_nodes = top_level(&fdt, "cpus").ok_or(DtError::NoCpus)?;
    for node in cpu_nodes.children() {
        if !is_device_type(node, "cpu") {
            continue;
        }
        let Some(mpidr) = node.reg().and_then(|mut r| r.next()) else {
            continue;
        };
        if cpus == MAX_CPUS {
            cpus_left_out += 1;
            continue;
        }
        mpidrs[cpus] = mpidr.starting_address as u64;
        cpus += 1;
    }
    if cpus == 0 {
        return Err(DtError::NoCpus);
    }

    let gic = if let Some(node) = fdt.find_compatible(&["arm,gic-v3"]) {
        let (distributor, second) = first_two_regions(node).ok_or(DtError::BadGic)?;
        Some(GicNode {
            kind: GicKind::V3,
            distributor,
            second,
        })
    } else if let Some(node) =
        fdt.find_compatible(&["arm,cortex-a15-gic", "arm,gic-400", "arm,cortex-a9-gic"])
    {
        let (distributor, second) = first_two_regions(node).ok_or(DtError::BadGic)?;
        Some(GicNode {
            kind: GicKind::V2,
            distributor,
            second,
        })
    } else {
        None
    };

    let mut ram = None;
    for node in fdt.all_nodes().filter(|n| is_device_type(*n, "memory")) {
        for region in node.reg().into_iter().flatten() {
            let start = region.starting_address as u64;
            let end = start.saturating_add(region.size.unwrap_or(0) as u64);
            if (start..end).contains(&ram_base) {
                ram = Some((start, end));
            }
        }
    }

    let psci_smc = top_level(&fdt, "psci")
        .and_then(|n| n.property("method"))
        .and_then(|p| p.as_str())
        .is_some_and(|m| m.trim_end_matches('\0') == "smc");
    let bootargs = top_level(&fdt, "chosen")
        .and_then(|n| n.property("bootargs"))
        .and_then(|p| p.as_str())
        .map_or("", |s| s.trim_end_matches('\0'));
    let pl011 = fdt.find_compatible(&["arm,pl011"]).is_some();
    let second_pl011 = second_pl011(&fdt);

    Ok(DeviceTree {
        mpidrs,
        cpus,
        cpus_left_out,
        gic,
        ram,
        psci_smc,
        bootargs,
        pl011,
        second_pl011,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::path::PathBuf;
    use std::process::Command;

    fn fixture(path: &str) -> Vec<u8> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/fixtures")
            .join(path);
        fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn qemu_virt_tree() {
        let blob = fixture("qemu/qemu-virt-smp8.dtb");
        let dt = parse(&blob, 0x4000_0000).unwrap();
        assert_eq!(dt.cpus, 8);
        assert_eq!(dt.mpidrs, [0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(
            dt.gic,
            Some(GicNode {
                kind: GicKind::V3,
                distributor: 0x0800_0000,
                second: 0x080A_0000
            })
        );
        let (start, end) = dt.ram.unwrap();
        assert_eq!(start, 0x4000_0000);
        assert!(end > start);
        // virtualization=on: QEMU's PSCI is behind SMC.
        assert!(dt.psci_smc);
        assert!(dt.pl011);
        // One UART, the console.
        assert_eq!(dt.second_pl011, None);
    }

    #[test]
    fn many_cpus_are_capped() {
        let blob = fixture("qemu/qemu-virt-smp16-smt.dtb");
        let dt = parse(&blob, 0x4000_0000).unwrap();
        assert_eq!((dt.cpus, dt.cpus_left_out), (8, 8));
        let blob = fixture("dtb/hip07-d05.dtb");
        let dt = parse(&blob, 0).unwrap();
        assert_eq!((dt.cpus, dt.cpus_left_out), (8, 56));
    }

    #[test]
    fn real_boards() {
        let blob = fixture("dtb/bcm2711-rpi-4-b.dtb");
        let dt = parse(&blob, 0).unwrap();
        assert_eq!((dt.cpus, &dt.mpidrs[..4]), (4, &[0, 1, 2, 3][..]));
        assert_eq!(dt.gic.map(|g| g.kind), Some(GicKind::V2));
        let blob = fixture("dtb/rk3399-rockpro64.dtb");
        let dt = parse(&blob, 0).unwrap();
        assert_eq!(&dt.mpidrs[..6], [0, 1, 2, 3, 0x100, 0x101]);
        assert_eq!(dt.gic.map(|g| g.kind), Some(GicKind::V3));
    }

    #[test]
    fn bad_blobs_are_refused() {
        let blob = fixture("qemu/qemu-virt-smp8.dtb");
        assert_eq!(parse(&[], 0), Err(DtError::BadHeader));
        assert_eq!(parse(&blob[..3], 0), Err(DtError::BadHeader));
        let mut wrong_magic = blob.clone();
        wrong_magic[0] = 0;
        assert_eq!(parse(&wrong_magic, 0), Err(DtError::BadHeader));
        // Truncated: the header promises more than there is.
        assert_eq!(parse(&blob[..100], 0), Err(DtError::BadHeader));
        let mut huge = blob.clone();
        huge[4..8].copy_from_slice(&(MAX_BLOB as u32 + 1).to_be_bytes());
        assert_eq!(parse(&huge, 0), Err(DtError::BadHeader));
        // A header whose blocks lie outside the blob.
        let mut garbage = blob[..64].to_vec();
        garbage.resize(4096, 0xAB);
        garbage[4..8].copy_from_slice(&4096u32.to_be_bytes());
        assert_eq!(parse(&garbage, 0), Err(DtError::BadHeader));
        let mut outside = blob.clone();
        outside[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(parse(&outside, 0), Err(DtError::BadHeader));
        // A consistent header over garbage blocks: refused, no panic.
        let size = blob_size(&blob).unwrap();
        let mut scrambled = blob[..size].to_vec();
        for byte in scrambled[64..].iter_mut() {
            *byte = byte.wrapping_mul(31).wrapping_add(7);
        }
        assert!(parse(&scrambled, 0).is_err());
    }

    /// A tree recompiled by dtc (as the xtask scenarios do to edit trees),
    /// with `edit` appended to the source.
    fn recompiled(edit: &str) -> Option<Vec<u8>> {
        let dir = std::env::temp_dir().join(format!("tg-dt-{}-{}", std::process::id(), edit.len()));
        fs::create_dir_all(&dir).ok()?;
        let dts = Command::new("dtc")
            .args(["-q", "-I", "dtb", "-O", "dts"])
            .arg(
                PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                    .join("../../../shared/fixtures/qemu/qemu-virt-smp8.dtb"),
            )
            .output()
            .ok()?;
        let mut text = String::from_utf8(dts.stdout).ok()?;
        text.push_str(edit);
        let source = dir.join("t.dts");
        fs::write(&source, text).ok()?;
        let out = dir.join("t.dtb");
        let status = Command::new("dtc")
            .args(["-q", "-I", "dts", "-O", "dtb", "-o"])
            .arg(&out)
            .arg(&source)
            .status()
            .ok()?;
        let blob = status.success().then(|| fs::read(&out).ok()).flatten();
        let _ = fs::remove_dir_all(&dir);
        blob
    }

    #[test]
    fn a_tree_edited_by_qemu_with_nop_tokens_parses() {
        let blob = fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("testdata/qemu-virt-smp2-via-dtb.dtb"),
        )
        .unwrap();
        let dt = parse(&blob, 0x4000_0000).unwrap();
        assert_eq!((dt.cpus, &dt.mpidrs[..2]), (2, &[0, 1][..]));
        assert_eq!(dt.gic.map(|g| g.kind), Some(GicKind::V3));
        assert_eq!(dt.ram, Some((0x4000_0000, 0x5000_0000)));
        assert!(!dt.psci_smc, "no virtualization=on: PSCI over HVC");
        assert_eq!(dt.bootargs, "end=off rounds=2");
    }

    #[test]
    fn dtc_recompiled_trees_parse_and_a_missing_gic_is_none() {
        let Some(blob) = recompiled("") else {
            eprintln!("note: no dtc here; skipping");
            return;
        };
        let dt = parse(&blob, 0x4000_0000).unwrap();
        assert_eq!(dt.cpus, 8);
        assert!(dt.gic.is_some());
        let blob = recompiled("\n/ { /delete-node/ intc@8000000; };\n").unwrap();
        let dt = parse(&blob, 0x4000_0000).unwrap();
        assert_eq!((dt.cpus, dt.gic), (8, None));
        let blob =
            recompiled("\n/ { chosen { bootargs = \"workload=compute rounds=2\"; }; };\n").unwrap();
        assert_eq!(
            parse(&blob, 0).unwrap().bootargs,
            "workload=compute rounds=2"
        );
    }
}
