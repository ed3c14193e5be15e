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

mod arm;
mod expect;
mod linux;
mod parse;
mod x86;

// The groups' items, for the checks below (which are written once for all).
use expect::*;
use linux::*;
use parse::*;

/// Every scenario, in the order `cargo xtask test` runs them: ARM, then the
/// Linux guests, then x86.
pub const SCENARIOS: &[QemuScenario] = &concat::<
    { arm::SCENARIOS.len() + linux::SCENARIOS.len() + x86::SCENARIOS.len() },
>([arm::SCENARIOS, linux::SCENARIOS, x86::SCENARIOS]);

/// `groups` one after another, as one array (a `const` cannot collect).
const fn concat<const N: usize>(groups: [&[QemuScenario]; 3]) -> [QemuScenario; N] {
    let mut all = [groups[0][0]; N];
    let (mut group, mut at) = (0, 0);
    while group < groups.len() {
        let mut i = 0;
        while i < groups[group].len() {
            all[at] = groups[group][i];
            (i, at) = (i + 1, at + 1);
        }
        group += 1;
    }
    all
}

/// How long a scenario with guests may take to show everything it expects.
pub const GUESTS_TIMEOUT: Duration = Duration::from_secs(150);

/// How long a UEFI boot may take to show everything: edk2 itself, then the
/// hypervisor, then its guests.
pub const UEFI_TIMEOUT: Duration = Duration::from_secs(180);

/// How long one boot may take: TCG on two shared host cores is slow.
pub const BOOT_TIMEOUT: Duration = Duration::from_secs(60);

/// What a scenario checks.
#[derive(Clone, Copy, Debug)]
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
    /// [`Check::UefiBoot`] on a big.LITTLE machine: the UEFI test tool
    /// (`tests/uefi-madt-classes`) boots first, gives edk2's MADT two
    /// efficiency classes (the first half of the CPUs LITTLE) and starts the
    /// hypervisor, which must find the classes, make the automatic pools of
    /// `config` (which lists none) and run its domains in them.
    UefiBigLittle {
        /// The config (a path from the repository root).
        config: &'static str,
        /// The expected topology line's values.
        topology: &'static str,
        /// How many CPUs come online.
        cpus: usize,
        /// Lines that must each appear.
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

/// One QEMU scenario.
#[derive(Clone, Copy, Debug)]
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
    /// Runs under `-icount` ([`SHARE_ICOUNT`]): virtual time follows the
    /// instructions executed, so an interrupt due in the past arrives before
    /// the next instruction retires (a host timer re-armed in the past from
    /// its own handler livelocks there, where real time hides it).
    pub icount: bool,
}

impl QemuScenario {
    /// A scenario on `board`'s default CPU model, run by default, without a
    /// co-residency bar; the methods below change those.
    const fn new(
        name: &'static str,
        board: &'static str,
        gic: Gic,
        smp: &'static str,
        check: Check,
    ) -> Self {
        Self {
            name,
            board,
            gic,
            cpu: None,
            smp,
            check,
            min_switches: 0,
            pending: None,
            icount: false,
        }
    }

    /// Runs under `-icount` ([`QemuScenario::icount`]).
    const fn icount(mut self) -> Self {
        self.icount = true;
        self
    }

    /// Boots with `-cpu model`.
    const fn cpu(mut self, model: &'static str) -> Self {
        self.cpu = Some(model);
        self
    }

    /// Requires `switches` checked switches on the busiest shared resource.
    const fn min_switches(mut self, switches: u64) -> Self {
        self.min_switches = switches;
        self
    }

    /// Keeps it out of the default run, for `reason`.
    const fn pending(mut self, reason: &'static str) -> Self {
        self.pending = Some(reason);
        self
    }
}

/// What one isolation check boots and must see (see [`isolation_pair`]).
#[derive(Clone, Copy)]
struct Isolation {
    /// The check's name; its planted-fault twin's is `broken_name`.
    name: &'static str,
    broken_name: &'static str,
    board: &'static str,
    smp: &'static str,
    /// Two domains sharing one core, each running the leak workload.
    config: &'static str,
    /// What each domain prints when it kept reading its own value.
    ok: &'static [&'static str],
    /// The hypervisor's command-line switch that breaks the state's switch
    /// on purpose.
    break_switch: &'static str,
    /// What the broken twin must see: one domain read the other's value.
    leaked: &'static [&'static str],
}

/// An isolation check and its planted-fault twin: the same two domains on
/// one core, switched at least 50 times; the first must see each keep its
/// own value, the second, booted with the switch broken on purpose, must
/// see one read the other's (so the check is shown able to fail).
const fn isolation_pair(i: Isolation) -> [QemuScenario; 2] {
    const fn check(
        config: &'static str,
        expect: &'static [&'static str],
        append: Option<&'static str>,
    ) -> Check {
        Check::Interactive {
            config,
            expect,
            allow: &[],
            input: &[],
            ordered: &[],
            append,
        }
    }
    [
        QemuScenario::new(i.name, i.board, Gic::V3, i.smp, check(i.config, i.ok, None))
            .min_switches(50),
        QemuScenario::new(
            i.broken_name,
            i.board,
            Gic::V3,
            i.smp,
            check(i.config, i.leaked, Some(i.break_switch)),
        )
        .min_switches(50),
    ]
}

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

/// `-icount` of the [`Check::CpuShare`] scenarios that need it: one
/// instruction per virtual ns, and idle time skipped rather than slept.
const SHARE_ICOUNT: &str = "shift=0,sleep=off";

