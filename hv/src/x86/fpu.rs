//! When a CPU must load a vCPU's x87/SSE(/AVX) registers before `VMRUN`,
//! the register image (FXSAVE layout, or XSAVE's standard format when the
//! host has XSAVE) of a vCPU that has never changed them, and the guest's
//! XCR0: which values XSETBV may write and what CPUID leaf 0xD says.
//!
//! Guests get XSAVE with the x87, SSE and AVX components when the host has
//! them ([`GUEST_XCR0_SUPPORTED`]); the hypervisor saves and restores all
//! three for every vCPU whatever its own XCR0 says (the XMM registers are
//! usable with XCR0 = x87 alone), so no component another domain wrote can
//! survive a switch. Larger components (AVX-512, AMX, PKRU) are not offered:
//! their state is not switched.
//!
//! `VMRUN` saves no FPU state, so the hypervisor switches it. It does so
//! only when the CPU's registers do not already hold the entering vCPU's
//! state, as KVM keeps a guest's FPU loaded while its vCPU stays on a CPU:
//! a restore on every entry costs 512 bytes each way, and under QEMU's TCG
//! every `FXRSTOR` on one CPU also rewrites the boot CPU's SVM state flags
//! without synchronisation (see the README, "QEMU TCG defect"). A vCPU whose
//! registers are still in their reset state gets them by `FNINIT` and
//! register clears instead of a restore, which also wipes what the previous
//! domain left there.

/// Size of an FXSAVE image.
pub const FX_BYTES: usize = 512;

/// Offsets in the FXSAVE image (Intel SDM vol. 1, table 10-2).
mod offset {
    /// x87 control word.
    pub const FCW: usize = 0;
    /// Everything after FCW up to MXCSR: status word, abridged tag word, last
    /// opcode, instruction and data pointers.
    pub const AFTER_FCW: core::ops::Range<usize> = 2..24;
    /// MXCSR.
    pub const MXCSR: usize = 24;
    /// ST0-ST7 (16 bytes each) and XMM0-XMM15 (16 bytes each).
    pub const REGISTERS: core::ops::Range<usize> = 32..416;
}

/// x87 control word after reset: all exceptions masked, 64-bit precision,
/// round to nearest.
pub const RESET_FCW: u16 = 0x037f;
/// MXCSR after reset: all SIMD exceptions masked, round to nearest.
pub const RESET_MXCSR: u32 = 0x1f80;

/// The FXSAVE image of a CPU after reset: control words set, everything else
/// zero (MXCSR_MASK, written by FXSAVE, is left zero: restores ignore it).
pub fn reset_image() -> [u8; FX_BYTES] {
    let mut image = [0u8; FX_BYTES];
    image[offset::FCW..offset::FCW + 2].copy_from_slice(&RESET_FCW.to_le_bytes());
    image[offset::MXCSR..offset::MXCSR + 4].copy_from_slice(&RESET_MXCSR.to_le_bytes());
    image
}

/// Whether `image` holds the reset state: what `FNINIT`, zeroed x87 and
/// XMM registers and MXCSR = 0x1F80 give. MXCSR_MASK and the reserved and
/// software-available bytes from 416 on are not state and are not compared.
pub fn is_reset(image: &[u8; FX_BYTES]) -> bool {
    let reset = reset_image();
    image[offset::FCW..offset::FCW + 2] == reset[offset::FCW..offset::FCW + 2]
        && image[offset::AFTER_FCW].iter().all(|&b| b == 0)
        && image[offset::MXCSR..offset::MXCSR + 4] == reset[offset::MXCSR..offset::MXCSR + 4]
        && image[offset::REGISTERS].iter().all(|&b| b == 0)
}

/// What a CPU's x87/SSE registers hold between guest entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpuHolder {
    /// Nothing known (after boot).
    Unknown,
    /// The reset state (whoever ran last left it so).
    Reset,
    /// The live state of this vCPU (scheduler id), as it left its last run.
    Vcpu(u32),
}

impl FpuHolder {
    /// Packs the holder into a word for a per-CPU atomic.
    pub const fn encode(self) -> u32 {
        match self {
            Self::Unknown => 0,
            Self::Reset => 1,
            Self::Vcpu(id) => id.saturating_add(2),
        }
    }

    /// The inverse of [`FpuHolder::encode`].
    pub const fn decode(word: u32) -> Self {
        match word {
            0 => Self::Unknown,
            1 => Self::Reset,
            n => Self::Vcpu(n - 2),
        }
    }
}

