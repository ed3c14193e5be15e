//! Boot on x86-64: the PVH entry code (`boot.S`), the PVH start info, the AP
//! trampoline, and the Rust entry points of the boot CPU and the APs.
//!
//! Why PVH and not multiboot: QEMU's `-kernel` loads a multiboot image only
//! from a 32-bit ELF, while a PVH image is the 64-bit ELF the Rust target
//! produces, with one ELF note naming the 32-bit entry. The PVH start info
//! also hands over the RSDP address and an E820-style memory map directly, so
//! no BIOS-area scan or multiboot tag parsing is needed (the scan stays as a
//! fallback in the hypervisor).

use alloc::string::String;
use alloc::vec::Vec;

use x86_64::registers::control::Cr3;

use super::{cpu, exceptions};

core::arch::global_asm!(include_str!("boot.S"), options(att_syntax, raw));

unsafe extern "C" {
    static __image_start: u8;
    static __image_end: u8;
    static ap_trampoline_start: u8;
    static ap_trampoline_end: u8;
    static ap_param_cr3: u8;
    static ap_param_stack: u8;
    static ap_param_cpu: u8;
    static ap_param_entry: u8;
}

unsafe extern "Rust" {
    fn hv_x86_primary_main(start_info: usize) -> !;
    fn hv_x86_secondary_main(cpu: usize) -> !;
}

/// Where the AP trampoline is copied: page 8, SIPI vector 8, below the BIOS
/// data at 0x9fc00 and above the real-mode IVT and BDA.
pub const AP_TRAMPOLINE_BASE: u64 = 0x8000;

#[unsafe(no_mangle)]
extern "C" fn platform_x86_primary_entry(start_info: u32) -> ! {
    cpu::set_index(0);
    // SAFETY: provided by the hypervisor binary with this exact signature.
    unsafe { hv_x86_primary_main(start_info as usize) }
}

#[unsafe(no_mangle)]
extern "C" fn platform_x86_secondary_entry(cpu_index: usize) -> ! {
    cpu::set_index(cpu_index);
    exceptions::init_this_cpu();
    // SAFETY: provided by the hypervisor binary with this exact signature.
    unsafe { hv_x86_secondary_main(cpu_index) }
}

/// The physical range `[start, end)` the image occupies.
pub fn image_range() -> (u64, u64) {
    (
        core::ptr::addr_of!(__image_start) as u64,
        core::ptr::addr_of!(__image_end) as u64,
    )
}

/// The end of the identity map `boot.S` builds (4 GiB): memory above it is
/// not mapped yet.
pub const IDENTITY_MAP_END: u64 = 1 << 32;

/// Where the uncached part of that map starts (3 GiB): device registers
/// (local APIC, I/O APIC, HPET, PCI holes) below 4 GiB are reachable there.
pub const UNCACHED_START: u64 = 3 << 30;

/// `hvm_start_info.magic`.
pub const PVH_MAGIC: u32 = 0x336e_c578;

/// A range of the PVH memory map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRange {
    /// Physical base.
    pub base: u64,
    /// Size in bytes.
    pub size: u64,
    /// E820 type (1 = RAM, 2 = reserved, 3 = ACPI reclaimable, 4 = ACPI NVS).
    pub kind: u32,
}

/// E820 type of usable RAM.
pub const E820_RAM: u32 = 1;

/// What the PVH loader handed over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StartInfo {
    /// Protocol version.
    pub version: u32,
    /// The ACPI RSDP's physical address, if the loader found it.
    pub rsdp: Option<u64>,
    /// The memory map (version 1 and later).
    pub memory: Vec<MemoryRange>,
    /// The command line (QEMU `-append`), empty if none.
    pub cmdline: String,
}

/// Longest command line read (bytes); longer ones are cut.
pub const MAX_CMDLINE: u64 = 4096;

/// What is wrong with the start info.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartInfoError {
    /// The pointer was 0.
    Missing,
    /// The magic number is not [`PVH_MAGIC`].
    BadMagic(u32),
    /// The memory map claims more entries than accepted.
    TooManyRanges(u32),
}

impl core::fmt::Display for StartInfoError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Missing => write!(f, "no PVH start info (%ebx was 0)"),
            Self::BadMagic(m) => write!(f, "PVH start info magic {m:#x}, expected {PVH_MAGIC:#x}"),
            Self::TooManyRanges(n) => {
                write!(f, "PVH memory map has {n} entries (at most 512 accepted)")
            }
        }
    }
}

