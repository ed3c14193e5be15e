//! The test guest: a bare-metal ARM64 program that runs as a domain (or
//! directly on QEMU at EL1) and reports what it sees. Built by
//! `cargo xtask guest build` as a flat arm64 `Image` linked at 0x4008_0000;
//! `cargo xtask guest run` boots it bare.
//!
//! The x86-64 build (`src/arch/x86_64`, for AMD SVM domains of the
//! `qemu-x86` board) is a flat image linked at 0x8000, entered in 64-bit mode
//! as `guest_abi::x86` describes (boot info instead of a device tree, vCPUs
//! started with INIT + STARTUP, COM1 console, `VMMCALL`); it runs the
//! compute, sleeper, pingpong, pause, misbehave and pools (with
//! `move_domain=`) workloads with the same console lines as below, and says
//! the others are not ported yet (`test-guest: WORKLOAD skipped: not ported
//! to x86-64 yet`). Where the hypervisor does not pause siblings yet, pause
//! prints `test-guest: pause sibling not supported (-1), skipped`, as on ARM.
//!
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
//! `cpuoff`, `echo`), run by every vCPU in order, with a barrier before each.
//!
//! # Console lines (what tests match)
//! | event | line |
//! |---|---|
//! | bare QEMU, no hypervisor ABI | `test-guest: no hypervisor ABI (VERSION returned -1): bare mode, console only` |
//! | under the hypervisor | `test-guest: hypervisor ABI 1.0` |
//! | GIC | `test-guest: gic GICv3 from ...` / `test-guest: gic GICv2 from ...` |
//! | a vCPU starts | `test-guest: vcpu N online (mpidr 0x...)` |
//! | all started | `test-guest: K of N vCPUs online` |
//! | compute | `[vcpuN] progress K` every `progress_every` iterations; `test-guest: vcpu N compute done after K rounds` |
//! | sleeper | `test-guest: vcpu N sleeper p99 P ticks (min A avg B max C, S samples, period T ticks)` |
//! | ping-pong | `test-guest: pingpong vcpu 0 <-> vcpu P: R round trips, min A avg B max C ticks`, then `test-guest: pingpong done: K of M peers answered` |
//! | pause | `test-guest: pause sibling T ok: counter held at X while paused, rose to Y` / `... did not hold: ...` / `test-guest: pause sibling not supported (-1), skipped` / `... refused: ERR` |
//! | unknown hypercall | `test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected` / `... returned X, expected -1` |
//! | load outside RAM | `test-guest: bad access at 0xADDR faulted (ESR 0x..., FAR 0x...)` / `... read 0xV without a fault` |
//! | pools | `test-guest: pool ID: SCHED GRAN granularity, N CPUs (bitmap 0x..), D domains`, `test-guest: K pools listed`, `test-guest: created empty pool ID`, `test-guest: destroyed pool ID` / `test-guest: POOL_OP list failed (ERR)`; with `move_domain=`: `test-guest: POOL_OP WHAT ok` / `... refused (ERR), as expected` / `... failed (ERR)` / `... succeeded, expected ERR`, `test-guest: moved domN to pool P`, then the list again |
//! | echo | `test-guest: echo ready (type a line; quit ends)`, then per line typed `test-guest: echo: "TEXT" (N bytes, K interrupts so far)`; `test-guest: echo: no input for 60000 ms; stopping` |
//! | cpuoff | `test-guest: cpuoff vcpu T ok: off through an SGI while vcpu 0 and K others ran; back after CPU_ON` / `test-guest: cpuoff vcpu T failed: ...`; the target says `test-guest: vcpu T back on after CPU_ON` |
//! | yield refused | `test-guest: vcpu N YIELD failed (ERR); not yielding again` |
//! | the end | `test-guest: sched stats runtime R ns, D dispatches, V vCPUs` (or `SCHED_STATS failed (ERR)`), then `test-guest: all workloads done`; with `end=reset`, `test-guest: resetting (PSCI SYSTEM_RESET)` |
//! | trouble | `test-guest: vcpu N Unexpected exception: ...`, `test-guest: panic on vcpu N: ...`, `... gave up waiting ...`, `... did not come online ...` |
//!
//! Results also go to the hypervisor log through `TEST_REPORT` (tags
//! `progress`, `slp_min`, `slp_avg`, `slp_p99`, `pp_avg`) when it supports it.
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
