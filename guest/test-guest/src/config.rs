//! What the guest runs, from `/chosen/bootargs`:
//! `workload=compute,sleeper period_us=1000 samples=50`.
//!
//! Keys: `workload=` (comma list of `compute`, `sleeper`, `pingpong`, `pause`,
//! `misbehave`, `pools`, `cpuoff`, `restart`, `traps`, `top`, `echo`,
//! `debugleak`, `simdleak`, `uartloop`), `rounds=`, `progress_every=`,
//! `yield_every=`,
//! `period_us=`, `samples=`, `pingpong=` (round trips per peer), `vcpus=`,
//! `end=idle|off|reset|crash`, `output=pl011|hvc`, `wait=wfi|block` (how a vCPU
//! waits for an interrupt), `pause_target=` (the sibling vCPU 0 pauses,
//! default 1), `off_target=` (the vCPU that powers itself off in `cpuoff`,
//! default 1, also the vCPU `restart` restarts), `restarts=` (how many times, default
//! 100), `steps=` (`traps`: single steps, default 20000), `move_domain=`, `move_from=`, `move_cpu=` (`pools`: move
//! domain `move_domain` to a new pool made of `move_cpu`'s resource, taken
//! from pool `move_from`; 0 = no move), `destroy_domain=` (`pools`: destroy
//! that domain through `POOL_OP` at the end), `probe=` (`misbehave`: the address
//! it loads from, hex with `0x` or decimal; default the end of its RAM).
//!
//! Words are `key=value`, separated by spaces. Keys this guest does not know
//! (say `console=ttyAMA0` meant for Linux) are skipped and reported; a known
//! key with a bad value makes the whole line invalid, and the guest then runs
//! the compiled-in [`Config::DEFAULT`] after saying why.

use core::fmt;

/// The most workloads one line may list.
pub const MAX_WORKLOADS: usize = 8;

/// One workload; every vCPU takes part in each, in the order listed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    /// Busy loops printing `[vcpuN] progress K`.
    Compute,
    /// Periodic virtual-timer sleeps measuring wake-up latency.
    Sleeper,
    /// SGI ping-pong between vCPU 0 and each other vCPU.
    PingPong,
    /// vCPU 0 pauses and unpauses vCPU 1 through the test hook.
    Pause,
    /// vCPU 0 makes an unknown hypercall and touches memory it does not own.
    Misbehave,
    /// vCPU 0 lists the cpupools and creates and destroys an empty one
    /// through `POOL_OP` (a privileged domain's job; others are refused).
    Pools,
    /// vCPU `off_target` goes off (ARM: PSCI `CPU_OFF`; x86: `cli; hlt`,
    /// then vCPU 0's INIT) while the others compute; vCPU 0 checks it stays
    /// off (even when sent an interrupt) while the others keep counting,
    /// then starts it again (`CPU_ON`; INIT + STARTUP).
    CpuOff,
    /// vCPU 2 restarts vCPU `off_target` `restarts` times (x86: INIT and
    /// STARTUP while it runs; ARM: `CPU_ON` each time it powered itself off)
    /// while vCPU 0, its sched-unit sibling, loops `TEST_UNPAUSE_SIBLING` on
    /// it: the hypervisor must neither lose the pause that holds it off
    /// between the two nor replace its state while a CPU runs it.
    Restart,
    /// vCPU 0 single-steps `steps` instructions (x86: RFLAGS.TF, a #DB
    /// after each, which the hypervisor intercepts and hands back) and
    /// checks its debug registers read back what it wrote; skipped where
    /// the architecture has no such path yet.
    Traps,
    /// vCPU 0 runs an instruction the hypervisor traps from the last four
    /// bytes of the address space (ARM: an ID register read through a page
    /// mapped at the top of TTBR1's range): the hypervisor must move the PC
    /// past it by wrapping to 0, as hardware does, without a fault of its own.
    Top,
    /// vCPU 0 reads console input on the console's receive interrupt (the
    /// PL011's; COM1's IRQ 4 through the 8259A) and prints each line it
    /// gets, until `quit` or a minute without input.
    Echo,
    /// vCPU 0 writes a value of its own into a debug register (ARM:
    /// DBGBVR0_EL1) and reads it back for three seconds: a value another
    /// domain on the same CPU wrote would mean the hypervisor lets debug
    /// registers leak between vCPUs. Skipped where not done yet.
    DebugLeak,
    /// vCPU 0 writes a value of its own into half of a SIMD register and
    /// reads it back for three seconds: a value another domain on the same
    /// CPU wrote would mean the hypervisor does not switch that state. x86:
    /// turns AVX on (CR4.OSXSAVE, XSETBV) and uses the upper half of YMM15,
    /// which legacy SSE state does not hold (skipped without AVX); ARM: the
    /// upper half of V31, which the soft-float hypervisor leaves in the CPU
    /// across exits and moves only at a switch.
    SimdLeak,
    /// vCPU 0 drives a second PL011 (one passed through to the domain, found
    /// in its device tree) in loopback mode: each byte it sends comes back
    /// through the UART's receive interrupt. Skipped where there is none.
    UartLoop,
    /// vCPU 0 takes its virtual timer's interrupt 20 times, each time
    /// ending it (EOI) before it masks the timer, as kvm-unit-tests'
    /// micro-bench does. On bare metal the PPI is pending again while the
    /// line stays high and no longer once the mask drops it: the interrupt
    /// must not be there a second time after the mask. Skipped where not
    /// done yet (x86).
    TimerLevel,
}

