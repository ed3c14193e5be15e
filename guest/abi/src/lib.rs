//! The hypercall ABI between guests and the hypervisor: call numbers, argument
//! and return conventions, error codes. Shared by `hv` and the guests so both
//! sides agree by construction.
//!
//! Owns: numbers and encodings only. Must not touch: hardware or policy.
//!
//! # The ABI (version 1.0)
//!
//! **Conduit.** `HVC #0` from EL1. The function id goes in `w0`, arguments in
//! `x1..=x5`, results come back in `x0..=x3`. Registers `x4..=x17` may be
//! clobbered by the hypervisor as the SMC Calling Convention allows (the
//! hypervisor in this repository preserves them, guests must not rely on it).
//!
//! **Function ids.** SMCCC fast calls, SMC64 convention, in the
//! *Vendor Specific Hypervisor Service* range (owning entity 6):
//! `0xC600_0000 | n`. Bit 16 (the SMCCC 1.3 "no live SVE state" hint) is
//! ignored; any other bit outside `n` makes the call unknown. PSCI keeps its
//! standard ids (`0x8400_xxxx`/`0xC400_xxxx`) and is not part of this ABI.
//!
//! | n      | call                   | x1            | x2          | x3        | x4..x5  | success: x0, x1.. |
//! |--------|------------------------|---------------|-------------|-----------|---------|-------------------|
//! | 0x00   | [`Function::Version`]  | -             | -           | -         | -       | `major << 16 \| minor` |
//! | 0x01   | [`Function::ConsoleWrite`] | length (0..=24) | bytes 0..8 | bytes 8..16 | x4: bytes 16..24 | bytes written |
//! | 0x02   | [`Function::Yield`]    | -             | -           | -         | -       | 0 |
//! | 0x03   | [`Function::Block`]    | timeout ns (0 = none) | -   | -         | -       | [`WakeReason`] |
//! | 0x04   | [`Function::SchedStats`] | [`StatsScope`] | -        | -         | -       | 0; x1 runtime ns, x2 dispatches, x3 vCPUs |
//! | 0x05   | [`Function::PoolOp`]   | [`PoolOpCode`] | see [`PoolOp`] | see [`PoolOp`] | - | see [`PoolOp`] |
//! | 0x80   | [`Function::TestReport`] | tag (8 ASCII bytes) | value | [`Unit`] | -     | 0 |
//! | 0x81   | [`Function::TestPauseSibling`] | sibling vCPU | -    | -         | -       | 0 |
//! | 0x82   | [`Function::TestUnpauseSibling`] | sibling vCPU | -  | -         | -       | 0 |
//!
//! Arguments a call does not use are reserved and must be zero: the
//! hypervisor answers [`HvError::InvalidParameter`] otherwise, so they can get
//! a meaning later without breaking old guests.
//!
//! **Returns.** `x0` read as a signed 64-bit value: negative is an
//! [`HvError`] (the first three equal PSCI's codes, so `-1` means "unknown
//! function" everywhere), zero or positive is success, with the call's value
//! in `x0` and further results in `x1..=x3`.
//!
//! **Console: inline bytes, not a pointer.** `CONSOLE_WRITE` carries up to 24
//! bytes in `x2..=x4`. Chosen over a guest-physical pointer and length because
//! the hypervisor then never translates or reads guest memory for it: no
//! stage-2 walk, no check that the buffer is RAM the guest owns, no
//! time-of-check/time-of-use race with another vCPU rewriting the buffer, and
//! it works the same whether the guest's MMU is on or off. The cost, one trap
//! per 24 bytes, is fine for a debug console (a PL011 write traps per byte).
//!
//! **Cpupools** (`POOL_OP`, privileged domain only: the config's
//! `privileged = true`; any other caller gets [`HvError::Denied`]). The same
//! operations as the hypervisor console's `pool-*` and `move` commands, run
//! by the same code: each completes or changes nothing. CPUs join and leave
//! a pool by whole sched resource (adding CPU 6 to a `core` pool adds its SMT
//! sibling too). Pools created by hypercall are named `poolN`. Errors:
//!
//! | op | error | when |
//! |----|-------|------|
//! | any | [`HvError::InvalidParameter`] | unknown op/scheduler/granularity code, id over 32 bits, reserved argument not zero |
//! | `List` | [`HvError::NotFound`] | no pool with id `>=` x2 (the end of the list) |
//! | `Destroy`, `AddCpu`, `RemoveCpu`, `MoveDomain` | [`HvError::NotFound`] | no such pool, CPU or domain |
//! | `Destroy` | [`HvError::Busy`] | the pool still has domains |
//! | `Destroy` | [`HvError::Denied`] | pool 0 |
//! | `AddCpu` | [`HvError::Busy`] | the CPU (or a sibling of its resource) is in a pool, or offline |
//! | `RemoveCpu` | [`HvError::Busy`] | the CPU is not in that pool, or its domains would have no CPU left |
//! | `MoveDomain` | [`HvError::Busy`] | the target pool has no CPUs, or its scheduler refuses the domain |
//!
//! A successful `MoveDomain` returns once the domain's vCPUs have left their
//! old CPUs (bounded wait; the hypervisor logs how long it took); the domain
//! keeps running in its new pool.
//!
//! **Test hooks** (`0x80..`) exist for the test guest; a hypervisor may
//! refuse them with [`HvError::Denied`] for domains not configured for tests.
//! `TEST_REPORT` prints one [`ReportLine`] in the hypervisor log.
//!
//! **x86-64.** The same calls through `VMMCALL`: the register mapping and
//! how an x86 guest boots are in [`x86`].
#![no_std]
#![forbid(unsafe_code)]

