//! The UEFI + ACPI boot (Ampere Altra; QEMU `virt` under edk2): the machine
//! from the tables UEFI handed over instead of a device tree. Memory from the
//! UEFI memory map, the console from the SPCR, CPUs and the GIC from the MADT,
//! clusters from the PPTT, the timer interrupts from the GTDT and the PSCI
//! conduit from the FADT's ARM_BOOT_ARCH flags.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use gic::{Gic, GicV3, RedistributorRegion};
use log::{error, info, warn};
use platform::acpi::{self, AcpiTables, BootAcpi, Signature, UartKind};
use platform::arch::aarch64::{boot, console, psci};
use platform::uefi::UefiHandoff;
use sched::Topology;

use super::{HEAP_BYTES, stop};
use crate::heap;

/// What the rest of the boot needs from ACPI.
pub(super) struct AcpiMachine {
    /// Every CPU the MADT enables (online-capable ones present but disabled).
    pub topology: Topology,
    /// How to reach PSCI, if the FADT says it is there.
    pub conduit: Option<psci::Conduit>,
    /// The GIC driver for the MADT's distributor and redistributors.
    pub gic: Gic,
    /// The console UART's interrupt (an SPI), from the SPCR.
    pub console_spi: Option<u32>,
    /// The CPUs' capacity classes (GICC efficiency classes), fastest first.
    pub classes: Vec<platform::dt::CpuClass>,
}

/// Reads physical memory byte by byte, inside the final identity map only
/// (ACPI tables are RAM there, but a firmware bug could point at MMIO, where
/// wider unaligned reads would fault).
fn read_physical(address: u64, buffer: &mut [u8]) -> bool {
    let Some(end) = address.checked_add(buffer.len() as u64) else {
        return false;
    };
    if address == 0 || end > boot::identity_map_end() {
        return false;
    }
    for (i, byte) in buffer.iter_mut().enumerate() {
        // SAFETY: the range is inside the identity map (checked above), and the
        // firmware says an ACPI table is there; byte reads are valid on RAM
        // mapped Normal or Device alike.
        *byte = unsafe { core::ptr::read_volatile((address + i as u64) as *const u8) };
    }
    true
}

/// What the boot did before it had a console.
pub(super) struct Prepared {
    /// The tables, if they could be read.
    pub tables: Option<AcpiTables>,
    /// The memory setup's log lines, or why it failed.
    pub memory: Result<Vec<String>, String>,
}

/// Installs the identity map and heap from the UEFI memory map (the ACPI
/// tables and the UART may be anywhere in the physical address space, beyond
/// the boot map), copies the ACPI tables out of firmware memory and makes the
/// SPCR's UART the console. Runs before the logger has a console: the memory
/// report is logged later by [`read_machine`].
pub(super) fn prepare(handoff: &UefiHandoff) -> Prepared {
    let memory = setup_memory(handoff);
    if memory.is_err() {
        return Prepared {
            tables: None,
            memory,
        };
    }
    let tables = read_tables_and_console(handoff);
    Prepared { tables, memory }
}

/// The tables, and the SPCR console.
fn read_tables_and_console(handoff: &UefiHandoff) -> Option<AcpiTables> {
    let tables = AcpiTables::load(&mut read_physical, handoff.rsdp).ok()?;
    let spcr = tables
        .get(Signature::SPCR)
        .ok()
        .flatten()
        .and_then(|table| acpi::Spcr::parse(table.bytes).ok());
    if let Some(spcr) = spcr
        && spcr.is_mmio()
        && spcr.base_address != 0
        && spcr.base_address < boot::identity_map_end()
    {
        let base = spcr.base_address as usize;
        match spcr.kind {
            // SAFETY: the SPCR names this PL011 as the console, the boot map
            // makes it Device memory, and nothing else drives it.
            UartKind::Pl011 => unsafe { console::init_pl011(base) },
            // SAFETY: as above; an SBSA generic UART is the PL011's data and
            // flag registers only, left configured by the firmware.
            UartKind::SbsaGeneric | UartKind::SbsaGeneric32 => unsafe {
                console::init_pl011_as_configured(base)
            },
            _ => {}
        }
    }
    Some(tables)
}

