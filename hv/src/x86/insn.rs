//! The length of the instruction an intercept exited on, for a CPU that
//! does not save the next RIP (no NRIPS, CPUID 0x8000000A EDX bit 3; QEMU's
//! TCG never writes the VMCB's next RIP): the glue fetches the bytes at the
//! guest's RIP ([`super::guest_paging`]) and this decodes them. Only the
//! intercepted instructions are recognised, after any legacy prefixes and,
//! in 64-bit mode, REX prefixes (Intel SDM vol. 2, 2.1-2.2; AMD APM vol. 3,
//! 1.2): anything else means the bytes are not the instruction that exited,
//! and the glue stops the domain rather than guess.

use core::fmt;

/// The longest x86 instruction (a longer one raises #GP).
pub const MAX_INSTRUCTION_BYTES: usize = 15;

/// An intercepted instruction whose exit must skip it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intercepted {
    /// HLT (F4).
    Hlt,
    /// CPUID (0F A2).
    Cpuid,
    /// RDMSR (0F 32).
    Rdmsr,
    /// WRMSR (0F 30).
    Wrmsr,
    /// VMMCALL (0F 01 D9).
    Vmmcall,
    /// XSETBV (0F 01 D1).
    Xsetbv,
    /// MOV from a debug register (0F 21 /r), decoded by [`mov_dr`].
    MovFromDr,
    /// MOV to a debug register (0F 23 /r), decoded by [`mov_dr`].
    MovToDr,
    /// MOV to a control register (0F 22 /r), decoded by [`mov_to_cr`].
    MovToCr,
}

impl Intercepted {
    /// Its opcode bytes.
    pub fn opcode(self) -> &'static [u8] {
        match self {
            Self::Hlt => &[0xf4],
            Self::Cpuid => &[0x0f, 0xa2],
            Self::Rdmsr => &[0x0f, 0x32],
            Self::Wrmsr => &[0x0f, 0x30],
            Self::Vmmcall => &[0x0f, 0x01, 0xd9],
            Self::Xsetbv => &[0x0f, 0x01, 0xd1],
            Self::MovFromDr => &[0x0f, 0x21],
            Self::MovToDr => &[0x0f, 0x23],
            Self::MovToCr => &[0x0f, 0x22],
        }
    }

    /// Its mnemonic, for messages.
    pub fn name(self) -> &'static str {
        match self {
            Self::Hlt => "HLT",
            Self::Cpuid => "CPUID",
            Self::Rdmsr => "RDMSR",
            Self::Wrmsr => "WRMSR",
            Self::Vmmcall => "VMMCALL",
            Self::Xsetbv => "XSETBV",
            Self::MovFromDr => "MOV from DR",
            Self::MovToDr => "MOV to DR",
            Self::MovToCr => "MOV to CR",
        }
    }
}

/// Whether REX prefixes exist: in 64-bit mode 0x40-0x4F are REX, elsewhere
/// they are INC/DEC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodeSize {
    /// 64-bit mode (EFER.LMA and CS.L).
    Bits64,
    /// 16- or 32-bit code (real, protected or compatibility mode).
    Legacy,
}

/// Why the bytes at RIP give no length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The readable bytes end (`have` of them) before the instruction does:
    /// the rest lies in memory that could not be read.
    Truncated {
        /// Bytes that could be read.
        have: usize,
    },
    /// After the prefixes the bytes are not the instruction that exited.
    Mismatch {
        /// The instruction that exited.
        expected: Intercepted,
        /// The prefixes skipped before the opcode was compared.
        prefixes: usize,
    },
    /// Prefixes alone fill the 15-byte limit.
    TooLong,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { have } => write!(
                f,
                "only {have} bytes could be read there and they end before the instruction does"
            ),
            Self::Mismatch { expected, prefixes } => write!(
                f,
                "after {prefixes} prefix bytes they are not the {} ({}) that exited",
                expected.name(),
                Hex(expected.opcode())
            ),
            Self::TooLong => write!(
                f,
                "they are prefixes up to the {MAX_INSTRUCTION_BYTES}-byte limit"
            ),
        }
    }
}

/// Bytes as `0f a2`.
#[derive(Clone, Copy, Debug)]
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            let separator = if i == 0 { "" } else { " " };
            write!(f, "{separator}{byte:02x}")?;
        }
        Ok(())
    }
}