fn read_u32(address: u64) -> u32 {
    // SAFETY: callers only pass addresses inside the start info or its memory
    // map, which the loader placed in identity-mapped low memory.
    unsafe { core::ptr::read_unaligned(address as *const u32) }
}

fn read_u64(address: u64) -> u64 {
    // SAFETY: as `read_u32`.
    unsafe { core::ptr::read_unaligned(address as *const u64) }
}

/// Reads the PVH `hvm_start_info` at `paddr` (layout: Xen's
/// `include/public/arch-x86/hvm/start_info.h`).
///
/// # Safety
/// `paddr` must be what the PVH loader passed in %ebx (or 0).
pub unsafe fn read_start_info(paddr: usize) -> Result<StartInfo, StartInfoError> {
    if paddr == 0 {
        return Err(StartInfoError::Missing);
    }
    let base = paddr as u64;
    let magic = read_u32(base);
    if magic != PVH_MAGIC {
        return Err(StartInfoError::BadMagic(magic));
    }
    let version = read_u32(base + 4);
    let rsdp = Some(read_u64(base + 32)).filter(|&r| r != 0);
    let cmdline_paddr = read_u64(base + 24);
    let mut cmdline = String::new();
    if cmdline_paddr != 0 && cmdline_paddr < IDENTITY_MAP_END - MAX_CMDLINE {
        let bytes: Vec<u8> = (0..MAX_CMDLINE)
            // SAFETY: the loader's command line, NUL-terminated, in low memory
            // (the bound check above keeps every read inside the identity map).
            .map(|i| unsafe { core::ptr::read_volatile((cmdline_paddr + i) as *const u8) })
            .take_while(|&b| b != 0)
            .collect();
        cmdline = String::from_utf8_lossy(&bytes).into_owned();
    }
    let mut memory = Vec::new();
    if version >= 1 {
        let map = read_u64(base + 40);
        let entries = read_u32(base + 48);
        if entries > 512 {
            return Err(StartInfoError::TooManyRanges(entries));
        }
        if map != 0 {
            for i in 0..u64::from(entries) {
                let entry = map + i * 24;
                memory.push(MemoryRange {
                    base: read_u64(entry),
                    size: read_u64(entry + 8),
                    kind: read_u32(entry + 16),
                });
            }
        }
    }
    Ok(StartInfo {
        version,
        rsdp,
        memory,
        cmdline,
    })
}

fn trampoline_offset(symbol: *const u8) -> u64 {
    symbol as u64 - core::ptr::addr_of!(ap_trampoline_start) as u64
}

/// Copies the AP trampoline to [`AP_TRAMPOLINE_BASE`] and sets it up to start
/// logical CPU `cpu_index` on the stack ending at `stack_top`; returns the
/// start-up address for the SIPI. One AP at a time: the parameters are shared.
///
/// # Safety
/// The page at [`AP_TRAMPOLINE_BASE`] must be RAM nothing else uses, and no
/// other AP may be between its SIPI and reaching Rust.
pub unsafe fn prepare_ap(cpu_index: usize, stack_top: u64) -> u64 {
    let start = core::ptr::addr_of!(ap_trampoline_start);
    let length = core::ptr::addr_of!(ap_trampoline_end) as usize - start as usize;
    let target = AP_TRAMPOLINE_BASE as *mut u8;
    let (frame, _) = Cr3::read();
    let entry: extern "C" fn(usize) -> ! = platform_x86_secondary_entry;
    let params = [
        (
            core::ptr::addr_of!(ap_param_cr3),
            frame.start_address().as_u64(),
        ),
        (core::ptr::addr_of!(ap_param_stack), stack_top & !0xf),
        (core::ptr::addr_of!(ap_param_cpu), cpu_index as u64),
        (core::ptr::addr_of!(ap_param_entry), entry as usize as u64),
    ];
    // SAFETY: the caller reserved the page; the trampoline is smaller than a
    // page (checked by the assertion below) and the parameters lie inside it.
    unsafe {
        assert!(length <= 4096, "AP trampoline larger than a page");
        core::ptr::copy_nonoverlapping(start, target, length);
        for (symbol, value) in params {
            let at = AP_TRAMPOLINE_BASE + trampoline_offset(symbol);
            core::ptr::write_volatile(at as *mut u64, value);
        }
    }
    core::sync::atomic::fence(core::sync::atomic::Ordering::SeqCst);
    AP_TRAMPOLINE_BASE
}
