//! The GIC virtualization interface the vGIC builds on: GICv2's GICH
//! register block and GICv3's ICH_*_EL2 system registers, behind one
//! [`VirtualCpuInterface`] trait that speaks [`ListRegister`]s.

use crate::{GicError, GicVersion, ListRegister};

/// Operations on the calling CPU's virtual CPU interface that the vGIC
/// needs on every vCPU switch and maintenance interrupt.
pub trait VirtualCpuInterface {
    /// Number of implemented list registers.
    fn num_list_registers(&self) -> usize;
    /// The architecture version whose list-register layout the raw
    /// accessors use (GICv2's 32-bit GICH_LR, GICv3's ICH_LR<n>_EL2).
    fn list_register_encoding(&self) -> GicVersion;
    /// Reads list register `index` as the hardware holds it (GICv2's
    /// 32-bit value zero-extended).
    fn read_list_register_raw(&self, index: usize) -> Result<u64, GicError>;
    /// Writes list register `index` as the hardware holds it: a value
    /// made by [`ListRegister::encode`] for [`Self::list_register_encoding`].
    /// Callers that keep what the hardware holds compare these values, not
    /// decoded [`ListRegister`]s, on every guest entry.
    fn write_list_register_raw(&self, index: usize, value: u64) -> Result<(), GicError>;
    /// Reads list register `index`.
    fn read_list_register(&self, index: usize) -> Result<ListRegister, GicError> {
        let value = self.read_list_register_raw(index)?;
        Ok(ListRegister::decode(self.list_register_encoding(), value))
    }
    /// Writes list register `index`.
    fn write_list_register(&self, index: usize, lr: &ListRegister) -> Result<(), GicError> {
        self.write_list_register_raw(index, lr.encode(self.list_register_encoding())?)
    }
    /// Bit n set: list register n is empty (ELRSR).
    fn empty_list_registers(&self) -> u64;
    /// Bit n set: list register n asks for an EOI maintenance interrupt (EISR).
    fn eoi_list_registers(&self) -> u64;
    /// Maintenance interrupt status (MISR; the low eight bits have the same
    /// meaning in both versions, see [`crate::registers::GICH_MISR`]).
    fn maintenance_status(&self) -> u32;
    /// Turns the virtual CPU interface on or off (HCR.En).
    fn set_enabled(&self, enabled: bool);
}

fn check_index(index: usize, available: usize) -> Result<(), GicError> {
    if index < available {
        Ok(())
    } else {
        Err(GicError::ListRegisterIndexOutOfRange { index, available })
    }
}

/// GICv2 virtual interface control (GICH, IHI 0048 §5.3).
pub mod v2 {
    use core::sync::atomic::{AtomicU32, Ordering};

    use tock_registers::LocalRegisterCopy;
    use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

    use super::{VirtualCpuInterface, check_index};
    use crate::registers::{GICH_HCR, GICH_VMCR, GICH_VTR, GichRegisters};
    use crate::{GicError, GicVersion};

    /// Handle on the GICH frame. GICH is banked per CPU at one address, so
    /// the handle always reaches the *calling* CPU's virtual interface
    /// control registers; obtained from [`crate::GicV2::virtual_interface`].
    #[derive(Clone, Copy, Debug)]
    pub struct GichV2 {
        base: usize,
    }

    /// GICv2 has a single active-priorities register, GICH_APR (IHI 0048B
    /// §5.3.8: the virtual CPU interface's GICV_APR0, for both groups).
    const NUM_ACTIVE_PRIORITY_REGISTERS: usize = 1;

    /// Plain memory laid out like a GICH frame (0x200 bytes of 32-bit
    /// registers), for running [`GichV2`] against something other than the
    /// hardware: host tests of code that saves and restores a virtual CPU
    /// interface without `unsafe` of its own (see [`GichV2::over_memory`]).
    /// Nothing here models the hardware's behaviour (read-only registers
    /// are plain memory too); tests preset what the hardware would show.
    #[derive(Debug)]
    pub struct GichMemory {
        words: [AtomicU32; GICH_FRAME_WORDS],
    }

