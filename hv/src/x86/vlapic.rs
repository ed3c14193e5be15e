//! The virtual local APIC: interrupt request/in-service state with EOI,
//! IPIs through the ICR (fixed, INIT, STARTUP; physical, logical and
//! shorthand destinations), the local vector table and the timer
//! (TSC-deadline, or one-shot and periodic counting a 100 MHz bus clock,
//! [`APIC_BUS_KHZ`], divided by the divide register).
//!
//! A guest drives it in the mode IA32_APIC_BASE selects ([`ApicMode`]):
//! x2APIC through the MSRs (`guest_abi::x86::msr`), where the test guest
//! starts, or xAPIC through the MMIO page at [`XAPIC_BASE`], where a PC's
//! firmware leaves a Linux kernel (which without interrupt remapping and on
//! an unknown hypervisor keeps xAPIC mode). The two modes differ in the ID
//! register's format, the logical destination registers (LDR/DFR written
//! by the guest in xAPIC mode, derived from the id in x2APIC mode) and the
//! ICR (two 32-bit halves, the destination in bits 31:24 of the high one).
//!
//! The arch glue feeds it MSR and MMIO exits and the TSC, asks
//! [`VLapic::pending`] which vector to inject, reports delivery with
//! [`VLapic::acknowledge`], and carries out the [`IcrCommand`]s it returns.

use guest_abi::x86::msr;

/// The version register: an integrated APIC (0x14), 6 LVT entries.
const VERSION: u64 = 0x0005_0014;
/// LVT mask bit.
const LVT_MASKED: u32 = 1 << 16;
/// LVT timer mode field (bits 18:17).
const TIMER_MODE_SHIFT: u32 = 17;
/// LVT timer mode: periodic.
const TIMER_PERIODIC: u32 = 0b01;
/// LVT timer mode: TSC-deadline.
const TIMER_TSC_DEADLINE: u32 = 0b10;
/// ICR level bit: assert (clear only in an INIT de-assert).
const ICR_LEVEL_ASSERT: u64 = 1 << 14;
/// ICR trigger mode bit: level-triggered.
const ICR_TRIGGER_LEVEL: u64 = 1 << 15;
/// SVR: APIC software enable.
const SVR_ENABLED: u32 = 1 << 8;

/// The xAPIC MMIO page's guest-physical address (the APIC base MSR's
/// reset value; a guest that moves it is refused).
pub const XAPIC_BASE: u64 = 0xFEE0_0000;
/// The MMIO page's size.
pub const XAPIC_SIZE: u64 = 0x1000;
/// IA32_APIC_BASE: this processor is the bootstrap processor.
const BASE_BSP: u64 = 1 << 8;
/// IA32_APIC_BASE: x2APIC mode (with EN).
const BASE_EXTD: u64 = 1 << 10;
/// IA32_APIC_BASE: the APIC is enabled.
const BASE_EN: u64 = 1 << 11;
/// IA32_APIC_BASE: the page address (bits 35:12; the guest sees 36
/// physical address bits here, and more raise #GP).
const BASE_ADDRESS: u64 = 0xF_FFFF_F000;
/// The xAPIC MMIO offsets that differ from their x2APIC MSRs (the MSR is
/// 0x800 + offset / 16 for the others).
mod xapic {
    /// Destination format (flat or cluster model; no x2APIC MSR).
    pub const DFR: u64 = 0xE0;
    /// Interrupt command, destination half (bits 63:32 of the x2APIC ICR).
    pub const ICR_HIGH: u64 = 0x310;
}
/// DFR's model field (bits 31:28): flat.
const DFR_FLAT: u32 = 0xF;

/// How the guest reaches its APIC (IA32_APIC_BASE EN and EXTD).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApicMode {
    /// Globally disabled (EN clear).
    Disabled,
    /// xAPIC: the MMIO page.
    XApic,
    /// x2APIC: the MSRs.
    X2Apic,
}

/// Who an IPI goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Destination {
    /// One vCPU by APIC id.
    One(u32),
    /// The vCPUs whose logical id matches (each APIC decides:
    /// [`VLapic::accepts_logical`]).
    Logical(u32),
    /// The sender.
    Itself,
    /// Every vCPU of the domain.
    All,
    /// Every vCPU but the sender.
    AllButSelf,
}

/// What an ICR write asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IcrCommand {
    /// A fixed interrupt.
    Fixed {
        /// The vector.
        vector: u8,
        /// The targets.
        to: Destination,
    },
    /// INIT, level assert (resets the target; a STARTUP follows).
    Init {
        /// The targets.
        to: Destination,
    },
    /// An NMI (the vector is ignored; latched in each target's APIC:
    /// [`VLapic::request_nmi`]).
    Nmi {
        /// The targets.
        to: Destination,
    },
    /// INIT level de-assert (level-triggered, level bit clear): the 82489DX's
    /// arbitration-ID sync, which later APICs ignore; so does this one.
    InitDeassert,
    /// STARTUP with a vector (the start page).
    Startup {
        /// The vector.
        vector: u8,
        /// The targets.
        to: Destination,
    },
}

/// What a guest MSR write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteEffect {
    /// Nothing the glue needs to act on.
    None,
    /// The timer deadline changed (re-arm the host timer).
    TimerChanged,
    /// An IPI to send.
    Icr(IcrCommand),
    /// The guest ended `vector` (the I/O APIC's level entries wait for it).
    Eoi(u8),
}

/// Why an APIC MSR access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VlapicError {
    /// Not an APIC register this model has.
    UnknownRegister(u32),
    /// A read-only register was written.
    ReadOnly(u32),
    /// An ICR value this model does not implement (delivery mode).
    UnsupportedIcr(u64),
    /// An MSR access while the APIC is not in x2APIC mode.
    NotX2Apic(u32),
    /// An APIC base write the architecture refuses (a mode change it does
    /// not allow, a reserved bit, or a moved MMIO page).
    BadBase(u64),
    /// An APIC base write moving the register page over the guest's RAM.
    BaseOverRam(u64),
    /// An x2APIC MSR write with bits 63:32 set (only the ICR has them), or
    /// reserved bits of the self-IPI register.
    ReservedBits(u32, u64),
    /// A write-only register (the self-IPI register) was read.
    WriteOnly(u32),
}

impl core::fmt::Display for VlapicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::UnknownRegister(m) => write!(f, "no APIC register at MSR {m:#x}"),
            Self::ReadOnly(m) => write!(f, "APIC MSR {m:#x} is read-only"),
            Self::UnsupportedIcr(v) => write!(f, "unsupported ICR value {v:#x}"),
            Self::NotX2Apic(m) => write!(f, "APIC MSR {m:#x} accessed outside x2APIC mode"),
            Self::BadBase(v) => write!(f, "APIC base write {v:#x} refused"),
            Self::BaseOverRam(v) => write!(
                f,
                "APIC base write {v:#x} refused: the page would lie over the guest's RAM"
            ),
            Self::ReservedBits(m, v) => {
                write!(f, "APIC MSR {m:#x} write {v:#x} sets reserved bits")
            }
            Self::WriteOnly(m) => write!(f, "APIC MSR {m:#x} is write-only"),
        }
    }
}

