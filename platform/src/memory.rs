//! Choosing where the hypervisor heap goes in RAM: pure logic, host-tested.

/// Alignment of heap regions: one level-2 block, so the region is Normal memory
/// in the identity map even when its GiB mixes RAM and MMIO.
pub const HEAP_ALIGN: u64 = 2 << 20;

/// The largest RAM range of at most `want` bytes, aligned to [`HEAP_ALIGN`], that
/// lies in one of `ram` (`(base, size)`) and overlaps none of `reserved`
/// (`(start, end)` exclusive; the image, the device tree, reserved-memory).
/// Prefers the lowest address among equally large candidates.
pub fn choose_heap_region(
    ram: &[(u64, u64)],
    reserved: &[(u64, u64)],
    want: u64,
) -> Option<(u64, u64)> {
    let mut best: Option<(u64, u64)> = None;
    for &(base, size) in ram {
        let ram_end = base.saturating_add(size);
        // Candidate starts: the RAM base and the end of every reservation.
        let starts = core::iter::once(base).chain(reserved.iter().map(|&(_, end)| end));
        for start in starts {
            let start = align_up(start, HEAP_ALIGN);
            if start < base || start >= ram_end {
                continue;
            }
            let mut end = ram_end.min(start.saturating_add(want));
            for &(r_start, r_end) in reserved {
                if r_end > start && r_start < end {
                    end = end.min(r_start.max(start));
                }
            }
            end &= !(HEAP_ALIGN - 1);
            if end > start && best.is_none_or(|(_, len)| end - start > len) {
                best = Some((start, end - start));
            }
        }
    }
    best
}

fn align_up(value: u64, align: u64) -> u64 {
    value.saturating_add(align - 1) & !(align - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn heap_goes_after_the_image_and_avoids_the_dtb() {
        // QEMU virt, 1 GiB: image at 0x40080000..0x40600000, DTB at 0x48000000.
        let ram = [(0x4000_0000, 1024 * MIB)];
        let reserved = [(0x4008_0000, 0x4060_0000), (0x4800_0000, 0x4801_0000)];
        let (start, size) = choose_heap_region(&ram, &reserved, 64 * MIB).unwrap();
        assert_eq!(
            (start, size),
            (0x4060_0000, 64 * MIB),
            "lowest 64 MiB after the image"
        );
        for &(r0, r1) in &reserved {
            assert!(start + size <= r0 || start >= r1);
        }
    }

    #[test]
    fn takes_what_fits_when_ram_is_small() {
        let ram = [(0, 16 * MIB)];
        let reserved = [(0x8_0000, 4 * MIB)];
        assert_eq!(
            choose_heap_region(&ram, &reserved, 64 * MIB),
            Some((4 * MIB, 12 * MIB))
        );
    }

    #[test]
    fn none_when_everything_is_reserved() {
        let ram = [(0, 4 * MIB)];
        assert_eq!(choose_heap_region(&ram, &[(0, 4 * MIB)], 64 * MIB), None);
    }
}
