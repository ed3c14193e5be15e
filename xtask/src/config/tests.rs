//! The TOML front end: the shipped configs and the README example are valid,
//! and every kind of bad config gives the right line and reason.

use super::*;

fn root() -> PathBuf {
    Workspace::current().root
}

/// Parses `text` and returns `(line, message)` of each problem.
fn problems(text: &str) -> Vec<(usize, String)> {
    match parse(text, None) {
        Ok(_) => panic!("config was accepted:\n{text}"),
        Err(diagnostics) => diagnostics
            .into_iter()
            .map(|d| (d.line, d.message))
            .collect(),
    }
}

/// Asserts exactly one problem, on `line`, whose message contains `reason`.
#[track_caller]
fn one_problem(text: &str, line: usize, reason: &str) {
    let found = problems(text);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].0, line, "{found:#?}");
    assert!(found[0].1.contains(reason), "{found:#?} lacks {reason:?}");
}

const GOOD: &str = r#"
[[pool]]
name = "general"
cpus = "0-3"

[[pool]]
name = "smt"
cpus = [4, "5"]
granularity = "core"

[[domain]]
name = "a"
pool = "general"
memory_mib = 64

[[domain]]
name = "b"
pool = "smt"
vcpus = 2
memory_mib = 64
"#;

#[test]
fn the_shipped_qemu_virt_config_is_valid_and_as_the_issue_asks() {
    let path = root().join("boards/configs/qemu-virt.toml");
    let config = load(&path).unwrap_or_else(|e| panic!("{e}"));
    let pool0 = &config.pools[0];
    assert_eq!(pool0.scheduler, "credit2");
    assert_eq!(pool0.granularity, "cpu");
    assert_eq!(hv::config::format_cpu_list(&pool0.cpus), "0-3");
    assert_eq!(pool0.scheduler_params, "ratelimit_us=500");
    let smt = &config.pools[1];
    assert!(matches!(smt.granularity.as_str(), "core" | "cluster"));
    let in_smt: Vec<_> = config
        .domains
        .iter()
        .filter(|d| d.pool == smt.name)
        .collect();
    assert_eq!(in_smt.len(), 2);
    assert!(in_smt.iter().all(|d| d.vcpus == 2));
    let null = config.pools.iter().find(|p| p.scheduler == "null").unwrap();
    let rt: Vec<_> = config
        .domains
        .iter()
        .filter(|d| d.pool == null.name)
        .collect();
    assert_eq!(rt.len(), 1);
    assert_eq!(
        rt[0].hard_affinity.map(|h| hv::config::format_cpu_list(&h)),
        Some("7".to_string())
    );
}

#[test]
fn the_readme_example_is_valid() {
    let readme = fs::read_to_string(root().join("boards/configs/README.md")).unwrap();
    let start = readme.find("```toml\n").expect("README has a toml example") + 8;
    let end = start + readme[start..].find("```").unwrap();
    let config = parse(&readme[start..end], None).unwrap_or_else(|e| panic!("{e:#?}"));
    assert_eq!(config.pools.len(), 3);
    assert_eq!(config.domains[1].devices[0].interrupts, [40]);
    assert_eq!(config.pools[0].scheduler_params, "ratelimit_us=500");
}

#[test]
fn a_good_config_converts_every_field() {
    let config = parse(GOOD, None).unwrap();
    assert_eq!(config.pools[1].cpus.iter().collect::<Vec<_>>(), [4, 5]);
    assert_eq!(config.domains[0].vcpus, 1, "default");
    let text = r#"
[[pool]]
name = "rt"
cpus = 3
scheduler = "rt"

[[domain]]
name = "d"
pool = "rt"
image = { file = "Image", initramfs = "rootfs.cpio" }
memory_mib = 16
memory_base = 0x8000_0000
budget_us = 500
period_us = 2000
extratime = false
weight = 7
cap = 20
console = "none"
bootargs = "x=y"
[[domain.device]]
name = "nic"
base = 0x0a00_0000
guest_base = 0x0b00_0000
size = 0x2000
interrupts = [48, 49]
compatible = ["vendor,nic"]
trigger = "edge"
"#;
    let config = parse(text, None).unwrap();
    let d = &config.domains[0];
    assert_eq!(
        d.image,
        GuestImage::File {
            path: "Image".into(),
            initramfs: Some("rootfs.cpio".into())
        }
    );
    assert_eq!(d.memory_base, 0x8000_0000);
    assert_eq!(
        d.params,
        SchedParams {
            weight: 7,
            cap_percent: 20,
            budget_ns: 500_000,
            period_ns: 2_000_000,
            extratime: false
        }
    );
    assert_eq!(d.console, Console::None);
    assert_eq!(d.devices[0].guest_base, 0x0b00_0000);
    assert_eq!(d.devices[0].interrupts, [48, 49]);
    assert_eq!(d.devices[0].compatible, ["vendor,nic"]);
    assert_eq!(d.devices[0].trigger, Some(hv::config::Trigger::Edge));
}

