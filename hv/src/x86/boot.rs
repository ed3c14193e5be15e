//! How an x86 guest starts (see `guest_abi::x86`): the boot structures the
//! hypervisor writes into guest RAM (identity-mapping page tables, a GDT, the
//! boot info) and a vCPU's first VMCB (long mode at the image base, the
//! intercepts every guest gets).

use guest_abi::x86::{
    BOOT_INFO, BOOT_INFO_BYTES, BootInfo, BootInfoError, CODE_SELECTOR, DATA_SELECTOR, IMAGE_BASE,
};

use super::debugregs;
use super::vmcb::{
    Segment, Vmcb, attrib, cr, intercept_cr, intercept_dr, misc1, misc2, tlb_control, v_intr,
    vector,
};

/// The guest's boot GDT (null, 64-bit code, data).
pub const GDT: u64 = 0x0800;
/// The guest's PML4.
pub const PML4: u64 = 0x1000;
/// The guest's PDPT (one, for the first 512 GiB).
pub const PDPT: u64 = 0x2000;
/// The first of four page directories (the first 4 GiB, 2 MiB pages).
pub const PD0: u64 = 0x3000;
/// How much guest-physical space the boot page tables identity-map.
pub const IDENTITY_MAPPED: u64 = 4 << 30;

/// The boot structures end here (the image must start at or after it).
const BOOT_END: u64 = BOOT_INFO + BOOT_INFO_BYTES as u64;
const _: () = assert!(BOOT_END <= IMAGE_BASE);

/// Guest page-table entry bits.
const P: u64 = 1 << 0;
const RW: u64 = 1 << 1;
const PS: u64 = 1 << 7;

/// GDT descriptors: null, 64-bit code (P, S, type execute/read, L), data
/// (P, S, type read/write, D/B, G).
const GDT_ENTRIES: [u64; 3] = [0, 0x0020_9a00_0000_0000, 0x00cf_9200_0000_0000];

/// Why a guest's boot memory could not be written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BootError {
    /// The RAM cannot hold the boot structures and the image.
    RamTooSmall,
    /// The boot info (its command line) does not fit its page.
    BootInfo(BootInfoError),
}

impl core::fmt::Display for BootError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::RamTooSmall => write!(f, "RAM too small for the boot structures and the image"),
            Self::BootInfo(e) => write!(f, "{e}"),
        }
    }
}

fn put_u64(ram: &mut [u8], at: u64, value: u64) {
    let at = at as usize;
    ram[at..at + 8].copy_from_slice(&value.to_le_bytes());
}

/// Writes the image, the page tables, the GDT and `info` into `ram` (the
/// domain's RAM, guest-physical 0 upwards).
pub fn write_boot_memory(ram: &mut [u8], image: &[u8], info: &BootInfo) -> Result<(), BootError> {
    let image_end = IMAGE_BASE as usize + image.len();
    if ram.len() < image_end || (ram.len() as u64) < BOOT_END {
        return Err(BootError::RamTooSmall);
    }
    ram[IMAGE_BASE as usize..image_end].copy_from_slice(image);
    ram[..BOOT_END as usize].fill(0);
    write_identity_map(ram);
    write_gdt(ram, &GDT_ENTRIES);
    let start = BOOT_INFO as usize;
    info.encode(&mut ram[start..start + BOOT_INFO_BYTES])
        .map_err(BootError::BootInfo)?;
    Ok(())
}

/// Where the permission maps and tables of a vCPU's VMCB live.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VmcbSetup {
    /// Host-physical address of the I/O permission map (all ports intercepted).
    pub iopm_pa: u64,
    /// Host-physical address of the MSR permission map (all MSRs intercepted).
    pub msrpm_pa: u64,
    /// The domain's ASID (non-zero).
    pub asid: u32,
    /// The domain's nested page table root.
    pub n_cr3: u64,
}