impl Workload {
    /// Every workload.
    pub const ALL: [Workload; 15] = [
        Self::Compute,
        Self::Sleeper,
        Self::PingPong,
        Self::Pause,
        Self::Misbehave,
        Self::Pools,
        Self::CpuOff,
        Self::Restart,
        Self::Traps,
        Self::Top,
        Self::Echo,
        Self::DebugLeak,
        Self::SimdLeak,
        Self::UartLoop,
        Self::TimerLevel,
    ];

    /// The name used in `workload=`.
    pub const fn name(self) -> &'static str {
        match self {
            Self::Compute => "compute",
            Self::Sleeper => "sleeper",
            Self::PingPong => "pingpong",
            Self::Pause => "pause",
            Self::Misbehave => "misbehave",
            Self::Pools => "pools",
            Self::CpuOff => "cpuoff",
            Self::Restart => "restart",
            Self::Traps => "traps",
            Self::Top => "top",
            Self::Echo => "echo",
            Self::DebugLeak => "debugleak",
            Self::SimdLeak => "simdleak",
            Self::UartLoop => "uartloop",
            Self::TimerLevel => "timerlevel",
        }
    }
}

/// What to do when every workload is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Stay in a `WFI` loop (the hypervisor sees an idle domain).
    Idle,
    /// PSCI `SYSTEM_OFF` (QEMU exits; the hypervisor stops the domain).
    Off,
    /// PSCI `SYSTEM_RESET` (QEMU reboots; the hypervisor restarts the domain
    /// from its image, so it runs its workloads again).
    Reset,
    /// A fault the guest cannot take (x86: `ud2` with an empty IDT, a triple
    /// fault; ARM: `udf` with VBAR_EL1 outside its RAM, a stage-2 abort on
    /// the vector fetch): the hypervisor must stop this domain alone.
    Crash,
}

/// Where console lines go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConsoleKind {
    /// The PL011 at 0x0900_0000 (emulated per domain by the hypervisor).
    Pl011,
    /// The `CONSOLE_WRITE` hypercall, falling back to the PL011 when the
    /// hypervisor does not support it.
    Hypercall,
}

/// How a vCPU waits for an interrupt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitKind {
    /// `WFI` (the hypervisor traps it and blocks the vCPU).
    Wfi,
    /// The `BLOCK` hypercall, falling back to `WFI` when it is not supported.
    Block,
}

