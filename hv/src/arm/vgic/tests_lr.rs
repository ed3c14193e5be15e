//! List registers, injection, virtual SGIs, routing, save/restore across
//! physical CPUs, and a randomized model check of flush/sync.

use core::cell::{Cell, RefCell};

use gic::{GicError, GicVersion, ListRegister, ListRegisterState, VirtualInterruptSource};

use super::tests::{r32, rd, sgi_frame, v2, v3, w32};
use super::*;

const CTLR: u64 = 0x000;
const IGROUPR: u64 = 0x080;
const ISENABLER: u64 = 0x100;
const ICENABLER: u64 = 0x180;
const IPRIORITYR: u64 = 0x400;
const ICFGR: u64 = 0xC00;
const SGIR: u64 = 0xF00;
const IROUTER: u64 = 0x6000;

/// A virtual CPU interface in memory: what a physical CPU's ICH/GICH
/// registers hold.
struct FakeInterface {
    lrs: RefCell<Vec<ListRegister>>,
    hcr: Cell<u64>,
    vmcr: Cell<u64>,
    apr: RefCell<[[u32; 4]; 2]>,
    num_apr: usize,
    lr_reads: Cell<usize>,
    lr_writes: Cell<usize>,
    /// Reads of the empty-status register (ELRSR).
    status_reads: Cell<usize>,
    hcr_writes: Cell<usize>,
}

impl FakeInterface {
    fn new(num_lrs: usize, num_apr: usize) -> FakeInterface {
        FakeInterface {
            lrs: RefCell::new(vec![ListRegister::EMPTY; num_lrs]),
            hcr: Cell::new(0),
            vmcr: Cell::new(0),
            apr: RefCell::new([[0; 4]; 2]),
            num_apr,
            lr_reads: Cell::new(0),
            lr_writes: Cell::new(0),
            status_reads: Cell::new(0),
            hcr_writes: Cell::new(0),
        }
    }

    /// The guest acknowledges list register `index` (pending -> active).
    fn guest_acknowledge(&self, index: usize) {
        let mut lrs = self.lrs.borrow_mut();
        assert_eq!(lrs[index].state, ListRegisterState::Pending);
        lrs[index].state = ListRegisterState::Active;
    }

    /// The guest deactivates list register `index` (EOI with EOImode 0).
    fn guest_deactivate(&self, index: usize) {
        let mut lrs = self.lrs.borrow_mut();
        lrs[index].state = match lrs[index].state {
            ListRegisterState::Active => ListRegisterState::Invalid,
            ListRegisterState::PendingActive => ListRegisterState::Pending,
            other => panic!("deactivating a {other:?} list register"),
        };
    }

    fn intids(&self) -> Vec<(u32, ListRegisterState)> {
        self.lrs
            .borrow()
            .iter()
            .filter(|lr| !lr.is_free())
            .map(|lr| (lr.virtual_intid, lr.state))
            .collect()
    }
}

impl VirtualCpuInterface for FakeInterface {
    fn num_list_registers(&self) -> usize {
        self.lrs.borrow().len()
    }
    fn list_register_encoding(&self) -> GicVersion {
        GicVersion::V3
    }
    fn read_list_register_raw(&self, index: usize) -> Result<u64, GicError> {
        self.lr_reads.set(self.lr_reads.get() + 1);
        let available = self.num_list_registers();
        let lr = self
            .lrs
            .borrow()
            .get(index)
            .copied()
            .ok_or(GicError::ListRegisterIndexOutOfRange { index, available })?;
        lr.encode_v3()
    }
    fn write_list_register_raw(&self, index: usize, value: u64) -> Result<(), GicError> {
        self.lr_writes.set(self.lr_writes.get() + 1);
        let available = self.num_list_registers();
        let mut lrs = self.lrs.borrow_mut();
        let slot = lrs
            .get_mut(index)
            .ok_or(GicError::ListRegisterIndexOutOfRange { index, available })?;
        *slot = ListRegister::decode_v3(value);
        Ok(())
    }
    fn empty_list_registers(&self) -> u64 {
        self.status_reads.set(self.status_reads.get() + 1);
        // ICH_ELRSR_EL2: an invalid list register that asks for an EOI
        // maintenance interrupt is not empty until it is rewritten.
        self.lrs
            .borrow()
            .iter()
            .enumerate()
            .filter(|(_, lr)| {
                lr.is_free()
                    && !matches!(
                        lr.source,
                        VirtualInterruptSource::Software {
                            eoi_maintenance: true,
                            ..
                        }
                    )
            })
            .fold(0, |mask, (i, _)| mask | 1 << i)
    }
    fn eoi_list_registers(&self) -> u64 {
        0
    }
    fn maintenance_status(&self) -> u32 {
        0
    }
    fn set_enabled(&self, enabled: bool) {
        self.hcr.set((self.hcr.get() & !1) | u64::from(enabled));
    }
}

use gic::VirtualCpuInterface;

impl VcpuInterfaceRegisters for FakeInterface {
    fn hcr(&self) -> u64 {
        self.hcr.get()
    }
    fn set_hcr(&self, value: u64) {
        self.hcr_writes.set(self.hcr_writes.get() + 1);
        self.hcr.set(value);
    }
    fn vmcr(&self) -> u64 {
        self.vmcr.get()
    }
    fn set_vmcr(&self, value: u64) {
        self.vmcr.set(value);
    }
    fn num_active_priority_registers(&self) -> usize {
        self.num_apr
    }
    fn active_priorities(&self, group: usize, index: usize) -> Result<u32, GicError> {
        if group > 1 || index >= self.num_apr {
            return Err(GicError::ActivePriorityRegisterOutOfRange { group, index });
        }
        Ok(self.apr.borrow()[group][index])
    }
    fn set_active_priorities(
        &self,
        group: usize,
        index: usize,
        value: u32,
    ) -> Result<(), GicError> {
        if group > 1 || index >= self.num_apr {
            return Err(GicError::ActivePriorityRegisterOutOfRange { group, index });
        }
        self.apr.borrow_mut()[group][index] = value;
        Ok(())
    }
}

/// Distributor on (both groups), `intids` enabled in `vcpu`'s bank (SPIs
/// for everyone), edge-triggered, with the given priorities.
fn setup(vgic: &mut Vgic, vcpu: usize, interrupts: &[(u32, u8)]) {
    w32(vgic, 0, CTLR, 0x3);
    let v3 = vgic.config().version == GuestGicVersion::V3;
    for &(intid, priority) in interrupts {
        let frame = if v3 && intid < 32 { sgi_frame(vcpu) } else { 0 };
        let word = u64::from(intid / 32) * 4;
        w32(vgic, vcpu, frame + ISENABLER + word, 1 << (intid % 32));
        vgic.mmio_write(
            vcpu,
            frame + IPRIORITYR + u64::from(intid),
            1,
            priority.into(),
        )
        .unwrap();
        if intid >= 16 {
            let word = u64::from(intid / 16) * 4;
            let old = r32(vgic, vcpu, frame + ICFGR + word);
            w32(
                vgic,
                vcpu,
                frame + ICFGR + word,
                old | 2 << (2 * (intid % 16)),
            );
        }
    }
}

fn listed(lrs: &[ListRegister]) -> Vec<u32> {
    lrs.iter()
        .filter(|lr| !lr.is_free())
        .map(|lr| lr.virtual_intid)
        .collect()
}