use core::fmt;

pub mod x86;

/// The `HVC` immediate of every call.
pub const HVC_IMMEDIATE: u16 = 0;

/// SMCCC fast call, SMC64, Vendor Specific Hypervisor Service (entity 6).
pub const VENDOR_HYP_BASE: u32 = 0xC600_0000;

/// The SMCCC 1.3 SVE hint bit: ignored when decoding a function id.
pub const SMCCC_SVE_HINT: u32 = 1 << 16;

/// The major version of this ABI: changes that break old guests bump it.
pub const VERSION_MAJOR: u16 = 1;

/// The minor version: new calls or results that old guests can ignore.
pub const VERSION_MINOR: u16 = 0;

/// Number of argument registers, `x1..=x5`.
pub const ARG_REGS: usize = 5;

/// The argument registers `x1..=x5` of one call.
pub type Args = [u64; ARG_REGS];

/// The result registers `x0..=x3` of one call.
pub type Regs = [u64; 4];

/// The function id of call number `n`.
pub const fn function_id(n: u16) -> u32 {
    VENDOR_HYP_BASE | n as u32
}

/// The function ids as plain constants, for assembly, C and `match` arms.
pub mod ids {
    /// [`Function::Version`](crate::Function::Version).
    pub const VERSION: u32 = 0xC600_0000;
    /// [`Function::ConsoleWrite`](crate::Function::ConsoleWrite).
    pub const CONSOLE_WRITE: u32 = 0xC600_0001;
    /// [`Function::Yield`](crate::Function::Yield).
    pub const YIELD: u32 = 0xC600_0002;
    /// [`Function::Block`](crate::Function::Block).
    pub const BLOCK: u32 = 0xC600_0003;
    /// [`Function::SchedStats`](crate::Function::SchedStats).
    pub const SCHED_STATS: u32 = 0xC600_0004;
    /// [`Function::PoolOp`](crate::Function::PoolOp).
    pub const POOL_OP: u32 = 0xC600_0005;
    /// [`Function::TestReport`](crate::Function::TestReport).
    pub const TEST_REPORT: u32 = 0xC600_0080;
    /// [`Function::TestPauseSibling`](crate::Function::TestPauseSibling).
    pub const TEST_PAUSE_SIBLING: u32 = 0xC600_0081;
    /// [`Function::TestUnpauseSibling`](crate::Function::TestUnpauseSibling).
    pub const TEST_UNPAUSE_SIBLING: u32 = 0xC600_0082;
}

/// Defines a `u64`-encoded enum with `TryFrom<u64>` (unknown values are
/// [`HvError::InvalidParameter`]) and a `value()` accessor.
macro_rules! register_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $value:expr),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[repr(u64)]
        pub enum $name {
            $($(#[$vmeta])* $variant = $value),+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [Self] = &[$(Self::$variant),+];

            /// The register encoding.
            pub const fn value(self) -> u64 {
                self as u64
            }
        }

        impl TryFrom<u64> for $name {
            type Error = HvError;

            fn try_from(value: u64) -> Result<Self, HvError> {
                match value {
                    $(v if v == $value => Ok(Self::$variant),)+
                    _ => Err(HvError::InvalidParameter),
                }
            }
        }
    };
}

/// The calls of this ABI; the discriminant is the call number `n`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Function {
    /// `x0 = major << 16 | minor` of the ABI the hypervisor speaks.
    Version = 0x00,
    /// Write up to 24 bytes to the domain's console (see [`ConsoleChunk`]).
    ConsoleWrite = 0x01,
    /// Give up the rest of this time slice; the vCPU stays runnable and the
    /// scheduler picks again (possibly this vCPU at once). Returns 0.
    Yield = 0x02,
    /// Block until an interrupt is pending for this vCPU, another party wakes
    /// it (an unpause, a sibling kick), or the timeout passes (`x1`, in
    /// nanoseconds; 0 = no timeout). Like `WFI`, but explicit and with a
    /// reason: `x0` is the [`WakeReason`]. Returns at once if an interrupt is
    /// already pending, whatever the guest's PSTATE masks.
    Block = 0x03,
    /// Scheduling statistics of the calling vCPU or its whole domain
    /// (`x1` = [`StatsScope`]): `x1` runtime in ns, `x2` dispatches, `x3`
    /// vCPUs counted (see [`SchedStats`]). Any domain may ask about itself.
    SchedStats = 0x04,
    /// Runtime cpupool operations ([`PoolOp`]), for a privileged domain only:
    /// others get [`HvError::Denied`].
    PoolOp = 0x05,
    /// Test hook: print a counter or latency sample as a [`ReportLine`].
    TestReport = 0x80,
    /// Test hook: pause a sibling vCPU (`x1` = its index in the domain) of
    /// the caller's own sched unit. Returns once the sibling no longer runs;
    /// with core scheduling its CPU idles while the rest of the unit runs.
    /// Pausing itself or a vCPU of another unit is
    /// [`HvError::InvalidParameter`] / [`HvError::Denied`]; an already paused
    /// one is [`HvError::Busy`].
    TestPauseSibling = 0x81,
    /// Test hook: undo [`Function::TestPauseSibling`] (`x1` = the sibling);
    /// a sibling that is not paused is [`HvError::InvalidParameter`].
    TestUnpauseSibling = 0x82,
}