#[test]
fn syntax_and_type_errors_have_lines() {
    one_problem("[[pool]]\nname = \"a\"\ncpus = \"0\n", 3, "");
    one_problem(
        "[[pool]]\nname = \"a\"\ncpus = \"0\"\nschedular = \"null\"\n",
        4,
        "schedular",
    );
    one_problem(
        &GOOD.replace("vcpus = 2", "vcpus = \"two\""),
        19,
        "invalid type",
    );
    // memory_mib missing: the domain's table is named.
    let found = problems(&GOOD.replace("memory_mib = 64\n\n", ""));
    assert!(found[0].1.contains("memory_mib"), "{found:?}");
}

#[test]
fn validation_errors_point_at_the_field() {
    one_problem(
        &GOOD.replace("granularity = \"core\"", "granularity = \"thread\""),
        9,
        "unknown granularity 'thread'; valid: cpu, core, cluster, socket",
    );
    one_problem(
        &GOOD.replace("name = \"smt\"\n", "name = \"smt\"\nscheduler = \"bfs\"\n"),
        8,
        "unknown scheduler 'bfs'; valid: credit2, credit, null, rt, arinc653",
    );
    one_problem(
        &GOOD.replace("cpus = [4, \"5\"]", "cpus = [3, 4]"),
        8,
        "pool 'smt': cpus: CPU 3 is also in pool 'general'",
    );
    one_problem(
        &GOOD.replace("cpus = [4, \"5\"]", "cpus = []"),
        8,
        "pool 'smt': cpus: the pool has no CPU",
    );
    one_problem(
        &GOOD.replace("pool = \"smt\"", "pool = \"smp\""),
        18,
        "domain 'b': pool: no pool is called 'smp'",
    );
    one_problem(
        &GOOD.replace("vcpus = 2", "vcpus = 500"),
        19,
        "500 vCPUs; a domain has 1 to 128",
    );
    one_problem(
        &GOOD.replace("cpus = \"0-3\"", "cpus = \"3-0\""),
        4,
        "range 3-0 runs backwards",
    );
    one_problem(
        &format!("{GOOD}hard_affinity = \"0\"\n"),
        21,
        "hard affinity must be non-empty and inside the domain's pool",
    );
    one_problem(
        &format!("{GOOD}console = \"serial\"\n"),
        21,
        "unknown console 'serial'",
    );
    // A default left in place is reported at the item's table.
    let null_pool = GOOD.replace("name = \"smt\"\n", "name = \"smt\"\nscheduler = \"null\"\n");
    let found = problems(&null_pool.replace("cpus = [4, \"5\"]", "cpus = [4]"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].0, 8);
    assert!(found[0].1.contains("null scheduler runs one vCPU per CPU"));
}

