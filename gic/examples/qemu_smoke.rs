//! Bare-metal smoke test of the GIC drivers on QEMU `virt` at EL2, for
//! either GIC version (named on the command line: `-append gic-version=2`
//! or `3`, read through semihosting): brings the GIC up, sends an
//! SGI to itself and acknowledges it through the real CPU interface, and
//! round-trips a list register through GICH / ICH_LR0_EL2; then starts the
//! other CPUs with PSCI CPU_ON and checks that SGIs sent to a list, a
//! bitmap and all-but-self reach exactly the CPUs named. Prints to the
//! PL011 UART and exits through semihosting with status 0 on success.
//!
//! ```text
//! cargo build -p gic --example qemu_smoke --target aarch64-unknown-none
//! qemu-system-aarch64 -M virt,virtualization=on,gic-version=3 -cpu cortex-a72 \
//!     -smp 4 -nographic -semihosting -append "gic-version=3 cpus=4" \
//!     -kernel <target dir>/aarch64-unknown-none/debug/examples/qemu_smoke
//! ```
//! `gic/qemu-smoke.sh` does both for `gic-version=2` and `3`. On the host
//! this example is an empty program (so `cargo test` builds it).
#![cfg_attr(target_arch = "aarch64", no_std, no_main)]

#[cfg(not(target_arch = "aarch64"))]
fn main() {}

