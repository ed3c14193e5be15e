//! Register emulation tests: every register read after write, RAZ/WI,
//! access widths, errors. Offsets are spelled out from the specs (IHI
//! 0048B §4.3, IHI 0069H register maps), not taken from the code.

use super::*;

pub(super) const SPIS: u32 = 64;

pub(super) fn v3(vcpus: usize) -> Vgic {
    Vgic::new(VgicConfig {
        version: GuestGicVersion::V3,
        num_vcpus: vcpus,
        num_spis: SPIS,
    })
    .unwrap()
}

pub(super) fn v2(vcpus: usize) -> Vgic {
    Vgic::new(VgicConfig {
        version: GuestGicVersion::V2,
        num_vcpus: vcpus,
        num_spis: SPIS,
    })
    .unwrap()
}

/// Offset of vCPU `vcpu`'s RD_base frame from GICD_BASE.
pub(super) fn rd(vcpu: usize) -> u64 {
    0x080A_0000 - 0x0800_0000 + 0x2_0000 * vcpu as u64
}

/// Offset of vCPU `vcpu`'s SGI_base frame from GICD_BASE.
pub(super) fn sgi_frame(vcpu: usize) -> u64 {
    rd(vcpu) + 0x1_0000
}

pub(super) fn r32(vgic: &mut Vgic, vcpu: usize, offset: u64) -> u32 {
    let read = vgic.mmio_read(vcpu, offset, 4).unwrap();
    assert_eq!(read.warning, None, "unexpected warning at {offset:#x}");
    read.value as u32
}

pub(super) fn w32(vgic: &mut Vgic, vcpu: usize, offset: u64, value: u32) -> Actions {
    let actions = vgic.mmio_write(vcpu, offset, 4, value.into()).unwrap();
    assert_eq!(actions.warning, None, "unexpected warning at {offset:#x}");
    actions
}

const CTLR: u64 = 0x000;
const TYPER: u64 = 0x004;
const IIDR: u64 = 0x008;
const IGROUPR: u64 = 0x080;
const ISENABLER: u64 = 0x100;
const ICENABLER: u64 = 0x180;
const ISPENDR: u64 = 0x200;
const ICPENDR: u64 = 0x280;
const ISACTIVER: u64 = 0x300;
const ICACTIVER: u64 = 0x380;
const IPRIORITYR: u64 = 0x400;
const ITARGETSR: u64 = 0x800;
const ICFGR: u64 = 0xC00;
const SGIR: u64 = 0xF00;
const CPENDSGIR: u64 = 0xF10;
const SPENDSGIR: u64 = 0xF20;
const IROUTER: u64 = 0x6000;
const GICR_CTLR: u64 = 0x0;
const GICR_TYPER: u64 = 0x8;
const GICR_WAKER: u64 = 0x14;
const GICR_PROPBASER: u64 = 0x70;

#[test]
fn config_is_checked() {
    let bad = |version, num_vcpus, num_spis| {
        Vgic::new(VgicConfig {
            version,
            num_vcpus,
            num_spis,
        })
        .unwrap_err()
    };
    assert_eq!(
        bad(GuestGicVersion::V2, 9, 32),
        VgicError::BadConfig {
            num_vcpus: 9,
            num_spis: 32
        }
    );
    assert!(matches!(
        bad(GuestGicVersion::V3, 0, 32),
        VgicError::BadConfig { .. }
    ));
    assert!(matches!(
        bad(GuestGicVersion::V3, 124, 32),
        VgicError::BadConfig { .. }
    ));
    assert!(matches!(
        bad(GuestGicVersion::V3, 1, 989),
        VgicError::BadConfig { .. }
    ));
    let vgic = Vgic::new(VgicConfig {
        version: GuestGicVersion::V3,
        num_vcpus: 123,
        num_spis: 40,
    })
    .unwrap();
    assert_eq!(vgic.config().num_spis, 64, "rounded up to a multiple of 32");
    assert_eq!(vgic.num_intids(), 96);
    assert_eq!(
        vgic.mmio_regions(),
        [(0x0800_0000, 0x1_0000), (0x080A_0000, 123 * 0x2_0000)]
    );
}

