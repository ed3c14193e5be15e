//! Boot on ARM64: the image header and entry code (`boot.S`), the boot and final
//! identity maps, and starting secondary CPUs.
//!
//! The platform owns the entry points; the hypervisor provides
//! `hv_primary_main(dtb, exception_level)` and `hv_secondary_main(cpu)`.

use alloc::boxed::Box;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, Ordering};

use aarch64_cpu::registers::TTBR0_EL2;
use tock_registers::interfaces::Readable;

use super::{cpu, exceptions, psci};
use crate::mmu::{self, MmuError, PageTable};

core::arch::global_asm!(include_str!("boot.S"), options(raw));

/// A page table that the boot assembly or the primary CPU writes once, before
/// any other CPU can see it.
#[repr(transparent)]
pub struct BootTable(UnsafeCell<PageTable>);

// SAFETY: written only by the primary CPU before secondaries start (boot.S and
// `install_identity_map`); afterwards only the MMU reads it.
unsafe impl Sync for BootTable {}

/// The level-1 table of 1 GiB blocks `boot.S` builds before the MMU goes on,
/// for the 512 GiB region that holds the image.
#[unsafe(no_mangle)]
pub static BOOT_PAGE_TABLE: BootTable = BootTable(UnsafeCell::new(PageTable::empty()));

/// The boot map's root (level 0): one entry, for [`BOOT_PAGE_TABLE`].
#[unsafe(no_mangle)]
pub static BOOT_LEVEL0_TABLE: BootTable = BootTable(UnsafeCell::new(PageTable::empty()));

/// Level-2 tables for GiB ranges that mix RAM and MMIO; 8 is ample for the
/// boards we support (Pi 4 needs 2).
const LEVEL2_TABLES: usize = 8;

/// Level-1 tables: one per 512 GiB region of a 48-bit physical address
/// space (2 MiB), so every MMIO address an ACPI server names is reachable.
const LEVEL1_TABLES: usize = mmu::ENTRIES;

struct FinalTables {
    level0: PageTable,
    level1: [PageTable; LEVEL1_TABLES],
    level2: [PageTable; LEVEL2_TABLES],
}

struct FinalTablesCell(UnsafeCell<FinalTables>);

// SAFETY: see `BootTable`: one writer (the primary, before SMP), then read-only.
unsafe impl Sync for FinalTablesCell {}

static FINAL_TABLES: FinalTablesCell = FinalTablesCell(UnsafeCell::new(FinalTables {
    level0: PageTable::empty(),
    level1: [const { PageTable::empty() }; LEVEL1_TABLES],
    level2: [const { PageTable::empty() }; LEVEL2_TABLES],
}));

unsafe extern "C" {
    fn secondary_entry();
    fn switch_page_table_el2(level1: u64);
}

unsafe extern "Rust" {
    fn hv_primary_main(dtb: usize, exception_level: u64) -> !;
    fn hv_secondary_main(cpu: usize) -> !;
}

#[unsafe(no_mangle)]
extern "C" fn platform_primary_entry(dtb: usize, exception_level: u64) -> ! {
    if exception_level == 2 {
        cpu::set_index(0);
        cpu::route_interrupts_to_el2();
        exceptions::install_vectors();
    }
    // SAFETY: provided by the hypervisor binary with this exact signature.
    unsafe { hv_primary_main(dtb, exception_level) }
}

#[unsafe(no_mangle)]
extern "C" fn platform_secondary_entry(cpu_index: usize) -> ! {
    cpu::set_index(cpu_index);
    cpu::route_interrupts_to_el2();
    exceptions::install_vectors();
    // SAFETY: provided by the hypervisor binary with this exact signature.
    unsafe { hv_secondary_main(cpu_index) }
}

/// End of what the final identity map covers (0 before it is installed).
static IDENTITY_MAP_END: AtomicU64 = AtomicU64::new(0);

/// The end of the identity-mapped physical address space, once
/// [`install_identity_map`] ran (0 before: only the boot map's image region).
pub fn identity_map_end() -> u64 {
    IDENTITY_MAP_END.load(Ordering::Acquire)
}