#[test]
fn device_errors_point_at_the_device() {
    let with_devices = format!(
        "{GOOD}[[domain.device]]\nname = \"uart\"\nbase = 0x0904_0000\nsize = 0x1000\ninterrupts = [40]\n\
         \n[[domain]]\nname = \"c\"\npool = \"general\"\nmemory_mib = 8\n\
         [[domain.device]]\nname = \"uart-again\"\nbase = 0x0904_0000\nsize = 0x1000\ninterrupts = [41]\n"
    );
    one_problem(
        &with_devices,
        33,
        "device 'uart-again': base: host range is also passed through to domain 'b' (device 'uart')",
    );
    let overlap_ram = format!(
        "{GOOD}[[domain.device]]\nname = \"fb\"\nbase = 0x1000_0000\nguest_base = 0x4000_0000\nsize = 0x1000\n"
    );
    one_problem(
        &overlap_ram,
        24,
        "guest-physical range overlaps the domain's memory",
    );
    let ppi = format!(
        "{GOOD}[[domain.device]]\nname = \"t\"\nbase = 0x1000_0000\nsize = 0x1000\ninterrupts = [27]\n"
    );
    one_problem(&ppi, 25, "INTID 27 is not an SPI");
    let trigger = format!(
        "{GOOD}[[domain.device]]\nname = \"t\"\nbase = 0x1000_0000\nsize = 0x1000\ntrigger = \"both\"\n"
    );
    one_problem(&trigger, 25, "unknown trigger 'both'; valid: level, edge");
}

