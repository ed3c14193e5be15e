//! The boards xtask can build for, and how each one's image is made and run.
//! A new board is one more entry in [`BOARDS`].

/// How the bootable image is made from the `hv` ELF.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageFormat {
    /// A flat binary starting with an arm64 Linux `Image` header
    /// (`llvm-objcopy -O binary`): QEMU's `-kernel`, U-Boot and the Pi
    /// firmware all load it and pass the DTB address in x0.
    Arm64Image,
    /// The ELF itself (x86 PVH/multiboot loaders read ELF).
    Elf,
    /// The same flat arm64 `Image`, which is also a PE/COFF UEFI application
    /// (boot.S): written as `hv.efi` (and `hv.bin`), with the PE header checked.
    EfiApplication,
}

/// The QEMU machine a board runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Machine {
    /// `qemu-system-aarch64 -machine virt` at EL2 with PSCI.
    AarchVirt,
    /// `qemu-system-x86_64 -machine q35` (ACPI tables, PVH `-kernel`, SVM under TCG).
    X86Q35,
    /// `qemu-system-aarch64 -machine virt` at EL2 booted by UEFI firmware
    /// (Debian's edk2, `qemu-efi-aarch64`) from a FAT drive holding the EFI
    /// image: ACPI tables (MADT, PPTT, SPCR, GTDT, FADT), no device tree for
    /// the hypervisor.
    VirtUefi,
    /// `qemu-system-aarch64 -machine raspi4b` with the real Pi 4 device tree:
    /// its boot stub starts the image at EL2 and parks the secondaries on the
    /// spin table, as the Pi firmware does.
    Raspi4b,
}

/// One board xtask knows.
#[derive(Debug)]
pub struct Board {
    /// Name used on the command line and in `HV_BOARD`.
    pub name: &'static str,
    /// Rust target triple of the hypervisor for this board.
    pub target: &'static str,
    /// What `xtask build` produces.
    pub image: ImageFormat,
    /// The QEMU program and machine that run it, if QEMU can.
    pub qemu: Option<(&'static str, Machine)>,
    /// `None` if xtask supports the board; otherwise why not yet.
    pub unsupported: Option<&'static str>,
}

/// Every board, supported or planned.
pub const BOARDS: &[Board] = &[
    Board {
        name: "qemu-virt",
        target: boards::ARM64_HV_TARGET,
        image: ImageFormat::Arm64Image,
        qemu: Some(("qemu-system-aarch64", Machine::AarchVirt)),
        unsupported: None,
    },
    // `build` also writes the SD card's boot folder for the Pi boards (see rpi.rs).
    Board {
        name: "rpi4",
        target: boards::ARM64_HV_TARGET,
        image: ImageFormat::Arm64Image,
        qemu: Some(("qemu-system-aarch64", Machine::Raspi4b)),
        unsupported: None,
    },
    // The same board with the console on the mini UART (QEMU's second serial port).
    Board {
        name: "rpi4-mini-uart",
        target: boards::ARM64_HV_TARGET,
        image: ImageFormat::Arm64Image,
        qemu: Some(("qemu-system-aarch64", Machine::Raspi4b)),
        unsupported: None,
    },
    Board {
        name: "ampere",
        target: boards::ARM64_HV_TARGET,
        image: ImageFormat::EfiApplication,
        qemu: Some(("qemu-system-aarch64", Machine::VirtUefi)),
        unsupported: None,
    },
    Board {
        name: "qemu-x86",
        target: "x86_64-unknown-none",
        image: ImageFormat::Elf,
        qemu: Some(("qemu-system-x86_64", Machine::X86Q35)),
        unsupported: None,
    },
];

/// Why a board name cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub enum BoardError {
    /// No board has this name.
    Unknown(String),
    /// The board is planned but not supported yet.
    Unsupported(&'static str, &'static str),
}

impl std::fmt::Display for BoardError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Unknown(name) => {
                let known: Vec<_> = BOARDS.iter().map(|b| b.name).collect();
                write!(f, "unknown board {name:?} (boards: {})", known.join(", "))
            }
            Self::Unsupported(name, why) => write!(f, "board {name} is not supported yet: {why}"),
        }
    }
}

/// The supported board called `name`.
pub fn find(name: &str) -> Result<&'static Board, BoardError> {
    let board = BOARDS
        .iter()
        .find(|b| b.name == name)
        .ok_or_else(|| BoardError::Unknown(name.to_string()))?;
    match board.unsupported {
        Some(why) => Err(BoardError::Unsupported(board.name, why)),
        None => Ok(board),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_found() {
        for (i, board) in BOARDS.iter().enumerate() {
            assert!(BOARDS[..i].iter().all(|b| b.name != board.name));
        }
        assert_eq!(
            find("qemu-virt").unwrap().target,
            "aarch64-unknown-none-softfloat"
        );
        let x86 = find("qemu-x86").unwrap();
        assert_eq!(x86.target, "x86_64-unknown-none");
        assert_eq!(x86.image, ImageFormat::Elf);
        assert_eq!(x86.qemu, Some(("qemu-system-x86_64", Machine::X86Q35)));
        let pi = find("rpi4").unwrap();
        assert_eq!(pi.qemu, Some(("qemu-system-aarch64", Machine::Raspi4b)));
        assert_eq!(pi.image, ImageFormat::Arm64Image);
        let ampere = find("ampere").unwrap();
        assert_eq!(ampere.image, ImageFormat::EfiApplication);
        assert_eq!(
            ampere.qemu,
            Some(("qemu-system-aarch64", Machine::VirtUefi))
        );
        let unknown = find("pi5").unwrap_err();
        assert!(unknown.to_string().contains("qemu-virt"), "{unknown}");
    }
}
