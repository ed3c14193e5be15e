//! The hypervisor heap: a buddy allocator that starts on a small static region
//! (so the device tree can be parsed) and grows into RAM the device tree names.

use buddy_system_allocator::LockedHeap;

/// Bytes of the static bootstrap heap in .bss.
const BOOTSTRAP_BYTES: usize = 4 << 20;

#[repr(C, align(4096))]
struct Bootstrap([u8; BOOTSTRAP_BYTES]);

static mut BOOTSTRAP: Bootstrap = Bootstrap([0; BOOTSTRAP_BYTES]);

#[global_allocator]
static HEAP: LockedHeap<32> = LockedHeap::empty();

/// Gives the allocator its bootstrap region. Call once, first thing on the primary.
pub fn init_bootstrap() {
    // SAFETY: called once before any allocation; the static region is used by
    // nothing else, so handing it to the allocator transfers its ownership.
    unsafe {
        let start = core::ptr::addr_of_mut!(BOOTSTRAP) as usize;
        HEAP.lock().init(start, BOOTSTRAP_BYTES);
    }
}

/// Adds `[start, start + size)` of RAM to the heap.
///
/// # Safety
/// The range must be identity-mapped Normal RAM that nothing else uses (not the
/// image, the device tree or firmware-reserved memory).
pub unsafe fn add_region(start: usize, size: usize) {
    // SAFETY: forwarded from this function's contract.
    unsafe { HEAP.lock().add_to_heap(start, start + size) };
}

/// Bytes the heap manages in total.
pub fn total_bytes() -> usize {
    HEAP.lock().stats_total_bytes()
}

/// Bytes currently allocated from the heap (what a domain teardown must
/// bring back down).
pub fn allocated_bytes() -> usize {
    HEAP.lock().stats_alloc_actual()
}
