//! Virtual GIC: distributor/redistributor emulation and list-register management (GICv2 and GICv3 hosts).
//!
//! Pure logic, driven by the trap handler and the context-switch code; no
//! hardware access and no allocation after [`Vgic::new`].
//!
//! # What the guest sees
//! - A **GICv3** ([`GuestGicVersion::V3`], the layout Linux expects for QEMU
//!   `virt`): GICD at [`GICD_BASE`] (64 KiB), one redistributor (RD_base +
//!   SGI_base, [`GICR_STRIDE`] bytes) per vCPU from [`GICR_BASE`]. Affinity
//!   routing is always on, the GIC has a single Security state
//!   (GICD_CTLR.DS = 1), no LPIs, no ITS. The guest reaches its CPU interface
//!   through the ICC system registers (the hardware's ICH virtual
//!   interface); only SGI generation (ICC_SGI1R_EL1) traps, see
//!   [`Vgic::send_sgi`].
//! - A **GICv2** ([`GuestGicVersion::V2`]): GICD at [`GICD_BASE`] (emulated),
//!   GICC at [`GICC_BASE_V2`], which stage-2 maps to the host's GICV frame, so
//!   the CPU interface is never emulated. At most 8 vCPUs.
//!
//! vCPU `i` sees the MPIDR [`vcpu_mpidr`]`(i)`: Aff0 = `i % 16`,
//! Aff1 = `i / 16` (16 PEs per Aff1 group, so one ICC_SGI1R_EL1 target list
//! covers a group without GICD_TYPER.RSS).
//!
//! # Driving it
//! ```ignore
//! // Trap handler, data abort in the vGIC window (offset from GICD_BASE):
//! let read = vgic.mmio_read(vcpu, ipa - GICD_BASE, width)?;   // read.value, read.warning
//! let actions = vgic.mmio_write(vcpu, ipa - GICD_BASE, width, value)?;
//! for v in actions.kick.iter() { kick_or_wake(v) }
//! // Trapped ICC_SGI1R_EL1 write (GICv3 guests):
//! let delivery = vgic.send_sgi(vcpu, value)?;                   // kick delivery.kick
//! // Devices: vgic.inject(vcpu, intid)? / vgic.set_level(vcpu, intid, level)?
//!
//! // Entering vCPU `v` (any physical CPU):
//! vgic.flush_state(v, &mut state)?;   // pending interrupts -> list registers
//! restore(&state, &hw);               // image -> ICH/GICH registers
//! // ... guest runs ...
//! save(&mut state, &hw);              // ICH/GICH registers -> image, interface off
//! vgic.sync_state(v, &mut state)?;    // list registers -> interrupt state
//! // then handle the exit (MMIO, SGIs, WFI with vgic.has_deliverable(v)).
//! ```
//! Between `sync` and the next `flush` every interrupt's state lives in the
//! [`Vgic`], so a vCPU can move to another physical CPU freely. Call `sync`
//! before emulating the exit's MMIO access, so the guest's register reads
//! see what it did with its list registers.
//!
//! A maintenance interrupt (underflow: more interrupts waited than there
//! were list registers; EOI of a level-sensitive interrupt, whose line must
//! be sampled again) needs no handler of its own: it only makes the vCPU
//! exit, and the sync/flush pair of the exit path refills the list
//! registers.
//!
//! # Limits
//! - No LPIs/ITS, no GICv4 direct injection; GICv3 guests only get Group 1
//!   SGIs through ICC_SGI1R_EL1 (ICC_SGI0R/ASGI1R are not decoded).
//! - At most [`MAX_LIST_REGISTERS`] list registers are used. More active
//!   interrupts than list registers (deeper preemption than that) leave
//!   the extra ones unlisted until a slot frees up.
//! - `flush` scans the vCPU's bank and the domain's SPIs once per list
//!   register (no allocation, no per-vCPU pending list): fine for the
//!   hundreds of SPIs of QEMU `virt`.

mod context;
mod irq;
mod lr;
mod mmio;
mod sgi;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_lr;

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

pub use context::{
    MAX_ACTIVE_PRIORITY_REGISTERS, MAX_LIST_REGISTERS, VcpuInterfaceRegisters, VcpuInterfaceState,
    enter, exit, put, restore, save,
};
pub use lr::FlushSummary;
pub use mmio::{Actions, HwChange, MmioRead, MmioWarning};
pub use sgi::{SgiDelivery, vcpu_affinity, vcpu_from_affinity, vcpu_mpidr};