#[test]
fn flush_lists_by_priority_and_asks_for_underflow_when_short() {
    let mut vgic = v3(1);
    let interrupts = [
        (40, 0xA0),
        (41, 0x20),
        (27, 0x80),
        (3, 0xF0),
        (42, 0x20),
        (50, 0x00),
    ];
    setup(&mut vgic, 0, &interrupts);
    for (intid, _) in interrupts {
        assert_eq!(vgic.inject(0, intid), Ok(Some(0)));
    }
    let mut state = VcpuInterfaceState::new(4);
    let summary = vgic.flush_state(0, &mut state).unwrap();
    assert_eq!(
        summary,
        FlushSummary {
            listed: 4,
            overflow: true
        }
    );
    // Priority order; 41 and 42 tie and 41 was injected first.
    assert_eq!(listed(state.list_registers()), [50, 41, 42, 27]);
    assert_eq!(state.lrs[1].priority, 0x20);
    assert!(state.lrs[0].group1);
    assert_eq!(state.hcr & 0b11, 0b11, "En and UIE");
    // The rest stay pending in the vGIC.
    assert!(vgic.irq_status(0, 40).unwrap().pending);
    assert_eq!(vgic.irq_status(0, 50).unwrap().listed_on, Some(0));
    assert_eq!(
        vgic.flush(0, &mut [ListRegister::EMPTY; 4]),
        Err(VgicError::NotSynced { vcpu: 0 })
    );

    // The guest takes and finishes everything listed; the next round
    // lists the remaining two and no longer needs the underflow interrupt.
    for lr in state.list_registers_mut() {
        lr.state = ListRegisterState::Invalid;
    }
    vgic.sync_state(0, &mut state).unwrap();
    assert_eq!(state.hcr & 0b10, 0);
    let summary = vgic.flush_state(0, &mut state).unwrap();
    assert_eq!(
        summary,
        FlushSummary {
            listed: 2,
            overflow: false
        }
    );
    assert_eq!(listed(state.list_registers()), [40, 3]);
    assert_eq!(state.hcr & 0b11, 0b01);
    for intid in [50, 41, 42, 27] {
        let status = vgic.irq_status(0, intid).unwrap();
        assert!(!status.pending && !status.active, "{intid}");
    }
}

#[test]
fn equal_priorities_take_turns() {
    let mut vgic = v3(1);
    let interrupts: Vec<(u32, u8)> = (32..38).map(|intid| (intid, 0x80)).collect();
    setup(&mut vgic, 0, &interrupts);
    for &(intid, _) in &interrupts {
        vgic.inject(0, intid).unwrap();
    }
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(listed(&lrs), [32, 33, 34, 35]);
    // The guest handles them and the device fires them again at once:
    // 36 and 37, waiting longer, go first now.
    for lr in &mut lrs {
        lr.state = ListRegisterState::Invalid;
    }
    vgic.sync(0, &lrs).unwrap();
    for intid in 32..36 {
        vgic.inject(0, intid).unwrap();
    }
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(listed(&lrs), [36, 37, 32, 33]);
}

#[test]
fn active_interrupts_are_listed_first_and_disabled_ones_never_pending() {
    let mut vgic = v3(1);
    setup(
        &mut vgic,
        0,
        &[(33, 0xF0), (34, 0x10), (35, 0x10), (36, 0x10)],
    );
    for intid in [33, 34, 35, 36] {
        vgic.inject(0, intid).unwrap();
    }
    let mut lrs = [ListRegister::EMPTY; 2];
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(listed(&lrs), [34, 35]);
    lrs[0].state = ListRegisterState::Active; // guest took 34
    vgic.sync(0, &lrs).unwrap();
    // The guest disables 35 (still pending) and raises 33's priority...
    w32(&mut vgic, 0, ICENABLER + 4, 1 << 3);
    vgic.mmio_write(0, IPRIORITYR + 33, 1, 0x00).unwrap();
    let summary = vgic.flush(0, &mut lrs).unwrap();
    // ...but active 34 keeps its list register, 35 is not listed.
    assert_eq!(listed(&lrs), [34, 33]);
    assert_eq!(lrs[0].state, ListRegisterState::Active);
    assert!(summary.overflow, "36 still waits");
    vgic.sync(0, &lrs).unwrap();
    assert!(vgic.irq_status(0, 35).unwrap().pending, "kept, not lost");
    // Distributor group off: nothing pending is listed, active still is.
    w32(&mut vgic, 0, CTLR, 0);
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(listed(&lrs), [34]);
    vgic.sync(0, &lrs).unwrap();
    assert!(!vgic.has_deliverable(0).unwrap());
    w32(&mut vgic, 0, CTLR, 0x2);
    assert!(vgic.has_deliverable(0).unwrap());
}

#[test]
fn sync_folds_guest_progress_and_keeps_injections_made_meanwhile() {
    let mut vgic = v3(1);
    setup(&mut vgic, 0, &[(40, 0x80), (41, 0x80), (42, 0x80)]);
    for intid in [40, 41, 42] {
        vgic.inject(0, intid).unwrap();
    }
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(0, &mut lrs).unwrap();
    // While the vCPU runs: the guest acknowledges 40 and finishes 41, and
    // the device fires 40 and 41 again.
    lrs[0].state = ListRegisterState::Active;
    lrs[1].state = ListRegisterState::Invalid;
    assert_eq!(vgic.inject(0, 40), Ok(Some(0)), "listed: kick to refresh");
    assert_eq!(vgic.inject(0, 41), Ok(Some(0)));
    vgic.sync(0, &lrs).unwrap();
    let status = |vgic: &Vgic, intid| {
        let s = vgic.irq_status(0, intid).unwrap();
        (s.pending, s.active, s.listed_on)
    };
    assert_eq!(status(&vgic, 40), (true, true, None));
    assert_eq!(status(&vgic, 41), (true, false, None));
    assert_eq!(status(&vgic, 42), (true, false, None), "not yet taken");
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(lrs[0].virtual_intid, 40);
    assert_eq!(lrs[0].state, ListRegisterState::PendingActive);
    // Injecting something already pending and not listed changes nothing.
    w32(&mut vgic, 0, ISENABLER + 4, 1 << 11);
    vgic.inject(0, 43).unwrap();
    assert_eq!(vgic.inject(0, 43), Ok(None));
}

#[test]
fn register_writes_while_listed_win_over_stale_list_registers() {
    let mut vgic = v3(2);
    setup(&mut vgic, 0, &[(40, 0x80), (41, 0x80)]);
    vgic.inject(0, 40).unwrap();
    vgic.inject(0, 41).unwrap();
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(0, &mut lrs).unwrap();
    // Another vCPU clears 40's pending state and 41's (listed) pending
    // one is reported to readers.
    assert_eq!(r32(&mut vgic, 1, 0x200 + 4), 0b11 << 8);
    w32(&mut vgic, 1, 0x280 + 4, 1 << 8);
    assert_eq!(r32(&mut vgic, 1, 0x200 + 4), 0b10 << 8);
    w32(&mut vgic, 1, 0x300 + 4, 1 << 9);
    vgic.sync(0, &lrs).unwrap();
    let s40 = vgic.irq_status(0, 40).unwrap();
    assert!(!s40.pending && !s40.active);
    let s41 = vgic.irq_status(0, 41).unwrap();
    assert!(s41.pending && s41.active);
}

