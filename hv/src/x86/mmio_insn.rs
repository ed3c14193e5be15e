//! The MOV a guest used on an emulated device's MMIO page (the I/O APIC, the
//! xAPIC), decoded from the bytes at its RIP: a nested page fault says which
//! address and whether it was a write, but not which register the value
//! comes from or goes to, nor how long the instruction is (QEMU's TCG has no
//! decode assists; KVM's `x86_emulate.c` and Xen's `x86_emulate` do the same
//! with a full emulator).
//!
//! Only the MOV forms MMIO accessors compile to are taken: `mov r/m, r` and
//! `mov r, r/m` (88, 89, 8A, 8B), `mov r/m, imm` (C6 /0, C7 /0) and
//! `movzx` (0F B6, 0F B7), with legacy and REX prefixes, ModRM, SIB and
//! displacement (Intel SDM vol. 2, 2.1-2.2; AMD APM vol. 3, 1.2-1.4). The
//! address itself is the fault's, so the memory operand is only skipped.
//! Anything else is refused with what it is, and the glue stops the domain
//! rather than guess.

use core::fmt;

use super::insn::{CodeSize, Hex, MAX_INSTRUCTION_BYTES};

/// A general register operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Register {
    /// 0 = RAX … 15 = R15 (the ModRM encoding with REX.R).
    pub index: u8,
    /// An 8-bit operand without REX naming AH, CH, DH or BH (bits 15:8 of
    /// register `index`).
    pub high_byte: bool,
}

/// What the instruction does with the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioOperation {
    /// Reads `width` bytes into `into`, zero-extended to the register's
    /// operand size `register_width` (a 32-bit write to a 64-bit register
    /// clears its upper half, an 8- or 16-bit one leaves the rest).
    Load {
        /// The destination register.
        into: Register,
        /// The destination's operand size, in bytes.
        register_width: u8,
    },
    /// Writes the low `width` bytes of a register.
    Store {
        /// The source register.
        from: Register,
    },
    /// Writes an immediate (sign-extended to `width` for C7 with REX.W).
    StoreImmediate(u64),
}

/// A decoded MMIO MOV.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MmioInstruction {
    /// What it does.
    pub operation: MmioOperation,
    /// The bytes it moves in memory (1, 2, 4 or 8).
    pub width: u8,
    /// Its length, for the next RIP.
    pub len: u8,
}

/// Why the bytes at RIP are no MMIO MOV this decoder takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioDecodeError {
    /// The readable bytes (`have`) end before the instruction does.
    Truncated {
        /// Bytes that could be read.
        have: usize,
    },
    /// Longer than 15 bytes.
    TooLong,
    /// An opcode other than the MOV forms above.
    Unsupported {
        /// The opcode byte(s) after the prefixes.
        opcode: [u8; 2],
        /// How many of them are meaningful.
        opcode_len: u8,
    },
    /// The ModRM byte names a register, not memory: this cannot have
    /// faulted on MMIO.
    RegisterOperand,
    /// 16-bit addressing (real mode or an address-size prefix in 32-bit
    /// code), which the decoder does not take.
    Addressing16,
}

impl fmt::Display for MmioDecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { have } => write!(
                f,
                "only {have} bytes could be read and the instruction runs past them"
            ),
            Self::TooLong => write!(f, "longer than {MAX_INSTRUCTION_BYTES} bytes"),
            Self::Unsupported { opcode, opcode_len } => write!(
                f,
                "opcode {} is not a MOV the MMIO emulation takes",
                Hex(&opcode[..usize::from(*opcode_len)])
            ),
            Self::RegisterOperand => write!(f, "its ModRM names a register, not memory"),
            Self::Addressing16 => write!(f, "16-bit addressing is not emulated"),
        }
    }
}

/// Operand-size prefix.
const OPERAND_SIZE: u8 = 0x66;
/// Address-size prefix.
const ADDRESS_SIZE: u8 = 0x67;
/// REX.W: 64-bit operand.
const REX_W: u8 = 0b1000;
/// REX.R: extends ModRM.reg.
const REX_R: u8 = 0b0100;

