//! The x86-64 scenarios: QEMU q35 with SMT and SVM, the test guests.

use super::*;

/// The SVM line of a CPU with SVM and nested paging.
pub(super) const SVM_WITH_NPT: &str = "svm: available (npt yes";

/// x86 `-smp` with SMT: one socket, four cores of two threads.
pub(super) const X86_SMT_SMP: &str = "8,sockets=1,cores=4,threads=2";

/// The x86 boot line saying instruction lengths come from decoding the
/// guest's code (TCG saves no next RIP): every exit of these scenarios that
/// skips an instruction goes through the decoder.
pub(super) const X86_DECODED_LENGTHS: &str =
    "svm: no next RIP saving (NRIPS): instruction lengths are decoded from the guest's code";

/// What the guests of boards/configs/qemu-x86.toml print when they all work
/// (with every skipped instruction's length decoded from their code):
/// progress from every vCPU of both pools, the x2APIC IPI ping-pong (dom2, in
/// the core-scheduled pool), the TSC-deadline sleepers (dom1), every domain
/// finishing.
pub(super) const X86_DEFAULT_CONFIG_GUEST_LINES: &[&str] = &[
    X86_DECODED_LENGTHS,
    "[dom1] [vcpu0] progress 3",
    "[dom1] [vcpu1] progress 3",
    "[dom2] [vcpu0] progress 3",
    "[dom2] [vcpu1] progress 3",
    "[dom3] [vcpu0] progress 3",
    "[dom3] [vcpu1] progress 3",
    "[dom2] test-guest: pingpong done: 1 of 1 peers answered",
    "[dom1] test-guest: vcpu 0 sleeper p99",
    "[dom1] test-guest: vcpu 1 sleeper p99",
    "[dom1] test-guest: all workloads done",
    "[dom2] test-guest: all workloads done",
    "[dom3] test-guest: all workloads done",
];

/// [`CONSOLE_INPUT_EXPECT`] after the x86 line that must come with it.
pub(super) const X86_CONSOLE_INPUT_EXPECT: [&str; CONSOLE_INPUT_EXPECT.len() + 1] = with_first(
    "console: input on COM1's interrupt (ISA IRQ 4, GSI 4, pin 4 of I/O APIC 0 at 0xfec00000",
    CONSOLE_INPUT_EXPECT,
);

/// [`POOLS_CONSOLE_EXPECT`] after the x86 line that must come with it.
pub(super) const X86_POOLS_CONSOLE_EXPECT: [&str; POOLS_CONSOLE_EXPECT.len() + 1] = with_first(
    "console: hv.console-input=poll on the command line; polling COM1 every 10 ms from cpu 0's tick",
    POOLS_CONSOLE_EXPECT,
);

/// [`POOLS_HYPERCALL_EXPECT`] after the x86 line that must come with it.
pub(super) const X86_POOLS_HYPERCALL_EXPECT: [&str; POOLS_HYPERCALL_EXPECT.len() + 1] =
    with_first(X86_DECODED_LENGTHS, POOLS_HYPERCALL_EXPECT);

/// The x86 Linux guest's config: Debian's amd64 kernel beside test guests.
pub const X86_LINUX_CONFIG: &str = "boards/configs/tests/x86-linux.toml";

/// How long [`X86_KVM_UNIT_TESTS_CONFIG`]'s domains may take: apic alone
/// makes 130 000 NMI round trips between its two vCPUs (each a few exits),
/// about 100 s under QEMU's TCG on a 2-core machine.
const X86_KVM_UNIT_TESTS_TIMEOUT: Duration = Duration::from_secs(300);

/// kvm-unit-tests' x86-64 tests that pass, each a multiboot domain.
const X86_KVM_UNIT_TESTS_CONFIG: &str = "boards/configs/tests/x86-kvm-unit-tests.toml";

