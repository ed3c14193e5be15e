//! GICv3/v4 driver: distributor with affinity routing, redistributors found
//! by walking GICR_TYPER, and the system-register CPU interface (IHI 0069H).
//! Used on QEMU `virt` with `gic-version=3` and on Ampere Altra.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use tock_registers::LocalRegisterCopy;
use tock_registers::interfaces::{ReadWriteable, Readable, Writeable};

use crate::affinity::{Affinity, MPIDR_AFFINITY_MASK, gicr_typer_affinity, irouter_for_mpidr};
use crate::distributor;
use crate::poll::{POLL_LIMIT, poll_until};
use crate::registers::{
    GICD_CTLR, GICD_ROUTER_OFFSET, GICD_TYPER, GICR_CTLR, GICR_FRAME_STRIDE_V3,
    GICR_FRAME_STRIDE_V4, GICR_TYPER, GICR_WAKER, GicdRegisters, GicdRouterRegisters,
    GicrRegisters, ICC_CTLR_EL1, ICC_IAR1_EL1, PIDR2,
};
use crate::sgi::{check_sgi, for_each_sgi1r, sgi1r_all_but_self, sgi1r_for_one};
use crate::sysreg;
use crate::{
    Acknowledged, DEFAULT_PRIORITY, DEFAULT_PRIORITY_MASK, GicError, IntId, MAX_CPUS, SgiTarget,
    Trigger,
};

/// Most redistributor regions a [`GicV3`] accepts (DT
/// `#redistributor-regions`, ACPI MADT GICR entries; one per socket on
/// multi-socket servers).
pub const MAX_REDISTRIBUTOR_REGIONS: usize = 8;

/// Marks a per-CPU MPIDR slot as not initialised (no real MPIDR has all
/// bits set: bits `[63:40]` are RES0).
const NO_MPIDR: u64 = u64::MAX;

/// A contiguous block of redistributor frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RedistributorRegion {
    /// Physical (= virtual) address of the first frame.
    pub base: usize,
    /// Size of the region in bytes.
    pub size: usize,
}

/// A GICv3 or GICv4.
pub struct GicV3 {
    gicd_base: usize,
    regions: [RedistributorRegion; MAX_REDISTRIBUTOR_REGIONS],
    region_count: usize,
    /// MPIDR affinity of each logical CPU, [`NO_MPIDR`] until `init_cpu`.
    mpidrs: [AtomicU64; MAX_CPUS],
    /// Redistributor base of each logical CPU, valid once its MPIDR is set.
    redistributors: [AtomicUsize; MAX_CPUS],
}

impl GicV3 {
    /// A driver for the GICv3 whose distributor (64 KiB) is at `gicd_base`
    /// and whose redistributors fill `gicr_region_size` bytes from
    /// `gicr_base`.
    ///
    /// # Safety
    /// The addresses are this system's GICD frame and GICR region, mapped
    /// as device memory (physical = virtual) for as long as the driver is
    /// used, and nothing else accesses them except through this driver. The
    /// caller runs at EL2, and runs [`GicV3::init_cpu`] on a CPU before any
    /// method that uses the calling CPU's interface (acknowledge, EOI, SGIs).
    pub const unsafe fn new(gicd_base: usize, gicr_base: usize, gicr_region_size: usize) -> GicV3 {
        let mut regions = [RedistributorRegion { base: 0, size: 0 }; MAX_REDISTRIBUTOR_REGIONS];
        regions[0] = RedistributorRegion {
            base: gicr_base,
            size: gicr_region_size,
        };
        GicV3 {
            gicd_base,
            regions,
            region_count: 1,
            mpidrs: [const { AtomicU64::new(NO_MPIDR) }; MAX_CPUS],
            redistributors: [const { AtomicUsize::new(0) }; MAX_CPUS],
        }
    }

    /// As [`GicV3::new`] with several redistributor regions (searched in order).
    ///
    /// # Safety
    /// As [`GicV3::new`], for the distributor and every region.
    pub unsafe fn with_regions(
        gicd_base: usize,
        regions: &[RedistributorRegion],
    ) -> Result<GicV3, GicError> {
        if regions.len() > MAX_REDISTRIBUTOR_REGIONS {
            return Err(GicError::TooManyRedistributorRegions {
                count: regions.len(),
            });
        }
        // SAFETY: the caller's promise covers `new`'s contract.
        let mut gic = unsafe { GicV3::new(gicd_base, 0, 0) };
        gic.regions[..regions.len()].copy_from_slice(regions);
        gic.region_count = regions.len();
        Ok(gic)
    }

    fn gicd(&self) -> &GicdRegisters {
        // SAFETY: `new`'s contract: `gicd_base` is the mapped GICD frame,
        // which outlives `self`; registers are accessed volatile only.
        unsafe { &*(self.gicd_base as *const GicdRegisters) }
    }

    fn gicd_router(&self) -> &GicdRouterRegisters {
        // SAFETY: as `gicd`; the routing registers are inside the 64 KiB GICD frame.
        unsafe { &*((self.gicd_base + GICD_ROUTER_OFFSET) as *const GicdRouterRegisters) }
    }

    /// # Safety
    /// `base` is a redistributor frame inside one of `self.regions`.
    unsafe fn gicr(&self, base: usize) -> &GicrRegisters {
        // SAFETY: the caller's promise and `new`'s contract (the regions are mapped).
        unsafe { &*(base as *const GicrRegisters) }
    }

    /// The calling CPU's virtual interface control registers (ICH_*_EL2).
    pub fn virtual_interface(&self) -> crate::virt::v3::IchV3 {
        // SAFETY: `new`'s contract: EL2 on a GICv3 system, and the handle's
        // users run after `init_cpu` enabled the system-register interface.
        unsafe { crate::virt::v3::IchV3::new() }
    }

