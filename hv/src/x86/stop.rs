//! Why an exit stops its domain: the guest states an SVM vCPU cannot go on
//! from, as values the exit handler returns and the stop line prints.

use alloc::boxed::Box;
use core::fmt;

use super::guest_paging::{Fetched, WalkError};
use super::insn::{DecodeError, Hex, Intercepted};
use super::mmio_insn::MmioDecodeError;
use super::vmcb::{ControlArea, SaveArea};
use crate::arm::inject::Access;

/// What went wrong with an MMIO access's instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MmioError {
    /// The bytes at RIP could not be read through the guest's page tables.
    Unreadable(WalkError),
    /// They are not a MOV the emulation takes.
    Decode(MmioDecodeError),
}

/// Why the exit being handled stops the vCPU's domain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The domain went away while its vCPU was in the exit.
    DomainGone {
        /// The intercepted instruction.
        instruction: Intercepted,
        /// Where it is.
        rip: u64,
    },
    /// Not even the first byte of the instruction could be read through the
    /// guest's page tables: a guessed length would run it from the middle
    /// of an instruction.
    Unreadable {
        /// The intercepted instruction.
        instruction: Intercepted,
        /// Where it is.
        rip: u64,
        /// Why the walk failed.
        error: WalkError,
    },
    /// The bytes at RIP are not the intercepted instruction.
    Undecodable {
        /// The intercepted instruction.
        instruction: Intercepted,
        /// Where it is.
        rip: u64,
        /// What could be read there.
        fetched: Fetched,
        /// What is wrong with it.
        error: DecodeError,
    },
    /// An access to an emulated device's MMIO page by an instruction that
    /// cannot be read or is not a MOV the emulation takes.
    MmioInstruction {
        /// The guest-physical address accessed.
        gpa: u64,
        /// Where the instruction is.
        rip: u64,
        /// What could be read there (empty when nothing could).
        fetched: Option<Fetched>,
        /// What is wrong.
        error: MmioError,
    },
    /// INS/OUTS: string port I/O is not emulated.
    StringIo {
        /// The port.
        port: u16,
        /// Where the instruction is.
        rip: u64,
    },
    /// An access to guest-physical memory the domain does not have.
    NestedPageFault {
        /// What the access was.
        access: Access,
        /// The guest-physical address.
        gpa: u64,
        /// Where the instruction is.
        rip: u64,
    },
    /// A shutdown intercept: the guest triple-faulted.
    TripleFault {
        /// Where.
        rip: u64,
        /// What the failed deliveries used (boxed: the rare case should
        /// not make every exit's `Result` large).
        registers: Box<FaultRegisters>,
        /// Whether the nested page tables were the domain's own.
        tables: NestedTables,
    },
    /// VMRUN refused the VMCB (exit code -1).
    VmrunInvalid,
    /// An exception intercept the hypervisor does not hand back.
    UnexpectedException {
        /// The vector.
        vector: u8,
        /// Its error code.
        error_code: u64,
        /// Where.
        rip: u64,
    },
    /// An exit code the hypervisor has no handler for.
    UnhandledExit {
        /// The exit code.
        code: u64,
        /// EXITINFO1.
        info1: u64,
        /// EXITINFO2.
        info2: u64,
        /// Where.
        rip: u64,
    },
}

/// Which nested page tables were live at a triple fault. A CR3 other than
/// the domain's NPT root would be the hypervisor's bug, not the guest's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NestedTables {
    /// The domain's own.
    Own,
    /// Another root than the domain's.
    Foreign {
        /// The VMCB's nested CR3.
        nested_cr3: u64,
        /// The domain's NPT root.
        root: u64,
    },
    /// The domain is gone.
    DomainGone {
        /// The VMCB's nested CR3.
        nested_cr3: u64,
    },
}

/// What a triple fault leaves to look at: the registers and descriptor
/// tables the failed deliveries used, and the events in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FaultRegisters {
    rsp: u64,
    rflags: u64,
    cs: (u16, u16),
    cr0: u64,
    cr2: u64,
    cr3: u64,
    cr4: u64,
    efer: u64,
    idtr: (u64, u32),
    gdtr: (u64, u32),
    exit_int_info: u64,
    v_intr: u64,
    shadow: u64,
}

