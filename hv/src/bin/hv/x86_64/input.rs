//! Console input on x86-64: COM1's receive interrupt, routed through the
//! I/O APIC to the boot CPU (ISA IRQ 4, wherever the MADT's interrupt
//! source overrides put it), or, when the MADT lists no I/O APIC that can
//! take it, COM1 polled from the boot CPU's 10 ms tick, as Xen's ns16550
//! driver does without an IRQ. `hv.console-input=poll` on the command line
//! ([`hv::boot_options`]) picks polling even with an I/O APIC.
//!
//! Either way the interrupt handler only drains the UART (bounded) into a
//! queue; the boot CPU's run loop routes the bytes through the shared Ctrl-A
//! x3 switch and command line ([`hv::console_input`]) into a domain's
//! emulated 16550 (whose IRQ 4 goes through its emulated 8259A to vCPU 0) or
//! to the hypervisor's command line. A command runs there, outside any
//! interrupt handler and with interrupts enabled, so a `move` that waits
//! for the domain's vCPUs holds up neither interrupts nor further input.

use core::fmt::Write;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use alloc::string::String;
use apic::IoApic;
use apic::ioapic::{Polarity, RedirectionEntry, TriggerMode};
use hv::console_input::{ConsoleInput, InputQueue, InputSink};
use hv::console_switch::{Announcement, InputOwner};
use hv::x86::pic8259::COM1_IRQ;
use log::{info, warn};
use platform::acpi::{InterruptPolarity, InterruptTrigger, Madt};
use platform::arch::x86_64::{boot, console, cpu};
use platform::sync::Mutex;
use sched::DomainId;

use super::{domain, exit};

/// The host vector COM1's receive interrupt arrives on.
pub const VECTOR_CONSOLE: u8 = 0x45;

/// The PC's COM1 is ISA IRQ 4 (the guests' COM1 is the same IRQ of their
/// emulated PIC).
const HOST_COM1_IRQ: u8 = COM1_IRQ;

/// The command-line word behind [`hv::boot_options::BootOptions::console_poll`]
/// (for the log).
const POLL_OPTION: &str = "hv.console-input=poll";

/// Bytes taken from the UART per interrupt or tick: its FIFO holds 16, so
/// this drains it with room to spare while bounding the handler.
const MAX_BYTES_PER_DRAIN: usize = 64;

/// How console input reaches the hypervisor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
enum Mode {
    /// Not set up (yet).
    Off = 0,
    /// COM1's interrupt through the I/O APIC.
    Interrupt = 1,
    /// COM1 read at every tick of the boot CPU.
    Poll = 2,
}

static MODE: AtomicU8 = AtomicU8::new(Mode::Off as u8);

fn mode() -> Mode {
    match MODE.load(Ordering::Acquire) {
        1 => Mode::Interrupt,
        2 => Mode::Poll,
        _ => Mode::Off,
    }
}

/// Bytes the interrupt (or tick) took from COM1, waiting to be routed.
static RECEIVED: Mutex<InputQueue<256>> = Mutex::new(InputQueue::new());
/// Set when `RECEIVED` got bytes; taken by the boot CPU's run loop.
static PENDING: AtomicBool = AtomicBool::new(false);
/// A drain stopped at its bound: COM1 may hold more.
static MORE: AtomicBool = AtomicBool::new(false);
/// `RECEIVED`'s drop count as last reported.
static DROPPED_REPORTED: AtomicU64 = AtomicU64::new(0);
/// Who gets input, and the hypervisor's command line.
static INPUT: Mutex<Option<ConsoleInput>> = Mutex::new(None);

