//! Domain and cpupool configuration: the data compiled into the image, and its checks.
//!
//! One [`Config`] describes the whole machine partitioning: the cpupools (which
//! CPUs, which scheduler with which pool parameters, which granularity and
//! placement) and the domains (which guest image, how many vCPUs, how much
//! memory, which pool, scheduling parameters, affinity, console, pass-through
//! devices and the SPIs routed to them).
//!
//! The flow (see `boards/configs/README.md` for the file format):
//! 1. `cargo xtask config check FILE` / `cargo xtask build` parse a TOML file into
//!    a [`Config`], run [`Config::validate`] and report each [`ConfigError`] as
//!    `FILE:LINE: reason`;
//! 2. xtask writes [`encode`]'s bytes next to the build and hands the path to the
//!    hypervisor's build (`HV_CONFIG`), which embeds them;
//! 3. at boot the hypervisor calls [`Config::load`] ([`decode`], then the same
//!    [`Config::validate`]) and [`apply`], which creates the pools and domains in
//!    `sched` and reports, as [`ApplyWarning`]s, what the machine cannot take
//!    (CPUs it does not have, a core-granularity pool given half a core).
//!
//! Scheduler, granularity and placement are kept as the names written in the
//! file and checked with `sched`'s own parsers ([`sched::schedulers::create`],
//! [`Granularity::from_str`], [`Placement::from_str`]), so the list of valid names
//! lives in one place and the validator reports an unknown name with it.
//! Pool 0 is the first pool listed; CPUs in no pool stay free and run the idle
//! scheduler until a pool takes them. A config that lists no pool (and a build
//! without a config) gets the automatic layout of [`automatic_pools`]: one pool
//! per capacity class on big.LITTLE machines, one pool of every CPU otherwise.

mod apply;
mod classes;
mod encoding;

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;
use core::str::FromStr;

use sched::scheduler::SCHEDULER_NAMES;
use sched::{CpuSet, Granularity, MAX_CPUS, Placement, SchedError, SchedParams};

pub use apply::{Applied, ApplyWarning, Describe, apply};
pub use classes::{
    AUTOMATIC_POOL_NAMES_HELP, MixedPool, automatic_pools, is_automatic_pool_name,
    mixed_class_pools,
};
pub use encoding::{DecodeError, FORMAT_MAGIC, FORMAT_VERSION, decode, encode};

/// The most vCPUs one domain may have (the virtual GIC's limit).
pub const MAX_DOMAIN_VCPUS: u32 = 128;
/// The most guest RAM one domain may have, in MiB (the 40-bit IPA space is 1 TiB).
pub const MAX_DOMAIN_MEMORY_MIB: u64 = 512 * 1024;
/// Longest pool, domain or device name, in bytes.
pub const MAX_NAME_LEN: usize = 64;
/// Guest images built into the image by name (`image = "test-guest"`;
/// `"linux"` is Debian's kernel with a BusyBox initramfs, arm64 or amd64 by
/// the board, which `cargo xtask guest-linux [--x86]` prepares and `cargo
/// xtask build` embeds).
pub const BUILTIN_IMAGES: &[&str] = &["test-guest", LINUX_IMAGE];
/// The built-in Linux guest's name.
pub const LINUX_IMAGE: &str = "linux";
/// Where guest RAM starts in the guest-physical space unless the domain says
/// otherwise: 1 GiB, as on QEMU `virt` (devices below, RAM above).
pub const DEFAULT_MEMORY_BASE: u64 = 0x4000_0000;
/// First and last INTID that is an SPI (GIC architecture spec 2.2.1).
pub const SPI_RANGE: core::ops::RangeInclusive<u32> = 32..=1019;
/// Bytes per MiB.
const MIB: u64 = 1 << 20;
/// Stage-2 granule: device regions and RAM bases are multiples of it.
pub const PAGE: u64 = 4096;

/// A cpupool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Unique name (`Pool-0`, `rt`, ...).
    pub name: String,
    /// The CPUs (logical indices) it owns at boot.
    pub cpus: CpuSet,
    /// Scheduler name (see [`SCHEDULER_NAMES`]).
    pub scheduler: String,
    /// Pool parameters as `key=value` items (`"ratelimit_us=500"`), applied with
    /// [`sched::schedulers::apply_pool_params`]. Empty for the defaults.
    pub scheduler_params: String,
    /// Granularity name (`cpu`, `core`, `cluster`, `socket`).
    pub granularity: String,
    /// Placement name (`fixed`, `spread`).
    pub placement: String,
}

