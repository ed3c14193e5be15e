//! `arinc653`: static time partitioning after ARINC 653 and Xen's `sched_arinc653.c`.
//!
//! A *major frame* repeats forever. It is cut into *minor frames* (windows), each
//! naming one unit by `(domain, index_in_domain)` and a duration; the time after
//! the last window up to the end of the major frame is idle. During a window the
//! named unit runs if it is runnable; otherwise the resource idles: time is never
//! lent to another partition, which is the point of ARINC 653.
//!
//! Differences from Xen, on purpose:
//! - Frames are anchored to the instant the schedule took effect (the first
//!   decision after it was set): window `i` of major frame `k` starts at exactly
//!   `epoch + k * major_frame + offset(i)`, so late decisions never make the
//!   schedule drift (Xen restarts a major frame at `now`).
//! - `major_frame_us = 0` (the default) means "the sum of the windows".
//! - With core scheduling a resource may have several CPUs: while a window's unit
//!   runs, spare CPUs may be filled ([`Scheduler::pick_sibling`]) with other
//!   runnable units of the *same domain* (the same partition) only.
//!
//! Like Xen's, this scheduler handles exactly one sched resource per pool; a
//! second [`Scheduler::add_resource`] is refused with
//! [`SchedError::InvalidParam`] `{ param: "resources", .. }`. Put other CPUs in
//! other pools (each may run its own arinc653 schedule).
//!
//! Pool parameters: `schedule=DOM:UNIT:DURATION_US[;DOM:UNIT:DURATION_US...]`
//! (windows separated by `;` or `,`; in a pool-parameter string handled by
//! `schedulers::apply_pool_params`, which splits items at commas and spaces, use
//! `;` without spaces) and `major_frame_us=N`. From code, use
//! [`Arinc653::set_schedule`] and [`Arinc653::set_major_frame_ns`]. Units not
//! named in the schedule never run.

use alloc::vec::Vec;

use crate::cpuset::CpuSet;
use crate::scheduler::{
    DomainId, ResourceId, ResourceInfo, SchedError, SchedParams, Scheduler, TaskSlice, Tickle,
    Time, UnitId, UnitInfo, UnitStats, WakeReason,
};

/// Most windows in one major frame (Xen's `ARINC653_MAX_DOMAINS_PER_SCHEDULE`).
pub const MAX_MINOR_FRAMES: usize = 64;

/// Valid pool parameters, for [`SchedError::UnknownParam`].
const VALID_PARAMS: &str = "schedule, major_frame_us";

/// One window of the major frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MinorFrame {
    /// The partition (domain) the window belongs to.
    pub domain: DomainId,
    /// Which of the domain's units runs ([`UnitInfo::index_in_domain`]).
    pub index_in_domain: u32,
    /// Length of the window, in ns (> 0).
    pub duration_ns: Time,
}

impl MinorFrame {
    const EMPTY: MinorFrame = MinorFrame {
        domain: DomainId(0),
        index_in_domain: 0,
        duration_ns: 0,
    };
}

/// Per-unit state.
#[derive(Clone, Debug)]
struct A653Unit {
    domain: DomainId,
    index_in_domain: u32,
    awake: bool,
    running: bool,
    last_start: Time,
    /// The window (serial number) in which it yielded: it stays off the CPU
    /// until that window ends.
    yielded_in: Option<u64>,
    hard_affinity: CpuSet,
    stats: UnitStats,
}

/// Where `now` falls in the schedule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Window {
    /// Index of the minor frame, or `None` in the idle tail of the major frame.
    frame: Option<usize>,
    /// Unique number of this window occurrence (major frame * (MAX + 1) + index).
    serial: u64,
    /// Time left until the window ends.
    remaining_ns: Time,
}

/// The arinc653 scheduler of one cpupool. Build it with [`Arinc653::new`] (or
/// `schedulers::create("arinc653")`), then give it a schedule.
#[derive(Debug)]
pub struct Arinc653 {
    frames: [MinorFrame; MAX_MINOR_FRAMES],
    /// End of each window, as an offset from the start of the major frame.
    frame_ends: [Time; MAX_MINOR_FRAMES],
    /// The unit each window names, once it is in the pool.
    frame_units: [Option<UnitId>; MAX_MINOR_FRAMES],
    frame_count: usize,
    /// The configured major frame; 0 = the sum of the windows.
    major_frame_setting_ns: Time,
    /// Start of major frame 0; `None` until the first decision after a change.
    epoch: Option<Time>,
    resource: Option<ResourceInfo>,
    /// Units running on the resource since the last decision (leader first).
    running: Vec<u32>,
    units: Vec<Option<A653Unit>>,
}

impl Default for Arinc653 {
    fn default() -> Self {
        Self::new()
    }
}

