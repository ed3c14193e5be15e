//! Runtime cpupool operations, shared by the hypervisor console's commands
//! and the privileged `POOL_OP` hypercall: create, destroy, add or remove a
//! CPU, move a domain, list. Each either completes or changes nothing (the
//! `sched` operations it calls refuse before they modify anything), and each
//! failure is a [`PoolOpError`] with a message for the console and an
//! [`HvError`] code for the hypercall.
//!
//! CPUs join and leave a pool by whole sched resource, as in Xen: adding CPU
//! 5 to a `core`-granularity pool adds its SMT sibling too (both must be
//! free); removing it removes both.
//!
//! Pools have names (from the config, or given at creation) kept in
//! [`PoolNames`] beside the scheduler, which only knows ids.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use guest_abi::HvError;
use sched::{CpuSet, DomainId, Granularity, Placement, Platform, PoolId, System, SystemError};

/// Names of the pools, by id.
#[derive(Clone, Debug, Default)]
pub struct PoolNames {
    names: Vec<(PoolId, String)>,
}

impl PoolNames {
    /// No names.
    pub const fn new() -> Self {
        Self { names: Vec::new() }
    }

    /// Names pool `id` (replacing an old name).
    pub fn insert(&mut self, id: PoolId, name: &str) {
        self.remove(id);
        self.names.push((id, String::from(name)));
    }

    /// Forgets pool `id`'s name.
    pub fn remove(&mut self, id: PoolId) {
        self.names.retain(|(p, _)| *p != id);
    }

    /// Pool `id`'s name, if it has one.
    pub fn name(&self, id: PoolId) -> Option<&str> {
        self.names
            .iter()
            .find(|(p, _)| *p == id)
            .map(|(_, n)| n.as_str())
    }

    /// The pool called `name`.
    pub fn find(&self, name: &str) -> Option<PoolId> {
        self.names.iter().find(|(_, n)| n == name).map(|(p, _)| *p)
    }
}

/// Why a pool operation was refused. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PoolOpError {
    /// No pool with this id or name.
    UnknownPool(String),
    /// No domain with this id.
    UnknownDomain(u32),
    /// A pool already has this name.
    NameTaken(String),
    /// The name is empty, too long or has characters other than letters,
    /// digits, `-` and `_`.
    BadName(String),
    /// Not a scheduler name.
    UnknownScheduler(String),
    /// Not a granularity name.
    UnknownGranularity(String),
    /// A domain cannot move to a pool without CPUs.
    EmptyPool(PoolId),
    /// A scheduler's parameter command for a domain in a pool run by
    /// another scheduler (as `xl sched-credit2` on a credit domain).
    WrongScheduler {
        /// The domain.
        domain: u32,
        /// The command's scheduler.
        wanted: &'static str,
        /// Its pool's.
        actual: &'static str,
    },
    /// The scheduler refused.
    System(SystemError),
    /// The domain is stopped (powered off, destroyed or faulted).
    DomainStopped(u32),
    /// The hypervisor cannot do this here (why).
    NotSupported(&'static str),
}

impl fmt::Display for PoolOpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownPool(pool) => write!(f, "no pool {pool}"),
            Self::UnknownDomain(d) => write!(f, "no domain {d}"),
            Self::NameTaken(name) => write!(f, "a pool is already called '{name}'"),
            Self::BadName(name) => write!(
                f,
                "bad pool name '{name}' (1-{MAX_NAME} letters, digits, '-' or '_', not all digits)"
            ),
            Self::UnknownScheduler(name) => write!(
                f,
                "unknown scheduler '{name}'; valid: {}",
                sched::scheduler::SCHEDULER_NAMES
            ),
            Self::UnknownGranularity(name) => write!(
                f,
                "unknown granularity '{name}'; valid: cpu, core, cluster, socket"
            ),
            Self::EmptyPool(pool) => write!(f, "pool {} has no CPUs", pool.0),
            Self::WrongScheduler {
                domain,
                wanted,
                actual,
            } => write!(
                f,
                "domain {domain} is in a {actual} pool, not a {wanted} one"
            ),
            Self::System(e) => write!(f, "{e}"),
            Self::DomainStopped(d) => write!(f, "domain {d} is stopped"),
            Self::NotSupported(why) => write!(f, "{why}"),
        }
    }
}