impl PoolConfig {
    /// A pool with the default scheduler, `cpu` granularity and fixed placement.
    pub fn new(name: &str, cpus: CpuSet) -> Self {
        Self {
            name: String::from(name),
            cpus,
            scheduler: String::from(sched::schedulers::DEFAULT_SCHEDULER),
            scheduler_params: String::new(),
            granularity: String::from(Granularity::Cpu.name()),
            placement: String::from(Placement::Fixed.name()),
        }
    }

    /// The granularity (`None` only for a config that failed validation).
    pub fn granularity(&self) -> Option<Granularity> {
        Granularity::from_str(&self.granularity).ok()
    }

    /// The placement (`None` only for a config that failed validation).
    pub fn placement(&self) -> Option<Placement> {
        Placement::from_str(&self.placement).ok()
    }
}

/// Which guest a domain boots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestImage {
    /// One of [`BUILTIN_IMAGES`], embedded in the hypervisor image.
    Builtin(String),
    /// A file (an arm64 `Image`, a raw binary) that xtask embeds, by path
    /// relative to the config file, with an optional initramfs file (a Linux
    /// kernel's: placed in RAM and named in the guest's `/chosen`).
    File {
        /// The image's path.
        path: String,
        /// The initramfs' path, if any.
        initramfs: Option<String>,
    },
}

/// Where a domain's console goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Console {
    /// An emulated PL011 whose output the hypervisor prefixes with the domain
    /// name on the real serial port (Xen's `vpl011`).
    #[default]
    Vpl011,
    /// No console: accesses to the UART address fault like any unmapped address.
    None,
}

impl Console {
    /// The name used in configs.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Vpl011 => "vpl011",
            Self::None => "none",
        }
    }

    /// Parses [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Vpl011, Self::None]
            .into_iter()
            .find(|c| c.name() == name)
    }
}

/// A pass-through device: an MMIO range mapped into the domain as Device memory
/// and the SPIs routed to its vCPUs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceConfig {
    /// Name, for messages (`uart1`, `virtio-net`).
    pub name: String,
    /// Host-physical base.
    pub base: u64,
    /// Guest-physical base (the host one for an identity mapping).
    pub guest_base: u64,
    /// Length in bytes (a multiple of 4 KiB).
    pub size: u64,
    /// INTIDs of the SPIs the device raises; routed to this domain only.
    pub interrupts: Vec<u32>,
    /// `compatible` of its guest device-tree node, most specific first;
    /// empty: taken from the host device tree's node at `base`.
    pub compatible: Vec<String>,
    /// How its interrupts are triggered; `None`: as the host device tree
    /// says, else level-sensitive.
    pub trigger: Option<Trigger>,
}

/// How a pass-through device's interrupts are signalled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// Level-sensitive, active high (the GIC's only level kind).
    Level,
    /// Edge-triggered, rising.
    Edge,
}

impl Trigger {
    /// The name used in configs.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Level => "level",
            Self::Edge => "edge",
        }
    }

    /// Parses [`Self::name`].
    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Level, Self::Edge]
            .into_iter()
            .find(|t| t.name() == name)
    }
}

/// Most `compatible` strings a device may list.
pub const MAX_COMPATIBLE: usize = 8;
/// Longest `compatible` string, in bytes.
pub const MAX_COMPATIBLE_LEN: usize = 64;

/// A domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DomainConfig {
    /// Unique name; prefixes its console lines.
    pub name: String,
    /// The guest it boots.
    pub image: GuestImage,
    /// vCPUs (1..=[`MAX_DOMAIN_VCPUS`]).
    pub vcpus: u32,
    /// Guest RAM in MiB.
    pub memory_mib: u64,
    /// Guest-physical address of its RAM.
    pub memory_base: u64,
    /// The pool it starts in, by name.
    pub pool: String,
    /// Scheduling parameters (weight and cap for credit/credit2, budget,
    /// period and extratime for rt).
    pub params: SchedParams,
    /// CPUs its vCPUs may run on (Xen's hard affinity); `None` for every
    /// CPU of the pool.
    pub hard_affinity: Option<CpuSet>,
    /// CPUs its vCPUs prefer when the scheduler has a choice (Xen's soft
    /// affinity; credit, credit2 and null honour it); `None` for no
    /// preference.
    pub soft_affinity: Option<CpuSet>,
    /// Console.
    pub console: Console,
    /// May use the privileged hypercalls (pool and domain management), like dom0.
    pub privileged: bool,
    /// May use the test hooks (`TEST_REPORT`, `TEST_PAUSE_SIBLING`, …):
    /// off unless a test config asks for them.
    pub test_hooks: bool,
    /// Stop the domain when it touches guest-physical space with nothing
    /// behind it (a strict partition), instead of injecting the abort real
    /// hardware and KVM give (the default).
    pub fail_stop: bool,
    /// Command line handed to the guest (`/chosen/bootargs`): for the test
    /// guest, the workload (`workload=compute,sleeper period_us=1000`).
    pub bootargs: String,
    /// Pass-through devices.
    pub devices: Vec<DeviceConfig>,
}