/// What each of [`X86_KVM_UNIT_TESTS_CONFIG`]'s domains prints when its
/// tests passed: smptest its summary, every domain exit code 0 through the
/// test device (vmexit prints no summary: its exit code is its verdict).
const X86_KVM_UNIT_TESTS_PASSES: &[&str] = &[
    "[dom1] SUMMARY: 1 tests",
    "[dom2] SUMMARY: 1 tests",
    "domain 1 (smptest): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "domain 2 (smptest3): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "domain 3 (vmexit): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "domain 4 (vmexit-tscdeadline): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "[dom5] SUMMARY: 386 tests",
    "domain 5 (xsave): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "[dom6] SUMMARY: 3 tests",
    "domain 6 (tsc): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "[dom7] SUMMARY: 1808 tests",
    "domain 7 (msr): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "[dom8] SUMMARY: 55 tests",
    "domain 8 (apic): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "[dom9] SUMMARY: 13 tests",
    "domain 9 (eventinj): stopped: exited through the test device (port 0xf4): code 0, status 1",
    "[dom10] SUMMARY: 4 tests",
    "domain 10 (idt_test): stopped: exited through the test device (port 0xf4): code 0, status 1",
];

/// Two single-vCPU domains sharing one core, each checking its YMM15 upper
/// half keeps its own value.
const X86_SIMD_ISOLATION_CONFIG: &str = "boards/configs/tests/x86-simd-isolation.toml";

/// The x86 scenarios, in the order they run.
const X86_SIMD_ISOLATION: [QemuScenario; 2] = isolation_pair(Isolation {
    name: "qemu-x86-simd-isolation",
    broken_name: "qemu-x86-simd-isolation-broken",
    board: "qemu-x86",
    smp: X86_SMT_SMP,
    config: X86_SIMD_ISOLATION_CONFIG,
    ok: &[
        "[dom1] test-guest: simdleak ok",
        "[dom2] test-guest: simdleak ok",
    ],
    break_switch: "hv.test-break-fpu-switch=on",
    leaked: &["test-guest: simdleak FAILED: YMM15[255:192] read"],
});

