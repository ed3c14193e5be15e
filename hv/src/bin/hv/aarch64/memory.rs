//! Memory for domains: guest RAM and stage-2 tables from the hypervisor heap,
//! which is identity-mapped, so a heap address is also the physical address.

use alloc::alloc::{Layout, alloc_zeroed, dealloc};
use core::arch::asm;

use hv::arm::stage2::{Table, TableAllocator};

/// Stage-2 tables from the heap.
pub struct HeapTables;

impl TableAllocator for HeapTables {
    fn allocate(&mut self, pages: usize) -> Option<u64> {
        let bytes = pages.checked_mul(4096)?;
        let layout = Layout::from_size_align(bytes, bytes.next_power_of_two()).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(ptr as u64)
    }

    fn free(&mut self, address: u64, pages: usize) {
        let bytes = pages * 4096;
        if let Ok(layout) = Layout::from_size_align(bytes, bytes.next_power_of_two()) {
            // SAFETY: `address` came from `allocate` with this page count, so
            // the layout is the one it was allocated with.
            unsafe { dealloc(address as *mut u8, layout) };
        }
    }

    fn table(&self, address: u64) -> Option<&Table> {
        if address == 0 || !address.is_multiple_of(4096) {
            return None;
        }
        // SAFETY: tables are only ever addresses from `allocate` (the stage-2
        // code walks descriptors it wrote itself), identity-mapped heap memory.
        Some(unsafe { &*(address as *const Table) })
    }

    fn table_mut(&mut self, address: u64) -> Option<&mut Table> {
        if address == 0 || !address.is_multiple_of(4096) {
            return None;
        }
        // SAFETY: as in `table`; `&mut self` makes this the only reference.
        Some(unsafe { &mut *(address as *mut Table) })
    }
}

/// Zeroes `[pa, pa + len)` and makes the zeros visible to a vCPU that starts
/// with its MMU and caches off (a restarted domain's RAM).
///
/// # Safety
/// The range must be guest RAM owned by the caller that no CPU runs.
pub unsafe fn zero(pa: u64, len: u64) {
    // SAFETY: the caller owns the range and nothing else uses it.
    unsafe { core::ptr::write_bytes(pa as *mut u8, 0, len as usize) };
    clean_dcache_range(pa, len);
}

/// Removes every TLB entry (stage 1 and 2) tagged with the VMID in `vttbr`,
/// on every CPU: needed before a freed VMID is reused and after a restarted
/// domain's memory is rewritten.
pub fn invalidate_vmid(vttbr: u64) {
    // SAFETY: TLBI VMALLS12E1IS uses the VMID of VTTBR_EL2, so it is set
    // briefly and put back before anything runs at EL1 on this CPU (the
    // caller is EL2 code with interrupts masked or in an interrupt handler).
    unsafe {
        asm!(
            "mrs {old}, vttbr_el2",
            "msr vttbr_el2, {new}",
            "isb",
            "tlbi vmalls12e1is",
            "dsb ish",
            "msr vttbr_el2, {old}",
            "isb",
            old = out(reg) _,
            new = in(reg) vttbr,
        )
    };
}

/// Copies `image` into guest RAM at physical `pa` and makes it visible to a
/// vCPU that starts with its MMU and caches off.
///
/// # Safety
/// `[pa, pa + image.len())` must be guest RAM owned by the caller.
pub unsafe fn load_image(pa: u64, image: &[u8]) {
    // SAFETY: the caller owns the destination range.
    unsafe { core::ptr::copy_nonoverlapping(image.as_ptr(), pa as *mut u8, image.len()) };
    clean_dcache_range(pa, image.len() as u64);
}

/// Cleans and invalidates data cache lines to the point of coherency, then
/// invalidates the instruction cache, so non-cacheable accesses see the data.
fn clean_dcache_range(start: u64, len: u64) {
    let mut line = start & !63;
    while line < start + len {
        // SAFETY: cache maintenance by address does not change memory contents.
        unsafe { asm!("dc civac, {}", in(reg) line) };
        line += 64;
    }
    // SAFETY: barriers and instruction cache invalidation only.
    unsafe { asm!("dsb sy", "ic iallu", "dsb sy", "isb") };
}