    /// 32-bit words in the part of the GICH frame the driver uses (up to LR63).
    const GICH_FRAME_WORDS: usize = size_of::<GichRegisters>() / 4;

    impl GichMemory {
        /// A zeroed frame (VTR reads as one list register, 1 priority bit).
        pub const fn new() -> GichMemory {
            GichMemory {
                words: [const { AtomicU32::new(0) }; GICH_FRAME_WORDS],
            }
        }

        /// The 32-bit register at byte `offset`; `None` if `offset` is
        /// unaligned or past the frame.
        pub fn read32(&self, offset: usize) -> Option<u32> {
            self.word(offset).map(|word| word.load(Ordering::Relaxed))
        }

        /// Writes the 32-bit register at byte `offset`; `false` if `offset`
        /// is unaligned or past the frame.
        pub fn write32(&self, offset: usize, value: u32) -> bool {
            self.word(offset)
                .map(|word| word.store(value, Ordering::Relaxed))
                .is_some()
        }

        fn word(&self, offset: usize) -> Option<&AtomicU32> {
            if offset.is_multiple_of(4) {
                self.words.get(offset / 4)
            } else {
                None
            }
        }
    }

    impl Default for GichMemory {
        fn default() -> GichMemory {
            GichMemory::new()
        }
    }

    impl GichV2 {
        /// A handle on the GICH frame at `base`.
        ///
        /// # Safety
        /// `base` is the mapped GICH frame of this system's GICv2 (device
        /// memory, physical = virtual) for as long as the handle is used, or
        /// memory laid out like one that outlives the handle.
        pub const unsafe fn new(base: usize) -> GichV2 {
            GichV2 { base }
        }

        /// A handle on a [`GichMemory`] instead of the hardware.
        pub fn over_memory(memory: &'static GichMemory) -> GichV2 {
            // SAFETY: `memory` lives forever, is exactly a GICH frame's
            // register block in size, 4-byte aligned, and its atomics make
            // the driver's volatile accesses through a shared reference
            // legal (interior mutability).
            unsafe { GichV2::new(memory.words.as_ptr() as usize) }
        }

        /// The register block.
        pub fn registers(&self) -> &GichRegisters {
            // SAFETY: `new`'s contract: `base` is the mapped GICH frame.
            unsafe { &*(self.base as *const GichRegisters) }
        }

        /// GICH_HCR: enable and maintenance-interrupt requests.
        pub fn hcr(&self) -> LocalRegisterCopy<u32, GICH_HCR::Register> {
            LocalRegisterCopy::new(self.registers().hcr.get())
        }

        /// Writes GICH_HCR.
        pub fn set_hcr(&self, value: u32) {
            self.registers().hcr.set(value);
        }

        /// GICH_VTR: list registers, preemption and priority bits.
        pub fn vtr(&self) -> LocalRegisterCopy<u32, GICH_VTR::Register> {
            LocalRegisterCopy::new(self.registers().vtr.get())
        }

        /// GICH_VMCR: the guest's GICV_CTLR, GICV_PMR, GICV_BPR and
        /// GICV_ABPR state, saved and restored on a vCPU switch.
        pub fn vmcr(&self) -> LocalRegisterCopy<u32, GICH_VMCR::Register> {
            LocalRegisterCopy::new(self.registers().vmcr.get())
        }

        /// Writes GICH_VMCR.
        pub fn set_vmcr(&self, value: u32) {
            self.registers().vmcr.set(value);
        }

        /// Active-priority registers per group: always 1 (GICH_APR, shared
        /// by both groups), whatever GICH_VTR.PREbits says.
        pub const fn num_active_priority_registers(&self) -> usize {
            NUM_ACTIVE_PRIORITY_REGISTERS
        }

        /// GICH_APR, the one active-priorities register. `group` 0 and 1
        /// both name it (GICv2 tracks active priorities for both groups in
        /// one register; the argument mirrors GICv3's `ICH_AP<group>R<index>`
        /// so callers handle both versions alike); `index` must be 0.
        pub fn read_active_priorities(&self, group: usize, index: usize) -> Result<u32, GicError> {
            Self::check_active_priority_register(group, index)?;
            Ok(self.registers().apr.get())
        }

