//! vCPUs on x86-64 (AMD SVM): each one's VMCB and general registers, the
//! per-CPU host save areas, the `VMRUN` that enters a guest, and which vCPU
//! each CPU has loaded.
//!
//! Ownership: `sched` loads a vCPU on at most one CPU at a time, so only the
//! CPU that has a vCPU loaded touches its [`VcpuState`] (the invariant every
//! `unsafe` access below relies on). A vCPU's virtual local APIC is reached by
//! other vCPUs (IPIs), so it sits behind its own lock in [`APICS`].

use alloc::boxed::Box;
use core::arch::global_asm;
use core::mem::offset_of;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use hv::runtime::identities::VcpuIdentities;
use hv::runtime::loads::CpuLoads;
use hv::x86::debugregs::DebugRegisters;
use hv::x86::fpu::{self, FpuHolder, FpuLoad};
use hv::x86::nmi::NmiState;
use hv::x86::power::Power;
use hv::x86::vlapic::VLapic;
use hv::x86::vmcb::Vmcb;
use log::error;
use platform::arch::x86_64::cpu;
use platform::sync::Mutex;
use sched::{CpuContext, MAX_CPUS, VcpuId};

use super::runtime::RUNTIME;

/// The most vCPUs the hypervisor hosts at once.
pub const MAX_VCPUS: usize = 256;

/// VM_HSAVE_PA: where VMRUN saves the host state (AMD APM 15.30.4).
const MSR_VM_HSAVE_PA: u32 = 0xc001_0117;

/// The guest registers VMRUN does not save (RAX and RSP are in the VMCB).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct Gprs {
    /// RBX.
    pub rbx: u64,
    /// RCX.
    pub rcx: u64,
    /// RDX.
    pub rdx: u64,
    /// RSI.
    pub rsi: u64,
    /// RDI.
    pub rdi: u64,
    /// RBP.
    pub rbp: u64,
    /// R8.
    pub r8: u64,
    /// R9.
    pub r9: u64,
    /// R10.
    pub r10: u64,
    /// R11.
    pub r11: u64,
    /// R12.
    pub r12: u64,
    /// R13.
    pub r13: u64,
    /// R14.
    pub r14: u64,
    /// R15.
    pub r15: u64,
}

/// A vCPU's x87/SSE/AVX registers: an XSAVE image in the standard format
/// when the host has XSAVE ([`guest_xsave`]), else an FXSAVE image in its
/// first 512 bytes (Intel SDM vol. 1, 10.5.1 and 13.4): switched when a CPU
/// changes vCPUs (`hv::x86::fpu`), since VMRUN saves none of them and a
/// guest's registers must not leak into another domain.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
pub struct FpuArea([u8; fpu::AREA_BYTES]);

impl FpuArea {
    /// The state after reset: x87 control word 0x37F, MXCSR 0x1F80, all
    /// registers empty, every XSAVE component in its initial state.
    pub fn reset() -> Self {
        Self(fpu::reset_area())
    }
}

/// Everything a vCPU needs when it is not running.
pub struct VcpuState {
    /// Its x87/SSE/AVX registers.
    pub fx: FpuArea,
    /// Its XCR0 (loaded while it runs with CR4.OSXSAVE set; the hypervisor
    /// keeps [`guest_xsave`] otherwise).
    pub xcr0: u64,
    /// Its VMCB (4 KiB aligned by its type).
    pub vmcb: Box<Vmcb>,
    /// Registers outside the VMCB.
    pub gprs: Gprs,
    /// Its domain's id.
    pub domain: u32,
    /// Index within its domain (also its x2APIC id).
    pub index: u32,
    /// The interrupt handed to the guest through V_IRQ and not yet taken.
    pub injected: Option<Injected>,
    /// The CPU that saved `fx` last (`None` before its first run): only
    /// that CPU's registers may still hold this state.
    pub fpu_cpu: Option<usize>,
    /// Its debug registers as it sees them (`hv::x86::debugregs`).
    pub debug: DebugRegisters,
    /// Its IA32_MISC_ENABLE (`hv::x86::policy::misc_enable_write`).
    pub misc_enable: u64,
    /// Its IA32_TSC_AUX (what RDTSCP and RDPID read; loaded by
    /// `speculation::before_entry`).
    pub tsc_aux: u64,
    /// Its NMI blocking and single-stepping (`hv::x86::nmi`).
    pub nmi: NmiState,
}

