//! The binary form of a [`Config`] that xtask embeds in the image.
//!
//! Why a hand-rolled format rather than generated Rust source or `postcard`:
//! the hypervisor must *check* what it boots with (a blob can be stale or
//! hand-made), so it decodes into the same owned [`Config`] the xtask side
//! validated and runs the same [`Config::validate`]; generated `const` source
//! would need a second, `'static` set of types and would skip that check, and
//! `postcard`/`serde` would add a serializer to the no_std image for a few
//! dozen fields. The format is small enough to read in one screen:
//!
//! ```text
//! header:  "HVCF"  version:u16  reserved:u16  body_len:u32  fnv1a32(body):u32
//! body:    pools:u16 { pool }*  domains:u16 { domain }*
//! pool:    name:str cpus:cpuset scheduler:str scheduler_params:str
//!          granularity:str placement:str
//! domain:  name:str image:(u8 0=builtin|1=file, str) vcpus:u32 memory_mib:u64
//!          memory_base:u64 pool:str weight:u16 cap:u16 budget_ns:u64
//!          period_ns:u64 extratime:u8 hard_affinity:(u8 0|1, cpuset)
//!          soft_affinity:(u8 0|1, cpuset)
//!          console:u8 (0=vpl011, 1=none) privileged:u8 test_hooks:u8
//!          fail_stop:u8
//!          bootargs:str
//!          devices:u16 { name:str base:u64 guest_base:u64 size:u64
//!                        interrupts:u16 { intid:u32 }*
//!                        compatible:u16 { str }*
//!                        trigger:u8 (0=from the host, 1=level, 2=edge) }*
//! str:     len:u16 utf-8 bytes        cpuset: ranges:u16 { first:u16 last:u16 }*
//! ```
//! All integers little-endian. Any change to the layout bumps [`FORMAT_VERSION`].

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use sched::{CpuSet, MAX_CPUS, SchedParams};

use super::{Config, Console, DeviceConfig, DomainConfig, GuestImage, PoolConfig, Trigger};

/// The first four bytes of an encoded config.
pub const FORMAT_MAGIC: [u8; 4] = *b"HVCF";
/// The layout version this code reads and writes.
pub const FORMAT_VERSION: u16 = 5;
/// Header bytes before the body.
const HEADER_LEN: usize = 16;

/// Why bytes are not a config.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than the header, or the body is shorter than the header says.
    Truncated {
        /// Byte offset where more data was needed.
        offset: usize,
    },
    /// No `HVCF` magic.
    BadMagic,
    /// Written by another version of xtask.
    UnsupportedVersion(u16),
    /// The body's checksum does not match (corrupted).
    ChecksumMismatch,
    /// A string that is not UTF-8.
    BadUtf8 {
        /// Offset of the string.
        offset: usize,
    },
    /// A tag byte or CPU number out of range.
    BadValue {
        /// Offset of the value.
        offset: usize,
    },
    /// Bytes left after the last domain.
    TrailingBytes {
        /// Offset of the first extra byte.
        offset: usize,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Truncated { offset } => write!(f, "truncated at byte {offset}"),
            Self::BadMagic => write!(f, "not a config (no HVCF magic)"),
            Self::UnsupportedVersion(v) => write!(
                f,
                "format version {v}, this hypervisor reads {FORMAT_VERSION}: rebuild with cargo xtask build"
            ),
            Self::ChecksumMismatch => write!(f, "checksum mismatch (corrupted)"),
            Self::BadUtf8 { offset } => write!(f, "string at byte {offset} is not UTF-8"),
            Self::BadValue { offset } => write!(f, "invalid value at byte {offset}"),
            Self::TrailingBytes { offset } => write!(f, "extra bytes from byte {offset}"),
        }
    }
}

/// FNV-1a, 32 bits: enough to catch a truncated or corrupted blob.
fn fnv1a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5, |hash, &b| {
        (hash ^ u32::from(b)).wrapping_mul(0x0100_0193)
    })
}

struct Writer(Vec<u8>);

