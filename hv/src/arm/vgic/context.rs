//! Saving and restoring a vCPU's virtual CPU interface (list registers,
//! active priorities, VMCR, HCR), through a trait so the same code runs
//! against the hardware and against a fake in tests.
//!
//! Two paces, as KVM and Xen do it: on every exit and entry only the list
//! registers that can have changed move ([`exit`], [`enter`]: none at all
//! when no interrupt was in flight), and the rest of the interface (active
//! priorities, VMCR, the interface turned off) only when the vCPU leaves
//! the CPU ([`put`]) or arrives on one ([`enter`] after a `put`, a full
//! [`restore`]). Moving all of it on every exit cost about 700 instructions
//! a round trip, more than Xen's whole MMIO exit (BENCHMARKS.md).

use gic::virt::VirtualCpuInterface;
use gic::{GicError, ListRegister};

use super::lr::HCR_ENABLE;

/// List registers the vGIC uses at most (GICv3 has up to 16; GICv2 up to
/// 64, but implementations have 4, and more than 16 buys nothing).
pub const MAX_LIST_REGISTERS: usize = 16;

// The per-slot masks (`images_used`, `in_hardware_used`) are `u64`s.
const _: () = assert!(MAX_LIST_REGISTERS < 64);

/// Active-priority registers per group kept (GICv3 with 7 preemption bits
/// has four; GICv2 has one, GICH_APR).
pub const MAX_ACTIVE_PRIORITY_REGISTERS: usize = 4;

/// The registers of a virtual CPU interface a vCPU switch saves and
/// restores beyond what [`VirtualCpuInterface`] offers.
///
/// Implemented here for the GICv3 `IchV3` (ICH_*_EL2 system registers)
/// and the GICv2 `GichV2` (the GICH frame, banked per CPU). The functions
/// below are generic over it, so the binary's entry and exit paths call
/// them with the concrete interface and the register accesses inline
/// (through `&dyn`, each list register write was two indirect calls and
/// an out-of-line encode); tests may still pass a `&dyn`.
/// HCR's low byte and EOICount have the same layout in both versions;
/// VMCR is moved as an opaque image (its layouts differ, nothing here
/// interprets it).
pub trait VcpuInterfaceRegisters: VirtualCpuInterface {
    /// ICH_HCR_EL2 / GICH_HCR.
    fn hcr(&self) -> u64;
    /// Writes ICH_HCR_EL2 / GICH_HCR.
    fn set_hcr(&self, value: u64);
    /// ICH_VMCR_EL2 / GICH_VMCR: the guest's CPU-interface control state.
    fn vmcr(&self) -> u64;
    /// Writes ICH_VMCR_EL2 / GICH_VMCR.
    fn set_vmcr(&self, value: u64);
    /// Active-priority registers per group (GICv3: 1, 2 or 4; GICv2: 1).
    fn num_active_priority_registers(&self) -> usize;
    /// `ICH_AP<group>R<index>_EL2`; on GICv2, GICH_APR for index 0 of
    /// either group (GICv2 has a single register for both groups, so
    /// [`save`] stores the same value in both groups' slot 0 and
    /// [`restore`] writes it twice, group 1 last).
    fn active_priorities(&self, group: usize, index: usize) -> Result<u32, GicError>;
    /// Writes an active-priority register (see [`Self::active_priorities`]).
    fn set_active_priorities(&self, group: usize, index: usize, value: u32)
    -> Result<(), GicError>;
}

