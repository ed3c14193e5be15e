// Entry points, per-vCPU setup and exception vectors of the test guest.
//
// The image starts with an arm64 Linux `Image` header (Documentation/arch/
// arm64/booting.rst), like the hypervisor's own boot.S, so QEMU and the
// hypervisor's loader treat it as a kernel: loaded at RAM base + text_offset
// (0x4008_0000 on QEMU virt, where it is linked), entered at EL1 with the MMU
// off, interrupts masked and x0 = the DTB address.

.equ STACK_SHIFT, 16                    // 64 KiB per vCPU (link.ld reserves 8)
.equ MAX_VCPUS, {max_vcpus}             // mod.rs MAX_VCPUS, given by global_asm!
.equ FRAME_SIZE, 272                    // x0-x30, ELR, SPSR, padding

.section .text.head, "ax"
.global _start
_start:
    b       primary_entry               // code0: branch past the header
    .long   0                           // code1
    .quad   0x80000                     // text_offset
    .quad   __image_size                // image_size, including .bss and stacks
    .quad   0x2                         // flags: little endian, 4 KiB pages
    .quad   0, 0, 0                     // res2-res4
    .ascii  "ARM\x64"                   // magic
    .long   0                           // res5

primary_entry:
    msr     daifset, #0xf
    mov     x19, x0                     // DTB address
    mrs     x1, CurrentEL
    cmp     x1, #(1 << 2)
    b.ne    not_el1
    // Zero .bss (page table and stacks included) before any Rust code runs.
    adrp    x1, __bss_start
    add     x1, x1, :lo12:__bss_start
    adrp    x2, __bss_end
    add     x2, x2, :lo12:__bss_end
1:  cmp     x1, x2
    b.hs    2f
    stp     xzr, xzr, [x1], #16
    b       1b
2:  bl      build_page_table
    mov     x0, #0
    bl      cpu_setup
    mov     x0, x19
    bl      guest_primary_main
3:  wfe
    b       3b

// Entered at another exception level: say so on the PL011 and stop. The
// guest's system registers are the EL1 ones.
not_el1:
    mov     x1, #0x09000000
    adr     x2, not_el1_text
4:  ldrb    w3, [x2], #1
    cbz     w3, 5f
    strb    w3, [x1]
    b       4b
5:  wfe
    b       5b
not_el1_text:
    .asciz  "test-guest: not entered at EL1; stopping\n"
    .balign 4

// Secondary vCPUs arrive here from PSCI CPU_ON, MMU off, x0 = context id =
// the vCPU index the primary gave it.
.global secondary_entry
secondary_entry:
    msr     daifset, #0xf
    mov     x19, x0
    cmp     x0, #MAX_VCPUS              // a context id that is no vCPU index
    b.hs    6f                          // has no stack: park, untouched
    bl      cpu_setup
    mov     x0, x19
    bl      guest_secondary_main
6:  wfe
    b       6b

// Identity map of the first 512 GiB in 1 GiB level-1 blocks: the GiB that
// holds this image (guest RAM) is Normal write-back, everything else
// Device-nGnRE and execute-never (PL011, GIC, and whatever the misbehaviour
// workload touches outside RAM).
build_page_table:
    adrp    x0, __page_table
    add     x0, x0, :lo12:__page_table
    adr     x1, _start
    lsr     x1, x1, #30                 // index of the image's GiB
    mov     x2, #0
    ldr     x3, =0x0060000000000405     // block, AttrIndx 1 (device), AF, PXN, UXN
    ldr     x4, =0x0000000000000701     // block, AttrIndx 0 (normal), SH inner, AF
