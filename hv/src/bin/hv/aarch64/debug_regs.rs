//! Guests' self-hosted debug: breakpoints, watchpoints and single step.
//!
//! The registers (MDSCR_EL1, the OS lock and double lock, DBGB{C,V}R<n>,
//! DBGW{C,V}R<n>, MDCCINT_EL1, the claim tags) belong to the vCPU, as under
//! KVM, and are handed over lazily: while a vCPU has not touched them its
//! accesses trap (MDCR_EL2.TDA, TDOSA), and the first one makes it their
//! owner: its values (all zero at reset, OS lock clear, as KVM resets them)
//! are loaded and the instruction runs again untrapped. A switch saves an
//! owner's values and clears the hardware's, so a breakpoint, watchpoint or
//! step one vCPU armed never fires in, or shows to, another; vCPUs that
//! never debug pay nothing. MDCR_EL2.TDE stays clear, so the debug
//! exceptions go to the guest's own EL1 vectors.
//!
//! The numbered registers are encoded in the instruction, so each index has
//! its own `mrs`/`msr` (generated below); `aarch64-cpu` has no typed
//! accessors for them.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, Ordering};

use aarch64_cpu::registers::{ID_AA64DFR0_EL1, MDSCR_EL1};
use hv::arm::trap::SysRegAccess;
use platform::arch::aarch64::cpu;
use tock_registers::interfaces::{Readable, Writeable};

/// The most breakpoint or watchpoint register pairs the architecture has.
const MAX_PAIRS: usize = 16;

/// OSLSR_EL1.OSLK / OSLAR_EL1.OSLK: the OS lock is set.
const OS_LOCK: u64 = 1 << 1;
/// OSLAR_EL1's only field (bit 0).
const OSLAR_LOCK: u64 = 1;

/// A vCPU's debug registers while it does not run.
#[derive(Clone, Copy, Debug, Default)]
pub struct DebugRegisters {
    /// The vCPU has touched its debug registers: they are switched with it.
    pub owned: bool,
    mdscr: u64,
    os_locked: bool,
    osdlr: u64,
    mdccint: u64,
    claim: u64,
    bcr: [u64; MAX_PAIRS],
    bvr: [u64; MAX_PAIRS],
    wcr: [u64; MAX_PAIRS],
    wvr: [u64; MAX_PAIRS],
}

/// Generates read/write functions selecting a numbered register by index.
macro_rules! numbered {
    ($read:ident, $write:ident, $prefix:literal) => {
        fn $read(n: usize) -> u64 {
            let value: u64;
            macro_rules! arm {
                ($i:literal) => {{
                    // SAFETY: reading a debug register has no side effects.
                    unsafe { asm!(concat!("mrs {}, ", $prefix, $i, "_el1"), out(reg) value) };
                    value
                }};
            }
            match n {
                0 => arm!(0), 1 => arm!(1), 2 => arm!(2), 3 => arm!(3),
                4 => arm!(4), 5 => arm!(5), 6 => arm!(6), 7 => arm!(7),
                8 => arm!(8), 9 => arm!(9), 10 => arm!(10), 11 => arm!(11),
                12 => arm!(12), 13 => arm!(13), 14 => arm!(14), 15 => arm!(15),
                _ => 0,
            }
        }

        fn $write(n: usize, value: u64) {
            macro_rules! arm {
                ($i:literal) => {
                    // SAFETY: the register belongs to the vCPU being loaded
                    // (or is being cleared between vCPUs); with
                    // MDCR_EL2.TDE clear its events only reach EL1.
                    unsafe { asm!(concat!("msr ", $prefix, $i, "_el1, {}"), in(reg) value) }
                };
            }
            match n {
                0 => arm!(0), 1 => arm!(1), 2 => arm!(2), 3 => arm!(3),
                4 => arm!(4), 5 => arm!(5), 6 => arm!(6), 7 => arm!(7),
                8 => arm!(8), 9 => arm!(9), 10 => arm!(10), 11 => arm!(11),
                12 => arm!(12), 13 => arm!(13), 14 => arm!(14), 15 => arm!(15),
                _ => {}
            }
        }
    };
}

numbered!(read_bcr, write_bcr, "dbgbcr");
numbered!(read_bvr, write_bvr, "dbgbvr");
numbered!(read_wcr, write_wcr, "dbgwcr");
numbered!(read_wvr, write_wvr, "dbgwvr");

/// Set by `hv.test-break-debug-switch=on`: the planted fault a test uses to
/// show its leak check can fail.
static SWITCH_BROKEN: AtomicBool = AtomicBool::new(false);

/// Plants the fault of `hv.test-break-debug-switch=on`: from now on no CPU
/// traps guests' debug accesses and a switch leaves the registers as they
/// are, so whatever one vCPU writes the next one on that CPU reads.
pub fn break_switch() {
    log::warn!(
        "debug: per-vCPU debug registers turned OFF (hv.test-break-debug-switch=on): guests see each other's"
    );
    SWITCH_BROKEN.store(true, Ordering::Relaxed);
}

