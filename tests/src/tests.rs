//! The harness tested against fake "QEMU"s made of `sh -c` scripts.

use super::*;

/// A scenario running `sh -c script`, logging into a fresh temporary directory.
fn fake(name: &str, script: &str) -> Scenario {
    let dir = std::env::temp_dir().join(format!("tests-harness-{}", std::process::id()));
    Scenario::new(name, "sh")
        .args(["-c", script])
        .timeout(Duration::from_secs(5))
        .log_dir(dir)
}

#[test]
fn stops_as_soon_as_every_expectation_is_met() {
    let outcome = fake(
        "early-stop",
        "echo '[cpu0] INFO  gic: GICv3'; echo '[cpu1] INFO  cpu 1 online'; exec sleep 100",
    )
    .expect(Expectation::contains("gic: GICv3"))
    .expect(Expectation::each("cpu {} online", [1]).unwrap())
    .run();
    assert!(outcome.passed(), "{}", outcome.report());
    assert!(
        outcome.elapsed < Duration::from_secs(3),
        "{:?}",
        outcome.elapsed
    );
    assert_eq!(outcome.lines.len(), 2);
}

#[test]
fn times_out_and_names_what_is_missing() {
    let outcome = fake(
        "timeout",
        "echo '[cpu0] INFO  cpu 0 online'; exec sleep 100",
    )
    .timeout(Duration::from_millis(700))
    .expect(Expectation::contains("cpu 0 online"))
    .expect(Expectation::contains("smp: 8 of 8 CPUs online"))
    .run();
    let Err(Failure::TimedOut { unmet, .. }) = &outcome.result else {
        panic!("expected a timeout, got {:?}", outcome.result);
    };
    assert_eq!(unmet.len(), 1);
    assert!(unmet[0].to_string().contains("smp: 8 of 8"));
    assert!(outcome.elapsed >= Duration::from_millis(700));
    assert!(
        outcome.elapsed < Duration::from_secs(4),
        "{:?}",
        outcome.elapsed
    );
    let report = outcome.report();
    assert!(report.contains("not met: a line containing \"smp: 8 of 8 CPUs online\""));
    assert!(report.contains("[cpu0] INFO  cpu 0 online"), "{report}");
}

#[test]
fn a_panic_line_fails_at_once_and_keeps_what_follows() {
    let outcome = fake(
        "panic",
        "echo '[cpu0] INFO  booting'; echo '[cpu2] PANIC at src/main.rs:3'; \
         echo 'register dump'; exec sleep 100",
    )
    .expect(Expectation::contains("never printed"))
    .run();
    let Err(Failure::FailureLine {
        line_number,
        pattern,
        ..
    }) = &outcome.result
    else {
        panic!("expected a failure line, got {:?}", outcome.result);
    };
    assert_eq!((*line_number, pattern.as_str()), (2, "PANIC"));
    assert!(outcome.elapsed < Duration::from_secs(3));
    assert!(outcome.lines.iter().any(|l| l == "register dump"));
}

#[test]
fn each_default_failure_pattern_is_caught_and_allow_exempts() {
    for pattern in DEFAULT_FAILURE_PATTERNS {
        let script = format!("echo 'x {pattern} y'; exec sleep 100");
        let outcome = fake("patterns", &script)
            .expect(Expectation::contains("x"))
            .run();
        // The expectation is met on the same line, but the failure wins.
        assert!(!outcome.passed(), "{pattern} not caught");
    }
    let outcome = fake(
        "allowed",
        "echo '[cpu0] ERROR device tree: truncated, stopping'; exec sleep 100",
    )
    .allow("device tree:")
    .expect(Expectation::contains("stopping"))
    .run();
    assert!(outcome.passed(), "{}", outcome.report());
}

#[test]
fn linger_catches_a_failure_after_the_expectations() {
    let outcome = fake(
        "linger",
        "echo 'device tree: bad, stopping'; sleep 0.3; echo 'Unexpected exception'; exec sleep 100",
    )
    .expect(Expectation::contains("stopping"))
    .linger(Duration::from_secs(2))
    .run();
    assert!(
        matches!(outcome.result, Err(Failure::FailureLine { .. })),
        "{}",
        outcome.report()
    );
    let quiet = fake("linger-quiet", "echo 'stopping'; exec sleep 100")
        .expect(Expectation::contains("stopping"))
        .linger(Duration::from_millis(300))
        .run();
    assert!(quiet.passed(), "{}", quiet.report());
    assert!(quiet.elapsed >= Duration::from_millis(300));
}

#[test]
fn an_early_exit_is_a_failure_unless_everything_was_seen() {
    let outcome = fake("exit-early", "echo 'cpu 0 online'; exit 3")
        .expect(Expectation::contains("smp: 8 of 8"))
        .run();
    let Err(Failure::Exited { status, unmet }) = &outcome.result else {
        panic!("expected an early exit, got {:?}", outcome.result);
    };
    assert!(status.contains('3'), "{status}");
    assert_eq!(unmet.len(), 1);

    let outcome = fake("exit-done", "echo 'smp: 8 of 8'; exit 0")
        .expect(Expectation::contains("smp: 8 of 8"))
        .linger(Duration::from_secs(3))
        .run();
    assert!(outcome.passed(), "{}", outcome.report());
    assert!(outcome.elapsed < Duration::from_secs(2));
}

