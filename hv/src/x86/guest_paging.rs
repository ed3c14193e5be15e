//! Reading guest code through the guest's own page tables: linear address
//! to guest-physical by the paging mode the VMCB save area gives (CR0.PG,
//! CR4.PAE/PSE/LA57, EFER.LMA; Intel SDM vol. 3, 4.3-4.5; AMD APM vol. 2,
//! 5.2-5.3), then the bytes through the domain's memory. The glue uses it to
//! fetch the instruction at RIP ([`fetch`]) for [`super::insn`].
//!
//! Only what reading needs is checked: present bits and large pages.
//! Permissions (U/S, R/W, NX) are not: the guest has just executed the
//! instruction, so its fetch was allowed.

use core::fmt;

use super::insn::{CodeSize, MAX_INSTRUCTION_BYTES};
use super::vmcb::cr::{CR0_PE, CR0_PG, CR4_LA57, CR4_PAE, CR4_PSE, EFER_LMA};
use super::vmcb::{SaveArea, attrib};

/// Guest-physical memory the walk reads (the domain's RAM).
pub trait GuestPhysRead {
    /// Copies `buffer.len()` bytes from guest-physical `gpa`; false if any
    /// of them is outside the domain's memory.
    fn read(&self, gpa: u64, buffer: &mut [u8]) -> bool;
}

/// A slice holding guest-physical memory from address 0.
impl GuestPhysRead for [u8] {
    fn read(&self, gpa: u64, buffer: &mut [u8]) -> bool {
        let Ok(start) = usize::try_from(gpa) else {
            return false;
        };
        match start
            .checked_add(buffer.len())
            .and_then(|end| self.get(start..end))
        {
            Some(bytes) => {
                buffer.copy_from_slice(bytes);
                true
            }
            None => false,
        }
    }
}

/// Page-table entry: present.
const PRESENT: u64 = 1 << 0;
/// Page-table entry: a large page (PDPTE, PDE).
const LARGE: u64 = 1 << 7;
/// Physical address bits 51:12 of a 64-bit entry.
const ADDRESS_MASK: u64 = 0x000f_ffff_ffff_f000;

const PAGE: u64 = 4096;

/// How linear addresses become guest-physical ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PagingMode {
    /// CR0.PG = 0: linear = physical.
    Off,
    /// Two levels of 4-byte entries (4 MiB pages with CR4.PSE).
    Bits32 {
        /// CR4.PSE: PDEs may map 4 MiB pages.
        pse: bool,
    },
    /// PAE: four PDPTEs, then two levels of 8-byte entries.
    Pae,
    /// Long mode, four levels.
    Level4,
    /// Long mode with CR4.LA57, five levels.
    Level5,
}

impl PagingMode {
    /// The mode of a vCPU with these control registers.
    pub fn from_registers(cr0: u64, cr4: u64, efer: u64) -> Self {
        if cr0 & CR0_PG == 0 {
            Self::Off
        } else if efer & EFER_LMA != 0 {
            if cr4 & CR4_LA57 != 0 {
                Self::Level5
            } else {
                Self::Level4
            }
        } else if cr4 & CR4_PAE != 0 {
            Self::Pae
        } else {
            Self::Bits32 {
                pse: cr4 & CR4_PSE != 0,
            }
        }
    }
}

/// Why a linear address has no guest-physical one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkError {
    /// An entry on the way is not present.
    NotPresent {
        /// The linear address.
        linear: u64,
        /// The level whose entry is missing (1 = page table; 4 = PML4).
        level: u8,
    },
    /// A table (or the page) lies outside the domain's memory.
    Unreadable {
        /// The guest-physical address that could not be read.
        gpa: u64,
    },
    /// A 64-bit address that is not canonical.
    NonCanonical(u64),
}

impl fmt::Display for WalkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NotPresent { linear, level } => write!(
                f,
                "linear {linear:#x} is not mapped (level-{level} entry not present)"
            ),
            Self::Unreadable { gpa } => {
                write!(f, "guest-physical {gpa:#x} is outside the domain's memory")
            }
            Self::NonCanonical(linear) => write!(f, "linear {linear:#x} is not canonical"),
        }
    }
}

