//! Turning a validated [`Config`] into `sched` pools and domains at boot.
//!
//! The checker cannot know the machine, so this is where the config meets it:
//! CPUs a pool names but the machine does not have (or that did not come up)
//! are left out with a warning; a pool that `sched` refuses (say, a core
//! granularity pool given half a core) is skipped with its reason, and so are
//! the domains that were to live in it. Everything else goes on: one bad pool
//! does not stop the others from booting.

use alloc::vec::Vec;
use core::fmt;

use sched::{CpuSet, DomainId, Platform, PoolId, System, SystemError};

use super::{Config, PoolConfig, format_cpu_list};

/// Something of the config that could not be applied as written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ApplyWarning {
    /// CPUs of the pool that are not online; the pool runs without them.
    MissingCpus {
        /// Pool index in the config.
        pool: usize,
        /// The CPUs left out.
        cpus: CpuSet,
    },
    /// `sched` refused to create the pool or give it its CPUs.
    PoolFailed {
        /// Pool index in the config.
        pool: usize,
        /// Why.
        error: SystemError,
    },
    /// The domain's pool was not created.
    DomainWithoutPool {
        /// Domain index in the config.
        domain: usize,
    },
    /// `sched` refused to create the domain.
    DomainFailed {
        /// Domain index in the config.
        domain: usize,
        /// Why.
        error: SystemError,
    },
    /// `sched` refused the domain's affinity (a pool CPU offline); it runs
    /// on every CPU of its pool.
    AffinityFailed {
        /// Domain index in the config.
        domain: usize,
        /// Why.
        error: SystemError,
    },
}

/// What [`apply`] built: `pools[i]` / `domains[i]` is the `sched` id of the
/// config's pool / domain `i`, `None` where a warning says why not.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// Pool ids, by config index.
    pub pools: Vec<Option<PoolId>>,
    /// Domain ids, by config index (their vCPUs start blocked).
    pub domains: Vec<Option<DomainId>>,
    /// What was left out, in the order it was found.
    pub warnings: Vec<ApplyWarning>,
}

/// A warning with the names from the config, for the boot log.
pub struct Describe<'a>(pub &'a Config, pub &'a ApplyWarning);

impl fmt::Display for Describe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Describe(config, warning) = self;
        let pool = |i: usize| config.pools.get(i).map_or("?", |p| p.name.as_str());
        let domain = |i: usize| config.domains.get(i).map_or("?", |d| d.name.as_str());
        match warning {
            ApplyWarning::MissingCpus { pool: i, cpus } => write!(
                f,
                "pool '{}': CPUs {} are not online; left out",
                pool(*i),
                format_cpu_list(cpus)
            ),
            ApplyWarning::PoolFailed { pool: i, error } => {
                write!(f, "pool '{}' not created: {error}", pool(*i))
            }
            ApplyWarning::DomainWithoutPool { domain: i } => {
                write!(f, "domain '{}' not created: its pool was not", domain(*i))
            }
            ApplyWarning::DomainFailed { domain: i, error } => {
                write!(f, "domain '{}' not created: {error}", domain(*i))
            }
            ApplyWarning::AffinityFailed { domain: i, error } => write!(
                f,
                "domain '{}': affinity not applied, it may run on any CPU of its pool: {error}",
                domain(*i)
            ),
        }
    }
}

/// Creates the config's pools (in order, so the first is pool 0) with their
/// online CPUs and pool parameters, then its domains, on a `system` that has no
/// pool yet. A config without pools gets `Pool-0` with every online CPU
/// (callers that know the capacity classes fill in [`super::automatic_pools`]
/// first). `config` must have passed [`Config::validate`]. A domain's hard
/// and soft affinity are set right after it is created, before any of its
/// vCPUs runs.
pub fn apply(config: &Config, system: &mut System, platform: &dyn Platform) -> Applied {
    let mut applied = Applied::default();
    let online = system.online_cpus();
    // A config without pools whose caller did not lay them out (the ARM boot
    // does, per capacity class) gets one pool of every online CPU.
    let automatic: Vec<PoolConfig>;
    let pools: &[PoolConfig] = if config.pools.is_empty() {
        automatic = super::automatic_pools(&[], &online);
        &automatic
    } else {
        &config.pools
    };
    for (index, pool) in pools.iter().enumerate() {
        let (Some(granularity), Some(placement)) = (pool.granularity(), pool.placement()) else {
            // Unreachable for a validated config; skip rather than guess.
            applied.pools.push(None);
            continue;
        };
        let created = system
            .pool_create(&pool.scheduler, granularity, placement)
            .and_then(|id| {
                for item in pool
                    .scheduler_params
                    .split(|c: char| c == ',' || c.is_whitespace())
                    .filter(|item| !item.is_empty())
                {
                    let (key, value) = item.split_once('=').unwrap_or((item, ""));
                    system.pool_set_param(id, key.trim(), value.trim())?;
                }
                Ok(id)
            });
        let id = match created {
            Ok(id) => id,
            Err(error) => {
                applied
                    .warnings
                    .push(ApplyWarning::PoolFailed { pool: index, error });
                applied.pools.push(None);
                continue;
            }
        };
        let missing = pool.cpus.difference(&online);
        if !missing.is_empty() {
            applied.warnings.push(ApplyWarning::MissingCpus {
                pool: index,
                cpus: missing,
            });
        }
        let present = pool.cpus.intersection(&online);
        if present.is_empty() {
            // Nothing to run on: its domains would never run. Say so instead.
            if id.0 != 0 {
                let _ = system.pool_destroy(id, platform);
            }
            applied.pools.push(None);
            continue;
        }
        if let Err(error) = system.pool_add_cpus(id, present, platform) {
            applied
                .warnings
                .push(ApplyWarning::PoolFailed { pool: index, error });
            // Pool 0 cannot be destroyed; an empty pool 0 is harmless (its
            // domains are refused below), any other one goes.
            if id.0 != 0 {
                let _ = system.pool_destroy(id, platform);
            }
            applied.pools.push(None);
            continue;
        }
        applied.pools.push(Some(id));
    }
    for (index, domain) in config.domains.iter().enumerate() {
        let pool = pools
            .iter()
            .position(|p| p.name == domain.pool)
            .and_then(|i| applied.pools.get(i).copied().flatten());
        let Some(pool) = pool else {
            applied
                .warnings
                .push(ApplyWarning::DomainWithoutPool { domain: index });
            applied.domains.push(None);
            continue;
        };
        match system.domain_create(pool, domain.vcpus, domain.params, platform) {
            Ok(id) => {
                if domain.hard_affinity.is_some() || domain.soft_affinity.is_some() {
                    let all = CpuSet::first_n(sched::MAX_CPUS);
                    let hard = domain.hard_affinity.unwrap_or(all);
                    let soft = domain.soft_affinity.unwrap_or_default();
                    if let Err(error) = system.domain_set_affinity(id, hard, soft, platform) {
                        applied.warnings.push(ApplyWarning::AffinityFailed {
                            domain: index,
                            error,
                        });
                    }
                }
                applied.domains.push(Some(id));
            }
            Err(error) => {
                applied.warnings.push(ApplyWarning::DomainFailed {
                    domain: index,
                    error,
                });
                applied.domains.push(None);
            }
        }
    }
    applied
}