impl DomainConfig {
    /// A one-vCPU domain of the test guest with 64 MiB in `pool`, default parameters.
    pub fn new(name: &str, pool: &str) -> Self {
        Self {
            name: String::from(name),
            image: GuestImage::Builtin(String::from("test-guest")),
            vcpus: 1,
            memory_mib: 64,
            memory_base: DEFAULT_MEMORY_BASE,
            pool: String::from(pool),
            params: SchedParams::default(),
            hard_affinity: None,
            soft_affinity: None,
            console: Console::Vpl011,
            privileged: false,
            test_hooks: false,
            fail_stop: false,
            bootargs: String::new(),
            devices: Vec::new(),
        }
    }

    /// Its RAM's stage-2 region: at `memory_base`, backed by host memory at
    /// `ram_pa` (allocated by the hypervisor). Pass-through devices add
    /// theirs once the host has been checked
    /// ([`crate::passthrough::PlannedDevice::stage2_region`]); everything
    /// else (GIC distributor, vPL011, ...) is left to fault.
    pub fn ram_region(&self, ram_pa: u64) -> crate::arm::stage2::Region {
        crate::arm::stage2::Region {
            ipa: self.memory_base,
            pa: ram_pa,
            size: self.memory_mib.saturating_mul(MIB),
            attrs: crate::arm::stage2::Attributes::RAM,
        }
    }

    /// Guest-physical range of its RAM, `[start, end)` (saturating on overflow,
    /// which the validator reports).
    pub fn memory_range(&self) -> (u64, u64) {
        let size = self.memory_mib.saturating_mul(MIB);
        (self.memory_base, self.memory_base.saturating_add(size))
    }
}

/// The whole configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Config {
    /// Cpupools; the first is pool 0.
    pub pools: Vec<PoolConfig>,
    /// Domains, created in this order.
    pub domains: Vec<DomainConfig>,
}

