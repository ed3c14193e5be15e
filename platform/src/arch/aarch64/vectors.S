// EL2 exception vector table (Arm ARM D1.10.2): 16 entries of 0x80 bytes. Each
// entry saves the general registers and the FP/SIMD registers into a
// `TrapFrame` on the current stack and calls `exception_dispatch(kind, frame)`;
// on return it restores and erets. FP/SIMD is saved on every exception because
// the hypervisor's own code may use it (memcpy, compiler-generated moves) and a
// guest's registers must survive that; a vCPU switch just swaps frames.

.equ FRAME_SIZE, (34 * 8 + 32 * 16 + 16)
.equ FP_OFFSET, (34 * 8)

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
    add     x3, sp, #FP_OFFSET
    stp     q0, q1, [x3, #(0 * 32)]
    stp     q2, q3, [x3, #(1 * 32)]
    stp     q4, q5, [x3, #(2 * 32)]
    stp     q6, q7, [x3, #(3 * 32)]
    stp     q8, q9, [x3, #(4 * 32)]
    stp     q10, q11, [x3, #(5 * 32)]
    stp     q12, q13, [x3, #(6 * 32)]
    stp     q14, q15, [x3, #(7 * 32)]
    stp     q16, q17, [x3, #(8 * 32)]
    stp     q18, q19, [x3, #(9 * 32)]
    stp     q20, q21, [x3, #(10 * 32)]
    stp     q22, q23, [x3, #(11 * 32)]
    stp     q24, q25, [x3, #(12 * 32)]
    stp     q26, q27, [x3, #(13 * 32)]
    stp     q28, q29, [x3, #(14 * 32)]
    stp     q30, q31, [x3, #(15 * 32)]
    mrs     x4, fpcr
    mrs     x5, fpsr
    add     x3, x3, #(16 * 32)
    stp     x4, x5, [x3]
    mov     x1, sp
    bl      exception_dispatch
    add     x3, sp, #FP_OFFSET
    ldp     q0, q1, [x3, #(0 * 32)]
    ldp     q2, q3, [x3, #(1 * 32)]
    ldp     q4, q5, [x3, #(2 * 32)]
    ldp     q6, q7, [x3, #(3 * 32)]
    ldp     q8, q9, [x3, #(4 * 32)]
    ldp     q10, q11, [x3, #(5 * 32)]
    ldp     q12, q13, [x3, #(6 * 32)]
    ldp     q14, q15, [x3, #(7 * 32)]
    ldp     q16, q17, [x3, #(8 * 32)]
    ldp     q18, q19, [x3, #(9 * 32)]
    ldp     q20, q21, [x3, #(10 * 32)]
    ldp     q22, q23, [x3, #(11 * 32)]
    ldp     q24, q25, [x3, #(12 * 32)]
    ldp     q26, q27, [x3, #(13 * 32)]
    ldp     q28, q29, [x3, #(14 * 32)]
    ldp     q30, q31, [x3, #(15 * 32)]
    add     x3, x3, #(16 * 32)
    ldp     x4, x5, [x3]
    msr     fpcr, x4
    msr     fpsr, x5
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
