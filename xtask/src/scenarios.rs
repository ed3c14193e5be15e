//! The QEMU scenarios `cargo xtask test` boots, and what each must print.
//!
//! The hypervisor's log lines start with `[cpuN] LEVEL ` and are matched by
//! substring, so the prefix and level may change without breaking these.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ::tests::{Expectation, Scenario};

use crate::board::Board;
use crate::qemu::{self, Gic, RunOptions};

/// How long a scenario with guests may take to show everything it expects.
pub const GUESTS_TIMEOUT: Duration = Duration::from_secs(150);

/// The Linux guest's config.
pub const LINUX_CONFIG: &str = "boards/configs/tests/linux.toml";

/// The reproducer of the open EL2 crash: [`LINUX_CONFIG`] with a contender
/// that never stops.
pub const LINUX_CONTENDED_CONFIG: &str = "boards/configs/tests/linux-contended.toml";

/// The kvm-unit-tests scenario's config: the suite's arm64 images as domains.
pub const KVM_UNIT_TESTS_CONFIG: &str = "boards/configs/tests/kvm-unit-tests.toml";

/// What each of [`KVM_UNIT_TESTS_CONFIG`]'s fourteen domains prints when all
/// its tests passed.
const KVM_UNIT_TESTS_PASSES: &[&str] = &[
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
const KVM_UNIT_TESTS_TIMER_PASSES: &[&str] = KVM_UNIT_TESTS_PASSES.split_at(1).0;

/// kvm-unit-tests' sieve, alone (pending: minutes under TCG).
pub const KVM_UNIT_TESTS_SIEVE_CONFIG: &str = "boards/configs/tests/kvm-unit-tests-sieve.toml";

/// Pass-through: QEMU virt's PL031 given to kvm-unit-tests' pl031.flat,
/// and devices the hypervisor keeps refused.
pub const PASSTHROUGH_CONFIG: &str = "boards/configs/tests/passthrough.toml";

/// What the pass-through config prints when it works: the RTC domain's
/// tests pass (its interrupt pending exactly while the device asserts it,
/// delivered, cleared), and each device the hypervisor keeps is refused.
const PASSTHROUGH_PASSES: &[&str] = &[
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
const KVM_UNIT_TESTS_GICV2_PASSES: &[&str] = KVM_UNIT_TESTS_PASSES.split_at(3).0;

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
const LINUX_PANIC_SMP: &str = "4,clusters=1,cores=2,threads=2";

/// What Linux prints once its panic message is complete; it then spins in
/// panic's loop for good (`panic=0`).
const LINUX_PANIC_END: &str = "---[ end Kernel panic - not syncing";

/// How long the Linux scenarios may take: about a minute to the ready line
/// alone on an idle two-core host; with a reboot and other builds sharing the
/// host (load 20 on two cores) the GICv3 run took 270 s.
pub const LINUX_TIMEOUT: Duration = Duration::from_secs(480);

/// What Linux prints when it finds a bug in itself or a stuck CPU.
const LINUX_FAILURE_PATTERNS: &[&str] = &[
    "BUG:",
    "WARNING:",
    "Oops",
    "self-detected stall",
    "rcu_preempt detected stalls",
    "Unable to handle kernel",
    "Internal error:",
];

/// How long a UEFI boot may take to show everything: edk2 itself, then the
/// hypervisor, then its guests.
pub const UEFI_TIMEOUT: Duration = Duration::from_secs(180);

/// How long one boot may take: TCG on two shared host cores is slow.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a scenario checks.
#[derive(Debug)]
pub enum Check {
    /// A normal boot of `cpus` CPUs that reports this topology
    /// (`sockets=… clusters=… cores=… threads=…`, all totals).
    Boot {
        /// The expected topology line's values.
        topology: &'static str,
        /// How many CPUs come online.
        cpus: usize,
    },
    /// Boot with QEMU's own device tree edited by this DTS fragment (appended
    /// to the decompiled tree, e.g. `/delete-node/`): the hypervisor must say
    /// what is wrong with the device tree and stop cleanly, without an
    /// exception dump.
    BadDeviceTree {
        /// The DTS fragment.
        edit: &'static str,
    },
    /// An x86 boot whose command line (`hv.test-silent-ap=CPU`) makes one AP
    /// park without reporting in, as an AP that never answers its
    /// INIT-SIPI-SIPI: the boot CPU must name it, leave it out, and bring up
    /// the rest, the config's pools (without that CPU) and their guests.
    X86SilentAp {
        /// The CPU that stays silent.
        cpu: usize,
        /// How many CPUs QEMU has.
        cpus: usize,
        /// The config the image is built with.
        config: &'static str,
        /// Guest lines that must each appear.
        expect: &'static [&'static str],
    },
    /// A normal x86 boot (q35, ACPI): like [`Check::Boot`], with the local
    /// APIC mode line in place of the GIC line.
    X86Boot {
        /// The expected topology line's values.
        topology: &'static str,
        /// How many CPUs come online.
        cpus: usize,
        /// The APIC mode the hypervisor must choose (`xAPIC` or `x2APIC`).
        apic: &'static str,
        /// The start of the SVM line (`svm: available (npt yes` or
        /// `svm: not available`): the host must come up either way.
        svm: &'static str,
    },
    /// An x86 boot whose command line (`-append`) makes the boot CPU read an
    /// unmapped address after the banner: the exception report must name the
    /// page fault, its error code, RIP, CR2 and the CPU, and park only it.
    X86Fault {
        /// The `-append` command line.
        append: &'static str,
        /// CR2 as the report prints it.
        cr2: &'static str,
    },
    /// Boot an image whose config (a path from the repository root) runs a
    /// peer's test suite (kvm-unit-tests) as its domains, from the user's
    /// own image files: each of `passes` (a domain's own pass line) must
    /// appear and no line may report a failed check (`FAIL: `). No
    /// co-residency bar: the suite's domains are not core-scheduled.
    PeerSuite {
        /// The config the image is built with.
        config: &'static str,
        /// Lines the suite prints when a domain's tests all passed
        /// (`[domN] ...`: whole lines), and hypervisor log lines the run
        /// needs (contained: their `[cpuN] LEVEL` prefix varies).
        passes: &'static [&'static str],
        /// How long the whole run may take.
        timeout: Duration,
        /// Extra QEMU arguments (a second UART for a device to pass through).
        qemu_args: &'static [&'static str],
    },
    /// Boot an image whose config (`config`, a path from the repository root;
    /// `None` for the board's default) runs guests, and check what they print:
    /// every line of `expect` must appear, in any order. The co-residency
    /// checker must report switches checked and no overlap.
    Guests {
        /// The config the image is built with.
        config: Option<&'static str>,
        /// Substrings that must each appear in some line.
        expect: &'static [&'static str],
        /// ERROR lines that are expected (e.g. a domain stopped on purpose).
        allow: &'static [&'static str],
    },
    /// Boot an image whose config (a path from the repository root) keeps
    /// pools of one-, two- and four-CPU resources switching: the hypervisor's
    /// `sched: switch cost` line must show figures for all of them (a save+load,
    /// plain switch events, and synchronised switches of 2 and 4 CPUs). `cargo xtask
    /// bench-hv` runs the same scenario under `-icount` for the figures.
    SwitchCost {
        /// The config the image is built with.
        config: &'static str,
    },
    /// Like [`Check::Guests`] (no ERROR line allowed), plus sequences of
    /// substrings that must each appear in this order (each line strictly
    /// after the one before): a domain that starts twice, progress after an
    /// event.
    GuestsInOrder {
        /// The config the image is built with (a path from the repository root).
        config: &'static str,
        /// Substrings that must each appear in some line.
        expect: &'static [&'static str],
        /// Substrings that must appear in this order.
        sequences: &'static [&'static [&'static str]],
    },
    /// Boot an image whose config (a path from the repository root) runs
    /// CPU-bound domains in one pool, and compare the CPU time the
    /// hypervisor's `sched: runtime at T ms: domN R ns, …` lines (one a
    /// second) give two of them: over the lines after the first `warmup`,
    /// `heavy`'s run time divided by `light`'s must be within `tolerance`
    /// (relative) of `ratio`. Checked by [`QemuScenario::verify`] once
    /// `warmup + window + 1` runtime lines have been printed.
    CpuShare {
        /// The config the image is built with.
        config: &'static str,
        /// The domain expected to get less (its number, as in `[domN]`).
        light: u32,
        /// The domain expected to get `ratio` times as much.
        heavy: u32,
        /// heavy / light.
        ratio: f64,
        /// Allowed relative deviation from `ratio` (0.10 = 10 %).
        tolerance: f64,
        /// Runtime lines skipped before the window (boot, warm-up).
        warmup: usize,
        /// Runtime lines (seconds) the window spans.
        window: usize,
        /// Run under `-icount` ([`SHARE_ICOUNT`]): virtual time follows the
        /// instructions executed. A reservation scheduler (rt, arinc653)
        /// ends a domain's budget or window with a timer; on a loaded
        /// 2-core host TCG delivers that timer late whenever the host does
        /// not run the vCPU's thread, the domain overruns by that much
        /// (2 ms budgets became 3.3 ms while a build ran beside the soak),
        /// and the share measures the host, not the scheduler.
        icount: bool,
    },
    /// Like [`Check::Guests`], with console input (maybe none) and ordered
    /// lines: each `(after, typed)` pair types `typed` once a line containing
    /// `after` has appeared (in order).
    /// The serial port is plain stdio (no QEMU monitor multiplexed on it), so
    /// Ctrl-A (`\x01`) reaches the hypervisor as typed.
    Interactive {
        /// The config the image is built with.
        config: &'static str,
        /// Substrings that must each appear in some line.
        expect: &'static [&'static str],
        /// ERROR lines that are expected.
        allow: &'static [&'static str],
        /// What to type, and after which line.
        input: &'static [(&'static str, &'static str)],
        /// Substrings that must appear in lines in this order (e.g. a
        /// domain's progress after it was moved).
        ordered: &'static [&'static str],
        /// A kernel command line (`-append`), if any.
        append: Option<&'static str>,
    },
    /// The fault `hv.test-break-cosched=CPUS` planted (`cpus` skip their
    /// core-scheduling rendezvous waits) on a config whose core pool holds
    /// several domains: the co-residency checker must report OVERLAPs. Its
    /// twin without the fault proves 0 on the same config.
    BrokenCoscheduling {
        /// The config (a path from the repository root).
        config: &'static str,
        /// The CPUs that skip their waits.
        cpus: &'static [usize],
    },
    /// Boot `config` with the scheduler trace recording from boot
    /// (`hv.trace`), dumped on the console after `seconds`
    /// (`hv.trace-dump`); the dump must decode, and the promise is checked
    /// from the trace alone ([`trace::analysis::sibling_overlaps`]): with
    /// `break_cosched` empty, no overlap and at least `min_handovers` domain
    /// handovers on shared resources (so there was something to break);
    /// with the fault `hv.test-break-cosched=CPUS` planted, overlaps.
    Trace {
        /// The config (a path from the repository root).
        config: &'static str,
        /// Seconds traced.
        seconds: u32,
        /// The CPUs that skip their rendezvous waits (the planted fault).
        break_cosched: &'static [usize],
        /// Handovers the trace must show on shared resources.
        min_handovers: usize,
        /// Domains (by name) whose vCPUs must run, and only on these CPUs
        /// (their hard affinity), as the trace shows.
        pinned: &'static [(&'static str, &'static [usize])],
        /// A domain (by name) and whether its vCPUs must stay one per sched
        /// resource (spread placement: under 1 % of its run time two of
        /// them on one resource) or must share (fixed placement packing a
        /// unit onto a core: over 25 %), as the trace shows.
        sharing: Option<(&'static str, bool)>,
    },
    /// A board boot with guests: every line of [`Check::Boot`], then every
    /// line of `expect` (the board's own banner lines and the guests'
    /// progress), in any order. Unlike [`Check::Guests`] it does not need the
    /// co-residency checker (boards without SMT have no shared resources).
    BootWithGuests {
        /// The expected topology line's values.
        topology: &'static str,
        /// How many CPUs come online.
        cpus: usize,
        /// The config the image is built with (`None`: the board's default).
        config: Option<&'static str>,
        /// A DTS fragment applied to QEMU's own device tree (as for
        /// [`Check::BadDeviceTree`]), or `None` for the board's tree.
        dtb_edit: Option<&'static str>,
        /// Substrings that must each appear in some line.
        expect: &'static [&'static str],
    },
    /// Boot `config`: Debian's kernel in a 4-vCPU domain (dom1) of a
    /// core-scheduled pool beside two test-guest domains (dom2, dom3). Linux
    /// must reach its ready line with `nproc=4`, the test guests must keep
    /// counting after it, the co-residency checker must find no overlap, and
    /// the kernel must print nothing it marks as a bug. With
    /// [`LinuxRun::Panic`] the kernel has two vCPUs and panics instead; the
    /// rest must go on after it.
    Linux {
        /// The config (a path from the repository root).
        config: &'static str,
        /// `Smoke`: commands typed at its shell, then power-off; `Idle`: a
        /// minute at the shell with nothing bad printed; `Panic`: a kernel
        /// panic the other domains survive.
        run: LinuxRun,
        /// Whole lines other domains must print too.
        also: &'static [&'static str],
    },
    /// A UEFI + ACPI boot (edk2 loads the EFI image from a FAT drive; no
    /// device tree): the banner of [`Check::Boot`] with the topology from the
    /// MADT/PPTT, then the guests of the board's config (`expect`, as in
    /// [`Check::Guests`]) and the co-residency report.
    UefiBoot {
        /// The expected topology line's values.
        topology: &'static str,
        /// How many CPUs come online.
        cpus: usize,
        /// Guest lines that must each appear.
        expect: &'static [&'static str],
    },
    /// The UEFI image on firmware that hands over no ACPI tables (QEMU
    /// `acpi=off`: edk2 then installs only a device tree): the application
    /// must say so on the UEFI console and return to the firmware before
    /// exiting boot services.
    UefiNoAcpi,
    /// Boot with a device tree that names one CPU more than the machine has
    /// (`mpidr`): PSCI refuses to start it, and the hypervisor must leave it
    /// out, say so, and bring up the `cpus` real ones.
    RefusedCpu {
        /// The DTS fragment adding the CPU node.
        edit: &'static str,
        /// The phantom CPU's MPIDR as the log prints it.
        mpidr: &'static str,
        /// How many CPUs really come online.
        cpus: usize,
    },
}

/// What a [`Check::Linux`] scenario does once Linux is up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinuxRun {
    /// Typed at the shell ([`LINUX_SMOKE_INPUT`]): `cat /proc/interrupts`
    /// (every vCPU must have taken timer interrupts), a CPU loop pinned to
    /// each vCPU; with `reboot`, then `reboot -f` (PSCI SYSTEM_RESET: the
    /// domain restarts and Linux boots again); then `poweroff -f`: only dom1
    /// stops.
    Smoke {
        /// Reboot once before the power-off.
        reboot: bool,
    },
    /// Idle at the shell for [`LINUX_IDLE`].
    Idle,
    /// Two 2-vCPU kernels (dom1 and dom2) in one core-scheduled pool with a
    /// test guest: once both are up, each runs a CPU loop pinned to each of
    /// its vCPUs ([`LINUX_PAIR_INPUT`]), then both shells must answer.
    Pair,
    /// A 2-vCPU kernel that panics during boot (no init) and spins: the
    /// other domains and the hypervisor must go on after its panic message.
    Panic,
}

/// What the smoke scenarios type at Linux's shell, each once a line
/// containing the first string has appeared. Outputs the checks look for are
/// computed by the shell (`$((1 + 1))`, `${39}`), so the terminal's echo of the
/// typed command cannot match them.
pub const LINUX_SMOKE_INPUT: &[(&str, &str)] = &[
    (
        "Enter 'help' for a list of built-in commands.",
        "cat /proc/interrupts\n",
    ),
    (
        "Err:",
        "for c in 0 1 2 3; do taskset -c $c sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i + 1)); done; set -- $(cat /proc/self/stat); echo \"loop $0 done on cpu ${39}\"' $c & done; wait; echo loops-$((1 + 1))-finished\n",
    ),
];

/// What the smoke scenarios type to reboot Linux (after the loops), then to
/// power it off once it is back.
pub const LINUX_REBOOT_INPUT: &[(&str, &str)] = &[
    ("loops-2-finished", "reboot -f\n"),
    (
        "Enter 'help' for a list of built-in commands.",
        "poweroff -f\n",
    ),
];

/// What the smoke scenarios type to power Linux off after the loops.
pub const LINUX_POWEROFF_INPUT: &[(&str, &str)] = &[("loops-2-finished", "poweroff -f\n")];

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