/// The intercepts of every guest: physical interrupts and NMIs (the host
/// keeps them), INIT, CPUID, HLT, every I/O port and MSR, shutdown, and all
/// the SVM instructions (VMRUN must be intercepted; the others would let a
/// guest use SVM itself).
pub const MISC1_INTERCEPTS: u32 = misc1::INTR
    | misc1::NMI
    | misc1::SMI
    | misc1::INIT
    | misc1::CPUID
    | misc1::INVD
    | misc1::HLT
    | misc1::IOIO_PROT
    | misc1::MSR_PROT
    | misc1::SHUTDOWN;

/// The exceptions every guest's delivery of exits to the hypervisor first:
/// #AC and #DB, which a guest can make recur forever inside their own
/// delivery (CVE-2015-5307, CVE-2015-8104: an #AC while pushing the #AC
/// frame, a #DB on the #DB handler's stack) without retiring an instruction,
/// so the CPU would never take the interrupt that gives it back to the host.
/// Intercepted, each one is an exit; the hypervisor reinjects it.
pub const EXCEPTION_INTERCEPTS: u32 = (1 << vector::AC) | (1 << vector::DB);

/// See [`MISC1_INTERCEPTS`].
pub const MISC2_INTERCEPTS: u32 = misc2::VMRUN
    | misc2::VMMCALL
    | misc2::VMLOAD
    | misc2::VMSAVE
    | misc2::STGI
    | misc2::CLGI
    | misc2::SKINIT
    | misc2::XSETBV;

/// What every vCPU's VMCB starts with: the intercepts, the permission
/// maps, the ASID and nested paging; no guest state yet.
fn controlled_vmcb(setup: &VmcbSetup) -> Vmcb {
    let mut vmcb = Vmcb::zeroed();
    let c = &mut vmcb.control;
    c.intercept_misc1 = MISC1_INTERCEPTS;
    c.intercept_misc2 = MISC2_INTERCEPTS;
    c.intercept_exceptions = EXCEPTION_INTERCEPTS;
    // CR4's reserved bits are the guest CPUID's, checked by the hypervisor
    // (`super::policy::cr4_write`): hardware would check only its own.
    c.intercept_cr = intercept_cr::CR4_WRITE;
    // Debug registers are emulated (`super::debugregs`): DR0-DR3 are shared
    // with the host and other domains.
    c.intercept_dr = intercept_dr::ALL;
    c.iopm_base_pa = setup.iopm_pa;
    c.msrpm_base_pa = setup.msrpm_pa;
    c.guest_asid = setup.asid;
    c.tlb_control = tlb_control::FLUSH_ASID;
    c.v_intr = v_intr::V_INTR_MASKING;
    c.np_enable = 1;
    c.n_cr3 = setup.n_cr3;
    let s = &mut vmcb.save;
    s.ldtr = Segment {
        attrib: attrib::TYPE_LDT | attrib::P,
        ..Segment::NULL
    };
    s.dr6 = debugregs::DR6_RESET;
    s.dr7 = debugregs::DR7_RESET;
    s.rflags = cr::RFLAGS_FIXED;
    s.g_pat = super::vmcb::RESET_PAT;
    vmcb
}

/// Loads `code` into CS and `data` into every data segment register (DS,
/// ES, SS, FS, GS): the flat layout each boot state starts with.
fn load_segments(s: &mut super::vmcb::SaveArea, code: Segment, data: Segment) {
    s.cs = code;
    s.ds = data;
    s.es = data;
    s.ss = data;
    s.fs = data;
    s.gs = data;
}