impl Function {
    /// Every call, by number.
    pub const ALL: [Function; 9] = [
        Self::Version,
        Self::ConsoleWrite,
        Self::Yield,
        Self::Block,
        Self::SchedStats,
        Self::PoolOp,
        Self::TestReport,
        Self::TestPauseSibling,
        Self::TestUnpauseSibling,
    ];

    /// The call number `n`.
    pub const fn number(self) -> u16 {
        self as u16
    }

    /// The function id a guest puts in `w0`.
    pub const fn id(self) -> u32 {
        function_id(self as u16)
    }

    /// The function's name as the SMCCC-style constant (`CONSOLE_WRITE`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Version => "VERSION",
            Self::ConsoleWrite => "CONSOLE_WRITE",
            Self::Yield => "YIELD",
            Self::Block => "BLOCK",
            Self::SchedStats => "SCHED_STATS",
            Self::PoolOp => "POOL_OP",
            Self::TestReport => "TEST_REPORT",
            Self::TestPauseSibling => "TEST_PAUSE_SIBLING",
            Self::TestUnpauseSibling => "TEST_UNPAUSE_SIBLING",
        }
    }

    /// Whether this is a test hook (`n >= 0x80`).
    pub const fn is_test_hook(self) -> bool {
        self as u16 >= 0x80
    }
}

/// Reads the function id from `x0` (only `w0` counts, as in SMCCC);
/// anything that is not one of ours is [`HvError::NotSupported`].
impl TryFrom<u64> for Function {
    type Error = HvError;

    fn try_from(x0: u64) -> Result<Self, HvError> {
        let id = (x0 as u32) & !SMCCC_SVE_HINT;
        if id & 0xFFFF_0000 != VENDOR_HYP_BASE {
            return Err(HvError::NotSupported);
        }
        let n = (id & 0xFFFF) as u16;
        Self::ALL
            .iter()
            .copied()
            .find(|f| f.number() == n)
            .ok_or(HvError::NotSupported)
    }
}

/// Why a call failed: the negative value in `x0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i64)]
pub enum HvError {
    /// Unknown function id (also what PSCI firmware says to an unknown id).
    NotSupported = -1,
    /// An argument is out of range, malformed, or a reserved one is not zero.
    InvalidParameter = -2,
    /// The caller may not do this (not privileged, test hooks disabled, not
    /// a sibling in its own unit).
    Denied = -3,
    /// The pool, CPU, domain or vCPU named does not exist.
    NotFound = -4,
    /// The object is in a state that forbids it now (a pool that still holds
    /// CPUs or domains, a CPU already in a pool, a vCPU already paused).
    Busy = -5,
    /// No room left (pool table full).
    NoResources = -6,
}

impl HvError {
    /// Every error, by code.
    pub const ALL: [HvError; 6] = [
        Self::NotSupported,
        Self::InvalidParameter,
        Self::Denied,
        Self::NotFound,
        Self::Busy,
        Self::NoResources,
    ];

    /// The signed code.
    pub const fn code(self) -> i64 {
        self as i64
    }

    /// The code as the `x0` register holds it.
    pub const fn to_x0(self) -> u64 {
        self as i64 as u64
    }

    /// The name as documentation writes it.
    pub const fn name(self) -> &'static str {
        match self {
            Self::NotSupported => "NOT_SUPPORTED",
            Self::InvalidParameter => "INVALID_PARAMETER",
            Self::Denied => "DENIED",
            Self::NotFound => "NOT_FOUND",
            Self::Busy => "BUSY",
            Self::NoResources => "NO_RESOURCES",
        }
    }
}

impl fmt::Display for HvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), self.code())
    }
}

/// A negative `x0` that is not one of [`HvError`]'s codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownError(pub i64);

impl TryFrom<i64> for HvError {
    type Error = UnknownError;

    fn try_from(code: i64) -> Result<Self, UnknownError> {
        Self::ALL
            .iter()
            .copied()
            .find(|e| e.code() == code)
            .ok_or(UnknownError(code))
    }
}

/// How a call failed, as the guest sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallError {
    /// One of this ABI's error codes.
    Hv(HvError),
    /// A negative code this ABI does not define (a newer hypervisor, or
    /// firmware that is not ours).
    Unknown(i64),
}

impl fmt::Display for CallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Hv(e) => e.fmt(f),
            Self::Unknown(code) => write!(f, "unknown error ({code})"),
        }
    }
}

/// The registers `x0..=x3` the hypervisor returns for `result`. A success
/// value in `x0` must be below `1 << 63` (it would read as an error).
pub fn encode_return(result: Result<Regs, HvError>) -> Regs {
    match result {
        Ok(regs) => {
            debug_assert!(
                (regs[0] as i64) >= 0,
                "success x0 {:#x} reads as an error",
                regs[0]
            );
            regs
        }
        Err(e) => [e.to_x0(), 0, 0, 0],
    }
}