#[test]
fn v3_ctlr_typer_iidr_pidr2() {
    let mut vgic = v3(4);
    // ARE (bit 4) and DS (bit 6) read as one, groups off.
    assert_eq!(r32(&mut vgic, 0, CTLR), 0x50);
    w32(&mut vgic, 0, CTLR, 0x3);
    assert_eq!(r32(&mut vgic, 1, CTLR), 0x53);
    w32(&mut vgic, 0, CTLR, 0x2);
    assert_eq!(r32(&mut vgic, 0, CTLR), 0x52);
    // ITLinesNumber = (32 + 64) / 32 - 1 = 2, CPUNumber = 3, IDbits = 15.
    assert_eq!(r32(&mut vgic, 0, TYPER), 15 << 19 | 3 << 5 | 2);
    w32(&mut vgic, 0, TYPER, 0xFFFF_FFFF);
    assert_eq!(r32(&mut vgic, 0, TYPER), 15 << 19 | 3 << 5 | 2);
    assert_eq!(r32(&mut vgic, 0, IIDR) & 0xFFF, 0x43B, "Arm implementer");
    // GICD_PIDR2 and GICR_PIDR2: ArchRev 3 in bits [7:4].
    assert_eq!(r32(&mut vgic, 0, 0xFFE8) >> 4 & 0xF, 3);
    assert_eq!(r32(&mut vgic, 0, rd(3) + 0xFFE8) >> 4 & 0xF, 3);
    assert_eq!(r32(&mut vgic, 0, 0xFFF0), 0x0D, "CIDR0");
    assert_eq!(r32(&mut vgic, 0, 0xFFFC), 0xB1, "CIDR3");
    assert_eq!(r32(&mut vgic, 0, rd(0) + 4) & 0xFFF, 0x43B, "GICR_IIDR");
}

#[test]
fn v2_ctlr_typer_pidr2() {
    let mut vgic = v2(3);
    assert_eq!(r32(&mut vgic, 0, CTLR), 0);
    w32(&mut vgic, 0, CTLR, 0xFFFF_FFFF);
    assert_eq!(r32(&mut vgic, 2, CTLR), 0x3, "only the group enables stick");
    // ITLinesNumber 2, CPUNumber 2, no Security Extensions.
    assert_eq!(r32(&mut vgic, 0, TYPER), 2 << 5 | 2);
    // ICPIDR2 in the 4 KiB GICv2 frame.
    assert_eq!(r32(&mut vgic, 0, 0xFE8) >> 4 & 0xF, 2);
}

#[test]
fn bit_registers_read_after_write_spis() {
    for mut vgic in [v3(2), v2(2)] {
        // INTIDs 32..63 are word 1, 64..95 word 2.
        w32(&mut vgic, 0, IGROUPR + 4, 0xF0F0_F0F0);
        assert_eq!(r32(&mut vgic, 1, IGROUPR + 4), 0xF0F0_F0F0);
        w32(&mut vgic, 0, IGROUPR + 4, 0x0000_0001);
        assert_eq!(r32(&mut vgic, 1, IGROUPR + 4), 0x0000_0001);

        w32(&mut vgic, 0, ISENABLER + 8, 0x8000_0011);
        w32(&mut vgic, 0, ISENABLER + 8, 0x0000_0100);
        assert_eq!(r32(&mut vgic, 0, ISENABLER + 8), 0x8000_0111);
        assert_eq!(r32(&mut vgic, 0, ICENABLER + 8), 0x8000_0111);
        w32(&mut vgic, 0, ICENABLER + 8, 0x8000_0001);
        assert_eq!(r32(&mut vgic, 1, ISENABLER + 8), 0x0000_0110);
        assert!(vgic.irq_status(0, 68).unwrap().enabled);
        assert!(!vgic.irq_status(0, 64).unwrap().enabled);

        w32(&mut vgic, 0, ISPENDR + 4, 0x0000_0006);
        assert_eq!(r32(&mut vgic, 0, ISPENDR + 4), 0x6);
        assert_eq!(r32(&mut vgic, 0, ICPENDR + 4), 0x6);
        w32(&mut vgic, 0, ICPENDR + 4, 0x0000_0002);
        assert_eq!(r32(&mut vgic, 0, ISPENDR + 4), 0x4);
        assert!(vgic.irq_status(0, 34).unwrap().pending);

        w32(&mut vgic, 1, ISACTIVER + 4, 0x0001_0000);
        assert_eq!(r32(&mut vgic, 0, ISACTIVER + 4), 0x0001_0000);
        assert_eq!(r32(&mut vgic, 0, ICACTIVER + 4), 0x0001_0000);
        w32(&mut vgic, 1, ICACTIVER + 4, 0xFFFF_FFFF);
        assert_eq!(r32(&mut vgic, 0, ISACTIVER + 4), 0);

        // Word 3 (INTIDs 96..127) is beyond the 64 SPIs: RAZ/WI, no warning.
        w32(&mut vgic, 0, ISENABLER + 12, 0xFFFF_FFFF);
        assert_eq!(r32(&mut vgic, 0, ISENABLER + 12), 0);
    }
}