/// One vCPU's virtual local APIC.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VLapic {
    id: u32,
    /// IA32_APIC_BASE.
    base: u64,
    /// xAPIC logical destination (bits 31:24 meaningful).
    ldr: u32,
    /// xAPIC destination format.
    dfr: u32,
    /// xAPIC ICR high half (the destination).
    icr_high: u32,
    /// The ICR's low half as last written (xAPIC reads it back).
    icr_low: u32,
    /// LVT entries other than the timer: thermal, performance, LINT0,
    /// LINT1, error (kept for the guest; the sources never fire).
    lvt_other: [u32; 5],
    irr: [u64; 4],
    isr: [u64; 4],
    tpr: u32,
    svr: u32,
    lvt_timer: u32,
    divide: u32,
    initial_count: u32,
    /// TSC value the timer fires at (0: not armed).
    deadline: u64,
    /// The TSC the one-shot/periodic count started at, for the current count.
    count_start: u64,
    /// The vector offered to the running guest through V_IRQ, which it
    /// may take at any instruction without an exit ([`VLapic::offer`]).
    offered: Option<u8>,
    /// The offered vector was requested again meanwhile: once the guest
    /// took the first, this second request is pending on its own.
    requested_again: bool,
    /// NMIs latched for delivery (`super::nmi`): at most
    /// [`MAX_LATCHED_NMIS`].
    nmis_latched: u8,
    /// The guest's TSC rate, kHz: the timer's deadlines are in TSC ticks,
    /// its counts in [`APIC_BUS_KHZ`] ticks.
    tsc_khz: u64,
}

/// The clock the one-shot and periodic timer counts (before its divider):
/// 100 MHz, the APIC timer clock of AMD's processors (the guests here are
/// SVM guests; the CPUID timing leaf says so), whatever the host's TSC
/// rate. Not the TSC rate: a count must not shrink on a faster host, since
/// guests written against real APICs (kvm-unit-tests' timer checks, which
/// do several exits between two reads of the current count) assume counts
/// of a bus clock's length.
pub const APIC_BUS_KHZ: u64 = 100_000;

/// The NMIs a vCPU's APIC holds for delivery. Hardware delivers an NMI as
/// it arrives unless one is in service, and then holds one more; the
/// hypervisor delivers only at the target's next entry, so two NMIs arriving
/// meanwhile (kvm-unit-tests' "multiple nmi": one to itself, one from
/// another vCPU) would merge where hardware delivers both. It keeps two, as
/// KVM's `process_nmi` does, and merges them to one when the target turns
/// out to be in an NMI handler ([`VLapic::merge_nmis_while_blocked`]).
pub const MAX_LATCHED_NMIS: u8 = 2;

/// x2APIC MSR of the processor-priority register (read-only).
const PPR: u32 = 0x80a;
/// x2APIC MSR of the first trigger-mode register.
const TMR0: u32 = 0x818;
/// x2APIC MSR of the self-IPI register (x2APIC mode only).
const SELF_IPI: u32 = 0x83f;

fn bit(vector: u8) -> (usize, u64) {
    (usize::from(vector / 64), 1 << (vector % 64))
}

fn highest(set: &[u64; 4]) -> Option<u8> {
    (0..4)
        .rev()
        .find(|&w| set[w] != 0)
        .map(|w| (w * 64 + 63 - set[w].leading_zeros() as usize) as u8)
}

impl VLapic {
    /// The APIC of the vCPU with x2APIC id `id`, as after reset (timer
    /// masked, software-disabled), in x2APIC mode (the test guest's boot
    /// ABI); vCPU 0 is the bootstrap processor.
    pub fn new(id: u32) -> Self {
        Self::with_mode(id, ApicMode::X2Apic)
    }

    /// The same in `mode` (a PC's firmware hands over in xAPIC mode).
    pub fn with_mode(id: u32, mode: ApicMode) -> Self {
        let enable = match mode {
            ApicMode::Disabled => 0,
            ApicMode::XApic => BASE_EN,
            ApicMode::X2Apic => BASE_EN | BASE_EXTD,
        };
        Self {
            id,
            base: XAPIC_BASE | enable | if id == 0 { BASE_BSP } else { 0 },
            ldr: 0,
            dfr: u32::MAX,
            icr_high: 0,
            icr_low: 0,
            lvt_other: [LVT_MASKED; 5],
            irr: [0; 4],
            isr: [0; 4],
            tpr: 0,
            svr: 0xff,
            lvt_timer: LVT_MASKED,
            divide: 0,
            initial_count: 0,
            deadline: 0,
            count_start: 0,
            offered: None,
            requested_again: false,
            nmis_latched: 0,
            tsc_khz: APIC_BUS_KHZ,
        }
    }

    /// The same with the guest's TSC running at `tsc_khz` (without this,
    /// the TSC is taken to run at the bus clock: one count, one tick).
    pub fn with_tsc_khz(self, tsc_khz: u64) -> Self {
        Self {
            tsc_khz: tsc_khz.max(1),
            ..self
        }
    }

    /// TSC ticks for `counts` timer counts (at the current divider).
    fn counts_to_tsc(&self, counts: u64) -> u64 {
        let ticks = u128::from(counts) * u128::from(self.divisor()) * u128::from(self.tsc_khz)
            / u128::from(APIC_BUS_KHZ);
        u64::try_from(ticks).unwrap_or(u64::MAX)
    }

    /// Timer counts in `ticks` TSC ticks (at the current divider).
    fn tsc_to_counts(&self, ticks: u64) -> u64 {
        let counts = u128::from(ticks) * u128::from(APIC_BUS_KHZ)
            / (u128::from(self.tsc_khz) * u128::from(self.divisor()));
        u64::try_from(counts).unwrap_or(u64::MAX)
    }

    /// Its x2APIC id.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// Its state after an INIT: everything reset but the id and the APIC
    /// base MSR (the mode stays).
    pub fn after_init(&self) -> Self {
        Self {
            base: self.base,
            ..self.reset()
        }
    }

    /// Everything back to power-on, software- and globally disabled, but
    /// what belongs to the vCPU rather than to the APIC's state: its id and
    /// its TSC rate (the timer's clock).
    fn reset(&self) -> Self {
        Self::with_mode(self.id, ApicMode::Disabled).with_tsc_khz(self.tsc_khz)
    }

    /// The mode IA32_APIC_BASE selects.
    pub fn mode(&self) -> ApicMode {
        match (self.base & BASE_EN != 0, self.base & BASE_EXTD != 0) {
            (false, _) => ApicMode::Disabled,
            (true, false) => ApicMode::XApic,
            (true, true) => ApicMode::X2Apic,
        }
    }

    /// IA32_APIC_BASE as the guest reads it.
    pub fn base(&self) -> u64 {
        self.base
    }

    /// The guest-physical page of its xAPIC registers (IA32_APIC_BASE's
    /// address, [`XAPIC_BASE`] unless the guest moved it).
    pub fn mmio_page(&self) -> u64 {
        self.base & BASE_ADDRESS
    }

    /// Whether `gpa` falls in its xAPIC register page.
    pub fn claims(&self, gpa: u64) -> bool {
        (self.mmio_page()..self.mmio_page() + XAPIC_SIZE).contains(&gpa)
    }

