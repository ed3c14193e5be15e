//! What an AMD SVM guest sees, hardware-independent and host-tested: its
//! ACPI tables ([`acpi_tables`]) and fixed ACPI hardware ([`acpi_pm`]), the VMCB layout ([`vmcb`]), nested page
//! tables ([`npt`]), the guest's boot state ([`boot`]), the Linux x86 boot
//! protocol ([`linux_boot`]: a bzImage's layout and zero page), exit
//! decoding ([`exit`]) and the length of the instruction that exited
//! ([`insn`], read through the guest's page tables: [`guest_paging`]) and
//! of the MOV a guest used on an emulated MMIO page ([`mmio_insn`]), the
//! virtual local APIC ([`vlapic`]) and its NMIs ([`nmi`]), the emulated 16550 UART
//! ([`uart16550`]) wired to IRQ 4 of the emulated 8259A PIC pair
//! ([`pic8259`]), the 8254 PIT ([`pit8254`]), the I/O APIC ([`ioapic`]),
//! the CMOS clock ([`cmos_rtc`]), the multiboot loader ([`multiboot`]),
//! the CPUID/MSR policy ([`policy`]), a vCPU's power state under INIT,
//! STARTUP and HLT ([`power`]) and a domain's RAM, nested tables and ASID
//! taken and given back together ([`memory`]), when a CPU must load a
//! vCPU's x87/SSE registers ([`fpu`]) and the guest's emulated debug
//! registers ([`debugregs`]).
//! The x86 arch glue in the binary runs `VMRUN` and calls these.

pub mod acpi_pm;
pub mod acpi_tables;
pub mod boot;
pub mod cmos_rtc;
pub mod debugregs;
pub mod exit;
pub mod fpu;
pub mod guest_paging;
pub mod insn;
pub mod ioapic;
pub mod linux_boot;
pub mod memory;
pub mod mmio_insn;
pub mod multiboot;
pub mod nmi;
pub mod npt;
pub mod pic8259;
pub mod pit8254;
pub mod policy;
pub mod power;
pub mod stop;
pub mod uart16550;
pub mod vlapic;
pub mod vmcb;
