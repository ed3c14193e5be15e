//! The Chrome trace-event format (JSON object form), which Perfetto
//! (ui.perfetto.dev) and chrome://tracing open: one process per pool
//! (CPUs in no pool are process 0), one thread (track) per physical CPU,
//! one complete (`X`) slice per run interval named `domD vV` (with what made
//! its CPU switch), a slice per rendezvous wait with a flow arrow from the
//! kick of the first CPU to arrive (the one that decided the switch) to
//! each sibling's arrival, instant events for wakes, rendezvous timeouts,
//! guest exits and pool operations, and per pool a runqueue counter
//! (runnable vCPUs not on a CPU, as the events show them).
//! Times are in microseconds since the session started.

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use serde_json::{Value, json};

use crate::analysis::run_intervals;
use crate::event::{IDLE_DOMAIN, Kind, Outcome};
use crate::text::Trace;

/// The process id of a pool's track group (0: CPUs in no pool).
fn pid(pool: Option<u32>) -> u64 {
    pool.map_or(0, |p| u64::from(p) + 1)
}

/// The trace as a Chrome trace-event JSON object. `domain_names` labels
/// domains in slice arguments where known.
pub fn to_json(trace: &Trace, domain_names: &BTreeMap<u32, String>) -> Value {
    let us = |ns: u64| ns.saturating_sub(trace.started_ns) as f64 / 1000.0;
    let mut events = Vec::new();
    let pools: BTreeSet<Option<u32>> = trace.cpus.iter().map(|c| c.place.pool).collect();
    for pool in &pools {
        let name = match pool {
            Some(p) => format!("pool {p}"),
            None => String::from("CPUs in no pool (idle scheduler)"),
        };
        events.push(json!({"ph": "M", "name": "process_name", "pid": pid(*pool),
                           "args": {"name": name}}));
        events.push(
            json!({"ph": "M", "name": "process_sort_index", "pid": pid(*pool),
                           "args": {"sort_index": pid(*pool)}}),
        );
    }
    for (cpu, record) in trace.cpus.iter().enumerate() {
        let pid = pid(record.place.pool);
        let resource = record
            .place
            .resource
            .map_or(String::new(), |r| format!(" (resource {r})"));
        events.push(
            json!({"ph": "M", "name": "thread_name", "pid": pid, "tid": cpu,
                           "args": {"name": format!("cpu {cpu}{resource}")}}),
        );
        events.push(
            json!({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": cpu,
                           "args": {"sort_index": cpu}}),
        );
    }
    // Run intervals.
    let mut domain_pool: BTreeMap<u32, Option<u32>> = BTreeMap::new();
    for interval in run_intervals(trace).into_iter().flatten() {
        let place = trace.cpus[interval.cpu].place;
        domain_pool.entry(interval.domain).or_insert(place.pool);
        let mut args = json!({"domain": interval.domain, "vcpu": interval.vcpu});
        if let Some(reason) = interval.reason {
            args["reason"] = json!(reason.name());
        }
        if let Some(name) = domain_names.get(&interval.domain) {
            args["name"] = json!(name);
        }
        events.push(json!({
            "ph": "X", "cat": "run", "name": format!("dom{} v{}", interval.domain, interval.vcpu),
            "pid": pid(place.pool), "tid": interval.cpu,
            "ts": us(interval.start_ns), "dur": us(interval.end_ns) - us(interval.start_ns),
            "args": args,
        }));
    }
    rendezvous_events(trace, &us, &mut events);
    // Instants, and per pool the runqueue as the events show it: runnable
    // vCPUs not on a CPU (woken and not yet switched in, or switched out
    // without blocking).
    let mut waiting: BTreeMap<Option<u32>, BTreeSet<(u32, u32)>> = BTreeMap::new();
    let mut blocked: BTreeSet<(u32, u32)> = BTreeSet::new();
    let mut holding: Vec<Option<(u32, u32)>> = alloc::vec![None; trace.cpus.len()];
    let mut all: Vec<(usize, &crate::event::Event)> = trace
        .cpus
        .iter()
        .enumerate()
        .flat_map(|(cpu, c)| c.events.iter().map(move |e| (cpu, e)))
        .collect();
    all.sort_by_key(|(_, e)| e.time_ns);
    for (cpu, event) in all {
        let pid_here = pid(trace.cpus[cpu].place.pool);
        let ts = us(event.time_ns);
        let vcpu = (event.domain, event.vcpu);
        let pool_of = |v: (u32, u32)| domain_pool.get(&v.0).copied().flatten();
        let mut changed: Vec<Option<u32>> = Vec::new();
        let mut set = |v: (u32, u32), queued: bool, changed: &mut Vec<Option<u32>>| {
            let pool = pool_of(v);
            let queue = waiting.entry(pool).or_default();
            let moved = if queued {
                queue.insert(v)
            } else {
                queue.remove(&v)
            };
            if moved && !changed.contains(&pool) {
                changed.push(pool);
            }
        };
        match event.kind {
            Kind::Wake => {
                events.push(json!({"ph": "i", "s": "t", "cat": "vcpu",
                    "name": format!("wake dom{} v{}", event.domain, event.vcpu),
                    "pid": pid_here, "tid": cpu, "ts": ts}));
                blocked.remove(&vcpu);
                if !holding.contains(&Some(vcpu)) {
                    set(vcpu, true, &mut changed);
                }
            }
            Kind::Block => {
                blocked.insert(vcpu);
                set(vcpu, false, &mut changed);
            }
            Kind::Switch => {
                let next = (event.domain != IDLE_DOMAIN).then_some(vcpu);
                let previous = core::mem::replace(&mut holding[cpu], next);
                if let Some(previous) = previous
                    && Some(previous) != next
                    && !blocked.contains(&previous)
                    && !holding.contains(&Some(previous))
                {
                    set(previous, true, &mut changed);
                }
                if let Some(next) = next {
                    set(next, false, &mut changed);
                }
            }
            Kind::GuestExit => {
                // The architecture's code: ESR_EL2.EC on ARM, the VMCB exit
                // code on x86.
                events.push(json!({"ph": "i", "s": "t", "cat": "exits",
                    "name": format!("exit {:#x}", event.arg),
                    "pid": pid_here, "tid": cpu, "ts": ts,
                    "args": {"domain": event.domain, "vcpu": event.vcpu}}));
            }
            Kind::PoolOp => {
                events.push(json!({"ph": "i", "s": "g", "cat": "ops",
                    "name": format!("pool {} op {} ({})", event.domain, event.vcpu, event.arg),
                    "pid": pid_here, "tid": cpu, "ts": ts}));
            }
            _ => {}
        }
        for pool in changed {
            let count = waiting.get(&pool).map_or(0, BTreeSet::len);
            events.push(json!({"ph": "C", "name": "runqueue", "pid": pid(pool),
                               "ts": ts, "args": {"runnable, not running": count}}));
        }
    }
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {
            "source": "hv trace",
            "cpus": trace.cpus.len(),
            "events": trace.total_events(),
            "dropped": trace.total_dropped(),
        },
    })
}