impl PoolOpError {
    /// The hypercall's error code.
    pub fn code(&self) -> HvError {
        match self {
            Self::UnknownPool(_) | Self::UnknownDomain(_) => HvError::NotFound,
            Self::BadName(_)
            | Self::UnknownScheduler(_)
            | Self::UnknownGranularity(_)
            | Self::WrongScheduler { .. } => HvError::InvalidParameter,
            Self::NameTaken(_) | Self::EmptyPool(_) | Self::DomainStopped(_) => HvError::Busy,
            Self::NotSupported(_) => HvError::NotSupported,
            Self::System(e) => match e {
                SystemError::UnknownPool(_)
                | SystemError::UnknownDomain(_)
                | SystemError::UnknownCpu(_)
                | SystemError::UnknownVcpu(_) => HvError::NotFound,
                SystemError::CannotDestroyPool0 => HvError::Denied,
                SystemError::AffinityOutsidePool { .. }
                | SystemError::DomainNotPaused(_)
                | SystemError::Scheduler {
                    error: sched::SchedError::InvalidParam { .. },
                    ..
                } => HvError::InvalidParameter,
                SystemError::TooManyPools => HvError::NoResources,
                _ => HvError::Busy,
            },
        }
    }
}

impl From<SystemError> for PoolOpError {
    fn from(e: SystemError) -> Self {
        Self::System(e)
    }
}

/// Longest pool name.
pub const MAX_NAME: usize = 32;

fn valid_name(name: &str) -> bool {
    (1..=MAX_NAME).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        // All digits would read as a pool id.
        && !name.bytes().all(|b| b.is_ascii_digit())
}

/// The pool `id` if it exists.
pub fn existing(system: &System, id: PoolId) -> Result<PoolId, PoolOpError> {
    system
        .pool_info(id)
        .map(|_| id)
        .ok_or_else(|| PoolOpError::UnknownPool(alloc::format!("{}", id.0)))
}

/// Finds a pool by name.
pub fn by_name(names: &PoolNames, system: &System, name: &str) -> Result<PoolId, PoolOpError> {
    names
        .find(name)
        .filter(|&id| system.pool_info(id).is_some())
        .ok_or_else(|| PoolOpError::UnknownPool(alloc::format!("'{name}'")))
}

/// Renames pool `id` to `name` (Xen's `xl cpupool-rename`); the old name
/// comes back.
pub fn rename(
    system: &System,
    names: &mut PoolNames,
    id: PoolId,
    name: &str,
) -> Result<String, PoolOpError> {
    let id = existing(system, id)?;
    if !valid_name(name) {
        return Err(PoolOpError::BadName(String::from(name)));
    }
    if names
        .find(name)
        .is_some_and(|other| other != id && system.pool_info(other).is_some())
    {
        return Err(PoolOpError::NameTaken(String::from(name)));
    }
    let old = names
        .name(id)
        .map_or_else(|| alloc::format!("pool{}", id.0), String::from);
    names.insert(id, name);
    Ok(old)
}

/// Creates an empty pool called `name` (fixed placement, as config pools
/// default to); `name` may be `None` for the hypercall, which names it
/// `poolN`.
pub fn create(
    system: &mut System,
    names: &mut PoolNames,
    name: Option<&str>,
    scheduler: &str,
    granularity: &str,
) -> Result<PoolId, PoolOpError> {
    create_with(
        system,
        names,
        name,
        scheduler,
        granularity,
        Placement::Fixed,
    )
}

/// [`create`] with the units' placement (`spread` fills a core's spare
/// threads with the same domain's other vCPUs).
pub fn create_with(
    system: &mut System,
    names: &mut PoolNames,
    name: Option<&str>,
    scheduler: &str,
    granularity: &str,
    placement: Placement,
) -> Result<PoolId, PoolOpError> {
    if let Some(name) = name {
        if !valid_name(name) {
            return Err(PoolOpError::BadName(String::from(name)));
        }
        if names
            .find(name)
            .is_some_and(|id| system.pool_info(id).is_some())
        {
            return Err(PoolOpError::NameTaken(String::from(name)));
        }
    }
    let granularity: Granularity = granularity
        .parse()
        .map_err(|_| PoolOpError::UnknownGranularity(String::from(granularity)))?;
    let id = system
        .pool_create(scheduler, granularity, placement)
        .map_err(|e| match e {
            SystemError::Scheduler { .. } => PoolOpError::UnknownScheduler(String::from(scheduler)),
            other => PoolOpError::System(other),
        })?;
    match name {
        Some(name) => names.insert(id, name),
        None => names.insert(id, &alloc::format!("pool{}", id.0)),
    }
    Ok(id)
}

