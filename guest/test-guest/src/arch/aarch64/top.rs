//! `top`: an instruction the hypervisor traps, run from the last four bytes
//! of the 64-bit address space. The hypervisor emulates it and moves the PC
//! past it, which wraps to 0 as on hardware; the fetch there (Device memory,
//! execute-never in this guest's map) comes back as this guest's own
//! instruction abort, which lands in [`top_landed`].
//!
//! The top page is mapped through TTBR1 (39-bit upper range, 4 KiB pages:
//! one table per level, each using its last entry), which the guest's
//! ordinary set-up leaves disabled.

use core::arch::asm;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Where the instruction sits: the last 4 bytes of the address space.
pub const TOP_PC: u64 = 0xffff_ffff_ffff_fffc;
/// `MRS x0, ID_AA64PFR0_EL1`: trapped by the hypervisor (HCR_EL2.TID3).
const MRS_X0_ID_AA64PFR0: u32 = 0xd538_0400;

#[repr(C, align(4096))]
struct Page([u64; 512]);

static mut L1: Page = Page([0; 512]);
static mut L2: Page = Page([0; 512]);
static mut L3: Page = Page([0; 512]);
static mut CODE: Page = Page([0; 512]);

/// Set while the jump is under way: the instruction abort at 0 is expected.
pub static ARMED: AtomicBool = AtomicBool::new(false);
/// x0 when the abort came: what the emulated MRS returned.
pub static X0: AtomicU64 = AtomicU64::new(0);
/// Where the workloads go on afterwards (position of the next one + 1).
pub static RESUME_AT: AtomicU64 = AtomicU64::new(0);

/// Table or page descriptor: valid, not a block.
const TABLE: u64 = 0b11;
/// Page: AttrIndx 0 (Normal), inner shareable, access flag, EL0 may not
/// execute; EL1 read/write and executable.
const CODE_PAGE: u64 = 0b11 | (0b11 << 8) | (1 << 10) | (1 << 54);

/// Maps [`TOP_PC`]'s page, writes the instruction there and jumps to it.
/// Returns only through [`top_landed`], from the guest's exception handler.
pub fn jump(resume_at: u64) -> ! {
    RESUME_AT.store(resume_at, Ordering::Relaxed);
    let (l1, l2, l3, code) = (
        core::ptr::addr_of_mut!(L1),
        core::ptr::addr_of_mut!(L2),
        core::ptr::addr_of_mut!(L3),
        core::ptr::addr_of_mut!(CODE),
    );
    // SAFETY: vCPU 0 alone, once; these statics are only touched here and
    // by the MMU afterwards. The guest runs identity-mapped, so an address
    // is the physical one the descriptors need.
    unsafe {
        (*l1).0[511] = l2 as u64 | TABLE;
        (*l2).0[511] = l3 as u64 | TABLE;
        (*l3).0[511] = code as u64 | CODE_PAGE;
        let last = (code as *mut u8).add(0xffc) as *mut u32;
        core::ptr::write_volatile(last, MRS_X0_ID_AA64PFR0);
    }
    let code_line = code as u64 + 0xffc;
    ARMED.store(true, Ordering::SeqCst);
    // SAFETY: makes the new instruction visible to instruction fetch and
    // turns on TTBR1 walks (T1SZ 25, 4 KiB granule, inner shareable
    // write-back) over the tables just written; nothing else uses the upper
    // range.
    unsafe {
        asm!(
            "dc cvau, {line}",
            "dsb ish",
            "ic iallu",
            "dsb ish",
            "msr ttbr1_el1, {l1}",
            "mrs {tcr}, tcr_el1",
            "bic {tcr}, {tcr}, {clear}",
            "orr {tcr}, {tcr}, {set}",
            "msr tcr_el1, {tcr}",
            "isb",
            "tlbi vmalle1",
            "dsb nsh",
            "isb",
            line = in(reg) code_line,
            l1 = in(reg) l1 as u64,
            tcr = out(reg) _,
            // EPD1 (bit 23) and the whole TTBR1 field block (T1SZ, IRGN1,
            // ORGN1, SH1, TG1: bits 31:16).
            clear = in(reg) 0xffff_0000u64,
            // T1SZ 25, IRGN1/ORGN1 write-back, SH1 inner, TG1 4 KiB.
            set = in(reg) (25u64 << 16) | (1 << 24) | (1 << 26) | (3 << 28) | (2 << 30),
            options(nostack),
        );
    }
    // SAFETY: jumps to the instruction just mapped; the guest's own
    // exception handler takes the abort that follows (see the module doc)
    // and returns into `top_landed`.
    unsafe { asm!("br {}", in(reg) TOP_PC, options(noreturn, nostack)) }
}

/// Where the instruction abort at 0 returns to (its handler sets ELR here
/// and x0 to what the MRS read).
#[unsafe(no_mangle)]
extern "C" fn top_landed() -> ! {
    let x0 = X0.load(Ordering::Relaxed);
    crate::say!(
        "test-guest: top: the MRS at {TOP_PC:#x} was trapped, emulated (x0 = {x0:#x}) and the PC wrapped to 0x0"
    );
    crate::workloads::resume(
        0,
        super::config(),
        RESUME_AT.load(Ordering::Relaxed) as usize,
    )
}

/// The guest's exception handler calls this for an instruction abort from
/// its own EL: if the `top` jump expected it at PC 0, it returns where to
/// resume (and records x0).
pub fn expected_abort(elr: u64, x0: u64) -> Option<u64> {
    if elr == 0 && ARMED.swap(false, Ordering::SeqCst) {
        X0.store(x0, Ordering::Relaxed);
        return Some(top_landed as *const () as u64);
    }
    None
}