/// A vCPU's virtual CPU interface while the vCPU is not on a CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VcpuInterfaceState {
    /// List register images; the first `num_lrs` are meaningful.
    pub lrs: [ListRegister; MAX_LIST_REGISTERS],
    /// List registers in use (set by [`save`] to what the hardware has).
    pub num_lrs: usize,
    /// Active priorities, `[group][index]`.
    pub apr: [[u32; MAX_ACTIVE_PRIORITY_REGISTERS]; 2],
    /// VMCR (the guest's priority mask, binary points, group enables).
    pub vmcr: u64,
    /// HCR (enable and maintenance-interrupt requests).
    pub hcr: u64,
    /// Whether the CPU running the vCPU holds this interface in its
    /// registers (set by [`enter`], cleared by [`put`] and [`save`]): then
    /// `in_hardware` and `hcr_in_hardware` say what they hold.
    pub resident: bool,
    /// The list registers as the hardware holds them while `resident` (what
    /// the last [`enter`] wrote, as the last [`exit`] read it back), in the
    /// hardware's encoding: entries and exits compare and copy these words,
    /// not decoded [`ListRegister`]s (whose copies the strict-alignment
    /// hypervisor build makes with calls to `memcpy`). 0 is an empty one.
    in_hardware: [u64; MAX_LIST_REGISTERS],
    /// Which of `in_hardware` are not empty: what an exit must read back
    /// (a mask, so the common exit with nothing in flight is one test).
    in_hardware_used: u64,
    /// HCR as the hardware holds it while `resident`.
    hcr_in_hardware: u64,
    /// The vGIC generation at which the last flush ([`Vgic::flush_state`])
    /// listed nothing; `None` after one that listed something. While the
    /// vGIC is still at that generation and nothing is in flight, an entry
    /// has nothing to do ([`VcpuInterfaceState::is_quiet_at`]).
    ///
    /// [`Vgic::flush_state`]: super::Vgic::flush_state
    pub quiet_at: Option<u64>,
    /// Bit n clear: image n of `lrs` is known empty
    /// ([`ListRegister::is_empty`]). Kept by everything here that writes
    /// `lrs`: a flush sets the bits of what it listed, [`Vgic::sync_state`]
    /// clears them once it emptied those images, an exit or [`save`] sets
    /// the bits of what it read back. So an entry looks at these images and
    /// the list registers in use only, not at every one, and a flush after
    /// a sync need not empty the others. (A test that writes `lrs` itself
    /// sets the bits, or loads it with [`restore`], which looks at all.)
    ///
    /// [`Vgic::sync_state`]: super::Vgic::sync_state
    pub(super) images_used: u64,
}

impl VcpuInterfaceState {
    /// A fresh interface with `num_lrs` list registers (clamped to
    /// [`MAX_LIST_REGISTERS`]), all empty, the interface enabled, the
    /// guest's VMCR zero (groups disabled, priority mask 0: the guest
    /// programs them).
    pub const fn new(num_lrs: usize) -> VcpuInterfaceState {
        VcpuInterfaceState {
            lrs: [ListRegister::EMPTY; MAX_LIST_REGISTERS],
            num_lrs: if num_lrs < MAX_LIST_REGISTERS {
                num_lrs
            } else {
                MAX_LIST_REGISTERS
            },
            apr: [[0; MAX_ACTIVE_PRIORITY_REGISTERS]; 2],
            vmcr: 0,
            hcr: HCR_ENABLE,
            resident: false,
            in_hardware: [0; MAX_LIST_REGISTERS],
            in_hardware_used: 0,
            hcr_in_hardware: 0,
            quiet_at: None,
            images_used: 0,
        }
    }

    /// Whether the hardware holds this interface with nothing in flight:
    /// no list register in use, no maintenance request, HCR as wanted, and
    /// the last flush listed nothing. Then an exit has nothing to read back
    /// or fold in (the vGIC lists nothing for the vCPU).
    pub fn nothing_in_flight(&self) -> bool {
        self.resident
            && self.in_hardware_used == 0
            && self.hcr_in_hardware == self.hcr
            && self.hcr & !HCR_ENABLE == 0
            && self.quiet_at.is_some()
    }

    /// Whether an entry may skip the vGIC: nothing is in flight
    /// ([`Self::nothing_in_flight`]) and the vGIC's published generation is
    /// still `quiet_at`, so a flush would list nothing again and leave the
    /// hardware as it is.
    pub fn is_quiet_at(&self, generation: u64) -> bool {
        self.nothing_in_flight() && self.quiet_at == Some(generation)
    }

    /// The list registers in use.
    pub fn list_registers(&self) -> &[ListRegister] {
        &self.lrs[..self.num_lrs.min(MAX_LIST_REGISTERS)]
    }

    /// The list registers in use, mutable.
    pub fn list_registers_mut(&mut self) -> &mut [ListRegister] {
        &mut self.lrs[..self.num_lrs.min(MAX_LIST_REGISTERS)]
    }
}