#[test]
fn a_flush_after_an_empty_one_still_sees_every_kind_of_change() {
    // Each step changes state between two flushes through another entry
    // point; the second flush must not reuse the first's "nothing to list".
    type Change = fn(&mut Vgic);
    let changes: [(&str, Change); 6] = [
        ("a line raised", |v| {
            v.set_level(0, 33, true).unwrap();
        }),
        ("an injection", |v| {
            v.inject(0, 33).unwrap();
        }),
        ("a pending bit written", |v| {
            w32(v, 0, 0x200 + 4, 1 << 1); // GICD_ISPENDR1
        }),
        ("an SGI sent", |v| {
            v.send_sgi(1, 1 << 40 | 0b1).unwrap(); // SGI 0 to vCPU 0 (Aff0 0)
        }),
        ("the interrupt enabled while pending", |v| {
            w32(v, 0, ICENABLER + 4, 1 << 1);
            v.inject(0, 33).unwrap();
            let mut lrs = [ListRegister::EMPTY; 4];
            assert_eq!(v.flush(0, &mut lrs).unwrap().listed, 0, "disabled");
            v.sync(0, &lrs).unwrap();
            w32(v, 0, ISENABLER + 4, 1 << 1);
        }),
        ("the groups enabled while pending", |v| {
            w32(v, 0, CTLR, 0);
            v.inject(0, 33).unwrap();
            let mut lrs = [ListRegister::EMPTY; 4];
            assert_eq!(v.flush(0, &mut lrs).unwrap().listed, 0, "groups off");
            v.sync(0, &lrs).unwrap();
            w32(v, 0, CTLR, 0x3);
        }),
    ];
    for (what, change) in changes {
        let mut vgic = v3(2);
        w32(&mut vgic, 0, CTLR, 0x3);
        w32(&mut vgic, 0, ISENABLER + 4, 1 << 1); // INTID 33
        w32(&mut vgic, 0, sgi_frame(0) + ISENABLER, 1); // SGI 0 of vCPU 0
        let mut lrs = [ListRegister::EMPTY; 4];
        assert_eq!(vgic.flush(0, &mut lrs).unwrap().listed, 0, "{what}");
        vgic.sync(0, &lrs).unwrap();
        change(&mut vgic);
        let summary = vgic.flush(0, &mut lrs).unwrap();
        assert_eq!(summary.listed, 1, "{what}: {:?}", listed(&lrs));
    }
}

#[test]
fn level_sensitive_lines_stay_pending_while_high() {
    let mut vgic = v3(1);
    w32(&mut vgic, 0, CTLR, 0x3);
    w32(&mut vgic, 0, ISENABLER + 4, 1 << 1); // INTID 33, the PL011 on QEMU virt
    assert!(!vgic.irq_status(0, 33).unwrap().edge, "reset: level");
    assert_eq!(vgic.set_level(0, 33, true), Ok(Some(0)));
    assert_eq!(vgic.set_level(0, 33, true), Ok(None));
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(
        lrs[0].source,
        VirtualInterruptSource::Software {
            eoi_maintenance: true,
            sgi_source_cpu: 0
        },
        "level: the guest's EOI must come back to resample the line"
    );
    // The guest acknowledges and EOIs, but the line is still high.
    lrs[0].state = ListRegisterState::Invalid;
    vgic.sync(0, &lrs).unwrap();
    assert!(vgic.irq_status(0, 33).unwrap().pending);
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(listed(&lrs), [33]);
    // The device drops the line before the guest took it: not pending.
    vgic.set_level(0, 33, false).unwrap();
    vgic.sync(0, &lrs).unwrap();
    assert!(!vgic.irq_status(0, 33).unwrap().pending);
    vgic.flush(0, &mut lrs).unwrap();
    assert!(listed(&lrs).is_empty());
    vgic.sync(0, &lrs).unwrap();
    // An edge-triggered interrupt counts rising edges only.
    w32(&mut vgic, 0, ICFGR + 8, 1 << 3);
    assert_eq!(vgic.set_level(0, 33, true), Ok(Some(0)));
    vgic.set_level(0, 33, false).unwrap();
    assert!(vgic.irq_status(0, 33).unwrap().pending, "latched edge");
    vgic.flush(0, &mut lrs).unwrap();
    assert_eq!(lrs[0].state, ListRegisterState::Pending);
    assert_eq!(
        lrs[0].source,
        VirtualInterruptSource::Software {
            eoi_maintenance: false,
            sgi_source_cpu: 0
        }
    );
    lrs[0].state = ListRegisterState::Invalid;
    vgic.sync(0, &lrs).unwrap();
    assert_eq!(vgic.set_level(0, 33, true), Ok(Some(0)));
    vgic.flush(0, &mut lrs).unwrap();
    lrs[0].state = ListRegisterState::Invalid;
    vgic.sync(0, &lrs).unwrap();
    assert_eq!(vgic.set_level(0, 33, true), Ok(None), "still high: no edge");
    assert!(!vgic.irq_status(0, 33).unwrap().pending);
}

#[test]
fn vcpu_reset_clears_the_bank_but_keeps_hardware_links() {
    let mut vgic = v3(2);
    vgic.link_hardware(27, Some(27)).unwrap();
    setup(&mut vgic, 1, &[(27, 0xA0), (3, 0x10)]);
    w32(&mut vgic, 1, rd(1) + 0x14, 0);
    vgic.inject(1, 3).unwrap();
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(1, &mut lrs).unwrap();
    assert_eq!(vgic.reset_vcpu(1), Err(VgicError::NotSynced { vcpu: 1 }));
    vgic.sync(1, &lrs).unwrap();
    vgic.reset_vcpu(1).unwrap();
    let status = vgic.irq_status(1, 3).unwrap();
    assert!(!status.pending && !status.enabled && status.priority == 0);
    assert!(!vgic.irq_status(1, 27).unwrap().enabled);
    assert_eq!(vgic.irq_status(1, 27).unwrap().hardware, Some(27));
    assert_eq!(r32(&mut vgic, 0, rd(1) + 0x14), 0x6, "asleep again");
}

#[test]
fn hardware_linked_timer_is_listed_with_its_physical_intid() {
    let mut vgic = v3(2);
    vgic.link_hardware(27, Some(27)).unwrap();
    setup(&mut vgic, 1, &[(27, 0xA0)]);
    assert_eq!(vgic.inject(1, 27), Ok(Some(1)));
    assert_eq!(vgic.inject(0, 27), Ok(None), "disabled on vCPU 0");
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(1, &mut lrs).unwrap();
    assert_eq!(lrs[0], ListRegister::pending_hardware(27, 27, 0xA0));
    lrs[0].state = ListRegisterState::Active;
    vgic.sync(1, &lrs).unwrap();
    // Pending again while active: a hardware list register cannot be
    // pending and active, so only the active instance is listed.
    vgic.inject(1, 27).unwrap();
    vgic.flush(1, &mut lrs).unwrap();
    assert_eq!(lrs[0].state, ListRegisterState::Active);
    lrs[0].state = ListRegisterState::Invalid;
    vgic.sync(1, &lrs).unwrap();
    vgic.flush(1, &mut lrs).unwrap();
    assert_eq!(lrs[0].state, ListRegisterState::Pending);
}

#[test]
fn hardware_linked_level_line_decides_after_a_fold() {
    // The virtual timer: a level line, hardware-linked. Listed for its line
    // and folded back still pending (the guest had interrupts masked), it
    // is pending only while the line stays high: a guest that disables its
    // timer first takes the interrupt back (kvm-unit-tests' timer test
    // reads GICR_ISPENDR0 for exactly this).
    let mut vgic = v3(2);
    vgic.link_hardware(27, Some(27)).unwrap();
    setup(&mut vgic, 1, &[(27, 0xA0)]);
    // Level-sensitive, as Linux configures it from the timer's DT node.
    w32(&mut vgic, 1, sgi_frame(1) + ICFGR + 4, 0);
    assert!(!vgic.irq_status(1, 27).unwrap().edge);
    assert_eq!(vgic.set_level(1, 27, true), Ok(Some(1)));
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(1, &mut lrs).unwrap();
    assert_eq!(lrs[0], ListRegister::pending_hardware(27, 27, 0xA0));
    vgic.sync(1, &lrs).unwrap();
    assert!(vgic.irq_status(1, 27).unwrap().pending, "line still high");
    vgic.flush(1, &mut lrs).unwrap();
    vgic.sync(1, &lrs).unwrap();
    assert_eq!(vgic.set_level(1, 27, false), Ok(None));
    let status = vgic.irq_status(1, 27).unwrap();
    assert!(!status.pending && !status.active, "{status:?}");
    vgic.flush(1, &mut lrs).unwrap();
    assert!(listed(&lrs).is_empty());
}

