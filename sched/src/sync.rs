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

    /// Spins (calling `relax` between tries) until it is ours.
    pub(crate) fn lock_with(&self, relax: &dyn Fn()) -> MutexGuard<'_, T> {
        // loom blocks a thread on a held lock itself (a spin would be an
        // unbounded number of branches to it).
        #[cfg(loom)]
        {
            let _ = relax;
            self.inner.lock().expect("loom: no panics while locked")
        }
        #[cfg(not(loom))]
        loop {
            if let Some(guard) = self.try_lock() {
                return guard;
            }
            relax();
        }
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

/// A readers-writer spinlock that lets no new reader in once a writer
/// waits, so the rare writer is not starved by the steady stream of
/// readers (spin's `RwLock` inside; loom's in models). The gate is a flag
/// readers only *load* while it is up: spin's own readers retry with a
/// read-modify-write of the lock word, and on a busy machine (or under QEMU,
/// where a vCPU can stop between its increment and its decrement) the word
/// is then rarely exactly "no reader" for the writer's compare-and-swap.
pub(crate) struct RwLock<T> {
    #[cfg(not(loom))]
    inner: spin::RwLock<T>,
    #[cfg(loom)]
    inner: loom::sync::RwLock<T>,
    /// Up while a writer waits for the readers to leave; also serialises
    /// writers.
    writer_waiting: AtomicBool,
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
            writer_waiting: AtomicBool::new(false),
        }
    }

    pub(crate) fn try_read(&self) -> Option<ReadGuard<'_, T>> {
        if self.writer_waiting.load(Ordering::Acquire) {
            return None;
        }
        #[cfg(not(loom))]
        return self.inner.try_read();
        #[cfg(loom)]
        return self.inner.try_read().ok();
    }

    /// Spins (calling `relax` between tries) until a writer neither holds
    /// nor waits for it.
    pub(crate) fn read_with(&self, relax: &dyn Fn()) -> ReadGuard<'_, T> {
        // loom's lock blocks the thread itself, and lets a writer in.
        #[cfg(loom)]
        {
            let _ = relax;
            self.inner.read().expect("loom: no panics while locked")
        }
        #[cfg(not(loom))]
        loop {
            if let Some(guard) = self.try_read() {
                return guard;
            }
            relax();
        }
    }

    fn try_write_inner(&self) -> Option<WriteGuard<'_, T>> {
        #[cfg(not(loom))]
        return self.inner.try_write();
        #[cfg(loom)]
        return self.inner.try_write().ok();
    }

    pub(crate) fn try_write(&self) -> Option<WriteGuard<'_, T>> {
        if self.writer_waiting.swap(true, Ordering::Acquire) {
            return None;
        }
        let guard = self.try_write_inner();
        self.writer_waiting.store(false, Ordering::Release);
        guard
    }

    /// Raises the gate (after any other writer), then spins (calling
    /// `relax`) until the readers inside have left.
    pub(crate) fn write_with(&self, relax: &dyn Fn()) -> WriteGuard<'_, T> {
        #[cfg(loom)]
        {
            let _ = relax;
            self.inner.write().expect("loom: no panics while locked")
        }
        #[cfg(not(loom))]
        {
            while self.writer_waiting.swap(true, Ordering::Acquire) {
                relax();
            }
            let guard = loop {
                if let Some(guard) = self.try_write_inner() {
                    break guard;
                }
                relax();
            };
            self.writer_waiting.store(false, Ordering::Release);
            guard
        }
    }
}