use irq::Irq;

/// Guest-physical base of the emulated distributor (QEMU `virt`).
pub const GICD_BASE: u64 = 0x0800_0000;
/// Size of the distributor frame (64 KiB: GICv3 puts IROUTER at 0x6000).
pub const GICD_SIZE: u64 = 0x1_0000;
/// Guest-physical base of the GICv2 CPU interface (stage-2 mapped to the
/// host's GICV frame, not emulated).
pub const GICC_BASE_V2: u64 = 0x0801_0000;
/// Guest-physical base of the first GICv3 redistributor (QEMU `virt`).
pub const GICR_BASE: u64 = 0x080A_0000;
/// Size of one GICv3 redistributor: RD_base + SGI_base 64 KiB frames.
pub const GICR_STRIDE: u64 = gic::registers::GICR_FRAME_STRIDE_V3 as u64;
/// Offset of the SGI_base frame inside a redistributor.
pub const GICR_SGI_FRAME_OFFSET: u64 = 0x1_0000;

/// Most vCPUs a GICv2 guest can have (8 CPU interfaces).
pub const MAX_VCPUS_V2: usize = 8;
/// Most vCPUs a GICv3 guest can have: the redistributors of the QEMU
/// `virt` layout fill 0x080A_0000..0x0900_0000 (the UART follows).
pub const MAX_VCPUS_V3: usize = 123;
/// Capacity of a [`VcpuMask`].
pub const MAX_VCPUS: usize = 128;
/// Most SPIs a domain can have (INTIDs 32..1019).
pub const MAX_SPIS: u32 = 988;

/// Priority bits the virtual distributor keeps (32 levels, like the
/// virtual CPU interfaces of QEMU, GIC-400 and Neoverse cores, and like the
/// GICv2 list register's 5-bit field).
pub const PRIORITY_MASK: u8 = 0xF8;

/// Which GIC the guest is given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestGicVersion {
    /// GICv2: emulated GICD, hardware GICV as the CPU interface.
    V2,
    /// GICv3: emulated GICD and GICRs, hardware ICH as the CPU interface.
    V3,
}

/// Shape of a domain's virtual GIC, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VgicConfig {
    /// Architecture presented to the guest.
    pub version: GuestGicVersion,
    /// Number of vCPUs (1..=8 for v2, 1..=123 for v3).
    pub num_vcpus: usize,
    /// Number of SPIs, a multiple of 32 up to 988 (rounded up otherwise);
    /// QEMU `virt` has 256.
    pub num_spis: u32,
}

/// What went wrong in a vGIC call. Guest mistakes that the architecture
/// defines (unknown offsets) are not errors: they read as zero and come
/// back as an [`MmioWarning`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VgicError {
    /// A vCPU index at or beyond the domain's vCPU count.
    VcpuOutOfRange {
        /// The index given.
        vcpu: usize,
        /// The domain's vCPU count.
        num_vcpus: usize,
    },
    /// An INTID the domain does not implement (or a special/LPI INTID).
    IntIdOutOfRange {
        /// The INTID given.
        intid: u32,
    },
    /// An access width the register does not allow (architecturally
    /// UNPREDICTABLE; the trap handler should inject an abort or ignore it).
    BadWidth {
        /// Offset from [`GICD_BASE`].
        offset: u64,
        /// Access size in bytes.
        width: usize,
    },
    /// An access not aligned to its own size.
    Misaligned {
        /// Offset from [`GICD_BASE`].
        offset: u64,
        /// Access size in bytes.
        width: usize,
    },
    /// An offset outside every emulated frame (the trap handler routed an
    /// address that is not the vGIC's).
    OutsideRegion {
        /// Offset from [`GICD_BASE`].
        offset: u64,
    },
    /// A configuration the vGIC cannot present.
    BadConfig {
        /// The vCPU count asked for.
        num_vcpus: usize,
        /// The SPI count asked for.
        num_spis: u32,
    },
    /// A call that only exists for the other GIC version (e.g. ICC_SGI1R_EL1
    /// on a GICv2 guest).
    WrongVersion {
        /// The domain's version.
        version: GuestGicVersion,
    },
    /// `flush` for a vCPU whose list registers were not `sync`ed since the
    /// last flush (its interrupts would be listed twice).
    NotSynced {
        /// The vCPU.
        vcpu: usize,
    },
    /// A hardware link to a physical INTID that cannot be one (not 16..1019).
    BadPhysicalIntId {
        /// The physical INTID given.
        physical_intid: u32,
    },
}

