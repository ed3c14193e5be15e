//! Per-CPU events and synchronised switching: a kick or a timer decides, each CPU settles on its slot of the resource's plan, rendezvous are opened, completed or cancelled.

use super::*;

impl System {
    /// CPU `cpu` received a scheduling kick (IPI).
    pub fn on_kick(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        self.evaluate(cpu, p)
    }

    /// CPU `cpu`'s scheduling timer fired.
    pub fn on_timer(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        self.evaluate(cpu, p)
    }

    /// CPU `cpu` finished the switch it was told to make.
    pub fn switch_done(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        let Some(c) = self.cpus.get_mut(cpu) else {
            return Step::Resume;
        };
        let Some(context) = c.switching.take() else {
            return self.evaluate(cpu, p);
        };
        let old = core::mem::replace(&mut c.loaded, context);
        let master = c.resource;
        if let Some(w) = old.vcpu()
            && old != context
        {
            self.release(w, cpu, p);
        }
        if let Some(master) = master {
            self.kick_deferred(master, cpu, p);
        }
        self.evaluate(cpu, p)
    }

    /// CPU `cpu` is back from waiting at the rendezvous of `ticket`.
    pub fn rendezvous_done(
        &mut self,
        cpu: usize,
        ticket: &Ticket,
        outcome: Outcome,
        p: &dyn Platform,
    ) -> Step {
        if let Outcome::TimedOut { missing } = outcome {
            self.record(Diagnostic::RendezvousTimedOut {
                resource: ticket.resource,
                generation: ticket.generation,
                missing,
            });
        }
        let master = ticket.resource.0;
        let current = self.cpus.get(cpu).and_then(|c| c.resource) == Some(master)
            && self.resources[master]
                .as_ref()
                .is_some_and(|r| r.switching && r.generation == ticket.generation);
        if current {
            if outcome == Outcome::Complete {
                if let Some(r) = self.resources[master].as_mut() {
                    r.switching = false;
                    r.reported.insert(cpu);
                }
                // Everyone left the old contexts: the others may load now.
                if let Some(r) = self.resources[master].as_ref() {
                    let mut others = r.cpus;
                    others.remove(cpu);
                    p.kick(&others);
                }
            } else {
                self.settle_idle(master, p);
            }
        }
        self.evaluate(cpu, p)
    }

    pub(super) fn release(&mut self, vcpu: VcpuId, cpu: usize, p: &dyn Platform) {
        let Some(slot) = self.vcpus.get_mut(vcpu.0 as usize) else {
            return;
        };
        let Some(v) = slot.as_mut() else { return };
        if v.running_on == Some(cpu) {
            v.running_on = None;
        }
        if v.dead {
            if v.running_on.is_none() {
                *slot = None;
            }
            return;
        }
        let unit = v.unit;
        if let Some(master) = self.unit(unit).and_then(|u| u.on) {
            self.kick_deferred(master, cpu, p);
        }
    }

    pub(super) fn kick_deferred(&mut self, master: usize, except: usize, p: &dyn Platform) {
        if let Some(r) = self.resources[master].as_mut() {
            let mut deferred = core::mem::take(&mut r.deferred);
            deferred.remove(except);
            if !deferred.is_empty() {
                p.kick(&deferred);
            }
        }
    }

    /// Ends the resource's rendezvous without a switch: every slot goes idle,
    /// and the resource decides again after the retry delay.
    pub(super) fn settle_idle(&mut self, master: usize, p: &dyn Platform) {
        let now = p.now_ns();
        let delay = self.config.retry_delay_ns;
        self.clear_slots(master, now);
        if let Some(r) = self.resources[master].as_mut() {
            r.switching = false;
            r.domain = None;
            r.needs_decision = false;
            r.deadline = Some(now.saturating_add(delay));
            let deadline = r.deadline;
            if let Some(cpu) = self.timer_cpu(master) {
                p.set_timer(cpu, deadline);
            }
        }
    }

