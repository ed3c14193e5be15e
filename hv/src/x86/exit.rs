//! Decoding a `#VMEXIT`: the exit code and its two information words
//! (AMD64 APM vol. 2, appendix C and 15.10-15.25) into an [`Exit`].

use super::vmcb::ControlArea;
use crate::arm::inject::Access;

/// Exit codes this hypervisor handles by name (APM appendix C).
pub mod code {
    /// Exception vector 0x40 + n.
    pub const EXCEPTION_BASE: u64 = 0x40;
    /// Physical interrupt.
    pub const INTR: u64 = 0x60;
    /// Physical NMI.
    pub const NMI: u64 = 0x61;
    /// Physical SMI.
    pub const SMI: u64 = 0x62;
    /// Physical INIT.
    pub const INIT: u64 = 0x63;
    /// Write of CR0 (+ n for CRn).
    pub const CR_WRITE_BASE: u64 = 0x10;
    /// Read of DR0 (+ n for DRn).
    pub const DR_READ_BASE: u64 = 0x20;
    /// Write of DR0 (+ n for DRn).
    pub const DR_WRITE_BASE: u64 = 0x30;
    /// Virtual interrupt window.
    pub const VINTR: u64 = 0x64;
    /// CPUID.
    pub const CPUID: u64 = 0x72;
    /// IRET (before it executes).
    pub const IRET: u64 = 0x74;
    /// HLT.
    pub const HLT: u64 = 0x78;
    /// IN/OUT.
    pub const IOIO: u64 = 0x7b;
    /// RDMSR/WRMSR.
    pub const MSR: u64 = 0x7c;
    /// Shutdown (triple fault).
    pub const SHUTDOWN: u64 = 0x7f;
    /// VMRUN.
    pub const VMRUN: u64 = 0x80;
    /// VMMCALL.
    pub const VMMCALL: u64 = 0x81;
    /// XSETBV.
    pub const XSETBV: u64 = 0x8d;
    /// Nested page fault.
    pub const NPF: u64 = 0x400;
    /// VMRUN found an invalid guest state.
    pub const INVALID: u64 = u64::MAX;
}

/// An IN or OUT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoAccess {
    /// The port.
    pub port: u16,
    /// IN (true) or OUT.
    pub input: bool,
    /// Operand size in bytes (1, 2 or 4).
    pub size: u8,
    /// A string instruction (INS/OUTS), which this hypervisor does not emulate.
    pub string: bool,
    /// With a REP prefix.
    pub rep: bool,
    /// The RIP after the instruction.
    pub next_rip: u64,
}

/// A nested page fault.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NestedFault {
    /// The guest-physical address.
    pub gpa: u64,
    /// The access was a write.
    pub write: bool,
    /// The access was an instruction fetch.
    pub fetch: bool,
    /// The page was present (a permission fault, not a missing mapping).
    pub present: bool,
}

impl NestedFault {
    /// What kind of access faulted.
    pub fn access(&self) -> Access {
        if self.fetch {
            Access::Fetch
        } else if self.write {
            Access::Write
        } else {
            Access::Read
        }
    }
}

/// Why the guest exited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// A physical interrupt is pending for the host.
    Interrupt,
    /// A physical NMI.
    Nmi,
    /// A physical SMI (the host takes it once the exit is over).
    Smi,
    /// A physical INIT sent to this CPU (not to the guest).
    Init,
    /// A MOV to (`write`) or from debug register `dr`.
    DebugRegister {
        /// The debug register.
        dr: u8,
        /// MOV to it.
        write: bool,
    },
    /// A MOV to control register `cr` (only CR4's is intercepted).
    ControlRegisterWrite {
        /// The control register.
        cr: u8,
    },
    /// IRET, intercepted before it executes (while a virtual NMI's handler
    /// runs: `super::nmi`).
    Iret,
    /// The guest can take a virtual interrupt now.
    InterruptWindow,
    /// CPUID.
    Cpuid,
    /// XSETBV (the guest's XCR0 is the hypervisor's to check and load).
    Xsetbv,
    /// HLT.
    Hlt,
    /// IN/OUT.
    Io(IoAccess),
    /// RDMSR (`write` false) or WRMSR.
    Msr {
        /// WRMSR.
        write: bool,
    },
    /// VMMCALL.
    Vmmcall,
    /// A nested page fault.
    NestedPageFault(NestedFault),
    /// The guest shut down (triple fault).
    Shutdown,
    /// An intercepted exception.
    Exception {
        /// Its vector.
        vector: u8,
        /// Its error code (when it has one).
        error_code: u64,
    },
    /// VMRUN refused the guest state.
    Invalid,
    /// An exit this hypervisor does not handle.
    Other {
        /// The exit code.
        code: u64,
        /// EXITINFO1.
        info1: u64,
        /// EXITINFO2.
        info2: u64,
    },
}

/// Decodes the exit recorded in `control`.
pub fn decode(control: &ControlArea) -> Exit {
    decode_raw(control.exit_code, control.exit_info1, control.exit_info2)
}

