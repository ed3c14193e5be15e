//! The bare-metal guest on x86-64 (AMD SVM domains, `guest_abi::x86`):
//! entered in 64-bit mode at 0x8000 with `rdi` = its vCPU index and `rsi` =
//! the boot info; vCPU 0 starts the others with INIT + STARTUP through the
//! virtual x2APIC and every vCPU runs the workloads the boot arguments
//! choose. [`X86_64`] gives the workloads the x2APIC (IPIs, the
//! TSC-deadline timer), `VMMCALL`, CPU off/on with `cli; hlt`, INIT and
//! STARTUP, and console input through COM1's IRQ 4 on the 8259A.
//! Console: the 16550 at COM1 (0x3F8).

mod console;
mod pic;

use core::arch::{asm, global_asm};
use core::convert::Infallible;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use guest_abi::x86::{BOOT_INFO_BYTES, BootInfo, CPUID_TIMING_LEAF, SIPI_VECTOR, msr};
use guest_abi::{Args, Call, CallError, Regs, decode_return, version_parts};
use test_guest::config::{Config, End};
use test_guest::interrupt::{Interrupt, Ipi, Pending, Taken, TimerRound};

pub use console::print_line;

use super::Machine;
use crate::{say, workloads};

/// The most vCPUs the guest uses (link-x86_64.ld reserves a stack for each).
pub const MAX_VCPUS: usize = 8;

/// How long the primary waits for a started vCPU to say it is online.
const ONLINE_TIMEOUT_MS: u64 = 5000;

/// Interrupt vectors.
pub const VECTOR_TIMER: u8 = 0x30;
/// vCPU 0 pings a peer.
pub const VECTOR_PING: u8 = 0x31;
/// A peer answers.
pub const VECTOR_PONG: u8 = 0x32;
/// Spurious.
const VECTOR_SPURIOUS: u8 = 0xff;

global_asm!(
    ".section .text.head, \"ax\"",
    ".global _start",
    "_start:",
    "cli",
    // Stack: __stacks_start + (index + 1) * 64 KiB.
    "lea rsp, [rip + __stacks_start]",
    "mov rax, rdi",
    "inc rax",
    "shl rax, 16",
    "add rsp, rax",
    "call guest_x86_main",
    "2: hlt",
    "jmp 2b",
    ".text",
    // Interrupt and exception stubs: save the caller-saved registers, call
    // Rust with the vector (and, for exceptions, the frame), restore, IRETQ.
    ".macro IRQ_STUB v",
    ".global guest_irq_stub_\\v",
    "guest_irq_stub_\\v:",
    "push rax",
    "push rcx",
    "push rdx",
    "push rsi",
    "push rdi",
    "push r8",
    "push r9",
    "push r10",
    "push r11",
    "mov edi, \\v",
    "call guest_x86_interrupt",
    "pop r11",
    "pop r10",
    "pop r9",
    "pop r8",
    "pop rdi",
    "pop rsi",
    "pop rdx",
    "pop rcx",
    "pop rax",
    "iretq",
    ".endm",
    ".macro EXC_STUB v",
    ".global guest_exc_stub_\\v",
    "guest_exc_stub_\\v:",
    "mov edi, \\v",
    "mov rsi, rsp",
    "and rsp, -16",
    "call guest_x86_exception",
    ".endm",
    // #DB during `traps`: count it; once enough were taken, clear RFLAGS.TF
    // in the frame (RIP, CS, RFLAGS above the saved RAX) so the stepping
    // ends.
    ".global guest_db_stub",
    "guest_db_stub:",
    "push rax",
    "lock inc qword ptr [rip + {steps_taken}]",
    "mov rax, [rip + {steps_taken}]",
    "cmp rax, [rip + {steps_wanted}]",
    "jb 3f",
    "and qword ptr [rsp + 24], -257",
    "3:",
    "pop rax",
    "iretq",
    "IRQ_STUB 0x30",
    "IRQ_STUB 0x31",
    "IRQ_STUB 0x32",
    "IRQ_STUB 0xff",
    ".irp v, 0x20,0x21,0x22,0x23,0x24,0x25,0x26,0x27",
    "IRQ_STUB \\v",
    ".endr",
    ".irp v, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21",
    "EXC_STUB \\v",
    ".endr",
    steps_taken = sym STEPS_TAKEN,
    steps_wanted = sym STEPS_WANTED,
);