impl FaultRegisters {
    /// Takes them from a VMCB.
    pub fn of(save: &SaveArea, control: &ControlArea) -> Self {
        Self {
            rsp: save.rsp,
            rflags: save.rflags,
            cs: (save.cs.selector, save.cs.attrib),
            cr0: save.cr0,
            cr2: save.cr2,
            cr3: save.cr3,
            cr4: save.cr4,
            efer: save.efer,
            idtr: (save.idtr.base, save.idtr.limit),
            gdtr: (save.gdtr.base, save.gdtr.limit),
            exit_int_info: control.exit_int_info,
            v_intr: control.v_intr,
            shadow: control.interrupt_shadow & 1,
        }
    }
}

impl fmt::Display for FaultRegisters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "RSP {:#x} RFLAGS {:#x} CS {:#x}/{:#x} CR0 {:#x} CR2 {:#x} CR3 {:#x} CR4 {:#x} EFER {:#x} \
             IDTR {:#x}+{:#x} GDTR {:#x}+{:#x} EXITINTINFO {:#x} V_INTR {:#x} shadow {}",
            self.rsp,
            self.rflags,
            self.cs.0,
            self.cs.1,
            self.cr0,
            self.cr2,
            self.cr3,
            self.cr4,
            self.efer,
            self.idtr.0,
            self.idtr.1,
            self.gdtr.0,
            self.gdtr.1,
            self.exit_int_info,
            self.v_intr,
            self.shadow,
        )
    }
}

