//! The test guest: a bare-metal ARM64 program that runs as a domain (or
//! directly on QEMU at EL1) and reports what it sees. Built by
//! `cargo xtask guest build` as a flat arm64 `Image` linked at 0x4008_0000;
//! `cargo xtask guest run` boots it bare.
//!
//! The x86-64 build (`src/arch/x86_64`, for AMD SVM domains of the
//! `qemu-x86` board) is a flat image linked at 0x8000, entered in 64-bit mode
//! as `guest_abi::x86` describes (boot info instead of a device tree, vCPUs
//! started with INIT + STARTUP, COM1 console, `VMMCALL`); it runs every
//! workload with the same console lines as below, with x86 names where the
//! table says so. Its interrupts: timer 0x30 (TSC-deadline), ping 0x31,
//! pong 0x32 (fixed x2APIC IPIs, local-APIC EOI), the 8259A master's
//! 0x20-0x27 (PIC EOI only), spurious 0xFF. How the x86 side differs:
//! - `misbehave`: the load outside RAM never comes back; the hypervisor
//!   stops the domain on the nested page fault.
//! - `cpuoff` (contract section 3): the target sets its rejoin slot, disarms
//!   its timer, says it is going off and loops in `cli; hlt` (counting any
//!   HLT that ends); vCPU 0 sends it INIT (it waits for STARTUP from then
//!   on), a fixed IPI that must not wake it, watches the others, then INIT +
//!   STARTUP: it restarts fresh at the image base and rejoins through its
//!   rejoin slot. Nothing reports a vCPU's state to the guest, so "still off"
//!   means INIT was sent; the frozen counter and HLT count are the evidence.
//! - `echo` (contract section 4): vCPU 0 programs the 8259A (vector base
//!   0x20, IRQ 4 = 0x24 unmasked alone, the slave masked; an IMR that does
//!   not read back means no PIC, said and skipped), sets COM1's IER.ERBFI
//!   and MCR.OUT2, waits for vector 0x24 (bounded by the timer), reads RBR
//!   while LSR.DR, then EOIs the PIC.
//! - `end=off` / `end=reset`: no such call exists for x86 guests; it says
//!   so and idles. `end=crash` (x86 only) executes `ud2` with an empty IDT:
//!   a triple fault, which the hypervisor must stop the domain for.
//! - `output=` is ignored (COM1 only).