    /// Number of INTIDs (SGIs, PPIs, SPIs) the distributor implements.
    pub fn num_interrupts(&self) -> u32 {
        distributor::num_interrupts(self.gicd())
    }

    /// Finds the redistributor serving the PE with this MPIDR by walking
    /// every region's frames until GICR_TYPER.Last (IHI 0069, GICR_TYPER).
    /// Returns the frame's address.
    pub fn find_redistributor(&self, mpidr: u64) -> Result<usize, GicError> {
        let wanted = Affinity::from_mpidr(mpidr);
        for region in &self.regions[..self.region_count] {
            let end = region.base.saturating_add(region.size);
            let mut frame = region.base;
            while frame
                .checked_add(core::mem::size_of::<GicrRegisters>())
                .is_some_and(|frame_end| frame_end <= end)
            {
                // SAFETY: `frame` lies inside a region given to `new`.
                let gicr = unsafe { self.gicr(frame) };
                let arch_rev = gicr.rd.pidr2.read(PIDR2::ArchRev);
                if arch_rev != 3 && arch_rev != 4 {
                    return Err(GicError::NotARedistributor { address: frame });
                }
                let typer = gicr.rd.typer.extract();
                if gicr_typer_affinity(typer.get()) == wanted {
                    return Ok(frame);
                }
                if typer.is_set(GICR_TYPER::Last) {
                    break;
                }
                frame += redistributor_stride(typer);
            }
        }
        Err(GicError::RedistributorNotFound {
            mpidr: mpidr & MPIDR_AFFINITY_MASK,
        })
    }

    fn wait_for_distributor_writes(&self) -> Result<(), GicError> {
        let gicd = self.gicd();
        if poll_until(POLL_LIMIT, || !gicd.ctlr.is_set(GICD_CTLR::RWP)) {
            Ok(())
        } else {
            Err(GicError::DistributorWriteTimeout)
        }
    }

    fn wait_for_redistributor_writes(
        &self,
        gicr: &GicrRegisters,
        cpu: usize,
    ) -> Result<(), GicError> {
        if poll_until(POLL_LIMIT, || !gicr.rd.ctlr.is_set(GICR_CTLR::RWP)) {
            Ok(())
        } else {
            Err(GicError::RedistributorWriteTimeout { cpu })
        }
    }

    /// Disables the distributor, makes every SPI Non-secure Group 1,
    /// disabled, level-triggered, [`DEFAULT_PRIORITY`] and routed to the
    /// calling (boot) CPU, then enables it with affinity routing and both
    /// groups (as Linux: ARE | EnableGrp1A | EnableGrp1/Grp0, which is right
    /// for both the single-Security-state and the Non-secure view). Call
    /// once, on the boot CPU.
    pub fn init_distributor(&self) -> Result<(), GicError> {
        let gicd = self.gicd();
        gicd.ctlr.set(0);
        self.wait_for_distributor_writes()?;
        // ARE can only change while the groups are disabled.
        gicd.ctlr.write(GICD_CTLR::ARE::SET);
        self.wait_for_distributor_writes()?;

        distributor::reset_spis(gicd, true);
        let route = irouter_for_mpidr(sysreg::mpidr());
        let router = self.gicd_router();
        for intid in IntId::SPI_BASE as usize..self.num_interrupts() as usize {
            router.irouter[intid].set(route);
        }
        self.wait_for_distributor_writes()?;

        gicd.ctlr
            .write(GICD_CTLR::ARE::SET + GICD_CTLR::ENABLE_GRP1::SET + GICD_CTLR::ENABLE_GRP0::SET);
        self.wait_for_distributor_writes()
    }

    /// Brings up the calling CPU, which must be the one with `mpidr`:
    /// finds and wakes its redistributor (bounded wait on
    /// GICR_WAKER.ChildrenAsleep), makes its SGIs/PPIs Group 1 with
    /// [`DEFAULT_PRIORITY`], SGIs enabled and PPIs disabled; enables the
    /// system-register interface at EL2 (ICC_SRE_EL2.SRE | Enable), sets
    /// the priority mask to [`DEFAULT_PRIORITY_MASK`], split EOI
    /// (ICC_CTLR_EL1.EOImode = 1) and enables Group 1. Records `mpidr` for
    /// SGI targeting of logical CPU `cpu`.
    pub fn init_cpu(&self, cpu: usize, mpidr: u64) -> Result<(), GicError> {
        let affinity = mpidr & MPIDR_AFFINITY_MASK;
        if cpu >= MAX_CPUS {
            return Err(GicError::CpuIndexOutOfRange { cpu });
        }
        let calling = sysreg::mpidr() & MPIDR_AFFINITY_MASK;
        if calling != affinity {
            return Err(GicError::WrongCpu {
                cpu,
                mpidr: affinity,
                calling_mpidr: calling,
            });
        }
        if let Some(other) = self.cpu_with_mpidr(affinity)
            && other != cpu
        {
            return Err(GicError::DuplicateMpidr {
                cpu,
                mpidr: affinity,
            });
        }

        let frame = self.find_redistributor(affinity)?;
        // SAFETY: `find_redistributor` returned a frame inside a region.
        let gicr = unsafe { self.gicr(frame) };
        gicr.rd.waker.modify(GICR_WAKER::ProcessorSleep::CLEAR);
        if !poll_until(POLL_LIMIT, || {
            !gicr.rd.waker.is_set(GICR_WAKER::ChildrenAsleep)
        }) {
            return Err(GicError::RedistributorWakeTimeout { cpu });
        }

        // Nothing left active by firmware or an earlier boot, PPIs off until
        // a driver wants them, SGIs on for kicks.
        gicr.sgi.icactiver0.set(u32::MAX);
        gicr.sgi.icenabler0.set(0xFFFF_0000);
        self.wait_for_redistributor_writes(gicr, cpu)?;
        gicr.sgi.igroupr0.set(u32::MAX);
        gicr.sgi.igrpmodr0.set(0);
        for intid in 0..IntId::SPI_BASE as usize {
            gicr.sgi.ipriorityr[intid].set(DEFAULT_PRIORITY);
        }
        gicr.sgi.isenabler0.set(0x0000_FFFF);

        // SAFETY: EL2 on a GICv3 system (`new`'s contract); SRE_EL2 itself
        // is always accessible at EL2.
        if !unsafe { sysreg::enable_sre_el2() } {
            return Err(GicError::SystemRegisterInterfaceDisabled { cpu });
        }
        // SAFETY: the system-register interface was just enabled at EL2.
        let ctlr = unsafe { sysreg::read_icc_ctlr_el1() };
        let mut ctlr = LocalRegisterCopy::<u64, ICC_CTLR_EL1::Register>::new(ctlr);
        let aff0 = Affinity::from_mpidr(affinity).aff0;
        let range_selector =
            ctlr.is_set(ICC_CTLR_EL1::RSS) && self.gicd().typer.is_set(GICD_TYPER::RSS);
        if aff0 > 15 && !range_selector {
            return Err(GicError::AffinityNotTargetable { mpidr: affinity });
        }
        ctlr.modify(ICC_CTLR_EL1::EOImode::SET);
        // SAFETY: as above; these only configure this CPU's interface.
        unsafe {
            sysreg::write_icc_pmr_el1(DEFAULT_PRIORITY_MASK.into());
            sysreg::write_icc_bpr1_el1(0);
            sysreg::write_icc_ctlr_el1(ctlr.get());
            sysreg::write_icc_igrpen1_el1(1);
        }

        self.redistributors[cpu].store(frame, Ordering::Relaxed);
        self.mpidrs[cpu].store(affinity, Ordering::Release);
        Ok(())
    }