    pub(super) fn cancel_rendezvous(
        &mut self,
        master: usize,
        reason: CancelReason,
        p: &dyn Platform,
    ) {
        let Some(r) = self.resources.get(master).and_then(Option::as_ref) else {
            return;
        };
        if !r.switching {
            return;
        }
        let generation = r.generation;
        let expected = r.expected;
        self.table.abort(ResourceId(master), generation);
        self.record(Diagnostic::RendezvousCancelled {
            resource: ResourceId(master),
            generation,
            reason,
        });
        self.settle_idle(master, p);
        if let Some(r) = self.resources[master].as_mut() {
            r.needs_decision = true;
        }
        p.kick(&expected);
    }

    /// Wakes again, inside their new affinity, the units
    /// [`System::domain_set_affinity`] evicted that have left their
    /// resource. Only runs while some wait (an administrative change), so a
    /// scan of the unit table here costs nothing in steady state.
    pub(super) fn rewake_released(&mut self, now: Time, p: &dyn Platform) {
        for index in 0..self.units.len() {
            let Some(unit) = self.units[index].as_mut() else {
                continue;
            };
            if !unit.rewake || unit.on.is_some() {
                continue;
            }
            unit.rewake = false;
            self.pending_rewakes = self.pending_rewakes.saturating_sub(1);
            let (pool, runnable) = (unit.pool, unit.runnable);
            let id = UnitId(index as u32);
            if !runnable {
                continue;
            }
            let Ok(pool) = self.pool_mut(pool) else {
                continue;
            };
            // Asleep for its scheduler since the change (a wake while it
            // still ran left it so): a sleep and a wake queue it afresh.
            let _ = pool.scheduler.sleep(id, now);
            let tickle = pool.scheduler.wake(id, now, WakeReason::Migration);
            self.apply_tickle(tickle, p);
        }
    }

    pub(super) fn clear_slots(&mut self, master: usize, now: Time) {
        let Some(r) = self.resources.get_mut(master).and_then(Option::as_mut) else {
            return;
        };
        for slot in r.slots.iter_mut() {
            if let Some(u) = slot.unit
                && let Some(unit) = self.units.get_mut(u.0 as usize).and_then(Option::as_mut)
                && unit.on == Some(master)
            {
                unit.on = None;
                unit.since = now;
            }
            *slot = Slot::default();
        }
        r.domain = None;
    }

    pub(super) fn hand_out(&mut self, cpu: usize, context: CpuContext) -> Step {
        self.cpus[cpu].switching = Some(context);
        if let Some(v) = context.vcpu()
            && let Some(vcpu) = self.vcpus[v.0 as usize].as_mut()
        {
            vcpu.running_on = Some(cpu);
        }
        Step::Switch(context)
    }

    pub(super) fn settle_on(&mut self, cpu: usize, target: CpuContext) -> Step {
        if self.cpus[cpu].loaded == target {
            Step::Resume
        } else {
            self.hand_out(cpu, target)
        }
    }

    /// What `cpu` may load from its slot right now (idle when the slot is
    /// empty, its vCPU cannot run, is still held elsewhere, or a sibling still
    /// holds another domain).
    pub(super) fn slot_target(&mut self, master: usize, cpu: usize) -> CpuContext {
        let Some(r) = self.resources[master].as_ref() else {
            return CpuContext::Idle;
        };
        if r.switching {
            return CpuContext::Idle;
        }
        let slot = r
            .slots
            .get(self.cpus[cpu].slot)
            .copied()
            .unwrap_or_default();
        let Some(v) = slot.vcpu else {
            return CpuContext::Idle;
        };
        let Some(vcpu) = self.vcpu(v) else {
            return CpuContext::Idle;
        };
        let runnable = vcpu.runnable()
            && Some(vcpu.unit) == slot.unit
            && Some(vcpu.domain) == r.domain
            && self.unit(vcpu.unit).is_some_and(|u| u.on == Some(master));
        if !runnable {
            return CpuContext::Idle;
        }
        let domain = vcpu.domain;
        let held_elsewhere = vcpu.running_on.is_some_and(|c| c != cpu);
        // The planted fault ignores what the siblings hold.
        let conflict = !self.cosched_broken.contains(cpu)
            && r.cpu_list.iter().filter(|&&s| s != cpu).any(|&s| {
                self.cpus[s]
                    .contexts()
                    .iter()
                    .any(|&c| self.domain_of(c).is_some_and(|d| d != domain))
            });
        if held_elsewhere || conflict {
            if let Some(r) = self.resources[master].as_mut() {
                r.deferred.insert(cpu);
            }
            return CpuContext::Idle;
        }
        CpuContext::Vcpu(v)
    }