/// Fills `buffer` from guest-physical `gpa`, or says it is outside the
/// domain's memory.
fn read_exact(
    memory: &(impl GuestPhysRead + ?Sized),
    gpa: u64,
    buffer: &mut [u8],
) -> Result<(), WalkError> {
    if memory.read(gpa, buffer) {
        Ok(())
    } else {
        Err(WalkError::Unreadable { gpa })
    }
}

fn read_u64(memory: &(impl GuestPhysRead + ?Sized), gpa: u64) -> Result<u64, WalkError> {
    let mut bytes = [0u8; 8];
    read_exact(memory, gpa, &mut bytes).map(|()| u64::from_le_bytes(bytes))
}

fn read_u32(memory: &(impl GuestPhysRead + ?Sized), gpa: u64) -> Result<u32, WalkError> {
    let mut bytes = [0u8; 4];
    read_exact(memory, gpa, &mut bytes).map(|()| u32::from_le_bytes(bytes))
}

/// The guest-physical address of `linear` under `mode` with page-table root
/// `cr3`.
pub fn translate(
    mode: PagingMode,
    cr3: u64,
    linear: u64,
    memory: &(impl GuestPhysRead + ?Sized),
) -> Result<u64, WalkError> {
    match mode {
        PagingMode::Off => Ok(linear & 0xffff_ffff),
        PagingMode::Bits32 { pse } => {
            let linear = linear & 0xffff_ffff;
            let pde_gpa = (cr3 & 0xffff_f000) + ((linear >> 22) & 0x3ff) * 4;
            let pde = u64::from(read_u32(memory, pde_gpa)?);
            if pde & PRESENT == 0 {
                return Err(WalkError::NotPresent { linear, level: 2 });
            }
            if pse && pde & LARGE != 0 {
                // PSE-36: physical bits 39:32 sit in PDE bits 20:13.
                let base = (pde & 0xffc0_0000) | (((pde >> 13) & 0xff) << 32);
                return Ok(base | (linear & 0x3f_ffff));
            }
            let pte_gpa = (pde & 0xffff_f000) + ((linear >> 12) & 0x3ff) * 4;
            let pte = u64::from(read_u32(memory, pte_gpa)?);
            if pte & PRESENT == 0 {
                return Err(WalkError::NotPresent { linear, level: 1 });
            }
            Ok((pte & 0xffff_f000) | (linear & 0xfff))
        }
        PagingMode::Pae => {
            let linear = linear & 0xffff_ffff;
            let pdpte_gpa = (cr3 & 0xffff_ffe0) + ((linear >> 30) & 0b11) * 8;
            let pdpte = read_u64(memory, pdpte_gpa)?;
            if pdpte & PRESENT == 0 {
                return Err(WalkError::NotPresent { linear, level: 3 });
            }
            walk_from(pdpte & ADDRESS_MASK, 2, linear, memory)
        }
        PagingMode::Level4 | PagingMode::Level5 => {
            let levels: u8 = if mode == PagingMode::Level5 { 5 } else { 4 };
            let bits = 12 + 9 * u32::from(levels);
            // Canonical: bits 63..bits-1 all equal.
            let shift = 64 - bits;
            if ((linear << shift) as i64 >> shift) as u64 != linear {
                return Err(WalkError::NonCanonical(linear));
            }
            walk_from(cr3 & ADDRESS_MASK, levels, linear, memory)
        }
    }
}

/// Walks 8-byte-entry tables from the table at `table` (of level `level`)
/// down to the page; levels 3 and 2 may map large pages.
fn walk_from(
    mut table: u64,
    mut level: u8,
    linear: u64,
    memory: &(impl GuestPhysRead + ?Sized),
) -> Result<u64, WalkError> {
    loop {
        let shift = 12 + 9 * u32::from(level - 1);
        let entry = read_u64(memory, table + ((linear >> shift) & 0x1ff) * 8)?;
        if entry & PRESENT == 0 {
            return Err(WalkError::NotPresent { linear, level });
        }
        if level == 1 || ((level == 2 || level == 3) && entry & LARGE != 0) {
            let offset_mask = (1u64 << shift) - 1;
            return Ok((entry & ADDRESS_MASK & !offset_mask) | (linear & offset_mask));
        }
        table = entry & ADDRESS_MASK;
        level -= 1;
    }
}

