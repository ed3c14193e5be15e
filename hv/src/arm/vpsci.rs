//! PSCI for guests: the per-domain vCPU power state machine.
//!
//! A guest's PSCI calls (Arm DEN 0022, "Arm Power State Coordination Interface",
//! version 1.1) arrive as `HVC #0` or `SMC #0` with the SMC Calling Convention
//! (Arm DEN 0028): function id in `x0`, arguments in `x1..x3`, result in `x0`.
//! [`VPsci::call`] takes those plain register values and returns the value for
//! `x0` plus a [`PsciAction`] the arch glue and scheduler carry out. Nothing here
//! touches a vCPU's registers or the scheduler directly, so all of it is
//! host-tested.
//!
//! Also answers the SMCCC architecture calls that arrive on the same conduit
//! (`SMCCC_VERSION`, `SMCCC_ARCH_FEATURES`): Linux asks for them right after
//! probing PSCI.

use alloc::vec::Vec;

use crate::hypercall::GuestRamMap;

/// PSCI and SMCCC function ids (DEN 0022 5.1 table 5; DEN 0028 7.2).
///
/// `*_32` ids use the SMC32 convention (arguments in `w` registers); `*_64`
/// ids use SMC64. Functions without 64-bit arguments only exist as SMC32.
pub mod function {
    /// SMCCC_VERSION (DEN 0028 7.2.1).
    pub const SMCCC_VERSION: u32 = 0x8000_0000;
    /// SMCCC_ARCH_FEATURES (DEN 0028 7.2.2).
    pub const SMCCC_ARCH_FEATURES: u32 = 0x8000_0001;
    /// SMCCC_ARCH_WORKAROUND_1: invalidate the branch predictor (Spectre v2).
    pub const SMCCC_ARCH_WORKAROUND_1: u32 = 0x8000_8000;
    /// SMCCC_ARCH_WORKAROUND_2: speculative store bypass control (Spectre v4).
    pub const SMCCC_ARCH_WORKAROUND_2: u32 = 0x8000_7fff;
    /// SMCCC_ARCH_WORKAROUND_3: branch predictor and history (Spectre v2, BHB).
    pub const SMCCC_ARCH_WORKAROUND_3: u32 = 0x8000_3fff;
    /// PSCI_VERSION.
    pub const PSCI_VERSION: u32 = 0x8400_0000;
    /// CPU_SUSPEND, SMC32.
    pub const CPU_SUSPEND_32: u32 = 0x8400_0001;
    /// CPU_SUSPEND, SMC64.
    pub const CPU_SUSPEND_64: u32 = 0xC400_0001;
    /// CPU_OFF.
    pub const CPU_OFF: u32 = 0x8400_0002;
    /// CPU_ON, SMC32.
    pub const CPU_ON_32: u32 = 0x8400_0003;
    /// CPU_ON, SMC64.
    pub const CPU_ON_64: u32 = 0xC400_0003;
    /// AFFINITY_INFO, SMC32.
    pub const AFFINITY_INFO_32: u32 = 0x8400_0004;
    /// AFFINITY_INFO, SMC64.
    pub const AFFINITY_INFO_64: u32 = 0xC400_0004;
    /// MIGRATE, SMC32 (not supported: there is no Trusted OS to migrate).
    pub const MIGRATE_32: u32 = 0x8400_0005;
    /// MIGRATE, SMC64.
    pub const MIGRATE_64: u32 = 0xC400_0005;
    /// MIGRATE_INFO_TYPE.
    pub const MIGRATE_INFO_TYPE: u32 = 0x8400_0006;
    /// SYSTEM_OFF.
    pub const SYSTEM_OFF: u32 = 0x8400_0008;
    /// SYSTEM_RESET.
    pub const SYSTEM_RESET: u32 = 0x8400_0009;
    /// PSCI_FEATURES.
    pub const PSCI_FEATURES: u32 = 0x8400_000A;
}

/// The PSCI version this implementation reports: 1.1 (major in bits `[30:16]`,
/// minor in bits `[15:0]`, DEN 0022 5.1.1).
pub const PSCI_VERSION_1_1: u64 = 1 << 16 | 1;

/// The SMCCC version reported by `SMCCC_VERSION`: 1.1 (DEN 0028 7.2.1).
pub const SMCCC_VERSION_1_1: u64 = 1 << 16 | 1;

/// `MIGRATE_INFO_TYPE` result: no Trusted OS, migration not required
/// (DEN 0022 5.9.1).
pub const MIGRATE_INFO_TYPE_NOT_REQUIRED: u64 = 2;

