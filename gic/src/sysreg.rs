//! GICv3 CPU-interface system registers (ICC_*_EL1/EL2, ICH_*_EL2), one
//! named function per register. This is the crate's one architecture switch:
//! on aarch64 each function is one `mrs`/`msr`; on any other target (host
//! unit tests) the same functions drive a small register model, so the
//! drivers' logic can be tested without hardware.
//!
//! Registers aarch64-cpu 11 provides (ICC_SRE_EL2, ICH_HCR/VTR/VMCR/MISR,
//! ICH_LR0-15) go through it; the others are written with their
//! `S3_<op1>_C<n>_C<m>_<op2>` encodings (op0, op1, CRn, CRm, op2 as IHI 0069
//! lists them for each register), so the assembler needs no GIC feature flag.
//!
//! # Safety (for every `unsafe fn` here)
//! The caller runs at EL2 on a CPU with a GICv3 CPU interface. Except for
//! [`enable_sre_el2`] and [`mpidr`], the system-register interface must be
//! enabled (ICC_SRE_EL2.SRE = 1): otherwise the access is UNDEFINED and
//! takes an exception. ICH_* registers additionally need the virtualization
//! extension (always present with EL2 and GICv3).

pub use imp::*;

/// Number of list registers the architecture allows (ICH_LR0-15_EL2).
pub const MAX_ICH_LIST_REGISTERS: usize = 16;

#[cfg(target_arch = "aarch64")]
mod imp {
    use aarch64_cpu::registers::{
        ICC_SRE_EL2, ICH_AP0R0_EL2, ICH_AP0R1_EL2, ICH_AP0R2_EL2, ICH_AP0R3_EL2, ICH_AP1R0_EL2,
        ICH_AP1R1_EL2, ICH_AP1R2_EL2, ICH_AP1R3_EL2, ICH_HCR_EL2, ICH_LR0_EL2, ICH_LR1_EL2,
        ICH_LR2_EL2, ICH_LR3_EL2, ICH_LR4_EL2, ICH_LR5_EL2, ICH_LR6_EL2, ICH_LR7_EL2, ICH_LR8_EL2,
        ICH_LR9_EL2, ICH_LR10_EL2, ICH_LR11_EL2, ICH_LR12_EL2, ICH_LR13_EL2, ICH_LR14_EL2,
        ICH_LR15_EL2, ICH_MISR_EL2, ICH_VMCR_EL2, ICH_VTR_EL2, MPIDR_EL1,
    };
    use aarch64_cpu::registers::{ReadWriteable, Readable, Writeable};
    use core::arch::asm;

    /// Reads a system register by its encoding.
    macro_rules! read_sysreg {
        ($encoding:literal) => {{
            let value: u64;
            // SAFETY: the caller of the enclosing unsafe fn guarantees the
            // register exists and is accessible (module-level Safety);
            // reading it has no memory effects.
            unsafe {
                asm!(concat!("mrs {}, ", $encoding), out(reg) value, options(nomem, nostack, preserves_flags))
            };
            value
        }};
    }

    /// Writes a system register by its encoding.
    macro_rules! write_sysreg {
        ($encoding:literal, $value:expr) => {{
            let value: u64 = $value;
            // SAFETY: the caller of the enclosing unsafe fn guarantees the
            // register exists and is accessible (module-level Safety). Not
            // `nomem`: GIC register writes must stay ordered with memory
            // accesses around them (e.g. an SGI after the data it announces).
            unsafe { asm!(concat!("msr ", $encoding, ", {}"), in(reg) value, options(nostack, preserves_flags)) };
        }};
    }

    /// MPIDR_EL1 of the calling CPU.
    pub fn mpidr() -> u64 {
        MPIDR_EL1.get()
    }

    /// Sets ICC_SRE_EL2.SRE (system-register interface at EL2) and Enable
    /// (lets EL1 use it too), then returns whether SRE reads back as 1 (it
    /// stays 0 when EL3 firmware did not set ICC_SRE_EL3.Enable).
    ///
    /// # Safety
    /// EL2 on a GICv3 CPU interface.
    pub unsafe fn enable_sre_el2() -> bool {
        ICC_SRE_EL2.modify(ICC_SRE_EL2::SRE::SET + ICC_SRE_EL2::ENABLE::SET);
        isb();
        ICC_SRE_EL2.is_set(ICC_SRE_EL2::SRE)
    }