#[test]
fn v3_distributor_sgi_ppi_words_are_raz_wi() {
    let mut vgic = v3(2);
    for base in [IGROUPR, ISENABLER, ISPENDR, ISACTIVER, IPRIORITYR, ICFGR] {
        w32(&mut vgic, 0, base, 0xFFFF_FFFF);
        assert_eq!(r32(&mut vgic, 0, base), 0, "{base:#x}");
    }
    assert!(!vgic.irq_status(0, 0).unwrap().enabled);
    assert!(!vgic.irq_status(0, 27).unwrap().pending);
    // ITARGETSR and SGIR are not used with affinity routing.
    w32(&mut vgic, 0, ITARGETSR + 32, 0x0202_0202);
    assert_eq!(r32(&mut vgic, 0, ITARGETSR + 32), 0);
}

#[test]
fn redistributor_sgi_frame_banks_per_vcpu() {
    let mut vgic = v3(3);
    let frame = sgi_frame(1);
    w32(&mut vgic, 0, frame + IGROUPR, 0x0800_0001);
    w32(&mut vgic, 0, frame + ISENABLER, 0x0800_FFFF);
    w32(&mut vgic, 0, frame + ISPENDR, 0x0000_0004);
    w32(&mut vgic, 0, frame + ISACTIVER, 0x0000_0008);
    assert_eq!(r32(&mut vgic, 1, frame + IGROUPR), 0x0800_0001);
    assert_eq!(r32(&mut vgic, 2, frame + ICENABLER), 0x0800_FFFF);
    assert_eq!(r32(&mut vgic, 1, frame + ICPENDR), 0x4);
    assert_eq!(r32(&mut vgic, 1, frame + ICACTIVER), 0x8);
    // Other vCPUs' banks are untouched (their reset group is 1 on v3).
    assert_eq!(r32(&mut vgic, 0, sgi_frame(0) + ISENABLER), 0);
    assert_eq!(r32(&mut vgic, 0, sgi_frame(2) + IGROUPR), 0xFFFF_FFFF);
    assert!(vgic.irq_status(1, 27).unwrap().enabled);
    assert!(!vgic.irq_status(0, 27).unwrap().enabled);
    w32(&mut vgic, 1, frame + ICENABLER, 0x0800_0000);
    w32(&mut vgic, 1, frame + ICPENDR, 0x4);
    w32(&mut vgic, 1, frame + ICACTIVER, 0x8);
    assert_eq!(r32(&mut vgic, 1, frame + ISENABLER), 0xFFFF);
    assert_eq!(r32(&mut vgic, 1, frame + ISPENDR), 0);
    assert_eq!(r32(&mut vgic, 1, frame + ISACTIVER), 0);
    // Only word 0 exists in the SGI frame.
    let read = vgic.mmio_read(1, frame + ISENABLER + 4, 4).unwrap();
    assert_eq!(read.value, 0);
    assert!(read.warning.is_some());
    // Group modifier and NSACR: RAZ/WI (DS = 1), no warning.
    w32(&mut vgic, 1, frame + 0xD00, 0xFFFF_FFFF);
    assert_eq!(r32(&mut vgic, 1, frame + 0xD00), 0);
    w32(&mut vgic, 1, frame + 0xE00, 0xFFFF_FFFF);
    assert_eq!(r32(&mut vgic, 1, frame + 0xE00), 0);
}

