//! The atomics the rendezvous uses, swapped for loom's under `cfg(loom)` so the
//! protocol can be model-checked without changing its code.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Tells the CPU (or loom's scheduler) that we are busy-waiting.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
