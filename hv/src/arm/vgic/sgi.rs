//! Virtual SGIs between a domain's vCPUs, and the affinity (MPIDR) each
//! vCPU is given.

use gic::affinity::Affinity;
use gic::registers::{GICD_SGIR, ICC_SGI1R_EL1};

use super::{GuestGicVersion, VcpuMask, Vgic, VgicError};

/// vCPUs per Aff1 group: one ICC_SGI1R_EL1 target list (16 bits) covers a
/// group, so the guest needs no range selector (GICD_TYPER.RSS = 0).
const VCPUS_PER_AFF1: usize = 16;

/// MPIDR_EL1 bit 31 is RES1.
const MPIDR_RES1: u64 = 1 << 31;

/// The affinity vCPU `vcpu` has: Aff0 = `vcpu % 16`, Aff1 = `vcpu / 16`,
/// Aff2 = Aff3 = 0. The layout is independent of the physical topology
/// and of sched units, so a vCPU keeps its identity wherever it runs (and
/// SGI targets, GICR_TYPER and IROUTER agree on it).
pub const fn vcpu_affinity(vcpu: usize) -> Affinity {
    Affinity {
        aff0: (vcpu % VCPUS_PER_AFF1) as u8,
        aff1: (vcpu / VCPUS_PER_AFF1) as u8,
        aff2: 0,
        aff3: 0,
    }
}

/// The value to load into VMPIDR_EL2 for vCPU `vcpu` (what the guest
/// reads as MPIDR_EL1): [`vcpu_affinity`] plus the RES1 bit 31 (U = 0,
/// MT = 0). Device trees and PSCI CPU_ON use the affinity bits.
pub const fn vcpu_mpidr(vcpu: usize) -> u64 {
    vcpu_affinity(vcpu).to_mpidr() | MPIDR_RES1
}

/// The vCPU with affinity `affinity` in a domain of `num_vcpus`, if any
/// (inverse of [`vcpu_affinity`]).
pub const fn vcpu_from_affinity(affinity: Affinity, num_vcpus: usize) -> Option<usize> {
    if affinity.aff3 != 0 || affinity.aff2 != 0 || affinity.aff0 as usize >= VCPUS_PER_AFF1 {
        return None;
    }
    let vcpu = affinity.aff1 as usize * VCPUS_PER_AFF1 + affinity.aff0 as usize;
    if vcpu < num_vcpus { Some(vcpu) } else { None }
}

/// Outcome of a virtual SGI.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SgiDelivery {
    /// The SGI number (0-15).
    pub sgi: u8,
    /// Every vCPU the SGI was made pending on.
    pub targets: VcpuMask,
    /// The targets that must be kicked (see [`Vgic::inject`]); a target
    /// whose SGI is disabled or was already pending is not in it.
    pub kick: VcpuMask,
}

impl Vgic {
    /// A GICv3 guest wrote `value` to ICC_SGI1R_EL1 (trapped: with
    /// HCR_EL2.IMO set, SGI generation registers always trap to EL2).
    /// Decodes the target list, Aff3.Aff2.Aff1, RS and IRM (IRM = 1: every
    /// vCPU but the sender) and makes the SGI pending on each target.
    /// Targets naming no vCPU are ignored, as the GIC ignores PEs that
    /// do not exist.
    pub fn send_sgi(&mut self, from_vcpu: usize, value: u64) -> Result<SgiDelivery, VgicError> {
        self.check_vcpu(from_vcpu)?;
        if self.config.version != GuestGicVersion::V3 {
            return Err(VgicError::WrongVersion {
                version: self.config.version,
            });
        }
        let sgi = ICC_SGI1R_EL1::INTID.read(value) as u8;
        let mut delivery = SgiDelivery {
            sgi,
            targets: VcpuMask::EMPTY,
            kick: VcpuMask::EMPTY,
        };
        if ICC_SGI1R_EL1::IRM.is_set(value) {
            for vcpu in (0..self.vcpus.len()).filter(|v| *v != from_vcpu) {
                self.deliver_sgi(vcpu, &mut delivery)?;
            }
        } else {
            let mut list = ICC_SGI1R_EL1::TargetList.read(value);
            let range = ICC_SGI1R_EL1::RS.read(value) as usize * 16;
            let mut affinity = Affinity {
                aff0: 0,
                aff1: ICC_SGI1R_EL1::Aff1.read(value) as u8,
                aff2: ICC_SGI1R_EL1::Aff2.read(value) as u8,
                aff3: ICC_SGI1R_EL1::Aff3.read(value) as u8,
            };
            // The set bits only: an IPI names one target most of the time.
            while list != 0 {
                let bit = list.trailing_zeros() as usize;
                list &= list - 1;
                let Ok(aff0) = u8::try_from(range + bit) else {
                    continue;
                };
                affinity.aff0 = aff0;
                if let Some(vcpu) = vcpu_from_affinity(affinity, self.vcpus.len()) {
                    self.deliver_sgi(vcpu, &mut delivery)?;
                }
            }
        }
        Ok(delivery)
    }

    /// Makes `delivery`'s SGI pending on `vcpu` and records it there, as
    /// it goes (no second walk over the targets).
    fn deliver_sgi(&mut self, vcpu: usize, delivery: &mut SgiDelivery) -> Result<(), VgicError> {
        delivery.targets.insert(vcpu);
        if let Some(target) = self.inject(vcpu, delivery.sgi.into())? {
            delivery.kick.insert(target);
        }
        Ok(())
    }

    /// A GICv2 guest wrote `value` to GICD_SGIR (IHI 0048B §4.3.15): the
    /// target list filter picks a CPU-interface mask (vCPU n = interface
    /// n), everyone but the sender, or the sender; the reserved filter
    /// value sends nothing. The sender is recorded as the SGI's source.
    pub(super) fn send_sgi_v2(&mut self, from_vcpu: usize, value: u32) -> SgiDelivery {
        let sgi = GICD_SGIR::SGIINTID.read(value) as u8;
        let all = VcpuMask((1u128 << self.vcpus.len()) - 1);
        let targets = match GICD_SGIR::TargetListFilter.read(value) {
            0 => VcpuMask(u128::from(GICD_SGIR::CPUTargetList.read(value)) & all.0),
            1 => VcpuMask(all.0 & !VcpuMask::single(from_vcpu).0),
            2 => VcpuMask::single(from_vcpu),
            _ => VcpuMask::EMPTY,
        };
        let mut kick = VcpuMask::EMPTY;
        for vcpu in targets.iter() {
            if let Some(target) = self.inject_sgi_v2(vcpu, sgi.into(), from_vcpu) {
                kick.insert(target);
            }
        }
        SgiDelivery { sgi, targets, kick }
    }
}