/// How to give the entering vCPU its registers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FpuLoad {
    /// The registers already hold its state.
    Keep,
    /// Its state is the reset state: `FNINIT`, clear the registers, load
    /// MXCSR (no restore instruction).
    Reset,
    /// Restore its saved image (`FXRSTOR`).
    Restore,
}

/// How the CPU whose registers hold `holder` gives vCPU `vcpu` its state.
/// `saved_here_last`: the vCPU's saved image was last written on this CPU
/// (it has not run elsewhere since); `saved_is_reset`: that image is the
/// reset state ([`is_reset`]).
pub fn load_action(
    holder: FpuHolder,
    vcpu: u32,
    saved_here_last: bool,
    saved_is_reset: bool,
) -> FpuLoad {
    if saved_is_reset {
        if holder == FpuHolder::Reset {
            FpuLoad::Keep
        } else {
            FpuLoad::Reset
        }
    } else if holder == FpuHolder::Vcpu(vcpu) && saved_here_last {
        FpuLoad::Keep
    } else {
        FpuLoad::Restore
    }
}

/// What the CPU's registers hold after vCPU `vcpu` ran and its state was
/// saved into an image that `saved_is_reset` says is the reset state.
pub fn holder_after_run(vcpu: u32, saved_is_reset: bool) -> FpuHolder {
    if saved_is_reset {
        FpuHolder::Reset
    } else {
        FpuHolder::Vcpu(vcpu)
    }
}

/// XCR0 bit: x87 state.
pub const XCR0_X87: u64 = 1 << 0;
/// XCR0 bit: SSE state (XMM registers, MXCSR).
pub const XCR0_SSE: u64 = 1 << 1;
/// XCR0 bit: AVX state (the upper halves of the YMM registers).
pub const XCR0_AVX: u64 = 1 << 2;
/// The XCR0 components a guest may enable, when the host has them.
pub const GUEST_XCR0_SUPPORTED: u64 = XCR0_X87 | XCR0_SSE | XCR0_AVX;
/// XCR0 after reset (x87 only).
pub const RESET_XCR0: u64 = XCR0_X87;

/// Bytes of a vCPU's register image: the XSAVE standard format up to the
/// end of the AVX component (legacy region 0-511, header 512-575, AVX
/// 576-831), rounded up; an FXSAVE image is its first [`FX_BYTES`].
pub const AREA_BYTES: usize = 1024;
/// Where the XSAVE header starts (XSTATE_BV, XCOMP_BV, reserved).
const XSAVE_HEADER: usize = 512;
/// The AVX component in the standard format (architectural: CPUID 0xD.2
/// reports it there on every CPU with AVX).
const AVX_AREA: core::ops::Range<usize> = 576..832;

/// The bytes an XSAVE of the components in `xcr0` needs (standard format):
/// what CPUID 0xD.0 EBX (enabled) and ECX (supported) report.
pub fn xsave_size(xcr0: u64) -> u32 {
    if xcr0 & XCR0_AVX != 0 {
        AVX_AREA.end as u32
    } else {
        AVX_AREA.start as u32
    }
}

/// Why a guest's XSETBV is refused (it gets #GP, as the SDM says).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XsetbvError {
    /// ECX names an XCR other than XCR0.
    NotXcr0(u32),
    /// Not executed at CPL 0.
    NotCpl0,
    /// A component the guest was not offered.
    Unsupported(u64),
    /// x87 off, or AVX without SSE.
    Invalid(u64),
}

/// Checks a guest's `XSETBV` of `value` into XCR `index` at privilege
/// level `cpl`, with `supported` the components it was offered; the new
/// XCR0 if the write is valid.
pub fn check_xsetbv(index: u32, value: u64, cpl: u8, supported: u64) -> Result<u64, XsetbvError> {
    if cpl != 0 {
        return Err(XsetbvError::NotCpl0);
    }
    if index != 0 {
        return Err(XsetbvError::NotXcr0(index));
    }
    if value & !supported != 0 {
        return Err(XsetbvError::Unsupported(value));
    }
    if value & XCR0_X87 == 0 || (value & XCR0_AVX != 0 && value & XCR0_SSE == 0) {
        return Err(XsetbvError::Invalid(value));
    }
    Ok(value)
}

