//! The guest's view of its interrupt controller, just enough for SGIs and the
//! virtual timer's PPI: GICv3 through the ICC system registers (SRE), GICv2
//! through the GICD/GICC MMIO frames. Interrupts stay masked in PSTATE: the
//! guest waits with `WFI` (which wakes on a pending interrupt regardless of
//! the mask) and acknowledges by polling IAR, so it needs no IRQ handler.

use core::arch::asm;
use core::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};

use aarch64_cpu::asm::barrier;
use tock_registers::interfaces::{Readable, Writeable};
use tock_registers::register_structs;
use tock_registers::registers::{ReadOnly, ReadWrite, WriteOnly};

use super::MAX_VCPUS;

/// The SGI vCPU 0 sends to a peer.
pub const SGI_PING: u32 = 1;
/// The SGI a peer answers with.
pub const SGI_PONG: u32 = 2;
/// The EL1 virtual timer's PPI (architected INTID 27; QEMU and the
/// hypervisor's device tree both use it).
pub const VTIMER_PPI: u32 = 27;

/// One past the highest INTID the guest configures (SGIs, PPIs and the
/// first 32 SPIs, which hold the PL011's).
const SPIS_END: usize = 64;

/// Which GIC the guest drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Version {
    /// GICv2: GICD + GICC MMIO.
    V2,
    /// GICv3: GICD + redistributors, ICC system registers.
    V3,
}

/// Where the GIC is.
#[derive(Clone, Copy, Debug)]
pub struct GicInfo {
    /// Its version.
    pub version: Version,
    /// The distributor.
    pub gicd: usize,
    /// GICv2: the CPU interface; GICv3: the first redistributor.
    pub second: usize,
}

register_structs! {
    /// Distributor registers used (common to v2 and v3 where named).
    Gicd {
        (0x000 => ctlr: ReadWrite<u32>),
        (0x004 => _reserved0),
        (0x080 => igroupr: [ReadWrite<u32>; 2]),
        (0x088 => _reserved4),
        (0x100 => isenabler: [ReadWrite<u32>; 2]),
        (0x108 => _reserved1),
        (0x400 => ipriorityr: [ReadWrite<u8>; SPIS_END]),
        (0x440 => _reserved2),
        (0x800 => itargetsr: [ReadWrite<u8>; SPIS_END]),
        (0x840 => _reserved3),
        (0xF00 => sgir: WriteOnly<u32>),
        (0xF04 => _reserved5),
        (0x6000 => irouter: [ReadWrite<u64>; SPIS_END]),
        (0x6200 => @END),
    }
}

register_structs! {
    /// GICv3 redistributor, RD_base frame.
    GicrRd {
        (0x00 => _reserved0),
        (0x08 => typer: ReadOnly<u64>),
        (0x10 => _reserved1),
        (0x14 => waker: ReadWrite<u32>),
        (0x18 => @END),
    }
}

register_structs! {
    /// GICv3 redistributor, SGI_base frame (RD_base + 64 KiB).
    GicrSgi {
        (0x000 => _reserved0),
        (0x080 => igroupr0: ReadWrite<u32>),
        (0x084 => _reserved1),
        (0x100 => isenabler0: ReadWrite<u32>),
        (0x104 => _reserved2),
        (0x400 => ipriorityr: [ReadWrite<u8>; 32]),
        (0x420 => @END),
    }
}

register_structs! {
    /// GICv2 CPU interface.
    Gicc {
        (0x00 => ctlr: ReadWrite<u32>),
        (0x04 => pmr: ReadWrite<u32>),
        (0x08 => bpr: ReadWrite<u32>),
        (0x0C => iar: ReadOnly<u32>),
        (0x10 => eoir: WriteOnly<u32>),
        (0x14 => @END),
    }
}

