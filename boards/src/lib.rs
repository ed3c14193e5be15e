//! Board descriptions as data: per board, the console UART, GIC version hints,
//! memory layout and the default cpupool/domain configuration.
//!
//! Owns: constants that differ between boards. Must not touch: hardware
//! (no `unsafe`, no MMIO); the platform reads these tables.
#![no_std]
#![forbid(unsafe_code)]

/// The Rust target of the hypervisor on every ARM64 board: soft-float, so
/// no code of the hypervisor's touches the FP/SIMD registers and a guest's
/// stay in the CPU across its exits, saved and loaded only when the CPU
/// switches vCPUs (what Xen and KVM on arm64 do too). The guests it embeds
/// are built for the hard-float `aarch64-unknown-none`.
pub const ARM64_HV_TARGET: &str = "aarch64-unknown-none-softfloat";

/// The console UART a board has before the device tree is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyUart {
    /// An Arm PL011 at this MMIO address.
    Pl011(usize),
    /// A Broadcom BCM2835-family "mini UART" (the AUX UART1) whose `AUX_MU_IO`
    /// register is at this MMIO address (Raspberry Pi; `0xfe21_5040` on the Pi 4).
    MiniUart(usize),
    /// No early console: the first output comes after the firmware tables are read.
    None,
}

/// What differs between boards, as plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Board {
    /// The name used by `cargo xtask --board`.
    pub name: &'static str,
    /// The Rust target the hypervisor is built for.
    pub target: &'static str,
    /// Physical address the image is linked at. ARM64: RAM base + the Image
    /// header's text_offset (0x80000), where the boot loader puts it. x86-64:
    /// where the PVH loader puts the ELF's first segment.
    pub load_address: u64,
    /// Console before the device tree is parsed.
    pub early_uart: EarlyUart,
    /// Linked position-independent: the image applies its own relocations at
    /// entry and runs wherever the loader put it (UEFI chooses the address).
    pub relocatable: bool,
}

/// QEMU `-machine virt` (RAM at 1 GiB, PL011 at 0x0900_0000).
pub const QEMU_VIRT: Board = Board {
    name: "qemu-virt",
    target: ARM64_HV_TARGET,
    load_address: 0x4008_0000,
    early_uart: EarlyUart::Pl011(0x0900_0000),
    relocatable: false,
};

/// QEMU `-machine q35` (x86-64, PVH boot via `-kernel`, COM1 console). The
/// image sits at 2 MiB: above the real-mode area (the AP trampoline goes at
/// 0x8000) and the BIOS/option-ROM hole at 640 KiB-1 MiB.
pub const QEMU_X86: Board = Board {
    name: "qemu-x86",
    target: "x86_64-unknown-none",
    load_address: 0x20_0000,
    early_uart: EarlyUart::None,
    relocatable: false,
};

/// Raspberry Pi 4 Model B (BCM2711, 4x Cortex-A72, GIC-400), booted by the
/// VideoCore firmware from the SD card's FAT partition as `kernel8.img`.
///
/// RAM starts at 0 and the firmware loads an arm64 `Image` at RAM base +
/// text_offset (0x80000). The console is PL011 UART0: the device tree's
/// `serial@7e201000` (alias `serial0`), which `/soc/ranges` maps from the
/// VideoCore bus address 0x7e20_1000 to the ARM physical 0xfe20_1000 ("low
/// peripheral" mode, the firmware's default). The firmware routes it to GPIO
/// 14/15 (header pins 8/10) when `config.txt` says `dtoverlay=disable-bt`, and
/// sets its baud rate to 115200 when it says `enable_uart=1`. QEMU `raspi4b`
/// wires its first `-serial` to the same PL011.
pub const RPI4: Board = Board {
    name: "rpi4",
    target: ARM64_HV_TARGET,
    load_address: 0x8_0000,
    early_uart: EarlyUart::Pl011(0xfe20_1000),
    relocatable: false,
};

/// The Raspberry Pi 4 with the console on the mini UART (UART1, the device
/// tree's `serial@7e215040`, alias `serial1`, ARM physical 0xfe21_5040): the
/// firmware's default on GPIO 14/15 when Bluetooth keeps the PL011. Its baud
/// rate follows the VPU core clock, so its `config.txt` pins that clock.
pub const RPI4_MINI_UART: Board = Board {
    name: "rpi4-mini-uart",
    target: ARM64_HV_TARGET,
    load_address: 0x8_0000,
    early_uart: EarlyUart::MiniUart(0xfe21_5040),
    relocatable: false,
};

/// Ampere Altra servers (80 Neoverse N1 cores, GICv3, SBSA): UEFI firmware
/// loads the image as an EFI application (`hv.efi`) wherever it likes, and the
/// machine is described by ACPI (MADT, PPTT, SPCR, GTDT, FADT), not a device
/// tree. The console is the UART the SPCR names, so there is no early UART.
/// Also what `qemu-system-aarch64 -machine virt -bios QEMU_EFI.fd` runs.
pub const AMPERE: Board = Board {
    name: "ampere",
    target: ARM64_HV_TARGET,
    load_address: 0x8_0000,
    early_uart: EarlyUart::None,
    relocatable: true,
};

/// Every board the hypervisor knows.
pub const ALL: &[Board] = &[QEMU_VIRT, QEMU_X86, RPI4, RPI4_MINI_UART, AMPERE];

/// A board by its `--board` name.
pub fn by_name(name: &str) -> Option<&'static Board> {
    ALL.iter().find(|b| b.name == name)
}

/// Whether two target names are equal (`==` on `str` is not `const`).
const fn same(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// The arm64 image header says text_offset 0x80000 and boot loaders put the
// image at a 2 MiB-aligned base plus that offset: every aarch64 load address
// must agree. x86 images are page aligned (the PVH loader honours p_paddr).
const _: () = {
    let mut i = 0;
    while i < ALL.len() {
        if same(ALL[i].target, ARM64_HV_TARGET) {
            assert!(ALL[i].load_address % (2 << 20) == 0x80000);
        } else {
            assert!(ALL[i].load_address.is_multiple_of(4096));
        }
        i += 1;
    }
};
