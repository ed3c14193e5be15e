//! The x86-64 (AMD SVM) side of the ABI: the `VMMCALL` register mapping and
//! how a guest is started.
//!
//! # Calls: `VMMCALL`
//! The same function ids, arguments and returns as on ARM (the crate docs),
//! in these registers:
//!
//! | ARM (SMCCC) | x86-64 | role |
//! |---|---|---|
//! | `x0` | `rax` | function id in, first result out |
//! | `x1` | `rdi` | argument 1 in, result 2 out |
//! | `x2` | `rsi` | argument 2 in, result 3 out |
//! | `x3` | `rdx` | argument 3 in, result 4 out |
//! | `x4` | `r10` | argument 4 |
//! | `x5` | `r8`  | argument 5 |
//!
//! (`rdi, rsi, rdx, r10, r8`: the System V / Xen hypercall order, with `r10`
//! for `rcx`, which `SYSCALL`-style conventions cannot use.) Every other
//! register is preserved. `VMMCALL` in a guest without this hypervisor is an
//! invalid opcode (`#UD`).
//!
//! # Boot
//! The hypervisor loads the flat image at guest-physical [`IMAGE_BASE`] and
//! enters vCPU 0 there **in 64-bit long mode**, like a PVH start but already
//! paged: the hypervisor writes, below the image, an identity map of the
//! first 4 GiB of guest-physical space (2 MiB pages; only the domain's RAM is
//! backed, anything else faults into the hypervisor), a GDT with a 64-bit code
//! segment ([`CODE_SELECTOR`]) and a data segment ([`DATA_SELECTOR`]), and the
//! [`BootInfo`] at [`BOOT_INFO`]. Interrupts are masked; `rdi` = the vCPU
//! index (0), `rsi` = [`BOOT_INFO`]; the guest sets its own stack.
//!
//! RAM starts at guest-physical 0 (the PC convention); its size is in the
//! [`BootInfo`].
//!
//! # Other vCPUs: INIT + SIPI through the virtual x2APIC
//! A guest starts vCPU *n* (x2APIC id *n*) by writing the x2APIC ICR
//! (MSR 0x830) with an INIT and then a STARTUP IPI whose vector is
//! `IMAGE_BASE >> 12`. This is a **paravirtual SIPI**: instead of real mode at
//! `vector << 12`, the vCPU starts there in the same 64-bit state as vCPU 0,
//! with `rdi` = its index and `rsi` = [`BOOT_INFO`]. So one entry point serves
//! every vCPU, and the guest needs no real-mode trampoline.
//!
//! # CPU off and on: HLT with interrupts off, INIT, STARTUP
//! Native semantics, as KVM emulates them (Intel SDM vol. 3, 10.4.7.3; the
//! ARM side's PSCI `CPU_OFF`/`CPU_ON` in the crate docs is the same idea):
//!
//! - **HLT with RFLAGS.IF = 0** blocks the vCPU until an INIT: fixed
//!   interrupts (IPIs, its APIC timer) do not end it, they stay pending in
//!   its IRR. This is how a vCPU parks itself (`cli; hlt` in a loop, as
//!   Linux's `hlt_play_dead`). HLT with IF = 1 ends at the next interrupt.
//! - **INIT** (ICR delivery mode 101b, level assert; a level de-assert, bit
//!   14 clear with bit 15 set, is ignored as on every APIC since the
//!   82489DX) to another *started* vCPU of the domain puts it in
//!   **wait-for-SIPI**: the hypervisor takes it off its CPU and holds it
//!   there (it runs nowhere and nothing but a STARTUP brings it back; the
//!   rest of its sched unit goes on), and drops its pending interrupts,
//!   in-service state and timer (its APIC is as after reset). The hypervisor logs `domain N: vCPU T: INIT: waiting for
//!   STARTUP`. INIT to a vCPU that already waits (or never started) does
//!   nothing; INIT to the sender itself is refused with a warning (nothing
//!   could start it again).
//! - **STARTUP** with vector [`SIPI_VECTOR`] to a vCPU in wait-for-SIPI
//!   restarts it **fresh**, exactly as its first start: 64-bit mode at
//!   [`IMAGE_BASE`], `rdi` = its index, `rsi` = [`BOOT_INFO`], every other
//!   register and its x87/SSE state reset, its APIC reset. Guest memory is
//!   left as it was: the restarted vCPU finds whatever the guest left there
//!   for it. The hypervisor first waits (bounded) until the vCPU has left the
//!   CPU that ran it, and logs `domain N: vCPU T started (SIPI, ...)` on
//!   every start. A STARTUP to a running vCPU is ignored, as hardware does;
//!   one with another vector is ignored with a warning.
//!
//! A vCPU in wait-for-SIPI (or not yet started) is not powered on for
//! [`crate::Function::TestPauseSibling`], which refuses it as on ARM.
//!
//! # Time
//! CPUID leaf [`CPUID_TIMING_LEAF`] (the common hypervisor "timing" leaf):
//! `eax` = TSC frequency in kHz, `ebx` = the virtual APIC timer's frequency in
//! kHz (the TSC's: the TSC-deadline timer counts TSC ticks). Leaf
//! [`CPUID_SIGNATURE_LEAF`] names the hypervisor ([`SIGNATURE`]).
//!
//! # Virtual local APIC
//! x2APIC MSRs only (the xAPIC page is not mapped): ID (0x802), version
//! (0x803), TPR (0x808, stored only), EOI (0x80B), LDR (0x80D), SVR (0x80F),
//! ISR/IRR (0x810.., 0x820..), ICR (0x830: fixed IPIs by physical id, self,
//! all, all-but-self; INIT and STARTUP, above), LVT timer (0x832, one-shot or
//! TSC-deadline), initial/current count (0x838/0x839), divide (0x83E), and
//! IA32_TSC_DEADLINE (0x6E0).
//!
//! # Console: COM1 (16550) and its IRQ 4 through an 8259A
//! A 16550 at ports 0x3F8-0x3FF: output goes to the hypervisor's console as
//! `[domN]` lines (the transmitter is always ready); typed input (while the
//! console's Ctrl-A x3 switch gives it to this domain) arrives in its
//! receive FIFO (16 bytes with FCR bit 0, else one holding register; what
//! does not fit waits and moves in as RBR is read). LSR.DR says data waits,
//! RBR pops it. The UART interrupts (IER: received data, line status,
//! transmitter empty) on **ISA IRQ 4** while MCR.OUT2 is set.
//!
//! IRQ 4 goes through an emulated **8259A master PIC** at 0x20/0x21 (a
//! slave at 0xA0/0xA1 accepts its ICWs and never interrupts). After reset
//! its IMR is 0xFF; an ICW1 (0x20, bit 4 set) starts the sequence ICW2
//! (vector base, bits 7:3), ICW3 (unless ICW1 says single), ICW4 (if ICW1
//! bit 0; bit 0 must be set: 8086 mode). Then 0x21 is the IMR and 0x20 takes
//! OCW2 (0x20: non-specific EOI) and OCW3 (0x0A/0x0B: read IRR/ISR). Its
//! interrupt goes to **vCPU 0 only** (virtual wire mode: ExtINT through
//! LINT0), so a handler ends it with a PIC EOI and **no** local-APIC EOI.
//! E.g. vector base 0x20 makes COM1 vector 0x24.

