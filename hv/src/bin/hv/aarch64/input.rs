//! Console input on ARM64: the host PL011's receive interrupt (routed to the
//! boot CPU), routed through the shared Ctrl-A x3 switch and command line
//! ([`hv::console_input`]) into a domain's emulated PL011 or the
//! hypervisor's command line.
//!
//! Nothing polls: the UART raises its RX/RT interrupt while input waits, the
//! handler drains it (bounded) and routes every byte. A command runs in that
//! interrupt handler on the boot CPU.

use core::sync::atomic::{AtomicU32, Ordering};

use gic::{IntId, Trigger};
use hv::console_input::{ConsoleInput, InputSink};
use hv::console_switch::{Announcement, InputOwner};
use log::{info, warn};
use platform::arch::aarch64::{console, cpu};
use platform::dt::{InterruptKind, MachineDescription};
use platform::sync::Mutex;
use sched::DomainId;

use super::{GIC, domain};

/// Bytes taken from the UART per interrupt: its FIFO holds 32, so this drains
/// it with room to spare while bounding the time spent in the handler.
const MAX_BYTES_PER_INTERRUPT: usize = 64;

/// The host UART's INTID, or 0 when console input is not interrupt-driven.
static UART_INTID: AtomicU32 = AtomicU32::new(0);

/// Who gets input, and the hypervisor's own command line.
static INPUT: Mutex<Option<ConsoleInput>> = Mutex::new(None);

/// Routes the console UART's receive interrupt to the calling (boot) CPU and
/// unmasks it in the UART. Input goes to the hypervisor until
/// [`start_domains`] hands it to the first domain.
pub fn init(machine: &MachineDescription) {
    // The board picks the console UART; the device tree's stdout-path may
    // name another one (the Pi 4's names the mini UART, the rpi4 board
    // writes to the PL011): its interrupt would be the wrong line.
    if let (Some(uart), Some(base)) = (machine.console.as_ref(), console::base())
        && uart.region.base != base as u64
    {
        info!(
            "console: the device tree's stdout-path names {} at {:#x}, but the console is the UART at {base:#x}; no console input",
            uart.path, uart.region.base
        );
        return;
    }
    let Some(irq) = machine.console.as_ref().and_then(|uart| uart.interrupt) else {
        info!("console: the UART has no interrupt in the device tree; no console input");
        return;
    };
    if irq.kind != InterruptKind::Spi {
        warn!(
            "console: UART interrupt {} is not an SPI; no console input",
            irq.intid()
        );
        return;
    }
    init_spi(irq.intid());
}

/// As [`init`], for a UART whose receive interrupt is the SPI `spi` (an ACPI
/// boot: the SPCR's GSIV).
pub fn init_spi(spi: u32) {
    let Some(gic) = GIC.get() else { return };
    let result = IntId::new(spi).and_then(|intid| {
        // The PL011's line is level-high (its binding and QEMU virt's DT).
        gic.set_trigger(intid, Trigger::Level)?;
        gic.route_spi(intid, cpu::index())?;
        gic.enable_interrupt(intid)
    });
    if let Err(e) = result {
        warn!("console: cannot route UART interrupt {spi}: {e}; no console input");
        return;
    }
    cpu::without_irqs(|| *INPUT.lock() = Some(ConsoleInput::new(&[])));
    UART_INTID.store(spi, Ordering::Release);
    console::enable_rx_interrupts();
    info!("console: input on interrupt {spi} (cpu {})", cpu::index());
}

/// The UART's INTID, if console input is on.
pub fn intid() -> Option<u32> {
    match UART_INTID.load(Ordering::Acquire) {
        0 => None,
        id => Some(id),
    }
}

/// Puts the domains with a console into the input rotation and gives input
/// to the first of them (as Xen gives it to dom0), announcing it.
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

/// The UART interrupt (on the boot CPU): drain the receive FIFO and route each byte.
/// The caller ends the interrupt afterwards (the line is low once drained).
pub fn on_interrupt() {
    for _ in 0..MAX_BYTES_PER_INTERRUPT {
        let Some(byte) = console::read_byte() else {
            return;
        };
        route(byte);
    }
}

/// Where one byte goes (the input lock is released before it is carried
/// out: a command may take long and may change the rotation).
fn route(byte: u8) {
    let routed = cpu::without_irqs(|| INPUT.lock().as_mut().map(|i| i.feed(byte)));
    if let Some(routed) = routed {
        routed.carry_out(&mut Sink);
    }
}

/// The ARM side of routed input, on the boot CPU.
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
        super::runtime::RUNTIME.run_command(line);
    }
}

/// Puts `bytes` into the domain's PL011 receive FIFO and drives its
/// interrupt line; a vCPU the interrupt targets is woken or kicked.
fn deliver_to_domain(id: DomainId, bytes: &[u8]) {
    let target = domain::with_domain(id, |d| {
        if d.stopped {
            return None;
        }
        // A full FIFO is an overrun, as on the hardware: the UART records it.
        for &b in bytes {
            d.uart.receive(b);
        }
        match d
            .vgic
            .set_level(0, super::exit::UART_INTID, d.uart.irq_level())
        {
            Ok(Some(target)) => d.vcpus.get(target).copied(),
            Ok(None) => None,
            Err(e) => {
                warn!("domain {}: PL011 interrupt: {e}", id.0);
                None
            }
        }
    })
    .flatten();
    if let Some(vcpu) = target {
        super::runtime::RUNTIME.notify(vcpu);
    }
}