#[cfg(target_arch = "aarch64")]
mod bare_metal {
    use core::arch::{asm, global_asm};
    use core::fmt::{self, Write};
    use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};

    use gic::{Gic, GicV2, GicV3, GicVersion, IntId, ListRegister, SgiTarget, VirtualCpuInterface};

    /// QEMU `virt` memory map (hw/arm/virt.c).
    const GICD_BASE: usize = 0x0800_0000;
    const GICC_BASE: usize = 0x0801_0000;
    const GICH_BASE: usize = 0x0803_0000;
    const GICR_BASE: usize = 0x080A_0000;
    const GICR_SIZE: usize = 0x00F6_0000;
    const UART_DATA: usize = 0x0900_0000;

    /// How many times to poll for the SGI to become pending.
    const ACK_POLLS: u32 = 100_000;
    /// How many times to poll for another CPU to do something.
    const CROSS_CPU_POLLS: u32 = 50_000_000;
    /// How long the SGI counts must stay unchanged to count as settled.
    const SETTLE_POLLS: u32 = 200_000;
    /// Most CPUs the example starts (a GICv2 serves at most 8).
    const MAX_CPUS: usize = 8;
    /// The SGI the secondaries count.
    const COUNTED_SGI: u8 = 5;

    /// The driver used when QEMU runs with `gic-version=2`.
    static GIC_V2: Gic = Gic::V2(
        // SAFETY: QEMU virt's GICv2 frames, MMU off (physical = virtual), at
        // EL2; used only when the machine has a GICv2.
        unsafe { GicV2::with_virtual_interface(GICD_BASE, GICC_BASE, GICH_BASE) },
    );
    /// The driver used when QEMU runs with `gic-version=3`.
    static GIC_V3: Gic = Gic::V3(
        // SAFETY: QEMU virt's GICv3 frames, MMU off (physical = virtual), at
        // EL2; used only when the machine has a GICv3, after `init_cpu`.
        unsafe { GicV3::new(GICD_BASE, GICR_BASE, GICR_SIZE) },
    );
    /// 2 or 3 once CPU 0 has read the command line.
    static VERSION: AtomicU8 = AtomicU8::new(0);
    /// Set by each secondary once its GIC CPU interface is up.
    static READY: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
    /// How many [`COUNTED_SGI`]s each secondary has taken (one writer each).
    static SGI_COUNT: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];

    fn gic() -> &'static Gic {
        if VERSION.load(Ordering::Acquire) == 2 {
            &GIC_V2
        } else {
            &GIC_V3
        }
    }

    global_asm!(
        ".section .text.boot, \"ax\"",
        ".global _start",
        "_start:",
        // Let EL2 use FP/SIMD (CPTR_EL2.TFP = 0, RES1 bits set).
        "    mov x0, #0x33ff",
        "    msr cptr_el2, x0",
        "    isb",
        "    ldr x0, =__stack_top",
        "    mov sp, x0",
        "    bl smoke_main",
        "1:  wfe",
        "    b 1b",
        // PSCI CPU_ON entry; x0 = context id = logical CPU index.
        ".global secondary_start",
        "secondary_start:",
        "    mov x1, #0x33ff",
        "    msr cptr_el2, x1",
        "    isb",
        "    ldr x1, =__stack_top",
        "    mov x2, #0x10000",
        "    mul x2, x2, x0",
        "    sub sp, x1, x2",
        "    bl secondary_main",
        "2:  wfe",
        "    b 2b",
    );

    unsafe extern "C" {
        fn secondary_start();
    }

    struct Uart;

    impl Write for Uart {
        fn write_str(&mut self, text: &str) -> fmt::Result {
            for byte in text.bytes() {
                // SAFETY: QEMU virt's PL011 data register; writes need no setup.
                unsafe { core::ptr::write_volatile(UART_DATA as *mut u32, byte.into()) };
            }
            Ok(())
        }
    }

    /// Semihosting call `operation` with parameter block `block`.
    fn semihosting(operation: u64, block: *const u64) -> u64 {
        let result: u64;
        // SAFETY: QEMU runs with `-semihosting`; `block` is valid for the call.
        unsafe { asm!("hlt #0xf000", inout("x0") operation => result, in("x1") block) };
        result
    }

    /// The value of `key=value` on the semihosting command line.
    fn command_line_value(buffer: &mut [u8; 256], key: &str) -> Option<u32> {
        let mut block: [u64; 2] = [buffer.as_mut_ptr() as u64, buffer.len() as u64];
        // SYS_GET_CMDLINE (0x15) fills `buffer` and sets block[1] to the length.
        if semihosting(0x15, block.as_mut_ptr()) != 0 {
            return None;
        }
        let line = &buffer[..(block[1] as usize).min(buffer.len())];
        let line = core::str::from_utf8(line).ok()?;
        line.split(' ')
            .find_map(|arg| arg.strip_prefix(key)?.strip_prefix('='))?
            .parse()
            .ok()
    }

    /// Ends the run with `code` through semihosting SYS_EXIT (extended form).
    fn exit(code: u64) -> ! {
        let block: [u64; 2] = [0x2_0026, code];
        semihosting(0x18, block.as_ptr());
        loop {
            core::hint::spin_loop();
        }
    }

    fn check(ok: bool, what: &str) {
        if ok {
            let _ = writeln!(Uart, "gic-smoke: ok   {what}");
        } else {
            let _ = writeln!(Uart, "gic-smoke: FAIL {what}");
            exit(1);
        }
    }

    fn expect<T>(result: Result<T, gic::GicError>, what: &str) -> T {
        match result {
            Ok(value) => {
                check(true, what);
                value
            }
            Err(error) => {
                let _ = writeln!(Uart, "gic-smoke: FAIL {what}: {error}");
                exit(1);
            }
        }
    }

    #[unsafe(no_mangle)]
    extern "C" fn smoke_main() -> ! {
        let mpidr: u64;
        // SAFETY: reading MPIDR_EL1 has no side effects.
        unsafe { asm!("mrs {}, mpidr_el1", out(reg) mpidr) };
        let mut buffer = [0u8; 256];
        let version = match command_line_value(&mut buffer, "gic-version") {
            Some(2) => GicVersion::V2,
            Some(3) => GicVersion::V3,
            _ => {
                let _ = writeln!(
                    Uart,
                    "gic-smoke: FAIL no gic-version=2|3 on the command line"
                );
                exit(2);
            }
        };
        let expected_cpus = command_line_value(&mut buffer, "cpus").unwrap_or(1) as usize;
        let version_number = if version == GicVersion::V2 { 2 } else { 3 };
        VERSION.store(version_number, Ordering::Release);
        let _ = writeln!(Uart, "gic-smoke: {version}, MPIDR {mpidr:#x}");

        let gic = gic();
        expect(gic.init_distributor(), "init_distributor");
        expect(gic.init_cpu(0, mpidr), "init_cpu");
        check(gic.num_interrupts() >= 64, "distributor has SPIs");

        let sgi = expect(IntId::sgi(3), "SGI 3 is an IntId");
        expect(gic.enable_interrupt(sgi), "enable SGI 3");
        expect(gic.send_sgi(3, SgiTarget::Cpu(0)), "send SGI 3 to self");
        let mut taken = None;
        for _ in 0..ACK_POLLS {
            taken = gic.acknowledge();
            if taken.is_some() {
                break;
            }
        }
        match taken {
            Some(interrupt) => {
                check(interrupt.intid() == sgi, "acknowledged SGI 3");
                gic.end_of_interrupt(interrupt);
            }
            None => check(false, "SGI 3 became pending"),
        }
        check(gic.acknowledge().is_none(), "nothing pending after EOI");
        expect(
            gic.send_sgi(3, SgiTarget::AllButSelf),
            "broadcast SGI with no other CPU",
        );
        check(gic.acknowledge().is_none(), "broadcast does not hit self");

        check(gic.num_list_registers() == 4, "QEMU has 4 list registers");
        let lr = ListRegister::pending_hardware(27, 27, 0xA0);
        let round_trip = match gic {
            Gic::V2(v2) => match v2.virtual_interface() {
                Some(vif) => list_register_round_trip(&vif, &lr),
                None => false,
            },
            Gic::V3(v3) => list_register_round_trip(&v3.virtual_interface(), &lr),
        };
        check(round_trip, "list register 0 round trip");
        if let Gic::V3(v3) = gic {
            let vif = v3.virtual_interface();
            let written = vif.write_active_priorities(1, 0, 1 << 20).is_ok();
            let read = vif.read_active_priorities(1, 0);
            let cleared = vif.write_active_priorities(1, 0, 0).is_ok();
            check(
                written && read == Ok(1 << 20) && cleared,
                "ICH_AP1R0_EL2 round trip",
            );
        }

        let cpus = start_secondaries();
        check(
            cpus == expected_cpus,
            "every CPU came up (cpus= on the command line)",
        );
        if cpus >= 4 {
            cross_cpu_sgis(gic);
        }

        let _ = writeln!(Uart, "gic-smoke: PASS");
        exit(0)
    }

    /// PSCI CPU_ON (SMC64) through the `smc` conduit QEMU uses at EL2.
    fn cpu_on(mpidr: u64, entry: u64, context: u64) -> i64 {
        let mut result = 0xC400_0003u64;
        // SAFETY: a PSCI call; the firmware (QEMU) only starts the target CPU.
        unsafe {
            asm!("smc #0", inout("x0") result, in("x1") mpidr, in("x2") entry,
                 in("x3") context, clobber_abi("C"))
        };
        result as i64
    }

    /// Starts CPUs 1.. (QEMU virt MPIDR = index) until PSCI refuses; returns
    /// how many CPUs run.
    fn start_secondaries() -> usize {
        let mut cpus = 1;
        while cpus < MAX_CPUS {
            let cpu = cpus;
            if cpu_on(cpu as u64, secondary_start as *const () as u64, cpu as u64) != 0 {
                break;
            }
            let ready = (0..CROSS_CPU_POLLS).any(|_| READY[cpu].load(Ordering::Acquire));
            check(ready, "secondary CPU brought up its GIC interface");
            cpus += 1;
        }
        cpus
    }

    /// Waits (bounded) until the SGI counts of CPUs 1-3 are `expected`.
    fn counts_become(expected: [u32; 3]) -> bool {
        (0..CROSS_CPU_POLLS)
            .any(|_| (1..4).all(|cpu| SGI_COUNT[cpu].load(Ordering::Acquire) == expected[cpu - 1]))
    }

    /// Whether the SGI counts of CPUs 1-3 stay `expected` for a while.
    fn counts_stay(expected: [u32; 3]) -> bool {
        (0..SETTLE_POLLS)
            .all(|_| (1..4).all(|cpu| SGI_COUNT[cpu].load(Ordering::Acquire) == expected[cpu - 1]))
    }

    fn cross_cpu_sgis(gic: &Gic) {
        expect(
            gic.send_sgi(COUNTED_SGI, SgiTarget::List(&[1, 3])),
            "send SGI to CPUs 1 and 3",
        );
        check(counts_become([1, 0, 1]), "CPUs 1 and 3 took it");
        expect(
            gic.send_sgi(COUNTED_SGI, SgiTarget::Bitmap(&[0b0100])),
            "send SGI to bitmap {2}",
        );
        check(counts_become([1, 1, 1]), "CPU 2 took it");
        expect(
            gic.send_sgi(COUNTED_SGI, SgiTarget::AllButSelf),
            "broadcast SGI",
        );
        check(counts_become([2, 2, 2]), "every other CPU took it");
        check(gic.acknowledge().is_none(), "the broadcast skipped CPU 0");
        check(counts_stay([2, 2, 2]), "no extra SGIs arrive later");
    }

    #[unsafe(no_mangle)]
    extern "C" fn secondary_main(cpu: usize) -> ! {
        let mpidr: u64;
        // SAFETY: reading MPIDR_EL1 has no side effects.
        unsafe { asm!("mrs {}, mpidr_el1", out(reg) mpidr) };
        let gic = gic();
        if let Err(error) = gic.init_cpu(cpu, mpidr) {
            let _ = writeln!(Uart, "gic-smoke: FAIL init_cpu on CPU {cpu}: {error}");
            exit(1);
        }
        READY[cpu].store(true, Ordering::Release);
        loop {
            if let Some(interrupt) = gic.acknowledge() {
                if interrupt.intid().raw() == u32::from(COUNTED_SGI) {
                    let count = SGI_COUNT[cpu].load(Ordering::Relaxed);
                    SGI_COUNT[cpu].store(count + 1, Ordering::Release);
                }
                gic.end_of_interrupt(interrupt);
            }
        }
    }

    fn list_register_round_trip(vif: &impl VirtualCpuInterface, lr: &ListRegister) -> bool {
        let written = vif.write_list_register(0, lr).is_ok();
        let read = vif.read_list_register(0);
        let occupied = vif.empty_list_registers() & 1 == 0;
        let cleared = vif.write_list_register(0, &ListRegister::EMPTY).is_ok();
        let empty = vif.empty_list_registers() & 1 == 1;
        written && read == Ok(*lr) && occupied && cleared && empty
    }

    #[panic_handler]
    fn panic(info: &core::panic::PanicInfo) -> ! {
        let _ = writeln!(Uart, "gic-smoke: FAIL panic: {info}");
        exit(1)
    }
}
