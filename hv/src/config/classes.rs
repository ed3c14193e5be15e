//! big.LITTLE and the pool layout: the automatic pools of a config that lists
//! none (one per capacity class), and the warning for a written pool that
//! mixes classes.
//!
//! A vCPU that moves between a big and a LITTLE CPU changes speed under its
//! scheduler's feet (credit accounting, rt budgets and the guest's own timing
//! all assume CPUs of one speed), so by default each class gets a pool of its
//! own. Xen refuses such machines unless booted with `hmp-unsafe` or given
//! boot cpupools by hand; here the split is automatic, and a config that lists
//! pools overrides it (mixing classes is allowed, with a warning that names
//! the CPUs).

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use platform::dt::{ClassKind, CpuClass};
use sched::CpuSet;

use super::{Config, PoolConfig, format_cpu_list};

/// The pool a machine with one capacity class gets when the config lists none.
pub const SINGLE_CLASS_POOL: &str = "Pool-0";

/// The automatic pool names, for messages.
pub const AUTOMATIC_POOL_NAMES_HELP: &str = "Pool-0 on a machine of one CPU type; big, LITTLE (and mid1, mid2, ... between them) \
     on big.LITTLE machines; class1, class2, ... for CPU types that cannot be ranked";

/// Whether the automatic layout can create a pool called `name`
/// ([`SINGLE_CLASS_POOL`] or a [`ClassKind`]'s name).
pub fn is_automatic_pool_name(name: &str) -> bool {
    let numbered = |prefix: &str| {
        name.strip_prefix(prefix)
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    };
    matches!(name, SINGLE_CLASS_POOL | "big" | "LITTLE") || numbered("mid") || numbered("class")
}

/// The default pool layout over the `online` CPUs: one pool (credit2, `cpu`
/// granularity) per capacity class, named after the class (`big`, `LITTLE`,
/// ...), ordered by each class's lowest CPU so the boot CPU's class (CPU 0 in
/// device-tree order) is pool 0; or, on a machine with one class,
/// [`SINGLE_CLASS_POOL`] with every online CPU. Classes with no online CPU get
/// no pool.
pub fn automatic_pools(classes: &[CpuClass], online: &CpuSet) -> Vec<PoolConfig> {
    if classes.len() <= 1 {
        return alloc::vec![PoolConfig::new(SINGLE_CLASS_POOL, *online)];
    }
    let mut by_first_cpu: Vec<&CpuClass> = classes.iter().collect();
    by_first_cpu.sort_by_key(|class| class.cpus.first());
    by_first_cpu
        .into_iter()
        .filter_map(|class| {
            let cpus = class.cpus.intersection(online);
            (!cpus.is_empty()).then(|| PoolConfig::new(&class.kind.to_string(), cpus))
        })
        .collect()
}

/// A written pool whose CPUs belong to more than one capacity class.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MixedPool {
    /// The pool's name.
    pub name: String,
    /// Each class it takes CPUs from, fastest first, with those CPUs.
    pub parts: Vec<(ClassKind, CpuSet)>,
}

impl fmt::Display for MixedPool {
    /// `pool 'all' mixes capacity classes: big CPUs 4-5, LITTLE CPUs 0-3; ...`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pool '{}' mixes capacity classes: ", self.name)?;
        for (i, (kind, cpus)) in self.parts.iter().enumerate() {
            if i > 0 {
                write!(f, ", ")?;
            }
            write!(f, "{kind} CPUs {}", format_cpu_list(cpus))?;
        }
        write!(
            f,
            "; its vCPUs run faster or slower depending on the CPU they get"
        )
    }
}