fn invalid(param: &'static str, expected: &'static str) -> SchedError {
    SchedError::InvalidParam { param, expected }
}

impl Arinc653 {
    /// An empty scheduler: no resource, no units, an empty schedule (always idle).
    pub fn new() -> Self {
        Self {
            frames: [MinorFrame::EMPTY; MAX_MINOR_FRAMES],
            frame_ends: [0; MAX_MINOR_FRAMES],
            frame_units: [None; MAX_MINOR_FRAMES],
            frame_count: 0,
            major_frame_setting_ns: 0,
            epoch: None,
            resource: None,
            running: Vec::new(),
            units: Vec::new(),
        }
    }

    /// Replaces the schedule. It takes effect at the resource's next decision,
    /// which starts major frame 0. Fails (leaving the old schedule) if there are
    /// no windows or more than [`MAX_MINOR_FRAMES`], a window is empty, or the
    /// windows do not fit in a configured major frame.
    pub fn set_schedule(&mut self, frames: &[MinorFrame]) -> Result<(), SchedError> {
        if frames.is_empty() || frames.len() > MAX_MINOR_FRAMES {
            return Err(invalid("schedule", "1 to 64 minor frames"));
        }
        let mut total: Time = 0;
        let mut ends = [0; MAX_MINOR_FRAMES];
        for (end, frame) in ends.iter_mut().zip(frames) {
            if frame.duration_ns == 0 {
                return Err(invalid("schedule", "minor frame durations > 0"));
            }
            total = total.checked_add(frame.duration_ns).ok_or(invalid(
                "schedule",
                "a total duration that fits in 64-bit ns",
            ))?;
            *end = total;
        }
        if self.major_frame_setting_ns != 0 && total > self.major_frame_setting_ns {
            return Err(invalid("schedule", "a total duration <= major_frame_us"));
        }
        self.frames[..frames.len()].copy_from_slice(frames);
        self.frame_ends = ends;
        self.frame_count = frames.len();
        self.resolve_all();
        self.epoch = None;
        Ok(())
    }

    /// Sets the major frame length; 0 = the sum of the windows. It must hold every
    /// window. Takes effect (restarting major frame 0) at the next decision.
    pub fn set_major_frame_ns(&mut self, major_frame_ns: Time) -> Result<(), SchedError> {
        if major_frame_ns != 0 && major_frame_ns < self.windows_total_ns() {
            return Err(invalid(
                "major_frame_us",
                "0 (the sum of the minor frames) or at least the sum of the minor frames",
            ));
        }
        self.major_frame_setting_ns = major_frame_ns;
        self.epoch = None;
        Ok(())
    }

    /// The current windows.
    pub fn schedule(&self) -> &[MinorFrame] {
        &self.frames[..self.frame_count]
    }

    /// The effective major frame length in ns (0 with no schedule).
    pub fn major_frame_ns(&self) -> Time {
        if self.major_frame_setting_ns != 0 {
            self.major_frame_setting_ns
        } else {
            self.windows_total_ns()
        }
    }

    fn windows_total_ns(&self) -> Time {
        self.frame_count
            .checked_sub(1)
            .map_or(0, |last| self.frame_ends[last])
    }

    /// Parses `DOM:UNIT:DURATION_US;...` (or with `,`) into a fixed array.
    fn parse_schedule(value: &str) -> Result<([MinorFrame; MAX_MINOR_FRAMES], usize), SchedError> {
        const FORM: &str = "DOM:UNIT:DURATION_US[;DOM:UNIT:DURATION_US...] (decimal numbers)";
        let mut frames = [MinorFrame::EMPTY; MAX_MINOR_FRAMES];
        let mut count = 0;
        for item in value
            .split([';', ','])
            .map(str::trim)
            .filter(|item| !item.is_empty())
        {
            if count == MAX_MINOR_FRAMES {
                return Err(invalid("schedule", "1 to 64 minor frames"));
            }
            let mut fields = item.split(':').map(str::trim);
            let (Some(domain), Some(index), Some(duration), None) =
                (fields.next(), fields.next(), fields.next(), fields.next())
            else {
                return Err(invalid("schedule", FORM));
            };
            let domain = domain
                .parse::<u32>()
                .map_err(|_| invalid("schedule", FORM))?;
            let index = index
                .parse::<u32>()
                .map_err(|_| invalid("schedule", FORM))?;
            let duration_us = duration
                .parse::<u64>()
                .map_err(|_| invalid("schedule", FORM))?;
            let duration_ns = duration_us.checked_mul(1_000).ok_or(invalid(
                "schedule",
                "a total duration that fits in 64-bit ns",
            ))?;
            frames[count] = MinorFrame {
                domain: DomainId(domain),
                index_in_domain: index,
                duration_ns,
            };
            count += 1;
        }
        Ok((frames, count))
    }