/// Which item of the config an error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    /// The config as a whole.
    Root,
    /// `pools[index]`.
    Pool(usize),
    /// `domains[index]`.
    Domain(usize),
    /// `domains[domain].devices[device]`.
    Device {
        /// Domain index.
        domain: usize,
        /// Device index in the domain.
        device: usize,
    },
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Problem {
    /// The name is empty, too long or has characters other than
    /// `A-Za-z0-9_.-`.
    BadName,
    /// Another item of the same kind has this name.
    DuplicateName,
    /// The pool has no CPU.
    NoCpus,
    /// A CPU is listed in two pools.
    CpuInTwoPools {
        /// The CPU.
        cpu: usize,
        /// The other pool.
        other: String,
    },
    /// Unknown scheduler name; the message lists the valid ones.
    UnknownScheduler(String),
    /// Pool parameters the scheduler refuses.
    BadSchedulerParams(SchedError),
    /// Unknown granularity name; the message lists the valid ones.
    UnknownGranularity(String),
    /// Unknown placement name.
    UnknownPlacement(String),
    /// The domain names a pool that does not exist.
    UnknownPool(String),
    /// The config lists no pool (so the machine gets the automatic layout)
    /// and the domain names a pool that layout never creates.
    NotAnAutomaticPool(String),
    /// Zero vCPUs, or more than [`MAX_DOMAIN_VCPUS`].
    BadVcpuCount(u32),
    /// The `null` scheduler runs one unit per CPU and never time-slices: more
    /// vCPUs than CPUs means some would never run.
    NullPoolOvercommitted {
        /// vCPUs of the pool's domains.
        vcpus: u32,
        /// CPUs of the pool.
        cpus: usize,
    },
    /// Zero memory, more than [`MAX_DOMAIN_MEMORY_MIB`], or a base that is not
    /// 2 MiB-aligned or puts the end beyond the 40-bit guest space.
    BadMemory,
    /// A guest-physical range overlaps another one of the same domain.
    GuestRangeOverlap {
        /// The other range (`memory` or a device name).
        other: String,
    },
    /// A host-physical device range is also given to another domain (or twice
    /// to this one).
    DeviceShared {
        /// The other domain.
        domain: String,
        /// The other device.
        device: String,
    },
    /// Size zero, or base or size not a multiple of 4 KiB.
    BadDeviceRange,
    /// An INTID that is not an SPI.
    NotAnSpi(u32),
    /// More than [`MAX_COMPATIBLE`] `compatible` strings, or one that is
    /// empty, longer than [`MAX_COMPATIBLE_LEN`] or not printable ASCII.
    BadCompatible,
    /// An SPI routed to two devices.
    SpiShared {
        /// The INTID.
        intid: u32,
        /// The domain that has it too.
        domain: String,
    },
    /// Scheduling parameters out of range.
    BadSchedParams(&'static str),
    /// The hard affinity has no CPU of the domain's pool, or CPUs outside it.
    AffinityOutsidePool,
    /// The soft affinity has no CPU of the domain's pool and hard affinity.
    SoftAffinityUnusable,
    /// Unknown built-in image; the message lists the known ones.
    UnknownImage(String),
    /// A file image (or its initramfs) with an empty path.
    EmptyImagePath,
    /// More than one privileged domain.
    SecondPrivileged(String),
}

/// One validation error: the item, the field (as named in the TOML file) and
/// what is wrong. `name` is the item's name for the message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// The item.
    pub item: Item,
    /// Its name (empty for [`Item::Root`]).
    pub name: String,
    /// The field (`cpus`, `scheduler`, `vcpus`, ...).
    pub field: &'static str,
    /// The problem.
    pub problem: Problem,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadName => write!(
                f,
                "names are 1 to {MAX_NAME_LEN} characters of A-Z a-z 0-9 _ . -"
            ),
            Self::DuplicateName => write!(f, "the name is used twice"),
            Self::NoCpus => write!(f, "the pool has no CPU"),
            Self::CpuInTwoPools { cpu, other } => {
                write!(f, "CPU {cpu} is also in pool '{other}'")
            }
            Self::UnknownScheduler(name) => {
                write!(f, "unknown scheduler '{name}'; valid: {SCHEDULER_NAMES}")
            }
            Self::BadSchedulerParams(e) => write!(f, "{e}"),
            Self::UnknownGranularity(name) => write!(
                f,
                "unknown granularity '{name}'; valid: {}",
                Granularity::ALL.map(Granularity::name).join(", ")
            ),
            Self::UnknownPlacement(name) => {
                write!(f, "unknown placement '{name}'; valid: fixed, spread")
            }
            Self::UnknownPool(name) => write!(f, "no pool is called '{name}'"),
            Self::NotAnAutomaticPool(name) => write!(
                f,
                "no pool is called '{name}': a config without [[pool]] gets the automatic pools \
                 ({AUTOMATIC_POOL_NAMES_HELP})"
            ),
            Self::BadVcpuCount(n) => {
                write!(f, "{n} vCPUs; a domain has 1 to {MAX_DOMAIN_VCPUS}")
            }
            Self::NullPoolOvercommitted { vcpus, cpus } => write!(
                f,
                "the null scheduler runs one vCPU per CPU, but its domains have {vcpus} vCPUs for {cpus} CPUs"
            ),
            Self::BadMemory => write!(
                f,
                "memory must be 1 to {MAX_DOMAIN_MEMORY_MIB} MiB at a 2 MiB-aligned base, inside the 40-bit guest space"
            ),
            Self::GuestRangeOverlap { other } => {
                write!(f, "guest-physical range overlaps {other}")
            }
            Self::DeviceShared { domain, device } => write!(
                f,
                "host range is also passed through to domain '{domain}' (device '{device}')"
            ),
            Self::BadDeviceRange => write!(
                f,
                "base, guest_base and size must be multiples of 4 KiB and size non-zero"
            ),
            Self::NotAnSpi(intid) => {
                write!(f, "INTID {intid} is not an SPI (32..=1019)")
            }
            Self::BadCompatible => write!(
                f,
                "at most {MAX_COMPATIBLE} compatible strings, each 1..={MAX_COMPATIBLE_LEN} printable ASCII bytes"
            ),
            Self::SpiShared { intid, domain } => {
                write!(f, "SPI {intid} is also routed to domain '{domain}'")
            }
            Self::BadSchedParams(why) => write!(f, "{why}"),
            Self::AffinityOutsidePool => write!(
                f,
                "hard affinity must be non-empty and inside the domain's pool"
            ),
            Self::SoftAffinityUnusable => write!(
                f,
                "soft affinity must name a CPU of the domain's pool (and of its hard affinity)"
            ),
            Self::UnknownImage(name) => write!(
                f,
                "unknown built-in image '{name}'; known: {} (or {{ file = \"PATH\" }})",
                BUILTIN_IMAGES.join(", ")
            ),
            Self::EmptyImagePath => write!(f, "the image file path is empty"),
            Self::SecondPrivileged(first) => {
                write!(f, "only one domain may be privileged; '{first}' already is")
            }
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.item {
            Item::Root => {}
            Item::Pool(_) => write!(f, "pool '{}': ", self.name)?,
            Item::Domain(_) => write!(f, "domain '{}': ", self.name)?,
            Item::Device { .. } => write!(f, "device '{}': ", self.name)?,
        }
        write!(f, "{}: {}", self.field, self.problem)
    }
}