/// What the guest makes of `x0..=x3` after a call.
pub fn decode_return(regs: Regs) -> Result<Regs, CallError> {
    let code = regs[0] as i64;
    if code >= 0 {
        return Ok(regs);
    }
    Err(HvError::try_from(code).map_or(CallError::Unknown(code), CallError::Hv))
}

/// The value of [`Function::Version`]'s `x0`.
pub const fn version_value(major: u16, minor: u16) -> u64 {
    (major as u64) << 16 | minor as u64
}

/// Splits [`Function::Version`]'s `x0` into `(major, minor)`.
pub const fn version_parts(x0: u64) -> (u16, u16) {
    ((x0 >> 16) as u16, x0 as u16)
}

/// Up to [`ConsoleChunk::CAPACITY`] bytes of console output, carried inline
/// in `x1` (length) and `x2..=x4` (bytes, little-endian: byte 0 is the low
/// byte of `x2`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsoleChunk {
    len: u8,
    bytes: [u8; Self::CAPACITY],
}

impl ConsoleChunk {
    /// Bytes one call carries: three registers.
    pub const CAPACITY: usize = 24;

    /// The first chunk of `text` and what is left after it.
    pub fn split(text: &[u8]) -> (Self, &[u8]) {
        let len = text.len().min(Self::CAPACITY);
        let mut bytes = [0; Self::CAPACITY];
        bytes[..len].copy_from_slice(&text[..len]);
        (
            Self {
                len: len as u8,
                bytes,
            },
            &text[len..],
        )
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len as usize]
    }

    /// `x1..=x5` for this chunk.
    pub fn to_args(&self) -> Args {
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&self.bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        [self.len as u64, word(0), word(1), word(2), 0]
    }

    /// Reads a chunk from `x1..=x5`; a length above the capacity, a non-zero
    /// byte past the length or a non-zero `x5` is invalid.
    pub fn from_args(args: Args) -> Result<Self, HvError> {
        if args[0] > Self::CAPACITY as u64 || args[4] != 0 {
            return Err(HvError::InvalidParameter);
        }
        let len = args[0] as usize;
        let mut bytes = [0u8; Self::CAPACITY];
        for (i, word) in args[1..4].iter().enumerate() {
            bytes[i * 8..i * 8 + 8].copy_from_slice(&word.to_le_bytes());
        }
        if bytes[len..].iter().any(|&b| b != 0) {
            return Err(HvError::InvalidParameter);
        }
        Ok(Self {
            len: len as u8,
            bytes,
        })
    }
}

register_enum! {
    /// Why [`Function::Block`] returned (its `x0`).
    WakeReason {
        /// An interrupt is pending for the vCPU.
        Interrupt = 0,
        /// Something else woke it: an unpause, a kick from the hypervisor.
        Woken = 1,
        /// The timeout passed.
        Timeout = 2,
    }
}

register_enum! {
    /// Whose statistics [`Function::SchedStats`] returns (its `x1`).
    StatsScope {
        /// The calling vCPU (`x3` = 1).
        Vcpu = 0,
        /// The caller's whole domain (`x3` = its vCPU count).
        Domain = 1,
    }
}

/// The result of [`Function::SchedStats`]: `x1..=x3`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SchedStats {
    /// Time spent running, in nanoseconds.
    pub runtime_ns: u64,
    /// How many times it was dispatched (switched in).
    pub dispatches: u64,
    /// How many vCPUs these figures cover.
    pub vcpus: u64,
}

impl SchedStats {
    /// The return registers.
    pub const fn to_regs(self) -> Regs {
        [0, self.runtime_ns, self.dispatches, self.vcpus]
    }

    /// Reads the return registers of a successful call.
    pub const fn from_regs(regs: Regs) -> Self {
        Self {
            runtime_ns: regs[1],
            dispatches: regs[2],
            vcpus: regs[3],
        }
    }
}

register_enum! {
    /// The unit of a [`Function::TestReport`] value (its `x3`).
    Unit {
        /// A plain count (iterations, events).
        Count = 0,
        /// Ticks of the virtual counter (`CNTVCT_EL0`).
        Ticks = 1,
        /// Nanoseconds.
        Nanoseconds = 2,
    }
}

impl Unit {
    /// The name in a [`ReportLine`].
    pub const fn name(self) -> &'static str {
        match self {
            Self::Count => "count",
            Self::Ticks => "ticks",
            Self::Nanoseconds => "ns",
        }
    }
}

/// A report tag: 1 to 8 bytes of `[a-z0-9_]`, carried in one register
/// (byte 0 lowest, NUL-padded).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Tag([u8; 8]);

impl Tag {
    /// A tag from text; `None` if empty, longer than 8 bytes or using other
    /// characters than `[a-z0-9_]`.
    pub fn new(text: &str) -> Option<Self> {
        let bytes = text.as_bytes();
        if bytes.is_empty() || bytes.len() > 8 || !bytes.iter().all(|&b| Self::allowed(b)) {
            return None;
        }
        let mut tag = [0; 8];
        tag[..bytes.len()].copy_from_slice(bytes);
        Some(Self(tag))
    }