    /// Writes ICC_PMR_EL1 (priority mask).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_icc_pmr_el1(value: u64) {
        write_sysreg!("S3_0_C4_C6_0", value);
    }

    /// Writes ICC_BPR1_EL1 (Group 1 binary point).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_icc_bpr1_el1(value: u64) {
        write_sysreg!("S3_0_C12_C12_3", value);
    }

    /// Reads ICC_CTLR_EL1.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_icc_ctlr_el1() -> u64 {
        read_sysreg!("S3_0_C12_C12_4")
    }

    /// Writes ICC_CTLR_EL1.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_icc_ctlr_el1(value: u64) {
        write_sysreg!("S3_0_C12_C12_4", value);
    }

    /// Writes ICC_IGRPEN1_EL1 (Group 1 interrupt enable).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_icc_igrpen1_el1(value: u64) {
        write_sysreg!("S3_0_C12_C12_7", value);
        isb();
    }

    /// Reads ICC_IAR1_EL1: acknowledges the highest-priority pending Group 1
    /// interrupt.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_icc_iar1_el1() -> u64 {
        // Not `nomem`: the acknowledge must not move before earlier
        // memory accesses of the handler's caller.
        let value: u64;
        // SAFETY: module-level Safety, guaranteed by the caller.
        unsafe {
            asm!("mrs {}, S3_0_C12_C12_0", out(reg) value, options(nostack, preserves_flags))
        };
        value
    }

    /// Reads ICC_HPPIR1_EL1: the highest-priority pending Group 1
    /// interrupt, without acknowledging it.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_icc_hppir1_el1() -> u64 {
        // Not `nomem`, as the acknowledge: the look must not move before
        // earlier memory accesses of the handler's caller.
        let value: u64;
        // SAFETY: module-level Safety, guaranteed by the caller.
        unsafe {
            asm!("mrs {}, S3_0_C12_C12_2", out(reg) value, options(nostack, preserves_flags))
        };
        value
    }

    /// Writes ICC_EOIR1_EL1 (priority drop, plus deactivation when
    /// ICC_CTLR_EL1.EOImode = 0).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_icc_eoir1_el1(value: u64) {
        write_sysreg!("S3_0_C12_C12_1", value);
    }

    /// Writes ICC_DIR_EL1 (deactivation when ICC_CTLR_EL1.EOImode = 1).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_icc_dir_el1(value: u64) {
        write_sysreg!("S3_0_C12_C11_1", value);
    }

    /// Writes ICC_SGI1R_EL1 (sends a Group 1 SGI).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_icc_sgi1r_el1(value: u64) {
        write_sysreg!("S3_0_C12_C11_5", value);
    }

    /// Makes earlier memory writes visible to other CPUs before an SGI
    /// announces them (as Linux' `gic_ipi_send_mask`: `dsb ishst`).
    pub fn barrier_before_sgi() {
        // SAFETY: a barrier has no preconditions.
        unsafe { asm!("dsb ishst", options(nostack, preserves_flags)) };
    }

    /// Synchronises the context after system-register writes (`isb`).
    pub fn isb() {
        // SAFETY: a barrier has no preconditions.
        unsafe { asm!("isb", options(nostack, preserves_flags)) };
    }

    /// Reads ICH_HCR_EL2.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_ich_hcr_el2() -> u64 {
        ICH_HCR_EL2.get()
    }

    /// Writes ICH_HCR_EL2.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_ich_hcr_el2(value: u64) {
        ICH_HCR_EL2.set(value);
    }

    /// Reads ICH_VTR_EL2.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_ich_vtr_el2() -> u64 {
        ICH_VTR_EL2.get()
    }

    /// Reads ICH_VMCR_EL2.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_ich_vmcr_el2() -> u64 {
        ICH_VMCR_EL2.get()
    }

    /// Writes ICH_VMCR_EL2.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn write_ich_vmcr_el2(value: u64) {
        ICH_VMCR_EL2.set(value);
    }

    /// Reads ICH_MISR_EL2.
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_ich_misr_el2() -> u64 {
        ICH_MISR_EL2.get()
    }

    /// Reads ICH_EISR_EL2 (bit n: list register n needs an EOI maintenance interrupt).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_ich_eisr_el2() -> u64 {
        read_sysreg!("S3_4_C12_C11_3")
    }

    /// Reads ICH_ELRSR_EL2 (bit n: list register n is empty).
    ///
    /// # Safety
    /// See the module documentation.
    pub unsafe fn read_ich_elrsr_el2() -> u64 {
        read_sysreg!("S3_4_C12_C11_5")
    }

    /// Reads `ICH_LR<index>_EL2`; `None` when `index` > 15.
    ///
    /// # Safety
    /// See the module documentation; `index` must also be below
    /// ICH_VTR_EL2.ListRegs + 1 (others are UNDEFINED).
    pub unsafe fn read_ich_lr_el2(index: usize) -> Option<u64> {
        Some(match index {
            0 => ICH_LR0_EL2.get(),
            1 => ICH_LR1_EL2.get(),
            2 => ICH_LR2_EL2.get(),
            3 => ICH_LR3_EL2.get(),
            4 => ICH_LR4_EL2.get(),
            5 => ICH_LR5_EL2.get(),
            6 => ICH_LR6_EL2.get(),
            7 => ICH_LR7_EL2.get(),
            8 => ICH_LR8_EL2.get(),
            9 => ICH_LR9_EL2.get(),
            10 => ICH_LR10_EL2.get(),
            11 => ICH_LR11_EL2.get(),
            12 => ICH_LR12_EL2.get(),
            13 => ICH_LR13_EL2.get(),
            14 => ICH_LR14_EL2.get(),
            15 => ICH_LR15_EL2.get(),
            _ => return None,
        })
    }

    /// Writes `ICH_LR<index>_EL2`; returns false (and writes nothing) when
    /// `index` > 15.
    ///
    /// # Safety
    /// As [`read_ich_lr_el2`].
    pub unsafe fn write_ich_lr_el2(index: usize, value: u64) -> bool {
        match index {
            0 => ICH_LR0_EL2.set(value),
            1 => ICH_LR1_EL2.set(value),
            2 => ICH_LR2_EL2.set(value),
            3 => ICH_LR3_EL2.set(value),
            4 => ICH_LR4_EL2.set(value),
            5 => ICH_LR5_EL2.set(value),
            6 => ICH_LR6_EL2.set(value),
            7 => ICH_LR7_EL2.set(value),
            8 => ICH_LR8_EL2.set(value),
            9 => ICH_LR9_EL2.set(value),
            10 => ICH_LR10_EL2.set(value),
            11 => ICH_LR11_EL2.set(value),
            12 => ICH_LR12_EL2.set(value),
            13 => ICH_LR13_EL2.set(value),
            14 => ICH_LR14_EL2.set(value),
            15 => ICH_LR15_EL2.set(value),
            _ => return false,
        }
        true
    }

    /// Reads `ICH_AP<group>R<index>_EL2` (active priorities of virtual
    /// Group 0 or 1); `None` when `group` > 1 or `index` > 3.
    ///
    /// # Safety
    /// See the module documentation; `index` must also be implemented
    /// (ICH_VTR_EL2.PREbits, see [`crate::virt::v3::IchV3::num_active_priority_registers`]).
    pub unsafe fn read_ich_apr_el2(group: usize, index: usize) -> Option<u64> {
        Some(match (group, index) {
            (0, 0) => ICH_AP0R0_EL2.get(),
            (0, 1) => ICH_AP0R1_EL2.get(),
            (0, 2) => ICH_AP0R2_EL2.get(),
            (0, 3) => ICH_AP0R3_EL2.get(),
            (1, 0) => ICH_AP1R0_EL2.get(),
            (1, 1) => ICH_AP1R1_EL2.get(),
            (1, 2) => ICH_AP1R2_EL2.get(),
            (1, 3) => ICH_AP1R3_EL2.get(),
            _ => return None,
        })
    }

    /// Writes `ICH_AP<group>R<index>_EL2`; returns false (and writes nothing)
    /// when `group` > 1 or `index` > 3.
    ///
    /// # Safety
    /// As [`read_ich_apr_el2`].
    pub unsafe fn write_ich_apr_el2(group: usize, index: usize, value: u64) -> bool {
        match (group, index) {
            (0, 0) => ICH_AP0R0_EL2.set(value),
            (0, 1) => ICH_AP0R1_EL2.set(value),
            (0, 2) => ICH_AP0R2_EL2.set(value),
            (0, 3) => ICH_AP0R3_EL2.set(value),
            (1, 0) => ICH_AP1R0_EL2.set(value),
            (1, 1) => ICH_AP1R1_EL2.set(value),
            (1, 2) => ICH_AP1R2_EL2.set(value),
            (1, 3) => ICH_AP1R3_EL2.set(value),
            _ => return false,
        }
        true
    }
}