/// Saves the calling CPU's virtual CPU interface into `state` and turns
/// the interface off (HCR = 0), so no maintenance interrupt fires for a
/// vCPU that is not running. List registers the hardware reports empty
/// (ELRSR) are stored as [`ListRegister::EMPTY`] without being read.
pub fn save(
    state: &mut VcpuInterfaceState,
    hw: &(impl VcpuInterfaceRegisters + ?Sized),
) -> Result<(), GicError> {
    state.resident = false;
    state.hcr = hw.hcr();
    hw.set_hcr(0);
    let num_lrs = hw.num_list_registers().min(MAX_LIST_REGISTERS);
    state.num_lrs = num_lrs;
    let empty = hw.empty_list_registers();
    state.images_used = 0;
    for (index, lr) in state.lrs.iter_mut().enumerate() {
        *lr = if index < num_lrs && empty & (1 << index) == 0 {
            state.images_used |= 1 << index;
            hw.read_list_register(index)?
        } else {
            ListRegister::EMPTY
        };
    }
    save_priorities_and_control(state, hw)
}

/// Loads `state` into the calling CPU's virtual CPU interface: every
/// implemented list register (those beyond `state.num_lrs` are written
/// empty), the active priorities, VMCR, and HCR last, which turns the
/// interface on.
pub fn restore(
    state: &VcpuInterfaceState,
    hw: &(impl VcpuInterfaceRegisters + ?Sized),
) -> Result<(), GicError> {
    let num_lrs = hw.num_list_registers().min(MAX_LIST_REGISTERS);
    for index in 0..num_lrs {
        let lr = if index < state.num_lrs {
            &state.lrs[index]
        } else {
            &ListRegister::EMPTY
        };
        hw.write_list_register(index, lr)?;
    }
    let num_apr = hw
        .num_active_priority_registers()
        .min(MAX_ACTIVE_PRIORITY_REGISTERS);
    for (group, registers) in state.apr.iter().enumerate() {
        for (index, apr) in registers.iter().enumerate().take(num_apr) {
            hw.set_active_priorities(group, index, *apr)?;
        }
    }
    hw.set_vmcr(state.vmcr);
    hw.set_hcr(state.hcr);
    Ok(())
}

/// After an exit from the vCPU `state` belongs to, on the CPU that ran it:
/// reads back the list registers the guest may have changed, those
/// [`enter`] left holding an interrupt, and nothing at all (not even the
/// empty-status register) when none did. While one was, the interface is
/// turned off until the entry, so no maintenance interrupt stays raised
/// while the hypervisor runs. The active priorities and VMCR stay in the
/// hardware until [`put`]. Without a resident interface (the vCPU never
/// entered since its last [`put`]), a full [`save`].
pub fn exit(
    state: &mut VcpuInterfaceState,
    hw: &(impl VcpuInterfaceRegisters + ?Sized),
) -> Result<(), GicError> {
    if !state.resident {
        return save(state, hw);
    }
    let in_use = state.in_hardware_used;
    if in_use != 0 || state.hcr_in_hardware & !HCR_ENABLE != 0 {
        // An interrupt in flight can raise a maintenance interrupt (an EOI
        // request, the underflow request), a level that would stay up
        // while the hypervisor acknowledges interrupts: off until entry.
        hw.set_hcr(0);
        state.hcr_in_hardware = 0;
    }
    if in_use == 0 {
        // Nothing was listed: the guest cannot have put anything there.
        return Ok(());
    }
    let empty = hw.empty_list_registers();
    let encoding = hw.list_register_encoding();
    let mut slots = in_use;
    while slots != 0 {
        let index = slots.trailing_zeros() as usize;
        slots &= slots - 1;
        if empty & (1 << index) != 0 {
            // The guest finished it, and it asks for no maintenance: it
            // holds nothing the next entry must keep.
            state.lrs[index] = ListRegister::EMPTY;
            state.images_used &= !(1 << index);
            state.note_in_hardware(index, 0, true);
            continue;
        }
        let value = hw.read_list_register_raw(index)?;
        if value != state.in_hardware[index] {
            // The guest acknowledged or finished it. (Unchanged, the image
            // still holds what the entry wrote.)
            let lr = ListRegister::decode(encoding, value);
            state.lrs[index] = lr;
            let empty = lr.is_empty();
            if empty {
                state.images_used &= !(1 << index);
            } else {
                state.images_used |= 1 << index;
            }
            state.note_in_hardware(index, value, empty);
        }
    }
    Ok(())
}