#[test]
fn missing_image_files_are_reported_with_their_line() {
    let dir = std::env::temp_dir().join(format!("xtask-config-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let text = GOOD.replace(
        "name = \"b\"\n",
        "name = \"b\"\nimage = { file = \"missing.bin\" }\n",
    );
    let path = dir.join("bad.toml");
    fs::write(&path, &text).unwrap();
    let errors = load(&path).unwrap_err();
    assert_eq!(errors.diagnostics.len(), 1);
    let shown = errors.to_string();
    assert!(
        shown.starts_with(&format!("{}:18: ", path.display())),
        "{shown}"
    );
    assert!(shown.contains("no such file"), "{shown}");
    fs::write(dir.join("missing.bin"), b"guest").unwrap();
    assert!(load(&path).is_ok());
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn every_problem_is_reported_in_line_order() {
    let text = GOOD
        .replace("granularity = \"core\"", "granularity = \"hyper\"")
        .replace("pool = \"general\"", "pool = \"nope\"")
        .replace("vcpus = 2", "vcpus = 0");
    let lines: Vec<usize> = problems(&text).iter().map(|p| p.0).collect();
    assert_eq!(lines, [9, 13, 19]);
}

#[test]
fn the_build_blob_decodes_to_the_checked_config() {
    let workspace = Workspace {
        root: root(),
        target_dir: std::env::temp_dir().join(format!("xtask-config-build-{}", std::process::id())),
    };
    let board = crate::board::find("qemu-virt").unwrap();
    let (blob, _) = prepare_for_build(&workspace, board, None)
        .unwrap()
        .expect("qemu-virt has a config");
    let decoded = hv::config::Config::load(&fs::read(&blob).unwrap()).unwrap();
    assert_eq!(decoded, load(&default_path(&workspace, board)).unwrap());
    fs::remove_dir_all(&workspace.target_dir).unwrap();
}

#[test]
fn user_images_are_embedded_once_and_refused_with_a_reason() {
    let dir = std::env::temp_dir().join(format!("xtask-images-{}", std::process::id()));
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join("images.toml");
    let with_images = |a: &str, b: &str| {
        GOOD.replace("name = \"a\"\n", &format!("name = \"a\"\nimage = {a}\n"))
            .replace("name = \"b\"\n", &format!("name = \"b\"\nimage = {b}\n"))
    };
    let built = |a: &str, b: &str| {
        fs::write(&path, with_images(a, b)).unwrap();
        let config = load(&path).unwrap_or_else(|e| panic!("{e}"));
        user_images(&path, &config, false).map_err(|e| e.to_string())
    };
    // A raw binary (kvm-unit-tests' .flat) and a kernel with an initramfs;
    // the shared file is listed once.
    fs::write(dir.join("test.flat"), [0x1f, 0x20, 0x03, 0xd5]).unwrap();
    fs::write(dir.join("rootfs.cpio"), b"070701").unwrap();
    let lines = built(
        r#"{ file = "test.flat" }"#,
        r#"{ file = "test.flat", initramfs = "rootfs.cpio" }"#,
    )
    .unwrap();
    assert_eq!(lines.lines().count(), 2, "{lines}");
    assert!(lines.starts_with("test.flat\t"), "{lines}");
    assert!(lines.contains("rootfs.cpio\t"), "{lines}");
    // Not an image: each says what it is and what to give instead.
    fs::write(dir.join("vmlinux"), b"\x7fELF\x02\x01\x01\0").unwrap();
    let e = built(r#"{ file = "vmlinux" }"#, r#"{ file = "test.flat" }"#).unwrap_err();
    assert!(e.contains("domain 'a'") && e.contains("ELF"), "{e}");
    fs::write(dir.join("vmlinuz"), [0x1f, 0x8b, 8, 0]).unwrap();
    let e = built(r#"{ file = "test.flat" }"#, r#"{ file = "vmlinuz" }"#).unwrap_err();
    assert!(e.contains("domain 'b'") && e.contains("gzip"), "{e}");
    // Too big for memory_mib = 64 once the device tree's 2 MiB are counted.
    fs::write(dir.join("big.bin"), vec![0u8; 63 << 20]).unwrap();
    let e = built(r#"{ file = "big.bin" }"#, r#"{ file = "test.flat" }"#).unwrap_err();
    assert!(e.contains("need 65 MiB but the domain has 64 MiB"), "{e}");
    // A missing initramfs is a config error with its line.
    fs::write(
        &path,
        with_images(
            r#"{ file = "test.flat", initramfs = "none.cpio" }"#,
            r#""test-guest""#,
        ),
    )
    .unwrap();
    let e = load(&path).unwrap_err().to_string();
    assert!(e.contains("initramfs: no such file"), "{e}");
    fs::remove_dir_all(&dir).unwrap();
}

/// The x86 build's check of a user image: a truncated bzImage, an ELF, an
/// arm64 Image and an initramfs without a kernel are refused with what is
/// wrong; a flat binary passes (the test guest's ABI).
#[test]
fn x86_user_images_are_refused_with_a_reason() {
    const MIB: u64 = 1 << 20;
    // A bzImage cut short after its magic: 0xAA55 at 0x1FE, "HdrS" at 0x202.
    let mut truncated = vec![0u8; 0x220];
    truncated[0x1fe..0x200].copy_from_slice(&[0x55, 0xaa]);
    truncated[0x202..0x206].copy_from_slice(b"HdrS");
    let why = check_x86_image(&truncated, 0, "", 64 * MIB).unwrap_err();
    assert!(why.contains("truncated"), "{why}");
    let why = check_x86_image(b"\x7fELF\x02\x01\x01", 0, "", 64 * MIB).unwrap_err();
    assert!(why.contains("ELF"), "{why}");
    let mut arm64 = vec![0u8; 64];
    arm64[0x38..0x3c].copy_from_slice(b"ARM\x64");
    let why = check_x86_image(&arm64, 0, "", 64 * MIB).unwrap_err();
    assert!(why.contains("arm64"), "{why}");
    let why = check_x86_image(&[0x90; 16], 100, "", 64 * MIB).unwrap_err();
    assert!(why.contains("initramfs"), "{why}");
    assert_eq!(check_x86_image(&[0x90; 16], 0, "", 64 * MIB), Ok(()));
}

#[test]
fn multiboot_kernels_boot_when_they_fit_with_their_module() {
    const MIB: u64 = 1 << 20;
    let smptest = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../shared/fixtures/kvm-unit-tests/x86_64/smptest.flat"),
    )
    .expect("the kvm-unit-tests fixtures beside the repository");
    assert_eq!(check_x86_image(&smptest, 10, "smp", 32 * MIB), Ok(()));
    // Its bss reaches past 16 MiB.
    let why = check_x86_image(&smptest, 10, "", 16 * MIB).unwrap_err();
    assert!(why.contains("needs"), "{why}");
    let mut broken = smptest.clone();
    let header = broken
        .windows(4)
        .position(|w| w == 0x1bad_b002u32.to_le_bytes())
        .unwrap();
    broken[header + 8] ^= 1;
    let why = check_x86_image(&broken, 0, "", 32 * MIB).unwrap_err();
    assert!(why.contains("checksum"), "{why}");
    let why = check_x86_image(&smptest[..4096], 0, "", 32 * MIB).unwrap_err();
    assert!(why.contains("truncated"), "{why}");
}