/// The guest's configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    workloads: [Workload; MAX_WORKLOADS],
    workload_count: usize,
    /// Progress lines per vCPU in `compute`; 0 runs forever.
    pub rounds: u32,
    /// Loop iterations between two progress lines.
    pub progress_every: u32,
    /// `compute` calls `YIELD` after every this many progress lines (0: never).
    pub yield_every: u32,
    /// Sleeper period in microseconds.
    pub period_us: u32,
    /// Sleeper samples per vCPU.
    pub samples: u32,
    /// Ping-pong round trips per peer.
    pub pingpong_rounds: u32,
    /// At most this many vCPUs are started (0: every CPU the DTB lists).
    pub vcpus: u32,
    /// What to do at the end.
    pub end: End,
    /// Where lines go.
    pub console: ConsoleKind,
    /// How vCPUs wait for interrupts.
    pub wait: WaitKind,
    /// The sibling vCPU 0 pauses in the `pause` workload (by default 1: with
    /// units of two or more consecutive vCPUs, vCPU 1 shares vCPU 0's unit).
    pub pause_target: u32,
    /// The vCPU that powers itself off in the `cpuoff` workload (by default
    /// 1: a sibling of vCPU 0's unit when units have two or more vCPUs).
    pub off_target: u32,
    /// How many times the `restart` workload restarts `off_target`.
    pub restarts: u32,
    /// How many instructions the `traps` workload single-steps.
    pub steps: u32,
    /// `pools`: the domain to move between pools while it runs (0: none).
    pub move_domain: u32,
    /// `pools`: the pool to take `move_cpu`'s sched resource from.
    pub move_from: u32,
    /// `pools`: a CPU of `move_from` whose resource becomes the new pool.
    pub move_cpu: u32,
    /// `misbehave`: the guest-physical address it loads from (0: the first
    /// byte past its RAM).
    pub probe: u64,
    /// `pools`: a domain to destroy through `POOL_OP` at the end (0: none).
    pub destroy_domain: u32,
}

/// Why a boot-argument line is not valid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigError<'a> {
    /// `workload=` names something this guest does not run.
    UnknownWorkload(&'a str),
    /// More than [`MAX_WORKLOADS`] workloads.
    TooManyWorkloads,
    /// `workload=` with nothing in it.
    NoWorkload,
    /// A number that does not parse or is out of range.
    BadNumber {
        /// The key.
        key: &'a str,
        /// The value given.
        value: &'a str,
    },
    /// A value that is not one of the allowed words.
    BadChoice {
        /// The key.
        key: &'a str,
        /// The value given.
        value: &'a str,
    },
}

impl fmt::Display for ConfigError<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownWorkload(w) => write!(f, "unknown workload {w:?}"),
            Self::TooManyWorkloads => write!(f, "more than {MAX_WORKLOADS} workloads"),
            Self::NoWorkload => write!(f, "workload= lists nothing"),
            Self::BadNumber { key, value } => write!(f, "{key}={value}: not a valid number"),
            Self::BadChoice { key, value } => write!(f, "{key}={value}: not an allowed value"),
        }
    }
}

impl Config {
    /// The compiled-in configuration: every workload once, sized so a boot on
    /// QEMU TCG finishes in seconds.
    pub const DEFAULT: Config = Config {
        workloads: [
            Workload::Compute,
            Workload::Sleeper,
            Workload::PingPong,
            Workload::Pause,
            Workload::Misbehave,
            Workload::Compute,
            Workload::Compute,
            Workload::Compute,
        ],
        workload_count: 5,
        rounds: 5,
        progress_every: 200_000,
        yield_every: 0,
        period_us: 1000,
        samples: 50,
        pingpong_rounds: 20,
        vcpus: 0,
        end: End::Idle,
        console: ConsoleKind::Pl011,
        wait: WaitKind::Wfi,
        pause_target: 1,
        off_target: 1,
        restarts: 100,
        steps: 20_000,
        move_domain: 0,
        move_from: 0,
        move_cpu: 0,
        probe: 0,
        destroy_domain: 0,
    };

    /// The workloads, in order.
    pub fn workloads(&self) -> &[Workload] {
        &self.workloads[..self.workload_count]
    }

