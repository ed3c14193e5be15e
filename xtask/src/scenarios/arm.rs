//! The ARM scenarios: boots of QEMU virt, the Raspberry Pi 4 and Ampere
//! (DT and ACPI), the test guests, the schedulers, the console and the
//! toolstack, kvm-unit-tests and pass-through.

use super::*;

/// The kvm-unit-tests scenario's config: the suite's arm64 images as domains.
pub const KVM_UNIT_TESTS_CONFIG: &str = "boards/configs/tests/kvm-unit-tests.toml";

/// What each of [`KVM_UNIT_TESTS_CONFIG`]'s fourteen domains prints when all
/// its tests passed.
pub(super) const KVM_UNIT_TESTS_PASSES: &[&str] = &[
    "[dom1] EXIT: STATUS=1",
    "[dom2] EXIT: STATUS=1",
    "[dom3] EXIT: STATUS=1",
    "[dom4] EXIT: STATUS=1",
    "[dom5] EXIT: STATUS=1",
    "[dom6] EXIT: STATUS=1",
    "[dom7] EXIT: STATUS=1",
    "[dom8] EXIT: STATUS=1",
    "[dom9] EXIT: STATUS=1",
    "[dom10] EXIT: STATUS=1",
    "[dom11] EXIT: STATUS=1",
    "[dom12] EXIT: STATUS=1",
    "[dom13] EXIT: STATUS=1",
    "[dom14] EXIT: STATUS=1",
];

/// kvm-unit-tests' timer test, alone (its latency checks need the host's
/// cores to itself).
pub const KVM_UNIT_TESTS_TIMER_CONFIG: &str = "boards/configs/tests/kvm-unit-tests-timer.toml";

/// What a one-domain kvm-unit-tests config prints when all its checks
/// passed (the timer test, sieve): its domain's line.
pub(super) const KVM_UNIT_TESTS_TIMER_PASSES: &[&str] = KVM_UNIT_TESTS_PASSES.split_at(1).0;

/// kvm-unit-tests' sieve, alone (pending: minutes under TCG).
pub const KVM_UNIT_TESTS_SIEVE_CONFIG: &str = "boards/configs/tests/kvm-unit-tests-sieve.toml";

/// Pass-through: QEMU virt's PL031 given to kvm-unit-tests' pl031.flat,
/// and devices the hypervisor keeps refused.
pub const PASSTHROUGH_CONFIG: &str = "boards/configs/tests/passthrough.toml";

/// What the pass-through config prints when it works: the RTC domain's
/// tests pass (its interrupt pending exactly while the device asserts it,
/// delivered, cleared), and each device the hypervisor keeps is refused.
pub(super) const PASSTHROUGH_PASSES: &[&str] = &[
    "domain 1 (rtc): device 'rtc': host 0x9010000 at guest 0x9010000 (+0x1000), arm,pl031, arm,primecell, from /pl031@9010000",
    "passthrough: SPI 34 (level) to domain 1",
    "[dom1] PASS: pl031:   RTC IRQ not delivered without mask",
    "[dom1] PASS: pl031:   RTC IRQ pending now",
    "[dom1] PASS: pl031:   IRQ triggered",
    "[dom1] PASS: pl031:   RTC IRQ not pending anymore",
    "[dom1] EXIT: STATUS=1",
    "domain 3 (grabber): device 'uart' not passed through: its host range overlaps the console UART (0x9000000..0x9001000)",
    "domain 3 (grabber): device 'gicd' not passed through: its host range overlaps the GIC",
    "domain 3 (grabber): device 'ram' not passed through: its host range overlaps RAM",
    "[dom3] [vcpu0] progress 3",
    "domain 4 (serial): device 'uart1': host 0x9040000 at guest 0x9040000 (+0x1000), arm,pl011, arm,primecell, from /pl011@9040000",
    "passthrough: SPI 40 (level) to domain 4",
    "[dom4] test-guest: uartloop: PL011 at 0x9040000, INTID 40, loopback",
    "[dom4] test-guest: uartloop: 11/11 bytes came back through the receive interrupt",
];

/// kvm-unit-tests' GICv2 distributor tests (GICv2 only).
pub const KVM_UNIT_TESTS_GICV2_CONFIG: &str = "boards/configs/tests/kvm-unit-tests-gicv2.toml";

/// What the three GICv2 distributor tests print when all their checks
/// passed: their domains' lines.
pub(super) const KVM_UNIT_TESTS_GICV2_PASSES: &[&str] = KVM_UNIT_TESTS_PASSES.split_at(3).0;

/// What the guests of boards/configs/qemu-virt.toml print when they all work:
/// progress from every compute vCPU, the virtual-SGI ping-pong (dom2), the
/// virtual-timer sleeper in the null pool (dom4), and every domain finishing.
pub(super) const DEFAULT_CONFIG_GUEST_LINES: &[&str] = &[
    "[dom1] [vcpu0] progress 3",
    "[dom1] [vcpu1] progress 3",
    "[dom2] [vcpu0] progress 3",
    "[dom2] [vcpu1] progress 3",
    "[dom3] [vcpu0] progress 3",
    "[dom3] [vcpu1] progress 3",
    "[dom2] test-guest: pingpong done: 1 of 1 peers answered",
    "[dom4] test-guest: vcpu 0 sleeper p99",
    "[dom1] test-guest: all workloads done",
    "[dom2] test-guest: all workloads done",
    "[dom3] test-guest: all workloads done",
    "[dom4] test-guest: all workloads done",
];