/// A legacy prefix: operand/address size, segment overrides, LOCK, REP.
fn is_legacy_prefix(byte: u8) -> bool {
    matches!(
        byte,
        0x66 | 0x67 | 0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0xf0 | 0xf2 | 0xf3
    )
}

/// The prefixes at the start of `window`: legacy ones, and REX in 64-bit
/// code.
fn prefix_count(window: &[u8], size: CodeSize) -> usize {
    window
        .iter()
        .take_while(|&&b| is_legacy_prefix(b) || (size == CodeSize::Bits64 && b & 0xf0 == 0x40))
        .count()
}

/// The length of `expected` at the start of `bytes` (what could be read at
/// RIP, at most [`MAX_INSTRUCTION_BYTES`] counted): its prefixes plus its
/// opcode. A REX prefix not directly before the opcode is ignored by the
/// CPU but still part of the instruction, so it is counted too.
pub fn length(bytes: &[u8], expected: Intercepted, size: CodeSize) -> Result<u8, DecodeError> {
    let window = &bytes[..bytes.len().min(MAX_INSTRUCTION_BYTES)];
    let prefixes = prefix_count(window, size);
    if prefixes == MAX_INSTRUCTION_BYTES {
        return Err(DecodeError::TooLong);
    }
    let opcode = expected.opcode();
    let end = prefixes + opcode.len();
    if end > MAX_INSTRUCTION_BYTES {
        return Err(DecodeError::TooLong);
    }
    let rest = &window[prefixes..];
    // Compare what is there first: a wrong byte is a mismatch even when the
    // instruction would also run past the readable bytes.
    if rest.iter().zip(opcode).any(|(a, b)| a != b) {
        return Err(DecodeError::Mismatch { expected, prefixes });
    }
    if rest.len() < opcode.len() {
        return Err(DecodeError::Truncated { have: window.len() });
    }
    Ok(end as u8)
}

/// The operands of a MOV to or from a debug register (SDM vol. 2: MOV DR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovDr {
    /// The debug register (0-7; REX.R selects 8-15, which raise #UD).
    pub dr: u8,
    /// The general register (0 = RAX … 15 = R15, as ModRM.rm with REX.B).
    pub gpr: u8,
    /// The instruction's length.
    pub len: u8,
}

/// Decodes the MOV DR at the start of `bytes` that exited (`write`: to the
/// debug register). The ModRM byte names the debug register (reg) and the
/// general register (rm); its mod bits are ignored, as by the CPU. Only the
/// REX prefix directly before the opcode counts for REX.R and REX.B.
pub fn mov_dr(bytes: &[u8], write: bool, size: CodeSize) -> Result<MovDr, DecodeError> {
    let expected = if write {
        Intercepted::MovToDr
    } else {
        Intercepted::MovFromDr
    };
    let (dr, gpr, len) = mov_operands(bytes, expected, size)?;
    Ok(MovDr { dr, gpr, len })
}

/// The operands of a MOV to a control register (SDM vol. 2: MOV CR).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovToCr {
    /// The control register (ModRM.reg with REX.R; a LOCK prefix, AMD's
    /// alternative encoding of CR8, is not decoded: the exit names the
    /// register, and a mismatch stops the domain).
    pub cr: u8,
    /// The general register it loads from (as ModRM.rm with REX.B).
    pub gpr: u8,
    /// The instruction's length.
    pub len: u8,
}

/// Decodes the MOV to a control register at the start of `bytes`, as
/// [`mov_dr`] does a debug register's.
pub fn mov_to_cr(bytes: &[u8], size: CodeSize) -> Result<MovToCr, DecodeError> {
    let (cr, gpr, len) = mov_operands(bytes, Intercepted::MovToCr, size)?;
    Ok(MovToCr { cr, gpr, len })
}