/// One QEMU scenario.
#[derive(Debug)]
pub struct QemuScenario {
    /// Step name, as `--only` matches it.
    pub name: &'static str,
    /// The board (`xtask --board` name) whose image it boots.
    pub board: &'static str,
    /// GIC version (ARM boards; ignored on x86).
    pub gic: Gic,
    /// `-cpu` model, if not the board's default.
    pub cpu: Option<&'static str>,
    /// `-smp` value.
    pub smp: &'static str,
    /// What it checks.
    pub check: Check,
    /// The co-residency check's bar, for the scenarios that check the
    /// promise: the busiest shared resource must reach this many checked
    /// switches with 0 overlaps (a total over idle resources proves
    /// nothing). 0 for the scenarios without the check.
    pub min_switches: u64,
    /// `Some(reason)` keeps it out of the default run (it still runs with
    /// `cargo xtask test --pending`). Delete the reason to enable it for good.
    pub pending: Option<&'static str>,
}

/// `-smp` with SMT: two clusters of two cores of two threads.
const SMT_SMP: &str = "8,clusters=2,cores=2,threads=2";

/// The SVM line of a CPU with SVM and nested paging.
const SVM_WITH_NPT: &str = "svm: available (npt yes";

/// x86 `-smp` with SMT: one socket, four cores of two threads.
const X86_SMT_SMP: &str = "8,sockets=1,cores=4,threads=2";

/// The x86 boot line saying instruction lengths come from decoding the
/// guest's code (TCG saves no next RIP): every exit of these scenarios that
/// skips an instruction goes through the decoder.
const X86_DECODED_LENGTHS: &str =
    "svm: no next RIP saving (NRIPS): instruction lengths are decoded from the guest's code";