#[test]
fn spis_follow_their_routing() {
    let mut vgic = v3(3);
    setup(&mut vgic, 0, &[(45, 0x80)]);
    vgic.mmio_write(0, IROUTER + 8 * 45, 8, 2).unwrap();
    assert_eq!(vgic.inject(1, 45), Ok(Some(2)), "the bank does not matter");
    let mut lrs = [ListRegister::EMPTY; 4];
    for vcpu in [0, 1] {
        vgic.flush(vcpu, &mut lrs).unwrap();
        assert!(listed(&lrs).is_empty());
        vgic.sync(vcpu, &lrs).unwrap();
    }
    vgic.flush(2, &mut lrs).unwrap();
    assert_eq!(listed(&lrs), [45]);
    // While listed on vCPU 2 it is re-routed to vCPU 1: vCPU 1 does not
    // list it twice, and after vCPU 2's sync it moves.
    vgic.mmio_write(0, IROUTER + 8 * 45, 8, 1).unwrap();
    let mut other = [ListRegister::EMPTY; 4];
    vgic.flush(1, &mut other).unwrap();
    assert!(listed(&other).is_empty());
    vgic.sync(1, &other).unwrap();
    vgic.sync(2, &lrs).unwrap();
    vgic.flush(1, &mut other).unwrap();
    assert_eq!(listed(&other), [45]);
    vgic.sync(1, &other).unwrap();
    // A GICv2 guest routes through ITARGETSR.
    let mut vgic = v2(2);
    setup(&mut vgic, 0, &[(45, 0x80)]);
    vgic.mmio_write(0, 0x800 + 45, 1, 0b10).unwrap();
    assert_eq!(vgic.inject(0, 45), Ok(Some(1)));
    assert!(vgic.has_deliverable(1).unwrap());
    assert!(!vgic.has_deliverable(0).unwrap());
}

#[test]
fn v3_sgis_by_affinity_and_broadcast() {
    let mut vgic = v3(20);
    w32(&mut vgic, 0, CTLR, 0x2);
    for vcpu in 0..20 {
        w32(&mut vgic, vcpu, sgi_frame(vcpu) + ISENABLER, 0xFFFF);
    }
    // SGI 3 to Aff1 = 1, Aff0 in {1, 3, 15}: vCPUs 17 and 19 (31 absent).
    let value = gic::sgi::sgi1r_value(3, 0, 0, 1, 0, 0b1000_0000_0000_1010);
    let delivery = vgic.send_sgi(5, value).unwrap();
    assert_eq!(delivery.sgi, 3);
    assert_eq!(delivery.targets.iter().collect::<Vec<_>>(), [17, 19]);
    assert_eq!(delivery.kick, delivery.targets);
    assert!(vgic.irq_status(17, 3).unwrap().pending);
    assert!(!vgic.irq_status(18, 3).unwrap().pending);
    // Again: already pending, nobody to kick.
    let delivery = vgic.send_sgi(5, value).unwrap();
    assert_eq!(delivery.targets.len(), 2);
    assert!(delivery.kick.is_empty());
    // Range selector 1 names Aff0 16..31, which no vCPU has.
    let delivery = vgic
        .send_sgi(0, gic::sgi::sgi1r_value(4, 0, 0, 0, 1, 0xFFFF))
        .unwrap();
    assert!(delivery.targets.is_empty());
    // IRM = 1: everyone but the sender.
    let delivery = vgic.send_sgi(7, gic::sgi::sgi1r_all_but_self(9)).unwrap();
    assert_eq!(delivery.targets.len(), 19);
    assert!(!delivery.targets.contains(7));
    assert!(!vgic.irq_status(7, 9).unwrap().pending);
    assert!(vgic.irq_status(0, 9).unwrap().pending);
    // A disabled SGI is made pending but kicks nobody.
    w32(&mut vgic, 2, sgi_frame(2) + ICENABLER, 1 << 1);
    let delivery = vgic
        .send_sgi(0, gic::sgi::sgi1r_value(1, 0, 0, 0, 0, 0b110))
        .unwrap();
    assert_eq!(delivery.kick.iter().collect::<Vec<_>>(), [1]);
    assert!(vgic.irq_status(2, 1).unwrap().pending);
    // The target lists the SGI.
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(17, &mut lrs).unwrap();
    assert_eq!(listed(&lrs), [3, 9]);
    assert_eq!(
        vgic.send_sgi(20, value),
        Err(VgicError::VcpuOutOfRange {
            vcpu: 20,
            num_vcpus: 20
        })
    );
}

#[test]
fn v2_sgir_filters_and_sources() {
    let mut vgic = v2(4);
    w32(&mut vgic, 0, CTLR, 0x1);
    for vcpu in 0..4 {
        w32(&mut vgic, vcpu, ISENABLER, 0xFFFF);
    }
    let sgir = |filter: u32, list: u32, sgi: u32| filter << 24 | list << 16 | sgi;
    // Target list.
    let actions = w32(&mut vgic, 1, SGIR, sgir(0, 0b0101, 2));
    assert_eq!(actions.kick.iter().collect::<Vec<_>>(), [0, 2]);
    // All but self.
    let actions = w32(&mut vgic, 1, SGIR, sgir(1, 0xFF, 4));
    assert_eq!(actions.kick.iter().collect::<Vec<_>>(), [0, 2, 3]);
    // Self only (the list is ignored).
    let actions = w32(&mut vgic, 3, SGIR, sgir(2, 0b0001, 6));
    assert_eq!(actions.kick.iter().collect::<Vec<_>>(), [3]);
    assert!(!vgic.irq_status(0, 6).unwrap().pending);
    // Reserved filter: nothing.
    let actions = w32(&mut vgic, 3, SGIR, sgir(3, 0xF, 7));
    assert!(actions.kick.is_empty());
    for vcpu in 0..4 {
        assert!(!vgic.irq_status(vcpu, 7).unwrap().pending);
    }
    // SGI 2 to vCPU 0 from vCPUs 1 and 3: two deliveries, each naming its
    // sender in the list register (GICV_IAR.CPUID).
    w32(&mut vgic, 3, SGIR, sgir(0, 0b0001, 2));
    let mut lrs = [ListRegister::EMPTY; 4];
    vgic.flush(0, &mut lrs).unwrap();
    let source = |lr: &ListRegister| match lr.source {
        VirtualInterruptSource::Software { sgi_source_cpu, .. } => sgi_source_cpu,
        VirtualInterruptSource::Hardware { .. } => panic!("hardware SGI"),
    };
    let sgi2: Vec<u8> = lrs
        .iter()
        .filter(|lr| !lr.is_free() && lr.virtual_intid == 2)
        .map(source)
        .collect();
    assert_eq!(sgi2, [1], "one source per list register");
    assert!(lrs.iter().all(|lr| lr.encode_v2().is_ok()));
    // The guest takes and ends it; the second source follows.
    for lr in &mut lrs {
        lr.state = ListRegisterState::Invalid;
    }
    vgic.sync(0, &lrs).unwrap();
    vgic.flush(0, &mut lrs).unwrap();
    let sgi2: Vec<u8> = lrs
        .iter()
        .filter(|lr| !lr.is_free() && lr.virtual_intid == 2)
        .map(source)
        .collect();
    assert_eq!(sgi2, [3]);
    // Group 0 (the v2 reset group) is enabled by CTLR bit 0 only.
    assert!(vgic.has_deliverable(2).unwrap());
    w32(&mut vgic, 2, IGROUPR, 0xFFFF);
    assert!(!vgic.has_deliverable(2).unwrap());
}

#[test]
fn affinity_layout_round_trips() {
    assert_eq!(vcpu_mpidr(0), 0x8000_0000);
    assert_eq!(vcpu_mpidr(17), 0x8000_0101);
    assert_eq!(vcpu_mpidr(122), 0x8000_070A);
    for vcpu in 0..MAX_VCPUS_V3 {
        assert_eq!(
            vcpu_from_affinity(vcpu_affinity(vcpu), MAX_VCPUS_V3),
            Some(vcpu)
        );
    }
    assert_eq!(vcpu_from_affinity(vcpu_affinity(5), 5), None);
    let mut odd = vcpu_affinity(1);
    odd.aff2 = 1;
    assert_eq!(vcpu_from_affinity(odd, 8), None);
    odd = vcpu_affinity(1);
    odd.aff0 = 16;
    assert_eq!(vcpu_from_affinity(odd, 64), None);
}