    /// A guest write of IA32_APIC_BASE: the mode changes the architecture
    /// allows (Intel SDM vol. 3A 11.12.5: disabled to xAPIC, xAPIC to
    /// x2APIC, either to disabled); the BSP bit is read-only; the page may
    /// move anywhere below 2^36 (the glue refuses a page over the guest's
    /// RAM, which its nested tables map). Disabling resets the APIC (but its
    /// id and page).
    pub fn set_base(&mut self, value: u64) -> Result<(), VlapicError> {
        let refused = Err(VlapicError::BadBase(value));
        if value & !(BASE_BSP | BASE_EXTD | BASE_EN | BASE_ADDRESS) != 0 {
            return refused;
        }
        let wanted = match (value & BASE_EN != 0, value & BASE_EXTD != 0) {
            (false, false) => ApicMode::Disabled,
            (true, false) => ApicMode::XApic,
            (true, true) => ApicMode::X2Apic,
            (false, true) => return refused,
        };
        let allowed = matches!(
            (self.mode(), wanted),
            (a, b) if a == b
        ) || matches!(
            (self.mode(), wanted),
            (ApicMode::Disabled, ApicMode::XApic)
                | (ApicMode::XApic, ApicMode::X2Apic)
                | (_, ApicMode::Disabled)
        );
        if !allowed {
            return refused;
        }
        let bsp = self.base & BASE_BSP;
        if wanted == ApicMode::Disabled && self.mode() != ApicMode::Disabled {
            *self = self.reset();
        }
        self.base = (value & !BASE_BSP) | bsp;
        Ok(())
    }

    /// [`VLapic::set_base`] for a guest whose RAM is its first `ram_bytes`
    /// of guest-physical space: a page moved over that RAM is refused, since
    /// the nested tables map RAM there and the guest would reach RAM, not
    /// its APIC (KVM lets the APIC page hide RAM; here the guest gets #GP
    /// and a warning instead of silently losing its APIC).
    pub fn set_base_outside(&mut self, value: u64, ram_bytes: u64) -> Result<(), VlapicError> {
        if value & BASE_ADDRESS < ram_bytes {
            return Err(VlapicError::BaseOverRam(value));
        }
        self.set_base(value)
    }

    /// Whether this APIC takes an IPI or I/O APIC message to logical
    /// destination `destination` (SDM vol. 3A 11.6.2.2): in x2APIC mode by
    /// cluster and bit of its derived logical id, in xAPIC mode by the
    /// guest's LDR under the flat or cluster model of its DFR.
    pub fn accepts_logical(&self, destination: u32) -> bool {
        match self.mode() {
            ApicMode::Disabled => false,
            ApicMode::X2Apic => {
                let ldr = self.x2apic_ldr();
                destination == u32::MAX
                    || (destination >> 16 == ldr >> 16 && destination & ldr & 0xffff != 0)
            }
            ApicMode::XApic => {
                let mask = destination & 0xff;
                let logical = self.ldr >> 24;
                if mask == 0xff {
                    true
                } else if self.dfr >> 28 == DFR_FLAT {
                    mask & logical != 0
                } else {
                    mask >> 4 == logical >> 4 && mask & logical & 0xf != 0
                }
            }
        }
    }

    /// Whether physical destination `destination` names this APIC (or all:
    /// 0xFF in xAPIC mode, 0xFFFFFFFF in x2APIC mode).
    pub fn accepts_physical(&self, destination: u32) -> bool {
        match self.mode() {
            ApicMode::Disabled => false,
            ApicMode::XApic => destination & 0xff == 0xff || destination & 0xff == self.id,
            ApicMode::X2Apic => destination == u32::MAX || destination == self.id,
        }
    }

    /// The x2APIC logical id: cluster = id / 16, bit id % 16.
    fn x2apic_ldr(&self) -> u32 {
        ((self.id >> 4) << 16) | (1 << (self.id & 0xf))
    }

    /// A 32-bit read at `offset` of the xAPIC page; `tsc` is the guest's
    /// TSC now. Outside xAPIC mode the page reads as all ones.
    pub fn read_mmio(&self, offset: u64, tsc: u64) -> Result<u32, VlapicError> {
        if self.mode() != ApicMode::XApic {
            return Ok(u32::MAX);
        }
        Ok(match offset {
            o if o == mmio_offset(msr::ID) => self.id << 24,
            o if o == mmio_offset(msr::LDR) => self.ldr,
            xapic::DFR => self.dfr,
            o if o == mmio_offset(msr::ICR) => self.icr_low,
            xapic::ICR_HIGH => self.icr_high,
            o => self.read_register(mmio_register(o)?, tsc)? as u32,
        })
    }

    /// A 32-bit write at `offset` of the xAPIC page. Outside xAPIC mode it
    /// is ignored.
    pub fn write_mmio(
        &mut self,
        offset: u64,
        value: u32,
        tsc: u64,
    ) -> Result<WriteEffect, VlapicError> {
        if self.mode() != ApicMode::XApic {
            return Ok(WriteEffect::None);
        }
        match offset {
            o if o == mmio_offset(msr::LDR) => self.ldr = value & 0xff00_0000,
            xapic::DFR => self.dfr = value | 0x0fff_ffff,
            xapic::ICR_HIGH => self.icr_high = value & 0xff00_0000,
            o if o == mmio_offset(msr::ICR) => {
                self.icr_low = value;
                let full = u64::from(self.icr_high >> 24) << 32 | u64::from(value);
                return decode_icr(full, ApicMode::XApic).map(WriteEffect::Icr);
            }
            // The id is read-only here (a guest may not renumber itself).
            o if o == mmio_offset(msr::ID) => {}
            o => return self.write_register(mmio_register(o)?, u64::from(value), tsc),
        }
        Ok(WriteEffect::None)
    }

    /// Reads APIC MSR `number` in x2APIC mode; `tsc` is the guest's TSC now.
    pub fn read(&self, number: u32, tsc: u64) -> Result<u64, VlapicError> {
        // IA32_TSC_DEADLINE is an MSR in both modes.
        if number == msr::TSC_DEADLINE && self.mode() != ApicMode::Disabled {
            return self.read_register(number, tsc);
        }
        if self.mode() != ApicMode::X2Apic {
            return Err(VlapicError::NotX2Apic(number));
        }
        match number {
            msr::ID => Ok(u64::from(self.id)),
            msr::LDR => Ok(u64::from(self.x2apic_ldr())),
            msr::ICR => Ok((u64::from(self.icr_high) << 32) | u64::from(self.icr_low)),
            SELF_IPI => Err(VlapicError::WriteOnly(number)),
            n => self.read_register(n, tsc),
        }
    }

    /// Writes APIC MSR `number` in x2APIC mode; `tsc` is the guest's TSC now.
    pub fn write(&mut self, number: u32, value: u64, tsc: u64) -> Result<WriteEffect, VlapicError> {
        if number == msr::TSC_DEADLINE && self.mode() != ApicMode::Disabled {
            return self.write_register(number, value, tsc);
        }
        if self.mode() != ApicMode::X2Apic {
            return Err(VlapicError::NotX2Apic(number));
        }
        match number {
            msr::ICR => {
                let command = decode_icr(value, ApicMode::X2Apic)?;
                // Read back as written (delivery is never pending here).
                self.icr_low = value as u32;
                self.icr_high = (value >> 32) as u32;
                Ok(WriteEffect::Icr(command))
            }
            // The self-IPI register: a fixed IPI to itself (bits 31:8
            // reserved).
            SELF_IPI if value >> 8 != 0 => Err(VlapicError::ReservedBits(number, value)),
            SELF_IPI => Ok(WriteEffect::Icr(IcrCommand::Fixed {
                vector: value as u8,
                to: Destination::Itself,
            })),
            msr::ID | msr::LDR | PPR => Err(VlapicError::ReadOnly(number)),
            n if n != msr::TSC_DEADLINE && value >> 32 != 0 => {
                Err(VlapicError::ReservedBits(n, value))
            }
            n => self.write_register(n, value, tsc),
        }
    }