/// Where the image is loaded and every vCPU starts.
pub const IMAGE_BASE: u64 = 0x8000;

/// The STARTUP IPI vector that starts a vCPU at [`IMAGE_BASE`].
pub const SIPI_VECTOR: u8 = (IMAGE_BASE >> 12) as u8;

/// Guest-physical address of the [`BootInfo`].
pub const BOOT_INFO: u64 = 0x7000;

/// Room for the [`BootInfo`] and its command line.
pub const BOOT_INFO_BYTES: usize = 0x1000;

/// The 64-bit code segment selector of the boot GDT.
pub const CODE_SELECTOR: u16 = 0x08;

/// The data segment selector of the boot GDT.
pub const DATA_SELECTOR: u16 = 0x10;

/// CPUID leaf with the hypervisor's signature (`ebx, ecx, edx`) and, in
/// `eax`, the highest hypervisor leaf.
pub const CPUID_SIGNATURE_LEAF: u32 = 0x4000_0000;

/// CPUID leaf with the TSC and APIC timer frequencies in kHz.
pub const CPUID_TIMING_LEAF: u32 = 0x4000_0010;

/// The signature in `ebx, ecx, edx` of [`CPUID_SIGNATURE_LEAF`].
pub const SIGNATURE: [u8; 12] = *b"RustHvCoreSc";

