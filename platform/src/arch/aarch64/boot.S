// Entry points of the hypervisor image on ARM64.
//
// The image starts with an arm64 Linux `Image` header (Documentation/arch/arm64/
// booting.rst) so QEMU, the Raspberry Pi firmware and U-Boot load it like a
// kernel: at a 2 MiB-aligned RAM base + text_offset, MMU off, x0 = DTB address.
//
// The same bytes are also a PE/COFF UEFI application, as Linux's EFI stub does
// it: the first instruction is encoded so its low half reads "MZ" (the DOS
// signature), offset 0x3c holds the PE header's offset, and one section covers
// the whole image (code, data and .bss). UEFI enters at `efi_pe_entry` with
// x0 = image handle, x1 = system table (efi.rs); the application exits boot
// services and rejoins the Image entry with the MMU off (`efi_leave_firmware`).
// Boards linked position-independent (ampere) run wherever UEFI loads them: both
// entries apply the image's own R_AARCH64_RELATIVE relocations first.

.section .text.head, "ax"
.global _start
_start:
    .long   0xfa405a4d                  // code0: "MZ"; as an instruction `ccmp x18, #0, #0xd, pl` (harmless)
    b       primary_entry               // code1: branch past the header
    .quad   0x80000                     // text_offset: Linux's historical value
    .quad   __image_size                // image_size, including .bss
    .quad   0x2                         // flags: little endian, 4 KiB pages
    .quad   0, 0, 0                     // res2-res4
    .ascii  "ARM\x64"                   // magic
    .long   pe_header - _start          // res5 / DOS e_lfanew: where the PE header is

// PE/COFF header (Microsoft PE format; UEFI spec 2.10 §2.1.1). No base
// relocation directory: the image relocates itself (apply_relocations), so
// ImageBase is 0 and UEFI may load it anywhere.
pe_header:
    .ascii  "PE\0\0"
    .short  0xaa64                      // Machine: ARM64
    .short  1                           // NumberOfSections
    .long   0                           // TimeDateStamp
    .long   0                           // PointerToSymbolTable
    .long   0                           // NumberOfSymbols
    .short  section_table - optional_header // SizeOfOptionalHeader
    .short  0x206                       // Characteristics: executable, line numbers and debug info stripped
optional_header:
    .short  0x20b                       // Magic: PE32+
    .byte   0, 0                        // linker version
    .long   __pe_raw_size               // SizeOfCode
    .long   0                           // SizeOfInitializedData
    .long   0                           // SizeOfUninitializedData
    .long   efi_pe_entry - _start       // AddressOfEntryPoint
    .long   pe_headers_end - _start     // BaseOfCode
    .quad   0                           // ImageBase
    .long   0x1000                      // SectionAlignment
    .long   0x200                       // FileAlignment
    .short  0, 0                        // operating system version
    .short  0, 0                        // image version
    .short  0, 0                        // subsystem version
    .long   0                           // Win32VersionValue
    .long   __image_size                // SizeOfImage (with .bss, page aligned)
    .long   pe_headers_end - _start     // SizeOfHeaders
    .long   0                           // CheckSum
    .short  10                          // Subsystem: EFI application
    .short  0                           // DllCharacteristics
    .quad   0, 0, 0, 0                  // stack and heap reserve/commit (unused by UEFI)
    .long   0                           // LoaderFlags
    .long   (section_table - data_directories) / 8 // NumberOfRvaAndSizes
data_directories:
    .quad   0, 0, 0, 0, 0, 0            // export, import, resource, exception, certificate, base relocation: none
section_table:
    .ascii  ".text\0\0\0"
    .long   __pe_virtual_size           // VirtualSize: to the end of .bss
    .long   pe_headers_end - _start     // VirtualAddress
    .long   __pe_raw_size               // SizeOfRawData: to the end of the file
    .long   pe_headers_end - _start     // PointerToRawData (file offset = address offset)
    .long   0, 0                        // PointerToRelocations, PointerToLinenumbers
    .short  0, 0                        // NumberOfRelocations, NumberOfLinenumbers
    // Code, initialised data, execute, read, write: the image patches its own
    // relocations and keeps data and .bss in the same section.
    .long   0xe0000060
    .balign 0x1000
pe_headers_end:

