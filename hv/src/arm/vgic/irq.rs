//! The state of one virtual interrupt (the model behind every register).

/// One virtual interrupt: an SGI or PPI of one vCPU, or an SPI of the domain.
///
/// Pending is split in two, as in the architecture (IHI 0069 §4.1.2): a
/// latch (edges, GICD_ISPENDR writes, injections) and, for
/// level-sensitive interrupts, the input line. Between a flush and a sync
/// the interrupt may also sit in a list register (`listed`); the list
/// register then owns the part of the state that was put there.
#[derive(Clone, Copy, Debug)]
pub(super) struct Irq {
    /// GICD_ISENABLER bit.
    pub enabled: bool,
    /// Pending latch.
    pub latch: bool,
    /// Input line of a level-sensitive interrupt.
    pub line: bool,
    /// Active (acknowledged, not deactivated).
    pub active: bool,
    /// Priority, upper [`super::PRIORITY_MASK`] bits.
    pub priority: u8,
    /// Group 1 (true) or Group 0.
    pub group1: bool,
    /// Edge-triggered (ICFGR bit 1 of the field).
    pub edge: bool,
    /// Linked physical INTID.
    pub hw: Option<u16>,
    /// The vCPU whose list registers hold it (between flush and sync).
    pub listed: Option<u16>,
    /// The list register's pending state came from the latch (so it goes
    /// back to the latch if the guest has not acknowledged it).
    pub listed_from_latch: bool,
    /// Pending state put in the list register (for GICD_ISPENDR reads).
    pub listed_pending: bool,
    /// Active state put in the list register (for GICD_ISACTIVER reads).
    pub listed_active: bool,
    /// GICD_ICPENDR hit it while listed: the list register's pending bit
    /// is stale and must be dropped at sync.
    pub ignore_lr_pending: bool,
    /// GICD_I[SC]ACTIVER hit it while listed: `active` holds the written
    /// value and the list register's active bit is stale.
    pub ignore_lr_active: bool,
    /// When it became pending (fairness among equal priorities).
    pub sequence: u32,
    /// GICv2 SGIs: bit n = pending from CPU interface n.
    pub sgi_sources: u8,
    /// GICv2 SGIs: the source of the active instance.
    pub active_source: u8,
    /// SPIs: the vCPU it is delivered to.
    pub target: Option<u16>,
    /// SPIs: the raw routing register (IROUTER value or ITARGETSR byte).
    pub route: u64,
}

impl Irq {
    /// Reset state (IHI 0069 / IHI 0048 reset values, except the group).
    pub fn reset(sgi: bool, group1: bool) -> Irq {
        Irq {
            enabled: false,
            latch: false,
            line: false,
            active: false,
            priority: 0,
            group1,
            edge: sgi,
            hw: None,
            listed: None,
            listed_from_latch: false,
            listed_pending: false,
            listed_active: false,
            ignore_lr_pending: false,
            ignore_lr_active: false,
            sequence: 0,
            sgi_sources: 0,
            active_source: 0,
            target: None,
            route: 0,
        }
    }

    /// Pending in the vGIC's own state.
    pub fn pending(&self) -> bool {
        self.latch || (!self.edge && self.line)
    }

    /// Whether a flush would list it as pending, with the distributor's
    /// group enables `enable_grp0` and `enable_grp1`: pending, enabled, in
    /// an enabled group.
    pub fn deliverable_with(&self, enable_grp0: bool, enable_grp1: bool) -> bool {
        let group_enabled = if self.group1 {
            enable_grp1
        } else {
            enable_grp0
        };
        self.pending() && self.enabled && group_enabled
    }

    /// Whether the interrupt is neither pending nor active (nor a raised
    /// line), in three loads: the scans before every guest entry skip such
    /// interrupts, most of them, before looking at anything else.
    pub fn quiet(&self) -> bool {
        !(self.latch | self.line | self.active)
    }

    /// Sets the latch; a newly pending interrupt joins the back of its
    /// priority's queue.
    pub fn set_pending_latch(&mut self, sequence: u32) {
        if !self.pending() {
            self.sequence = sequence;
        }
        self.latch = true;
    }

    /// Clears the latch (and, for GICv2 SGIs, every source).
    pub fn clear_pending_latch(&mut self) {
        self.latch = false;
        self.sgi_sources = 0;
        if self.listed.is_some() {
            self.ignore_lr_pending = true;
        }
    }

    /// Sets or clears the active state from a register write.
    pub fn write_active(&mut self, active: bool) {
        self.active = active;
        if self.listed.is_some() {
            self.ignore_lr_active = true;
        }
    }

    /// Pending as the guest reads it (including a listed copy).
    pub fn pending_view(&self) -> bool {
        self.pending() || (self.listed.is_some() && self.listed_pending && !self.ignore_lr_pending)
    }

    /// Active as the guest reads it (including a listed copy).
    pub fn active_view(&self) -> bool {
        self.active || (self.listed.is_some() && self.listed_active && !self.ignore_lr_active)
    }
}