/// Destroys an empty pool (no domains; its CPUs become free).
pub fn destroy(
    system: &mut System,
    names: &mut PoolNames,
    pool: PoolId,
    platform: &dyn Platform,
) -> Result<CpuSet, PoolOpError> {
    let cpus = system
        .pool_info(existing(system, pool)?)
        .map(|p| p.cpus)
        .unwrap_or_default();
    system.pool_destroy(pool, platform)?;
    names.remove(pool);
    Ok(cpus)
}

/// The CPUs that move with `cpu` in `pool`: its sched resource at the pool's
/// granularity, among the online CPUs.
fn resource_of(system: &System, pool: PoolId, cpu: usize) -> Result<CpuSet, PoolOpError> {
    let info = system
        .pool_info(existing(system, pool)?)
        .ok_or_else(|| PoolOpError::UnknownPool(alloc::format!("{}", pool.0)))?;
    if cpu >= system.topology().len() {
        return Err(SystemError::UnknownCpu(cpu).into());
    }
    let siblings = system.topology().siblings(cpu, info.granularity);
    Ok(siblings.intersection(&system.online_cpus()))
}

/// Adds free CPU `cpu` and the rest of its sched resource to `pool`; returns
/// the CPUs added.
pub fn add_cpu(
    system: &mut System,
    pool: PoolId,
    cpu: usize,
    platform: &dyn Platform,
) -> Result<CpuSet, PoolOpError> {
    let cpus = resource_of(system, pool, cpu)?;
    if let Some(owner) = system.pool_of_cpu(cpu) {
        return Err(SystemError::CpuNotFree { cpu, pool: owner }.into());
    }
    system.pool_add_cpus(pool, cpus, platform)?;
    Ok(cpus)
}

/// Removes CPU `cpu` and the rest of its sched resource from `pool` (its
/// units move to the pool's other CPUs); returns the CPUs removed.
pub fn remove_cpu(
    system: &mut System,
    pool: PoolId,
    cpu: usize,
    platform: &dyn Platform,
) -> Result<CpuSet, PoolOpError> {
    let cpus = resource_of(system, pool, cpu)?;
    if system.pool_of_cpu(cpu) != Some(pool) {
        return Err(SystemError::CpuNotInPool { cpu, pool }.into());
    }
    system.pool_remove_cpus(pool, cpus, platform)?;
    Ok(cpus)
}

/// Moves domain `domain` to `pool`; returns the pool it left. Its units are
/// rebuilt for the new pool and the CPUs still running its vCPUs are kicked
/// to switch them out (the caller may wait for that).
pub fn move_domain(
    system: &mut System,
    domain: u32,
    pool: PoolId,
    platform: &dyn Platform,
) -> Result<PoolId, PoolOpError> {
    let from = system
        .domain_pool(DomainId(domain))
        .ok_or(PoolOpError::UnknownDomain(domain))?;
    let info = system
        .pool_info(existing(system, pool)?)
        .ok_or_else(|| PoolOpError::UnknownPool(alloc::format!("{}", pool.0)))?;
    if info.cpus.is_empty() {
        return Err(PoolOpError::EmptyPool(pool));
    }
    system.domain_move(DomainId(domain), pool, platform)?;
    Ok(from)
}

/// The ABI's name for a scheduler.
pub fn abi_scheduler(name: &str) -> Option<guest_abi::Scheduler> {
    use guest_abi::Scheduler;
    Some(match name {
        "credit2" => Scheduler::Credit2,
        "credit" => Scheduler::Credit,
        "null" => Scheduler::Null,
        "rt" => Scheduler::Rt,
        "arinc653" => Scheduler::Arinc653,
        _ => return None,
    })
}