/// Why an embedded config could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadError {
    /// The bytes are not a valid encoding.
    Decode(DecodeError),
    /// The config decoded but breaks a rule (the first error; xtask refuses to
    /// build such a config, so this means a hand-made or stale blob).
    Invalid(ConfigError),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Decode(e) => write!(f, "config blob: {e}"),
            Self::Invalid(e) => write!(f, "config: {e}"),
        }
    }
}

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// Whether `[a, a_end)` and `[b, b_end)` intersect.
fn overlaps(a: u64, a_end: u64, b: u64, b_end: u64) -> bool {
    a < b_end && b < a_end
}

/// Checks the scheduling parameters the way the schedulers will.
fn check_params(params: &SchedParams) -> Result<(), (&'static str, &'static str)> {
    if params.weight == 0 {
        return Err(("weight", "weight must be 1 to 65535"));
    }
    if params.cap_percent > 100 {
        return Err(("cap", "cap is a percentage of one CPU: 0 (none) to 100"));
    }
    if params.period_ns == 0 {
        return Err(("period_us", "period must be positive"));
    }
    if params.budget_ns == 0 || params.budget_ns > params.period_ns {
        return Err((
            "budget_us",
            "budget must be positive and at most the period",
        ));
    }
    Ok(())
}

impl Config {
    /// Decodes an embedded blob and validates it: what the hypervisor does at boot.
    pub fn load(bytes: &[u8]) -> Result<Config, LoadError> {
        let config = decode(bytes).map_err(LoadError::Decode)?;
        if let Some(first) = config.validate().into_iter().next() {
            return Err(LoadError::Invalid(first));
        }
        Ok(config)
    }

    /// What a board without a config file runs: one pool (credit2, `cpu`
    /// granularity) of `cpus` and no domain.
    pub fn single_pool(cpus: CpuSet) -> Config {
        Config {
            pools: alloc::vec![PoolConfig::new("Pool-0", cpus)],
            domains: Vec::new(),
        }
    }

    /// The pool called `name`, with its index (its `PoolId` once created in order).
    pub fn pool(&self, name: &str) -> Option<(usize, &PoolConfig)> {
        self.pools.iter().enumerate().find(|(_, p)| p.name == name)
    }

    /// Every rule, every error (empty when the config is valid), in file order:
    /// pools first, then domains.
    pub fn validate(&self) -> Vec<ConfigError> {
        let mut errors = Vec::new();
        for (index, pool) in self.pools.iter().enumerate() {
            self.check_pool(index, pool, &mut errors);
        }
        let mut privileged: Option<&str> = None;
        for (index, domain) in self.domains.iter().enumerate() {
            self.check_domain(index, domain, &mut errors);
            if domain.privileged {
                match privileged {
                    Some(first) => errors.push(ConfigError {
                        item: Item::Domain(index),
                        name: domain.name.clone(),
                        field: "privileged",
                        problem: Problem::SecondPrivileged(String::from(first)),
                    }),
                    None => privileged = Some(&domain.name),
                }
            }
        }
        errors
    }

