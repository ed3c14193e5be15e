//! What a scenario's console must show: the expectations built from its
//! topology, GIC and guests.

use super::*;

/// The lines that say `hv.test-break-cosched` was planted on `cpus`.
pub(super) fn planted_fault_lines(cpus: &[usize]) -> Vec<Expectation> {
    cpus.iter()
        .map(|cpu| {
            Expectation::contains(format!(
                "TEST: cpu {cpu} skips the core-scheduling rendezvous"
            ))
        })
        .collect()
}

/// What a Linux scenario must show (Linux is dom1, the test guests dom2 and dom3).
/// The co-residency line with the busiest shared resource at `min` checked
/// switches or more and no overlap since boot.
pub(super) fn coresidency_at_least(min: u64) -> Expectation {
    Expectation::at_least(
        r"coresidency: \d+ switches checked on \d+ shared resources \(busiest: (\d+) on cpus [^)]*\), 0 overlaps",
        min,
    )
    .expect("a fixed pattern that compiles")
}

/// What every UEFI + ACPI boot of the Ampere image shows: the application's
/// start, the tables it used, then [`boot_expectations`].
pub(super) fn uefi_boot_expectations(gic: Gic, topology: &str, cpus: usize) -> Vec<Expectation> {
    let mut all = vec![
        Expectation::contains("hv: UEFI application started"),
        Expectation::contains("booting on board ampere at EL2 (UEFI, ACPI)"),
        Expectation::contains("from the UEFI memory map"),
        Expectation::contains("; ACPI MADT, from the PPTT"),
        Expectation::contains("acpi: FADT ARM_BOOT_ARCH"),
        Expectation::contains("timer: GTDT PPIs"),
    ];
    all.extend(boot_expectations(gic, topology, cpus));
    all
}

/// The machine a Linux scenario's kernel sees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LinuxPlatform {
    /// QEMU virt with this GIC: PSCI for reset and power-off, the
    /// architected timer.
    Arm(Gic),
    /// The x86 PC the hypervisor emulates: ACPI reset register and S5, the
    /// local APIC timer.
    X86,
}

impl LinuxPlatform {
    /// The end of `/proc/interrupts`' row of the per-CPU timer.
    pub(super) fn timer_row_end(self) -> &'static str {
        match self {
            Self::Arm(_) => " arch_timer",
            Self::X86 => " Local timer interrupts",
        }
    }

    /// The start of `/proc/interrupts`' last row.
    pub(super) fn interrupts_end(self) -> &'static str {
        match self {
            Self::Arm(_) => "Err:",
            Self::X86 => "PIW:",
        }
    }

    /// The hypervisor's lines when the guest resets and powers off.
    fn reset_and_off(self) -> (&'static str, &'static str) {
        match self {
            Self::Arm(_) => (
                "(linux): restarting (PSCI SYSTEM_RESET)",
                "(linux): stopped: powered off (PSCI SYSTEM_OFF)",
            ),
            Self::X86 => (
                "(linux): restarting (guest reset)",
                "(linux): stopped: powered off (ACPI S5)",
            ),
        }
    }
}

/// The x86 Linux domain's clock (its CMOS RTC, which starts from the
/// host's) shows today's UTC date in its ready line (or tomorrow's, for a
/// run that crosses midnight), not 2000-01-01 plus the uptime.
fn todays_date_in_the_ready_line() -> Expectation {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let date = |seconds| {
        let (year, month, day) = hv::x86::cmos_rtc::civil_date(seconds);
        format!("{year:04}-{month:02}-{day:02}")
    };
    // READY_LINE holds no regex metacharacters.
    let pattern = format!(
        r"\[dom1\] {} .* date=({}|{})",
        crate::linux::READY_LINE,
        date(now),
        date(now + 86_400)
    );
    Expectation::matching(&pattern, 1).expect("a valid pattern")
}

pub(super) fn linux_expectations(
    platform: LinuxPlatform,
    run: LinuxRun,
    min_switches: u64,
) -> Vec<Expectation> {
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
    if platform == LinuxPlatform::Arm(Gic::V3) {
        // One redistributor frame per vCPU, found by each.
        all.push(Expectation::contains(match run {
            LinuxRun::Panic | LinuxRun::Pair => "GICv3: CPU1: found redistributor 1",
            _ => "GICv3: CPU3: found redistributor 3",
        }));
    }
    if platform == LinuxPlatform::X86 {
        // XSAVE with the host's x87, SSE and AVX components, each vCPU's
        // switched by the hypervisor (as bare Linux on the same QEMU CPU
        // prints it).
        all.push(Expectation::contains(
            "x86/fpu: Enabled xstate features 0x7, context size is 832 bytes, using 'standard' format.",
        ));
        all.push(todays_date_in_the_ready_line());
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
                Expectation::contains(platform.timer_row_end()),
                Expectation::contains("loops-2-finished"),
                Expectation::contains(LINUX_TOPOLOGY_LINE),
            ]));
            for cpu in 0..4 {
                all.push(Expectation::contains(format!(
                    "loop {cpu} done on cpu {cpu}"
                )));
            }
            let mut steps = vec![Expectation::contains("loops-2-finished")];
            let (reset, off) = platform.reset_and_off();
            if reboot {
                // PSCI SYSTEM_RESET or the ACPI reset register: only Linux
                // restarts, and boots again.
                steps.extend([
                    Expectation::contains(reset),
                    Expectation::contains("(linux): restarted from its image"),
                    ready,
                ]);
            }
            // PSCI SYSTEM_OFF or ACPI S5 stops only Linux; the others go on
            // after it.
            steps.push(Expectation::contains(off));
            steps.extend(others_go_on());
            all.push(Expectation::InOrder(steps));
        }
    }
    all
}

/// What a healthy boot of `cpus` CPUs prints.
pub(super) fn boot_expectations(gic: Gic, topology: &str, cpus: usize) -> Vec<Expectation> {
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
pub(super) fn x86_boot_expectations(
    topology: &str,
    cpus: usize,
    apic: &str,
    svm: &str,
) -> Vec<Expectation> {
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
pub(super) fn banner_expectations(
    controller: String,
    topology: &str,
    cpus: usize,
) -> Vec<Expectation> {
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
