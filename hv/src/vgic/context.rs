//! Saving and restoring a vCPU's virtual CPU interface (list registers,
//! active priorities, VMCR, HCR) on a vCPU switch, through a trait so the
//! same code runs against the hardware and against a fake in tests.

use gic::virt::VirtualCpuInterface;
use gic::{GicError, ListRegister};

use super::lr::HCR_ENABLE;

/// List registers the vGIC uses at most (GICv3 has up to 16; GICv2 up to
/// 64, but implementations have 4, and more than 16 buys nothing).
pub const MAX_LIST_REGISTERS: usize = 16;

/// Active-priority registers per group kept (GICv3 with 7 preemption bits
/// has four; GICv2 has one, GICH_APR).
pub const MAX_ACTIVE_PRIORITY_REGISTERS: usize = 4;

/// The registers of a virtual CPU interface a vCPU switch saves and
/// restores beyond what [`VirtualCpuInterface`] offers.
///
/// Implemented here for the GICv3 `IchV3`. The GICv2 `GichV2` needs
/// raw access to GICH_HCR/VMCR/APR, which the `gic` crate exposes only
/// through `tock-registers` (not a dependency of this crate): see the
/// crate's report; the binary can implement it next to its arch code.
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
    /// `ICH_AP<group>R<index>_EL2`, or GICH_APR for group 1 index 0 (GICv2
    /// has a single register shared by both groups; group 0 reads as 0).
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
        }
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
    hw: &dyn VcpuInterfaceRegisters,
) -> Result<(), GicError> {
    state.hcr = hw.hcr();
    hw.set_hcr(0);
    let num_lrs = hw.num_list_registers().min(MAX_LIST_REGISTERS);
    state.num_lrs = num_lrs;
    let empty = hw.empty_list_registers();
    for (index, lr) in state.lrs.iter_mut().enumerate() {
        *lr = if index < num_lrs && empty & (1 << index) == 0 {
            hw.read_list_register(index)?
        } else {
            ListRegister::EMPTY
        };
    }
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

/// Loads `state` into the calling CPU's virtual CPU interface: every
/// implemented list register (those beyond `state.num_lrs` are written
/// empty), the active priorities, VMCR, and HCR last, which turns the
/// interface on.
pub fn restore(
    state: &VcpuInterfaceState,
    hw: &dyn VcpuInterfaceRegisters,
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