    /// Parses a boot-argument line on top of [`Config::DEFAULT`]; `skipped`
    /// is called with every word this guest does not know.
    pub fn parse<'a>(
        line: &'a str,
        mut skipped: impl FnMut(&'a str),
    ) -> Result<Config, ConfigError<'a>> {
        let mut config = Self::DEFAULT;
        for word in line.split_ascii_whitespace() {
            let Some((key, value)) = word.split_once('=') else {
                skipped(word);
                continue;
            };
            let number = |min: u32| {
                value
                    .parse::<u32>()
                    .ok()
                    .filter(|&n| n >= min)
                    .ok_or(ConfigError::BadNumber { key, value })
            };
            match key {
                "workload" => config.set_workloads(value)?,
                "rounds" => config.rounds = number(0)?,
                "progress_every" => config.progress_every = number(1)?,
                "yield_every" => config.yield_every = number(0)?,
                "period_us" => config.period_us = number(1)?,
                "samples" => config.samples = number(1)?,
                "pingpong" => config.pingpong_rounds = number(1)?,
                "vcpus" => config.vcpus = number(1)?,
                "end" => {
                    config.end = match value {
                        "idle" => End::Idle,
                        "off" => End::Off,
                        "reset" => End::Reset,
                        "crash" => End::Crash,
                        _ => return Err(ConfigError::BadChoice { key, value }),
                    }
                }
                "output" => {
                    config.console = match value {
                        "pl011" => ConsoleKind::Pl011,
                        "hvc" => ConsoleKind::Hypercall,
                        _ => return Err(ConfigError::BadChoice { key, value }),
                    }
                }
                "wait" => {
                    config.wait = match value {
                        "wfi" => WaitKind::Wfi,
                        "block" => WaitKind::Block,
                        _ => return Err(ConfigError::BadChoice { key, value }),
                    }
                }
                "pause_target" => config.pause_target = number(1)?,
                "off_target" => config.off_target = number(1)?,
                "restarts" => config.restarts = number(1)?,
                "steps" => config.steps = number(1)?,
                "move_domain" => config.move_domain = number(0)?,
                "move_from" => config.move_from = number(0)?,
                "move_cpu" => config.move_cpu = number(0)?,
                "destroy_domain" => config.destroy_domain = number(0)?,
                "probe" => {
                    let parsed = match value.strip_prefix("0x") {
                        Some(hex) => u64::from_str_radix(hex, 16).ok(),
                        None => value.parse::<u64>().ok(),
                    };
                    config.probe = parsed.ok_or(ConfigError::BadNumber { key, value })?;
                }
                _ => skipped(word),
            }
        }
        Ok(config)
    }

    fn set_workloads<'a>(&mut self, list: &'a str) -> Result<(), ConfigError<'a>> {
        let mut count = 0;
        for name in list.split(',').filter(|n| !n.is_empty()) {
            let workload = Workload::ALL
                .iter()
                .copied()
                .find(|w| w.name() == name)
                .ok_or(ConfigError::UnknownWorkload(name))?;
            if count == MAX_WORKLOADS {
                return Err(ConfigError::TooManyWorkloads);
            }
            self.workloads[count] = workload;
            count += 1;
        }
        if count == 0 {
            return Err(ConfigError::NoWorkload);
        }
        self.workload_count = count;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<Config, ConfigError<'_>> {
        Config::parse(line, |_| {})
    }

    #[test]
    fn an_empty_line_is_the_default() {
        assert_eq!(parse(""), Ok(Config::DEFAULT));
        assert_eq!(
            Config::DEFAULT.workloads(),
            [
                Workload::Compute,
                Workload::Sleeper,
                Workload::PingPong,
                Workload::Pause,
                Workload::Misbehave
            ]
        );
    }

    #[test]
    fn the_documented_example_parses() {
        assert_eq!(
            parse("workload=misbehave probe=0x9000000").unwrap().probe,
            0x900_0000
        );
        assert_eq!(parse("probe=4096").unwrap().probe, 4096);
        assert!(parse("probe=0xg").is_err());
        let config = parse("workload=compute,sleeper period_us=1000").unwrap();
        assert_eq!(config.workloads(), [Workload::Compute, Workload::Sleeper]);
        assert_eq!(config.period_us, 1000);
        let config = parse("  workload=pingpong  samples=7 rounds=0 end=off output=hvc vcpus=2 pingpong=3 progress_every=10").unwrap();
        assert_eq!(config.workloads(), [Workload::PingPong]);
        assert_eq!(
            (
                config.samples,
                config.rounds,
                config.end,
                config.console,
                config.vcpus
            ),
            (7, 0, End::Off, ConsoleKind::Hypercall, 2)
        );
        assert_eq!((config.pingpong_rounds, config.progress_every), (3, 10));
        let config = parse("workload=pools,compute yield_every=2").unwrap();
        assert_eq!(config.workloads(), [Workload::Pools, Workload::Compute]);
        assert_eq!((config.yield_every, Config::DEFAULT.yield_every), (2, 0));
        let config = parse("workload=cpuoff,compute off_target=2 end=reset").unwrap();
        assert_eq!(config.workloads(), [Workload::CpuOff, Workload::Compute]);
        assert_eq!((config.off_target, config.end), (2, End::Reset));
        assert_eq!(parse("end=crash").unwrap().end, End::Crash);
        assert_eq!(Config::DEFAULT.off_target, 1);
        assert!(matches!(
            parse("off_target=0"),
            Err(ConfigError::BadNumber { .. })
        ));
        let config = parse("workload=pools move_domain=2 move_from=1 move_cpu=6").unwrap();
        assert_eq!(
            (config.move_domain, config.move_from, config.move_cpu),
            (2, 1, 6)
        );
        assert_eq!(Config::DEFAULT.move_domain, 0);
        let config = parse("wait=block pause_target=3").unwrap();
        assert_eq!((config.wait, config.pause_target), (WaitKind::Block, 3));
        assert_eq!(
            (Config::DEFAULT.wait, Config::DEFAULT.pause_target),
            (WaitKind::Wfi, 1)
        );
    }

    #[test]
    fn unknown_words_are_skipped_and_reported() {
        let mut skipped = Vec::new();
        let config = Config::parse(
            "console=ttyAMA0 quiet workload=sleeper earlycon=pl011",
            |w| skipped.push(w),
        )
        .unwrap();
        assert_eq!(config.workloads(), [Workload::Sleeper]);
        assert_eq!(skipped, ["console=ttyAMA0", "quiet", "earlycon=pl011"]);
        assert_eq!(
            parse("output=ttyAMA0"),
            Err(ConfigError::BadChoice {
                key: "output",
                value: "ttyAMA0"
            })
        );
    }

    #[test]
    fn bad_values_are_refused() {
        assert_eq!(
            parse("workload=compute,nap"),
            Err(ConfigError::UnknownWorkload("nap"))
        );
        assert_eq!(parse("workload="), Err(ConfigError::NoWorkload));
        assert_eq!(parse("workload=,,"), Err(ConfigError::NoWorkload));
        assert_eq!(
            parse(
                "workload=compute,compute,compute,compute,compute,compute,compute,compute,compute"
            ),
            Err(ConfigError::TooManyWorkloads)
        );
        for bad in [
            "period_us=0",
            "period_us=-1",
            "samples=lots",
            "period_us=99999999999",
            "pingpong=0",
        ] {
            assert!(
                matches!(parse(bad), Err(ConfigError::BadNumber { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            parse("end=reboot"),
            Err(ConfigError::BadChoice { .. })
        ));
        assert_eq!(
            ConfigError::BadNumber {
                key: "samples",
                value: "x"
            }
            .to_string(),
            "samples=x: not a valid number"
        );
    }

    #[test]
    fn eight_workloads_fit() {
        let config =
            parse("workload=compute,sleeper,pingpong,pause,misbehave,compute,sleeper,compute")
                .unwrap();
        assert_eq!(config.workloads().len(), MAX_WORKLOADS);
        assert_eq!(config.workloads()[7], Workload::Compute);
    }
}
