//! Property tests of the pure encodings: list registers survive encode/decode
//! in both layouts, and the ICC_SGI1R_EL1 batching reaches every target CPU
//! exactly as often as a naive one-write-per-CPU scheme would, whatever the
//! MPIDR layout.

use std::collections::BTreeSet;

use gic::list_register::{ListRegister, ListRegisterState, VirtualInterruptSource};
use gic::sgi::for_each_sgi1r;
use gic::{GicError, GicVersion};
use proptest::prelude::*;

fn state() -> impl Strategy<Value = ListRegisterState> {
    prop_oneof![
        Just(ListRegisterState::Invalid),
        Just(ListRegisterState::Pending),
        Just(ListRegisterState::Active),
        Just(ListRegisterState::PendingActive),
    ]
}

/// List registers that fit both layouts (v2 keeps priority bits [7:3]).
fn portable_list_register() -> impl Strategy<Value = ListRegister> {
    (
        0u32..1020,
        any::<bool>(),
        16u32..1020,
        any::<bool>(),
        0u8..32,
        any::<bool>(),
        state(),
    )
        .prop_map(
            |(virtual_intid, hardware, physical, eoi, priority, group1, state)| {
                let source = if hardware {
                    VirtualInterruptSource::Hardware {
                        physical_intid: physical,
                    }
                } else {
                    VirtualInterruptSource::Software {
                        eoi_maintenance: eoi,
                        sgi_source_cpu: 0,
                    }
                };
                ListRegister {
                    virtual_intid,
                    source,
                    priority: priority << 3,
                    group1,
                    state,
                }
            },
        )
}

/// Decodes one ICC_SGI1R_EL1 value into the MPIDR affinities it targets.
fn sgi1r_targets(value: u64) -> Vec<u64> {
    let target_list = value & 0xFFFF;
    let aff1 = (value >> 16) & 0xFF;
    let aff2 = (value >> 32) & 0xFF;
    let range_selector = (value >> 44) & 0xF;
    let aff3 = (value >> 48) & 0xFF;
    (0..16)
        .filter(|bit| target_list & (1 << bit) != 0)
        .map(|bit| aff3 << 32 | aff2 << 16 | aff1 << 8 | (range_selector * 16 + bit))
        .collect()
}

/// MPIDR affinities in the layouts the hypervisor meets: flat (QEMU),
/// Aff1 = core (DynamIQ), Aff2 = cluster (Altra), sockets in Aff3, Aff0 > 15.
fn mpidr() -> impl Strategy<Value = u64> {
    prop_oneof![
        (0u64..8),
        (0u64..8).prop_map(|core| core << 8),
        (8u64..0x28, 0u64..2).prop_map(|(cluster, core)| cluster << 16 | core << 8),
        (0u64..2, 0u64..4, 0u64..64)
            .prop_map(|(socket, cluster, thread)| socket << 32 | cluster << 8 | thread),
        any::<u64>().prop_map(|raw| raw & 0xFF_00FF_FFFF),
    ]
}

proptest! {
    #[test]
    fn list_registers_round_trip_in_both_layouts(lr in portable_list_register()) {
        for version in [GicVersion::V2, GicVersion::V3] {
            let raw = lr.encode(version).unwrap();
            prop_assert_eq!(ListRegister::decode(version, raw), lr);
        }
    }

    #[test]
    fn v3_list_registers_keep_full_priority_and_large_intids(
        virtual_intid in prop_oneof![0u32..1020, 8192u32..(1 << 24)],
        priority in any::<u8>(),
        group1 in any::<bool>(),
        state in state(),
        eoi in any::<bool>(),
    ) {
        let lr = ListRegister {
            virtual_intid,
            source: VirtualInterruptSource::Software { eoi_maintenance: eoi, sgi_source_cpu: 0 },
            priority,
            group1,
            state,
        };
        prop_assert_eq!(ListRegister::decode_v3(lr.encode_v3().unwrap()), lr);
    }

    #[test]
    fn list_register_encoding_rejects_instead_of_truncating(virtual_intid in 1020u32..8192) {
        let lr = ListRegister::pending(virtual_intid, 0);
        let rejected = matches!(
            lr.encode_v3(),
            Err(GicError::ListRegisterFieldOutOfRange { .. })
        );
        prop_assert!(rejected);
        prop_assert!(lr.encode_v2().is_err());
    }

    #[test]
    fn sgi1r_batches_reach_exactly_the_targets(
        sgi in 0u8..16,
        mpidrs in proptest::collection::vec(mpidr(), 0..80),
    ) {
        let mut writes = Vec::new();
        for_each_sgi1r(sgi, mpidrs.iter().copied(), |value| writes.push(value));
        let wanted: BTreeSet<u64> = mpidrs.iter().copied().collect();
        let mut reached = BTreeSet::new();
        for value in &writes {
            prop_assert_eq!((value >> 24) & 0xF, u64::from(sgi));
            prop_assert_eq!((value >> 40) & 1, 0, "IRM must be 0 for a target list");
            for target in sgi1r_targets(*value) {
                reached.insert(target);
            }
        }
        prop_assert_eq!(&reached, &wanted);
        // Never more writes than targets.
        prop_assert!(writes.len() <= mpidrs.len());
    }
}