/// `traps`: debug exceptions taken (the #DB stub counts them).
static STEPS_TAKEN: AtomicU64 = AtomicU64::new(0);
/// `traps`: after this many the #DB stub stops the stepping.
static STEPS_WANTED: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" {
    fn guest_db_stub();
}

unsafe extern "C" {
    fn guest_irq_stub_0x30();
    fn guest_irq_stub_0x31();
    fn guest_irq_stub_0x32();
    fn guest_irq_stub_0xff();
}

macro_rules! pic_stubs {
    ($($name:ident),*) => {
        unsafe extern "C" { $(fn $name();)* }
        /// The 8259A master's stubs, by IRQ (vectors 0x20-0x27).
        fn pic_stubs() -> [unsafe extern "C" fn(); 8] { [$($name),*] }
    };
}
pic_stubs!(
    guest_irq_stub_0x20,
    guest_irq_stub_0x21,
    guest_irq_stub_0x22,
    guest_irq_stub_0x23,
    guest_irq_stub_0x24,
    guest_irq_stub_0x25,
    guest_irq_stub_0x26,
    guest_irq_stub_0x27
);

macro_rules! exc_stubs {
    ($($n:literal => $name:ident),*) => {
        unsafe extern "C" { $(fn $name();)* }
        /// The exception stubs, by vector.
        fn exception_stubs() -> [unsafe extern "C" fn(); 22] { [$($name),*] }
    };
}
exc_stubs!(0 => guest_exc_stub_0, 1 => guest_exc_stub_1, 2 => guest_exc_stub_2,
    3 => guest_exc_stub_3, 4 => guest_exc_stub_4, 5 => guest_exc_stub_5,
    6 => guest_exc_stub_6, 7 => guest_exc_stub_7, 8 => guest_exc_stub_8,
    9 => guest_exc_stub_9, 10 => guest_exc_stub_10, 11 => guest_exc_stub_11,
    12 => guest_exc_stub_12, 13 => guest_exc_stub_13, 14 => guest_exc_stub_14,
    15 => guest_exc_stub_15, 16 => guest_exc_stub_16, 17 => guest_exc_stub_17,
    18 => guest_exc_stub_18, 19 => guest_exc_stub_19, 20 => guest_exc_stub_20,
    21 => guest_exc_stub_21);

/// One IDT gate (64-bit interrupt gate).
#[repr(C, align(16))]
#[derive(Clone, Copy)]
struct Gate([u64; 2]);

#[repr(C, align(4096))]
struct Idt([Gate; 256]);

static mut IDT: Idt = Idt([Gate([0, 0]); 256]);

fn gate(handler: u64) -> Gate {
    // Present, DPL 0, type 0xE (64-bit interrupt gate), selector 0x08.
    let low = (handler & 0xffff)
        | (u64::from(guest_abi::x86::CODE_SELECTOR) << 16)
        | (0x8e00 << 32)
        | ((handler >> 16) & 0xffff) << 48;
    Gate([low, handler >> 32])
}

/// The debug exception's vector.
const DEBUG_VECTOR: u8 = 1;

/// Points IDT gate `vector` at `handler` (vCPU 0, while no other vCPU can
/// take that vector).
fn set_gate(vector: u8, handler: u64) {
    // SAFETY: one gate of the static IDT is rewritten by vCPU 0 alone; the
    // other vCPUs take no #DB (nothing single-steps them).
    unsafe { (*core::ptr::addr_of_mut!(IDT)).0[usize::from(vector)] = gate(handler) };
}

