/*
 * x86-64 entry. The image is a PVH ELF (Xen's direct-boot protocol, which
 * QEMU's -kernel understands): the loader puts every PT_LOAD segment at its
 * physical address and enters _start in 32-bit protected mode, paging off,
 * flat segments, with the physical address of the hvm_start_info in %ebx.
 * From there: zero .bss, build an identity map of the low 4 GiB (2 MiB pages;
 * 3-4 GiB uncached, that is where the APIC, HPET and PCI holes are), enter
 * long mode, and call platform_x86_primary_entry(start_info).
 *
 * The AP trampoline (below) is copied under 1 MiB and started by INIT-SIPI-SIPI.
 */

/* The PVH entry note: XEN_ELFNOTE_PHYS32_ENTRY (18), in a PT_NOTE segment. */
.section .note.Xen, "a", @note
.balign 4
.long 4
.long 4
.long 18
.asciz "Xen"
.balign 4
.long _start
.balign 4

.section .text.head, "ax"
.code32
.global _start
_start:
    cli
    cld
    mov %ebx, %esi

    /* Zero .bss (the page tables and the boot stack live there). */
    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb

    mov %esi, boot_start_info
    mov $__boot_stack_top, %esp

    /* PML4[0] -> PDPT; PDPT[0..3] -> the four page directories. */
    mov $boot_pdpt, %eax
    or $0x3, %eax
    mov %eax, boot_pml4
    mov $boot_pd, %eax
    or $0x3, %eax
    xor %ecx, %ecx
1:
    mov %eax, boot_pdpt(,%ecx,8)
    add $0x1000, %eax
    inc %ecx
    cmp $4, %ecx
    jb 1b

    /* 2048 2 MiB pages: present, writable, large; the last GiB uncached. */
    xor %ecx, %ecx
2:
    mov %ecx, %eax
    shl $21, %eax
    or $0x83, %eax
    cmp $1536, %ecx
    jb 3f
    or $0x18, %eax
3:
    mov %eax, boot_pd(,%ecx,8)
    inc %ecx
    cmp $2048, %ecx
    jb 2b

    /* PAE, CR3, EFER.LME, then paging + write protect. */
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010001, %eax
    mov %eax, %cr0

    lgdt boot_gdt_ptr
    ljmp $0x08, $long_mode_entry

.code64
long_mode_entry:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %eax, %eax
    mov %ax, %fs
    mov %ax, %gs
    lea __boot_stack_top(%rip), %rsp
    xor %ebp, %ebp
    mov boot_start_info(%rip), %edi
    call platform_x86_primary_entry
4:
    cli
    hlt
    jmp 4b

.section .rodata.boot_gdt, "a"
.balign 8
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff /* 0x08: 64-bit code */
    .quad 0x00cf92000000ffff /* 0x10: data */
boot_gdt_ptr:
    .word 3 * 8 - 1
    .long boot_gdt

.section .data.boot_start_info, "aw"
.balign 4
boot_start_info:
    .long 0

.section .bss.boot_tables, "aw", @nobits
.balign 4096
.global boot_pml4
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 4 * 4096

/*
 * The AP trampoline, copied to AP_TRAMPOLINE_BASE (0x8000, SIPI vector 8) by
 * the boot CPU, which fills the four parameters at its end before each SIPI.
 * Real mode -> 32-bit protected mode -> long mode on the boot page tables ->
 * platform_x86_secondary_entry(cpu) on the AP's own stack. Every address in
 * it is computed relative to the copy.
 */
.set AP_BASE, 0x8000
.section .rodata.ap_trampoline, "a"
.balign 4096
.global ap_trampoline_start
ap_trampoline_start:
.code16
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl (ap_gdt_ptr - ap_trampoline_start + AP_BASE)
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x08, $(ap_protected - ap_trampoline_start + AP_BASE)
.code32
ap_protected:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov (ap_param_cr3 - ap_trampoline_start + AP_BASE), %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010001, %eax
    mov %eax, %cr0
    ljmp $0x18, $(ap_long - ap_trampoline_start + AP_BASE)
.code64
ap_long:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    xor %eax, %eax
    mov %ax, %fs
    mov %ax, %gs
    mov (ap_param_stack - ap_trampoline_start + AP_BASE), %rsp
    mov (ap_param_cpu - ap_trampoline_start + AP_BASE), %rdi
    mov (ap_param_entry - ap_trampoline_start + AP_BASE), %rax
    xor %ebp, %ebp
    call *%rax
5:
    cli
    hlt
    jmp 5b

.balign 8
ap_gdt:
    .quad 0
    .quad 0x00cf9a000000ffff /* 0x08: 32-bit code */
    .quad 0x00cf92000000ffff /* 0x10: data */
    .quad 0x00af9a000000ffff /* 0x18: 64-bit code */
ap_gdt_ptr:
    .word 4 * 8 - 1
    .long ap_gdt - ap_trampoline_start + AP_BASE
.balign 8
.global ap_param_cr3
ap_param_cr3:
    .quad 0
.global ap_param_stack
ap_param_stack:
    .quad 0
.global ap_param_cpu
ap_param_cpu:
    .quad 0
.global ap_param_entry
ap_param_entry:
    .quad 0
.global ap_trampoline_end
ap_trampoline_end:
