//! The CPUs' own sibling view against a real SMT device tree (QEMU's
//! `-smp 16,sockets=2,clusters=2,cores=2,threads=2`, from `shared/fixtures`):
//! the CPUs of such a machine would name their threads in MPIDR (MT set,
//! Aff0 = thread), and a copy of the tree whose `cpu-map` is lost (so the
//! firmware topology makes every thread a core of its own) must be caught.

use hv::sibling_view::{Disagreement, Identity, checked_groups, disagreements, sibling_groups};
use sched::lockstep::RecordingPlatform;
use sched::{Granularity, Placement, System, SystemConfig, Topology};

const VIRT_SMT: &[u8] = include_bytes!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/fixtures/qemu/qemu-virt-smp16-smt.dtb"
));

fn topology(blob: &[u8]) -> Topology {
    platform::dt::parse(blob)
        .expect("the fixture parses")
        .topology()
        .expect("and has a topology")
}

/// What each CPU of the real machine would read from MPIDR_EL1: RES1 bit 31,
/// MT, and its place in the tree's `cpu-map` as Aff3..Aff0.
fn mpidrs_of(truth: &Topology) -> Vec<Option<Identity>> {
    truth
        .cpus()
        .iter()
        .map(|c| {
            let mpidr = (1 << 31)
                | (1 << 24)
                | (u64::from(c.socket) << 32)
                | (u64::from(c.cluster) << 16)
                | (u64::from(c.core) << 8)
                | u64::from(c.thread);
            Some(Identity::Arm { mpidr })
        })
        .collect()
}

/// The same tree with its `cpu-map` node renamed (same length, so the blob
/// stays valid): the parser then finds no topology and makes every CPU a core.
fn without_cpu_map(blob: &[u8]) -> Vec<u8> {
    let mut doctored = blob.to_vec();
    let at = doctored
        .windows(8)
        .position(|w| w == b"cpu-map\0")
        .expect("the fixture has a cpu-map node");
    doctored[at..at + 7].copy_from_slice(b"cpu-mop");
    doctored
}

fn core_pool(topology: Topology) -> System {
    let mut system = System::new(topology, SystemConfig::default(), sched::schedulers::create);
    system
        .boot_pool0(
            "credit2",
            Granularity::Core,
            Placement::Fixed,
            &RecordingPlatform::default(),
        )
        .expect("pool 0");
    system
}

#[test]
fn the_real_tree_agrees_with_what_its_cpus_would_say() {
    let truth = topology(VIRT_SMT);
    let ids = mpidrs_of(&truth);
    assert_eq!(truth.len(), 16);
    assert!(disagreements(&ids, &truth).is_empty());
    let groups = checked_groups(&core_pool(truth), &sibling_groups(&ids));
    assert_eq!(groups.len(), 8, "{groups:?}");
}

#[test]
fn a_tree_that_lost_its_cpu_map_is_caught_and_its_threads_still_checked() {
    let truth = topology(VIRT_SMT);
    let ids = mpidrs_of(&truth);
    let forgetful = topology(&without_cpu_map(VIRT_SMT));
    assert_eq!(forgetful.len(), 16);
    let found = disagreements(&ids, &forgetful);
    assert_eq!(found.len(), 8, "{found:?}");
    assert!(
        found
            .iter()
            .all(|d| matches!(d, Disagreement::SiblingsSplit { cpus } if cpus.len() == 2))
    );
    // The scheduler sees sixteen one-thread cores and shares none of them;
    // the checker still replays the eight real pairs.
    let system = core_pool(forgetful);
    assert!(hv::runtime::coresidency::shared_resources(&system).is_empty());
    let mut groups = checked_groups(&system, &sibling_groups(&ids));
    groups.sort();
    let mut pairs: Vec<Vec<usize>> = truth
        .cpus()
        .iter()
        .filter(|c| c.thread == 0)
        .map(|c| truth.siblings(c.index, Granularity::Core).iter().collect())
        .collect();
    pairs.sort();
    assert_eq!(groups, pairs);
}