/// 64-bit mode with paging through the boot page tables ([`PML4`]): flat
/// code at `code_selector`, flat data at `data_selector` in every data
/// segment register, the GDT at [`GDT`] with `gdt_entries` entries,
/// interrupts off, at `rip`.
fn long_mode(
    vmcb: &mut Vmcb,
    code_selector: u16,
    data_selector: u16,
    gdt_entries: usize,
    rip: u64,
) {
    let s = &mut vmcb.save;
    let code = Segment {
        selector: code_selector,
        attrib: attrib::TYPE_CODE | attrib::S | attrib::P | attrib::L | attrib::G,
        limit: 0xffff_ffff,
        base: 0,
    };
    let data = Segment {
        selector: data_selector,
        attrib: attrib::TYPE_DATA | attrib::S | attrib::P | attrib::DB | attrib::G,
        limit: 0xffff_ffff,
        base: 0,
    };
    load_segments(s, code, data);
    s.gdtr = Segment {
        limit: (gdt_entries * 8 - 1) as u32,
        base: GDT,
        ..Segment::NULL
    };
    s.idtr = Segment::NULL;
    s.tr = Segment {
        attrib: attrib::TYPE_TSS_BUSY | attrib::P,
        limit: 0x67,
        ..Segment::NULL
    };
    s.cpl = 0;
    s.efer = cr::EFER_LME | cr::EFER_LMA | cr::EFER_NXE | cr::EFER_SVME;
    s.cr0 = cr::CR0_PE | cr::CR0_MP | cr::CR0_ET | cr::CR0_NE | cr::CR0_WP | cr::CR0_PG;
    s.cr3 = PML4;
    s.cr4 = cr::CR4_PAE;
    s.rip = rip;
    s.rsp = 0;
}

/// A vCPU's first VMCB: the intercepts, nested paging, and the 64-bit boot
/// state at [`IMAGE_BASE`] (the same for every vCPU: `rdi`/`rsi`, which are
/// not in the VMCB, carry the index and the boot info).
pub fn initial_vmcb(setup: &VmcbSetup) -> Vmcb {
    let mut vmcb = controlled_vmcb(setup);
    long_mode(
        &mut vmcb,
        CODE_SELECTOR,
        DATA_SELECTOR,
        GDT_ENTRIES.len(),
        IMAGE_BASE,
    );
    vmcb
}

/// A Linux kernel's boot vCPU at the 64-bit entry of the x86 boot protocol
/// (`super::linux_boot`): long mode through the boot page tables, the
/// protocol's GDT at [`GDT`] (`__BOOT_CS`, `__BOOT_DS`), interrupts off, at
/// `entry`. `rsi` (not in the VMCB) must hold the zero page's address.
pub fn linux_entry_vmcb(setup: &VmcbSetup, entry: u64) -> Vmcb {
    use super::linux_boot::{BOOT_CS, BOOT_DS, BOOT_GDT};
    let mut vmcb = controlled_vmcb(setup);
    long_mode(&mut vmcb, BOOT_CS, BOOT_DS, BOOT_GDT.len(), entry);
    vmcb
}

/// A multiboot kernel's boot vCPU at its 32-bit `entry` (Multiboot
/// Specification 0.6.96, 3.2): protected mode without paging, CS a flat
/// 32-bit read/execute segment and DS/ES/FS/GS/SS flat read/write ones
/// (selectors 0x08 and 0x10, as GRUB leaves them), GDTR and IDTR undefined
/// for the kernel to load, interrupts off. `EAX` and `EBX` (the magic and
/// the information's address) must be set by the caller.
pub fn multiboot_entry_vmcb(setup: &VmcbSetup, entry: u32) -> Vmcb {
    let mut vmcb = controlled_vmcb(setup);
    let s = &mut vmcb.save;
    let flat = |selector: u16, kind: u16| Segment {
        selector,
        attrib: kind | attrib::S | attrib::P | attrib::DB | attrib::G,
        limit: 0xffff_ffff,
        base: 0,
    };
    load_segments(
        s,
        flat(0x08, attrib::TYPE_CODE),
        flat(0x10, attrib::TYPE_DATA),
    );
    s.gdtr = Segment::NULL;
    s.idtr = Segment::NULL;
    s.tr = Segment {
        attrib: attrib::TYPE_TSS_BUSY | attrib::P,
        limit: 0x67,
        ..Segment::NULL
    };
    s.cpl = 0;
    s.efer = cr::EFER_SVME;
    s.cr0 = cr::CR0_PE | cr::CR0_ET;
    s.cr3 = 0;
    s.cr4 = 0;
    s.rip = u64::from(entry);
    s.rsp = 0;
    vmcb
}

