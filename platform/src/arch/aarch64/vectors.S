// EL2 exception vector table (Arm ARM D1.10.2): 16 entries of 0x80 bytes. Each
// entry saves the general registers into a `TrapFrame` on the current stack
// and calls `exception_dispatch(kind, frame)`; on return it restores and
// erets. The FP/SIMD registers are not saved here: the hypervisor is built
// soft-float (`aarch64-unknown-none-softfloat`) and never touches them, so a
// guest's stay in the CPU across its exits and move only when the CPU
// switches vCPUs (`FpState`), as in Xen and KVM. A vCPU switch swaps frames.

.equ FRAME_SIZE, (34 * 8)

.macro VECTOR kind
    .balign 0x80
    sub     sp, sp, #FRAME_SIZE
    stp     x0, x1, [sp, #(0 * 8)]
    mov     x0, #\kind
    b       exception_common
.endm

.section .text.vectors, "ax"
.balign 0x800
.global exception_vectors
exception_vectors:
    VECTOR 0    // current EL, SP_EL0: sync
    VECTOR 1    //                     irq
    VECTOR 2    //                     fiq
    VECTOR 3    //                     serror
    VECTOR 4    // current EL, SP_ELx: sync
    VECTOR 5    //                     irq
    VECTOR 6    //                     fiq
    VECTOR 7    //                     serror
    VECTOR 8    // lower EL, AArch64:  sync
    VECTOR 9    //                     irq
    VECTOR 10   //                     fiq
    VECTOR 11   //                     serror
    VECTOR 12   // lower EL, AArch32:  sync
    VECTOR 13   //                     irq
    VECTOR 14   //                     fiq
    VECTOR 15   //                     serror

exception_common:
    stp     x2, x3, [sp, #(2 * 8)]
    stp     x4, x5, [sp, #(4 * 8)]
    stp     x6, x7, [sp, #(6 * 8)]
    stp     x8, x9, [sp, #(8 * 8)]
    stp     x10, x11, [sp, #(10 * 8)]
    stp     x12, x13, [sp, #(12 * 8)]
    stp     x14, x15, [sp, #(14 * 8)]
    stp     x16, x17, [sp, #(16 * 8)]
    stp     x18, x19, [sp, #(18 * 8)]
    stp     x20, x21, [sp, #(20 * 8)]
    stp     x22, x23, [sp, #(22 * 8)]
    stp     x24, x25, [sp, #(24 * 8)]
    stp     x26, x27, [sp, #(26 * 8)]
    stp     x28, x29, [sp, #(28 * 8)]
    mrs     x1, elr_el2
    mrs     x2, spsr_el2
    stp     x30, x1, [sp, #(30 * 8)]
    str     x2, [sp, #(32 * 8)]
    mov     x1, sp
    bl      exception_dispatch
    ldr     x2, [sp, #(32 * 8)]
    ldp     x30, x1, [sp, #(30 * 8)]
    msr     elr_el2, x1
    msr     spsr_el2, x2
    ldp     x0, x1, [sp, #(0 * 8)]
    ldp     x2, x3, [sp, #(2 * 8)]
    ldp     x4, x5, [sp, #(4 * 8)]
    ldp     x6, x7, [sp, #(6 * 8)]
    ldp     x8, x9, [sp, #(8 * 8)]
    ldp     x10, x11, [sp, #(10 * 8)]
    ldp     x12, x13, [sp, #(12 * 8)]
    ldp     x14, x15, [sp, #(14 * 8)]
    ldp     x16, x17, [sp, #(16 * 8)]
    ldp     x18, x19, [sp, #(18 * 8)]
    ldp     x20, x21, [sp, #(20 * 8)]
    ldp     x22, x23, [sp, #(22 * 8)]
    ldp     x24, x25, [sp, #(24 * 8)]
    ldp     x26, x27, [sp, #(26 * 8)]
    ldp     x28, x29, [sp, #(28 * 8)]
    add     sp, sp, #FRAME_SIZE
    eret
