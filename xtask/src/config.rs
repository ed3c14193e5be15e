//! `cargo xtask config check FILE`, and the config step of `cargo xtask build`:
//! reads a TOML image configuration (`boards/configs/*.toml`, format in
//! `boards/configs/README.md`), reports every problem as `FILE:LINE: reason`,
//! runs the validator the hypervisor runs at boot (`hv::config`), and writes the
//! binary form the hypervisor's build embeds (`HV_CONFIG`).
//!
//! Lines come from the `toml` crate's spans: syntax and type errors carry their
//! own, and each validation error names an item and a field, which this module
//! maps back to where that field (or, when it was left to its default, the
//! item's table) is written.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use hv::config::{
    Config, Console, DeviceConfig, DomainConfig, GuestImage, Item, PoolConfig, Trigger, encode,
    parse_cpu_list,
};
use sched::SchedParams;
use serde::Deserialize;
use toml::Spanned;

use crate::board::Board;
use crate::image::BuildError;
use crate::workspace::Workspace;

/// One problem, at a line of the file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnostic {
    /// 1-based line.
    pub line: usize,
    /// What is wrong.
    pub message: String,
}

/// Every problem of one file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigErrors {
    /// The file, as given.
    pub file: PathBuf,
    /// The problems, in file order where the file gives one.
    pub diagnostics: Vec<Diagnostic>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}:{}: {}", self.file.display(), d.line, d.message)?;
        }
        Ok(())
    }
}

// ----- the TOML shape -------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToml {
    #[serde(default)]
    pool: Vec<Spanned<PoolToml>>,
    #[serde(default)]
    domain: Vec<Spanned<DomainToml>>,
}

