//! Bare-metal smoke test of the GIC drivers on QEMU `virt` at EL2, for
//! either GIC version (named on the command line: `-append gic-version=2`
//! or `3`, read through semihosting): brings the GIC up, sends an
//! SGI to itself and acknowledges it through the real CPU interface, and
//! round-trips a list register through GICH / ICH_LR0_EL2. Prints to the
//! PL011 UART and exits through semihosting with status 0 on success.
//!
//! ```text
//! cargo build -p gic --example qemu_smoke --target aarch64-unknown-none
//! qemu-system-aarch64 -M virt,virtualization=on,gic-version=3 -cpu cortex-a72 \
//!     -nographic -semihosting -append gic-version=3 \
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
    );

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

    /// The GIC version named by `gic-version=N` in the command line.
    fn requested_version() -> Option<GicVersion> {
        let mut buffer = [0u8; 256];
        let mut block: [u64; 2] = [buffer.as_mut_ptr() as u64, buffer.len() as u64];
        // SYS_GET_CMDLINE (0x15) fills `buffer` and sets block[1] to the length.
        if semihosting(0x15, block.as_mut_ptr()) != 0 {
            return None;
        }
        let line = &buffer[..(block[1] as usize).min(buffer.len())];
        let line = core::str::from_utf8(line).ok()?;
        let value = line
            .split(' ')
            .find_map(|arg| arg.strip_prefix("gic-version="))?;
        match value {
            "2" => Some(GicVersion::V2),
            "3" => Some(GicVersion::V3),
            _ => None,
        }
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
        let Some(version) = requested_version() else {
            let _ = writeln!(
                Uart,
                "gic-smoke: FAIL no gic-version=2|3 on the command line"
            );
            exit(2);
        };
        let _ = writeln!(Uart, "gic-smoke: {version}, MPIDR {mpidr:#x}");

        // SAFETY: QEMU virt's GIC frames, MMU off (physical = virtual), EL2,
        // and this is the only user.
        let gic = unsafe {
            match version {
                GicVersion::V2 => Gic::V2(GicV2::with_virtual_interface(
                    GICD_BASE, GICC_BASE, GICH_BASE,
                )),
                GicVersion::V3 => Gic::V3(GicV3::new(GICD_BASE, GICR_BASE, GICR_SIZE)),
            }
        };
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
        let round_trip = match &gic {
            Gic::V2(v2) => match v2.virtual_interface() {
                Some(vif) => list_register_round_trip(&vif, &lr),
                None => false,
            },
            Gic::V3(v3) => list_register_round_trip(&v3.virtual_interface(), &lr),
        };
        check(round_trip, "list register 0 round trip");

        let _ = writeln!(Uart, "gic-smoke: PASS");
        exit(0)
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