    fn check_pool(&self, index: usize, pool: &PoolConfig, errors: &mut Vec<ConfigError>) {
        let mut error = |field, problem| {
            errors.push(ConfigError {
                item: Item::Pool(index),
                name: pool.name.clone(),
                field,
                problem,
            })
        };
        if !valid_name(&pool.name) {
            error("name", Problem::BadName);
        } else if self.pools[..index].iter().any(|p| p.name == pool.name) {
            error("name", Problem::DuplicateName);
        }
        if pool.cpus.is_empty() {
            error("cpus", Problem::NoCpus);
        }
        // Report each shared CPU once, on the later pool.
        for cpu in pool.cpus.iter() {
            if let Some(other) = self.pools[..index].iter().find(|p| p.cpus.contains(cpu)) {
                error(
                    "cpus",
                    Problem::CpuInTwoPools {
                        cpu,
                        other: other.name.clone(),
                    },
                );
            }
        }
        match sched::schedulers::create(&pool.scheduler) {
            Err(_) => error(
                "scheduler",
                Problem::UnknownScheduler(pool.scheduler.clone()),
            ),
            Ok(mut scheduler) => {
                if let Err(e) =
                    sched::schedulers::apply_pool_params(scheduler.as_mut(), &pool.scheduler_params)
                {
                    error("scheduler_params", Problem::BadSchedulerParams(e));
                }
            }
        }
        if pool.granularity().is_none() {
            error(
                "granularity",
                Problem::UnknownGranularity(pool.granularity.clone()),
            );
        }
        if pool.placement().is_none() {
            error(
                "placement",
                Problem::UnknownPlacement(pool.placement.clone()),
            );
        }
        if pool.scheduler == "null" {
            let vcpus: u32 = self
                .domains
                .iter()
                .filter(|d| d.pool == pool.name)
                .map(|d| d.vcpus)
                .fold(0, u32::saturating_add);
            if vcpus as usize > pool.cpus.len() {
                error(
                    "scheduler",
                    Problem::NullPoolOvercommitted {
                        vcpus,
                        cpus: pool.cpus.len(),
                    },
                );
            }
        }
    }

    fn check_domain(&self, index: usize, domain: &DomainConfig, errors: &mut Vec<ConfigError>) {
        let item = Item::Domain(index);
        let mut error = |field, problem| {
            errors.push(ConfigError {
                item,
                name: domain.name.clone(),
                field,
                problem,
            })
        };
        if !valid_name(&domain.name) {
            error("name", Problem::BadName);
        } else if self.domains[..index].iter().any(|d| d.name == domain.name) {
            error("name", Problem::DuplicateName);
        }
        match &domain.image {
            GuestImage::Builtin(name) if !BUILTIN_IMAGES.contains(&name.as_str()) => {
                error("image", Problem::UnknownImage(name.clone()));
            }
            GuestImage::File { path, initramfs }
                if path.is_empty() || initramfs.as_ref().is_some_and(String::is_empty) =>
            {
                error("image", Problem::EmptyImagePath)
            }
            _ => {}
        }
        if domain.vcpus == 0 || domain.vcpus > MAX_DOMAIN_VCPUS {
            error("vcpus", Problem::BadVcpuCount(domain.vcpus));
        }
        let (ram_start, ram_end) = domain.memory_range();
        let ram_ok = domain.memory_mib != 0
            && domain.memory_mib <= MAX_DOMAIN_MEMORY_MIB
            && domain.memory_base.is_multiple_of(2 * MIB)
            && domain
                .memory_base
                .checked_add(domain.memory_mib * MIB)
                .is_some_and(|end| end <= 1 << 40);
        if !ram_ok {
            error("memory_mib", Problem::BadMemory);
        }
        let pool = self.pool(&domain.pool).map(|(_, p)| p);
        if self.pools.is_empty() {
            // The automatic layout (see `classes`): its pools exist only at
            // boot, so only their names can be checked here.
            if !is_automatic_pool_name(&domain.pool) {
                error("pool", Problem::NotAnAutomaticPool(domain.pool.clone()));
            }
        } else if pool.is_none() {
            error("pool", Problem::UnknownPool(domain.pool.clone()));
        }
        if let Err((field, why)) = check_params(&domain.params) {
            error(field, Problem::BadSchedParams(why));
        }
        if let (Some(hard), Some(pool)) = (&domain.hard_affinity, pool)
            && (hard.is_empty() || !hard.is_subset(&pool.cpus))
        {
            error("hard_affinity", Problem::AffinityOutsidePool);
        }
        if let (Some(soft), Some(pool)) = (&domain.soft_affinity, pool) {
            let usable = domain
                .hard_affinity
                .unwrap_or(pool.cpus)
                .intersection(&pool.cpus);
            // An empty pool is its own error; do not repeat it here.
            if !pool.cpus.is_empty() && !soft.intersects(&usable) {
                error("soft_affinity", Problem::SoftAffinityUnusable);
            }
        }
        for (d, device) in domain.devices.iter().enumerate() {
            self.check_device(index, domain, d, device, (ram_start, ram_end), errors);
        }
    }