primary_entry:
    mov     x19, x0                     // DTB address (0 when coming from the UEFI entry)
    bl      apply_relocations           // x0 = 0: relocated (or nothing to do)
    cbz     x0, 7f
8:  wfe                                 // not relocatable and not at its link address: nothing can run
    b       8b
7:
    mrs     x20, CurrentEL
    lsr     x20, x20, #2
    // Zero .bss before any Rust code runs; the boot stack lives in it.
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
1:  cmp     x1, x2
    b.hs    2f
    str     xzr, [x1], #8
    b       1b
2:  adrp    x1, __boot_stack_top
    add     x1, x1, :lo12:__boot_stack_top
    mov     sp, x1
    cmp     x20, #2
    b.ne    3f                          // not at EL2: Rust reports it, MMU off
    bl      build_boot_page_table
    adrp    x0, BOOT_LEVEL0_TABLE
    add     x0, x0, :lo12:BOOT_LEVEL0_TABLE
    bl      enable_mmu_el2
3:  mov     x0, x19
    mov     x1, x20
    bl      platform_primary_entry
4:  wfe
    b       4b

// Secondary CPUs arrive here from PSCI CPU_ON (or the spin table) with the MMU
// off and x0 = the context id: the address of this CPU's `SecondaryBoot` block
// { page_table, stack_top, cpu_index } (see boot.rs).
.global secondary_entry
secondary_entry:
    mov     x19, x0
    ldr     x1, [x19, #8]
    mov     sp, x1
    ldr     x0, [x19, #0]
    bl      enable_mmu_el2
    ldr     x0, [x19, #16]
    bl      platform_secondary_entry
5:  wfe
    b       5b

// Identity map of the 512 GiB region that holds this image, in 1 GiB blocks:
// the GiB that holds the image is Normal write-back memory, everything else
// Device-nGnRE; one level-0 entry points at that level-1 table. Enough for the
// early Rust code (image, stack, bss, and on device-tree boards the DTB and
// UART in the same region); boot.rs builds the real map of the whole physical
// address space and switches to it.
build_boot_page_table:
    adrp    x0, BOOT_PAGE_TABLE
    add     x0, x0, :lo12:BOOT_PAGE_TABLE
    adr     x1, _start
    lsr     x7, x1, #39                 // level-0 index of the image's region
    lsl     x8, x7, #39                 // the region's base
    ubfx    x1, x1, #30, #9             // index of the image's GiB in it
    mov     x2, #0                      // entry index
    ldr     x3, =0x0040000000000445     // block, AttrIndx 1 (device), AP[1] (RES1 at EL2), AF, XN
    ldr     x4, =0x0000000000000741     // block, AttrIndx 0 (normal), AP[1], SH inner, AF
6:  lsl     x5, x2, #30
    add     x5, x5, x8
    cmp     x2, x1
    csel    x6, x4, x3, eq
    orr     x5, x5, x6
    str     x5, [x0, x2, lsl #3]
    add     x2, x2, #1
    cmp     x2, #512
    b.lo    6b
    adrp    x1, BOOT_LEVEL0_TABLE
    add     x1, x1, :lo12:BOOT_LEVEL0_TABLE
    orr     x0, x0, #3                  // table descriptor
    str     x0, [x1, x7, lsl #3]
    dsb     ish
    ret

// x0 = level-0 table. MAIR: attr0 normal WB RA/WA (0xff), attr1 device-nGnRE (0x04).
// TCR_EL2: T0SZ=16 (48-bit VA, start at level 0), 4 KiB granule, inner-shareable
// write-back walks, PS from ID_AA64MMFR0_EL1.PARange.
.global enable_mmu_el2
enable_mmu_el2:
    ldr     x1, =0x04ff
    msr     mair_el2, x1
    mrs     x2, id_aa64mmfr0_el1
    and     x2, x2, #0x7
    cmp     x2, #5
    mov     x3, #5
    csel    x2, x2, x3, ls              // PS is 3 bits; cap at 48 bits
    ldr     x1, =0x80803510             // RES1 bits 31/23, SH0=3, ORGN0=IRGN0=1, T0SZ=16
    orr     x1, x1, x2, lsl #16
    msr     tcr_el2, x1
    msr     ttbr0_el2, x0
    isb
    tlbi    alle2
    dsb     ish
    isb
    ldr     x1, =0x30c51835             // RES1 bits + M, C, SA, I
    msr     sctlr_el2, x1
    isb
    ret

.global switch_page_table_el2
// x0 = new level-0 table, mapping the running code identically.
switch_page_table_el2:
    dsb     ish
    msr     ttbr0_el2, x0
    isb
    tlbi    alle2
    dsb     ish
    isb
    ret

// Applies the image's R_AARCH64_RELATIVE relocations for where it runs now
// (`__rela_start`..`__rela_end`; empty for boards linked at a fixed address).
// Idempotent: each place gets link value + offset, computed from the addend,
// never from what the place holds. Uses no stack. Returns x0 = 0 when the image
// can run here, 1 when it is not position-independent and was loaded away from
// its link address.
apply_relocations:
    adrp    x9, _start
    add     x9, x9, :lo12:_start
    movz    x10, #:abs_g3:__link_base
    movk    x10, #:abs_g2_nc:__link_base
    movk    x10, #:abs_g1_nc:__link_base
    movk    x10, #:abs_g0_nc:__link_base
    sub     x9, x9, x10                 // x9 = load offset
    adrp    x11, __rela_start
    add     x11, x11, :lo12:__rela_start
    adrp    x12, __rela_end
    add     x12, x12, :lo12:__rela_end
    mov     x0, #0
    cmp     x11, x12
    b.ne    1f
    cmp     x9, #0                      // no relocations: only the link address works
    cset    x0, ne
    ret
1:  cmp     x11, x12
    b.hs    2f
    ldp     x13, x14, [x11], #16        // r_offset, r_info
    ldr     x15, [x11], #8              // r_addend
    cmp     w14, #1027                  // R_AARCH64_RELATIVE (xtask refuses any other type)
    b.ne    1b
    add     x15, x15, x9
    str     x15, [x13, x9]
    b       1b
2:  ret

// UEFI entry (PE AddressOfEntryPoint): x0 = image handle, x1 = system table,
// MMU on with UEFI's identity map, boot services available. Returns an EFI
// status to the caller (the shell or the boot manager) only if the hypervisor
// cannot start; otherwise `platform_efi_main` never returns.
.global efi_pe_entry
efi_pe_entry:
    stp     x29, x30, [sp, #-32]!
    mov     x29, sp
    stp     x0, x1, [sp, #16]
    bl      apply_relocations
    cbnz    x0, 1f
    ldp     x0, x1, [sp, #16]
    bl      platform_efi_main
    ldp     x29, x30, [sp], #32
    ret
1:  mov     x0, #1                      // EFI_LOAD_ERROR
    orr     x0, x0, #(1 << 63)
    ldp     x29, x30, [sp], #32
    ret

// Leaves UEFI's environment for the Image entry, after ExitBootServices:
// cleans and invalidates the image (code, the UEFI hand-off in .data, .bss) to
// the point of coherency, so nothing written with caches on is lost or comes
// back stale, then turns the EL2 MMU and caches off and enters `primary_entry`
// with x0 = 0 (no DTB: efi.rs's hand-off says this is a UEFI boot).
.global efi_leave_firmware
efi_leave_firmware:
    msr     daifset, #0xf
    msr     spsel, #1
    mrs     x3, ctr_el0
    ubfx    x3, x3, #16, #4             // DminLine: log2(words) of the smallest data cache line
    mov     x4, #4
    lsl     x3, x4, x3                  // line size in bytes
    adrp    x1, __image_start
    add     x1, x1, :lo12:__image_start
    adrp    x2, __image_end
    add     x2, x2, :lo12:__image_end
    sub     x4, x3, #1
    bic     x1, x1, x4
1:  dc      civac, x1
    add     x1, x1, x3
    cmp     x1, x2
    b.lo    1b
    dsb     sy
    mrs     x1, sctlr_el2
    mov     x2, #((1 << 0) | (1 << 2))  // M, C
    orr     x2, x2, #(1 << 12)          // I
    bic     x1, x1, x2
    msr     sctlr_el2, x1
    isb
    ic      iallu
    tlbi    alle2
    dsb     sy
    isb
    mov     x0, #0
    b       primary_entry