/// A slice per rendezvous wait (arrival to end), a flow from the first
/// arrival of each generation to the others, an instant per timeout.
fn rendezvous_events(trace: &Trace, us: &dyn Fn(u64) -> f64, events: &mut Vec<Value>) {
    // (resource, generation) -> arrivals (time, cpu).
    let mut generations: BTreeMap<(u32, u64), Vec<(u64, usize)>> = BTreeMap::new();
    for (cpu, record) in trace.cpus.iter().enumerate() {
        let pid = pid(record.place.pool);
        let mut arrived: Option<&crate::event::Event> = None;
        for event in &record.events {
            match event.kind {
                Kind::RendezvousArrive => {
                    generations
                        .entry((event.domain, event.arg))
                        .or_default()
                        .push((event.time_ns, cpu));
                    arrived = Some(event);
                }
                Kind::RendezvousDone => {
                    let outcome = Outcome::from_code(event.vcpu);
                    if let Some(arrival) = arrived.take() {
                        events.push(json!({
                            "ph": "X", "cat": "rendezvous",
                            "name": format!("rendezvous {}", arrival.arg),
                            "pid": pid, "tid": cpu, "ts": us(arrival.time_ns),
                            "dur": us(event.time_ns) - us(arrival.time_ns),
                            "args": {"resource": event.domain, "generation": arrival.arg,
                                     "waited_ns": event.arg, "outcome": format!("{outcome:?}")},
                        }));
                    }
                    if outcome == Some(Outcome::TimedOut) {
                        events.push(json!({"ph": "i", "s": "p", "cat": "rendezvous",
                            "name": "rendezvous timeout", "pid": pid, "tid": cpu,
                            "ts": us(event.time_ns)}));
                    }
                }
                _ => {}
            }
        }
    }
    for (id, ((_, generation), mut arrivals)) in generations.into_iter().enumerate() {
        if arrivals.len() < 2 {
            continue;
        }
        arrivals.sort_unstable();
        let (first, from) = arrivals[0];
        let pid_of = |cpu: usize| pid(trace.cpus[cpu].place.pool);
        // The first CPU to arrive decided the switch: the arrow starts at
        // the kick it sent its siblings in that pass (after its previous
        // rendezvous), or at its arrival if the kick was not recorded.
        let start = kick_before(&trace.cpus[from].events, first).unwrap_or(first);
        events.push(json!({"ph": "s", "cat": "rendezvous", "name": "kick",
            "id": id, "pid": pid_of(from), "tid": from, "ts": us(start),
            "args": {"generation": generation}}));
        for &(time, cpu) in &arrivals[1..] {
            events.push(
                json!({"ph": "f", "bp": "e", "cat": "rendezvous", "name": "kick",
                "id": id, "pid": pid_of(cpu), "tid": cpu, "ts": us(time)}),
            );
        }
    }
}