    fn allowed(b: u8) -> bool {
        b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'
    }

    /// The register value.
    pub const fn to_u64(self) -> u64 {
        u64::from_le_bytes(self.0)
    }

    /// The tag in a register; invalid text or a NUL before the last byte is
    /// [`HvError::InvalidParameter`].
    pub fn from_u64(value: u64) -> Result<Self, HvError> {
        let bytes = value.to_le_bytes();
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(8);
        if len == 0 || bytes[len..].iter().any(|&b| b != 0) {
            return Err(HvError::InvalidParameter);
        }
        if !bytes[..len].iter().all(|&b| Self::allowed(b)) {
            return Err(HvError::InvalidParameter);
        }
        Ok(Self(bytes))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(8);
        // Only ASCII is ever stored.
        core::str::from_utf8(&self.0[..len]).unwrap_or("?")
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One [`Function::TestReport`]: `x1` tag, `x2` value, `x3` unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Report {
    /// What is measured (`sleep_p99`, `progress`).
    pub tag: Tag,
    /// The value.
    pub value: u64,
    /// Its unit.
    pub unit: Unit,
}

/// The line the hypervisor logs for a [`Report`]; tests match it:
/// `test-report: dom=1 vcpu=0 tag=sleep_p99 value=1234 unit=ticks`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportLine {
    /// The reporting domain.
    pub domain: u32,
    /// The reporting vCPU (index within the domain).
    pub vcpu: u32,
    /// What it reported.
    pub report: Report,
}

impl ReportLine {
    /// The fixed prefix of the line.
    pub const PREFIX: &'static str = "test-report: ";

    /// Finds and reads a report line anywhere in `line` (log prefixes before
    /// it are skipped); `None` if there is none or it is malformed.
    pub fn parse(line: &str) -> Option<Self> {
        let start = line.find(Self::PREFIX)?;
        let mut fields = line[start + Self::PREFIX.len()..].split_whitespace();
        let mut field = |name: &str| fields.next()?.strip_prefix(name)?.strip_prefix('=');
        let domain = field("dom")?.parse().ok()?;
        let vcpu = field("vcpu")?.parse().ok()?;
        let tag = Tag::new(field("tag")?)?;
        let value = field("value")?.parse().ok()?;
        let unit_name = field("unit")?;
        let unit = *Unit::ALL.iter().find(|u| u.name() == unit_name)?;
        Some(Self {
            domain,
            vcpu,
            report: Report { tag, value, unit },
        })
    }
}

impl fmt::Display for ReportLine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}dom={} vcpu={} tag={} value={} unit={}",
            Self::PREFIX,
            self.domain,
            self.vcpu,
            self.report.tag,
            self.report.value,
            self.report.unit.name()
        )
    }
}

register_enum! {
    /// The operation of a [`Function::PoolOp`] call (its `x1`).
    PoolOpCode {
        /// List pools one at a time.
        List = 0,
        /// Create an empty pool.
        Create = 1,
        /// Destroy an empty pool.
        Destroy = 2,
        /// Add a free CPU to a pool.
        AddCpu = 3,
        /// Remove a CPU from a pool (it becomes free, runs the idle scheduler).
        RemoveCpu = 4,
        /// Move a domain to another pool.
        MoveDomain = 5,
        /// Set a domain's hard and soft affinity (Xen's `vcpu-pin`).
        PinDomain = 6,
        /// Pause every vCPU of a domain (Xen's `xl pause`).
        PauseDomain = 7,
        /// Undo [`PoolOpCode::PauseDomain`].
        UnpauseDomain = 8,
        /// Read a domain's scheduling parameters (Xen's `xl sched-*`).
        GetDomainParams = 9,
        /// Set a domain's scheduling parameters.
        SetDomainParams = 10,
        /// Stop a domain for good (Xen's `xl destroy`).
        DestroyDomain = 11,
        /// Reload a domain from its image and boot it again (`xl reboot`).
        RestartDomain = 12,
    }
}

register_enum! {
    /// A pool's scheduler (names as in the `sched` crate and the configs).
    Scheduler {
        /// Credit2, the default.
        Credit2 = 0,
        /// Credit (with the reference-004 BOOST fix).
        Credit = 1,
        /// Null: one vCPU per CPU, no time slicing.
        Null = 2,
        /// RT (EDF with budgets).
        Rt = 3,
        /// ARINC 653 fixed time partitions.
        Arinc653 = 4,
    }
}

register_enum! {
    /// A pool's scheduling granularity (Xen's `sched-gran=`).
    Granularity {
        /// Every CPU is its own resource.
        Cpu = 0,
        /// The SMT threads of a core.
        Core = 1,
        /// The cores of a cluster.
        Cluster = 2,
        /// The CPUs of a socket.
        Socket = 3,
    }
}