impl fmt::Display for VgicError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            VgicError::VcpuOutOfRange { vcpu, num_vcpus } => {
                write!(f, "vGIC: vCPU {vcpu} out of range (domain has {num_vcpus})")
            }
            VgicError::IntIdOutOfRange { intid } => {
                write!(f, "vGIC: INTID {intid} not implemented")
            }
            VgicError::BadWidth { offset, width } => {
                write!(f, "vGIC: {width}-byte access not allowed at {offset:#x}")
            }
            VgicError::Misaligned { offset, width } => {
                write!(f, "vGIC: misaligned {width}-byte access at {offset:#x}")
            }
            VgicError::OutsideRegion { offset } => {
                write!(f, "vGIC: offset {offset:#x} is outside the emulated frames")
            }
            VgicError::BadConfig {
                num_vcpus,
                num_spis,
            } => write!(
                f,
                "vGIC: cannot present {num_vcpus} vCPUs with {num_spis} SPIs"
            ),
            VgicError::WrongVersion { version } => {
                write!(f, "vGIC: operation not available on a {version:?} guest")
            }
            VgicError::NotSynced { vcpu } => {
                write!(f, "vGIC: vCPU {vcpu} flushed twice without a sync")
            }
            VgicError::BadPhysicalIntId { physical_intid } => {
                write!(f, "vGIC: physical INTID {physical_intid} cannot be linked")
            }
        }
    }
}

/// A set of vCPU indices of one domain (fixed size, no allocation).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VcpuMask(u128);

impl VcpuMask {
    /// No vCPU.
    pub const EMPTY: VcpuMask = VcpuMask(0);

    /// The mask holding only `vcpu` (empty if `vcpu >= MAX_VCPUS`).
    pub const fn single(vcpu: usize) -> VcpuMask {
        if vcpu < MAX_VCPUS {
            VcpuMask(1 << vcpu)
        } else {
            VcpuMask(0)
        }
    }

    /// Adds `vcpu` (ignored if `vcpu >= MAX_VCPUS`).
    pub fn insert(&mut self, vcpu: usize) {
        self.0 |= VcpuMask::single(vcpu).0;
    }

    /// Whether `vcpu` is in the set.
    pub const fn contains(&self, vcpu: usize) -> bool {
        vcpu < MAX_VCPUS && self.0 & (1 << vcpu) != 0
    }

    /// Whether the set is empty.
    pub const fn is_empty(&self) -> bool {
        self.0 == 0
    }

    /// Number of vCPUs in the set.
    pub const fn len(&self) -> usize {
        self.0.count_ones() as usize
    }

    /// The set's only vCPU, if it has exactly one.
    pub const fn only(&self) -> Option<usize> {
        if self.0 != 0 && self.0 & (self.0 - 1) == 0 {
            Some(self.0.trailing_zeros() as usize)
        } else {
            None
        }
    }

    /// Adds every vCPU of `other`.
    pub fn union_with(&mut self, other: VcpuMask) {
        self.0 |= other.0;
    }

    /// The vCPUs in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = usize> + use<> {
        let mut bits = self.0;
        core::iter::from_fn(move || {
            if bits == 0 {
                return None;
            }
            let vcpu = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(vcpu)
        })
    }

    /// The raw bitmap (bit n = vCPU n).
    pub const fn bits(&self) -> u128 {
        self.0
    }
}

/// A snapshot of one interrupt's virtual state, for the hypervisor (e.g.
/// to reconcile a hardware-linked interrupt) and for tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IrqStatus {
    /// Enabled (GICD_ISENABLER).
    pub enabled: bool,
    /// Pending in the vGIC's own state (not counting a copy in a list register).
    pub pending: bool,
    /// The input line a device drives ([`Vgic::set_level`]).
    pub line: bool,
    /// Active in the vGIC's own state (not counting a copy in a list register).
    pub active: bool,
    /// Currently in a list register of this vCPU (between flush and sync).
    pub listed_on: Option<usize>,
    /// Priority (upper [`PRIORITY_MASK`] bits).
    pub priority: u8,
    /// Group 1 (true) or Group 0.
    pub group1: bool,
    /// Edge-triggered (true) or level-sensitive.
    pub edge: bool,
    /// The physical INTID it is linked to, if any.
    pub hardware: Option<u32>,
    /// The vCPU it is delivered to (SGIs/PPIs: their own vCPU; SPIs: from
    /// IROUTER/ITARGETSR, `None` when routed to no vCPU).
    pub target: Option<usize>,
}