/// Before entering the vCPU `state` belongs to: writes the list registers
/// that differ from what the hardware holds, and HCR if it changed. The
/// first entry after a [`put`] (or ever) loads everything ([`restore`]).
pub fn enter(
    state: &mut VcpuInterfaceState,
    hw: &(impl VcpuInterfaceRegisters + ?Sized),
) -> Result<(), GicError> {
    let num_lrs = state.num_lrs.min(MAX_LIST_REGISTERS);
    let encoding = hw.list_register_encoding();
    if !state.resident {
        restore(state, hw)?;
        // `restore` wrote every implemented register: the ones beyond
        // `num_lrs` empty.
        state.in_hardware_used = 0;
        for index in 0..num_lrs {
            let lr = &state.lrs[index];
            let (value, empty) = (lr.encode(encoding)?, lr.is_empty());
            state.note_in_hardware(index, value, empty);
        }
        state.hcr_in_hardware = state.hcr;
        state.resident = true;
        return Ok(());
    }
    // Empty wanted where the hardware holds nothing (most of them): nothing
    // to compare. (An invalid register asking for EOI maintenance is never
    // wanted: it would only raise MISR.EOI.)
    // `num_lrs` is at most MAX_LIST_REGISTERS, below 64 (asserted): the
    // shift cannot overflow.
    let implemented = (1u64 << num_lrs) - 1;
    let mut slots = (state.images_used | state.in_hardware_used) & implemented;
    while slots != 0 {
        let index = slots.trailing_zeros() as usize;
        slots &= slots - 1;
        let wanted = &state.lrs[index];
        let empty = wanted.is_empty();
        if empty && state.in_hardware_used & (1 << index) == 0 {
            continue;
        }
        let value = wanted.encode(encoding)?;
        if value != state.in_hardware[index] {
            hw.write_list_register_raw(index, value)?;
            state.note_in_hardware(index, value, empty);
        }
    }
    if state.hcr != state.hcr_in_hardware {
        hw.set_hcr(state.hcr);
        state.hcr_in_hardware = state.hcr;
    }
    Ok(())
}

impl VcpuInterfaceState {
    /// Records that the hardware's list register `index` holds `value`,
    /// whose decoding is `empty` or not. An invalid register that still
    /// asks for an EOI maintenance interrupt is not empty
    /// ([`ListRegister::is_empty`]): it must be rewritten.
    fn note_in_hardware(&mut self, index: usize, value: u64, empty: bool) {
        self.in_hardware[index] = value;
        if empty {
            self.in_hardware_used &= !(1 << index);
        } else {
            self.in_hardware_used |= 1 << index;
        }
    }
}

/// The vCPU `state` belongs to leaves this CPU (another context is loaded):
/// saves what [`exit`] left in the hardware, the active priorities and
/// VMCR, and turns the interface off (HCR = 0), so no maintenance interrupt
/// fires for a vCPU that is not running. Its list registers were read back
/// by the exit before the switch.
pub fn put(
    state: &mut VcpuInterfaceState,
    hw: &(impl VcpuInterfaceRegisters + ?Sized),
) -> Result<(), GicError> {
    if !state.resident {
        return Ok(());
    }
    state.resident = false;
    hw.set_hcr(0);
    save_priorities_and_control(state, hw)
}

fn save_priorities_and_control(
    state: &mut VcpuInterfaceState,
    hw: &(impl VcpuInterfaceRegisters + ?Sized),
) -> Result<(), GicError> {
    let num_apr = hw
        .num_active_priority_registers()
        .min(MAX_ACTIVE_PRIORITY_REGISTERS);
    for (group, registers) in state.apr.iter_mut().enumerate() {
        for (index, apr) in registers.iter_mut().enumerate() {
            *apr = if index < num_apr {
                hw.active_priorities(group, index)?
            } else {
                0
            };
        }
    }
    state.vmcr = hw.vmcr();
    Ok(())
}

impl VcpuInterfaceRegisters for gic::virt::v3::IchV3 {
    fn hcr(&self) -> u64 {
        gic::virt::v3::IchV3::hcr(self).get()
    }