/// One runtime cpupool operation, as carried by [`Function::PoolOp`].
///
/// | op           | x2         | x3           | success x0, x1, x2, x3 |
/// |--------------|------------|--------------|------------------------|
/// | `List`       | first pool id to look at | - | 0, pool id, [`PoolInfo`] word, CPU bitmap (CPUs 0..64) |
/// | `Create`     | [`Scheduler`] | [`Granularity`] | 0, new pool id |
/// | `Destroy`    | pool id    | -            | 0 |
/// | `AddCpu`     | pool id    | CPU index    | 0 |
/// | `RemoveCpu`  | pool id    | CPU index    | 0 |
/// | `MoveDomain` | domain id  | pool id      | 0 |
/// | `PinDomain`  | domain id  | hard affinity: bitmap of CPUs 0..64 (x4: soft, 0 = no preference) | 0 |
/// | `PauseDomain`, `UnpauseDomain`, `DestroyDomain`, `RestartDomain` | domain id | - | 0 |
/// | `GetDomainParams` | domain id | - | 0, [`DomainParams`] packed in x1 and x2 |
/// | `SetDomainParams` | domain id | [`DomainParams`] word 0 (x4: word 1) | 0 |
///
/// `List` returns the pool with the smallest id `>=` x2, or
/// [`HvError::NotFound`] past the last one: a guest lists every pool by
/// calling again with the returned id + 1. Ids are 32-bit; larger values
/// are [`HvError::InvalidParameter`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PoolOp {
    /// The first pool whose id is at least `from`.
    List {
        /// Where to start.
        from: u32,
    },
    /// A new, empty pool.
    Create {
        /// Its scheduler.
        scheduler: Scheduler,
        /// Its granularity.
        granularity: Granularity,
    },
    /// Destroy an empty pool.
    Destroy {
        /// The pool.
        pool: u32,
    },
    /// Give a free CPU to a pool.
    AddCpu {
        /// The pool.
        pool: u32,
        /// The CPU (hypervisor CPU index).
        cpu: u32,
    },
    /// Take a CPU out of a pool.
    RemoveCpu {
        /// The pool.
        pool: u32,
        /// The CPU.
        cpu: u32,
    },
    /// Move a domain, with all its vCPUs, to a pool.
    MoveDomain {
        /// The domain.
        domain: u32,
        /// The pool it moves to.
        pool: u32,
    },
    /// Set a domain's affinity, applied at once (a vCPU running outside
    /// `hard` is switched out and placed again).
    PinDomain {
        /// The domain.
        domain: u32,
        /// Bit `n`: CPU `n` may run it (Xen's hard affinity); never empty.
        hard: u64,
        /// Bit `n`: CPU `n` is preferred (soft affinity); 0 for none.
        soft: u64,
    },
    /// Pause every vCPU of a domain until [`PoolOp::UnpauseDomain`].
    PauseDomain {
        /// The domain.
        domain: u32,
    },
    /// Undo [`PoolOp::PauseDomain`].
    UnpauseDomain {
        /// The domain.
        domain: u32,
    },
    /// A domain's scheduling parameters.
    GetDomainParams {
        /// The domain.
        domain: u32,
    },
    /// Replace a domain's scheduling parameters (its pool's scheduler
    /// checks them; refused, nothing changes).
    SetDomainParams {
        /// The domain.
        domain: u32,
        /// The new parameters.
        params: DomainParams,
    },
    /// Stop a domain for good; its memory is freed once its vCPUs are off
    /// every CPU.
    DestroyDomain {
        /// The domain.
        domain: u32,
    },
    /// Reload a domain from its image and boot it again.
    RestartDomain {
        /// The domain.
        domain: u32,
    },
}

/// A domain's scheduling parameters in two registers: word 0 packs the
/// weight (bits 0..16, credit and credit2, 1..=65535), the cap (bits 16..32,
/// percent of a CPU, 0 = none) and extratime (bit 32, rt); word 1 the rt
/// period (bits 0..32) and budget (bits 32..64) in microseconds. Other bits
/// are reserved and must be zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DomainParams {
    /// Proportional share.
    pub weight: u16,
    /// Cap, percent of one CPU (0: none).
    pub cap: u16,
    /// rt: may run beyond its budget when a CPU would idle.
    pub extratime: bool,
    /// rt period, µs.
    pub period_us: u32,
    /// rt budget, µs.
    pub budget_us: u32,
}

impl DomainParams {
    /// The two words.
    pub const fn to_words(self) -> [u64; 2] {
        [
            self.weight as u64 | (self.cap as u64) << 16 | (self.extratime as u64) << 32,
            self.period_us as u64 | (self.budget_us as u64) << 32,
        ]
    }

    /// Reads the two words; reserved bits set are [`HvError::InvalidParameter`].
    pub fn from_words(words: [u64; 2]) -> Result<Self, HvError> {
        if words[0] >> 33 != 0 {
            return Err(HvError::InvalidParameter);
        }
        Ok(Self {
            weight: words[0] as u16,
            cap: (words[0] >> 16) as u16,
            extratime: words[0] >> 32 & 1 != 0,
            period_us: words[1] as u32,
            budget_us: (words[1] >> 32) as u32,
        })
    }
}

fn u32_arg(value: u64) -> Result<u32, HvError> {
    u32::try_from(value).map_err(|_| HvError::InvalidParameter)
}

fn reserved_zero(args: &[u64]) -> Result<(), HvError> {
    if args.iter().all(|&a| a == 0) {
        Ok(())
    } else {
        Err(HvError::InvalidParameter)
    }
}