/// Host model of one CPU's GICv3 system registers, for unit tests of the
/// drivers. Same function names and signatures as the aarch64 version; the
/// state is global, so tests that use it hold [`model::lock`].
#[cfg(not(target_arch = "aarch64"))]
mod imp {
    pub use model::*;

    #[allow(clippy::missing_safety_doc)]
    mod model {
        use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};

        use super::super::MAX_ICH_LIST_REGISTERS;

        /// Modelled MPIDR_EL1.
        pub static MPIDR: AtomicU64 = AtomicU64::new(0x8000_0000);
        /// Whether the modelled EL3 lets ICC_SRE_EL2.SRE be set.
        pub static SRE_ALLOWED: AtomicBool = AtomicBool::new(true);
        /// Modelled ICC_SRE_EL2.
        pub static ICC_SRE_EL2: AtomicU64 = AtomicU64::new(0);
        /// Modelled ICC_PMR_EL1.
        pub static ICC_PMR_EL1: AtomicU64 = AtomicU64::new(0);
        /// Modelled ICC_BPR1_EL1.
        pub static ICC_BPR1_EL1: AtomicU64 = AtomicU64::new(0);
        /// Modelled ICC_CTLR_EL1.
        pub static ICC_CTLR_EL1: AtomicU64 = AtomicU64::new(0);
        /// Modelled ICC_IGRPEN1_EL1.
        pub static ICC_IGRPEN1_EL1: AtomicU64 = AtomicU64::new(0);
        /// Value the next ICC_IAR1_EL1 read returns (then resets to 1023).
        pub static ICC_IAR1_EL1: AtomicU64 = AtomicU64::new(1023);
        /// Last ICC_EOIR1_EL1 write.
        pub static ICC_EOIR1_EL1: AtomicU64 = AtomicU64::new(u64::MAX);
        /// Last ICC_DIR_EL1 write.
        pub static ICC_DIR_EL1: AtomicU64 = AtomicU64::new(u64::MAX);
        /// Every ICC_SGI1R_EL1 write since the last [`reset`], in order.
        pub static SGI1R_LOG: [AtomicU64; 64] = [const { AtomicU64::new(0) }; 64];
        /// Number of valid entries in [`SGI1R_LOG`].
        pub static SGI1R_COUNT: AtomicUsize = AtomicUsize::new(0);
        /// Modelled ICH_HCR_EL2.
        pub static ICH_HCR_EL2: AtomicU64 = AtomicU64::new(0);
        /// Modelled ICH_VTR_EL2 (reset: 4 list registers, as QEMU's).
        pub static ICH_VTR_EL2: AtomicU64 = AtomicU64::new(0x9000_0003);
        /// Modelled ICH_VMCR_EL2.
        pub static ICH_VMCR_EL2: AtomicU64 = AtomicU64::new(0);
        /// Modelled ICH_MISR_EL2.
        pub static ICH_MISR_EL2: AtomicU64 = AtomicU64::new(0);
        /// Modelled ICH_EISR_EL2.
        pub static ICH_EISR_EL2: AtomicU64 = AtomicU64::new(0);
        /// Modelled `ICH_LR<n>_EL2`.
        pub static ICH_LR_EL2: [AtomicU64; MAX_ICH_LIST_REGISTERS] =
            [const { AtomicU64::new(0) }; MAX_ICH_LIST_REGISTERS];