//! # Layout
//! The workloads (`src/workloads.rs`) are one source for both
//! architectures: they reach the hardware only through `arch::Machine`
//! (time, the timer, hypercalls, waiting for and sending interrupts by kind,
//! the barrier's wait/wake, a load outside RAM, CPU off/on, console input),
//! which `src/arch/aarch64` and `src/arch/x86_64` implement, one chosen in
//! `src/arch/mod.rs`. Their hardware-independent decisions live in the
//! host-tested library (`test_guest::{barrier, interrupt, input, pools,
//! checks}`).
//!
//! # Boot
//! Linux arm64 boot protocol: loaded at RAM base + 0x80000, entered at EL1
//! with the MMU off and `x0` = the DTB. It reads the CPUs, the GIC (v3 from
//! `arm,gic-v3`, checked against ID_AA64PFR0_EL1.GIC; else v2), the RAM,
//! the PSCI conduit and `/chosen/bootargs` from the DTB (QEMU virt defaults
//! without one), turns on its MMU with a 1 GiB-block identity map, and starts
//! the other vCPUs with PSCI `CPU_ON` (at most 8).
//!
//! # Workloads
//! Chosen by `workload=` in the boot arguments (see `test_guest::config`;
//! default `compute,sleeper,pingpong,pause,misbehave`; also `pools`,
//! `cpuoff`, `restart`, `traps`, `top`, `echo`, `debugleak`, `simdleak`), run by every
//! vCPU in order, with a barrier before each.
//!
//! # Console lines (what tests match)
//! | event | line |
//! |---|---|
//! | bare QEMU, no hypervisor ABI | `test-guest: no hypervisor ABI (VERSION returned -1): bare mode, console only` |
//! | under the hypervisor | `test-guest: hypervisor ABI 1.0` |
//! | GIC | `test-guest: gic GICv3 from ...` / `test-guest: gic GICv2 from ...` |
//! | a vCPU starts | `test-guest: vcpu N online (mpidr 0x...)` (x86: `(x2apic id N)`) |
//! | all started | `test-guest: K of N vCPUs online` |
//! | compute | `[vcpuN] progress K` every `progress_every` iterations; `test-guest: vcpu N compute done after K rounds` |
//! | sleeper | `test-guest: vcpu N sleeper p99 P ticks (min A avg B max C, S samples, period T ticks)`; `test-guest: vcpu N virtual timer did not fire 1000 ms after its deadline` (x86: `timer`) |
//! | ping-pong | `test-guest: pingpong vcpu 0 <-> vcpu P: R round trips, min A avg B max C ticks`, then `test-guest: pingpong done: K of M peers answered` |
//! | pause | `test-guest: pause sibling T ok: counter held at X while paused, rose to Y` / `... did not hold: ...` / `test-guest: pause sibling not supported (-1), skipped` / `... refused: ERR` |
//! | unknown hypercall | `test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected` / `... returned X, expected -1` |
//! | load outside RAM | `test-guest: reading 0xADDR, outside its RAM`, then `test-guest: bad access at 0xADDR faulted (ESR 0x..., FAR 0x...)` / `... read 0xV without a fault` (x86: the hypervisor stops the domain instead) |
//! | pools | `test-guest: pool ID: SCHED GRAN granularity, N CPUs (bitmap 0x..), D domains`, `test-guest: K pools listed`, `test-guest: created empty pool ID`, `test-guest: destroyed pool ID` / `test-guest: POOL_OP list failed (ERR)`; with `move_domain=`: `test-guest: POOL_OP WHAT ok` / `... refused (ERR), as expected` / `... failed (ERR)` / `... succeeded, expected ERR`, `test-guest: moved domN to pool P`, then the list again |
//! | echo | `test-guest: echo ready (type a line; quit ends)`, then per line typed `test-guest: echo: "TEXT" (N bytes, K interrupts so far)`; `test-guest: echo: no input for 60000 ms; stopping`; `test-guest: echo: cannot enable the PL011 interrupt` (x86: `the COM1 interrupt`, after `test-guest: echo: no 8259A PIC at 0x20 (IMR reads 0x.. after unmasking IRQ 4 alone)` or `test-guest: echo: COM1's IER reads 0x.. after enabling the receive interrupt`) |
//! | cpuoff | `test-guest: cpuoff vcpu T ok: off through an SGI while vcpu 0 and K others ran; back after CPU_ON` (x86: `an IPI`, `STARTUP`) / `test-guest: cpuoff vcpu T failed: it did not go off (AFFINITY_INFO N)` (x86: `(no INIT sent: ...)`) / `test-guest: cpuoff vcpu T failed: still off B, frozen B, S of K others stalled, vcpu 0 loops L, CPU_ON R, back B` (x86: `STARTUP R`); the target says `test-guest: vcpu T back on after CPU_ON` (x86: `STARTUP`), or `test-guest: vcpu T CPU_OFF returned R` if it could not go off |
//! | restart | vCPU 0 says `test-guest: restart vcpu T ok: N restarts by STARTUP; unpause loop: A INVALID_PARAMETER, B other` (ARM: `CPU_ON`) / `... FAILED: ...; stopped: it did not come back` (or `it did not go off`, `the power-on call failed`, `it never started its part`); the target says `test-guest: vcpu T online ...` each life / `test-guest: restart skipped: it needs vcpus 0, T and 2` |
//! | debugleak | `test-guest: debugleak ok: N reads over 3000 ms kept this vCPU's own value` / `test-guest: debugleak FAILED: DBGBVR0 read 0x.. after N reads, this vCPU wrote 0x..` / `test-guest: debugleak skipped: not on this architecture yet` (x86) |
//! | simdleak | `test-guest: simdleak ok: N reads over 3000 ms kept this vCPU's own value` / `test-guest: simdleak FAILED: YMM15[255:192] read 0x.. after N reads, this vCPU wrote 0x..` / `test-guest: simdleak skipped: not on this architecture yet` (ARM, or no AVX) |
//! | timerlevel | `test-guest: timerlevel ok: N expiries, each taken once (EOI before the mask)` / `test-guest: timerlevel FAILED: of N expiries A were pending again after the timer was masked (the first in round Some(K)), M never fired` / `test-guest: timerlevel skipped: not on this architecture yet` (x86) |
//! | yield refused | `test-guest: vcpu N YIELD failed (ERR); not yielding again` |
//! | the end | `test-guest: sched stats runtime R ns, D dispatches, V vCPUs` (or `SCHED_STATS failed (ERR)`), `test-guest: N unexpected interrupts acknowledged and ignored` if any, then `test-guest: all workloads done`; with `end=reset`, `test-guest: resetting (PSCI SYSTEM_RESET)` (x86: `test-guest: end=reset: no such call for x86-64 guests; idling`) |
//! | BLOCK | `test-guest: waiting for interrupts with BLOCK` / `test-guest: BLOCK failed (ERR); waiting with WFI` (x86: `HLT`) |
//! | trouble | `test-guest: vcpu N Unexpected exception: ...`, `test-guest: panic on vcpu N: ...`, `... gave up waiting ...`, `... did not come online ...` |
//!
//! Results also go to the hypervisor log through `TEST_REPORT` (tags
//! `progress`, `slp_min`, `slp_avg`, `slp_p99`, `pp_avg`) when the domain's
//! config enables the test hooks (`test_hooks = true`); otherwise the first
//! refusal says `test-guest: TEST_REPORT failed (DENIED (-3)): results on the console only`.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(target_os = "none")]
mod arch;
#[cfg(target_os = "none")]
mod workloads;

/// Prints a formatted line on the guest's console (whole lines: those of
/// different vCPUs do not interleave).
#[cfg(target_os = "none")]
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::arch::print_line(format_args!($($arg)*))
    };
}

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("test-guest is a bare-metal image: `cargo xtask guest build` builds it");
    std::process::exit(2);
}

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(info: &core::panic::PanicInfo) -> ! {
    use arch::{Arch, Machine};
    say!("test-guest: panic on vcpu {}: {info}", Arch::vcpu_index());
    Arch::halt()
}