    fn timer_mode(&self) -> u32 {
        (self.lvt_timer >> TIMER_MODE_SHIFT) & 0b11
    }

    /// The divide register as a divisor (1..=128).
    fn divisor(&self) -> u64 {
        let code = (self.divide & 0b11) | ((self.divide >> 1) & 0b100);
        if code == 0b111 { 1 } else { 2 << code }
    }

    /// Reads register `number` (by its x2APIC MSR number) of those both
    /// modes share.
    fn read_register(&self, number: u32, tsc: u64) -> Result<u64, VlapicError> {
        Ok(match number {
            msr::VERSION => VERSION,
            msr::TPR => u64::from(self.tpr),
            PPR => u64::from(self.processor_priority()),
            // Every interrupt here is edge-triggered.
            n if (TMR0..TMR0 + 8).contains(&n) => 0,
            msr::SVR => u64::from(self.svr),
            // Errors are never latched (nothing here raises one).
            ESR => 0,
            n if (LVT_THERMAL..=LVT_ERROR).contains(&n) => {
                u64::from(self.lvt_other[(n - LVT_THERMAL) as usize])
            }
            n if (msr::ISR0..msr::ISR0 + 8).contains(&n) => {
                let i = (n - msr::ISR0) as usize;
                (self.isr[i / 2] >> (32 * (i % 2))) & 0xffff_ffff
            }
            n if (msr::IRR0..msr::IRR0 + 8).contains(&n) => {
                let i = (n - msr::IRR0) as usize;
                (self.irr[i / 2] >> (32 * (i % 2))) & 0xffff_ffff
            }
            msr::LVT_TIMER => u64::from(self.lvt_timer),
            msr::TIMER_INITIAL => u64::from(self.initial_count),
            msr::TIMER_CURRENT => {
                if self.deadline == 0 || self.timer_mode() == TIMER_TSC_DEADLINE {
                    0
                } else if tsc >= self.deadline && self.timer_mode() == TIMER_PERIODIC {
                    // Past its end and not polled yet: a periodic count has
                    // reloaded and counts down again.
                    let period = self.counts_to_tsc(u64::from(self.initial_count)).max(1);
                    self.tsc_to_counts(period - (tsc - self.deadline) % period)
                } else {
                    self.tsc_to_counts(self.deadline.saturating_sub(tsc))
                }
            }
            msr::TIMER_DIVIDE => u64::from(self.divide),
            msr::TSC_DEADLINE => {
                if self.timer_mode() == TIMER_TSC_DEADLINE {
                    self.deadline
                } else {
                    0
                }
            }
            n => return Err(VlapicError::UnknownRegister(n)),
        })
    }

    /// Writes register `number` (by its x2APIC MSR number) of those both
    /// modes share.
    fn write_register(
        &mut self,
        number: u32,
        value: u64,
        tsc: u64,
    ) -> Result<WriteEffect, VlapicError> {
        let low = value as u32;
        match number {
            msr::TPR => self.tpr = low & 0xff,
            msr::EOI => {
                if let Some(vector) = self.eoi() {
                    return Ok(WriteEffect::Eoi(vector));
                }
            }
            msr::SVR => self.svr = low & 0x1ff,
            // A write arms the error latch, which stays empty.
            ESR => {}
            n if (LVT_THERMAL..=LVT_ERROR).contains(&n) => {
                self.lvt_other[(n - LVT_THERMAL) as usize] = low & LVT_WRITABLE;
            }
            msr::LVT_TIMER => {
                let old_mode = self.timer_mode();
                self.lvt_timer = low & (0xff | LVT_MASKED | (0b11 << TIMER_MODE_SHIFT));
                // Into or out of TSC-deadline mode the timer stops (and the
                // initial count clears, as KVM's apic_update_lvtt does);
                // between one-shot and periodic the count goes on from where
                // it is, and its end reloads it only in periodic mode.
                if (self.timer_mode() == TIMER_TSC_DEADLINE) != (old_mode == TIMER_TSC_DEADLINE) {
                    self.deadline = 0;
                    self.initial_count = 0;
                }
                return Ok(WriteEffect::TimerChanged);
            }
            msr::TIMER_INITIAL => {
                if self.timer_mode() == TIMER_TSC_DEADLINE {
                    return Ok(WriteEffect::None);
                }
                self.initial_count = low;
                self.count_start = tsc;
                self.deadline = if low == 0 {
                    0
                } else {
                    tsc.saturating_add(self.counts_to_tsc(u64::from(low)))
                        .max(1)
                };
                return Ok(WriteEffect::TimerChanged);
            }
            msr::TIMER_DIVIDE => self.divide = low & 0b1011,
            msr::TSC_DEADLINE => {
                if self.timer_mode() == TIMER_TSC_DEADLINE {
                    self.deadline = value;
                    return Ok(WriteEffect::TimerChanged);
                }
            }
            msr::VERSION | msr::TIMER_CURRENT => {
                return Err(VlapicError::ReadOnly(number));
            }
            n if (msr::ISR0..msr::ISR0 + 8).contains(&n)
                || (msr::IRR0..msr::IRR0 + 8).contains(&n) =>
            {
                return Err(VlapicError::ReadOnly(number));
            }
            n => return Err(VlapicError::UnknownRegister(n)),
        }
        Ok(WriteEffect::None)
    }

    /// When the timer fires (guest TSC), if armed and unmasked.
    pub fn timer_deadline(&self) -> Option<u64> {
        (self.deadline != 0 && self.lvt_timer & LVT_MASKED == 0).then_some(self.deadline)
    }

    /// Fires the timer if its deadline has passed: its vector becomes
    /// pending; a periodic timer re-arms. Returns whether it fired.
    pub fn poll_timer(&mut self, tsc: u64) -> bool {
        if self.deadline == 0 || tsc < self.deadline {
            return false;
        }
        let vector = (self.lvt_timer & 0xff) as u8;
        let masked = self.lvt_timer & LVT_MASKED != 0;
        self.deadline = if self.timer_mode() == TIMER_PERIODIC && self.initial_count != 0 {
            let period = self.counts_to_tsc(u64::from(self.initial_count)).max(1);
            // Skip missed periods instead of firing a burst.
            let missed = (tsc - self.deadline) / period;
            self.deadline + (missed + 1) * period
        } else {
            0
        };
        if masked {
            return false;
        }
        self.accept(vector);
        true
    }

    /// Makes `vector` pending (an IPI or a device interrupt). Vectors below
    /// 16 are illegal and dropped.
    pub fn accept(&mut self, vector: u8) {
        if vector < 16 {
            return;
        }
        let (word, mask) = bit(vector);
        if self.offered == Some(vector) {
            // The guest may have taken the offer already, which moves this
            // vector from IRR to ISR only at the next exit: without this, a
            // second IPI of the same vector in that window merges with the
            // first and is lost (a hardware APIC clears the IRR bit at
            // delivery, so the second sets it again).
            self.requested_again = true;
        }
        self.irr[word] |= mask;
    }

