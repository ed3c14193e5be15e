//! GICv2 driver: distributor and memory-mapped CPU interface (IHI 0048B).
//! Used on QEMU `virt` with `gic-version=2` and the Pi 4's GIC-400.
//!
//! Interrupt groups are left as the firmware set them, as Linux does: with
//! the Security Extensions (GIC-400 on the Pi 4, hypervisor in Non-secure
//! state) GICD_IGROUPR is RAZ/WI for us and the firmware has made every
//! interrupt Non-secure Group 1, which bit 0 of GICD_CTLR/GICC_CTLR enables
//! in the Non-secure view. Without them (QEMU `virt`, `secure=off`) every
//! interrupt stays Group 0, which bit 0 enables and which is signalled as
//! IRQ (FIQEn = 0) and acknowledged by GICC_IAR; Group 1 would need the
//! deprecated AckCtl.

use core::sync::atomic::{AtomicU8, Ordering};

use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

use crate::affinity::cpu_interface_mask_from_itargetsr;
use crate::distributor;
use crate::registers::{
    GICC_CTLR, GICC_IAR, GICC_PMR, GICD_CTLR, GICD_TYPER, GiccRegisters, GicdRegisters,
};
use crate::sgi::{SgirTargets, check_sgi, gicd_sgir_value};
use crate::virt::v2::GichV2;
use crate::{
    Acknowledged, DEFAULT_PRIORITY, DEFAULT_PRIORITY_MASK, GicError, IntId, SgiTarget, Trigger,
};

/// Most CPU interfaces a GICv2 has (GICD_ITARGETSR and GICD_SGIR have 8 bits).
pub const GICV2_MAX_CPUS: usize = 8;

/// A GICv2: distributor, CPU interface and (optionally) the virtual
/// interface control block GICH.
pub struct GicV2 {
    gicd_base: usize,
    gicc_base: usize,
    gich_base: Option<usize>,
    /// CPU-interface bit of each logical CPU (0 = not initialised yet).
    cpu_interface_masks: [AtomicU8; GICV2_MAX_CPUS],
}

impl GicV2 {
    /// A driver for the GICv2 whose distributor (4 KiB) is at `gicd_base`
    /// and CPU interface (8 KiB) at `gicc_base`.
    ///
    /// # Safety
    /// The addresses are those of this system's GICv2 GICD and GICC frames,
    /// mapped as device memory (physical = virtual) for as long as the
    /// driver is used, and nothing else accesses them except through this
    /// driver.
    pub const unsafe fn new(gicd_base: usize, gicc_base: usize) -> GicV2 {
        GicV2 {
            gicd_base,
            gicc_base,
            gich_base: None,
            cpu_interface_masks: [const { AtomicU8::new(0) }; GICV2_MAX_CPUS],
        }
    }

    /// As [`GicV2::new`], plus the virtual interface control registers
    /// (GICH, 4 KiB; the third `reg` region of the DT node).
    ///
    /// # Safety
    /// As [`GicV2::new`], for all three addresses.
    pub const unsafe fn with_virtual_interface(
        gicd_base: usize,
        gicc_base: usize,
        gich_base: usize,
    ) -> GicV2 {
        // SAFETY: the caller's promise covers `new`'s contract.
        let mut gic = unsafe { GicV2::new(gicd_base, gicc_base) };
        gic.gich_base = Some(gich_base);
        gic
    }

    fn gicd(&self) -> &GicdRegisters {
        // SAFETY: `new`'s contract: `gicd_base` is the mapped GICD frame,
        // which outlives `self`; the registers are accessed volatile only.
        unsafe { &*(self.gicd_base as *const GicdRegisters) }
    }

    fn gicc(&self) -> &GiccRegisters {
        // SAFETY: `new`'s contract: `gicc_base` is the mapped GICC frame.
        unsafe { &*(self.gicc_base as *const GiccRegisters) }
    }

    /// The virtual interface control registers, if GICH was given (by
    /// [`GicV2::with_virtual_interface`]). GICH is banked per CPU at one
    /// address, so the handle reaches the *calling* CPU's registers
    /// wherever it is used: get it on the CPU that saves or restores.
    pub fn virtual_interface(&self) -> Option<GichV2> {
        // SAFETY: `with_virtual_interface`'s contract: the GICH frame is mapped.
        self.gich_base.map(|base| unsafe { GichV2::new(base) })
    }