/// Why the GIC could not be set up for a vCPU.
#[derive(Clone, Copy, Debug)]
pub enum GicError {
    /// No redistributor has this vCPU's affinity.
    NoRedistributor(u64),
    /// `GICR_WAKER.ChildrenAsleep` stayed set.
    RedistributorAsleep,
    /// `ICC_SRE_EL1.SRE` does not stick: no system-register interface.
    NoSystemRegisters,
    /// GICD_CTLR.RWP stayed set.
    DistributorBusy,
}

impl core::fmt::Display for GicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoRedistributor(mpidr) => write!(f, "no redistributor for mpidr {mpidr:#x}"),
            Self::RedistributorAsleep => write!(f, "redistributor did not wake up"),
            Self::NoSystemRegisters => write!(f, "ICC_SRE_EL1.SRE does not stick"),
            Self::DistributorBusy => write!(f, "GICD_CTLR.RWP stayed set"),
        }
    }
}

const KIND_NONE: u8 = 0;
static KIND: AtomicU8 = AtomicU8::new(KIND_NONE);
static GICD: AtomicUsize = AtomicUsize::new(0);
static SECOND: AtomicUsize = AtomicUsize::new(0);
/// GICv3: each vCPU's MPIDR (SGI targets). GICv2: its CPU-interface mask.
static TARGET: [AtomicU64; MAX_VCPUS] = [const { AtomicU64::new(0) }; MAX_VCPUS];

/// Polls of a GIC status bit before giving up.
const POLLS: u32 = 1_000_000;
/// Redistributor frames looked at before giving up.
const MAX_REDISTRIBUTORS: usize = 512;
/// Priority of the guest's interrupts (anything below the PMR's 0xF0).
const PRIORITY: u8 = 0x80;
/// The interrupts each vCPU enables.
const ENABLED: u32 = 1 << SGI_PING | 1 << SGI_PONG | 1 << VTIMER_PPI;

fn gicd() -> &'static Gicd {
    // SAFETY: GICD holds the distributor address from the device tree (or
    // QEMU's default), identity-mapped as Device memory; registers are only
    // touched through volatile tock-registers accessors.
    unsafe { &*(GICD.load(Ordering::Relaxed) as *const Gicd) }
}

fn gicc() -> &'static Gicc {
    // SAFETY: as for `gicd`, with the GICv2 CPU interface address; its
    // registers are banked per CPU by the hardware.
    unsafe { &*(SECOND.load(Ordering::Relaxed) as *const Gicc) }
}

fn gicr_rd(base: usize) -> &'static GicrRd {
    // SAFETY: `base` is a redistributor frame inside the region the device
    // tree gives (checked against GICR_TYPER.Last while walking); Device memory.
    unsafe { &*(base as *const GicrRd) }
}

fn gicr_sgi(base: usize) -> &'static GicrSgi {
    // SAFETY: the SGI_base frame follows RD_base by 64 KiB in every
    // redistributor; as for `gicr_rd`.
    unsafe { &*((base + 0x1_0000) as *const GicrSgi) }
}

fn icc_sre_enable() -> u64 {
    let sre: u64;
    // SAFETY: sets ICC_SRE_EL1.SRE (and keeps DFB/DIB) to use the GICv3
    // system-register interface; only called when the GIC is a v3.
    unsafe {
        asm!(
            "mrs {v}, icc_sre_el1",
            "orr {v}, {v}, #1",
            "msr icc_sre_el1, {v}",
            "isb",
            "mrs {v}, icc_sre_el1",
            v = out(reg) sre,
            options(nostack),
        );
    }
    sre
}

fn icc_cpu_enable() {
    // SAFETY: priority mask, binary point and group-1 enable of this CPU's
    // GICv3 interface; SRE is on (checked by the caller).
    unsafe {
        asm!(
            "msr icc_pmr_el1, {pmr}",
            "msr icc_bpr1_el1, xzr",
            "msr icc_igrpen1_el1, {one}",
            "isb",
            pmr = in(reg) 0xF0u64,
            one = in(reg) 1u64,
            options(nostack),
        );
    }
}

