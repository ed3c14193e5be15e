//! loom model of the console hand-off (`platform::console::handoff`): writers
//! that must not wait push their bytes and write them only if the console
//! lock is free, while another CPU writes whole lines under the lock. In
//! every interleaving, once all threads are done, every pushed byte was
//! written exactly once and nothing still waits (no byte is left behind by
//! the last holder).
//!
//! `RUSTFLAGS="--cfg loom" cargo test -p platform --test loom_handoff --release`
#![cfg(loom)]

use loom::sync::{Arc, Mutex};
use loom::thread;
use platform::console::handoff::{Deferred, flush_if_free};

/// The console: a lock around what reached the UART.
struct Shared {
    console: Mutex<Vec<u8>>,
    deferred: Deferred<8>,
}

/// A writer that must not wait (the boot CPU echoing a typed byte).
fn write_without_waiting(shared: &Shared, bytes: &[u8]) {
    shared.deferred.push(bytes);
    flush_if_free(
        &shared.deferred,
        || shared.console.try_lock().ok(),
        |uart, bytes| uart.extend_from_slice(bytes),
    );
}

/// A writer that takes the lock (a guest's line): writes what waits first,
/// then its own bytes, and looks again after it unlocks.
fn write_locked(shared: &Shared, bytes: &[u8]) {
    {
        let mut uart = shared.console.lock().unwrap();
        shared
            .deferred
            .write_waiting(|waiting| uart.extend_from_slice(waiting));
        uart.extend_from_slice(bytes);
    }
    flush_if_free(
        &shared.deferred,
        || shared.console.try_lock().ok(),
        |uart, bytes| uart.extend_from_slice(bytes),
    );
}

fn check(pushers: &'static [&'static [u8]], locked: &'static [&'static [u8]]) {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let shared = Arc::new(Shared {
            console: Mutex::new(Vec::new()),
            deferred: Deferred::new(),
        });
        let mut handles = Vec::new();
        for &bytes in pushers {
            let shared = shared.clone();
            handles.push(thread::spawn(move || write_without_waiting(&shared, bytes)));
        }
        for &bytes in locked {
            let shared = shared.clone();
            handles.push(thread::spawn(move || write_locked(&shared, bytes)));
        }
        for handle in handles {
            handle.join().unwrap();
        }
        assert!(
            !shared.deferred.is_waiting(),
            "bytes were left waiting with no holder to write them"
        );
        let mut written = shared.console.lock().unwrap().clone();
        let mut expected: Vec<u8> = pushers
            .iter()
            .chain(locked)
            .flat_map(|b| b.to_vec())
            .collect();
        written.sort_unstable();
        expected.sort_unstable();
        assert_eq!(written, expected, "every byte written exactly once");
    });
}

#[test]
fn a_pushed_byte_is_never_left_behind_by_a_locked_writer() {
    check(&[b"a"], &[b"XY"]);
}

#[test]
fn two_pushers_and_a_locked_writer() {
    check(&[b"a", b"b"], &[b"X"]);
}

#[test]
fn pushers_alone_write_everything() {
    check(&[b"a", b"b"], &[]);
}
