//! Pass-through devices on the running system: the host facts they are
//! checked against, the host GIC programmed for their SPIs, and each SPI
//! delivered to its domain's vGIC (the rules are `hv::passthrough`'s).

use alloc::string::String;
use alloc::vec::Vec;

use gic::{Acknowledged, Gic, IntId};
use hv::arm::vgic::VcpuMask;
use hv::config::Trigger;
use hv::passthrough::{HostDevice, HostMachine, HostRange, LineChange, SpiRoute, SpiRoutes};
use log::{info, warn};
use platform::dt::{InterruptKind, MachineDescription};
use platform::sync::Once;
use sched::{DomainId, VcpuId};

use super::domain::{self, Domain};
use super::runtime::RUNTIME;

/// The SPIs given to domains, fixed once the domains are built.
static ROUTES: Once<SpiRoutes> = Once::new();

/// What pass-through is checked against on a device-tree boot: RAM (the
/// hypervisor's image, heap and every domain's memory live there), the
/// GIC's frames, the console UART; and the devices the tree describes.
pub fn host_machine(machine: &MachineDescription, gic: &Gic) -> HostMachine {
    let range = |what: &str, base: u64, size: u64| HostRange {
        what: String::from(what),
        start: base,
        end: base.saturating_add(size),
    };
    let mut reserved: Vec<HostRange> = machine
        .memory
        .iter()
        .map(|r| range("RAM", r.base, r.size))
        .collect();
    if let Some(node) = &machine.gic {
        reserved.extend(
            node.regions
                .iter()
                .map(|r| range("the GIC", r.base, r.size)),
        );
    }
    if let Some(uart) = &machine.console {
        reserved.push(range(
            "the console UART",
            uart.region.base,
            uart.region.size,
        ));
    }
    let devices = machine
        .devices
        .iter()
        .filter_map(|node| {
            let first = node.regions.first()?;
            Some(HostDevice {
                path: node.path.clone(),
                name: String::from(node.base_name()),
                compatible: node.compatible.clone(),
                base: first.base,
                size: first.size,
                interrupts: node
                    .interrupts
                    .iter()
                    .filter(|i| i.kind == InterruptKind::Spi)
                    .map(|i| {
                        let trigger = if i.is_level() {
                            Trigger::Level
                        } else {
                            Trigger::Edge
                        };
                        (i.intid(), trigger)
                    })
                    .collect(),
            })
        })
        .collect();
    HostMachine {
        reserved,
        devices,
        interrupt_limit: gic.num_interrupts(),
    }
}

/// Makes `routes` the SPIs given to domains and hands each to the host GIC:
/// its trigger, routed to `cpu_of(domain)` (a CPU of the domain's pool),
/// enabled. An SPI the GIC refuses is logged and left disabled.
pub fn install(gic: &Gic, routes: Vec<SpiRoute>, cpu_of: impl Fn(DomainId) -> usize) {
    let routes = ROUTES.call_once(|| SpiRoutes::new(routes));
    for route in routes.iter() {
        let Ok(intid) = IntId::new(route.intid) else {
            continue;
        };
        let trigger = match route.trigger {
            Trigger::Level => gic::Trigger::Level,
            Trigger::Edge => gic::Trigger::Edge,
        };
        let cpu = cpu_of(DomainId(route.domain));
        let programmed = gic
            .set_trigger(intid, trigger)
            .and_then(|()| gic.route_spi(intid, cpu))
            .and_then(|()| gic.enable_interrupt(intid));
        match programmed {
            Ok(()) => info!(
                "passthrough: SPI {} ({}) to domain {}, taken on cpu {cpu}",
                route.intid,
                route.trigger.name(),
                route.domain
            ),
            Err(e) => warn!(
                "passthrough: SPI {} of domain {}: {e}; left disabled",
                route.intid, route.domain
            ),
        }
    }
}

/// The route of physical `intid`, if a domain owns it.
pub fn route(intid: u32) -> Option<SpiRoute> {
    ROUTES.get()?.get(intid)
}

/// A passed-through SPI was acknowledged on this CPU: an edge is ended and
/// latched in the owner's vGIC; a level's line is sampled as at an exit
/// (raised and the SPI disabled if the device still asserts it; if an exit
/// already saw the device let go, nothing is raised: see
/// `hv::passthrough`). The vCPU it targets is woken or kicked. With no
/// owner left (stopped or gone) the SPI is disabled for good.
pub fn on_interrupt(gic: &Gic, acknowledged: Acknowledged, route: SpiRoute) {
    let id = DomainId(route.domain);
    let delivered = domain::with_domain(id, |d| {
        if d.stopped {
            return None;
        }
        let result = match route.trigger {
            Trigger::Edge => d.vgic.inject(0, route.intid),
            Trigger::Level => sample_level(gic, d, route.intid),
        };
        Some(target_vcpu(d, route.intid, result))
    })
    .flatten();
    if delivered.is_none() {
        set_enabled(gic, route.intid, false);
    }
    gic.end_of_interrupt(acknowledged);
    if let Some(Some(vcpu)) = delivered {
        RUNTIME.notify(vcpu);
    }
}