/// How many breakpoint and watchpoint pairs this CPU has.
fn pairs() -> (usize, usize) {
    let breakpoints = ID_AA64DFR0_EL1.read(ID_AA64DFR0_EL1::BRPs) as usize + 1;
    let watchpoints = ID_AA64DFR0_EL1.read(ID_AA64DFR0_EL1::WRPs) as usize + 1;
    (breakpoints.min(MAX_PAIRS), watchpoints.min(MAX_PAIRS))
}

impl DebugRegisters {
    /// Saves this CPU's debug registers into an owner's state.
    fn save(&mut self) {
        let (breakpoints, watchpoints) = pairs();
        self.mdscr = MDSCR_EL1.get();
        let (oslsr, osdlr, mdccint, claim): (u64, u64, u64, u64);
        // SAFETY: reading debug registers has no side effects.
        unsafe {
            asm!("mrs {}, oslsr_el1", out(reg) oslsr);
            asm!("mrs {}, osdlr_el1", out(reg) osdlr);
            asm!("mrs {}, mdccint_el1", out(reg) mdccint);
            asm!("mrs {}, dbgclaimclr_el1", out(reg) claim);
        }
        self.os_locked = oslsr & OS_LOCK != 0;
        self.osdlr = osdlr;
        self.mdccint = mdccint;
        self.claim = claim;
        for n in 0..breakpoints {
            self.bcr[n] = read_bcr(n);
            self.bvr[n] = read_bvr(n);
        }
        for n in 0..watchpoints {
            self.wcr[n] = read_wcr(n);
            self.wvr[n] = read_wvr(n);
        }
    }

    /// Loads this state into the CPU's debug registers.
    fn load(&self) {
        let (breakpoints, watchpoints) = pairs();
        for n in 0..breakpoints {
            write_bcr(n, self.bcr[n]);
            write_bvr(n, self.bvr[n]);
        }
        for n in 0..watchpoints {
            write_wcr(n, self.wcr[n]);
            write_wvr(n, self.wvr[n]);
        }
        MDSCR_EL1.set(self.mdscr);
        let oslar = if self.os_locked { OSLAR_LOCK } else { 0 };
        // SAFETY: the vCPU's own OS lock, double lock, DCC interrupt enables
        // and claim tags (all claim tags cleared, then its own set).
        unsafe {
            asm!("msr osdlr_el1, {}", in(reg) self.osdlr);
            asm!("msr oslar_el1, {}", in(reg) oslar);
            asm!("msr mdccint_el1, {}", in(reg) self.mdccint);
            asm!("msr dbgclaimclr_el1, {}", in(reg) u64::from(u8::MAX));
            asm!("msr dbgclaimset_el1, {}", in(reg) self.claim);
            asm!("isb");
        }
    }
}

/// The reset state a vCPU's debug registers get the first time it touches
/// them: everything zero, OS lock clear (KVM's reset values).
const RESET: DebugRegisters = DebugRegisters {
    owned: true,
    mdscr: 0,
    os_locked: false,
    osdlr: 0,
    mdccint: 0,
    claim: 0,
    bcr: [0; MAX_PAIRS],
    bvr: [0; MAX_PAIRS],
    wcr: [0; MAX_PAIRS],
    wvr: [0; MAX_PAIRS],
};

/// Whether a trapped system register access is a debug one (op0 = 2: the
/// debug and trace registers; MDCR_EL2.TDA/TDOSA/TDRA trap only those).
pub fn is_debug_access(access: &SysRegAccess) -> bool {
    access.op0 == 2
}

/// MDRAR_EL1 (op0 2, op1 0, CRn 1, CRm 0, op2 0): the debug ROM table's
/// address, which guests do not get (reads as zero: no ROM table).
fn is_rom_table_address(access: &SysRegAccess) -> bool {
    (access.op1, access.crn, access.crm, access.op2) == (0, 1, 0, 0)
}

/// What to do with a trapped debug register access.
pub enum Trapped {
    /// Emulated (MDRAR_EL1 reads as zero): resume after the instruction.
    Emulated,
    /// The vCPU now owns its debug registers: run the instruction again.
    Retry,
}

/// Handles a trapped debug access of the vCPU whose debug state is
/// `state`, loaded on this CPU: it takes ownership of its registers.
pub fn on_trapped_access(state: &mut DebugRegisters, access: &SysRegAccess) -> Trapped {
    if is_rom_table_address(access) {
        return Trapped::Emulated;
    }
    if !state.owned {
        *state = RESET;
    }
    state.load();
    cpu::trap_guest_debug(false);
    Trapped::Retry
}

/// Switches the CPU's debug registers from `old` (the vCPU leaving, if
/// any) to `new` (the vCPU entering; `None` for idle).
pub fn switch(old: Option<&mut DebugRegisters>, new: Option<&DebugRegisters>) {
    if SWITCH_BROKEN.load(Ordering::Relaxed) {
        cpu::trap_guest_debug(false);
        return;
    }
    let old_owned = old.is_some_and(|old| {
        if old.owned {
            old.save();
        }
        old.owned
    });
    match new {
        // `load` writes every register `save` read: nothing of the old
        // owner's stays.
        Some(new) if new.owned => {
            new.load();
            cpu::trap_guest_debug(false);
        }
        _ => {
            if old_owned {
                // Nothing of it may stay armed, nor be read by whoever runs
                // next.
                DebugRegisters::default().load();
            }
            cpu::trap_guest_debug(true);
        }
    }
}