impl VcpuState {
    /// General register `n` in the encoding order (0 = RAX, 1 = RCX, 2 = RDX,
    /// 3 = RBX, 4 = RSP, 5 = RBP, 6 = RSI, 7 = RDI, 8-15 = R8-R15); RAX and
    /// RSP live in the VMCB. `None` above 15.
    pub fn gpr(&self, n: u8) -> Option<u64> {
        let g = &self.gprs;
        Some(match n {
            0 => self.vmcb.save.rax,
            1 => g.rcx,
            2 => g.rdx,
            3 => g.rbx,
            4 => self.vmcb.save.rsp,
            5 => g.rbp,
            6 => g.rsi,
            7 => g.rdi,
            8 => g.r8,
            9 => g.r9,
            10 => g.r10,
            11 => g.r11,
            12 => g.r12,
            13 => g.r13,
            14 => g.r14,
            15 => g.r15,
            _ => return None,
        })
    }

    /// Sets general register `n` ([`VcpuState::gpr`]'s numbering); false
    /// above 15.
    pub fn set_gpr(&mut self, n: u8, value: u64) -> bool {
        let g = &mut self.gprs;
        let slot = match n {
            0 => &mut self.vmcb.save.rax,
            1 => &mut g.rcx,
            2 => &mut g.rdx,
            3 => &mut g.rbx,
            4 => &mut self.vmcb.save.rsp,
            5 => &mut g.rbp,
            6 => &mut g.rsi,
            7 => &mut g.rdi,
            8 => &mut g.r8,
            9 => &mut g.r9,
            10 => &mut g.r10,
            11 => &mut g.r11,
            12 => &mut g.r12,
            13 => &mut g.r13,
            14 => &mut g.r14,
            15 => &mut g.r15,
            _ => return false,
        };
        *slot = value;
        true
    }
}

/// Where an interrupt offered through V_IRQ came from: what its delivery
/// must be reported to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// A vector of the virtual local APIC (it goes in service there).
    Apic(u8),
    /// The emulated 8259A's request for this master input (vCPU 0 only):
    /// the INTA cycle goes to the PIC, and no local-APIC EOI follows.
    Pic(u8),
}