/// CPUID leaf 0xD (processor extended state) for a guest offered
/// `supported` components whose XCR0 is `xcr0`: sub-leaf 0 the components
/// and sizes, 1 none of the optimised or supervisor forms (XSAVEOPT,
/// XSAVEC, XGETBV with ECX = 1, XSAVES: not offered), 2 the AVX component's
/// size and offset; all zero without XSAVE (`supported` 0).
pub fn cpuid_leaf_0xd(subleaf: u32, supported: u64, xcr0: u64) -> [u32; 4] {
    if supported == 0 {
        return [0; 4];
    }
    match subleaf {
        0 => [
            supported as u32,
            xsave_size(xcr0),
            xsave_size(supported),
            (supported >> 32) as u32,
        ],
        2 if supported & XCR0_AVX != 0 => [
            (AVX_AREA.end - AVX_AREA.start) as u32,
            AVX_AREA.start as u32,
            0,
            0,
        ],
        _ => [0; 4],
    }
}

/// A vCPU's register image after reset, for either layout: the FXSAVE
/// reset image, an all-zero XSAVE header (XSTATE_BV 0: every component in
/// its initial state) and zero AVX halves.
pub fn reset_area() -> [u8; AREA_BYTES] {
    let mut area = [0u8; AREA_BYTES];
    area[..FX_BYTES].copy_from_slice(&reset_image());
    area
}

/// Whether `area` (an image XSAVE or FXSAVE wrote, or [`reset_area`]) holds
/// reset registers: the legacy region as [`is_reset`] says, and zero AVX
/// halves (an FXSAVE never writes them, so they stay as [`reset_area`]
/// made them).
pub fn is_reset_area(area: &[u8; AREA_BYTES]) -> bool {
    let mut legacy = [0u8; FX_BYTES];
    legacy.copy_from_slice(&area[..FX_BYTES]);
    is_reset(&legacy) && area[AVX_AREA].iter().all(|&b| b == 0)
}