/// Fills the IDT (vCPU 0, before the others start).
fn init_idt() {
    let mut gates = [Gate([0, 0]); 256];
    for (vector, stub) in exception_stubs().iter().enumerate() {
        gates[vector] = gate(*stub as *const () as u64);
    }
    gates[usize::from(VECTOR_TIMER)] = gate(guest_irq_stub_0x30 as *const () as u64);
    gates[usize::from(VECTOR_PING)] = gate(guest_irq_stub_0x31 as *const () as u64);
    gates[usize::from(VECTOR_PONG)] = gate(guest_irq_stub_0x32 as *const () as u64);
    gates[usize::from(VECTOR_SPURIOUS)] = gate(guest_irq_stub_0xff as *const () as u64);
    for (irq, stub) in pic_stubs().iter().enumerate() {
        gates[usize::from(pic::MASTER_VECTOR_BASE) + irq] = gate(*stub as *const () as u64);
    }
    // SAFETY: only vCPU 0 writes the IDT, before any other vCPU starts and
    // with interrupts masked.
    unsafe { (*core::ptr::addr_of_mut!(IDT)).0 = gates };
}

/// The operand of LIDT.
#[repr(C, packed)]
struct IdtPointer {
    limit: u16,
    base: u64,
}

/// `end=crash`: a fault the vCPU cannot take.
fn crash() -> ! {
    say!("test-guest: end=crash: ud2 with an empty IDT (a triple fault)");
    let empty = IdtPointer { limit: 0, base: 0 };
    // SAFETY: deliberately unrecoverable: the #UD finds no gate, nor do the
    // #GP and #DF that follow, so the vCPU shuts down, which the hypervisor
    // intercepts (it stops this domain).
    unsafe { asm!("cli", "lidt [{}]", "ud2", in(reg) &empty, options(noreturn, nostack)) }
}

/// Loads the IDT on this vCPU.
fn load_idt() {
    let pointer = IdtPointer {
        limit: (core::mem::size_of::<Idt>() - 1) as u16,
        base: core::ptr::addr_of!(IDT) as u64,
    };
    // SAFETY: the IDT is static and filled by `init_idt` before any vCPU
    // unmasks interrupts.
    unsafe { asm!("lidt [{}]", in(reg) &pointer, options(readonly, nostack)) };
}

static CONFIG: spin::Once<Config> = spin::Once::new();
static ONLINE: [AtomicBool; MAX_VCPUS] = [const { AtomicBool::new(false) }; MAX_VCPUS];
static TSC_KHZ: AtomicU64 = AtomicU64::new(1_000_000);
static RAM_BYTES: AtomicU64 = AtomicU64::new(0);
/// `cpuoff`: vCPU 0 sent this vCPU INIT and no STARTUP yet.
static INIT_SENT: [AtomicBool; MAX_VCPUS] = [const { AtomicBool::new(false) }; MAX_VCPUS];
/// Interrupts each vCPU's handlers have seen and its waits not yet taken.
static PENDING: [Pending; MAX_VCPUS] = [const { Pending::new() }; MAX_VCPUS];

/// This vCPU's index (= its x2APIC id).
pub fn vcpu_index() -> usize {
    (rdmsr(msr::ID) as usize).min(MAX_VCPUS - 1)
}

/// Whether vCPU `index` came online.
pub fn is_online(index: usize) -> bool {
    ONLINE.get(index).is_some_and(|o| o.load(Ordering::Acquire))
}

fn config() -> &'static Config {
    CONFIG
        .get()
        .expect("the primary sets the config before starting others")
}

/// RDMSR.
pub fn rdmsr(number: u32) -> u64 {
    let (low, high): (u32, u32);
    // SAFETY: the MSRs read here are the x2APIC's, which the hypervisor
    // emulates; an unknown one would raise #GP, caught by the handler.
    unsafe { asm!("rdmsr", in("ecx") number, out("eax") low, out("edx") high, options(nostack)) };
    u64::from(high) << 32 | u64::from(low)
}

/// WRMSR.
pub fn wrmsr(number: u32, value: u64) {
    // SAFETY: as for `rdmsr`: only the virtual x2APIC's registers.
    unsafe {
        asm!("wrmsr", in("ecx") number, in("eax") value as u32, in("edx") (value >> 32) as u32, options(nostack))
    };
}

