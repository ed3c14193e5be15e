//! The local APIC itself: xAPIC registers through a tock-registers MMIO
//! struct, x2APIC registers through MSRs, behind one [`LocalApic`] type.

use core::arch::x86_64::__cpuid;

use tock_registers::interfaces::{Readable, Writeable};
use x86_64::registers::model_specific::Msr;

use crate::encode::{self, Delivery, Ipi, TimerMode, x2apic_msr};
use crate::{ApicError, ApicMode, IpiTarget};

/// The xAPIC register layout (a module so the macro's items may go undocumented).
#[allow(missing_docs)]
mod layout {
    use tock_registers::register_structs;
    use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

    register_structs! {
        /// The xAPIC register page (4 KiB at the APIC base, 16-byte stride).
        pub XApicRegisters {
            (0x000 => _reserved0),
            (0x020 => pub id: ReadOnly<u32>),
            (0x024 => _reserved1),
            (0x030 => pub version: ReadOnly<u32>),
            (0x034 => _reserved2),
            (0x080 => pub tpr: ReadWrite<u32>),
            (0x084 => _reserved3),
            (0x0b0 => pub eoi: WriteOnly<u32>),
            (0x0b4 => _reserved4),
            (0x0f0 => pub svr: ReadWrite<u32>),
            (0x0f4 => _reserved5),
            (0x280 => pub esr: ReadWrite<u32>),
            (0x284 => _reserved6),
            (0x300 => pub icr_low: ReadWrite<u32>),
            (0x304 => _reserved7),
            (0x310 => pub icr_high: ReadWrite<u32>),
            (0x314 => _reserved8),
            (0x320 => pub lvt_timer: ReadWrite<u32>),
            (0x324 => _reserved9),
            (0x330 => pub lvt_thermal: ReadWrite<u32>),
            (0x334 => _reserved10),
            (0x340 => pub lvt_perf: ReadWrite<u32>),
            (0x344 => _reserved11),
            (0x350 => pub lvt_lint0: ReadWrite<u32>),
            (0x354 => _reserved12),
            (0x360 => pub lvt_lint1: ReadWrite<u32>),
            (0x364 => _reserved13),
            (0x370 => pub lvt_error: ReadWrite<u32>),
            (0x374 => _reserved14),
            (0x380 => pub timer_initial: ReadWrite<u32>),
            (0x384 => _reserved15),
            (0x390 => pub timer_current: ReadOnly<u32>),
            (0x394 => _reserved16),
            (0x3e0 => pub timer_divide: ReadWrite<u32>),
            (0x3e4 => _reserved17),
            (0x400 => @END),
        }
    }
}
pub use layout::XApicRegisters;

/// IA32_APIC_BASE: the APIC's physical base and its enable bits.
const IA32_APIC_BASE: u32 = 0x1b;
/// IA32_APIC_BASE.EN: the APIC is globally enabled.
const APIC_BASE_ENABLE: u64 = 1 << 11;
/// IA32_APIC_BASE.EXTD: x2APIC mode.
const APIC_BASE_X2APIC: u64 = 1 << 10;
/// IA32_APIC_BASE.BSP: this is the boot processor.
const APIC_BASE_BSP: u64 = 1 << 8;
/// Physical base address bits of IA32_APIC_BASE.
const APIC_BASE_ADDRESS: u64 = 0x000f_ffff_ffff_f000;
/// IA32_TSC_DEADLINE.
const IA32_TSC_DEADLINE: u32 = 0x6e0;
/// How many times the xAPIC delivery-status bit is polled before giving up.
const DELIVERY_POLLS: u32 = 1_000_000;
/// The divisor used for the periodic timer (whatever the bus clock, 16 keeps a
/// 10 ms period within 32 bits up to 6.8 GHz).
pub const TIMER_DIVISOR: u32 = 16;

/// What CPUID says about the local APIC.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApicFeatures {
    /// CPUID.1:EDX.APIC.
    pub apic: bool,
    /// CPUID.1:ECX.x2APIC.
    pub x2apic: bool,
    /// CPUID.1:ECX.TSC-Deadline.
    pub tsc_deadline: bool,
}

impl ApicFeatures {
    /// Reads CPUID leaf 1 on the calling CPU.
    pub fn read() -> Self {
        let leaf1 = __cpuid(1);
        Self {
            apic: leaf1.edx & (1 << 9) != 0,
            x2apic: leaf1.ecx & (1 << 21) != 0,
            tsc_deadline: leaf1.ecx & (1 << 24) != 0,
        }
    }
}