#[test]
fn v2_banked_words_follow_the_accessing_vcpu() {
    let mut vgic = v2(2);
    w32(&mut vgic, 1, ISENABLER, 0x0800_0002);
    assert_eq!(r32(&mut vgic, 1, ISENABLER), 0x0800_0002);
    assert_eq!(r32(&mut vgic, 0, ISENABLER), 0);
    // GICv2 SGIs are set/cleared pending only through [SC]PENDSGIR.
    w32(&mut vgic, 1, ISPENDR, 0x0000_0002);
    assert_eq!(r32(&mut vgic, 1, ISPENDR), 0);
    w32(&mut vgic, 1, ISPENDR, 0x0800_0000);
    assert_eq!(r32(&mut vgic, 1, ISPENDR), 0x0800_0000);
    assert_eq!(r32(&mut vgic, 0, ISPENDR), 0);
}

#[test]
fn ipriorityr_byte_and_word_accesses() {
    for (mut vgic, base) in [(v3(2), IPRIORITYR), (v2(2), IPRIORITYR)] {
        // Word write to INTIDs 40..43; 5 priority bits are kept.
        w32(&mut vgic, 0, base + 40, 0x4433_2211);
        assert_eq!(r32(&mut vgic, 0, base + 40), 0x4030_2010);
        // Byte write changes only INTID 41.
        vgic.mmio_write(0, base + 41, 1, 0xFF).unwrap();
        assert_eq!(r32(&mut vgic, 1, base + 40), 0x4030_F810);
        for (offset, expected) in [(40, 0x10), (41, 0xF8), (42, 0x30), (43, 0x40)] {
            let read = vgic.mmio_read(0, base + offset, 1).unwrap();
            assert_eq!(read.value, expected, "byte {offset}");
        }
        assert_eq!(vgic.irq_status(0, 42).unwrap().priority, 0x30);
        // Halfwords are not allowed.
        assert_eq!(
            vgic.mmio_write(0, base + 40, 2, 0),
            Err(VgicError::BadWidth {
                offset: base + 40,
                width: 2
            })
        );
    }
    // SGI/PPI priorities: redistributor on v3, banked GICD on v2.
    let mut vgic = v3(2);
    vgic.mmio_write(0, sgi_frame(1) + IPRIORITYR + 27, 1, 0xA0)
        .unwrap();
    assert_eq!(vgic.irq_status(1, 27).unwrap().priority, 0xA0);
    assert_eq!(vgic.irq_status(0, 27).unwrap().priority, 0);
    assert_eq!(
        r32(&mut vgic, 0, sgi_frame(1) + IPRIORITYR + 24),
        0xA0 << 24
    );
    let mut vgic = v2(2);
    vgic.mmio_write(1, IPRIORITYR + 3, 1, 0x88).unwrap();
    assert_eq!(vgic.irq_status(1, 3).unwrap().priority, 0x88);
    assert_eq!(vgic.irq_status(0, 3).unwrap().priority, 0);
}

