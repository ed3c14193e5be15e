//! List-register management: `flush` puts a vCPU's most urgent interrupts
//! into its list registers before it runs, `sync` folds what the guest did
//! with them back into the interrupt state after it ran.

use gic::{ListRegister, ListRegisterState, VirtualInterruptSource};

use super::irq::Irq;
use super::{GuestGicVersion, MAX_LIST_REGISTERS, VcpuInterfaceState, Vgic, VgicError};

/// ICH_HCR_EL2.UIE / GICH_HCR.UIE (bit 1 in both): maintenance interrupt
/// when at most one list register holds a valid interrupt.
pub(super) const HCR_UNDERFLOW_INTERRUPT: u64 = 1 << 1;
/// ICH_HCR_EL2.En / GICH_HCR.En: the virtual CPU interface is on.
pub(super) const HCR_ENABLE: u64 = 1;

/// What a flush did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlushSummary {
    /// List registers filled (the first `listed` of the slice).
    pub listed: usize,
    /// More interrupts wait than there were list registers: the
    /// underflow maintenance interrupt must be on (HCR.UIE), so the
    /// hypervisor gets control back once the guest has drained the list
    /// registers, and syncs and flushes again.
    pub overflow: bool,
}

/// Ordering of flush candidates, smaller first: interrupts already active
/// (they must be in a list register for the guest's deactivation to find
/// them), then by priority, then oldest pending first, so equal-priority
/// interrupts take turns instead of the lowest INTID starving the others.
type CandidateKey = (bool, u8, core::cmp::Reverse<u32>);

/// What ranks a flush's candidates, taken from the vGIC once per scan.
#[derive(Clone, Copy)]
struct CandidateRanking {
    enable_grp0: bool,
    enable_grp1: bool,
    pending_sequence: u32,
}

impl CandidateRanking {
    /// `irq`'s key, if it is a candidate: not listed, and active or
    /// deliverable ([`Vgic::deliverable`]).
    fn key(self, irq: &Irq) -> Option<CandidateKey> {
        if irq.quiet() || irq.listed.is_some() {
            return None;
        }
        let pending = irq.deliverable_with(self.enable_grp0, self.enable_grp1);
        if !pending && !irq.active {
            return None;
        }
        let age = self.pending_sequence.wrapping_sub(irq.sequence);
        Some((!irq.active, irq.priority, core::cmp::Reverse(age)))
    }
}

/// The best candidate met so far in a scan, and how many there were.
#[derive(Default)]
struct BestCandidate {
    best: Option<(u32, CandidateKey)>,
    count: usize,
}

impl BestCandidate {
    fn consider(&mut self, intid: u32, key: CandidateKey) {
        self.count += 1;
        // Strictly better only: the first of equal keys stays.
        if self.best.is_none_or(|(_, best_key)| key < best_key) {
            self.best = Some((intid, key));
        }
    }
}

impl Vgic {
    fn ranking(&self) -> CandidateRanking {
        CandidateRanking {
            enable_grp0: self.enable_grp0,
            enable_grp1: self.enable_grp1,
            pending_sequence: self.pending_sequence,
        }
    }

    /// The best unlisted candidate for `vcpu` (the first of equal keys in
    /// [`Vgic::for_each_candidate`]'s order) and how many candidates there
    /// are in all: the reference [`Vgic::scan_candidates`] must agree with
    /// (tests).
    #[cfg(test)]
    pub(super) fn best_candidate(&self, vcpu: usize) -> (Option<u32>, usize) {
        let mut best = BestCandidate::default();
        self.for_each_candidate(vcpu, |intid, key| best.consider(intid, key));
        (best.best.map(|(intid, _)| intid), best.count)
    }

    /// [`Vgic::best_candidate`] in the same pass that forgets the touched
    /// marks of the interrupts found quiet (they stay quiet until
    /// `irq_mut` marks them again): one walk of the marks before every
    /// entry that may list something, not two. Most flushes that list
    /// anything list one interrupt (a timer tick, an IPI): this settles
    /// them without ranking.
    fn scan_candidates(&mut self, vcpu: usize) -> (Option<u32>, usize) {
        let ranking = self.ranking();
        let mut best = BestCandidate::default();
        let state = &mut self.vcpus[vcpu];
        let mut bits = state.private_touched;
        while bits != 0 {
            let intid = bits.trailing_zeros();
            bits &= bits - 1;
            let irq = &state.private[intid as usize];
            if irq.quiet() {
                state.private_touched &= !(1 << intid);
            } else if let Some(key) = ranking.key(irq) {
                best.consider(intid, key);
            }
        }
        for (word_index, word) in self.spis_touched.iter_mut().enumerate() {
            let mut bits = *word;
            while bits != 0 {
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                let index = word_index * 64 + bit;
                let Some(irq) = self.spis.get(index).filter(|irq| !irq.quiet()) else {
                    *word &= !(1 << bit);
                    continue;
                };
                if irq.target == Some(vcpu as u16)
                    && let Some(key) = ranking.key(irq)
                {
                    best.consider(index as u32 + 32, key);
                }
            }
        }
        (best.best.map(|(intid, _)| intid), best.count)
    }