impl fmt::Display for NestedTables {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Own => f.write_str("its own nested page tables"),
            Self::Foreign { nested_cr3, root } => {
                write!(f, "nested CR3 {nested_cr3:#x}, NOT its NPT root {root:#x}")
            }
            Self::DomainGone { nested_cr3 } => {
                write!(f, "nested CR3 {nested_cr3:#x} of a domain that is gone")
            }
        }
    }
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::DomainGone { instruction, rip } => {
                write!(
                    f,
                    "{} at RIP {rip:#x}: its domain is gone",
                    instruction.name()
                )
            }
            Self::Unreadable {
                instruction,
                rip,
                error,
            } => write!(
                f,
                "cannot read the {} at RIP {rip:#x}: {error}",
                instruction.name()
            ),
            Self::Undecodable {
                instruction,
                rip,
                fetched,
                error,
            } => {
                write!(
                    f,
                    "cannot decode the {} at RIP {rip:#x}: the bytes there ({}) {error}",
                    instruction.name(),
                    Hex(fetched.as_slice())
                )?;
                // A short read says why it stopped (a page not mapped).
                match (error, fetched.stopped_by) {
                    (DecodeError::Truncated { .. }, Some(why)) => write!(f, " ({why})"),
                    _ => Ok(()),
                }
            }
            Self::StringIo { port, rip } => write!(
                f,
                "string I/O (INS/OUTS) on port {port:#x} is not emulated (RIP {rip:#x})"
            ),
            Self::MmioInstruction {
                gpa,
                rip,
                fetched,
                error,
            } => {
                write!(
                    f,
                    "MMIO access to guest-physical {gpa:#x} at RIP {rip:#x}: "
                )?;
                match (error, fetched) {
                    (MmioError::Unreadable(e), _) => write!(f, "cannot read the instruction: {e}"),
                    (MmioError::Decode(e), Some(fetched)) => {
                        write!(f, "the instruction ({}) {e}", Hex(fetched.as_slice()))
                    }
                    (MmioError::Decode(e), None) => write!(f, "the instruction {e}"),
                }
            }
            Self::NestedPageFault { access, gpa, rip } => {
                let kind = match access {
                    Access::Fetch => "instruction fetch from",
                    Access::Read => "read from",
                    Access::Write => "write to",
                };
                write!(
                    f,
                    "nested page fault: {kind} guest-physical {gpa:#x}, outside its memory (RIP {rip:#x})"
                )
            }
            Self::TripleFault {
                rip,
                registers,
                tables,
            } => write!(
                f,
                "shutdown (triple fault) at RIP {rip:#x}: {registers}; {tables}"
            ),
            Self::VmrunInvalid => {
                f.write_str("VMRUN refused its state (exit code -1, VMEXIT_INVALID)")
            }
            Self::UnexpectedException {
                vector,
                error_code,
                rip,
            } => write!(
                f,
                "unexpected intercepted exception {vector} (error code {error_code:#x}) at RIP {rip:#x}"
            ),
            Self::UnhandledExit {
                code,
                info1,
                info2,
                rip,
            } => write!(
                f,
                "unhandled exit code {code:#x} (info {info1:#x}, {info2:#x}) at RIP {rip:#x}"
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use std::string::ToString;

    use super::*;
    use crate::x86::insn::{CodeSize, length};
    use crate::x86::vmcb::Vmcb;

    // The stop lines the x86 scenarios look for (xtask's rogue and crasher
    // guests) come from here.
    #[test]
    fn nested_page_fault_line_names_the_access_and_address() {
        let reason = StopReason::NestedPageFault {
            access: Access::Read,
            gpa: 0x200_0000,
            rip: 0x1234,
        };
        assert_eq!(
            reason.to_string(),
            "nested page fault: read from guest-physical 0x2000000, outside its memory (RIP 0x1234)"
        );
    }

    #[test]
    fn mmio_stop_line_shows_the_bytes() {
        let mut fetched = Fetched {
            bytes: [0; crate::x86::insn::MAX_INSTRUCTION_BYTES],
            len: 2,
            stopped_by: None,
            size: crate::x86::insn::CodeSize::Bits64,
        };
        fetched.bytes[..2].copy_from_slice(&[0x01, 0x03]);
        let reason = StopReason::MmioInstruction {
            gpa: 0xfec0_0010,
            rip: 0x1000,
            fetched: Some(fetched),
            error: MmioError::Decode(MmioDecodeError::Unsupported {
                opcode: [0x01, 0],
                opcode_len: 1,
            }),
        };
        assert_eq!(
            reason.to_string(),
            "MMIO access to guest-physical 0xfec00010 at RIP 0x1000: the instruction (01 03) opcode 01 is not a MOV the MMIO emulation takes"
        );
    }

    #[test]
    fn triple_fault_line_says_whose_tables_were_live() {
        let vmcb = Vmcb::zeroed();
        let registers = Box::new(FaultRegisters::of(&vmcb.save, &vmcb.control));
        let own = StopReason::TripleFault {
            rip: 0x10,
            registers: registers.clone(),
            tables: NestedTables::Own,
        };
        assert!(
            own.to_string()
                .starts_with("shutdown (triple fault) at RIP 0x10: RSP 0x0")
        );
        assert!(own.to_string().ends_with("; its own nested page tables"));
        let foreign = StopReason::TripleFault {
            rip: 0x10,
            registers,
            tables: NestedTables::Foreign {
                nested_cr3: 0x5000,
                root: 0x6000,
            },
        };
        assert!(
            foreign
                .to_string()
                .ends_with("nested CR3 0x5000, NOT its NPT root 0x6000")
        );
    }

    #[test]
    fn undecodable_line_shows_the_bytes() {
        let mut bytes = [0; 15];
        bytes[..2].copy_from_slice(&[0x0f, 0x05]);
        let fetched = Fetched {
            bytes,
            len: 2,
            stopped_by: None,
            size: CodeSize::Bits64,
        };
        let error = length(fetched.as_slice(), Intercepted::Vmmcall, fetched.size).unwrap_err();
        let line = StopReason::Undecodable {
            instruction: Intercepted::Vmmcall,
            rip: 0x40,
            fetched,
            error,
        }
        .to_string();
        assert!(
            line.starts_with("cannot decode the VMMCALL at RIP 0x40: the bytes there (0f 05)"),
            "{line}"
        );
    }
}
