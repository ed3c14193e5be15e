//! Per-interrupt distributor operations shared by the GICv2 and GICv3
//! drivers (same register layout in both: IHI 0048 §4.3, IHI 0069).

use tock_registers::interfaces::{Readable, Writeable};

use crate::registers::{GICD_TYPER, GicdRegisters};
use crate::{DEFAULT_PRIORITY, GicError, IntId, Trigger};

/// Number of INTIDs the distributor implements: 32 * (ITLinesNumber + 1),
/// at most 1020.
pub(crate) fn num_interrupts(gicd: &GicdRegisters) -> u32 {
    let lines = gicd.typer.read(GICD_TYPER::ITLinesNumber);
    ((lines + 1) * 32).min(IntId::SPI_END)
}

/// Checks that `intid` is an SPI the distributor implements.
pub(crate) fn check_spi(gicd: &GicdRegisters, intid: IntId) -> Result<usize, GicError> {
    if intid.is_private() || intid.raw() >= num_interrupts(gicd) {
        return Err(GicError::UnsupportedIntId { intid: intid.raw() });
    }
    Ok(intid.index())
}

/// Word index and bit mask of `index` in a one-bit-per-INTID register array.
pub(crate) const fn bit_position(index: usize) -> (usize, u32) {
    (index / 32, 1 << (index % 32))
}

/// Puts every SPI in a known state: disabled, not pending, not active,
/// level-triggered, priority [`DEFAULT_PRIORITY`]; and, when `group1`,
/// in Non-secure Group 1.
pub(crate) fn reset_spis(gicd: &GicdRegisters, group1: bool) {
    let count = num_interrupts(gicd) as usize;
    for word in 1..count.div_ceil(32) {
        gicd.icenabler[word].set(u32::MAX);
        gicd.icpendr[word].set(u32::MAX);
        gicd.icactiver[word].set(u32::MAX);
        if group1 {
            gicd.igroupr[word].set(u32::MAX);
            gicd.igrpmodr[word].set(0);
        }
    }
    // ICFGR: 16 INTIDs per word, 0 = level-sensitive.
    for word in 2..count.div_ceil(16) {
        gicd.icfgr[word].set(0);
    }
    for intid in IntId::SPI_BASE as usize..count {
        gicd.ipriorityr[intid].set(DEFAULT_PRIORITY);
    }
}

/// Enables SPI `index`.
pub(crate) fn enable(gicd: &GicdRegisters, index: usize) {
    let (word, mask) = bit_position(index);
    gicd.isenabler[word].set(mask);
}

/// Disables SPI `index`.
pub(crate) fn disable(gicd: &GicdRegisters, index: usize) {
    let (word, mask) = bit_position(index);
    gicd.icenabler[word].set(mask);
}

/// Sets (`true`) or clears the active state of `index` (GICD_ISACTIVER /
/// GICD_ICACTIVER; SGIs and PPIs: the calling CPU's banked copy on GICv2).
pub(crate) fn set_active(gicd: &GicdRegisters, index: usize, active: bool) {
    let (word, mask) = bit_position(index);
    if active {
        gicd.isactiver[word].set(mask);
    } else {
        gicd.icactiver[word].set(mask);
    }
}

/// Whether `index` is active (GICD_ISACTIVER).
pub(crate) fn is_active(gicd: &GicdRegisters, index: usize) -> bool {
    let (word, mask) = bit_position(index);
    gicd.isactiver[word].get() & mask != 0
}

/// Clears the latched pending state of `index` (GICD_ICPENDR; a
/// level-sensitive interrupt whose line is asserted stays pending).
pub(crate) fn clear_pending(gicd: &GicdRegisters, index: usize) {
    let (word, mask) = bit_position(index);
    gicd.icpendr[word].set(mask);
}

/// Latches `index` pending (GICD_ISPENDR; SGIs and PPIs: the calling
/// CPU's banked bit on GICv2).
pub(crate) fn set_pending(gicd: &GicdRegisters, index: usize) {
    let (word, mask) = bit_position(index);
    gicd.ispendr[word].set(mask);
}

/// Whether `index` is pending (GICD_ISPENDR): latched, or for a
/// level-sensitive interrupt its line asserted, enabled or not (IHI 0069
/// §4.1.2; SGIs and PPIs: the calling CPU's banked bit on GICv2).
pub(crate) fn is_pending(gicd: &GicdRegisters, index: usize) -> bool {
    let (word, mask) = bit_position(index);
    gicd.ispendr[word].get() & mask != 0
}

/// The ICFGR word with the trigger of the INTID at `index % 16` changed
/// (two bits per INTID; bit 1 of the pair set = edge-triggered).
pub(crate) const fn icfgr_with_trigger(word: u32, index: usize, trigger: Trigger) -> u32 {
    let edge_bit = 1 << (2 * (index % 16) + 1);
    match trigger {
        Trigger::Edge => word | edge_bit,
        Trigger::Level => word & !edge_bit,
    }
}

/// The trigger an ICFGR word gives the INTID at `index % 16`.
pub(crate) const fn trigger_in_icfgr(word: u32, index: usize) -> Trigger {
    if word & (1 << (2 * (index % 16) + 1)) != 0 {
        Trigger::Edge
    } else {
        Trigger::Level
    }
}

/// The trigger of SPI (or, on GICv2, PPI) `index`.
pub(crate) fn trigger(gicd: &GicdRegisters, index: usize) -> Trigger {
    trigger_in_icfgr(gicd.icfgr[index / 16].get(), index)
}

/// Sets the trigger of SPI `index`. Read-modify-write of a register shared
/// by 16 INTIDs: callers serialise configuration changes.
pub(crate) fn set_trigger(gicd: &GicdRegisters, index: usize, trigger: Trigger) {
    let register = &gicd.icfgr[index / 16];
    register.set(icfgr_with_trigger(register.get(), index, trigger));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trigger_bits_round_trip() {
        for index in [16, 27, 30, 31, 32, 47] {
            let edge = icfgr_with_trigger(0, index, Trigger::Edge);
            assert_eq!(edge.count_ones(), 1);
            assert_eq!(trigger_in_icfgr(edge, index), Trigger::Edge);
            assert_eq!(trigger_in_icfgr(edge, index + 1), Trigger::Level);
            let level = icfgr_with_trigger(u32::MAX, index, Trigger::Level);
            assert_eq!(trigger_in_icfgr(level, index), Trigger::Level);
        }
    }

    #[test]
    fn bit_positions() {
        assert_eq!(bit_position(0), (0, 1));
        assert_eq!(bit_position(31), (0, 1 << 31));
        assert_eq!(bit_position(33), (1, 1 << 1));
        assert_eq!(bit_position(1019), (31, 1 << 27));
    }

    #[test]
    fn icfgr_trigger_bits() {
        // INTID 33: pair [3:2] of ICFGR2; edge sets bit 3 only.
        assert_eq!(icfgr_with_trigger(0, 33, Trigger::Edge), 0b1000);
        assert_eq!(
            icfgr_with_trigger(0xFFFF_FFFF, 33, Trigger::Level),
            0xFFFF_FFF7
        );
        // INTID 47: last pair of the word.
        assert_eq!(icfgr_with_trigger(0, 47, Trigger::Edge), 0x8000_0000);
        // Neighbours are untouched.
        assert_eq!(icfgr_with_trigger(0x2, 33, Trigger::Edge), 0xA);
    }
}