/// Whether `area`'s XSAVE header is one XRSTOR takes in the standard format
/// (XCOMP_BV and the reserved bytes zero; XSTATE_BV within `supported`):
/// what XSAVE writes, checked before a restore so a corrupt image is a
/// logged reset rather than a #GP in the hypervisor.
pub fn header_is_valid(area: &[u8; AREA_BYTES], supported: u64) -> bool {
    let header = &area[XSAVE_HEADER..XSAVE_HEADER + 64];
    let mut bv = [0u8; 8];
    bv.copy_from_slice(&header[..8]);
    u64::from_le_bytes(bv) & !supported == 0 && header[8..].iter().all(|&b| b == 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn xsetbv_takes_what_the_sdm_allows_and_nothing_else() {
        let all = GUEST_XCR0_SUPPORTED;
        assert_eq!(check_xsetbv(0, 0b111, 0, all), Ok(0b111));
        assert_eq!(check_xsetbv(0, 0b011, 0, all), Ok(0b011));
        assert_eq!(check_xsetbv(0, 0b001, 0, all), Ok(0b001));
        assert_eq!(check_xsetbv(0, 0b000, 0, all), Err(XsetbvError::Invalid(0)));
        assert_eq!(
            check_xsetbv(0, 0b110, 0, all),
            Err(XsetbvError::Invalid(0b110))
        );
        assert_eq!(
            check_xsetbv(0, 0b101, 0, all),
            Err(XsetbvError::Invalid(0b101))
        );
        // AVX-512 and PKRU are never offered; AVX only when the host has it.
        assert_eq!(
            check_xsetbv(0, 0xe7, 0, all),
            Err(XsetbvError::Unsupported(0xe7))
        );
        assert_eq!(
            check_xsetbv(0, 1 << 9 | 0b111, 0, all),
            Err(XsetbvError::Unsupported(0x207))
        );
        assert_eq!(
            check_xsetbv(0, 0b111, 0, 0b011),
            Err(XsetbvError::Unsupported(0b111))
        );
        assert_eq!(check_xsetbv(1, 0b111, 0, all), Err(XsetbvError::NotXcr0(1)));
        assert_eq!(check_xsetbv(0, 0b111, 3, all), Err(XsetbvError::NotCpl0));
    }

    #[test]
    fn leaf_0xd_sizes_follow_the_enabled_components() {
        let all = GUEST_XCR0_SUPPORTED;
        // Sub-leaf 0: supported components, size for XCR0, size for all.
        assert_eq!(cpuid_leaf_0xd(0, all, XCR0_X87), [7, 576, 832, 0]);
        assert_eq!(cpuid_leaf_0xd(0, all, all), [7, 832, 832, 0]);
        assert_eq!(cpuid_leaf_0xd(0, 0b011, 0b011), [3, 576, 576, 0]);
        // No XSAVEOPT/XSAVEC/XSAVES; AVX 256 bytes at 576 (SDM table 13-1's
        // standard format, what CPUID 0xD.2 reports on AMD and Intel).
        assert_eq!(cpuid_leaf_0xd(1, all, all), [0; 4]);
        assert_eq!(cpuid_leaf_0xd(2, all, all), [256, 576, 0, 0]);
        assert_eq!(cpuid_leaf_0xd(2, 0b011, 0b011), [0; 4]);
        assert_eq!(cpuid_leaf_0xd(3, all, all), [0; 4]);
        assert_eq!(cpuid_leaf_0xd(0, 0, 0), [0; 4]);
        assert!(xsave_size(all) as usize <= AREA_BYTES);
    }

    #[test]
    fn a_reset_area_is_reset_and_avx_state_is_not() {
        let reset = reset_area();
        assert!(is_reset_area(&reset));
        assert!(header_is_valid(&reset, GUEST_XCR0_SUPPORTED));
        for byte in [0, 24, 32, 415, 576, 700, 831] {
            let mut area = reset;
            area[byte] ^= 0x40;
            assert!(!is_reset_area(&area), "byte {byte} changed but still reset");
        }
        // The header and the tail are not register state.
        let mut area = reset;
        area[512] = 0b111;
        area[900] = 0xaa;
        assert!(is_reset_area(&area));
    }

    #[test]
    fn an_xsave_header_xrstor_would_fault_on_is_refused() {
        let mut area = reset_area();
        area[512] = 0b111;
        assert!(header_is_valid(&area, GUEST_XCR0_SUPPORTED));
        assert!(!header_is_valid(&area, 0b011));
        let mut compacted = reset_area();
        compacted[512 + 15] = 0x80;
        assert!(!header_is_valid(&compacted, GUEST_XCR0_SUPPORTED));
        let mut reserved = reset_area();
        reserved[512 + 40] = 1;
        assert!(!header_is_valid(&reserved, GUEST_XCR0_SUPPORTED));
    }

    #[test]
    fn the_reset_image_is_reset_and_any_state_byte_is_not() {
        let reset = reset_image();
        assert!(is_reset(&reset));
        for byte in (0..24).chain(24..28).chain(32..416) {
            let mut image = reset;
            image[byte] ^= 0x01;
            assert!(!is_reset(&image), "byte {byte} changed but still reset");
        }
    }

    #[test]
    fn mxcsr_mask_and_the_reserved_tail_are_not_state() {
        let mut image = reset_image();
        image[28..32].copy_from_slice(&0xffffu32.to_le_bytes());
        image[416..].fill(0xaa);
        assert!(is_reset(&image));
    }

    #[test]
    fn a_vcpu_that_never_touched_its_registers_is_never_restored() {
        for holder in [
            FpuHolder::Unknown,
            FpuHolder::Reset,
            FpuHolder::Vcpu(3),
            FpuHolder::Vcpu(7),
        ] {
            for here in [false, true] {
                assert_ne!(load_action(holder, 7, here, true), FpuLoad::Restore);
            }
        }
        assert_eq!(load_action(FpuHolder::Reset, 7, false, true), FpuLoad::Keep);
        // Another vCPU's live state must be wiped, not kept.
        assert_eq!(
            load_action(FpuHolder::Vcpu(3), 7, false, true),
            FpuLoad::Reset
        );
        assert_eq!(
            load_action(FpuHolder::Unknown, 7, true, true),
            FpuLoad::Reset
        );
    }

    #[test]
    fn a_vcpu_state_is_kept_only_on_the_cpu_that_last_saved_it() {
        assert_eq!(
            load_action(FpuHolder::Vcpu(7), 7, true, false),
            FpuLoad::Keep
        );
        // It ran on another CPU since: these registers are stale.
        assert_eq!(
            load_action(FpuHolder::Vcpu(7), 7, false, false),
            FpuLoad::Restore
        );
        // Another vCPU's, or unknown, or reset registers: restore.
        assert_eq!(
            load_action(FpuHolder::Vcpu(3), 7, true, false),
            FpuLoad::Restore
        );
        assert_eq!(
            load_action(FpuHolder::Reset, 7, true, false),
            FpuLoad::Restore
        );
        assert_eq!(
            load_action(FpuHolder::Unknown, 7, true, false),
            FpuLoad::Restore
        );
    }

    #[test]
    fn holders_round_trip_through_their_word() {
        for holder in [
            FpuHolder::Unknown,
            FpuHolder::Reset,
            FpuHolder::Vcpu(0),
            FpuHolder::Vcpu(255),
        ] {
            assert_eq!(FpuHolder::decode(holder.encode()), holder);
        }
        assert_eq!(holder_after_run(4, true), FpuHolder::Reset);
        assert_eq!(holder_after_run(4, false), FpuHolder::Vcpu(4));
    }
}