/// Per-vCPU state besides the banked interrupts.
#[derive(Clone, Debug)]
struct VcpuState {
    /// SGIs 0-15 and PPIs 16-31.
    private: [Irq; 32],
    /// GICR_WAKER.ProcessorSleep (GICv3).
    processor_sleep: bool,
    /// Bit n: list register n holds an interrupt this vGIC put there.
    listed_slots: u64,
    /// INTID put in each used list register by the last flush.
    slot_intid: [u32; MAX_LIST_REGISTERS],
    /// Counts the changes to this vCPU's private interrupts (its part of
    /// [`Vgic::generation_of`]).
    generation: u64,
    /// [`Vgic::generation_of`] this vCPU, for readers without the vGIC's
    /// lock (one cell per vCPU, so the entry's check is one load).
    published: PublishedGeneration,
    /// [`Vgic::generation_of`] this vCPU when a flush last found nothing to
    /// list for it: until anything changes, the next flush need not look
    /// again (most guest entries).
    nothing_to_list_at: Option<u64>,
    /// Bit n: private interrupt n may not be quiet (see `Vgic::touched`).
    private_touched: u32,
}

/// One vCPU's generation in a vGIC (see [`Vgic::published`]), readable
/// without the lock the vGIC lives under: the CPU about to enter the vCPU
/// compares it with [`VcpuInterfaceState::quiet_at`] to skip the vGIC
/// altogether when nothing changed for that vCPU since a flush that listed
/// nothing.
#[derive(Debug)]
pub struct PublishedGeneration(Arc<AtomicU64>);

impl PublishedGeneration {
    fn new(value: u64) -> Self {
        Self(Arc::new(AtomicU64::new(value)))
    }

    /// The generation the vGIC last published for this vCPU.
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Whether this is `vcpu`'s in `vgic` (not a replaced vGIC's, which
    /// nothing publishes to any more, nor another vCPU's).
    pub fn is_of(&self, vgic: &Vgic, vcpu: usize) -> bool {
        vgic.vcpus
            .get(vcpu)
            .is_some_and(|state| Arc::ptr_eq(&self.0, &state.published.0))
    }

    fn publish(&self, value: u64) {
        self.0.store(value, Ordering::Release);
    }

    /// A reader of the same generation.
    fn share(&self) -> Self {
        Self(Arc::clone(&self.0))
    }
}

/// A copy of a vGIC publishes on its own.
impl Clone for PublishedGeneration {
    fn clone(&self) -> Self {
        Self::new(self.get())
    }
}

/// The virtual GIC of one domain.
#[derive(Clone, Debug)]
pub struct Vgic {
    config: VgicConfig,
    /// GICD_CTLR.EnableGrp0.
    enable_grp0: bool,
    /// GICD_CTLR.EnableGrp1.
    enable_grp1: bool,
    vcpus: Vec<VcpuState>,
    spis: Vec<Irq>,
    /// Stamps interrupts in the order they became pending, so equal
    /// priorities are listed first-come first-served.
    pending_sequence: u32,
    /// Counts the moments interrupt state may have changed for every vCPU:
    /// every mutable access to an SPI ([`Vgic::irq_mut`]), a hardware link,
    /// a write of the group enables. A change to one vCPU's private
    /// interrupts (an SGI sent to it, its timer's PPI, its reset) counts in
    /// that vCPU's own generation only, so the sender of an SGI does not
    /// go through a full flush on its next entry ([`Vgic::generation_of`]).
    generation: u64,
    /// Bit n: SPI 32 + n may not be quiet. Set by every mutable access
    /// ([`Vgic::irq_mut`], the only way an interrupt's state changes),
    /// cleared by a flush that finds the interrupt quiet: the scans before
    /// each guest entry visit these interrupts, not all of them.
    spis_touched: Vec<u64>,
    /// One bit per 32-bit word of the GICD frame already warned about.
    warned_gicd: Vec<u64>,
    /// One bit per 32-bit word of a redistributor already warned about
    /// (shared by every vCPU's redistributor).
    warned_gicr: Vec<u64>,
}