fn icc_iar1() -> u64 {
    let iar: u64;
    // SAFETY: acknowledges the highest-priority pending group-1 interrupt
    // (or reads 1023); the caller EOIs what it gets.
    unsafe { asm!("mrs {}, icc_iar1_el1", out(reg) iar, options(nostack)) };
    iar
}

fn icc_eoir1(intid: u64) {
    // SAFETY: ends an interrupt acknowledged through icc_iar1.
    unsafe { asm!("msr icc_eoir1_el1, {}", "isb", in(reg) intid, options(nostack)) };
}

fn icc_sgi1r(value: u64) {
    // SAFETY: sends an SGI to the CPUs `value` names; no memory effect.
    unsafe { asm!("dsb ish", "msr icc_sgi1r_el1, {}", "isb", in(reg) value, options(nostack)) };
}

fn version() -> Option<Version> {
    match KIND.load(Ordering::Acquire) {
        2 => Some(Version::V2),
        3 => Some(Version::V3),
        _ => None,
    }
}

/// Whether a GIC was set up (interrupt-driven workloads need one).
pub fn present() -> bool {
    version().is_some()
}

/// Records the GIC and enables its distributor (primary vCPU, once).
pub fn init_distributor(info: GicInfo) -> Result<(), GicError> {
    GICD.store(info.gicd, Ordering::Relaxed);
    SECOND.store(info.second, Ordering::Relaxed);
    let gicd = gicd();
    match info.version {
        Version::V2 => gicd.ctlr.set(1),
        Version::V3 => {
            // ARE, EnableGrp1, EnableGrp0 (single security state view).
            gicd.ctlr.set(1 << 4 | 1 << 1 | 1);
            let mut polls = 0;
            while gicd.ctlr.get() & 1 << 31 != 0 {
                polls += 1;
                if polls == POLLS {
                    return Err(GicError::DistributorBusy);
                }
            }
        }
    }
    let kind = match info.version {
        Version::V2 => 2,
        Version::V3 => 3,
    };
    KIND.store(kind, Ordering::Release);
    Ok(())
}

/// Affinity of an MPIDR as GICR_TYPER packs it (Aff3.Aff2.Aff1.Aff0).
fn packed_affinity(mpidr: u64) -> u64 {
    (mpidr >> 8 & 0xFF00_0000) | (mpidr & 0x00FF_FFFF)
}

/// Sets up this vCPU's side: its redistributor or banked registers and its
/// CPU interface, with the SGIs and the virtual timer enabled.
pub fn init_cpu(index: usize, mpidr: u64) -> Result<(), GicError> {
    match version() {
        Some(Version::V3) => init_cpu_v3(index, mpidr),
        Some(Version::V2) => {
            let gicd = gicd();
            for intid in [SGI_PING, SGI_PONG, VTIMER_PPI] {
                gicd.ipriorityr[intid as usize].set(PRIORITY);
            }
            gicd.isenabler[0].set(ENABLED);
            // ITARGETSR0..7 read back this CPU's own interface mask.
            TARGET[index].store(gicd.itargetsr[0].get() as u64, Ordering::Release);
            let gicc = gicc();
            gicc.pmr.set(0xF0);
            gicc.bpr.set(0);
            gicc.ctlr.set(1);
            Ok(())
        }
        None => Ok(()),
    }
}