        /// Modelled ICH_AP0R0-3_EL2 and ICH_AP1R0-3_EL2.
        pub static ICH_APR_EL2: [[AtomicU64; 4]; 2] =
            [const { [const { AtomicU64::new(0) }; 4] }; 2];

        /// Serialises tests that use the model.
        #[cfg(test)]
        pub fn lock() -> std::sync::MutexGuard<'static, ()> {
            static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
            let guard = LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
            reset();
            guard
        }

        /// Puts every modelled register back to its reset value.
        pub fn reset() {
            MPIDR.store(0x8000_0000, SeqCst);
            SRE_ALLOWED.store(true, SeqCst);
            for reg in [
                &ICC_SRE_EL2,
                &ICC_PMR_EL1,
                &ICC_BPR1_EL1,
                &ICC_CTLR_EL1,
                &ICC_IGRPEN1_EL1,
                &ICH_HCR_EL2,
                &ICH_VMCR_EL2,
                &ICH_MISR_EL2,
                &ICH_EISR_EL2,
            ] {
                reg.store(0, SeqCst);
            }
            ICC_IAR1_EL1.store(1023, SeqCst);
            ICC_EOIR1_EL1.store(u64::MAX, SeqCst);
            ICC_DIR_EL1.store(u64::MAX, SeqCst);
            ICH_VTR_EL2.store(0x9000_0003, SeqCst);
            SGI1R_COUNT.store(0, SeqCst);
            ICH_LR_EL2.iter().for_each(|lr| lr.store(0, SeqCst));
            ICH_APR_EL2
                .iter()
                .flatten()
                .for_each(|apr| apr.store(0, SeqCst));
        }

        /// Forgets the ICC_SGI1R_EL1 writes seen so far.
        pub fn reset_sgi_log() {
            SGI1R_COUNT.store(0, SeqCst);
        }

        /// The ICC_SGI1R_EL1 writes since the last reset.
        #[cfg(test)]
        pub fn sgi1r_writes() -> std::vec::Vec<u64> {
            let count = SGI1R_COUNT.load(SeqCst).min(SGI1R_LOG.len());
            SGI1R_LOG[..count].iter().map(|v| v.load(SeqCst)).collect()
        }

        /// MPIDR_EL1 of the calling CPU.
        pub fn mpidr() -> u64 {
            MPIDR.load(SeqCst)
        }

        /// Model of ICC_SRE_EL2.{SRE, Enable} being set.
        pub unsafe fn enable_sre_el2() -> bool {
            if SRE_ALLOWED.load(SeqCst) {
                ICC_SRE_EL2.fetch_or(0b1001, SeqCst);
            }
            ICC_SRE_EL2.load(SeqCst) & 1 == 1
        }

        /// Model of writing ICC_PMR_EL1.
        pub unsafe fn write_icc_pmr_el1(value: u64) {
            ICC_PMR_EL1.store(value, SeqCst);
        }

        /// Model of writing ICC_BPR1_EL1.
        pub unsafe fn write_icc_bpr1_el1(value: u64) {
            ICC_BPR1_EL1.store(value, SeqCst);
        }

        /// Model of reading ICC_CTLR_EL1.
        pub unsafe fn read_icc_ctlr_el1() -> u64 {
            ICC_CTLR_EL1.load(SeqCst)
        }

        /// Model of writing ICC_CTLR_EL1.
        pub unsafe fn write_icc_ctlr_el1(value: u64) {
            ICC_CTLR_EL1.store(value, SeqCst);
        }

        /// Model of writing ICC_IGRPEN1_EL1.
        pub unsafe fn write_icc_igrpen1_el1(value: u64) {
            ICC_IGRPEN1_EL1.store(value, SeqCst);
        }

        /// Model of reading ICC_IAR1_EL1: returns the queued INTID once.
        pub unsafe fn read_icc_iar1_el1() -> u64 {
            ICC_IAR1_EL1.swap(1023, SeqCst)
        }

        /// Model of reading ICC_HPPIR1_EL1: the queued INTID, left queued.
        pub unsafe fn read_icc_hppir1_el1() -> u64 {
            ICC_IAR1_EL1.load(SeqCst)
        }

        /// Model of writing ICC_EOIR1_EL1.
        pub unsafe fn write_icc_eoir1_el1(value: u64) {
            ICC_EOIR1_EL1.store(value, SeqCst);
        }

        /// Model of writing ICC_DIR_EL1.
        pub unsafe fn write_icc_dir_el1(value: u64) {
            ICC_DIR_EL1.store(value, SeqCst);
        }

        /// Model of writing ICC_SGI1R_EL1: appends to [`SGI1R_LOG`].
        pub unsafe fn write_icc_sgi1r_el1(value: u64) {
            let slot = SGI1R_COUNT.fetch_add(1, SeqCst);
            if let Some(entry) = SGI1R_LOG.get(slot) {
                entry.store(value, SeqCst);
            }
        }

        /// No barrier is needed in the model.
        pub fn barrier_before_sgi() {}

        /// No barrier is needed in the model.
        pub fn isb() {}

        /// Model of reading ICH_HCR_EL2.
        pub unsafe fn read_ich_hcr_el2() -> u64 {
            ICH_HCR_EL2.load(SeqCst)
        }

        /// Model of writing ICH_HCR_EL2.
        pub unsafe fn write_ich_hcr_el2(value: u64) {
            ICH_HCR_EL2.store(value, SeqCst);
        }

        /// Model of reading ICH_VTR_EL2.
        pub unsafe fn read_ich_vtr_el2() -> u64 {
            ICH_VTR_EL2.load(SeqCst)
        }

        /// Model of reading ICH_VMCR_EL2.
        pub unsafe fn read_ich_vmcr_el2() -> u64 {
            ICH_VMCR_EL2.load(SeqCst)
        }

        /// Model of writing ICH_VMCR_EL2.
        pub unsafe fn write_ich_vmcr_el2(value: u64) {
            ICH_VMCR_EL2.store(value, SeqCst);
        }

        /// Model of reading ICH_MISR_EL2.
        pub unsafe fn read_ich_misr_el2() -> u64 {
            ICH_MISR_EL2.load(SeqCst)
        }

        /// Model of reading ICH_EISR_EL2.
        pub unsafe fn read_ich_eisr_el2() -> u64 {
            ICH_EISR_EL2.load(SeqCst)
        }

        /// Model of reading ICH_ELRSR_EL2: derived from the modelled list
        /// registers, as the hardware does (State = 0 and, for HW = 0, EOI = 0).
        pub unsafe fn read_ich_elrsr_el2() -> u64 {
            let mut elrsr = 0;
            for (index, lr) in ICH_LR_EL2.iter().enumerate() {
                let value = lr.load(SeqCst);
                let hw = value >> 61 & 1 == 1;
                let empty = value >> 62 == 0 && (hw || value >> 41 & 1 == 0);
                if empty {
                    elrsr |= 1 << index;
                }
            }
            elrsr
        }

        /// Model of reading `ICH_AP<group>R<index>_EL2`.
        pub unsafe fn read_ich_apr_el2(group: usize, index: usize) -> Option<u64> {
            ICH_APR_EL2
                .get(group)?
                .get(index)
                .map(|apr| apr.load(SeqCst))
        }

        /// Model of writing `ICH_AP<group>R<index>_EL2`.
        pub unsafe fn write_ich_apr_el2(group: usize, index: usize, value: u64) -> bool {
            match ICH_APR_EL2.get(group).and_then(|regs| regs.get(index)) {
                Some(apr) => {
                    apr.store(value, SeqCst);
                    true
                }
                None => false,
            }
        }

        /// Model of reading `ICH_LR<index>_EL2`.
        pub unsafe fn read_ich_lr_el2(index: usize) -> Option<u64> {
            ICH_LR_EL2.get(index).map(|lr| lr.load(SeqCst))
        }

        /// Model of writing `ICH_LR<index>_EL2`.
        pub unsafe fn write_ich_lr_el2(index: usize, value: u64) -> bool {
            match ICH_LR_EL2.get(index) {
                Some(lr) => {
                    lr.store(value, SeqCst);
                    true
                }
                None => false,
            }
        }
    }
}