/// A vCPU as INIT leaves it and a STARTUP IPI with `vector` starts it
/// (Intel SDM vol. 3, 9.1.1 and 10.4.4.1; AMD APM vol. 2, 14.1.3): real
/// mode at `vector * 0x1000` (CS selector `vector << 8`, IP 0), every
/// segment a 64 KiB real-mode segment, caches as at reset (CR0 = CD, NW,
/// ET), paging and long mode off, interrupts off. SVM runs it natively.
pub fn startup_vmcb(setup: &VmcbSetup, vector: u8) -> Vmcb {
    let mut vmcb = controlled_vmcb(setup);
    let s = &mut vmcb.save;
    let real = |selector: u16, base: u64, kind: u16| Segment {
        selector,
        attrib: kind | attrib::S | attrib::P,
        limit: 0xffff,
        base,
    };
    load_segments(
        s,
        real(
            u16::from(vector) << 8,
            u64::from(vector) << 12,
            attrib::TYPE_CODE,
        ),
        real(0, 0, attrib::TYPE_DATA),
    );
    s.gdtr = Segment {
        limit: 0xffff,
        ..Segment::NULL
    };
    s.idtr = Segment {
        limit: 0xffff,
        ..Segment::NULL
    };
    s.tr = Segment {
        attrib: attrib::TYPE_TSS_BUSY | attrib::P,
        limit: 0xffff,
        ..Segment::NULL
    };
    s.cpl = 0;
    // EFER.SVME stays set: VMRUN requires it in the guest's EFER (hidden
    // from the guest's own reads).
    s.efer = cr::EFER_SVME;
    s.cr0 = cr::CR0_CD | cr::CR0_NW | cr::CR0_ET;
    s.cr3 = 0;
    s.cr4 = 0;
    s.rip = 0;
    s.rsp = 0;
    vmcb
}

/// Writes the boot page tables (the first 4 GiB identity-mapped with 2 MiB
/// pages, at [`PML4`]..) into `ram`, which must hold at least 0x7000 bytes.
pub(crate) fn write_identity_map(ram: &mut [u8]) {
    put_u64(ram, PML4, PDPT | P | RW);
    for gib in 0..4 {
        let pd = PD0 + gib * 0x1000;
        put_u64(ram, PDPT + gib * 8, pd | P | RW);
        for entry in 0..512 {
            let address = (gib << 30) | (entry << 21);
            put_u64(ram, pd + entry * 8, address | P | RW | PS);
        }
    }
}