    /// Number of INTIDs the distributor implements.
    pub fn num_interrupts(&self) -> u32 {
        distributor::num_interrupts(self.gicd())
    }

    /// Number of CPU interfaces (GICD_TYPER.CPUNumber + 1).
    pub fn num_cpu_interfaces(&self) -> usize {
        self.gicd().typer.read(GICD_TYPER::CPUNumber) as usize + 1
    }

    /// The calling CPU's interface bit, from GICD_ITARGETSR0-7.
    fn own_interface_mask(&self, cpu: usize) -> Result<u8, GicError> {
        let gicd = self.gicd();
        let mut words = [0u32; 8];
        for (index, word) in words.iter_mut().enumerate() {
            let bytes = core::array::from_fn(|byte| gicd.itargetsr[index * 4 + byte].get());
            *word = u32::from_le_bytes(bytes);
        }
        match cpu_interface_mask_from_itargetsr(words) {
            Some(mask) => Ok(mask),
            // Uniprocessor GICs make ITARGETSR RAZ/WI (IHI 0048 §4.3).
            None if self.num_cpu_interfaces() == 1 => Ok(1),
            None => Err(GicError::CpuInterfaceMaskUnknown { cpu }),
        }
    }

    /// Disables the distributor, puts every SPI in a known state (disabled,
    /// level, [`DEFAULT_PRIORITY`], targeted at the calling CPU) and enables
    /// it again. Call once, on the boot CPU.
    pub fn init_distributor(&self) -> Result<(), GicError> {
        let gicd = self.gicd();
        gicd.ctlr.set(0);
        distributor::reset_spis(gicd, false);
        // Route every SPI to the boot CPU until the hypervisor says otherwise.
        if let Ok(mask) = self.own_interface_mask(0) {
            for intid in IntId::SPI_BASE as usize..self.num_interrupts() as usize {
                gicd.itargetsr[intid].set(mask);
            }
        }
        gicd.ctlr.write(GICD_CTLR::ENABLE_GRP0::SET);
        Ok(())
    }

    /// Brings up the calling CPU: records its CPU-interface bit for SGI
    /// targeting, disables its PPIs, enables its SGIs, gives them
    /// [`DEFAULT_PRIORITY`], then enables the CPU interface with priority
    /// mask [`DEFAULT_PRIORITY_MASK`] and split EOI (EOImode = 1, so a
    /// priority drop and the deactivation can be separate; see
    /// [`GicV2::priority_drop`]). `mpidr` is not needed by a GICv2.
    pub fn init_cpu(&self, cpu: usize, _mpidr: u64) -> Result<(), GicError> {
        let slot = self
            .cpu_interface_masks
            .get(cpu)
            .ok_or(GicError::TooManyCpusForGicV2 { cpu })?;
        let mask = self.own_interface_mask(cpu)?;
        slot.store(mask, Ordering::Release);

        let gicd = self.gicd();
        // Banked SGIs/PPIs: nothing left active by firmware or an earlier
        // boot, PPIs off until a driver wants them, SGIs on for kicks.
        gicd.icactiver[0].set(u32::MAX);
        gicd.icenabler[0].set(0xFFFF_0000);
        gicd.isenabler[0].set(0x0000_FFFF);
        for intid in 0..IntId::SPI_BASE as usize {
            gicd.ipriorityr[intid].set(DEFAULT_PRIORITY);
        }

        let gicc = self.gicc();
        gicc.pmr
            .write(GICC_PMR::Priority.val(DEFAULT_PRIORITY_MASK.into()));
        gicc.bpr.set(0);
        gicc.ctlr
            .modify(GICC_CTLR::ENABLE::SET + GICC_CTLR::EOI_MODE::SET);
        Ok(())
    }

    /// Enables SPI `intid`, or SGI/PPI `intid` of the calling CPU.
    pub fn enable_interrupt(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        distributor::enable(self.gicd(), index);
        Ok(())
    }

    /// Disables SPI `intid`, or SGI/PPI `intid` of the calling CPU.
    pub fn disable_interrupt(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        distributor::disable(self.gicd(), index);
        Ok(())
    }