impl Vgic {
    /// A vGIC in its reset state: distributor off, every interrupt
    /// disabled, inactive, not pending, priority 0, level-sensitive (SGIs
    /// edge), Group 0 on v2 and Group 1 on v3 (what Linux programs anyway),
    /// SPIs routed to vCPU 0, redistributors asleep. All memory is
    /// allocated here.
    pub fn new(config: VgicConfig) -> Result<Vgic, VgicError> {
        let max_vcpus = match config.version {
            GuestGicVersion::V2 => MAX_VCPUS_V2,
            GuestGicVersion::V3 => MAX_VCPUS_V3,
        };
        let bad = VgicError::BadConfig {
            num_vcpus: config.num_vcpus,
            num_spis: config.num_spis,
        };
        if config.num_vcpus == 0 || config.num_vcpus > max_vcpus || config.num_spis > MAX_SPIS {
            return Err(bad);
        }
        let num_spis = config.num_spis.div_ceil(32) * 32;
        let num_spis = num_spis.min(MAX_SPIS);
        let group1 = config.version == GuestGicVersion::V3;
        let vcpus = (0..config.num_vcpus)
            .map(|_| VcpuState {
                private: core::array::from_fn(|intid| Irq::reset(intid < 16, group1)),
                processor_sleep: true,
                listed_slots: 0,
                slot_intid: [0; MAX_LIST_REGISTERS],
                generation: 0,
                published: PublishedGeneration::new(0),
                nothing_to_list_at: None,
                private_touched: 0,
            })
            .collect();
        let mut spis = vec![Irq::reset(false, group1); num_spis as usize];
        for spi in &mut spis {
            spi.target = Some(0);
            spi.route = match config.version {
                GuestGicVersion::V2 => 1,
                GuestGicVersion::V3 => vcpu_mpidr(0) & gic::affinity::MPIDR_AFFINITY_MASK,
            };
        }
        Ok(Vgic {
            config: VgicConfig { num_spis, ..config },
            enable_grp0: false,
            enable_grp1: false,
            vcpus,
            spis,
            pending_sequence: 0,
            generation: 0,
            spis_touched: vec![0; (num_spis as usize).div_ceil(64)],
            warned_gicd: vec![0; (GICD_SIZE / 4 / 64) as usize],
            warned_gicr: vec![0; (GICR_STRIDE / 4 / 64) as usize],
        })
    }

    /// Records that interrupt state may change now for every vCPU (see
    /// `generation`). It is published before the change is made: a reader
    /// that sees the old value is as one that looked just before, and one
    /// that sees the new value takes the vGIC's lock, which the change
    /// holds. One store per vCPU: SPI changes are rare next to entries,
    /// which each load their vCPU's generation.
    fn changing(&mut self) {
        self.generation = self.generation.wrapping_add(1);
        for state in &self.vcpus {
            state
                .published
                .publish(self.generation.wrapping_add(state.generation));
        }
    }

    /// [`Vgic::changing`] for `vcpu`'s private interrupts only (nothing
    /// for a vCPU it does not have).
    fn changing_vcpu(&mut self, vcpu: usize) {
        if let Some(state) = self.vcpus.get_mut(vcpu) {
            state.generation = state.generation.wrapping_add(1);
            state
                .published
                .publish(self.generation.wrapping_add(state.generation));
        }
    }

    /// `vcpu`'s generation: it changes whenever something may have changed
    /// what the vCPU has to list (both counts only grow, so their sum
    /// changes whenever either does). Panics for a vCPU it does not have
    /// (callers checked it).
    pub(super) fn generation_of(&self, vcpu: usize) -> u64 {
        self.generation.wrapping_add(self.vcpus[vcpu].generation)
    }

    /// A reader of `vcpu`'s generation for the lock-free entry check (see
    /// [`VcpuInterfaceState::quiet_at`]); `None` for a vCPU it does not
    /// have.
    pub fn published(&self, vcpu: usize) -> Option<PublishedGeneration> {
        Some(self.vcpus.get(vcpu)?.published.share())
    }

    /// The configuration (with `num_spis` rounded up to a multiple of 32).
    pub fn config(&self) -> VgicConfig {
        self.config
    }

    /// One past the highest implemented INTID.
    pub fn num_intids(&self) -> u32 {
        32 + self.config.num_spis
    }

