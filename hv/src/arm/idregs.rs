//! What guests see of the CPU's feature ID registers.
//!
//! With HCR_EL2.TID3 every EL1 read of the ID group 3 registers
//! (`S3_0_C0_C1..C7_*`: ID_AA64PFR0_EL1, ID_AA64DFR0_EL1, ...) traps; the
//! hypervisor reads the real value and hands the guest [`sanitise`]d: the
//! features it does not virtualise (it does not context-switch their state, or
//! traps their registers as read-as-zero) are reported absent, so a guest such
//! as Linux does not try to use them. Same idea as KVM's `read_sanitised_id_reg`
//! and Xen's `guest_cpuinfo`.

use tock_registers::register_bitfields;
use tock_registers::{LocalRegisterCopy, fields::FieldValue};

register_bitfields! {u64,
    /// ID_AA64PFR0_EL1 fields hidden from guests.
    ID_AA64PFR0 [
        /// Scalable Vector Extension (its Z/P/FFR registers are not switched).
        SVE OFFSET(32) NUMBITS(4) [],
        /// Memory Partitioning and Monitoring.
        MPAM OFFSET(40) NUMBITS(4) [],
        /// Activity Monitors.
        AMU OFFSET(44) NUMBITS(4) [],
    ],
    /// ID_AA64PFR1_EL1 fields hidden from guests.
    ID_AA64PFR1 [
        /// Memory Tagging (tags and its registers are not switched).
        MTE OFFSET(8) NUMBITS(4) [],
        /// MPAM fraction.
        MPAM_FRAC OFFSET(16) NUMBITS(4) [],
        /// Scalable Matrix Extension.
        SME OFFSET(24) NUMBITS(4) [],
    ],
    /// ID_AA64ISAR1_EL1 fields hidden from guests: pointer authentication,
    /// whose keys (APIAKEY_EL1 ...) the hypervisor does not switch between
    /// vCPUs (HCR_EL2.API/APK stay clear, so a guest that used it anyway
    /// would trap), as KVM hides it unless the VMM asks for it.
    ID_AA64ISAR1 [
        /// Address authentication, QARMA5.
        APA OFFSET(4) NUMBITS(4) [],
        /// Address authentication, IMPLEMENTATION DEFINED algorithm.
        API OFFSET(8) NUMBITS(4) [],
        /// Generic authentication, QARMA5.
        GPA OFFSET(24) NUMBITS(4) [],
        /// Generic authentication, IMPLEMENTATION DEFINED algorithm.
        GPI OFFSET(28) NUMBITS(4) [],
    ],
    /// ID_AA64ISAR2_EL1 fields hidden from guests: pointer authentication
    /// with QARMA3.
    ID_AA64ISAR2 [
        /// Generic authentication, QARMA3.
        GPA3 OFFSET(8) NUMBITS(4) [],
        /// Address authentication, QARMA3.
        APA3 OFFSET(12) NUMBITS(4) [],
    ],
    /// ID_AA64DFR0_EL1 fields hidden from guests (MDCR_EL2 traps the PMU and
    /// trace as read-as-zero). Debug version and breakpoint counts stay.
    ID_AA64DFR0 [
        /// Trace unit (system register interface).
        TRACEVER OFFSET(4) NUMBITS(4) [],
        /// Performance Monitors.
        PMUVER OFFSET(8) NUMBITS(4) [],
        /// Statistical Profiling.
        PMSVER OFFSET(32) NUMBITS(4) [],
        /// Trace filter controls.
        TRACEFILT OFFSET(40) NUMBITS(4) [],
        /// Trace buffer.
        TRACEBUFFER OFFSET(44) NUMBITS(4) [],
        /// Multi-threaded PMU.
        MTPMU OFFSET(48) NUMBITS(4) [],
        /// Branch Record Buffer.
        BRBE OFFSET(52) NUMBITS(4) [],
    ],
}

/// An ID group 3 register, by its CRm and Op2 (Op0 = 3, Op1 = 0, CRn = 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IdRegister {
    /// CRm, 1 to 7.
    pub crm: u8,
    /// Op2, 0 to 7.
    pub op2: u8,
}

impl IdRegister {
    /// ID_AA64PFR0_EL1.
    pub const AA64PFR0: Self = Self { crm: 4, op2: 0 };
    /// ID_AA64PFR1_EL1.
    pub const AA64PFR1: Self = Self { crm: 4, op2: 1 };
    /// ID_AA64ZFR0_EL1 (SVE features).
    pub const AA64ZFR0: Self = Self { crm: 4, op2: 4 };
    /// ID_AA64SMFR0_EL1 (SME features).
    pub const AA64SMFR0: Self = Self { crm: 4, op2: 5 };
    /// ID_AA64DFR0_EL1.
    pub const AA64DFR0: Self = Self { crm: 5, op2: 0 };
    /// ID_AA64ISAR1_EL1.
    pub const AA64ISAR1: Self = Self { crm: 6, op2: 1 };
    /// ID_AA64ISAR2_EL1.
    pub const AA64ISAR2: Self = Self { crm: 6, op2: 2 };