/// The local APIC of whichever CPU calls a method: xAPIC or x2APIC, chosen
/// once at boot. Copy it freely; it holds no per-CPU state.
#[derive(Clone, Copy, Debug)]
pub struct LocalApic {
    mode: ApicMode,
    /// xAPIC register page (identity-mapped, uncached); 0 in x2APIC mode.
    base: usize,
}

fn read_msr(msr: u32) -> u64 {
    // SAFETY: only architectural APIC MSRs are read, after CPUID said they exist.
    unsafe { Msr::new(msr).read() }
}

fn write_msr(msr: u32, value: u64) {
    let mut msr = Msr::new(msr);
    // SAFETY: only architectural APIC MSRs are written, with values the
    // encode module builds; none of them changes memory safety.
    unsafe { msr.write(value) };
}

impl LocalApic {
    /// Chooses the mode for this machine: x2APIC when the CPU has it and
    /// `allow_x2apic`, else xAPIC at the base IA32_APIC_BASE names.
    ///
    /// # Safety
    /// The xAPIC page at the APIC base must be identity-mapped (uncached) and
    /// driven by nothing else.
    pub unsafe fn detect(allow_x2apic: bool) -> Result<Self, ApicError> {
        let features = ApicFeatures::read();
        if !features.apic {
            return Err(ApicError::NoApic);
        }
        if features.x2apic && allow_x2apic {
            return Ok(Self {
                mode: ApicMode::X2Apic,
                base: 0,
            });
        }
        let base = (read_msr(IA32_APIC_BASE) & APIC_BASE_ADDRESS) as usize;
        Ok(Self {
            mode: ApicMode::XApic,
            base,
        })
    }

    /// Forces a mode (tests, or a command-line override).
    ///
    /// # Safety
    /// As [`LocalApic::detect`]; x2APIC must be present if asked for.
    pub unsafe fn with_mode(mode: ApicMode) -> Result<Self, ApicError> {
        let features = ApicFeatures::read();
        if mode == ApicMode::X2Apic && !features.x2apic {
            return Err(ApicError::X2ApicUnsupported);
        }
        let base = (read_msr(IA32_APIC_BASE) & APIC_BASE_ADDRESS) as usize;
        Ok(Self {
            mode,
            base: if mode == ApicMode::XApic { base } else { 0 },
        })
    }

    /// The mode in use.
    pub fn mode(&self) -> ApicMode {
        self.mode
    }

    /// The xAPIC register base (0 in x2APIC mode).
    pub fn base(&self) -> usize {
        self.base
    }

    fn regs(&self) -> &XApicRegisters {
        // SAFETY: `detect`/`with_mode` callers promised the page is mapped and
        // ours; only called in xAPIC mode, where `base` is that page.
        unsafe { &*(self.base as *const XApicRegisters) }
    }

    /// Whether the calling CPU is the boot processor (IA32_APIC_BASE.BSP).
    pub fn is_bsp(&self) -> bool {
        read_msr(IA32_APIC_BASE) & APIC_BASE_BSP != 0
    }