/// The scheduler name for an ABI scheduler.
pub fn scheduler_name(scheduler: guest_abi::Scheduler) -> &'static str {
    use guest_abi::Scheduler;
    match scheduler {
        Scheduler::Credit2 => "credit2",
        Scheduler::Credit => "credit",
        Scheduler::Null => "null",
        Scheduler::Rt => "rt",
        Scheduler::Arinc653 => "arinc653",
    }
}

/// The ABI's granularity.
pub fn abi_granularity(granularity: Granularity) -> guest_abi::Granularity {
    match granularity {
        Granularity::Cpu => guest_abi::Granularity::Cpu,
        Granularity::Core => guest_abi::Granularity::Core,
        Granularity::Cluster => guest_abi::Granularity::Cluster,
        Granularity::Socket => guest_abi::Granularity::Socket,
    }
}

/// The granularity name for an ABI granularity.
pub fn granularity_name(granularity: guest_abi::Granularity) -> &'static str {
    match granularity {
        guest_abi::Granularity::Cpu => "cpu",
        guest_abi::Granularity::Core => "core",
        guest_abi::Granularity::Cluster => "cluster",
        guest_abi::Granularity::Socket => "socket",
    }
}

/// `POOL_OP List`: the pool with the smallest id at least `from`.
pub fn list_from(system: &System, from: u32) -> Option<guest_abi::PoolInfo> {
    let id = system.pools().filter(|p| p.0 >= from).min_by_key(|p| p.0)?;
    let info = system.pool_info(id)?;
    let bitmap = info
        .cpus
        .iter()
        .filter(|&c| c < 64)
        .fold(0u64, |bits, c| bits | 1 << c);
    Some(guest_abi::PoolInfo {
        id: id.0,
        scheduler: abi_scheduler(info.scheduler)?,
        granularity: abi_granularity(info.granularity),
        cpus: info.cpus.len() as u16,
        domains: info.domains as u32,
        cpu_bitmap: bitmap,
    })
}

/// Runs one `POOL_OP` from the privileged domain. Created pools are named
/// `poolN`. Returns `x0..=x3` on success.
pub fn hypercall(
    system: &mut System,
    names: &mut PoolNames,
    op: guest_abi::PoolOp,
    platform: &dyn Platform,
) -> Result<guest_abi::Regs, PoolOpError> {
    use guest_abi::PoolOp;
    match op {
        PoolOp::List { from } => list_from(system, from)
            .map(guest_abi::PoolInfo::to_regs)
            .ok_or_else(|| PoolOpError::UnknownPool(alloc::format!("{from} or later"))),
        PoolOp::Create {
            scheduler,
            granularity,
        } => {
            let id = create(
                system,
                names,
                None,
                scheduler_name(scheduler),
                granularity_name(granularity),
            )?;
            Ok([0, u64::from(id.0), 0, 0])
        }
        PoolOp::Destroy { pool } => {
            destroy(system, names, PoolId(pool), platform)?;
            Ok([0; 4])
        }
        PoolOp::AddCpu { pool, cpu } => {
            add_cpu(system, PoolId(pool), cpu as usize, platform)?;
            Ok([0; 4])
        }
        PoolOp::RemoveCpu { pool, cpu } => {
            remove_cpu(system, PoolId(pool), cpu as usize, platform)?;
            Ok([0; 4])
        }
        PoolOp::MoveDomain { domain, pool } => {
            move_domain(system, domain, PoolId(pool), platform)?;
            Ok([0; 4])
        }
        PoolOp::PinDomain { domain, hard, soft } => {
            let set = |bits: u64| {
                let mut set = CpuSet::new();
                for cpu in (0..64).filter(|&cpu| bits >> cpu & 1 != 0) {
                    set.insert(cpu);
                }
                set
            };
            system
                .domain_set_affinity(DomainId(domain), set(hard), set(soft), platform)
                .map_err(|e| match e {
                    SystemError::UnknownDomain(_) => PoolOpError::UnknownDomain(domain),
                    e => PoolOpError::System(e),
                })?;
            Ok([0; 4])
        }
        PoolOp::PauseDomain { domain } => {
            system.domain_pause(DomainId(domain), platform)?;
            Ok([0; 4])
        }
        PoolOp::UnpauseDomain { domain } => {
            system.domain_unpause(DomainId(domain), platform)?;
            Ok([0; 4])
        }
        PoolOp::GetDomainParams { domain } => {
            let params = system
                .domain_params(DomainId(domain))
                .ok_or(PoolOpError::UnknownDomain(domain))?;
            let [a, b] = abi_params(&params).to_words();
            Ok([0, a, b, 0])
        }
        PoolOp::SetDomainParams { domain, params } => {
            let id = DomainId(domain);
            let mut new = system
                .domain_params(id)
                .ok_or(PoolOpError::UnknownDomain(domain))?;
            new.weight = params.weight;
            new.cap_percent = params.cap;
            new.extratime = params.extratime;
            new.period_ns = u64::from(params.period_us) * 1000;
            new.budget_ns = u64::from(params.budget_us) * 1000;
            system.domain_set_params(id, new)?;
            Ok([0; 4])
        }
        // They need the architecture (the domain's memory and vCPUs):
        // `Runtime::pool_hypercall` carries them out before this.
        PoolOp::DestroyDomain { .. } | PoolOp::RestartDomain { .. } => Err(
            PoolOpError::NotSupported("destroy and restart go through the runtime"),
        ),
    }
}