/// Writes `entries` as the GDT at [`GDT`].
pub(crate) fn write_gdt(ram: &mut [u8], entries: &[u64]) {
    for (i, &descriptor) in entries.iter().enumerate() {
        put_u64(ram, GDT + 8 * i as u64, descriptor);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    fn read_u64(ram: &[u8], at: u64) -> u64 {
        u64::from_le_bytes(ram[at as usize..at as usize + 8].try_into().unwrap())
    }

    /// Walks the guest's boot page tables like the CPU would.
    fn walk(ram: &[u8], va: u64) -> Option<u64> {
        let pml4e = read_u64(ram, PML4 + ((va >> 39) & 0x1ff) * 8);
        if pml4e & P == 0 {
            return None;
        }
        let pdpte = read_u64(ram, (pml4e & !0xfff) + ((va >> 30) & 0x1ff) * 8);
        if pdpte & P == 0 {
            return None;
        }
        let pde = read_u64(ram, (pdpte & !0xfff) + ((va >> 21) & 0x1ff) * 8);
        if pde & (P | PS) != (P | PS) {
            return None;
        }
        Some((pde & !0x1f_ffff & 0x000f_ffff_ffff_ffff) + (va & 0x1f_ffff))
    }

    #[test]
    fn the_boot_memory_identity_maps_4_gib_and_holds_the_image_and_info() {
        let mut ram = vec![0xaau8; 4 << 20];
        let image = [0x90u8, 0xf4];
        let info = BootInfo {
            vcpus: 2,
            ram_bytes: 4 << 20,
            tsc_khz: 1_000_000,
            cmdline: "workload=compute",
        };
        write_boot_memory(&mut ram, &image, &info).unwrap();
        for va in [
            0,
            0x8000,
            0x1f_ffff,
            0x20_0000,
            0xfee0_0000,
            IDENTITY_MAPPED - 1,
        ] {
            assert_eq!(walk(&ram, va), Some(va), "{va:#x}");
        }
        assert_eq!(walk(&ram, IDENTITY_MAPPED), None);
        assert_eq!(&ram[IMAGE_BASE as usize..IMAGE_BASE as usize + 2], &image);
        let start = BOOT_INFO as usize;
        assert_eq!(
            BootInfo::decode(&ram[start..start + BOOT_INFO_BYTES]),
            Ok(info)
        );
        assert_eq!(read_u64(&ram, GDT + 8), GDT_ENTRIES[1]);
    }

    fn setup() -> VmcbSetup {
        VmcbSetup {
            iopm_pa: 0x10_0000,
            msrpm_pa: 0x20_0000,
            asid: 3,
            n_cr3: 0x30_0000,
        }
    }

    #[test]
    fn every_start_state_keeps_the_intercepts() {
        let setup = setup();
        for vmcb in [
            initial_vmcb(&setup),
            linux_entry_vmcb(&setup, 0x100_0200),
            startup_vmcb(&setup, 0x9A),
        ] {
            assert_eq!(vmcb.control.intercept_misc1, MISC1_INTERCEPTS);
            assert_eq!(vmcb.control.intercept_misc2, MISC2_INTERCEPTS);
            assert_eq!(vmcb.control.intercept_exceptions, EXCEPTION_INTERCEPTS);
            assert_eq!(vmcb.control.guest_asid, 3);
            assert_eq!(vmcb.control.n_cr3, 0x30_0000);
            assert_eq!(vmcb.control.np_enable, 1);
            assert_ne!(vmcb.save.efer & cr::EFER_SVME, 0, "VMRUN needs EFER.SVME");
            assert_eq!(vmcb.save.rflags, cr::RFLAGS_FIXED, "interrupts off");
        }
    }

    #[test]
    fn linux_entry_uses_the_boot_protocol_selectors() {
        let vmcb = linux_entry_vmcb(&setup(), 0x100_0200);
        let s = &vmcb.save;
        assert_eq!(s.cs.selector, 0x10);
        assert_eq!(s.ds.selector, 0x18);
        assert_eq!(s.ss.selector, 0x18);
        assert_ne!(s.cs.attrib & attrib::L, 0, "64-bit code");
        assert_eq!(s.gdtr.base, GDT);
        assert_eq!(s.gdtr.limit, 4 * 8 - 1);
        assert_eq!(s.rip, 0x100_0200);
        assert_eq!(s.cr3, PML4);
        assert_ne!(s.efer & cr::EFER_LMA, 0);
    }

    #[test]
    fn startup_is_real_mode_at_the_vector_page() {
        let vmcb = startup_vmcb(&setup(), 0x9A);
        let s = &vmcb.save;
        assert_eq!(s.cs.selector, 0x9A00);
        assert_eq!(s.cs.base, 0x9_A000);
        assert_eq!(s.cs.limit, 0xFFFF);
        assert_eq!(s.rip, 0);
        assert_eq!(s.cr0 & (cr::CR0_PE | cr::CR0_PG), 0, "real mode");
        assert_eq!(s.cr0, 0x6000_0010, "CD, NW, ET as at reset");
        assert_eq!(s.efer, cr::EFER_SVME, "no long mode");
        assert_eq!(s.cr4, 0);
        assert_eq!((s.ds.base, s.ds.limit, s.ds.selector), (0, 0xFFFF, 0));
        assert_eq!(s.idtr.limit, 0xFFFF);
    }

    #[test]
    fn multiboot_entry_is_flat_protected_mode_without_paging() {
        let vmcb = multiboot_entry_vmcb(&setup(), 0x40_00bc);
        let s = &vmcb.save;
        assert_eq!(s.rip, 0x40_00bc);
        assert_eq!(s.cr0 & (cr::CR0_PE | cr::CR0_PG), cr::CR0_PE);
        assert_eq!(s.efer, cr::EFER_SVME, "no long mode");
        for seg in [s.cs, s.ds, s.es, s.ss, s.fs, s.gs] {
            assert_eq!((seg.base, seg.limit), (0, 0xffff_ffff));
            assert_ne!(seg.attrib & attrib::DB, 0, "32-bit");
            assert_eq!(seg.attrib & attrib::L, 0);
        }
        assert_eq!(s.cs.attrib & 0xf, attrib::TYPE_CODE);
        assert_eq!(s.ds.attrib & 0xf, attrib::TYPE_DATA);
        assert_eq!(s.rflags & (1 << 9), 0, "interrupts off");
    }

    #[test]
    fn small_ram_or_long_command_lines_are_refused() {
        let info = BootInfo {
            vcpus: 1,
            ram_bytes: 0,
            tsc_khz: 1,
            cmdline: "",
        };
        let mut ram = vec![0u8; 0x8000];
        assert_eq!(
            write_boot_memory(&mut ram, &[1, 2, 3], &info),
            Err(BootError::RamTooSmall)
        );
        let long = "x".repeat(BOOT_INFO_BYTES);
        let mut ram = vec![0u8; 0x10000];
        assert!(matches!(
            write_boot_memory(
                &mut ram,
                &[1],
                &BootInfo {
                    cmdline: &long,
                    ..info
                }
            ),
            Err(BootError::BootInfo(_))
        ));
    }

    #[test]
    fn the_first_vmcb_is_a_valid_long_mode_state() {
        let vmcb = initial_vmcb(&VmcbSetup {
            iopm_pa: 0x10_0000,
            msrpm_pa: 0x11_0000,
            asid: 1,
            n_cr3: 0x12_0000,
        });
        // APM 15.5.1 consistency checks VMRUN applies.
        let s = &vmcb.save;
        assert!(s.efer & cr::EFER_SVME != 0);
        assert!(s.cr0 & cr::CR0_PG != 0 && s.cr0 & cr::CR0_PE != 0);
        assert!(s.cr4 & cr::CR4_PAE != 0);
        assert!(s.cs.attrib & attrib::L != 0 && s.cs.attrib & attrib::DB == 0);
        assert!(vmcb.control.intercept_misc2 & misc2::VMRUN != 0);
        assert_ne!(vmcb.control.guest_asid, 0);
        assert_eq!(s.rip, IMAGE_BASE);
        assert_eq!(vmcb.control.np_enable, 1);
    }

    #[test]
    fn a_guest_cannot_keep_the_cpu_in_exception_delivery_or_reach_shared_debug_registers() {
        let vmcb = initial_vmcb(&VmcbSetup {
            iopm_pa: 0x10_0000,
            msrpm_pa: 0x11_0000,
            asid: 1,
            n_cr3: 0x12_0000,
        });
        let c = &vmcb.control;
        for v in [vector::AC, vector::DB] {
            assert!(c.intercept_exceptions & (1 << v) != 0, "vector {v}");
        }
        assert_eq!(c.intercept_dr, intercept_dr::ALL);
        // Physical SMIs and INITs exit too: the host handles them, not the
        // domain that happened to run.
        assert!(c.intercept_misc1 & misc1::SMI != 0 && c.intercept_misc1 & misc1::INIT != 0);
        assert_eq!(vmcb.save.dr7, debugregs::DR7_RESET);
    }
}