/// Decodes an exit code and its information words.
pub fn decode_raw(exit_code: u64, info1: u64, info2: u64) -> Exit {
    match exit_code {
        code::INTR => Exit::Interrupt,
        code::NMI => Exit::Nmi,
        code::SMI => Exit::Smi,
        code::INIT => Exit::Init,
        c if (code::DR_READ_BASE..code::DR_WRITE_BASE + 16).contains(&c) => Exit::DebugRegister {
            dr: (c & 0xf) as u8,
            write: c >= code::DR_WRITE_BASE,
        },
        c if (code::CR_WRITE_BASE..code::CR_WRITE_BASE + 16).contains(&c) => {
            Exit::ControlRegisterWrite {
                cr: (c & 0xf) as u8,
            }
        }
        code::IRET => Exit::Iret,
        code::VINTR => Exit::InterruptWindow,
        code::CPUID => Exit::Cpuid,
        code::XSETBV => Exit::Xsetbv,
        code::HLT => Exit::Hlt,
        code::IOIO => Exit::Io(IoAccess {
            port: (info1 >> 16) as u16,
            input: info1 & 1 != 0,
            size: match (info1 >> 4) & 0b111 {
                0b001 => 1,
                0b010 => 2,
                _ => 4,
            },
            string: info1 & (1 << 2) != 0,
            rep: info1 & (1 << 3) != 0,
            next_rip: info2,
        }),
        code::MSR => Exit::Msr {
            write: info1 & 1 != 0,
        },
        code::VMMCALL => Exit::Vmmcall,
        code::NPF => Exit::NestedPageFault(NestedFault {
            gpa: info2,
            present: info1 & 1 != 0,
            write: info1 & (1 << 1) != 0,
            fetch: info1 & (1 << 4) != 0,
        }),
        code::SHUTDOWN => Exit::Shutdown,
        code::INVALID => Exit::Invalid,
        c if (code::EXCEPTION_BASE..code::EXCEPTION_BASE + 32).contains(&c) => Exit::Exception {
            vector: (c - code::EXCEPTION_BASE) as u8,
            error_code: info1,
        },
        code => Exit::Other { code, info1, info2 },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn platform_events_and_debug_register_moves_decode() {
        assert_eq!(decode_raw(code::SMI, 0, 0), Exit::Smi);
        assert_eq!(decode_raw(code::INIT, 0, 0), Exit::Init);
        assert_eq!(
            decode_raw(0x27, 0, 0),
            Exit::DebugRegister {
                dr: 7,
                write: false
            }
        );
        assert_eq!(
            decode_raw(0x30, 0, 0),
            Exit::DebugRegister { dr: 0, write: true }
        );
        assert_eq!(decode_raw(0x14, 0, 0), Exit::ControlRegisterWrite { cr: 4 });
        assert_eq!(decode_raw(0x74, 0, 0), Exit::Iret);
        assert_eq!(
            decode_raw(0x40 + 17, 0, 0),
            Exit::Exception {
                vector: 17,
                error_code: 0
            }
        );
    }

    #[test]
    fn an_out_to_com1_decodes() {
        // OUT DX, AL to 0x3f8: port in bits 31:16, SZ8 (bit 4), type OUT.
        let info1 = (0x3f8 << 16) | (1 << 4);
        assert_eq!(
            decode_raw(code::IOIO, info1, 0x8123),
            Exit::Io(IoAccess {
                port: 0x3f8,
                input: false,
                size: 1,
                string: false,
                rep: false,
                next_rip: 0x8123
            })
        );
        // IN EAX, DX from 0x3fd with REP INS: input, 32-bit, string, rep.
        let info1 = (0x3fd << 16) | 1 | (1 << 2) | (1 << 3) | (1 << 6);
        let Exit::Io(io) = decode_raw(code::IOIO, info1, 0) else {
            panic!("not an I/O exit")
        };
        assert!(io.input && io.string && io.rep);
        assert_eq!((io.port, io.size), (0x3fd, 4));
    }

    #[test]
    fn nested_page_faults_carry_address_and_kind() {
        assert_eq!(
            decode_raw(code::NPF, 0b10_0110, 0x1_0000_0000),
            Exit::NestedPageFault(NestedFault {
                gpa: 0x1_0000_0000,
                write: true,
                fetch: false,
                present: false
            })
        );
        let Exit::NestedPageFault(f) = decode_raw(code::NPF, 0b1_0001, 0x2000) else {
            panic!("not an NPF")
        };
        assert!(f.fetch && f.present && !f.write);
        assert_eq!(f.access(), Access::Fetch);
        let Exit::NestedPageFault(w) = decode_raw(code::NPF, 0b10, 0x2000) else {
            panic!("not an NPF")
        };
        assert_eq!(w.access(), Access::Write);
        let Exit::NestedPageFault(r) = decode_raw(code::NPF, 0, 0x2000) else {
            panic!("not an NPF")
        };
        assert_eq!(r.access(), Access::Read);
    }

    #[test]
    fn other_exits_are_named_or_passed_through() {
        assert_eq!(decode_raw(code::HLT, 0, 0), Exit::Hlt);
        assert_eq!(decode_raw(code::VMMCALL, 0, 0), Exit::Vmmcall);
        assert_eq!(decode_raw(code::MSR, 1, 0), Exit::Msr { write: true });
        assert_eq!(decode_raw(code::MSR, 0, 0), Exit::Msr { write: false });
        assert_eq!(decode_raw(u64::MAX, 0, 0), Exit::Invalid);
        assert_eq!(
            decode_raw(0x4e, 0x2, 0),
            Exit::Exception {
                vector: 14,
                error_code: 2
            }
        );
        assert_eq!(
            decode_raw(0x8f, 1, 2),
            Exit::Other {
                code: 0x8f,
                info1: 1,
                info2: 2
            }
        );
    }
}
