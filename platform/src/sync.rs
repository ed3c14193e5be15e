//! Spin locks that wait the way a CPU of this machine should, and the pause
//! every busy-wait of the hypervisor makes between two looks.
//!
//! `core::hint::spin_loop` is an `isb` on AArch64 (`pause` on x86-64). An
//! `isb` keeps the waiting CPU busy: under QEMU's round-robin TCG (`-icount`,
//! or `-accel tcg,thread=single`) the CPU that holds the lock does not run
//! again until the waiter's whole time slice is spent (a plugin count of
//! micro-bench under `-accel tcg,thread=single` found 16 k instructions per
//! timer_10ms iteration spinning on a domain lock whose holder QEMU had set
//! aside; under `-icount` the figures moved by a few ns only). `yield` is
//! the architecture's hint that the CPU is spinning: real
//! cores treat it as a no-op or give an SMT sibling the pipeline, and QEMU
//! ends the waiter's slice at once, so the holder runs next. It is what
//! Linux's arm64 `cpu_relax` emits; x86-64's `pause` already behaves so
//! (QEMU leaves the CPU loop on it).

/// One pause in a busy-wait (see the module's doc).
#[inline(always)]
pub fn cpu_relax() {
    #[cfg(all(target_arch = "aarch64", target_os = "none"))]
    crate::arch::aarch64::cpu::spin_yield();
    #[cfg(not(all(target_arch = "aarch64", target_os = "none")))]
    core::hint::spin_loop();
}

/// [`spin`]'s relax strategy for [`cpu_relax`].
pub struct CpuRelax;

impl spin::RelaxStrategy for CpuRelax {
    #[inline(always)]
    fn relax() {
        cpu_relax();
    }
}

/// A spin lock that waits with [`cpu_relax`].
pub type Mutex<T> = spin::mutex::Mutex<T, CpuRelax>;
/// Its guard.
pub type MutexGuard<'a, T> = spin::mutex::MutexGuard<'a, T>;
/// A one-time initialised value whose late readers wait with [`cpu_relax`].
pub type Once<T> = spin::once::Once<T, CpuRelax>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_and_the_once_work() {
        let lock = Mutex::new(1);
        *lock.lock() += 1;
        assert_eq!(*lock.lock(), 2);
        assert!(lock.try_lock().is_some());
        let once: Once<u8> = Once::new();
        assert_eq!(*once.call_once(|| 5), 5);
        assert_eq!(once.get(), Some(&5));
    }
}