/// Reads bytes of the instruction one after another, within the limit.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn next(&mut self) -> Result<u8, MmioDecodeError> {
        if self.at >= MAX_INSTRUCTION_BYTES {
            return Err(MmioDecodeError::TooLong);
        }
        let byte = *self.bytes.get(self.at).ok_or(MmioDecodeError::Truncated {
            have: self.bytes.len(),
        })?;
        self.at += 1;
        Ok(byte)
    }

    fn skip(&mut self, count: usize) -> Result<(), MmioDecodeError> {
        for _ in 0..count {
            self.next()?;
        }
        Ok(())
    }

    fn immediate(&mut self, bytes: usize) -> Result<u64, MmioDecodeError> {
        let mut value = 0u64;
        for i in 0..bytes {
            value |= u64::from(self.next()?) << (8 * i);
        }
        Ok(value)
    }
}

/// Decodes the MMIO MOV at the start of `bytes` (what could be read at RIP).
pub fn decode(bytes: &[u8], size: CodeSize) -> Result<MmioInstruction, MmioDecodeError> {
    let mut cursor = Cursor { bytes, at: 0 };
    let mut operand_16 = false;
    let mut address_override = false;
    let mut rex = 0u8;
    let mut opcode = loop {
        let byte = cursor.next()?;
        match byte {
            OPERAND_SIZE => operand_16 = true,
            ADDRESS_SIZE => address_override = true,
            // Segment overrides and LOCK/REP change nothing here.
            0x26 | 0x2e | 0x36 | 0x3e | 0x64 | 0x65 | 0xf0 | 0xf2 | 0xf3 => {}
            // A REX prefix counts only directly before the opcode.
            0x40..=0x4f if size == CodeSize::Bits64 => {
                rex = byte;
                continue;
            }
            _ => break byte,
        }
        rex = 0;
    };
    let mut two_byte = false;
    if opcode == 0x0f {
        two_byte = true;
        opcode = cursor.next()?;
    }
    let full = |width: u8| -> u8 {
        if rex & REX_W != 0 {
            8
        } else if operand_16 {
            2
        } else {
            width
        }
    };
    if !two_byte && (0xa0..=0xa3).contains(&opcode) {
        return moffs(&mut cursor, opcode, full, size, address_override);
    }
    let (width, kind) = match (two_byte, opcode) {
        (false, 0x88) => (1, Kind::Store),
        (false, 0x89) => (full(4), Kind::Store),
        (false, 0x8a) => (1, Kind::Load(1)),
        (false, 0x8b) => (full(4), Kind::Load(full(4))),
        (false, 0xc6) => (1, Kind::Immediate),
        (false, 0xc7) => (full(4), Kind::Immediate),
        (true, 0xb6) => (1, Kind::Load(full(4))),
        (true, 0xb7) => (2, Kind::Load(full(4))),
        _ => {
            return Err(MmioDecodeError::Unsupported {
                opcode: if two_byte {
                    [0x0f, opcode]
                } else {
                    [opcode, 0]
                },
                opcode_len: if two_byte { 2 } else { 1 },
            });
        }
    };
    let modrm = cursor.next()?;
    let mode = modrm >> 6;
    let reg = (modrm >> 3) & 7;
    let rm = modrm & 7;
    if mode == 0b11 {
        return Err(MmioDecodeError::RegisterOperand);
    }
    // C6/C7 are group 11: only /0 is MOV.
    if kind == Kind::Immediate && reg != 0 {
        return Err(MmioDecodeError::Unsupported {
            opcode: [opcode, modrm],
            opcode_len: 2,
        });
    }
    let addressing_16 = match size {
        CodeSize::Bits64 => false,
        // Legacy code here means 32-bit protected mode; the override
        // switches it to 16-bit addressing.
        CodeSize::Legacy => address_override,
    };
    if addressing_16 {
        return Err(MmioDecodeError::Addressing16);
    }
    // SIB after rm = 100; its base 101 with mod 00 means disp32, no base.
    let mut displacement = match mode {
        0b01 => 1,
        0b10 => 4,
        _ if rm == 0b101 => 4,
        _ => 0,
    };
    if rm == 0b100 {
        let sib = cursor.next()?;
        if mode == 0b00 && sib & 7 == 0b101 {
            displacement = 4;
        }
    }
    cursor.skip(displacement)?;
    let register = Register {
        index: reg | if rex & REX_R != 0 { 8 } else { 0 },
        high_byte: width == 1 && rex == 0 && (4..8).contains(&reg),
    };
    let operation = match kind {
        Kind::Store => MmioOperation::Store { from: register },
        Kind::Load(register_width) => MmioOperation::Load {
            into: Register {
                high_byte: register_width == 1 && register.high_byte,
                ..register
            },
            register_width,
        },
        Kind::Immediate => {
            let bytes = usize::from(width.min(4));
            let raw = cursor.immediate(bytes)?;
            // A 64-bit MOV takes a sign-extended imm32.
            let value = if width == 8 {
                raw as u32 as i32 as i64 as u64
            } else {
                raw
            };
            MmioOperation::StoreImmediate(value)
        }
    };
    Ok(MmioInstruction {
        operation,
        width,
        len: cursor.at as u8,
    })
}

