//! A vCPU's virtual NMI, as SVM without vNMI leaves it to the hypervisor
//! (AMD APM vol. 2, 15.20-15.21; Intel SDM vol. 3, 6.7.1; KVM's
//! `svm_enable_nmi_window` works the same way):
//!
//! - An NMI sent to the vCPU (an ICR or I/O APIC message with delivery mode
//!   NMI) is **latched** in its local APIC (`super::vlapic::VLapic::request_nmi`):
//!   one at most, as on hardware; more while one is latched are lost.
//! - Once delivered (`EVENTINJ` type NMI), further NMIs are **blocked until
//!   the handler's IRET completes**. The hypervisor intercepts IRET while
//!   blocked; the intercept comes *before* the IRET executes, so the
//!   blocking ends only once the guest is past it (its RIP moved).
//! - An NMI is not delivered in an **interrupt shadow** (the instruction
//!   after STI or MOV SS): `EVENTINJ` would deliver it regardless.
//! - Where the latched NMI cannot go in yet (shadow, the IRET not yet
//!   executed, or another event already being injected), the guest runs
//!   **one instruction single-stepped** (RFLAGS.TF): the `#DB` trap after it
//!   exits (`#DB` is intercepted) right where the NMI may go in, so it
//!   arrives as early as on hardware, not at some later exit.
//!
//! This module only decides; the arch glue reads and writes the VMCB.

use super::debugregs::{DR6_BS, DR6_STATUS};
use super::vmcb::cr::RFLAGS_TF;

/// A vCPU's NMI blocking and single-stepping state (the latch itself is its
/// APIC's, which other vCPUs set).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NmiState {
    /// An NMI was delivered and its handler has not completed an IRET.
    blocked: bool,
    /// While blocked: the RIP of the handler's intercepted IRET, which ends
    /// the blocking once the guest has moved past it.
    iret_at: Option<u64>,
    /// Single-stepping towards a point where the NMI can go in: the guest's
    /// own RFLAGS.TF, restored at the trap.
    stepping: Option<bool>,
}

/// What to do with the NMI at a VM entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NmiEntry {
    /// No NMI to deliver, or one already on its way: nothing.
    Nothing,
    /// Inject the latched NMI now (take it from the latch).
    Inject,
    /// Set RFLAGS.TF (the value returned by [`NmiState::start_step`]) so the
    /// guest traps after one instruction, where the NMI may go in.
    Step,
}

/// What an intercepted `#DB` was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DebugTrap {
    /// The guest's own: hand it back.
    Guest,
    /// The hypervisor's single step: restore the guest's TF to `tf`;
    /// `forward`: the guest had TF set or a breakpoint hit too, so the
    /// `#DB` is also the guest's.
    Step {
        /// The guest's own RFLAGS.TF.
        tf: bool,
        /// The `#DB` is the guest's too.
        forward: bool,
    },
}

impl NmiState {
    /// Whether NMIs are blocked (a handler runs).
    pub fn blocked(&self) -> bool {
        self.blocked
    }

    /// Whether the IRET intercept must be on: blocked, and the handler's
    /// IRET not seen yet.
    pub fn intercept_iret(&self) -> bool {
        self.blocked && self.iret_at.is_none()
    }

    /// The guest is at `rip` now: if the handler's intercepted IRET has
    /// executed (the guest moved past it), NMIs are no longer blocked.
    pub fn settle(&mut self, rip: u64) {
        if self.iret_at.is_some_and(|at| at != rip) {
            self.iret_at = None;
            self.blocked = false;
        }
    }

    /// Decides at a VM entry at `rip` (after [`NmiState::settle`]): `latched`, an NMI waits in the APIC;
    /// `shadow`, the guest is in an interrupt shadow; `event_pending`,
    /// another event is already set up for injection.
    pub fn at_entry(
        &mut self,
        latched: bool,
        rip: u64,
        shadow: bool,
        event_pending: bool,
    ) -> NmiEntry {
        self.settle(rip);
        if !latched || self.stepping.is_some() {
            return NmiEntry::Nothing;
        }
        if !self.blocked && !shadow && !event_pending {
            self.blocked = true;
            return NmiEntry::Inject;
        }
        if self.blocked && self.iret_at.is_none() {
            // The handler runs: its IRET exits.
            return NmiEntry::Nothing;
        }
        NmiEntry::Step
    }

    /// The guest is about to run with `rflags`: the RFLAGS to run it with,
    /// single-stepping ([`NmiEntry::Step`]).
    pub fn start_step(&mut self, rflags: u64) -> u64 {
        self.stepping = Some(rflags & RFLAGS_TF != 0);
        rflags | RFLAGS_TF
    }