/// Sets up console input on the boot CPU (`boot_apic_id`): COM1's IRQ
/// through the I/O APIC the MADT names, or polling; logs which. Input goes
/// to the hypervisor until [`start_domains`] hands it to the first domain.
pub fn init(madt: &Madt, boot_cpu: usize, boot_apic_id: u32, force_poll: bool) {
    cpu::without_irqs(|| *INPUT.lock() = Some(ConsoleInput::new(&[])));
    let poll_reason = if force_poll {
        Some(alloc::format!("{POLL_OPTION} on the command line"))
    } else {
        match route_com1(madt, boot_apic_id) {
            Ok(route) => {
                MODE.store(Mode::Interrupt as u8, Ordering::Release);
                console::enable_rx_interrupts();
                info!(
                    "console: input on COM1's interrupt (ISA IRQ {HOST_COM1_IRQ}, {route}) as vector {VECTOR_CONSOLE:#x} on cpu {boot_cpu}"
                );
                None
            }
            Err(reason) => Some(reason),
        }
    };
    if let Some(reason) = poll_reason {
        MODE.store(Mode::Poll as u8, Ordering::Release);
        info!(
            "console: {reason}; polling COM1 every {} ms from cpu {boot_cpu}'s tick",
            super::TICK_NS / 1_000_000
        );
    }
}

/// Routes ISA IRQ 4 to `apic_id` at [`VECTOR_CONSOLE`]; returns how, or why
/// it cannot.
fn route_com1(madt: &Madt, apic_id: u32) -> Result<String, String> {
    let route = madt
        .isa_irq(HOST_COM1_IRQ)
        .map_err(|e| alloc::format!("{e}"))?;
    if route.reserved_flags {
        warn!(
            "acpi: the interrupt source override of ISA IRQ {HOST_COM1_IRQ} has reserved flags; taking the ISA default for them"
        );
    }
    let address = u64::from(route.io_apic.address);
    if !in_uncached_map(address) {
        return Err(alloc::format!(
            "the I/O APIC at {address:#x} is outside the uncached identity map"
        ));
    }
    // Every other I/O APIC the map reaches is masked too: nothing the
    // hypervisor did not route may interrupt.
    for other in madt
        .io_apics
        .iter()
        .filter(|a| a.address != route.io_apic.address)
    {
        if in_uncached_map(u64::from(other.address)) {
            // SAFETY: an I/O APIC page from the MADT inside the uncached
            // identity map (checked); the hypervisor drives no I/O APIC
            // anywhere else, and this one only here, once, at boot.
            unsafe { IoApic::new(other.address as usize) }.mask_all();
        }
    }
    // SAFETY: as above, for the I/O APIC that takes COM1; after this
    // function nothing touches it again.
    let mut ioapic = unsafe { IoApic::new(route.io_apic.address as usize) };
    let pins = ioapic.version().pins;
    if route.pin >= pins {
        return Err(alloc::format!(
            "GSI {} would be pin {} of the I/O APIC at {address:#x}, which has {pins} pins",
            route.gsi,
            route.pin
        ));
    }
    let polarity = match route.polarity {
        InterruptPolarity::ActiveHigh => Polarity::ActiveHigh,
        InterruptPolarity::ActiveLow => Polarity::ActiveLow,
    };
    let trigger = match route.trigger {
        InterruptTrigger::Edge => TriggerMode::Edge,
        InterruptTrigger::Level => TriggerMode::Level,
    };
    let entry = RedirectionEntry::fixed(VECTOR_CONSOLE, apic_id, polarity, trigger)
        .map_err(|e| alloc::format!("{e}"))?;
    ioapic.mask_all();
    ioapic
        .set_entry(route.pin, &entry)
        .map_err(|e| alloc::format!("{e}"))?;
    let mut text = alloc::format!(
        "GSI {}, pin {} of I/O APIC {} at {address:#x} ({pins} pins), {}, active {}",
        route.gsi,
        route.pin,
        route.io_apic.id,
        match trigger {
            TriggerMode::Edge => "edge",
            TriggerMode::Level => "level",
        },
        match polarity {
            Polarity::ActiveHigh => "high",
            Polarity::ActiveLow => "low",
        }
    );
    if route.overridden {
        let _ = write!(text, ", from an interrupt source override");
    }
    Ok(text)
}

/// Whether the register page at `address` is in the uncached part of the
/// boot identity map (where an I/O APIC can be driven).
fn in_uncached_map(address: u64) -> bool {
    address >= boot::UNCACHED_START && address.saturating_add(0x1000) <= boot::IDENTITY_MAP_END
}