/// The config's pools that take CPUs from more than one of `classes` (which
/// come fastest first, as [`platform::dt::MachineDescription::cpu_classes`]
/// gives them), in config order.
pub fn mixed_class_pools(config: &Config, classes: &[CpuClass]) -> Vec<MixedPool> {
    config
        .pools
        .iter()
        .filter_map(|pool| {
            let parts: Vec<(ClassKind, CpuSet)> = classes
                .iter()
                .map(|class| (class.kind, class.cpus.intersection(&pool.cpus)))
                .filter(|(_, cpus)| !cpus.is_empty())
                .collect();
            (parts.len() > 1).then(|| MixedPool {
                name: pool.name.clone(),
                parts,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use super::*;
    use crate::config::{DomainConfig, parse_cpu_list};

    fn cpus(list: &str) -> CpuSet {
        parse_cpu_list(list).unwrap()
    }

    fn class(kind: ClassKind, list: &str, capacity: u32) -> CpuClass {
        CpuClass {
            kind,
            cpus: cpus(list),
            capacity: Some(capacity),
            compatible: None,
        }
    }

    /// RK3399: LITTLE 0-3 (485), big 4-5 (1024), fastest first.
    fn rk3399() -> Vec<CpuClass> {
        vec![
            class(ClassKind::Big, "4-5", 1024),
            class(ClassKind::Little, "0-3", 485),
        ]
    }

    fn layout(pools: &[PoolConfig]) -> Vec<(String, String)> {
        pools
            .iter()
            .map(|p| (p.name.clone(), format_cpu_list(&p.cpus)))
            .collect()
    }

    #[test]
    fn each_class_gets_its_own_pool_boot_cpu_class_first() {
        let pools = automatic_pools(&rk3399(), &cpus("0-5"));
        assert_eq!(
            layout(&pools),
            [
                ("LITTLE".to_string(), "0-3".to_string()),
                ("big".to_string(), "4-5".to_string())
            ]
        );
        assert!(pools.iter().all(|p| p.scheduler == "credit2"));
        // CPUs that did not come up are left out; a class with none has no pool.
        let pools = automatic_pools(&rk3399(), &cpus("0-2"));
        assert_eq!(layout(&pools), [("LITTLE".to_string(), "0-2".to_string())]);
    }

    #[test]
    fn one_class_is_one_pool_of_every_cpu() {
        let one = [class(ClassKind::Big, "0-3", 1024)];
        let pools = automatic_pools(&one, &cpus("0-3"));
        assert_eq!(layout(&pools), [("Pool-0".to_string(), "0-3".to_string())]);
        assert_eq!(layout(&automatic_pools(&[], &cpus("0-1")))[0].1, "0-1");
    }

    #[test]
    fn automatic_names_are_the_class_names() {
        for kind in [
            ClassKind::Big,
            ClassKind::Little,
            ClassKind::Mid(1),
            ClassKind::Mid(12),
            ClassKind::Unranked(3),
        ] {
            assert!(is_automatic_pool_name(&kind.to_string()), "{kind}");
        }
        assert!(is_automatic_pool_name("Pool-0"));
        for name in ["little", "mid", "classX", "general", "big2", ""] {
            assert!(!is_automatic_pool_name(name), "{name}");
        }
    }

    #[test]
    fn a_pool_across_classes_is_named_with_its_cpus() {
        let config = Config {
            pools: vec![
                PoolConfig::new("all-but-one", cpus("0-2,4-5")),
                PoolConfig::new("spare", cpus("3")),
            ],
            domains: vec![DomainConfig::new("a", "all-but-one")],
        };
        assert_eq!(config.validate(), vec![]);
        let mixed = mixed_class_pools(&config, &rk3399());
        assert_eq!(mixed.len(), 1);
        assert_eq!(
            mixed[0].to_string(),
            "pool 'all-but-one' mixes capacity classes: big CPUs 4-5, LITTLE CPUs 0-2; \
             its vCPUs run faster or slower depending on the CPU they get"
        );
        // Pools inside one class, and any pool of a one-class machine, are fine.
        let split = Config {
            pools: automatic_pools(&rk3399(), &cpus("0-5")),
            domains: vec![],
        };
        assert!(mixed_class_pools(&split, &rk3399()).is_empty());
        let one = [class(ClassKind::Big, "0-5", 1024)];
        assert!(mixed_class_pools(&config, &one).is_empty());
    }

    /// The automatic layout of the real big.LITTLE device trees in
    /// `shared/fixtures/dtb` (README there): pools as `(name, CPUs)`.
    fn fixture_layout(blob: &[u8]) -> Vec<(String, String)> {
        let machine = platform::dt::parse(blob).unwrap();
        let online = machine.topology().unwrap().enabled();
        layout(&automatic_pools(&machine.cpu_classes(), &online))
    }

    macro_rules! fixture {
        ($name:literal) => {
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/fixtures/dtb/",
                $name
            ))
            .as_slice()
        };
    }

    #[test]
    fn real_big_little_boards_get_a_pool_per_class() {
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(
            fixture_layout(fixture!("rk3399-rockpro64.dtb")),
            [pair("LITTLE", "0-3"), pair("big", "4-5")]
        );
        assert_eq!(
            fixture_layout(fixture!("juno-r2.dtb")),
            [pair("big", "0-1"), pair("LITTLE", "2-5")]
        );
        // Two A76 clusters of one capacity share the big pool.
        assert_eq!(
            fixture_layout(fixture!("rk3588-rock-5b.dtb")),
            [pair("LITTLE", "0-3"), pair("big", "4-7")]
        );
        assert_eq!(
            fixture_layout(fixture!("bcm2711-rpi-4-b.dtb")),
            [pair("Pool-0", "0-3")]
        );
        // A written pool of every CPU mixes the classes.
        let machine = platform::dt::parse(fixture!("rk3588-rock-5b.dtb")).unwrap();
        let everything = Config {
            pools: vec![PoolConfig::new("all", cpus("0-7"))],
            domains: vec![],
        };
        let mixed = mixed_class_pools(&everything, &machine.cpu_classes());
        assert_eq!(mixed.len(), 1);
        assert!(
            mixed[0]
                .to_string()
                .starts_with("pool 'all' mixes capacity classes: big CPUs 4-7, LITTLE CPUs 0-3;"),
            "{}",
            mixed[0]
        );
    }
}