impl PoolOp {
    /// The operation code.
    pub const fn code(self) -> PoolOpCode {
        match self {
            Self::List { .. } => PoolOpCode::List,
            Self::Create { .. } => PoolOpCode::Create,
            Self::Destroy { .. } => PoolOpCode::Destroy,
            Self::AddCpu { .. } => PoolOpCode::AddCpu,
            Self::RemoveCpu { .. } => PoolOpCode::RemoveCpu,
            Self::MoveDomain { .. } => PoolOpCode::MoveDomain,
            Self::PinDomain { .. } => PoolOpCode::PinDomain,
            Self::PauseDomain { .. } => PoolOpCode::PauseDomain,
            Self::UnpauseDomain { .. } => PoolOpCode::UnpauseDomain,
            Self::GetDomainParams { .. } => PoolOpCode::GetDomainParams,
            Self::SetDomainParams { .. } => PoolOpCode::SetDomainParams,
            Self::DestroyDomain { .. } => PoolOpCode::DestroyDomain,
            Self::RestartDomain { .. } => PoolOpCode::RestartDomain,
        }
    }

    /// `x1..=x5`.
    pub const fn to_args(self) -> Args {
        if let Self::PinDomain { domain, hard, soft } = self {
            return [self.code().value(), domain as u64, hard, soft, 0];
        }
        if let Self::SetDomainParams { domain, params } = self {
            let [a, b] = params.to_words();
            return [self.code().value(), domain as u64, a, b, 0];
        }
        let (a, b) = match self {
            Self::List { from } => (from as u64, 0),
            Self::Create {
                scheduler,
                granularity,
            } => (scheduler.value(), granularity.value()),
            Self::Destroy { pool } => (pool as u64, 0),
            Self::AddCpu { pool, cpu } | Self::RemoveCpu { pool, cpu } => (pool as u64, cpu as u64),
            Self::MoveDomain { domain, pool } => (domain as u64, pool as u64),
            Self::PinDomain { domain, .. }
            | Self::SetDomainParams { domain, .. }
            | Self::PauseDomain { domain }
            | Self::UnpauseDomain { domain }
            | Self::GetDomainParams { domain }
            | Self::DestroyDomain { domain }
            | Self::RestartDomain { domain } => (domain as u64, 0),
        };
        [self.code().value(), a, b, 0, 0]
    }

    /// Reads `x1..=x5`.
    pub fn from_args(args: Args) -> Result<Self, HvError> {
        let code = PoolOpCode::try_from(args[0])?;
        let (a, b) = (args[1], args[2]);
        let (op, used) = match code {
            PoolOpCode::List => (Self::List { from: u32_arg(a)? }, 2),
            PoolOpCode::Create => (
                Self::Create {
                    scheduler: Scheduler::try_from(a)?,
                    granularity: Granularity::try_from(b)?,
                },
                3,
            ),
            PoolOpCode::Destroy => (Self::Destroy { pool: u32_arg(a)? }, 2),
            PoolOpCode::AddCpu => (
                Self::AddCpu {
                    pool: u32_arg(a)?,
                    cpu: u32_arg(b)?,
                },
                3,
            ),
            PoolOpCode::RemoveCpu => (
                Self::RemoveCpu {
                    pool: u32_arg(a)?,
                    cpu: u32_arg(b)?,
                },
                3,
            ),
            PoolOpCode::MoveDomain => (
                Self::MoveDomain {
                    domain: u32_arg(a)?,
                    pool: u32_arg(b)?,
                },
                3,
            ),
            PoolOpCode::PinDomain if b == 0 => return Err(HvError::InvalidParameter),
            PoolOpCode::PinDomain => (
                Self::PinDomain {
                    domain: u32_arg(a)?,
                    hard: b,
                    soft: args[3],
                },
                4,
            ),
            PoolOpCode::PauseDomain => (
                Self::PauseDomain {
                    domain: u32_arg(a)?,
                },
                2,
            ),
            PoolOpCode::UnpauseDomain => (
                Self::UnpauseDomain {
                    domain: u32_arg(a)?,
                },
                2,
            ),
            PoolOpCode::GetDomainParams => (
                Self::GetDomainParams {
                    domain: u32_arg(a)?,
                },
                2,
            ),
            PoolOpCode::SetDomainParams => (
                Self::SetDomainParams {
                    domain: u32_arg(a)?,
                    params: DomainParams::from_words([b, args[3]])?,
                },
                4,
            ),
            PoolOpCode::DestroyDomain => (
                Self::DestroyDomain {
                    domain: u32_arg(a)?,
                },
                2,
            ),
            PoolOpCode::RestartDomain => (
                Self::RestartDomain {
                    domain: u32_arg(a)?,
                },
                2,
            ),
        };
        reserved_zero(&args[used..])?;
        Ok(op)
    }
}

/// One pool as `PoolOp::List` describes it. `x2` packs scheduler (bits
/// 0..8), granularity (bits 8..16), CPU count (bits 16..32) and domain count
/// (bits 32..64); `x3` is the bitmap of its CPUs 0..64 (CPUs beyond 63 are
/// counted but not in the bitmap).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolInfo {
    /// The pool id.
    pub id: u32,
    /// Its scheduler.
    pub scheduler: Scheduler,
    /// Its granularity.
    pub granularity: Granularity,
    /// How many CPUs it has.
    pub cpus: u16,
    /// How many domains it runs.
    pub domains: u32,
    /// Bit `n` set: CPU `n` is in the pool.
    pub cpu_bitmap: u64,
}