/// The affinity fields of an MPIDR (Aff3 `[39:32]`, Aff2 `[23:16]`, Aff1 `[15:8]`,
/// Aff0 `[7:0]`; Arm ARM D17.2 MPIDR_EL1). PSCI target ids carry only these bits
/// (DEN 0022 5.1.4: all other bits must be zero).
pub const MPIDR_AFFINITY_MASK: u64 = 0xff_00ff_ffff;

/// PSCI return codes (DEN 0022 5.2.2, table 6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(i32)]
pub enum PsciCode {
    /// SUCCESS.
    Success = 0,
    /// NOT_SUPPORTED.
    NotSupported = -1,
    /// INVALID_PARAMETERS.
    InvalidParameters = -2,
    /// DENIED.
    Denied = -3,
    /// ALREADY_ON.
    AlreadyOn = -4,
    /// ON_PENDING.
    OnPending = -5,
    /// INTERNAL_FAILURE.
    InternalFailure = -6,
    /// NOT_PRESENT.
    NotPresent = -7,
    /// DISABLED.
    Disabled = -8,
    /// INVALID_ADDRESS.
    InvalidAddress = -9,
}

impl PsciCode {
    /// The code as the guest sees it in `x0` (sign-extended to 64 bits; an SMC32
    /// caller reads the low 32 bits).
    pub const fn as_register(self) -> u64 {
        self as i32 as i64 as u64
    }
}

/// `AFFINITY_INFO` results (DEN 0022 5.7.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u64)]
pub enum AffinityState {
    /// At least one matching vCPU is on.
    On = 0,
    /// Every matching vCPU is off.
    Off = 1,
    /// A matching vCPU has been started but has not run yet.
    OnPending = 2,
}

/// The power state of one vCPU as PSCI sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PowerState {
    /// Running (or runnable).
    On,
    /// Off: never started, or it called `CPU_OFF`.
    Off,
    /// `CPU_ON` accepted; waiting for the glue to start it ([`VPsci::vcpu_started`]).
    OnPending,
}

/// What the arch glue and the scheduler must do after a PSCI call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PsciAction {
    /// Write `x0` and resume the calling vCPU.
    Resume,
    /// Write `x0` (SUCCESS), then treat the caller as if it executed WFI
    /// (`CPU_SUSPEND`: a standby state that a pending interrupt ends).
    WaitForInterrupt,
    /// Write `x0` (SUCCESS) for the caller, then reset vCPU `vcpu` to its entry
    /// state (AArch64 EL1h, MMU and caches off, interrupts masked), with
    /// `PC = entry` and `x0 = context_id`, and make it runnable. Call
    /// [`VPsci::vcpu_started`] when it first runs.
    StartVcpu {
        /// Index of the vCPU to start, within the domain.
        vcpu: usize,
        /// Its entry point (an IPA inside guest RAM).
        entry: u64,
        /// The value it finds in `x0`.
        context_id: u64,
    },
    /// The caller powered itself off: block this vCPU (and only this vCPU) until
    /// a later `CPU_ON` starts it again. Its unit siblings keep running; the
    /// scheduler glue must give its slot an idle vCPU, not stall the unit.
    /// `x0` is not written: `CPU_OFF` does not return on success.
    VcpuOff,
    /// `SYSTEM_OFF`: stop this domain (only this one).
    StopDomain,
    /// `SYSTEM_RESET`: restart this domain (only this one); call
    /// [`VPsci::reset`] as part of it.
    RestartDomain,
    /// An `SMCCC_ARCH_WORKAROUND_1/3` the hypervisor offered: run this CPU's
    /// mitigation, then resume with `x0` = 0.
    ArchWorkaround,
    /// `SMCCC_ARCH_WORKAROUND_2` (`x1`: enable): forward it to the
    /// firmware, which implements it, and resume.
    ForwardWorkaround2 {
        /// The caller's `x1`.
        enable: u64,
    },
}

/// What the guests are told of the SMCCC workarounds: `SMCCC_ARCH_FEATURES`
/// answers (0: call it, 1: not needed, -1: not supported), as the hypervisor
/// worked them out for the CPUs the domain may run on
/// (`crate::speculation::arm`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Workarounds {
    /// For `SMCCC_ARCH_WORKAROUND_1`.
    pub workaround_1: i64,
    /// For `SMCCC_ARCH_WORKAROUND_2` (0 only where firmware implements it).
    pub workaround_2: i64,
    /// For `SMCCC_ARCH_WORKAROUND_3`.
    pub workaround_3: i64,
}

