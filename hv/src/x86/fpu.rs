//! When a CPU must load a vCPU's x87/SSE registers before `VMRUN`, and the
//! register image (FXSAVE layout) of a vCPU that has never changed them.
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

#[cfg(test)]
mod tests {
    use super::*;

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
