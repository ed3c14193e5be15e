//! The scenarios that boot Debian's arm64 kernel as a domain, and what
//! they type into its shell.

use super::*;

/// The Linux guest's config.
pub const LINUX_CONFIG: &str = "boards/configs/tests/linux.toml";

/// The reproducer of the open EL2 crash: [`LINUX_CONFIG`] with a contender
/// that never stops.
pub const LINUX_CONTENDED_CONFIG: &str = "boards/configs/tests/linux-contended.toml";

/// Two user images: the Debian kernel and initramfs as files (written by
/// `cargo xtask guest-linux`), and a kvm-unit-tests `.flat`.
pub const USER_IMAGES_CONFIG: &str = "boards/configs/tests/user-images.toml";

/// The Linux-against-Linux scenarios' config.
pub const LINUX_PAIR_CONFIG: &str = "boards/configs/tests/linux-pair.toml";

/// The crashing Linux guest's config: a 2-vCPU kernel told to run an init
/// that does not exist, so it panics.
pub const LINUX_PANIC_CONFIG: &str = "boards/configs/tests/linux-panic.toml";

/// The crashing-Linux scenario's topology: one core for the test guests, one
/// for Linux (fewer emulated CPUs than [`SMT_SMP`] keep it short).
pub(super) const LINUX_PANIC_SMP: &str = "4,clusters=1,cores=2,threads=2";

/// What Linux prints once its panic message is complete; it then spins in
/// panic's loop for good (`panic=0`).
pub(super) const LINUX_PANIC_END: &str = "---[ end Kernel panic - not syncing";

/// How long the Linux scenarios may take: about a minute to the ready line
/// alone on an idle two-core host; with a reboot and other builds sharing the
/// host (load 20 on two cores) the GICv3 run took 270 s.
pub const LINUX_TIMEOUT: Duration = Duration::from_secs(480);

/// What Linux prints when it finds a bug in itself or a stuck CPU.
pub(super) const LINUX_FAILURE_PATTERNS: &[&str] = &[
    "BUG:",
    "WARNING:",
    "Oops",
    "self-detected stall",
    // Every RCU flavour's (Debian's arm64 kernel runs rcu_sched, the x86
    // one rcu_preempt): "rcu: INFO: rcu_sched detected stalls on CPUs/tasks:".
    "detected stalls on CPUs",
    "detected expedited stalls",
    "timer wakeup didn't happen",
    "Unable to handle kernel",
    "Internal error:",
    "unchecked MSR access error",
    "soft lockup",
];

/// What the smoke scenarios type at Linux's shell, each once a line
/// containing the first string has appeared ([`INTERRUPTS_END`]: the last
/// row of `/proc/interrupts`, which differs by architecture). Outputs the
/// checks look for are computed by the shell (`$((1 + 1))`, `${39}`), so the
/// terminal's echo of the typed command cannot match them.
pub const LINUX_SMOKE_INPUT: &[(&str, &str)] = &[
    (
        "Enter 'help' for a list of built-in commands.",
        "cat /proc/interrupts\n",
    ),
    (
        INTERRUPTS_END,
        "for c in 0 1 2 3; do taskset -c $c sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i + 1)); done; set -- $(cat /proc/self/stat); echo \"loop $0 done on cpu ${39}\"' $c & done; wait; echo loops-$((1 + 1))-finished\n",
    ),
    // The guest's topology: its units of two vCPUs are SMT siblings
    // (cpu-map on ARM, CPUID leaf 0xB on x86).
    (
        "loops-2-finished",
        "echo topo$((1 + 1)) $(cat /sys/devices/system/cpu/cpu2/topology/thread_siblings_list)\n",
    ),
];

/// Stands for the last row of `/proc/interrupts` in [`LINUX_SMOKE_INPUT`]
/// (`LinuxPlatform::interrupts_end` names it).
pub const INTERRUPTS_END: &str = "<end of /proc/interrupts>";

/// What the smoke scenarios type to reboot Linux (after the loops), then to
/// power it off once it is back.
pub const LINUX_REBOOT_INPUT: &[(&str, &str)] = &[
    (LINUX_TOPOLOGY_OUTPUT, "reboot -f\n"),
    (
        "Enter 'help' for a list of built-in commands.",
        "poweroff -f\n",
    ),
];

/// What the smoke scenarios type to power Linux off after the loops.
pub const LINUX_POWEROFF_INPUT: &[(&str, &str)] = &[(LINUX_TOPOLOGY_OUTPUT, "poweroff -f\n")];

/// The start of what the topology command prints (its echo shows
/// `topo$((1 + 1))`, never this).
pub const LINUX_TOPOLOGY_OUTPUT: &str = "topo2 ";

/// What it prints for the configs' core-scheduled 4-vCPU kernels: vCPU 2's
/// thread siblings are vCPUs 2 and 3.
pub const LINUX_TOPOLOGY_LINE: &str = "topo2 2-3";