// VMRUN with the guest's other registers swapped in and out; see `run`.
global_asm!(
    ".global hv_svm_run",
    "hv_svm_run:",
    "push rbp",
    "push rbx",
    "push r12",
    "push r13",
    "push r14",
    "push r15",
    "push rdx",
    "push rdi",
    "push rsi",
    // No interrupt between here and VMRUN, and none taken by the host until
    // the host state is whole again (STGI at the end).
    "clgi",
    "mov rax, rdx",
    "vmsave rax",
    "mov rax, rdi",
    "vmload rax",
    "mov rbx, [rsi + {rbx}]",
    "mov rcx, [rsi + {rcx}]",
    "mov rdx, [rsi + {rdx}]",
    "mov rdi, [rsi + {rdi}]",
    "mov rbp, [rsi + {rbp}]",
    "mov r8, [rsi + {r8}]",
    "mov r9, [rsi + {r9}]",
    "mov r10, [rsi + {r10}]",
    "mov r11, [rsi + {r11}]",
    "mov r12, [rsi + {r12}]",
    "mov r13, [rsi + {r13}]",
    "mov r14, [rsi + {r14}]",
    "mov r15, [rsi + {r15}]",
    "mov rsi, [rsi + {rsi}]",
    // Host IF = 1 while the guest runs, so physical interrupts exit to the
    // host (V_INTR_MASKING); GIF = 0 keeps them pending until STGI.
    "sti",
    "vmrun rax",
    // #VMEXIT: RAX, RSP, RIP, RFLAGS are the host's again; GIF = 0. The
    // guest's FS/GS/TR/LDTR and syscall MSRs are still loaded: save them
    // and reload the host's before anything else, so that no host
    // instruction runs on the guest's TSS (an exception taken there would
    // read its IST stack pointer from memory the guest chose). RAX holds
    // the guest VMCB's address (the host RAX VMRUN saved), the host VMCB's
    // is on the stack.
    "vmsave rax",
    "mov rax, [rsp + 16]",
    "vmload rax",
    // Fill the return stack buffer with 32 harmless entries (16 rounds of
    // two calls whose speculated returns spin in PAUSE; LFENCE), so no host
    // RET is predicted from what the guest left there (SpectreRSB; Linux's
    // FILL_RETURN_BUFFER after VM exit).
    "mov eax, 16",
    "20:",
    "call 22f",
    "21:",
    "pause",
    "lfence",
    "jmp 21b",
    "22:",
    "call 24f",
    "23:",
    "pause",
    "lfence",
    "jmp 23b",
    "24:",
    "add rsp, 16",
    "dec eax",
    "jnz 20b",
    "push rsi",
    "mov rsi, [rsp + 8]",
    "mov [rsi + {rbx}], rbx",
    "mov [rsi + {rcx}], rcx",
    "mov [rsi + {rdx}], rdx",
    "mov [rsi + {rdi}], rdi",
    "mov [rsi + {rbp}], rbp",
    "mov [rsi + {r8}], r8",
    "mov [rsi + {r9}], r9",
    "mov [rsi + {r10}], r10",
    "mov [rsi + {r11}], r11",
    "mov [rsi + {r12}], r12",
    "mov [rsi + {r13}], r13",
    "mov [rsi + {r14}], r14",
    "mov [rsi + {r15}], r15",
    "pop rax",
    "mov [rsi + {rsi}], rax",
    "pop rsi",
    "pop rdi",
    "pop rdx",
    // Interrupts stay masked; the run loop takes them when it is ready.
    "cli",
    "stgi",
    "pop r15",
    "pop r14",
    "pop r13",
    "pop r12",
    "pop rbx",
    "pop rbp",
    "ret",
    rbx = const offset_of!(Gprs, rbx),
    rcx = const offset_of!(Gprs, rcx),
    rdx = const offset_of!(Gprs, rdx),
    rsi = const offset_of!(Gprs, rsi),
    rdi = const offset_of!(Gprs, rdi),
    rbp = const offset_of!(Gprs, rbp),
    r8 = const offset_of!(Gprs, r8),
    r9 = const offset_of!(Gprs, r9),
    r10 = const offset_of!(Gprs, r10),
    r11 = const offset_of!(Gprs, r11),
    r12 = const offset_of!(Gprs, r12),
    r13 = const offset_of!(Gprs, r13),
    r14 = const offset_of!(Gprs, r14),
    r15 = const offset_of!(Gprs, r15),
);

unsafe extern "sysv64" {
    fn hv_svm_run(vmcb_pa: u64, gprs: *mut Gprs, host_vmcb_pa: u64);
}

/// Per CPU: the page VMSAVE/VMLOAD keep the host's FS/GS/TR/LDTR and
/// syscall MSRs in while a guest runs.
static HOST_VMCB: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Per CPU: SVM is usable (EFER.SVME set, host save area installed).
static SVM_READY: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Installs this CPU's host save area (VM_HSAVE_PA) and its host VMCB page.
/// Call after EFER.SVME is set.
pub fn init_this_cpu(cpu: usize) {
    let Some(slot) = HOST_VMCB.get(cpu) else {
        return;
    };
    // FXSAVE/FXRSTOR of the guests' SSE state needs CR4.OSFXSR, and CR0.EM
    // and CR0.TS clear (the hypervisor itself uses no FPU).
    // SAFETY: these bits only make the FPU/SSE instructions usable at CPL 0;
    // they change no paging or protection state.
    unsafe {
        use x86_64::registers::control::{Cr0, Cr0Flags, Cr4, Cr4Flags};
        Cr4::update(|f| {
            f.insert(Cr4Flags::OSFXSR | Cr4Flags::OSXMMEXCPT_ENABLE);
        });
        Cr0::update(|f| {
            f.remove(Cr0Flags::EMULATE_COPROCESSOR | Cr0Flags::TASK_SWITCHED);
            f.insert(Cr0Flags::MONITOR_COPROCESSOR);
        });
    }
    enable_xsave();
    let hsave = Box::leak(Box::new(Vmcb::zeroed())) as *mut Vmcb as u64;
    let host = Box::leak(Box::new(Vmcb::zeroed())) as *mut Vmcb as u64;
    // SAFETY: VM_HSAVE_PA takes the physical address of a 4 KiB page only the
    // processor uses from now on; the heap is identity-mapped, so the
    // address is physical, and the page is leaked so it is never reused.
    unsafe { x86_64::registers::model_specific::Msr::new(MSR_VM_HSAVE_PA).write(hsave) };
    slot.store(host, Ordering::Release);
    SVM_READY[cpu].store(true, Ordering::Release);
}