impl PoolInfo {
    /// The return registers of `List`.
    pub const fn to_regs(self) -> Regs {
        let packed = self.scheduler.value()
            | self.granularity.value() << 8
            | (self.cpus as u64) << 16
            | (self.domains as u64) << 32;
        [0, self.id as u64, packed, self.cpu_bitmap]
    }

    /// Reads the return registers of a successful `List`.
    pub fn from_regs(regs: Regs) -> Result<Self, HvError> {
        Ok(Self {
            id: u32_arg(regs[1])?,
            scheduler: Scheduler::try_from(regs[2] & 0xFF)?,
            granularity: Granularity::try_from(regs[2] >> 8 & 0xFF)?,
            cpus: (regs[2] >> 16) as u16,
            domains: (regs[2] >> 32) as u32,
            cpu_bitmap: regs[3],
        })
    }
}

/// A decoded call: what the hypervisor's dispatcher matches on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// [`Function::Version`].
    Version,
    /// [`Function::ConsoleWrite`].
    ConsoleWrite(ConsoleChunk),
    /// [`Function::Yield`].
    Yield,
    /// [`Function::Block`]; `timeout_ns == 0` waits without a timeout.
    Block {
        /// Nanoseconds, 0 for none.
        timeout_ns: u64,
    },
    /// [`Function::SchedStats`].
    SchedStats(StatsScope),
    /// [`Function::PoolOp`].
    PoolOp(PoolOp),
    /// [`Function::TestReport`].
    TestReport(Report),
    /// [`Function::TestPauseSibling`]: `x1` = the sibling's vCPU index in the
    /// domain.
    TestPauseSibling {
        /// The sibling vCPU.
        vcpu: u32,
    },
    /// [`Function::TestUnpauseSibling`].
    TestUnpauseSibling {
        /// The sibling vCPU.
        vcpu: u32,
    },
}

impl Call {
    /// Decodes the registers of a trapped `HVC #0`: `x0` and `x1..=x5`.
    /// Unknown ids are [`HvError::NotSupported`]; bad or non-zero reserved
    /// arguments are [`HvError::InvalidParameter`].
    pub fn decode(x0: u64, args: Args) -> Result<Self, HvError> {
        let function = Function::try_from(x0)?;
        let (call, used) = match function {
            Function::Version => (Self::Version, 0),
            Function::ConsoleWrite => (Self::ConsoleWrite(ConsoleChunk::from_args(args)?), 5),
            Function::Yield => (Self::Yield, 0),
            Function::Block => (
                Self::Block {
                    timeout_ns: args[0],
                },
                1,
            ),
            Function::SchedStats => (Self::SchedStats(StatsScope::try_from(args[0])?), 1),
            Function::PoolOp => (Self::PoolOp(PoolOp::from_args(args)?), 5),
            Function::TestReport => (
                Self::TestReport(Report {
                    tag: Tag::from_u64(args[0])?,
                    value: args[1],
                    unit: Unit::try_from(args[2])?,
                }),
                3,
            ),
            Function::TestPauseSibling => (
                Self::TestPauseSibling {
                    vcpu: u32_arg(args[0])?,
                },
                1,
            ),
            Function::TestUnpauseSibling => (
                Self::TestUnpauseSibling {
                    vcpu: u32_arg(args[0])?,
                },
                1,
            ),
        };
        reserved_zero(&args[used..])?;
        Ok(call)
    }

    /// The function this call uses.
    pub const fn function(&self) -> Function {
        match self {
            Self::Version => Function::Version,
            Self::ConsoleWrite(_) => Function::ConsoleWrite,
            Self::Yield => Function::Yield,
            Self::Block { .. } => Function::Block,
            Self::SchedStats(_) => Function::SchedStats,
            Self::PoolOp(_) => Function::PoolOp,
            Self::TestReport(_) => Function::TestReport,
            Self::TestPauseSibling { .. } => Function::TestPauseSibling,
            Self::TestUnpauseSibling { .. } => Function::TestUnpauseSibling,
        }
    }

    /// The registers a guest loads: `(w0, x1..=x5)`.
    pub fn encode(&self) -> (u32, Args) {
        let args = match *self {
            Self::Version | Self::Yield => [0; ARG_REGS],
            Self::ConsoleWrite(chunk) => chunk.to_args(),
            Self::Block { timeout_ns } => [timeout_ns, 0, 0, 0, 0],
            Self::SchedStats(scope) => [scope.value(), 0, 0, 0, 0],
            Self::PoolOp(op) => op.to_args(),
            Self::TestReport(r) => [r.tag.to_u64(), r.value, r.unit.value(), 0, 0],
            Self::TestPauseSibling { vcpu } | Self::TestUnpauseSibling { vcpu } => {
                [vcpu as u64, 0, 0, 0, 0]
            }
        };
        (self.function().id(), args)
    }
}

#[cfg(test)]
mod tests;