/// The special register (ModRM.reg), general register (ModRM.rm) and length
/// of the MOV to or from a control or debug register `expected` at the start
/// of `bytes`.
fn mov_operands(
    bytes: &[u8],
    expected: Intercepted,
    size: CodeSize,
) -> Result<(u8, u8, u8), DecodeError> {
    let opcode_end = usize::from(length(bytes, expected, size)?);
    let window = &bytes[..bytes.len().min(MAX_INSTRUCTION_BYTES)];
    let Some(&modrm) = window.get(opcode_end) else {
        return Err(if opcode_end + 1 > MAX_INSTRUCTION_BYTES {
            DecodeError::TooLong
        } else {
            DecodeError::Truncated { have: window.len() }
        });
    };
    let prefixes = opcode_end - expected.opcode().len();
    let rex = match prefixes.checked_sub(1).and_then(|i| window.get(i)) {
        Some(&b) if size == CodeSize::Bits64 && b & 0xf0 == 0x40 => b,
        _ => 0,
    };
    const REX_R: u8 = 0b0100;
    const REX_B: u8 = 0b0001;
    let special = ((modrm >> 3) & 7) | if rex & REX_R != 0 { 8 } else { 0 };
    let gpr = (modrm & 7) | if rex & REX_B != 0 { 8 } else { 0 };
    Ok((special, gpr, (opcode_end + 1) as u8))
}

#[cfg(test)]
mod tests {
    use super::*;
    use CodeSize::{Bits64, Legacy};

    #[test]
    fn mov_to_cr_names_both_registers() {
        // mov cr4, rax (0F 22 E0): kvm-unit-tests' idt_test.
        assert_eq!(
            mov_to_cr(&[0x0f, 0x22, 0xe0, 0x90], Bits64),
            Ok(MovToCr {
                cr: 4,
                gpr: 0,
                len: 3
            })
        );
        // mov cr4, r12 (41 0F 22 E4).
        assert_eq!(
            mov_to_cr(&[0x41, 0x0f, 0x22, 0xe4], Bits64),
            Ok(MovToCr {
                cr: 4,
                gpr: 12,
                len: 4
            })
        );
        // A MOV from CR4 or a MOV to DR at RIP is not it.
        assert!(mov_to_cr(&[0x0f, 0x20, 0xe0], Bits64).is_err());
        assert!(mov_to_cr(&[0x0f, 0x23, 0xe0], Bits64).is_err());
    }

    #[test]
    fn mov_dr_names_both_registers() {
        // mov rax, dr7 (0F 21 F8): reg 7, rm 0.
        assert_eq!(
            mov_dr(&[0x0f, 0x21, 0xf8, 0x90], false, Bits64),
            Ok(MovDr {
                dr: 7,
                gpr: 0,
                len: 3
            })
        );
        // mov dr0, r9 (41 0F 23 C1): REX.B extends rm.
        assert_eq!(
            mov_dr(&[0x41, 0x0f, 0x23, 0xc1], true, Bits64),
            Ok(MovDr {
                dr: 0,
                gpr: 9,
                len: 4
            })
        );
        // REX.R names DR8+ (the caller raises #UD).
        assert_eq!(
            mov_dr(&[0x44, 0x0f, 0x21, 0xc0], false, Bits64),
            Ok(MovDr {
                dr: 8,
                gpr: 0,
                len: 4
            })
        );
        // 32-bit code: 0x41 is INC ECX, not a prefix.
        assert!(mov_dr(&[0x41, 0x0f, 0x23, 0xc1], true, Legacy).is_err());
        // A read exit with a write at RIP, or no ModRM byte, is refused.
        assert!(matches!(
            mov_dr(&[0x0f, 0x23, 0xc1], false, Bits64),
            Err(DecodeError::Mismatch { .. })
        ));
        assert_eq!(
            mov_dr(&[0x0f, 0x21], false, Bits64),
            Err(DecodeError::Truncated { have: 2 })
        );
        let mut prefixed = [0x66u8; 15];
        prefixed[12] = 0x0f;
        prefixed[13] = 0x21;
        prefixed[14] = 0xc0;
        assert_eq!(mov_dr(&prefixed, false, Bits64).map(|m| m.len), Ok(15));
        prefixed[11..14].copy_from_slice(&[0x66, 0x0f, 0x21]);
        assert_eq!(
            mov_dr(&prefixed[..14], false, Bits64),
            Err(DecodeError::Truncated { have: 14 })
        );
    }

