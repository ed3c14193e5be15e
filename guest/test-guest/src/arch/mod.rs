//! The guest's one architecture switch. [`Machine`] is everything the shared
//! workloads (`crate::workloads`) need from the hardware; [`Arch`] is this
//! target's implementation: aarch64 (GIC, generic timer, PSCI, `HVC`) or
//! x86-64 (x2APIC, TSC-deadline timer, INIT/STARTUP, `VMMCALL`). Each
//! architecture's module also holds its entry code, which brings the vCPUs
//! up and then calls `workloads::start` and `workloads::run`.

use core::fmt::Display;
use core::sync::atomic::AtomicU64;

use guest_abi::{Args, Call, CallError, Regs};
use test_guest::config::End;
use test_guest::interrupt::{Ipi, Taken, TimerRound};

#[cfg(target_arch = "aarch64")]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use aarch64::{Aarch64 as Arch, MAX_VCPUS, print_line};

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use x86_64::{MAX_VCPUS, X86_64 as Arch, print_line};

#[cfg(not(any(target_arch = "aarch64", target_arch = "x86_64")))]
compile_error!("the test guest runs on aarch64 and x86_64 only");

/// What the workloads use of the hardware. Times are in the architecture's
/// counter ticks (ARM: the virtual counter; x86: the TSC).
pub trait Machine {
    /// The timer, as lines name it (`virtual timer`).
    const TIMER_NAME: &'static str;
    /// The instruction that waits for an interrupt (`WFI`, `HLT`).
    const IDLE_NAME: &'static str;
    /// A fixed inter-processor interrupt, with its article (`an SGI`).
    const IPI_NAME: &'static str;
    /// What takes a vCPU off in `cpuoff`, as its failure line names it
    /// (`CPU_OFF`).
    const POWER_OFF_NAME: &'static str;
    /// What brings it back (`CPU_ON`, `STARTUP`).
    const POWER_ON_NAME: &'static str;
    /// Whether [`Machine::power_on`] restarts a vCPU that is running (x86:
    /// INIT + STARTUP), rather than only one that powered itself off (ARM:
    /// `CPU_ON` answers `ALREADY_ON`).
    const RESTARTS_RUNNING: bool;
    /// The console's receive interrupt (`the PL011 interrupt`).
    const CONSOLE_INTERRUPT_NAME: &'static str;
    /// The register half `simdleak` uses, as its lines name it.
    const SIMD_LEAK_REGISTER: &'static str;

    /// What a load that faulted reported (printed after `faulted`).
    type Fault: Display;
    /// What the platform says of a vCPU that should be off (printed when it
    /// did not go off).
    type OffState: Display;

    /// This vCPU's index (0 = the boot vCPU).
    fn vcpu_index() -> usize;
    /// Whether vCPU `index` came online.
    fn is_online(index: usize) -> bool;
    /// Stops this vCPU for good (interrupts dropped, timer off).
    fn halt() -> !;

    /// The counter now.
    fn now() -> u64;
    /// Ticks in `us` microseconds.
    fn us_to_ticks(us: u64) -> u64;
    /// Ticks in `ms` milliseconds.
    fn ms_to_ticks(ms: u64) -> u64 {
        Self::us_to_ticks(ms.saturating_mul(1000))
    }
    /// Spins until `ticks` have passed.
    fn delay(ticks: u64) {
        let end = Self::now().saturating_add(ticks);
        while Self::now() < end {
            core::hint::spin_loop();
        }
    }

    /// Makes a `guest-abi` call.
    fn hypercall(call: &Call) -> Result<Regs, CallError>;
    /// A raw hypervisor call with function id `id` (for ids the ABI does not
    /// define); returns the result registers.
    fn raw_call(id: u64, args: Args) -> Regs;

    /// Whether interrupts can be used (ARM: a GIC was found and set up).
    fn interrupts_usable() -> bool;
    /// Arms this vCPU's timer to fire when the counter reaches `deadline`.
    fn arm_timer(deadline: u64);
    /// Disarms this vCPU's timer.
    fn disarm_timer();
    /// Waits until an interrupt is pending (`WFI`; `sti; hlt; cli`).
    fn idle();
    /// Acknowledges and ends one pending interrupt of this vCPU, if any. A
    /// timer interrupt comes back with the timer disarmed.
    fn take_interrupt() -> Option<Taken>;
    /// Sends `ipi` to vCPU `target`.
    fn send_ipi(target: usize, ipi: Ipi);
    /// Waits a little for another vCPU's [`Machine::event_signal`] (WFE,
    /// woken at the latest by the event stream; x86: PAUSE).
    fn event_wait();
    /// Wakes every vCPU in [`Machine::event_wait`] (SEV).
    fn event_signal();