/// Whether this CPU can run guests.
pub fn svm_ready(cpu: usize) -> bool {
    SVM_READY
        .get(cpu)
        .is_some_and(|r| r.load(Ordering::Acquire))
}

/// Per CPU: what its x87/SSE registers hold between guest entries
/// ([`FpuHolder`], encoded).
static FPU_HOLDER: [AtomicU32; MAX_CPUS] =
    [const { AtomicU32::new(FpuHolder::Unknown.encode()) }; MAX_CPUS];

/// Enters vCPU `vcpu`, whose state is `state`, on CPU `cpu` until its next
/// `#VMEXIT`. Interrupts must be masked (they are again on return).
pub fn run(cpu: usize, vcpu: VcpuId, state: &mut VcpuState) {
    let host = HOST_VMCB[cpu].load(Ordering::Acquire);
    let vmcb_pa = &mut *state.vmcb as *mut Vmcb as u64;
    load_fpu(cpu, vcpu, state);
    super::speculation::before_entry(cpu, state.domain, vcpu.0, state.tsc_aux);
    // The checker learns the domain this CPU really enters: the owner of the
    // ASID in the VMCB it is about to run.
    RUNTIME.entering(cpu, state.vmcb.control.guest_asid);
    let guest_xcr0 = guest_xcr0_to_load(state);
    if let Some(xcr0) = guest_xcr0 {
        write_xcr0(xcr0);
    }
    // SAFETY: `vmcb_pa` is this vCPU's VMCB (identity-mapped heap, so its
    // address is physical), set up by `hv::x86::boot::initial_vmcb` with
    // the domain's nested page tables and the permission maps, all of which
    // live as long as the domain; `host` is this CPU's host VMCB page and
    // VM_HSAVE_PA is set (`svm_ready`). The assembly saves and restores every
    // callee-saved register and the host's VMLOAD state, and the VMCB and
    // `gprs` are only touched by this CPU (module invariant).
    unsafe { hv_svm_run(vmcb_pa, &mut state.gprs, host) };
    if guest_xcr0.is_some() {
        write_xcr0(guest_xsave());
    }
    save_fpu(state);
    state.fpu_cpu = Some(cpu);
    let holder = fpu::holder_after_run(vcpu.0, fpu::is_reset_area(&state.fx.0));
    FPU_HOLDER[cpu].store(holder.encode(), Ordering::Relaxed);
}

/// Gives the entering vCPU its x87/SSE registers on this CPU, unless they
/// hold them already (`hv::x86::fpu::load_action`).
fn load_fpu(cpu: usize, vcpu: VcpuId, state: &VcpuState) {
    let holder = FpuHolder::decode(FPU_HOLDER[cpu].load(Ordering::Relaxed));
    let saved_here_last = state.fpu_cpu == Some(cpu);
    let action = fpu::load_action(
        holder,
        vcpu.0,
        saved_here_last,
        fpu::is_reset_area(&state.fx.0),
    );
    let mask = switched_components();
    match action {
        FpuLoad::Keep => {}
        FpuLoad::Reset => reset_fpu_registers(mask),
        FpuLoad::Restore if mask == 0 => {
            // SAFETY: FXRSTOR reads the vCPU's own 16-byte-aligned area, an
            // image FXSAVE wrote or `FpuArea::reset` built (reserved MXCSR
            // bits clear); CR4.OSFXSR is set by `init_this_cpu`.
            unsafe {
                core::arch::asm!("fxrstor64 [{}]", in(reg) &state.fx, options(nostack, readonly))
            };
        }
        FpuLoad::Restore if !fpu::header_is_valid(&state.fx.0, mask) => {
            // Only XSAVE writes the image: a header XRSTOR would fault on is
            // a hypervisor bug, and a reset is safe for every other domain.
            error!(
                "fpu: vCPU {}: corrupt XSAVE header; its registers are reset",
                vcpu.0
            );
            reset_fpu_registers(mask);
        }
        FpuLoad::Restore => {
            let (low, high) = (mask as u32, (mask >> 32) as u32);
            // SAFETY: XRSTOR reads the vCPU's own 64-byte-aligned area in the
            // standard format, which XSAVE wrote or `FpuArea::reset` built
            // (header checked just above, reserved MXCSR bits clear); XCR0
            // holds every component of `mask` (`enable_xsave`, restored after
            // each guest run), so every component is loaded or initialised.
            unsafe {
                core::arch::asm!(
                    "xrstor64 [{}]",
                    in(reg) &state.fx,
                    in("eax") low,
                    in("edx") high,
                    options(nostack, readonly),
                )
            };
        }
    }
}