/// A domain's parameters as the hypercall carries them (µs, saturated).
fn abi_params(params: &sched::SchedParams) -> guest_abi::DomainParams {
    let us = |ns: u64| u32::try_from(ns / 1000).unwrap_or(u32::MAX);
    guest_abi::DomainParams {
        weight: params.weight,
        cap: params.cap_percent,
        extratime: params.extratime,
        period_us: us(params.period_ns),
        budget_us: us(params.budget_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sched::lockstep::RecordingPlatform;
    use sched::{SchedParams, SystemConfig, Topology};

    /// `--smp 8,clusters=2,cores=2,threads=2`: pool 0 (credit2, cpu
    /// granularity) on CPUs 0-3, pool 1 (credit2, core) on 4-7 with a
    /// two-vCPU domain, as the QEMU scenarios run.
    fn machine() -> (System, PoolNames, RecordingPlatform, DomainId) {
        let platform = RecordingPlatform::default();
        let mut system = System::new(
            Topology::uniform(1, 2, 2, 2),
            SystemConfig::default(),
            sched::schedulers::create,
        );
        let mut names = PoolNames::new();
        let general = system
            .pool_create("credit2", Granularity::Cpu, Placement::Fixed)
            .unwrap();
        system
            .pool_add_cpus(general, (0..4).collect(), &platform)
            .unwrap();
        names.insert(general, "general");
        let smt = create(&mut system, &mut names, Some("smt"), "credit2", "core").unwrap();
        for cpu in [4, 6] {
            add_cpu(&mut system, smt, cpu, &platform).unwrap();
        }
        let domain = system
            .domain_create(smt, 2, SchedParams::default(), &platform)
            .unwrap();
        (system, names, platform, domain)
    }

    fn cpus(list: &[usize]) -> CpuSet {
        list.iter().copied().collect()
    }

    #[test]
    fn cpus_join_and_leave_by_whole_resource() {
        let (mut system, mut names, platform, _) = machine();
        let smt = names.find("smt").unwrap();
        assert_eq!(system.pool_info(smt).unwrap().cpus, cpus(&[4, 5, 6, 7]));
        let spare = create(&mut system, &mut names, Some("spare"), "credit", "core").unwrap();
        assert_eq!(
            remove_cpu(&mut system, smt, 7, &platform),
            Ok(cpus(&[6, 7])),
            "the core goes with its thread"
        );
        assert_eq!(add_cpu(&mut system, spare, 6, &platform), Ok(cpus(&[6, 7])));
        assert_eq!(
            add_cpu(&mut system, spare, 1, &platform),
            Err(PoolOpError::System(SystemError::CpuNotFree {
                cpu: 1,
                pool: PoolId(0)
            }))
        );
        system.check_invariants().unwrap();
    }

    #[test]
    fn removing_the_last_cpus_of_a_pool_with_domains_changes_nothing() {
        let (mut system, names, platform, _) = machine();
        let smt = names.find("smt").unwrap();
        remove_cpu(&mut system, smt, 4, &platform).unwrap();
        let before = system.pool_info(smt).unwrap();
        let error = remove_cpu(&mut system, smt, 6, &platform).unwrap_err();
        assert!(matches!(
            error,
            PoolOpError::System(SystemError::WouldStrandDomains { .. })
        ));
        assert_eq!(error.code(), HvError::Busy);
        assert_eq!(system.pool_info(smt).unwrap(), before);
        system.check_invariants().unwrap();
    }

    #[test]
    fn moves_and_refused_moves() {
        let (mut system, mut names, platform, domain) = machine();
        let smt = names.find("smt").unwrap();
        // To a pool that does not exist: not found, nothing moves.
        let error = move_domain(&mut system, domain.0, PoolId(9), &platform).unwrap_err();
        assert_eq!(error, PoolOpError::UnknownPool(String::from("9")));
        assert_eq!(error.code(), HvError::NotFound);
        assert_eq!(system.domain_pool(domain), Some(smt));
        // To an empty pool: busy, nothing moves.
        let empty = create(&mut system, &mut names, Some("empty"), "credit2", "cpu").unwrap();
        let error = move_domain(&mut system, domain.0, empty, &platform).unwrap_err();
        assert_eq!(error, PoolOpError::EmptyPool(empty));
        assert_eq!(system.domain_pool(domain), Some(smt));
        // A missing domain.
        assert_eq!(
            move_domain(&mut system, 77, PoolId(0), &platform),
            Err(PoolOpError::UnknownDomain(77))
        );
        // A real move: regrouped into pool 0's one-vCPU units.
        assert_eq!(
            move_domain(&mut system, domain.0, PoolId(0), &platform),
            Ok(smt)
        );
        assert_eq!(system.domain_pool(domain), Some(PoolId(0)));
        assert_eq!(system.domain_units(domain).unwrap().len(), 2);
        assert_eq!(system.pool_info(smt).unwrap().domains, 0);
        system.check_invariants().unwrap();
        // Now smt is empty of domains and can go; pool 0 cannot.
        assert_eq!(
            destroy(&mut system, &mut names, smt, &platform),
            Ok(cpus(&[4, 5, 6, 7]))
        );
        assert_eq!(names.find("smt"), None);
        assert_eq!(system.free_cpus(), cpus(&[4, 5, 6, 7]));
        let error = destroy(&mut system, &mut names, PoolId(0), &platform).unwrap_err();
        assert_eq!(error.code(), HvError::Denied);
    }

    #[test]
    fn creation_checks_its_arguments() {
        let (mut system, mut names, _, _) = machine();
        let mut try_create = |name: &str, scheduler: &str, granularity: &str| {
            create(&mut system, &mut names, Some(name), scheduler, granularity)
        };
        assert_eq!(
            try_create("smt", "credit2", "cpu"),
            Err(PoolOpError::NameTaken(String::from("smt")))
        );
        assert_eq!(
            try_create("x", "fair", "cpu"),
            Err(PoolOpError::UnknownScheduler(String::from("fair")))
        );
        assert_eq!(
            try_create("x", "credit2", "thread"),
            Err(PoolOpError::UnknownGranularity(String::from("thread")))
        );
        assert_eq!(
            try_create("12", "credit2", "cpu"),
            Err(PoolOpError::BadName(String::from("12")))
        );
        assert_eq!(
            try_create("a b", "credit2", "cpu").map_err(|e| e.code()),
            Err(HvError::InvalidParameter)
        );
        let before: Vec<PoolId> = system.pools().collect();
        assert_eq!(before.len(), 2, "no refused create left a pool behind");
    }

    #[test]
    fn the_hypercall_lists_creates_and_destroys() {
        let (mut system, mut names, platform, domain) = machine();
        let list = |system: &System, from| list_from(system, from);
        let first = list(&system, 0).unwrap();
        assert_eq!(
            (first.id, first.cpus, first.cpu_bitmap, first.domains),
            (0, 4, 0x0f, 0)
        );
        let second = list(&system, 1).unwrap();
        assert_eq!(
            (
                second.id,
                second.granularity,
                second.cpu_bitmap,
                second.domains
            ),
            (1, guest_abi::Granularity::Core, 0xf0, 1)
        );
        assert_eq!(list(&system, 2), None);
        let op = guest_abi::PoolOp::Create {
            scheduler: guest_abi::Scheduler::Null,
            granularity: guest_abi::Granularity::Cpu,
        };
        let regs = hypercall(&mut system, &mut names, op, &platform).unwrap();
        assert_eq!(regs, [0, 2, 0, 0]);
        assert_eq!(names.name(PoolId(2)), Some("pool2"));
        let move_op = guest_abi::PoolOp::MoveDomain {
            domain: domain.0,
            pool: 2,
        };
        let error = hypercall(&mut system, &mut names, move_op, &platform).unwrap_err();
        assert_eq!(error.code(), HvError::Busy, "pool 2 has no CPUs");
        let destroy_op = guest_abi::PoolOp::Destroy { pool: 2 };
        assert_eq!(
            hypercall(&mut system, &mut names, destroy_op, &platform),
            Ok([0; 4])
        );
        assert_eq!(
            hypercall(&mut system, &mut names, destroy_op, &platform).map_err(|e| e.code()),
            Err(HvError::NotFound)
        );
    }

    #[test]
    fn the_hypercall_pins_and_pauses_domains_and_refuses_what_it_cannot() {
        let (mut system, mut names, platform, domain) = machine();
        let mut call = |op| {
            hypercall(&mut system, &mut names, op, &platform).map_err(|e: PoolOpError| e.code())
        };
        let d = domain.0;
        use guest_abi::PoolOp;
        // Pinned to one core of its pool (CPUs 4-5), soft on CPU 5.
        let pin = PoolOp::PinDomain {
            domain: d,
            hard: 0x30,
            soft: 0x20,
        };
        assert_eq!(call(pin), Ok([0; 4]));
        // Outside its pool (CPUs 0-1): refused, nothing changes.
        let outside = PoolOp::PinDomain {
            domain: d,
            hard: 0x3,
            soft: 0,
        };
        assert_eq!(call(outside), Err(HvError::InvalidParameter));
        let nobody = PoolOp::PinDomain {
            domain: 99,
            hard: 0x30,
            soft: 0,
        };
        assert_eq!(call(nobody), Err(HvError::NotFound));
        assert_eq!(call(PoolOp::PauseDomain { domain: d }), Ok([0; 4]));
        assert_eq!(call(PoolOp::PauseDomain { domain: d }), Err(HvError::Busy));
        assert_eq!(call(PoolOp::UnpauseDomain { domain: d }), Ok([0; 4]));
        assert_eq!(
            call(PoolOp::UnpauseDomain { domain: d }),
            Err(HvError::InvalidParameter)
        );
        assert_eq!(
            call(PoolOp::PauseDomain { domain: 99 }),
            Err(HvError::NotFound)
        );
        // Parameters: read, changed, read back; a weight of 0 refused.
        let regs = call(PoolOp::GetDomainParams { domain: d }).unwrap();
        let mut params = guest_abi::DomainParams::from_words([regs[1], regs[2]]).unwrap();
        assert_eq!(params.weight, 256);
        params.weight = 512;
        params.cap = 50;
        assert_eq!(
            call(PoolOp::SetDomainParams { domain: d, params }),
            Ok([0; 4])
        );
        let regs = call(PoolOp::GetDomainParams { domain: d }).unwrap();
        assert_eq!(
            guest_abi::DomainParams::from_words([regs[1], regs[2]]),
            Ok(params)
        );
        let zero = guest_abi::DomainParams {
            weight: 0,
            ..params
        };
        assert_eq!(
            call(PoolOp::SetDomainParams {
                domain: d,
                params: zero
            }),
            Err(HvError::InvalidParameter)
        );
        assert_eq!(
            call(PoolOp::GetDomainParams { domain: 99 }),
            Err(HvError::NotFound)
        );
        assert_eq!(system.domain_paused(domain), Some(false));
        // The pin held: every vCPU of the domain may only run on 4-5.
        let info = system.domain_affinity(domain).unwrap();
        assert_eq!(info.0, cpus(&[4, 5]));
        assert_eq!(info.1, cpus(&[5]));
    }
}