    /// `vector` (from [`VLapic::pending`]) is offered to the guest at its
    /// next entry, which takes it whenever its RFLAGS.IF allows, without an
    /// exit; [`VLapic::offer_ended`] says at the following exit whether it
    /// did.
    pub fn offer(&mut self, vector: u8) {
        self.offered = Some(vector);
        self.requested_again = false;
    }

    /// The guest exited after an [`VLapic::offer`]: `taken` if it took the
    /// vector (it is in service now, and pending again if requested again
    /// meanwhile), else the offer is withdrawn (the vector stays requested
    /// once, as two requests before a delivery merge on hardware).
    pub fn offer_ended(&mut self, taken: bool) {
        let Some(vector) = self.offered.take() else {
            return;
        };
        if taken {
            self.acknowledge(vector);
            if self.requested_again {
                let (word, mask) = bit(vector);
                self.irr[word] |= mask;
            }
        }
        self.requested_again = false;
    }

    /// The vector to deliver now: the highest requested one whose priority
    /// class is above both the in-service one and the TPR's.
    pub fn pending(&self) -> Option<u8> {
        let candidate = highest(&self.irr)?;
        let in_service = highest(&self.isr).map_or(0, |v| v >> 4);
        let class = candidate >> 4;
        (class > in_service && u32::from(class) > self.tpr >> 4).then_some(candidate)
    }

    /// Whether any interrupt is requested (whatever its priority): what wakes
    /// a halted vCPU.
    pub fn has_requested(&self) -> bool {
        self.irr.iter().any(|&w| w != 0)
    }

    /// An NMI for this vCPU (an ICR or I/O APIC message with delivery mode
    /// NMI): latched until delivered, at most [`MAX_LATCHED_NMIS`] of them
    /// (more are lost, as on hardware).
    pub fn request_nmi(&mut self) {
        self.nmis_latched = (self.nmis_latched + 1).min(MAX_LATCHED_NMIS);
    }

    /// Whether an NMI is latched (what also wakes a vCPU halted with
    /// interrupts disabled).
    pub fn nmi_latched(&self) -> bool {
        self.nmis_latched > 0
    }

    /// One latched NMI goes to the guest now.
    pub fn take_nmi(&mut self) {
        self.nmis_latched = self.nmis_latched.saturating_sub(1);
    }

    /// While an NMI handler runs, hardware holds one more NMI, not two:
    /// the latched ones beyond one merge.
    pub fn merge_nmis_while_blocked(&mut self) {
        self.nmis_latched = self.nmis_latched.min(1);
    }

    /// The guest took `vector`: requested becomes in service.
    pub fn acknowledge(&mut self, vector: u8) {
        let (word, mask) = bit(vector);
        self.irr[word] &= !mask;
        self.isr[word] |= mask;
    }

    /// End of interrupt: the highest in-service vector is done; returns it.
    pub fn eoi(&mut self) -> Option<u8> {
        let vector = highest(&self.isr)?;
        let (word, mask) = bit(vector);
        self.isr[word] &= !mask;
        Some(vector)
    }

    /// The highest in-service and requested vectors (tests, diagnostics).
    pub fn highest_in_service_and_requested(&self) -> (Option<u8>, Option<u8>) {
        (highest(&self.isr), highest(&self.irr))
    }

    /// The processor priority (SDM vol. 3A 11.8.3.1): the higher of the
    /// TPR's class and the highest in-service vector's, with the TPR's low
    /// bits when the TPR's class is the higher.
    fn processor_priority(&self) -> u32 {
        let in_service = highest(&self.isr).map_or(0, |v| u32::from(v) & 0xf0);
        if self.tpr & 0xf0 >= in_service {
            self.tpr & 0xff
        } else {
            in_service
        }
    }

    /// The task-priority class (TPR bits 7:4): what the guest's CR8 reads.
    pub fn task_priority_class(&self) -> u8 {
        (self.tpr >> 4) as u8
    }

    /// A guest write of CR8 (`class`, 4 bits): TPR bits 7:4, bits 3:0
    /// cleared, as the SDM ties CR8 to the TPR (Intel SDM vol. 3, 10.8.6.1;
    /// AMD APM vol. 2, 16.6.4).
    pub fn set_task_priority_class(&mut self, class: u8) {
        self.tpr = u32::from(class & 0xf) << 4;
    }

    /// Whether the guest enabled its APIC (SVR bit 8).
    pub fn enabled(&self) -> bool {
        self.svr & SVR_ENABLED != 0
    }
}

/// The x2APIC MSR of the register at xAPIC offset `offset` (16-byte
/// aligned registers only).
fn mmio_register(offset: u64) -> Result<u32, VlapicError> {
    if !offset.is_multiple_of(16) || offset >= XAPIC_SIZE {
        return Err(VlapicError::UnknownRegister(offset as u32));
    }
    Ok(0x800 + (offset / 16) as u32)
}

/// The xAPIC offset of the register at x2APIC MSR `number`.
const fn mmio_offset(number: u32) -> u64 {
    ((number - 0x800) as u64) * 16
}

/// Error status register.
const ESR: u32 = 0x828;
/// The LVT bits a guest may set: vector, delivery mode, polarity, trigger
/// mode, mask (delivery status and remote IRR are the APIC's).
const LVT_WRITABLE: u32 = 0xff | 0b111 << 8 | 1 << 13 | 1 << 15 | LVT_MASKED;
/// The first and last of the other LVT entries (thermal .. error).
const LVT_THERMAL: u32 = 0x833;
const LVT_ERROR: u32 = 0x837;