/// The TSC.
pub fn now() -> u64 {
    // SAFETY: RDTSC has no side effects.
    unsafe { core::arch::x86_64::_rdtsc() }
}

/// TSC ticks in `us` microseconds.
pub fn us_to_ticks(us: u64) -> u64 {
    us * TSC_KHZ.load(Ordering::Relaxed) / 1000
}

/// TSC ticks in `ms` milliseconds.
pub fn ms_to_ticks(ms: u64) -> u64 {
    us_to_ticks(ms * 1000)
}

/// VMMCALL with the `guest_abi::x86` register mapping.
pub fn vmmcall(id: u64, args: Args) -> Regs {
    let (r0, r1, r2, r3);
    // SAFETY: VMMCALL only enters the hypervisor, which preserves every
    // register but rax, rdi, rsi, rdx (declared) and touches no guest memory.
    unsafe {
        asm!(
            "vmmcall",
            inout("rax") id => r0,
            inout("rdi") args[0] => r1,
            inout("rsi") args[1] => r2,
            inout("rdx") args[2] => r3,
            in("r10") args[3],
            in("r8") args[4],
            options(nostack),
        );
    }
    [r0, r1, r2, r3]
}

/// Makes a `guest-abi` call.
pub fn hypercall(call: &Call) -> Result<Regs, CallError> {
    let (id, args) = call.encode();
    decode_return(vmmcall(u64::from(id), args))
}

/// ICR delivery mode INIT (101b, bits 10:8).
const ICR_INIT: u64 = 0b101 << 8;
/// ICR delivery mode STARTUP (110b).
const ICR_STARTUP: u64 = 0b110 << 8;
/// ICR level: assert (bit 14), as INIT and STARTUP need.
const ICR_ASSERT: u64 = 1 << 14;

/// Sends a fixed IPI to vCPU `target`.
pub fn send_ipi(target: usize, vector: u8) {
    wrmsr(msr::ICR, (target as u64) << 32 | u64::from(vector));
}

/// Sends INIT to vCPU `target` (a started one waits for STARTUP after it).
fn send_init(target: usize) {
    wrmsr(msr::ICR, (target as u64) << 32 | ICR_ASSERT | ICR_INIT);
}

/// Sends STARTUP to vCPU `target`: the paravirtual SIPI that starts it at
/// the image base (`guest_abi::x86`).
fn send_startup(target: usize) {
    wrmsr(
        msr::ICR,
        (target as u64) << 32 | ICR_ASSERT | ICR_STARTUP | u64::from(SIPI_VECTOR),
    );
}

/// Arms the TSC-deadline timer.
pub fn arm_timer(deadline: u64) {
    wrmsr(msr::TSC_DEADLINE, deadline.max(1));
}

/// Disarms the timer.
pub fn disarm_timer() {
    wrmsr(msr::TSC_DEADLINE, 0);
}

#[unsafe(no_mangle)]
extern "C" fn guest_x86_interrupt(vector: u64) {
    let vector = vector as u8;
    let pending = &PENDING[vcpu_index()];
    if let Some(irq) = pic::irq_of(vector) {
        // The 8259A's, through virtual wire mode: no local-APIC EOI.
        if irq == pic::COM1_IRQ {
            // Stays in service until `echo` has read what raised it
            // (`console_rx_done`): with the line still up, an EOI now
            // would only bring the interrupt straight back.
            pending.record(Taken::Known(Interrupt::ConsoleRx));
        } else {
            pending.record(Taken::Unknown);
            // Nothing else is unmasked; a spurious IRQ 7 is not in service.
            if pic::in_service(irq) {
                pic::eoi();
            }
        }
        return;
    }
    let taken = match vector {
        VECTOR_SPURIOUS => return,
        VECTOR_TIMER => Taken::Known(Interrupt::Timer),
        VECTOR_PING => Taken::Known(Interrupt::Ping),
        VECTOR_PONG => Taken::Known(Interrupt::Pong),
        _ => Taken::Unknown,
    };
    pending.record(taken);
    wrmsr(msr::EOI, 0);
}