impl Writer {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    /// Lengths are capped at `u16::MAX` (names are validated far below that;
    /// a longer boot line is cut rather than corrupting the stream).
    fn count(&mut self, n: usize) -> usize {
        let n = n.min(usize::from(u16::MAX));
        self.u16(n as u16);
        n
    }
    fn str(&mut self, s: &str) {
        let mut n = s.len().min(usize::from(u16::MAX));
        while !s.is_char_boundary(n) {
            n -= 1;
        }
        self.u16(n as u16);
        self.0.extend_from_slice(&s.as_bytes()[..n]);
    }
    fn cpus(&mut self, set: &CpuSet) {
        let mut ranges: Vec<(u16, u16)> = Vec::new();
        for cpu in set.iter() {
            let cpu = cpu as u16; // MAX_CPUS fits in u16
            match ranges.last_mut() {
                Some((_, last)) if *last + 1 == cpu => *last = cpu,
                _ => ranges.push((cpu, cpu)),
            }
        }
        self.u16(ranges.len() as u16);
        for (first, last) in ranges {
            self.u16(first);
            self.u16(last);
        }
    }
}

/// Encodes `config`. Validate it first: encoding does not check the rules.
pub fn encode(config: &Config) -> Vec<u8> {
    let mut body = Writer(Vec::new());
    let pools = body.count(config.pools.len());
    for pool in &config.pools[..pools] {
        body.str(&pool.name);
        body.cpus(&pool.cpus);
        body.str(&pool.scheduler);
        body.str(&pool.scheduler_params);
        body.str(&pool.granularity);
        body.str(&pool.placement);
    }
    let domains = body.count(config.domains.len());
    for d in &config.domains[..domains] {
        body.str(&d.name);
        match &d.image {
            GuestImage::Builtin(name) => {
                body.u8(0);
                body.str(name);
            }
            GuestImage::File {
                path,
                initramfs: None,
            } => {
                body.u8(1);
                body.str(path);
            }
            GuestImage::File {
                path,
                initramfs: Some(initramfs),
            } => {
                body.u8(2);
                body.str(path);
                body.str(initramfs);
            }
        }
        body.u32(d.vcpus);
        body.u64(d.memory_mib);
        body.u64(d.memory_base);
        body.str(&d.pool);
        body.u16(d.params.weight);
        body.u16(d.params.cap_percent);
        body.u64(d.params.budget_ns);
        body.u64(d.params.period_ns);
        body.u8(u8::from(d.params.extratime));
        for affinity in [&d.hard_affinity, &d.soft_affinity] {
            match affinity {
                None => body.u8(0),
                Some(set) => {
                    body.u8(1);
                    body.cpus(set);
                }
            }
        }
        body.u8(match d.console {
            Console::Vpl011 => 0,
            Console::None => 1,
        });
        body.u8(u8::from(d.privileged));
        body.u8(u8::from(d.test_hooks));
        body.u8(u8::from(d.fail_stop));
        body.str(&d.bootargs);
        let devices = body.count(d.devices.len());
        for dev in &d.devices[..devices] {
            body.str(&dev.name);
            body.u64(dev.base);
            body.u64(dev.guest_base);
            body.u64(dev.size);
            let irqs = body.count(dev.interrupts.len());
            for &intid in &dev.interrupts[..irqs] {
                body.u32(intid);
            }
            let strings = body.count(dev.compatible.len());
            for compatible in &dev.compatible[..strings] {
                body.str(compatible);
            }
            body.u8(match dev.trigger {
                None => 0,
                Some(Trigger::Level) => 1,
                Some(Trigger::Edge) => 2,
            });
        }
    }
    let body = body.0;
    let mut out = Writer(Vec::with_capacity(HEADER_LEN + body.len()));
    out.0.extend_from_slice(&FORMAT_MAGIC);
    out.u16(FORMAT_VERSION);
    out.u16(0);
    out.u32(body.len() as u32);
    out.u32(fnv1a(&body));
    out.0.extend_from_slice(&body);
    out.0
}

struct Reader<'a> {
    bytes: &'a [u8],
    offset: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.offset.checked_add(n);
        let slice =
            end.and_then(|end| self.bytes.get(self.offset..end))
                .ok_or(DecodeError::Truncated {
                    offset: self.offset,
                })?;
        self.offset += n;
        Ok(slice)
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, DecodeError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    fn bool(&mut self) -> Result<bool, DecodeError> {
        let offset = self.offset;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(DecodeError::BadValue { offset }),
        }
    }
    fn str(&mut self) -> Result<String, DecodeError> {
        let len = usize::from(self.u16()?);
        let offset = self.offset;
        let bytes = self.take(len)?;
        core::str::from_utf8(bytes)
            .map(String::from)
            .map_err(|_| DecodeError::BadUtf8 { offset })
    }
    fn cpus(&mut self) -> Result<CpuSet, DecodeError> {
        let ranges = self.u16()?;
        let mut set = CpuSet::new();
        for _ in 0..ranges {
            let offset = self.offset;
            let (first, last) = (usize::from(self.u16()?), usize::from(self.u16()?));
            if first > last || last >= MAX_CPUS {
                return Err(DecodeError::BadValue { offset });
            }
            for cpu in first..=last {
                set.insert(cpu);
            }
        }
        Ok(set)
    }
}

