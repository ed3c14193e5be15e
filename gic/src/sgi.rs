//! Software-generated interrupts: who to send them to, and the register
//! values that do it (GICv2 GICD_SGIR, IHI 0048 §4.3; GICv3
//! ICC_SGI1R_EL1, IHI 0069). Pure functions, tested on the host.

use tock_registers::fields::FieldValue;

use crate::GicError;
use crate::affinity::Affinity;
use crate::registers::{GICD_SGIR, ICC_SGI1R_EL1};

/// The CPUs an SGI goes to, by logical CPU index (the `cpu` given to
/// `init_cpu`).
#[derive(Clone, Copy, Debug)]
pub enum SgiTarget<'a> {
    /// One CPU (may be the caller).
    Cpu(usize),
    /// Several CPUs; duplicates are harmless.
    List(&'a [usize]),
    /// A bitmap of CPUs: bit `b` of word `w` is CPU `64 * w + b`
    /// (the layout of a `u64` mask or of a multi-word CPU set).
    Bitmap(&'a [u64]),
    /// Every CPU except the caller (GIC broadcast, including CPUs that were
    /// never passed to `init_cpu`).
    AllButSelf,
}

impl<'a> SgiTarget<'a> {
    /// The logical CPUs named, or `None` for [`SgiTarget::AllButSelf`].
    pub fn cpus(&self) -> Option<TargetCpus<'a>> {
        let state = match *self {
            SgiTarget::Cpu(cpu) => TargetState::One(Some(cpu)),
            SgiTarget::List(list) => TargetState::List(list.iter()),
            SgiTarget::Bitmap(words) => TargetState::Bitmap { words, next_bit: 0 },
            SgiTarget::AllButSelf => return None,
        };
        Some(TargetCpus { state })
    }
}

/// Iterator over the CPUs of an [`SgiTarget`].
#[derive(Clone, Debug)]
pub struct TargetCpus<'a> {
    state: TargetState<'a>,
}

#[derive(Clone, Debug)]
enum TargetState<'a> {
    One(Option<usize>),
    List(core::slice::Iter<'a, usize>),
    Bitmap { words: &'a [u64], next_bit: usize },
}

impl Iterator for TargetCpus<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        match &mut self.state {
            TargetState::One(cpu) => cpu.take(),
            TargetState::List(iter) => iter.next().copied(),
            TargetState::Bitmap { words, next_bit } => {
                while *next_bit < words.len() * 64 {
                    let word = words[*next_bit / 64] >> (*next_bit % 64);
                    if word == 0 {
                        // Skip the rest of this word.
                        *next_bit = (*next_bit / 64 + 1) * 64;
                        continue;
                    }
                    let cpu = *next_bit + word.trailing_zeros() as usize;
                    *next_bit = cpu + 1;
                    return Some(cpu);
                }
                None
            }
        }
    }
}

/// Checks an SGI number (0..=15).
pub const fn check_sgi(sgi: u8) -> Result<u8, GicError> {
    if sgi < 16 {
        Ok(sgi)
    } else {
        Err(GicError::InvalidSgi { sgi })
    }
}

/// Which CPU interfaces a GICv2 SGI goes to (GICD_SGIR.TargetListFilter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SgirTargets {
    /// The CPU interfaces whose bits are set (bit n = interface n).
    InterfaceMask(u8),
    /// Every CPU interface but the requesting one.
    AllButSelf,
    /// Only the requesting CPU interface.
    SelfOnly,
}

/// GICD_SGIR value sending `sgi` (must be 0..=15, see [`check_sgi`]).
/// NSATT is 0: the SGI is sent if it is configured as Group 0 or the
/// access is Non-secure (the Non-secure view ignores the bit).
pub fn gicd_sgir_value(sgi: u8, targets: SgirTargets) -> u32 {
    let filter = match targets {
        SgirTargets::InterfaceMask(mask) => {
            GICD_SGIR::TargetListFilter::TargetList + GICD_SGIR::CPUTargetList.val(mask.into())
        }
        SgirTargets::AllButSelf => GICD_SGIR::TargetListFilter::AllButSelf,
        SgirTargets::SelfOnly => GICD_SGIR::TargetListFilter::SelfOnly,
    };
    (GICD_SGIR::SGIINTID.val(u32::from(sgi & 0xF)) + filter).value
}