#[unsafe(no_mangle)]
extern "C" fn guest_x86_exception(vector: u64, frame: *const u64) -> ! {
    // SAFETY: `frame` is the stack pointer at the stub, which points at the
    // CPU's exception frame (with or without an error code): five words
    // at least are there.
    let words: [u64; 3] = unsafe { [*frame, *frame.add(1), *frame.add(2)] };
    say!(
        "test-guest: vcpu {} Unexpected exception: vector {vector}, frame {:#x} {:#x} {:#x}",
        vcpu_index(),
        words[0],
        words[1],
        words[2]
    );
    halt()
}

/// Waits for an interrupt: `sti; hlt`, then masks again.
fn idle() {
    // SAFETY: STI; HLT is atomic with respect to interrupts (the STI shadow),
    // so a pending one wakes the HLT; the handlers only record it.
    unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
}

/// Lets a pending interrupt in (its handler records it), then masks again.
fn interrupt_window() {
    // SAFETY: interrupts are recognised after the instruction that follows
    // STI, so one pending is taken before the CLI; the handlers only record.
    unsafe { asm!("sti", "nop", "cli", options(nomem, nostack)) };
}

/// Stops this vCPU for good (halted, interrupts masked).
pub fn halt() -> ! {
    disarm_timer();
    loop {
        // SAFETY: halting with interrupts masked only stops this vCPU.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
    }
}

/// The guest's RAM size (the misbehave workload reads just past it).
pub fn ram_end() -> u64 {
    RAM_BYTES.load(Ordering::Relaxed)
}

fn read_config(bootargs: &str) -> Config {
    let parsed = Config::parse(bootargs, |word| {
        say!("test-guest: ignoring boot argument {word:?}");
    });
    match parsed {
        Ok(config) => config,
        Err(e) => {
            say!("test-guest: bad boot arguments ({e}); using the built-in workloads");
            Config::DEFAULT
        }
    }
}

/// Enables this vCPU's x2APIC and its timer (TSC-deadline mode, masked off
/// until armed).
fn init_apic() {
    wrmsr(msr::SVR, 0x100 | u64::from(VECTOR_SPURIOUS));
    wrmsr(msr::LVT_TIMER, u64::from(VECTOR_TIMER) | (2 << 17));
}

#[unsafe(no_mangle)]
extern "C" fn guest_x86_main(index: u64, boot_info: u64) -> ! {
    if index == 0 {
        primary(boot_info)
    } else {
        secondary(index as usize)
    }
}

fn primary(boot_info: u64) -> ! {
    // Before the first line: where lines go.
    let com1 = console::probe();
    init_idt();
    load_idt();
    // SAFETY: the hypervisor wrote the boot info at this address in RAM.
    let bytes = unsafe { core::slice::from_raw_parts(boot_info as *const u8, BOOT_INFO_BYTES) };
    let (vcpus, cmdline) = match BootInfo::decode(bytes) {
        Ok(info) => {
            TSC_KHZ.store(info.tsc_khz.max(1), Ordering::Relaxed);
            RAM_BYTES.store(info.ram_bytes, Ordering::Relaxed);
            (info.vcpus as usize, info.cmdline)
        }
        Err(e) => {
            say!("test-guest: boot info unusable ({e}); one vCPU, built-in workloads");
            (1, "")
        }
    };
    say!("test-guest: started in 64-bit mode (x86-64), boot info at {boot_info:#x}");
    if !com1 {
        say!("test-guest: no 16550 at COM1: console through CONSOLE_WRITE");
    }
    let timing = core::arch::x86_64::__cpuid(CPUID_TIMING_LEAF);
    say!(
        "test-guest: TSC {} kHz (boot info), {} kHz (CPUID {CPUID_TIMING_LEAF:#x})",
        TSC_KHZ.load(Ordering::Relaxed),
        timing.eax
    );
    if !cmdline.is_empty() {
        say!("test-guest: bootargs {cmdline:?}");
    }
    let config = CONFIG.call_once(|| read_config(cmdline));
    match hypercall(&Call::Version) {
        Ok(regs) => {
            let (major, minor) = version_parts(regs[0]);
            say!("test-guest: hypervisor ABI {major}.{minor}");
        }
        Err(e) => say!("test-guest: no hypervisor ABI ({e})"),
    }
    init_apic();
    ONLINE[0].store(true, Ordering::Release);
    say!("test-guest: vcpu 0 online (x2apic id 0)");
    let mut wanted = match config.vcpus {
        0 => vcpus,
        n => (n as usize).min(vcpus),
    };
    if wanted > MAX_VCPUS {
        say!(
            "test-guest: only {MAX_VCPUS} vCPUs used, {} left out",
            wanted - MAX_VCPUS
        );
        wanted = MAX_VCPUS;
    }
    for target in 1..wanted {
        send_init(target);
        send_startup(target);
        let deadline = now() + ms_to_ticks(ONLINE_TIMEOUT_MS);
        while !is_online(target) {
            if now() > deadline {
                say!("test-guest: vcpu {target} did not come online in {ONLINE_TIMEOUT_MS} ms");
                break;
            }
            core::hint::spin_loop();
        }
    }
    let online = (0..wanted).filter(|&i| is_online(i)).count();
    say!("test-guest: {online} of {wanted} vCPUs online");
    workloads::start(wanted);
    workloads::run(0, config)
}