    /// The per-CPU decision procedure behind every event.
    pub(super) fn evaluate(&mut self, cpu: usize, p: &dyn Platform) -> Step {
        let Some(c) = self.cpus.get(cpu) else {
            return Step::Resume;
        };
        if let Some(context) = c.switching {
            return Step::Switch(context);
        }
        let master = match c.resource {
            Some(m) if c.online && self.active && self.resources[m].is_some() => m,
            _ => {
                let target = if c.online {
                    // Free CPUs: the idle scheduler only ever picks idle.
                    let slice = self.free.do_schedule(ResourceId(cpu), p.now_ns());
                    debug_assert!(slice.unit.is_none());
                    CpuContext::Idle
                } else {
                    CpuContext::Idle
                };
                return self.settle_on(cpu, target);
            }
        };
        let now = p.now_ns();
        let loaded = c.loaded;
        for _ in 0..2 {
            let Some(r) = self.resources[master].as_ref() else {
                break;
            };
            if r.switching && r.expected.contains(cpu) && !r.reported.contains(cpu) {
                if loaded != CpuContext::Idle {
                    return self.hand_out(cpu, CpuContext::Idle);
                }
                return Step::Rendezvous(Ticket {
                    resource: ResourceId(master),
                    generation: r.generation,
                    cpu,
                    expected: r.expected,
                    timeout_ns: self.config.rendezvous_timeout_ns,
                });
            }
            let due = r.needs_decision || r.deadline.is_some_and(|d| d <= now);
            if !r.switching && due {
                self.decide(master, cpu, now, p);
                continue;
            }
            break;
        }
        let target = self.slot_target(master, cpu);
        self.settle_on(cpu, target)
    }

