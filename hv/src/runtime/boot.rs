//! Building the scheduler at boot: the rendezvous bounds, the config's
//! pools and domains (or Xen's pool 0), the boot log of what was built, and
//! publishing it all to the event handlers.

use core::sync::atomic::Ordering;

use crate::config::{Applied, Config, Describe};
use log::{error, info, warn};
use sched::{
    CpuSet, Granularity, MAX_CPUS, Placement, Platform, PoolId, System, SystemConfig, Topology,
};

use super::{Arch, Runtime};

/// Reads the configuration compiled into the image (`blob`; empty when
/// built without one, then `None`: pool 0 with every CPU, no domains). A
/// bad one is reported and the machine boots with one pool of every enabled
/// CPU and no domains.
pub fn load_config(blob: &[u8], topology: &Topology) -> Option<Config> {
    if blob.is_empty() {
        info!("config: none in this build; one pool with every CPU, no domains");
        return None;
    }
    match Config::load(blob) {
        Ok(config) => {
            info!(
                "config: {} pools, {} domains",
                config.pools.len(),
                config.domains.len()
            );
            Some(config)
        }
        Err(e) => {
            error!("config: {e}; booting with one pool and no domains");
            Some(Config::single_pool(topology.enabled()))
        }
    }
}

impl<A: Arch> Runtime<A> {
    /// Builds the scheduler once every CPU is up (Xen patch 52/60): the
    /// config's pools and domains (their vCPUs blocked), or, without a
    /// config, pool 0 with every online CPU; names the pools (pool 0 is
    /// `Pool-0`, as in Xen, without a config) and publishes it all.
    pub fn boot(&self, topology: &Topology, config: Option<&Config>) -> Applied {
        self.trace_init(topology.len().min(MAX_CPUS));
        let (mut system, applied) = build_system(topology, config, self);
        let broken: CpuSet = (0..MAX_CPUS)
            .filter(|&c| self.break_cosched[c].load(Ordering::Relaxed))
            .collect();
        if !broken.is_empty() {
            system.plant_cosched_fault(broken);
        }
        self.arch.on_boot(&system);
        self.arch.without_irqs(|| {
            let mut names = self.names.lock();
            match config {
                Some(config) => {
                    for (spec, id) in config.pools.iter().zip(&applied.pools) {
                        if let Some(id) = id {
                            names.insert(*id, &spec.name);
                        }
                    }
                }
                None => names.insert(PoolId(0), "Pool-0"),
            }
        });
        let table = system.rendezvous_table();
        self.blocked_hints.call_once(|| system.blocked_hints());
        self.system.call_once(|| sched::SharedSystem::new(system));
        // Published last: event handlers only reach the system once this is set.
        self.table.call_once(|| table);
        applied
    }
}

/// Rendezvous bounds for this hypervisor. The bound must cover a sibling that
/// is briefly not running at all: under QEMU's TCG the host may not schedule a
/// virtual CPU's thread for several milliseconds, so 1 ms (sched's default,
/// fine on hardware) would abort healthy switches. On a loaded 2-core host
/// running 8-16 TCG threads, single starvations of over 100 ms were seen, so
/// the bound is 500 ms: it only ever costs time when a sibling is truly stuck.
pub const SYSTEM_CONFIG: SystemConfig = SystemConfig {
    rendezvous_timeout_ns: 500_000_000,
    retry_delay_ns: 1_000_000,
};

/// Builds the scheduler once every CPU is up (Xen patch 52/60): the config's
/// pools and domains (their vCPUs blocked), or, without a config, pool 0 with
/// every online CPU; logs each pool and the CPUs left to the idle scheduler.
pub fn build_system(
    topology: &Topology,
    config: Option<&Config>,
    platform: &dyn Platform,
) -> (System, Applied) {
    let mut system = System::new(topology.clone(), SYSTEM_CONFIG, sched::schedulers::create);
    let applied = match config {
        Some(config) => {
            let applied = crate::config::apply(config, &mut system, platform);
            for warning in &applied.warnings {
                warn!("config: {}", Describe(config, warning));
            }
            applied
        }
        None => {
            if let Err(e) =
                system.boot_pool0("credit2", Granularity::Cpu, Placement::Fixed, platform)
            {
                error!("sched: cannot build pool 0: {e}");
            }
            Applied::default()
        }
    };
    for pool in system.pools().collect::<alloc::vec::Vec<_>>() {
        if let Some(info) = system.pool_info(pool) {
            info!(
                "sched: pool {} ({}, {} granularity, {:?} placement) with CPUs {}",
                pool.0, info.scheduler, info.granularity, info.placement, info.cpus
            );
        }
    }
    let free = system.free_cpus();
    if !free.is_empty() {
        info!("sched: CPUs {free} are in no pool and run the idle scheduler");
    }
    (system, applied)
}

/// The pool layout for big.LITTLE machines and pool-less configs, on either
/// architecture and either firmware (the `classes` of a device tree's
/// capacities, of ACPI efficiency classes, of x86 hybrid core shapes):
/// without a config, a machine of several capacity classes gets one pool
/// per class; a config without pools gets the automatic layout (one pool
/// per class, or one of every CPU); a config whose pools mix classes is
/// kept, with a warning naming the CPUs.
pub fn with_pool_layout(
    config: Option<Config>,
    classes: &[platform::dt::CpuClass],
    topology: &Topology,
) -> Option<Config> {
    let automatic = || {
        let pools = crate::config::automatic_pools(classes, &topology.enabled());
        for pool in &pools {
            info!(
                "config: automatic pool '{}' with CPUs {}",
                pool.name,
                crate::config::format_cpu_list(&pool.cpus)
            );
        }
        pools
    };
    match config {
        None if classes.len() > 1 => {
            info!("config: big.LITTLE machine: one pool per capacity class");
            Some(Config {
                pools: automatic(),
                domains: alloc::vec::Vec::new(),
            })
        }
        None => None,
        Some(mut config) if config.pools.is_empty() => {
            info!("config: no pool listed: the automatic layout");
            config.pools = automatic();
            Some(config)
        }
        Some(config) => {
            for mixed in crate::config::mixed_class_pools(&config, classes) {
                warn!("config: {mixed}");
            }
            Some(config)
        }
    }
}