/// Saves the registers of the vCPU that just ran into its area: every
/// offered component with XSAVE (XCR0 holds them all again), else FXSAVE.
fn save_fpu(state: &mut VcpuState) {
    let mask = switched_components();
    if mask == 0 {
        // SAFETY: FXSAVE writes the vCPU's own 16-byte-aligned area
        // (CR4.OSFXSR is set by `init_this_cpu`); the host keeps no FPU
        // state of its own.
        unsafe { core::arch::asm!("fxsave64 [{}]", in(reg) &mut state.fx, options(nostack)) };
        return;
    }
    let (low, high) = (mask as u32, (mask >> 32) as u32);
    // SAFETY: XSAVE writes the vCPU's own 64-byte-aligned area of
    // `fpu::AREA_BYTES`, more than the standard format needs for `mask`
    // (`enable_xsave` offers nothing larger); CR4.OSXSAVE is set and XCR0
    // holds `mask`.
    unsafe {
        core::arch::asm!(
            "xsave64 [{}]",
            in(reg) &mut state.fx,
            in("eax") low,
            in("edx") high,
            options(nostack),
        )
    };
}

/// The XSAVE components guests are offered and every vCPU's image holds
/// (`fpu::GUEST_XCR0_SUPPORTED` as far as the host has them); 0 when the
/// host has no XSAVE (FXSAVE images, no XSAVE for guests).
static GUEST_XSAVE: AtomicU64 = AtomicU64::new(0);

/// CPUID leaf 1 ECX: XSAVE.
const CPUID1_ECX_XSAVE: u32 = 1 << 26;

/// [`GUEST_XSAVE`].
pub fn guest_xsave() -> u64 {
    GUEST_XSAVE.load(Ordering::Relaxed)
}

/// `hv.test-break-fpu-switch=on`: switches leave the AVX state alone.
static BREAK_FPU_SWITCH: AtomicBool = AtomicBool::new(false);

/// Plants the fault `hv.test-break-fpu-switch=on` asks for (tests only).
pub fn break_fpu_switch() {
    BREAK_FPU_SWITCH.store(true, Ordering::Relaxed);
}

/// The XSAVE components a switch saves and restores: all of
/// [`guest_xsave`] (with the planted fault, all but AVX).
fn switched_components() -> u64 {
    if BREAK_FPU_SWITCH.load(Ordering::Relaxed) {
        guest_xsave() & !fpu::XCR0_AVX
    } else {
        guest_xsave()
    }
}

/// Turns XSAVE on for this CPU (CR4.OSXSAVE) with XCR0 = every component
/// guests are offered, which the hypervisor keeps except while a guest with
/// its own XCR0 runs. Without XSAVE on the host nothing changes.
fn enable_xsave() {
    if cpu::cpuid(1, 0).ecx & CPUID1_ECX_XSAVE == 0 {
        return;
    }
    let components = cpu::cpuid(0xd, 0);
    let host = u64::from(components.eax) | (u64::from(components.edx) << 32);
    let mask = host & fpu::GUEST_XCR0_SUPPORTED;
    if fpu::check_xsetbv(0, mask, 0, mask).is_err() {
        return;
    }
    // SAFETY: CR4.OSXSAVE only makes XSAVE/XRSTOR/XGETBV/XSETBV usable (the
    // CPU has XSAVE, checked above); no paging or protection state changes.
    unsafe {
        use x86_64::registers::control::{Cr4, Cr4Flags};
        Cr4::update(|f| f.insert(Cr4Flags::OSXSAVE));
    }
    GUEST_XSAVE.store(mask, Ordering::Relaxed);
    write_xcr0(mask);
}

/// The XCR0 to load for the entering vCPU: its own when it turned
/// CR4.OSXSAVE on and it differs from the hypervisor's (without OSXSAVE a
/// guest can neither read XCR0 nor use what it enables, so the hypervisor's
/// stays: no XSETBV around each run).
fn guest_xcr0_to_load(state: &VcpuState) -> Option<u64> {
    let mask = guest_xsave();
    let osxsave = state.vmcb.save.cr4 & hv::x86::vmcb::cr::CR4_OSXSAVE != 0;
    (mask != 0 && osxsave && state.xcr0 != mask).then_some(state.xcr0)
}

