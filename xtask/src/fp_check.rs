//! `cargo xtask test`'s `fp-free-hypervisor` step: the ARM hypervisor image
//! has no FP/SIMD instruction outside `FpState::save` and `FpState::load`.
//!
//! A guest's FP/SIMD registers stay in the CPU while the hypervisor runs
//! and move only at a vCPU switch (`FpState`). That is sound only while no
//! other hypervisor code reads or writes them: the soft-float target keeps
//! the compiler from using them, and this check keeps hand-written
//! assembly and a target change from doing so unnoticed. It reads the
//! disassembly of the release image (`llvm-objdump` from the toolchain's
//! `llvm-tools`), as one would by hand.

use std::process::Command;

use crate::board;
use crate::image;
use crate::workspace::Workspace;

/// The functions allowed to touch FP/SIMD state (demangled-name parts).
pub const ALLOWED_FUNCTIONS: &[&str] = &["FpState::save", "FpState::load"];

/// The board whose image is checked: every ARM board builds the same code
/// for the same target.
const BOARD: &str = "qemu-virt";

/// One FP/SIMD use found outside the allowed functions.
#[derive(Debug, PartialEq, Eq)]
pub struct FpUse {
    /// The function it is in (as the disassembly names it).
    pub function: String,
    /// The instruction line.
    pub line: String,
}

