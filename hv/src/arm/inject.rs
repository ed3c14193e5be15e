//! Exceptions the hypervisor delivers to a guest's EL1 as the hardware
//! would: a synchronous external abort for an access to guest-physical
//! space with nothing behind it (what real hardware and KVM give, see
//! KVM's `inject_abt64`), computed here and written to the guest's EL1
//! registers by the arch code.

use tock_registers::LocalRegisterCopy;

use crate::arm::trap::fields::{DATA_ABORT_ISS, ESR};

/// PSTATE.M of the modes a guest can be in (AArch64): EL0 (SP_EL0), EL1
/// with SP_EL0, EL1 with SP_EL1.
const MODE_EL0T: u64 = 0b0000;
const MODE_EL1T: u64 = 0b0100;
const MODE_MASK: u64 = 0b1111;

/// Vector table offsets (ARM ARM D1.10.2): synchronous exceptions from the
/// current EL with SP_EL0, from the current EL with SP_ELx, from a lower EL
/// in AArch64.
const VECTOR_CURRENT_SP0: u64 = 0x000;
const VECTOR_CURRENT_SPX: u64 = 0x200;
const VECTOR_LOWER_A64: u64 = 0x400;

/// FSC of a synchronous external abort not on a table walk (D17.2, the
/// DFSC/IFSC tables: 0b010000, outside the level-encoded kinds of `FSC`).
const FSC_EXTERNAL_ABORT: u64 = 0b01_0000;

/// PSTATE on entry to the guest's handler: EL1h with D, A, I and F masked
/// (what the hardware sets on taking an exception to EL1).
pub const HANDLER_PSTATE: u64 = 0x3c5;

/// Which access faulted (an ARM abort, an x86 nested page fault).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// An instruction fetch (on ARM, a prefetch abort).
    Fetch,
    /// A load.
    Read,
    /// A store.
    Write,
}

/// What the guest's EL1 sees when the abort is taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Abort {
    /// ESR_EL1.
    pub esr: u64,
    /// Offset of the handler from VBAR_EL1.
    pub vector_offset: u64,
}

/// The synchronous external abort a guest running in `spsr`'s mode takes
/// for `access`. ELR_EL1 is then the faulting PC, SPSR_EL1 the interrupted
/// PSTATE, FAR_EL1 the faulting virtual address, and the guest resumes at
/// VBAR_EL1 + `vector_offset` in [`HANDLER_PSTATE`].
pub fn external_abort(spsr: u64, access: Access) -> Abort {
    let mode = spsr & MODE_MASK;
    let from_el0 = mode == MODE_EL0T;
    let vector_offset = match mode {
        MODE_EL0T => VECTOR_LOWER_A64,
        MODE_EL1T => VECTOR_CURRENT_SP0,
        _ => VECTOR_CURRENT_SPX,
    };
    let ec = match (access, from_el0) {
        (Access::Fetch, true) => ESR::EC::InstructionAbortLowerEl,
        (Access::Fetch, false) => ESR::EC::InstructionAbortSameEl,
        (_, true) => ESR::EC::DataAbortLowerEl,
        (_, false) => ESR::EC::DataAbortSameEl,
    };
    // The ISS: the same fault status for both kinds, WnR for a store
    // (the Data Abort layout; an Instruction Abort has no WnR).
    let mut iss = LocalRegisterCopy::<u64, DATA_ABORT_ISS::Register>::new(0);
    iss.modify(DATA_ABORT_ISS::DFSC.val(FSC_EXTERNAL_ABORT));
    if access == Access::Write {
        iss.modify(DATA_ABORT_ISS::WNR::SET);
    }
    let mut esr = LocalRegisterCopy::<u64, ESR::Register>::new(0);
    esr.modify(ec + ESR::IL::SET + ESR::ISS.val(iss.get()));
    Abort {
        esr: esr.get(),
        vector_offset,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fetch_from_el1h_is_a_same_el_prefetch_abort_at_the_spx_vector() {
        let abort = external_abort(0x3c5, Access::Fetch);
        assert_eq!(abort.vector_offset, 0x200);
        // EC 0x21, IL, FSC 0x10: what kvm-unit-tests' selftest expects.
        assert_eq!(abort.esr, 0x8600_0010);
    }

    #[test]
    fn aborts_from_el0_go_to_the_lower_el_vector() {
        let abort = external_abort(0x0, Access::Write);
        assert_eq!(abort.vector_offset, 0x400);
        assert_eq!(abort.esr >> 26, 0x24);
        assert_ne!(abort.esr & (1 << 6), 0, "WnR for a store");
        let fetch = external_abort(0x0, Access::Fetch);
        assert_eq!(fetch.esr >> 26, 0x20);
    }

    #[test]
    fn el1t_uses_the_sp0_vector_and_loads_are_not_writes() {
        let abort = external_abort(0x4, Access::Read);
        assert_eq!(abort.vector_offset, 0x000);
        assert_eq!(abort.esr, 0x9600_0010);
    }
}