/// What the Linux-against-Linux scenarios type, and after which line: the
/// loops in dom1 once both kernels are up, Ctrl-A three times to dom2, its
/// loops, then an echo in each shell (Ctrl-A six times back to dom1 through
/// the hypervisor's command line).
pub const LINUX_PAIR_INPUT: &[(&str, &str)] = &[
    ("a-done-$((1 + 1))", "\x01\x01\x01"),
    (
        "console input now goes to dom2",
        "(for c in 0 1; do taskset -c $c sh -c 'i=0; while [ $i -lt 30000 ]; do i=$((i + 1)); done'& done; wait; echo b-done-$((1 + 1))) &\n",
    ),
    ("b-done-2", "echo alive-b-$((2 + 3))\n"),
    ("alive-b-5", "\x01\x01\x01"),
    ("console input now goes to the hypervisor", "\x01\x01\x01"),
    (
        "console input now goes to dom1",
        "echo alive-a-$((2 + 3))\n",
    ),
];

/// The loops typed into dom1 once both kernels are up (the first input of
/// [`LinuxRun::Pair`], before [`LINUX_PAIR_INPUT`]).
pub const LINUX_PAIR_FIRST: &str = "(for c in 0 1; do taskset -c $c sh -c 'i=0; while [ $i -lt 30000 ]; do i=$((i + 1)); done'& done; wait; echo a-done-$((1 + 1))) &\n";

/// How long the idle scenario watches an idle Linux after its ready line.
pub const LINUX_IDLE: Duration = Duration::from_secs(60);

/// The linux scenarios, in the order they run.
pub(super) const SCENARIOS: &[QemuScenario] = &[
    // A long soak: the Linux smoke run with a contender that keeps taking
    // Linux's cores for the whole run (about 8 minutes, so not on every CI
    // run). It found issue 14's EL2 stack leak: every vCPU-to-idle switch
    // kept the stack of what it replaced, and about 60 s in a CPU's stack
    // overflowed into the heap and EL2 jumped to 0x0 or 0x11. Every scenario
    // now catches that leak at once (the idle loop logs an ERROR when it is
    // entered deeper than it started); this one shows Linux boots anyway.
    QemuScenario::new(
        "qemu-virt-linux-reboot-contended",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Linux {
            config: LINUX_CONTENDED_CONFIG,
            run: LinuxRun::Smoke { reboot: true },
            also: &[],
        },
    )
    .min_switches(2000)
    .pending("an 8-minute soak; not needed on every CI run"),
    // Two user images: the Debian kernel with its initramfs as files, and a
    // kvm-unit-tests .flat in Linux's core pool (issue 16's "done when").
    QemuScenario::new(
        "qemu-virt-user-images",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Linux {
            config: USER_IMAGES_CONFIG,
            run: LinuxRun::Smoke { reboot: false },
            also: &["[dom4] EXIT: STATUS=1"],
        },
    )
    .min_switches(100),
    // Debian's arm64 kernel as a 4-vCPU domain of a core-scheduled pool.
    QemuScenario::new(
        "qemu-virt-linux-gicv3",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Linux {
            config: LINUX_CONFIG,
            run: LinuxRun::Smoke { reboot: true },
            also: &[],
        },
    )
    .min_switches(2000),
    QemuScenario::new(
        "qemu-virt-linux-gicv2",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::Linux {
            config: LINUX_CONFIG,
            run: LinuxRun::Smoke { reboot: false },
            also: &[],
        },
    )
    .min_switches(2000),
    // Linux against Linux: two 2-vCPU kernels and a test guest in one
    // core-scheduled pool of two SMT cores, a CPU loop on every Linux vCPU at
    // once; thousands of checked switches, 0 overlaps, both shells answer.
    QemuScenario::new(
        "qemu-virt-linux-pair-gicv3",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Linux {
            config: LINUX_PAIR_CONFIG,
            run: LinuxRun::Pair,
            also: &[],
        },
    )
    .min_switches(2000),
    QemuScenario::new(
        "qemu-virt-linux-pair-gicv2",
        "qemu-virt",
        Gic::V2,
        SMT_SMP,
        Check::Linux {
            config: LINUX_PAIR_CONFIG,
            run: LinuxRun::Pair,
            also: &[],
        },
    )
    .min_switches(2000),
    // A minute of idle Linux (GICv3): no BUG/WARNING/Oops/stall. Kept out of
    // the default run for its length; `cargo xtask test --pending` runs it.
    QemuScenario::new(
        "qemu-virt-linux-idle",
        "qemu-virt",
        Gic::V3,
        SMT_SMP,
        Check::Linux {
            config: LINUX_CONFIG,
            run: LinuxRun::Idle,
            also: &[],
        },
    )
    .min_switches(2000)
    .pending("a one-minute idle run; not needed on every CI run"),
    // A Linux kernel that panics and spins (GICv3): the test guests keep
    // counting and the hypervisor keeps logging after its panic.
    QemuScenario::new(
        "qemu-virt-linux-panic",
        "qemu-virt",
        Gic::V3,
        LINUX_PANIC_SMP,
        Check::Linux {
            config: LINUX_PANIC_CONFIG,
            run: LinuxRun::Panic,
            also: &[],
        },
    )
    .min_switches(200),
];