#[test]
fn v2_itargetsr() {
    let mut vgic = v2(3);
    // SGI/PPI bytes are read-only and name the reader's own interface.
    assert_eq!(r32(&mut vgic, 2, ITARGETSR + 28), 0x0404_0404);
    assert_eq!(r32(&mut vgic, 0, ITARGETSR), 0x0101_0101);
    w32(&mut vgic, 2, ITARGETSR, 0);
    assert_eq!(r32(&mut vgic, 2, ITARGETSR), 0x0404_0404);
    // SPIs: reset to vCPU 0, writable; bits for absent CPUs are dropped.
    assert_eq!(r32(&mut vgic, 0, ITARGETSR + 32), 0x0101_0101);
    w32(&mut vgic, 0, ITARGETSR + 32, 0x0006_F802);
    assert_eq!(r32(&mut vgic, 1, ITARGETSR + 32), 0x0006_0002);
    vgic.mmio_write(0, ITARGETSR + 35, 1, 0x04).unwrap();
    assert_eq!(vgic.mmio_read(0, ITARGETSR + 35, 1).unwrap().value, 0x04);
    assert_eq!(vgic.irq_status(0, 32).unwrap().target, Some(1));
    assert_eq!(vgic.irq_status(0, 33).unwrap().target, None);
    assert_eq!(
        vgic.irq_status(0, 34).unwrap().target,
        Some(1),
        "lowest of several targets"
    );
    assert_eq!(vgic.irq_status(0, 35).unwrap().target, Some(2));
}

#[test]
fn icfgr() {
    let mut vgic = v2(2);
    // SGIs: edge, read-only.
    assert_eq!(r32(&mut vgic, 0, ICFGR), 0xAAAA_AAAA);
    w32(&mut vgic, 0, ICFGR, 0);
    assert_eq!(r32(&mut vgic, 0, ICFGR), 0xAAAA_AAAA);
    // PPIs (banked) and SPIs: writable, reset level.
    assert_eq!(r32(&mut vgic, 0, ICFGR + 4), 0);
    w32(&mut vgic, 1, ICFGR + 4, 0x0080_0000);
    assert_eq!(r32(&mut vgic, 1, ICFGR + 4), 0x0080_0000);
    assert_eq!(r32(&mut vgic, 0, ICFGR + 4), 0);
    assert!(vgic.irq_status(1, 27).unwrap().edge);
    w32(&mut vgic, 0, ICFGR + 8, 0xFFFF_FFFF);
    assert_eq!(
        r32(&mut vgic, 0, ICFGR + 8),
        0xAAAA_AAAA,
        "bit 0 of fields is RES0"
    );
    assert!(vgic.irq_status(0, 47).unwrap().edge);

    let mut vgic = v3(2);
    assert_eq!(r32(&mut vgic, 0, sgi_frame(0) + ICFGR), 0xAAAA_AAAA);
    w32(&mut vgic, 0, sgi_frame(0) + ICFGR + 4, 0x2);
    assert_eq!(r32(&mut vgic, 0, sgi_frame(0) + ICFGR + 4), 0x2);
    assert!(vgic.irq_status(0, 16).unwrap().edge);
    w32(&mut vgic, 0, ICFGR + 12, 0x8000_0000);
    assert!(vgic.irq_status(0, 63).unwrap().edge);
}

#[test]
fn v3_irouter() {
    let mut vgic = v3(20);
    // Reset: vCPU 0.
    assert_eq!(vgic.mmio_read(0, IROUTER + 8 * 40, 8).unwrap().value, 0);
    // vCPU 17 = Aff1 1, Aff0 1.
    vgic.mmio_write(0, IROUTER + 8 * 40, 8, 0x0101).unwrap();
    assert_eq!(
        vgic.mmio_read(3, IROUTER + 8 * 40, 8).unwrap().value,
        0x0101
    );
    assert_eq!(vgic.irq_status(0, 40).unwrap().target, Some(17));
    // 32-bit halves; bits outside affinity and IRM are RES0.
    w32(&mut vgic, 0, IROUTER + 8 * 41, 0x7F00_0003);
    w32(&mut vgic, 0, IROUTER + 8 * 41 + 4, 0xFFFF_FFFF);
    assert_eq!(r32(&mut vgic, 0, IROUTER + 8 * 41), 0x0000_0003);
    assert_eq!(r32(&mut vgic, 0, IROUTER + 8 * 41 + 4), 0xFF);
    assert_eq!(
        vgic.irq_status(0, 41).unwrap().target,
        None,
        "Aff3 = 0xFF names no vCPU"
    );
    w32(&mut vgic, 0, IROUTER + 8 * 41 + 4, 0);
    assert_eq!(vgic.irq_status(0, 41).unwrap().target, Some(3));
    // IRM = 1: any participating vCPU.
    vgic.mmio_write(0, IROUTER + 8 * 42, 8, 1 << 31 | 5)
        .unwrap();
    assert_eq!(
        vgic.mmio_read(0, IROUTER + 8 * 42, 8).unwrap().value,
        1 << 31 | 5
    );
    assert_eq!(vgic.irq_status(0, 42).unwrap().target, Some(0));
    // Aff0 beyond 15 or a vCPU that does not exist: routed nowhere.
    vgic.mmio_write(0, IROUTER + 8 * 43, 8, 0x0104).unwrap();
    assert_eq!(vgic.irq_status(0, 43).unwrap().target, None);
    // IROUTER0-31 are reserved, RAZ/WI; byte access is not allowed.
    vgic.mmio_write(0, IROUTER + 8 * 5, 8, 0x3).unwrap();
    assert_eq!(vgic.mmio_read(0, IROUTER + 8 * 5, 8).unwrap().value, 0);
    assert!(matches!(
        vgic.mmio_write(0, IROUTER + 8 * 40, 1, 0),
        Err(VgicError::BadWidth { .. })
    ));
}

