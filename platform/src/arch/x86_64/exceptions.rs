//! Descriptor tables and traps: a GDT and TSS per CPU (IST stacks for NMI,
//! double fault and machine check, so those run on a known-good stack even
//! when the kernel stack is gone), one IDT shared by all CPUs whose 256
//! entries point at the stubs in `vectors.S`, and the dispatch: an exception
//! prints vector, error code, RIP, CR2 and the CPU, then parks that CPU; an
//! interrupt goes to the handler the hypervisor registers.

use alloc::boxed::Box;
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::sync::Once;
use x86_64::VirtAddr;
use x86_64::instructions::segmentation::{CS, DS, ES, SS, Segment};
use x86_64::instructions::tables::load_tss;
use x86_64::registers::control::Cr2;
use x86_64::structures::gdt::{Descriptor, GlobalDescriptorTable, SegmentSelector};
use x86_64::structures::idt::InterruptDescriptorTable;
use x86_64::structures::tss::TaskStateSegment;

use super::{console, cpu};

core::arch::global_asm!(include_str!("vectors.S"), options(att_syntax, raw));

unsafe extern "C" {
    static x86_vector_stubs: u8;
}

/// Bytes between two stubs in `vectors.S`.
const STUB_STRIDE: u64 = 16;
/// IST slot (1-based in the IDT, 0-based in the TSS) for NMIs.
pub const IST_NMI: u16 = 0;
/// IST slot for double faults.
pub const IST_DOUBLE_FAULT: u16 = 1;
/// IST slot for machine checks.
pub const IST_MACHINE_CHECK: u16 = 2;
/// Size of each IST stack.
const IST_STACK_BYTES: usize = 16 * 1024;
/// The first vector that is an interrupt rather than an exception.
pub const FIRST_INTERRUPT_VECTOR: u8 = 32;

/// The registers saved on trap entry, in the order `vectors.S` pushes them,
/// followed by what the CPU pushed.
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    /// rax, rbx, rcx, rdx, rsi, rdi, rbp, r8..r15.
    pub gprs: [u64; 15],
    /// The IDT vector.
    pub vector: u64,
    /// The CPU's error code, or 0 for vectors without one.
    pub error_code: u64,
    /// Where the trap returns to.
    pub rip: u64,
    /// The interrupted code segment.
    pub cs: u64,
    /// The interrupted RFLAGS.
    pub rflags: u64,
    /// The interrupted stack pointer.
    pub rsp: u64,
    /// The interrupted stack segment.
    pub ss: u64,
}

const _: () = assert!(core::mem::size_of::<TrapFrame>() == 22 * 8);

/// One CPU's descriptor tables.
struct CpuTables {
    gdt: GlobalDescriptorTable,
    code: SegmentSelector,
    data: SegmentSelector,
    tss: SegmentSelector,
}

static IDT: Once<InterruptDescriptorTable> = Once::new();

fn stub(vector: u8) -> VirtAddr {
    let base = core::ptr::addr_of!(x86_vector_stubs) as u64;
    VirtAddr::new(base + u64::from(vector) * STUB_STRIDE)
}

fn build_idt() -> InterruptDescriptorTable {
    let mut idt = InterruptDescriptorTable::new();
    // SAFETY: for every set_handler_addr below, each stub is the entry code
    // for exactly that vector in vectors.S, which saves state, dispatches and
    // returns with iretq (or parks); the IST indices name stacks every CPU's
    // TSS sets in `init_this_cpu`.
    unsafe {
        idt.divide_error.set_handler_addr(stub(0));
        idt.debug.set_handler_addr(stub(1));
        idt.non_maskable_interrupt
            .set_handler_addr(stub(2))
            .set_stack_index(IST_NMI);
        idt.breakpoint.set_handler_addr(stub(3));
        idt.overflow.set_handler_addr(stub(4));
        idt.bound_range_exceeded.set_handler_addr(stub(5));
        idt.invalid_opcode.set_handler_addr(stub(6));
        idt.device_not_available.set_handler_addr(stub(7));
        idt.double_fault
            .set_handler_addr(stub(8))
            .set_stack_index(IST_DOUBLE_FAULT);
        idt.invalid_tss.set_handler_addr(stub(10));
        idt.segment_not_present.set_handler_addr(stub(11));
        idt.stack_segment_fault.set_handler_addr(stub(12));
        idt.general_protection_fault.set_handler_addr(stub(13));
        idt.page_fault.set_handler_addr(stub(14));
        idt.x87_floating_point.set_handler_addr(stub(16));
        idt.alignment_check.set_handler_addr(stub(17));
        idt.machine_check
            .set_handler_addr(stub(18))
            .set_stack_index(IST_MACHINE_CHECK);
        idt.simd_floating_point.set_handler_addr(stub(19));
        idt.virtualization.set_handler_addr(stub(20));
        idt.cp_protection_exception.set_handler_addr(stub(21));
        idt.hv_injection_exception.set_handler_addr(stub(28));
        idt.vmm_communication_exception.set_handler_addr(stub(29));
        idt.security_exception.set_handler_addr(stub(30));
        for (i, entry) in idt.slice_mut(32..=255).iter_mut().enumerate() {
            entry.set_handler_addr(stub(32 + i as u8));
        }
    }
    idt
}

