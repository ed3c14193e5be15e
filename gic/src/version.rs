//! Which GIC architecture version a firmware description names.

use core::fmt;

/// GIC architecture version, as far as the drivers care.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GicVersion {
    /// GICv2 (and GICv1 parts driven the same way): memory-mapped CPU interface.
    V2,
    /// GICv3/GICv4: affinity routing, redistributors, system-register CPU interface.
    V3,
}

impl GicVersion {
    /// Maps one device-tree `compatible` string of an interrupt-controller
    /// node to a version; `None` when unknown (the caller logs
    /// "unknown GIC compatible X").
    pub fn from_compatible(compatible: &str) -> Option<GicVersion> {
        match compatible {
            "arm,cortex-a15-gic" | "arm,gic-400" | "arm,cortex-a9-gic" | "arm,cortex-a7-gic" => {
                Some(GicVersion::V2)
            }
            "arm,gic-v3" => Some(GicVersion::V3),
            _ => None,
        }
    }

    /// The first known version in a node's `compatible` list (most specific first).
    pub fn from_compatible_list<'a>(
        compatibles: impl IntoIterator<Item = &'a str>,
    ) -> Option<GicVersion> {
        compatibles
            .into_iter()
            .find_map(GicVersion::from_compatible)
    }

    /// Maps the "GIC version" byte of an ACPI MADT GIC Distributor entry
    /// (ACPI 6.5 Table 5.48: 1 = GICv1, 2 = GICv2, 3 = GICv3, 4 = GICv4).
    /// 0 ("find out from the hardware") and reserved values give `None`.
    pub fn from_madt_version(version: u8) -> Option<GicVersion> {
        match version {
            1 | 2 => Some(GicVersion::V2),
            3 | 4 => Some(GicVersion::V3),
            _ => None,
        }
    }
}

impl fmt::Display for GicVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GicVersion::V2 => f.write_str("GICv2"),
            GicVersion::V3 => f.write_str("GICv3"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_tree_compatibles() {
        for v2 in [
            "arm,cortex-a15-gic",
            "arm,gic-400",
            "arm,cortex-a9-gic",
            "arm,cortex-a7-gic",
        ] {
            assert_eq!(
                GicVersion::from_compatible(v2),
                Some(GicVersion::V2),
                "{v2}"
            );
        }
        assert_eq!(
            GicVersion::from_compatible("arm,gic-v3"),
            Some(GicVersion::V3)
        );
        assert_eq!(GicVersion::from_compatible("arm,gic-v3-its"), None);
        assert_eq!(GicVersion::from_compatible(""), None);
        assert_eq!(GicVersion::from_compatible("ARM,GIC-400"), None);
    }

    #[test]
    fn compatible_list_takes_first_known() {
        // The Pi 4's GIC node.
        assert_eq!(
            GicVersion::from_compatible_list(["arm,gic-400"]),
            Some(GicVersion::V2)
        );
        assert_eq!(
            GicVersion::from_compatible_list(["vendor,unknown-gic", "arm,gic-v3"]),
            Some(GicVersion::V3)
        );
        assert_eq!(
            GicVersion::from_compatible_list(["brcm,bcm2836-l1-intc"]),
            None
        );
    }

    #[test]
    fn madt_versions() {
        assert_eq!(GicVersion::from_madt_version(0), None);
        assert_eq!(GicVersion::from_madt_version(2), Some(GicVersion::V2));
        assert_eq!(GicVersion::from_madt_version(3), Some(GicVersion::V3));
        assert_eq!(GicVersion::from_madt_version(4), Some(GicVersion::V3));
        assert_eq!(GicVersion::from_madt_version(5), None);
    }
}