/// ICC_SGI1R_EL1 value for `sgi` to the CPUs with affinity
/// `aff3.aff2.aff1` and Aff0 in `range_selector * 16 + bit` for each set
/// bit of `target_list`.
pub fn sgi1r_value(
    sgi: u8,
    aff3: u8,
    aff2: u8,
    aff1: u8,
    range_selector: u8,
    target_list: u16,
) -> u64 {
    let value: FieldValue<u64, ICC_SGI1R_EL1::Register> = ICC_SGI1R_EL1::INTID
        .val(u64::from(sgi & 0xF))
        + ICC_SGI1R_EL1::TargetList.val(target_list.into())
        + ICC_SGI1R_EL1::Aff1.val(aff1.into())
        + ICC_SGI1R_EL1::Aff2.val(aff2.into())
        + ICC_SGI1R_EL1::Aff3.val(aff3.into())
        + ICC_SGI1R_EL1::RS.val(u64::from(range_selector & 0xF))
        + ICC_SGI1R_EL1::IRM::AffinityList;
    value.value
}

/// ICC_SGI1R_EL1 value for `sgi` to every PE but the caller (IRM = 1).
pub fn sgi1r_all_but_self(sgi: u8) -> u64 {
    (ICC_SGI1R_EL1::INTID.val(u64::from(sgi & 0xF)) + ICC_SGI1R_EL1::IRM::AllButSelf).value
}

/// How many distinct `Aff3.Aff2.Aff1.RS` groups are merged before the
/// batch is flushed (a flush only costs extra register writes).
const SGI1R_GROUPS: usize = 16;

/// Calls `emit` with the ICC_SGI1R_EL1 values that send `sgi` to every
/// CPU in `mpidrs`: one write per group of CPUs sharing Aff3.Aff2.Aff1 and
/// Aff0 / 16 (the range selector; Aff0 > 15 needs GICD_TYPER.RSS). Uses no
/// heap: groups collect in a fixed table that is flushed when full.
pub fn for_each_sgi1r(sgi: u8, mpidrs: impl IntoIterator<Item = u64>, mut emit: impl FnMut(u64)) {
    // The common case, one target or one group, keeps its group in
    // registers; the table is set up only when a second group appears.
    let mut mpidrs = mpidrs.into_iter();
    let Some(first) = mpidrs.next() else {
        return;
    };
    let (key, mut list) = sgi1r_group_of(first);
    for mpidr in mpidrs.by_ref() {
        let (other_key, bit) = sgi1r_group_of(mpidr);
        if other_key != key {
            return for_each_sgi1r_grouped(sgi, [(key, list), (other_key, bit)], mpidrs, emit);
        }
        list |= bit;
    }
    flush(sgi, &[(key, list)], &mut emit);
}

/// The ICC_SGI1R_EL1 value that sends `sgi` to the one CPU `mpidr`:
/// [`for_each_sgi1r`]'s single write for one target, without its grouping
/// (a nudge or a kick names one CPU; this is on the IPI path).
pub fn sgi1r_for_one(sgi: u8, mpidr: u64) -> u64 {
    let (key, list) = sgi1r_group_of(mpidr);
    group_sgi1r(sgi, key, list)
}

/// The ICC_SGI1R_EL1 value that sends `sgi` to the CPUs in `list` of the
/// group `key` (see [`sgi1r_group_of`]).
fn group_sgi1r(sgi: u8, key: u32, list: u16) -> u64 {
    let [rs, aff1, aff2, aff3] = key.to_le_bytes();
    sgi1r_value(sgi, aff3, aff2, aff1, rs, list)
}