fn secondary(index: usize) -> ! {
    load_idt();
    init_apic();
    let index = index.min(MAX_VCPUS - 1);
    ONLINE[index].store(true, Ordering::Release);
    say!("test-guest: vcpu {index} online (x2apic id {index})");
    workloads::rejoin_if_restarted(index, config());
    workloads::wait_start(index);
    workloads::run(index, config())
}

/// The x86-64 side of [`Machine`].
pub struct X86_64;

/// What vCPU 0 knows of a `cpuoff` target: whether it sent INIT (nothing
/// reports a vCPU's state to the guest).
pub struct OffState {
    init_sent: bool,
}

impl core::fmt::Display for OffState {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let said = if self.init_sent {
            "INIT sent"
        } else {
            "no INIT sent: it did not say it was going off"
        };
        f.write_str(said)
    }
}

impl Machine for X86_64 {
    const TIMER_NAME: &'static str = "timer";
    const IDLE_NAME: &'static str = "HLT";
    const IPI_NAME: &'static str = "an IPI";
    const POWER_OFF_NAME: &'static str = "HLT";
    const POWER_ON_NAME: &'static str = "STARTUP";
    const RESTARTS_RUNNING: bool = true;
    const CONSOLE_INTERRUPT_NAME: &'static str = "the COM1 interrupt";
    const SIMD_LEAK_REGISTER: &'static str = "YMM15[255:192]";

    /// A load outside RAM never comes back as a fault: the hypervisor takes
    /// the nested page fault and stops the domain.
    type Fault = Infallible;
    type OffState = OffState;

    fn vcpu_index() -> usize {
        vcpu_index()
    }

    fn is_online(index: usize) -> bool {
        is_online(index)
    }

    fn halt() -> ! {
        halt()
    }

    fn now() -> u64 {
        now()
    }

    fn us_to_ticks(us: u64) -> u64 {
        us_to_ticks(us)
    }

    fn hypercall(call: &Call) -> Result<Regs, CallError> {
        hypercall(call)
    }

    fn raw_call(id: u64, args: Args) -> Regs {
        vmmcall(id, args)
    }

    fn interrupts_usable() -> bool {
        // The virtual x2APIC is always there.
        true
    }

    fn arm_timer(deadline: u64) {
        arm_timer(deadline)
    }

    fn disarm_timer() {
        disarm_timer()
    }

    fn idle() {
        idle()
    }

    fn take_interrupt() -> Option<Taken> {
        // After BLOCK, a pending interrupt still waits for IF = 1.
        interrupt_window();
        // A TSC-deadline timer that fired is disarmed (its deadline reads 0).
        PENDING[vcpu_index()].take()
    }

    fn send_ipi(target: usize, ipi: Ipi) {
        let vector = match ipi {
            Ipi::Ping => VECTOR_PING,
            Ipi::Pong => VECTOR_PONG,
        };
        send_ipi(target, vector)
    }