/// Takes what COM1 holds into the queue (interrupt context, or the tick).
/// Stopping at the bound with input still arriving leaves COM1's interrupt
/// line up, and an edge-triggered I/O APIC input would then never fire
/// again: [`MORE`] makes the run loop drain on.
fn drain() {
    let mut got = 0;
    let mut received = RECEIVED.lock();
    while got < MAX_BYTES_PER_DRAIN {
        let Some(byte) = console::read_byte() else {
            break;
        };
        // A full queue drops the byte (counted): the run loop is far behind.
        received.push(byte);
        got += 1;
    }
    drop(received);
    if got == MAX_BYTES_PER_DRAIN {
        MORE.store(true, Ordering::Release);
    }
    if got > 0 {
        PENDING.store(true, Ordering::Release);
    }
}

/// COM1's interrupt: drain it (the handler's caller sends the EOI).
pub fn on_interrupt() {
    drain();
}

/// The boot CPU's tick: poll COM1 when there is no interrupt for it.
pub fn on_tick() {
    if mode() == Mode::Poll {
        drain();
    }
}

/// Routes the queued bytes (the boot CPU's run loop, interrupts masked;
/// commands run with them enabled). Returns at once when nothing is queued.
pub fn process() {
    if MORE.swap(false, Ordering::AcqRel) {
        cpu::without_irqs(drain);
    }
    if !PENDING.swap(false, Ordering::AcqRel) {
        return;
    }
    while let Some(byte) = cpu::without_irqs(|| RECEIVED.lock().pop()) {
        let routed = cpu::without_irqs(|| INPUT.lock().as_mut().map(|i| i.feed(byte)));
        if let Some(routed) = routed {
            routed.carry_out(&mut Sink);
        }
    }
    let dropped = cpu::without_irqs(|| RECEIVED.lock().dropped());
    let reported = DROPPED_REPORTED.swap(dropped, Ordering::Relaxed);
    if dropped > reported {
        warn!(
            "console: {} typed bytes lost: the boot CPU did not route them in time",
            dropped - reported
        );
    }
}

/// Puts the domains with a console into the input rotation and gives input
/// to the first of them, announcing it.
pub fn start_domains(domains: &[u32]) {
    let owner = cpu::without_irqs(|| INPUT.lock().as_mut().map(|i| i.start(domains)));
    if let Some(owner) = owner {
        info!("{}", Announcement(owner));
    }
}

/// Takes a stopped domain out of the rotation.
pub fn remove_domain(domain: DomainId) {
    let switched = cpu::without_irqs(|| {
        INPUT
            .lock()
            .as_mut()
            .and_then(|i| i.remove_domain(domain.0))
    });
    if let Some(to) = switched {
        info!("{}", Announcement(to));
    }
}

/// The x86 side of routed input, on the boot CPU.
struct Sink;

impl InputSink for Sink {
    fn write(&mut self, bytes: &[u8]) {
        console::write_bytes_nowait(bytes);
    }

    fn announce(&mut self, to: InputOwner) {
        info!("{}", Announcement(to));
    }

    fn deliver(&mut self, domain: u32, bytes: &[u8]) {
        deliver_to_domain(DomainId(domain), bytes);
    }

    fn run_command(&mut self, line: &str) {
        // Interrupts on while it runs: a move waits up to seconds for the
        // domain's vCPUs, and this CPU's interrupts (ticks, kicks, more
        // input) must not wait with it. What they leave for the run loop is
        // taken once the command is done.
        cpu::enable_irqs();
        super::runtime::RUNTIME.run_command(line);
        x86_64::instructions::interrupts::disable();
    }
}

/// Puts `bytes` into the domain's COM1 and drives its IRQ 4 into the
/// domain's PIC; vCPU 0, which takes the PIC's interrupts, is woken (or its
/// CPU made to exit) when the PIC then requests one.
fn deliver_to_domain(id: DomainId, bytes: &[u8]) {
    let target = domain::with_domain(id, |d| {
        if d.stopped {
            return None;
        }
        // Input the UART cannot hold even in its backlog is lost, as on the
        // hardware: LSR.OE tells the guest.
        for &b in bytes {
            d.uart.receive(b);
        }
        Some(d.drive_com1_irq())
    })
    .flatten();
    let Some((wake, delivery)) = target else {
        return;
    };
    if let Some(vcpu) = wake {
        exit::notify(vcpu);
    }
    if let Some(delivery) = delivery {
        exit::deliver(id, delivery);
    }
}