impl Workarounds {
    /// None offered (what a guest hears before the hypervisor knows its CPUs).
    pub const NONE: Self = Self {
        workaround_1: -1,
        workaround_2: -1,
        workaround_3: -1,
    };
}

/// The result of one PSCI call: the value for the caller's `x0` and the action.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PsciOutcome {
    /// The value to write to the caller's `x0` (ignored for
    /// [`PsciAction::VcpuOff`], [`PsciAction::StopDomain`] and
    /// [`PsciAction::RestartDomain`], which do not return).
    pub x0: u64,
    /// What to do next.
    pub action: PsciAction,
}

impl PsciOutcome {
    const fn resume(x0: u64) -> Self {
        Self {
            x0,
            action: PsciAction::Resume,
        }
    }

    const fn code(code: PsciCode) -> Self {
        Self::resume(code.as_register())
    }
}

/// Why a [`VPsci`] could not be built.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VPsciError {
    /// A domain needs at least one vCPU.
    NoVcpus,
    /// This virtual MPIDR has bits outside the affinity fields.
    MpidrNotAffinity {
        /// The vCPU index.
        vcpu: usize,
        /// Its MPIDR.
        mpidr: u64,
    },
    /// Two vCPUs have the same virtual MPIDR.
    DuplicateMpidr {
        /// The second vCPU with it.
        vcpu: usize,
        /// The MPIDR.
        mpidr: u64,
    },
}

/// Whether `function_id` (a caller's `x0`) belongs to the services [`VPsci`]
/// answers: the PSCI range (0x8400_0000..=0x8400_001F and the SMC64 twin) and
/// the SMCCC architecture calls (0x8000_0000..=0x8000_FFFF). The glue routes
/// everything else (e.g. the hypervisor's own vendor-specific hypercalls).
/// The upper 32 bits of `x0` are ignored, as SMCCC 1.1 requires (DEN 0028 2.5).
pub const fn is_psci_or_arch_call(function_id: u64) -> bool {
    let id = function_id as u32;
    matches!(id, 0x8400_0000..=0x8400_001F | 0xC400_0000..=0xC400_001F)
        || matches!(id, 0x8000_0000..=0x8000_FFFF)
}

/// One domain's PSCI state: each vCPU's power state and virtual MPIDR.
#[derive(Clone, Debug)]
pub struct VPsci {
    vcpus: Vec<VcpuPower>,
    workarounds: Workarounds,
}

#[derive(Clone, Copy, Debug)]
struct VcpuPower {
    mpidr: u64,
    state: PowerState,
}

impl VPsci {
    /// A domain whose vCPU `i` has virtual MPIDR `mpidrs[i]` (affinity bits
    /// only). vCPU 0 is the boot vCPU and starts on; the others start off.
    pub fn new(mpidrs: &[u64]) -> Result<Self, VPsciError> {
        if mpidrs.is_empty() {
            return Err(VPsciError::NoVcpus);
        }
        let mut vcpus: Vec<VcpuPower> = Vec::with_capacity(mpidrs.len());
        for (vcpu, &mpidr) in mpidrs.iter().enumerate() {
            if mpidr & !MPIDR_AFFINITY_MASK != 0 {
                return Err(VPsciError::MpidrNotAffinity { vcpu, mpidr });
            }
            if vcpus.iter().any(|other| other.mpidr == mpidr) {
                return Err(VPsciError::DuplicateMpidr { vcpu, mpidr });
            }
            vcpus.push(VcpuPower {
                mpidr,
                state: PowerState::Off,
            });
        }
        vcpus[0].state = PowerState::On;
        Ok(Self {
            vcpus,
            workarounds: Workarounds::NONE,
        })
    }

    /// Offers the SMCCC workarounds as `workarounds` says.
    pub fn with_workarounds(mut self, workarounds: Workarounds) -> Self {
        self.workarounds = workarounds;
        self
    }

    /// The usual virtual MPIDRs for `count` vCPUs: vCPU `i` gets Aff0 = i % 16,
    /// Aff1 = i / 16 (16 per cluster, the GICv3 SGI target-list limit).
    pub fn linear_mpidrs(count: usize) -> Vec<u64> {
        (0..count)
            .map(|i| ((i as u64 / 16) << 8) | (i as u64 % 16))
            .collect()
    }

    /// Number of vCPUs.
    pub fn vcpu_count(&self) -> usize {
        self.vcpus.len()
    }

    /// The power state of `vcpu` (`None` if there is no such vCPU).
    pub fn state(&self, vcpu: usize) -> Option<PowerState> {
        self.vcpus.get(vcpu).map(|v| v.state)
    }