    /// Calls `f` with (INTID, key) of every unlisted candidate of `vcpu`:
    /// its SGIs and PPIs, then the SPIs routed to it, by INTID.
    fn for_each_candidate(&self, vcpu: usize, mut f: impl FnMut(u32, CandidateKey)) {
        // Only interrupts that may not be quiet: a quiet one is never a
        // candidate.
        let ranking = self.ranking();
        self.for_each_touched(vcpu, |intid, irq| {
            if (intid < 32 || irq.target == Some(vcpu as u16))
                && let Some(key) = ranking.key(irq)
            {
                f(intid, key);
            }
        });
    }

    /// `vcpu`'s `limit` best unlisted candidates in flush order (best key
    /// first; equal keys in [`Vgic::for_each_candidate`]'s order, as
    /// repeatedly taking the best would list them), how many it put in
    /// `ranked`. One pass over the interrupts.
    fn ranked_candidates(
        &self,
        vcpu: usize,
        limit: usize,
        ranked: &mut [u32; MAX_LIST_REGISTERS],
    ) -> usize {
        let limit = limit.min(MAX_LIST_REGISTERS);
        let mut keys = [(false, 0u8, core::cmp::Reverse(0u32)); MAX_LIST_REGISTERS];
        let mut kept = 0;
        self.for_each_candidate(vcpu, |intid, key| {
            // After every kept key not worse than this one: ties keep
            // their scan order.
            let at = keys[..kept].partition_point(|kept_key| *kept_key <= key);
            if at >= limit {
                return;
            }
            let end = (kept + 1).min(limit);
            keys.copy_within(at..end - 1, at + 1);
            ranked.copy_within(at..end - 1, at + 1);
            keys[at] = key;
            ranked[at] = intid;
            kept = end;
        });
        kept
    }

    /// Fills `lrs` (the vCPU's list registers, at most
    /// [`MAX_LIST_REGISTERS`] are used, the rest are cleared) with its most
    /// urgent interrupts before it runs: active ones first, then pending,
    /// enabled ones of an enabled group by priority, oldest first. Unused
    /// list registers are written empty. Call [`Vgic::sync`] with the same
    /// registers after the vCPU ran, before the next flush.
    ///
    /// Does not allocate; cost is O(list registers x interrupts routed to
    /// the vCPU).
    pub fn flush(
        &mut self,
        vcpu: usize,
        lrs: &mut [ListRegister],
    ) -> Result<FlushSummary, VgicError> {
        self.flush_into(vcpu, lrs, false)
    }

    /// [`Vgic::flush`], told whether every image in `lrs` is empty already
    /// (then only the listed ones are written).
    fn flush_into(
        &mut self,
        vcpu: usize,
        lrs: &mut [ListRegister],
        images_empty: bool,
    ) -> Result<FlushSummary, VgicError> {
        debug_assert!(!images_empty || lrs.iter().all(ListRegister::is_empty));
        self.check_vcpu(vcpu)?;
        if self.vcpus[vcpu].listed_slots != 0 {
            return Err(VgicError::NotSynced { vcpu });
        }
        let usable = lrs.len().min(MAX_LIST_REGISTERS);
        if self.vcpus[vcpu].nothing_to_list_at == Some(self.generation_of(vcpu)) {
            // Nothing changed since a flush found nothing to list.
            if !images_empty {
                clear_list_registers(lrs);
            }
            return Ok(FlushSummary {
                listed: 0,
                overflow: false,
            });
        }
        let (best, candidates) = self.scan_candidates(vcpu);
        let listed = match best {
            Some(_) if usable == 0 => 0,
            Some(intid) if candidates == 1 || usable == 1 => {
                self.list_into(vcpu, lrs, 0, intid);
                1
            }
            Some(_) => {
                // Listing one interrupt changes no other's candidacy or key
                // (it touches only that interrupt), so the ranking taken
                // once is the order repeated best picks would give.
                let mut ranked = [0u32; MAX_LIST_REGISTERS];
                let listed = self.ranked_candidates(vcpu, usable, &mut ranked);
                for (slot, &intid) in ranked[..listed].iter().enumerate() {
                    self.list_into(vcpu, lrs, slot, intid);
                }
                listed
            }
            None => 0,
        };
        if !images_empty {
            clear_list_registers(&mut lrs[listed..]);
        }
        let overflow = candidates > listed;
        self.vcpus[vcpu].nothing_to_list_at = (candidates == 0).then_some(self.generation_of(vcpu));
        Ok(FlushSummary { listed, overflow })
    }