/// A0-A3: MOV between AL/AX/EAX/RAX and a memory offset coded in the
/// instruction (8 bytes in 64-bit code, 4 in 32-bit; an address-size
/// prefix halves it), no ModRM. `full` gives the operand size of A1/A3.
fn moffs(
    cursor: &mut Cursor<'_>,
    opcode: u8,
    full: impl Fn(u8) -> u8,
    size: CodeSize,
    address_override: bool,
) -> Result<MmioInstruction, MmioDecodeError> {
    let offset_bytes = match (size, address_override) {
        (CodeSize::Bits64, false) => 8,
        (CodeSize::Bits64, true) => 4,
        (CodeSize::Legacy, false) => 4,
        (CodeSize::Legacy, true) => return Err(MmioDecodeError::Addressing16),
    };
    cursor.skip(offset_bytes)?;
    let width = if opcode & 1 == 0 { 1 } else { full(4) };
    let accumulator = Register {
        index: 0,
        high_byte: false,
    };
    let operation = if opcode < 0xa2 {
        MmioOperation::Load {
            into: accumulator,
            register_width: width,
        }
    } else {
        MmioOperation::Store { from: accumulator }
    };
    Ok(MmioInstruction {
        operation,
        width,
        len: cursor.at as u8,
    })
}

/// The instruction's kind before its operands are read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Store,
    /// A load into a register of this many bytes.
    Load(u8),
    Immediate,
}

/// The value a store writes: the immediate, or the low `width` bytes of its
/// source register (`value` is that register's 64 bits).
pub fn store_value(instruction: &MmioInstruction, register_value: u64) -> u64 {
    let raw = match instruction.operation {
        MmioOperation::StoreImmediate(value) => value,
        MmioOperation::Store { from } if from.high_byte => register_value >> 8,
        _ => register_value,
    };
    raw & width_mask(instruction.width)
}

/// A register's new 64 bits after a load of `loaded` into it (`old`: its
/// bits before), as the CPU writes them: a 32-bit destination clears bits
/// 63:32, an 8- or 16-bit one keeps the bits it does not name.
pub fn load_result(into: Register, register_width: u8, old: u64, loaded: u64) -> u64 {
    match (register_width, into.high_byte) {
        (1, true) => (old & !0xff00) | ((loaded & 0xff) << 8),
        (1, false) => (old & !0xff) | (loaded & 0xff),
        (2, _) => (old & !0xffff) | (loaded & 0xffff),
        (4, _) => loaded & 0xffff_ffff,
        _ => loaded,
    }
}