#[test]
fn save_and_restore_move_every_register() {
    let cpu = FakeInterface::new(4, 2);
    let mut state = VcpuInterfaceState::new(4);
    state.lrs[0] = ListRegister::pending(40, 0x80);
    state.lrs[2] = ListRegister::pending_hardware(27, 27, 0xA0);
    state.apr = [[1, 2, 3, 4], [5, 6, 7, 8]];
    state.vmcr = 0xF000_0003;
    state.hcr = 0b11;
    restore(&state, &cpu).unwrap();
    assert_eq!(cpu.lrs.borrow()[0], state.lrs[0]);
    assert_eq!(cpu.lrs.borrow()[2], state.lrs[2]);
    assert_eq!(*cpu.apr.borrow(), [[1, 2, 0, 0], [5, 6, 0, 0]]);
    assert_eq!(cpu.vmcr.get(), 0xF000_0003);
    assert_eq!(cpu.hcr.get(), 0b11);

    let mut saved = VcpuInterfaceState::new(0);
    cpu.reads_reset();
    save(&mut saved, &cpu).unwrap();
    assert_eq!(saved.num_lrs, 4);
    assert_eq!(saved.list_registers(), &state.lrs[..4]);
    assert_eq!(cpu.lr_reads.get(), 2, "empty list registers are not read");
    assert_eq!(saved.apr, [[1, 2, 0, 0], [5, 6, 0, 0]]);
    assert_eq!(saved.vmcr, 0xF000_0003);
    assert_eq!(saved.hcr, 0b11);
    assert_eq!(cpu.hcr.get(), 0, "interface off while the vCPU is out");

    // A CPU with fewer list registers than the image: the image's extra
    // slots are not written; more: the extra ones are emptied.
    let big = FakeInterface::new(8, 1);
    big.lrs.borrow_mut()[6] = ListRegister::pending(99, 0);
    restore(&saved, &big).unwrap();
    assert!(big.lrs.borrow()[6].is_free());
    // Something the hardware cannot hold is an error, not a silent drop.
    let mut bad = saved;
    bad.lrs[1] = ListRegister::pending(1020, 0);
    assert!(restore(&bad, &big).is_err());
}

impl FakeInterface {
    fn reads_reset(&self) {
        self.lr_reads.set(0);
    }

    /// Every register access counted since the last call: (list register
    /// reads, list register writes, ELRSR reads, HCR writes).
    fn take_accesses(&self) -> (usize, usize, usize, usize) {
        (
            self.lr_reads.replace(0),
            self.lr_writes.replace(0),
            self.status_reads.replace(0),
            self.hcr_writes.replace(0),
        )
    }
}

/// One exit and the next entry as the hypervisor makes them: the list
/// registers read back, folded, refilled, written.
fn exit_and_enter(
    vgic: &mut Vgic,
    vcpu: usize,
    state: &mut VcpuInterfaceState,
    cpu: &FakeInterface,
) {
    exit(state, cpu).unwrap();
    vgic.sync_state(vcpu, state).unwrap();
    vgic.flush_state(vcpu, state).unwrap();
    enter(state, cpu).unwrap();
}

#[test]
fn a_round_trip_with_nothing_in_flight_touches_no_interface_register() {
    let mut vgic = v3(1);
    setup(&mut vgic, 0, &[(40, 0x80)]);
    let cpu = FakeInterface::new(4, 2);
    let mut state = VcpuInterfaceState::new(4);
    vgic.flush_state(0, &mut state).unwrap();
    enter(&mut state, &cpu).unwrap();
    assert_eq!(cpu.take_accesses().1, 4, "the first entry loads everything");
    assert_eq!(cpu.hcr.get(), 1);
    for _ in 0..3 {
        exit_and_enter(&mut vgic, 0, &mut state, &cpu);
        assert_eq!(cpu.take_accesses(), (0, 0, 0, 0));
    }
    // Planted: an interface the exit did not know was resident is saved
    // and loaded in full, which this test would see.
    state.resident = false;
    exit_and_enter(&mut vgic, 0, &mut state, &cpu);
    assert_ne!(cpu.take_accesses(), (0, 0, 0, 0));
}

#[test]
fn only_list_registers_that_changed_move_between_exits() {
    let mut vgic = v3(1);
    setup(&mut vgic, 0, &[(40, 0x80)]);
    let cpu = FakeInterface::new(4, 2);
    let mut state = VcpuInterfaceState::new(4);
    vgic.flush_state(0, &mut state).unwrap();
    enter(&mut state, &cpu).unwrap();
    cpu.take_accesses();
    vgic.inject(0, 40).unwrap();
    exit_and_enter(&mut vgic, 0, &mut state, &cpu);
    assert_eq!(cpu.intids(), [(40, ListRegisterState::Pending)]);
    let (reads, writes, _, _) = cpu.take_accesses();
    assert_eq!(
        (reads, writes),
        (0, 1),
        "nothing was listed before: one write"
    );
    assert_eq!(cpu.hcr.get(), 1);

    // The guest takes it: read back, folded, listed again as active,
    // which the hardware already holds.
    cpu.guest_acknowledge(0);
    exit_and_enter(&mut vgic, 0, &mut state, &cpu);
    assert_eq!(cpu.intids(), [(40, ListRegisterState::Active)]);
    let (reads, writes, status, hcr) = cpu.take_accesses();
    assert_eq!((reads, writes, status), (1, 0, 1));
    assert_eq!(hcr, 2, "off while it was in flight, on again at entry");
    assert_eq!(cpu.hcr.get(), 1);

    // The guest finishes it: ELRSR says empty, nothing to read or write.
    cpu.guest_deactivate(0);
    exit_and_enter(&mut vgic, 0, &mut state, &cpu);
    assert!(cpu.intids().is_empty());
    assert_eq!(cpu.take_accesses().0, 0);
    assert!(!vgic.irq_status(0, 40).unwrap().active);
    exit_and_enter(&mut vgic, 0, &mut state, &cpu);
    assert_eq!(cpu.take_accesses(), (0, 0, 0, 0));
}

#[test]
fn a_finished_interrupt_that_asked_for_maintenance_is_cleared_at_the_next_entry() {
    let mut vgic = v3(1);
    w32(&mut vgic, 0, CTLR, 0x3);
    w32(&mut vgic, 0, ISENABLER + 4, 1 << 1); // INTID 33, level
    let cpu = FakeInterface::new(4, 2);
    let mut state = VcpuInterfaceState::new(4);
    vgic.flush_state(0, &mut state).unwrap();
    enter(&mut state, &cpu).unwrap();
    vgic.set_level(0, 33, true).unwrap();
    exit_and_enter(&mut vgic, 0, &mut state, &cpu);
    cpu.guest_acknowledge(0);
    vgic.set_level(0, 33, false).unwrap();
    cpu.guest_deactivate(0);
    // Invalid but still asking for maintenance (ICH_MISR.EOI stays up
    // until the register is rewritten): the entry must rewrite it.
    assert_eq!(cpu.empty_list_registers() & 1, 0);
    cpu.take_accesses();
    exit_and_enter(&mut vgic, 0, &mut state, &cpu);
    assert_eq!(cpu.lrs.borrow()[0], ListRegister::EMPTY);
    assert_eq!(cpu.take_accesses().1, 1);
}

