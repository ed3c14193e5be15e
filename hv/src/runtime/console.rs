//! The hypervisor console's command runner (`hv> `): parses a line
//! ([`crate::console_cmd`]) and answers on the console; a refused command
//! prints one `error: ...` line and changes nothing.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

use log::info;
use sched::{CpuSet, DomainId, PoolId, SchedParams, VcpuId};

use super::pool_ops::{label, resolve};
use super::{Arch, Runtime};
use crate::config::format_cpu_list;
use crate::console_cmd::{self, Command, DomainAction, PoolRef};
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
                placement,
                params,
            } => self.create(&name, &scheduler, &granularity, placement, &params),
            Command::PoolDestroy { pool } => self.destroy(&pool),
            Command::PoolAddCpu { pool, cpu } => self.add_cpu(&pool, cpu),
            Command::PoolRemoveCpu { pool, cpu } => self.remove_cpu(&pool, cpu),
            Command::Move { domain, pool } => self.move_domain(domain, &pool),
            Command::Pin { domain, hard, soft } => self.pin(domain, hard, soft),
            Command::Domain { action, domain } => self.domain_action(action, domain),
            Command::SchedDomain {
                scheduler,
                domain,
                weight,
                cap,
                period_us,
                budget_us,
                extratime,
            } => self.sched_domain(scheduler, domain, |params| {
                if let Some(weight) = weight {
                    params.weight = weight;
                }
                if let Some(cap) = cap {
                    params.cap_percent = cap;
                }
                if let Some(period) = period_us {
                    params.period_ns = period.saturating_mul(1000);
                }
                if let Some(budget) = budget_us {
                    params.budget_ns = budget.saturating_mul(1000);
                }
                if let Some(extratime) = extratime {
                    params.extratime = extratime;
                }
            }),
            Command::PoolParam { pool, key, value } => self.pool_param(&pool, &key, &value),
            Command::PoolRename { pool, name } => self.rename(&pool, &name),
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

    /// `sched-credit`/`sched-credit2`/`sched-rtds`: applies `change` to the
    /// domain's parameters (the scheduler checks them; nothing changes if it
    /// refuses) and prints what they are now.
    fn sched_domain(
        &self,
        scheduler: &'static str,
        domain: u32,
        change: impl FnOnce(&mut SchedParams),
    ) -> Result<(), PoolOpError> {
        let id = DomainId(domain);
        let params = self
            .with_system(|s, _| {
                let pool = s
                    .domain_pool(id)
                    .ok_or(PoolOpError::UnknownDomain(domain))?;
                let actual = s.pool_info(pool).map_or("?", |i| i.scheduler);
                if actual != scheduler {
                    return Err(PoolOpError::WrongScheduler {
                        domain,
                        wanted: scheduler,
                        actual,
                    });
                }
                let mut params = s
                    .domain_params(id)
                    .ok_or(PoolOpError::UnknownDomain(domain))?;
                let before = params;
                change(&mut params);
                if params != before {
                    s.domain_set_params(id, params)?;
                }
                Ok(params)
            })
            .ok_or_else(super::pool_ops::not_booted)??;
        if scheduler == "rt" {
            self.say(format_args!(
                "dom{domain} (rt): period {} us, budget {} us, extratime {}",
                params.period_ns / 1000,
                params.budget_ns / 1000,
                u8::from(params.extratime)
            ));
        } else {
            self.say(format_args!(
                "dom{domain} ({scheduler}): weight {}, cap {}",
                params.weight, params.cap_percent
            ));
        }
        Ok(())
    }

    /// `pool-param POOL KEY=VALUE`.
    fn pool_param(&self, pool: &PoolRef, key: &str, value: &str) -> Result<(), PoolOpError> {
        let label = self
            .with_pools(|s, n, p| {
                let id = resolve(s, n, pool)?;
                s.pool_set_param(id, key, value)?;
                s.pool_reschedule(id, p)?;
                Ok::<_, PoolOpError>(label(n, id))
            })
            .ok_or_else(super::pool_ops::not_booted)??;
        self.say(format_args!("{label}: {key} = {value}"));
        info!("pools: console: {label}: {key} = {value}");
        Ok(())
    }

    /// `pool-rename POOL NAME`.
    fn rename(&self, pool: &PoolRef, name: &str) -> Result<(), PoolOpError> {
        let old = self
            .with_pools(|s, n, _| {
                let id = resolve(s, n, pool)?;
                crate::pools::rename(s, n, id, name)
            })
            .ok_or_else(super::pool_ops::not_booted)??;
        self.say(format_args!("pool '{old}' is now '{name}'"));
        info!("pools: console: pool '{old}' renamed '{name}'");
        Ok(())
    }

    /// `pause`, `unpause`, `destroy`, `restart DOMAIN`: refused (nothing
    /// changes) for an unknown or stopped domain, a pause twice, an unpause
    /// of a domain the console did not pause.
    fn domain_action(&self, action: DomainAction, domain: u32) -> Result<(), PoolOpError> {
        let id = DomainId(domain);
        self.live_domain(id)?;
        let done = match action {
            DomainAction::Pause => {
                self.with_system(|s, p| s.domain_pause(id, p))
                    .ok_or_else(super::pool_ops::not_booted)??;
                "paused"
            }
            DomainAction::Unpause => {
                self.with_system(|s, p| s.domain_unpause(id, p))
                    .ok_or_else(super::pool_ops::not_booted)??;
                "unpaused"
            }
            DomainAction::Destroy => {
                self.arch
                    .domain_destroy(id)
                    .map_err(PoolOpError::NotSupported)?;
                "destroyed"
            }
            DomainAction::Restart => {
                self.arch
                    .domain_restart(id)
                    .map_err(PoolOpError::NotSupported)?;
                "restarting"
            }
        };
        self.say(format_args!("dom{domain}: {done}"));
        info!("pools: console: dom{domain} {done}");
        Ok(())
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
                let paused = s.domain_paused(id) == Some(true);
                (pool, vcpus, paused)
            });
            let (pool, vcpus, paused) = view.unwrap_or_default();
            let state = if stopped {
                "stopped"
            } else if paused {
                // The console's pause (its vCPUs may take a moment to leave).
                "paused"
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
