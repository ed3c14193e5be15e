//! `platform::dt` never panics: every fixture truncated at many lengths and with
//! bits flipped at many offsets (deterministic, so a failure reproduces) either
//! parses into a description whose topology and report work, or gives an error.

use platform::dt;

macro_rules! fixture {
    ($path:literal) => {
        (
            $path,
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../shared/fixtures/",
                $path
            ))
            .as_slice(),
        )
    };
}

const FIXTURES: &[(&str, &[u8])] = &[
    fixture!("dtb/bcm2711-rpi-4-b.dtb"),
    fixture!("dtb/rk3399-rockpro64.dtb"),
    fixture!("dtb/juno-r2.dtb"),
    fixture!("dtb/rk3588-rock-5b.dtb"),
    fixture!("dtb/hip07-d05.dtb"),
    fixture!("qemu/qemu-virt-smp8.dtb"),
    fixture!("qemu/qemu-virt-smp16-smt.dtb"),
    fixture!("qemu/qemu-raspi4b-from-debian-dtb.dtb"),
];

/// Everything the boot path does with a blob. Returns whether it parsed.
fn exercise(blob: &[u8]) -> bool {
    match dt::parse(blob) {
        Ok(description) => {
            let topology = description
                .topology()
                .expect("parse guarantees a valid topology");
            assert_eq!(topology.len(), description.logical_cpus().count());
            let mut report = String::new();
            dt::write_topology_report(&mut report, &description, &topology).expect("report");
            let _ = description.check_bootable();
            for warning in &description.warnings {
                assert!(!warning.to_string().is_empty());
            }
            true
        }
        Err(error) => {
            assert!(!error.to_string().is_empty());
            false
        }
    }
}

fn header_word(blob: &[u8], index: usize) -> usize {
    u32::from_be_bytes(blob[index * 4..index * 4 + 4].try_into().unwrap()) as usize
}

/// xorshift64: a fixed seed per fixture keeps failures reproducible.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, bound: usize) -> usize {
        (self.next() % bound as u64) as usize
    }
}

#[test]
fn fixtures_parse_unmodified() {
    for (name, blob) in FIXTURES {
        assert!(exercise(blob), "{name}");
    }
}

#[test]
fn truncated_fixtures_never_panic() {
    for (name, blob) in FIXTURES {
        let total = header_word(blob, 1).min(blob.len());
        let mut lengths: Vec<usize> = (0..=80).collect();
        lengths.extend((0..total).step_by((total / 300).max(1)));
        lengths.extend(total.saturating_sub(64)..total);
        for length in lengths {
            // Shorter than totalsize is always an error (the header says so).
            assert!(
                !exercise(&blob[..length]),
                "{name} truncated to {length} parsed"
            );
        }
        // Shrinking totalsize and the structure size in the header instead cuts the
        // tree itself: the walk must stop at the block's end.
        let struct_size = header_word(blob, 9);
        for cut in (0..struct_size).step_by((struct_size / 200).max(1)) {
            let mut copy = blob[..total].to_vec();
            copy[36..40].copy_from_slice(&(cut as u32).to_be_bytes());
            exercise(&copy);
        }
    }
}

#[test]
fn bit_flipped_fixtures_never_panic() {
    for (seed, (name, blob)) in FIXTURES.iter().enumerate() {
        let total = header_word(blob, 1).min(blob.len());
        let struct_offset = header_word(blob, 2).min(total);
        let struct_end = (struct_offset + header_word(blob, 9)).min(total);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (seed as u64 + 1));
        let mut copy = blob[..total].to_vec();
        for round in 0..1500 {
            // Mostly the structure block, where the tree lives; also the header and strings.
            let offset = match round % 4 {
                0 => rng.below(total),
                1 => rng.below(64.min(total)),
                _ => struct_offset + rng.below((struct_end - struct_offset).max(1)),
            }
            .min(total - 1);
            let original = copy[offset];
            copy[offset] = match round % 3 {
                0 => original ^ (1 << rng.below(8)),
                1 => 0xff,
                _ => 0,
            };
            exercise(&copy);
            copy[offset] = original;
        }
        // Several corruptions at once.
        for _ in 0..200 {
            let mut multi = copy.clone();
            for _ in 0..8 {
                let offset = struct_offset + rng.below((struct_end - struct_offset).max(1));
                multi[offset.min(total - 1)] ^= 1 << rng.below(8);
            }
            exercise(&multi);
        }
        assert!(exercise(&copy), "{name}: restored copy must parse again");
    }
}

#[test]
fn random_bytes_behind_a_valid_header_never_panic() {
    let mut rng = Rng(0x1234_5678_9abc_def1);
    for _ in 0..2000 {
        let length = 48 + rng.below(400);
        let mut blob: Vec<u8> = (0..length).map(|_| rng.next() as u8).collect();
        let struct_offset = 40 + rng.below(length - 40);
        let fields = [
            0xd00d_feed,
            length as u32,
            struct_offset as u32,
            (40 + rng.below(length - 40)) as u32,
            40,
            17,
            16,
            0,
            rng.below(length) as u32,
            rng.below(length - struct_offset + 1) as u32,
        ];
        for (index, field) in fields.into_iter().enumerate() {
            blob[index * 4..index * 4 + 4].copy_from_slice(&field.to_be_bytes());
        }
        // Start the structure block with a root node often enough to get past it.
        if rng.below(2) == 0 && struct_offset + 8 <= length {
            blob[struct_offset..struct_offset + 8].copy_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
        }
        exercise(&blob);
    }
}