/// Writes XCR0 (a value `fpu::check_xsetbv` accepted for the components
/// this CPU has).
fn write_xcr0(value: u64) {
    // SAFETY: every value written is a valid XCR0 for this CPU: the offered
    // mask (from its CPUID 0xD, x87 always, SSE with AVX) or a guest's value
    // `fpu::check_xsetbv` accepted within it; CR4.OSXSAVE is set by
    // `enable_xsave` before any write. XCR0 only gates which register state
    // XSAVE manages and AVX may use; the hypervisor uses neither.
    unsafe { x86_64::registers::xcontrol::XCr0::write_raw(value) };
}

/// Puts this CPU's x87, SSE and (with `mask`'s AVX) AVX registers in their
/// reset state without a restore instruction: `FNINIT`, every x87 register
/// overwritten with +0.0 (FNINIT only tags them empty, and FXSAVE would
/// still show the previous domain's values), every XMM register zeroed (and
/// with AVX every YMM register, by `VZEROALL`: legacy SSE writes keep the
/// upper halves), MXCSR = 0x1F80.
fn reset_fpu_registers(mask: u64) {
    let mxcsr: u32 = fpu::RESET_MXCSR;
    // SAFETY: these instructions change only the x87/SSE registers, which
    // the host does not use (CR4.OSFXSR is set by `init_this_cpu`); eight
    // FLDZ after FNINIT fill the empty stack exactly, so none overflows.
    unsafe {
        core::arch::asm!(
            "fninit",
            "fldz", "fldz", "fldz", "fldz", "fldz", "fldz", "fldz", "fldz",
            "fninit",
            "xorps xmm0, xmm0", "xorps xmm1, xmm1", "xorps xmm2, xmm2", "xorps xmm3, xmm3",
            "xorps xmm4, xmm4", "xorps xmm5, xmm5", "xorps xmm6, xmm6", "xorps xmm7, xmm7",
            "xorps xmm8, xmm8", "xorps xmm9, xmm9", "xorps xmm10, xmm10", "xorps xmm11, xmm11",
            "xorps xmm12, xmm12", "xorps xmm13, xmm13", "xorps xmm14, xmm14", "xorps xmm15, xmm15",
            "ldmxcsr [{}]",
            in(reg) &mxcsr,
            options(nostack, readonly),
        );
    }
    if mask & fpu::XCR0_AVX != 0 {
        // SAFETY: VZEROALL zeroes the YMM registers only; XCR0 holds the AVX
        // component (`enable_xsave`, restored after each guest run), so it
        // does not fault.
        unsafe { core::arch::asm!("vzeroall", options(nostack, nomem)) };
    }
}

static VCPUS: [AtomicPtr<VcpuState>; MAX_VCPUS] =
    [const { AtomicPtr::new(core::ptr::null_mut()) }; MAX_VCPUS];
/// Each vCPU's virtual local APIC (reached by the other vCPUs' IPIs).
pub static APICS: [Mutex<Option<VLapic>>; MAX_VCPUS] = [const { Mutex::new(None) }; MAX_VCPUS];
/// Each vCPU's power state: started, halted with interrupts off, waiting
/// for STARTUP (`hv::x86::power`; changed by its own HLT and by other
/// vCPUs' INIT and STARTUP IPIs).
static POWER: [Mutex<Power>; MAX_VCPUS] = [const { Mutex::new(Power::NotStarted) }; MAX_VCPUS];
/// What each CPU has loaded, since when, and each vCPU's run time.
static LOADS: CpuLoads<MAX_CPUS, MAX_VCPUS> = CpuLoads::new();
/// The vCPU each CPU entered last (0 = none), to flush the TLB on a change.
static LAST_RUN: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

/// Each installed vCPU's domain and index, readable from any CPU without
/// touching its state.
static IDENTITIES: VcpuIdentities<MAX_VCPUS> = VcpuIdentities::new();

