/*
 * One 16-byte stub per IDT vector: push a zero where the CPU pushes no error
 * code, push the vector, and join the common path, which saves the general
 * registers into a TrapFrame and calls x86_trap_dispatch(&mut TrapFrame).
 */
.section .text.vectors, "ax"
.code64
.balign 16
.global x86_vector_stubs
x86_vector_stubs:
.set vector, 0
.rept 256
    .balign 16
    .if (vector == 8) || (vector == 10) || (vector == 11) || (vector == 12) || (vector == 13) || (vector == 14) || (vector == 17) || (vector == 21) || (vector == 29) || (vector == 30)
    .else
    pushq $0
    .endif
    pushq $vector
    jmp x86_trap_common
    .set vector, vector + 1
.endr

x86_trap_common:
    push %r15
    push %r14
    push %r13
    push %r12
    push %r11
    push %r10
    push %r9
    push %r8
    push %rbp
    push %rdi
    push %rsi
    push %rdx
    push %rcx
    push %rbx
    push %rax
    mov %rsp, %rdi
    cld
    call x86_trap_dispatch
    pop %rax
    pop %rbx
    pop %rcx
    pop %rdx
    pop %rsi
    pop %rdi
    pop %rbp
    pop %r8
    pop %r9
    pop %r10
    pop %r11
    pop %r12
    pop %r13
    pop %r14
    pop %r15
    add $16, %rsp
    iretq