/// The `Aff3.Aff2.Aff1.RS` key of `mpidr`'s group and its bit in the
/// group's target list.
fn sgi1r_group_of(mpidr: u64) -> (u32, u16) {
    let aff = Affinity::from_mpidr(mpidr);
    let key = u32::from(aff.aff3) << 24
        | u32::from(aff.aff2) << 16
        | u32::from(aff.aff1) << 8
        | u32::from(aff.aff0 >> 4);
    (key, 1u16 << (aff.aff0 & 0xF))
}

/// [`for_each_sgi1r`] from its first two groups on.
fn for_each_sgi1r_grouped(
    sgi: u8,
    first_two: [(u32, u16); 2],
    mpidrs: impl Iterator<Item = u64>,
    mut emit: impl FnMut(u64),
) {
    // (Aff3.Aff2.Aff1.RS key, target list)
    let mut groups = [(0u32, 0u16); SGI1R_GROUPS];
    groups[..2].copy_from_slice(&first_two);
    let mut used = 2;
    for mpidr in mpidrs {
        let (key, bit) = sgi1r_group_of(mpidr);
        if let Some(group) = groups[..used].iter_mut().find(|(k, _)| *k == key) {
            group.1 |= bit;
            continue;
        }
        if used == SGI1R_GROUPS {
            flush(sgi, &groups[..used], &mut emit);
            used = 0;
        }
        groups[used] = (key, bit);
        used += 1;
    }
    flush(sgi, &groups[..used], &mut emit);
}