#[test]
fn stderr_and_partial_lines_are_read() {
    let outcome = fake(
        "stderr",
        "echo 'qemu: cannot open' >&2; printf 'no newline'",
    )
    .expect(Expectation::contains("no newline"))
    .expect(Expectation::contains("[stderr] qemu: cannot open"))
    .run();
    assert!(outcome.passed(), "{}", outcome.report());
}

#[test]
fn a_line_cut_by_the_harnesss_stop_is_logged_but_not_kept() {
    // The qemu-virt-passthrough soak failure: the run passed, the harness
    // killed QEMU in the middle of a teardown line, and the check parsing
    // teardown lines failed on the half it had. The met line and the half
    // line go out in one write (atomic on a pipe), so the half is in the
    // reader's buffer before the harness can stop: written as two, the
    // harness could stop before the half was written at all.
    let outcome = fake(
        "cut",
        "printf 'done\\nheap in use 135271 -> '; exec sleep 100",
    )
    .expect(Expectation::contains("done"))
    .run();
    assert!(outcome.passed(), "{}", outcome.report());
    assert_eq!(outcome.lines, ["done"]);
    let text = fs::read_to_string(outcome.log.as_ref().expect("log path")).unwrap();
    assert!(
        text.contains("heap in use 135271 ->  [cut off: the run was stopped here]"),
        "{text}"
    );
}

#[test]
fn the_log_file_holds_the_console_and_the_verdict() {
    let outcome = fake("logged", "echo one; echo two; exec sleep 100")
        .expect(Expectation::contains("two"))
        .run();
    let log = outcome.log.as_ref().expect("log path");
    assert!(log.ends_with("logged.log"));
    let text = fs::read_to_string(log).unwrap();
    assert!(text.contains("\none\ntwo\n"), "{text}");
    assert!(text.contains("# result: passed"), "{text}");
}

#[test]
fn missing_program_or_image_fail_cleanly() {
    let outcome = Scenario::new("no-program", "/nonexistent/qemu").run();
    assert!(matches!(outcome.result, Err(Failure::Spawn { .. })));
    let outcome = Scenario::new("no-image", "sh")
        .kernel("/nonexistent/hv.bin")
        .run();
    assert!(matches!(outcome.result, Err(Failure::MissingKernel(_))));
}

#[test]
fn the_kernel_goes_last_on_the_command_line() {
    let scenario = Scenario::new("cmd", "qemu-system-aarch64")
        .args(["-m", "1G"])
        .kernel("hv.bin");
    assert_eq!(
        scenario.command_line(),
        "qemu-system-aarch64 -m 1G -kernel hv.bin"
    );
}

#[test]
fn input_is_typed_after_its_trigger_line_in_order() {
    let outcome = fake(
        "input",
        "echo 'login:'; read a; echo \"first=$a\"; echo 'again:'; read b; echo \"second=$b\"; exec sleep 100",
    )
    .input_after("again:", "two\n")
    .input_after("never printed", "lost\n")
    .expect(Expectation::contains("second=two"))
    .timeout(Duration::from_secs(1))
    .run();
    // The first input waits for "again:", which only comes after a line was
    // read: nothing is typed, so `read a` blocks and the run times out.
    assert!(!outcome.passed());
    assert!(!outcome.lines.iter().any(|l| l.starts_with("first=")));

    let outcome = fake(
        "input-ok",
        "echo 'login:'; read a; echo \"first=$a\"; echo 'again:'; read b; echo \"second=$b\"; exec sleep 100",
    )
    .input_after("login:", "one\n")
    .input_after("again:", "two\n")
    .expect(Expectation::contains("second=two"))
    .run();
    assert!(outcome.passed(), "{}", outcome.report());
    assert!(outcome.lines.iter().any(|l| l == "first=one"));
}

#[test]
fn input_after_all_waits_for_every_line_in_any_order() {
    // "b ready" comes before "a ready": typed only once both were seen.
    let outcome = fake(
        "input-all",
        "echo 'b ready'; sleep 0.2; echo 'noise'; echo 'a ready'; read x; echo \"got=$x\"; exec sleep 100",
    )
    .input_after_all(&["a ready", "b ready"], "both\n")
    .expect(Expectation::contains("got=both"))
    .run();
    assert!(outcome.passed(), "{}", outcome.report());
    // One of them never comes: nothing is typed.
    let outcome = fake(
        "input-all-missing",
        "echo 'a ready'; read x; echo \"got=$x\"; exec sleep 100",
    )
    .input_after_all(&["a ready", "b ready"], "both\n")
    .expect(Expectation::contains("got=both"))
    .timeout(Duration::from_secs(1))
    .run();
    assert!(!outcome.passed());
}

#[test]
fn without_inputs_stdin_is_closed() {
    let outcome = fake(
        "no-input",
        "if read x; then echo \"read $x\"; else echo eof; fi",
    )
    .expect(Expectation::contains("eof"))
    .run();
    assert!(outcome.passed(), "{}", outcome.report());
}