    /// Sets or clears the active state of SPI `intid`, or of SGI/PPI
    /// `intid` of the calling CPU (GICD_ISACTIVER / GICD_ICACTIVER).
    pub fn set_active(&self, intid: IntId, active: bool) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        distributor::set_active(self.gicd(), index, active);
        Ok(())
    }

    /// Whether `intid` is active (GICD_ISACTIVER; SGIs and PPIs: the
    /// calling CPU's banked bit).
    pub fn is_active(&self, intid: IntId) -> Result<bool, GicError> {
        let index = self.check_implemented(intid)?;
        Ok(distributor::is_active(self.gicd(), index))
    }

    /// Clears the latched pending state of `intid` (GICD_ICPENDR; PPIs
    /// and SGIs: the calling CPU's banked bit). A level-sensitive line
    /// still asserted stays pending.
    pub fn clear_pending(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        distributor::clear_pending(self.gicd(), index);
        Ok(())
    }

    /// Latches `intid` pending (GICD_ISPENDR; PPIs: the calling CPU's
    /// banked bit), as an edge would. SGI bits ignore the write there
    /// (GICv2 sets an SGI pending through GICD_SPENDSGIR).
    pub fn set_pending(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        distributor::set_pending(self.gicd(), index);
        Ok(())
    }

    /// Whether `intid` is pending (GICD_ISPENDR; SGIs and PPIs: the
    /// calling CPU's banked bit): an edge latched and not yet
    /// acknowledged, or a level-sensitive line up.
    pub fn is_pending(&self, intid: IntId) -> Result<bool, GicError> {
        let index = self.check_implemented(intid)?;
        Ok(distributor::is_pending(self.gicd(), index))
    }

    /// Whether SPI `intid` is pending at the distributor (for a
    /// level-sensitive SPI: its line is asserted, even while disabled).
    pub fn spi_pending(&self, intid: IntId) -> Result<bool, GicError> {
        let index = distributor::check_spi(self.gicd(), intid)?;
        Ok(distributor::is_pending(self.gicd(), index))
    }

    /// Sets the priority of `intid` (SGIs/PPIs: of the calling CPU).
    pub fn set_priority(&self, intid: IntId, priority: u8) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        self.gicd().ipriorityr[index].set(priority);
        Ok(())
    }

    /// Sets whether a PPI or SPI is level- or edge-triggered (SGIs are
    /// always edge-triggered). Configuration changes must be serialised by
    /// the caller (16 INTIDs share a register).
    pub fn set_trigger(&self, intid: IntId, trigger: Trigger) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        if index < IntId::SGI_COUNT as usize {
            return Err(GicError::UnsupportedIntId { intid: intid.raw() });
        }
        distributor::set_trigger(self.gicd(), index, trigger);
        Ok(())
    }

    /// Whether a PPI or SPI is level- or edge-triggered, as the GIC reports
    /// it (GIC-400's PPI configuration is fixed: read back after
    /// [`Self::set_trigger`]).
    pub fn trigger(&self, intid: IntId) -> Result<Trigger, GicError> {
        let index = self.check_implemented(intid)?;
        if index < IntId::SGI_COUNT as usize {
            return Ok(Trigger::Edge);
        }
        Ok(distributor::trigger(self.gicd(), index))
    }

    /// Sends SPI `intid` to logical CPU `cpu` only.
    pub fn route_spi(&self, intid: IntId, cpu: usize) -> Result<(), GicError> {
        let index = distributor::check_spi(self.gicd(), intid)?;
        let mask = self.interface_mask_of(cpu)?;
        self.gicd().itargetsr[index].set(mask);
        Ok(())
    }

    fn check_implemented(&self, intid: IntId) -> Result<usize, GicError> {
        if intid.raw() < self.num_interrupts() {
            Ok(intid.index())
        } else {
            Err(GicError::UnsupportedIntId { intid: intid.raw() })
        }
    }

    fn interface_mask_of(&self, cpu: usize) -> Result<u8, GicError> {
        let slot = self
            .cpu_interface_masks
            .get(cpu)
            .ok_or(GicError::TooManyCpusForGicV2 { cpu })?;
        match slot.load(Ordering::Acquire) {
            0 => Err(GicError::CpuNotInitialised { cpu }),
            mask => Ok(mask),
        }
    }

    /// Acknowledges the highest-priority pending interrupt (GICC_IAR);
    /// `None` for a spurious acknowledge (INTID 1020-1023).
    pub fn acknowledge(&self) -> Option<Acknowledged> {
        let raw = self.gicc().iar.get();
        let intid = IntId::new(raw & GICC_IAR::InterruptID.mask).ok()?;
        Some(Acknowledged::new(intid, raw))
    }

    /// The highest-priority pending interrupt, left pending (GICC_HPPIR);
    /// `None` when there is none (INTID 1020-1023).
    pub fn highest_pending(&self) -> Option<IntId> {
        let raw = self.gicc().hppir.get();
        IntId::new(raw & GICC_IAR::InterruptID.mask).ok()
    }

    /// Priority drop and deactivation of an acknowledged interrupt.
    pub fn end_of_interrupt(&self, interrupt: Acknowledged) {
        self.priority_drop(interrupt);
        self.deactivate(interrupt);
    }

    /// Priority drop only (GICC_EOIR with EOImode = 1): the interrupt stays
    /// active until [`GicV2::deactivate`] or a guest's deactivation through
    /// a hardware list register.
    pub fn priority_drop(&self, interrupt: Acknowledged) {
        self.gicc().eoir.set(interrupt.raw());
    }

    /// Deactivates an interrupt whose priority was dropped (GICC_DIR).
    pub fn deactivate(&self, interrupt: Acknowledged) {
        self.gicc().dir.set(interrupt.raw());
    }

    /// Sends SGI `sgi` through GICD_SGIR. Every named CPU must have run
    /// [`GicV2::init_cpu`]; an empty target set sends nothing.
    pub fn send_sgi(&self, sgi: u8, target: SgiTarget<'_>) -> Result<(), GicError> {
        let sgi = check_sgi(sgi)?;
        let targets = match target.cpus() {
            None => SgirTargets::AllButSelf,
            Some(cpus) => {
                let mut mask = 0;
                for cpu in cpus {
                    mask |= self.interface_mask_of(cpu)?;
                }
                if mask == 0 {
                    return Ok(());
                }
                SgirTargets::InterfaceMask(mask)
            }
        };
        crate::sysreg::barrier_before_sgi();
        self.gicd().sgir.set(gicd_sgir_value(sgi, targets));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::FakeMmio;

    // Offsets from IHI 0048's register maps, independent of the structs.
    const GICD_CTLR_OFFSET: usize = 0x000;
    const GICD_TYPER_OFFSET: usize = 0x004;
    const GICD_ISENABLER: usize = 0x100;
    const GICD_ICENABLER: usize = 0x180;
    const GICD_ISACTIVER: usize = 0x300;
    const GICD_ICACTIVER: usize = 0x380;
    const GICD_IPRIORITYR: usize = 0x400;
    const GICD_ITARGETSR: usize = 0x800;
    const GICD_ICFGR: usize = 0xC00;
    const GICD_SGIR: usize = 0xF00;
    const GICC_CTLR_OFFSET: usize = 0x000;
    const GICC_PMR_OFFSET: usize = 0x004;
    const GICC_IAR_OFFSET: usize = 0x00C;
    const GICC_EOIR: usize = 0x010;
    const GICC_HPPIR_OFFSET: usize = 0x018;
    const GICC_DIR: usize = 0x1000;

    struct Fixture {
        gicd: FakeMmio,
        gicc: FakeMmio,
        gic: GicV2,
    }

    /// A fake GICv2 with 4 CPU interfaces and 96 INTIDs, seen from the CPU
    /// whose interface bit is `own_mask`.
    fn fixture(own_mask: u8) -> Fixture {
        let gicd = FakeMmio::new(0x1000);
        let gicc = FakeMmio::new(0x2000);
        // ITLinesNumber = 2 (96 INTIDs), CPUNumber = 3 (4 interfaces).
        gicd.write32(GICD_TYPER_OFFSET, 2 | 3 << 5);
        set_own_mask(&gicd, own_mask);
        // SAFETY: the fake frames live as long as the fixture.
        let gic = unsafe { GicV2::new(gicd.base(), gicc.base()) };
        Fixture { gicd, gicc, gic }
    }

    fn set_own_mask(gicd: &FakeMmio, mask: u8) {
        for word in 0..8 {
            gicd.write32(GICD_ITARGETSR + 4 * word, u32::from(mask) * 0x0101_0101);
        }
    }

    #[test]
    fn init_distributor_resets_spis_and_enables() {
        let f = fixture(0x01);
        f.gicd.write32(GICD_CTLR_OFFSET, 0);
        f.gic.init_distributor().unwrap();
        assert_eq!(f.gic.num_interrupts(), 96);
        assert_eq!(f.gicd.read32(GICD_CTLR_OFFSET), 1);
        assert_eq!(f.gicd.read32(GICD_ICENABLER + 4), u32::MAX);
        assert_eq!(f.gicd.read32(GICD_ICENABLER + 8), u32::MAX);
        // Only implemented lines are touched.
        assert_eq!(f.gicd.read32(GICD_ICENABLER + 12), 0);
        assert_eq!(f.gicd.read8(GICD_IPRIORITYR + 32), DEFAULT_PRIORITY);
        assert_eq!(f.gicd.read8(GICD_IPRIORITYR + 95), DEFAULT_PRIORITY);
        assert_eq!(f.gicd.read8(GICD_IPRIORITYR + 96), 0);
        assert_eq!(f.gicd.read8(GICD_ITARGETSR + 40), 0x01);
    }

    #[test]
    fn active_state_of_a_ppi_and_an_spi() {
        let f = fixture(0x01);
        let timer = IntId::new(27).unwrap();
        f.gic.set_active(timer, true).unwrap();
        assert_eq!(f.gicd.read32(GICD_ISACTIVER), 1 << 27);
        f.gic.set_active(timer, false).unwrap();
        assert_eq!(f.gicd.read32(GICD_ICACTIVER), 1 << 27);
        f.gic.set_active(IntId::new(40).unwrap(), false).unwrap();
        assert_eq!(f.gicd.read32(GICD_ICACTIVER + 4), 1 << 8);
        assert!(f.gic.set_active(IntId::new(96).unwrap(), true).is_err());
    }

    #[test]
    fn init_cpu_records_interface_and_enables_cpu_interface() {
        let f = fixture(0x04);
        f.gic.init_cpu(2, 0x8000_0002).unwrap();
        assert_eq!(f.gic.interface_mask_of(2), Ok(0x04));
        assert_eq!(f.gicd.read32(GICD_ISENABLER), 0xFFFF);
        assert_eq!(f.gicd.read32(GICD_ICENABLER), 0xFFFF_0000);
        assert_eq!(f.gicd.read8(GICD_IPRIORITYR + 27), DEFAULT_PRIORITY);
        assert_eq!(f.gicc.read32(GICC_PMR_OFFSET), 0xF0);
        // Enable (bit 0) and EOImode (bit 9).
        assert_eq!(f.gicc.read32(GICC_CTLR_OFFSET), 1 | 1 << 9);
    }

    #[test]
    fn init_cpu_rejects_ninth_cpu_and_unknown_interface() {
        let f = fixture(0x01);
        assert_eq!(
            f.gic.init_cpu(8, 8),
            Err(GicError::TooManyCpusForGicV2 { cpu: 8 })
        );
        set_own_mask(&f.gicd, 0);
        assert_eq!(
            f.gic.init_cpu(1, 1),
            Err(GicError::CpuInterfaceMaskUnknown { cpu: 1 })
        );
        // A uniprocessor GIC (CPUNumber = 0) reads ITARGETSR as zero: interface 0.
        f.gicd.write32(GICD_TYPER_OFFSET, 2);
        f.gic.init_cpu(0, 0).unwrap();
        assert_eq!(f.gic.interface_mask_of(0), Ok(0x01));
    }

    #[test]
    fn sgi_target_list_from_recorded_masks() {
        let f = fixture(0x01);
        // Interfaces need not follow logical numbering: CPU n gets bit 3 - n.
        for cpu in 0..4 {
            set_own_mask(&f.gicd, 1 << (3 - cpu));
            f.gic.init_cpu(cpu, cpu as u64).unwrap();
        }
        f.gic.send_sgi(3, SgiTarget::Cpu(0)).unwrap();
        assert_eq!(f.gicd.read32(GICD_SGIR), 0x0008_0003);
        f.gic.send_sgi(1, SgiTarget::List(&[1, 3])).unwrap();
        assert_eq!(f.gicd.read32(GICD_SGIR), 0x0005_0001);
        f.gic.send_sgi(1, SgiTarget::Bitmap(&[0b0110])).unwrap();
        assert_eq!(f.gicd.read32(GICD_SGIR), 0x0006_0001);
        f.gic.send_sgi(2, SgiTarget::AllButSelf).unwrap();
        assert_eq!(f.gicd.read32(GICD_SGIR), 0x0100_0002);
    }

    #[test]
    fn sgi_errors_send_nothing() {
        let f = fixture(0x01);
        f.gic.init_cpu(0, 0).unwrap();
        f.gicd.write32(GICD_SGIR, 0xDEAD);
        assert_eq!(
            f.gic.send_sgi(1, SgiTarget::List(&[0, 1])),
            Err(GicError::CpuNotInitialised { cpu: 1 })
        );
        assert_eq!(
            f.gic.send_sgi(1, SgiTarget::Cpu(9)),
            Err(GicError::TooManyCpusForGicV2 { cpu: 9 })
        );
        assert_eq!(
            f.gic.send_sgi(16, SgiTarget::Cpu(0)),
            Err(GicError::InvalidSgi { sgi: 16 })
        );
        f.gic.send_sgi(1, SgiTarget::List(&[])).unwrap();
        assert_eq!(f.gicd.read32(GICD_SGIR), 0xDEAD);
    }

    #[test]
    fn enable_priority_trigger_and_routing() {
        let f = fixture(0x02);
        f.gic.init_cpu(1, 1).unwrap();
        let spi = IntId::new(40).unwrap();
        f.gic.enable_interrupt(spi).unwrap();
        assert_eq!(f.gicd.read32(GICD_ISENABLER + 4), 1 << 8);
        f.gic.disable_interrupt(spi).unwrap();
        assert_eq!(f.gicd.read32(GICD_ICENABLER + 4), 1 << 8);
        f.gic.set_priority(spi, 0x80).unwrap();
        assert_eq!(f.gicd.read8(GICD_IPRIORITYR + 40), 0x80);
        f.gic.set_trigger(spi, Trigger::Edge).unwrap();
        assert_eq!(f.gicd.read32(GICD_ICFGR + 8), 1 << 17);
        f.gic.route_spi(spi, 1).unwrap();
        assert_eq!(f.gicd.read8(GICD_ITARGETSR + 40), 0x02);

        let beyond = IntId::new(96).unwrap();
        assert_eq!(
            f.gic.enable_interrupt(beyond),
            Err(GicError::UnsupportedIntId { intid: 96 })
        );
        let sgi = IntId::sgi(1).unwrap();
        assert_eq!(
            f.gic.set_trigger(sgi, Trigger::Level),
            Err(GicError::UnsupportedIntId { intid: 1 })
        );
        assert_eq!(
            f.gic.route_spi(sgi, 1),
            Err(GicError::UnsupportedIntId { intid: 1 })
        );
        assert_eq!(
            f.gic.route_spi(spi, 0),
            Err(GicError::CpuNotInitialised { cpu: 0 })
        );
    }

    #[test]
    fn acknowledge_and_eoi_echo_sgi_source() {
        let f = fixture(0x01);
        // SGI 5 from CPU interface 2.
        f.gicc.write32(GICC_IAR_OFFSET, 2 << 10 | 5);
        let ack = f.gic.acknowledge().unwrap();
        assert_eq!(ack.intid(), IntId::sgi(5).unwrap());
        assert_eq!(ack.sgi_source_interface(), 2);
        f.gic.end_of_interrupt(ack);
        assert_eq!(f.gicc.read32(GICC_EOIR), 2 << 10 | 5);
        assert_eq!(f.gicc.read32(GICC_DIR), 2 << 10 | 5);

        f.gicc.write32(GICC_IAR_OFFSET, 1023);
        assert_eq!(f.gic.acknowledge(), None);
        f.gicc.write32(GICC_IAR_OFFSET, 42);
        assert_eq!(f.gic.acknowledge().unwrap().intid().raw(), 42);
    }

    #[test]
    fn highest_pending_reads_hppir_and_drops_the_source() {
        let f = fixture(0x01);
        f.gicc.write32(GICC_HPPIR_OFFSET, 1023);
        assert_eq!(f.gic.highest_pending(), None);
        // SGI 3 from CPU interface 1: the INTID alone.
        f.gicc.write32(GICC_HPPIR_OFFSET, 1 << 10 | 3);
        assert_eq!(f.gic.highest_pending(), IntId::sgi(3).ok());
        f.gicc.write32(GICC_HPPIR_OFFSET, 27);
        assert_eq!(f.gic.highest_pending(), IntId::ppi(11).ok());
    }
}