/// "HVBI", little-endian: marks a valid [`BootInfo`].
pub const BOOT_INFO_MAGIC: u32 = 0x4942_5648;

/// What the hypervisor tells a starting guest, at [`BOOT_INFO`]:
///
/// | offset | size | field |
/// |---|---|---|
/// | 0 | 4 | magic [`BOOT_INFO_MAGIC`] |
/// | 4 | 4 | vCPUs |
/// | 8 | 8 | RAM bytes (from guest-physical 0) |
/// | 16 | 8 | TSC kHz |
/// | 24 | 4 | command line length |
/// | 28 | 4 | reserved (0) |
/// | 32 | len | command line (UTF-8, no terminator) |
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BootInfo<'a> {
    /// The domain's vCPUs (x2APIC ids 0..vcpus).
    pub vcpus: u32,
    /// RAM size in bytes.
    pub ram_bytes: u64,
    /// TSC frequency in kHz.
    pub tsc_khz: u64,
    /// The domain's boot arguments.
    pub cmdline: &'a str,
}

/// Offset of the command line in the encoded [`BootInfo`].
const CMDLINE_OFFSET: usize = 32;

/// Why a [`BootInfo`] could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootInfoError {
    /// The buffer is too small for the header and command line.
    TooSmall,
    /// The magic is wrong: no hypervisor wrote it.
    BadMagic(u32),
    /// The command line is not UTF-8.
    NotUtf8,
}

impl fmt::Display for BootInfoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::TooSmall => write!(f, "boot info does not fit its buffer"),
            Self::BadMagic(m) => write!(f, "boot info magic {m:#x} is not {BOOT_INFO_MAGIC:#x}"),
            Self::NotUtf8 => write!(f, "boot info command line is not UTF-8"),
        }
    }
}

use core::fmt;

impl<'a> BootInfo<'a> {
    /// Writes the encoding into `buffer`; returns the bytes used.
    pub fn encode(&self, buffer: &mut [u8]) -> Result<usize, BootInfoError> {
        let end = CMDLINE_OFFSET + self.cmdline.len();
        if buffer.len() < end {
            return Err(BootInfoError::TooSmall);
        }
        buffer[0..4].copy_from_slice(&BOOT_INFO_MAGIC.to_le_bytes());
        buffer[4..8].copy_from_slice(&self.vcpus.to_le_bytes());
        buffer[8..16].copy_from_slice(&self.ram_bytes.to_le_bytes());
        buffer[16..24].copy_from_slice(&self.tsc_khz.to_le_bytes());
        buffer[24..28].copy_from_slice(&(self.cmdline.len() as u32).to_le_bytes());
        buffer[28..32].fill(0);
        buffer[CMDLINE_OFFSET..end].copy_from_slice(self.cmdline.as_bytes());
        Ok(end)
    }