/// What the guests of boards/configs/qemu-virt.toml print when they all work:
/// progress from every compute vCPU, the virtual-SGI ping-pong (dom2), the
/// virtual-timer sleeper in the null pool (dom4), and every domain finishing.
const DEFAULT_CONFIG_GUEST_LINES: &[&str] = &[
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

/// What the guests of boards/configs/qemu-x86.toml print when they all work
/// (with every skipped instruction's length decoded from their code):
/// progress from every vCPU of both pools, the x2APIC IPI ping-pong (dom2, in
/// the core-scheduled pool), the TSC-deadline sleepers (dom1), every domain
/// finishing.
const X86_DEFAULT_CONFIG_GUEST_LINES: &[&str] = &[
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

/// The DTS fragment that makes QEMU virt's default 8 CPUs (two clusters of
/// four, `cpu@0`..`cpu@7`) big.LITTLE: cluster 0 LITTLE (485, a Cortex-A53's
/// figure in Linux's device trees), cluster 1 big (1024).
const BIG_LITTLE_CAPACITIES: &str = "/ { cpus { \
    cpu@0 { capacity-dmips-mhz = <485>; }; cpu@1 { capacity-dmips-mhz = <485>; }; \
    cpu@2 { capacity-dmips-mhz = <485>; }; cpu@3 { capacity-dmips-mhz = <485>; }; \
    cpu@4 { capacity-dmips-mhz = <1024>; }; cpu@5 { capacity-dmips-mhz = <1024>; }; \
    cpu@6 { capacity-dmips-mhz = <1024>; }; cpu@7 { capacity-dmips-mhz = <1024>; }; }; };";

/// [`BIG_LITTLE_CAPACITIES`] with Xen's boot-time cpupools as its
/// docs/misc/arm/device-tree/cpupools.txt shows them (an A53 pool with the
/// default scheduler, an A72 pool with `cpupool-sched`, here `null`) and two
/// dom0less domain nodes placing the domains `fast` and `slow`.
const XEN_CPUPOOLS_DT: &str = "/ { cpus { \
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
const AMPERE_CONFIG_GUEST_LINES: &[&str] = &[
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

/// `first`, then `rest`: a twin scenario's expectations with one line more.
const fn with_first<const N: usize>(
    first: &'static str,
    rest: &[&'static str],
) -> [&'static str; N] {
    assert!(N == rest.len() + 1, "with_first: N must be rest.len() + 1");
    let mut all = [""; N];
    all[0] = first;
    let mut i = 0;
    while i < rest.len() {
        all[i + 1] = rest[i];
        i += 1;
    }
    all
}

/// What the console-input scenarios type, and after which line.
const CONSOLE_INPUT_TYPED: &[(&str, &str)] = &[
    ("[dom1] test-guest: echo ready", "hello dom1\n\x01\x01\x01"),
    ("console input now goes to dom2", "x\x01\x01\x01"),
    (
        "console input now goes to the hypervisor",
        "help\n\x01\x01\x01",
    ),
    ("console input now goes to dom1", "quit\n"),
];

/// The lines both console-input scenarios must show.
const CONSOLE_INPUT_EXPECT: &[&str] = &[
    "[dom1] test-guest: echo: \"hello dom1\" (10 bytes",
    "*** console input now goes to dom2",
    "*** console input now goes to the hypervisor",
    "move DOMAIN POOL ",
    // Nothing typed for dom2 or the hypervisor reached dom1.
    "[dom1] test-guest: echo: \"quit\" (4 bytes",
    "[dom1] test-guest: all workloads done",
    "[dom2] [vcpu1] progress 5",
];

/// The pool commands the pools-console scenarios type, and after which line.
const POOLS_CONSOLE_TYPED: &[(&str, &str)] = &[
    (
        "console input now goes to dom1",
        "\x01\x01\x01\x01\x01\x01\x01\x01\x01",
    ),
    (
        "console input now goes to the hypervisor",
        "pool-create fast credit2 core\n",
    ),
    ("created pool 2 (fast)", "move 2 nowhere\n"),
    ("error: no pool 'nowhere'", "pool-remove-cpu smt 6\n"),
    (
        "removed CPUs {6-7} from pool 1 (smt)",
        "pool-add-cpu fast 7\n",
    ),
    ("added CPUs {6-7} to pool 2 (fast)", "move dom2 fast\n"),
    (
        "moved dom2 from pool 1 (smt) to pool 2 (fast)",
        "pool-remove-cpu fast 6\n",
    ),
    ("error: removing these CPUs", "pools\ndomains\n"),
    // The xl-style toolstack on the running machine.
    (
        "dom2 (mover): running, pool 2 (fast)",
        "sched-credit2 -d 2 -w 512 -c 50\n",
    ),
    ("dom2 (credit2): weight 512, cap 50", "pin dom1 2\n"),
    (
        "dom1: hard affinity 2, no preference",
        "pool-rename fast quick\n",
    ),
    // xl pause / unpause / destroy.
    ("pool 'fast' is now 'quick'", "pause 3\n"),
    ("dom3: paused", "pause 3\ndomains\n"),
    ("dom3 (neighbour): paused", "unpause 3\n"),
    ("dom3: unpaused", "destroy 4\n"),
    // Once it is gone, it is no domain at all.
    ("domain 4 (contender): torn down", "destroy 4\n"),
    ("error: no domain 4", "restart 1\n"),
];

/// What the pools-console scenarios must show in this order after the move.
const POOLS_CONSOLE_ORDERED: &[&str] = &[
    "moved dom2 from pool 1 (smt) to pool 2 (fast); its vCPUs left their old CPUs",
    "[dom2] [vcpu0] progress",
    "[dom2] [vcpu1] progress",
    "[dom3] [vcpu1] progress",
    "dom3: paused",
    "dom3 (neighbour): paused",
    "dom3: unpaused",
    "[dom3] [vcpu0] progress",
    " 0 overlaps",
];

/// The lines both pools-console scenarios must show.
const POOLS_CONSOLE_EXPECT: &[&str] = &[
    "created pool 2 (fast): credit2, core granularity, no CPUs",
    "error: no pool 'nowhere'",
    "removed CPUs {6-7} from pool 1 (smt); they are free",
    "added CPUs {6-7} to pool 2 (fast)",
    "error: removing these CPUs would leave the 1 domain(s) of cpupool 2 with no CPU",
    "pool 1 (smt): credit2, core granularity, CPUs {4-5}, domains: dom4",
    "pool 0 (general): credit2, cpu granularity, CPUs {0-3}, domains: dom1 dom3",
    "pool 2 (fast): credit2, core granularity, CPUs {6-7}, domains: dom2",
    "dom2 (mover): running, pool 2 (fast)",
    "dom2 (credit2): weight 512, cap 50",
    "dom1: hard affinity 2, no preference",
    "pool 'fast' is now 'quick'",
    "error: domain 3 is paused already",
    "domain 4 (contender): stopped: destroyed by the toolstack",
    "dom4: destroyed",
    "error: no domain 4",
];

/// What the pools-hypercall scenarios must show in this order after the move.
const POOLS_HYPERCALL_ORDERED: &[&str] = &[
    "pools: dom1 POOL_OP MoveDomain { domain: 2, pool: 2 } done; its vCPUs left their old CPUs",
    "pools: dom1 POOL_OP UnpauseDomain { domain: 2 } done",
    "[dom2] [vcpu0] progress",
    "[dom2] [vcpu1] progress",
    "[dom3] [vcpu1] progress",
    " 0 overlaps",
];

/// The lines both pools-hypercall scenarios must show.
const POOLS_HYPERCALL_EXPECT: &[&str] = &[
    "[dom1] test-guest: POOL_OP move to a missing pool refused (NOT_FOUND (-4)), as expected",
    "[dom1] test-guest: POOL_OP move to a pool without CPUs refused (BUSY (-5)), as expected",
    "[dom1] test-guest: moved dom2 to pool 2",
    "[dom1] test-guest: POOL_OP remove the last core of a pool with a domain refused (BUSY (-5)), as expected",
    "[dom1] test-guest: POOL_OP destroy a pool with a domain refused (BUSY (-5)), as expected",
    "[dom1] test-guest: POOL_OP pin the domain to its pool ok",
    "pools: dom1 POOL_OP PinDomain { domain: 2, hard: 192, soft: 64 } done",
    "[dom1] test-guest: POOL_OP pin the domain outside its pool refused (INVALID_PARAMETER (-2)), as expected",
    "[dom1] test-guest: POOL_OP pause the domain ok",
    "[dom1] test-guest: POOL_OP pause it twice refused (BUSY (-5)), as expected",
    "[dom1] test-guest: POOL_OP unpause the domain ok",
    "[dom1] test-guest: POOL_OP set weight 512 ok",
    "[dom1] test-guest: POOL_OP set weight 0 refused (INVALID_PARAMETER (-2)), as expected",
    "[dom1] test-guest: dom2 weight 512 cap 0",
    "[dom1] test-guest: POOL_OP destroy a domain ok",
    "domain 5 (victim): stopped: destroyed by the toolstack",
    "[dom1] test-guest: pool 2: credit2 core granularity, 2 CPUs (bitmap 0xc0), 1 domains",
    "[dom1] test-guest: pool 1: credit2 core granularity, 2 CPUs (bitmap 0x30), 1 domains",
    "[dom1] test-guest: all workloads done",
    "[dom3] test-guest: POOL_OP list failed (DENIED (-3))",
];

/// [`CONSOLE_INPUT_EXPECT`] after the x86 line that must come with it.
const X86_CONSOLE_INPUT_EXPECT: [&str; CONSOLE_INPUT_EXPECT.len() + 1] = with_first(
    "console: input on COM1's interrupt (ISA IRQ 4, GSI 4, pin 4 of I/O APIC 0 at 0xfec00000",
    CONSOLE_INPUT_EXPECT,
);

/// [`POOLS_CONSOLE_EXPECT`] after the ARM line that must come with it: the
/// console's `restart` reloaded the domain.
const ARM_POOLS_CONSOLE_EXPECT: [&str; POOLS_CONSOLE_EXPECT.len() + 1] = with_first(
    "domain 1 (steady): restarted from its image",
    POOLS_CONSOLE_EXPECT,
);

/// [`POOLS_CONSOLE_EXPECT`] after the x86 lines that must come with it
/// (x86 domains cannot be restarted yet: the console says so).
const X86_POOLS_CONSOLE_EXPECT: [&str; POOLS_CONSOLE_EXPECT.len() + 2] = with_first(
    "console: hv.console-input=poll on the command line; polling COM1 every 10 ms from cpu 0's tick",
    &with_first::<{ POOLS_CONSOLE_EXPECT.len() + 1 }>(
        "error: restart is not supported on this architecture",
        POOLS_CONSOLE_EXPECT,
    ),
);

/// [`POOLS_HYPERCALL_EXPECT`] after the x86 line that must come with it.
const X86_POOLS_HYPERCALL_EXPECT: [&str; POOLS_HYPERCALL_EXPECT.len() + 1] =
    with_first(X86_DECODED_LENGTHS, POOLS_HYPERCALL_EXPECT);

/// Two CPU-bound domains of weights 256 and 512 sharing one credit2 CPU
/// (`boards/configs/tests/weights.toml`, on either architecture): over ten
/// seconds after a warm-up the heavier one must get twice the CPU time,
/// within 10 %.
const WEIGHTS_SHARE: Check = Check::CpuShare {
    config: "boards/configs/tests/weights.toml",
    light: 1,
    heavy: 2,
    ratio: 2.0,
    tolerance: 0.10,
    warmup: 3,
    window: 10,
    icount: false,
};

/// Xen's credit under the real hypervisor: weights.toml with credit.
const CREDIT_SHARE: Check = Check::CpuShare {
    config: "boards/configs/tests/credit-weights.toml",
    light: 1,
    heavy: 2,
    ratio: 2.0,
    tolerance: 0.10,
    warmup: 3,
    window: 10,
    icount: false,
};

/// `-icount` of the [`Check::CpuShare`] scenarios that need it: one
/// instruction per virtual ns, and idle time skipped rather than slept.
const SHARE_ICOUNT: &str = "shift=0,sleep=off";

/// rt (RTDS): budgets of 2 and 6 ms every 10 ms, no extra time.
const RT_SHARE: Check = Check::CpuShare {
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
const ARINC653_SHARE: Check = Check::CpuShare {
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
const DEBUG_ISOLATION_CONFIG: &str = "boards/configs/tests/debug-isolation.toml";

/// Every QEMU scenario, in the order they run.
/// What the unit-pause scenarios' domain without `test_hooks` must hear
/// when it tries `TEST_PAUSE_SIBLING`.
const UNIT_PAUSE_REFUSED: &str = "[dom2] test-guest: pause sibling 1 refused: DENIED (-3)";

pub const SCENARIOS: &[QemuScenario] = &[
    QemuScenario {
        name: "qemu-virt-gicv3-boot",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::FLAT_SMP,
        check: Check::Boot {
            topology: "sockets=1 clusters=2 cores=8 threads=8",
            cpus: 8,
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-gicv2-boot",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: qemu::FLAT_SMP,
        check: Check::Boot {
            topology: "sockets=1 clusters=2 cores=8 threads=8",
            cpus: 8,
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-gicv3-smt",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Boot {
            topology: "sockets=1 clusters=2 cores=4 threads=8",
            cpus: 8,
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-gicv2-smt",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::Boot {
            topology: "sockets=1 clusters=2 cores=4 threads=8",
            cpus: 8,
        },
        min_switches: 0,
        pending: None,
    },
    // QEMU refuses a truncated DTB itself (load_device_tree: FDT_ERR_NOSPACE),
    // so the hypervisor is given well-formed trees that lack what it cannot
    // run without: the interrupt controller, the CPUs. Truncated and corrupt
    // blobs are covered by the device-tree parser's host tests.
    QemuScenario {
        name: "qemu-virt-bad-dtb",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::FLAT_SMP,
        check: Check::BadDeviceTree {
            edit: "/ { /delete-node/ intc@8000000; };",
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-psci-refuses-cpu",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::FLAT_SMP,
        check: Check::RefusedCpu {
            edit: "/ { cpus { cpu@100 { device_type = \"cpu\"; compatible = \"arm,cortex-a72\"; \
                   reg = <0x100>; enable-method = \"psci\"; }; }; };",
            mpidr: "0x100",
            cpus: 8,
        },
        min_switches: 0,
        pending: None,
    },
    // Guests under the default config (boards/configs/qemu-virt.toml) on the
    // SMT topology: a credit2 pool, a core-scheduled pool with two domains,
    // and a null pool with a real-time sleeper.
    QemuScenario {
        name: "qemu-virt-guests-gicv3",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Guests {
            config: None,
            expect: DEFAULT_CONFIG_GUEST_LINES,
            allow: &[],
        },
        min_switches: 50,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-guests-gicv2",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::Guests {
            config: None,
            expect: DEFAULT_CONFIG_GUEST_LINES,
            allow: &[],
        },
        min_switches: 50,
        pending: None,
    },
    // Isolation: one domain reads memory it does not own and is stopped with a
    // line naming it, its vCPU, the address and the instruction (`fail_stop`);
    // another takes an abort for the same read and goes on; another
    // powers itself off with PSCI SYSTEM_OFF; the others keep making progress
    // afterwards.
    QemuScenario {
        name: "qemu-virt-guests-isolation",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Guests {
            config: Some("boards/configs/tests/isolation.toml"),
            expect: &[
                "(rogue): stopped: vCPU 0",
                "(quitter): stopped: powered off (PSCI SYSTEM_OFF)",
                "[dom1] [vcpu0] progress 40",
                "[dom1] [vcpu1] progress 40",
                "[dom3] [vcpu0] progress 40",
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
        min_switches: 50,
        pending: None,
    },
    // Three domains contend for a core pool of two SMT cores: many checked
    // switches on one core, no overlap. Its twin below plants a fault and
    // must see the overlap, so this 0 means something.
    QemuScenario {
        name: "qemu-virt-cosched",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Guests {
            config: Some("boards/configs/tests/cosched.toml"),
            expect: &["[dom1] [vcpu1] progress 20", "[dom2] [vcpu1] progress 20"],
            allow: &[],
        },
        min_switches: 500,
        pending: None,
    },
    // The same, with both threads of core 4-5 skipping their rendezvous
    // waits (hv.test-break-cosched=4,5): whichever decides a switch kicks
    // its sibling and, without waiting, loads its slot of the new unit while
    // the sibling still runs the old one until the kick reaches it. The
    // checker must report OVERLAPs.
    QemuScenario {
        name: "qemu-virt-cosched-broken",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::BrokenCoscheduling {
            config: "boards/configs/tests/cosched.toml",
            cpus: &[4, 5],
        },
        min_switches: 0,
        pending: None,
    },
    // The same pool traced from boot and checked from the trace alone (a
    // second check of the promise, independent of the co-residency checker's
    // guest-entry logs: this one reads the scheduler's switches): no two
    // threads of a core run different domains at once, across many
    // handovers.
    QemuScenario {
        name: "qemu-virt-trace-cosched",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Trace {
            config: "boards/configs/tests/cosched.toml",
            seconds: 4,
            break_cosched: &[],
            min_handovers: 100,
            pinned: &[],
            sharing: None,
        },
        min_switches: 0,
        pending: None,
    },
    // Spread placement (reference 003): a 4-vCPU domain alone in a pool of
    // four SMT cores runs one vCPU per core, from the trace; the fixed twin
    // packs its two 2-vCPU units onto two cores, so the check can fail.
    QemuScenario {
        name: "qemu-virt-trace-spread",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Trace {
            config: "boards/configs/tests/spread.toml",
            seconds: 3,
            break_cosched: &[],
            min_handovers: 0,
            pinned: &[],
            sharing: Some(("busy", true)),
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-trace-spread-fixed",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Trace {
            config: "boards/configs/tests/spread-fixed.toml",
            seconds: 3,
            break_cosched: &[],
            min_handovers: 0,
            pinned: &[],
            sharing: Some(("busy", false)),
        },
        min_switches: 0,
        pending: None,
    },
    // Hard affinity from the config under credit2, credit and null, checked
    // from the trace: each pinned domain runs, and only on its CPU, while
    // others contend for its pool (boards/configs/tests/affinity.toml).
    QemuScenario {
        name: "qemu-virt-trace-affinity",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Trace {
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
        min_switches: 0,
        pending: None,
    },
    // Its twin with the fault planted: the trace alone must show the
    // overlaps, so the 0 above means something.
    QemuScenario {
        name: "qemu-virt-trace-cosched-broken",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Trace {
            config: "boards/configs/tests/cosched.toml",
            seconds: 4,
            break_cosched: &[4, 5],
            min_handovers: 0,
            pinned: &[],
            sharing: None,
        },
        min_switches: 0,
        pending: None,
    },
    // A vCPU pauses a sibling of its own sched unit (core granularity, fixed
    // units): no hang, the sibling stops and resumes, the pool goes on.
    QemuScenario {
        name: "qemu-virt-guests-unit-pause",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Guests {
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
        min_switches: 50,
        pending: None,
    },
    // A vCPU powered off and on 200 times (CPU_OFF, CPU_ON) while its unit
    // sibling loops TEST_UNPAUSE_SIBLING on it: the guest's unpause never
    // drops the hypervisor's power-off pause, CPU_ON never resets a state a
    // CPU still runs (a "not paused" or "cannot start" line is an ERROR).
    QemuScenario {
        name: "qemu-virt-guests-restart",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Guests {
            config: Some("boards/configs/tests/restart.toml"),
            expect: &[
                "[dom1] test-guest: restart vcpu 1 ok: 200 restarts by CPU_ON; unpause loop: ",
                " INVALID_PARAMETER, 0 other",
                "[dom1] test-guest: all workloads done",
                "[dom2] [vcpu1] progress 20",
            ],
            allow: &[],
        },
        min_switches: 500,
        pending: None,
    },
    // A vCPU powers itself off with PSCI CPU_OFF inside a two-vCPU sched unit
    // (core granularity, fixed units): its unit sibling and the other unit keep
    // running, an SGI does not bring it back, CPU_ON does.
    QemuScenario {
        name: "qemu-virt-guests-cpu-off",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Guests {
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
        min_switches: 50,
        pending: None,
    },
    // PSCI SYSTEM_RESET restarts only that domain (from its image: it starts
    // twice), SYSTEM_OFF tears only that one down (its memory goes back to the
    // heap); the others keep making progress after both.
    QemuScenario {
        name: "qemu-virt-guests-reset",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::GuestsInOrder {
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
        min_switches: 50,
        pending: None,
    },
    // Switch cost: every kind of switch happens and is measured (the figures
    // themselves come from `cargo xtask bench-hv`, under -icount).
    QemuScenario {
        name: SWITCH_COST_SCENARIO,
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::SwitchCost {
            config: "boards/configs/bench/switch-cost.toml",
        },
        min_switches: 100,
        pending: None,
    },
    // Weights (see WEIGHTS_SHARE).
    QemuScenario {
        name: "qemu-virt-guests-weights",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: "2",
        check: WEIGHTS_SHARE,
        min_switches: 0,
        pending: None,
    },
    // Debug registers stay each vCPU's own (see debug-isolation.toml), and
    // the check fails when the switch is broken on purpose.
    QemuScenario {
        name: "qemu-virt-debug-isolation",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Interactive {
            config: DEBUG_ISOLATION_CONFIG,
            expect: &[
                "[dom1] test-guest: debugleak ok",
                "[dom2] test-guest: debugleak ok",
            ],
            allow: &[],
            input: &[],
            ordered: &[],
            append: None,
        },
        min_switches: 50,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-debug-isolation-broken",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Interactive {
            config: DEBUG_ISOLATION_CONFIG,
            expect: &["test-guest: debugleak FAILED: DBGBVR0 read"],
            allow: &[],
            input: &[],
            ordered: &[],
            append: Some("hv.test-break-debug-switch=on"),
        },
        min_switches: 50,
        pending: None,
    },
    // Every other scheduler booted under the real hypervisor, each held to
    // the CPU share its parameters promise.
    QemuScenario {
        name: "qemu-virt-credit-weights",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: "2",
        check: CREDIT_SHARE,
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-rt-budgets",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: "2",
        check: RT_SHARE,
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-arinc653-windows",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: "2",
        check: ARINC653_SHARE,
        min_switches: 0,
        pending: None,
    },
    // Console input: the host UART's receive interrupt, the Ctrl-A x3 input
    // switch, a domain's emulated PL011 receive FIFO and interrupt (the guest
    // reads on the interrupt), the hypervisor's command line.
    QemuScenario {
        name: "qemu-virt-console-input",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Interactive {
            config: "boards/configs/tests/console-input.toml",
            expect: CONSOLE_INPUT_EXPECT,
            allow: &[],
            input: CONSOLE_INPUT_TYPED,
            ordered: &[],
            append: None,
        },
        min_switches: 50,
        pending: None,
    },
    // Runtime cpupool operations by hypercall: the privileged dom1 refuses
    // itself bad operations (missing pool, pool without CPUs, last core of a
    // pool with a domain, destroying a pool with a domain), builds a core
    // pool from a core of the smt pool and moves dom2 there while it runs;
    // dom2 keeps counting and the co-residency checker finds no overlap
    // afterwards; the unprivileged dom3 is refused and keeps counting.
    QemuScenario {
        name: "qemu-virt-pools-hypercall",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Interactive {
            config: "boards/configs/tests/pools-hypercall.toml",
            expect: POOLS_HYPERCALL_EXPECT,
            allow: &[],
            input: &[],
            ordered: POOLS_HYPERCALL_ORDERED,
            append: None,
        },
        min_switches: 50,
        pending: None,
    },
    // The same through the hypervisor console (Ctrl-A x3 until input reaches
    // it): a refused move to a missing pool, a core moved into a new pool,
    // dom2 moved there while it runs, a refused removal of that pool's last
    // core, then `pools` and `domains` show the result.
    QemuScenario {
        name: "qemu-virt-pools-console",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Interactive {
            config: "boards/configs/tests/pools-console.toml",
            expect: &ARM_POOLS_CONSOLE_EXPECT,
            allow: &[],
            input: POOLS_CONSOLE_TYPED,
            ordered: POOLS_CONSOLE_ORDERED,
            append: None,
        },
        min_switches: 50,
        pending: None,
    },
    // null with more vCPUs than CPUs after a move: the moved domain waits
    // in null's queue (also while the pool's resident is paused: as in Xen,
    // a paused vCPU keeps its CPU) until the resident is destroyed, then
    // takes the freed CPUs and computes.
    QemuScenario {
        name: "qemu-virt-null-queue",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Interactive {
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
        min_switches: 20,
        pending: None,
    },
    // A long soak: the Linux smoke run with a contender that keeps taking
    // Linux's cores for the whole run (about 8 minutes, so not on every CI
    // run). It found issue 14's EL2 stack leak: every vCPU-to-idle switch
    // kept the stack of what it replaced, and about 60 s in a CPU's stack
    // overflowed into the heap and EL2 jumped to 0x0 or 0x11. Every scenario
    // now catches that leak at once (the idle loop logs an ERROR when it is
    // entered deeper than it started); this one shows Linux boots anyway.
    QemuScenario {
        name: "qemu-virt-linux-reboot-contended",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Linux {
            config: LINUX_CONTENDED_CONFIG,
            run: LinuxRun::Smoke { reboot: true },
            also: &[],
        },
        min_switches: 2000,
        pending: Some("an 8-minute soak; not needed on every CI run"),
    },
    // Two user images: the Debian kernel with its initramfs as files, and a
    // kvm-unit-tests .flat in Linux's core pool (issue 16's "done when").
    QemuScenario {
        name: "qemu-virt-user-images",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Linux {
            config: USER_IMAGES_CONFIG,
            run: LinuxRun::Smoke { reboot: false },
            also: &["[dom4] EXIT: STATUS=1"],
        },
        min_switches: 100,
        pending: None,
    },
    // Debian's arm64 kernel as a 4-vCPU domain of a core-scheduled pool.
    QemuScenario {
        name: "qemu-virt-linux-gicv3",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Linux {
            config: LINUX_CONFIG,
            run: LinuxRun::Smoke { reboot: true },
            also: &[],
        },
        min_switches: 2000,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-linux-gicv2",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::Linux {
            config: LINUX_CONFIG,
            run: LinuxRun::Smoke { reboot: false },
            also: &[],
        },
        min_switches: 2000,
        pending: None,
    },
    // kvm-unit-tests' arm64 tests that pass here, each a domain booted from
    // the user's own image file (the prebuilt suite in ../shared/fixtures):
    // every domain prints the suite's pass line, none a FAIL line.
    QemuScenario {
        name: "qemu-virt-kvm-unit-tests",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: KVM_UNIT_TESTS_CONFIG,
            passes: KVM_UNIT_TESTS_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
        min_switches: 0,
        pending: None,
    },
    // The same tests on GICv2 (gic.flat then checks the GICv2 distributor
    // and the CPU interface the hypervisor maps through).
    QemuScenario {
        name: "qemu-virt-kvm-unit-tests-gicv2",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: KVM_UNIT_TESTS_CONFIG,
            passes: KVM_UNIT_TESTS_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
        min_switches: 0,
        pending: None,
    },
    // kvm-unit-tests' timer test alone: the virtual and the EL1 physical
    // timer, their level-sensitive interrupt lines and latencies.
    QemuScenario {
        name: "qemu-virt-kvm-unit-tests-timer",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: KVM_UNIT_TESTS_TIMER_CONFIG,
            passes: KVM_UNIT_TESTS_TIMER_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-kvm-unit-tests-timer-gicv2",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: KVM_UNIT_TESTS_TIMER_CONFIG,
            passes: KVM_UNIT_TESTS_TIMER_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
        min_switches: 0,
        pending: None,
    },
    // kvm-unit-tests' sieve: paging at scale (100 MB mapped page by page).
    QemuScenario {
        name: "qemu-virt-kvm-unit-tests-sieve",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: KVM_UNIT_TESTS_SIEVE_CONFIG,
            passes: KVM_UNIT_TESTS_TIMER_PASSES,
            timeout: Duration::from_secs(1200),
            qemu_args: &[],
        },
        min_switches: 0,
        pending: Some("three 100 MB sieves take minutes under TCG; not needed on every CI run"),
    },
    // A device passed through: QEMU virt's PL031 RTC to kvm-unit-tests'
    // pl031.flat, on a GICv3 and a GICv2 host; the hypervisor's own
    // devices and RAM refused.
    QemuScenario {
        name: "qemu-virt-passthrough",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: PASSTHROUGH_CONFIG,
            passes: PASSTHROUGH_PASSES,
            timeout: GUESTS_TIMEOUT,
            // QEMU virt's second UART, for the domain that is given it.
            qemu_args: &["-serial", "null"],
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-passthrough-gicv2",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: PASSTHROUGH_CONFIG,
            passes: PASSTHROUGH_PASSES,
            timeout: GUESTS_TIMEOUT,
            // QEMU virt's second UART, for the domain that is given it.
            qemu_args: &["-serial", "null"],
        },
        min_switches: 0,
        pending: None,
    },
    // The emulated GICv2 distributor's registers (gic.flat mmio).
    QemuScenario {
        name: "qemu-virt-kvm-unit-tests-gicv2-mmio",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::PeerSuite {
            config: KVM_UNIT_TESTS_GICV2_CONFIG,
            passes: KVM_UNIT_TESTS_GICV2_PASSES,
            timeout: GUESTS_TIMEOUT,
            qemu_args: &[],
        },
        min_switches: 0,
        pending: None,
    },
    // Linux against Linux: two 2-vCPU kernels and a test guest in one
    // core-scheduled pool of two SMT cores, a CPU loop on every Linux vCPU at
    // once; thousands of checked switches, 0 overlaps, both shells answer.
    QemuScenario {
        name: "qemu-virt-linux-pair-gicv3",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Linux {
            config: LINUX_PAIR_CONFIG,
            run: LinuxRun::Pair,
            also: &[],
        },
        min_switches: 2000,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-linux-pair-gicv2",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V2,
        smp: SMT_SMP,
        check: Check::Linux {
            config: LINUX_PAIR_CONFIG,
            run: LinuxRun::Pair,
            also: &[],
        },
        min_switches: 2000,
        pending: None,
    },
    // A minute of idle Linux (GICv3): no BUG/WARNING/Oops/stall. Kept out of
    // the default run for its length; `cargo xtask test --pending` runs it.
    QemuScenario {
        name: "qemu-virt-linux-idle",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: SMT_SMP,
        check: Check::Linux {
            config: LINUX_CONFIG,
            run: LinuxRun::Idle,
            also: &[],
        },
        min_switches: 2000,
        pending: Some("a one-minute idle run; not needed on every CI run"),
    },
    // A Linux kernel that panics and spins (GICv3): the test guests keep
    // counting and the hypervisor keeps logging after its panic.
    QemuScenario {
        name: "qemu-virt-linux-panic",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: LINUX_PANIC_SMP,
        check: Check::Linux {
            config: LINUX_PANIC_CONFIG,
            run: LinuxRun::Panic,
            also: &[],
        },
        min_switches: 200,
        pending: None,
    },
    QemuScenario {
        name: "qemu-virt-bad-dtb-no-cpus",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::FLAT_SMP,
        check: Check::BadDeviceTree {
            edit: "/ { /delete-node/ cpus; };",
        },
        min_switches: 0,
        pending: None,
    },
    // The Raspberry Pi 4 image on QEMU's raspi4b with the real Pi 4 device
    // tree: EL2 entry from the boot stub, GIC-400 with its virtualization
    // interface (QEMU's bcm2838 has it, at the addresses the DT gives), the
    // spin-table secondaries, and the guests of boards/configs/rpi4.toml:
    // compute progress, a virtual-SGI ping-pong and a virtual-timer sleeper.
    QemuScenario {
        name: "rpi4-raspi4b-boot",
        board: "rpi4",
        cpu: None,
        gic: Gic::V2,
        smp: "4",
        check: Check::BootWithGuests {
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
        min_switches: 0,
        pending: None,
    },
    // Xen's boot-time cpupool binding: a device tree with Xen's example
    // pools and dom0less placements, a config without pools.
    QemuScenario {
        name: "qemu-virt-xen-cpupools",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::FLAT_SMP,
        check: Check::BootWithGuests {
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
        min_switches: 0,
        pending: None,
    },
    // The same big.LITTLE machine with a config whose pool takes CPUs of both
    // classes: accepted, with a warning naming them, and its guest runs. The
    // tree's Xen cpupools are ignored: the config's pools win.
    QemuScenario {
        name: "qemu-virt-big-little-mixed",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::FLAT_SMP,
        check: Check::BootWithGuests {
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
        min_switches: 0,
        pending: None,
    },
    // The real Pi 4 device tree without its GIC-400: the hypervisor must say
    // so and stop cleanly.
    QemuScenario {
        name: "rpi4-raspi4b-bad-dtb",
        board: "rpi4",
        cpu: None,
        gic: Gic::V2,
        smp: "4",
        check: Check::BadDeviceTree {
            edit: "/ { soc { /delete-node/ interrupt-controller@40041000; }; \
                   aliases { /delete-property/ gicv2; }; };",
        },
        min_switches: 0,
        pending: None,
    },
    // The console on the mini UART (UART1, QEMU's second serial port): the
    // whole banner and the guests' console lines (the same config as rpi4's:
    // boards/configs/rpi4-mini-uart.toml links to it) must come through it,
    // and console input is routed to its interrupt (the DT's stdout-path).
    QemuScenario {
        name: "rpi4-mini-uart-raspi4b-boot",
        board: "rpi4-mini-uart",
        cpu: None,
        gic: Gic::V2,
        smp: "4",
        check: Check::BootWithGuests {
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
        min_switches: 0,
        pending: None,
    },
    // Console input through the mini UART's receive interrupt: typed text
    // reaches the domain, Ctrl-A x3 hands input to the hypervisor (its
    // `help`) and back.
    QemuScenario {
        name: "rpi4-mini-uart-raspi4b-input",
        board: "rpi4-mini-uart",
        cpu: None,
        gic: Gic::V2,
        smp: "4",
        check: Check::Interactive {
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
        min_switches: 20,
        pending: None,
    },
    // big.LITTLE on QEMU virt: QEMU's own device tree with
    // `capacity-dmips-mhz` added per cluster (cluster 0 LITTLE, cluster 1
    // big, as on an RK3399), and a config without pools: the hypervisor must
    // name the classes, make one pool per class, and run a guest in each.
    QemuScenario {
        name: "qemu-virt-big-little",
        board: "qemu-virt",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::FLAT_SMP,
        check: Check::BootWithGuests {
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
        min_switches: 0,
        pending: None,
    },
    // The Ampere Altra image as a UEFI application: Debian's edk2 on QEMU virt
    // with 16 Neoverse N1 cores in clusters of two (as Altra's); no device tree reaches
    // the hypervisor (ACPI: MADT, PPTT, SPCR, GTDT, FADT; memory from UEFI).
    QemuScenario {
        name: "ampere-uefi-acpi-boot",
        board: "ampere",
        cpu: None,
        gic: Gic::V3,
        smp: qemu::UEFI_DEFAULT_SMP,
        check: Check::UefiBoot {
            topology: "sockets=1 clusters=8 cores=16 threads=16",
            cpus: 16,
            expect: AMPERE_CONFIG_GUEST_LINES,
        },
        min_switches: 20,
        pending: None,
    },
    QemuScenario {
        name: "ampere-uefi-no-acpi",
        board: "ampere",
        cpu: None,
        gic: Gic::V3,
        smp: "2",
        check: Check::UefiNoAcpi,
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-x86-smt",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::X86Boot {
            topology: "sockets=1 clusters=1 cores=4 threads=8",
            cpus: 8,
            apic: "xAPIC",
            svm: SVM_WITH_NPT,
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-x86-two-packages",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: "4,sockets=2,cores=2,threads=1",
        check: Check::X86Boot {
            topology: "sockets=2 clusters=2 cores=4 threads=4",
            cpus: 4,
            apic: "xAPIC",
            svm: SVM_WITH_NPT,
        },
        min_switches: 0,
        pending: None,
    },
    // QEMU's EPYC model has no x2APIC; `+x2apic` adds it, and the hypervisor
    // must then choose it.
    QemuScenario {
        name: "qemu-x86-x2apic",
        board: "qemu-x86",
        cpu: Some("EPYC,+svm,+npt,+x2apic"),
        gic: Gic::V3,
        smp: "4,sockets=1,cores=2,threads=2",
        check: Check::X86Boot {
            topology: "sockets=1 clusters=1 cores=2 threads=4",
            cpus: 4,
            apic: "x2APIC",
            svm: SVM_WITH_NPT,
        },
        min_switches: 0,
        pending: None,
    },
    // An Intel model: TCG emulates neither VMX nor (for Intel vendors without
    // `+svm`) SVM, so the hypervisor must say so and still bring up the host.
    QemuScenario {
        name: "qemu-x86-no-svm",
        board: "qemu-x86",
        cpu: Some("Skylake-Server"),
        gic: Gic::V3,
        smp: "2,sockets=1,cores=1,threads=2",
        check: Check::X86Boot {
            topology: "sockets=1 clusters=1 cores=1 threads=2",
            cpus: 2,
            apic: "x2APIC",
            svm: "svm: not available",
        },
        min_switches: 0,
        pending: None,
    },
    // SVM guests under the default config (boards/configs/qemu-x86.toml) on
    // the SMT topology: a credit2 pool at cpu granularity and a
    // core-scheduled one with two domains; the co-residency checker must
    // find no overlap.
    QemuScenario {
        name: "qemu-x86-guests",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Guests {
            config: None,
            expect: X86_DEFAULT_CONFIG_GUEST_LINES,
            allow: &[],
        },
        min_switches: 50,
        pending: None,
    },
    // Isolation on x86: a domain reads guest-physical memory it does not
    // have; the nested page fault stops it with a line naming it, its vCPU,
    // the address and RIP; the others keep making progress afterwards.
    QemuScenario {
        name: "qemu-x86-guests-isolation",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Guests {
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
            ],
            allow: &["(rogue): stopped", "(crasher): stopped"],
        },
        min_switches: 50,
        pending: None,
    },
    // The same weights on x86 (credit2 over the APIC timer, SVM guests).
    QemuScenario {
        name: "qemu-x86-guests-weights",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: "2",
        check: WEIGHTS_SHARE,
        min_switches: 0,
        pending: None,
    },
    // Guests on an x2APIC host (host IPIs and the tick through the x2APIC
    // MSRs), two threads per core, one core-scheduled pool.
    QemuScenario {
        name: "qemu-x86-x2apic-guests",
        board: "qemu-x86",
        cpu: Some("EPYC,+svm,+npt,+x2apic"),
        gic: Gic::V3,
        smp: "4,sockets=1,cores=2,threads=2",
        check: Check::Guests {
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
        min_switches: 50,
        pending: None,
    },
    // Guests on two packages without SMT: package 0 is one sched resource
    // (socket granularity, both its cores switch together) shared by two
    // domains, package 1 runs a third at cpu granularity. The checker
    // replays package 0's switches and must find no overlap.
    QemuScenario {
        name: "qemu-x86-two-packages-guests",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: "4,sockets=2,cores=2,threads=1",
        check: Check::Guests {
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
        min_switches: 50,
        pending: None,
    },
    // An AP that never answers: CPU 3 (the second thread of core 1) parks
    // before reporting in; the boot CPU leaves it out after its 5 s bound,
    // the core-scheduled pool keeps core 1's other thread and both pools'
    // domains run.
    QemuScenario {
        name: "qemu-x86-silent-ap",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: "4,sockets=1,cores=2,threads=2",
        check: Check::X86SilentAp {
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
        min_switches: 0,
        pending: None,
    },
    // Console input on x86: COM1's receive interrupt through the I/O APIC
    // (ISA IRQ 4 from the MADT), the Ctrl-A x3 input switch, a domain's
    // emulated 16550 receive FIFO and its IRQ 4 through the emulated 8259A
    // to vCPU 0 (the guest reads on vector 0x24 and EOIs the PIC), the
    // hypervisor's command line. The x86 twin of qemu-virt-console-input.
    QemuScenario {
        name: "qemu-x86-console-input",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Interactive {
            config: "boards/configs/tests/x86-console-input.toml",
            expect: &X86_CONSOLE_INPUT_EXPECT,
            allow: &[],
            input: CONSOLE_INPUT_TYPED,
            ordered: &[],
            append: None,
        },
        min_switches: 50,
        pending: None,
    },
    // Runtime cpupool operations through the hypervisor console on x86, as
    // qemu-virt-pools-console, with COM1 polled from the boot CPU's tick
    // (`hv.console-input=poll`: the fallback for a machine whose MADT has no
    // I/O APIC; q35 has one).
    QemuScenario {
        name: "qemu-x86-pools-console",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Interactive {
            config: "boards/configs/tests/x86-pools-console.toml",
            expect: &X86_POOLS_CONSOLE_EXPECT,
            allow: &[],
            input: POOLS_CONSOLE_TYPED,
            ordered: POOLS_CONSOLE_ORDERED,
            append: Some("hv.console-input=poll"),
        },
        min_switches: 50,
        pending: None,
    },
    // x86 twin of qemu-virt-guests-unit-pause: a vCPU pauses a sibling of its
    // own sched unit (core granularity, fixed units) with TEST_PAUSE_SIBLING
    // through VMMCALL: no hang, the sibling stops and resumes, the pool goes
    // on; the exits' instruction lengths are decoded from the guests' code
    // (TCG saves no next RIP).
    QemuScenario {
        name: "qemu-x86-guests-unit-pause",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Interactive {
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
        min_switches: 50,
        pending: None,
    },
    // x86 twins of qemu-virt-cosched and qemu-virt-cosched-broken.
    QemuScenario {
        name: "qemu-x86-cosched",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Guests {
            config: Some("boards/configs/tests/cosched.toml"),
            expect: &["[dom1] [vcpu1] progress 20", "[dom2] [vcpu1] progress 20"],
            allow: &[],
        },
        min_switches: 500,
        pending: None,
    },
    // x86 twin of qemu-virt-trace-cosched: the trace's own check of the
    // promise with APIC IPIs and the TSC clock.
    QemuScenario {
        name: "qemu-x86-trace-cosched",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Trace {
            config: "boards/configs/tests/cosched.toml",
            seconds: 4,
            break_cosched: &[],
            min_handovers: 100,
            pinned: &[],
            sharing: None,
        },
        min_switches: 0,
        pending: None,
    },
    QemuScenario {
        name: "qemu-x86-cosched-broken",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::BrokenCoscheduling {
            config: "boards/configs/tests/cosched.toml",
            cpus: &[4, 5],
        },
        min_switches: 0,
        pending: None,
    },
    // x86 twin of qemu-virt-guests-restart, with native semantics: vCPU 2
    // sends vCPU 1 INIT + STARTUP 200 times while it runs (each STARTUP
    // resets its state in place once its CPU let it go), while vCPU 0 loops
    // TEST_UNPAUSE_SIBLING on it: no host crash, no "not paused" line.
    QemuScenario {
        name: "qemu-x86-guests-restart",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Guests {
            config: Some("boards/configs/tests/x86-restart.toml"),
            expect: &[
                "[dom1] test-guest: restart vcpu 1 ok: 200 restarts by STARTUP; unpause loop: ",
                " INVALID_PARAMETER, 0 other",
                "[dom1] test-guest: all workloads done",
                "[dom2] [vcpu1] progress 20",
            ],
            allow: &[],
        },
        min_switches: 500,
        pending: None,
    },
    // x86 twin of qemu-virt-guests-cpu-off with native semantics
    // (guest_abi::x86): vCPU 1 parks with `cli; hlt` inside a two-vCPU sched
    // unit; an INIT puts it in wait-for-SIPI (the hypervisor says so), a fixed
    // IPI does not wake it, its unit sibling and the other unit keep running,
    // INIT + STARTUP restart it fresh (a second start line) and it rejoins.
    QemuScenario {
        name: "qemu-x86-guests-cpu-off",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Interactive {
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
        min_switches: 50,
        pending: None,
    },
    // x86 twin of qemu-virt-pools-hypercall: POOL_OP through VMMCALL from the
    // privileged dom1 (refusals, a core taken into a new pool, dom2 moved
    // there while it runs, the move returning once its vCPUs left their old
    // CPUs, logged as on ARM); the unprivileged dom3 is refused; 0 overlaps
    // after the move.
    QemuScenario {
        name: "qemu-x86-pools-hypercall",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: X86_SMT_SMP,
        check: Check::Interactive {
            config: "boards/configs/tests/x86-pools-hypercall.toml",
            expect: &X86_POOLS_HYPERCALL_EXPECT,
            allow: &[],
            input: &[],
            ordered: POOLS_HYPERCALL_ORDERED,
            append: None,
        },
        min_switches: 50,
        pending: None,
    },
    QemuScenario {
        name: "qemu-x86-exception-report",
        board: "qemu-x86",
        cpu: None,
        gic: Gic::V3,
        smp: "2,sockets=1,cores=1,threads=2",
        check: Check::X86Fault {
            append: "hv.fault-test=page-fault",
            cr2: "CR2=0x1000000000",
        },
        min_switches: 0,
        pending: None,
    },
];

impl QemuScenario {
    /// Whether this scenario's config names the files `cargo xtask
    /// guest-linux` writes (as a user's own images), so they must exist
    /// before its image is built.
    pub fn needs_linux_guest_files(&self) -> bool {
        self.config() == Some(USER_IMAGES_CONFIG)
    }

    /// The config file this scenario's image is built with, if not the board's.
    pub fn config(&self) -> Option<&'static str> {
        match self.check {
            Check::Guests { config, .. } | Check::BootWithGuests { config, .. } => config,
            Check::Interactive { config, .. } => Some(config),
            Check::CpuShare { config, .. }
            | Check::GuestsInOrder { config, .. }
            | Check::SwitchCost { config } => Some(config),
            Check::Linux { config, .. }
            | Check::X86SilentAp { config, .. }
            | Check::BrokenCoscheduling { config, .. }
            | Check::Trace { config, .. }
            | Check::PeerSuite { config, .. } => Some(config),
            _ => None,
        }
    }

    /// The QEMU options of this scenario (without a replacement DTB).
    pub fn options(&self) -> RunOptions {
        let defaults = match crate::board::find(self.board) {
            Ok(board) => RunOptions::for_board(board),
            Err(_) => RunOptions::default(),
        };
        RunOptions {
            gic: self.gic,
            smp: self.smp.to_string(),
            cpu: self.cpu.map_or(defaults.cpu.clone(), str::to_string),
            ..defaults
        }
    }

    /// The co-residency checker's line this scenario needs: the busiest
    /// shared resource at [`QemuScenario::min_switches`] or more, 0 overlaps.
    fn coresidency(&self) -> Expectation {
        coresidency_at_least(self.min_switches)
    }

    /// What the console must show.
    pub fn expectations(&self) -> Vec<Expectation> {
        match self.check {
            Check::Boot { topology, cpus } => boot_expectations(self.gic, topology, cpus),
            Check::BootWithGuests {
                topology,
                cpus,
                expect,
                ..
            } => {
                let mut all = boot_expectations(self.gic, topology, cpus);
                all.extend(expect.iter().map(|&e| Expectation::contains(e)));
                all
            }
            Check::X86Boot {
                topology,
                cpus,
                apic,
                svm,
            } => x86_boot_expectations(topology, cpus, apic, svm),
            // A domain's lines whole: `EXIT: STATUS=1` must not be met by
            // `STATUS=127`.
            Check::PeerSuite { passes, .. } => passes
                .iter()
                .map(|&e| {
                    if e.starts_with("[dom") {
                        Expectation::line(e)
                    } else {
                        Expectation::contains(e)
                    }
                })
                .collect(),
            Check::Guests { expect, .. } | Check::Interactive { expect, .. } => {
                let mut all: Vec<Expectation> =
                    expect.iter().map(|&e| Expectation::contains(e)).collect();
                if let Check::Interactive { ordered, .. } = self.check
                    && !ordered.is_empty()
                {
                    all.push(Expectation::InOrder(
                        ordered.iter().map(|&e| Expectation::contains(e)).collect(),
                    ));
                }
                all.push(self.coresidency());
                all
            }
            Check::GuestsInOrder {
                expect, sequences, ..
            } => {
                let mut all: Vec<Expectation> =
                    expect.iter().map(|&e| Expectation::contains(e)).collect();
                all.extend(sequences.iter().map(|sequence| {
                    Expectation::InOrder(
                        sequence.iter().map(|&e| Expectation::contains(e)).collect(),
                    )
                }));
                all.push(self.coresidency());
                all
            }
            Check::Linux { run, also, .. } => {
                let mut all = linux_expectations(self.gic, run, self.min_switches);
                all.extend(also.iter().map(|&line| Expectation::line(line)));
                all
            }
            Check::BrokenCoscheduling { cpus, .. } => {
                let mut all = planted_fault_lines(cpus);
                all.push(Expectation::contains(
                    "ERROR coresidency: OVERLAP at counter",
                ));
                all
            }
            Check::Trace { break_cosched, .. } => {
                let mut all = planted_fault_lines(break_cosched);
                all.push(Expectation::contains(crate::trace_capture::END_LINE));
                all
            }
            Check::SwitchCost { .. } => vec![
                Expectation::matching(SWITCH_COST_ALL_KINDS, 1)
                    .expect("a fixed pattern that compiles"),
                self.coresidency(),
            ],
            Check::CpuShare { warmup, window, .. } => vec![
                Expectation::matching(RUNTIME_LINE_PATTERN, warmup + window + 1)
                    .expect("a fixed pattern that compiles"),
            ],
            Check::UefiBoot {
                topology,
                cpus,
                expect,
            } => {
                let mut all = vec![
                    Expectation::contains("hv: UEFI application started"),
                    Expectation::contains("booting on board ampere at EL2 (UEFI, ACPI)"),
                    Expectation::contains("from the UEFI memory map"),
                    Expectation::contains("; ACPI MADT, from the PPTT"),
                    Expectation::contains("acpi: FADT ARM_BOOT_ARCH"),
                    Expectation::contains("timer: GTDT PPIs"),
                ];
                all.extend(boot_expectations(self.gic, topology, cpus));
                all.extend(expect.iter().map(|&e| Expectation::contains(e)));
                all.push(self.coresidency());
                all
            }
            Check::X86Fault { cr2, .. } => vec![
                Expectation::contains("tick: all 2 CPUs ticking"),
                // The report is one line: the tests below check its fields.
                Expectation::InOrder(vec![
                    Expectation::contains("test: reading 0x1000000000 on purpose"),
                    Expectation::contains(
                        "[cpu0] ERROR Unexpected exception 14 (page fault): error code 0x0 RIP=0x",
                    ),
                ]),
                Expectation::contains(format!("{cr2} RSP=0x")),
                Expectation::contains("; parking this CPU"),
            ],
            Check::X86SilentAp {
                cpu, cpus, expect, ..
            } => {
                let online = cpus - 1;
                let mut all = vec![
                    Expectation::contains(format!(
                        "smp: cpu {cpu} (apic id {cpu:#x}) did not come online within 5 s; leaving it out"
                    )),
                    Expectation::contains(format!("smp: {online} of {cpus} CPUs online")),
                    Expectation::contains(format!(
                        "ipi: {} of {} round trips ok",
                        online - 1,
                        online - 1
                    )),
                    Expectation::contains(format!("tick: all {online} CPUs ticking")),
                ];
                // The core pool keeps one thread: no resource is shared, so
                // the co-residency checker has nothing to report.
                all.extend(expect.iter().map(|&e| Expectation::contains(e)));
                all
            }
            Check::UefiNoAcpi => vec![
                Expectation::InOrder(vec![
                    Expectation::contains("hv: UEFI application started"),
                    Expectation::contains("hv: UEFI hands over no ACPI 2.0 RSDP"),
                ]),
                Expectation::contains("not starting"),
            ],
            Check::BadDeviceTree { .. } => vec![
                Expectation::contains("device tree:"),
                Expectation::contains("stopping"),
            ],
            Check::RefusedCpu { mpidr, cpus, .. } => {
                let others = cpus - 1;
                vec![
                    Expectation::contains(format!("(mpidr {mpidr}) failed: PSCI")),
                    Expectation::contains("leaving it out"),
                    Expectation::contains(format!("smp: {cpus} of {} CPUs online", cpus + 1)),
                    Expectation::contains(format!("ipi: {others} of {others} round trips ok")),
                    Expectation::contains(format!("tick: all {cpus} CPUs ticking")),
                ]
            }
        }
    }

    /// The harness scenario that boots `image` on `board`; creates the edited
    /// device tree first if the scenario needs one.
    pub fn prepare(
        &self,
        board: &Board,
        image: &Path,
        output: &Path,
    ) -> Result<Scenario, qemu::SetupError> {
        let mut options = self.options();
        if let Check::X86Fault { append, .. }
        | Check::Interactive {
            append: Some(append),
            ..
        } = self.check
        {
            options.extra = vec!["-append".to_string(), append.to_string()];
        }
        if let Check::X86SilentAp { cpu, .. } = self.check {
            options.extra = vec!["-append".to_string(), format!("hv.test-silent-ap={cpu}")];
        }
        if let Check::BrokenCoscheduling { cpus, .. } = self.check {
            let list: Vec<String> = cpus.iter().map(usize::to_string).collect();
            options.extra = vec![
                "-append".to_string(),
                format!("hv.test-break-cosched={}", list.join(",")),
            ];
        }
        if let Check::Trace {
            seconds,
            break_cosched,
            ..
        } = self.check
        {
            let mut append = crate::trace_capture::append(trace::ClassSet::DEFAULT, seconds);
            if !break_cosched.is_empty() {
                let list: Vec<String> = break_cosched.iter().map(usize::to_string).collect();
                append.push_str(&format!(" hv.test-break-cosched={}", list.join(",")));
            }
            options.extra = vec!["-append".to_string(), append];
        }
        if let Check::PeerSuite { qemu_args, .. } = self.check {
            options.extra = qemu_args.iter().map(|a| a.to_string()).collect();
        }
        if let Check::CpuShare { icount: true, .. } = self.check {
            options.extra = vec!["-icount".to_string(), SHARE_ICOUNT.to_string()];
        }
        if let Check::UefiNoAcpi = self.check {
            // QEMU merges a second -machine into the first.
            options.extra = vec!["-machine".to_string(), "acpi=off".to_string()];
        }
        if let Check::BadDeviceTree { edit }
        | Check::RefusedCpu { edit, .. }
        | Check::BootWithGuests {
            dtb_edit: Some(edit),
            ..
        } = self.check
        {
            options.dtb = Some(edited_dtb(
                board,
                &options,
                edit,
                &output.join("dtb"),
                self.name,
            )?);
        }
        let Some((program, args)) = qemu::command(board, &options) else {
            return Err(qemu::SetupError(format!(
                "{} has no QEMU machine",
                board.name
            )));
        };
        let mut scenario = Scenario::new(self.name, program)
            .args(args)
            .timeout(BOOT_TIMEOUT)
            .log_dir(output.join("qemu-logs"));
        // UEFI boards boot their image from a FAT drive, the others with -kernel.
        scenario = match board.qemu {
            Some((_, crate::board::Machine::VirtUefi)) => {
                scenario.args(qemu::uefi_drive_args(image))
            }
            _ => scenario.kernel(image),
        };
        for expectation in self.expectations() {
            scenario = scenario.expect(expectation);
        }
        if let Check::X86Fault { .. } = self.check {
            // The report is an ERROR line by design; a second exception (a
            // report that faults, or another CPU) or a panic is still a failure.
            scenario = scenario
                .allow("Unexpected exception 14 (page fault)")
                .linger(Duration::from_secs(2));
        }
        if let Check::Interactive { input, .. } = self.check {
            scenario.args = plain_stdio_serial(scenario.args);
            for &(after, typed) in input {
                scenario = scenario.input_after(after, typed);
            }
        }
        if let Check::UefiBoot { .. } = self.check {
            // edk2 takes a while under TCG before the hypervisor starts. Its
            // 16 vCPUs share the host's two cores with everything else, so a
            // cluster's rendezvous can miss its 100 ms bound when QEMU leaves
            // a vCPU thread unscheduled that long: tolerated here (the
            // scheduler recovers and says so); an OVERLAP is still an ERROR
            // line that fails the run.
            scenario = scenario.timeout(UEFI_TIMEOUT).allow("rendezvous timed out");
        }
        if let Check::UefiNoAcpi = self.check {
            // Nothing may follow the refusal: no "exiting boot services", no
            // hypervisor output, no exception dump.
            scenario = scenario
                .timeout(UEFI_TIMEOUT)
                .linger(Duration::from_secs(3));
            scenario.failure_patterns.extend([
                "hv: exiting boot services".to_string(),
                "hypervisor booting".to_string(),
            ]);
        }
        if let Check::Guests { allow, .. } | Check::Interactive { allow, .. } = self.check {
            // Guests run for a while; the co-residency checker reports every
            // two seconds. Its OVERLAP line is an ERROR, so it fails the run.
            scenario = scenario.timeout(GUESTS_TIMEOUT);
            for &line in allow {
                scenario = scenario.allow(line);
            }
        }
        if let Check::CpuShare { .. }
        | Check::GuestsInOrder { .. }
        | Check::BootWithGuests { .. }
        | Check::SwitchCost { .. } = self.check
        {
            scenario = scenario.timeout(GUESTS_TIMEOUT);
        }
        if let Check::PeerSuite { timeout, .. } = self.check {
            // Each domain powers itself off when its tests are done.
            scenario = scenario
                .timeout(timeout)
                .allow("): stopped: powered off (PSCI SYSTEM_OFF)");
            scenario.failure_patterns.push("FAIL: ".to_string());
            // A test that crashed (kvm-unit-tests' own exception report).
            scenario
                .failure_patterns
                .push("Unhandled exception".to_string());
        }
        if let Check::Linux { run, .. } = self.check {
            scenario = scenario
                .timeout(LINUX_TIMEOUT)
                .allow("(linux): stopped: powered off");
            for pattern in LINUX_FAILURE_PATTERNS {
                scenario.failure_patterns.push(pattern.to_string());
            }
            match run {
                LinuxRun::Idle => scenario = scenario.linger(LINUX_IDLE),
                LinuxRun::Pair => {
                    scenario.args = plain_stdio_serial(scenario.args);
                    let ready = |dom: u32| format!("[dom{dom}] {}", crate::linux::READY_LINE);
                    scenario = scenario.input_after_all(&[&ready(1), &ready(2)], LINUX_PAIR_FIRST);
                    for &(after, typed) in LINUX_PAIR_INPUT {
                        scenario = scenario.input_after(after, typed);
                    }
                }
                // Linux's panic message and call trace (`panic+0x…`) are
                // expected here; the hypervisor's own lines (`[cpuN] …`)
                // still fail the run on a panic, exception or ERROR.
                LinuxRun::Panic => scenario = scenario.allow("[dom1] "),
                LinuxRun::Smoke { reboot } => {
                    scenario.args = plain_stdio_serial(scenario.args);
                    let end = if reboot {
                        LINUX_REBOOT_INPUT
                    } else {
                        LINUX_POWEROFF_INPUT
                    };
                    for &(after, typed) in LINUX_SMOKE_INPUT.iter().chain(end) {
                        scenario = scenario.input_after(after, typed);
                    }
                }
            }
        }
        if let Check::SwitchCost { .. } = self.check {
            // Four-CPU rendezvous on a loaded host can outwait their 100 ms
            // bound when QEMU's threads are not scheduled; the figures leave
            // such events out, and an overlap is still an ERROR that fails.
            scenario = scenario.allow("rendezvous timed out");
        }
        if let Check::BrokenCoscheduling { .. } = self.check {
            // The planted fault and the overlaps it causes are ERROR lines by
            // design; a panic, an exception or another ERROR still fails.
            scenario = scenario
                .timeout(GUESTS_TIMEOUT)
                .allow("TEST: cpu ")
                .allow("coresidency: OVERLAP at counter");
        }
        if let Check::Trace { break_cosched, .. } = self.check {
            scenario = scenario.timeout(GUESTS_TIMEOUT);
            if !break_cosched.is_empty() {
                // The planted fault and the co-residency checker's overlaps
                // are ERROR lines by design.
                scenario = scenario
                    .allow("TEST: cpu ")
                    .allow("coresidency: OVERLAP at counter");
            }
        }
        if let Check::X86SilentAp { .. } = self.check {
            // Leaving the CPU out is an ERROR line by design.
            scenario = scenario
                .timeout(GUESTS_TIMEOUT)
                .allow("did not come online within 5 s; leaving it out");
        }
        if let Check::RefusedCpu { .. } = self.check {
            // The refusal is an ERROR line by design; anything else is still a failure.
            scenario = scenario.allow("smp: PSCI CPU_ON").allow("device tree:");
        }
        if let Check::BadDeviceTree { .. } = self.check {
            // The complaint may be logged at ERROR level; what must not follow
            // is an exception dump or a panic, so keep watching for a while.
            scenario = scenario
                .allow("device tree:")
                .linger(Duration::from_secs(2));
        }
        Ok(scenario)
    }

    /// What is checked on the whole console once the expectations are met
    /// (the harness only matches lines): the CPU shares of
    /// [`Check::CpuShare`]. Other checks have nothing more to verify.
    pub fn verify(&self, lines: &[String]) -> Result<(), String> {
        lines.iter().try_for_each(|l| check_teardown_line(l))?;
        if let Check::Trace {
            break_cosched,
            min_handovers,
            pinned,
            sharing,
            ..
        } = self.check
        {
            verify_trace(lines, !break_cosched.is_empty(), min_handovers)?;
            verify_pinned(lines, pinned)?;
            return match sharing {
                Some((name, spread)) => verify_sharing(lines, name, spread),
                None => Ok(()),
            };
        }
        if let Check::Linux {
            run: LinuxRun::Smoke { .. },
            ..
        } = self.check
        {
            let counts = linux_timer_counts(lines)?;
            println!("    Linux timer interrupts per vCPU: {counts:?}");
            return match counts.iter().position(|&n| n == 0) {
                Some(cpu) => Err(format!("vCPU {cpu} took no timer interrupt: {counts:?}")),
                None => Ok(()),
            };
        }
        let Check::CpuShare {
            light,
            heavy,
            ratio,
            tolerance,
            warmup,
            window,
            ..
        } = self.check
        else {
            return Ok(());
        };
        let measured = share_ratio(lines, light, heavy, warmup, window)?;
        let deviation = (measured.ratio / ratio - 1.0).abs();
        let summary = format!(
            "dom{heavy}/dom{light} CPU time {:.3} over {} ms ({} / {} ms), expected {ratio} within {:.0} %",
            measured.ratio,
            measured.window_ms,
            measured.heavy_ns / 1_000_000,
            measured.light_ns / 1_000_000,
            tolerance * 100.0
        );
        if deviation <= tolerance {
            println!("    {summary}: ok");
            Ok(())
        } else {
            Err(summary)
        }
    }
}

/// [`Check::Trace`]'s `pinned`: each named domain ran, and only on its CPUs.
fn verify_pinned(lines: &[String], pinned: &[(&str, &[usize])]) -> Result<(), String> {
    if pinned.is_empty() {
        return Ok(());
    }
    let trace = trace::Trace::decode(&lines.join("\n")).map_err(|e| e.to_string())?;
    let intervals = trace::analysis::run_intervals(&trace);
    for &(name, cpus) in pinned {
        let domain = domain_named(lines, name)?;
        let runs: Vec<&trace::analysis::RunInterval> = intervals
            .iter()
            .flatten()
            .filter(|i| i.domain == domain)
            .collect();
        if let Some(outside) = runs.iter().find(|i| !cpus.contains(&i.cpu)) {
            return Err(format!(
                "dom{domain} ({name}) ran on cpu {} for {} ns; its hard affinity is cpus {cpus:?}",
                outside.cpu,
                outside.end_ns - outside.start_ns
            ));
        }
        if runs.is_empty() {
            return Err(format!("dom{domain} ({name}) never ran in the trace"));
        }
        println!(
            "    dom{domain} ({name}): {} run intervals, all on cpus {cpus:?}",
            runs.len()
        );
    }
    Ok(())
}

/// The id of the domain the boot log names `name`.
fn domain_named(lines: &[String], name: &str) -> Result<u32, String> {
    crate::trace_capture::domain_names(lines)
        .into_iter()
        .find(|(_, n)| n == name)
        .map(|(id, _)| id)
        .ok_or_else(|| format!("no domain '{name}' in the boot log"))
}

/// [`Check::Trace`]'s `sharing`: how much of domain `name`'s run time two
/// of its vCPUs held one sched resource, against what its placement must
/// give (`spread`: one per resource while any is free).
fn verify_sharing(lines: &[String], name: &str, spread: bool) -> Result<(), String> {
    let trace = trace::Trace::decode(&lines.join("\n")).map_err(|e| e.to_string())?;
    let domain = domain_named(lines, name)?;
    let sharing = trace::analysis::resource_sharing(&trace, domain);
    if sharing.run_ns == 0 {
        return Err(format!("dom{domain} ({name}) never ran in the trace"));
    }
    let percent = sharing.shared_ns as f64 * 100.0 / sharing.run_ns as f64;
    let summary = format!(
        "dom{domain} ({name}): two of its vCPUs on one core for {} of {} ms run ({percent:.1} %)",
        sharing.shared_ns / 1_000_000,
        sharing.run_ns / 1_000_000
    );
    let ok = if spread {
        percent < 1.0
    } else {
        percent > 25.0
    };
    if ok {
        println!("    {summary}: ok");
        Ok(())
    } else if spread {
        Err(format!(
            "{summary}: spread placement must keep them one per core"
        ))
    } else {
        Err(format!(
            "{summary}: fixed placement packs a unit onto one core"
        ))
    }
}

/// The lines that say `hv.test-break-cosched` was planted on `cpus`.
fn planted_fault_lines(cpus: &[usize]) -> Vec<Expectation> {
    cpus.iter()
        .map(|cpu| {
            Expectation::contains(format!(
                "TEST: cpu {cpu} skips the core-scheduling rendezvous"
            ))
        })
        .collect()
}

/// [`Check::Trace`]: the dump decodes, and the trace alone shows the
/// promise kept over `min_handovers` handovers or more (`broken`: broken).
fn verify_trace(lines: &[String], broken: bool, min_handovers: usize) -> Result<(), String> {
    let trace = trace::Trace::decode(&lines.join("\n")).map_err(|e| e.to_string())?;
    for line in crate::trace_capture::summary(&trace) {
        println!("    {line}");
    }
    let check = trace::analysis::sibling_overlaps(&trace);
    if broken {
        return match check.overlaps.len() {
            0 => Err(format!(
                "the planted fault left no overlap in the trace ({} handovers on {} shared resources): \
                 the trace check cannot see a broken promise",
                check.handovers, check.resources
            )),
            _ => Ok(()),
        };
    }
    if let Some(overlap) = check.overlaps.first() {
        return Err(format!(
            "{} overlaps in the trace, the first: cpus {:?} held dom{} and dom{} for {} ns",
            check.overlaps.len(),
            overlap.cpus,
            overlap.domains.0,
            overlap.domains.1,
            overlap.end_ns - overlap.start_ns
        ));
    }
    if check.handovers < min_handovers {
        return Err(format!(
            "only {} handovers on shared resources in the trace (at least {min_handovers} needed \
             for the 0 overlaps to mean something)",
            check.handovers
        ));
    }
    Ok(())
}

/// A domain teardown line (`hv/src/arm/domain.rs`, `hv/src/x86/domain.rs`:
/// `… torn down: N MiB of RAM, … heap in use A -> B KiB`) must show the
/// heap shrinking by at least the domain's RAM; other lines pass.
fn check_teardown_line(line: &str) -> Result<(), String> {
    let Some((_, rest)) = line.split_once("torn down: ") else {
        return Ok(());
    };
    let number = |text: &str| text.trim().parse::<u64>().ok();
    let parsed = (|| {
        let (ram_mib, rest) = rest.split_once(" MiB of RAM")?;
        let (_, heap) = rest.split_once("heap in use ")?;
        let (before, after) = heap.trim_end_matches(" KiB").split_once(" -> ")?;
        Some((number(ram_mib)?, number(before)?, number(after)?))
    })();
    let Some((ram_mib, before_kib, after_kib)) = parsed else {
        return Err(format!("a teardown line that does not parse: {line}"));
    };
    if before_kib.saturating_sub(after_kib) < ram_mib << 10 {
        return Err(format!(
            "the heap shrank by {} KiB, less than the {ram_mib} MiB of RAM freed: {line}",
            before_kib.saturating_sub(after_kib)
        ));
    }
    Ok(())
}

/// The per-CPU counts of the `arch_timer` line of Linux's `/proc/interrupts`
/// (`[dom1]  11:  898  676  842  661  GICv3  27 Level  arch_timer`).
fn linux_timer_counts(lines: &[String]) -> Result<Vec<u64>, String> {
    let counts = |line: &String| -> Vec<u64> {
        line.split_whitespace()
            .skip(2) // "[dom1]" and the IRQ number
            .map_while(|field| field.parse().ok())
            .collect()
    };
    // The shell's echo of a typed command may end in "arch_timer" too: take
    // the line whose fields after the IRQ number are counts.
    let mut timer_lines = lines.iter().filter(|l| {
        l.starts_with("[dom1]")
            && l.trim_end().ends_with(" arch_timer")
            && l.split_whitespace()
                .nth(1)
                .is_some_and(|irq| irq.ends_with(':'))
    });
    let line = timer_lines
        .next()
        .ok_or("no arch_timer line from /proc/interrupts")?;
    let counts = counts(line);
    if counts.len() == 4 {
        Ok(counts)
    } else {
        Err(format!("expected 4 per-vCPU counts in {line:?}"))
    }
}
/// The switch-cost scenario's name (`cargo xtask bench-hv` runs it).
pub const SWITCH_COST_SCENARIO: &str = "qemu-virt-switch-cost";

/// A `sched: switch cost` line (`hv/src/arm/switchcost.rs`) with at least one
/// sample of every kind.
const SWITCH_COST_ALL_KINDS: &str = r"sched: switch cost in ticks of \d+ Hz: save\+load n=[1-9]\d* .*; plain n=[1-9]\d* .*; sync2 n=[1-9]\d* .*; sync4 n=[1-9]\d* ";

/// The hypervisor's periodic run-time line (`hv/src/runtime/events.rs`, `log_runtimes`).
const RUNTIME_LINE_PATTERN: &str = r"sched: runtime at \d+ ms:";

/// One `sched: runtime at T ms: domN R ns, …` line.
#[derive(Debug, PartialEq)]
struct RuntimeLine {
    at_ms: u64,
    /// `(domain, run time in ns)`.
    domains: Vec<(u32, u64)>,
}

/// Parses a run-time line; `None` for any other line.
fn parse_runtime_line(line: &str) -> Option<RuntimeLine> {
    let (_, rest) = line.split_once("sched: runtime at ")?;
    let (at, rest) = rest.split_once(" ms:")?;
    let at_ms = at.trim().parse().ok()?;
    let mut domains = Vec::new();
    for entry in rest.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let mut words = entry.split_whitespace();
        let domain = words.next()?.strip_prefix("dom")?.parse().ok()?;
        let runtime = words.next()?.parse().ok()?;
        if words.next() != Some("ns") {
            return None;
        }
        domains.push((domain, runtime));
    }
    Some(RuntimeLine { at_ms, domains })
}

/// CPU time two domains got over a window of run-time lines.
#[derive(Debug)]
struct Share {
    ratio: f64,
    window_ms: u64,
    light_ns: u64,
    heavy_ns: u64,
}

/// `heavy`'s run time over `light`'s between run-time line `warmup` and line
/// `warmup + window` (counted from 0).
fn share_ratio(
    lines: &[String],
    light: u32,
    heavy: u32,
    warmup: usize,
    window: usize,
) -> Result<Share, String> {
    let samples: Vec<RuntimeLine> = lines.iter().filter_map(|l| parse_runtime_line(l)).collect();
    let (Some(first), Some(last)) = (samples.get(warmup), samples.get(warmup + window)) else {
        return Err(format!(
            "{} run-time lines, {} needed",
            samples.len(),
            warmup + window + 1
        ));
    };
    let runtime = |sample: &RuntimeLine, domain: u32| {
        sample
            .domains
            .iter()
            .find(|&&(d, _)| d == domain)
            .map(|&(_, r)| r)
            .ok_or_else(|| format!("dom{domain} missing at {} ms", sample.at_ms))
    };
    let light_ns = runtime(last, light)?.saturating_sub(runtime(first, light)?);
    let heavy_ns = runtime(last, heavy)?.saturating_sub(runtime(first, heavy)?);
    if light_ns == 0 {
        return Err(format!(
            "dom{light} got no CPU time between {} and {} ms",
            first.at_ms, last.at_ms
        ));
    }
    Ok(Share {
        ratio: heavy_ns as f64 / light_ns as f64,
        window_ms: last.at_ms.saturating_sub(first.at_ms),
        light_ns,
        heavy_ns,
    })
}

/// QEMU arguments with the serial port on plain stdio instead of `mon:stdio`
/// and no monitor: QEMU's multiplexer would eat Ctrl-A as its own escape.
fn plain_stdio_serial(args: Vec<String>) -> Vec<String> {
    let mut args: Vec<String> = args
        .into_iter()
        .map(|a| {
            if a == "mon:stdio" {
                "stdio".to_string()
            } else {
                a
            }
        })
        .collect();
    args.extend(["-monitor".to_string(), "none".to_string()]);
    args
}

/// What a Linux scenario must show (Linux is dom1, the test guests dom2 and dom3).
/// The co-residency line with the busiest shared resource at `min` checked
/// switches or more and no overlap since boot.
fn coresidency_at_least(min: u64) -> Expectation {
    Expectation::at_least(
        r"coresidency: \d+ switches checked on \d+ shared resources \(busiest: (\d+) on cpus [^)]*\), 0 overlaps",
        min,
    )
    .expect("a fixed pattern that compiles")
}

fn linux_expectations(gic: Gic, run: LinuxRun, min_switches: u64) -> Vec<Expectation> {
    let ready = Expectation::contains(format!(
        "[dom1] {} nproc=4 kernel=",
        crate::linux::READY_LINE
    ));
    let others_go_on = || {
        vec![
            Expectation::contains("[dom2] [vcpu0] progress"),
            Expectation::contains("[dom2] [vcpu1] progress"),
            Expectation::contains("[dom3] [vcpu0] progress"),
            coresidency_at_least(min_switches),
        ]
    };
    let mut all = Vec::new();
    if gic == Gic::V3 {
        // One redistributor frame per vCPU, found by each.
        all.push(Expectation::contains(match run {
            LinuxRun::Panic | LinuxRun::Pair => "GICv3: CPU1: found redistributor 1",
            _ => "GICv3: CPU3: found redistributor 3",
        }));
    }
    match run {
        LinuxRun::Panic => {
            // After the panic message the test guests' counters keep rising
            // and the co-residency checker keeps reporting no overlap, over
            // two of its periods.
            let mut steps = vec![Expectation::contains(LINUX_PANIC_END)];
            for _ in 0..2 {
                steps.extend([
                    Expectation::contains("[dom2] [vcpu0] progress"),
                    Expectation::contains("[dom2] [vcpu1] progress"),
                    Expectation::contains("[dom3] [vcpu0] progress"),
                    coresidency_at_least(min_switches),
                    Expectation::contains("sched: runtime at"),
                ]);
            }
            all.push(Expectation::InOrder(steps));
        }
        LinuxRun::Pair => {
            for dom in [1, 2] {
                all.push(Expectation::contains(format!(
                    "[dom{dom}] {} nproc=2 kernel=",
                    crate::linux::READY_LINE
                )));
            }
            all.extend([
                // The background jobs print onto the prompt's line, after
                // its escape sequence: match the output without the prefix
                // (the typed commands echo `$((1 + 1))`, never `2`).
                Expectation::contains("a-done-2"),
                Expectation::contains("b-done-2"),
                Expectation::contains("[dom1] alive-a-5"),
                Expectation::contains("[dom2] alive-b-5"),
                coresidency_at_least(min_switches),
            ]);
            return all;
        }
        LinuxRun::Idle => {
            // The test guests keep counting once Linux is up.
            let mut steps = vec![ready];
            steps.extend(others_go_on());
            all.push(Expectation::InOrder(steps));
        }
        LinuxRun::Smoke { reboot } => {
            all.push(Expectation::InOrder(vec![
                ready.clone(),
                // `cat /proc/interrupts`: a column per vCPU (the counts are
                // checked by `verify`).
                Expectation::contains("CPU0       CPU1       CPU2       CPU3"),
                Expectation::contains(" arch_timer"),
                Expectation::contains("loops-2-finished"),
            ]));
            for cpu in 0..4 {
                all.push(Expectation::contains(format!(
                    "loop {cpu} done on cpu {cpu}"
                )));
            }
            let mut steps = vec![Expectation::contains("loops-2-finished")];
            if reboot {
                // PSCI SYSTEM_RESET: only Linux restarts, and boots again.
                steps.extend([
                    Expectation::contains("(linux): restarting (PSCI SYSTEM_RESET)"),
                    Expectation::contains("(linux): restarted from its image"),
                    ready,
                ]);
            }
            // PSCI SYSTEM_OFF stops only Linux; the others go on after it.
            steps.push(Expectation::contains(
                "(linux): stopped: powered off (PSCI SYSTEM_OFF)",
            ));
            steps.extend(others_go_on());
            all.push(Expectation::InOrder(steps));
        }
    }
    all
}

/// What a healthy boot of `cpus` CPUs prints.
fn boot_expectations(gic: Gic, topology: &str, cpus: usize) -> Vec<Expectation> {
    let gic = match gic {
        Gic::V2 => "gic: GICv2",
        Gic::V3 => "gic: GICv3",
    };
    let mut expectations = banner_expectations(gic.to_string(), topology, cpus);
    // QEMU's Cortex-A72 clears MPIDR.MT even with `threads=2`: the checker
    // can only check the firmware's resources, and says so.
    expectations.push(Expectation::contains(
        "coresidency: the CPUs do not name SMT threads (MPIDR.MT clear)",
    ));
    expectations
}

/// What a healthy x86 boot prints: the ARM banner with the APIC mode line
/// (`apic: xAPIC …` or `apic: x2APIC …`) and the SVM line.
fn x86_boot_expectations(topology: &str, cpus: usize, apic: &str, svm: &str) -> Vec<Expectation> {
    let mut expectations = banner_expectations(format!("apic: {apic} "), topology, cpus);
    expectations.push(Expectation::contains(svm));
    // The CPUs' own CPUID view of their siblings, checked against the MADT's.
    expectations.push(Expectation::contains(
        "coresidency: the CPUs' own view of their SMT siblings agrees with the firmware topology",
    ));
    // Kicks to a set of CPUs and to all but the sender (the boot CPU pings
    // every other one of the others, then all of them).
    expectations.push(Expectation::contains(format!(
        "ipi: set ping of {} CPUs ok",
        cpus / 2
    )));
    expectations.push(Expectation::contains(format!(
        "ipi: all-but-self ping of {} CPUs ok",
        cpus - 1
    )));
    expectations
}

/// The banner lines every architecture prints, with its interrupt controller line.
fn banner_expectations(controller: String, topology: &str, cpus: usize) -> Vec<Expectation> {
    let per_cpu = |template: &str, range: std::ops::Range<usize>| {
        Expectation::each(template, range).expect("templates are escaped, so they compile")
    };
    let others = cpus - 1;
    vec![
        Expectation::contains(format!("topology: {topology}")),
        Expectation::contains(controller),
        per_cpu("cpu {} online", 0..cpus),
        Expectation::contains(format!("smp: {cpus} of {cpus} CPUs online")),
        Expectation::InOrder(vec![
            per_cpu("ipi: cpu {} round trip ok", 1..cpus),
            Expectation::contains(format!("ipi: {others} of {others} round trips ok")),
        ]),
        Expectation::contains(format!("tick: all {cpus} CPUs ticking")),
    ]
}

/// Dumps QEMU's device tree for `options` (the board's device tree on
/// raspi4b), applies `edit` with dtc and returns the path of the edited blob
/// (`<dir>/<name>.dtb`).
fn edited_dtb(
    board: &Board,
    options: &RunOptions,
    edit: &str,
    dir: &Path,
    name: &str,
) -> Result<PathBuf, qemu::SetupError> {
    let fail = |what: String| qemu::SetupError(format!("{name}: {what}"));
    fs::create_dir_all(dir).map_err(|e| fail(format!("{}: {e}", dir.display())))?;
    // raspi4b makes no device tree of its own: it boots the real Pi 4 one,
    // which is what gets edited there.
    let original = match board.qemu {
        Some((_, crate::board::Machine::Raspi4b)) => {
            options.dtb.clone().unwrap_or_else(qemu::raspi4b_dtb)
        }
        _ => {
            let dumped = dir.join(format!("{name}.orig.dtb"));
            qemu::dump_dtb(board, options, &dumped)?;
            dumped
        }
    };
    let dts = Command::new("dtc")
        .args(["-q", "-I", "dtb", "-O", "dts"])
        .arg(&original)
        .output()
        .map_err(|e| fail(format!("cannot run dtc: {e}")))?;
    if !dts.status.success() {
        return Err(fail("dtc could not decompile QEMU's device tree".into()));
    }
    let source = dir.join(format!("{name}.dts"));
    let mut text = String::from_utf8_lossy(&dts.stdout).into_owned();
    text.push('\n');
    text.push_str(edit);
    text.push('\n');
    fs::write(&source, text).map_err(|e| fail(format!("{}: {e}", source.display())))?;
    let edited = dir.join(format!("{name}.dtb"));
    let out = Command::new("dtc")
        .args(["-q", "-I", "dts", "-O", "dtb", "-o"])
        .arg(&edited)
        .arg(&source)
        .output()
        .map_err(|e| fail(format!("cannot run dtc: {e}")))?;
    if !out.status.success() {
        return Err(fail(format!(
            "dtc rejected the edit: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(edited)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Console lines of a boot that names dom1 `pinned` and dumps a trace
    /// in which dom1 runs on `cpus` (one interval each).
    fn pinned_console(cpus: &[usize]) -> Vec<String> {
        let event = |time_ns, domain| trace::Event {
            time_ns,
            kind: trace::Kind::Switch,
            domain,
            vcpu: 0,
            arg: 0,
        };
        let trace = trace::Trace {
            classes: trace::ClassSet::DEFAULT,
            origin: trace::Origin::Boot,
            started_ns: 0,
            stopped_ns: 1_000,
            cpus: (0..4)
                .map(|cpu| trace::text::CpuTrace {
                    events: if cpus.contains(&cpu) {
                        vec![event(10, 1), event(20, trace::IDLE_DOMAIN)]
                    } else {
                        Vec::new()
                    },
                    ..Default::default()
                })
                .collect(),
        };
        let mut lines =
            vec!["[cpu0] INFO  domain 1 (pinned): 1 vCPUs, 32 MiB at 0x40000000".to_string()];
        trace.encode(|line| lines.push(line.to_string()));
        lines
    }

    #[test]
    fn the_pinned_check_fails_on_a_run_outside_the_affinity_or_no_run() {
        assert_eq!(
            verify_pinned(&pinned_console(&[2]), &[("pinned", &[2])]),
            Ok(())
        );
        let outside = verify_pinned(&pinned_console(&[2, 3]), &[("pinned", &[2])]).unwrap_err();
        assert!(outside.contains("ran on cpu 3"), "{outside}");
        let never = verify_pinned(&pinned_console(&[]), &[("pinned", &[2])]).unwrap_err();
        assert!(never.contains("never ran"), "{never}");
        let unknown = verify_pinned(&pinned_console(&[2]), &[("other", &[2])]).unwrap_err();
        assert!(unknown.contains("no domain 'other'"), "{unknown}");
    }

    #[test]
    fn linux_timer_counts_are_read_from_proc_interrupts() {
        let lines: Vec<String> = [
            "[dom1]            CPU0       CPU1       CPU2       CPU3       ",
            "[dom1] ~ # cat /proc/interrupts | grep arch_timer",
            "[dom1]  11:        898          0        842        661     GICv3  27 Level     arch_timer",
        ]
        .iter()
        .map(|l| l.to_string())
        .collect();
        assert_eq!(linux_timer_counts(&lines), Ok(vec![898, 0, 842, 661]));
        let gicv2 =
            vec!["[dom1]  11:   5   6   7   8     GIC-0  27 Level     arch_timer".to_string()];
        assert_eq!(linux_timer_counts(&gicv2), Ok(vec![5, 6, 7, 8]));
        assert!(linux_timer_counts(&lines[..2]).is_err());
        let short = vec!["[dom1]  11:   5   6   GIC-0  27 Level     arch_timer".to_string()];
        assert!(linux_timer_counts(&short).is_err());
    }

    /// The console of a healthy 8-CPU boot as the hypervisor's spec describes
    /// it, with `skip` lines left out.
    fn healthy_log(gic: &str, topology: &str, skip: &[&str]) -> Vec<String> {
        healthy_log_of(8, gic, topology, skip)
    }

    /// The console of a healthy boot of `cpus` CPUs, `skip` lines left out.
    fn healthy_log_of(cpus: usize, gic: &str, topology: &str, skip: &[&str]) -> Vec<String> {
        let others = cpus - 1;
        let mut lines = vec![
            format!("[cpu0] INFO  topology: {topology}"),
            format!("[cpu0] INFO  gic: {gic} distributor at 0x8000000"),
        ];
        lines.extend((0..cpus).map(|n| format!("[cpu{n}] INFO  cpu {n} online")));
        lines.push(format!("[cpu0] INFO  smp: {cpus} of {cpus} CPUs online"));
        lines.extend((1..cpus).map(|n| format!("[cpu0] INFO  ipi: cpu {n} round trip ok")));
        lines.push(format!(
            "[cpu0] INFO  ipi: {others} of {others} round trips ok"
        ));
        lines.push(format!("[cpu0] INFO  tick: all {cpus} CPUs ticking"));
        lines.push(
            "[cpu0] INFO  coresidency: the CPUs do not name SMT threads (MPIDR.MT clear); checking the firmware topology's resources only"
                .to_string(),
        );
        lines
            .into_iter()
            .filter(|l| !skip.iter().any(|s| l.ends_with(s)))
            .collect()
    }

    fn all_met(scenario: &QemuScenario, lines: &[String]) -> bool {
        scenario.expectations().iter().all(|e| e.is_met(lines))
    }

    /// Whether `scenario` asks for the co-residency line.
    fn checks_coresidency(scenario: &QemuScenario) -> bool {
        let pattern = coresidency_at_least(0).to_string();
        scenario
            .expectations()
            .iter()
            .any(|e| e.to_string().contains(&pattern) || format!("{e:?}").contains("busiest"))
    }

    #[test]
    fn every_overlap_check_states_a_bar_and_has_domains_contending_for_a_shared_pool() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for scenario in SCENARIOS {
            if !checks_coresidency(scenario) {
                assert_eq!(
                    scenario.min_switches, 0,
                    "{}: a bar without the check",
                    scenario.name
                );
                continue;
            }
            assert!(
                scenario.min_switches > 0,
                "{}: checks overlaps but states no minimum of checked switches",
                scenario.name
            );
            let path = match scenario.config() {
                Some(path) => root.join(path),
                None => root.join(format!("boards/configs/{}.toml", scenario.board)),
            };
            // The layout only: image files (such as the Linux guest's, which
            // `cargo xtask guest-linux` writes) need not exist yet.
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {}: {e}", scenario.name, path.display()));
            let config = crate::config::parse(&text, None)
                .unwrap_or_else(|e| panic!("{}: {}: {e:?}", scenario.name, path.display()));
            let threads = smp_field(scenario.smp, "threads");
            let cores = smp_field(scenario.smp, "cores");
            let clusters = smp_field(scenario.smp, "clusters");
            let contended = config.pools.iter().any(|pool| {
                // CPUs per sched resource at the pool's granularity.
                // A -smp without topology fields (a board whose device tree
                // has it, as the Pi's one cluster): the pool is one resource.
                let described = scenario.smp.contains('=');
                let size = match pool.granularity.as_str() {
                    "core" => threads,
                    "cluster" if described => threads * cores,
                    "socket" if described => threads * cores * clusters,
                    "cluster" | "socket" => pool.cpus.len() as u64,
                    _ => return false,
                };
                let resources = (pool.cpus.len() as u64).div_ceil(size).max(1);
                let units: u64 = config
                    .domains
                    .iter()
                    .filter(|d| d.pool == pool.name)
                    .map(|d| u64::from(d.vcpus).div_ceil(size))
                    .sum();
                let domains = config
                    .domains
                    .iter()
                    .filter(|d| d.pool == pool.name)
                    .count();
                domains >= 2 && units > resources
            });
            assert!(
                contended,
                "{}: no core/cluster/socket pool of {} holds two domains with more sched units than the pool has resources: an overlap is impossible by construction, or switches are too rare to check",
                scenario.name,
                path.display()
            );
        }
    }

    /// A `-smp` field (`threads=2`), or 1 when it is not given.
    fn smp_field(smp: &str, name: &str) -> u64 {
        smp.split(',')
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('=')?.parse().ok())
            .unwrap_or(1)
    }

    #[test]
    fn a_healthy_boot_meets_every_boot_scenario() {
        for scenario in SCENARIOS {
            let Check::Boot { topology, cpus } = scenario.check else {
                continue;
            };
            let healthy_log = |gic: &str, topology: &str, skip: &[&str]| {
                healthy_log_of(cpus, gic, topology, skip)
            };
            let gic = if scenario.gic == Gic::V2 {
                "GICv2"
            } else {
                "GICv3"
            };
            assert!(
                all_met(scenario, &healthy_log(gic, topology, &[])),
                "{}",
                scenario.name
            );
            let other = if gic == "GICv2" { "GICv3" } else { "GICv2" };
            assert!(!all_met(scenario, &healthy_log(other, topology, &[])));
        }
    }

    /// Run-time lines one second apart in which dom1 and dom2 get
    /// `light_ms` and `heavy_ms` of CPU time a second (after a skewed start).
    fn runtime_log(light_ms: u64, heavy_ms: u64, seconds: u64) -> Vec<String> {
        let mut lines = vec!["[dom1] [vcpu0] progress 1".to_string()];
        for t in 1..=seconds {
            // The first second is boot: dom1 alone.
            let (l, h) = (500 + (t - 1) * light_ms, (t - 1) * heavy_ms);
            lines.push(format!(
                "[cpu0] INFO  sched: runtime at {} ms: dom1 {} ns, dom2 {} ns",
                t * 1000,
                l * 1_000_000,
                h * 1_000_000
            ));
        }
        lines
    }

    #[test]
    fn the_weights_check_computes_the_share_over_its_window() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-virt-guests-weights")
            .unwrap();
        assert_eq!(scenario.config(), Some("boards/configs/tests/weights.toml"));
        assert!(all_met(scenario, &runtime_log(333, 667, 14)));
        assert!(!all_met(scenario, &runtime_log(333, 667, 13)));
        assert!(scenario.verify(&runtime_log(333, 667, 14)).is_ok());
        // 1:1.9 is within 10 % of 1:2; 1:1.7 and 1:1 are not; dom1's skewed
        // first second is outside the window.
        assert!(scenario.verify(&runtime_log(345, 655, 14)).is_ok());
        let err = scenario.verify(&runtime_log(370, 630, 14)).unwrap_err();
        assert!(err.contains("dom2/dom1 CPU time 1.70"), "{err}");
        assert!(scenario.verify(&runtime_log(500, 500, 14)).is_err());
        assert!(scenario.verify(&runtime_log(333, 667, 5)).is_err());
        assert!(scenario.verify(&runtime_log(0, 667, 14)).is_err());
        // Other checks have nothing to verify.
        assert!(SCENARIOS[0].verify(&[]).is_ok());
    }

    #[test]
    fn a_teardown_must_give_the_heap_back_its_ram() {
        let line = |before: u64, after: u64| {
            format!(
                "[cpu0] INFO  domain 3 (quitter): torn down: 64 MiB of RAM, 4 stage-2 tables and VMID 3 freed; heap in use {before} -> {after} KiB"
            )
        };
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-virt-guests-reset")
            .unwrap();
        assert_eq!(scenario.config(), Some("boards/configs/tests/reset.toml"));
        assert!(scenario.verify(&[line(200_000, 134_000)]).is_ok());
        assert!(scenario.verify(&[line(200_000, 190_000)]).is_err());
        assert!(scenario.verify(&[line(200_000, 210_000)]).is_err());
        assert!(
            scenario
                .verify(&["domain 3: torn down: lots of RAM".to_string()])
                .is_err()
        );
        assert!(
            scenario
                .verify(&["[dom1] [vcpu0] progress 3".to_string()])
                .is_ok()
        );
    }

    #[test]
    fn a_restart_needs_a_second_start_after_it() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-virt-guests-reset")
            .unwrap();
        let Check::GuestsInOrder {
            expect, sequences, ..
        } = scenario.check
        else {
            panic!("not a sequence check");
        };
        let mut lines: Vec<String> = expect.iter().map(|l| l.to_string()).collect();
        for sequence in sequences {
            lines.extend(sequence.iter().map(|l| l.to_string()));
        }
        lines.push("coresidency: 100000 switches checked on 2 shared resources (busiest: 100000 on cpus 4-7), 0 overlaps".into());
        assert!(all_met(scenario, &lines));
        // Started once only: the banner before the restart does not count twice.
        let second_start = lines
            .iter()
            .rposition(|l| l == "[dom2] test-guest: started at EL1")
            .unwrap();
        let mut once = lines.clone();
        once.remove(second_start);
        assert!(!all_met(scenario, &once));
        // No progress after the teardown.
        let mut stalled = lines.clone();
        let torn = stalled
            .iter()
            .position(|l| l.contains("torn down"))
            .unwrap();
        stalled.truncate(torn + 2);
        stalled.extend(expect.iter().map(|l| l.to_string()));
        assert!(!all_met(scenario, &stalled));
    }

    #[test]
    fn the_panic_scenario_needs_progress_after_the_panic() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-virt-linux-panic")
            .unwrap();
        let progress = |n: u32| {
            vec![
                format!("[dom2] [vcpu0] progress {n}"),
                format!("[dom2] [vcpu1] progress {n}"),
                format!("[dom3] [vcpu0] progress {n}"),
                "[cpu0] INFO  coresidency: 100000 switches checked on 1 shared resources (busiest: 100000 on cpus 4-7), 0 overlaps"
                    .to_string(),
                format!("[cpu0] INFO  sched: runtime at {n} ms: dom1 1 ns"),
            ]
        };
        let mut before: Vec<String> =
            vec!["[dom1] [    0.79] GICv3: CPU1: found redistributor 1 region 0:0x80c0000".into()];
        before.extend(progress(1));
        before.extend(progress(2));
        before.push("[dom1] [    8.54] Kernel panic - not syncing: VFS: no root".into());
        before.push(
            "[dom1] [    8.72] ---[ end Kernel panic - not syncing: VFS: no root ]---".into(),
        );
        // Everything stops with Linux: not met.
        assert!(!all_met(scenario, &before));
        // One period after the panic is not enough.
        let mut one = before.clone();
        one.extend(progress(3));
        assert!(!all_met(scenario, &one));
        // Two periods, with the co-residency checker finding no overlap: met.
        let mut two = one.clone();
        two.extend(progress(4));
        assert!(all_met(scenario, &two));
        // An overlap reported after the panic does not count.
        let overlapping: Vec<String> = two
            .iter()
            .map(|l| l.replace(", 0 overlaps", ", 1 overlaps"))
            .collect();
        assert!(!all_met(scenario, &overlapping));
    }

    #[test]
    fn the_switch_cost_scenario_needs_every_kind_of_switch() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == SWITCH_COST_SCENARIO)
            .unwrap();
        let line = |n4: u64| {
            vec![
                format!(
                    "[cpu0] INFO  sched: switch cost in ticks of 62500000 Hz: save+load n=900 avg=30 min=20 max=400; \
                     plain n=100 avg=200 min=90 max=900; sync2 n=50 avg=700 min=300 max=9000; \
                     sync4 n={n4} avg=1500 min=700 max=20000"
                ),
                "[cpu0] INFO  coresidency: 100000 switches checked on 3 shared resources (busiest: 100000 on cpus 4-7), 0 overlaps"
                    .to_string(),
            ]
        };
        assert!(all_met(scenario, &line(20)));
        assert!(!all_met(scenario, &line(0)));
    }

    #[test]
    fn runtime_lines_parse_and_others_do_not() {
        assert_eq!(
            parse_runtime_line("[cpu0] INFO  sched: runtime at 2000 ms: dom1 5 ns, dom3 70 ns"),
            Some(RuntimeLine {
                at_ms: 2000,
                domains: vec![(1, 5), (3, 70)]
            })
        );
        for bad in [
            "[dom1] [vcpu0] progress 3",
            "sched: runtime at x ms: dom1 5 ns",
            "sched: runtime at 5 ms: dom1 5 us",
            "sched: runtime at 5 ms: vm1 5 ns",
            "sched: runtime at 5 ms: dom1",
        ] {
            assert_eq!(parse_runtime_line(bad), None, "{bad}");
        }
    }

    #[test]
    fn each_missing_line_is_noticed() {
        let scenario = &SCENARIOS[0];
        let topology = "sockets=1 clusters=2 cores=8 threads=8";
        for missing in [
            "topology: sockets=1 clusters=2 cores=8 threads=8",
            "cpu 0 online",
            "cpu 7 online",
            "smp: 8 of 8 CPUs online",
            "ipi: cpu 1 round trip ok",
            "ipi: cpu 7 round trip ok",
            "ipi: 7 of 7 round trips ok",
            "tick: all 8 CPUs ticking",
        ] {
            let lines = healthy_log("GICv3", topology, &[missing]);
            assert!(!all_met(scenario, &lines), "{missing} not required");
        }
        // The SMT scenario needs its own core count.
        assert!(!all_met(
            &SCENARIOS[2],
            &healthy_log("GICv3", topology, &[])
        ));
    }

    #[test]
    fn the_pi_boot_needs_four_cpus_the_gic_400_and_its_topology() {
        let pi = SCENARIOS
            .iter()
            .find(|s| s.name == "rpi4-raspi4b-boot")
            .unwrap();
        let topology = "sockets=1 clusters=1 cores=4 threads=4";
        let Check::BootWithGuests { expect, .. } = pi.check else {
            panic!("the Pi scenario runs guests");
        };
        let with_guests = |skip: &[&str]| {
            let mut lines = healthy_log_of(4, "GICv2", topology, skip);
            lines.extend(
                expect
                    .iter()
                    .filter(|e| !skip.contains(e))
                    .map(|e| format!("[cpu0] INFO  {e} ...")),
            );
            lines
        };
        assert!(all_met(pi, &with_guests(&[])));
        // The guests are required, and so is the GIC's virtualization interface.
        for missing in expect {
            assert!(!all_met(pi, &with_guests(&[missing])), "{missing}");
        }
        assert!(!all_met(pi, &healthy_log_of(4, "GICv2", topology, &[])));
        for missing in [
            "smp: 4 of 4 CPUs online",
            "cpu 3 online",
            "ipi: 3 of 3 round trips ok",
            "tick: all 4 CPUs ticking",
        ] {
            let lines = with_guests(&[missing]);
            assert!(!all_met(pi, &lines), "{missing} not required");
        }
        // Only the boot CPU up (the spin table not used): a failure.
        let alone = [
            format!("[cpu0] INFO  topology: {topology}"),
            "[cpu0] INFO  gic: GICv2 driver up".to_string(),
            "[cpu0] INFO  cpu 0 online".to_string(),
            "[cpu0] INFO  smp: 1 of 4 CPUs online".to_string(),
            "[cpu0] INFO  ipi: 0 of 0 round trips ok".to_string(),
            "[cpu0] INFO  tick: all 1 CPUs ticking".to_string(),
        ];
        assert!(!all_met(pi, &alone));
        let mut gicv3 = with_guests(&[]);
        for line in &mut gicv3 {
            *line = line.replace("GICv2", "GICv3");
        }
        assert!(!all_met(pi, &gicv3));
        let (program, args) =
            qemu::command(crate::board::find("rpi4").unwrap(), &pi.options()).unwrap();
        assert_eq!(program, "qemu-system-aarch64");
        assert!(args.join(" ").contains("-machine raspi4b "));
    }

    /// The big.LITTLE edit applied with dtc to QEMU's own virt device tree
    /// (the fixture QEMU 10 made with this scenario's `-smp`) gives the
    /// classes the scenario expects, through the hypervisor's own parser.
    #[test]
    fn the_big_little_edit_makes_two_capacity_classes() {
        if Command::new("dtc").arg("--version").output().is_err() {
            eprintln!("note: no dtc here; `cargo xtask setup` installs it");
            return;
        }
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-virt-big-little")
            .unwrap();
        let Check::BootWithGuests {
            dtb_edit: Some(edit),
            expect,
            config: Some(config),
            ..
        } = scenario.check
        else {
            panic!("qemu-virt-big-little edits the device tree");
        };
        assert_eq!(scenario.smp, qemu::FLAT_SMP);
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let fixture = root.join("../shared/fixtures/qemu/qemu-virt-smp8.dtb");
        let dir = std::env::temp_dir().join(format!("xtask-biglittle-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let dts = Command::new("dtc")
            .args(["-q", "-I", "dtb", "-O", "dts"])
            .arg(&fixture)
            .output()
            .unwrap();
        let source = dir.join("edited.dts");
        let mut text = String::from_utf8(dts.stdout).unwrap();
        text.push_str(edit);
        fs::write(&source, text).unwrap();
        let edited = dir.join("edited.dtb");
        let status = Command::new("dtc")
            .args(["-q", "-I", "dts", "-O", "dtb", "-o"])
            .arg(&edited)
            .arg(&source)
            .status()
            .unwrap();
        assert!(status.success());
        let machine = platform::dt::parse(&fs::read(&edited).unwrap()).unwrap();
        let topology = machine.topology().unwrap();
        let mut report = String::new();
        platform::dt::write_topology_report(&mut report, &machine, &topology).unwrap();
        let class_lines: Vec<&str> = expect
            .iter()
            .copied()
            .filter(|e| e.starts_with("big.LITTLE: "))
            .collect();
        assert_eq!(class_lines.len(), 2);
        for line in class_lines {
            assert!(report.contains(line), "{line} not in\n{report}");
        }
        // The config has no pools and names the automatic ones.
        let config = crate::config::load(&root.join(config)).unwrap();
        assert!(config.pools.is_empty());
        let pools = hv::config::automatic_pools(&machine.cpu_classes(), &topology.enabled());
        for domain in &config.domains {
            assert!(
                pools.iter().any(|p| p.name == domain.pool),
                "{}",
                domain.pool
            );
        }
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_ipi_summary_must_come_after_the_round_trips() {
        let mut lines = healthy_log("GICv3", "sockets=1 clusters=2 cores=8 threads=8", &[]);
        let summary = lines
            .iter()
            .position(|l| l.contains("7 of 7 round trips"))
            .unwrap();
        let moved = lines.remove(summary);
        lines.insert(0, moved);
        assert!(!all_met(&SCENARIOS[0], &lines));
    }

    #[test]
    fn names_are_unique_and_bad_dtb_expects_a_complaint() {
        for (i, s) in SCENARIOS.iter().enumerate() {
            assert!(SCENARIOS[..i].iter().all(|o| o.name != s.name));
            assert!(s.name.starts_with(&format!("{}-", s.board)), "{}", s.name);
            assert!(crate::board::find(s.board).is_ok(), "{}", s.name);
        }
        let bad = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-virt-bad-dtb")
            .unwrap();
        let complaint = ["[cpu0] ERROR device tree: no interrupt controller; stopping".to_string()];
        assert!(all_met(bad, &complaint));
        assert!(!all_met(bad, &["[cpu0] INFO  device tree: ok".to_string()]));
    }

    /// The console of a healthy x86 boot of `cpus` CPUs, `skip` lines left out.
    fn healthy_x86_log(
        apic: &str,
        svm: &str,
        topology: &str,
        cpus: usize,
        skip: &[&str],
    ) -> Vec<String> {
        let mut lines = vec![
            format!("[cpu0] INFO  apic: {apic} driver up (boot CPU apic id 0x0)"),
            format!("[cpu0] INFO  {svm}, …)"),
            format!("[cpu0] INFO  topology: {topology}"),
        ];
        lines.extend((0..cpus).map(|n| format!("[cpu{n}] INFO  cpu {n} online (apic id {n:#x})")));
        lines.push(format!("[cpu0] INFO  smp: {cpus} of {cpus} CPUs online"));
        lines.extend((1..cpus).map(|n| format!("[cpu0] INFO  ipi: cpu {n} round trip ok (40 us)")));
        let others = cpus - 1;
        lines.push(format!(
            "[cpu0] INFO  ipi: {others} of {others} round trips ok"
        ));
        lines.push(format!(
            "[cpu0] INFO  ipi: set ping of {} CPUs ok",
            cpus / 2
        ));
        lines.push(format!(
            "[cpu0] INFO  ipi: all-but-self ping of {others} CPUs ok"
        ));
        lines.push(format!(
            "[cpu0] INFO  tick: all {cpus} CPUs ticking every 10 ms"
        ));
        lines.push(
            "[cpu0] INFO  coresidency: the CPUs' own view of their SMT siblings agrees with the firmware topology"
                .to_string(),
        );
        lines
            .into_iter()
            .filter(|l| !skip.iter().any(|s| l.contains(s)))
            .collect()
    }

    #[test]
    fn x86_scenarios_need_their_apic_mode_topology_and_every_cpu() {
        let x86: Vec<&QemuScenario> = SCENARIOS
            .iter()
            .filter(|s| matches!(s.check, Check::X86Boot { .. }))
            .collect();
        assert_eq!(x86.len(), 4);
        assert!(x86.iter().all(|s| s.board == "qemu-x86"));
        for scenario in x86 {
            let Check::X86Boot {
                topology,
                cpus,
                apic,
                svm,
            } = scenario.check
            else {
                panic!("{} is not an x86 boot", scenario.name);
            };
            assert!(
                all_met(scenario, &healthy_x86_log(apic, svm, topology, cpus, &[])),
                "{}",
                scenario.name
            );
            let other = if apic == "xAPIC" { "x2APIC" } else { "xAPIC" };
            assert!(
                !all_met(scenario, &healthy_x86_log(other, svm, topology, cpus, &[])),
                "{}",
                scenario.name
            );
            for missing in [
                format!("topology: {topology}"),
                format!("cpu {} online", cpus - 1),
                format!("ipi: cpu {} round trip ok", cpus - 1),
                format!("smp: {cpus} of {cpus}"),
                "tick: all".to_string(),
                svm.to_string(),
                "set ping".to_string(),
                "all-but-self ping".to_string(),
            ] {
                let lines = healthy_x86_log(apic, svm, topology, cpus, &[&missing]);
                assert!(
                    !all_met(scenario, &lines),
                    "{}: {missing} not required",
                    scenario.name
                );
            }
        }
        let smt = SCENARIOS.iter().find(|s| s.name == "qemu-x86-smt").unwrap();
        // The two-package topology is not the SMT one.
        assert!(!all_met(
            smt,
            &healthy_x86_log(
                "xAPIC",
                SVM_WITH_NPT,
                "sockets=2 clusters=2 cores=4 threads=4",
                8,
                &[]
            )
        ));
        // A CPU without SVM does not pass for one with it.
        let smt_topology = "sockets=1 clusters=1 cores=4 threads=8";
        let no_svm = healthy_x86_log("xAPIC", "svm: not available", smt_topology, 8, &[]);
        assert!(!all_met(smt, &no_svm));
        let x2apic = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-x86-x2apic")
            .unwrap();
        assert_eq!(x2apic.options().cpu, "EPYC,+svm,+npt,+x2apic");
        assert_eq!(smt.options().cpu, "EPYC,+svm,+npt");
        assert_eq!(smt.options().smp, "8,sockets=1,cores=4,threads=2");
    }

    #[test]
    fn the_exception_report_must_name_vector_cr2_and_cpu() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-x86-exception-report")
            .unwrap();
        let report = |line: &str| {
            vec![
                "[cpu0] INFO  tick: all 2 CPUs ticking every 10 ms".to_string(),
                "[cpu0] WARN  test: reading 0x1000000000 on purpose (hv.fault-test=page-fault)"
                    .to_string(),
                line.to_string(),
            ]
        };
        let good = "[cpu0] ERROR Unexpected exception 14 (page fault): error code 0x0 \
                    RIP=0x2129cc CR2=0x1000000000 RSP=0x78fa30 RFLAGS=0x10206; parking this CPU";
        assert!(all_met(scenario, &report(good)));
        for bad in [
            good.replace("CR2=0x1000000000", "CR2=0x0"),
            good.replace(
                "exception 14 (page fault)",
                "exception 13 (general protection)",
            ),
            good.replace("[cpu0]", "[cpu1]"),
            good.replace("; parking this CPU", ""),
        ] {
            assert!(!all_met(scenario, &report(&bad)), "{bad}");
        }
        let prepared = scenario
            .prepare(
                crate::board::find("qemu-x86").unwrap(),
                Path::new("hv.elf"),
                Path::new("/tmp"),
            )
            .unwrap();
        let command = prepared.command_line();
        assert!(
            command.contains("-append hv.fault-test=page-fault"),
            "{command}"
        );
        // The report itself is allowed; any other exception is not.
        assert!(prepared.failure_in(good).is_none());
        assert!(
            prepared
                .failure_in("[cpu1] ERROR Unexpected exception 13 (general protection)")
                .is_some()
        );
    }

    #[test]
    fn the_silent_ap_scenario_needs_the_cpu_left_out_and_the_rest_running() {
        let scenario = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-x86-silent-ap")
            .unwrap();
        let Check::X86SilentAp { expect, .. } = scenario.check else {
            panic!("qemu-x86-silent-ap is not a silent-AP check");
        };
        let left_out =
            "[cpu0] ERROR smp: cpu 3 (apic id 0x3) did not come online within 5 s; leaving it out";
        let mut log: Vec<String> = [
            left_out,
            "[cpu0] INFO  smp: 3 of 4 CPUs online",
            "[cpu0] INFO  ipi: 2 of 2 round trips ok",
            "[cpu0] INFO  tick: all 3 CPUs ticking every 10 ms",
        ]
        .iter()
        .map(|l| l.to_string())
        .collect();
        log.extend(expect.iter().map(|e| format!("[cpu0] INFO  {e}")));
        assert!(all_met(scenario, &log));
        for wrong in [
            left_out,
            "[cpu0] INFO  smp: 3 of 4 CPUs online",
            "[cpu0] INFO  tick: all 3 CPUs ticking every 10 ms",
        ] {
            let without: Vec<String> = log.iter().filter(|l| *l != wrong).cloned().collect();
            assert!(!all_met(scenario, &without), "met without {wrong}");
        }
        // All four CPUs up means the hook did not work.
        let all_up: Vec<String> = log
            .iter()
            .map(|l| l.replace("3 of 4 CPUs", "4 of 4 CPUs"))
            .collect();
        assert!(!all_met(scenario, &all_up));
        let prepared = scenario
            .prepare(
                crate::board::find("qemu-x86").unwrap(),
                Path::new("hv.elf"),
                Path::new("/tmp"),
            )
            .unwrap();
        let command = prepared.command_line();
        assert!(command.contains("-append hv.test-silent-ap=3"), "{command}");
        assert!(prepared.failure_in(left_out).is_none());
        assert!(
            prepared
                .failure_in("[cpu0] ERROR smp: cpu 2 (apic id 0x2) failed")
                .is_some()
        );
    }

    /// A hand-assembled arm64 `Image` that prints `text` on the PL011 at
    /// 0x0900_0000 and spins: enough to check QEMU, `-kernel` and the console
    /// pipe without the hypervisor.
    fn tiny_image(text: &str) -> Vec<u8> {
        let code: [u32; 8] = [
            0xD2A1_2001, // movz x1, #0x0900, lsl #16   (PL011 data register)
            0x1000_00E2, // adr  x2, text               (0x60)
            0x3840_1443, // ldrb w3, [x2], #1
            0x3400_0063, // cbz  w3, done
            0x3900_0023, // strb w3, [x1]
            0x17FF_FFFD, // b    the ldrb
            0x1400_0000, // done: b .
            0xD503_201F, // nop
        ];
        let mut body: Vec<u8> = code.iter().flat_map(|c| c.to_le_bytes()).collect();
        body.extend(text.as_bytes());
        body.push(0);
        let size = 0x40 + body.len() as u64;
        let mut image = Vec::new();
        image.extend(0x1400_0010u32.to_le_bytes()); // b 0x40
        image.extend(0u32.to_le_bytes());
        image.extend(0x8_0000u64.to_le_bytes()); // text_offset
        image.extend(size.to_le_bytes()); // image_size
        image.extend([0u8; 32]); // flags, reserved
        image.extend(b"ARM\x64");
        image.extend(0u32.to_le_bytes());
        image.extend(body);
        image
    }

    #[test]
    fn the_harness_reads_a_real_qemu_console() {
        if crate::qemu::probe("qemu-system-aarch64").is_err() {
            eprintln!("note: no QEMU >= 9 here; `cargo xtask setup` installs it");
            return;
        }
        let dir = std::env::temp_dir().join(format!("xtask-smoke-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let image = dir.join("tiny.bin");
        let bytes = tiny_image("[cpu0] INFO  gic: GICv3 (tiny image)\n");
        crate::image::check_arm64_header(&bytes).unwrap();
        fs::write(&image, bytes).unwrap();
        let board = crate::board::find("qemu-virt").unwrap();
        let (program, args) = qemu::command(board, &SCENARIOS[0].options()).unwrap();
        let outcome = Scenario::new("smoke", program)
            .args(args)
            .kernel(&image)
            .timeout(Duration::from_secs(30))
            .expect(Expectation::contains("gic: GICv3 (tiny image)"))
            .run();
        assert!(outcome.passed(), "{}", outcome.report());
        // The same image cannot satisfy a real boot scenario.
        let outcome = Scenario::new("smoke-fails", program)
            .args(qemu::command(board, &SCENARIOS[0].options()).unwrap().1)
            .kernel(&image)
            .timeout(Duration::from_secs(3))
            .expect(Expectation::contains("smp: 8 of 8 CPUs online"))
            .run();
        assert!(
            matches!(outcome.result, Err(::tests::Failure::TimedOut { .. })),
            "{}",
            outcome.report()
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_bad_dtb_scenario_boots_with_an_edited_tree() {
        if crate::qemu::probe("qemu-system-aarch64").is_err() {
            eprintln!("note: no QEMU >= 9 here; `cargo xtask setup` installs it");
            return;
        }
        let dir = std::env::temp_dir().join(format!("xtask-baddtb-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let image = dir.join("tiny.bin");
        let complaint = "[cpu0] ERROR device tree: no interrupt controller; stopping\n";
        fs::write(&image, tiny_image(complaint)).unwrap();
        let board = crate::board::find("qemu-virt").unwrap();
        let bad = SCENARIOS
            .iter()
            .find(|s| s.name == "qemu-virt-bad-dtb")
            .unwrap();
        let scenario = bad.prepare(board, &image, &dir).unwrap();
        let dtb = dir.join("dtb/qemu-virt-bad-dtb.dtb");
        assert!(
            scenario
                .command_line()
                .contains(&format!("-dtb {}", dtb.display()))
        );
        let dts = Command::new("dtc")
            .args(["-q", "-I", "dtb", "-O", "dts"])
            .arg(&dtb)
            .output()
            .unwrap();
        let dts = String::from_utf8_lossy(&dts.stdout);
        assert!(dts.contains("cpu-map") && !dts.contains("intc@8000000"));
        let outcome = scenario.timeout(Duration::from_secs(30)).run();
        assert!(outcome.passed(), "{}", outcome.report());
        fs::remove_dir_all(&dir).unwrap();
    }
}