    /// Enables the calling CPU's local APIC in this mode: global enable (and
    /// x2APIC mode), software enable with `spurious_vector`, LINT0/1, error,
    /// thermal and performance LVTs masked, the timer stopped, TPR 0.
    pub fn enable(&self, spurious_vector: u8) {
        let base = read_msr(IA32_APIC_BASE);
        // Disabled to x2APIC directly is an invalid transition: enable first.
        let enabled = base | APIC_BASE_ENABLE;
        if enabled != base {
            write_msr(IA32_APIC_BASE, enabled);
        }
        if self.mode == ApicMode::X2Apic && enabled & APIC_BASE_X2APIC == 0 {
            write_msr(IA32_APIC_BASE, enabled | APIC_BASE_X2APIC);
        }
        let masked = encode::lvt_masked();
        match self.mode {
            ApicMode::XApic => {
                let regs = self.regs();
                regs.tpr.set(0);
                regs.lvt_lint0.set(masked);
                regs.lvt_lint1.set(masked);
                regs.lvt_error.set(masked);
                regs.lvt_thermal.set(masked);
                regs.lvt_perf.set(masked);
                regs.lvt_timer
                    .set(encode::lvt_timer(0, TimerMode::OneShot, true));
                regs.timer_initial.set(0);
                regs.svr.set(encode::svr_enabled(spurious_vector));
                // Writing ESR latches and clears the error state.
                regs.esr.set(0);
            }
            ApicMode::X2Apic => {
                write_msr(x2apic_msr::TPR, 0);
                for lvt in [
                    x2apic_msr::LVT_LINT0,
                    x2apic_msr::LVT_LINT1,
                    x2apic_msr::LVT_ERROR,
                    x2apic_msr::LVT_THERMAL,
                    x2apic_msr::LVT_PERF,
                ] {
                    write_msr(lvt, masked.into());
                }
                write_msr(
                    x2apic_msr::LVT_TIMER,
                    encode::lvt_timer(0, TimerMode::OneShot, true).into(),
                );
                write_msr(x2apic_msr::TIMER_INITIAL, 0);
                write_msr(x2apic_msr::SVR, encode::svr_enabled(spurious_vector).into());
                write_msr(x2apic_msr::ESR, 0);
            }
        }
    }

    /// The calling CPU's APIC id (8 bits in xAPIC mode, 32 in x2APIC).
    pub fn id(&self) -> u32 {
        match self.mode {
            ApicMode::XApic => self.regs().id.get() >> 24,
            ApicMode::X2Apic => read_msr(x2apic_msr::ID) as u32,
        }
    }

    /// The version register (version in bits 7:0, max LVT in 23:16).
    pub fn version(&self) -> u32 {
        match self.mode {
            ApicMode::XApic => self.regs().version.get(),
            ApicMode::X2Apic => read_msr(x2apic_msr::VERSION) as u32,
        }
    }

    /// Signals the end of the interrupt being handled.
    pub fn eoi(&self) {
        match self.mode {
            ApicMode::XApic => self.regs().eoi.set(0),
            ApicMode::X2Apic => write_msr(x2apic_msr::EOI, 0),
        }
    }

    /// Sends `ipi`. xAPIC: waits (bounded) for the previous IPI to leave first.
    pub fn send(&self, ipi: Ipi) -> Result<(), ApicError> {
        match self.mode {
            ApicMode::XApic => {
                let (high, low) = ipi.xapic()?;
                self.wait_for_delivery()?;
                let regs = self.regs();
                regs.icr_high.set(high);
                // The low-word write sends it.
                regs.icr_low.set(low);
                Ok(())
            }
            ApicMode::X2Apic => {
                write_msr(x2apic_msr::ICR, ipi.x2apic());
                Ok(())
            }
        }
    }

    /// Waits until the xAPIC has sent the last IPI (no-op in x2APIC mode).
    pub fn wait_for_delivery(&self) -> Result<(), ApicError> {
        if self.mode == ApicMode::X2Apic {
            return Ok(());
        }
        let regs = self.regs();
        for _ in 0..DELIVERY_POLLS {
            if regs.icr_low.get() & encode::ICR::DELIVERY_STATUS::SET.value == 0 {
                return Ok(());
            }
            core::hint::spin_loop();
        }
        Err(ApicError::DeliveryTimeout {
            icr_low: regs.icr_low.get(),
        })
    }

    /// Sends fixed `vector` to the CPU with APIC id `apic_id`.
    pub fn send_fixed(&self, vector: u8, apic_id: u32) -> Result<(), ApicError> {
        self.send(Ipi {
            delivery: Delivery::Fixed(vector),
            target: IpiTarget::Apic(apic_id),
        })
    }

    /// Sends fixed `vector` to every CPU in `apic_ids`, one IPI each (physical
    /// mode: logical/cluster addressing would group at most 8 or 16 CPUs and
    /// depends on the ids; the scheduler's sets are small). Stops at the first error.
    pub fn send_fixed_to_set(
        &self,
        vector: u8,
        apic_ids: impl IntoIterator<Item = u32>,
    ) -> Result<(), ApicError> {
        apic_ids
            .into_iter()
            .try_for_each(|id| self.send_fixed(vector, id))
    }

    /// Sends fixed `vector` to every CPU but the caller.
    pub fn send_fixed_all_but_self(&self, vector: u8) -> Result<(), ApicError> {
        self.send(Ipi {
            delivery: Delivery::Fixed(vector),
            target: IpiTarget::AllButSelf,
        })
    }