    fn event_wait() {
        core::hint::spin_loop();
    }

    fn event_signal() {}

    fn ram_end() -> u64 {
        ram_end()
    }

    fn ram_end_note() -> &'static str {
        ""
    }

    fn probe_load(address: u64) -> (u64, Option<Infallible>) {
        // SAFETY: deliberately reads guest-physical memory the domain does
        // not have (identity-mapped by the boot page tables): the hypervisor
        // takes the nested page fault and stops the domain, so this never
        // returns a value; if it does, the value is only printed.
        let value = unsafe { core::ptr::read_volatile(address as *const u64) };
        (value, None)
    }

    fn end(end: End) {
        let what = match end {
            End::Idle => return,
            End::Crash => crash(),
            End::Off => "off",
            End::Reset => "reset",
        };
        say!("test-guest: end={what}: no such call for x86-64 guests; idling");
    }

    fn power_off_self(wakes: &AtomicU64) -> i64 {
        // Linux's hlt_play_dead: with IF = 0 no fixed interrupt ends the
        // HLT, only the INIT vCPU 0 sends; a HLT that ends anyway counts.
        loop {
            // SAFETY: halting with interrupts masked only stops this vCPU;
            // the INIT that ends this takes it off for good.
            unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
            wakes.fetch_add(1, Ordering::Release);
        }
    }

    fn trap_at_top(_resume_at: usize) -> Option<core::convert::Infallible> {
        None
    }

    fn single_steps(steps: u32) -> Option<u64> {
        STEPS_TAKEN.store(0, Ordering::Relaxed);
        STEPS_WANTED.store(u64::from(steps), Ordering::Relaxed);
        set_gate(DEBUG_VECTOR, guest_db_stub as *const () as u64);
        // SAFETY: sets RFLAGS.TF for a counted loop of plain register
        // instructions; each one then raises a #DB, which the stub counts
        // and, after `steps`, ends by clearing TF in the frame it returns
        // through. The loop runs at least `steps` instructions (two per
        // round), so the stepping ends inside it; the last POPFQ clears TF
        // in any case.
        unsafe {
            asm!(
                "pushfq",
                "or qword ptr [rsp], 0x100",
                "popfq",
                "2:",
                "dec {n}",
                "jnz 2b",
                "pushfq",
                "and qword ptr [rsp], -257",
                "popfq",
                n = inout(reg) u64::from(steps) + 1 => _,
            );
        }
        set_gate(
            DEBUG_VECTOR,
            exception_stubs()[usize::from(DEBUG_VECTOR)] as *const () as u64,
        );
        Some(STEPS_TAKEN.load(Ordering::Relaxed))
    }

    fn debug_registers_round_trip() -> Option<Result<(), (u8, u64, u64)>> {
        let addresses = [
            0xffff_8000_0000_1000u64,
            0x0000_7fff_dead_b000,
            0x1234_5000,
            0x42,
        ];
        // Local enables for DR0-DR2, 2-byte write watch on DR1: as a
        // debugger would leave it (bit 10 always reads as one).
        let dr7: u64 = 0x0010_0415;
        // SAFETY: MOV to and from the debug registers at CPL 0; the
        // hypervisor emulates them (no breakpoint is armed in hardware).
        let read: [u64; 5] = unsafe {
            asm!(
                "mov dr0, {a}", "mov dr1, {b}", "mov dr2, {c}", "mov dr3, {d}", "mov dr7, {e}",
                a = in(reg) addresses[0], b = in(reg) addresses[1],
                c = in(reg) addresses[2], d = in(reg) addresses[3], e = in(reg) dr7,
                options(nostack),
            );
            let (a, b, c, d, e): (u64, u64, u64, u64, u64);
            asm!(
                "mov {a}, dr0", "mov {b}, dr1", "mov {c}, dr2", "mov {d}, dr3", "mov {e}, dr7",
                a = out(reg) a, b = out(reg) b, c = out(reg) c, d = out(reg) d, e = out(reg) e,
                options(nostack, nomem),
            );
            // Leave nothing enabled behind.
            asm!("mov dr7, {}", in(reg) 0x400u64, options(nostack));
            [a, b, c, d, e]
        };
        let written = [addresses[0], addresses[1], addresses[2], addresses[3], dr7];
        let numbers = [0u8, 1, 2, 3, 7];
        Some(match (0..5).find(|&i| read[i] != written[i]) {
            Some(i) => Err((numbers[i], written[i], read[i])),
            None => Ok(()),
        })
    }

    fn take_off(target: usize) {
        INIT_SENT[target].store(true, Ordering::Release);
        send_init(target);
    }

    fn is_off(target: usize) -> bool {
        // Nothing tells the guest; once INIT went out the target is held
        // (guest_abi::x86) and its counter shows whether it ran.
        INIT_SENT[target].load(Ordering::Acquire)
    }

    fn off_state(target: usize) -> OffState {
        OffState {
            init_sent: Self::is_off(target),
        }
    }

    fn power_on(target: usize) -> i64 {
        INIT_SENT[target].store(false, Ordering::Release);
        send_init(target);
        send_startup(target);
        0
    }

    fn console_rx_enable() -> bool {
        if let Err(imr) = pic::init_with_only(pic::COM1_IRQ) {
            say!(
                "test-guest: echo: no 8259A PIC at 0x20 (IMR reads {imr:#x} after unmasking IRQ {} alone)",
                pic::COM1_IRQ
            );
            return false;
        }
        let ier = console::enable_rx_interrupts();
        if !console::rx_interrupt_enabled(ier) {
            say!(
                "test-guest: echo: COM1's IER reads {ier:#x} after enabling the receive interrupt"
            );
            return false;
        }
        true
    }

    fn console_read_byte() -> Option<u8> {
        console::read_byte()
    }

    fn console_rx_done() {
        pic::eoi();
    }

    fn timer_eoi_before_mask() -> Option<TimerRound> {
        // The TSC-deadline timer is edge-like (one LVT delivery per
        // deadline): there is no level to outlive the EOI.
        None
    }

    fn debug_register_write(_value: u64) -> bool {
        // `traps` checks x86's emulated DR0-DR3 round trip already.
        false
    }

    fn debug_register_read() -> u64 {
        0
    }

    fn simd_register_write(value: u64) -> bool {
        let features = core::arch::x86_64::__cpuid(1);
        if features.ecx & CPUID1_ECX_XSAVE == 0 || features.ecx & CPUID1_ECX_AVX == 0 {
            return false;
        }
        use x86_64::registers::control::{Cr4, Cr4Flags};
        use x86_64::registers::xcontrol::{XCr0, XCr0Flags};
        // SAFETY: CR4.OSXSAVE and XCR0 = x87|SSE|AVX only make XSAVE and
        // AVX usable (CPUID says both exist); no paging state changes.
        unsafe {
            Cr4::update(|f| f.insert(Cr4Flags::OSXSAVE));
            XCr0::write(XCr0Flags::X87 | XCr0Flags::SSE | XCr0Flags::AVX);
        }
        let halves = [value, !value];
        // SAFETY: VINSERTF128 reads 16 bytes of `halves` into YMM15's upper
        // half; this guest is built soft-float, so no compiled code uses
        // YMM15.
        unsafe {
            asm!(
                "vinsertf128 ymm15, ymm15, xmmword ptr [{}], 1",
                in(reg) &halves,
                options(nostack, readonly)
            )
        };
        true
    }

    fn simd_register_read() -> u64 {
        let mut halves = [0u64; 2];
        // SAFETY: VEXTRACTF128 writes YMM15's upper half into `halves`
        // (16 bytes); AVX was turned on by `simd_register_write`.
        unsafe {
            asm!(
                "vextractf128 xmmword ptr [{}], ymm15, 1",
                in(reg) &mut halves,
                options(nostack)
            )
        };
        halves[0]
    }
}

/// CPUID leaf 1 ECX: XSAVE.
const CPUID1_ECX_XSAVE: u32 = 1 << 26;
/// CPUID leaf 1 ECX: AVX.
const CPUID1_ECX_AVX: u32 = 1 << 28;