#[test]
fn put_moves_priorities_and_control_and_the_next_entry_loads_everything() {
    let mut vgic = v3(1);
    setup(&mut vgic, 0, &[(40, 0x80)]);
    let (cpu_a, cpu_b) = (FakeInterface::new(4, 2), FakeInterface::new(4, 2));
    let mut state = VcpuInterfaceState::new(4);
    vgic.flush_state(0, &mut state).unwrap();
    enter(&mut state, &cpu_a).unwrap();
    vgic.inject(0, 40).unwrap();
    exit_and_enter(&mut vgic, 0, &mut state, &cpu_a);
    // The guest takes 40 and changes its priority mask; then the vCPU
    // leaves CPU A for CPU B.
    cpu_a.guest_acknowledge(0);
    cpu_a.apr.borrow_mut()[1][0] = 1 << 2;
    cpu_a.vmcr.set(0xF000_0002);
    exit(&mut state, &cpu_a).unwrap();
    vgic.sync_state(0, &mut state).unwrap();
    put(&mut state, &cpu_a).unwrap();
    assert_eq!(cpu_a.hcr.get(), 0, "off while the vCPU is out");
    assert!(!state.resident);
    put(&mut state, &cpu_a).unwrap();
    cpu_a.take_accesses();
    assert_eq!(cpu_a.hcr_writes.get(), 0, "a second put does nothing");

    vgic.flush_state(0, &mut state).unwrap();
    enter(&mut state, &cpu_b).unwrap();
    assert_eq!(cpu_b.intids(), [(40, ListRegisterState::Active)]);
    assert_eq!(cpu_b.apr.borrow()[1][0], 1 << 2);
    assert_eq!(cpu_b.vmcr.get(), 0xF000_0002);
    assert_eq!(cpu_b.hcr.get(), 1);
    assert_eq!(cpu_b.take_accesses().1, 4, "every list register written");
}

#[test]
fn pending_interrupts_follow_a_vcpu_to_another_physical_cpu() {
    let mut vgic = v3(2);
    let interrupts: Vec<(u32, u8)> =
        [(40, 0x40), (41, 0x50), (42, 0x60), (43, 0x70), (44, 0x80)].to_vec();
    setup(&mut vgic, 1, &interrupts);
    for intid in 40..45 {
        vgic.mmio_write(0, IROUTER + 8 * u64::from(intid), 8, 1)
            .unwrap();
        vgic.inject(0, intid).unwrap();
    }
    let (cpu_a, cpu_b) = (FakeInterface::new(4, 1), FakeInterface::new(4, 1));
    let mut state = VcpuInterfaceState::new(4);

    // vCPU 1 runs on CPU A and takes 40 (left active) and 41 (finished).
    vgic.flush_state(1, &mut state).unwrap();
    restore(&state, &cpu_a).unwrap();
    assert_eq!(cpu_a.hcr.get() & 0b10, 0b10, "five interrupts, four LRs");
    cpu_a.guest_acknowledge(0);
    cpu_a.guest_acknowledge(1);
    cpu_a.guest_deactivate(1);
    cpu_a.vmcr.set(0xF000_0002);
    save(&mut state, &cpu_a).unwrap();
    vgic.sync_state(1, &mut state).unwrap();

    // Meanwhile vCPU 0 uses CPU A; vCPU 1 comes back on CPU B.
    let mut other = VcpuInterfaceState::new(4);
    vgic.flush_state(0, &mut other).unwrap();
    restore(&other, &cpu_a).unwrap();
    assert!(
        cpu_a.intids().is_empty(),
        "nothing of vCPU 1 leaks to vCPU 0"
    );
    vgic.inject(0, 41).unwrap(); // 41 fires again while vCPU 1 is out
    vgic.flush_state(1, &mut state).unwrap();
    restore(&state, &cpu_b).unwrap();
    assert_eq!(cpu_b.vmcr.get(), 0xF000_0002, "the guest's PMR moved too");
    assert_eq!(
        cpu_b.intids(),
        [
            (40, ListRegisterState::Active),
            (41, ListRegisterState::Pending),
            (42, ListRegisterState::Pending),
            (43, ListRegisterState::Pending),
        ]
    );
    assert_eq!(cpu_b.hcr.get() & 0b10, 0b10, "44 still waits");
    // The guest finishes everything on CPU B.
    for i in 0..4 {
        if cpu_b.lrs.borrow()[i].state == ListRegisterState::Pending {
            cpu_b.guest_acknowledge(i);
        }
        cpu_b.guest_deactivate(i);
    }
    save(&mut state, &cpu_b).unwrap();
    vgic.sync_state(1, &mut state).unwrap();
    vgic.flush_state(1, &mut state).unwrap();
    assert_eq!(listed(state.list_registers()), [44]);
    assert_eq!(state.hcr & 0b10, 0);
}

/// xorshift64*: a small deterministic generator, so every failure names
/// a seed that reproduces it.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// The reference model of one interrupt: what the guest must eventually
/// see, with edge-interrupt coalescing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Model {
    pending: bool,
    active: bool,
}

/// Random inject / enable / disable / route / run (flush, restore, guest
/// acknowledges and deactivates, injections meanwhile, save, sync)
/// sequences on two vCPUs and three physical CPUs. Checks after every
/// step that the vGIC agrees with the model (no interrupt lost or
/// duplicated), that a flush never lists a disabled interrupt as pending,
/// never lists one twice, never lists another vCPU's interrupt, and that
/// finally everything drains. Injections that hit a listed interrupt are,
/// as in KVM, taken to arrive after whatever the guest does with the
/// listed copy during that run.
/// What a flush of `vcpu` lists (and whether more wait) when each list
/// register takes the best remaining candidate in turn: the definition the
/// one-pass ranking in `Vgic::flush` must match.
fn flush_by_repeated_best_pick(vgic: &Vgic, vcpu: usize, num_lrs: usize) -> (Vec<u32>, bool) {
    let mut vgic = vgic.clone();
    let mut picked = Vec::new();
    while picked.len() < num_lrs.min(MAX_LIST_REGISTERS) {
        let (Some(intid), _) = vgic.best_candidate(vcpu) else {
            break;
        };
        vgic.list(vcpu, intid);
        picked.push(intid);
    }
    let overflow = vgic.best_candidate(vcpu).0.is_some();
    (picked, overflow)
}