    /// Starts the AP `apic_id` at the real-mode code at `startup_address`
    /// (INIT, 10 ms, SIPI, 200 µs, SIPI: the SDM's universal algorithm).
    /// `delay_us` must wait at least the microseconds given. Whether the AP
    /// really started is for the caller to check, with its own bounded wait.
    pub fn start_ap(
        &self,
        apic_id: u32,
        startup_address: u64,
        mut delay_us: impl FnMut(u64),
    ) -> Result<(), ApicError> {
        let vector = encode::startup_vector(startup_address)?;
        let target = IpiTarget::Apic(apic_id);
        self.send(Ipi {
            delivery: Delivery::Init,
            target,
        })?;
        self.wait_for_delivery()?;
        delay_us(10_000);
        for _ in 0..2 {
            self.send(Ipi {
                delivery: Delivery::StartUp(vector),
                target,
            })?;
            self.wait_for_delivery()?;
            delay_us(200);
        }
        Ok(())
    }

    fn set_timer_regs(&self, lvt: u32, divide: u32, initial: u32) {
        match self.mode {
            ApicMode::XApic => {
                let regs = self.regs();
                regs.timer_divide.set(divide);
                regs.lvt_timer.set(lvt);
                regs.timer_initial.set(initial);
            }
            ApicMode::X2Apic => {
                write_msr(x2apic_msr::TIMER_DIVIDE, divide.into());
                write_msr(x2apic_msr::LVT_TIMER, lvt.into());
                write_msr(x2apic_msr::TIMER_INITIAL, initial.into());
            }
        }
    }

    fn divide_value() -> u32 {
        // 16 is a valid divisor: the encoding exists.
        encode::divide_config(TIMER_DIVISOR).unwrap_or(0b0011)
    }

    /// Starts the timer counting down from `initial` (divide by
    /// [`TIMER_DIVISOR`]) in `mode` (one-shot or periodic), raising `vector`.
    pub fn start_timer(&self, vector: u8, mode: TimerMode, initial: u32, masked: bool) {
        self.set_timer_regs(
            encode::lvt_timer(vector, mode, masked),
            Self::divide_value(),
            initial,
        );
    }

    /// Puts the timer in TSC-deadline mode raising `vector`; arm it with
    /// [`LocalApic::set_tsc_deadline`].
    pub fn start_tsc_deadline_timer(&self, vector: u8) {
        let lvt = encode::lvt_timer(vector, TimerMode::TscDeadline, false);
        match self.mode {
            ApicMode::XApic => self.regs().lvt_timer.set(lvt),
            ApicMode::X2Apic => write_msr(x2apic_msr::LVT_TIMER, lvt.into()),
        }
        // The SDM requires an MFENCE between the LVT write and the deadline write.
        core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    }

    /// Arms the TSC-deadline timer to fire when the TSC reaches `tsc` (0 disarms).
    pub fn set_tsc_deadline(&self, tsc: u64) {
        write_msr(IA32_TSC_DEADLINE, tsc);
    }

    /// Stops the timer (initial count 0, LVT masked).
    pub fn stop_timer(&self) {
        self.set_timer_regs(
            encode::lvt_timer(0, TimerMode::OneShot, true),
            Self::divide_value(),
            0,
        );
        self.set_tsc_deadline(0);
    }

    /// The timer's current count.
    pub fn timer_current(&self) -> u32 {
        match self.mode {
            ApicMode::XApic => self.regs().timer_current.get(),
            ApicMode::X2Apic => read_msr(x2apic_msr::TIMER_CURRENT) as u32,
        }
    }

    /// Measures the timer against `wait`, which must wait about `wait_ns` and
    /// return the nanoseconds it really waited; returns the initial count for
    /// `period_ns`. The timer runs masked and is stopped afterwards.
    pub fn calibrate_timer(
        &self,
        wait_ns: u64,
        period_ns: u64,
        wait: impl FnOnce(u64) -> u64,
    ) -> Result<u32, ApicError> {
        self.start_timer(0, TimerMode::OneShot, u32::MAX, true);
        let start = self.timer_current();
        let measured_ns = wait(wait_ns);
        let end = self.timer_current();
        self.stop_timer();
        encode::timer_count_for(u64::from(start.saturating_sub(end)), measured_ns, period_ns)
    }
}