/// Memory, tables, topology, GIC and PSCI: everything the device-tree boot
/// takes from the DTB.
pub(super) fn read_machine(
    handoff: &UefiHandoff,
    memory: Result<Vec<String>, String>,
    tables: &AcpiTables,
) -> AcpiMachine {
    match memory {
        Ok(lines) => {
            for line in lines {
                info!("{line}");
            }
        }
        Err(reason) => stop(format_args!("{reason}")),
    }
    let names: Vec<String> = tables
        .list()
        .map(|(signature, address)| alloc::format!("{signature}@{address:#x}"))
        .collect();
    info!(
        "acpi: RSDP at {:#x} (from UEFI); tables {}",
        handoff.rsdp,
        names.join(" ")
    );
    let boot = match BootAcpi::from_tables(tables, None) {
        Ok(boot) => boot,
        Err(e) => stop(format_args!("acpi: {e}")),
    };
    for problem in &boot.problems {
        warn!("acpi: {problem}; going on without it");
    }
    for warning in &boot.cpus.warnings {
        warn!("acpi: {warning}");
    }
    for gicc in boot.madt.giccs.iter().filter(|g| !g.flags.enabled) {
        let online_capable = if gicc.flags.online_capable {
            "online-capable, not started at boot"
        } else {
            "not usable"
        };
        info!(
            "acpi: MADT GICC at offset {:#x} (uid {}, mpidr {:#x}) has the enabled flag clear ({online_capable}); skipping it",
            gicc.offset, gicc.processor_uid, gicc.mpidr
        );
    }
    let topology = match boot.cpus.topology() {
        Ok(topology) => topology,
        Err(e) => stop(format_args!("acpi: {e}")),
    };
    let mut report = String::new();
    let _ = acpi::write_topology_report(&mut report, &boot.cpus, &topology);
    for line in report.lines() {
        info!("{line}");
    }
    set_timer_interrupts(boot.timer.as_ref());
    let conduit = psci_conduit(boot.fadt.as_ref());
    let gic = gic_from_madt(&boot.madt);
    let console_spi = boot
        .console
        .filter(|spcr| spcr.interrupt_is_gic() && spcr.gsi >= 32)
        .map(|spcr| spcr.gsi);
    let classes = boot.cpus.cpu_classes(&topology);
    AcpiMachine {
        topology,
        conduit,
        gic,
        console_spi,
        classes,
    }
}

/// The identity map from the UEFI map's RAM, and the heap in free RAM: the
/// lines to log once there is a console, or why it cannot go on.
fn setup_memory(handoff: &UefiHandoff) -> Result<Vec<String>, String> {
    use alloc::format;
    let map = handoff.memory_map().map_err(|e| format!("uefi: {e}"))?;
    let ram = map.ram();
    if ram.is_empty() {
        return Err("uefi: the memory map has no RAM".into());
    }
    boot::install_identity_map(&ram).map_err(|e| format!("mmu: {e}"))?;
    let total: u64 = ram.iter().map(|&(_, size)| size).sum();
    let mut lines = alloc::vec![format!(
        "memory: {} MiB of RAM in {} ranges from the UEFI memory map ({} descriptors; boot services exited after {} attempt(s)); identity map up to {:#x}",
        total >> 20,
        ram.len(),
        map.regions().count(),
        handoff.exit_attempts,
        boot::identity_map_end()
    )];
    for &(base, size) in &ram {
        lines.push(format!(
            "memory: {base:#x}-{:#x} ({} MiB)",
            base + size,
            size >> 20
        ));
    }
    let (image_start, image_end) = boot::image_range();
    let free = map.free();
    match platform::memory::choose_heap_region(&free, &[(image_start, image_end)], HEAP_BYTES) {
        Some((start, size)) => {
            // SAFETY: free RAM by the UEFI map (conventional or boot-services
            // memory, unused now that boot services are gone), mapped Normal by
            // the identity map just installed, not the image.
            unsafe { heap::add_region(start as usize, size as usize) };
            lines.push(format!(
                "memory: heap {} MiB at {start:#x}",
                heap::total_bytes() >> 20
            ));
        }
        None => lines.push(format!(
            "memory: no free RAM for the heap; staying on the {} MiB bootstrap heap",
            heap::total_bytes() >> 20
        )),
    }
    Ok(lines)
}