#[test]
fn gicr_typer_waker_ctlr_propbaser() {
    let mut vgic = v3(18);
    for vcpu in [0usize, 5, 16, 17] {
        let typer = vgic.mmio_read(0, rd(vcpu) + GICR_TYPER, 8).unwrap().value;
        let affinity = (((vcpu / 16) << 8) | (vcpu % 16)) as u64;
        let last = u64::from(vcpu == 17) << 4;
        assert_eq!(
            typer,
            affinity << 32 | (vcpu as u64) << 8 | last,
            "vCPU {vcpu}"
        );
        // The same through two 32-bit reads.
        let low = r32(&mut vgic, 0, rd(vcpu) + GICR_TYPER) as u64;
        let high = r32(&mut vgic, 0, rd(vcpu) + GICR_TYPER + 4) as u64;
        assert_eq!(high << 32 | low, typer);
    }
    // Redistributors start asleep (ProcessorSleep and ChildrenAsleep).
    assert_eq!(r32(&mut vgic, 0, rd(3) + GICR_WAKER), 0x6);
    w32(&mut vgic, 3, rd(3) + GICR_WAKER, 0);
    assert_eq!(r32(&mut vgic, 0, rd(3) + GICR_WAKER), 0);
    assert_eq!(r32(&mut vgic, 0, rd(4) + GICR_WAKER), 0x6);
    w32(&mut vgic, 3, rd(3) + GICR_WAKER, 0x2);
    assert_eq!(r32(&mut vgic, 0, rd(3) + GICR_WAKER), 0x6);
    // No LPIs: GICR_CTLR.EnableLPIs and PROPBASER/PENDBASER are RAZ/WI.
    w32(&mut vgic, 0, rd(0) + GICR_CTLR, 1);
    assert_eq!(r32(&mut vgic, 0, rd(0) + GICR_CTLR), 0);
    let write = vgic
        .mmio_write(0, rd(0) + GICR_PROPBASER, 8, 0x1234_5000)
        .unwrap();
    assert_eq!(write.warning, None);
    assert_eq!(
        vgic.mmio_read(0, rd(0) + GICR_PROPBASER, 8).unwrap(),
        MmioRead {
            value: 0,
            warning: None
        }
    );
    // The GICD says no LPIs either.
    assert_eq!(r32(&mut vgic, 0, TYPER) & 1 << 17, 0);
}