        /// Writes GICH_APR (see [`GichV2::read_active_priorities`] for
        /// `group` and `index`).
        pub fn write_active_priorities(
            &self,
            group: usize,
            index: usize,
            value: u32,
        ) -> Result<(), GicError> {
            Self::check_active_priority_register(group, index)?;
            self.registers().apr.set(value);
            Ok(())
        }

        fn check_active_priority_register(group: usize, index: usize) -> Result<(), GicError> {
            if group <= 1 && index < NUM_ACTIVE_PRIORITY_REGISTERS {
                Ok(())
            } else {
                Err(GicError::ActivePriorityRegisterOutOfRange { group, index })
            }
        }

        /// Reads list register `index` raw.
        pub fn read_lr(&self, index: usize) -> Result<u32, GicError> {
            check_index(index, self.num_list_registers())?;
            Ok(self.registers().lr[index].get())
        }

        /// Writes list register `index` raw.
        pub fn write_lr(&self, index: usize, value: u32) -> Result<(), GicError> {
            check_index(index, self.num_list_registers())?;
            self.registers().lr[index].set(value);
            Ok(())
        }
    }

    impl VirtualCpuInterface for GichV2 {
        fn num_list_registers(&self) -> usize {
            self.vtr().read(GICH_VTR::ListRegs) as usize + 1
        }

        fn list_register_encoding(&self) -> GicVersion {
            GicVersion::V2
        }

        fn read_list_register_raw(&self, index: usize) -> Result<u64, GicError> {
            self.read_lr(index).map(u64::from)
        }

        fn write_list_register_raw(&self, index: usize, value: u64) -> Result<(), GicError> {
            // A GICv2 list register is 32 bits: a wider value is no encoding
            // of one.
            let value =
                u32::try_from(value).map_err(|_| GicError::ListRegisterFieldOutOfRange {
                    version: GicVersion::V2,
                    field: "raw value",
                    value: (value >> 32) as u32,
                })?;
            self.write_lr(index, value)
        }

        fn empty_list_registers(&self) -> u64 {
            let regs = self.registers();
            u64::from(regs.elrsr[0].get()) | u64::from(regs.elrsr[1].get()) << 32
        }

        fn eoi_list_registers(&self) -> u64 {
            let regs = self.registers();
            u64::from(regs.eisr[0].get()) | u64::from(regs.eisr[1].get()) << 32
        }

        fn maintenance_status(&self) -> u32 {
            self.registers().misr.get()
        }

        fn set_enabled(&self, enabled: bool) {
            self.registers()
                .hcr
                .modify(GICH_HCR::En.val(enabled.into()));
        }
    }
}

/// GICv3 virtual interface control (ICH_*_EL2 system registers).
pub mod v3 {
    use tock_registers::LocalRegisterCopy;

    use super::{VirtualCpuInterface, check_index};
    use crate::sysreg;
    use crate::{GicError, GicVersion};

    /// Handle on the calling CPU's ICH_*_EL2 registers; obtained from
    /// [`crate::GicV3::virtual_interface`].
    #[derive(Clone, Copy, Debug)]
    pub struct IchV3 {
        _private: (),
    }

    /// ICH_VTR_EL2.ListRegs: `[4:0]`, number of list registers - 1.
    const VTR_LIST_REGS_MASK: u64 = 0x1F;
    /// ICH_VTR_EL2.PREbits: `[28:26]`, preemption bits - 1.
    const VTR_PREBITS_SHIFT: u64 = 26;

    impl IchV3 {
        /// # Safety
        /// Called at EL2 on a system with a GICv3 whose system-register
        /// interface is enabled on every CPU that uses the handle.
        pub(crate) const unsafe fn new() -> IchV3 {
            IchV3 { _private: () }
        }

        /// ICH_HCR_EL2.
        pub fn hcr(&self) -> LocalRegisterCopy<u64, aarch64_cpu::registers::ICH_HCR_EL2::Register> {
            // SAFETY: `new`'s contract.
            LocalRegisterCopy::new(unsafe { sysreg::read_ich_hcr_el2() })
        }

