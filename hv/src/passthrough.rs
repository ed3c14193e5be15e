//! Pass-through devices (Xen's `xen,passthrough`, a Jailhouse cell's
//! devices): which host ranges a domain may be given, what its guest
//! device-tree node says, which physical SPIs belong to which domain, and
//! how a level-sensitive line is mirrored into the owning domain's vGIC.
//!
//! # How an interrupt reaches the guest
//! An **edge** SPI is ended at once and injected (a latch in the vGIC).
//!
//! A **level** SPI is mirrored: its firing and every exit of one of the
//! domain's vCPUs are prompts to sample the physical pending bit (for a
//! level SPI it follows the device's line, enabled or not) under the
//! domain's lock ([`sample_line`]): a high line raises the virtual one and
//! disables the SPI at the distributor (it would fire until the guest
//! serviced the device); a low line lowers the virtual one and enables the
//! SPI again. The firing itself is never taken as "the line is high": the
//! CPU that acknowledged it may reach the domain's lock only after the
//! guest serviced the device and an exit lowered the line, and raising it
//! then would hand the guest a second interrupt for a device with nothing
//! to say (kvm-unit-tests' pl031 reads `RIS == 0` in its handler and
//! fails). A guest's EOI of a level interrupt brings a
//! maintenance exit, so the line is looked at right after the guest
//! serviced the device; a guest reading GICD_ISPENDR (also a trap) sees
//! the device's line as on bare metal, before the physical interrupt was
//! even taken.
//!
//! Why not the list register's HW bit (Xen's and KVM's way): the guest's
//! deactivation then deactivates the physical SPI, which must have been
//! acknowledged by the CPU the vCPU runs on, so the SPI has to follow the
//! vCPU from CPU to CPU (Xen's `arch_move_irqs` on every migration). Under
//! core scheduling vCPUs move at every switch; the mirror costs one
//! distributor read per exit of a domain that owns a level SPI and needs no
//! re-routing.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use crate::config::{DeviceConfig, Trigger};

/// A host-physical range the hypervisor keeps for itself (RAM, the GIC,
/// its console UART): no domain may be given any of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostRange {
    /// What it is, for the error line (`RAM`, `the GIC`, `the console UART`).
    pub what: String,
    /// First byte.
    pub start: u64,
    /// First byte past it.
    pub end: u64,
}

/// A device the host firmware describes (a device-tree node).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostDevice {
    /// Node path, for messages.
    pub path: String,
    /// Node name without unit address (`pl031`): the guest node's name.
    pub name: String,
    /// `compatible` strings.
    pub compatible: Vec<String>,
    /// First `reg` region.
    pub base: u64,
    /// Its size.
    pub size: u64,
    /// Its SPIs and how they are triggered.
    pub interrupts: Vec<(u32, Trigger)>,
}

/// What the host has that pass-through checks against.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HostMachine {
    /// Ranges no domain may have.
    pub reserved: Vec<HostRange>,
    /// Devices the firmware describes (none on an ACPI boot).
    pub devices: Vec<HostDevice>,
    /// INTIDs the host GIC implements (SPIs must be below).
    pub interrupt_limit: u32,
}

/// A device a domain is given, as its guest device tree and the interrupt
/// routing need it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedDevice {
    /// The config's name, for messages.
    pub name: String,
    /// Guest node name (the host node's, else the config's name).
    pub node_name: String,
    /// Guest node `compatible`.
    pub compatible: Vec<String>,
    /// Host-physical base.
    pub host_base: u64,
    /// Guest-physical base.
    pub guest_base: u64,
    /// Size in bytes.
    pub size: u64,
    /// SPIs (INTID) and their triggers; guest and host numbers are the same.
    pub interrupts: Vec<(u32, Trigger)>,
    /// The host node it was completed from, if any.
    pub host_node: Option<String>,
}

impl PlannedDevice {
    /// Its stage-2 mapping: the host range at its guest address, Device
    /// memory, never executable.
    pub fn stage2_region(&self) -> crate::arm::stage2::Region {
        crate::arm::stage2::Region {
            ipa: self.guest_base,
            pa: self.host_base,
            size: self.size,
            attrs: crate::arm::stage2::Attributes::DEVICE,
        }
    }