    /// The guest-physical windows to trap (base, size): the GICD and, for
    /// GICv3, the redistributors. Offsets given to [`Vgic::mmio_read`] and
    /// [`Vgic::mmio_write`] are from [`GICD_BASE`].
    pub fn mmio_regions(&self) -> [(u64, u64); 2] {
        let gicr = match self.config.version {
            GuestGicVersion::V2 => (GICR_BASE, 0),
            GuestGicVersion::V3 => (GICR_BASE, GICR_STRIDE * self.config.num_vcpus as u64),
        };
        [(GICD_BASE, GICD_SIZE), gicr]
    }

    fn check_vcpu(&self, vcpu: usize) -> Result<(), VgicError> {
        if vcpu < self.vcpus.len() {
            Ok(())
        } else {
            Err(VgicError::VcpuOutOfRange {
                vcpu,
                num_vcpus: self.vcpus.len(),
            })
        }
    }

    /// The interrupt `intid` as seen by `vcpu` (SGIs/PPIs are banked).
    fn irq(&self, vcpu: usize, intid: u32) -> Option<&Irq> {
        if intid < 32 {
            self.vcpus.get(vcpu)?.private.get(intid as usize)
        } else {
            self.spis.get((intid - 32) as usize)
        }
    }

    /// The one way to change an interrupt's state (besides a vCPU's reset
    /// and a hardware link, which walk the banks themselves): it also
    /// records the change for the flush's "nothing to list" shortcut.
    fn irq_mut(&mut self, vcpu: usize, intid: u32) -> Option<&mut Irq> {
        if intid < 32 {
            self.changing_vcpu(vcpu);
            let state = self.vcpus.get_mut(vcpu)?;
            state.private_touched |= 1 << intid;
            state.private.get_mut(intid as usize)
        } else {
            self.changing();
            let index = (intid - 32) as usize;
            if let Some(word) = self.spis_touched.get_mut(index / 64) {
                *word |= 1 << (index % 64);
            }
            self.spis.get_mut(index)
        }
    }

    /// `intid` of `vcpu`'s bank for a flush to list, without recording a
    /// change ([`Vgic::irq_mut`]'s generation and touched mark): listing a
    /// candidate makes no interrupt a candidate anywhere (it takes this
    /// one out of the candidates), so no vCPU's "nothing to list" shortcut
    /// is wrong afterwards, and a candidate is not quiet, so it is marked
    /// touched already. Saves the generation's publication (a release
    /// store) and a second look-up on every entry that lists something.
    fn irq_mut_listing(&mut self, vcpu: usize, intid: u32) -> Option<&mut Irq> {
        if intid < 32 {
            self.vcpus.get_mut(vcpu)?.private.get_mut(intid as usize)
        } else {
            self.spis.get_mut((intid - 32) as usize)
        }
    }

    /// Calls `f` with the INTID and state of every interrupt of `vcpu`'s
    /// bank that may not be quiet (its SGIs and PPIs, then every SPI, by
    /// INTID): an interrupt not visited is quiet.
    fn for_each_touched(&self, vcpu: usize, mut f: impl FnMut(u32, &Irq)) {
        let state = &self.vcpus[vcpu];
        let mut bits = state.private_touched;
        while bits != 0 {
            let intid = bits.trailing_zeros();
            bits &= bits - 1;
            f(intid, &state.private[intid as usize]);
        }
        for (word_index, &word) in self.spis_touched.iter().enumerate() {
            let mut bits = word;
            while bits != 0 {
                let index = word_index * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if let Some(irq) = self.spis.get(index) {
                    f(index as u32 + 32, irq);
                }
            }
        }
    }

    /// Tests: every interrupt that is not quiet is marked touched (what
    /// the scans rely on).
    #[cfg(test)]
    pub(super) fn touched_cover_every_busy_interrupt(&self) -> bool {
        let private = self.vcpus.iter().all(|state| {
            state
                .private
                .iter()
                .enumerate()
                .all(|(intid, irq)| irq.quiet() || state.private_touched & (1 << intid) != 0)
        });
        private
            && self.spis.iter().enumerate().all(|(index, irq)| {
                irq.quiet() || self.spis_touched[index / 64] & (1 << (index % 64)) != 0
            })
    }

    fn checked_irq_mut(&mut self, vcpu: usize, intid: u32) -> Result<&mut Irq, VgicError> {
        self.check_vcpu(vcpu)?;
        self.irq_mut(vcpu, intid)
            .ok_or(VgicError::IntIdOutOfRange { intid })
    }