/// Decodes an ICR write (Intel SDM 11.6.1, 11.12.9): vector[7:0], delivery
/// mode[10:8], destination mode[11], level[14], trigger mode[15],
/// shorthand[19:18], destination[63:32] (in xAPIC `mode`, the 8 bits the
/// high half's 31:24 hold, already shifted down by the caller).
pub fn decode_icr(value: u64, mode: ApicMode) -> Result<IcrCommand, VlapicError> {
    let vector = value as u8;
    let delivery = (value >> 8) & 0b111;
    let logical = value & (1 << 11) != 0;
    let destination = (value >> 32) as u32;
    let broadcast = match mode {
        ApicMode::X2Apic => u32::MAX,
        _ => 0xff,
    };
    let to = match (value >> 18) & 0b11 {
        0 if logical => Destination::Logical(destination),
        0 if destination == broadcast => Destination::All,
        0 => Destination::One(destination),
        1 => Destination::Itself,
        2 => Destination::All,
        _ => Destination::AllButSelf,
    };
    match delivery {
        0b000 => Ok(IcrCommand::Fixed { vector, to }),
        0b100 => Ok(IcrCommand::Nmi { to }),
        0b101 if value & ICR_LEVEL_ASSERT == 0 && value & ICR_TRIGGER_LEVEL != 0 => {
            Ok(IcrCommand::InitDeassert)
        }
        0b101 => Ok(IcrCommand::Init { to }),
        0b110 => Ok(IcrCommand::Startup { vector, to }),
        _ => Err(VlapicError::UnsupportedIcr(value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ApicMode::{Disabled, X2Apic, XApic};

    #[test]
    fn x2apic_msrs_check_reserved_bits_and_read_the_processor_priority() {
        let mut apic = VLapic::new(0);
        assert_eq!(
            apic.write(msr::TPR, u64::MAX, 0),
            Err(VlapicError::ReservedBits(msr::TPR, u64::MAX))
        );
        apic.write(msr::TPR, 0x25, 0).unwrap();
        assert_eq!(
            apic.read(PPR, 0),
            Ok(0x25),
            "the TPR's when it is the higher"
        );
        apic.accept(0x41);
        apic.acknowledge(0x41);
        assert_eq!(
            apic.read(PPR, 0),
            Ok(0x40),
            "the in-service class otherwise"
        );
        assert_eq!(apic.write(PPR, 0, 0), Err(VlapicError::ReadOnly(PPR)));
        assert_eq!(apic.read(TMR0 + 7, 0), Ok(0));
        // The ICR reads back; the self-IPI register is write-only, its
        // bits 31:8 reserved.
        let icr = (1u64 << 32) | 0x4020;
        assert!(matches!(
            apic.write(msr::ICR, icr, 0),
            Ok(WriteEffect::Icr(_))
        ));
        assert_eq!(apic.read(msr::ICR, 0), Ok(icr));
        assert_eq!(
            apic.write(SELF_IPI, 0x31, 0),
            Ok(WriteEffect::Icr(IcrCommand::Fixed {
                vector: 0x31,
                to: Destination::Itself
            }))
        );
        assert_eq!(
            apic.write(SELF_IPI, 0x100, 0),
            Err(VlapicError::ReservedBits(SELF_IPI, 0x100))
        );
        assert_eq!(
            apic.read(SELF_IPI, 0),
            Err(VlapicError::WriteOnly(SELF_IPI))
        );
    }

    #[test]
    fn an_ipi_repeated_after_the_guest_took_the_offer_is_delivered_again() {
        let mut apic = VLapic::new(1);
        apic.accept(0x20);
        assert_eq!(apic.pending(), Some(0x20));
        apic.offer(0x20);
        // The guest takes 0x20 and runs its handler; the sender, seeing
        // the handler's flag, sends 0x20 again before the next exit.
        apic.accept(0x20);
        apic.offer_ended(true);
        assert_eq!(
            apic.highest_in_service_and_requested(),
            (Some(0x20), Some(0x20)),
            "in service and requested again"
        );
        assert_eq!(apic.pending(), None, "held back by the one in service");
        assert_eq!(apic.eoi(), Some(0x20));
        assert_eq!(apic.pending(), Some(0x20), "the second IPI is not lost");
        apic.offer(0x20);
        apic.offer_ended(true);
        assert_eq!(apic.eoi(), Some(0x20));
        assert_eq!(
            apic.pending(),
            None,
            "delivered twice for two IPIs, not more"
        );
    }

    #[test]
    fn requests_before_the_guest_takes_an_offer_merge_as_on_hardware() {
        let mut apic = VLapic::new(1);
        apic.accept(0x30);
        apic.offer(0x30);
        apic.accept(0x30);
        // Not taken (interrupts off): withdrawn, requested once.
        apic.offer_ended(false);
        assert_eq!(apic.highest_in_service_and_requested(), (None, Some(0x30)));
        apic.offer(0x30);
        apic.offer_ended(true);
        assert_eq!(apic.eoi(), Some(0x30));
        assert_eq!(apic.pending(), None);
        // Another vector meanwhile changes nothing for the offered one.
        apic.accept(0x40);
        apic.offer(0x40);
        apic.accept(0x50);
        apic.offer_ended(true);
        assert_eq!(
            apic.highest_in_service_and_requested(),
            (Some(0x40), Some(0x50))
        );
    }

    #[test]
    fn interrupts_are_delivered_by_priority_and_ended_by_eoi() {
        let mut apic = VLapic::new(3);
        assert_eq!(apic.pending(), None);
        apic.accept(0x31);
        apic.accept(0x52);
        assert_eq!(apic.pending(), Some(0x52));
        apic.acknowledge(0x52);
        // 0x31 is of a lower class than the one in service.
        assert_eq!(apic.pending(), None);
        assert!(apic.has_requested());
        apic.accept(0x61);
        assert_eq!(apic.pending(), Some(0x61));
        apic.acknowledge(0x61);
        apic.eoi();
        apic.eoi();
        assert_eq!(apic.pending(), Some(0x31));
        apic.acknowledge(0x31);
        apic.eoi();
        assert_eq!(apic.pending(), None);
        assert!(!apic.has_requested());
        // Illegal vectors are dropped; the TPR holds back low classes.
        apic.accept(3);
        assert!(!apic.has_requested());
        apic.write(msr::TPR, 0x40, 0).unwrap();
        apic.accept(0x45);
        assert_eq!(apic.pending(), None);
        apic.accept(0x50);
        assert_eq!(apic.pending(), Some(0x50));
    }

    #[test]
    fn registers_read_back_and_read_only_ones_refuse_writes() {
        let mut apic = VLapic::new(5);
        assert_eq!(apic.read(msr::ID, 0), Ok(5));
        assert_eq!(apic.read(msr::LDR, 0), Ok(1 << 5));
        assert_eq!(
            apic.write(msr::ID, 1, 0),
            Err(VlapicError::ReadOnly(msr::ID))
        );
        assert_eq!(
            apic.write(0x8ff, 1, 0),
            Err(VlapicError::UnknownRegister(0x8ff))
        );
        apic.write(msr::SVR, 0x1ff, 0).unwrap();
        assert!(apic.enabled());
        apic.accept(0x40);
        assert_eq!(apic.read(msr::IRR0 + 2, 0), Ok(1));
        apic.acknowledge(0x40);
        assert_eq!(apic.read(msr::ISR0 + 2, 0), Ok(1));
        assert_eq!(apic.read(msr::IRR0 + 2, 0), Ok(0));
    }

    #[test]
    fn the_timer_counts_a_100_mhz_bus_whatever_the_tsc_rate() {
        // A 3 GHz TSC: one count at divide-by-1 is 30 ticks, at divide-by-2 60.
        let mut apic = VLapic::new(0).with_tsc_khz(3_000_000);
        apic.write(msr::TIMER_DIVIDE, 0b1011, 0).unwrap();
        apic.write(msr::LVT_TIMER, 0x31, 0).unwrap();
        apic.write(msr::TIMER_INITIAL, 1000, 100).unwrap();
        assert_eq!(apic.timer_deadline(), Some(30_100));
        assert_eq!(apic.read(msr::TIMER_CURRENT, 15_100), Ok(500));
        apic.write(msr::TIMER_DIVIDE, 0b0000, 0).unwrap();
        apic.write(msr::TIMER_INITIAL, 1000, 0).unwrap();
        assert_eq!(apic.timer_deadline(), Some(60_000));
        assert_eq!(
            apic.after_init().with_tsc_khz(3_000_000),
            apic.after_init(),
            "an INIT keeps the TSC rate"
        );
        // So does disabling the APIC through its base MSR (which resets it).
        apic.set_base(XAPIC_BASE).unwrap();
        apic.set_base(XAPIC_BASE | BASE_EN | BASE_EXTD).unwrap_err();
        apic.set_base(XAPIC_BASE | BASE_EN).unwrap();
        apic.set_base(XAPIC_BASE | BASE_EN | BASE_EXTD).unwrap();
        apic.write(msr::TIMER_DIVIDE, 0b1011, 0).unwrap();
        apic.write(msr::LVT_TIMER, 0x31, 0).unwrap();
        apic.write(msr::TIMER_INITIAL, 1000, 0).unwrap();
        assert_eq!(apic.timer_deadline(), Some(30_000));
    }

    #[test]
    fn changing_between_one_shot_and_periodic_keeps_the_count() {
        // kvm-unit-tests' apic "change mode" checks, divide by 1.
        let mut apic = VLapic::new(0);
        apic.write(msr::TIMER_DIVIDE, 0b1011, 0).unwrap();
        apic.write(msr::LVT_TIMER, 0x31, 0).unwrap(); // one-shot
        apic.write(msr::TIMER_INITIAL, 1000, 0).unwrap();
        apic.write(msr::LVT_TIMER, 0x31 | (1 << 17), 600).unwrap(); // periodic
        assert_eq!(apic.read(msr::TIMER_CURRENT, 600), Ok(400), "not reset");
        assert_eq!(apic.timer_deadline(), Some(1000));
        // Past its end, before any poll: reloaded and counting again.
        assert_eq!(apic.read(msr::TIMER_CURRENT, 1100), Ok(900));
        assert!(apic.poll_timer(1100));
        assert_eq!(apic.timer_deadline(), Some(2000));
        // Back to one-shot: the count goes on; it ends at zero.
        apic.write(msr::LVT_TIMER, 0x31, 1500).unwrap();
        assert_eq!(apic.read(msr::TIMER_CURRENT, 1500), Ok(500));
        assert!(apic.poll_timer(2000));
        assert_eq!(apic.read(msr::TIMER_CURRENT, 2100), Ok(0));
        // Expired, then periodic: it stays at zero.
        apic.write(msr::LVT_TIMER, 0x31 | (1 << 17), 2200).unwrap();
        assert_eq!(apic.read(msr::TIMER_CURRENT, 2300), Ok(0));
        // Into TSC-deadline mode the timer stops and the count clears.
        apic.write(msr::TIMER_INITIAL, 1000, 3000).unwrap();
        apic.write(msr::LVT_TIMER, 0x31 | (2 << 17), 3100).unwrap();
        assert_eq!(apic.timer_deadline(), None);
        assert_eq!(apic.read(msr::TIMER_INITIAL, 3100), Ok(0));
    }

    #[test]
    fn the_tsc_deadline_timer_fires_once() {
        let mut apic = VLapic::new(0);
        // Deadline mode, vector 0x30, unmasked.
        let effect = apic.write(msr::LVT_TIMER, 0x30 | (2 << 17), 0).unwrap();
        assert_eq!(effect, WriteEffect::TimerChanged);
        apic.write(msr::TSC_DEADLINE, 1000, 0).unwrap();
        assert_eq!(apic.timer_deadline(), Some(1000));
        assert_eq!(apic.read(msr::TSC_DEADLINE, 0), Ok(1000));
        assert!(!apic.poll_timer(999));
        assert!(apic.poll_timer(1000));
        assert_eq!(apic.pending(), Some(0x30));
        assert_eq!(apic.timer_deadline(), None);
        assert!(!apic.poll_timer(5000));
    }

    #[test]
    fn one_shot_and_periodic_timers_count_divided_tsc_ticks() {
        let mut apic = VLapic::new(0);
        apic.write(msr::TIMER_DIVIDE, 0b0011, 0).unwrap(); // divide by 16
        apic.write(msr::LVT_TIMER, 0x31, 0).unwrap(); // one-shot
        apic.write(msr::TIMER_INITIAL, 10, 100).unwrap();
        assert_eq!(apic.timer_deadline(), Some(260));
        assert_eq!(apic.read(msr::TIMER_CURRENT, 180), Ok(5));
        assert!(apic.poll_timer(260));
        assert_eq!(apic.timer_deadline(), None);
        apic.write(msr::LVT_TIMER, 0x31 | (1 << 17), 0).unwrap(); // periodic
        apic.write(msr::TIMER_INITIAL, 10, 0).unwrap();
        assert!(apic.poll_timer(160));
        assert_eq!(apic.timer_deadline(), Some(320));
        // Late by two periods: the next deadline is the next period boundary.
        assert!(apic.poll_timer(500));
        assert_eq!(apic.timer_deadline(), Some(640));
        // Masked: no interrupt, still counts.
        apic.write(msr::LVT_TIMER, 0x31 | (1 << 17) | u64::from(LVT_MASKED), 0)
            .unwrap();
        assert_eq!(apic.timer_deadline(), None);
    }

    #[test]
    fn icr_values_decode_into_commands() {
        let x2 = |value: u64| decode_icr(value, X2Apic);
        assert_eq!(
            x2(0x0000_0002_0000_00f0),
            Ok(IcrCommand::Fixed {
                vector: 0xf0,
                to: Destination::One(2)
            })
        );
        assert_eq!(
            x2(0x4500 | (1 << 32)),
            Ok(IcrCommand::Init {
                to: Destination::One(1)
            })
        );
        assert_eq!(
            x2(0x0608 | (3 << 32)),
            Ok(IcrCommand::Startup {
                vector: 8,
                to: Destination::One(3)
            })
        );
        assert_eq!(
            x2(0x40 | (3 << 18)),
            Ok(IcrCommand::Fixed {
                vector: 0x40,
                to: Destination::AllButSelf
            })
        );
        assert_eq!(
            x2(0x40 | (1 << 18)),
            Ok(IcrCommand::Fixed {
                vector: 0x40,
                to: Destination::Itself
            })
        );
        // INIT: asserted (edge or level) is an INIT; the level de-assert
        // that old start-up sequences send after it is told apart.
        assert_eq!(
            x2(0xc500 | (2 << 32)),
            Ok(IcrCommand::Init {
                to: Destination::One(2)
            })
        );
        assert_eq!(x2(0x8500 | (2 << 32)), Ok(IcrCommand::InitDeassert));
        // Logical destinations go to the APICs to match; broadcast ids
        // are everyone.
        assert_eq!(
            x2(0x40 | (1 << 11) | (0x1_0003 << 32)),
            Ok(IcrCommand::Fixed {
                vector: 0x40,
                to: Destination::Logical(0x1_0003)
            })
        );
        assert_eq!(
            x2(0x40 | (0xffff_ffff << 32)),
            Ok(IcrCommand::Fixed {
                vector: 0x40,
                to: Destination::All
            })
        );
        assert_eq!(
            decode_icr(0x40 | (0xff << 32), XApic),
            Ok(IcrCommand::Fixed {
                vector: 0x40,
                to: Destination::All
            })
        );
        // NMI (delivery mode 4): the vector is ignored, so is the level bit
        // (kvm-unit-tests' pending-NMI check sends it with level clear).
        assert_eq!(
            x2(0x4400 | (1 << 32)),
            Ok(IcrCommand::Nmi {
                to: Destination::One(1)
            })
        );
        assert_eq!(
            x2(0x0400 | (1 << 18)),
            Ok(IcrCommand::Nmi {
                to: Destination::Itself
            })
        );
        // SMI (2) and the reserved modes are refused.
        assert!(x2(0x200).is_err());
        assert!(x2(0x700).is_err());
    }

    #[test]
    fn nmis_are_latched_up_to_two_and_reset_by_init() {
        let mut apic = VLapic::new(1);
        assert!(!apic.nmi_latched());
        for _ in 0..3 {
            apic.request_nmi();
        }
        assert!(!apic.has_requested(), "an NMI is not a fixed interrupt");
        apic.take_nmi();
        assert!(apic.nmi_latched());
        apic.take_nmi();
        assert!(!apic.nmi_latched(), "a third NMI before delivery is lost");
        apic.request_nmi();
        apic.request_nmi();
        apic.merge_nmis_while_blocked();
        apic.take_nmi();
        assert!(!apic.nmi_latched(), "one held while a handler runs");
        apic.request_nmi();
        assert!(!apic.after_init().nmi_latched());
    }

    /// Linux's xAPIC bring-up (arch/x86/kernel/apic/apic.c, smpboot.c):
    /// flat logical ids in LDR, IPIs through ICR high then low, INIT and
    /// STARTUP to a physical id.
    #[test]
    fn xapic_mode_takes_the_mmio_registers() {
        let mut apic = VLapic::with_mode(2, XApic);
        assert_eq!(apic.mode(), XApic);
        assert_eq!(apic.read_mmio(0x20, 0), Ok(2 << 24), "ID in bits 31:24");
        assert_eq!(apic.read_mmio(0x30, 0), Ok(VERSION as u32));
        // MSRs are x2APIC-only, but for the TSC deadline.
        assert_eq!(apic.read(msr::ID, 0), Err(VlapicError::NotX2Apic(msr::ID)));
        apic.write_mmio(0x320, 0x40 | 2 << 17, 0).unwrap();
        assert_eq!(
            apic.write(msr::TSC_DEADLINE, 500, 0),
            Ok(WriteEffect::TimerChanged)
        );
        assert_eq!(apic.read(msr::TSC_DEADLINE, 0), Ok(500));
        apic.write_mmio(0xE0, 0xffff_ffff, 0).unwrap();
        apic.write_mmio(0xD0, 1 << 26, 0).unwrap();
        assert_eq!(apic.read_mmio(0xD0, 0), Ok(1 << 26));
        assert!(apic.accepts_logical(0b0000_0100));
        assert!(!apic.accepts_logical(0b0000_0011));
        assert!(apic.accepts_physical(2) && apic.accepts_physical(0xff));
        assert!(!apic.accepts_physical(3));
        // Cluster model: cluster 0 (high nibble), bit 2.
        apic.write_mmio(0xE0, 0x0fff_ffff, 0).unwrap();
        apic.write_mmio(0xD0, 0x04 << 24, 0).unwrap();
        assert!(apic.accepts_logical(0x04) && !apic.accepts_logical(0x14));
        // SVR, LVT LINT0 and the error LVT keep what is written.
        apic.write_mmio(0xF0, 0x1ff, 0).unwrap();
        assert!(apic.enabled());
        apic.write_mmio(0x350, 0x700, 0).unwrap();
        assert_eq!(apic.read_mmio(0x350, 0), Ok(0x700));
        apic.write_mmio(0x370, 0xfe, 0).unwrap();
        assert_eq!(apic.read_mmio(0x370, 0), Ok(0xfe));
        // ICR: the destination first, the command on the low half.
        assert_eq!(apic.write_mmio(0x310, 3 << 24, 0), Ok(WriteEffect::None));
        assert_eq!(
            apic.write_mmio(0x300, 0xc500, 0),
            Ok(WriteEffect::Icr(IcrCommand::Init {
                to: Destination::One(3)
            }))
        );
        assert_eq!(
            apic.write_mmio(0x300, 0x0698, 0),
            Ok(WriteEffect::Icr(IcrCommand::Startup {
                vector: 0x98,
                to: Destination::One(3)
            }))
        );
        assert_eq!(apic.read_mmio(0x310, 0), Ok(3 << 24));
        // EOI through the page.
        apic.accept(0x40);
        apic.acknowledge(0x40);
        assert_eq!(apic.read_mmio(0x120, 0), Ok(1), "ISR bit 0x40");
        apic.write_mmio(0xB0, 0, 0).unwrap();
        assert_eq!(apic.read_mmio(0x120, 0), Ok(0));
        assert!(apic.read_mmio(0x24, 0).is_err(), "unaligned");
    }

    #[test]
    fn apic_base_changes_follow_the_architecture() {
        let mut apic = VLapic::with_mode(0, XApic);
        let base = apic.base();
        assert_eq!(base, XAPIC_BASE | BASE_EN | BASE_BSP);
        // xAPIC -> x2APIC.
        apic.set_base(base | BASE_EXTD).unwrap();
        assert_eq!(apic.mode(), X2Apic);
        assert_eq!(apic.read(msr::ID, 0), Ok(0));
        // x2APIC -> xAPIC directly is refused; through disabled it works
        // (Linux's x2apic_disable), and disabling resets the APIC.
        assert!(apic.set_base(base).is_err());
        apic.write(msr::TPR, 0x20, 0).unwrap();
        assert_eq!(apic.task_priority_class(), 2, "CR8 reads TPR[7:4]");
        apic.set_task_priority_class(0x3);
        assert_eq!(
            apic.read(msr::TPR, 0),
            Ok(0x30),
            "a CR8 write clears TPR[3:0]"
        );
        apic.write(msr::TPR, 0x20, 0).unwrap();
        apic.set_base(XAPIC_BASE).unwrap();
        assert_eq!(apic.mode(), Disabled);
        assert!(!apic.accepts_logical(1));
        apic.set_base(XAPIC_BASE | BASE_EN).unwrap();
        assert_eq!(apic.mode(), XApic);
        assert_eq!(apic.read_mmio(0x80, 0), Ok(0), "TPR reset");
        assert_eq!(apic.base() & BASE_BSP, BASE_BSP, "BSP is read-only");
        // EXTD without EN, reserved bits (low, above 2^36): refused.
        assert!(apic.set_base(XAPIC_BASE | BASE_EXTD).is_err());
        assert!(apic.set_base(XAPIC_BASE | BASE_EN | 1 << 9).is_err());
        assert!(apic.set_base(XAPIC_BASE | BASE_EN | 1 << 40).is_err());
        // The page moves (kvm-unit-tests' apicbase test), and back.
        assert!(apic.claims(XAPIC_BASE + 0x30));
        apic.set_base(0xFED4_0000 | BASE_EN).unwrap();
        assert_eq!(apic.mmio_page(), 0xFED4_0000);
        assert!(apic.claims(0xFED4_0030) && !apic.claims(XAPIC_BASE + 0x30));
        assert_eq!(apic.read_mmio(0x30, 0), Ok(0x5_0014), "the version there");
        apic.set_base(XAPIC_BASE | BASE_EN).unwrap();
        assert_eq!(
            apic.set_base_outside(0x10_0000 | BASE_EN, 0x400_0000),
            Err(VlapicError::BaseOverRam(0x10_0000 | BASE_EN)),
            "over the guest's RAM"
        );
        assert_eq!(apic.mmio_page(), XAPIC_BASE);
        // After an INIT the mode stays.
        apic.write_mmio(0x80, 0x30, 0).unwrap();
        let fresh = apic.after_init();
        assert_eq!(fresh.mode(), XApic);
        assert_eq!(fresh.read_mmio(0x80, 0), Ok(0));
    }

    #[test]
    fn x2apic_logical_ids_are_derived_from_the_id() {
        let apic = VLapic::new(0x13);
        assert_eq!(apic.read(msr::LDR, 0), Ok(0x1_0008));
        assert!(apic.accepts_logical(0x1_0008));
        assert!(apic.accepts_logical(0x1_000c));
        assert!(!apic.accepts_logical(0x0_0008));
        assert!(apic.accepts_logical(u32::MAX));
        assert!(apic.accepts_physical(0x13) && !apic.accepts_physical(0x3));
    }
}