        /// Writes ICH_HCR_EL2.
        pub fn set_hcr(&self, value: u64) {
            // SAFETY: `new`'s contract.
            unsafe { sysreg::write_ich_hcr_el2(value) }
        }

        /// ICH_VTR_EL2.
        pub fn vtr(&self) -> u64 {
            // SAFETY: `new`'s contract.
            unsafe { sysreg::read_ich_vtr_el2() }
        }

        /// ICH_VMCR_EL2 (the guest's CPU-interface state, saved on vCPU switch).
        pub fn vmcr(&self) -> LocalRegisterCopy<u64, crate::registers::ICH_VMCR_EL2::Register> {
            // SAFETY: `new`'s contract.
            LocalRegisterCopy::new(unsafe { sysreg::read_ich_vmcr_el2() })
        }

        /// Writes ICH_VMCR_EL2.
        pub fn set_vmcr(&self, value: u64) {
            // SAFETY: `new`'s contract.
            unsafe { sysreg::write_ich_vmcr_el2(value) }
        }

        /// How many `ICH_AP0R<n>_EL2` / `ICH_AP1R<n>_EL2` registers exist: 1, 2
        /// or 4 for 5, 6 or 7 preemption bits (ICH_VTR_EL2.PREbits + 1).
        pub fn num_active_priority_registers(&self) -> usize {
            let preemption_bits = ((self.vtr() >> VTR_PREBITS_SHIFT) & 0x7) + 1;
            1 << preemption_bits.clamp(5, 7).saturating_sub(5)
        }

        /// Reads `ICH_AP<group>R<index>_EL2` (group 0 or 1), saved on vCPU switch.
        pub fn read_active_priorities(&self, group: usize, index: usize) -> Result<u64, GicError> {
            self.check_active_priority_register(group, index)?;
            // SAFETY: `new`'s contract; the register is implemented (checked).
            unsafe { sysreg::read_ich_apr_el2(group, index) }
                .ok_or(GicError::ActivePriorityRegisterOutOfRange { group, index })
        }

        /// Writes `ICH_AP<group>R<index>_EL2` (group 0 or 1), restored on vCPU switch.
        pub fn write_active_priorities(
            &self,
            group: usize,
            index: usize,
            value: u64,
        ) -> Result<(), GicError> {
            self.check_active_priority_register(group, index)?;
            // SAFETY: `new`'s contract; the register is implemented (checked).
            if unsafe { sysreg::write_ich_apr_el2(group, index, value) } {
                Ok(())
            } else {
                Err(GicError::ActivePriorityRegisterOutOfRange { group, index })
            }
        }

        fn check_active_priority_register(
            &self,
            group: usize,
            index: usize,
        ) -> Result<(), GicError> {
            if group <= 1 && index < self.num_active_priority_registers() {
                Ok(())
            } else {
                Err(GicError::ActivePriorityRegisterOutOfRange { group, index })
            }
        }

        /// Reads `ICH_LR<index>_EL2` raw.
        pub fn read_lr(&self, index: usize) -> Result<u64, GicError> {
            let available = self.num_list_registers();
            check_index(index, available)?;
            // SAFETY: `new`'s contract; `index` is implemented (checked).
            unsafe { sysreg::read_ich_lr_el2(index) }
                .ok_or(GicError::ListRegisterIndexOutOfRange { index, available })
        }

        /// Writes `ICH_LR<index>_EL2` raw.
        pub fn write_lr(&self, index: usize, value: u64) -> Result<(), GicError> {
            let available = self.num_list_registers();
            check_index(index, available)?;
            // SAFETY: `new`'s contract; `index` is implemented (checked).
            if unsafe { sysreg::write_ich_lr_el2(index, value) } {
                Ok(())
            } else {
                Err(GicError::ListRegisterIndexOutOfRange { index, available })
            }
        }
    }

    impl VirtualCpuInterface for IchV3 {
        fn num_list_registers(&self) -> usize {
            let count = (self.vtr() & VTR_LIST_REGS_MASK) as usize + 1;
            count.min(sysreg::MAX_ICH_LIST_REGISTERS)
        }

        fn list_register_encoding(&self) -> GicVersion {
            GicVersion::V3
        }