    /// Lists `intid` in `lrs[slot]` and records it for [`Vgic::sync`].
    fn list_into(&mut self, vcpu: usize, lrs: &mut [ListRegister], slot: usize, intid: u32) {
        lrs[slot] = self.list(vcpu, intid);
        self.vcpus[vcpu].slot_intid[slot] = intid;
        self.vcpus[vcpu].listed_slots |= 1 << slot;
    }

    /// Moves `intid`'s deliverable state into a list register value.
    pub(super) fn list(&mut self, vcpu: usize, intid: u32) -> ListRegister {
        let v2_sgi = self.config.version == GuestGicVersion::V2 && intid < 16;
        let (enable_grp0, enable_grp1) = (self.enable_grp0, self.enable_grp1);
        let Some(irq) = self.irq_mut_listing(vcpu, intid) else {
            return ListRegister::EMPTY;
        };
        let deliverable = irq.deliverable_with(enable_grp0, enable_grp1);
        // A hardware-linked list register cannot be pending and active
        // (the physical interrupt is active until the guest deactivates),
        // nor can a GICv2 SGI whose pending and active instances may come
        // from different sources: list the active instance alone.
        let list_pending = deliverable && !(irq.active && (irq.hw.is_some() || v2_sgi));
        let mut source_cpu = irq.active_source;
        if list_pending {
            irq.listed_from_latch = irq.latch;
            if v2_sgi {
                source_cpu = irq.sgi_sources.trailing_zeros() as u8 & 7;
                irq.sgi_sources &= !(1 << source_cpu);
                irq.latch = irq.sgi_sources != 0;
            } else {
                irq.latch = false;
            }
        } else {
            irq.listed_from_latch = false;
        }
        let state = match (list_pending, irq.active) {
            (true, true) => ListRegisterState::PendingActive,
            (true, false) => ListRegisterState::Pending,
            _ => ListRegisterState::Active,
        };
        irq.listed_pending = list_pending;
        irq.listed_active = irq.active;
        irq.active = false;
        irq.listed = Some(vcpu as u16);
        irq.ignore_lr_pending = false;
        irq.ignore_lr_active = false;
        let source = match irq.hw {
            Some(physical) => VirtualInterruptSource::Hardware {
                physical_intid: physical.into(),
            },
            None => VirtualInterruptSource::Software {
                // Level-sensitive: the guest's deactivation must come back
                // to the hypervisor so the line is sampled again.
                eoi_maintenance: !irq.edge,
                sgi_source_cpu: if v2_sgi { source_cpu } else { 0 },
            },
        };
        ListRegister {
            virtual_intid: intid,
            source,
            priority: irq.priority,
            group1: irq.group1,
            state,
        }
    }