fn init_cpu_v3(index: usize, mpidr: u64) -> Result<(), GicError> {
    let want = packed_affinity(mpidr);
    let mut frame = SECOND.load(Ordering::Relaxed);
    let mut found = None;
    for _ in 0..MAX_REDISTRIBUTORS {
        let typer = gicr_rd(frame).typer.get();
        if typer >> 32 == want {
            found = Some(frame);
            break;
        }
        if typer & 1 << 4 != 0 {
            break; // Last
        }
        // Two 64 KiB frames, four with virtual LPIs (GICR_TYPER.VLPIS).
        frame += if typer & 1 << 1 != 0 {
            0x4_0000
        } else {
            0x2_0000
        };
    }
    let rd = found.ok_or(GicError::NoRedistributor(mpidr))?;
    let waker = &gicr_rd(rd).waker;
    waker.set(waker.get() & !(1 << 1)); // ProcessorSleep
    let mut polls = 0;
    while waker.get() & 1 << 2 != 0 {
        polls += 1;
        if polls == POLLS {
            return Err(GicError::RedistributorAsleep);
        }
    }
    let sgi = gicr_sgi(rd);
    sgi.igroupr0.set(u32::MAX);
    for intid in [SGI_PING, SGI_PONG, VTIMER_PPI] {
        sgi.ipriorityr[intid as usize].set(PRIORITY);
    }
    sgi.isenabler0.set(ENABLED);
    if icc_sre_enable() & 1 == 0 {
        return Err(GicError::NoSystemRegisters);
    }
    icc_cpu_enable();
    TARGET[index].store(mpidr, Ordering::Release);
    Ok(())
}

/// Enables SPI `intid` (below 64) as a group-1 interrupt of vCPU `index`
/// (which must have run `init_cpu`); false if it is out of range or there is
/// no GIC.
pub fn enable_spi(intid: u32, index: usize) -> bool {
    let i = intid as usize;
    if !(32..SPIS_END).contains(&i) {
        return false;
    }
    let bit = 1 << (intid % 32);
    let word = i / 32;
    let gicd = gicd();
    let target = TARGET[index].load(Ordering::Acquire);
    match version() {
        Some(Version::V3) => {
            gicd.igroupr[word].set(gicd.igroupr[word].get() | bit);
            // IROUTER: Aff3 in bits 39:32, Aff2..Aff0 as in MPIDR, IRM = 0.
            gicd.irouter[i].set(target & 0xFF_00FF_FFFF);
        }
        Some(Version::V2) => gicd.itargetsr[i].set(target as u8),
        None => return false,
    }
    gicd.ipriorityr[i].set(PRIORITY);
    gicd.isenabler[word].set(bit);
    true
}

/// An acknowledged interrupt: the raw IAR value (for EOI) and its INTID.
#[derive(Clone, Copy, Debug)]
pub struct Acked {
    raw: u64,
    /// The interrupt number.
    pub intid: u32,
}

/// Acknowledges the highest-priority pending interrupt, if any.
pub fn ack() -> Option<Acked> {
    let raw = match version()? {
        Version::V3 => icc_iar1(),
        Version::V2 => gicc().iar.get() as u64,
    };
    let intid = (raw & 0x3FF) as u32;
    (intid < 1020).then_some(Acked { raw, intid })
}

/// Ends an acknowledged interrupt.
pub fn eoi(acked: Acked) {
    match version() {
        Some(Version::V3) => icc_eoir1(acked.raw),
        Some(Version::V2) => gicc().eoir.set(acked.raw as u32),
        None => {}
    }
}

/// Sends SGI `intid` to vCPU `target` (which must have run `init_cpu`).
pub fn send_sgi(target: usize, intid: u32) {
    let t = TARGET[target].load(Ordering::Acquire);
    match version() {
        Some(Version::V3) => {
            let aff0 = t & 0xFF;
            let value = (t >> 32 & 0xFF) << 48
                | (aff0 >> 4) << 44
                | (t >> 16 & 0xFF) << 32
                | (intid as u64 & 0xF) << 24
                | (t >> 8 & 0xFF) << 16
                | 1 << (aff0 & 0xF);
            icc_sgi1r(value);
        }
        Some(Version::V2) => {
            barrier::dsb(barrier::ISHST);
            gicd().sgir.set(((t as u32 & 0xFF) << 16) | (intid & 0xF));
        }
        None => {}
    }
}