/// A CPU list: `"0-3,7"`, `5`, or `[0, 1, "4-6"]`.
#[derive(Deserialize)]
#[serde(untagged)]
enum CpuListToml {
    Text(String),
    One(u64),
    List(Vec<CpuItemToml>),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum CpuItemToml {
    Cpu(u64),
    Range(String),
}

impl CpuListToml {
    fn text(&self) -> String {
        match self {
            Self::Text(text) => text.clone(),
            Self::One(cpu) => cpu.to_string(),
            Self::List(items) => items
                .iter()
                .map(|item| match item {
                    CpuItemToml::Cpu(cpu) => cpu.to_string(),
                    CpuItemToml::Range(range) => range.clone(),
                })
                .collect::<Vec<_>>()
                .join(","),
        }
    }
}

/// Pool parameters: `"ratelimit_us=500"` or `{ ratelimit_us = 500 }`.
#[derive(Deserialize)]
#[serde(untagged)]
enum ParamsToml {
    Text(String),
    Table(BTreeMap<String, toml::Value>),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolToml {
    name: Spanned<String>,
    cpus: Spanned<CpuListToml>,
    scheduler: Option<Spanned<String>>,
    scheduler_params: Option<Spanned<ParamsToml>>,
    granularity: Option<Spanned<String>>,
    placement: Option<Spanned<String>>,
}

/// `"test-guest"` or `{ file = "path" }` (with `initramfs = "path"`).
#[derive(Deserialize)]
#[serde(untagged)]
enum ImageToml {
    Builtin(String),
    File(FileImageToml),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct FileImageToml {
    file: String,
    initramfs: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DomainToml {
    name: Spanned<String>,
    image: Option<Spanned<ImageToml>>,
    pool: Spanned<String>,
    vcpus: Option<Spanned<u32>>,
    memory_mib: Spanned<u64>,
    memory_base: Option<Spanned<u64>>,
    weight: Option<Spanned<u16>>,
    cap: Option<Spanned<u16>>,
    budget_us: Option<Spanned<u64>>,
    period_us: Option<Spanned<u64>>,
    extratime: Option<Spanned<bool>>,
    hard_affinity: Option<Spanned<CpuListToml>>,
    soft_affinity: Option<Spanned<CpuListToml>>,
    console: Option<Spanned<String>>,
    privileged: Option<Spanned<bool>>,
    test_hooks: Option<Spanned<bool>>,
    fail_stop: Option<Spanned<bool>>,
    bootargs: Option<Spanned<String>>,
    #[serde(default)]
    device: Vec<Spanned<DeviceToml>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DeviceToml {
    name: Spanned<String>,
    base: Spanned<u64>,
    guest_base: Option<Spanned<u64>>,
    size: Spanned<u64>,
    #[serde(default)]
    interrupts: Option<Spanned<Vec<u32>>>,
    compatible: Option<Spanned<Vec<String>>>,
    trigger: Option<Spanned<String>>,
}

// ----- conversion -----------------------------------------------------------

/// Line of byte `offset` in `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

fn span<T>(field: &Option<Spanned<T>>, fallback: &Range<usize>) -> Range<usize> {
    field.as_ref().map_or(fallback.clone(), Spanned::span)
}

/// Converts durations in µs to ns, or says why not.
fn micros(value: &Spanned<u64>, errors: &mut Vec<(Range<usize>, String)>) -> Option<u64> {
    let ns = value.get_ref().checked_mul(1000);
    if ns.is_none() {
        errors.push((value.span(), "duration too large".to_string()));
    }
    ns
}

fn cpu_set(
    list: &Spanned<CpuListToml>,
    errors: &mut Vec<(Range<usize>, String)>,
) -> Option<sched::CpuSet> {
    let text = list.get_ref().text();
    // An empty list is an empty set: the validator says "the pool has no CPU".
    if text.trim().is_empty() {
        return Some(sched::CpuSet::new());
    }
    match parse_cpu_list(&text) {
        Ok(set) => Some(set),
        Err(e) => {
            errors.push((list.span(), e.to_string()));
            None
        }
    }
}

fn pool_params(params: &ParamsToml) -> String {
    match params {
        ParamsToml::Text(text) => text.clone(),
        ParamsToml::Table(table) => table
            .iter()
            .map(|(key, value)| match value {
                toml::Value::String(s) => format!("{key}={s}"),
                other => format!("{key}={other}"),
            })
            .collect::<Vec<_>>()
            .join(","),
    }
}

/// The parsed file and where each item's fields are.
struct Parsed {
    config: Config,
    file: FileToml,
}

impl Parsed {
    /// Where the validator's `(item, field)` is written.
    fn locate(&self, item: Item, field: &str) -> Range<usize> {
        match item {
            Item::Root => 0..0,
            Item::Pool(i) => {
                let Some(pool) = self.file.pool.get(i) else {
                    return 0..0;
                };
                let whole = pool.span();
                let p = pool.get_ref();
                match field {
                    "name" => p.name.span(),
                    "cpus" => p.cpus.span(),
                    "scheduler" => span(&p.scheduler, &whole),
                    "scheduler_params" => span(&p.scheduler_params, &whole),
                    "granularity" => span(&p.granularity, &whole),
                    "placement" => span(&p.placement, &whole),
                    _ => whole,
                }
            }
            Item::Domain(i) => {
                let Some(domain) = self.file.domain.get(i) else {
                    return 0..0;
                };
                let whole = domain.span();
                let d = domain.get_ref();
                match field {
                    "name" => d.name.span(),
                    "pool" => d.pool.span(),
                    "image" => span(&d.image, &whole),
                    "vcpus" => span(&d.vcpus, &whole),
                    "memory_mib" => match &d.memory_base {
                        // A bad base is reported under memory_mib: point at the base.
                        Some(base) if base.get_ref() % (2 << 20) != 0 => base.span(),
                        _ => d.memory_mib.span(),
                    },
                    "weight" => span(&d.weight, &whole),
                    "cap" => span(&d.cap, &whole),
                    "budget_us" => span(&d.budget_us, &whole),
                    "period_us" => span(&d.period_us, &whole),
                    "hard_affinity" => span(&d.hard_affinity, &whole),
                    "soft_affinity" => span(&d.soft_affinity, &whole),
                    "console" => span(&d.console, &whole),
                    "privileged" => span(&d.privileged, &whole),
                    _ => whole,
                }
            }
            Item::Device { domain, device } => {
                let Some(dev) = self
                    .file
                    .domain
                    .get(domain)
                    .and_then(|d| d.get_ref().device.get(device))
                else {
                    return 0..0;
                };
                let whole = dev.span();
                let v = dev.get_ref();
                match field {
                    "name" => v.name.span(),
                    "base" => v.base.span(),
                    "size" => v.size.span(),
                    "guest_base" => span(&v.guest_base, &v.base.span()),
                    "interrupts" => span(&v.interrupts, &whole),
                    "compatible" => span(&v.compatible, &whole),
                    "trigger" => span(&v.trigger, &whole),
                    _ => whole,
                }
            }
        }
    }
}

fn convert(file: FileToml) -> Result<Parsed, Vec<(Range<usize>, String)>> {
    let mut errors = Vec::new();
    let mut config = Config::default();
    for pool in &file.pool {
        let p = pool.get_ref();
        let mut out = PoolConfig::new(p.name.get_ref(), sched::CpuSet::new());
        if let Some(cpus) = cpu_set(&p.cpus, &mut errors) {
            out.cpus = cpus;
        }
        if let Some(s) = &p.scheduler {
            out.scheduler = s.get_ref().clone();
        }
        if let Some(params) = &p.scheduler_params {
            out.scheduler_params = pool_params(params.get_ref());
        }
        if let Some(g) = &p.granularity {
            out.granularity = g.get_ref().clone();
        }
        if let Some(pl) = &p.placement {
            out.placement = pl.get_ref().clone();
        }
        config.pools.push(out);
    }
    for domain in &file.domain {
        let d = domain.get_ref();
        let mut out = DomainConfig::new(d.name.get_ref(), d.pool.get_ref());
        if let Some(image) = &d.image {
            out.image = match image.get_ref() {
                ImageToml::Builtin(name) => GuestImage::Builtin(name.clone()),
                ImageToml::File(f) => GuestImage::File {
                    path: f.file.clone(),
                    initramfs: f.initramfs.clone(),
                },
            };
        }
        if let Some(v) = &d.vcpus {
            out.vcpus = *v.get_ref();
        }
        out.memory_mib = *d.memory_mib.get_ref();
        if let Some(base) = &d.memory_base {
            out.memory_base = *base.get_ref();
        }
        let defaults = SchedParams::default();
        out.params = SchedParams {
            weight: d.weight.as_ref().map_or(defaults.weight, |w| *w.get_ref()),
            cap_percent: d
                .cap
                .as_ref()
                .map_or(defaults.cap_percent, |c| *c.get_ref()),
            budget_ns: d
                .budget_us
                .as_ref()
                .and_then(|b| micros(b, &mut errors))
                .unwrap_or(defaults.budget_ns),
            period_ns: d
                .period_us
                .as_ref()
                .and_then(|p| micros(p, &mut errors))
                .unwrap_or(defaults.period_ns),
            extratime: d
                .extratime
                .as_ref()
                .map_or(defaults.extratime, |e| *e.get_ref()),
        };
        if let Some(hard) = &d.hard_affinity {
            out.hard_affinity = cpu_set(hard, &mut errors);
        }
        if let Some(soft) = &d.soft_affinity {
            out.soft_affinity = cpu_set(soft, &mut errors);
        }
        if let Some(console) = &d.console {
            match Console::from_name(console.get_ref()) {
                Some(c) => out.console = c,
                None => errors.push((
                    console.span(),
                    format!(
                        "unknown console '{}'; valid: vpl011, none",
                        console.get_ref()
                    ),
                )),
            }
        }
        out.privileged = d.privileged.as_ref().is_some_and(|p| *p.get_ref());
        out.test_hooks = d.test_hooks.as_ref().is_some_and(|t| *t.get_ref());
        out.fail_stop = d.fail_stop.as_ref().is_some_and(|t| *t.get_ref());
        if let Some(args) = &d.bootargs {
            out.bootargs = args.get_ref().clone();
        }
        for device in &d.device {
            let v = device.get_ref();
            let trigger = v.trigger.as_ref().and_then(|t| {
                let parsed = Trigger::from_name(t.get_ref());
                if parsed.is_none() {
                    errors.push((
                        t.span(),
                        format!("unknown trigger '{}'; valid: level, edge", t.get_ref()),
                    ));
                }
                parsed
            });
            out.devices.push(DeviceConfig {
                name: v.name.get_ref().clone(),
                base: *v.base.get_ref(),
                guest_base: v
                    .guest_base
                    .as_ref()
                    .map_or(*v.base.get_ref(), |g| *g.get_ref()),
                size: *v.size.get_ref(),
                interrupts: v
                    .interrupts
                    .as_ref()
                    .map(|i| i.get_ref().clone())
                    .unwrap_or_default(),
                compatible: v
                    .compatible
                    .as_ref()
                    .map(|c| c.get_ref().clone())
                    .unwrap_or_default(),
                trigger,
            });
        }
        config.domains.push(out);
    }
    if errors.is_empty() {
        Ok(Parsed { config, file })
    } else {
        Err(errors)
    }
}

/// Parses and validates the text of a config file; on failure every problem
/// with its line. `base_dir` is where `image = { file = ... }` paths are
/// looked up (the config file's directory); `None` skips that check.
pub fn parse(text: &str, base_dir: Option<&Path>) -> Result<Config, Vec<Diagnostic>> {
    let at = |range: Range<usize>, message: String| Diagnostic {
        line: line_of(text, range.start),
        message,
    };
    let file: FileToml = toml::from_str(text).map_err(|e| {
        let line = e.span().map_or(1, |s| line_of(text, s.start));
        vec![Diagnostic {
            line,
            message: e.message().trim().to_string(),
        }]
    })?;
    let parsed = convert(file).map_err(|errors| {
        errors
            .into_iter()
            .map(|(range, message)| at(range, message))
            .collect::<Vec<_>>()
    })?;
    let mut diagnostics: Vec<Diagnostic> = parsed
        .config
        .validate()
        .into_iter()
        .map(|e| at(parsed.locate(e.item, e.field), e.to_string()))
        .collect();
    if let Some(dir) = base_dir {
        for (i, domain) in parsed.config.domains.iter().enumerate() {
            let GuestImage::File { path, initramfs } = &domain.image else {
                continue;
            };
            let files = [("image", Some(path)), ("initramfs", initramfs.as_ref())];
            for (what, file) in files {
                if let Some(file) = file
                    && !file.is_empty()
                    && !dir.join(file).is_file()
                {
                    diagnostics.push(at(
                        parsed.locate(Item::Domain(i), "image"),
                        format!(
                            "domain '{}': {what}: no such file {}",
                            domain.name,
                            dir.join(file).display()
                        ),
                    ));
                }
            }
        }
    }
    diagnostics.sort_by_key(|d| d.line);
    if diagnostics.is_empty() {
        Ok(parsed.config)
    } else {
        Err(diagnostics)
    }
}

/// Reads, parses and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let errors = |diagnostics| ConfigErrors {
        file: path.to_path_buf(),
        diagnostics,
    };
    let text = fs::read_to_string(path).map_err(|e| {
        errors(vec![Diagnostic {
            line: 1,
            message: format!("cannot read: {e}"),
        }])
    })?;
    parse(&text, Some(path.parent().unwrap_or(Path::new(".")))).map_err(errors)
}

/// The board's default config: `boards/configs/<board>.toml`.
pub fn default_path(workspace: &Workspace, board: &Board) -> PathBuf {
    workspace
        .root
        .join("boards/configs")
        .join(format!("{}.toml", board.name))
}

/// For `cargo xtask build`: checks the board's default config and writes its
/// binary form to `<target>/config/<board>.hvcfg`, whose path the build passes
/// to the hypervisor as `HV_CONFIG`. `None` when the board has no config file
/// (the hypervisor then builds one pool of every CPU and no domains).
pub fn prepare_for_build(
    workspace: &Workspace,
    board: &Board,
    config: Option<&Path>,
) -> Result<Option<(PathBuf, Config)>, BuildError> {
    let path = config.map_or_else(|| default_path(workspace, board), Path::to_path_buf);
    if !path.is_file() {
        return Ok(None);
    }
    let config = load(&path).map_err(|e| {
        BuildError::Io(
            path.clone(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("invalid config\n{e}"),
            ),
        )
    })?;
    let dir = workspace.output("config");
    fs::create_dir_all(&dir).map_err(|e| BuildError::Io(dir.clone(), e))?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let out = dir.join(format!("{}-{stem}.hvcfg", board.name));
    fs::write(&out, encode(&config)).map_err(|e| BuildError::Io(out.clone(), e))?;
    Ok(Some((out, config)))
}

/// The config file a build uses: `config`, or the board's default.
pub fn path_for_build(workspace: &Workspace, board: &Board, config: Option<&Path>) -> PathBuf {
    config.map_or_else(|| default_path(workspace, board), Path::to_path_buf)
}

/// The images `config` (read from `config_path`) names by file, each with
/// the path it names resolved against the config's folder, as the build
/// embeds them (`HV_USER_IMAGES`: one `NAME<TAB>PATH` line each). A file that
/// is missing, unreadable or empty is an error that names the domain.
pub fn user_images(config_path: &Path, config: &Config, x86: bool) -> Result<String, BuildError> {
    let folder = config_path.parent().unwrap_or(Path::new("."));
    let mut lines = String::new();
    for domain in &config.domains {
        let GuestImage::File { path, initramfs } = &domain.image else {
            continue;
        };
        let image = embed(&mut lines, folder, &domain.name, "image", path)?;
        let initramfs_len = match initramfs {
            Some(file) => embed(&mut lines, folder, &domain.name, "initramfs", file)?.len() as u64,
            None => 0,
        };
        if x86 {
            check_x86_image(
                &image,
                initramfs_len,
                &domain.bootargs,
                domain.memory_mib << 20,
            )
            .map_err(|why| {
                BuildError::Io(
                    folder.join(path),
                    std::io::Error::new(
                        std::io::ErrorKind::InvalidInput,
                        format!("domain '{}': image: {why}", domain.name),
                    ),
                )
            })?;
            continue;
        }
        // What the hypervisor's loader would refuse at boot, refused now.
        let unusable = |e: hv::guest_image::ImageError| {
            BuildError::Io(
                folder.join(path),
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("domain '{}': image: {e}", domain.name),
                ),
            )
        };
        let kind = hv::guest_image::identify(&image).map_err(unusable)?;
        hv::guest_image::layout(
            kind,
            image.len() as u64,
            initramfs_len,
            domain.memory_mib << 20,
        )
        .map_err(unusable)?;
    }
    Ok(lines)
}

/// What the x86 domain builder would refuse at boot, refused at build: a
/// bzImage must parse and fit (with its initramfs and command line) in
/// `memory` bytes by the boot protocol's layout; an ELF file must be a
/// multiboot kernel that fits with its module (the `initramfs`); anything
/// else is loaded as a flat binary of the test guest's ABI, so an ELF file
/// of another kind or an arm64 `Image` (a build of the wrong thing) is
/// refused with what to give.
pub fn check_x86_image(
    image: &[u8],
    initramfs_len: u64,
    bootargs: &str,
    memory: u64,
) -> Result<(), String> {
    use hv::x86::linux_boot::{BzImage, LinuxImageError, layout};
    match BzImage::parse(image) {
        Ok(bz_image) => {
            let initramfs = (initramfs_len > 0).then_some(initramfs_len);
            // The hypervisor appends tsc_early_khz= (up to 30 bytes).
            layout(&bz_image, memory, initramfs, bootargs.len() + 30)
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
        Err(LinuxImageError::NotBzImage) => {
            if hv::x86::multiboot::MultibootImage::looks_like_elf(image) {
                check_multiboot_image(image, initramfs_len, bootargs, memory)
            } else if image.get(0x38..0x3c) == Some(b"ARM\x64") {
                Err("it is an arm64 Image; an x86 domain boots an x86 bzImage".into())
            } else if initramfs_len > 0 {
                Err("it has an initramfs but is not a Linux bzImage".into())
            } else {
                Ok(())
            }
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A multiboot ELF kernel (kvm-unit-tests' x86 images): it must parse, and
/// its segments, the multiboot information, its command line and its module
/// (the config's `initramfs`) must fit in the domain's `memory`.
fn check_multiboot_image(
    image: &[u8],
    module_len: u64,
    bootargs: &str,
    memory: u64,
) -> Result<(), String> {
    use hv::x86::multiboot::{self, MultibootError, MultibootImage};
    let kernel = MultibootImage::parse(image).map_err(|e| match e {
        MultibootError::NotElf32 | MultibootError::NoHeader => format!(
            "it is an ELF file but not a multiboot kernel ({e}): give a Linux bzImage, a \
             multiboot ELF32 kernel or a flat binary (objcopy -O binary)"
        ),
        other => format!("its multiboot kernel cannot boot: {other}"),
    })?;
    multiboot::check_fits(&kernel, bootargs.len(), module_len, memory)
        .map_err(|e| format!("its multiboot kernel cannot be loaded: {e}"))?;
    Ok(())
}

/// Adds `name` (a file of domain `domain`, relative to `folder`) to the
/// `HV_USER_IMAGES` list `lines` unless it is there already (domains that
/// name the same file share one embedded copy), and returns its contents.
fn embed(
    lines: &mut String,
    folder: &Path,
    domain: &str,
    what: &str,
    name: &str,
) -> Result<Vec<u8>, BuildError> {
    let path = folder.join(name);
    let not_usable = |why: String| {
        BuildError::Io(
            path.clone(),
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("domain '{domain}': its {what} {why}"),
            ),
        )
    };
    let bytes = fs::read(&path).map_err(|e| not_usable(e.to_string()))?;
    if bytes.is_empty() {
        return Err(not_usable("is empty".to_string()));
    }
    if lines.lines().any(|l| l.split('\t').next() == Some(name)) {
        return Ok(bytes);
    }
    let absolute = path.canonicalize().map_err(|e| not_usable(e.to_string()))?;
    let absolute = absolute
        .to_str()
        .ok_or_else(|| not_usable("path is not UTF-8".to_string()))?;
    if name.contains(['\t', '\n']) || absolute.contains(['\t', '\n']) {
        return Err(not_usable("path holds a tab or a line break".to_string()));
    }
    lines.push_str(&format!("{name}\t{absolute}\n"));
    Ok(bytes)
}

/// One line per pool and domain, for `config check`.
fn summary(config: &Config) -> String {
    let mut out = String::new();
    for (i, p) in config.pools.iter().enumerate() {
        out.push_str(&format!(
            "pool {i} {:<12} cpus {:<8} {} granularity {} placement {}{}\n",
            p.name,
            hv::config::format_cpu_list(&p.cpus),
            p.scheduler,
            p.granularity,
            p.placement,
            if p.scheduler_params.is_empty() {
                String::new()
            } else {
                format!(" ({})", p.scheduler_params)
            }
        ));
    }
    for d in &config.domains {
        out.push_str(&format!(
            "domain {:<12} pool {:<12} {} vCPU(s) {} MiB{}{}{}{}{}\n",
            d.name,
            d.pool,
            d.vcpus,
            d.memory_mib,
            d.hard_affinity
                .as_ref()
                .map(|h| format!(" pinned to {}", hv::config::format_cpu_list(h)))
                .unwrap_or_default(),
            d.soft_affinity
                .as_ref()
                .map(|s| format!(" prefers {}", hv::config::format_cpu_list(s)))
                .unwrap_or_default(),
            if d.privileged { " privileged" } else { "" },
            if d.test_hooks { " test-hooks" } else { "" },
            if d.fail_stop { " fail-stop" } else { "" }
        ));
    }
    out
}

const CONFIG_USAGE: &str = "usage: cargo xtask config check FILE [--out BLOB]";

/// `cargo xtask config check FILE [--out BLOB]`.
pub fn run(args: &[String]) -> ExitCode {
    let (file, out) = match args {
        [check, file] if check == "check" => (file, None),
        [check, file, flag, out] if check == "check" && flag == "--out" => (file, Some(out)),
        _ => {
            eprintln!("{CONFIG_USAGE}");
            return ExitCode::from(2);
        }
    };
    match load(Path::new(file)) {
        Ok(config) => {
            print!("{}", summary(&config));
            println!(
                "{file}: ok ({} pools, {} domains)",
                config.pools.len(),
                config.domains.len()
            );
            if let Some(out) = out
                && let Err(e) = fs::write(out, encode(&config))
            {
                eprintln!("xtask config: {out}: {e}");
                return ExitCode::FAILURE;
            }
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests;