    /// The virtual MPIDR of `vcpu` (`None` if there is no such vCPU).
    pub fn mpidr(&self, vcpu: usize) -> Option<u64> {
        self.vcpus.get(vcpu).map(|v| v.mpidr)
    }

    /// The vCPU with affinity `mpidr`, if any.
    pub fn vcpu_by_mpidr(&self, mpidr: u64) -> Option<usize> {
        self.vcpus.iter().position(|v| v.mpidr == mpidr)
    }

    /// The glue has started `vcpu` after [`PsciAction::StartVcpu`]: it is now on.
    /// Returns false (and changes nothing) unless it was pending.
    pub fn vcpu_started(&mut self, vcpu: usize) -> bool {
        match self.vcpus.get_mut(vcpu) {
            Some(v) if v.state == PowerState::OnPending => {
                v.state = PowerState::On;
                true
            }
            _ => false,
        }
    }

    /// Back to the boot state (vCPU 0 on, the rest off), for a domain restart.
    pub fn reset(&mut self) {
        for (i, v) in self.vcpus.iter_mut().enumerate() {
            v.state = if i == 0 {
                PowerState::On
            } else {
                PowerState::Off
            };
        }
    }

    /// Handles a PSCI or SMCCC call from `vcpu` with registers `x0..x3`.
    /// `memory` says which IPAs are guest RAM (for `CPU_ON` entry points).
    ///
    /// Never panics on guest input: unknown function ids answer NOT_SUPPORTED,
    /// and a `vcpu` index out of range answers INTERNAL_FAILURE (a glue bug,
    /// not a guest's).
    pub fn call(
        &mut self,
        vcpu: usize,
        x0: u64,
        x1: u64,
        x2: u64,
        x3: u64,
        memory: &(impl GuestRamMap + ?Sized),
    ) -> PsciOutcome {
        if vcpu >= self.vcpus.len() {
            return PsciOutcome::code(PsciCode::InternalFailure);
        }
        // SMCCC 1.1 (DEN 0028 2.5): the function id is w0; the upper half of x0
        // is ignored. SMC32 calls pass 32-bit arguments in w1..w3.
        let function_id = x0 as u32;
        let smc64 = function_id & (1 << 30) != 0;
        let argument = |x: u64| if smc64 { x } else { x & 0xffff_ffff };
        let (x1, x2, x3) = (argument(x1), argument(x2), argument(x3));
        use function::*;
        match function_id {
            SMCCC_VERSION => PsciOutcome::resume(SMCCC_VERSION_1_1),
            SMCCC_ARCH_FEATURES => self.arch_features(x1 as u32),
            PSCI_VERSION => PsciOutcome::resume(PSCI_VERSION_1_1),
            PSCI_FEATURES => self.features(x1 as u32),
            CPU_SUSPEND_32 | CPU_SUSPEND_64 => PsciOutcome {
                x0: PsciCode::Success.as_register(),
                action: PsciAction::WaitForInterrupt,
            },
            CPU_OFF => {
                self.vcpus[vcpu].state = PowerState::Off;
                PsciOutcome {
                    // Returned only if the glue cannot take the vCPU offline.
                    x0: PsciCode::Denied.as_register(),
                    action: PsciAction::VcpuOff,
                }
            }
            CPU_ON_32 | CPU_ON_64 => self.cpu_on(x1, x2, x3, memory),
            AFFINITY_INFO_32 | AFFINITY_INFO_64 => self.affinity_info(x1, x2),
            MIGRATE_INFO_TYPE => PsciOutcome::resume(MIGRATE_INFO_TYPE_NOT_REQUIRED),
            SYSTEM_OFF => PsciOutcome {
                x0: PsciCode::Success.as_register(),
                action: PsciAction::StopDomain,
            },
            SYSTEM_RESET => PsciOutcome {
                x0: PsciCode::Success.as_register(),
                action: PsciAction::RestartDomain,
            },
            SMCCC_ARCH_WORKAROUND_1 if self.workarounds.workaround_1 == 0 => PsciOutcome {
                x0: 0,
                action: PsciAction::ArchWorkaround,
            },
            SMCCC_ARCH_WORKAROUND_3 if self.workarounds.workaround_3 == 0 => PsciOutcome {
                x0: 0,
                action: PsciAction::ArchWorkaround,
            },
            SMCCC_ARCH_WORKAROUND_2 if self.workarounds.workaround_2 == 0 => PsciOutcome {
                x0: 0,
                action: PsciAction::ForwardWorkaround2 { enable: x1 },
            },
            _ => PsciOutcome::code(PsciCode::NotSupported),
        }
    }

