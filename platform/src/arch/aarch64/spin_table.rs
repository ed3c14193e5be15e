//! Starting secondary CPUs through a spin table (device tree
//! `enable-method = "spin-table"`, Linux `Documentation/arch/arm64/booting.rst`):
//! the Raspberry Pi firmware (and QEMU's `raspi4b` boot stub) park each
//! secondary in a `wfe` loop that polls the 64-bit word at its
//! `cpu-release-addr`; once the word is non-zero the CPU jumps there, at EL2
//! with the MMU off, with x0 = 0.
//!
//! Unlike PSCI `CPU_ON` there is no context id, so the released CPU enters at
//! `secondary_spin_entry` (below), finds its `SecondaryBoot` block by its own
//! MPIDR in [`SPIN_SLOTS`], which the primary filled first, and continues in
//! `boot.S`'s `secondary_entry` exactly like a PSCI-started CPU.

use core::cell::UnsafeCell;
use core::fmt;

use super::boot::{self, PreparedSecondary};
use super::cpu::MPIDR_AFFINITY_MASK;

/// How many CPUs can be started through the spin table: one slot each.
pub const SPIN_SLOT_COUNT: usize = 256;

/// One released CPU's entry: its MPIDR affinity and the address of its
/// `SecondaryBoot` block (0: slot unused). Layout shared with the assembly.
#[repr(C)]
struct SpinSlot {
    mpidr: u64,
    boot: u64,
}

// `ldp x4, x5, [x2], #16` in the assembly: mpidr at +0, boot block at +8.
const _: () = {
    assert!(core::mem::size_of::<SpinSlot>() == 16);
    assert!(core::mem::offset_of!(SpinSlot, boot) == 8);
};

/// The table `secondary_spin_entry` searches, with its MMU and caches off.
#[repr(C, align(64))]
struct SpinSlots(UnsafeCell<[SpinSlot; SPIN_SLOT_COUNT]>);

// SAFETY: only the primary writes, one slot per CPU and before it releases
// that CPU; a released CPU only reads its own slot.
unsafe impl Sync for SpinSlots {}

/// The slots, indexed by logical CPU index.
static SPIN_SLOTS: SpinSlots = SpinSlots(UnsafeCell::new(
    [const { SpinSlot { mpidr: 0, boot: 0 } }; SPIN_SLOT_COUNT],
));

// Where a spin-table CPU jumps to (x0 = 0, MMU off). It must be at EL2 to run
// the hypervisor; anything else parks. The search is bounded by the table size;
// a CPU without a slot (released by someone else) parks too, and the primary's
// bounded wait for it to come online reports it.
core::arch::global_asm!(
    ".pushsection .text.secondary_spin_entry, \"ax\"",
    ".global secondary_spin_entry",
    "secondary_spin_entry:",
    "    mrs     x1, CurrentEL",
    "    cmp     x1, #(2 << 2)",
    "    b.ne    3f",
    "    mrs     x1, mpidr_el1",
    "    ldr     x2, ={mask}",
    "    and     x1, x1, x2",
    "    adrp    x2, {slots}",
    "    add     x2, x2, :lo12:{slots}",
    "    mov     x3, #{count}",
    "1:  ldp     x4, x5, [x2], #16",
    "    cmp     x4, x1",
    "    b.ne    2f",
    "    cbz     x5, 2f",
    "    mov     x0, x5",
    "    b       secondary_entry",
    "2:  subs    x3, x3, #1",
    "    b.ne    1b",
    "3:  wfe",
    "    b       3b",
    ".ltorg",
    ".popsection",
    mask = const MPIDR_AFFINITY_MASK,
    slots = sym SPIN_SLOTS,
    count = const SPIN_SLOT_COUNT,
);

unsafe extern "C" {
    fn secondary_spin_entry();
}

/// Why a CPU could not be released from its spin table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpinTableError {
    /// `cpu-release-addr` is 0 or not 8-byte aligned: not a usable release word.
    BadReleaseAddress(u64),
    /// The CPU index has no slot (at most [`SPIN_SLOT_COUNT`] CPUs).
    TooManyCpus {
        /// The logical index asked for.
        cpu_index: usize,
    },
    /// The release word already holds this non-zero address: the CPU was
    /// released before (by us or the firmware) and is not waiting for us.
    AlreadyReleased(u64),
}

impl fmt::Display for SpinTableError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadReleaseAddress(address) => write!(
                f,
                "spin table: cpu-release-addr {address:#x} is not a non-zero 8-byte-aligned address"
            ),
            Self::TooManyCpus { cpu_index } => write!(
                f,
                "spin table: cpu {cpu_index} has no slot (at most {SPIN_SLOT_COUNT} CPUs)"
            ),
            Self::AlreadyReleased(entry) => write!(
                f,
                "spin table: release word already holds {entry:#x}; the CPU is not parked there"
            ),
        }
    }
}

/// Checks a release address and CPU index before anything is written.
fn check_request(release_address: u64, cpu_index: usize) -> Result<(), SpinTableError> {
    if release_address == 0 || !release_address.is_multiple_of(8) {
        return Err(SpinTableError::BadReleaseAddress(release_address));
    }
    if cpu_index >= SPIN_SLOT_COUNT {
        return Err(SpinTableError::TooManyCpus { cpu_index });
    }
    Ok(())
}

/// Releases CPU `cpu_index` (hardware id `mpidr`) parked on the spin table
/// word at `release_address` (its device tree `cpu-release-addr`); it enters
/// `hv_secondary_main(cpu_index)` on its own stack with the current page
/// table. Returns once the CPU has been released: whether it came online is
/// for the caller to wait for, with a bound.
///
/// `release_address` must lie in RAM the identity map covers (the Pi's spin
/// table is at 0xd8-0xf0, in the firmware's `/memreserve/` page).
pub fn start_secondary_spin_table(
    release_address: u64,
    cpu_index: usize,
    mpidr: u64,
) -> Result<(), SpinTableError> {
    check_request(release_address, cpu_index)?;
    let word = release_address as *mut u64;
    // SAFETY: the device tree names this 8-byte-aligned word as the CPU's
    // release address, in RAM the identity map covers; a volatile read has
    // no side effect.
    let current = unsafe { core::ptr::read_volatile(word) };
    if current != 0 {
        return Err(SpinTableError::AlreadyReleased(current));
    }
    let prepared = PreparedSecondary::new(cpu_index);
    let slots = SPIN_SLOTS.0.get().cast::<SpinSlot>();
    // SAFETY: `cpu_index` is in bounds (checked); only the primary writes the
    // table, and this slot's CPU has not been released yet, so nobody reads it.
    let slot = unsafe { &mut *slots.add(cpu_index) };
    slot.mpidr = mpidr & MPIDR_AFFINITY_MASK;
    slot.boot = prepared.boot_address();
    // The released CPU reads its slot with its caches off (also a `dsb sy`).
    boot::clean_to_point_of_coherency(
        slot as *const SpinSlot as u64,
        core::mem::size_of::<SpinSlot>(),
    );
    let entry = secondary_spin_entry as *const () as u64;
    // SAFETY: as for the read above; the parked CPU polls this word, and a
    // single 64-bit store is what it waits for.
    unsafe { core::ptr::write_volatile(word, entry) };
    // The parked CPU polls with its caches off: push the store to memory, then
    // wake it from `wfe`.
    boot::clean_to_point_of_coherency(release_address, 8);
    // SAFETY: barrier and event only.
    unsafe { core::arch::asm!("dsb sy", "sev", options(nostack, preserves_flags)) };
    prepared.hand_over();
    Ok(())
}
