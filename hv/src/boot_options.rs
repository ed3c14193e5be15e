//! The hypervisor's own words on the boot command line (x86: the PVH start
//! info's command line, `-append` under QEMU). Only `hv.`-prefixed words are
//! the hypervisor's; anything else is left alone, and an `hv.` word this
//! parser does not know is reported so a typo does not go unnoticed.

use trace::ClassSet;

/// What a command line asks for: test hooks and console input settings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BootOptions {
    /// `hv.fault-test=page-fault`: the boot CPU reads an unmapped address
    /// after the banner, so a test can check the exception report.
    pub fault_test: bool,
    /// `hv.test-silent-ap=N`: CPU `N` parks as soon as it runs, without
    /// reporting in, so a test can check how the boot CPU copes with an AP
    /// that never answers its INIT-SIPI-SIPI.
    pub silent_ap: Option<usize>,
    /// `hv.test-break-cosched=N[,M...]`: these CPUs (at most
    /// [`MAX_BROKEN_CPUS`]) skip their core-scheduling rendezvous waits, so a
    /// test can check that the co-residency checker reports the overlaps
    /// that follow.
    pub break_cosched: BrokenCpus,
    /// `hv.speculation-flush=off`: no flush between domains (IBPB, VERW, L1D
    /// flush, branch-history loop, firmware workarounds), to measure what
    /// they cost (`cargo xtask bench-hv`). Never for a machine that runs
    /// domains which must not see each other.
    pub no_speculation_flush: bool,
    /// `hv.test-break-debug-switch=on` (ARM): guests get the debug registers
    /// untrapped from the start and a switch neither saves, loads nor
    /// clears them, so a test can check that its guests then see each
    /// other's values (the fault the per-vCPU switch prevents).
    pub break_debug_switch: bool,
    /// `hv.test-break-fpu-switch=on`: on x86 a switch saves and restores
    /// only the x87 and SSE state and the reset path leaves the AVX halves
    /// alone, so a test can check that its guests then see each other's
    /// YMM upper halves (the fault switching every XSAVE component
    /// prevents); on ARM a switch leaves the FP/SIMD registers as they are,
    /// so guests see each other's.
    pub break_fpu_switch: bool,
    /// `hv.console-input=poll`: read the console UART from the boot CPU's
    /// tick even when its interrupt could be routed (x86: the fallback for
    /// a machine without an I/O APIC, testable on one with it).
    pub console_poll: bool,
    /// `hv.trace=CLASSES` (`on`, `all` or a list such as
    /// `sched,rendezvous`): record these scheduler trace classes from boot
    /// (empty: none; `trace start` on the console starts later).
    pub trace: ClassSet,
    /// `hv.trace-dump=SECONDS`: with `hv.trace`, stop and dump the trace on
    /// the console this long after the boot's domains started.
    pub trace_dump_seconds: Option<u32>,
    /// `hv.trace-events=N`: each CPU's trace ring holds N events.
    pub trace_events: Option<usize>,
}

/// The most CPUs `hv.test-break-cosched` names.
pub const MAX_BROKEN_CPUS: usize = 8;

/// The CPUs of `hv.test-break-cosched`, in the order given.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BrokenCpus {
    cpus: [usize; MAX_BROKEN_CPUS],
    len: usize,
}

impl BrokenCpus {
    /// The CPUs.
    pub fn as_slice(&self) -> &[usize] {
        &self.cpus[..self.len]
    }

    /// Parses `4` or `4,5`; `None` for anything else (or too many).
    fn parse(list: &str) -> Option<Self> {
        let mut set = Self::default();
        for cpu in list.split(',') {
            let slot = set.cpus.get_mut(set.len)?;
            *slot = cpu.parse().ok()?;
            set.len += 1;
        }
        Some(set)
    }
}

/// An `hv.` word that was not understood.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnknownOption<'a>(pub &'a str);

impl core::fmt::Display for UnknownOption<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "unknown or malformed option {:?} ignored (known: hv.fault-test=page-fault, hv.test-silent-ap=CPU, hv.test-break-cosched=CPU[,CPU...], hv.speculation-flush=off, hv.console-input=poll, hv.test-break-debug-switch=on, hv.test-break-fpu-switch=on, hv.trace=CLASSES, hv.trace-dump=SECONDS, hv.trace-events=N)",
            self.0
        )
    }
}