/// Replaces the boot map with the final identity map of the CPU's whole
/// physical address space: `ram` (`(base, size)`) Normal, everything else
/// Device. Call once, on the primary, before starting secondaries.
pub fn install_identity_map(ram: &[(u64, u64)]) -> Result<(), MmuError> {
    // SAFETY: only the primary CPU runs (secondaries start after this), and the
    // final tables are not yet in use by the MMU.
    let tables = unsafe { &mut *FINAL_TABLES.0.get() };
    let regions = mmu::regions_for(cpu::physical_address_bits());
    mmu::build_identity_map(
        ram,
        &mut tables.level0,
        &mut tables.level1[..regions],
        &mut tables.level2,
        |table| table as *const PageTable as u64,
    )?;
    let level0 = &tables.level0 as *const PageTable as u64;
    // SAFETY: the new map covers the running image, stack and heap with the same
    // Normal attributes and addresses as the boot map (the caller passes the RAM
    // that holds them), so execution continues seamlessly.
    unsafe { switch_page_table_el2(level0) };
    IDENTITY_MAP_END.store(regions as u64 * mmu::LEVEL0_REGION, Ordering::Release);
    Ok(())
}

/// What a secondary CPU reads (MMU off) before it can run Rust: layout shared
/// with `boot.S`.
#[repr(C, align(64))]
pub(crate) struct SecondaryBoot {
    page_table: u64,
    stack_top: u64,
    cpu_index: u64,
}

/// Stack size of each secondary CPU.
pub const SECONDARY_STACK_BYTES: usize = 256 * 1024;

/// A secondary CPU's stack and boot block, ready for `secondary_entry`: kept
/// alive until the CPU is known to have been released, then leaked to it.
pub(crate) struct PreparedSecondary {
    stack: alloc::boxed::Box<[u8]>,
    boot: Box<SecondaryBoot>,
}

impl PreparedSecondary {
    /// Allocates CPU `cpu_index`'s stack and boot block (current page table)
    /// and cleans the block to the point of coherency: the new CPU reads it
    /// with its MMU and caches off.
    pub(crate) fn new(cpu_index: usize) -> Self {
        let stack: Box<[u8]> = alloc::vec![0u8; SECONDARY_STACK_BYTES].into_boxed_slice();
        let stack_top = (stack.as_ptr() as u64 + SECONDARY_STACK_BYTES as u64) & !0xf;
        let boot = Box::new(SecondaryBoot {
            page_table: TTBR0_EL2.get(),
            stack_top,
            cpu_index: cpu_index as u64,
        });
        let prepared = Self { stack, boot };
        clean_to_point_of_coherency(
            prepared.boot_address(),
            core::mem::size_of::<SecondaryBoot>(),
        );
        prepared
    }

    /// The boot block's address: `secondary_entry`'s x0.
    pub(crate) fn boot_address(&self) -> u64 {
        &*self.boot as *const SecondaryBoot as u64
    }

    /// The CPU has been released: it owns its stack and boot block from now on.
    pub(crate) fn hand_over(self) {
        Box::leak(self.stack);
        Box::leak(self.boot);
    }
}

/// The address of `secondary_entry` (x0 = a `SecondaryBoot` block).
pub(crate) fn secondary_entry_address() -> u64 {
    secondary_entry as *const () as u64
}

/// Starts CPU `cpu_index` (hardware id `mpidr`) through PSCI `CPU_ON`; it enters
/// `hv_secondary_main(cpu_index)` on its own stack with the current page table.
pub fn start_secondary(
    conduit: psci::Conduit,
    cpu_index: usize,
    mpidr: u64,
) -> Result<(), psci::PsciError> {
    let prepared = PreparedSecondary::new(cpu_index);
    let result = psci::cpu_on(
        conduit,
        mpidr,
        secondary_entry_address(),
        prepared.boot_address(),
    );
    if result.is_ok() {
        prepared.hand_over();
    }
    result
}

/// Cleans `[start, start + len)` from the data caches to the point of
/// coherency, so an observer with its caches off (a CPU before its MMU is on)
/// reads what this CPU wrote.
pub(crate) fn clean_to_point_of_coherency(start: u64, len: usize) {
    const LINE: u64 = 64;
    let mut line = start & !(LINE - 1);
    while line < start + len as u64 {
        // SAFETY: cleaning a cache line by address has no effect on memory contents.
        unsafe { core::arch::asm!("dc cvac, {}", in(reg) line) };
        line += LINE;
    }
    // SAFETY: barrier only.
    unsafe { core::arch::asm!("dsb sy") };
}

/// The first and last byte of the hypervisor image (including .bss), from the linker.
pub fn image_range() -> (u64, u64) {
    unsafe extern "C" {
        static __image_start: u8;
        static __image_end: u8;
    }
    (
        core::ptr::addr_of!(__image_start) as u64,
        core::ptr::addr_of!(__image_end) as u64,
    )
}
