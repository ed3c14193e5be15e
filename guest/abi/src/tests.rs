//! Host tests: numbers are the documented ones, every encoding round-trips,
//! and bad registers are refused with the documented error.

extern crate std;

use std::format;
use std::string::ToString;
use std::vec;
use std::vec::Vec;

use proptest::prelude::*;

use super::*;

#[test]
fn function_ids_are_the_documented_ones() {
    let expected = [
        (Function::Version, 0xC600_0000u32),
        (Function::ConsoleWrite, 0xC600_0001),
        (Function::Yield, 0xC600_0002),
        (Function::Block, 0xC600_0003),
        (Function::SchedStats, 0xC600_0004),
        (Function::PoolOp, 0xC600_0005),
        (Function::TestReport, 0xC600_0080),
        (Function::TestPauseSibling, 0xC600_0081),
        (Function::TestUnpauseSibling, 0xC600_0082),
    ];
    assert_eq!(expected.len(), Function::ALL.len());
    let constants = [
        ids::VERSION,
        ids::CONSOLE_WRITE,
        ids::YIELD,
        ids::BLOCK,
        ids::SCHED_STATS,
        ids::POOL_OP,
        ids::TEST_REPORT,
        ids::TEST_PAUSE_SIBLING,
        ids::TEST_UNPAUSE_SIBLING,
    ];
    for ((function, id), constant) in expected.iter().zip(constants) {
        assert_eq!(*id, constant, "{}", function.name());
    }
    for (function, id) in expected {
        assert_eq!(function.id(), id, "{}", function.name());
        assert_eq!(Function::try_from(id as u64), Ok(function));
        // SMCCC: only w0 counts, and the SVE hint bit is ignored.
        assert_eq!(
            Function::try_from(0xFFFF_FFFF_0000_0000 | id as u64),
            Ok(function)
        );
        assert_eq!(
            Function::try_from((id | SMCCC_SVE_HINT) as u64),
            Ok(function)
        );
    }
    assert!(Function::TestReport.is_test_hook() && !Function::PoolOp.is_test_hook());
}

#[test]
fn unknown_function_ids_are_not_supported() {
    for id in [
        0xC600_0006u64, // next free number
        0xC600_007F,
        0xC600_0083,
        0xC600_FFFF,
        0x8600_0001, // SMC32 flavour of CONSOLE_WRITE
        0x4600_0001, // yielding call
        0xC500_0001, // other service (standard hypervisor)
        0xC400_0003, // PSCI CPU_ON is not ours
        0x8400_0000, // PSCI_VERSION
        0xC602_0001, // MBZ bit 17 set
        0,
    ] {
        assert_eq!(
            Function::try_from(id),
            Err(HvError::NotSupported),
            "{id:#x}"
        );
        assert_eq!(
            Call::decode(id, [0; 5]),
            Err(HvError::NotSupported),
            "{id:#x}"
        );
    }
}

#[test]
fn error_codes_match_psci_and_round_trip() {
    assert_eq!(HvError::NotSupported.code(), -1);
    assert_eq!(HvError::InvalidParameter.code(), -2);
    assert_eq!(HvError::Denied.code(), -3);
    assert_eq!(HvError::NotSupported.to_x0(), u64::MAX);
    for e in HvError::ALL {
        assert_eq!(HvError::try_from(e.code()), Ok(e));
        assert_eq!(decode_return(encode_return(Err(e))), Err(CallError::Hv(e)));
    }
    assert_eq!(HvError::try_from(-7), Err(UnknownError(-7)));
    assert_eq!(HvError::try_from(0), Err(UnknownError(0)));
    assert_eq!(
        decode_return([(-99i64) as u64, 1, 2, 3]),
        Err(CallError::Unknown(-99))
    );
    assert_eq!(decode_return([5, 1, 2, 3]), Ok([5, 1, 2, 3]));
    assert_eq!(HvError::Denied.to_string(), "DENIED (-3)");
}

#[test]
fn version_packs_major_and_minor() {
    let v = version_value(VERSION_MAJOR, VERSION_MINOR);
    assert_eq!(version_parts(v), (VERSION_MAJOR, VERSION_MINOR));
    assert_eq!(version_value(1, 2), 0x1_0002);
}