fn ist_stack() -> VirtAddr {
    let stack: &'static mut [u8] = Box::leak(alloc::vec![0u8; IST_STACK_BYTES].into_boxed_slice());
    // Stacks grow down; the top is 16-byte aligned (the allocation is).
    VirtAddr::from_ptr(stack.as_ptr_range().end)
}

/// Loads a fresh GDT (with this CPU's TSS and IST stacks) and the shared IDT
/// on the calling CPU. Needs the heap; call once per CPU.
pub fn init_this_cpu() {
    let mut tss = TaskStateSegment::new();
    tss.interrupt_stack_table[usize::from(IST_NMI)] = ist_stack();
    tss.interrupt_stack_table[usize::from(IST_DOUBLE_FAULT)] = ist_stack();
    tss.interrupt_stack_table[usize::from(IST_MACHINE_CHECK)] = ist_stack();
    let tss: &'static TaskStateSegment = Box::leak(Box::new(tss));
    let mut gdt = GlobalDescriptorTable::new();
    let code = gdt.append(Descriptor::kernel_code_segment());
    let data = gdt.append(Descriptor::kernel_data_segment());
    let tss_selector = gdt.append(Descriptor::tss_segment(tss));
    let tables: &'static CpuTables = Box::leak(Box::new(CpuTables {
        gdt,
        code,
        data,
        tss: tss_selector,
    }));
    tables.gdt.load();
    // SAFETY: the selectors index the GDT just loaded, whose code segment is
    // 64-bit ring 0 and whose data segment is writable ring 0; the TSS
    // descriptor points at a TSS that lives forever.
    unsafe {
        CS::set_reg(tables.code);
        DS::set_reg(tables.data);
        ES::set_reg(tables.data);
        SS::set_reg(tables.data);
        load_tss(tables.tss);
    }
    IDT.call_once(build_idt).load();
}

/// The hypervisor's interrupt handler, called with the vector of every
/// interrupt (vectors 32..=255).
static IRQ_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Registers the function that handles interrupts (it must send the EOI).
pub fn set_irq_handler(handler: fn(u8, &mut TrapFrame)) {
    IRQ_HANDLER.store(handler as usize, Ordering::Release);
}

/// The name of an exception vector.
pub fn exception_name(vector: u64) -> &'static str {
    match vector {
        0 => "divide error",
        1 => "debug",
        2 => "NMI",
        3 => "breakpoint",
        4 => "overflow",
        5 => "bound range",
        6 => "invalid opcode",
        7 => "device not available",
        8 => "double fault",
        10 => "invalid TSS",
        11 => "segment not present",
        12 => "stack fault",
        13 => "general protection",
        14 => "page fault",
        16 => "x87 floating point",
        17 => "alignment check",
        18 => "machine check",
        19 => "SIMD floating point",
        20 => "virtualization",
        21 => "control protection",
        29 => "VMM communication",
        30 => "security",
        _ => "reserved",
    }
}

#[unsafe(no_mangle)]
extern "C" fn x86_trap_dispatch(frame: &mut TrapFrame) {
    if frame.vector >= u64::from(FIRST_INTERRUPT_VECTOR) {
        let handler = IRQ_HANDLER.load(Ordering::Acquire);
        if handler != 0 {
            // SAFETY: the only value ever stored is a `fn(u8, &mut TrapFrame)`.
            let handler: fn(u8, &mut TrapFrame) = unsafe { core::mem::transmute(handler) };
            handler(frame.vector as u8, frame);
        }
        return;
    }
    unexpected(frame)
}

fn unexpected(frame: &TrapFrame) -> ! {
    // Unlocked: the faulting CPU may hold the console lock.
    console::write_fmt_unlocked(format_args!(
        "[cpu{}] ERROR Unexpected exception {} ({}): error code {:#x} RIP={:#x} CR2={:#x} RSP={:#x} RFLAGS={:#x}; parking this CPU\n",
        cpu::index(),
        frame.vector,
        exception_name(frame.vector),
        frame.error_code,
        frame.rip,
        Cr2::read_raw(),
        frame.rsp,
        frame.rflags,
    ));
    cpu::park()
}