7:  lsl     x5, x2, #30
    cmp     x2, x1
    csel    x6, x4, x3, eq
    orr     x5, x5, x6
    str     x5, [x0, x2, lsl #3]
    add     x2, x2, #1
    cmp     x2, #512
    b.lo    7b
    dsb     ish
    ret

// x0 = vCPU index. Sets this vCPU's stack, turns on FP/SIMD (Rust code uses
// the vector registers), installs the vectors and enables the MMU and caches
// with the shared identity map. The MMU is needed, not only convenient:
// with it off every data access is Device-nGnRnE, where the exclusive
// loads/stores behind the atomics are not guaranteed to work.
cpu_setup:
    adrp    x1, __stacks_start
    add     x1, x1, :lo12:__stacks_start
    add     x2, x0, #1
    add     x1, x1, x2, lsl #STACK_SHIFT
    mov     sp, x1
    mov     x1, #(3 << 20)              // CPACR_EL1.FPEN: no FP/SIMD traps
    msr     cpacr_el1, x1
    adrp    x1, guest_vectors
    add     x1, x1, :lo12:guest_vectors
    msr     vbar_el1, x1
    isb
    ldr     x1, =0x04ff                 // attr0 normal WB RA/WA, attr1 device-nGnRE
    msr     mair_el1, x1
    mrs     x2, id_aa64mmfr0_el1
    and     x2, x2, #0x7
    cmp     x2, #5
    mov     x3, #5
    csel    x2, x2, x3, ls              // IPS: the PA range, at most 48 bits
    ldr     x1, =0x803519               // EPD1, SH0 inner, WB walks, T0SZ=25 (39 bits)
    orr     x1, x1, x2, lsl #32
    msr     tcr_el1, x1
    adrp    x1, __page_table
    add     x1, x1, :lo12:__page_table
    msr     ttbr0_el1, x1
    isb
    tlbi    vmalle1
    dsb     nsh
    isb
    ldr     x1, =0x30d0180d             // RES1 bits + M, C, SA, I
    msr     sctlr_el1, x1
    isb
    ret

// Exception vectors: every entry saves the registers and calls
// guest_exception(frame, kind) with kind = the entry's index (0..16).
.macro VECTOR kind
    .balign 0x80
    sub     sp, sp, #FRAME_SIZE
    stp     x0, x1, [sp, #0]
    mov     x1, #\kind
    b       exception_common
.endm

.section .text.vectors, "ax"
.balign 2048
.global guest_vectors
guest_vectors:
    VECTOR 0
    VECTOR 1
    VECTOR 2
    VECTOR 3
    VECTOR 4
    VECTOR 5
    VECTOR 6
    VECTOR 7
    VECTOR 8
    VECTOR 9
    VECTOR 10
    VECTOR 11
    VECTOR 12
    VECTOR 13
    VECTOR 14
    VECTOR 15

exception_common:
    stp     x2, x3, [sp, #16]
    stp     x4, x5, [sp, #32]
    stp     x6, x7, [sp, #48]
    stp     x8, x9, [sp, #64]
    stp     x10, x11, [sp, #80]
    stp     x12, x13, [sp, #96]
    stp     x14, x15, [sp, #112]
    stp     x16, x17, [sp, #128]
    stp     x18, x19, [sp, #144]
    stp     x20, x21, [sp, #160]
    stp     x22, x23, [sp, #176]
    stp     x24, x25, [sp, #192]
    stp     x26, x27, [sp, #208]
    stp     x28, x29, [sp, #224]
    mrs     x2, elr_el1
    mrs     x3, spsr_el1
    stp     x30, x2, [sp, #240]
    str     x3, [sp, #256]
    mov     x0, sp
    bl      guest_exception
    ldp     x30, x2, [sp, #240]
    ldr     x3, [sp, #256]
    msr     elr_el1, x2
    msr     spsr_el1, x3
    ldp     x0, x1, [sp, #0]
    ldp     x2, x3, [sp, #16]
    ldp     x4, x5, [sp, #32]
    ldp     x6, x7, [sp, #48]
    ldp     x8, x9, [sp, #64]
    ldp     x10, x11, [sp, #80]
    ldp     x12, x13, [sp, #96]
    ldp     x14, x15, [sp, #112]
    ldp     x16, x17, [sp, #128]
    ldp     x18, x19, [sp, #144]
    ldp     x20, x21, [sp, #160]
    ldp     x22, x23, [sp, #176]
    ldp     x24, x25, [sp, #192]
    ldp     x26, x27, [sp, #208]
    ldp     x28, x29, [sp, #224]
    add     sp, sp, #FRAME_SIZE
    eret
