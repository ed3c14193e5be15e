//! Board descriptions as data: per board, the console UART, GIC version hints,
//! memory layout and the default cpupool/domain configuration.
//!
//! Owns: constants that differ between boards. Must not touch: hardware
//! (no `unsafe`, no MMIO); the platform reads these tables.
#![no_std]
#![forbid(unsafe_code)]

/// The console UART a board has before the device tree is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EarlyUart {
    /// An Arm PL011 at this MMIO address.
    Pl011(usize),
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
    /// Physical address the image is linked at: RAM base + the Image header's
    /// text_offset (0x80000), where the boot loader puts it.
    pub load_address: u64,
    /// Console before the device tree is parsed.
    pub early_uart: EarlyUart,
}

/// QEMU `-machine virt` (RAM at 1 GiB, PL011 at 0x0900_0000).
pub const QEMU_VIRT: Board = Board {
    name: "qemu-virt",
    target: "aarch64-unknown-none",
    load_address: 0x4008_0000,
    early_uart: EarlyUart::Pl011(0x0900_0000),
};

/// Every board the hypervisor knows.
pub const ALL: &[Board] = &[QEMU_VIRT];

/// A board by its `--board` name.
pub fn by_name(name: &str) -> Option<&'static Board> {
    ALL.iter().find(|b| b.name == name)
}

// The image header says text_offset 0x80000 and boot loaders put the image at a
// 2 MiB-aligned base plus that offset: every load address must agree.
const _: () = {
    let mut i = 0;
    while i < ALL.len() {
        assert!(ALL[i].load_address % (2 << 20) == 0x80000);
        i += 1;
    }
};