fn random_sequence(seed: u64, version: GuestGicVersion) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let vcpus = 2;
    let mut vgic = Vgic::new(VgicConfig {
        version,
        num_vcpus: vcpus,
        num_spis: 32,
    })
    .unwrap();
    // v3: SGIs are per-vCPU too; v2 SGIs have per-source state the model
    // does not describe, so v2 uses PPIs and SPIs.
    let private: &[u32] = match version {
        GuestGicVersion::V3 => &[1, 2, 27, 30],
        GuestGicVersion::V2 => &[20, 27, 30],
    };
    let spis: [u32; 6] = [32, 33, 40, 41, 50, 63];
    for vcpu in 0..vcpus {
        let mut interrupts: Vec<(u32, u8)> = Vec::new();
        for &intid in private
            .iter()
            .chain(if vcpu == 0 { &spis[..] } else { &[] })
        {
            interrupts.push((intid, (rng.below(4) as u8) << 6));
        }
        setup(&mut vgic, vcpu, &interrupts);
    }
    let num_lrs = 1 + rng.below(4);
    let cpus: Vec<FakeInterface> = (0..3).map(|_| FakeInterface::new(num_lrs, 1)).collect();
    let mut states = vec![VcpuInterfaceState::new(num_lrs); vcpus];
    // Model keyed by (bank, intid); SPIs use bank 0.
    let key = |vcpu: usize, intid: u32| {
        if intid < 32 {
            (vcpu, intid)
        } else {
            (0, intid)
        }
    };
    let mut model = std::collections::BTreeMap::new();
    for vcpu in 0..vcpus {
        for &intid in private {
            model.insert((vcpu, intid), Model::default());
        }
    }
    for &intid in &spis {
        model.insert((0, intid), Model::default());
    }
    let all: Vec<(usize, u32)> = model.keys().copied().collect();

    let check = |vgic: &Vgic, model: &std::collections::BTreeMap<(usize, u32), Model>, step| {
        assert!(
            vgic.touched_cover_every_busy_interrupt(),
            "seed {seed} step {step}: an interrupt that is not quiet is not marked for the scans"
        );
        for (&(vcpu, intid), m) in model {
            let s = vgic.irq_status(vcpu, intid).unwrap();
            assert_eq!(
                (s.pending, s.active),
                (m.pending, m.active),
                "seed {seed} step {step}: INTID {intid} bank {vcpu}"
            );
            assert_eq!(s.listed_on, None);
        }
    };
    let toggle_enable = |vgic: &mut Vgic, vcpu: usize, intid: u32, enable: bool| {
        let frame = if version == GuestGicVersion::V3 && intid < 32 {
            sgi_frame(vcpu)
        } else {
            0
        };
        let base = if enable { ISENABLER } else { ICENABLER };
        w32(
            vgic,
            vcpu,
            frame + base + u64::from(intid / 32) * 4,
            1 << (intid % 32),
        );
    };

    for step in 0..200 {
        match rng.below(10) {
            0..=2 => {
                let (vcpu, intid) = all[rng.below(all.len())];
                vgic.inject(vcpu, intid).unwrap();
                model.get_mut(&(vcpu, intid)).unwrap().pending = true;
            }
            3 => {
                let (vcpu, intid) = all[rng.below(all.len())];
                toggle_enable(&mut vgic, vcpu, intid, rng.below(3) != 0);
            }
            4 => {
                let intid = spis[rng.below(spis.len())];
                let target = rng.below(vcpus);
                match version {
                    GuestGicVersion::V3 => {
                        vgic.mmio_write(0, IROUTER + 8 * u64::from(intid), 8, target as u64)
                            .unwrap();
                    }
                    GuestGicVersion::V2 => {
                        vgic.mmio_write(0, 0x800 + u64::from(intid), 1, 1 << target)
                            .unwrap();
                    }
                }
            }
            _ => {
                let vcpu = rng.below(vcpus);
                let cpu = &cpus[rng.below(cpus.len())];
                let state = &mut states[vcpu];
                let expected =
                    flush_by_repeated_best_pick(&vgic, vcpu, state.list_registers().len());
                let summary = vgic.flush_state(vcpu, state).unwrap();
                assert_eq!(
                    (listed(state.list_registers()), summary.overflow),
                    expected,
                    "seed {seed} step {step}: the one-pass flush differs from repeated best picks"
                );
                let mut seen = Vec::new();
                for lr in state.list_registers().iter().filter(|lr| !lr.is_free()) {
                    let s = vgic.irq_status(vcpu, lr.virtual_intid).unwrap();
                    assert_eq!(s.listed_on, Some(vcpu));
                    assert_eq!(
                        s.target,
                        Some(vcpu),
                        "seed {seed}: listed on the wrong vCPU"
                    );
                    if matches!(
                        lr.state,
                        ListRegisterState::Pending | ListRegisterState::PendingActive
                    ) {
                        assert!(s.enabled, "seed {seed} step {step}: disabled INTID listed");
                    }
                    assert!(
                        !seen.contains(&lr.virtual_intid),
                        "seed {seed}: listed twice"
                    );
                    seen.push(lr.virtual_intid);
                }
                restore(state, cpu).unwrap();
                // The guest runs: acknowledges and deactivates at random,
                // and devices inject meanwhile.
                let mut late = Vec::new();
                for _ in 0..rng.below(6) {
                    let index = rng.below(num_lrs);
                    let lr = cpu.lrs.borrow()[index];
                    let m = model.get_mut(&key(vcpu, lr.virtual_intid));
                    match (lr.state, m) {
                        (ListRegisterState::Pending, Some(m)) if rng.below(2) == 0 => {
                            assert!(m.pending && !m.active, "seed {seed}: duplicate delivery");
                            cpu.guest_acknowledge(index);
                            m.pending = false;
                            m.active = true;
                        }
                        (ListRegisterState::Active | ListRegisterState::PendingActive, Some(m)) => {
                            cpu.guest_deactivate(index);
                            m.active = false;
                        }
                        _ => {
                            let (bank, intid) = all[rng.below(all.len())];
                            let s = vgic.irq_status(bank, intid).unwrap();
                            vgic.inject(bank, intid).unwrap();
                            if s.listed_on.is_some() {
                                late.push((bank, intid));
                            } else {
                                model.get_mut(&(bank, intid)).unwrap().pending = true;
                            }
                        }
                    }
                }
                save(state, cpu).unwrap();
                vgic.sync_state(vcpu, state).unwrap();
                for k in late {
                    model.get_mut(&k).unwrap().pending = true;
                }
            }
        }
        check(&vgic, &model, step);
    }

    // Drain: everything enabled, the guest handles all it is given.
    for &(vcpu, intid) in &all {
        toggle_enable(&mut vgic, vcpu, intid, true);
    }
    for round in 0.. {
        assert!(round < 100, "seed {seed}: interrupts never drain");
        if model.values().all(|m| *m == Model::default()) {
            break;
        }
        for vcpu in 0..vcpus {
            let state = &mut states[vcpu];
            let cpu = &cpus[vcpu];
            vgic.flush_state(vcpu, state).unwrap();
            restore(state, cpu).unwrap();
            for index in 0..num_lrs {
                let lr = cpu.lrs.borrow()[index];
                if lr.is_free() {
                    continue;
                }
                let m = model.get_mut(&key(vcpu, lr.virtual_intid)).unwrap();
                if lr.state == ListRegisterState::Pending {
                    assert!(m.pending && !m.active, "seed {seed}: duplicate delivery");
                    cpu.guest_acknowledge(index);
                    m.pending = false;
                    m.active = true;
                }
                cpu.guest_deactivate(index);
                m.active = false;
            }
            save(state, cpu).unwrap();
            vgic.sync_state(vcpu, state).unwrap();
        }
        check(&vgic, &model, 1000 + round);
    }
}

#[test]
fn random_sequences_never_lose_or_duplicate_v3() {
    for seed in 0..300 {
        random_sequence(seed, GuestGicVersion::V3);
    }
}

#[test]
fn random_sequences_never_lose_or_duplicate_v2() {
    for seed in 0..300 {
        random_sequence(seed, GuestGicVersion::V2);
    }
}

#[test]
fn vcpu_mask_operations() {
    let mut mask = VcpuMask::EMPTY;
    assert!(mask.is_empty());
    mask.insert(0);
    mask.insert(127);
    mask.insert(128); // ignored
    assert_eq!(mask.len(), 2);
    assert!(mask.contains(127) && !mask.contains(128));
    assert_eq!(mask.iter().collect::<Vec<_>>(), [0, 127]);
    assert_eq!(VcpuMask::EMPTY.only(), None);
    assert_eq!(VcpuMask::single(0).only(), Some(0));
    assert_eq!(VcpuMask::single(127).only(), Some(127));
    assert_eq!(mask.only(), None, "{mask:?}");
    let mut other = VcpuMask::single(5);
    other.union_with(mask);
    assert_eq!(other.bits(), 1 | 1 << 5 | 1 << 127);
    let _ = rd(0);
}