    fn check_device(
        &self,
        domain_index: usize,
        domain: &DomainConfig,
        index: usize,
        device: &DeviceConfig,
        ram: (u64, u64),
        errors: &mut Vec<ConfigError>,
    ) {
        let mut error = |field, problem| {
            errors.push(ConfigError {
                item: Item::Device {
                    domain: domain_index,
                    device: index,
                },
                name: device.name.clone(),
                field,
                problem,
            })
        };
        if !valid_name(&device.name) {
            error("name", Problem::BadName);
        }
        let end = device.base.checked_add(device.size);
        let guest_end = device.guest_base.checked_add(device.size);
        let (Some(end), Some(guest_end)) = (end, guest_end) else {
            error("size", Problem::BadDeviceRange);
            return;
        };
        if device.size == 0 || !(device.base | device.guest_base | device.size).is_multiple_of(PAGE)
        {
            error("size", Problem::BadDeviceRange);
        }
        if overlaps(device.guest_base, guest_end, ram.0, ram.1) {
            error(
                "guest_base",
                Problem::GuestRangeOverlap {
                    other: String::from("the domain's memory"),
                },
            );
        }
        let (window_start, window_end) = crate::arm::guest_dt::EMULATED_WINDOW;
        if overlaps(device.guest_base, guest_end, window_start, window_end) {
            error(
                "guest_base",
                Problem::GuestRangeOverlap {
                    other: format!(
                        "the emulated GIC and UART ({window_start:#x}..{window_end:#x})"
                    ),
                },
            );
        }
        if device.compatible.len() > MAX_COMPATIBLE
            || device.compatible.iter().any(|c| {
                c.is_empty()
                    || c.len() > MAX_COMPATIBLE_LEN
                    || !c.bytes().all(|b| b.is_ascii_graphic())
            })
        {
            error("compatible", Problem::BadCompatible);
        }
        for earlier in &domain.devices[..index] {
            if overlaps(
                device.guest_base,
                guest_end,
                earlier.guest_base,
                earlier.guest_base.saturating_add(earlier.size),
            ) {
                error(
                    "guest_base",
                    Problem::GuestRangeOverlap {
                        other: format!("device '{}'", earlier.name),
                    },
                );
            }
        }
        // A host range (and an SPI) belongs to one device of one domain: check
        // every device listed before this one, in earlier domains and this one.
        let earlier_devices: Vec<(&DomainConfig, &DeviceConfig)> = self.domains[..domain_index]
            .iter()
            .flat_map(|d| d.devices.iter().map(move |dev| (d, dev)))
            .chain(domain.devices[..index].iter().map(|dev| (domain, dev)))
            .collect();
        if let Some((owner, other)) = earlier_devices.iter().find(|(_, other)| {
            overlaps(
                device.base,
                end,
                other.base,
                other.base.saturating_add(other.size),
            )
        }) {
            error(
                "base",
                Problem::DeviceShared {
                    domain: owner.name.clone(),
                    device: other.name.clone(),
                },
            );
        }
        for &intid in &device.interrupts {
            if !SPI_RANGE.contains(&intid) {
                error("interrupts", Problem::NotAnSpi(intid));
            } else if let Some((owner, _)) = earlier_devices
                .iter()
                .find(|(_, other)| other.interrupts.contains(&intid))
            {
                error(
                    "interrupts",
                    Problem::SpiShared {
                        intid,
                        domain: owner.name.clone(),
                    },
                );
            }
        }
    }
}

/// Parses a CPU list: comma-separated CPUs and inclusive ranges (`"0-3,7"`), as
/// Xen's and Linux's cpulists. Errors name the bad item.
pub fn parse_cpu_list(text: &str) -> Result<CpuSet, CpuListError> {
    let mut set = CpuSet::new();
    for item in text.split(',').map(str::trim) {
        if item.is_empty() {
            return Err(CpuListError::Empty);
        }
        let (first, last) = match item.split_once('-') {
            Some((a, b)) => (parse_cpu(a.trim())?, parse_cpu(b.trim())?),
            None => {
                let cpu = parse_cpu(item)?;
                (cpu, cpu)
            }
        };
        if first > last {
            return Err(CpuListError::Reversed { first, last });
        }
        for cpu in first..=last {
            set.insert(cpu);
        }
    }
    Ok(set)
}

fn parse_cpu(text: &str) -> Result<usize, CpuListError> {
    let cpu: usize = text.parse().map_err(|_| CpuListError::NotANumber)?;
    if cpu >= MAX_CPUS {
        return Err(CpuListError::TooLarge(cpu));
    }
    Ok(cpu)
}

