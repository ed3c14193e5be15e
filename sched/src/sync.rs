//! The atomics and locks the rendezvous, the blocked hints and the shared
//! system use, swapped for loom's under `cfg(loom)` so the protocols can be
//! model-checked without changing their code.

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

/// A spinlock (loom's mutex in models), with the one interface both offer.
pub(crate) struct Mutex<T> {
    #[cfg(not(loom))]
    inner: spin::Mutex<T>,
    #[cfg(loom)]
    inner: loom::sync::Mutex<T>,
}

/// Its guard.
#[cfg(not(loom))]
pub(crate) type MutexGuard<'a, T> = spin::MutexGuard<'a, T>;
/// Its guard.
#[cfg(loom)]
pub(crate) type MutexGuard<'a, T> = loom::sync::MutexGuard<'a, T>;

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: spin::Mutex::new(value),
            #[cfg(loom)]
            inner: loom::sync::Mutex::new(value),
        }
    }

    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        #[cfg(not(loom))]
        return self.inner.try_lock();
        #[cfg(loom)]
        return self.inner.try_lock().ok();
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        #[cfg(not(loom))]
        return self.inner.lock();
        #[cfg(loom)]
        return self.inner.lock().expect("loom: no panics while locked");
    }

    pub(crate) fn into_inner(self) -> T {
        #[cfg(not(loom))]
        return self.inner.into_inner();
        #[cfg(loom)]
        return self
            .inner
            .into_inner()
            .expect("loom: no panics while locked");
    }
}

/// A readers-writer spinlock that lets no new reader in once a writer waits
/// (spin's upgradeable guard; loom's `RwLock` in models), so the rare
/// writer is not starved by the steady stream of readers.
pub(crate) struct RwLock<T> {
    #[cfg(not(loom))]
    inner: spin::RwLock<T>,
    #[cfg(loom)]
    inner: loom::sync::RwLock<T>,
}

/// Its shared guard.
#[cfg(not(loom))]
pub(crate) type ReadGuard<'a, T> = spin::RwLockReadGuard<'a, T>;
/// Its shared guard.
#[cfg(loom)]
pub(crate) type ReadGuard<'a, T> = loom::sync::RwLockReadGuard<'a, T>;
/// Its exclusive guard.
#[cfg(not(loom))]
pub(crate) type WriteGuard<'a, T> = spin::RwLockWriteGuard<'a, T>;
/// Its exclusive guard.
#[cfg(loom)]
pub(crate) type WriteGuard<'a, T> = loom::sync::RwLockWriteGuard<'a, T>;

impl<T> RwLock<T> {
    pub(crate) fn new(value: T) -> Self {
        Self {
            #[cfg(not(loom))]
            inner: spin::RwLock::new(value),
            #[cfg(loom)]
            inner: loom::sync::RwLock::new(value),
        }
    }

    pub(crate) fn try_read(&self) -> Option<ReadGuard<'_, T>> {
        #[cfg(not(loom))]
        return self.inner.try_read();
        #[cfg(loom)]
        return self.inner.try_read().ok();
    }

    pub(crate) fn read(&self) -> ReadGuard<'_, T> {
        #[cfg(not(loom))]
        return self.inner.read();
        #[cfg(loom)]
        return self.inner.read().expect("loom: no panics while locked");
    }

    pub(crate) fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        #[cfg(not(loom))]
        return self.inner.try_write();
        #[cfg(loom)]
        return self.inner.try_write().ok();
    }

    pub(crate) fn write(&self) -> WriteGuard<'_, T> {
        // The upgradeable guard keeps new readers out while the current
        // ones finish (spin's `read` refuses while it is held).
        #[cfg(not(loom))]
        return self.inner.upgradeable_read().upgrade();
        #[cfg(loom)]
        return self.inner.write().expect("loom: no panics while locked");
    }
}