/// The domain and index of installed vCPU `vcpu`.
pub fn identity(vcpu: VcpuId) -> Option<(sched::DomainId, u32)> {
    IDENTITIES.get(vcpu)
}
/// Starts a new vCPU's run time at zero (its id may have been used before).
pub fn reset_runtime(vcpu: VcpuId) {
    LOADS.reset_runtime(vcpu);
}

/// How long `vcpu` has run, including its current stint if it is loaded
/// now (read without stopping it: a racing switch may shift a few µs).
pub fn runtime_ns(vcpu: VcpuId) -> u64 {
    LOADS.runtime_ns(vcpu, platform::arch::x86_64::timer::now_ns())
}

/// Registers a vCPU's state and APIC under its scheduler id.
pub fn install(vcpu: VcpuId, state: VcpuState, apic: VLapic) -> bool {
    let Some(slot) = VCPUS.get(vcpu.0 as usize) else {
        error!("vcpu: id {} beyond the {MAX_VCPUS} supported", vcpu.0);
        return false;
    };
    *APICS[vcpu.0 as usize].lock() = Some(apic);
    // The id may have been another vCPU's: no CPU holds this one's TSC_AUX.
    super::speculation::forget_tsc_aux_holder(vcpu.0);
    IDENTITIES.set(vcpu, sched::DomainId(state.domain), state.index);
    let new = Box::into_raw(Box::new(state));
    let old = slot.swap(new, Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the slot only holds pointers from Box::into_raw, and an id
        // is reused only after the scheduler released the vCPU everywhere.
        drop(unsafe { Box::from_raw(old) });
    }
    true
}

/// Why a vCPU's state was not reset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ResetError {
    /// The id is beyond [`MAX_VCPUS`] or has no state.
    NoState,
    /// A CPU has it loaded.
    Loaded,
}

impl core::fmt::Display for ResetError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::NoState => write!(f, "it has no state"),
            Self::Loaded => write!(f, "a CPU still has it loaded"),
        }
    }
}

/// Puts `vcpu` back in `fresh`'s state, its APIC in `apic`'s (a STARTUP
/// after INIT). The state is overwritten in place, its VMCB page kept, so
/// nothing a CPU could still reach is ever freed; refused while a CPU has it
/// loaded. The caller holds the hypervisor's pause on it, so no CPU loads it
/// between that check and the write.
pub fn reset(vcpu: VcpuId, fresh: VcpuState, apic: VLapic) -> Result<(), ResetError> {
    let ptr = VCPUS
        .get(vcpu.0 as usize)
        .map_or(core::ptr::null_mut(), |s| s.load(Ordering::Acquire));
    if ptr.is_null() {
        return Err(ResetError::NoState);
    }
    if loaded_anywhere(vcpu) {
        return Err(ResetError::Loaded);
    }
    // SAFETY: the pointer came from Box::into_raw and is only freed by
    // `uninstall` (teardown, after every CPU let the vCPU go); no CPU has it
    // loaded and none can load it while the caller's pause holds (module
    // invariant: only the loading CPU touches a state), so this is the only
    // reference.
    let state = unsafe { &mut *ptr };
    // Every field named: one added later must say how a reset treats it,
    // or stay from before the reset (NMI blocking, say) unnoticed.
    let VcpuState {
        fx,
        xcr0,
        vmcb,
        gprs,
        domain,
        index,
        injected: _,
        fpu_cpu: _,
        debug,
        misc_enable,
        tsc_aux,
        nmi,
    } = fresh;
    // The VMCB stays where it is (its physical address is the CPU's).
    *state.vmcb = *vmcb;
    state.gprs = gprs;
    state.fx = fx;
    state.xcr0 = xcr0;
    state.domain = domain;
    state.index = index;
    state.injected = None;
    state.fpu_cpu = None;
    state.debug = debug;
    state.tsc_aux = tsc_aux;
    state.misc_enable = misc_enable;
    state.nmi = nmi;
    super::speculation::forget_tsc_aux_holder(vcpu.0);
    platform::arch::x86_64::cpu::without_irqs(|| *APICS[vcpu.0 as usize].lock() = Some(apic));
    Ok(())
}