/// What is wrong with a CPU list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuListError {
    /// An empty item (`"0,,1"` or `""`).
    Empty,
    /// An item that is not a number or a range.
    NotANumber,
    /// A CPU index of [`MAX_CPUS`] or more.
    TooLarge(usize),
    /// A range whose end is below its start.
    Reversed {
        /// Start.
        first: usize,
        /// End.
        last: usize,
    },
}

impl fmt::Display for CpuListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Empty => write!(f, "empty item in CPU list"),
            Self::NotANumber => write!(f, "CPU lists are numbers and ranges like \"0-3,7\""),
            Self::TooLarge(cpu) => write!(f, "CPU {cpu} is beyond the limit of {MAX_CPUS}"),
            Self::Reversed { first, last } => write!(f, "range {first}-{last} runs backwards"),
        }
    }
}

/// Formats a CPU set as a list of ranges (`0-3,7`), the inverse of [`parse_cpu_list`].
pub fn format_cpu_list(set: &CpuSet) -> String {
    let mut out = String::new();
    let mut cpus = set.iter().peekable();
    while let Some(first) = cpus.next() {
        let mut last = first;
        while cpus.peek() == Some(&(last + 1)) {
            last += 1;
            cpus.next();
        }
        if !out.is_empty() {
            out.push(',');
        }
        if first == last {
            out.push_str(&format!("{first}"));
        } else {
            out.push_str(&format!("{first}-{last}"));
        }
    }
    out
}

/// Builds the pool config of a Xen boot-time cpupool (`xen,cpupool` node): the
/// node name as pool name, its CPUs, its `cpupool-sched` or the default
/// scheduler, `cpu` granularity and fixed placement (the binding has no
/// property for those).
pub fn pool_from_xen(pool: &platform::dt::xen_cpupool::XenCpupool) -> PoolConfig {
    let mut config = PoolConfig::new(&pool.name, pool.cpus);
    if let Some(scheduler) = &pool.scheduler {
        config.scheduler = scheduler.clone();
    }
    config
}

/// The pools and placements a device tree's `xen,cpupool` nodes (and its
/// dom0less `xen,domain` nodes' `domain-cpupool`) give `config`, with the
/// lines to log about what was decided. The image's own `[[pool]]`s win: a
/// config that lists pools keeps them and the nodes are ignored (said
/// once). Otherwise the nodes' pools replace the automatic layout, and a
/// config domain named like a `xen,domain` node goes to that node's pool.
/// Without nodes nothing changes.
pub fn with_xen_cpupools(
    config: Option<Config>,
    xen: &platform::dt::xen_cpupool::XenCpupools,
) -> (Option<Config>, Vec<String>) {
    let mut lines = Vec::new();
    if xen.pools.is_empty() {
        return (config, lines);
    }
    let mut config = match config {
        Some(listed) if !listed.pools.is_empty() => {
            lines.push(format!(
                "config: the image's config lists {} pool(s); the device tree's {} xen,cpupool node(s) are ignored",
                listed.pools.len(),
                xen.pools.iter().filter(|p| !p.implicit).count()
            ));
            return (Some(listed), lines);
        }
        other => other.unwrap_or_default(),
    };
    config.pools = xen.pools.iter().map(pool_from_xen).collect();
    for (pool, from) in config.pools.iter().zip(&xen.pools) {
        let source = if from.implicit {
            String::from("CPUs no xen,cpupool node names")
        } else {
            from.path.clone()
        };
        lines.push(format!(
            "config: pool '{}' ({}) with CPUs {}, {} (from {source})",
            pool.name,
            if from.scheduler.is_some() {
                "cpupool-sched"
            } else {
                "default scheduler"
            },
            format_cpu_list(&pool.cpus),
            pool.scheduler,
        ));
    }
    for placement in &xen.domains {
        match config
            .domains
            .iter_mut()
            .find(|d| d.name == placement.domain)
        {
            Some(domain) => {
                lines.push(format!(
                    "config: domain '{}' goes to pool '{}' ({} domain-cpupool; the config said '{}')",
                    domain.name, placement.pool, placement.path, domain.pool
                ));
                domain.pool = placement.pool.clone();
            }
            None => lines.push(format!(
                "config: {} names pool '{}' but the config has no domain '{}'",
                placement.path, placement.pool, placement.domain
            )),
        }
    }
    (Some(config), lines)
}

#[cfg(test)]
mod tests;