/// The time of the last kick sent in `events` at or before `arrival` and
/// after the previous rendezvous arrival.
fn kick_before(events: &[crate::event::Event], arrival: u64) -> Option<u64> {
    events
        .iter()
        .rev()
        .skip_while(|e| e.time_ns > arrival)
        .skip_while(|e| e.time_ns == arrival && e.kind == Kind::RendezvousArrive)
        .take_while(|e| e.kind != Kind::RendezvousArrive)
        .find(|e| e.kind == Kind::KickSent)
        .map(|e| e.time_ns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{ClassSet, Event};
    use crate::text::{CpuPlace, CpuTrace, Origin};
    use alloc::string::ToString;
    use alloc::vec;

    fn ev(time_ns: u64, kind: Kind, domain: u32, vcpu: u32, arg: u64) -> Event {
        Event {
            time_ns,
            kind,
            domain,
            vcpu,
            arg,
        }
    }

    fn sample() -> Trace {
        let place = CpuPlace {
            pool: Some(1),
            resource: Some(4),
        };
        let cpu = |arrive: u64| CpuTrace {
            place,
            dropped: 0,
            events: vec![
                ev(1_000, Kind::Wake, 1, 0, 0),
                ev(1_500, Kind::KickReceived, 0, 0, 0),
                ev(2_000, Kind::Switch, 1, 0, 0),
                ev(3_000, Kind::GuestExit, 1, 0, 0x16),
                ev(8_900, Kind::KickSent, 0, 0, 0b11),
                ev(9_000, Kind::Switch, IDLE_DOMAIN, 0, 0),
                ev(arrive, Kind::RendezvousArrive, 4, 0, 3),
                ev(
                    12_000,
                    Kind::RendezvousDone,
                    4,
                    Outcome::Complete as u32,
                    12_000 - arrive,
                ),
                ev(12_500, Kind::Switch, 2, 1, 0),
            ],
        };
        Trace {
            classes: ClassSet::DEFAULT,
            origin: Origin::Boot,
            started_ns: 0,
            stopped_ns: 20_000,
            cpus: vec![cpu(9_100), cpu(11_000), CpuTrace::default()],
        }
    }

    /// The fields each phase needs, as the trace-event format defines them.
    fn check_schema(json: &Value) {
        let events = json["traceEvents"].as_array().expect("traceEvents array");
        for event in events {
            let ph = event["ph"].as_str().expect("ph");
            assert!(event["pid"].is_u64(), "{event}");
            assert!(event["name"].is_string(), "{event}");
            match ph {
                "M" => assert!(event["args"].is_object(), "{event}"),
                "X" => {
                    assert!(event["tid"].is_u64() && event["ts"].is_f64(), "{event}");
                    assert!(event["dur"].as_f64().unwrap() >= 0.0, "{event}");
                }
                "i" => assert!(event["ts"].is_f64() && event["s"].is_string(), "{event}"),
                "C" => assert!(event["args"].is_object() && event["ts"].is_f64(), "{event}"),
                "s" | "f" => assert!(event["id"].is_u64() && event["tid"].is_u64(), "{event}"),
                other => panic!("unexpected phase {other}"),
            }
        }
    }

    #[test]
    fn a_trace_becomes_slices_flows_instants_and_counters_that_fit_the_schema() {
        let names = BTreeMap::from([(1, String::from("linux"))]);
        let json = to_json(&sample(), &names);
        check_schema(&json);
        let events = json["traceEvents"].as_array().unwrap();
        let named = |name: &str| events.iter().filter(|e| e["name"] == name).count();
        assert_eq!(named("dom1 v0"), 2);
        assert_eq!(named("dom2 v1"), 2);
        assert_eq!(named("rendezvous 3"), 2);
        assert_eq!(named("kick"), 2, "one flow start, one flow end");
        assert_eq!(named("wake dom1 v0"), 2);
        assert_eq!(named("exit 0x16"), 2);
        let run = events.iter().find(|e| e["name"] == "dom1 v0").unwrap();
        assert_eq!(
            (run["ts"].as_f64(), run["dur"].as_f64()),
            (Some(2.0), Some(7.0))
        );
        assert_eq!(run["args"]["name"], "linux");
        assert_eq!(run["args"]["reason"], "kick received");
        // The arrow starts at the deciding CPU's kick (cpu 0 arrived first).
        let start = events.iter().find(|e| e["ph"] == "s").unwrap();
        assert_eq!(
            (start["tid"].as_u64(), start["ts"].as_f64()),
            (Some(0), Some(8.9))
        );
        // The woken vCPU waits from its wake until it runs.
        // Woken (1), switched in (0), switched out without blocking on the
        // last CPU holding it (1).
        let counters: Vec<u64> = events
            .iter()
            .filter(|e| e["ph"] == "C")
            .map(|e| e["args"]["runnable, not running"].as_u64().unwrap())
            .collect();
        assert_eq!(counters, [1, 0, 1]);
        let round_trip: Value = serde_json::from_str(&json.to_string()).unwrap();
        assert_eq!(round_trip, json);
    }
}