/// Every QEMU scenario, in the order they run.
/// What the unit-pause scenarios' domain without `test_hooks` must hear
/// when it tries `TEST_PAUSE_SIBLING`.
const UNIT_PAUSE_REFUSED: &str = "[dom2] test-guest: pause sibling 1 refused: DENIED (-3)";

/// `-smp` with SMT: two clusters of two cores of two threads.
const SMT_SMP: &str = "8,clusters=2,cores=2,threads=2";

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
    // Typing nothing waits for a line: the next command only once both of
    // dom2's vCPUs ran in the new pool, so the order POOLS_CONSOLE_ORDERED
    // checks is caused by the commands, not won in a race with their typing.
    ("moved dom2 from pool 1 (smt) to pool 2 (fast)", ""),
    ("[dom2] [vcpu0] progress", ""),
    ("[dom2] [vcpu1] progress", "pool-remove-cpu fast 6\n"),
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
    ("pool 'fast' is now 'quick'", ""),
    ("[dom3] [vcpu1] progress", "pause 3\n"),
    ("dom3: paused", "pause 3\ndomains\n"),
    ("dom3 (neighbour): paused", "unpause 3\n"),
    // dom3 runs again (vCPU 0 too) before the next command.
    ("dom3: unpaused", ""),
    ("[dom3] [vcpu0] progress", "destroy 4\n"),
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
    // `restart 1` (xl reboot): reloaded from its image, it boots again.
    "domain 1 (steady): restarting (toolstack)",
    "domain 1 (steady): restarted from its image",
    "[dom1] test-guest: started",
    // Its second vCPU started again too (PSCI CPU_ON; x86 INIT + STARTUP).
    "[dom1] test-guest: 2 of 2 vCPUs online",
    // The co-residency checker's periodic report, after all of it.
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
    "domain 1 (steady): restarted from its image",
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

impl QemuScenario {
    /// Whether this scenario's config names the files `cargo xtask
    /// guest-linux` writes (as a user's own images), so they must exist
    /// before its image is built.
    pub fn needs_linux_guest_files(&self) -> bool {
        self.config() == Some(USER_IMAGES_CONFIG)
    }

    /// The machine a Linux scenario's kernel sees, by the board.
    fn linux_platform(&self) -> LinuxPlatform {
        match self.board {
            "qemu-x86" => LinuxPlatform::X86,
            _ => LinuxPlatform::Arm(self.gic),
        }
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
            | Check::PeerSuite { config, .. }
            | Check::UefiBigLittle { config, .. } => Some(config),
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

    /// Whether this scenario boots the UEFI test tool first
    /// ([`crate::uefi_tool`]), whose boot partition must then be written
    /// beside its image.
    pub fn needs_uefi_tool(&self) -> bool {
        matches!(self.check, Check::UefiBigLittle { .. })
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
                let mut all = linux_expectations(self.linux_platform(), run, self.min_switches);
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
                let mut all = uefi_boot_expectations(self.gic, topology, cpus);
                all.extend(expect.iter().map(|&e| Expectation::contains(e)));
                all.push(self.coresidency());
                all
            }
            Check::UefiBigLittle {
                topology,
                cpus,
                expect,
                ..
            } => {
                let half = cpus / 2;
                let mut all = vec![Expectation::contains(format!(
                    "uefi-madt-classes: {cpus} GICC entries: class 0 (LITTLE) for the first {half}, class 1 (big) for the other {}",
                    cpus - half
                ))];
                all.extend(uefi_boot_expectations(self.gic, topology, cpus));
                all.extend(expect.iter().map(|&e| Expectation::contains(e)));
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
        if self.icount || matches!(self.check, Check::CpuShare { icount: true, .. }) {
            options
                .extra
                .extend(["-icount".to_string(), SHARE_ICOUNT.to_string()]);
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
        // UEFI boards boot their image from a FAT drive (the test tool's, if
        // it boots first), the others with -kernel.
        scenario = match board.qemu {
            Some((_, crate::board::Machine::VirtUefi)) if self.needs_uefi_tool() => scenario.args(
                qemu::esp_drive_args(&image.with_file_name(crate::uefi_tool::ESP_DIR)),
            ),
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
        if let Check::UefiBigLittle { .. } = self.check {
            scenario = scenario.timeout(UEFI_TIMEOUT);
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
            if self.linux_platform() == LinuxPlatform::X86 {
                // The emulated EPYC's missing SRSO microcode: bare Linux on
                // the same QEMU CPU prints the same advice line.
                scenario = scenario.allow("Speculative Return Stack Overflow: WARNING: See");
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
                    let platform = self.linux_platform();
                    for &(after, typed) in LINUX_SMOKE_INPUT.iter().chain(end) {
                        let after = match after {
                            INTERRUPTS_END => platform.interrupts_end(),
                            after => after,
                        };
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
            let counts = linux_timer_counts(lines, self.linux_platform().timer_row_end())?;
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

/// The switch-cost scenario's name (`cargo xtask bench-hv` runs it).
pub const SWITCH_COST_SCENARIO: &str = "qemu-virt-switch-cost";

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

/// Dumps QEMU's device tree for `options` (the board's device tree on
/// raspi4b), applies `edit` with dtc and returns the path of the edited blob
/// (`<dir>/<name>.dtb`).
pub(crate) fn edited_dtb(
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
mod tests;