    /// `PSCI_FEATURES` (DEN 0022 5.15): 0 for an implemented function (for
    /// CPU_SUSPEND: bit 1 clear = original power_state format, bit 0 clear =
    /// platform-coordinated mode only), NOT_SUPPORTED otherwise.
    fn features(&self, queried: u32) -> PsciOutcome {
        use function::*;
        match queried {
            PSCI_VERSION | CPU_SUSPEND_32 | CPU_SUSPEND_64 | CPU_OFF | CPU_ON_32 | CPU_ON_64
            | AFFINITY_INFO_32 | AFFINITY_INFO_64 | MIGRATE_INFO_TYPE | SYSTEM_OFF
            | SYSTEM_RESET | PSCI_FEATURES | SMCCC_VERSION => PsciOutcome::code(PsciCode::Success),
            _ => PsciOutcome::code(PsciCode::NotSupported),
        }
    }

    /// `SMCCC_ARCH_FEATURES` (DEN 0028 7.2.2): SMCCC_VERSION and
    /// SMCCC_ARCH_FEATURES themselves, and the CPU-erratum workarounds as
    /// [`Workarounds`] says (0 offered, 1 not needed, -1 not supported).
    fn arch_features(&self, queried: u32) -> PsciOutcome {
        let resume = |value: i64| PsciOutcome::resume(value as u64);
        match queried {
            function::SMCCC_VERSION | function::SMCCC_ARCH_FEATURES => {
                PsciOutcome::code(PsciCode::Success)
            }
            function::SMCCC_ARCH_WORKAROUND_1 => resume(self.workarounds.workaround_1),
            function::SMCCC_ARCH_WORKAROUND_2 => resume(self.workarounds.workaround_2),
            function::SMCCC_ARCH_WORKAROUND_3 => resume(self.workarounds.workaround_3),
            _ => PsciOutcome::code(PsciCode::NotSupported),
        }
    }

    /// `CPU_ON(target_cpu, entry_point_address, context_id)` (DEN 0022 5.6).
    fn cpu_on(
        &mut self,
        target: u64,
        entry: u64,
        context_id: u64,
        memory: &(impl GuestRamMap + ?Sized),
    ) -> PsciOutcome {
        if target & !MPIDR_AFFINITY_MASK != 0 {
            return PsciOutcome::code(PsciCode::InvalidParameters);
        }
        let Some(vcpu) = self.vcpu_by_mpidr(target) else {
            return PsciOutcome::code(PsciCode::InvalidParameters);
        };
        match self.vcpus[vcpu].state {
            PowerState::On => return PsciOutcome::code(PsciCode::AlreadyOn),
            PowerState::OnPending => return PsciOutcome::code(PsciCode::OnPending),
            PowerState::Off => {}
        }
        // An AArch64 entry point is a 4-byte aligned instruction in guest RAM.
        if !entry.is_multiple_of(4) || !memory.contains(entry, 4) {
            return PsciOutcome::code(PsciCode::InvalidAddress);
        }
        self.vcpus[vcpu].state = PowerState::OnPending;
        PsciOutcome {
            x0: PsciCode::Success.as_register(),
            action: PsciAction::StartVcpu {
                vcpu,
                entry,
                context_id,
            },
        }
    }