    #[test]
    fn bare_instructions_have_their_opcode_length() {
        let cases: [(&[u8], Intercepted, u8); 6] = [
            (&[0xf4, 0xeb, 0xfd], Intercepted::Hlt, 1),
            (&[0x0f, 0xa2, 0x90], Intercepted::Cpuid, 2),
            (&[0x0f, 0x32], Intercepted::Rdmsr, 2),
            (&[0x0f, 0x30, 0xc3], Intercepted::Wrmsr, 2),
            (&[0x0f, 0x01, 0xd9, 0xc3], Intercepted::Vmmcall, 3),
            (&[0x0f, 0x01, 0xd1, 0xc3], Intercepted::Xsetbv, 3),
        ];
        for (bytes, expected, len) in cases {
            assert_eq!(length(bytes, expected, Bits64), Ok(len), "{expected:?}");
            assert_eq!(length(bytes, expected, Legacy), Ok(len), "{expected:?}");
        }
    }

    #[test]
    fn legacy_and_rex_prefixes_count() {
        // Operand size, a segment override and REX.W before CPUID.
        assert_eq!(
            length(&[0x66, 0x2e, 0x48, 0x0f, 0xa2], Intercepted::Cpuid, Bits64),
            Ok(5)
        );
        // REX then a legacy prefix: the REX is ignored but still counted.
        assert_eq!(
            length(&[0x41, 0xf3, 0x0f, 0x30], Intercepted::Wrmsr, Bits64),
            Ok(4)
        );
        assert_eq!(length(&[0xf3, 0xf4], Intercepted::Hlt, Legacy), Ok(2));
        // The longest legal one: 14 prefixes and HLT.
        let mut long = [0x66u8; 15];
        long[14] = 0xf4;
        assert_eq!(length(&long, Intercepted::Hlt, Bits64), Ok(15));
    }

    #[test]
    fn rex_is_only_a_prefix_in_64_bit_mode() {
        // 32-bit code: 0x48 is DEC EAX, an instruction of its own.
        assert_eq!(
            length(&[0x48, 0x0f, 0xa2], Intercepted::Cpuid, Legacy),
            Err(DecodeError::Mismatch {
                expected: Intercepted::Cpuid,
                prefixes: 0
            })
        );
        assert_eq!(
            length(&[0x48, 0x0f, 0xa2], Intercepted::Cpuid, Bits64),
            Ok(3)
        );
    }

    #[test]
    fn other_bytes_are_a_mismatch_not_a_guess() {
        // A VMMCALL exit but VMCALL (Intel's, 0F 01 C1) at RIP.
        assert_eq!(
            length(&[0x0f, 0x01, 0xc1], Intercepted::Vmmcall, Bits64),
            Err(DecodeError::Mismatch {
                expected: Intercepted::Vmmcall,
                prefixes: 0
            })
        );
        assert_eq!(
            length(&[0x66, 0x90], Intercepted::Hlt, Bits64),
            Err(DecodeError::Mismatch {
                expected: Intercepted::Hlt,
                prefixes: 1
            })
        );
        // A wrong first byte is a mismatch even with too few bytes.
        assert!(matches!(
            length(&[0x0f, 0x05], Intercepted::Vmmcall, Bits64),
            Err(DecodeError::Mismatch { .. })
        ));
        let message = length(&[0x90], Intercepted::Cpuid, Bits64)
            .unwrap_err()
            .to_string();
        assert_eq!(
            message,
            "after 0 prefix bytes they are not the CPUID (0f a2) that exited"
        );
    }

    #[test]
    fn too_few_bytes_or_only_prefixes_are_refused() {
        assert_eq!(
            length(&[0x66, 0x0f, 0x01], Intercepted::Vmmcall, Bits64),
            Err(DecodeError::Truncated { have: 3 })
        );
        assert_eq!(
            length(&[], Intercepted::Hlt, Bits64),
            Err(DecodeError::Truncated { have: 0 })
        );
        assert_eq!(
            length(&[0x66; 20], Intercepted::Hlt, Bits64),
            Err(DecodeError::TooLong)
        );
        // 13 prefixes leave no room for a three-byte opcode.
        let mut bytes = [0xf3u8; 16];
        bytes[13..16].copy_from_slice(&[0x0f, 0x01, 0xd9]);
        assert_eq!(
            length(&bytes, Intercepted::Vmmcall, Bits64),
            Err(DecodeError::TooLong)
        );
    }
}