/// The DTS fragment that makes QEMU virt's default 8 CPUs (two clusters of
/// four, `cpu@0`..`cpu@7`) big.LITTLE: cluster 0 LITTLE (485, a Cortex-A53's
/// figure in Linux's device trees), cluster 1 big (1024).
pub(super) const BIG_LITTLE_CAPACITIES: &str = "/ { cpus { \
    cpu@0 { capacity-dmips-mhz = <485>; }; cpu@1 { capacity-dmips-mhz = <485>; }; \
    cpu@2 { capacity-dmips-mhz = <485>; }; cpu@3 { capacity-dmips-mhz = <485>; }; \
    cpu@4 { capacity-dmips-mhz = <1024>; }; cpu@5 { capacity-dmips-mhz = <1024>; }; \
    cpu@6 { capacity-dmips-mhz = <1024>; }; cpu@7 { capacity-dmips-mhz = <1024>; }; }; };";

/// [`BIG_LITTLE_CAPACITIES`] with Xen's boot-time cpupools as its
/// docs/misc/arm/device-tree/cpupools.txt shows them (an A53 pool with the
/// default scheduler, an A72 pool with `cpupool-sched`, here `null`) and two
/// dom0less domain nodes placing the domains `fast` and `slow`.
pub(super) const XEN_CPUPOOLS_DT: &str = "/ { cpus { \
    cpu@0 { capacity-dmips-mhz = <485>; }; cpu@1 { capacity-dmips-mhz = <485>; }; \
    cpu@2 { capacity-dmips-mhz = <485>; }; cpu@3 { capacity-dmips-mhz = <485>; }; \
    cpu@4 { capacity-dmips-mhz = <1024>; }; cpu@5 { capacity-dmips-mhz = <1024>; }; \
    cpu@6 { capacity-dmips-mhz = <1024>; }; cpu@7 { capacity-dmips-mhz = <1024>; }; }; \
    chosen { \
    cpupool_a { compatible = \"xen,cpupool\"; \
        cpupool-cpus = <&{/cpus/cpu@0} &{/cpus/cpu@1} &{/cpus/cpu@2} &{/cpus/cpu@3}>; }; \
    cpupool_b { compatible = \"xen,cpupool\"; \
        cpupool-cpus = <&{/cpus/cpu@4} &{/cpus/cpu@5} &{/cpus/cpu@6} &{/cpus/cpu@7}>; \
        cpupool-sched = \"null\"; }; \
    fast { compatible = \"xen,domain\"; domain-cpupool = <&{/chosen/cpupool_b}>; }; \
    slow { compatible = \"xen,domain\"; domain-cpupool = <&{/chosen/cpupool_a}>; }; }; };";

/// What the guests of boards/configs/ampere.toml print when they all work.
pub(super) const AMPERE_CONFIG_GUEST_LINES: &[&str] = &[
    "[dom1] [vcpu0] progress 3",
    "[dom1] [vcpu1] progress 3",
    "[dom2] [vcpu0] progress 3",
    "[dom2] [vcpu3] progress 3",
    "[dom3] [vcpu0] progress 3",
    "[dom3] [vcpu3] progress 3",
    "[dom2] test-guest: pingpong done: 3 of 3 peers answered",
    "[dom4] test-guest: vcpu 0 sleeper p99",
    "[dom1] test-guest: all workloads done",
    "[dom2] test-guest: all workloads done",
    "[dom3] test-guest: all workloads done",
    "[dom4] test-guest: all workloads done",
];

/// Xen's credit under the real hypervisor: weights.toml with credit.
pub(super) const CREDIT_SHARE: Check = Check::CpuShare {
    config: "boards/configs/tests/credit-weights.toml",
    light: 1,
    heavy: 2,
    ratio: 2.0,
    tolerance: 0.10,
    warmup: 3,
    window: 10,
    icount: false,
};

/// rt (RTDS): budgets of 2 and 6 ms every 10 ms, no extra time.
pub(super) const RT_SHARE: Check = Check::CpuShare {
    config: "boards/configs/tests/rt-budgets.toml",
    light: 1,
    heavy: 2,
    ratio: 3.0,
    tolerance: 0.10,
    warmup: 3,
    window: 10,
    icount: true,
};

/// arinc653: windows of 2.5 and 7.5 ms in a 10 ms major frame.
pub(super) const ARINC653_SHARE: Check = Check::CpuShare {
    config: "boards/configs/tests/arinc653-windows.toml",
    light: 1,
    heavy: 2,
    ratio: 3.0,
    tolerance: 0.10,
    warmup: 3,
    window: 10,
    icount: true,
};

/// Two domains that check their debug registers stay their own.
pub(super) const DEBUG_ISOLATION_CONFIG: &str = "boards/configs/tests/debug-isolation.toml";
/// Two domains on one core, each checking its FP/SIMD registers keep its value.
const SIMD_ISOLATION_CONFIG: &str = "boards/configs/tests/simd-isolation.toml";