#[test]
fn unknown_offsets_read_zero_ignore_writes_and_warn_once() {
    let mut vgic = v3(2);
    let first = vgic.mmio_read(1, 0x5000, 4).unwrap();
    assert_eq!(first.value, 0);
    assert_eq!(
        first.warning,
        Some(MmioWarning {
            offset: 0x5000,
            vcpu: 1,
            write: false,
            width: 4,
            value: 0
        })
    );
    assert_eq!(vgic.mmio_read(1, 0x5000, 4).unwrap().warning, None);
    assert_eq!(
        vgic.mmio_write(0, 0x5000, 4, 7).unwrap().warning,
        None,
        "same word: warned already"
    );
    let write = vgic.mmio_write(0, 0x5004, 4, 7).unwrap();
    assert_eq!(write.warning.map(|w| (w.write, w.value)), Some((true, 7)));
    assert_eq!(vgic.mmio_read(0, 0x5004, 4).unwrap().value, 0);
    // Redistributor offsets: once per frame offset, whichever vCPU's frame.
    assert!(
        vgic.mmio_read(0, rd(0) + 0x100, 4)
            .unwrap()
            .warning
            .is_some()
    );
    assert!(
        vgic.mmio_read(0, rd(1) + 0x100, 4)
            .unwrap()
            .warning
            .is_none()
    );
    assert!(
        vgic.mmio_read(0, sgi_frame(1) + 0x100 + 0x80 * 8, 4)
            .unwrap()
            .warning
            .is_some()
    );
    // Odd sizes are allowed on unknown offsets (the architecture says RAZ/WI).
    assert_eq!(vgic.mmio_read(0, 0x5102, 2).unwrap().value, 0);
    let mut v2 = v2(1);
    // GICv3-only registers are unknown to a GICv2 guest.
    assert!(
        v2.mmio_read(0, IROUTER + 8 * 40, 8)
            .unwrap()
            .warning
            .is_some()
    );
    assert!(v2.mmio_read(0, 0xD00, 4).unwrap().warning.is_some());
}

#[test]
fn access_errors() {
    let mut vgic = v3(2);
    assert_eq!(
        vgic.mmio_read(2, CTLR, 4),
        Err(VgicError::VcpuOutOfRange {
            vcpu: 2,
            num_vcpus: 2
        })
    );
    assert_eq!(
        vgic.mmio_read(0, CTLR, 8),
        Err(VgicError::BadWidth {
            offset: 0,
            width: 8
        })
    );
    assert_eq!(
        vgic.mmio_write(0, ISENABLER + 4, 1, 1),
        Err(VgicError::BadWidth {
            offset: ISENABLER + 4,
            width: 1
        })
    );
    assert_eq!(
        vgic.mmio_read(0, ISENABLER + 2, 4),
        Err(VgicError::Misaligned {
            offset: ISENABLER + 2,
            width: 4
        })
    );
    assert_eq!(
        vgic.mmio_read(0, CTLR, 3),
        Err(VgicError::BadWidth {
            offset: 0,
            width: 3
        })
    );
    // Between the GICD and the first GICR, and past the last GICR.
    assert_eq!(
        vgic.mmio_read(0, 0x2_0000, 4),
        Err(VgicError::OutsideRegion { offset: 0x2_0000 })
    );
    assert_eq!(
        vgic.mmio_read(0, rd(2), 4),
        Err(VgicError::OutsideRegion { offset: rd(2) })
    );
    // A GICv2 domain has no redistributors.
    let mut vgic = v2(2);
    assert_eq!(
        vgic.mmio_read(0, rd(0), 4),
        Err(VgicError::OutsideRegion { offset: rd(0) })
    );
    assert!(matches!(
        vgic.send_sgi(0, 0),
        Err(VgicError::WrongVersion {
            version: GuestGicVersion::V2
        })
    ));
    assert_eq!(
        vgic.inject(0, 96),
        Err(VgicError::IntIdOutOfRange { intid: 96 })
    );
    assert_eq!(
        vgic.link_hardware(40, Some(1020)),
        Err(VgicError::BadPhysicalIntId {
            physical_intid: 1020
        })
    );
}