pub(super) const SCENARIOS: &[QemuScenario] = &[
    // Debian's amd64 kernel as a 4-vCPU SVM domain of a core-scheduled pool
    // (its units two SMT cores), next to a test guest contending for those
    // cores: the ready line, the local APIC timer ticking on every vCPU, a
    // CPU loop on each, `reboot -f` (the ACPI reset register restarts only
    // Linux, which boots again), `poweroff -f` (ACPI S5 stops only Linux).
    QemuScenario::new(
        "qemu-x86-linux",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Linux {
            config: X86_LINUX_CONFIG,
            run: LinuxRun::Smoke { reboot: true },
            also: &[],
        },
    )
    .min_switches(2000),
    QemuScenario::new(
        "qemu-x86-smt",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::X86Boot {
            topology: "sockets=1 clusters=1 cores=4 threads=8",
            cpus: 8,
            apic: "xAPIC",
            svm: SVM_WITH_NPT,
        },
    ),
    QemuScenario::new(
        "qemu-x86-two-packages",
        "qemu-x86",
        Gic::V3,
        "4,sockets=2,cores=2,threads=1",
        Check::X86Boot {
            topology: "sockets=2 clusters=2 cores=4 threads=4",
            cpus: 4,
            apic: "xAPIC",
            svm: SVM_WITH_NPT,
        },
    ),
    // QEMU's EPYC model has no x2APIC; `+x2apic` adds it, and the hypervisor
    // must then choose it.
    QemuScenario::new(
        "qemu-x86-x2apic",
        "qemu-x86",
        Gic::V3,
        "4,sockets=1,cores=2,threads=2",
        Check::X86Boot {
            topology: "sockets=1 clusters=1 cores=2 threads=4",
            cpus: 4,
            apic: "x2APIC",
            svm: SVM_WITH_NPT,
        },
    )
    .cpu("EPYC,+svm,+npt,+x2apic"),
    // An Intel model: TCG emulates neither VMX nor (for Intel vendors without
    // `+svm`) SVM, so the hypervisor must say so and still bring up the host.
    QemuScenario::new(
        "qemu-x86-no-svm",
        "qemu-x86",
        Gic::V3,
        "2,sockets=1,cores=1,threads=2",
        Check::X86Boot {
            topology: "sockets=1 clusters=1 cores=1 threads=2",
            cpus: 2,
            apic: "x2APIC",
            svm: "svm: not available",
        },
    )
    .cpu("Skylake-Server"),
    // SVM guests under the default config (boards/configs/qemu-x86.toml) on
    // the SMT topology: a credit2 pool at cpu granularity and a
    // core-scheduled one with two domains; the co-residency checker must
    // find no overlap.
    QemuScenario::new(
        "qemu-x86-guests",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Guests {
            config: None,
            expect: X86_DEFAULT_CONFIG_GUEST_LINES,
            allow: &[],
        },
    )
    .min_switches(50),
    // Isolation on x86: a domain reads guest-physical memory it does not
    // have; the nested page fault stops it with a line naming it, its vCPU,
    // the address and RIP; the others keep making progress afterwards.
    QemuScenario::new(
        "qemu-x86-guests-isolation",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/x86-isolation.toml"),
            expect: &[
                "[dom2] test-guest: bad hypercall returned -1 (NOT_SUPPORTED), as expected",
                // POOL_OP through the shared pools layer (privileged "steady").
                "[dom1] test-guest: pool 0: credit2 cpu granularity, 4 CPUs (bitmap 0xf), 2 domains",
                // 1 or 2 domains: rogue may already be gone.
                "[dom1] test-guest: pool 1: credit2 core granularity, 4 CPUs (bitmap 0xf0), ",
                "[dom1] test-guest: created empty pool 2",
                "[dom1] test-guest: destroyed pool 2",
                "[dom1] test-guest: 2 pools listed",
                "(rogue): stopped: vCPU 0: nested page fault: read from guest-physical 0x2000000, outside its memory (RIP 0x",
                // Its RAM, tables and ASID go back (the heap shrinking by at
                // least its RAM is checked by `check_teardown_line`).
                "(rogue): torn down: 32 MiB of RAM, 3 nested page tables and ASID ",
                // A guest triple fault: the intercepted shutdown stops that
                // domain with its registers, on its own nested page tables.
                "[dom4] test-guest: end=crash: ud2 with an empty IDT (a triple fault)",
                "(crasher): stopped: vCPU 0: shutdown (triple fault) at RIP 0x",
                " IDTR 0x0+0x0 ",
                "; its own nested page tables",
                "(crasher): torn down: 32 MiB of RAM, 3 nested page tables and ASID ",
                "[dom1] [vcpu0] progress 40",
                "[dom1] [vcpu1] progress 40",
                "[dom3] [vcpu0] progress 40",
                "[dom3] [vcpu1] progress 40",
                // #DB intercepted and handed back, debug registers emulated.
                "[dom5] test-guest: traps ok: ",
                " debug exceptions for 20000 single steps",
                "[dom5] test-guest: traps ok: DR0-DR3 and DR7 read back what was written",
                // ... through the hypervisor (the guest alone cannot tell).
                "domain 5: 10000 #DB intercepted and handed back so far",
                "domain 5: 1 debug register accesses emulated so far",
                "[dom5] [vcpu0] progress 20",
                // No console (`console = "none"`): COM1's ports float high,
                // the guest finds no 16550 and prints through CONSOLE_WRITE.
                "[dom6] test-guest: no 16550 at COM1: console through CONSOLE_WRITE",
                "[dom6] [vcpu0] progress 1",
            ],
            allow: &["(rogue): stopped", "(crasher): stopped"],
        },
    )
    .min_switches(50),
    // The same weights on x86 (credit2 over the APIC timer, SVM guests).
    QemuScenario::new(
        "qemu-x86-guests-weights",
        "qemu-x86",
        Gic::V3,
        "2",
        WEIGHTS_SHARE,
    ),
    // Guests on an x2APIC host (host IPIs and the tick through the x2APIC
    // MSRs), two threads per core, one core-scheduled pool.
    QemuScenario::new(
        "qemu-x86-x2apic-guests",
        "qemu-x86",
        Gic::V3,
        "4,sockets=1,cores=2,threads=2",
        Check::Guests {
            config: Some("boards/configs/tests/x86-four-cpus.toml"),
            expect: &[
                "apic: x2APIC driver up",
                "[dom1] test-guest: pingpong done: 1 of 1 peers answered",
                "[dom2] test-guest: pingpong done: 1 of 1 peers answered",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
                "[dom3] test-guest: all workloads done",
            ],
            allow: &[],
        },
    )
    .cpu("EPYC,+svm,+npt,+x2apic")
    .min_switches(50),
    // Guests on two packages without SMT: package 0 is one sched resource
    // (socket granularity, both its cores switch together) shared by two
    // domains, package 1 runs a third at cpu granularity. The checker
    // replays package 0's switches and must find no overlap.
    QemuScenario::new(
        "qemu-x86-two-packages-guests",
        "qemu-x86",
        Gic::V3,
        "4,sockets=2,cores=2,threads=1",
        Check::Guests {
            config: Some("boards/configs/tests/x86-two-packages.toml"),
            expect: &[
                "sched: pool 0 (credit2, socket granularity, Fixed placement) with CPUs {0-1}",
                "[dom1] test-guest: pingpong done: 1 of 1 peers answered",
                "[dom3] test-guest: pingpong done: 1 of 1 peers answered",
                "[dom1] [vcpu1] progress 5",
                "[dom2] [vcpu1] progress 5",
                "[dom3] test-guest: vcpu 1 sleeper p99",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
                "[dom3] test-guest: all workloads done",
                "switches checked on 1 shared resources (busiest: ",
            ],
            allow: &[],
        },
    )
    .min_switches(50),
    // An AP that never answers: CPU 3 (the second thread of core 1) parks
    // before reporting in; the boot CPU leaves it out after its 5 s bound,
    // the core-scheduled pool keeps core 1's other thread and both pools'
    // domains run.
    QemuScenario::new(
        "qemu-x86-silent-ap",
        "qemu-x86",
        Gic::V3,
        "4,sockets=1,cores=2,threads=2",
        Check::X86SilentAp {
            cpu: 3,
            cpus: 4,
            config: "boards/configs/tests/x86-four-cpus.toml",
            expect: &[
                "config: pool 'smt': CPUs 3 are not online; left out",
                "sched: pool 1 (credit2, core granularity, Fixed placement) with CPUs {2}",
                "[dom1] test-guest: pingpong done: 1 of 1 peers answered",
                "[dom2] test-guest: pingpong done: 1 of 1 peers answered",
                "[dom1] test-guest: all workloads done",
                "[dom2] test-guest: all workloads done",
                "[dom3] test-guest: all workloads done",
            ],
        },
    ),
    // Console input on x86: COM1's receive interrupt through the I/O APIC
    // (ISA IRQ 4 from the MADT), the Ctrl-A x3 input switch, a domain's
    // emulated 16550 receive FIFO and its IRQ 4 through the emulated 8259A
    // to vCPU 0 (the guest reads on vector 0x24 and EOIs the PIC), the
    // hypervisor's command line. The x86 twin of qemu-virt-console-input.
    QemuScenario::new(
        "qemu-x86-console-input",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/x86-console-input.toml",
            expect: &X86_CONSOLE_INPUT_EXPECT,
            allow: &[],
            input: CONSOLE_INPUT_TYPED,
            ordered: &[],
            append: None,
        },
    )
    .min_switches(50),
    // Runtime cpupool operations through the hypervisor console on x86, as
    // qemu-virt-pools-console, with COM1 polled from the boot CPU's tick
    // (`hv.console-input=poll`: the fallback for a machine whose MADT has no
    // I/O APIC; q35 has one).
    QemuScenario::new(
        "qemu-x86-pools-console",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/x86-pools-console.toml",
            expect: &X86_POOLS_CONSOLE_EXPECT,
            allow: &[],
            input: POOLS_CONSOLE_TYPED,
            ordered: POOLS_CONSOLE_ORDERED,
            append: Some("hv.console-input=poll"),
        },
    )
    .min_switches(50),
    // x86 twin of qemu-virt-guests-unit-pause: a vCPU pauses a sibling of its
    // own sched unit (core granularity, fixed units) with TEST_PAUSE_SIBLING
    // through VMMCALL: no hang, the sibling stops and resumes, the pool goes
    // on; the exits' instruction lengths are decoded from the guests' code
    // (TCG saves no next RIP).
    QemuScenario::new(
        "qemu-x86-guests-unit-pause",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/x86-unit-pause.toml",
            expect: &[
                X86_DECODED_LENGTHS,
                "domain 1: vCPU 1 started (SIPI, rsi = 0x7000)",
                "[dom1] test-guest: pause sibling 1 ok",
                "[dom1] test-guest: all workloads done",
                UNIT_PAUSE_REFUSED,
                "[dom2] [vcpu0] progress 30",
                "[dom2] [vcpu1] progress 30",
            ],
            allow: &[],
            input: &[],
            ordered: &[
                "[dom1] test-guest: pause sibling 1 ok",
                "[dom2] [vcpu1] progress",
                " 0 overlaps",
            ],
            append: None,
        },
    )
    .min_switches(50),
    // x86 twins of qemu-virt-cosched and qemu-virt-cosched-broken.
    QemuScenario::new(
        "qemu-x86-cosched",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/cosched.toml"),
            expect: &["[dom1] [vcpu1] progress 20", "[dom2] [vcpu1] progress 20"],
            allow: &[],
        },
    )
    .min_switches(500),
    // kvm-unit-tests' x86-64 tests booted by multiboot (see the config):
    // smptest with 2 and 3 vCPUs, vmexit's exits and IPIs, its TSC-deadline
    // timings, xsave, tsc, msr, apic (with its NMI checks), eventinj,
    // idt_test; every domain ends with exit code 0, no FAIL line.
    QemuScenario::new(
        "qemu-x86-kvm-unit-tests",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::PeerSuite {
            config: X86_KVM_UNIT_TESTS_CONFIG,
            passes: X86_KVM_UNIT_TESTS_PASSES,
            timeout: X86_KVM_UNIT_TESTS_TIMEOUT,
            qemu_args: &[],
        },
    ),
    // kvm-unit-tests' sieve, alone for its 256 MiB (see the config).
    QemuScenario::new(
        "qemu-x86-kvm-unit-tests-sieve",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::PeerSuite {
            config: "boards/configs/tests/x86-kvm-unit-tests-sieve.toml",
            passes: &[
                "[dom1] virtual:5761455 out of 100000000",
                "domain 1 (sieve): stopped: exited through the test device (port 0xf4): code 0, status 1",
            ],
            timeout: X86_KVM_UNIT_TESTS_TIMEOUT,
            qemu_args: &[],
        },
    ),
    // AVX state stays each vCPU's own (see x86-simd-isolation.toml), and
    // the check fails when the switch leaves it alone on purpose.
    X86_SIMD_ISOLATION[0],
    X86_SIMD_ISOLATION[1],
    // The same under -icount: a scheduling deadline that expires while a
    // guest runs must not re-arm the host timer in the past from its own
    // handler (under -icount a one-count APIC timer expires before the
    // interrupted instruction retires: the CPU livelocked in its run loop
    // and the domain stopped there).
    QemuScenario::new(
        "qemu-x86-cosched-icount",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/cosched.toml"),
            expect: &["[dom1] [vcpu1] progress 20", "[dom2] [vcpu1] progress 20"],
            allow: &[],
        },
    )
    .icount()
    .min_switches(500),
    // x86 twin of qemu-virt-trace-cosched: the trace's own check of the
    // promise with APIC IPIs and the TSC clock.
    QemuScenario::new(
        "qemu-x86-trace-cosched",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Trace {
            config: "boards/configs/tests/cosched.toml",
            seconds: 4,
            break_cosched: &[],
            min_handovers: 100,
            pinned: &[],
            sharing: None,
        },
    ),
    QemuScenario::new(
        "qemu-x86-cosched-broken",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::BrokenCoscheduling {
            config: "boards/configs/tests/cosched.toml",
            cpus: &[4, 5],
        },
    ),
    // x86 twin of qemu-virt-guests-restart, with native semantics: vCPU 2
    // sends vCPU 1 INIT + STARTUP 200 times while it runs (each STARTUP
    // resets its state in place once its CPU let it go), while vCPU 0 loops
    // TEST_UNPAUSE_SIBLING on it: no host crash, no "not paused" line.
    QemuScenario::new(
        "qemu-x86-guests-restart",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Guests {
            config: Some("boards/configs/tests/x86-restart.toml"),
            expect: &[
                "[dom1] test-guest: restart vcpu 1 ok: 200 restarts by STARTUP; unpause loop: ",
                " INVALID_PARAMETER, 0 other",
                "[dom1] test-guest: all workloads done",
                "[dom2] [vcpu1] progress 20",
            ],
            allow: &[],
        },
    )
    .min_switches(500),
    // x86 twin of qemu-virt-guests-cpu-off with native semantics
    // (guest_abi::x86): vCPU 1 parks with `cli; hlt` inside a two-vCPU sched
    // unit; an INIT puts it in wait-for-SIPI (the hypervisor says so), a fixed
    // IPI does not wake it, its unit sibling and the other unit keep running,
    // INIT + STARTUP restart it fresh (a second start line) and it rejoins.
    QemuScenario::new(
        "qemu-x86-guests-cpu-off",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/x86-cpu-off.toml",
            expect: &[
                X86_DECODED_LENGTHS,
                "[dom1] test-guest: cpuoff vcpu 1 ok: off through an IPI while vcpu 0 and ",
                "[dom1] [vcpu1] progress 3",
                "[dom1] [vcpu2] progress 3",
                "[dom1] test-guest: all workloads done",
                "[dom2] [vcpu0] progress 30",
                "[dom2] [vcpu1] progress 30",
            ],
            allow: &[],
            input: &[],
            ordered: &[
                "domain 1: vCPU 1 started (SIPI, rsi = 0x7000)",
                "domain 1: vCPU 1: INIT: waiting for STARTUP",
                "domain 1: vCPU 1 started (SIPI, rsi = 0x7000)",
                "[dom1] test-guest: vcpu 1 back on after STARTUP",
                "[dom1] [vcpu1] progress",
                " 0 overlaps",
            ],
            append: None,
        },
    )
    .min_switches(50),
    // x86 twin of qemu-virt-pools-hypercall: POOL_OP through VMMCALL from the
    // privileged dom1 (refusals, a core taken into a new pool, dom2 moved
    // there while it runs, the move returning once its vCPUs left their old
    // CPUs, logged as on ARM); the unprivileged dom3 is refused; 0 overlaps
    // after the move.
    QemuScenario::new(
        "qemu-x86-pools-hypercall",
        "qemu-x86",
        Gic::V3,
        X86_SMT_SMP,
        Check::Interactive {
            config: "boards/configs/tests/x86-pools-hypercall.toml",
            expect: &X86_POOLS_HYPERCALL_EXPECT,
            allow: &[],
            input: &[],
            ordered: POOLS_HYPERCALL_ORDERED,
            append: None,
        },
    )
    .min_switches(50),
    QemuScenario::new(
        "qemu-x86-exception-report",
        "qemu-x86",
        Gic::V3,
        "2,sockets=1,cores=1,threads=2",
        Check::X86Fault {
            append: "hv.fault-test=page-fault",
            cr2: "CR2=0x1000000000",
        },
    ),
];