/// The arm scenarios, in the order they run.
const DEBUG_ISOLATION: [QemuScenario; 2] = isolation_pair(Isolation {
    name: "qemu-virt-debug-isolation",
    broken_name: "qemu-virt-debug-isolation-broken",
    board: "qemu-virt",
    smp: SMT_SMP,
    config: DEBUG_ISOLATION_CONFIG,
    ok: &[
        "[dom1] test-guest: debugleak ok",
        "[dom2] test-guest: debugleak ok",
    ],
    break_switch: "hv.test-break-debug-switch=on",
    leaked: &["test-guest: debugleak FAILED: DBGBVR0 read"],
});

const SIMD_ISOLATION: [QemuScenario; 2] = isolation_pair(Isolation {
    name: "qemu-virt-simd-isolation",
    broken_name: "qemu-virt-simd-isolation-broken",
    board: "qemu-virt",
    smp: SMT_SMP,
    config: SIMD_ISOLATION_CONFIG,
    ok: &[
        "[dom1] test-guest: simdleak ok",
        "[dom2] test-guest: simdleak ok",
    ],
    break_switch: "hv.test-break-fpu-switch=on",
    leaked: &["test-guest: simdleak FAILED: V31[127:64] read"],
});

pub(super) const SCENARIOS: &[QemuScenario] = &[
    QemuScenario::new(
        "qemu-virt-gicv3-boot",
        "qemu-virt",
        Gic::V3,
        qemu::FLAT_SMP,
        Check::Boot {
            topology: "sockets=1 clusters=2 cores=8 threads=8",
            cpus: 8,
        },
    ),
    QemuScenario::new(
        "qemu-virt-gicv2-boot",
        "qemu-virt",
        Gic::V2,
        qemu::FLAT_SMP,
        Check::Boot {
            topology: "sockets=1 clusters=2 cores=8 threads=8",
            cpus: 8,
        },
    ),
    QemuScenario::new(
        "qemu-virt-gicv3-smt",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Boot {
            topology: "sockets=1 clusters=2 cores=4 threads=8",
            cpus: 8,
        },
    ),
    QemuScenario::new(
        "qemu-virt-gicv2-smt",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::Boot {
            topology: "sockets=1 clusters=2 cores=4 threads=8",
            cpus: 8,
        },
    ),
    // QEMU refuses a truncated DTB itself (load_device_tree: FDT_ERR_NOSPACE),
    // so the hypervisor is given well-formed trees that lack what it cannot
    // run without: the interrupt controller, the CPUs. Truncated and corrupt
    // blobs are covered by the device-tree parser's host tests.
    QemuScenario::new(
        "qemu-virt-bad-dtb",
        "qemu-virt",
        Gic::V3,
        qemu::FLAT_SMP,
        Check::BadDeviceTree {
            edit: "/ { /delete-node/ intc@8000000; };",
        },
    ),
    QemuScenario::new(
        "qemu-virt-psci-refuses-cpu",
        "qemu-virt",
        Gic::V3,
        qemu::FLAT_SMP,
        Check::RefusedCpu {
            edit: "/ { cpus { cpu@100 { device_type = \"cpu\"; compatible = \"arm,cortex-a72\"; \
                   reg = <0x100>; enable-method = \"psci\"; }; }; };",
            mpidr: "0x100",
            cpus: 8,
        },
    ),
    // Guests under the default config (boards/configs/qemu-virt.toml) on the
    // SMT topology: a credit2 pool, a core-scheduled pool with two domains,
    // and a null pool with a real-time sleeper.
    QemuScenario::new(
        "qemu-virt-guests-gicv3",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Guests {
            config: None,
            expect: DEFAULT_CONFIG_GUEST_LINES,
            allow: &[],
        },
    )
    .min_switches(50),
    QemuScenario::new(
        "qemu-virt-guests-gicv2",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::Guests {
            config: None,
            expect: DEFAULT_CONFIG_GUEST_LINES,
            allow: &[],
        },
    )
    .min_switches(50),
    // Isolation: one domain reads memory it does not own and is stopped with a
    // line naming it, its vCPU, the address and the instruction (`fail_stop`);
    // another takes an abort for the same read and goes on; another
    // powers itself off with PSCI SYSTEM_OFF; the others keep making progress
    // afterwards.
    QemuScenario::new(
        "qemu-virt-guests-isolation",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/isolation.toml"),
            expect: &[
                "(rogue): stopped: vCPU 0",
                "(quitter): stopped: powered off (PSCI SYSTEM_OFF)",
                "[dom1] [vcpu0] progress 40",
                "[dom1] [vcpu1] progress 40",
                "[dom3] [vcpu0] progress 40",
                // Its timer's interrupt ended before the mask: once per
                // expiry (edge-triggered PPIs on a GICv3 host).
                "[dom5] test-guest: timerlevel ok: 20 expiries, each taken once",
                // A trap at the top of the address space: the PC wraps.
                "[dom5] test-guest: top: the MRS at 0xfffffffffffffffc was trapped, emulated (x0 = 0x",
                ") and the PC wrapped to 0x0",
                "[dom5] [vcpu0] progress 20",
                // Without `fail_stop`: a synchronous external abort (EC 0x25,
                // FSC 0x10) at the guest's own vector, and it goes on.
                "[dom7] test-guest: bad access at 0x",
                " faulted (ESR 0x96000010, FAR 0x",
                "domain 7: vCPU 0: 8-byte load from IPA 0x",
                "synchronous external abort injected",
                // `console = "none"`: no PL011 in its device tree nor at its
                // address (an abort, as any hole), lines by hypercall.
                "[dom8] test-guest: no PL011 in the device tree: console through CONSOLE_WRITE",
                "[dom8] test-guest: bad access at 0x9000000 faulted (ESR 0x96000010",
                "domain 8: vCPU 0: 8-byte load from IPA 0x9000000",
            ],
            allow: &["(rogue): stopped"],
        },
    )
    .min_switches(50),
    // Three domains contend for a core pool of two SMT cores: many checked
    // switches on one core, no overlap. Its twin below plants a fault and
    // must see the overlap, so this 0 means something.
    QemuScenario::new(
        "qemu-virt-cosched",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/cosched.toml"),
            expect: &["[dom1] [vcpu1] progress 20", "[dom2] [vcpu1] progress 20"],
            allow: &[],
        },
    )
    .min_switches(500),
    // The same, with both threads of core 4-5 skipping their rendezvous
    // waits (hv.test-break-cosched=4,5): whichever decides a switch kicks
    // its sibling and, without waiting, loads its slot of the new unit while
    // the sibling still runs the old one until the kick reaches it. The
    // checker must report OVERLAPs.
    QemuScenario::new(
        "qemu-virt-cosched-broken",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::BrokenCoscheduling {
            config: "boards/configs/tests/cosched.toml",
            cpus: &[4, 5],
        },
    ),
    // The same pool traced from boot and checked from the trace alone (a
    // second check of the promise, independent of the co-residency checker's
    // guest-entry logs: this one reads the scheduler's switches): no two
    // threads of a core run different domains at once, across many
    // handovers.
    QemuScenario::new(
        "qemu-virt-trace-cosched",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Trace {
            config: "boards/configs/tests/cosched.toml",
            seconds: 4,
            break_cosched: &[],
            min_handovers: 100,
            pinned: &[],
            sharing: None,
        },
    ),
    // Spread placement (reference 003): a 4-vCPU domain alone in a pool of
    // four SMT cores runs one vCPU per core, from the trace; the fixed twin
    // packs its two 2-vCPU units onto two cores, so the check can fail.
    QemuScenario::new(
        "qemu-virt-trace-spread",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Trace {
            config: "boards/configs/tests/spread.toml",
            seconds: 3,
            break_cosched: &[],
            min_handovers: 0,
            pinned: &[],
            sharing: Some(("busy", true)),
        },
    ),
    QemuScenario::new(
        "qemu-virt-trace-spread-fixed",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Trace {
            config: "boards/configs/tests/spread-fixed.toml",
            seconds: 3,
            break_cosched: &[],
            min_handovers: 0,
            pinned: &[],
            sharing: Some(("busy", false)),
        },
    ),
    // Hard affinity from the config under credit2, credit and null, checked
    // from the trace: each pinned domain runs, and only on its CPU, while
    // others contend for its pool (boards/configs/tests/affinity.toml).
    QemuScenario::new(
        "qemu-virt-trace-affinity",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Trace {
            config: "boards/configs/tests/affinity.toml",
            seconds: 3,
            break_cosched: &[],
            min_handovers: 0,
            pinned: &[
                ("pinned", &[2]),
                ("credit-pinned", &[5]),
                ("static-pinned", &[7]),
                ("static-other", &[6]),
            ],
            sharing: None,
        },
    ),
    // Its twin with the fault planted: the trace alone must show the
    // overlaps, so the 0 above means something.
    QemuScenario::new(
        "qemu-virt-trace-cosched-broken",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Trace {
            config: "boards/configs/tests/cosched.toml",
            seconds: 4,
            break_cosched: &[4, 5],
            min_handovers: 0,
            pinned: &[],
            sharing: None,
        },
    ),
    // A vCPU pauses a sibling of its own sched unit (core granularity, fixed
    // units): no hang, the sibling stops and resumes, the pool goes on.
    QemuScenario::new(
        "qemu-virt-guests-unit-pause",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/unit-pause.toml"),
            expect: &[
                "[dom1] test-guest: pause sibling 1 ok",
                "[dom1] test-guest: all workloads done",
                // Test hooks are off unless a domain's config enables them.
                UNIT_PAUSE_REFUSED,
                "[dom2] [vcpu0] progress 30",
                "[dom2] [vcpu1] progress 30",
            ],
            allow: &[],
        },
    )
    .min_switches(50),
    // A vCPU powered off and on 200 times (CPU_OFF, CPU_ON) while its unit
    // sibling loops TEST_UNPAUSE_SIBLING on it: the guest's unpause never
    // drops the hypervisor's power-off pause, CPU_ON never resets a state a
    // CPU still runs (a "not paused" or "cannot start" line is an ERROR).
    QemuScenario::new(
        "qemu-virt-guests-restart",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/restart.toml"),
            expect: &[
                "[dom1] test-guest: restart vcpu 1 ok: 200 restarts by CPU_ON; unpause loop: ",
                " INVALID_PARAMETER, 0 other",
                "[dom1] test-guest: all workloads done",
                "[dom2] [vcpu1] progress 20",
            ],
            allow: &[],
        },
    )
    .min_switches(500),
    // A vCPU powers itself off with PSCI CPU_OFF inside a two-vCPU sched unit
    // (core granularity, fixed units): its unit sibling and the other unit keep
    // running, an SGI does not bring it back, CPU_ON does.
    QemuScenario::new(
        "qemu-virt-guests-cpu-off",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/cpu-off.toml"),
            expect: &[
                "[dom1] test-guest: cpuoff vcpu 1 ok",
                "[dom1] test-guest: vcpu 1 back on after CPU_ON",
                "[dom1] [vcpu1] progress 3",
                "[dom1] [vcpu2] progress 3",
                "[dom1] test-guest: all workloads done",
                "[dom2] [vcpu0] progress 30",
                "[dom2] [vcpu1] progress 30",
            ],
            allow: &[],
        },
    )
    .min_switches(50),
    // PSCI SYSTEM_RESET restarts only that domain (from its image: it starts
    // twice), SYSTEM_OFF tears only that one down (its memory goes back to the
    // heap); the others keep making progress after both.
    QemuScenario::new(
        "qemu-virt-guests-reset",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::GuestsInOrder {
            config: "boards/configs/tests/reset.toml",
            expect: &[
                "(quitter): stopped: powered off (PSCI SYSTEM_OFF)",
                "[dom3] test-guest: all workloads done",
            ],
            sequences: &[
                &[
                    "[dom2] test-guest: started at EL1",
                    "[dom2] test-guest: 2 of 2 vCPUs online",
                    "[dom2] test-guest: resetting (PSCI SYSTEM_RESET)",
                    "(resetter): restarting (PSCI SYSTEM_RESET)",
                    "(resetter): restarted from its image",
                    "[dom2] test-guest: started at EL1",
                    "[dom2] test-guest: 2 of 2 vCPUs online",
                    "[dom2] [vcpu1] progress 3",
                    "[dom2] test-guest: all workloads done",
                ],
                &[
                    "(quitter): torn down: 64 MiB of RAM",
                    "(resetter): restarted from its image",
                    "[dom1] [vcpu0] progress",
                    "[dom1] [vcpu1] progress",
                    "[dom4] [vcpu0] progress",
                    "[dom4] [vcpu1] progress",
                ],
            ],
        },
    )
    .min_switches(50),
    // Switch cost: every kind of switch happens and is measured (the figures
    // themselves come from `cargo xtask bench-hv`, under -icount).
    QemuScenario::new(
        SWITCH_COST_SCENARIO,
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::SwitchCost {
            config: "boards/configs/bench/switch-cost.toml",
        },
    )
    .min_switches(100),
    // Weights (see WEIGHTS_SHARE).
    QemuScenario::new(
        "qemu-virt-guests-weights",
        "qemu-virt",
        Gic::V3,
        "2",
        WEIGHTS_SHARE,
    ),
    // Debug registers stay each vCPU's own (see debug-isolation.toml), and
    // the check fails when the switch is broken on purpose.
    DEBUG_ISOLATION[0],
    DEBUG_ISOLATION[1],
    // FP/SIMD registers stay each vCPU's own (see simd-isolation.toml),
    // and the check fails when the switch leaves them alone on purpose.
    SIMD_ISOLATION[0],
    SIMD_ISOLATION[1],
    // Every other scheduler booted under the real hypervisor, each held to
    // the CPU share its parameters promise.
    QemuScenario::new(
        "qemu-virt-credit-weights",
        "qemu-virt",
        Gic::V3,
        "2",
        CREDIT_SHARE,
    ),
    QemuScenario::new(
        "qemu-virt-rt-budgets",
        "qemu-virt",
        Gic::V3,
        "2",
        RT_SHARE,
    ),
    QemuScenario::new(
        "qemu-virt-arinc653-windows",
        "qemu-virt",
        Gic::V3,
        "2",
        ARINC653_SHARE,
    ),
    // Console input: the host UART's receive interrupt, the Ctrl-A x3 input
    // switch, a domain's emulated PL011 receive FIFO and interrupt (the guest
    // reads on the interrupt), the hypervisor's command line.
    QemuScenario::new(
        "qemu-virt-console-input",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/console-input.toml",
            expect: CONSOLE_INPUT_EXPECT,
            allow: &[],
            input: CONSOLE_INPUT_TYPED,
            ordered: &[],
            append: None,
        },
    )
    .min_switches(50),
    // Runtime cpupool operations by hypercall: the privileged dom1 refuses
    // itself bad operations (missing pool, pool without CPUs, last core of a
    // pool with a domain, destroying a pool with a domain), builds a core
    // pool from a core of the smt pool and moves dom2 there while it runs;
    // dom2 keeps counting and the co-residency checker finds no overlap
    // afterwards; the unprivileged dom3 is refused and keeps counting.
    QemuScenario::new(
        "qemu-virt-pools-hypercall",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/pools-hypercall.toml",
            expect: POOLS_HYPERCALL_EXPECT,
            allow: &[],
            input: &[],
            ordered: POOLS_HYPERCALL_ORDERED,
            append: None,
        },
    )
    .min_switches(50),
    // The same through the hypervisor console (Ctrl-A x3 until input reaches
    // it): a refused move to a missing pool, a core moved into a new pool,
    // dom2 moved there while it runs, a refused removal of that pool's last
    // core, then `pools` and `domains` show the result.
    QemuScenario::new(
        "qemu-virt-pools-console",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/pools-console.toml",
            expect: POOLS_CONSOLE_EXPECT,
            allow: &[],
            input: POOLS_CONSOLE_TYPED,
            ordered: POOLS_CONSOLE_ORDERED,
            append: None,
        },
    )
    .min_switches(50),
    // null with more vCPUs than CPUs after a move: the moved domain waits
    // in null's queue (also while the pool's resident is paused: as in Xen,
    // a paused vCPU keeps its CPU) until the resident is destroyed, then
    // takes the freed CPUs and computes.
    QemuScenario::new(
        "qemu-virt-null-queue",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/null-queue.toml",
            expect: &[
                "dom1 (waiter): idle, pool 1 (solo)",
                "  vcpu 0: runnable, ran",
                "dom2 (resident): paused, pool 1 (solo)",
                "domain 2 (resident): stopped: destroyed by the toolstack",
            ],
            allow: &[],
            input: &[
                ("console input now goes to dom1", "\x01\x01\x01\x01\x01\x01"),
                ("console input now goes to the hypervisor", "move 1 solo\n"),
                ("its vCPUs left their old CPUs", "domains\n"),
                ("dom1 (waiter): idle, pool 1 (solo)", "pause 2\n"),
                ("dom2: paused", "domains\n"),
                ("dom2 (resident): paused", "destroy 2\n"),
            ],
            ordered: &[
                "moved dom1 from pool 0 (general) to pool 1 (solo)",
                "dom1 (waiter): idle, pool 1 (solo)",
                "dom2: paused",
                // As Xen's null: a paused vCPU keeps its CPU; the queue waits.
                "dom1 (waiter): idle, pool 1 (solo)",
                "dom2: destroyed",
                // Its CPUs freed, the queue's vCPUs take them and compute.
                "[dom1] [vcpu0] progress",
                "[dom1] [vcpu1] progress",
            ],
            append: None,
        },
    )
    .min_switches(20),
    // kvm-unit-tests' arm64 tests that pass here, each a domain booted from
    // the user's own image file (the prebuilt suite in ../shared/fixtures):
    // every domain prints the suite's pass line, none a FAIL line.
    QemuScenario::new(
        "qemu-virt-kvm-unit-tests",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::PeerSuite {
            config: KVM_UNIT_TESTS_CONFIG,
            passes: KVM_UNIT_TESTS_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
    ),
    // The same tests on GICv2 (gic.flat then checks the GICv2 distributor
    // and the CPU interface the hypervisor maps through).
    QemuScenario::new(
        "qemu-virt-kvm-unit-tests-gicv2",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::PeerSuite {
            config: KVM_UNIT_TESTS_CONFIG,
            passes: KVM_UNIT_TESTS_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
    ),
    // kvm-unit-tests' timer test alone: the virtual and the EL1 physical
    // timer, their level-sensitive interrupt lines and latencies.
    QemuScenario::new(
        "qemu-virt-kvm-unit-tests-timer",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::PeerSuite {
            config: KVM_UNIT_TESTS_TIMER_CONFIG,
            passes: KVM_UNIT_TESTS_TIMER_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
    ),
    QemuScenario::new(
        "qemu-virt-kvm-unit-tests-timer-gicv2",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::PeerSuite {
            config: KVM_UNIT_TESTS_TIMER_CONFIG,
            passes: KVM_UNIT_TESTS_TIMER_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
    ),
    // kvm-unit-tests' sieve: paging at scale (100 MB mapped page by page).
    QemuScenario::new(
        "qemu-virt-kvm-unit-tests-sieve",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::PeerSuite {
            config: KVM_UNIT_TESTS_SIEVE_CONFIG,
            passes: KVM_UNIT_TESTS_TIMER_PASSES,
            timeout: Duration::from_secs(1200),
            qemu_args: &[],
        },
    )
    .pending("three 100 MB sieves take minutes under TCG; not needed on every CI run"),
    // A device passed through: QEMU virt's PL031 RTC to kvm-unit-tests'
    // pl031.flat, on a GICv3 and a GICv2 host; the hypervisor's own
    // devices and RAM refused.
    QemuScenario::new(
        "qemu-virt-passthrough",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::PeerSuite {
            config: PASSTHROUGH_CONFIG,
            passes: PASSTHROUGH_PASSES,
            timeout: GUESTS_TIMEOUT,
            // QEMU virt's second UART, for the domain that is given it.
            qemu_args: &["-serial", "null"],
        },
    ),
    QemuScenario::new(
        "qemu-virt-passthrough-gicv2",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::PeerSuite {
            config: PASSTHROUGH_CONFIG,
            passes: PASSTHROUGH_PASSES,
            timeout: GUESTS_TIMEOUT,
            // QEMU virt's second UART, for the domain that is given it.
            qemu_args: &["-serial", "null"],
        },
    ),
    // The emulated GICv2 distributor's registers (gic.flat mmio).
    QemuScenario::new(
        "qemu-virt-kvm-unit-tests-gicv2-mmio",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::PeerSuite {
            config: KVM_UNIT_TESTS_GICV2_CONFIG,
            passes: KVM_UNIT_TESTS_GICV2_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
    ),
    QemuScenario::new(
        "qemu-virt-bad-dtb-no-cpus",
        "qemu-virt",
        Gic::V3,
        qemu::FLAT_SMP,
        Check::BadDeviceTree {
            edit: "/ { /delete-node/ cpus; };",
        },
    ),
    // The Raspberry Pi 4 image on QEMU's raspi4b with the real Pi 4 device
    // tree: EL2 entry from the boot stub, GIC-400 with its virtualization
    // interface (QEMU's bcm2838 has it, at the addresses the DT gives), the
    // spin-table secondaries, and the guests of boards/configs/rpi4.toml:
    // compute progress, a virtual-SGI ping-pong and a virtual-timer sleeper.
    QemuScenario::new(
        "rpi4-raspi4b-boot",
        "rpi4",
        Gic::V2,
        "4",
        Check::BootWithGuests {
            topology: "sockets=1 clusters=1 cores=4 threads=4",
            cpus: 4,
            config: None,
            dtb_edit: None,
            expect: &[
                "gic: arm,gic-400: virtualization interface GICH at 0xff844000, GICV at 0xff846000",
                "[dom1] [vcpu0] progress 3",
                "[dom1] [vcpu1] progress 3",
                "[dom1] test-guest: pingpong done: 1 of 1 peers answered",
                "[dom2] test-guest: vcpu 0 sleeper p99",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
            ],
        },
    ),
    // Xen's boot-time cpupool binding: a device tree with Xen's example
    // pools and dom0less placements, a config without pools.
    QemuScenario::new(
        "qemu-virt-xen-cpupools",
        "qemu-virt",
        Gic::V3,
        qemu::FLAT_SMP,
        Check::BootWithGuests {
            topology: "sockets=1 clusters=2 cores=8 threads=8",
            cpus: 8,
            config: Some("boards/configs/tests/xen-cpupools.toml"),
            dtb_edit: Some(XEN_CPUPOOLS_DT),
            expect: &[
                "config: pool 'cpupool_a' (default scheduler) with CPUs 0-3, credit2 (from /chosen/cpupool_a)",
                "config: pool 'cpupool_b' (cpupool-sched) with CPUs 4-7, null (from /chosen/cpupool_b)",
                "config: domain 'fast' goes to pool 'cpupool_b' (/chosen/fast domain-cpupool; the config said 'Pool-0')",
                "config: domain 'slow' goes to pool 'cpupool_a' (/chosen/slow domain-cpupool; the config said 'Pool-0')",
                "sched: pool 0 (credit2, cpu granularity, Fixed placement) with CPUs {0-3}",
                "sched: pool 1 (null, cpu granularity, Fixed placement) with CPUs {4-7}",
                "pool cpupool_b",
                "pool cpupool_a",
                "[dom1] [vcpu0] progress 3",
                "[dom1] [vcpu1] progress 3",
                "[dom2] [vcpu1] progress 3",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
            ],
        },
    ),
    // The same big.LITTLE machine with a config whose pool takes CPUs of both
    // classes: accepted, with a warning naming them, and its guest runs. The
    // tree's Xen cpupools are ignored: the config's pools win.
    QemuScenario::new(
        "qemu-virt-big-little-mixed",
        "qemu-virt",
        Gic::V3,
        qemu::FLAT_SMP,
        Check::BootWithGuests {
            topology: "sockets=1 clusters=2 cores=8 threads=8",
            cpus: 8,
            config: Some("boards/configs/tests/big-little-mixed.toml"),
            dtb_edit: Some(XEN_CPUPOOLS_DT),
            expect: &[
                "config: the image's config lists 2 pool(s); the device tree's 2 xen,cpupool node(s) are ignored",
                "config: pool 'mixed' mixes capacity classes: big CPUs 4-5, LITTLE CPUs 2-3;",
                "sched: pool 1 (credit2, cpu granularity, Fixed placement) with CPUs {2-5}",
                "[dom1] [vcpu0] progress 3",
                "[dom1] [vcpu1] progress 3",
                "[dom1] test-guest: all workloads done",
            ],
        },
    ),
    // The real Pi 4 device tree without its GIC-400: the hypervisor must say
    // so and stop cleanly.
    QemuScenario::new(
        "rpi4-raspi4b-bad-dtb",
        "rpi4",
        Gic::V2,
        "4",
        Check::BadDeviceTree {
            edit: "/ { soc { /delete-node/ interrupt-controller@40041000; }; \
                   aliases { /delete-property/ gicv2; }; };",
        },
    ),
    // The console on the mini UART (UART1, QEMU's second serial port): the
    // whole banner and the guests' console lines (the same config as rpi4's:
    // boards/configs/rpi4-mini-uart.toml links to it) must come through it,
    // and console input is routed to its interrupt (the DT's stdout-path).
    QemuScenario::new(
        "rpi4-mini-uart-raspi4b-boot",
        "rpi4-mini-uart",
        Gic::V2,
        "4",
        Check::BootWithGuests {
            topology: "sockets=1 clusters=1 cores=4 threads=4",
            cpus: 4,
            config: None,
            dtb_edit: None,
            expect: &[
                "console: input on interrupt 125",
                "[dom1] [vcpu1] progress 3",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
            ],
        },
    ),
    // Console input through the mini UART's receive interrupt: typed text
    // reaches the domain, Ctrl-A x3 hands input to the hypervisor (its
    // `help`) and back.
    QemuScenario::new(
        "rpi4-mini-uart-raspi4b-input",
        "rpi4-mini-uart",
        Gic::V2,
        "4",
        Check::Interactive {
            config: "boards/configs/tests/rpi4-mini-uart-input.toml",
            ordered: &[],
            append: None,
            expect: &[
                "console: input on interrupt 125",
                "[dom1] test-guest: echo: \"hello dom1\" (10 bytes",
                "*** console input now goes to the hypervisor",
                "move DOMAIN POOL ",
                "[dom1] test-guest: echo: \"quit\" (4 bytes",
                "[dom1] test-guest: all workloads done",
            ],
            allow: &[],
            input: &[
                ("[dom1] test-guest: echo ready", "hello dom1\n\x01\x01\x01"),
                (
                    "console input now goes to the hypervisor",
                    "help\n\x01\x01\x01",
                ),
                ("console input now goes to dom1", "quit\n"),
            ],
        },
    )
    .min_switches(20),
    // big.LITTLE on QEMU virt: QEMU's own device tree with
    // `capacity-dmips-mhz` added per cluster (cluster 0 LITTLE, cluster 1
    // big, as on an RK3399), and a config without pools: the hypervisor must
    // name the classes, make one pool per class, and run a guest in each.
    QemuScenario::new(
        "qemu-virt-big-little",
        "qemu-virt",
        Gic::V3,
        qemu::FLAT_SMP,
        Check::BootWithGuests {
            topology: "sockets=1 clusters=2 cores=8 threads=8",
            cpus: 8,
            config: Some("boards/configs/tests/big-little.toml"),
            dtb_edit: Some(BIG_LITTLE_CAPACITIES),
            expect: &[
                "big.LITTLE: big: CPUs 4-7, capacity 1024, arm,cortex-a72",
                "big.LITTLE: LITTLE: CPUs 0-3, capacity 485, arm,cortex-a72",
                "config: automatic pool 'LITTLE' with CPUs 0-3",
                "config: automatic pool 'big' with CPUs 4-7",
                "sched: pool 0 (credit2, cpu granularity, Fixed placement) with CPUs {0-3}",
                "sched: pool 1 (credit2, cpu granularity, Fixed placement) with CPUs {4-7}",
                "domain 1 (fast): 2 vCPUs",
                "pool big",
                "domain 2 (slow): 2 vCPUs",
                "pool LITTLE",
                "[dom1] [vcpu0] progress 3",
                "[dom1] [vcpu1] progress 3",
                "[dom2] [vcpu0] progress 3",
                "[dom2] [vcpu1] progress 3",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
            ],
        },
    ),
    // The Ampere Altra image as a UEFI application: Debian's edk2 on QEMU virt
    // with 16 Neoverse N1 cores in clusters of two (as Altra's); no device tree reaches
    // the hypervisor (ACPI: MADT, PPTT, SPCR, GTDT, FADT; memory from UEFI).
    QemuScenario::new(
        "ampere-uefi-acpi-boot",
        "ampere",
        Gic::V3,
        qemu::UEFI_DEFAULT_SMP,
        Check::UefiBoot {
            topology: "sockets=1 clusters=8 cores=16 threads=16",
            cpus: 16,
            expect: AMPERE_CONFIG_GUEST_LINES,
        },
    )
    .min_switches(20),
    // big.LITTLE on real firmware: the UEFI test tool gives edk2's MADT two
    // efficiency classes (CPUs 0-3 LITTLE, 4-7 big, the Surface Pro X's
    // order) before the hypervisor starts; the config lists no pool, so the
    // hypervisor must make one per class from the ACPI tables alone.
    QemuScenario::new(
        "ampere-uefi-big-little",
        "ampere",
        Gic::V3,
        "8,sockets=1,clusters=4,cores=2,threads=1",
        Check::UefiBigLittle {
            config: "boards/configs/tests/big-little.toml",
            topology: "sockets=1 clusters=4 cores=8 threads=8",
            cpus: 8,
            expect: &[
                "cpu topology: 8 CPUs, 1 socket(s), 4 cluster(s), 8 core(s), big.LITTLE; ACPI MADT",
                "big.LITTLE: big: CPUs 4-7, capacity 1024",
                "big.LITTLE: LITTLE: CPUs 0-3, capacity 512",
                "config: automatic pool 'LITTLE' with CPUs 0-3",
                "config: automatic pool 'big' with CPUs 4-7",
                "sched: pool 0 (credit2, cpu granularity, Fixed placement) with CPUs {0-3}",
                "sched: pool 1 (credit2, cpu granularity, Fixed placement) with CPUs {4-7}",
                "domain 1 (fast): 2 vCPUs",
                "vmid 1, pool big",
                "domain 2 (slow): 2 vCPUs",
                "vmid 2, pool LITTLE",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
            ],
        },
    ),
    QemuScenario::new(
        "ampere-uefi-no-acpi",
        "ampere",
        Gic::V3,
        "2",
        Check::UefiNoAcpi,
    ),
];