        fn read_list_register_raw(&self, index: usize) -> Result<u64, GicError> {
            self.read_lr(index)
        }

        fn write_list_register_raw(&self, index: usize, value: u64) -> Result<(), GicError> {
            self.write_lr(index, value)
        }

        fn empty_list_registers(&self) -> u64 {
            // SAFETY: `new`'s contract.
            unsafe { sysreg::read_ich_elrsr_el2() }
        }

        fn eoi_list_registers(&self) -> u64 {
            // SAFETY: `new`'s contract.
            unsafe { sysreg::read_ich_eisr_el2() }
        }

        fn maintenance_status(&self) -> u32 {
            // SAFETY: `new`'s contract.
            unsafe { sysreg::read_ich_misr_el2() as u32 }
        }

        fn set_enabled(&self, enabled: bool) {
            let hcr = self.hcr().get();
            self.set_hcr((hcr & !1) | u64::from(enabled));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::v2::GichV2;
    use super::*;
    use crate::sysreg::{self, lock};
    use crate::testing::FakeMmio;
    use crate::{GicV3, ListRegisterState};
    use core::sync::atomic::Ordering::SeqCst;

    // GICH offsets from IHI 0048 §5.3, independent of the struct.
    const GICH_HCR: usize = 0x000;
    const GICH_VTR: usize = 0x004;
    const GICH_VMCR: usize = 0x008;
    const GICH_MISR: usize = 0x010;
    const GICH_EISR0: usize = 0x020;
    const GICH_ELRSR0: usize = 0x030;
    const GICH_APR: usize = 0x0F0;
    const GICH_LR0: usize = 0x100;

    #[test]
    fn gicv2_list_registers_through_gich() {
        let gich = FakeMmio::new(0x200);
        // QEMU's GICv2: 4 list registers, 5 priority bits.
        gich.write32(GICH_VTR, 0x9000_0003);
        // SAFETY: the fake frame outlives the handle.
        let vif = unsafe { GichV2::new(gich.base()) };
        assert_eq!(vif.num_list_registers(), 4);

        let timer = ListRegister::pending_hardware(27, 27, 0xA0);
        vif.write_list_register(3, &timer).unwrap();
        assert_eq!(gich.read32(GICH_LR0 + 12), timer.encode_v2().unwrap());
        assert_eq!(vif.read_list_register(3), Ok(timer));
        assert_eq!(
            vif.write_list_register(4, &timer),
            Err(GicError::ListRegisterIndexOutOfRange {
                index: 4,
                available: 4
            })
        );
        // A value the v2 layout cannot hold is not written.
        assert!(
            vif.write_list_register(0, &ListRegister::pending(8192, 0))
                .is_err()
        );
        assert_eq!(gich.read32(GICH_LR0), 0);
        // The raw accessors move the 32-bit GICH_LR encoding; a wider word
        // is no GICv2 list register and is not written.
        assert_eq!(vif.list_register_encoding(), GicVersion::V2);
        assert_eq!(
            vif.read_list_register_raw(3),
            Ok(u64::from(timer.encode_v2().unwrap()))
        );
        vif.write_list_register_raw(1, timer.encode(GicVersion::V2).unwrap())
            .unwrap();
        assert_eq!(vif.read_list_register(1), Ok(timer));
        assert!(vif.write_list_register_raw(0, 1 << 32).is_err());
        assert_eq!(gich.read32(GICH_LR0), 0);

        gich.write32(GICH_ELRSR0, 0b0111);
        gich.write32(GICH_ELRSR0 + 4, 0x1);
        assert_eq!(vif.empty_list_registers(), 1 << 32 | 0b0111);
        gich.write32(GICH_EISR0, 0b1000);
        assert_eq!(vif.eoi_list_registers(), 0b1000);
        gich.write32(GICH_MISR, 0b1001);
        assert_eq!(vif.maintenance_status(), 0b1001);

        gich.write32(GICH_HCR, 0b10);
        vif.set_enabled(true);
        assert_eq!(gich.read32(GICH_HCR), 0b11);
        vif.set_enabled(false);
        assert_eq!(gich.read32(GICH_HCR), 0b10);
    }

    #[test]
    fn gicv2_hcr_vmcr_apr_through_gich() {
        use crate::registers::{GICH_HCR, GICH_VMCR};
        let gich = FakeMmio::new(0x200);
        gich.write32(GICH_VTR, 0x9000_0003);
        // SAFETY: the fake frame outlives the handle.
        let vif = unsafe { GichV2::new(gich.base()) };

        // HCR: En | UIE | NPIE, EOICount = 3 (hardware-maintained).
        gich.write32(GICH_HCR, 3 << 27 | 0b1011);
        let hcr = vif.hcr();
        assert!(hcr.is_set(GICH_HCR::En) && hcr.is_set(GICH_HCR::NPIE));
        assert!(!hcr.is_set(GICH_HCR::LRENPIE));
        assert_eq!(hcr.read(GICH_HCR::EOICount), 3);
        vif.set_hcr(0b0110);
        assert_eq!(gich.read32(GICH_HCR), 0b0110);
        assert_eq!(vif.hcr().get(), 0b0110);

        // VMCR: the guest's PMR 0xF0 (VMPriMask = 0x1E), BPR 2, Grp0 enabled.
        gich.write32(GICH_VMCR, 0x1E << 27 | 2 << 21 | 1);
        let vmcr = vif.vmcr();
        assert_eq!(vmcr.read(GICH_VMCR::VMPriMask), 0x1E);
        assert_eq!(vmcr.read(GICH_VMCR::VMBP), 2);
        assert!(vmcr.is_set(GICH_VMCR::VMGrp0En) && !vmcr.is_set(GICH_VMCR::VMGrp1En));
        vif.set_vmcr(0x8000_0203);
        assert_eq!(gich.read32(GICH_VMCR), 0x8000_0203);
        // Nothing else in the frame moved.
        assert_eq!(gich.read32(GICH_HCR), 0b0110);
        assert_eq!(gich.read32(GICH_APR), 0);

        // APR: one register, named by group 0 or 1, index 0; PREbits = 4
        // (5 preemption bits) changes nothing.
        assert_eq!(vif.vtr().read(crate::registers::GICH_VTR::PREbits), 4);
        assert_eq!(vif.num_active_priority_registers(), 1);
        gich.write32(GICH_APR, 0x8000_0001);
        assert_eq!(vif.read_active_priorities(0, 0), Ok(0x8000_0001));
        assert_eq!(vif.read_active_priorities(1, 0), Ok(0x8000_0001));
        vif.write_active_priorities(1, 0, 0x10).unwrap();
        assert_eq!(gich.read32(GICH_APR), 0x10);
        vif.write_active_priorities(0, 0, 0x20).unwrap();
        assert_eq!(gich.read32(GICH_APR), 0x20);
        for (group, index) in [(0, 1), (1, 1), (2, 0), (1, 4)] {
            let error = Err(GicError::ActivePriorityRegisterOutOfRange { group, index });
            assert_eq!(vif.read_active_priorities(group, index), error);
            assert_eq!(
                vif.write_active_priorities(group, index, 0xFFFF),
                error.map(drop)
            );
        }
        assert_eq!(
            gich.read32(GICH_APR),
            0x20,
            "rejected writes change nothing"
        );
        assert_eq!(gich.read32(GICH_APR + 4), 0);
        assert_eq!(gich.read32(GICH_LR0), 0);
    }

    #[test]
    fn gicv2_handle_over_plain_memory() {
        use super::v2::GichMemory;
        let memory: &'static GichMemory = Box::leak(Box::new(GichMemory::new()));
        assert!(memory.write32(GICH_VTR, 0x9000_0003));
        let vif = GichV2::over_memory(memory);
        assert_eq!(vif.num_list_registers(), 4);

        let timer = ListRegister::pending_hardware(27, 27, 0xA0);
        vif.write_list_register(2, &timer).unwrap();
        assert_eq!(memory.read32(GICH_LR0 + 8), timer.encode_v2().ok());
        vif.set_vmcr(0xF000_0001);
        assert_eq!(memory.read32(GICH_VMCR), Some(0xF000_0001));
        vif.write_active_priorities(0, 0, 0x4).unwrap();
        assert_eq!(memory.read32(GICH_APR), Some(0x4));
        memory.write32(GICH_HCR, 1);
        assert_eq!(vif.hcr().get(), 1);

        // The frame ends after LR63; offsets are checked.
        assert!(memory.write32(GICH_LR0 + 63 * 4, 7));
        assert_eq!(vif.read_lr(3), Ok(0));
        assert_eq!(memory.read32(0x200), None);
        assert!(!memory.write32(0x200, 1));
        assert_eq!(memory.read32(GICH_APR + 2), None);
    }

    #[test]
    fn gicv3_list_registers_through_ich() {
        let _model = lock();
        let gicd = FakeMmio::new(0x1_0000);
        // SAFETY: only the system-register model is used.
        let gic = unsafe { GicV3::new(gicd.base(), 0, 0) };
        let vif = gic.virtual_interface();
        assert_eq!(vif.num_list_registers(), 4);
        sysreg::ICH_VTR_EL2.store(0x9000_000F, SeqCst);
        assert_eq!(vif.num_list_registers(), 16);
        sysreg::ICH_VTR_EL2.store(0x9000_0003, SeqCst);

        let sgi = ListRegister {
            state: ListRegisterState::Active,
            ..ListRegister::pending(2, 0x80)
        };
        vif.write_list_register(1, &sgi).unwrap();
        assert_eq!(sysreg::ICH_LR_EL2[1].load(SeqCst), sgi.encode_v3().unwrap());
        assert_eq!(vif.read_list_register(1), Ok(sgi));
        assert_eq!(vif.empty_list_registers() & 0xF, 0b1101);
        assert_eq!(
            vif.read_list_register(4),
            Err(GicError::ListRegisterIndexOutOfRange {
                index: 4,
                available: 4
            })
        );

        // The model's VTR has PREbits = 4 (5 bits): one AP0R and one AP1R.
        assert_eq!(vif.num_active_priority_registers(), 1);
        vif.write_active_priorities(1, 0, 0x8000_0000).unwrap();
        assert_eq!(sysreg::ICH_APR_EL2[1][0].load(SeqCst), 0x8000_0000);
        assert_eq!(vif.read_active_priorities(1, 0), Ok(0x8000_0000));
        assert!(vif.read_active_priorities(0, 1).is_err());
        assert!(vif.write_active_priorities(2, 0, 1).is_err());
        // 7 preemption bits (PREbits = 6): four of each.
        sysreg::ICH_VTR_EL2.store(6 << 26 | 3, SeqCst);
        assert_eq!(vif.num_active_priority_registers(), 4);
        vif.write_active_priorities(0, 3, 5).unwrap();
        assert_eq!(sysreg::ICH_APR_EL2[0][3].load(SeqCst), 5);
        sysreg::ICH_VTR_EL2.store(0x9000_0003, SeqCst);

        vif.set_enabled(true);
        assert_eq!(sysreg::ICH_HCR_EL2.load(SeqCst), 1);
        vif.set_enabled(false);
        assert_eq!(sysreg::ICH_HCR_EL2.load(SeqCst), 0);
    }

    #[test]
    fn gic_reports_list_register_count() {
        let _model = lock();
        let gicd = FakeMmio::new(0x1000);
        let gicc = FakeMmio::new(0x2000);
        let gich = FakeMmio::new(0x200);
        gich.write32(GICH_VTR, 0x9000_0007);
        // SAFETY: the fake frames outlive the drivers.
        let (v2, v2_without_gich, v3) = unsafe {
            (
                crate::GicV2::with_virtual_interface(gicd.base(), gicc.base(), gich.base()),
                crate::GicV2::new(gicd.base(), gicc.base()),
                GicV3::new(gicd.base(), 0, 0),
            )
        };
        assert_eq!(crate::Gic::V2(v2).num_list_registers(), 8);
        assert_eq!(crate::Gic::V2(v2_without_gich).num_list_registers(), 0);
        assert_eq!(crate::Gic::V3(v3).num_list_registers(), 4);
    }
}