/// Whether domain `domain` has level-triggered pass-through SPIs, which
/// [`sample`] reads after every exit (without, an exit need not lock the
/// domain for them).
pub fn samples_lines(domain: u32) -> bool {
    ROUTES
        .get()
        .is_some_and(|routes| routes.samples_lines(domain))
}

/// After an exit of one of `d`'s vCPUs: each of its level SPIs' lines is
/// sampled and the virtual line follows (see `hv::passthrough`). Call with
/// the domain locked, so the interrupt handler's raise and this cannot
/// interleave. Returns the vCPUs (by index in `d`) a raise made
/// deliverable, to notify once the domain is unlocked; no allocation, as
/// this runs on every exit of such a domain. The look is inlined and the
/// work out of line: most domains have no such SPI, and their exits should
/// not pay the work's register saves.
#[inline(always)]
pub fn sample(gic: &Gic, d: &mut Domain) -> VcpuMask {
    if d.stopped || !samples_lines(d.id.0) {
        return VcpuMask::EMPTY;
    }
    sample_work(gic, d)
}

/// [`sample`]'s work, for a domain with level pass-through SPIs.
#[inline(never)]
fn sample_work(gic: &Gic, d: &mut Domain) -> VcpuMask {
    let mut notify = VcpuMask::EMPTY;
    let Some(routes) = ROUTES.get() else {
        return notify;
    };
    for route in routes.of_domain(d.id.0) {
        if route.trigger != Trigger::Level {
            continue;
        }
        match sample_level(gic, d, route.intid) {
            Ok(Some(target)) => notify.insert(target),
            Ok(None) => {}
            Err(e) => warn!("domain {}: passthrough SPI {}: {e}", d.id.0, route.intid),
        }
    }
    notify
}

/// Makes `d`'s virtual line of level SPI `intid` follow the device's line
/// (the physical pending bit), with the SPI disabled while it is high.
/// Returns the vCPU (index in `d`) a raise made deliverable. Call with the
/// domain locked: the samplers then run one after another, and the last
/// one's reading is what the guest sees.
fn sample_level(
    gic: &Gic,
    d: &mut Domain,
    intid: u32,
) -> Result<Option<usize>, hv::arm::vgic::VgicError> {
    let (Ok(id), status) = (IntId::new(intid), d.vgic.irq_status(0, intid)?) else {
        return Ok(None);
    };
    let pending = gic.spi_pending(id).unwrap_or(false);
    match hv::passthrough::sample_line(status.line, pending) {
        LineChange::Raise => {
            set_enabled(gic, intid, false);
            d.vgic.set_level(0, intid, true)
        }
        LineChange::Lower => {
            let lowered = d.vgic.set_level(0, intid, false);
            set_enabled(gic, intid, true);
            lowered
        }
        LineChange::Keep => Ok(None),
    }
}

/// The vCPU a vGIC change made deliverable, if any; an error is logged.
fn target_vcpu(
    d: &Domain,
    intid: u32,
    result: Result<Option<usize>, hv::arm::vgic::VgicError>,
) -> Option<VcpuId> {
    match result {
        Ok(target) => target.and_then(|t| d.vcpus.get(t).copied()),
        Err(e) => {
            warn!("domain {}: passthrough SPI {intid}: {e}", d.id.0);
            None
        }
    }
}

/// A restarted domain starts with every virtual line low: its SPIs are
/// enabled again (a level one may have been left disabled while high).
pub fn on_restart(gic: &Gic, id: DomainId) {
    let Some(routes) = ROUTES.get() else { return };
    for route in routes.of_domain(id.0) {
        set_enabled(gic, route.intid, true);
    }
}

/// A destroyed domain's SPIs are disabled for good.
pub fn on_destroy(gic: &Gic, id: DomainId) {
    let Some(routes) = ROUTES.get() else { return };
    for route in routes.of_domain(id.0) {
        set_enabled(gic, route.intid, false);
    }
}

/// Enables or disables a routed SPI at the distributor; a refusal (a
/// GICv3 write that did not complete in its bound) is logged.
fn set_enabled(gic: &Gic, intid: u32, enabled: bool) {
    let Ok(id) = IntId::new(intid) else { return };
    let result = if enabled {
        gic.enable_interrupt(id)
    } else {
        gic.disable_interrupt(id)
    };
    if let Err(e) = result {
        warn!(
            "passthrough: SPI {intid}: cannot {} it: {e}",
            if enabled { "enable" } else { "disable" }
        );
    }
}