    fn cpu_with_mpidr(&self, affinity: u64) -> Option<usize> {
        self.mpidrs
            .iter()
            .position(|slot| slot.load(Ordering::Acquire) == affinity)
    }

    fn mpidr_of(&self, cpu: usize) -> Result<u64, GicError> {
        let slot = self
            .mpidrs
            .get(cpu)
            .ok_or(GicError::CpuIndexOutOfRange { cpu })?;
        match slot.load(Ordering::Acquire) {
            NO_MPIDR => Err(GicError::CpuNotInitialised { cpu }),
            mpidr => Ok(mpidr),
        }
    }

    /// The calling CPU's logical index and redistributor, as recorded by `init_cpu`.
    fn own_redistributor(&self) -> Result<(usize, &GicrRegisters), GicError> {
        let mpidr = sysreg::mpidr() & MPIDR_AFFINITY_MASK;
        let cpu = self
            .cpu_with_mpidr(mpidr)
            .ok_or(GicError::CallingCpuNotInitialised { mpidr })?;
        let frame = self.redistributors[cpu].load(Ordering::Relaxed);
        // SAFETY: recorded by `init_cpu` from `find_redistributor`.
        Ok((cpu, unsafe { self.gicr(frame) }))
    }

    fn check_implemented(&self, intid: IntId) -> Result<usize, GicError> {
        if intid.raw() < self.num_interrupts() {
            Ok(intid.index())
        } else {
            Err(GicError::UnsupportedIntId { intid: intid.raw() })
        }
    }

    /// Enables SPI `intid`, or SGI/PPI `intid` of the calling CPU.
    pub fn enable_interrupt(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        if intid.is_private() {
            self.own_redistributor()?.1.sgi.isenabler0.set(1 << index);
        } else {
            distributor::enable(self.gicd(), index);
        }
        Ok(())
    }

    /// Disables SPI `intid`, or SGI/PPI `intid` of the calling CPU, and
    /// waits (bounded) until the GIC reports the write complete.
    pub fn disable_interrupt(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        if intid.is_private() {
            let (cpu, gicr) = self.own_redistributor()?;
            gicr.sgi.icenabler0.set(1 << index);
            self.wait_for_redistributor_writes(gicr, cpu)
        } else {
            distributor::disable(self.gicd(), index);
            self.wait_for_distributor_writes()
        }
    }

