// Entry points of the hypervisor image on ARM64.
//
// The image starts with an arm64 Linux `Image` header (Documentation/arch/arm64/
// booting.rst) so QEMU, the Raspberry Pi firmware and U-Boot load it like a
// kernel: at a 2 MiB-aligned RAM base + text_offset, MMU off, x0 = DTB address.

.section .text.head, "ax"
.global _start
_start:
    b       primary_entry               // code0: branch past the header
    .long   0                           // code1
    .quad   0x80000                     // text_offset: Linux's historical value
    .quad   __image_size                // image_size, including .bss
    .quad   0x2                         // flags: little endian, 4 KiB pages
    .quad   0, 0, 0                     // res2-res4
    .ascii  "ARM\x64"                   // magic
    .long   0                           // res5 (no PE/COFF header yet)

primary_entry:
    mov     x19, x0                     // DTB address
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
    adrp    x0, BOOT_PAGE_TABLE
    add     x0, x0, :lo12:BOOT_PAGE_TABLE
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

// Identity map of the first 512 GiB in 1 GiB blocks: the GiB that holds this
// image is Normal write-back memory, everything else Device-nGnRE. Enough for
// the early Rust code (image, stack, bss); boot.rs builds the real map from the
// device tree and switches to it.
build_boot_page_table:
    adrp    x0, BOOT_PAGE_TABLE
    add     x0, x0, :lo12:BOOT_PAGE_TABLE
    adr     x1, _start
    lsr     x1, x1, #30                 // index of the image's GiB
    mov     x2, #0                      // entry index
    ldr     x3, =0x0040000000000445     // block, AttrIndx 1 (device), AP[1] (RES1 at EL2), AF, XN
    ldr     x4, =0x0000000000000741     // block, AttrIndx 0 (normal), AP[1], SH inner, AF
6:  lsl     x5, x2, #30
    cmp     x2, x1
    csel    x6, x4, x3, eq
    orr     x5, x5, x6
    str     x5, [x0, x2, lsl #3]
    add     x2, x2, #1
    cmp     x2, #512
    b.lo    6b
    dsb     ish
    ret

// x0 = level-1 table. MAIR: attr0 normal WB RA/WA (0xff), attr1 device-nGnRE (0x04).
// TCR_EL2: T0SZ=25 (39-bit VA, start at level 1), 4 KiB granule, inner-shareable
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
    ldr     x1, =0x80803519             // RES1 bits 31/23, SH0=3, ORGN0=IRGN0=1, T0SZ=25
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
// x0 = new level-1 table, mapping the running code identically.
switch_page_table_el2:
    dsb     ish
    msr     ttbr0_el2, x0
    isb
    tlbi    alle2
    dsb     ish
    isb
    ret