    fn unit(&self, slot: u32) -> Option<&A653Unit> {
        self.units.get(slot as usize).and_then(Option::as_ref)
    }

    fn unit_mut(&mut self, slot: u32) -> Option<&mut A653Unit> {
        self.units.get_mut(slot as usize).and_then(Option::as_mut)
    }

    /// Points every window at the unit it names, if that unit is in the pool.
    fn resolve_all(&mut self) {
        for index in 0..self.frame_count {
            let frame = self.frames[index];
            self.frame_units[index] = self
                .units
                .iter()
                .position(|u| {
                    u.as_ref().is_some_and(|u| {
                        u.domain == frame.domain && u.index_in_domain == frame.index_in_domain
                    })
                })
                .map(|slot| UnitId(slot as u32));
        }
    }

    /// The window holding `now`, starting major frame 0 at `now` if the schedule
    /// just changed (only decisions may do that: `start`).
    fn window_at(&mut self, now: Time, start: bool) -> Option<Window> {
        let major = self.major_frame_ns();
        if major == 0 {
            return None;
        }
        let epoch = match self.epoch {
            Some(epoch) => epoch,
            None if start => *self.epoch.insert(now),
            None => return None,
        };
        let since = now.saturating_sub(epoch);
        let (major_index, offset) = (since / major, since % major);
        let index = self.frame_ends[..self.frame_count].partition_point(|&end| end <= offset);
        let serial = major_index
            .saturating_mul(MAX_MINOR_FRAMES as u64 + 1)
            .saturating_add(index as u64);
        if index < self.frame_count {
            Some(Window {
                frame: Some(index),
                serial,
                remaining_ns: self.frame_ends[index] - offset,
            })
        } else {
            Some(Window {
                frame: None,
                serial,
                remaining_ns: major - offset,
            })
        }
    }

    fn owns(&self, id: ResourceId) -> bool {
        self.resource.is_some_and(|r| r.id == id)
    }
}