    /// Sets or clears the active state of SPI `intid`, or of SGI/PPI
    /// `intid` of the calling CPU (GICR_ISACTIVER0 / GICR_ICACTIVER0 of its
    /// redistributor).
    pub fn set_active(&self, intid: IntId, active: bool) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        if intid.is_private() {
            let sgi = &self.own_redistributor()?.1.sgi;
            if active {
                sgi.isactiver0.set(1 << index);
            } else {
                sgi.icactiver0.set(1 << index);
            }
        } else {
            distributor::set_active(self.gicd(), index, active);
        }
        Ok(())
    }

    /// Whether SPI `intid`, or SGI/PPI `intid` of the calling CPU, is
    /// active (GICR_ISACTIVER0 of its redistributor, GICD_ISACTIVER).
    pub fn is_active(&self, intid: IntId) -> Result<bool, GicError> {
        let index = self.check_implemented(intid)?;
        if intid.is_private() {
            Ok(self.own_redistributor()?.1.sgi.isactiver0.get() & (1 << index) != 0)
        } else {
            Ok(distributor::is_active(self.gicd(), index))
        }
    }

    /// Clears the latched pending state of SPI `intid`, or of PPI `intid`
    /// of the calling CPU (GICR_ICPENDR0): an edge seen while nothing
    /// should take it. A level-sensitive line still asserted stays pending.
    pub fn clear_pending(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        if intid.is_private() {
            self.own_redistributor()?.1.sgi.icpendr0.set(1 << index);
        } else {
            distributor::clear_pending(self.gicd(), index);
        }
        Ok(())
    }

    /// Latches SPI `intid`, or SGI/PPI `intid` of the calling CPU, pending
    /// (GICR_ISPENDR0 of its redistributor, GICD_ISPENDR), as an edge would.
    pub fn set_pending(&self, intid: IntId) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        if intid.is_private() {
            self.own_redistributor()?.1.sgi.ispendr0.set(1 << index);
        } else {
            distributor::set_pending(self.gicd(), index);
        }
        Ok(())
    }

    /// Whether SPI `intid`, or SGI/PPI `intid` of the calling CPU, is
    /// pending (GICR_ISPENDR0 of its redistributor, GICD_ISPENDR): an edge
    /// latched and not yet acknowledged, or a level-sensitive line up.
    pub fn is_pending(&self, intid: IntId) -> Result<bool, GicError> {
        let index = self.check_implemented(intid)?;
        if intid.is_private() {
            Ok(self.own_redistributor()?.1.sgi.ispendr0.get() & (1 << index) != 0)
        } else {
            Ok(distributor::is_pending(self.gicd(), index))
        }
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
        if intid.is_private() {
            self.own_redistributor()?.1.sgi.ipriorityr[index].set(priority);
        } else {
            self.gicd().ipriorityr[index].set(priority);
        }
        Ok(())
    }

    /// Sets whether a PPI (of the calling CPU) or SPI is level- or
    /// edge-triggered. Configuration changes must be serialised by the
    /// caller (16 INTIDs share a register).
    pub fn set_trigger(&self, intid: IntId, trigger: Trigger) -> Result<(), GicError> {
        let index = self.check_implemented(intid)?;
        if index < IntId::SGI_COUNT as usize {
            return Err(GicError::UnsupportedIntId { intid: intid.raw() });
        }
        if intid.is_private() {
            let register = &self.own_redistributor()?.1.sgi.icfgr[1];
            register.set(distributor::icfgr_with_trigger(
                register.get(),
                index,
                trigger,
            ));
        } else {
            distributor::set_trigger(self.gicd(), index, trigger);
        }
        Ok(())
    }

    /// Whether a PPI (of the calling CPU) or SPI is level- or
    /// edge-triggered, as the GIC reports it (a PPI's configuration may be
    /// fixed by the implementation: read back after [`Self::set_trigger`]).
    pub fn trigger(&self, intid: IntId) -> Result<Trigger, GicError> {
        let index = self.check_implemented(intid)?;
        if index < IntId::SGI_COUNT as usize {
            return Ok(Trigger::Edge);
        }
        if intid.is_private() {
            let register = &self.own_redistributor()?.1.sgi.icfgr[1];
            Ok(distributor::trigger_in_icfgr(register.get(), index))
        } else {
            Ok(distributor::trigger(self.gicd(), index))
        }
    }

    /// Routes SPI `intid` to logical CPU `cpu` (GICD_IROUTER, IRM = 0).
    pub fn route_spi(&self, intid: IntId, cpu: usize) -> Result<(), GicError> {
        let index = distributor::check_spi(self.gicd(), intid)?;
        let mpidr = self.mpidr_of(cpu)?;
        self.gicd_router().irouter[index].set(irouter_for_mpidr(mpidr));
        Ok(())
    }

    /// Acknowledges the highest-priority pending Group 1 interrupt
    /// (ICC_IAR1_EL1); `None` for INTIDs 1020-1023 (spurious).
    pub fn acknowledge(&self) -> Option<Acknowledged> {
        // SAFETY: `new`'s contract: `init_cpu` enabled the interface on this CPU.
        let raw = unsafe { sysreg::read_icc_iar1_el1() };
        let raw = LocalRegisterCopy::<u64, ICC_IAR1_EL1::Register>::new(raw)
            .read(ICC_IAR1_EL1::INTID) as u32;
        let intid = IntId::new(raw).ok()?;
        Some(Acknowledged::new(intid, raw))
    }

    /// The highest-priority pending Group 1 interrupt, left pending
    /// (ICC_HPPIR1_EL1); `None` when there is none (INTID 1023).
    pub fn highest_pending(&self) -> Option<IntId> {
        // SAFETY: as in `acknowledge`.
        let raw = unsafe { sysreg::read_icc_hppir1_el1() };
        let raw = LocalRegisterCopy::<u64, ICC_IAR1_EL1::Register>::new(raw)
            .read(ICC_IAR1_EL1::INTID) as u32;
        IntId::new(raw).ok()
    }

    /// Priority drop and deactivation of an acknowledged interrupt.
    pub fn end_of_interrupt(&self, interrupt: Acknowledged) {
        self.priority_drop(interrupt);
        self.deactivate(interrupt);
    }

    /// Priority drop only (ICC_EOIR1_EL1 with EOImode = 1): the interrupt
    /// stays active until [`GicV3::deactivate`] or a guest's deactivation
    /// through a hardware list register.
    pub fn priority_drop(&self, interrupt: Acknowledged) {
        // SAFETY: as in `acknowledge`.
        unsafe { sysreg::write_icc_eoir1_el1(interrupt.raw().into()) };
    }

    /// Deactivates an interrupt whose priority was dropped (ICC_DIR_EL1).
    pub fn deactivate(&self, interrupt: Acknowledged) {
        // SAFETY: as in `acknowledge`.
        unsafe { sysreg::write_icc_dir_el1(interrupt.raw().into()) };
    }

    /// Sends SGI `sgi` with ICC_SGI1R_EL1: one write per group of targets
    /// sharing Aff3.Aff2.Aff1 (and Aff0 / 16). Every named CPU must have run
    /// [`GicV3::init_cpu`]; nothing is sent when one has not.
    pub fn send_sgi(&self, sgi: u8, target: SgiTarget<'_>) -> Result<(), GicError> {
        let sgi = check_sgi(sgi)?;
        if let SgiTarget::Cpu(cpu) = target {
            // One CPU (a nudge, a kick): one write, no grouping.
            send_one_sgi1r(sgi1r_for_one(sgi, self.mpidr_of(cpu)?));
            return Ok(());
        }
        let Some(cpus) = target.cpus() else {
            send_one_sgi1r(sgi1r_all_but_self(sgi));
            return Ok(());
        };
        for cpu in cpus.clone() {
            self.mpidr_of(cpu)?;
        }
        sysreg::barrier_before_sgi();
        let mpidrs = cpus.filter_map(|cpu| self.mpidr_of(cpu).ok());
        for_each_sgi1r(sgi, mpidrs, |value| {
            // SAFETY: as in `acknowledge`.
            unsafe { sysreg::write_icc_sgi1r_el1(value) }
        });
        sysreg::isb();
        Ok(())
    }
}

