//! PSCI calls from EL2 (Arm DEN 0022): starting CPUs and powering the machine off.

use core::arch::asm;

/// How PSCI calls reach the firmware (DT `/psci` `method`, ACPI FADT flags).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Conduit {
    /// `smc #0` (QEMU virt with virtualization=on, real firmware at EL3).
    Smc,
    /// `hvc #0` (only valid below a hypervisor, so unusual here).
    Hvc,
}

/// PSCI function ids (SMC64 where the call takes 64-bit arguments).
mod function {
    pub const SMCCC_VERSION: u32 = 0x8000_0000;
    pub const SMCCC_ARCH_FEATURES: u32 = 0x8000_0001;
    pub const PSCI_FEATURES: u32 = 0x8400_000A;
    pub const VERSION: u32 = 0x8400_0000;
    pub const CPU_ON_64: u32 = 0xC400_0003;
    pub const SYSTEM_OFF: u32 = 0x8400_0008;
    pub const SYSTEM_RESET: u32 = 0x8400_0009;
}

/// PSCI error codes (DEN 0022 5.2.2), as a value the caller can log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PsciError {
    /// NOT_SUPPORTED (-1).
    NotSupported,
    /// INVALID_PARAMETERS (-2): e.g. an MPIDR no CPU has.
    InvalidParameters,
    /// DENIED (-3).
    Denied,
    /// ALREADY_ON (-4).
    AlreadyOn,
    /// ON_PENDING (-5).
    OnPending,
    /// INTERNAL_FAILURE (-6).
    InternalFailure,
    /// Any other negative value.
    Other(i64),
}

impl core::fmt::Display for PsciError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NotSupported => write!(f, "PSCI NOT_SUPPORTED"),
            Self::InvalidParameters => write!(f, "PSCI INVALID_PARAMETERS"),
            Self::Denied => write!(f, "PSCI DENIED"),
            Self::AlreadyOn => write!(f, "PSCI ALREADY_ON"),
            Self::OnPending => write!(f, "PSCI ON_PENDING"),
            Self::InternalFailure => write!(f, "PSCI INTERNAL_FAILURE"),
            Self::Other(code) => write!(f, "PSCI error {code}"),
        }
    }
}

fn decode(ret: i64) -> Result<u64, PsciError> {
    match ret {
        r if r >= 0 => Ok(r as u64),
        -1 => Err(PsciError::NotSupported),
        -2 => Err(PsciError::InvalidParameters),
        -3 => Err(PsciError::Denied),
        -4 => Err(PsciError::AlreadyOn),
        -5 => Err(PsciError::OnPending),
        -6 => Err(PsciError::InternalFailure),
        other => Err(PsciError::Other(other)),
    }
}

fn call(conduit: Conduit, function: u32, a1: u64, a2: u64, a3: u64) -> i64 {
    let mut x0 = u64::from(function);
    // SAFETY: a PSCI call only changes the state the function id names (a CPU's
    // power state); the SMCCC says x0-x17 may be clobbered, which we declare.
    unsafe {
        match conduit {
            Conduit::Smc => {
                asm!("smc #0", inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _,
                inout("x3") a3 => _, out("x4") _, out("x5") _, out("x6") _, out("x7") _,
                out("x8") _, out("x9") _, out("x10") _, out("x11") _, out("x12") _,
                out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _)
            }
            Conduit::Hvc => {
                asm!("hvc #0", inout("x0") x0, inout("x1") a1 => _, inout("x2") a2 => _,
                inout("x3") a3 => _, out("x4") _, out("x5") _, out("x6") _, out("x7") _,
                out("x8") _, out("x9") _, out("x10") _, out("x11") _, out("x12") _,
                out("x13") _, out("x14") _, out("x15") _, out("x16") _, out("x17") _)
            }
        }
    }
    x0 as i64
}

/// The firmware's answer to `SMCCC_ARCH_FEATURES(function)` (0: implemented
/// and to be called, 1: not needed on this CPU, negative: not supported), or
/// `None` where the firmware has no SMCCC 1.1 (PSCI below 1.0, or
/// `SMCCC_VERSION` not implemented or below 1.1).
pub fn smccc_arch_features(conduit: Conduit, function: u32) -> Option<i64> {
    let (major, _) = version(conduit);
    if major < 1
        || call(
            conduit,
            function::PSCI_FEATURES,
            u64::from(function::SMCCC_VERSION),
            0,
            0,
        ) != 0
    {
        return None;
    }
    let smccc = call(conduit, function::SMCCC_VERSION, 0, 0, 0);
    if smccc < 0x1_0001 {
        return None;
    }
    Some(call(
        conduit,
        function::SMCCC_ARCH_FEATURES,
        u64::from(function),
        0,
        0,
    ))
}

/// Calls the SMCCC architecture function `function` (an
/// `SMCCC_ARCH_WORKAROUND_*`) with `x1 = argument`; the firmware's `x0`.
pub fn smccc_arch_call(conduit: Conduit, function: u32, argument: u64) -> i64 {
    call(conduit, function, argument, 0, 0)
}

/// The firmware's PSCI version as (major, minor).
pub fn version(conduit: Conduit) -> (u16, u16) {
    let v = call(conduit, function::VERSION, 0, 0, 0) as u32;
    ((v >> 16) as u16, v as u16)
}

/// Starts the CPU with affinity `mpidr` at physical `entry` with x0 = `context`.
pub fn cpu_on(conduit: Conduit, mpidr: u64, entry: u64, context: u64) -> Result<(), PsciError> {
    decode(call(conduit, function::CPU_ON_64, mpidr, entry, context)).map(|_| ())
}

/// Powers the machine off (ends a QEMU run). Returns only if the firmware refuses.
pub fn system_off(conduit: Conduit) -> PsciError {
    decode(call(conduit, function::SYSTEM_OFF, 0, 0, 0))
        .err()
        .unwrap_or(PsciError::Other(0))
}

/// Resets the machine. Returns only if the firmware refuses.
pub fn system_reset(conduit: Conduit) -> PsciError {
    decode(call(conduit, function::SYSTEM_RESET, 0, 0, 0))
        .err()
        .unwrap_or(PsciError::Other(0))
}