/// Decodes what [`encode`] wrote; never panics on any input.
pub fn decode(bytes: &[u8]) -> Result<Config, DecodeError> {
    let mut header = Reader { bytes, offset: 0 };
    if header.take(4)? != FORMAT_MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let version = header.u16()?;
    if version != FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    if header.u16()? != 0 {
        return Err(DecodeError::BadValue { offset: 6 });
    }
    let body_len = header.u32()? as usize;
    let checksum = header.u32()?;
    let body = bytes
        .get(HEADER_LEN..HEADER_LEN.saturating_add(body_len))
        .ok_or(DecodeError::Truncated {
            offset: bytes.len(),
        })?;
    if fnv1a(body) != checksum {
        return Err(DecodeError::ChecksumMismatch);
    }
    if bytes.len() > HEADER_LEN + body_len {
        return Err(DecodeError::TrailingBytes {
            offset: HEADER_LEN + body_len,
        });
    }
    let mut r = Reader {
        bytes,
        offset: HEADER_LEN,
    };
    let mut config = Config::default();
    for _ in 0..r.u16()? {
        config.pools.push(PoolConfig {
            name: r.str()?,
            cpus: r.cpus()?,
            scheduler: r.str()?,
            scheduler_params: r.str()?,
            granularity: r.str()?,
            placement: r.str()?,
        });
    }
    for _ in 0..r.u16()? {
        let name = r.str()?;
        let offset = r.offset;
        let image = match r.u8()? {
            0 => GuestImage::Builtin(r.str()?),
            1 => GuestImage::File {
                path: r.str()?,
                initramfs: None,
            },
            2 => GuestImage::File {
                path: r.str()?,
                initramfs: Some(r.str()?),
            },
            _ => return Err(DecodeError::BadValue { offset }),
        };
        let vcpus = r.u32()?;
        let memory_mib = r.u64()?;
        let memory_base = r.u64()?;
        let pool = r.str()?;
        let params = SchedParams {
            weight: r.u16()?,
            cap_percent: r.u16()?,
            budget_ns: r.u64()?,
            period_ns: r.u64()?,
            extratime: r.bool()?,
        };
        let hard_affinity = if r.bool()? { Some(r.cpus()?) } else { None };
        let soft_affinity = if r.bool()? { Some(r.cpus()?) } else { None };
        let offset = r.offset;
        let console = match r.u8()? {
            0 => Console::Vpl011,
            1 => Console::None,
            _ => return Err(DecodeError::BadValue { offset }),
        };
        let privileged = r.bool()?;
        let test_hooks = r.bool()?;
        let fail_stop = r.bool()?;
        let bootargs = r.str()?;
        let mut devices = Vec::new();
        for _ in 0..r.u16()? {
            let name = r.str()?;
            let base = r.u64()?;
            let guest_base = r.u64()?;
            let size = r.u64()?;
            let mut interrupts = Vec::new();
            for _ in 0..r.u16()? {
                interrupts.push(r.u32()?);
            }
            let mut compatible = Vec::new();
            for _ in 0..r.u16()? {
                compatible.push(r.str()?);
            }
            let offset = r.offset;
            let trigger = match r.u8()? {
                0 => None,
                1 => Some(Trigger::Level),
                2 => Some(Trigger::Edge),
                _ => return Err(DecodeError::BadValue { offset }),
            };
            devices.push(DeviceConfig {
                name,
                base,
                guest_base,
                size,
                interrupts,
                compatible,
                trigger,
            });
        }
        config.domains.push(DomainConfig {
            name,
            image,
            vcpus,
            memory_mib,
            memory_base,
            pool,
            params,
            hard_affinity,
            soft_affinity,
            console,
            privileged,
            test_hooks,
            fail_stop,
            bootargs,
            devices,
        });
    }
    if r.offset != bytes.len() {
        return Err(DecodeError::TrailingBytes { offset: r.offset });
    }
    Ok(config)
}