    /// Asks the pool's scheduler what runs next on the resource and stores the
    /// plan; opens a rendezvous if a sibling still holds another domain.
    pub(super) fn decide(&mut self, master: usize, caller: usize, now: Time, p: &dyn Platform) {
        self.clear_slots(master, now);
        let Some(r) = self.resources[master].as_mut() else {
            return;
        };
        r.needs_decision = false;
        let pool_id = r.pool;
        let Some(pool) = self
            .pools
            .get_mut(pool_id.0 as usize)
            .and_then(Option::as_mut)
        else {
            return;
        };
        let slice = pool.scheduler.do_schedule(ResourceId(master), now);
        let placement = pool.placement;
        self.drain_tickle(pool_id, p);
        if self.pending_rewakes > 0 {
            self.rewake_released(now, p);
        }
        let mut leader = slice.unit;
        if let Some(u) = leader {
            let why = match self.units.get(u.0 as usize).and_then(Option::as_ref) {
                None => Some("no such unit"),
                Some(unit) if unit.pool != pool_id => Some("unit of another pool"),
                Some(unit) if unit.on.is_some() => Some("unit already placed on a resource"),
                Some(_) => None,
            };
            if let Some(why) = why {
                self.record(Diagnostic::RejectedUnit {
                    pool: pool_id,
                    unit: u,
                    why,
                });
                leader = None;
            }
        }
        let domain = leader.and_then(|u| self.unit(u)).map(|u| u.domain);
        if let (Some(u), Some(d)) = (leader, domain) {
            let slot_count = self.resources[master].as_ref().map_or(0, |r| r.slots.len());
            match placement {
                Placement::Fixed => {
                    let vcpus_len = self.unit(u).map_or(0, |x| x.vcpus.len());
                    for i in 0..slot_count.min(vcpus_len) {
                        let v = self.unit(u).map(|x| x.vcpus[i]);
                        if let Some(r) = self.resources[master].as_mut() {
                            r.slots[i] = Slot {
                                unit: Some(u),
                                vcpu: v,
                            };
                        }
                    }
                    self.mark_on(u, master, now);
                }
                Placement::Spread => {
                    let mut placed_leader = false;
                    for i in 0..slot_count {
                        let cpu = self.resources[master].as_ref().map_or(0, |r| r.cpu_list[i]);
                        if !self.cpus[cpu].online {
                            continue;
                        }
                        let unit = if placed_leader {
                            // Share a resource only when every other one is busy.
                            if self.pool_has_idle_resource(pool_id, master) {
                                break;
                            }
                            let Some(pool) = self.pools[pool_id.0 as usize].as_mut() else {
                                break;
                            };
                            let Some(s) = pool.scheduler.pick_sibling(ResourceId(master), d, now)
                            else {
                                break;
                            };
                            let why = match self.unit(s) {
                                None => Some("no such unit"),
                                Some(x) if x.pool != pool_id => Some("unit of another pool"),
                                Some(x) if x.domain != d => Some("sibling of another domain"),
                                Some(x) if x.on.is_some() => {
                                    Some("unit already placed on a resource")
                                }
                                Some(_) => None,
                            };
                            if let Some(why) = why {
                                self.record(Diagnostic::RejectedUnit {
                                    pool: pool_id,
                                    unit: s,
                                    why,
                                });
                                break;
                            }
                            s
                        } else {
                            placed_leader = true;
                            u
                        };
                        let v = self.unit(unit).and_then(|x| x.vcpus.first().copied());
                        if let Some(r) = self.resources[master].as_mut() {
                            r.slots[i] = Slot {
                                unit: Some(unit),
                                vcpu: v,
                            };
                        }
                        self.mark_on(unit, master, now);
                    }
                }
            }
        }
        let holders_of_other_domains;
        // The resource's online CPUs, from its own list (not the machine's
        // online set): a decision's cost must not grow with the machine
        // (`benches/machine_size.rs`).
        let online_cpus = {
            let Some(r) = self.resources[master].as_ref() else {
                return;
            };
            holders_of_other_domains = r.cpu_list.iter().any(|&s| {
                self.cpus[s]
                    .contexts()
                    .iter()
                    .any(|&c| self.domain_of(c).is_some_and(|x| Some(x) != domain))
            });
            r.cpu_list
                .iter()
                .copied()
                .filter(|&s| self.cpus[s].online)
                .collect::<CpuSet>()
        };
        let Some(r) = self.resources[master].as_mut() else {
            return;
        };
        r.domain = domain;
        r.deadline = slice.slice_ns.map(|s| now.saturating_add(s));
        let deadline = r.deadline;
        let mut others = online_cpus;
        if domain.is_some() && holders_of_other_domains {
            // Machine-wide (shared by a partitioned system's parts): a
            // resource that changes pools never sees a number again.
            let generation = loop {
                let g = self
                    .generations
                    .fetch_add(1, crate::sync::Ordering::Relaxed);
                if g.wrapping_add(1) != 0 {
                    break g.wrapping_add(1);
                }
            };
            r.switching = true;
            r.generation = generation;
            r.expected = online_cpus;
            r.reported = CpuSet::new();
            self.table
                .begin(ResourceId(master), generation, r.expected.len());
        }
        others.remove(caller);
        if let Some(cpu) = self.timer_cpu(master) {
            p.set_timer(cpu, deadline);
        }
        if !others.is_empty() {
            p.kick(&others);
        }
    }

    /// Whether a resource of the pool other than `except` runs nothing and is
    /// not switching (spread placement fills siblings only when none is).
    pub(super) fn pool_has_idle_resource(&self, pool: PoolId, except: usize) -> bool {
        let Ok(pool) = self.pool(pool) else {
            return false;
        };
        pool.resources.iter().any(|&m| {
            m != except
                && self.resources[m]
                    .as_ref()
                    .is_some_and(|r| !r.switching && r.domain.is_none())
                && self.timer_cpu(m).is_some()
        })
    }

    pub(super) fn mark_on(&mut self, unit: UnitId, master: usize, now: Time) {
        if let Some(u) = self.units.get_mut(unit.0 as usize).and_then(Option::as_mut) {
            u.on = Some(master);
            u.since = now;
        }
    }
}