/// Builds the release image, disassembles it and checks it; `Ok` says how
/// many FP/SIMD instructions the allowed functions hold (none would mean
/// the check looks at the wrong thing: they save and load 32 registers).
pub fn check(workspace: &Workspace) -> Result<usize, String> {
    let board = board::find(BOARD).map_err(|e| e.to_string())?;
    image::build(workspace, board, true).map_err(|e| e.to_string())?;
    let elf = workspace
        .target_dir
        .join(board.target)
        .join("release")
        .join("hv");
    let objdump = image::llvm_tool(workspace, "llvm-objdump").map_err(|e| e.to_string())?;
    println!(
        "    llvm-objdump -d --no-show-raw-insn -C {}",
        elf.display()
    );
    let output = Command::new(&objdump)
        .args(["-d", "--no-show-raw-insn", "-C"])
        .arg(&elf)
        .output()
        .map_err(|e| format!("cannot run {}: {e}", objdump.display()))?;
    if !output.status.success() {
        return Err(format!(
            "llvm-objdump: {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let disassembly = String::from_utf8_lossy(&output.stdout);
    let uses = fp_simd_uses(&disassembly);
    let (allowed, forbidden): (Vec<_>, Vec<_>) = uses
        .into_iter()
        .partition(|u| ALLOWED_FUNCTIONS.iter().any(|f| u.function.contains(f)));
    if !forbidden.is_empty() {
        let shown: Vec<String> = forbidden
            .iter()
            .take(20)
            .map(|u| format!("  {}: {}", u.function, u.line))
            .collect();
        return Err(format!(
            "{} FP/SIMD instruction(s) outside {ALLOWED_FUNCTIONS:?} (a guest's registers \
             would be read or changed by the hypervisor):\n{}",
            forbidden.len(),
            shown.join("\n")
        ));
    }
    if allowed.is_empty() {
        return Err(format!(
            "no FP/SIMD instruction found at all, not even in {ALLOWED_FUNCTIONS:?}: \
             the disassembly is not what this check expects"
        ));
    }
    Ok(allowed.len())
}

/// Every instruction of an `llvm-objdump -d --no-show-raw-insn` listing
/// that names an FP/SIMD register (`b0`-`b31`, `h`, `s`, `d`, `q`, `v`, with
/// or without an arrangement) or FPCR/FPSR, with the function it is in.
pub fn fp_simd_uses(disassembly: &str) -> Vec<FpUse> {
    let mut function = String::new();
    let mut uses = Vec::new();
    for line in disassembly.lines() {
        if let Some(name) = line
            .strip_suffix(">:")
            .and_then(|head| head.split_once(" <"))
            .map(|(_, name)| name)
        {
            function = name.to_string();
            continue;
        }
        // "  addr:  \tmnemonic\toperands  // comment" (a branch's target
        // symbol in <...>).
        let Some((address, instruction)) = line.split_once(':') else {
            continue;
        };
        let address = address.trim();
        if address.is_empty() || !address.chars().all(|c| c.is_ascii_hexdigit()) {
            continue;
        }
        let instruction = instruction.trim();
        let Some((_, operands)) = instruction.split_once('\t') else {
            continue;
        };
        let operands = operands.split("//").next().unwrap_or_default();
        let operands = operands.split('<').next().unwrap_or_default();
        let names_fp = operands
            .split(|c: char| " ,[]{}!\t".contains(c))
            .any(is_fp_operand);
        if names_fp {
            uses.push(FpUse {
                function: function.clone(),
                line: instruction.replace('\t', " "),
            });
        }
    }
    uses
}

/// Whether an operand token is an FP/SIMD register or FPCR/FPSR.
fn is_fp_operand(token: &str) -> bool {
    let token = token.to_ascii_lowercase();
    if token == "fpcr" || token == "fpsr" {
        return true;
    }
    let register = token.split('.').next().unwrap_or_default();
    let mut chars = register.chars();
    let Some(kind) = chars.next() else {
        return false;
    };
    let number = chars.as_str();
    "bhsdqv".contains(kind)
        && !number.is_empty()
        && number.len() <= 2
        && number.parse::<u8>().is_ok_and(|n| n <= 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LISTING: &str = "\
0000000040081000 <platform::arch::aarch64::exceptions::FpState::save::h0123456789abcdef>:
40081000:      \tstp\tq0, q1, [x0]
40081004:      \tmrs\tx1, FPCR
40081008:      \tret

0000000040082000 <hv::aarch64::vcpu::switch_to::h0123456789abcdef>:
40082000:      \tadd\tx0, x1, #16
40082004:      \tmsr\tS3_0_C12_C12_5, x0
40082008:      \tbl\t0x40081000 <platform::arch::aarch64::exceptions::FpState::save::h0>
4008200c:      \tb.ne\t0x40082000 <hv::aarch64::vcpu::switch_to::h0123456789abcdef+0x0>
40082010:      \tldr\tq3, [x2, #32]
40082014:      \tfmov\td0, x1
40082018:      \tmov\tv1.16b, v2.16b
4008201c:      \tmsr\tfpsr, x3
40082020:      \tdc\tcivac, x4
40082024:      \tldr\tx5, [x6]   // =0x1
";

    #[test]
    fn finds_every_fp_simd_instruction_with_its_function() {
        let uses = fp_simd_uses(LISTING);
        let lines: Vec<&str> = uses.iter().map(|u| u.line.as_str()).collect();
        assert_eq!(
            lines,
            [
                "stp q0, q1, [x0]",
                "mrs x1, FPCR",
                "ldr q3, [x2, #32]",
                "fmov d0, x1",
                "mov v1.16b, v2.16b",
                "msr fpsr, x3",
            ]
        );
        assert!(uses[0].function.contains("FpState::save"));
        assert!(uses[2..].iter().all(|u| u.function.contains("switch_to")));
    }

    #[test]
    fn general_registers_system_registers_and_branch_targets_are_not_fp() {
        for token in [
            "x0",
            "w31",
            "sp",
            "s3_0_c12_c12_5",
            "#16",
            "0x40081000",
            "b",
            "d32",
            "civac",
        ] {
            assert!(!is_fp_operand(token), "{token}");
        }
        for token in ["b0", "h7", "s31", "d15", "q30", "v1.16b", "V2.4S", "fpcr"] {
            assert!(is_fp_operand(token), "{token}");
        }
    }
}