/// The low `width` bytes.
fn width_mask(width: u8) -> u64 {
    match width {
        8 => u64::MAX,
        w => (1u64 << (8 * u32::from(w))) - 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CodeSize::{Bits64, Legacy};

    fn reg(index: u8) -> Register {
        Register {
            index,
            high_byte: false,
        }
    }

    #[test]
    fn linux_mmio_accessors_decode() {
        // readl: mov (%rax),%eax = 8b 00.
        assert_eq!(
            decode(&[0x8b, 0x00, 0x90], Bits64),
            Ok(MmioInstruction {
                operation: MmioOperation::Load {
                    into: reg(0),
                    register_width: 4
                },
                width: 4,
                len: 2
            })
        );
        // writel: mov %edx,0x10(%rax) = 89 50 10.
        assert_eq!(
            decode(&[0x89, 0x50, 0x10], Bits64),
            Ok(MmioInstruction {
                operation: MmioOperation::Store { from: reg(2) },
                width: 4,
                len: 3
            })
        );
        // native_apic_mem_write: mov %edi,-0xa00300(%rip)-style with a
        // 32-bit displacement: 89 3d xx xx xx xx (RIP-relative).
        assert_eq!(
            decode(&[0x89, 0x3d, 0x00, 0xfd, 0x5f, 0xff], Bits64).map(|i| i.len),
            Ok(6)
        );
        // mov %r9d,(%rcx,%rdx,1) = 44 89 0c 11: REX.R, SIB.
        assert_eq!(
            decode(&[0x44, 0x89, 0x0c, 0x11], Bits64),
            Ok(MmioInstruction {
                operation: MmioOperation::Store { from: reg(9) },
                width: 4,
                len: 4
            })
        );
        // mov 0xfee00020,%eax with SIB and no base: 8b 04 25 20 00 e0 fe.
        assert_eq!(
            decode(&[0x8b, 0x04, 0x25, 0x20, 0x00, 0xe0, 0xfe], Bits64).map(|i| i.len),
            Ok(7)
        );
    }

    #[test]
    fn widths_follow_prefixes_and_opcodes() {
        // 66 89 08: a 16-bit store.
        assert_eq!(decode(&[0x66, 0x89, 0x08], Bits64).unwrap().width, 2);
        // 48 8b 00: a 64-bit load.
        let wide = decode(&[0x48, 0x8b, 0x00], Bits64).unwrap();
        assert_eq!(wide.width, 8);
        // 88 20: mov %ah,(%rax); with a REX prefix the same reg is %spl.
        assert_eq!(
            decode(&[0x88, 0x20], Bits64).unwrap().operation,
            MmioOperation::Store {
                from: Register {
                    index: 4,
                    high_byte: true
                }
            }
        );
        assert_eq!(
            decode(&[0x40, 0x88, 0x20], Bits64).unwrap().operation,
            MmioOperation::Store { from: reg(4) }
        );
        // movzbl (%rax),%ecx = 0f b6 08; movzwl = 0f b7.
        assert_eq!(
            decode(&[0x0f, 0xb6, 0x08], Bits64),
            Ok(MmioInstruction {
                operation: MmioOperation::Load {
                    into: reg(1),
                    register_width: 4
                },
                width: 1,
                len: 3
            })
        );
        assert_eq!(decode(&[0x0f, 0xb7, 0x08], Bits64).unwrap().width, 2);
    }

    #[test]
    fn immediates_are_read_and_sign_extended() {
        // movl $0x12345678,(%rax) = c7 00 78 56 34 12.
        assert_eq!(
            decode(&[0xc7, 0x00, 0x78, 0x56, 0x34, 0x12], Bits64),
            Ok(MmioInstruction {
                operation: MmioOperation::StoreImmediate(0x1234_5678),
                width: 4,
                len: 6
            })
        );
        // movq $-1,(%rax) = 48 c7 00 ff ff ff ff.
        let wide = decode(&[0x48, 0xc7, 0x00, 0xff, 0xff, 0xff, 0xff], Bits64).unwrap();
        assert_eq!(wide.operation, MmioOperation::StoreImmediate(u64::MAX));
        // movb $0x5,0x8(%rax) = c6 40 08 05.
        assert_eq!(
            decode(&[0xc6, 0x40, 0x08, 0x05], Bits64),
            Ok(MmioInstruction {
                operation: MmioOperation::StoreImmediate(5),
                width: 1,
                len: 4
            })
        );
        // movw $0x1234,(%rax) = 66 c7 00 34 12.
        assert_eq!(
            decode(&[0x66, 0xc7, 0x00, 0x34, 0x12], Bits64).map(|i| (i.len, i.operation)),
            Ok((5, MmioOperation::StoreImmediate(0x1234)))
        );
    }

    #[test]
    fn anything_else_is_refused_with_what_it_is() {
        // add %eax,(%rbx): not a MOV.
        assert_eq!(
            decode(&[0x01, 0x03], Bits64),
            Err(MmioDecodeError::Unsupported {
                opcode: [0x01, 0],
                opcode_len: 1
            })
        );
        // c7 /1 is not MOV.
        assert!(matches!(
            decode(&[0xc7, 0x08, 0, 0, 0, 0], Bits64),
            Err(MmioDecodeError::Unsupported { .. })
        ));
        // mov %eax,%ebx touches no memory.
        assert_eq!(
            decode(&[0x89, 0xc3], Bits64),
            Err(MmioDecodeError::RegisterOperand)
        );
        // Cut short in the displacement.
        assert_eq!(
            decode(&[0x89, 0x80, 0x00], Bits64),
            Err(MmioDecodeError::Truncated { have: 3 })
        );
        // 16-bit addressing in 32-bit code.
        assert_eq!(
            decode(&[0x67, 0x89, 0x07], Legacy),
            Err(MmioDecodeError::Addressing16)
        );
        // Prefixes past the 15-byte limit.
        assert_eq!(decode(&[0x66; 16], Bits64), Err(MmioDecodeError::TooLong));
        // MOV EAX, [moffs64]: kvm-unit-tests reads the xAPIC id this way.
        let load = [0xa1, 0x20, 0x00, 0xe0, 0xfe, 0, 0, 0, 0, 0xc1];
        assert_eq!(
            decode(&load, Bits64),
            Ok(MmioInstruction {
                operation: MmioOperation::Load {
                    into: Register {
                        index: 0,
                        high_byte: false
                    },
                    register_width: 4,
                },
                width: 4,
                len: 9,
            })
        );
        assert_eq!(decode(&load[..5], Legacy).map(|i| i.len), Ok(5));
        assert_eq!(
            decode(&[0x48, 0xa3, 0, 0, 0xe0, 0xfe, 0, 0, 0, 0], Bits64).map(|i| (
                i.width,
                i.len,
                i.operation
            )),
            Ok((
                8,
                10,
                MmioOperation::Store {
                    from: Register {
                        index: 0,
                        high_byte: false
                    }
                }
            ))
        );
        assert_eq!(
            decode(&[0x67, 0xa2, 0, 0, 0xe0, 0xfe], Bits64).map(|i| (i.width, i.len)),
            Ok((1, 6))
        );
        assert_eq!(
            decode(&[0x66, 0xa1, 0, 0, 0xe0, 0xfe], Legacy).map(|i| i.width),
            Ok(2)
        );
        assert_eq!(
            decode(&[0x67, 0xa1, 0, 0], Legacy),
            Err(MmioDecodeError::Addressing16)
        );
        assert_eq!(
            decode(&[0xa1, 0, 0, 0xe0], Bits64),
            Err(MmioDecodeError::Truncated { have: 4 })
        );
        // In 32-bit code 0x48 is DEC EAX, not REX.W.
        assert!(matches!(
            decode(&[0x48, 0x8b, 0x00], Legacy),
            Err(MmioDecodeError::Unsupported { .. })
        ));
        let text = decode(&[0x0f, 0x10, 0x00], Bits64).unwrap_err().to_string();
        assert!(text.contains("0f 10"), "{text}");
    }

    #[test]
    fn register_values_move_as_the_cpu_moves_them() {
        let store = decode(&[0x88, 0x20], Bits64).unwrap();
        assert_eq!(store_value(&store, 0xaabb_ccdd), 0xcc, "%ah");
        let store = decode(&[0x89, 0x00], Bits64).unwrap();
        assert_eq!(store_value(&store, 0x1_2345_6789), 0x2345_6789);
        let high = Register {
            index: 0,
            high_byte: true,
        };
        assert_eq!(load_result(high, 1, 0xffff_ffff, 0x12), 0xffff_12ff);
        assert_eq!(
            load_result(reg(0), 2, u64::MAX, 0x1234),
            0xffff_ffff_ffff_1234
        );
        assert_eq!(load_result(reg(0), 4, u64::MAX, 0x1234), 0x1234);
        assert_eq!(load_result(reg(0), 8, 0, u64::MAX), u64::MAX);
    }
}
