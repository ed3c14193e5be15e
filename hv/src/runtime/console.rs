//! The hypervisor console's command runner (`hv> `): parses a line
//! ([`crate::console_cmd`]) and answers on the console; a refused command
//! prints one `error: ...` line and changes nothing.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use log::info;
use sched::{CpuSet, DomainId, PoolId, VcpuId};

use super::pool_ops::label;
use super::{Arch, Runtime};
use crate::config::format_cpu_list;
use crate::console_cmd::{self, Command};
use crate::pools::PoolOpError;

impl<A: Arch> Runtime<A> {
    /// Runs one line typed at the hypervisor console (`hv> `).
    pub fn run_command(&self, line: &str) {
        let command = match console_cmd::parse(line) {
            Ok(Some(command)) => command,
            Ok(None) => return,
            Err(e) => return self.say(format_args!("error: {e}")),
        };
        let result = match command {
            Command::Help => {
                for help in console_cmd::HELP {
                    self.say(format_args!("{help}"));
                }
                Ok(())
            }
            Command::Pools => {
                self.list_pools();
                Ok(())
            }
            Command::Domains => {
                self.list_domains();
                Ok(())
            }
            Command::PoolCreate {
                name,
                scheduler,
                granularity,
            } => self.create(&name, &scheduler, &granularity),
            Command::PoolDestroy { pool } => self.destroy(&pool),
            Command::PoolAddCpu { pool, cpu } => self.add_cpu(&pool, cpu),
            Command::PoolRemoveCpu { pool, cpu } => self.remove_cpu(&pool, cpu),
            Command::Move { domain, pool } => self.move_domain(domain, &pool),
            Command::Pin { domain, hard, soft } => self.pin(domain, hard, soft),
            Command::TraceStart { classes } => {
                self.trace_start(classes);
                Ok(())
            }
            Command::TraceStop => {
                self.trace_stop();
                Ok(())
            }
            Command::TraceDump => {
                self.trace_dump();
                Ok(())
            }
            Command::TraceStatus => {
                self.trace_status();
                Ok(())
            }
        };
        if let Err(e) = result {
            self.say(format_args!("error: {e}"));
            info!("pools: console: '{line}' refused: {e}");
        }
    }

    /// `pin DOMAIN HARD [SOFT]`.
    fn pin(&self, domain: u32, hard: CpuSet, soft: Option<CpuSet>) -> Result<(), PoolOpError> {
        let soft = soft.unwrap_or_default();
        self.with_system(|s, p| s.domain_set_affinity(DomainId(domain), hard, soft, p))
            .ok_or_else(super::pool_ops::not_booted)?
            .map_err(PoolOpError::System)?;
        let hard = format_cpu_list(&hard);
        let soft_text = if soft.is_empty() {
            String::from("no preference")
        } else {
            alloc::format!("soft {}", format_cpu_list(&soft))
        };
        self.say(format_args!(
            "dom{domain}: hard affinity {hard}, {soft_text}"
        ));
        info!("pools: console: dom{domain} pinned: hard {hard}, {soft_text}");
        Ok(())
    }

    /// One answer line, without the log prefix (the console is interactive).
    pub(super) fn say(&self, args: fmt::Arguments<'_>) {
        self.arch.console_line(args);
    }

    /// `pools`: one line per pool.
    fn list_pools(&self) {
        let lines = self
            .with_pools(|s, n, _| {
                let mut lines = Vec::new();
                let ids: Vec<PoolId> = s.pools().collect();
                for id in ids {
                    let Some(info) = s.pool_info(id) else {
                        continue;
                    };
                    let mut line = alloc::format!(
                        "{}: {}, {} granularity, CPUs {}, domains:",
                        label(n, id),
                        info.scheduler,
                        info.granularity,
                        info.cpus
                    );
                    let mut any = false;
                    for d in s.domains().filter(|&d| s.domain_pool(d) == Some(id)) {
                        let _ = write!(line, " dom{}", d.0);
                        any = true;
                    }
                    if !any {
                        line.push_str(" none");
                    }
                    lines.push(line);
                }
                let free = s.free_cpus();
                lines.push(alloc::format!(
                    "free CPUs (idle scheduler): {}",
                    if free.is_empty() {
                        String::from("none")
                    } else {
                        alloc::format!("{free}")
                    }
                ));
                lines
            })
            .unwrap_or_default();
        for line in lines {
            self.say(format_args!("{line}"));
        }
    }

    /// `domains`: one line per domain, then one per vCPU.
    fn list_domains(&self) {
        for id in self.arch.domain_ids() {
            let Some((name, stopped)) = self.arch.domain_summary(id) else {
                continue;
            };
            // vCPU ids, states and the pool, read in one go.
            let view = self.with_pools(|s, n, _| {
                let pool = s.domain_pool(id).map(|p| label(n, p));
                let vcpus: Vec<(VcpuId, &'static str, Option<usize>)> = s
                    .domain_vcpus(id)
                    .unwrap_or(&[])
                    .iter()
                    .filter_map(|&v| {
                        let info = s.vcpu_info(v)?;
                        let state = if info.running_on.is_some() {
                            "running"
                        } else if info.pause_count > 0 {
                            "paused"
                        } else if info.blocked {
                            "blocked"
                        } else {
                            "runnable"
                        };
                        Some((v, state, info.running_on))
                    })
                    .collect();
                (pool, vcpus)
            });
            let (pool, vcpus) = view.unwrap_or_default();
            let state = if stopped {
                "stopped"
            } else if vcpus.iter().any(|v| v.1 == "running") {
                "running"
            } else {
                "idle"
            };
            self.say(format_args!(
                "dom{} ({name}): {state}, {}",
                id.0,
                pool.as_deref().unwrap_or("no pool")
            ));
            for (index, (v, state, on)) in vcpus.iter().enumerate() {
                let runtime_us = self.arch.vcpu_runtime_ns(*v) / 1000;
                match on {
                    Some(cpu) => self.say(format_args!(
                        "  vcpu {index}: {state} on cpu {cpu}, ran {runtime_us} us"
                    )),
                    None => self.say(format_args!("  vcpu {index}: {state}, ran {runtime_us} us")),
                }
            }
        }
    }
}