    /// Its SPIs as routes to `domain`.
    pub fn routes(&self, domain: u32) -> impl Iterator<Item = SpiRoute> + '_ {
        self.interrupts
            .iter()
            .map(move |&(intid, trigger)| SpiRoute {
                intid,
                domain,
                trigger,
            })
    }
}

impl fmt::Display for PlannedDevice {
    /// `'rtc': host 0x9010000 at guest 0x9010000 (+0x1000), arm,pl031, arm,primecell, from /pl031@9010000`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "'{}': host {:#x} at guest {:#x} (+{:#x}), {}",
            self.name,
            self.host_base,
            self.guest_base,
            self.size,
            self.compatible.join(", ")
        )?;
        match &self.host_node {
            Some(path) => write!(f, ", from {path}"),
            None => Ok(()),
        }
    }
}

/// The number of SPIs a domain's vGIC needs: QEMU virt's `minimum`, or up
/// to the highest SPI of its `devices`.
pub fn guest_spis(devices: &[PlannedDevice], minimum: u32) -> u32 {
    devices
        .iter()
        .flat_map(|d| d.interrupts.iter())
        .map(|&(intid, _)| intid.saturating_sub(*crate::config::SPI_RANGE.start()) + 1)
        .fold(minimum, u32::max)
}

/// Why a configured device cannot be given to its domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PassthroughError {
    /// The boot gave no description of the host's devices and memory to
    /// check it against (an ACPI boot).
    NoHostDescription,
    /// The host range covers something the hypervisor keeps.
    HostOverlap {
        /// What it covers.
        what: String,
        /// That range's first byte.
        start: u64,
        /// That range's end.
        end: u64,
    },
    /// Neither the config nor a host node at its base gives a `compatible`.
    NoCompatible,
    /// An SPI the host GIC does not implement.
    SpiNotImplemented {
        /// The INTID.
        intid: u32,
        /// INTIDs the GIC has.
        limit: u32,
    },
    /// The host node at its base is smaller than the range the config asks for.
    LargerThanHostNode {
        /// The node.
        path: String,
        /// The node's size.
        size: u64,
    },
}

impl fmt::Display for PassthroughError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoHostDescription => write!(
                f,
                "pass-through needs a device-tree boot (on an ACPI boot the host's devices are not known)"
            ),
            Self::HostOverlap { what, start, end } => write!(
                f,
                "its host range overlaps {what} ({start:#x}..{end:#x}), which the hypervisor keeps"
            ),
            Self::NoCompatible => write!(
                f,
                "no compatible: the config gives none and the host has no device node at its base"
            ),
            Self::SpiNotImplemented { intid, limit } => write!(
                f,
                "SPI {intid} is not implemented by the host GIC (INTIDs below {limit})"
            ),
            Self::LargerThanHostNode { path, size } => write!(
                f,
                "its size is larger than the host node {path} ({size:#x} bytes)"
            ),
        }
    }
}

/// Checks `device` against the host (`None`: nothing describes it, so
/// nothing is given) and completes it from the host's node at its base:
/// `compatible` and triggers the config leaves out.
pub fn plan(
    device: &DeviceConfig,
    host: Option<&HostMachine>,
) -> Result<PlannedDevice, PassthroughError> {
    let host = host.ok_or(PassthroughError::NoHostDescription)?;
    let end = device.base.saturating_add(device.size);
    if let Some(kept) = host
        .reserved
        .iter()
        .find(|r| device.base < r.end && r.start < end)
    {
        return Err(PassthroughError::HostOverlap {
            what: kept.what.clone(),
            start: kept.start,
            end: kept.end,
        });
    }
    let node = host.devices.iter().find(|d| d.base == device.base);
    if let Some(node) = node
        && device.size > node.size.next_multiple_of(crate::config::PAGE)
    {
        return Err(PassthroughError::LargerThanHostNode {
            path: node.path.clone(),
            size: node.size,
        });
    }
    let compatible = if device.compatible.is_empty() {
        node.map(|n| n.compatible.clone()).unwrap_or_default()
    } else {
        device.compatible.clone()
    };
    if compatible.is_empty() {
        return Err(PassthroughError::NoCompatible);
    }
    let mut interrupts = Vec::with_capacity(device.interrupts.len());
    for &intid in &device.interrupts {
        if intid >= host.interrupt_limit {
            return Err(PassthroughError::SpiNotImplemented {
                intid,
                limit: host.interrupt_limit,
            });
        }
        let from_host = node.and_then(|n| {
            n.interrupts
                .iter()
                .find(|&&(i, _)| i == intid)
                .map(|&(_, t)| t)
        });
        interrupts.push((
            intid,
            device.trigger.or(from_host).unwrap_or(Trigger::Level),
        ));
    }
    Ok(PlannedDevice {
        name: device.name.clone(),
        node_name: node.map_or_else(|| device.name.clone(), |n| n.name.clone()),
        compatible,
        host_base: device.base,
        guest_base: device.guest_base,
        size: device.size,
        interrupts,
        host_node: node.map(|n| n.path.clone()),
    })
}