impl Scheduler for Arinc653 {
    fn name(&self) -> &'static str {
        "arinc653"
    }

    fn set_pool_param(&mut self, key: &str, value: &str) -> Result<(), SchedError> {
        match key {
            "schedule" => {
                let (frames, count) = Self::parse_schedule(value)?;
                self.set_schedule(&frames[..count])
            }
            "major_frame_us" => {
                let major_us = value.trim().parse::<u64>().map_err(|_| {
                    invalid(
                        "major_frame_us",
                        "a decimal number of microseconds (0 = sum of the minor frames)",
                    )
                })?;
                let major_ns = major_us
                    .checked_mul(1_000)
                    .ok_or(invalid("major_frame_us", "a length that fits in 64-bit ns"))?;
                self.set_major_frame_ns(major_ns)
            }
            _ => Err(SchedError::UnknownParam {
                scheduler: "arinc653",
                valid: VALID_PARAMS,
            }),
        }
    }

    fn add_resource(&mut self, info: ResourceInfo) -> Result<(), SchedError> {
        if self.resource.is_some() {
            return Err(invalid(
                "resources",
                "one sched resource per arinc653 pool (as Xen's); put other CPUs in other pools",
            ));
        }
        if info.cpus.is_empty() {
            return Err(SchedError::UnknownResource(info.id));
        }
        self.running = Vec::with_capacity(info.cpus.len());
        self.resource = Some(info);
        self.epoch = None;
        Ok(())
    }

    fn remove_resource(&mut self, id: ResourceId) -> Result<(), SchedError> {
        if !self.owns(id) {
            return Err(SchedError::UnknownResource(id));
        }
        if self.units.iter().any(Option::is_some) || !self.running.is_empty() {
            return Err(SchedError::ResourceBusy(id));
        }
        self.resource = None;
        self.epoch = None;
        Ok(())
    }

    fn insert_unit(&mut self, info: &UnitInfo, now: Time) -> Result<ResourceId, SchedError> {
        let resource = self
            .resource
            .filter(|r| r.cpus.intersects(&info.hard_affinity))
            .ok_or(SchedError::NoResourceInAffinity(info.id))?;
        let slot = info.id.0 as usize;
        if self.unit(info.id.0).is_some() {
            return Err(invalid("unit", "a unit not already in the pool"));
        }
        if self
            .units
            .iter()
            .flatten()
            .any(|u| u.domain == info.domain && u.index_in_domain == info.index_in_domain)
        {
            return Err(invalid("index_in_domain", "unique within its domain"));
        }
        if self.units.len() <= slot {
            self.units.resize(slot + 1, None);
        }
        self.units[slot] = Some(A653Unit {
            domain: info.domain,
            index_in_domain: info.index_in_domain,
            awake: false,
            running: false,
            last_start: now,
            yielded_in: None,
            hard_affinity: info.hard_affinity,
            stats: UnitStats::default(),
        });
        self.resolve_all();
        Ok(resource.id)
    }

    fn remove_unit(&mut self, unit: UnitId) -> Result<(), SchedError> {
        if self.unit(unit.0).is_none() {
            return Err(SchedError::UnknownUnit(unit));
        }
        self.running.retain(|&s| s != unit.0);
        self.units[unit.0 as usize] = None;
        self.resolve_all();
        Ok(())
    }

    fn wake(&mut self, unit: UnitId, now: Time, _reason: WakeReason) -> Tickle {
        let mut tickle = Tickle::new();
        let Some(u) = self.unit_mut(unit.0) else {
            return tickle;
        };
        if u.awake {
            return tickle;
        }
        u.awake = true;
        let domain = u.domain;
        // Reschedule only if the unit's partition owns the current window (or the
        // schedule has not started yet).
        let relevant = match self.window_at(now, false) {
            None => self.frame_count > 0,
            Some(window) => window
                .frame
                .is_some_and(|f| self.frames[f].domain == domain),
        };
        if relevant && let Some(resource) = self.resource {
            tickle.insert(resource.id.0);
        }
        tickle
    }

    fn sleep(&mut self, unit: UnitId, _now: Time) -> Tickle {
        let mut tickle = Tickle::new();
        let resource = self.resource;
        let Some(u) = self.unit_mut(unit.0) else {
            return tickle;
        };
        if u.awake
            && u.running
            && let Some(resource) = resource
        {
            tickle.insert(resource.id.0);
        }
        u.awake = false;
        tickle
    }

    fn yield_unit(&mut self, unit: UnitId, now: Time) {
        let serial = self.window_at(now, false).map(|w| w.serial);
        if let Some(u) = self.unit_mut(unit.0)
            && u.running
        {
            u.yielded_in = serial;
        }
    }

    fn pick_resource(&mut self, unit: UnitId, _now: Time) -> ResourceId {
        // One resource per pool: it is the only answer.
        let _ = unit;
        self.resource.map_or(ResourceId(0), |r| r.id)
    }

    fn migrate(&mut self, _unit: UnitId, _to: ResourceId, _now: Time) {
        // One resource per pool: nothing to move.
    }

    fn do_schedule(&mut self, resource: ResourceId, now: Time) -> TaskSlice {
        if !self.owns(resource) {
            return TaskSlice::IDLE;
        }
        for position in 0..self.running.len() {
            let slot = self.running[position];
            if let Some(u) = self.unit_mut(slot) {
                u.stats.runtime_ns = u
                    .stats
                    .runtime_ns
                    .saturating_add(now.saturating_sub(u.last_start));
                u.running = false;
            }
        }
        self.running.clear();
        let Some(window) = self.window_at(now, true) else {
            return TaskSlice::IDLE;
        };
        let idle = TaskSlice {
            unit: None,
            slice_ns: Some(window.remaining_ns),
            migrated: false,
        };
        let Some(slot) = window.frame.and_then(|f| self.frame_units[f]) else {
            return idle;
        };
        let Some(u) = self.unit_mut(slot.0) else {
            return idle;
        };
        if !u.awake || u.yielded_in == Some(window.serial) {
            return idle;
        }
        u.yielded_in = None;
        u.running = true;
        u.last_start = now;
        u.stats.dispatches += 1;
        self.running.push(slot.0);
        TaskSlice {
            unit: Some(slot),
            slice_ns: Some(window.remaining_ns),
            migrated: false,
        }
    }

    fn pick_sibling(
        &mut self,
        resource: ResourceId,
        domain: DomainId,
        now: Time,
    ) -> Option<UnitId> {
        let cpus = self.resource.filter(|r| r.id == resource)?.cpus;
        if self.running.len() >= cpus.len() {
            return None;
        }
        // Only the partition that owns the current window may use the resource.
        let window = self.window_at(now, false)?;
        if window.frame.is_none_or(|f| self.frames[f].domain != domain) {
            return None;
        }
        if let Some(&leader) = self.running.first()
            && self.unit(leader).is_none_or(|u| u.domain != domain)
        {
            return None;
        }
        let slot = self.units.iter().position(|u| {
            u.as_ref().is_some_and(|u| {
                u.domain == domain
                    && u.awake
                    && !u.running
                    && u.yielded_in != Some(window.serial)
                    && u.hard_affinity.intersects(&cpus)
            })
        })? as u32;
        self.running.push(slot);
        let u = self.unit_mut(slot)?;
        u.running = true;
        u.last_start = now;
        u.stats.dispatches += 1;
        Some(UnitId(slot))
    }

    fn set_unit_params(&mut self, unit: UnitId, _params: &SchedParams) -> Result<(), SchedError> {
        // Windows, not per-unit parameters, decide everything here.
        self.unit(unit.0)
            .map(|_| ())
            .ok_or(SchedError::UnknownUnit(unit))
    }

    fn set_affinity(
        &mut self,
        unit: UnitId,
        hard: CpuSet,
        _soft: CpuSet,
    ) -> Result<(), SchedError> {
        if !self.resource.is_some_and(|r| r.cpus.intersects(&hard)) {
            return Err(SchedError::NoResourceInAffinity(unit));
        }
        let u = self.unit_mut(unit.0).ok_or(SchedError::UnknownUnit(unit))?;
        u.hard_affinity = hard;
        Ok(())
    }

    fn stats(&self, unit: UnitId) -> Option<UnitStats> {
        self.unit(unit.0).map(|u| u.stats)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const US: Time = 1_000;
    const MS: Time = 1_000_000;
    const R: ResourceId = ResourceId(0);

    fn resource(cpus: usize) -> ResourceInfo {
        ResourceInfo {
            id: R,
            cpus: CpuSet::first_n(cpus),
            socket: 0,
            cluster: 0,
            capacity: None,
            core_cpus: crate::CpuSet::new(),
        }
    }

    fn unit_info(id: u32, domain: u32, index: u32) -> UnitInfo {
        UnitInfo {
            id: UnitId(id),
            domain: DomainId(domain),
            index_in_domain: index,
            vcpus: 1,
            params: SchedParams::default(),
            hard_affinity: CpuSet::first_n(8),
            soft_affinity: CpuSet::first_n(8),
        }
    }

    fn frame(domain: u32, index: u32, duration_ns: Time) -> MinorFrame {
        MinorFrame {
            domain: DomainId(domain),
            index_in_domain: index,
            duration_ns,
        }
    }

    /// Units 0 = dom 1 unit 0, 1 = dom 2 unit 0, 2 = dom 1 unit 1, all awake;
    /// windows 10 ms (unit 0), 5 ms (unit 1), 3 ms (unit 2), then 2 ms idle.
    fn three_partitions(cpus: usize) -> Arinc653 {
        let mut a = Arinc653::new();
        a.add_resource(resource(cpus)).unwrap();
        a.set_pool_param("major_frame_us", "20000").unwrap();
        a.set_pool_param("schedule", "1:0:10000;2:0:5000;1:1:3000")
            .unwrap();
        for (id, domain, index) in [(0, 1, 0), (1, 2, 0), (2, 1, 1)] {
            assert_eq!(a.insert_unit(&unit_info(id, domain, index), 0), Ok(R));
            a.wake(UnitId(id), 0, WakeReason::New);
        }
        a
    }

    #[test]
    fn windows_repeat_exactly_over_many_major_frames() {
        let mut a = three_partitions(1);
        let epoch = 1_234 * US;
        let mut now = epoch;
        let mut seen = Vec::new();
        while now < epoch + 5 * 20 * MS {
            let slice = a.do_schedule(R, now);
            seen.push((
                now - epoch,
                slice.unit.map(|u| u.0),
                slice.slice_ns.unwrap(),
            ));
            now += slice.slice_ns.unwrap();
        }
        let mut expected = Vec::new();
        for major in 0..5 {
            let start = major * 20 * MS;
            expected.push((start, Some(0), 10 * MS));
            expected.push((start + 10 * MS, Some(1), 5 * MS));
            expected.push((start + 15 * MS, Some(2), 3 * MS));
            expected.push((start + 18 * MS, None, 2 * MS));
        }
        assert_eq!(seen, expected);
        // The decision that closes major frame 4 opens major frame 5 with unit 0.
        assert_eq!(a.do_schedule(R, now).unit, Some(UnitId(0)));
        for (id, window, dispatches) in [(0, 10 * MS, 6), (1, 5 * MS, 5), (2, 3 * MS, 5)] {
            let stats = a.stats(UnitId(id)).unwrap();
            assert_eq!(
                (stats.runtime_ns, stats.dispatches),
                (5 * window, dispatches),
                "unit {id}"
            );
        }
    }

    #[test]
    fn late_decisions_do_not_make_the_schedule_drift() {
        let mut a = three_partitions(1);
        assert_eq!(a.do_schedule(R, 0).unit, Some(UnitId(0)));
        // 700 us late into the second window of major frame 3.
        let slice = a.do_schedule(R, 3 * 20 * MS + 10 * MS + 700 * US);
        assert_eq!(
            (slice.unit, slice.slice_ns),
            (Some(UnitId(1)), Some(4_300 * US))
        );
        // Early by nothing, late by a whole window: still the right one.
        let slice = a.do_schedule(R, 7 * 20 * MS + 18 * MS + 1);
        assert_eq!((slice.unit, slice.slice_ns), (None, Some(2 * MS - 1)));
        let slice = a.do_schedule(R, 8 * 20 * MS);
        assert_eq!(
            (slice.unit, slice.slice_ns),
            (Some(UnitId(0)), Some(10 * MS))
        );
    }

    #[test]
    fn a_sleeping_window_owner_leaves_its_window_idle() {
        let mut a = three_partitions(1);
        a.do_schedule(R, 0);
        assert!(
            a.sleep(UnitId(1), 2 * MS).is_empty(),
            "not running: nothing to reschedule"
        );
        assert_eq!(
            a.do_schedule(R, 10 * MS),
            TaskSlice {
                unit: None,
                slice_ns: Some(5 * MS),
                migrated: false
            }
        );
        // It wakes mid-window: its partition owns the window, so the resource is tickled.
        assert!(a.wake(UnitId(1), 12 * MS, WakeReason::Event).contains(0));
        let slice = a.do_schedule(R, 12 * MS);
        assert_eq!(
            (slice.unit, slice.slice_ns),
            (Some(UnitId(1)), Some(3 * MS))
        );
        // Sleeping while running tickles.
        assert!(a.sleep(UnitId(1), 13 * MS).contains(0));
        assert_eq!(a.do_schedule(R, 13 * MS).unit, None);
        // A wake outside its window needs no reschedule.
        assert!(a.wake(UnitId(1), 16 * MS, WakeReason::Event).is_empty());
        assert_eq!(a.stats(UnitId(1)).unwrap().runtime_ns, MS);
    }

    #[test]
    fn yield_gives_up_the_rest_of_the_window_only() {
        let mut a = three_partitions(1);
        assert_eq!(a.do_schedule(R, 0).unit, Some(UnitId(0)));
        a.yield_unit(UnitId(0), 4 * MS);
        assert_eq!(
            a.do_schedule(R, 4 * MS),
            TaskSlice {
                unit: None,
                slice_ns: Some(6 * MS),
                migrated: false
            }
        );
        assert_eq!(
            a.do_schedule(R, 5 * MS).unit,
            None,
            "still yielded in the same window"
        );
        assert_eq!(
            a.do_schedule(R, 20 * MS).unit,
            Some(UnitId(0)),
            "next major frame"
        );
    }

    #[test]
    fn unnamed_units_never_run_and_names_resolve_when_units_arrive() {
        let mut a = Arinc653::new();
        a.add_resource(resource(1)).unwrap();
        a.set_schedule(&[frame(3, 0, MS), frame(4, 0, MS)]).unwrap();
        assert_eq!(a.major_frame_ns(), 2 * MS);
        a.insert_unit(&unit_info(7, 4, 1), 0).unwrap();
        a.wake(UnitId(7), 0, WakeReason::New);
        for step in 0..10 {
            assert_eq!(
                a.do_schedule(R, step * MS).unit,
                None,
                "unit 7 is in no window"
            );
        }
        a.insert_unit(&unit_info(2, 4, 0), 0).unwrap();
        a.wake(UnitId(2), 10 * MS, WakeReason::New);
        assert_eq!(a.do_schedule(R, 11 * MS).unit, Some(UnitId(2)));
        a.sleep(UnitId(2), 12 * MS);
        a.do_schedule(R, 12 * MS);
        a.remove_unit(UnitId(2)).unwrap();
        assert_eq!(a.do_schedule(R, 13 * MS).unit, None);
        assert_eq!(
            a.insert_unit(&unit_info(9, 4, 1), 0),
            Err(invalid("index_in_domain", "unique within its domain"))
        );
    }

    #[test]
    fn without_a_schedule_everything_idles() {
        let mut a = Arinc653::new();
        a.add_resource(resource(1)).unwrap();
        a.insert_unit(&unit_info(0, 1, 0), 0).unwrap();
        a.wake(UnitId(0), 0, WakeReason::New);
        assert_eq!(a.do_schedule(R, 0), TaskSlice::IDLE);
    }

    #[test]
    fn bad_schedules_are_rejected_and_keep_the_old_one() {
        let mut a = three_partitions(1);
        let before = a.schedule().to_vec();
        let bad = [
            ("", "1 to 64 minor frames"),
            (
                "1:0",
                "DOM:UNIT:DURATION_US[;DOM:UNIT:DURATION_US...] (decimal numbers)",
            ),
            (
                "1:0:10:5",
                "DOM:UNIT:DURATION_US[;DOM:UNIT:DURATION_US...] (decimal numbers)",
            ),
            (
                "a:0:10",
                "DOM:UNIT:DURATION_US[;DOM:UNIT:DURATION_US...] (decimal numbers)",
            ),
            (
                "1:0:-5",
                "DOM:UNIT:DURATION_US[;DOM:UNIT:DURATION_US...] (decimal numbers)",
            ),
            ("1:0:0", "minor frame durations > 0"),
            ("1:0:15000;2:0:5001", "a total duration <= major_frame_us"),
            (
                "1:0:18446744073709551615",
                "a total duration that fits in 64-bit ns",
            ),
        ];
        for (value, expected) in bad {
            assert_eq!(
                a.set_pool_param("schedule", value),
                Err(invalid("schedule", expected)),
                "{value:?}"
            );
        }
        let too_many = ["1:0:10"; 65].join(";");
        assert_eq!(
            a.set_pool_param("schedule", &too_many),
            Err(invalid("schedule", "1 to 64 minor frames"))
        );
        assert_eq!(
            a.set_schedule(&[]),
            Err(invalid("schedule", "1 to 64 minor frames"))
        );
        assert!(
            a.set_pool_param("major_frame_us", "17999").is_err(),
            "shorter than the windows"
        );
        assert!(a.set_pool_param("major_frame_us", "twenty").is_err());
        assert!(
            a.set_pool_param("major_frame_us", "18446744073709551615")
                .is_err()
        );
        assert!(matches!(
            a.set_pool_param("tslice_ms", "1"),
            Err(SchedError::UnknownParam {
                scheduler: "arinc653",
                valid: "schedule, major_frame_us"
            })
        ));
        assert_eq!(a.schedule(), &before[..]);
        assert_eq!(a.major_frame_ns(), 20 * MS);
        // A valid change: exactly 64 windows, with commas, fitting the major frame.
        let full = ["1:0:100"; 64].join(",");
        assert_eq!(a.set_pool_param("schedule", &full), Ok(()));
        assert_eq!(a.schedule().len(), 64);
        a.set_pool_param("major_frame_us", "0").unwrap();
        assert_eq!(a.major_frame_ns(), 6_400 * US);
    }

    #[test]
    fn schedule_from_a_pool_parameter_string() {
        // `apply_pool_params` splits items at commas and spaces: windows use `;`.
        let mut sched = crate::schedulers::create_with_params(
            "arinc653",
            "major_frame_us=300 schedule=1:0:100;2:0:50",
        )
        .unwrap();
        sched.add_resource(resource(1)).unwrap();
        sched.insert_unit(&unit_info(0, 1, 0), 0).unwrap();
        sched.insert_unit(&unit_info(1, 2, 0), 0).unwrap();
        sched.wake(UnitId(0), 0, WakeReason::New);
        sched.wake(UnitId(1), 0, WakeReason::New);
        let mut now = 0;
        let mut seen = Vec::new();
        for _ in 0..6 {
            let slice = sched.do_schedule(R, now);
            seen.push((slice.unit.map(|u| u.0), slice.slice_ns.unwrap() / US));
            now += slice.slice_ns.unwrap();
        }
        assert_eq!(
            seen,
            [
                (Some(0), 100),
                (Some(1), 50),
                (None, 150),
                (Some(0), 100),
                (Some(1), 50),
                (None, 150)
            ]
        );
        assert!(
            crate::schedulers::create_with_params("arinc653", "schedule=1:0:100,2:0:50").is_err()
        );
    }

    #[test]
    fn only_one_resource_per_pool() {
        let mut a = Arinc653::new();
        a.add_resource(resource(2)).unwrap();
        let second = ResourceInfo {
            id: ResourceId(2),
            cpus: CpuSet::single(2),
            ..resource(1)
        };
        assert!(matches!(
            a.add_resource(second),
            Err(SchedError::InvalidParam {
                param: "resources",
                ..
            })
        ));
        assert_eq!(
            a.remove_resource(ResourceId(2)),
            Err(SchedError::UnknownResource(ResourceId(2)))
        );
        a.insert_unit(&unit_info(0, 1, 0), 0).unwrap();
        assert_eq!(a.remove_resource(R), Err(SchedError::ResourceBusy(R)));
        a.remove_unit(UnitId(0)).unwrap();
        assert_eq!(a.remove_resource(R), Ok(()));
        assert_eq!(a.add_resource(second), Ok(()));
        let mut far = unit_info(1, 1, 0);
        far.hard_affinity = CpuSet::single(5);
        assert_eq!(
            a.insert_unit(&far, 0),
            Err(SchedError::NoResourceInAffinity(UnitId(1)))
        );
    }

    #[test]
    fn siblings_come_from_the_window_owner_partition_only() {
        let mut a = three_partitions(2);
        a.insert_unit(&unit_info(3, 2, 1), 0).unwrap();
        a.wake(UnitId(3), 0, WakeReason::New);
        assert_eq!(a.do_schedule(R, 0).unit, Some(UnitId(0)));
        assert_eq!(
            a.pick_sibling(R, DomainId(2), 0),
            None,
            "domain 2 does not own this window"
        );
        assert_eq!(a.pick_sibling(R, DomainId(1), 0), Some(UnitId(2)));
        assert_eq!(a.pick_sibling(R, DomainId(1), 0), None, "both CPUs busy");
        // In domain 2's window, unit 3 (domain 2, not named) fills the spare CPU.
        assert_eq!(a.do_schedule(R, 10 * MS).unit, Some(UnitId(1)));
        assert_eq!(a.stats(UnitId(2)).unwrap().runtime_ns, 10 * MS);
        assert_eq!(a.pick_sibling(R, DomainId(2), 10 * MS), Some(UnitId(3)));
        // In the idle tail nobody may fill in.
        assert_eq!(a.do_schedule(R, 19 * MS).unit, None);
        assert_eq!(a.pick_sibling(R, DomainId(1), 19 * MS), None);
        assert_eq!(a.pick_sibling(ResourceId(4), DomainId(1), 19 * MS), None);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Wake(u32),
        Sleep(u32),
        Yield(u32),
        Schedule,
        Sibling(u32),
        Advance(Time),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            1 => (0..8u32).prop_map(Op::Wake),
            1 => (0..8u32).prop_map(Op::Sleep),
            1 => (0..8u32).prop_map(Op::Yield),
            3 => Just(Op::Schedule),
            1 => (0..3u32).prop_map(Op::Sibling),
            2 => (0..4 * MS).prop_map(Op::Advance),
        ]
    }

    fn windows() -> impl Strategy<Value = Vec<MinorFrame>> {
        proptest::collection::vec(
            (0..3u32, 0..3u32, 1..3 * MS).prop_map(|(d, i, len)| frame(d, i, len)),
            1..6,
        )
    }

    proptest! {
        /// Whatever happens, a decision runs only the awake unit its window names,
        /// siblings come from the window's domain, nothing runs twice, and slices
        /// end exactly at a window boundary.
        #[test]
        fn picks_only_the_window_owner(frames in windows(), ops in proptest::collection::vec(op(), 1..200)) {
            let mut a = Arinc653::new();
            a.add_resource(resource(2)).unwrap();
            a.set_schedule(&frames).unwrap();
            let ends: Vec<Time> = frames.iter().scan(0, |t, f| { *t += f.duration_ns; Some(*t) }).collect();
            let major = *ends.last().unwrap();
            // Units 0..6: unit u is domain u % 3, index u / 3; 6 and 7 are unknown.
            for u in 0..6u32 {
                a.insert_unit(&unit_info(u, u % 3, u / 3), 0).unwrap();
            }
            let mut awake = [false; 8];
            let mut running = [false; 8];
            let mut now = 0;
            let mut epoch = None;
            for op in ops {
                match op {
                    Op::Wake(u) => {
                        a.wake(UnitId(u), now, WakeReason::Event);
                        if u < 6 { awake[u as usize] = true; }
                    }
                    Op::Sleep(u) => {
                        a.sleep(UnitId(u), now);
                        if u < 6 { awake[u as usize] = false; }
                    }
                    Op::Yield(u) => a.yield_unit(UnitId(u), now),
                    Op::Schedule => {
                        running = [false; 8];
                        let slice = a.do_schedule(R, now);
                        let epoch = *epoch.get_or_insert(now);
                        let offset = (now - epoch) % major;
                        let index = ends.iter().position(|&end| end > offset).unwrap();
                        prop_assert_eq!(slice.slice_ns, Some(ends[index] - offset));
                        if let Some(u) = slice.unit {
                            let u = u.0 as usize;
                            prop_assert!(u < 6 && awake[u], "unit {} picked while asleep or unknown", u);
                            let named = frames[index];
                            prop_assert_eq!((u as u32 % 3, u as u32 / 3), (named.domain.0, named.index_in_domain));
                            running[u] = true;
                        }
                    }
                    Op::Sibling(domain) => {
                        if let Some(u) = a.pick_sibling(R, DomainId(domain), now) {
                            let u = u.0 as usize;
                            prop_assert!(u < 6 && awake[u] && !running[u]);
                            prop_assert_eq!(u as u32 % 3, domain);
                            prop_assert!(running.iter().filter(|&&r| r).count() < 2);
                            running[u] = true;
                        }
                    }
                    Op::Advance(dt) => now += dt,
                }
            }
        }
    }
}