fn flush(sgi: u8, groups: &[(u32, u16)], emit: &mut impl FnMut(u64)) {
    for &(key, list) in groups {
        emit(group_sgi1r(sgi, key, list));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sgi1r_values(sgi: u8, mpidrs: &[u64]) -> Vec<u64> {
        let mut out = Vec::new();
        for_each_sgi1r(sgi, mpidrs.iter().copied(), |v| out.push(v));
        out
    }

    #[test]
    fn one_target_is_the_grouped_write_for_one() {
        for mpidr in [
            0,
            5,
            0x0100,
            0x0203,
            0x01_0000_0311,
            0x0000_0010,
            0x00ff_ff2f,
        ] {
            assert_eq!(
                [sgi1r_for_one(6, mpidr)],
                sgi1r_values(6, &[mpidr])[..],
                "{mpidr:#x}"
            );
        }
    }

    #[test]
    fn target_iteration() {
        let cpus: Vec<usize> = SgiTarget::Cpu(5).cpus().unwrap().collect();
        assert_eq!(cpus, [5]);
        let cpus: Vec<usize> = SgiTarget::List(&[3, 1, 3]).cpus().unwrap().collect();
        assert_eq!(cpus, [3, 1, 3]);
        let words = [0b1010_0001u64, 0, 1 << 63 | 1];
        let cpus: Vec<usize> = SgiTarget::Bitmap(&words).cpus().unwrap().collect();
        assert_eq!(cpus, [0, 5, 7, 128, 191]);
        assert_eq!(SgiTarget::Bitmap(&[]).cpus().unwrap().count(), 0);
        assert!(SgiTarget::AllButSelf.cpus().is_none());
    }

    #[test]
    fn gicd_sgir_layout() {
        // IHI 0048 §4.3: SGIINTID [3:0], NSATT [15], CPUTargetList [23:16],
        // TargetListFilter [25:24].
        assert_eq!(
            gicd_sgir_value(1, SgirTargets::InterfaceMask(0b0000_0110)),
            0x0006_0001
        );
        assert_eq!(
            gicd_sgir_value(15, SgirTargets::InterfaceMask(0xFF)),
            0x00FF_000F
        );
        assert_eq!(gicd_sgir_value(0, SgirTargets::AllButSelf), 0x0100_0000);
        assert_eq!(gicd_sgir_value(7, SgirTargets::SelfOnly), 0x0200_0007);
    }

    #[test]
    fn sgi1r_layout() {
        // IHI 0069 ICC_SGI1R_EL1: TargetList [15:0], Aff1 [23:16], INTID [27:24],
        // Aff2 [39:32], IRM [40], RS [47:44], Aff3 [55:48].
        assert_eq!(sgi1r_value(3, 0, 0, 0, 0, 1), 0x0300_0001);
        assert_eq!(
            sgi1r_value(0xF, 0xAB, 0xCD, 0xEF, 0x5, 0x8001),
            0x00AB_50CD_0FEF_8001
        );
        assert_eq!(sgi1r_all_but_self(2), 0x0000_0100_0200_0000);
    }

    #[test]
    fn sgi1r_qemu_flat_mpidrs_share_one_write() {
        // QEMU virt: MPIDR 0..7 (Aff0 = CPU), bit 31 set as MPIDR_EL1 reads.
        let mpidrs: Vec<u64> = (0..8).map(|cpu| 0x8000_0000 | cpu).collect();
        assert_eq!(sgi1r_values(1, &mpidrs[1..4]), [0x0100_000E]);
        assert_eq!(sgi1r_values(1, &mpidrs), [0x0100_00FF]);
    }

    #[test]
    fn sgi1r_dynamiq_one_write_per_core() {
        // DynamIQ (RK3588, Snapdragon 8cx): MPIDR 0x000-0x700, Aff1 = core.
        let mpidrs = [0x8000_0000, 0x8000_0100, 0x8000_0700];
        assert_eq!(
            sgi1r_values(5, &mpidrs),
            [0x0500_0001, 0x0501_0001, 0x0507_0001]
        );
    }

    #[test]
    fn sgi1r_two_cluster_layout_groups_by_aff1() {
        // RK3399 / HoneyComb LX2: cluster in Aff1, core in Aff0.
        let mpidrs = [0x000, 0x001, 0x003, 0x100, 0x101, 0x701];
        assert_eq!(
            sgi1r_values(0, &mpidrs),
            [0x0000_000B, 0x0001_0003, 0x0007_0002]
        );
    }

    #[test]
    fn sgi1r_one_target_and_a_group_met_again() {
        assert_eq!(sgi1r_values(3, &[0x102]), [0x0301_0004]);
        assert_eq!(sgi1r_values(3, &[]), [] as [u64; 0]);
        // The first group comes back after a second one appeared: still
        // one write per group, in order of first appearance.
        assert_eq!(
            sgi1r_values(0, &[0x000, 0x100, 0x001]),
            [0x0000_0003, 0x0001_0001]
        );
    }

    #[test]
    fn sgi1r_ampere_altra_uses_aff2() {
        // Altra (MADT fixture): Aff2 = cluster 0x08..0x27, Aff1 = core 0/1, Aff0 = 0.
        let mpidrs = [0x1E_0100, 0x08_0000, 0x08_0100, 0x27_0000];
        assert_eq!(
            sgi1r_values(9, &mpidrs),
            [
                0x0000_001E_0901_0001,
                0x0000_0008_0900_0001,
                0x0000_0008_0901_0001,
                0x0000_0027_0900_0001,
            ]
        );
        // Second socket: Aff3 = 1.
        assert_eq!(sgi1r_values(9, &[0x01_0008_0000]), [0x0001_0008_0900_0001]);
    }

    #[test]
    fn sgi1r_range_selector_for_large_aff0() {
        // Aff0 = 0x13 is bit 3 of range 1; Aff0 = 0x03 is bit 3 of range 0.
        assert_eq!(
            sgi1r_values(4, &[0x13, 0x03, 0x1F]),
            [0x0000_1000_0400_8008, 0x0400_0008]
        );
    }

    #[test]
    fn sgi1r_flushes_when_group_table_is_full() {
        // 20 distinct clusters: more than the table holds; every CPU must
        // still be targeted exactly once.
        let mpidrs: Vec<u64> = (0..20u64).map(|cluster| cluster << 8).collect();
        let values = sgi1r_values(1, &mpidrs);
        assert_eq!(values.len(), 20);
        for (cluster, value) in values.iter().enumerate() {
            assert_eq!(*value, 0x0100_0001 | (cluster as u64) << 16);
        }
        assert!(sgi1r_values(1, &[]).is_empty());
    }

    #[test]
    fn sgi_numbers() {
        assert_eq!(check_sgi(15), Ok(15));
        assert_eq!(check_sgi(16), Err(GicError::InvalidSgi { sgi: 16 }));
    }
}