    /// Reads an encoded boot info.
    pub fn decode(buffer: &'a [u8]) -> Result<Self, BootInfoError> {
        let word = |at: usize| -> Result<u32, BootInfoError> {
            let bytes = buffer.get(at..at + 4).ok_or(BootInfoError::TooSmall)?;
            Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]))
        };
        let dword = |at: usize| -> Result<u64, BootInfoError> {
            Ok(u64::from(word(at)?) | u64::from(word(at + 4)?) << 32)
        };
        let magic = word(0)?;
        if magic != BOOT_INFO_MAGIC {
            return Err(BootInfoError::BadMagic(magic));
        }
        let len = word(24)? as usize;
        let bytes = buffer
            .get(CMDLINE_OFFSET..CMDLINE_OFFSET.saturating_add(len))
            .ok_or(BootInfoError::TooSmall)?;
        Ok(Self {
            vcpus: word(4)?,
            ram_bytes: dword(8)?,
            tsc_khz: dword(16)?,
            cmdline: core::str::from_utf8(bytes).map_err(|_| BootInfoError::NotUtf8)?,
        })
    }
}

/// x2APIC MSR numbers the virtual local APIC implements.
pub mod msr {
    /// IA32_APIC_BASE.
    pub const APIC_BASE: u32 = 0x1b;
    /// IA32_TSC_DEADLINE.
    pub const TSC_DEADLINE: u32 = 0x6e0;
    /// x2APIC ID.
    pub const ID: u32 = 0x802;
    /// Version.
    pub const VERSION: u32 = 0x803;
    /// Task priority.
    pub const TPR: u32 = 0x808;
    /// End of interrupt.
    pub const EOI: u32 = 0x80b;
    /// Logical destination.
    pub const LDR: u32 = 0x80d;
    /// Spurious interrupt vector.
    pub const SVR: u32 = 0x80f;
    /// In-service register, 8 MSRs.
    pub const ISR0: u32 = 0x810;
    /// Interrupt request register, 8 MSRs.
    pub const IRR0: u32 = 0x820;
    /// Interrupt command register.
    pub const ICR: u32 = 0x830;
    /// LVT timer.
    pub const LVT_TIMER: u32 = 0x832;
    /// Timer initial count.
    pub const TIMER_INITIAL: u32 = 0x838;
    /// Timer current count.
    pub const TIMER_CURRENT: u32 = 0x839;
    /// Timer divide configuration.
    pub const TIMER_DIVIDE: u32 = 0x83e;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn boot_info_round_trips() {
        let info = BootInfo {
            vcpus: 2,
            ram_bytes: 32 << 20,
            tsc_khz: 2_000_000,
            cmdline: "workload=compute rounds=3",
        };
        let mut buffer = [0u8; 128];
        let used = info.encode(&mut buffer).unwrap();
        assert_eq!(used, 32 + info.cmdline.len());
        assert_eq!(BootInfo::decode(&buffer[..used]), Ok(info));
    }

    #[test]
    fn bad_boot_info_is_refused() {
        let mut buffer = [0u8; 40];
        assert_eq!(BootInfo::decode(&buffer), Err(BootInfoError::BadMagic(0)));
        let info = BootInfo {
            vcpus: 1,
            ram_bytes: 1,
            tsc_khz: 1,
            cmdline: "a much too long command line for forty bytes",
        };
        assert_eq!(info.encode(&mut buffer), Err(BootInfoError::TooSmall));
        let short = BootInfo {
            cmdline: "abc",
            ..info
        };
        let used = short.encode(&mut buffer).unwrap();
        // A length that runs past the buffer.
        buffer[24] = 200;
        assert_eq!(
            BootInfo::decode(&buffer[..used]),
            Err(BootInfoError::TooSmall)
        );
        buffer[24] = 3;
        buffer[32] = 0xff;
        assert_eq!(
            BootInfo::decode(&buffer[..used]),
            Err(BootInfoError::NotUtf8)
        );
    }

    #[test]
    fn the_sipi_vector_points_at_the_image() {
        assert_eq!(u64::from(SIPI_VECTOR) << 12, IMAGE_BASE);
        assert!(BOOT_INFO + BOOT_INFO_BYTES as u64 <= IMAGE_BASE);
    }
}
