//! The atomics the rendezvous and the blocked hints use, swapped for loom's
//! under `cfg(loom)` so the protocols can be model-checked without changing
//! their code.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Tells the CPU (or loom's scheduler) that we are busy-waiting.
#[inline]
pub(crate) fn spin_hint() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}