    /// The ID register a trapped access names, if it is one: Op0 = 3,
    /// Op1 = 0, CRn = 0, CRm = 1..=7 (CRm = 0 holds MIDR/MPIDR/REVIDR, which
    /// TID3 does not trap).
    pub const fn from_encoding(op0: u8, op1: u8, crn: u8, crm: u8, op2: u8) -> Option<Self> {
        if op0 == 3 && op1 == 0 && crn == 0 && crm >= 1 && crm <= 7 && op2 <= 7 {
            Some(Self { crm, op2 })
        } else {
            None
        }
    }
}

/// The value a guest reads for `register` when the CPU holds `real`.
pub fn sanitise(register: IdRegister, real: u64) -> u64 {
    fn clear<R: tock_registers::RegisterLongName>(real: u64, fields: FieldValue<u64, R>) -> u64 {
        let mut copy = LocalRegisterCopy::<u64, R>::new(real);
        copy.modify(fields);
        copy.get()
    }
    match register {
        IdRegister::AA64PFR0 => clear(
            real,
            ID_AA64PFR0::SVE.val(0) + ID_AA64PFR0::MPAM.val(0) + ID_AA64PFR0::AMU.val(0),
        ),
        IdRegister::AA64PFR1 => clear(
            real,
            ID_AA64PFR1::MTE.val(0) + ID_AA64PFR1::MPAM_FRAC.val(0) + ID_AA64PFR1::SME.val(0),
        ),
        IdRegister::AA64ZFR0 | IdRegister::AA64SMFR0 => 0,
        IdRegister::AA64ISAR1 => clear(
            real,
            ID_AA64ISAR1::APA.val(0)
                + ID_AA64ISAR1::API.val(0)
                + ID_AA64ISAR1::GPA.val(0)
                + ID_AA64ISAR1::GPI.val(0),
        ),
        IdRegister::AA64ISAR2 => clear(real, ID_AA64ISAR2::GPA3.val(0) + ID_AA64ISAR2::APA3.val(0)),
        IdRegister::AA64DFR0 => clear(
            real,
            ID_AA64DFR0::TRACEVER.val(0)
                + ID_AA64DFR0::PMUVER.val(0)
                + ID_AA64DFR0::PMSVER.val(0)
                + ID_AA64DFR0::TRACEFILT.val(0)
                + ID_AA64DFR0::TRACEBUFFER.val(0)
                + ID_AA64DFR0::MTPMU.val(0)
                + ID_AA64DFR0::BRBE.val(0),
        ),
        _ => real,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_features_read_as_absent() {
        // SVE, MPAM, AMU set, plus GIC (bits 27:24) and EL0..EL3 that must stay.
        let pfr0 = (1 << 32) | (1 << 40) | (1 << 44) | (1 << 24) | 0x2222;
        assert_eq!(sanitise(IdRegister::AA64PFR0, pfr0), (1 << 24) | 0x2222);
        // MTE, SME cleared; BT (bits 3:0) and SSBS (7:4) kept.
        let pfr1 = (2 << 8) | (1 << 24) | 0x21;
        assert_eq!(sanitise(IdRegister::AA64PFR1, pfr1), 0x21);
        assert_eq!(sanitise(IdRegister::AA64ZFR0, u64::MAX), 0);
        assert_eq!(sanitise(IdRegister::AA64SMFR0, u64::MAX), 0);
        // Cortex-A72's ID_AA64DFR0_EL1: PMUv3, 6 breakpoints, 4 watchpoints,
        // debug v8: only PMUVer goes.
        let dfr0 = 0x1030_5106;
        assert_eq!(sanitise(IdRegister::AA64DFR0, dfr0), 0x1030_5006);
        // Pointer authentication (a v8.3+ host): APA/API/GPA/GPI and the
        // QARMA3 fields go; DPB (3:0), JSCVT (15:12), LRCPC (23:20) and
        // WFxT (3:0 of ISAR2) stay.
        let isar1 = 0xf1f0_f1ff;
        assert_eq!(sanitise(IdRegister::AA64ISAR1, isar1), 0x00f0_f00f);
        let isar2 = 0xff01;
        assert_eq!(sanitise(IdRegister::AA64ISAR2, isar2), 0x0001);
        // Everything else passes through (ISAR0, MMFR0).
        let isar0 = IdRegister { crm: 6, op2: 0 };
        assert_eq!(sanitise(isar0, 0x1234_5678), 0x1234_5678);
    }

    #[test]
    fn only_group_3_encodings_are_id_registers() {
        assert_eq!(
            IdRegister::from_encoding(3, 0, 0, 4, 0),
            Some(IdRegister::AA64PFR0)
        );
        assert_eq!(IdRegister::from_encoding(3, 0, 0, 0, 5), None); // MPIDR_EL1
        assert_eq!(IdRegister::from_encoding(3, 0, 1, 4, 0), None);
        assert_eq!(IdRegister::from_encoding(3, 3, 0, 4, 0), None);
        assert_eq!(IdRegister::from_encoding(3, 0, 0, 8, 0), None);
    }
}