/// A physical SPI given to a domain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpiRoute {
    /// The INTID (the same number in the guest).
    pub intid: u32,
    /// The owning domain.
    pub domain: u32,
    /// How it is signalled.
    pub trigger: Trigger,
}

/// Every SPI given to a domain, sorted by INTID: built once at boot, then
/// only read (the interrupt handler looks up each SPI it takes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SpiRoutes {
    routes: Vec<SpiRoute>,
    /// The domains owning a level-sensitive SPI, sorted: whose exits sample
    /// device lines. Looked up on every guest exit, so kept apart from
    /// `routes` (almost always empty, or one or two domains).
    level_domains: Vec<u32>,
}

impl SpiRoutes {
    /// The table of `routes` (an INTID given twice keeps its first owner;
    /// the config refuses that before).
    pub fn new(mut routes: Vec<SpiRoute>) -> Self {
        routes.sort_by_key(|r| r.intid);
        routes.dedup_by_key(|r| r.intid);
        let mut level_domains: Vec<u32> = routes
            .iter()
            .filter(|r| r.trigger == Trigger::Level)
            .map(|r| r.domain)
            .collect();
        level_domains.sort_unstable();
        level_domains.dedup();
        Self {
            routes,
            level_domains,
        }
    }

    /// Whether `domain` owns a level-sensitive SPI (its exits sample the
    /// device lines).
    #[inline]
    #[expect(
        clippy::manual_contains,
        reason = "`contains` on a u32 slice is an out-of-line unrolled search, \
                  7 instructions more on every guest exit than this walk of one or two entries"
    )]
    pub fn samples_lines(&self, domain: u32) -> bool {
        self.level_domains.iter().any(|&owner| owner == domain)
    }

    /// The route of `intid`, if a domain owns it.
    pub fn get(&self, intid: u32) -> Option<SpiRoute> {
        self.routes
            .binary_search_by_key(&intid, |r| r.intid)
            .ok()
            .map(|i| self.routes[i])
    }

    /// The SPIs `domain` owns.
    pub fn of_domain(&self, domain: u32) -> impl Iterator<Item = SpiRoute> + '_ {
        self.routes
            .iter()
            .copied()
            .filter(move |r| r.domain == domain)
    }

    /// Every route, by INTID.
    pub fn iter(&self) -> impl Iterator<Item = SpiRoute> + '_ {
        self.routes.iter().copied()
    }

    /// Whether no SPI is given to any domain.
    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
    }
}

/// What to do with a mirrored level SPI after sampling its physical line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineChange {
    /// The device asserts it and the virtual line is low: disable the
    /// physical SPI (it would fire until the guest serviced the device)
    /// and raise the virtual line.
    Raise,
    /// The device no longer asserts it: lower the virtual line and enable
    /// the physical SPI again.
    Lower,
    /// The virtual line already matches.
    Keep,
}