/// The GTDT's EL2, EL1 virtual and EL1 physical timer PPIs replace the Arm
/// BSA defaults (26, 27, 30) when they are PPIs.
fn set_timer_interrupts(gtdt: Option<&acpi::Gtdt>) {
    use super::guest_timer::GuestTimer;
    let Some(gtdt) = gtdt else {
        warn!(
            "acpi: no usable GTDT; timer PPIs {} (EL2), {} (virtual) and {} (EL1 physical) as the Arm BSA says",
            super::hyp_timer_ppi(),
            GuestTimer::Virtual.host_ppi(),
            GuestTimer::Physical.host_ppi()
        );
        return;
    };
    // `None`: the hypervisor's own EL2 timer.
    for (what, gsiv, guest) in [
        ("EL2 timer", gtdt.el2.gsiv, None),
        (
            "virtual timer",
            gtdt.virtual_el1.gsiv,
            Some(GuestTimer::Virtual),
        ),
        (
            "EL1 physical timer",
            gtdt.non_secure_el1.gsiv,
            Some(GuestTimer::Physical),
        ),
    ] {
        if !(16..32).contains(&gsiv) {
            let default = guest.map_or_else(super::hyp_timer_ppi, GuestTimer::host_ppi);
            warn!("acpi: GTDT {what} interrupt {gsiv} is not a PPI; using {default}");
            continue;
        }
        match guest {
            Some(timer) => timer.set_host_ppi(gsiv),
            None => super::HYP_TIMER_PPI.store(gsiv, Ordering::Relaxed),
        }
    }
    info!(
        "timer: GTDT PPIs {} (EL2 physical), {} (EL1 virtual), {} (EL1 physical)",
        super::hyp_timer_ppi(),
        GuestTimer::Virtual.host_ppi(),
        GuestTimer::Physical.host_ppi()
    );
}

/// The PSCI conduit from the FADT's ARM_BOOT_ARCH flags.
fn psci_conduit(fadt: Option<&acpi::Fadt>) -> Option<psci::Conduit> {
    match fadt {
        Some(fadt) if fadt.psci_compliant() => {
            let conduit = if fadt.psci_uses_hvc() {
                psci::Conduit::Hvc
            } else {
                psci::Conduit::Smc
            };
            info!(
                "acpi: FADT ARM_BOOT_ARCH {:#x}: PSCI via {conduit:?}",
                fadt.arm_boot_flags
            );
            Some(conduit)
        }
        Some(fadt) => {
            error!(
                "acpi: FADT ARM_BOOT_ARCH {:#x} says no PSCI (the parking protocol is not supported); only the boot CPU runs",
                fadt.arm_boot_flags
            );
            None
        }
        None => {
            warn!("acpi: no usable FADT; assuming PSCI via SMC (Arm BSA)");
            Some(psci::Conduit::Smc)
        }
    }
}

/// A GICv3 driver for the MADT's GICD and redistributor regions.
fn gic_from_madt(madt: &acpi::Madt) -> Gic {
    let version = madt.gic_version();
    let Some(gicd) = madt.gicds.first() else {
        stop(format_args!(
            "gic: the MADT has no GIC distributor (GICD) entry"
        ))
    };
    if !matches!(version, 3 | 4) {
        stop(format_args!(
            "gic: the MADT says GIC version {version}; the ACPI boot supports GICv3 and GICv4"
        ));
    }
    let mut regions: Vec<RedistributorRegion> = madt
        .redistributor_regions()
        .into_iter()
        .map(|(base, size)| RedistributorRegion {
            base: base as usize,
            size: size as usize,
        })
        .collect();
    if regions.is_empty() {
        stop(format_args!(
            "gic: the MADT gives no redistributor (no GICR entry, no GICC GICR base)"
        ));
    }
    if regions.len() > gic::MAX_REDISTRIBUTOR_REGIONS {
        warn!(
            "gic: {} redistributor regions, the driver takes {}; CPUs in the others cannot start",
            regions.len(),
            gic::MAX_REDISTRIBUTOR_REGIONS
        );
        regions.truncate(gic::MAX_REDISTRIBUTOR_REGIONS);
    }
    for region in &regions {
        info!(
            "gic: redistributor region {:#x} ({} KiB)",
            region.base,
            region.size >> 10
        );
    }
    // SAFETY: the MADT names these as the GIC's distributor and redistributor
    // regions; the identity map makes them Device memory at the same addresses.
    match unsafe { GicV3::with_regions(gicd.base as usize, &regions) } {
        Ok(gic) => Gic::V3(gic),
        Err(e) => stop(format_args!("gic: {e}")),
    }
}