    fn set_hcr(&self, value: u64) {
        gic::virt::v3::IchV3::set_hcr(self, value);
    }

    fn vmcr(&self) -> u64 {
        gic::virt::v3::IchV3::vmcr(self).get()
    }

    fn set_vmcr(&self, value: u64) {
        gic::virt::v3::IchV3::set_vmcr(self, value);
    }

    fn num_active_priority_registers(&self) -> usize {
        gic::virt::v3::IchV3::num_active_priority_registers(self)
    }

    fn active_priorities(&self, group: usize, index: usize) -> Result<u32, GicError> {
        // The registers are 32 bits wide, held in a 64-bit system register.
        self.read_active_priorities(group, index)
            .map(|value| value as u32)
    }

    fn set_active_priorities(
        &self,
        group: usize,
        index: usize,
        value: u32,
    ) -> Result<(), GicError> {
        self.write_active_priorities(group, index, value.into())
    }
}

/// GICv2: the calling CPU's GICH frame. GICH_HCR and GICH_VMCR are 32
/// bits wide: the state's upper halves are zero after a [`save`] here and
/// are dropped by [`restore`]. GICH_APR is the one active-priorities
/// register, named by index 0 of group 0 or group 1 (see
/// [`VcpuInterfaceRegisters::active_priorities`]).
impl VcpuInterfaceRegisters for gic::virt::v2::GichV2 {
    fn hcr(&self) -> u64 {
        gic::virt::v2::GichV2::hcr(self).get().into()
    }

    fn set_hcr(&self, value: u64) {
        // GICH_HCR has no bits above 31.
        gic::virt::v2::GichV2::set_hcr(self, value as u32);
    }

    fn vmcr(&self) -> u64 {
        gic::virt::v2::GichV2::vmcr(self).get().into()
    }

    fn set_vmcr(&self, value: u64) {
        // GICH_VMCR has no bits above 31.
        gic::virt::v2::GichV2::set_vmcr(self, value as u32);
    }

    fn num_active_priority_registers(&self) -> usize {
        gic::virt::v2::GichV2::num_active_priority_registers(self)
    }

    fn active_priorities(&self, group: usize, index: usize) -> Result<u32, GicError> {
        self.read_active_priorities(group, index)
    }

    fn set_active_priorities(
        &self,
        group: usize,
        index: usize,
        value: u32,
    ) -> Result<(), GicError> {
        self.write_active_priorities(group, index, value)
    }
}

#[cfg(test)]
mod gicv2_tests {
    //! Save/restore through the real `GichV2` driver over plain memory,
    //! checked at the GICH offsets of IHI 0048B §5.3.

    use gic::ListRegisterState;
    use gic::virt::v2::{GichMemory, GichV2};

    use super::*;

    const GICH_HCR: usize = 0x000;
    const GICH_VTR: usize = 0x004;
    const GICH_VMCR: usize = 0x008;
    const GICH_ELRSR0: usize = 0x030;
    const GICH_APR: usize = 0x0F0;
    const GICH_LR0: usize = 0x100;

    /// A CPU's GICH frame with `num_lrs` list registers (QEMU and GIC-400:
    /// 4), 5 priority and preemption bits; every list register empty.
    fn gich(num_lrs: u32) -> (&'static GichMemory, GichV2) {
        let memory: &'static GichMemory = Box::leak(Box::new(GichMemory::new()));
        assert!(memory.write32(GICH_VTR, 0x9000_0000 | 4 << 26 | (num_lrs - 1)));
        assert!(memory.write32(GICH_ELRSR0, (1 << num_lrs) - 1));
        (memory, GichV2::over_memory(memory))
    }

    fn read(memory: &GichMemory, offset: usize) -> u32 {
        memory.read32(offset).expect("offset inside the GICH frame")
    }