    /// The vCPU that receives `intid` when `vcpu` names the bank.
    fn target_of(&self, vcpu: usize, intid: u32) -> Option<usize> {
        if intid < 32 {
            Some(vcpu)
        } else {
            self.irq(vcpu, intid)
                .and_then(|irq| irq.target.map(usize::from))
        }
    }

    /// Whether the interrupt would be listed as pending by a flush.
    fn deliverable(&self, irq: &Irq) -> bool {
        irq.deliverable_with(self.enable_grp0, self.enable_grp1)
    }

    fn next_sequence(&mut self) -> u32 {
        self.pending_sequence = self.pending_sequence.wrapping_add(1);
        self.pending_sequence
    }

    /// Kick decision after `intid`'s state changed: its target, if it now
    /// has something to deliver.
    fn kick_target(&self, vcpu: usize, intid: u32) -> Option<usize> {
        let irq = self.irq(vcpu, intid)?;
        Self::kick_decision(irq, vcpu, intid, self.enable_grp0, self.enable_grp1)
    }

    /// [`Vgic::kick_target`]'s decision on `irq` (`intid` in `vcpu`'s
    /// bank) itself, with the group enables given: for a caller that holds
    /// the interrupt mutably already (`inject`, on every virtual IPI).
    fn kick_decision(
        irq: &Irq,
        vcpu: usize,
        intid: u32,
        enable_grp0: bool,
        enable_grp1: bool,
    ) -> Option<usize> {
        if !irq.deliverable_with(enable_grp0, enable_grp1) {
            None
        } else if intid < 32 {
            Some(vcpu)
        } else {
            irq.target.map(usize::from)
        }
    }

    /// Makes `intid` pending (an edge, or a level interrupt's latch: the
    /// virtual timer, a virtual SGI, an emulated device's SPI, a
    /// passthrough SPI). `vcpu` selects the bank for SGIs/PPIs and is
    /// ignored for SPIs (they go where IROUTER/ITARGETSR say).
    ///
    /// Returns the vCPU that must be kicked (made to exit if it runs on
    /// another CPU, woken if it waits in WFI) because it now has a
    /// deliverable interrupt, or `None` when nothing changes for any vCPU
    /// (disabled, already pending and not listed, routed nowhere).
    pub fn inject(&mut self, vcpu: usize, intid: u32) -> Result<Option<usize>, VgicError> {
        if self.config.version == GuestGicVersion::V2 && intid < 16 {
            // GICv2 SGIs are banked per source: the hypervisor is source 0.
            self.check_vcpu(vcpu)?;
            return Ok(self.inject_sgi_v2(vcpu, intid, 0));
        }
        let sequence = self.next_sequence();
        let (enable_grp0, enable_grp1) = (self.enable_grp0, self.enable_grp1);
        let irq = self.checked_irq_mut(vcpu, intid)?;
        let was_pending = irq.pending();
        irq.set_pending_latch(sequence);
        if was_pending && irq.listed.is_none() {
            return Ok(None);
        }
        Ok(Self::kick_decision(
            irq,
            vcpu,
            intid,
            enable_grp0,
            enable_grp1,
        ))
    }

    /// GICv2 SGI from CPU interface `source` (banked per source).
    fn inject_sgi_v2(&mut self, target: usize, sgi: u32, source: usize) -> Option<usize> {
        let sequence = self.next_sequence();
        let irq = self.irq_mut(target, sgi)?;
        let was_pending = irq.pending();
        irq.sgi_sources |= 1 << source;
        irq.set_pending_latch(sequence);
        if was_pending && irq.listed.is_none() {
            return None;
        }
        self.kick_target(target, sgi)
    }

    /// Drives the input line of a level-sensitive interrupt (an emulated
    /// device such as the PL011): the interrupt is pending while the line
    /// is high, also after the guest acknowledged it. For an edge-triggered
    /// interrupt a rising level is an edge. Returns the vCPU to kick, as
    /// [`Vgic::inject`].
    pub fn set_level(
        &mut self,
        vcpu: usize,
        intid: u32,
        level: bool,
    ) -> Result<Option<usize>, VgicError> {
        self.check_vcpu(vcpu)?;
        let unchanged = self
            .irq(vcpu, intid)
            .ok_or(VgicError::IntIdOutOfRange { intid })?
            .line
            == level;
        if unchanged {
            // Sampled again at the same level (the virtual timer's line after
            // every exit): nothing changes.
            return Ok(None);
        }
        let sequence = self.next_sequence();
        let irq = self.checked_irq_mut(vcpu, intid)?;
        let was_pending = irq.pending();
        let rising = level && !irq.line;
        irq.line = level;
        if irq.edge {
            // The line is still tracked, to see the next rising edge.
            if rising {
                return self.inject(vcpu, intid);
            }
            return Ok(None);
        }
        if irq.pending() && !was_pending {
            irq.sequence = sequence;
            return Ok(self.kick_target(vcpu, intid));
        }
        Ok(None)
    }

