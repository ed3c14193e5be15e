//! The EL1 system registers a vCPU owns, saved and restored on every switch.
//! The hypervisor itself never uses EL1 registers, so they hold the running
//! vCPU's values between exits.

use core::arch::asm;

/// Generates the register list, the save and the restore from one table, so
/// the three cannot drift apart.
macro_rules! el1_registers {
    ($($field:ident => $name:literal),* $(,)?) => {
        /// A vCPU's EL1 (and EL0 thread) system registers.
        #[derive(Clone, Copy, Debug, Default)]
        #[allow(missing_docs)] // one field per architectural register, named after it
        pub struct El1Registers {
            $(pub $field: u64,)*
        }

        impl El1Registers {
            /// Reads this CPU's registers.
            pub fn save(&mut self) {
                $(
                    // SAFETY: reading an EL1 system register from EL2 has no side effects.
                    unsafe { asm!(concat!("mrs {}, ", $name), out(reg) self.$field) };
                )*
            }

            /// Writes this CPU's registers.
            ///
            /// # Safety
            /// Only while no guest runs on this CPU (from the exception handler that
            /// is about to enter this vCPU): the values are the vCPU's own.
            pub unsafe fn restore(&self) {
                $(
                    // SAFETY: the caller guarantees these are the next vCPU's values and
                    // EL2 does not depend on EL1 state.
                    unsafe { asm!(concat!("msr ", $name, ", {}"), in(reg) self.$field) };
                )*
                // SAFETY: barrier only.
                unsafe { asm!("isb") };
            }
        }
    };
}

el1_registers! {
    sctlr => "sctlr_el1",
    ttbr0 => "ttbr0_el1",
    ttbr1 => "ttbr1_el1",
    tcr => "tcr_el1",
    mair => "mair_el1",
    amair => "amair_el1",
    vbar => "vbar_el1",
    contextidr => "contextidr_el1",
    tpidr_el1 => "tpidr_el1",
    tpidr_el0 => "tpidr_el0",
    tpidrro_el0 => "tpidrro_el0",
    esr => "esr_el1",
    far => "far_el1",
    afsr0 => "afsr0_el1",
    afsr1 => "afsr1_el1",
    par => "par_el1",
    cpacr => "cpacr_el1",
    elr => "elr_el1",
    spsr => "spsr_el1",
    sp_el1 => "sp_el1",
    sp_el0 => "sp_el0",
    cntkctl => "cntkctl_el1",
    csselr => "csselr_el1",
    // Compare values before controls: a restored control never meets the
    // previous vCPU's compare value, even for an instant.
    cntv_cval => "cntv_cval_el0",
    cntv_ctl => "cntv_ctl_el0",
    cntp_cval => "cntp_cval_el0",
    cntp_ctl => "cntp_ctl_el0",
}

impl El1Registers {
    /// The reset state a vCPU starts in: MMU and caches off (SCTLR_EL1 RES1 bits
    /// only), everything else zero.
    pub fn reset() -> Self {
        Self {
            sctlr: 0x30d0_0800,
            ..Self::default()
        }
    }
}