impl BootOptions {
    /// Reads `cmdline`; every `hv.` word it cannot use goes to `unknown`.
    pub fn parse<'a>(cmdline: &'a str, mut unknown: impl FnMut(UnknownOption<'a>)) -> Self {
        let mut options = Self::default();
        for word in cmdline.split_whitespace() {
            let Some(option) = word.strip_prefix("hv.") else {
                continue;
            };
            match option.split_once('=') {
                Some(("fault-test", "page-fault")) => options.fault_test = true,
                Some(("console-input", "poll")) => options.console_poll = true,
                Some(("speculation-flush", "off")) => options.no_speculation_flush = true,
                Some(("test-break-debug-switch", "on")) => options.break_debug_switch = true,
                Some(("test-break-fpu-switch", "on")) => options.break_fpu_switch = true,
                Some(("test-silent-ap", cpu)) => match cpu.parse() {
                    Ok(cpu) => options.silent_ap = Some(cpu),
                    Err(_) => unknown(UnknownOption(word)),
                },
                Some(("trace-events", events)) => match events.parse() {
                    Ok(events) if events > 0 => options.trace_events = Some(events),
                    _ => unknown(UnknownOption(word)),
                },
                Some(("trace-dump", seconds)) => match seconds.parse() {
                    Ok(seconds) if seconds > 0 => options.trace_dump_seconds = Some(seconds),
                    _ => unknown(UnknownOption(word)),
                },
                Some(("trace", classes)) => match ClassSet::parse(classes) {
                    Ok(classes) => options.trace = classes,
                    Err(_) => unknown(UnknownOption(word)),
                },
                Some(("test-break-cosched", cpus)) => match BrokenCpus::parse(cpus) {
                    Some(cpus) => options.break_cosched = cpus,
                    None => unknown(UnknownOption(word)),
                },
                _ => unknown(UnknownOption(word)),
            }
        }
        options
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(cmdline: &str) -> (BootOptions, Vec<String>) {
        let mut unknown = Vec::new();
        let options = BootOptions::parse(cmdline, |u| unknown.push(u.0.to_string()));
        (options, unknown)
    }

    #[test]
    fn trace_classes_are_read_and_a_bad_class_is_reported() {
        assert_eq!(parse("hv.trace=on").0.trace, ClassSet::DEFAULT);
        assert_eq!(
            parse("hv.trace=sched,rendezvous").0.trace,
            ClassSet::parse("sched,rendezvous").unwrap()
        );
        let (options, unknown) = parse("hv.trace=sched,nope");
        assert_eq!(options.trace, ClassSet::default());
        assert_eq!(unknown, ["hv.trace=sched,nope"]);
        assert_eq!(parse("hv.trace-dump=5").0.trace_dump_seconds, Some(5));
        let (options, unknown) = parse("hv.trace-dump=0 hv.trace-dump=x");
        assert_eq!(options.trace_dump_seconds, None);
        assert_eq!(unknown, ["hv.trace-dump=0", "hv.trace-dump=x"]);
        assert_eq!(parse("hv.trace-events=65536").0.trace_events, Some(65536));
        assert_eq!(parse("hv.trace-events=0").1, ["hv.trace-events=0"]);
    }

    #[test]
    fn the_debug_switch_can_be_broken_on_purpose() {
        assert!(parse("hv.test-break-debug-switch=on").0.break_debug_switch);
        assert!(parse("hv.test-break-fpu-switch=on").0.break_fpu_switch);
        assert_eq!(
            parse("hv.test-break-fpu-switch=1").1,
            ["hv.test-break-fpu-switch=1"]
        );
        assert!(!parse("").0.break_debug_switch);
        let (options, unknown) = parse("hv.test-break-debug-switch=yes");
        assert!(!options.break_debug_switch);
        assert_eq!(unknown, ["hv.test-break-debug-switch=yes"]);
    }

    #[test]
    fn only_hv_words_count() {
        assert_eq!(
            parse("console=ttyS0 hv.fault-test=page-fault quiet"),
            (
                BootOptions {
                    fault_test: true,
                    ..BootOptions::default()
                },
                vec![]
            )
        );
        assert_eq!(parse(""), (BootOptions::default(), vec![]));
    }

    #[test]
    fn breaking_core_scheduling_takes_a_cpu_number() {
        assert_eq!(
            parse("hv.test-break-cosched=5").0.break_cosched.as_slice(),
            [5]
        );
        assert_eq!(
            parse("hv.test-break-cosched=4,5")
                .0
                .break_cosched
                .as_slice(),
            [4, 5]
        );
        let (options, unknown) =
            parse("hv.test-break-cosched=yes hv.test-break-cosched=1,2,3,4,5,6,7,8,9");
        assert!(options.break_cosched.as_slice().is_empty());
        assert_eq!(unknown.len(), 2);
        assert!(
            parse("quiet").0.break_cosched.as_slice().is_empty(),
            "off unless given"
        );
    }

    #[test]
    fn speculation_flushes_are_on_unless_turned_off() {
        assert!(!parse("").0.no_speculation_flush);
        assert!(parse("hv.speculation-flush=off").0.no_speculation_flush);
        assert_eq!(parse("hv.speculation-flush=maybe").1.len(), 1);
    }

    #[test]
    fn silent_ap_takes_a_cpu_number() {
        assert_eq!(parse("hv.test-silent-ap=3").0.silent_ap, Some(3));
        let (options, unknown) = parse("hv.test-silent-ap=three hv.test-silent-ap=");
        assert_eq!(options.silent_ap, None);
        assert_eq!(unknown, ["hv.test-silent-ap=three", "hv.test-silent-ap="]);
    }

    #[test]
    fn console_input_poll() {
        assert!(parse("quiet hv.console-input=poll").0.console_poll);
        let (options, unknown) = parse("hv.console-input=irq hv.console-input");
        assert!(!options.console_poll);
        assert_eq!(unknown, ["hv.console-input=irq", "hv.console-input"]);
    }

    #[test]
    fn unknown_and_malformed_hv_words_are_reported() {
        let (options, unknown) = parse("hv.fault-test=other hv.nosuch hv.fault-test");
        assert_eq!(options, BootOptions::default());
        assert_eq!(
            unknown,
            ["hv.fault-test=other", "hv.nosuch", "hv.fault-test"]
        );
        let line = UnknownOption("hv.nosuch").to_string();
        assert!(line.contains("\"hv.nosuch\"") && line.contains("hv.test-silent-ap=CPU"));
    }
}