/// The instruction bytes at a vCPU's RIP, as far as they could be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fetched {
    /// The bytes, `len` of them valid.
    pub bytes: [u8; MAX_INSTRUCTION_BYTES],
    /// How many could be read (less than 15 when a page boundary stopped
    /// the read: see `stopped_by`).
    pub len: usize,
    /// Why the read stopped before 15 bytes, if it did.
    pub stopped_by: Option<WalkError>,
    /// REX prefixes exist (64-bit code).
    pub size: CodeSize,
}

impl Fetched {
    /// The bytes read.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// Reads up to 15 bytes of code at the vCPU's CS:RIP (its state in `save`)
/// through its page tables and `memory`, page by page: an instruction may
/// cross into a page mapped elsewhere, or into one not mapped (then fewer
/// bytes come back, and why). An error if not even the first byte can be
/// read.
pub fn fetch(
    save: &SaveArea,
    memory: &(impl GuestPhysRead + ?Sized),
) -> Result<Fetched, WalkError> {
    let mode = PagingMode::from_registers(save.cr0, save.cr4, save.efer);
    let long_code = save.efer & EFER_LMA != 0 && save.cs.attrib & attrib::L != 0;
    let (start, size) = if long_code {
        (save.rip, CodeSize::Bits64)
    } else if save.cr0 & CR0_PE == 0 {
        // Real mode: the VMCB's CS base is the selector times 16.
        (
            (save.cs.base + (save.rip & 0xffff)) & 0xf_ffff,
            CodeSize::Legacy,
        )
    } else {
        ((save.cs.base + save.rip) & 0xffff_ffff, CodeSize::Legacy)
    };
    let mut fetched = Fetched {
        bytes: [0; MAX_INSTRUCTION_BYTES],
        len: 0,
        stopped_by: None,
        size,
    };
    while fetched.len < MAX_INSTRUCTION_BYTES {
        let linear = if size == CodeSize::Bits64 {
            start.wrapping_add(fetched.len as u64)
        } else {
            start.wrapping_add(fetched.len as u64) & 0xffff_ffff
        };
        let in_page = (PAGE - (linear % PAGE)) as usize;
        let chunk = in_page.min(MAX_INSTRUCTION_BYTES - fetched.len);
        let read = translate(mode, save.cr3, linear, memory).and_then(|gpa| {
            read_exact(
                memory,
                gpa,
                &mut fetched.bytes[fetched.len..fetched.len + chunk],
            )
        });
        match read {
            Ok(()) => fetched.len += chunk,
            Err(e) if fetched.len == 0 => return Err(e),
            Err(e) => {
                fetched.stopped_by = Some(e);
                break;
            }
        }
    }
    Ok(fetched)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::x86::insn::{self, DecodeError, Intercepted};
    use crate::x86::vmcb::Vmcb;
    use alloc::vec;
    use alloc::vec::Vec;

    const P: u64 = PRESENT | 0b10;

    /// 4 MiB of guest RAM to lay tables and code in.
    fn ram() -> Vec<u8> {
        vec![0u8; 4 << 20]
    }

    fn put64(ram: &mut [u8], at: u64, value: u64) {
        ram[at as usize..at as usize + 8].copy_from_slice(&value.to_le_bytes());
    }

    fn put32(ram: &mut [u8], at: u64, value: u32) {
        ram[at as usize..at as usize + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// A 64-bit vCPU at `rip` with four-level tables rooted at 0x1000.
    fn long_mode(rip: u64) -> SaveArea {
        let mut save = Vmcb::zeroed().save;
        save.cr0 = CR0_PE | CR0_PG;
        save.cr4 = CR4_PAE;
        save.efer = EFER_LMA | (1 << 8);
        save.cs.attrib = attrib::L | attrib::P | attrib::S | attrib::TYPE_CODE;
        save.cr3 = 0x1000;
        save.rip = rip;
        save
    }

    /// Maps linear `linear` (4 KiB page) to guest-physical `gpa` in the
    /// four-level tables at 0x1000 (PDPT 0x2000, PD 0x3000, PT 0x4000).
    fn map_4k(ram: &mut [u8], linear: u64, gpa: u64) {
        put64(ram, 0x1000 + ((linear >> 39) & 0x1ff) * 8, 0x2000 | P);
        put64(ram, 0x2000 + ((linear >> 30) & 0x1ff) * 8, 0x3000 | P);
        put64(ram, 0x3000 + ((linear >> 21) & 0x1ff) * 8, 0x4000 | P);
        put64(ram, 0x4000 + ((linear >> 12) & 0x1ff) * 8, gpa | P);
    }

    #[test]
    fn four_level_walks_find_4k_2m_and_1g_pages() {
        let mut ram = ram();
        map_4k(&mut ram, 0x7fff_0000_5000, 0x20_0000);
        let mode = PagingMode::Level4;
        assert_eq!(
            translate(mode, 0x1000, 0x7fff_0000_5123, &ram[..]),
            Ok(0x20_0123)
        );
        // Another PD entry: a 2 MiB page at 0x20_0000.
        put64(&mut ram, 0x3000 + 8, 0x20_0000 | P | LARGE);
        assert_eq!(
            translate(mode, 0x1000, 0x7fff_0030_1234, &ram[..]),
            Ok(0x30_1234)
        );
        // Another PDPT entry: a 1 GiB page.
        put64(&mut ram, 0x2000 + 0x1fd * 8, 0x4000_0000 | P | LARGE);
        assert_eq!(
            translate(mode, 0x1000, 0x7fff_4123_4567, &ram[..]),
            Ok(0x4123_4567)
        );
        assert_eq!(
            translate(mode, 0x1000, 0x7fff_0000_6000, &ram[..]),
            Err(WalkError::NotPresent {
                linear: 0x7fff_0000_6000,
                level: 1
            })
        );
        assert_eq!(
            translate(mode, 0x1000, 0x8000_0000_0000, &ram[..]),
            Err(WalkError::NonCanonical(0x8000_0000_0000))
        );
        // A table outside the domain's memory.
        put64(&mut ram, 0x1000 + 8 * 2, 0x8000_0000 | P);
        assert_eq!(
            translate(mode, 0x1000, 0x0000_0100_0000_0000, &ram[..]),
            Err(WalkError::Unreadable { gpa: 0x8000_0000 })
        );
    }

    #[test]
    fn five_level_pae_32_bit_and_unpaged_walks() {
        let mut ram = ram();
        // LA57: PML5 at 0x5000 points at the four-level tables.
        map_4k(&mut ram, 0x1000, 0x9000);
        put64(&mut ram, 0x5000, 0x1000 | P);
        assert_eq!(
            translate(PagingMode::Level5, 0x5000, 0x1abc, &ram[..]),
            Ok(0x9abc)
        );
        // PAE: PDPTEs at 0x6020 (32-byte aligned), PD 0x7000, PT 0x8000.
        put64(&mut ram, 0x6020 + 8, 0x7000 | PRESENT);
        put64(&mut ram, 0x7000 + 8 * 2, 0x8000 | P);
        put64(&mut ram, 0x8000 + 8 * 3, 0xa000 | P);
        assert_eq!(
            translate(PagingMode::Pae, 0x6020, 0x4040_3010, &ram[..]),
            Ok(0xa010)
        );
        assert_eq!(
            translate(PagingMode::Pae, 0x6020, 0x0000_3010, &ram[..]),
            Err(WalkError::NotPresent {
                linear: 0x3010,
                level: 3
            })
        );
        // 32-bit: PD at 0xb000; a PT at 0xc000, and a 4 MiB page.
        put32(&mut ram, 0xb000 + 4, 0xc000 | 0b11);
        put32(&mut ram, 0xc000 + 4 * 5, 0xd000 | 0b11);
        put32(&mut ram, 0xb000 + 4 * 2, 0x0040_0000 | 0b11 | 0x80);
        let pse = PagingMode::Bits32 { pse: true };
        assert_eq!(translate(pse, 0xb000, 0x0040_5044, &ram[..]), Ok(0xd044));
        assert_eq!(
            translate(pse, 0xb000, 0x0081_2345, &ram[..]),
            Ok(0x0041_2345)
        );
        // Without PSE the PS bit is ignored: the entry is read as a page
        // table's address (here just past the domain's 4 MiB).
        let no_pse = PagingMode::Bits32 { pse: false };
        assert_eq!(
            translate(no_pse, 0xb000, 0x0080_0000, &ram[..]),
            Err(WalkError::Unreadable { gpa: 0x40_0000 })
        );
        assert_eq!(translate(PagingMode::Off, 0, 0x1234, &ram[..]), Ok(0x1234));
        assert_eq!(
            PagingMode::from_registers(CR0_PG | CR0_PE, CR4_PAE | CR4_LA57, EFER_LMA),
            PagingMode::Level5
        );
        assert_eq!(
            PagingMode::from_registers(CR0_PG | CR0_PE, CR4_PSE, 0),
            PagingMode::Bits32 { pse: true }
        );
        assert_eq!(
            PagingMode::from_registers(CR0_PE, CR4_PAE, 0),
            PagingMode::Off
        );
    }

    #[test]
    fn an_instruction_crossing_into_a_page_mapped_elsewhere_is_read_whole() {
        let mut ram = ram();
        // The code page ends with `66 0f`, the next page (mapped at another
        // guest-physical page, below the first) starts with `a2`.
        map_4k(&mut ram, 0x40_0000, 0x30_0000);
        map_4k(&mut ram, 0x40_1000, 0x10_0000);
        ram[0x30_0ffe..0x30_1000].copy_from_slice(&[0x66, 0x0f]);
        ram[0x10_0000] = 0xa2;
        let fetched = fetch(&long_mode(0x40_0ffe), &ram[..]).unwrap();
        assert_eq!(fetched.len, 15);
        assert_eq!(&fetched.as_slice()[..3], &[0x66, 0x0f, 0xa2]);
        assert_eq!(
            insn::length(fetched.as_slice(), Intercepted::Cpuid, fetched.size),
            Ok(3)
        );
    }

    #[test]
    fn an_unmapped_next_page_truncates_and_an_unmapped_rip_fails() {
        let mut ram = ram();
        map_4k(&mut ram, 0x40_0000, 0x30_0000);
        ram[0x30_0ffe..0x30_1000].copy_from_slice(&[0x0f, 0x01]);
        let fetched = fetch(&long_mode(0x40_0ffe), &ram[..]).unwrap();
        assert_eq!(fetched.as_slice(), &[0x0f, 0x01]);
        assert_eq!(
            fetched.stopped_by,
            Some(WalkError::NotPresent {
                linear: 0x40_1000,
                level: 1
            })
        );
        assert_eq!(
            insn::length(fetched.as_slice(), Intercepted::Vmmcall, fetched.size),
            Err(DecodeError::Truncated { have: 2 })
        );
        // A HLT in the last byte of the page needs nothing from the next.
        ram[0x30_0fff] = 0xf4;
        let fetched = fetch(&long_mode(0x40_0fff), &ram[..]).unwrap();
        assert_eq!(
            insn::length(fetched.as_slice(), Intercepted::Hlt, fetched.size),
            Ok(1)
        );
        assert_eq!(
            fetch(&long_mode(0x50_0000), &ram[..]),
            Err(WalkError::NotPresent {
                linear: 0x50_0000,
                level: 1
            })
        );
        // Mapped, but to guest-physical memory the domain does not have.
        map_4k(&mut ram, 0x60_0000, 0x1_0000_0000);
        assert_eq!(
            fetch(&long_mode(0x60_0010), &ram[..]),
            Err(WalkError::Unreadable { gpa: 0x1_0000_0010 })
        );
    }

    #[test]
    fn the_boot_identity_map_reads_the_guests_code() {
        // The tables `super::super::boot` writes for every guest: 2 MiB
        // pages identity-mapping the first 4 GiB; a VMMCALL at 0x8100.
        let mut ram = vec![0u8; 16 << 20];
        let info = guest_abi::x86::BootInfo {
            vcpus: 1,
            ram_bytes: ram.len() as u64,
            tsc_khz: 1,
            cmdline: "",
        };
        let image = [0x90, 0x0f, 0x01, 0xd9];
        crate::x86::boot::write_boot_memory(&mut ram, &image, &info).unwrap();
        let mut save = long_mode(guest_abi::x86::IMAGE_BASE + 1);
        save.cr3 = crate::x86::boot::PML4;
        let fetched = fetch(&save, &ram[..]).unwrap();
        assert_eq!(
            insn::length(fetched.as_slice(), Intercepted::Vmmcall, fetched.size),
            Ok(3)
        );
        // Real mode: CS base + IP, no paging.
        let mut real = Vmcb::zeroed().save;
        real.cs.base = 0x800;
        real.rip = 0x7801;
        assert_eq!(
            &fetch(&real, &ram[..]).unwrap().as_slice()[..3],
            &[0x0f, 0x01, 0xd9]
        );
    }
}