#[test]
fn console_chunks_split_text_in_24_byte_pieces() {
    let text = b"test-guest: vcpu 1 online, and a bit more\n";
    let mut rest: &[u8] = text;
    let mut joined = Vec::new();
    let mut calls = 0;
    while !rest.is_empty() {
        let (chunk, after) = ConsoleChunk::split(rest);
        assert!(chunk.as_bytes().len() <= ConsoleChunk::CAPACITY);
        let args = chunk.to_args();
        assert_eq!(args[0] as usize, chunk.as_bytes().len());
        assert_eq!(ConsoleChunk::from_args(args), Ok(chunk));
        joined.extend_from_slice(chunk.as_bytes());
        rest = after;
        calls += 1;
    }
    assert_eq!(joined, text);
    assert_eq!(calls, text.len().div_ceil(24));
    // Byte 0 is the low byte of x2.
    let (chunk, _) = ConsoleChunk::split(b"AB");
    assert_eq!(chunk.to_args(), [2, 0x4241, 0, 0, 0]);
}

#[test]
fn bad_console_registers_are_refused() {
    assert_eq!(
        ConsoleChunk::from_args([25, 0, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    // A byte past the length.
    assert_eq!(
        ConsoleChunk::from_args([1, 0x4241, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        ConsoleChunk::from_args([0, 0, 0, 0, 1]),
        Err(HvError::InvalidParameter)
    );
    assert!(
        ConsoleChunk::from_args([0; 5])
            .unwrap()
            .as_bytes()
            .is_empty()
    );
}

#[test]
fn small_enums_refuse_unknown_values() {
    for value in [3u64, 99, u64::MAX] {
        assert_eq!(WakeReason::try_from(value), Err(HvError::InvalidParameter));
    }
    assert_eq!(StatsScope::try_from(2), Err(HvError::InvalidParameter));
    assert_eq!(Unit::try_from(3), Err(HvError::InvalidParameter));
    assert_eq!(PoolOpCode::try_from(13), Err(HvError::InvalidParameter));
    assert_eq!(Scheduler::try_from(5), Err(HvError::InvalidParameter));
    assert_eq!(Granularity::try_from(4), Err(HvError::InvalidParameter));
    for s in Scheduler::ALL {
        assert_eq!(Scheduler::try_from(s.value()), Ok(*s));
    }
    for g in Granularity::ALL {
        assert_eq!(Granularity::try_from(g.value()), Ok(*g));
    }
}

#[test]
fn tags_are_short_lowercase_words() {
    let tag = Tag::new("sleep_p99").map(|_| ());
    assert_eq!(tag, None, "9 bytes is too long");
    let tag = Tag::new("slp_p99").unwrap();
    assert_eq!(tag.as_str(), "slp_p99");
    assert_eq!(Tag::from_u64(tag.to_u64()), Ok(tag));
    assert_eq!(Tag::new("abcdefgh").unwrap().as_str(), "abcdefgh");
    for bad in ["", "Upper", "a b", "a=b", "é"] {
        assert_eq!(Tag::new(bad), None, "{bad}");
    }
    assert_eq!(Tag::from_u64(0), Err(HvError::InvalidParameter));
    // A NUL in the middle.
    assert_eq!(Tag::from_u64(0x61_00_61), Err(HvError::InvalidParameter));
    assert_eq!(Tag::from_u64(0x41), Err(HvError::InvalidParameter));
}

#[test]
fn report_lines_have_a_fixed_format_and_parse_back() {
    let line = ReportLine {
        domain: 2,
        vcpu: 3,
        report: Report {
            tag: Tag::new("slp_p99").unwrap(),
            value: 1234,
            unit: Unit::Ticks,
        },
    };
    let text = line.to_string();
    assert_eq!(
        text,
        "test-report: dom=2 vcpu=3 tag=slp_p99 value=1234 unit=ticks"
    );
    assert_eq!(
        ReportLine::parse(&format!("[cpu1] INFO  {text}")),
        Some(line)
    );
    for bad in [
        "test-report: dom=2 vcpu=3 tag=slp_p99 value=1234",
        "test-report: dom=2 vcpu=3 tag=slp_p99 value=x unit=ticks",
        "test-report: vcpu=3 dom=2 tag=slp_p99 value=1 unit=ticks",
        "test-report: dom=2 vcpu=3 tag=slp_p99 value=1 unit=furlongs",
        "dom=2 vcpu=3 tag=slp_p99 value=1 unit=ticks",
    ] {
        assert_eq!(ReportLine::parse(bad), None, "{bad}");
    }
}

#[test]
fn reserved_arguments_must_be_zero() {
    assert_eq!(
        Call::decode(Function::Yield.id() as u64, [1, 0, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        Call::decode(Function::Version.id() as u64, [0, 0, 0, 0, 7]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        Call::decode(Function::SchedStats.id() as u64, [0, 1, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        Call::decode(
            Function::PoolOp.id() as u64,
            [PoolOpCode::Destroy.value(), 1, 2, 0, 0]
        ),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        Call::decode(Function::Yield.id() as u64, [0; 5]),
        Ok(Call::Yield)
    );
}

#[test]
fn out_of_range_arguments_are_invalid() {
    let pause = Function::TestPauseSibling.id() as u64;
    assert_eq!(
        Call::decode(pause, [1 << 32, 0, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    let pool = Function::PoolOp.id() as u64;
    assert_eq!(
        Call::decode(pool, [13, 0, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        Call::decode(pool, [PoolOpCode::AddCpu.value(), 1, 1 << 40, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        Call::decode(pool, [PoolOpCode::Create.value(), 7, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    let report = Function::TestReport.id() as u64;
    let tag = Tag::new("x").unwrap().to_u64();
    assert_eq!(
        Call::decode(report, [tag, 1, 9, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        Call::decode(report, [0, 1, 0, 0, 0]),
        Err(HvError::InvalidParameter)
    );
}

#[test]
fn pool_op_registers_are_the_documented_ones() {
    let op = PoolOp::AddCpu { pool: 2, cpu: 5 };
    assert_eq!(op.to_args(), [3, 2, 5, 0, 0]);
    let op = PoolOp::Create {
        scheduler: Scheduler::Null,
        granularity: Granularity::Core,
    };
    assert_eq!(op.to_args(), [1, 2, 1, 0, 0]);
    assert_eq!(
        PoolOp::MoveDomain { domain: 4, pool: 1 }.to_args(),
        [5, 4, 1, 0, 0]
    );
    let pin = PoolOp::PinDomain {
        domain: 2,
        hard: 0x30,
        soft: 0x10,
    };
    assert_eq!(pin.to_args(), [6, 2, 0x30, 0x10, 0]);
    assert_eq!(PoolOp::from_args(pin.to_args()), Ok(pin));
    // A hard affinity naming no CPU is refused by the decoder already.
    assert_eq!(
        PoolOp::from_args([6, 2, 0, 0x10, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(PoolOp::PauseDomain { domain: 3 }.to_args(), [7, 3, 0, 0, 0]);
    assert_eq!(
        PoolOp::UnpauseDomain { domain: 3 }.to_args(),
        [8, 3, 0, 0, 0]
    );
    assert_eq!(
        PoolOp::from_args([7, 3, 1, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    let params = DomainParams {
        weight: 512,
        cap: 50,
        extratime: true,
        period_us: 10_000,
        budget_us: 2_000,
    };
    let set = PoolOp::SetDomainParams { domain: 2, params };
    assert_eq!(
        set.to_args(),
        [10, 2, 512 | 50 << 16 | 1 << 32, 10_000 | 2_000 << 32, 0]
    );
    assert_eq!(PoolOp::from_args(set.to_args()), Ok(set));
    // Reserved bits of word 0 set: refused.
    assert_eq!(
        PoolOp::from_args([10, 2, 1 << 40, 0, 0]),
        Err(HvError::InvalidParameter)
    );
    assert_eq!(
        PoolOp::DestroyDomain { domain: 4 }.to_args(),
        [11, 4, 0, 0, 0]
    );
}

#[test]
fn pool_info_packs_into_two_registers() {
    let info = PoolInfo {
        id: 3,
        scheduler: Scheduler::Rt,
        granularity: Granularity::Cluster,
        cpus: 4,
        domains: 2,
        cpu_bitmap: 0xF0,
    };
    let regs = info.to_regs();
    assert_eq!(regs, [0, 3, 0x0000_0002_0004_0203, 0xF0]);
    assert_eq!(PoolInfo::from_regs(regs), Ok(info));
    assert_eq!(
        PoolInfo::from_regs([0, 3, 0x09, 0]),
        Err(HvError::InvalidParameter)
    );
}

#[test]
fn sched_stats_round_trip() {
    let stats = SchedStats {
        runtime_ns: 1_000_000,
        dispatches: 42,
        vcpus: 4,
    };
    assert_eq!(SchedStats::from_regs(stats.to_regs()), stats);
    assert_eq!(
        decode_return(encode_return(Ok(stats.to_regs()))),
        Ok(stats.to_regs())
    );
}

fn any_call() -> impl Strategy<Value = Call> {
    let tag = "[a-z0-9_]{1,8}".prop_map(|t| Tag::new(&t).unwrap());
    let pool_op = prop_oneof![
        any::<u32>().prop_map(|from| PoolOp::List { from }),
        (0..Scheduler::ALL.len(), 0..Granularity::ALL.len()).prop_map(|(s, g)| PoolOp::Create {
            scheduler: Scheduler::ALL[s],
            granularity: Granularity::ALL[g],
        }),
        any::<u32>().prop_map(|pool| PoolOp::Destroy { pool }),
        (any::<u32>(), any::<u32>()).prop_map(|(pool, cpu)| PoolOp::AddCpu { pool, cpu }),
        (any::<u32>(), any::<u32>()).prop_map(|(pool, cpu)| PoolOp::RemoveCpu { pool, cpu }),
        (any::<u32>(), any::<u32>()).prop_map(|(domain, pool)| PoolOp::MoveDomain { domain, pool }),
        (any::<u32>(), 1..=u64::MAX, any::<u64>())
            .prop_map(|(domain, hard, soft)| PoolOp::PinDomain { domain, hard, soft }),
        any::<u32>().prop_map(|domain| PoolOp::PauseDomain { domain }),
        any::<u32>().prop_map(|domain| PoolOp::UnpauseDomain { domain }),
        any::<u32>().prop_map(|domain| PoolOp::GetDomainParams { domain }),
        (
            any::<u32>(),
            any::<u16>(),
            any::<u16>(),
            any::<bool>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(domain, weight, cap, extratime, period_us, budget_us)| {
                PoolOp::SetDomainParams {
                    domain,
                    params: DomainParams {
                        weight,
                        cap,
                        extratime,
                        period_us,
                        budget_us,
                    },
                }
            }),
        any::<u32>().prop_map(|domain| PoolOp::DestroyDomain { domain }),
        any::<u32>().prop_map(|domain| PoolOp::RestartDomain { domain }),
    ];
    prop_oneof![
        Just(Call::Version),
        proptest::collection::vec(any::<u8>(), 0..=24)
            .prop_map(|bytes| Call::ConsoleWrite(ConsoleChunk::split(&bytes).0)),
        Just(Call::Yield),
        any::<u64>().prop_map(|timeout_ns| Call::Block { timeout_ns }),
        (0..2usize).prop_map(|s| Call::SchedStats(StatsScope::ALL[s])),
        pool_op.prop_map(Call::PoolOp),
        (tag, any::<u64>(), 0..Unit::ALL.len()).prop_map(|(tag, value, u)| {
            Call::TestReport(Report {
                tag,
                value,
                unit: Unit::ALL[u],
            })
        }),
        any::<u32>().prop_map(|vcpu| Call::TestPauseSibling { vcpu }),
        any::<u32>().prop_map(|vcpu| Call::TestUnpauseSibling { vcpu }),
    ]
}

proptest! {
    #[test]
    fn every_call_round_trips(call in any_call()) {
        let (id, args) = call.encode();
        prop_assert_eq!(id & 0xFFFF_0000, VENDOR_HYP_BASE);
        prop_assert_eq!(Call::decode(id as u64, args), Ok(call));
    }

    #[test]
    fn decoding_never_panics_and_re_encodes_what_it_accepts(
        n in 0u32..0x100, args in proptest::array::uniform5(any::<u64>())
    ) {
        let id = function_id(n as u16) as u64;
        if let Ok(call) = Call::decode(id, args) {
            prop_assert_eq!(call.encode(), (id as u32, args));
        }
    }

    #[test]
    fn success_values_are_never_read_as_errors(x0 in 0u64..(1 << 63), rest in any::<[u64; 3]>()) {
        let regs = [x0, rest[0], rest[1], rest[2]];
        prop_assert_eq!(decode_return(encode_return(Ok(regs))), Ok(regs));
    }
}