    /// Folds the list registers of `vcpu` back after it ran: a list
    /// register still pending stays pending, one the guest acknowledged
    /// becomes active, one it deactivated becomes inactive; injections and
    /// register writes made meanwhile are kept. Afterwards nothing of the
    /// vCPU is listed and the list registers' contents are no longer
    /// needed. Only the list registers the last flush filled are read.
    pub fn sync(&mut self, vcpu: usize, lrs: &[ListRegister]) -> Result<(), VgicError> {
        self.check_vcpu(vcpu)?;
        let v2 = self.config.version == GuestGicVersion::V2;
        let mut slots = self.vcpus[vcpu].listed_slots;
        self.vcpus[vcpu].listed_slots = 0;
        while slots != 0 {
            let slot = slots.trailing_zeros() as usize;
            slots &= slots - 1;
            let intid = self.vcpus[vcpu].slot_intid[slot];
            let Some(irq) = self.irq_mut(vcpu, intid) else {
                continue;
            };
            if irq.listed != Some(vcpu as u16) {
                continue;
            }
            // An empty list register (state Invalid; `save` does not even
            // read those) means the guest finished the interrupt. One the
            // caller did not give back, or that holds another INTID, is
            // taken as untouched.
            let (lr_pending, lr_active, source_cpu) = match lrs.get(slot) {
                Some(lr) if lr.is_free() => (false, false, 0),
                Some(lr) if lr.virtual_intid == intid => (
                    matches!(
                        lr.state,
                        ListRegisterState::Pending | ListRegisterState::PendingActive
                    ),
                    matches!(
                        lr.state,
                        ListRegisterState::Active | ListRegisterState::PendingActive
                    ),
                    match lr.source {
                        VirtualInterruptSource::Software { sgi_source_cpu, .. } => sgi_source_cpu,
                        VirtualInterruptSource::Hardware { .. } => 0,
                    },
                ),
                _ => (irq.listed_pending, irq.listed_active, irq.active_source),
            };
            irq.listed = None;
            if !irq.ignore_lr_active {
                irq.active = lr_active;
            }
            if lr_active && v2 && intid < 16 {
                irq.active_source = source_cpu & 7;
            }
            if lr_pending && !irq.ignore_lr_pending {
                if v2 && intid < 16 {
                    irq.sgi_sources |= 1 << (source_cpu & 7);
                    irq.latch = true;
                } else if irq.edge || irq.listed_from_latch {
                    // Still waiting since before the flush: keeps its age.
                    irq.latch = true;
                }
                // A level interrupt listed for its line: the line decides.
            }
            irq.listed_pending = false;
            irq.listed_active = false;
            irq.listed_from_latch = false;
            irq.ignore_lr_pending = false;
            irq.ignore_lr_active = false;
        }
        Ok(())
    }

    /// [`Vgic::flush`] into a saved interface image, also setting or
    /// clearing its underflow maintenance request (HCR.UIE), enabling the
    /// interface (HCR.En) and noting whether it listed nothing
    /// ([`VcpuInterfaceState::quiet_at`]).
    pub fn flush_state(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
    ) -> Result<FlushSummary, VgicError> {
        let images_empty = state.images_used == 0;
        let summary = self.flush_into(vcpu, state.list_registers_mut(), images_empty)?;
        // The listed ones, the first `listed`; the flush emptied the rest.
        state.images_used = (1u64 << summary.listed) - 1;
        state.hcr |= HCR_ENABLE;
        if summary.overflow {
            state.hcr |= HCR_UNDERFLOW_INTERRUPT;
        } else {
            state.hcr &= !HCR_UNDERFLOW_INTERRUPT;
        }
        // Listing changes interrupts (so the generation); listing nothing
        // does not, and the next entry may skip all this while it holds.
        state.quiet_at =
            (summary.listed == 0 && !summary.overflow).then_some(self.generation_of(vcpu));
        Ok(summary)
    }

    /// [`Vgic::sync`] from a saved interface image, then empties its list
    /// registers and drops the underflow request.
    pub fn sync_state(
        &mut self,
        vcpu: usize,
        state: &mut VcpuInterfaceState,
    ) -> Result<(), VgicError> {
        self.check_vcpu(vcpu)?;
        let listed = self.vcpus[vcpu].listed_slots;
        self.sync(vcpu, state.list_registers())?;
        // Only the list registers the last flush filled can hold anything:
        // it wrote the others empty, and an exit reads back no others.
        let lrs = state.list_registers_mut();
        let mut slots = listed;
        while slots != 0 {
            let slot = slots.trailing_zeros() as usize;
            slots &= slots - 1;
            if let Some(lr) = lrs.get_mut(slot) {
                *lr = ListRegister::EMPTY;
            }
        }
        debug_assert!(
            lrs.iter().all(ListRegister::is_empty),
            "a list register the flush did not fill held something after the exit"
        );
        state.images_used = 0;
        state.hcr &= !HCR_UNDERFLOW_INTERRUPT;
        Ok(())
    }
}

/// Empties every list register image that holds an interrupt. One that is
/// empty already ([`ListRegister::is_empty`]: invalid, asking for no
/// maintenance) is left as it is, whatever INTID it names: entering it is
/// entering an empty one. Neither a `fill` (a call to `memset`, about 40
/// instructions for four list registers in the strict-alignment
/// hypervisor build) nor a comparison with [`ListRegister::EMPTY`] (every
/// field): this runs before every entry that lists anything.
fn clear_list_registers(lrs: &mut [ListRegister]) {
    for lr in lrs {
        if !lr.is_empty() {
            *lr = ListRegister::EMPTY;
        }
    }
}
