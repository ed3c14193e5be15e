//! The hypervisor heap: a buddy allocator that starts on a small static region
//! (so the device tree can be parsed) and grows into RAM the device tree names.

use alloc::alloc::{Layout, alloc_zeroed, dealloc};

use buddy_system_allocator::LockedHeap;
use hv::domain_memory::{RAM_ALIGN, RamAllocator};

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

/// Guest RAM from the heap, for both back-ends: the heap is identity-mapped
/// (a heap address is the physical address); blocks are zeroed and aligned
/// to [`RAM_ALIGN`] so stage 2 and nested paging can map them with 2 MiB
/// blocks.
pub struct HeapRam;

impl RamAllocator for HeapRam {
    fn allocate(&mut self, bytes: u64) -> Option<u64> {
        if bytes == 0 {
            return None;
        }
        let layout =
            Layout::from_size_align(usize::try_from(bytes).ok()?, RAM_ALIGN as usize).ok()?;
        // SAFETY: the layout has a non-zero size (checked above).
        let ptr = unsafe { alloc_zeroed(layout) };
        (!ptr.is_null()).then_some(ptr as u64)
    }

    fn free(&mut self, pa: u64, bytes: u64) {
        let Ok(size) = usize::try_from(bytes) else {
            return;
        };
        if let Ok(layout) = Layout::from_size_align(size, RAM_ALIGN as usize) {
            // SAFETY: `pa` came from `allocate` with this size, so the layout
            // is the one it was allocated with; its domain no longer runs.
            unsafe { dealloc(pa as *mut u8, layout) };
        }
    }
}