    /// The first address past this guest's RAM.
    fn ram_end() -> u64;
    /// Said after the address when the RAM size is a guess (else empty).
    fn ram_end_note() -> &'static str;
    /// One 64-bit load from `address`; the fault, if it faulted and the
    /// guest got the fault back (x86: the hypervisor stops the domain).
    fn probe_load(address: u64) -> (u64, Option<Self::Fault>);
    /// Carries out `end=off` or `end=reset` (vCPU 0, after the last
    /// workload), saying what it does; returns if that failed or this
    /// platform cannot.
    fn end(end: End);

    /// `cpuoff`, on the target: takes this vCPU off; returns only if that
    /// failed (with the call's code). `wakes` counts every time it wakes up
    /// while it should stay off.
    fn power_off_self(wakes: &AtomicU64) -> i64;
    /// `cpuoff`, on vCPU 0, once `target` said it is going off: whatever
    /// vCPU 0 has to do to take it off (x86: INIT; ARM: nothing, it
    /// powered itself off).
    fn take_off(target: usize);
    /// Whether the platform says `target` is off.
    fn is_off(target: usize) -> bool;
    /// What the platform says of `target`, for a failure line.
    fn off_state(target: usize) -> Self::OffState;
    /// Starts `target` again at the secondary entry, which finds its rejoin
    /// slot (`workloads::rejoin_if_restarted`); 0, or the call's error code.
    fn power_on(target: usize) -> i64;

    /// `uartloop`: the second UART's base and INTID, if the platform has
    /// one (a device passed through to the domain).
    fn device_uart() -> Option<(u64, u32)> {
        None
    }
    /// `uartloop`: puts the second UART in loopback mode with its receive
    /// interrupt unmasked and enabled for this vCPU; false if it cannot.
    fn device_uart_start() -> bool {
        false
    }
    /// `uartloop`: sends one byte.
    fn device_uart_send(_byte: u8) {}
    /// `uartloop`: a received byte, if one waits.
    fn device_uart_read() -> Option<u8> {
        None
    }

    /// `top`: runs an instruction the hypervisor traps from the last bytes
    /// of the address space; the PC then wraps to 0, the fault there lands
    /// back in the workloads at position `resume_at` (never returns). `None`
    /// where this is not done yet (x86).
    fn trap_at_top(resume_at: usize) -> Option<core::convert::Infallible>;
    /// `traps`: single-steps `steps` instructions; how many debug
    /// exceptions the guest took, or `None` where this is not done yet.
    fn single_steps(steps: u32) -> Option<u64>;
    /// `traps`: writes the debug registers and reads them back; `None`
    /// where this is not done yet, else the first register that read back
    /// something else (number, written, read).
    fn debug_registers_round_trip() -> Option<Result<(), (u8, u64, u64)>>;
    /// `debugleak`: writes `value` into a debug register; false where this
    /// is not done yet.
    fn debug_register_write(value: u64) -> bool;
    /// `debugleak`: reads that debug register back.
    fn debug_register_read() -> u64;
    /// `timerlevel`: arms the timer, takes its interrupt with interrupts
    /// masked, ends it, waits a little with the line still high, masks the
    /// timer and looks whether the interrupt is pending again. `None`
    /// where this is not done yet.
    fn timer_eoi_before_mask() -> Option<TimerRound>;
    /// `simdleak`: writes `value` into half of a SIMD register the
    /// compiled code leaves alone (x86: turns AVX on, the upper half of
    /// YMM15; ARM: the upper half of V31); false where there is no AVX.
    fn simd_register_write(value: u64) -> bool;
    /// `simdleak`: reads that half back.
    fn simd_register_read() -> u64;

    /// `echo`: unmasks the console's receive interrupt to this vCPU; false
    /// (after saying why, where there is more to say) if it cannot.
    fn console_rx_enable() -> bool;
    /// A received byte, if one waits.
    fn console_read_byte() -> Option<u8>;
    /// Called once the bytes that raised a receive interrupt are read (x86:
    /// the PIC's EOI; ARM: nothing, the GIC's came with the acknowledge).
    fn console_rx_done();
}