/// The lock-free entry check (`is_quiet_at` against the published
/// generation) says "skip" only where the full exit, fold, flush and entry
/// would change nothing: no interface register touched and the same
/// interface state. Random injections (edge and level), guest
/// acknowledgements and EOIs, disables and enables, checked at every entry.
#[test]
fn a_quiet_entry_is_one_the_full_path_would_leave_unchanged() {
    let mut vgic = v3(2);
    setup(
        &mut vgic,
        0,
        &[(3, 0xa0), (27, 0x80), (40, 0x90), (41, 0x70)],
    );
    setup(&mut vgic, 1, &[(3, 0xa0)]);
    let published = vgic.published(0).unwrap();
    let cpu = FakeInterface::new(4, 2);
    let mut state = VcpuInterfaceState::new(4);
    vgic.flush_state(0, &mut state).unwrap();
    enter(&mut state, &cpu).unwrap();
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let (mut skipped, mut full, mut injected_while_quiet) = (0, 0, 0);
    for _ in 0..6000 {
        let was_quiet = state.is_quiet_at(published.get());
        match next(9) {
            0 => drop(vgic.inject(0, 40).unwrap()),
            1 => drop(vgic.inject(1, 41).unwrap()),
            2 => drop(vgic.set_level(0, 27, next(2) == 0).unwrap()),
            3 | 4 => {
                let lrs = cpu.lrs.borrow().clone();
                if let Some(index) = lrs.iter().position(|lr| !lr.is_free()) {
                    if lrs[index].state == ListRegisterState::Pending {
                        cpu.guest_acknowledge(index);
                    } else {
                        cpu.guest_deactivate(index);
                    }
                }
            }
            5 => drop(w32(&mut vgic, 0, ICENABLER + 4, 1 << (40 % 32))),
            6 => drop(w32(&mut vgic, 0, ISENABLER + 4, 1 << (40 % 32))),
            // SGI 3 from the other vCPU, to this one or to the other one
            // itself (a change the entry here may skip).
            7 => {
                let target_list = if next(4) == 0 { 0b01 } else { 0b10 };
                vgic.send_sgi(1, gic::sgi::sgi1r_value(3, 0, 0, 0, 0, target_list))
                    .unwrap();
            }
            _ => {}
        }
        if was_quiet && !state.is_quiet_at(published.get()) {
            injected_while_quiet += 1;
        }
        // The exit, then the entry's check.
        if state.is_quiet_at(published.get()) {
            skipped += 1;
            let before = state;
            cpu.take_accesses();
            exit_and_enter(&mut vgic, 0, &mut state, &cpu);
            assert_eq!(
                cpu.take_accesses(),
                (0, 0, 0, 0),
                "a skipped entry had work"
            );
            assert_eq!(state, before, "a skipped entry would change the interface");
        } else {
            full += 1;
            exit_and_enter(&mut vgic, 0, &mut state, &cpu);
        }
    }
    // Not vacuous: both kinds of entry, and changes that ended quiet spells.
    assert!(
        skipped > 100 && full > 100,
        "skipped {skipped}, full {full}"
    );
    assert!(injected_while_quiet > 50, "{injected_while_quiet}");
}

/// A vCPU's generation moves with changes that may give it something to
/// list, not with another vCPU's private interrupts: the sender of an SGI
/// enters without a flush, its target with one; a change to an SPI or to
/// the distributor moves every vCPU's.
#[test]
fn a_change_to_one_vcpus_private_interrupts_leaves_the_others_quiet() {
    let mut vgic = v3(3);
    for vcpu in 0..3 {
        setup(&mut vgic, vcpu, &[(3, 0x80), (27, 0x80)]);
    }
    // Each vCPU resident on a CPU of its own.
    let cpus: Vec<_> = (0..3).map(|_| FakeInterface::new(4, 2)).collect();
    let mut states = [VcpuInterfaceState::new(4); 3];
    let published: Vec<_> = (0..3).map(|v| vgic.published(v).unwrap()).collect();
    let flush = |vgic: &mut Vgic, states: &mut [VcpuInterfaceState; 3], vcpu: usize| {
        vgic.flush_state(vcpu, &mut states[vcpu]).unwrap();
        enter(&mut states[vcpu], &cpus[vcpu]).unwrap();
    };
    for vcpu in 0..3 {
        flush(&mut vgic, &mut states, vcpu);
    }
    let quiet = |states: &[VcpuInterfaceState; 3]| -> Vec<bool> {
        (0..3)
            .map(|v| states[v].is_quiet_at(published[v].get()))
            .collect()
    };
    assert_eq!(quiet(&states), [true, true, true]);
    // vCPU 0 sends SGI 3 to vCPU 1.
    vgic.send_sgi(0, gic::sgi::sgi1r_value(3, 0, 0, 0, 0, 0b10))
        .unwrap();
    assert_eq!(quiet(&states), [true, false, true]);
    flush(&mut vgic, &mut states, 1);
    assert_eq!(listed(states[1].list_registers()), [3]);
    // vCPU 2 disables its timer's PPI.
    w32(&mut vgic, 2, sgi_frame(2) + ICENABLER, 1 << 27);
    assert_eq!(quiet(&states), [true, false, false]);
    flush(&mut vgic, &mut states, 2);
    assert_eq!(quiet(&states), [true, false, true]);
    // An SPI (routed to vCPU 0) and a distributor write move everyone's.
    vgic.inject(0, 40).unwrap();
    assert_eq!(quiet(&states), [false, false, false]);
    for vcpu in [0, 2] {
        flush(&mut vgic, &mut states, vcpu);
    }
    assert_eq!(quiet(&states), [true, false, true], "SPI 40 is disabled");
    w32(&mut vgic, 0, CTLR, 0x3);
    assert_eq!(quiet(&states), [false, false, false]);
    // A vCPU reset is that vCPU's change.
    for vcpu in [0, 2] {
        flush(&mut vgic, &mut states, vcpu);
    }
    vgic.reset_vcpu(2).unwrap();
    assert_eq!(quiet(&states), [true, false, false]);
}

#[test]
fn a_copied_vgic_publishes_on_its_own() {
    let mut vgic = v3(1);
    let published = vgic.published(0).unwrap();
    assert!(published.is_of(&vgic, 0));
    let copy = vgic.clone();
    assert!(!published.is_of(&copy, 0));
    assert!(copy.published(0).unwrap().is_of(&copy, 0));
    setup(&mut vgic, 0, &[(40, 0x80)]);
    let seen = published.get();
    assert_ne!(seen, 0, "register writes are changes");
    assert_eq!(
        copy.published(0).unwrap().get(),
        0,
        "the copy did not change"
    );
}

/// `sync_state` leaves every image empty and says so; the next
/// `flush_state` then writes only what it lists. Images that may hold
/// something (here a stale one a caller left, the flag cleared) are
/// emptied by the flush.
#[test]
fn a_flush_after_a_sync_relies_on_the_images_it_left_empty() {
    let mut vgic = v3(1);
    setup(&mut vgic, 0, &[(40, 0x80), (41, 0x80)]);
    assert_eq!(vgic.inject(0, 40), Ok(Some(0)));
    assert_eq!(vgic.inject(0, 41), Ok(Some(0)));
    let mut state = VcpuInterfaceState::new(4);
    assert_eq!(vgic.flush_state(0, &mut state).unwrap().listed, 2);
    assert_eq!(state.images_used, 0b11);
    for lr in state.list_registers_mut() {
        lr.state = ListRegisterState::Invalid;
    }
    vgic.sync_state(0, &mut state).unwrap();
    assert_eq!(state.images_used, 0);
    assert!(
        state
            .list_registers()
            .iter()
            .all(|lr| *lr == ListRegister::EMPTY)
    );

    assert_eq!(vgic.inject(0, 41), Ok(Some(0)));
    assert_eq!(vgic.flush_state(0, &mut state).unwrap().listed, 1);
    assert_eq!(state.images_used, 0b1, "what the flush listed");
    assert_eq!(listed(state.list_registers()), [41]);
    assert!(
        state.list_registers()[1..]
            .iter()
            .all(ListRegister::is_empty)
    );

    let mut stale = VcpuInterfaceState::new(4);
    stale.lrs[3] = ListRegister::pending(50, 0);
    stale.images_used = 1 << 3;
    let mut other = v3(1);
    setup(&mut other, 0, &[(40, 0x80)]);
    assert_eq!(other.inject(0, 40), Ok(Some(0)));
    assert_eq!(other.flush_state(0, &mut stale).unwrap().listed, 1);
    assert_eq!(listed(stale.list_registers()), [40]);
    assert_eq!(stale.lrs[3], ListRegister::EMPTY);
}