    /// The blocked handler's IRET at `rip` was intercepted (it has not
    /// executed yet; the glue turns the intercept off and re-enters).
    pub fn iret_intercepted(&mut self, rip: u64) {
        if self.blocked {
            self.iret_at = Some(rip);
        }
    }

    /// An intercepted `#DB` with `dr6` (the hardware's): whether it is the
    /// single step [`NmiState::start_step`] asked for.
    pub fn debug_trap(&mut self, dr6: u64) -> DebugTrap {
        let Some(tf) = self.stepping else {
            return DebugTrap::Guest;
        };
        if dr6 & DR6_BS == 0 {
            // A fault or breakpoint before the step completed: the guest's;
            // the step stays armed.
            return DebugTrap::Guest;
        }
        self.stepping = None;
        let others = dr6 & DR6_STATUS & !DR6_BS;
        DebugTrap::Step {
            tf,
            forward: tf || others != 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const IRET_RIP: u64 = 0x1000;

    #[test]
    fn an_nmi_goes_in_at_once_then_blocks_until_the_handlers_iret_completes() {
        let mut nmi = NmiState::default();
        assert_eq!(nmi.at_entry(false, 0x500, false, false), NmiEntry::Nothing);
        assert_eq!(nmi.at_entry(true, 0x500, false, false), NmiEntry::Inject);
        assert!(nmi.blocked() && nmi.intercept_iret());
        // A second NMI while the handler runs waits for its IRET's exit.
        assert_eq!(nmi.at_entry(true, 0x800, false, false), NmiEntry::Nothing);
        nmi.iret_intercepted(IRET_RIP);
        assert!(nmi.blocked() && !nmi.intercept_iret());
        // Still at the IRET: it has not executed, step over it.
        assert_eq!(nmi.at_entry(true, IRET_RIP, false, false), NmiEntry::Step);
        assert_eq!(nmi.start_step(0x202), 0x302);
        assert_eq!(
            nmi.at_entry(true, IRET_RIP, false, false),
            NmiEntry::Nothing
        );
        assert_eq!(
            nmi.debug_trap(0xffff_0ff0 | DR6_BS),
            DebugTrap::Step {
                tf: false,
                forward: false
            }
        );
        // Past the IRET: the waiting NMI goes in (at the instruction after it).
        assert_eq!(nmi.at_entry(true, 0x1002, false, false), NmiEntry::Inject);
    }

    #[test]
    fn an_iret_with_no_nmi_waiting_unblocks_at_the_next_exit_elsewhere() {
        let mut nmi = NmiState::default();
        assert_eq!(nmi.at_entry(true, 0x500, false, false), NmiEntry::Inject);
        nmi.iret_intercepted(IRET_RIP);
        assert_eq!(
            nmi.at_entry(false, IRET_RIP, false, false),
            NmiEntry::Nothing
        );
        assert!(nmi.blocked());
        assert_eq!(nmi.at_entry(false, 0x2000, false, false), NmiEntry::Nothing);
        assert!(!nmi.blocked() && !nmi.intercept_iret());
    }

    #[test]
    fn no_nmi_in_an_interrupt_shadow_or_beside_another_event() {
        let mut nmi = NmiState::default();
        assert_eq!(nmi.at_entry(true, 0x500, true, false), NmiEntry::Step);
        nmi.start_step(0x202);
        assert!(matches!(nmi.debug_trap(DR6_BS), DebugTrap::Step { .. }));
        assert_eq!(nmi.at_entry(true, 0x503, false, false), NmiEntry::Inject);

        let mut nmi = NmiState::default();
        assert_eq!(nmi.at_entry(true, 0x500, false, true), NmiEntry::Step);
        assert!(!nmi.blocked());
    }

    #[test]
    fn the_guests_own_single_step_and_breakpoints_stay_the_guests() {
        let mut nmi = NmiState::default();
        // No step armed: every #DB is the guest's.
        assert_eq!(nmi.debug_trap(DR6_BS), DebugTrap::Guest);
        nmi.at_entry(true, 0x500, true, false);
        assert_eq!(nmi.start_step(0x302), 0x302, "TF was the guest's already");
        // A data breakpoint without BS: the guest's, the step still armed.
        assert_eq!(nmi.debug_trap(0b1), DebugTrap::Guest);
        assert_eq!(
            nmi.debug_trap(DR6_BS),
            DebugTrap::Step {
                tf: true,
                forward: true
            }
        );
        nmi.at_entry(true, 0x500, true, false);
        nmi.start_step(0x202);
        assert_eq!(
            nmi.debug_trap(DR6_BS | 0b10),
            DebugTrap::Step {
                tf: false,
                forward: true
            },
            "a breakpoint hit with the step is the guest's"
        );
    }
}