/// The mirror's rule, given the virtual line and the physical pending bit.
pub fn sample_line(virtual_line: bool, physical_pending: bool) -> LineChange {
    match (virtual_line, physical_pending) {
        (false, true) => LineChange::Raise,
        (true, false) => LineChange::Lower,
        _ => LineChange::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;
    use alloc::vec;

    fn qemu_virt() -> HostMachine {
        HostMachine {
            reserved: vec![
                HostRange {
                    what: "RAM".to_string(),
                    start: 0x4000_0000,
                    end: 0x8000_0000,
                },
                HostRange {
                    what: "the GIC".to_string(),
                    start: 0x0800_0000,
                    end: 0x0801_0000,
                },
                HostRange {
                    what: "the console UART".to_string(),
                    start: 0x0900_0000,
                    end: 0x0900_1000,
                },
            ],
            devices: vec![HostDevice {
                path: "/pl031@9010000".to_string(),
                name: "pl031".to_string(),
                compatible: vec!["arm,pl031".to_string(), "arm,primecell".to_string()],
                base: 0x0901_0000,
                size: 0x1000,
                interrupts: vec![(34, Trigger::Level)],
            }],
            interrupt_limit: 288,
        }
    }

    fn device(base: u64, size: u64, interrupts: &[u32]) -> DeviceConfig {
        DeviceConfig {
            name: "dev".to_string(),
            base,
            guest_base: base,
            size,
            interrupts: interrupts.to_vec(),
            compatible: vec![],
            trigger: None,
        }
    }

    #[test]
    fn a_device_is_completed_from_the_host_node_at_its_base() {
        let planned = plan(&device(0x0901_0000, 0x1000, &[34]), Some(&qemu_virt())).unwrap();
        assert_eq!(planned.node_name, "pl031");
        assert_eq!(planned.compatible, ["arm,pl031", "arm,primecell"]);
        assert_eq!(planned.interrupts, [(34, Trigger::Level)]);
        assert_eq!(planned.host_node.as_deref(), Some("/pl031@9010000"));
    }

    #[test]
    fn the_config_overrides_the_host_node() {
        let mut d = device(0x0901_0000, 0x1000, &[34]);
        d.compatible = vec!["vendor,rtc".to_string()];
        d.trigger = Some(Trigger::Edge);
        let planned = plan(&d, Some(&qemu_virt())).unwrap();
        assert_eq!(planned.compatible, ["vendor,rtc"]);
        assert_eq!(planned.interrupts, [(34, Trigger::Edge)]);
    }

    #[test]
    fn a_device_without_host_node_needs_a_compatible() {
        let host = qemu_virt();
        let bare = device(0x0a00_0000, 0x1000, &[40]);
        assert_eq!(
            plan(&bare, Some(&host)),
            Err(PassthroughError::NoCompatible)
        );
        let mut named = bare.clone();
        named.compatible = vec!["vendor,thing".to_string()];
        let planned = plan(&named, Some(&host)).unwrap();
        assert_eq!(
            (planned.node_name.as_str(), planned.host_node),
            ("dev", None)
        );
        // No trigger anywhere: level, the GIC's default.
        assert_eq!(planned.interrupts, [(40, Trigger::Level)]);
    }

    #[test]
    fn what_the_hypervisor_keeps_is_refused() {
        let host = qemu_virt();
        for (base, what) in [
            (0x0900_0000, "the console UART"),
            (0x0800_f000, "the GIC"),
            (0x7fff_f000, "RAM"),
        ] {
            let mut d = device(base, 0x2000, &[]);
            d.compatible = vec!["x".to_string()];
            let e = plan(&d, Some(&host)).unwrap_err();
            assert!(
                matches!(&e, PassthroughError::HostOverlap { what: w, .. } if w == what),
                "{base:#x}: {e}"
            );
            assert!(e.to_string().contains(what), "{e}");
        }
        // Touching but not overlapping is fine.
        let mut d = device(0x0900_1000, 0x1000, &[]);
        d.compatible = vec!["x".to_string()];
        assert!(plan(&d, Some(&host)).is_ok());
    }

    #[test]
    fn bad_sizes_and_spis_are_refused() {
        let host = qemu_virt();
        assert!(matches!(
            plan(&device(0x0901_0000, 0x2000, &[34]), Some(&host)),
            Err(PassthroughError::LargerThanHostNode { .. })
        ));
        assert_eq!(
            plan(&device(0x0901_0000, 0x1000, &[300]), Some(&host)),
            Err(PassthroughError::SpiNotImplemented {
                intid: 300,
                limit: 288
            })
        );
    }

    #[test]
    fn a_planned_device_gives_its_mapping_routes_and_spi_count() {
        let rtc = plan(&device(0x0901_0000, 0x1000, &[34]), Some(&qemu_virt())).unwrap();
        let region = rtc.stage2_region();
        assert_eq!(
            (region.ipa, region.pa, region.size, region.attrs),
            (
                0x0901_0000,
                0x0901_0000,
                0x1000,
                crate::arm::stage2::Attributes::DEVICE
            )
        );
        let routes: Vec<SpiRoute> = rtc.routes(3).collect();
        assert_eq!(
            routes,
            [SpiRoute {
                intid: 34,
                domain: 3,
                trigger: Trigger::Level
            }]
        );
        assert_eq!(
            rtc.to_string(),
            "'dev': host 0x9010000 at guest 0x9010000 (+0x1000), arm,pl031, arm,primecell, from /pl031@9010000"
        );
        // SPI 34 is the third SPI; a high one grows the vGIC.
        assert_eq!(guest_spis(core::slice::from_ref(&rtc), 64), 64);
        let high = PlannedDevice {
            interrupts: vec![(200, Trigger::Edge)],
            ..rtc
        };
        assert_eq!(guest_spis(&[high], 64), 169);
        assert_eq!(guest_spis(&[], 64), 64);
        // Nothing describes the host: nothing is given.
        assert_eq!(
            plan(&device(0x0901_0000, 0x1000, &[34]), None),
            Err(PassthroughError::NoHostDescription)
        );
    }

    #[test]
    fn routes_are_found_by_intid_and_by_domain() {
        let route = |intid, domain| SpiRoute {
            intid,
            domain,
            trigger: Trigger::Level,
        };
        let routes = SpiRoutes::new(vec![route(40, 2), route(34, 1), route(35, 1)]);
        assert_eq!(routes.get(34), Some(route(34, 1)));
        assert_eq!(routes.get(40), Some(route(40, 2)));
        assert_eq!(routes.get(33), None);
        let of_one: Vec<u32> = routes.of_domain(1).map(|r| r.intid).collect();
        assert_eq!(of_one, [34, 35]);
        assert!(SpiRoutes::default().is_empty());
        // Exits of the owners of level SPIs sample lines; of no other.
        let edge = SpiRoute {
            trigger: Trigger::Edge,
            ..route(50, 3)
        };
        let routes = SpiRoutes::new(vec![route(40, 2), edge, route(34, 1), route(35, 1)]);
        assert!(routes.samples_lines(1) && routes.samples_lines(2));
        assert!(!routes.samples_lines(3), "edge SPIs only");
        assert!(!routes.samples_lines(4));
        assert!(!SpiRoutes::default().samples_lines(1));
    }

    /// The mirror against one device line, with the two prompts that
    /// sample it: what the hypervisor's interrupt handler and exits do.
    struct MirroredLine {
        device: bool,
        virtual_line: bool,
        enabled: bool,
    }

    impl MirroredLine {
        fn sample(&mut self) {
            match sample_line(self.virtual_line, self.device) {
                LineChange::Raise => {
                    self.enabled = false;
                    self.virtual_line = true;
                }
                LineChange::Lower => {
                    self.virtual_line = false;
                    self.enabled = true;
                }
                LineChange::Keep => {}
            }
        }
    }

    #[test]
    fn an_interrupt_handled_after_the_guest_serviced_the_device_raises_nothing() {
        let mut line = MirroredLine {
            device: false,
            virtual_line: false,
            enabled: true,
        };
        // The device asserts; CPU 0 acknowledges the SPI, then stalls
        // before it takes the domain's lock.
        line.device = true;
        let acknowledged = line.enabled;
        assert!(acknowledged);
        // The guest traps (GICD_ISPENDR read): the exit's sample raises.
        line.sample();
        assert!(line.virtual_line && !line.enabled);
        // The guest takes it, services the device, traps again: lowered.
        line.device = false;
        line.sample();
        assert!(!line.virtual_line && line.enabled);
        // CPU 0 gets the lock at last: its prompt samples a low line, so
        // the guest is not handed a second interrupt.
        line.sample();
        assert!(!line.virtual_line, "a stale interrupt raised the line");
        assert!(line.enabled, "the SPI must stay enabled for the next one");
    }

    #[test]
    fn the_mirror_follows_the_device_line() {
        assert_eq!(sample_line(false, true), LineChange::Raise);
        assert_eq!(sample_line(true, false), LineChange::Lower);
        assert_eq!(sample_line(true, true), LineChange::Keep);
        assert_eq!(sample_line(false, false), LineChange::Keep);
    }
}