#[test]
fn writes_that_make_an_interrupt_deliverable_kick_its_target() {
    let mut vgic = v3(3);
    vgic.mmio_write(0, IROUTER + 8 * 50, 8, 2).unwrap();
    assert_eq!(vgic.inject(0, 50), Ok(None), "disabled, distributor off");
    let actions = w32(&mut vgic, 0, ISENABLER + 4, 1 << 18);
    assert!(actions.kick.is_empty(), "distributor still off");
    let actions = w32(&mut vgic, 0, CTLR, 0x2);
    assert_eq!(actions.kick.iter().collect::<Vec<_>>(), [2]);
    // Re-routing a deliverable SPI kicks the new target.
    let actions = vgic.mmio_write(0, IROUTER + 8 * 50, 8, 1).unwrap();
    assert_eq!(actions.kick.iter().collect::<Vec<_>>(), [1]);
    // Pending set through ISPENDR kicks too.
    w32(&mut vgic, 0, ISENABLER + 4, 1 << 19);
    let actions = w32(&mut vgic, 0, ISPENDR + 4, 1 << 19);
    assert_eq!(actions.kick.iter().collect::<Vec<_>>(), [0]);
    // A Group 0 interrupt while only Group 1 is enabled does not.
    w32(&mut vgic, 0, IGROUPR + 4, 0);
    w32(&mut vgic, 0, ISENABLER + 4, 1 << 20);
    let actions = w32(&mut vgic, 0, ISPENDR + 4, 1 << 20);
    assert!(actions.kick.is_empty());
}

#[test]
fn hardware_linked_interrupts_report_guest_changes() {
    let mut vgic = v3(2);
    vgic.link_hardware(40, Some(72)).unwrap();
    vgic.link_hardware(27, Some(27)).unwrap();
    let actions = w32(&mut vgic, 0, ISENABLER + 4, 1 << 8 | 1 << 9);
    assert_eq!(
        actions.hw_changed,
        Some(HwChange {
            bank: 0,
            first_intid: 32,
            mask: 1 << 8
        })
    );
    let actions = w32(&mut vgic, 0, ISENABLER + 4, 1 << 9);
    assert_eq!(actions.hw_changed, None);
    let actions = w32(&mut vgic, 1, sgi_frame(1) + ICENABLER, 1 << 27);
    assert_eq!(
        actions.hw_changed,
        Some(HwChange {
            bank: 1,
            first_intid: 0,
            mask: 1 << 27
        })
    );
    assert_eq!(vgic.irq_status(1, 27).unwrap().hardware, Some(27));
    assert_eq!(vgic.irq_status(0, 27).unwrap().hardware, Some(27));
    vgic.link_hardware(27, None).unwrap();
    assert_eq!(vgic.irq_status(0, 27).unwrap().hardware, None);
    assert_eq!(
        vgic.link_hardware(3, Some(30)),
        Err(VgicError::IntIdOutOfRange { intid: 3 })
    );
}

#[test]
fn v2_sgir_and_sgi_pending_registers() {
    let mut vgic = v2(4);
    // SGIR is write-only: reads as zero without a warning.
    assert_eq!(r32(&mut vgic, 0, SGIR), 0);
    // Target list: interfaces 1 and 3 (bit 4 names no vCPU).
    w32(&mut vgic, 0, SGIR, 0b1_1010 << 16 | 5);
    for (vcpu, pending) in [(0, false), (1, true), (2, false), (3, true)] {
        assert_eq!(vgic.irq_status(vcpu, 5).unwrap().pending, pending);
    }
    // SPENDSGIR shows the sources: byte 5 of vCPU 3's bank = source 0.
    assert_eq!(vgic.mmio_read(3, SPENDSGIR + 5, 1).unwrap().value, 0b1);
    assert_eq!(r32(&mut vgic, 3, CPENDSGIR + 4), 0b1 << 8);
    // Add source 2 through SPENDSGIR, drop source 0 through CPENDSGIR.
    vgic.mmio_write(3, SPENDSGIR + 5, 1, 0b100).unwrap();
    assert_eq!(vgic.mmio_read(3, SPENDSGIR + 5, 1).unwrap().value, 0b101);
    vgic.mmio_write(3, CPENDSGIR + 5, 1, 0b001).unwrap();
    assert_eq!(vgic.mmio_read(3, CPENDSGIR + 5, 1).unwrap().value, 0b100);
    assert!(vgic.irq_status(3, 5).unwrap().pending);
    vgic.mmio_write(3, CPENDSGIR + 5, 1, 0b100).unwrap();
    assert!(!vgic.irq_status(3, 5).unwrap().pending);
}