    /// `AFFINITY_INFO(target_affinity, lowest_affinity_level)` (DEN 0022 5.7).
    /// From PSCI 1.0 on only level 0 is required; other levels are refused with
    /// INVALID_PARAMETERS, as the specification allows.
    fn affinity_info(&self, target: u64, lowest_level: u64) -> PsciOutcome {
        if lowest_level != 0 || target & !MPIDR_AFFINITY_MASK != 0 {
            return PsciOutcome::code(PsciCode::InvalidParameters);
        }
        match self.vcpu_by_mpidr(target) {
            None => PsciOutcome::code(PsciCode::InvalidParameters),
            Some(vcpu) => PsciOutcome::resume(match self.vcpus[vcpu].state {
                PowerState::On => AffinityState::On,
                PowerState::Off => AffinityState::Off,
                PowerState::OnPending => AffinityState::OnPending,
            } as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::function::*;
    use super::*;
    use core::ops::Range;

    const RAM: Range<u64> = 0x4000_0000..0x4800_0000;

    fn psci(count: usize) -> VPsci {
        VPsci::new(&VPsci::linear_mpidrs(count)).unwrap()
    }

    fn call(p: &mut VPsci, vcpu: usize, x0: u32, x1: u64, x2: u64, x3: u64) -> PsciOutcome {
        p.call(vcpu, x0 as u64, x1, x2, x3, &RAM)
    }

    fn code(c: PsciCode) -> PsciOutcome {
        PsciOutcome::code(c)
    }

    #[test]
    fn version_and_migrate_info() {
        let mut p = psci(2);
        assert_eq!(call(&mut p, 0, PSCI_VERSION, 0, 0, 0).x0, 0x0001_0001);
        assert_eq!(call(&mut p, 0, MIGRATE_INFO_TYPE, 0, 0, 0).x0, 2);
        assert_eq!(call(&mut p, 0, SMCCC_VERSION, 0, 0, 0).x0, 0x0001_0001);
        // The upper half of x0 is ignored (SMCCC 1.1).
        let out = p.call(
            1,
            0xdead_beef_0000_0000 | PSCI_VERSION as u64,
            0,
            0,
            0,
            &RAM,
        );
        assert_eq!(out.x0, 0x0001_0001);
    }

    #[test]
    fn features_for_implemented_and_unknown_functions() {
        let mut p = psci(1);
        for f in [
            PSCI_VERSION,
            CPU_SUSPEND_64,
            CPU_OFF,
            CPU_ON_32,
            CPU_ON_64,
            AFFINITY_INFO_64,
            SYSTEM_OFF,
            SYSTEM_RESET,
            MIGRATE_INFO_TYPE,
            PSCI_FEATURES,
            SMCCC_VERSION,
        ] {
            assert_eq!(
                call(&mut p, 0, PSCI_FEATURES, f as u64, 0, 0),
                code(PsciCode::Success),
                "{f:#x}"
            );
        }
        for f in [MIGRATE_32, 0x8400_000E /* SYSTEM_SUSPEND */, 0x1234] {
            assert_eq!(
                call(&mut p, 0, PSCI_FEATURES, f as u64, 0, 0),
                code(PsciCode::NotSupported),
                "{f:#x}"
            );
        }
        assert_eq!(
            call(&mut p, 0, SMCCC_ARCH_FEATURES, 0x8000_8000, 0, 0),
            code(PsciCode::NotSupported)
        );
        assert_eq!(
            call(&mut p, 0, SMCCC_ARCH_FEATURES, SMCCC_VERSION as u64, 0, 0),
            code(PsciCode::Success)
        );
    }

    #[test]
    fn the_workarounds_are_offered_as_the_hypervisor_worked_them_out() {
        let mut p = psci(1);
        // Nothing offered by default: the calls themselves are refused too.
        for f in [0x8000_8000u64, 0x8000_7fff, 0x8000_3fff] {
            assert_eq!(
                call(&mut p, 0, SMCCC_ARCH_FEATURES, f, 0, 0),
                code(PsciCode::NotSupported)
            );
            assert_eq!(
                call(&mut p, 0, f as u32, 1, 0, 0),
                code(PsciCode::NotSupported)
            );
        }
        let mut p = psci(1).with_workarounds(Workarounds {
            workaround_1: -1,
            workaround_2: 0,
            workaround_3: 0,
        });
        let features =
            |p: &mut VPsci, f: u32| call(p, 0, SMCCC_ARCH_FEATURES, u64::from(f), 0, 0).x0 as i64;
        assert_eq!(features(&mut p, SMCCC_ARCH_WORKAROUND_1), -1);
        assert_eq!(features(&mut p, SMCCC_ARCH_WORKAROUND_3), 0);
        let w3 = call(&mut p, 0, SMCCC_ARCH_WORKAROUND_3, 0, 0, 0);
        assert_eq!((w3.x0, w3.action), (0, PsciAction::ArchWorkaround));
        let w2 = call(&mut p, 0, SMCCC_ARCH_WORKAROUND_2, 1, 0, 0);
        assert_eq!(w2.action, PsciAction::ForwardWorkaround2 { enable: 1 });
        // Unaffected: "not needed" (1), and a call still answers nothing.
        let p2 = psci(1).with_workarounds(Workarounds {
            workaround_1: 1,
            ..Workarounds::NONE
        });
        let mut p2 = p2;
        assert_eq!(features(&mut p2, SMCCC_ARCH_WORKAROUND_1), 1);
        assert_eq!(
            call(&mut p2, 0, SMCCC_ARCH_WORKAROUND_1, 0, 0, 0),
            code(PsciCode::NotSupported)
        );
    }

    #[test]
    fn unknown_ids_are_not_supported() {
        let mut p = psci(1);
        for f in [
            MIGRATE_32,
            MIGRATE_64,
            0x8400_001F,
            0xC400_0000,
            0x0,
            0xffff_ffff,
        ] {
            let out = call(&mut p, 0, f, 1, 2, 3);
            assert_eq!(out, code(PsciCode::NotSupported), "{f:#x}");
            assert_eq!(out.x0, u64::MAX, "NOT_SUPPORTED is -1 in x0");
        }
    }

    #[test]
    fn cpu_on_starts_an_off_vcpu_and_affinity_info_follows() {
        let mut p = psci(4);
        let target = p.mpidr(2).unwrap();
        assert_eq!(
            call(&mut p, 0, AFFINITY_INFO_64, target, 0, 0).x0,
            AffinityState::Off as u64
        );
        let out = call(&mut p, 0, CPU_ON_64, target, 0x4008_0000, 0x1234_5678_9abc);
        assert_eq!(
            out,
            PsciOutcome {
                x0: 0,
                action: PsciAction::StartVcpu {
                    vcpu: 2,
                    entry: 0x4008_0000,
                    context_id: 0x1234_5678_9abc
                }
            }
        );
        assert_eq!(p.state(2), Some(PowerState::OnPending));
        assert_eq!(
            call(&mut p, 0, AFFINITY_INFO_64, target, 0, 0).x0,
            AffinityState::OnPending as u64
        );
        // A second CPU_ON before it runs: ON_PENDING.
        assert_eq!(
            call(&mut p, 1, CPU_ON_64, target, 0x4008_0000, 0),
            code(PsciCode::OnPending)
        );
        assert!(p.vcpu_started(2));
        assert!(!p.vcpu_started(2), "only a pending vCPU can be started");
        assert_eq!(
            call(&mut p, 0, AFFINITY_INFO_32, target, 0, 0).x0,
            AffinityState::On as u64
        );
        assert_eq!(
            call(&mut p, 0, CPU_ON_64, target, 0x4008_0000, 0),
            code(PsciCode::AlreadyOn)
        );
        // Calling CPU_ON on oneself: already on.
        let own = p.mpidr(0).unwrap();
        assert_eq!(
            call(&mut p, 0, CPU_ON_64, own, 0x4008_0000, 0),
            code(PsciCode::AlreadyOn)
        );
    }

    #[test]
    fn cpu_on_32_truncates_arguments() {
        let mut p = psci(2);
        let out = call(
            &mut p,
            0,
            CPU_ON_32,
            1 | 0xffff_0000_0000_0000,
            0xaaaa_0000_4000_1000,
            0xbbbb_0000_0000_0007,
        );
        assert_eq!(
            out.action,
            PsciAction::StartVcpu {
                vcpu: 1,
                entry: 0x4000_1000,
                context_id: 7
            }
        );
    }

    #[test]
    fn cpu_on_errors() {
        let mut p = psci(2);
        // An MPIDR no vCPU has.
        assert_eq!(
            call(&mut p, 0, CPU_ON_64, 0x5, 0x4000_0000, 0),
            code(PsciCode::InvalidParameters)
        );
        // Bits outside the affinity fields (e.g. MPIDR bit 31 RES1, the U bit).
        assert_eq!(
            call(&mut p, 0, CPU_ON_64, 0x8000_0001, 0x4000_0000, 0),
            code(PsciCode::InvalidParameters)
        );
        // Entry points outside RAM, straddling its end, or misaligned.
        for entry in [
            0x0,
            0x3fff_fffc,
            0x4800_0000,
            0x47ff_fffe,
            0x4000_0002,
            u64::MAX - 3,
        ] {
            assert_eq!(
                call(&mut p, 0, CPU_ON_64, 1, entry, 0),
                code(PsciCode::InvalidAddress),
                "{entry:#x}"
            );
        }
        // A rejected CPU_ON leaves the target off.
        assert_eq!(p.state(1), Some(PowerState::Off));
        // INVALID_ADDRESS is -9 in x0.
        assert_eq!(PsciCode::InvalidAddress.as_register(), (-9i64) as u64);
    }

    #[test]
    fn cpu_off_takes_only_the_caller_offline_and_it_can_be_restarted() {
        let mut p = psci(3);
        call(&mut p, 0, CPU_ON_64, 1, 0x4000_0000, 0);
        call(&mut p, 0, CPU_ON_64, 2, 0x4000_0000, 0);
        p.vcpu_started(1);
        p.vcpu_started(2);
        let out = call(&mut p, 1, CPU_OFF, 0, 0, 0);
        assert_eq!(out.action, PsciAction::VcpuOff);
        assert_eq!(p.state(1), Some(PowerState::Off));
        assert_eq!(p.state(0), Some(PowerState::On));
        assert_eq!(p.state(2), Some(PowerState::On));
        assert_eq!(
            call(&mut p, 0, AFFINITY_INFO_64, 1, 0, 0).x0,
            AffinityState::Off as u64
        );
        let again = call(&mut p, 2, CPU_ON_64, 1, 0x4000_0100, 9);
        assert_eq!(
            again.action,
            PsciAction::StartVcpu {
                vcpu: 1,
                entry: 0x4000_0100,
                context_id: 9
            }
        );
    }

    #[test]
    fn affinity_info_errors() {
        let mut p = psci(2);
        assert_eq!(
            call(&mut p, 0, AFFINITY_INFO_64, 0x77, 0, 0),
            code(PsciCode::InvalidParameters)
        );
        assert_eq!(
            call(&mut p, 0, AFFINITY_INFO_64, 0, 1, 0),
            code(PsciCode::InvalidParameters)
        );
        assert_eq!(
            call(&mut p, 0, AFFINITY_INFO_64, 1 << 40, 0, 0),
            code(PsciCode::InvalidParameters)
        );
    }

    #[test]
    fn system_off_reset_and_suspend_actions() {
        let mut p = psci(2);
        assert_eq!(
            call(&mut p, 0, SYSTEM_OFF, 0, 0, 0).action,
            PsciAction::StopDomain
        );
        assert_eq!(
            call(&mut p, 1, SYSTEM_RESET, 0, 0, 0).action,
            PsciAction::RestartDomain
        );
        let suspend = call(&mut p, 0, CPU_SUSPEND_64, 0x0001_0000, 0x4000_0000, 0);
        assert_eq!(
            suspend,
            PsciOutcome {
                x0: 0,
                action: PsciAction::WaitForInterrupt
            }
        );
        assert_eq!(
            call(&mut p, 0, CPU_SUSPEND_32, 0, 0, 0).action,
            PsciAction::WaitForInterrupt
        );
        // Suspend does not change the power state.
        assert_eq!(p.state(0), Some(PowerState::On));
    }

    #[test]
    fn reset_returns_to_boot_state() {
        let mut p = psci(3);
        call(&mut p, 0, CPU_ON_64, 1, 0x4000_0000, 0);
        p.vcpu_started(1);
        call(&mut p, 0, CPU_OFF, 0, 0, 0);
        p.reset();
        assert_eq!(p.state(0), Some(PowerState::On));
        assert_eq!(p.state(1), Some(PowerState::Off));
        assert_eq!(p.state(2), Some(PowerState::Off));
    }

    #[test]
    fn bad_vcpu_index_from_the_glue_does_not_panic() {
        let mut p = psci(1);
        assert_eq!(
            call(&mut p, 7, PSCI_VERSION, 0, 0, 0),
            code(PsciCode::InternalFailure)
        );
        assert_eq!(p.state(7), None);
        assert!(!p.vcpu_started(7));
    }

    #[test]
    fn construction_checks_mpidrs() {
        assert_eq!(VPsci::new(&[]).unwrap_err(), VPsciError::NoVcpus);
        assert_eq!(
            VPsci::new(&[0, 1, 1]).unwrap_err(),
            VPsciError::DuplicateMpidr { vcpu: 2, mpidr: 1 }
        );
        assert_eq!(
            VPsci::new(&[0, 0x8000_0000]).unwrap_err(),
            VPsciError::MpidrNotAffinity {
                vcpu: 1,
                mpidr: 0x8000_0000
            }
        );
        assert_eq!(VPsci::linear_mpidrs(18)[17], 0x101);
        let p = VPsci::new(&[0x100, 0x0]).unwrap();
        assert_eq!(p.vcpu_by_mpidr(0x100), Some(0));
        assert_eq!(p.state(0), Some(PowerState::On));
        assert_eq!(p.state(1), Some(PowerState::Off));
    }

    #[test]
    fn routing_predicate() {
        assert!(is_psci_or_arch_call(CPU_ON_64 as u64));
        assert!(is_psci_or_arch_call(
            PSCI_VERSION as u64 | 0xffff_0000_0000_0000
        ));
        assert!(is_psci_or_arch_call(SMCCC_VERSION as u64));
        assert!(!is_psci_or_arch_call(0xC600_0000));
        assert!(!is_psci_or_arch_call(0x8400_0020));
    }
}
