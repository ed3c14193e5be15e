//! The speculation barriers around guest entry on x86 (`hv::speculation::x86`
//! decides which): IBPB when a CPU enters another domain than it ran last,
//! VERW and the L1D flush before entry where the CPU needs them, and the
//! guest's own TSC_AUX (RDTSCP/RDPID read it, and it is not in the VMCB).
//! The return stack buffer is filled in `vcpu`'s VMRUN assembly.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use hv::speculation::x86::{Features, Mitigations, choose};
use log::{info, warn};
use platform::arch::x86_64::cpu;
use platform::sync::Once;
use sched::MAX_CPUS;
use x86_64::registers::model_specific::Msr;

/// IA32_PRED_CMD: writing IBPB (bit 0) flushes the indirect branch predictors.
const MSR_PRED_CMD: u32 = 0x49;
/// IA32_PRED_CMD's IBPB command.
const PRED_CMD_IBPB: u64 = 1;
/// IA32_FLUSH_CMD: writing L1D_FLUSH (bit 0) writes back and invalidates L1D.
const MSR_FLUSH_CMD: u32 = 0x10b;
/// IA32_FLUSH_CMD's L1D flush command.
const FLUSH_CMD_L1D: u64 = 1;
/// IA32_ARCH_CAPABILITIES.
const MSR_ARCH_CAPABILITIES: u32 = 0x10a;
/// IA32_TSC_AUX: what RDTSCP and RDPID return.
pub const MSR_TSC_AUX: u32 = 0xc000_0103;

/// CPUID 7 EDX: VERW clears CPU buffers.
const CPUID7_EDX_MD_CLEAR: u32 = 1 << 10;
/// CPUID 7 EDX: IBRS and IBPB (Intel).
const CPUID7_EDX_IBRS_IBPB: u32 = 1 << 26;
/// CPUID 7 EDX: IA32_FLUSH_CMD.
const CPUID7_EDX_L1D_FLUSH: u32 = 1 << 28;
/// CPUID 7 EDX: IA32_ARCH_CAPABILITIES.
const CPUID7_EDX_ARCH_CAPABILITIES: u32 = 1 << 29;
/// CPUID 0x80000008 EBX: IBPB (AMD).
const CPUID_80000008_EBX_IBPB: u32 = 1 << 12;

/// The mitigations chosen at boot.
static MITIGATIONS: Once<Mitigations> = Once::new();
/// `hv.speculation-flush=off`: IBPB, VERW and the L1D flush are skipped.
static FLUSH_OFF: AtomicBool = AtomicBool::new(false);

/// Turns the flushes between domains off (`hv.speculation-flush=off`, for
/// measuring their cost), loudly.
pub fn turn_flushes_off() {
    warn!(
        "speculation: flushes between domains turned OFF (hv.speculation-flush=off): domains may see each other's traces"
    );
    FLUSH_OFF.store(true, Ordering::Relaxed);
}
/// Per CPU: the domain it entered last, plus one (0: none yet).
static LAST_DOMAIN: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
/// Per CPU: whose TSC_AUX it holds (vCPU id + 1; 0: the host's).
static TSC_AUX_HOLDER: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
/// The selector VERW takes (the host's flat data segment: any writable one
/// makes VERW clear the buffers on CPUs with MD_CLEAR).
static VERW_SELECTOR: u16 = 0x10;

/// What this CPU says of itself.
fn read_features() -> Features {
    let (max, max_ext) = cpu::max_leaves();
    let amd = &cpu::vendor() == b"AuthenticAMD";
    let leaf7_edx = if max >= 7 { cpu::cpuid(7, 0).edx } else { 0 };
    let amd_ibpb =
        max_ext >= 0x8000_0008 && cpu::cpuid(0x8000_0008, 0).ebx & CPUID_80000008_EBX_IBPB != 0;
    let arch_capabilities = (leaf7_edx & CPUID7_EDX_ARCH_CAPABILITIES != 0).then(|| {
        // SAFETY: CPUID says the MSR exists; reading it has no side effect.
        unsafe { Msr::new(MSR_ARCH_CAPABILITIES).read() }
    });
    Features {
        amd,
        ibpb: amd_ibpb || leaf7_edx & CPUID7_EDX_IBRS_IBPB != 0,
        md_clear: leaf7_edx & CPUID7_EDX_MD_CLEAR != 0,
        l1d_flush: leaf7_edx & CPUID7_EDX_L1D_FLUSH != 0,
        arch_capabilities,
    }
}

/// Chooses the mitigations from the boot CPU's features and logs them
/// (the CPUs of one machine answer alike).
pub fn init() {
    let (mitigations, lines) = choose(read_features());
    for line in lines {
        if line.contains("NOT AVAILABLE") {
            warn!("{line}");
        } else {
            info!("{line}");
        }
    }
    MITIGATIONS.call_once(|| mitigations);
}

/// Right before entering a vCPU of `domain` (its TSC_AUX `tsc_aux`, vCPU id
/// `vcpu`) on `cpu`, interrupts masked: the barriers this CPU needs.
pub fn before_entry(cpu: usize, domain: u32, vcpu: u32, tsc_aux: u64) {
    let Some(&m) = MITIGATIONS.get() else {
        return;
    };
    let m = if FLUSH_OFF.load(Ordering::Relaxed) {
        Mitigations::default()
    } else {
        m
    };
    let Some(last) = LAST_DOMAIN.get(cpu) else {
        return;
    };
    if last.swap(domain + 1, Ordering::Relaxed) != domain + 1 && m.ibpb_on_domain_switch {
        // SAFETY: IBPB only flushes branch predictions; CPUID said it exists.
        unsafe { Msr::new(MSR_PRED_CMD).write(PRED_CMD_IBPB) };
    }
    if TSC_AUX_HOLDER[cpu].swap(vcpu + 1, Ordering::Relaxed) != vcpu + 1 {
        write_tsc_aux(tsc_aux);
    }
    if m.l1d_flush_before_entry {
        // SAFETY: the flush only writes back and invalidates the L1D.
        unsafe { Msr::new(MSR_FLUSH_CMD).write(FLUSH_CMD_L1D) };
    }
    if m.verw_before_entry {
        // SAFETY: VERW with a valid selector in memory only sets ZF (and, on
        // CPUs with MD_CLEAR, clears the CPU's buffers).
        unsafe {
            core::arch::asm!("verw word ptr [{}]", in(reg) &VERW_SELECTOR, options(nostack, readonly))
        };
    }
}

/// Loads the guest's TSC_AUX into this CPU (the host does not use it).
pub fn write_tsc_aux(value: u64) {
    // SAFETY: TSC_AUX only changes what RDTSCP/RDPID return; the host reads
    // neither. Its upper half is reserved: the policy keeps guest values to
    // 32 bits.
    unsafe { Msr::new(MSR_TSC_AUX).write(value & 0xffff_ffff) };
}

/// Whether `cpu` holds vCPU `vcpu`'s TSC_AUX.
pub fn holds_tsc_aux(cpu: usize, vcpu: u32) -> bool {
    TSC_AUX_HOLDER
        .get(cpu)
        .is_some_and(|h| h.load(Ordering::Relaxed) == vcpu + 1)
}

/// vCPU `vcpu`'s TSC_AUX changed without it running (a reset, a new vCPU
/// with a reused id): no CPU holds its value any more.
pub fn forget_tsc_aux_holder(vcpu: u32) {
    for holder in &TSC_AUX_HOLDER {
        let _ = holder.compare_exchange(vcpu + 1, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}