/// Frees a vCPU's state and APIC when its domain is torn down (no CPU runs
/// it any more: the caller checked). A CPU that entered it last forgets
/// that, so whichever vCPU next gets this id (and maybe the domain's reused
/// ASID) flushes the ASID's TLB entries on its first entry there.
pub fn uninstall(vcpu: VcpuId) {
    let Some(slot) = VCPUS.get(vcpu.0 as usize) else {
        return;
    };
    IDENTITIES.clear(vcpu);
    let old = slot.swap(core::ptr::null_mut(), Ordering::AcqRel);
    if !old.is_null() {
        // SAFETY: the slot only holds pointers from Box::into_raw, and the
        // caller guarantees no CPU uses the state any more.
        drop(unsafe { Box::from_raw(old) });
    }
    platform::arch::x86_64::cpu::without_irqs(|| *APICS[vcpu.0 as usize].lock() = None);
    with_power(vcpu, |p| *p = Power::NotStarted);
    forget_last_run(vcpu);
}

/// Makes the next entry of `vcpu`, on whichever CPU, flush its ASID's TLB
/// entries (its id is reused, or its guest page tables were rewritten).
pub fn forget_last_run(vcpu: VcpuId) {
    for last in &LAST_RUN {
        let _ = last.compare_exchange(vcpu.0 + 1, 0, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// The CPU that has `vcpu` loaded, if any (lock-free).
pub fn loaded_on(vcpu: VcpuId) -> Option<usize> {
    LOADS.loaded_on(vcpu)
}

/// Whether any CPU has `vcpu` loaded.
pub fn loaded_anywhere(vcpu: VcpuId) -> bool {
    LOADS.loaded_anywhere(vcpu)
}

/// The vCPU this CPU has loaded, if any.
pub fn loaded(cpu: usize) -> Option<VcpuId> {
    LOADS.loaded(cpu)
}

/// Runs `f` on the state of the vCPU CPU `cpu` has loaded.
pub fn with_loaded<R>(cpu: usize, f: impl FnOnce(&mut VcpuState) -> R) -> Option<R> {
    let vcpu = loaded(cpu)?;
    let ptr = VCPUS.get(vcpu.0 as usize)?.load(Ordering::Acquire);
    // SAFETY: the vCPU is loaded on this CPU, so no other CPU touches its
    // state (module invariant); the pointer came from Box::into_raw.
    unsafe { ptr.as_mut() }.map(f)
}

/// Runs `f` on vCPU `vcpu`'s power state.
pub fn with_power<R>(vcpu: VcpuId, f: impl FnOnce(&mut Power) -> R) -> Option<R> {
    let slot = POWER.get(vcpu.0 as usize)?;
    Some(platform::arch::x86_64::cpu::without_irqs(|| {
        f(&mut slot.lock())
    }))
}

/// vCPU `vcpu`'s power state (`NotStarted` for an id out of range).
pub fn power(vcpu: VcpuId) -> Power {
    with_power(vcpu, |p| *p).unwrap_or_default()
}

/// Runs `f` on vCPU `vcpu`'s APIC.
pub fn with_apic<R>(vcpu: VcpuId, f: impl FnOnce(&mut VLapic) -> R) -> Option<R> {
    let slot = APICS.get(vcpu.0 as usize)?;
    platform::arch::x86_64::cpu::without_irqs(|| slot.lock().as_mut().map(f))
}

/// Whether the CPU must flush the guest TLB before entering `vcpu` (it ran
/// another vCPU last: ASIDs are per domain, so a sibling's entries could be
/// stale for this one).
pub fn note_entry(cpu: usize, vcpu: VcpuId) -> bool {
    LAST_RUN[cpu].swap(vcpu.0 + 1, Ordering::Relaxed) != vcpu.0 + 1
}

/// [`sched::Platform::switch_to`]: `cpu` now runs `context` (entered by the
/// run loop when this scheduling event is over).
pub fn switch_to(cpu: usize, context: CpuContext) {
    // Whatever this CPU ran is no longer loaded; what it runs next is logged
    // when it enters it (`run`).
    RUNTIME.switched(cpu);
    let now = platform::arch::x86_64::timer::now_ns();
    match context {
        CpuContext::Idle => LOADS.switch(cpu, None, now),
        CpuContext::Vcpu(new) => {
            let ptr = VCPUS
                .get(new.0 as usize)
                .map_or(core::ptr::null_mut(), |s| s.load(Ordering::Acquire));
            if ptr.is_null() {
                error!(
                    "vcpu: cpu {cpu} told to run vCPU {} that has no state; staying idle",
                    new.0
                );
                LOADS.switch(cpu, None, now);
                return;
            }
            LOADS.switch(cpu, Some(new), now);
        }
    }
}