/// Sends the SGI that the ICC_SGI1R_EL1 value `value` names, ordered after
/// the caller's earlier memory accesses.
fn send_one_sgi1r(value: u64) {
    sysreg::barrier_before_sgi();
    // SAFETY: as in `GicV3::acknowledge`.
    unsafe { sysreg::write_icc_sgi1r_el1(value) };
    sysreg::isb();
}

/// Distance to the next redistributor: two 64 KiB frames, four when the
/// redistributor supports virtual LPIs (GICv4, GICR_TYPER.VLPIS).
fn redistributor_stride(typer: LocalRegisterCopy<u64, GICR_TYPER::Register>) -> usize {
    if typer.is_set(GICR_TYPER::VLPIS) {
        GICR_FRAME_STRIDE_V4
    } else {
        GICR_FRAME_STRIDE_V3
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysreg::{self, lock};
    use crate::testing::FakeMmio;
    use core::sync::atomic::Ordering::SeqCst;

    // Offsets from IHI 0069's register maps, independent of the structs.
    const GICD_CTLR_OFFSET: usize = 0x0000;
    const GICD_TYPER_OFFSET: usize = 0x0004;
    const GICD_IGROUPR: usize = 0x0080;
    const GICD_ISENABLER: usize = 0x0100;
    const GICD_IPRIORITYR: usize = 0x0400;
    const GICD_IROUTER: usize = 0x6000;
    const GICR_TYPER_OFFSET: usize = 0x0008;
    const GICR_WAKER_OFFSET: usize = 0x0014;
    const GICR_PIDR2: usize = 0xFFE8;
    const GICR_IGROUPR0: usize = 0x1_0080;
    const GICR_ISENABLER0: usize = 0x1_0100;
    const GICR_ICENABLER0: usize = 0x1_0180;
    const GICR_ISACTIVER0: usize = 0x1_0300;
    const GICR_ICACTIVER0: usize = 0x1_0380;
    const GICR_IPRIORITYR: usize = 0x1_0400;

    /// GICR_WAKER with ProcessorSleep set and ChildrenAsleep already clear,
    /// so a wake succeeds on memory that cannot change by itself.
    const WAKER_WAKES: u32 = 0b010;
    /// GICR_WAKER whose ChildrenAsleep never clears.
    const WAKER_STUCK: u32 = 0b110;

    /// A redistributor region holding one frame per entry of `mpidrs`
    /// (the last one flagged Last), with `spare` unused bytes after it.
    fn gicr_region(mpidrs: &[u64], vlpis: bool, spare: usize) -> (FakeMmio, RedistributorRegion) {
        let stride = if vlpis { 0x4_0000 } else { 0x2_0000 };
        let size = mpidrs.len() * stride + spare;
        let mem = FakeMmio::new(size);
        for (index, &mpidr) in mpidrs.iter().enumerate() {
            let frame = index * stride;
            let last = u64::from(index + 1 == mpidrs.len());
            let affinity = u64::from(Affinity::from_mpidr(mpidr).to_packed32());
            let typer = affinity << 32 | (index as u64) << 8 | last << 4 | u64::from(vlpis) << 1;
            mem.write64(frame + GICR_TYPER_OFFSET, typer);
            mem.write32(frame + GICR_PIDR2, if vlpis { 0x4B } else { 0x3B });
            mem.write32(frame + GICR_WAKER_OFFSET, WAKER_WAKES);
        }
        let region = RedistributorRegion {
            base: mem.base(),
            size,
        };
        (mem, region)
    }

    /// A fake distributor with 96 INTIDs.
    fn gicd() -> FakeMmio {
        let mem = FakeMmio::new(0x1_0000);
        mem.write32(GICD_TYPER_OFFSET, 2);
        mem
    }

    fn gic(gicd: &FakeMmio, regions: &[RedistributorRegion]) -> GicV3 {
        // SAFETY: the fake frames outlive the driver in every test.
        unsafe { GicV3::with_regions(gicd.base(), regions) }.unwrap()
    }

    /// Runs `init_cpu` as the CPU with `mpidr` (MPIDR_EL1 has bit 31 set).
    fn init_as(gic: &GicV3, cpu: usize, mpidr: u64) -> Result<(), GicError> {
        sysreg::MPIDR.store(0x8000_0000 | mpidr, SeqCst);
        gic.init_cpu(cpu, mpidr)
    }

    #[test]
    fn spi_pending_reads_the_distributor_bit() {
        let (_mem, region) = gicr_region(&[0], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        let rtc = IntId::new(34).unwrap();
        assert_eq!(gic.spi_pending(rtc), Ok(false));
        // GICD_ISPENDR1, bit 2: INTID 34's line is up.
        gicd.write32(0x204, 1 << 2);
        assert_eq!(gic.spi_pending(rtc), Ok(true));
        assert_eq!(gic.spi_pending(IntId::new(35).unwrap()), Ok(false));
        // Private and unimplemented INTIDs are no SPIs.
        assert!(gic.spi_pending(IntId::new(27).unwrap()).is_err());
        assert!(gic.spi_pending(IntId::new(96).unwrap()).is_err());
    }

    #[test]
    fn spi_pending_clears_and_trigger_reads_back() {
        let (_mem, region) = gicr_region(&[0], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        let rtc = IntId::new(34).unwrap();
        gic.clear_pending(rtc).unwrap();
        // GICD_ICPENDR1, bit 2: a write-one-to-clear of INTID 34 alone.
        assert_eq!(gicd.read32(0x284), 1 << 2);
        assert_eq!(gic.is_active(rtc), Ok(false));
        // GICD_ISACTIVER1, bit 2.
        gicd.write32(0x304, 1 << 2);
        assert_eq!(gic.is_active(rtc), Ok(true));
        assert_eq!(gic.trigger(rtc), Ok(Trigger::Level));
        gic.set_trigger(rtc, Trigger::Edge).unwrap();
        assert_eq!(gic.trigger(rtc), Ok(Trigger::Edge));
        // GICD_ICFGR2 (INTIDs 32-47): INTID 34's edge bit is bit 5.
        assert_eq!(gicd.read32(0xC08), 1 << 5);
        gic.set_trigger(rtc, Trigger::Level).unwrap();
        assert_eq!(gic.trigger(rtc), Ok(Trigger::Level));
    }

    #[test]
    fn finds_redistributors_of_qemu_virt() {
        let (mem, region) = gicr_region(&[0, 1, 2, 3], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        for cpu in 0..4 {
            assert_eq!(
                gic.find_redistributor(0x8000_0000 | cpu as u64),
                Ok(mem.base() + cpu * 0x2_0000)
            );
        }
        assert_eq!(
            gic.find_redistributor(4),
            Err(GicError::RedistributorNotFound { mpidr: 4 })
        );
    }

    #[test]
    fn walk_stops_at_last_and_at_region_end() {
        // A frame after the one flagged Last is not a redistributor of this region.
        let (mem, region) = gicr_region(&[0, 1], false, 0x2_0000);
        mem.write64(2 * 0x2_0000 + GICR_TYPER_OFFSET, 9 << 32);
        mem.write32(2 * 0x2_0000 + GICR_PIDR2, 0x3B);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        assert_eq!(
            gic.find_redistributor(9),
            Err(GicError::RedistributorNotFound { mpidr: 9 })
        );
        // A region too small to hold a frame is never read.
        let tiny = RedistributorRegion {
            base: mem.base(),
            size: 0x1_0000,
        };
        let gic = super::tests::gic(&gicd, &[tiny]);
        assert_eq!(
            gic.find_redistributor(0),
            Err(GicError::RedistributorNotFound { mpidr: 0 })
        );
    }

    #[test]
    fn gicv4_redistributors_are_four_frames_apart() {
        let (mem, region) = gicr_region(&[0x000, 0x100, 0x200], true, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        assert_eq!(gic.find_redistributor(0x200), Ok(mem.base() + 2 * 0x4_0000));
    }

    #[test]
    fn altra_two_socket_regions() {
        // Altra: Aff2 = cluster, Aff1 = core; socket 1 in Aff3, in its own region.
        let (socket0, region0) = gicr_region(&[0x08_0000, 0x08_0100, 0x27_0100], false, 0);
        let (socket1, region1) = gicr_region(&[0x01_0008_0000, 0x01_0008_0100], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region0, region1]);
        assert_eq!(
            gic.find_redistributor(0x27_0100),
            Ok(socket0.base() + 0x4_0000)
        );
        assert_eq!(
            gic.find_redistributor(0x8000_0000 | 0x01_0008_0100),
            Ok(socket1.base() + 0x2_0000)
        );
        assert_eq!(
            gic.find_redistributor(0x02_0008_0000),
            Err(GicError::RedistributorNotFound {
                mpidr: 0x02_0008_0000
            })
        );
    }

    #[test]
    fn rejects_frames_that_are_not_redistributors() {
        let (mem, region) = gicr_region(&[0, 1], false, 0);
        mem.write32(0x2_0000 + GICR_PIDR2, 0x2B);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        assert_eq!(gic.find_redistributor(0), Ok(mem.base()));
        assert_eq!(
            gic.find_redistributor(1),
            Err(GicError::NotARedistributor {
                address: mem.base() + 0x2_0000
            })
        );
        let too_many = [region; MAX_REDISTRIBUTOR_REGIONS + 1];
        // SAFETY: rejected before any access.
        let result = unsafe { GicV3::with_regions(gicd.base(), &too_many) };
        assert_eq!(
            result.err(),
            Some(GicError::TooManyRedistributorRegions { count: 9 })
        );
    }

    #[test]
    fn init_distributor_routes_spis_to_boot_cpu() {
        let _model = lock();
        sysreg::MPIDR.store(0x8000_0100, SeqCst);
        let gicd = gicd();
        let (_mem, region) = gicr_region(&[0x100], false, 0);
        let gic = gic(&gicd, &[region]);
        gic.init_distributor().unwrap();
        // ARE (bit 4) | EnableGrp1A (bit 1) | EnableGrp1/Grp0 (bit 0).
        assert_eq!(gicd.read32(GICD_CTLR_OFFSET), 0x13);
        assert_eq!(gicd.read32(GICD_IGROUPR + 4), u32::MAX);
        assert_eq!(gicd.read32(GICD_IGROUPR + 8), u32::MAX);
        assert_eq!(gicd.read32(GICD_IGROUPR + 12), 0);
        assert_eq!(gicd.read8(GICD_IPRIORITYR + 95), DEFAULT_PRIORITY);
        assert_eq!(gicd.read64(GICD_IROUTER + 8 * 32), 0x100);
        assert_eq!(gicd.read64(GICD_IROUTER + 8 * 95), 0x100);
        assert_eq!(gicd.read64(GICD_IROUTER + 8 * 96), 0);
    }

    #[test]
    fn distributor_write_pending_times_out() {
        let _model = lock();
        let gicd = gicd();
        let (_mem, region) = gicr_region(&[0], false, 0);
        let gic = gic(&gicd, &[region]);
        // RWP stuck at 1, as on a GIC that never finishes a write.
        gicd.write32(GICD_CTLR_OFFSET, 1 << 31);
        assert_eq!(
            gic.wait_for_distributor_writes(),
            Err(GicError::DistributorWriteTimeout)
        );
    }

    #[test]
    fn init_cpu_wakes_redistributor_and_enables_interface() {
        let _model = lock();
        let (mem, region) = gicr_region(&[0, 1], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        init_as(&gic, 1, 1).unwrap();
        let frame = 0x2_0000;
        assert_eq!(mem.read32(frame + GICR_WAKER_OFFSET), 0);
        assert_eq!(mem.read32(frame + GICR_ICENABLER0), 0xFFFF_0000);
        assert_eq!(mem.read32(frame + GICR_ISENABLER0), 0x0000_FFFF);
        assert_eq!(mem.read32(frame + GICR_IGROUPR0), u32::MAX);
        assert_eq!(mem.read8(frame + GICR_IPRIORITYR + 30), DEFAULT_PRIORITY);
        // CPU 0's redistributor is untouched.
        assert_eq!(mem.read32(GICR_WAKER_OFFSET), WAKER_WAKES);
        assert_eq!(sysreg::ICC_SRE_EL2.load(SeqCst), 0b1001);
        assert_eq!(sysreg::ICC_PMR_EL1.load(SeqCst), 0xF0);
        assert_eq!(sysreg::ICC_IGRPEN1_EL1.load(SeqCst), 1);
        assert_eq!(sysreg::ICC_CTLR_EL1.load(SeqCst) & 0b10, 0b10);
        assert_eq!(gic.mpidr_of(1), Ok(1));
        assert_eq!(gic.mpidr_of(0), Err(GicError::CpuNotInitialised { cpu: 0 }));
    }

    #[test]
    fn init_cpu_errors() {
        let _model = lock();
        let (mem, region) = gicr_region(&[0, 1, 0x10], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);

        sysreg::MPIDR.store(0x8000_0000, SeqCst);
        assert_eq!(
            gic.init_cpu(1, 1),
            Err(GicError::WrongCpu {
                cpu: 1,
                mpidr: 1,
                calling_mpidr: 0
            })
        );
        assert_eq!(
            gic.init_cpu(MAX_CPUS, 0),
            Err(GicError::CpuIndexOutOfRange { cpu: MAX_CPUS })
        );
        assert_eq!(
            init_as(&gic, 3, 7),
            Err(GicError::RedistributorNotFound { mpidr: 7 })
        );

        mem.write32(GICR_WAKER_OFFSET, WAKER_STUCK);
        assert_eq!(
            init_as(&gic, 0, 0),
            Err(GicError::RedistributorWakeTimeout { cpu: 0 })
        );
        mem.write32(GICR_WAKER_OFFSET, WAKER_WAKES);

        sysreg::SRE_ALLOWED.store(false, SeqCst);
        assert_eq!(
            init_as(&gic, 0, 0),
            Err(GicError::SystemRegisterInterfaceDisabled { cpu: 0 })
        );
        sysreg::SRE_ALLOWED.store(true, SeqCst);

        // Aff0 = 16 needs the SGI range selector in both CPU interface and GICD.
        assert_eq!(
            init_as(&gic, 2, 0x10),
            Err(GicError::AffinityNotTargetable { mpidr: 0x10 })
        );
        sysreg::ICC_CTLR_EL1.store(1 << 18, SeqCst);
        gicd.write32(GICD_TYPER_OFFSET, 2 | 1 << 26);
        init_as(&gic, 2, 0x10).unwrap();

        init_as(&gic, 0, 0).unwrap();
        assert_eq!(
            init_as(&gic, 1, 0),
            Err(GicError::DuplicateMpidr { cpu: 1, mpidr: 0 })
        );
        // Bringing the same CPU up again is fine.
        init_as(&gic, 0, 0).unwrap();
    }

    #[test]
    fn ppi_pending_reads_the_calling_cpus_redistributor() {
        let _model = lock();
        let (mem, region) = gicr_region(&[0, 1], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        init_as(&gic, 1, 1).unwrap();
        let vtimer = IntId::new(27).unwrap();
        assert_eq!(gic.is_pending(vtimer), Ok(false));
        // CPU 0's SGI frame (GICR_ISPENDR0 at 0x1_0200): not the caller's.
        mem.write32(0x1_0200, 1 << 27);
        assert_eq!(gic.is_pending(vtimer), Ok(false));
        // CPU 1's frame, one 128 KiB stride on.
        mem.write32(0x2_0000 + 0x1_0200, 1 << 27);
        assert_eq!(gic.is_pending(vtimer), Ok(true));
        assert_eq!(gic.is_pending(IntId::new(26).unwrap()), Ok(false));
        // Latching one writes the caller's GICR_ISPENDR0 alone.
        mem.write32(0x2_0000 + 0x1_0200, 0);
        gic.set_pending(IntId::new(30).unwrap()).unwrap();
        assert_eq!(mem.read32(0x2_0000 + 0x1_0200), 1 << 30);
        assert_eq!(mem.read32(0x1_0200), 1 << 27);
    }

    #[test]
    fn sgis_group_targets_by_affinity() {
        let _model = lock();
        let mpidrs = [0x08_0000, 0x08_0100, 0x10_0000, 0x10_0100];
        let (_mem, region) = gicr_region(&mpidrs, false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        for (cpu, &mpidr) in mpidrs.iter().enumerate() {
            init_as(&gic, cpu, mpidr).unwrap();
        }
        sysreg::reset_sgi_log();
        gic.send_sgi(1, SgiTarget::List(&[0, 1, 3])).unwrap();
        assert_eq!(
            sysreg::sgi1r_writes(),
            [
                0x0000_0008_0100_0001,
                0x0000_0008_0101_0001,
                0x0000_0010_0101_0001
            ]
        );
        sysreg::reset_sgi_log();
        gic.send_sgi(2, SgiTarget::Bitmap(&[0b0100])).unwrap();
        assert_eq!(sysreg::sgi1r_writes(), [0x0000_0010_0200_0001]);
        sysreg::reset_sgi_log();
        gic.send_sgi(1, SgiTarget::AllButSelf).unwrap();
        assert_eq!(sysreg::sgi1r_writes(), [0x0000_0100_0100_0000]);

        sysreg::reset_sgi_log();
        assert_eq!(
            gic.send_sgi(1, SgiTarget::List(&[0, 4])),
            Err(GicError::CpuNotInitialised { cpu: 4 })
        );
        assert_eq!(
            gic.send_sgi(1, SgiTarget::Cpu(MAX_CPUS)),
            Err(GicError::CpuIndexOutOfRange { cpu: MAX_CPUS })
        );
        assert_eq!(
            gic.send_sgi(16, SgiTarget::Cpu(0)),
            Err(GicError::InvalidSgi { sgi: 16 })
        );
        assert!(sysreg::sgi1r_writes().is_empty());
    }

    #[test]
    fn sgis_on_qemu_virt_share_one_write() {
        let _model = lock();
        let mpidrs: Vec<u64> = (0..8).collect();
        let (_mem, region) = gicr_region(&mpidrs, false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        for (cpu, &mpidr) in mpidrs.iter().enumerate() {
            init_as(&gic, cpu, mpidr).unwrap();
        }
        sysreg::reset_sgi_log();
        gic.send_sgi(0, SgiTarget::List(&[1, 2, 3, 5])).unwrap();
        assert_eq!(sysreg::sgi1r_writes(), [0x2E]);
    }

    #[test]
    fn private_interrupts_go_to_the_calling_cpus_redistributor() {
        let _model = lock();
        let (mem, region) = gicr_region(&[0x000, 0x100], false, 0);
        let gicd = gicd();
        let gic = gic(&gicd, &[region]);
        let timer = IntId::ppi(14).unwrap();

        sysreg::MPIDR.store(0x8000_0100, SeqCst);
        assert_eq!(
            gic.enable_interrupt(timer),
            Err(GicError::CallingCpuNotInitialised { mpidr: 0x100 })
        );
        init_as(&gic, 1, 0x100).unwrap();
        gic.enable_interrupt(timer).unwrap();
        assert_eq!(mem.read32(0x2_0000 + GICR_ISENABLER0), 1 << 30);
        gic.disable_interrupt(timer).unwrap();
        assert_eq!(mem.read32(0x2_0000 + GICR_ICENABLER0), 1 << 30);
        gic.set_active(timer, true).unwrap();
        assert_eq!(mem.read32(0x2_0000 + GICR_ISACTIVER0), 1 << 30);
        gic.set_active(timer, false).unwrap();
        assert_eq!(mem.read32(0x2_0000 + GICR_ICACTIVER0), 1 << 30);
        gic.set_priority(timer, 0x20).unwrap();
        assert_eq!(mem.read8(0x2_0000 + GICR_IPRIORITYR + 30), 0x20);
        gic.set_trigger(timer, Trigger::Edge).unwrap();
        assert_eq!(mem.read32(0x2_0000 + 0x1_0C04), 1 << 29);

        let uart = IntId::spi(1).unwrap();
        gic.enable_interrupt(uart).unwrap();
        assert_eq!(gicd.read32(GICD_ISENABLER + 4), 1 << 1);
        gic.route_spi(uart, 1).unwrap();
        assert_eq!(gicd.read64(GICD_IROUTER + 8 * 33), 0x100);
        assert_eq!(
            gic.route_spi(uart, 0),
            Err(GicError::CpuNotInitialised { cpu: 0 })
        );
        assert_eq!(
            gic.enable_interrupt(IntId::new(8192).unwrap()),
            Err(GicError::UnsupportedIntId { intid: 8192 })
        );
    }

    #[test]
    fn acknowledge_and_split_eoi() {
        let _model = lock();
        let gicd = gicd();
        let (_mem, region) = gicr_region(&[0], false, 0);
        let gic = gic(&gicd, &[region]);
        sysreg::ICC_IAR1_EL1.store(27, SeqCst);
        let ack = gic.acknowledge().unwrap();
        assert_eq!(ack.intid(), IntId::ppi(11).unwrap());
        gic.priority_drop(ack);
        assert_eq!(sysreg::ICC_EOIR1_EL1.load(SeqCst), 27);
        assert_eq!(sysreg::ICC_DIR_EL1.load(SeqCst), u64::MAX);
        gic.deactivate(ack);
        assert_eq!(sysreg::ICC_DIR_EL1.load(SeqCst), 27);
        // Nothing pending: the model returns 1023.
        assert_eq!(gic.acknowledge(), None);
    }

    #[test]
    fn highest_pending_looks_without_acknowledging() {
        let _model = lock();
        let gicd = gicd();
        let (_mem, region) = gicr_region(&[0], false, 0);
        let gic = gic(&gicd, &[region]);
        assert_eq!(gic.highest_pending(), None);
        sysreg::ICC_IAR1_EL1.store(3, SeqCst);
        assert_eq!(gic.highest_pending(), IntId::sgi(3).ok());
        assert_eq!(gic.highest_pending(), IntId::sgi(3).ok(), "still pending");
        assert_eq!(gic.acknowledge().map(|a| a.intid()), IntId::sgi(3).ok());
        assert_eq!(gic.highest_pending(), None);
    }
}
