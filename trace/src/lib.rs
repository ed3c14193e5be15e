//! Scheduler tracing, written once for the hypervisor and the host tools.
//!
//! Owns: the trace event model ([`event`], named after xentrace's records
//! where one exists), the per-CPU lock-free, allocation-free recording rings
//! the hypervisor writes ([`ring`]), the checksummed text encoding the
//! hypervisor prints on its console and the host decodes ([`text`]), what a
//! decoded trace proves and measures ([`analysis`]: run intervals, the
//! sibling overlap check, rendezvous skew, wake-to-run latency) and, with the
//! `json` feature, the Chrome trace-event / Perfetto export ([`chrome`]).
//!
//! Must not touch: hardware, the scheduler's state or any lock. The
//! hypervisor decides where events come from; this crate only stores and
//! reads them.

#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;
#[cfg(any(test, feature = "json"))]
extern crate std;

pub mod analysis;
#[cfg(feature = "json")]
pub mod chrome;
pub mod event;
pub mod ring;
pub mod text;

pub use event::{Class, ClassSet, Event, IDLE_DOMAIN, Kind, Outcome, UNKNOWN_DOMAIN};
pub use ring::{Rings, Snapshot};
pub use text::{CpuPlace, DecodeError, Origin, Trace};