    /// Links virtual `intid` to physical `physical_intid` (16..1019): the
    /// list register carries the HW bit, so the guest's deactivation also
    /// deactivates the physical interrupt (which the hypervisor must have
    /// left active after a priority drop). For a PPI (the virtual timer,
    /// 27) every vCPU's bank is linked. `None` removes the link.
    ///
    /// A hardware-linked PPI that is active when its vCPU moves to another
    /// physical CPU is deactivated on the new CPU; the timer code must
    /// handle the old CPU's physical PPI (mask it while the vCPU is out).
    pub fn link_hardware(
        &mut self,
        intid: u32,
        physical_intid: Option<u32>,
    ) -> Result<(), VgicError> {
        self.changing();
        let hw = match physical_intid {
            Some(p) if (16..gic::IntId::SPI_END).contains(&p) => Some(p as u16),
            Some(p) => return Err(VgicError::BadPhysicalIntId { physical_intid: p }),
            None => None,
        };
        if intid < 16 {
            return Err(VgicError::IntIdOutOfRange { intid });
        }
        if intid < 32 {
            for vcpu in &mut self.vcpus {
                vcpu.private[intid as usize].hw = hw;
            }
        } else {
            self.checked_irq_mut(0, intid)?.hw = hw;
        }
        Ok(())
    }

    /// Puts `vcpu`'s SGIs, PPIs and redistributor back in their reset
    /// state (PSCI CPU_ON of a vCPU that was off, guest CPU hotplug);
    /// hardware links stay. Fails with [`VgicError::NotSynced`] while the
    /// vCPU has listed interrupts.
    pub fn reset_vcpu(&mut self, vcpu: usize) -> Result<(), VgicError> {
        self.changing_vcpu(vcpu);
        self.check_vcpu(vcpu)?;
        let group1 = self.config.version == GuestGicVersion::V3;
        let state = &mut self.vcpus[vcpu];
        if state.listed_slots != 0 {
            return Err(VgicError::NotSynced { vcpu });
        }
        // Reset interrupts are quiet.
        state.private_touched = 0;
        for (intid, irq) in state.private.iter_mut().enumerate() {
            *irq = Irq {
                hw: irq.hw,
                ..Irq::reset(intid < 16, group1)
            };
        }
        state.processor_sleep = true;
        Ok(())
    }

    /// State of `intid` in `vcpu`'s bank (SPIs: `vcpu` is ignored but must exist).
    pub fn irq_status(&self, vcpu: usize, intid: u32) -> Result<IrqStatus, VgicError> {
        self.check_vcpu(vcpu)?;
        let irq = self
            .irq(vcpu, intid)
            .ok_or(VgicError::IntIdOutOfRange { intid })?;
        Ok(IrqStatus {
            enabled: irq.enabled,
            pending: irq.pending(),
            line: irq.line,
            active: irq.active,
            listed_on: irq.listed.map(usize::from),
            priority: irq.priority,
            group1: irq.group1,
            edge: irq.edge,
            hardware: irq.hw.map(u32::from),
            target: self.target_of(vcpu, intid),
        })
    }

    /// Whether `vcpu` has an interrupt it would take if it ran now
    /// (pending, enabled, group enabled, routed to it, not yet listed).
    /// The WFI handler blocks the vCPU only when this is false; the guest's
    /// priority mask is not considered (a masked interrupt still wakes
    /// WFI, as the architecture allows).
    pub fn has_deliverable(&self, vcpu: usize) -> Result<bool, VgicError> {
        self.check_vcpu(vcpu)?;
        let mut found = false;
        self.for_each_touched(vcpu, |intid, irq| {
            found |= !irq.quiet()
                && irq.listed.is_none()
                && (intid < 32 || irq.target == Some(vcpu as u16))
                && self.deliverable(irq);
        });
        Ok(found)
    }
}