    #[test]
    fn gicv2_reports_one_active_priority_register_aliased_by_both_groups() {
        let (memory, hw) = gich(4);
        let hw: &dyn VcpuInterfaceRegisters = &hw;
        assert_eq!(hw.num_list_registers(), 4);
        assert_eq!(hw.num_active_priority_registers(), 1);
        hw.set_active_priorities(0, 0, 0x8000_0000).unwrap();
        assert_eq!(read(memory, GICH_APR), 0x8000_0000);
        assert_eq!(hw.active_priorities(1, 0), Ok(0x8000_0000));
        hw.set_active_priorities(1, 0, 0x1).unwrap();
        assert_eq!(hw.active_priorities(0, 0), Ok(0x1));
        assert!(hw.active_priorities(0, 1).is_err());
        assert!(hw.set_active_priorities(2, 0, 5).is_err());
        assert_eq!(read(memory, GICH_APR), 0x1);

        hw.set_hcr(0xFFFF_FFFF_0000_0003);
        assert_eq!(read(memory, GICH_HCR), 0b11, "upper half dropped");
        assert_eq!(hw.hcr(), 0b11);
        hw.set_vmcr(0xF020_0201);
        assert_eq!(read(memory, GICH_VMCR), 0xF020_0201);
        assert_eq!(hw.vmcr(), 0xF020_0201);
    }

    #[test]
    fn gicv2_vcpu_moves_between_cpus_with_every_register() {
        let (first, first_hw) = gich(4);
        let mut state = VcpuInterfaceState::new(4);
        state.lrs[0] = ListRegister::pending(40, 0x80);
        state.lrs[3] = ListRegister::pending_hardware(27, 27, 0xA0);
        state.apr = [[0x4, 0, 0, 0], [0x4, 0, 0, 0]];
        state.vmcr = 0xF000_0001;
        state.hcr = 0b11;
        restore(&state, &first_hw).unwrap();
        assert_eq!(read(first, GICH_LR0), state.lrs[0].encode_v2().unwrap());
        assert_eq!(read(first, GICH_LR0 + 4), 0, "unused slot written empty");
        assert_eq!(
            read(first, GICH_LR0 + 12),
            state.lrs[3].encode_v2().unwrap()
        );
        assert_eq!(read(first, GICH_APR), 0x4);
        assert_eq!(read(first, GICH_VMCR), 0xF000_0001);
        assert_eq!(read(first, GICH_HCR), 0b11, "HCR written, interface on");

        // The guest runs: acknowledges the timer (LR3 active), raises its
        // priority (APR), changes its PMR (VMCR); the hardware keeps ELRSR
        // and counts an unmatched EOI in HCR.EOICount.
        let active = ListRegister {
            state: ListRegisterState::Active,
            ..state.lrs[3]
        };
        assert!(first.write32(GICH_LR0 + 12, active.encode_v2().unwrap()));
        assert!(first.write32(GICH_ELRSR0, 0b0110));
        assert!(first.write32(GICH_APR, 0x10));
        assert!(first.write32(GICH_VMCR, 0xA000_0001));
        assert!(first.write32(GICH_HCR, 1 << 27 | 0b11));

        let mut saved = VcpuInterfaceState::new(0);
        save(&mut saved, &first_hw).unwrap();
        assert_eq!(saved.num_lrs, 4);
        assert_eq!(
            saved.list_registers(),
            &[
                state.lrs[0],
                ListRegister::EMPTY,
                ListRegister::EMPTY,
                active
            ]
        );
        assert_eq!(saved.apr, [[0x10, 0, 0, 0], [0x10, 0, 0, 0]]);
        assert_eq!(saved.vmcr, 0xA000_0001);
        assert_eq!(saved.hcr, 1 << 27 | 0b11);
        assert_eq!(
            read(first, GICH_HCR),
            0,
            "interface off while the vCPU is out"
        );

        // Another CPU, whose GICH holds a different vCPU's leftovers.
        let (second, second_hw) = gich(4);
        assert!(second.write32(
            GICH_LR0 + 8,
            ListRegister::pending(99, 0).encode_v2().unwrap()
        ));
        assert!(second.write32(GICH_APR, 0xFFFF));
        restore(&saved, &second_hw).unwrap();
        for (index, lr) in saved.list_registers().iter().enumerate() {
            assert_eq!(read(second, GICH_LR0 + 4 * index), lr.encode_v2().unwrap());
        }
        assert_eq!(read(second, GICH_APR), 0x10);
        assert_eq!(read(second, GICH_VMCR), 0xA000_0001);
        assert_eq!(read(second, GICH_HCR), 1 << 27 | 0b11);
    }
}
