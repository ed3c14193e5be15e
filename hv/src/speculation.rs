//! What a CPU needs so that nothing one domain leaves in its branch
//! predictors or buffers reaches the next domain on that CPU (Spectre v2,
//! Spectre-BHB, MDS, L1TF, RSB underflow), decided from what the CPU says of
//! itself, and what the guests are told about it. The arch glue reads the
//! CPU (MIDR, firmware's SMCCC answers; CPUID, ARCH_CAPABILITIES), runs the
//! chosen flushes when a CPU switches to another domain, and logs the
//! report lines at boot. Xen's core scheduling relies on these flushes; the
//! same lists as Linux's (arm64 `proton-pack.c`, x86 `bugs.c`) decide who
//! needs what.

use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

/// Arm: what one CPU needs, and how the hypervisor covers it.
pub mod arm {
    use super::*;

    /// MIDR_EL1 implementer of Arm Ltd.
    const ARM_LTD: u64 = 0x41;
    /// MIDR_EL1 implementer of Ampere.
    const AMPERE: u64 = 0xc0;

    /// A CPU model the lists below name.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Model {
        /// As logs name it.
        pub name: &'static str,
        /// Its branch predictor can be trained across contexts (Spectre v2)
        /// and only firmware's `SMCCC_ARCH_WORKAROUND_1` invalidates it.
        pub spectre_v2: bool,
        /// Branch-history-buffer iterations of the Spectre-BHB loop
        /// mitigation (0: not affected, or no loop mitigates it).
        pub bhb_loop: u8,
    }

    /// Known models by (implementer, part number), from Linux's lists.
    const MODELS: &[(u64, u64, Model)] = {
        const fn m(name: &'static str, spectre_v2: bool, bhb_loop: u8) -> Model {
            Model {
                name,
                spectre_v2,
                bhb_loop,
            }
        }
        &[
            (ARM_LTD, 0xd03, m("Cortex-A53", false, 0)),
            (ARM_LTD, 0xd04, m("Cortex-A35", false, 0)),
            (ARM_LTD, 0xd05, m("Cortex-A55", false, 0)),
            (ARM_LTD, 0xd07, m("Cortex-A57", true, 8)),
            (ARM_LTD, 0xd08, m("Cortex-A72", true, 8)),
            (ARM_LTD, 0xd09, m("Cortex-A73", true, 0)),
            (ARM_LTD, 0xd0a, m("Cortex-A75", true, 0)),
            (ARM_LTD, 0xd0b, m("Cortex-A76", false, 24)),
            (ARM_LTD, 0xd0c, m("Neoverse-N1", false, 24)),
            (ARM_LTD, 0xd0d, m("Cortex-A77", false, 24)),
            (ARM_LTD, 0xd0e, m("Cortex-A76AE", false, 24)),
            (ARM_LTD, 0xd40, m("Neoverse-V1", false, 32)),
            (ARM_LTD, 0xd41, m("Cortex-A78", false, 32)),
            (ARM_LTD, 0xd42, m("Cortex-A78AE", false, 32)),
            (ARM_LTD, 0xd44, m("Cortex-X1", false, 32)),
            (ARM_LTD, 0xd46, m("Cortex-A510", false, 0)),
            (ARM_LTD, 0xd47, m("Cortex-A710", false, 32)),
            (ARM_LTD, 0xd48, m("Cortex-X2", false, 32)),
            (ARM_LTD, 0xd49, m("Neoverse-N2", false, 32)),
            (ARM_LTD, 0xd4b, m("Cortex-A78C", false, 32)),
            (AMPERE, 0xac3, m("AmpereOne", false, 11)),
        ]
    };

    /// The model of a CPU with this MIDR_EL1, if the lists know it.
    pub fn model(midr: u64) -> Option<Model> {
        let implementer = (midr >> 24) & 0xff;
        let part = (midr >> 4) & 0xfff;
        MODELS
            .iter()
            .find(|&&(i, p, _)| i == implementer && p == part)
            .map(|&(_, _, m)| m)
    }

    /// Which SMCCC workarounds the firmware implements (its
    /// `SMCCC_ARCH_FEATURES` answers, SMCCC 1.1 or later).
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Firmware {
        /// `SMCCC_ARCH_WORKAROUND_1`: branch predictor invalidation.
        pub workaround_1: bool,
        /// `SMCCC_ARCH_WORKAROUND_2`: speculative store bypass control.
        pub workaround_2: bool,
        /// `SMCCC_ARCH_WORKAROUND_3`: branch predictor and history clearing.
        pub workaround_3: bool,
    }

    /// What a CPU does when it switches to another domain than the one it
    /// ran last.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct OnDomainSwitch {
        /// Call firmware's `SMCCC_ARCH_WORKAROUND_3` (covers both).
        pub firmware_workaround_3: bool,
        /// Call firmware's `SMCCC_ARCH_WORKAROUND_1`.
        pub firmware_workaround_1: bool,
        /// Run the branch-history loop this many times (0: not).
        pub bhb_loop: u8,
    }

    /// How a class of speculation attack stands on a CPU, as Linux and KVM
    /// put it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum State {
        /// The CPU is not affected.
        Unaffected,
        /// Affected, and the hypervisor mitigates it between domains.
        Mitigated,
        /// Affected, and nothing here mitigates it.
        Vulnerable,
    }

    /// One CPU's plan.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct Plan {
        /// What runs on a switch to another domain.
        pub on_switch: OnDomainSwitch,
        /// Spectre v2 (branch target injection).
        pub spectre_v2: State,
        /// Spectre-BHB.
        pub spectre_bhb: State,
    }

    /// The plan for a CPU of MIDR `midr` on `firmware`. An unknown model
    /// is treated as affected by both and covered by whatever firmware
    /// offers (as Linux does), else vulnerable.
    pub fn plan(midr: u64, firmware: Firmware) -> Plan {
        let (v2, loop_count) = match model(midr) {
            Some(m) => (m.spectre_v2, m.bhb_loop),
            None => (true, 0),
        };
        let bhb_affected = loop_count > 0 || model(midr).is_none();
        let mut on_switch = OnDomainSwitch::default();
        if (v2 || bhb_affected) && firmware.workaround_3 {
            on_switch.firmware_workaround_3 = true;
        } else {
            if v2 && firmware.workaround_1 {
                on_switch.firmware_workaround_1 = true;
            }
            on_switch.bhb_loop = loop_count;
        }
        let spectre_v2 = match (
            v2,
            on_switch.firmware_workaround_3 || on_switch.firmware_workaround_1,
        ) {
            (false, _) => State::Unaffected,
            (true, true) => State::Mitigated,
            (true, false) => State::Vulnerable,
        };
        let spectre_bhb = match (
            bhb_affected,
            on_switch.firmware_workaround_3 || on_switch.bhb_loop > 0,
        ) {
            (false, _) => State::Unaffected,
            (true, true) => State::Mitigated,
            (true, false) => State::Vulnerable,
        };
        Plan {
            on_switch,
            spectre_v2,
            spectre_bhb,
        }
    }

    /// The worst of the CPUs' states (what a guest that may run on any of
    /// them is told).
    pub fn worst(states: impl IntoIterator<Item = State>) -> State {
        states
            .into_iter()
            .fold(State::Unaffected, |worst, s| match (worst, s) {
                (State::Vulnerable, _) | (_, State::Vulnerable) => State::Vulnerable,
                (State::Mitigated, _) | (_, State::Mitigated) => State::Mitigated,
                _ => State::Unaffected,
            })
    }

    /// `SMCCC_ARCH_FEATURES` for `SMCCC_ARCH_WORKAROUND_1` or `_3`, as KVM
    /// answers it: 0 when mitigated (the guest's call then works), 1 when
    /// not needed, NOT_SUPPORTED (-1) when vulnerable.
    pub fn workaround_feature(state: State) -> i64 {
        match state {
            State::Mitigated => 0,
            State::Unaffected => 1,
            State::Vulnerable => -1,
        }
    }

    /// The boot log line for one CPU's plan.
    pub fn describe(cpu: usize, midr: u64, plan: &Plan, firmware: Firmware) -> String {
        let name = model(midr).map_or("an unlisted model", |m| m.name);
        let mut actions: Vec<String> = Vec::new();
        if plan.on_switch.firmware_workaround_3 {
            actions.push(String::from("firmware's SMCCC_ARCH_WORKAROUND_3"));
        }
        if plan.on_switch.firmware_workaround_1 {
            actions.push(String::from("firmware's SMCCC_ARCH_WORKAROUND_1"));
        }
        if plan.on_switch.bhb_loop > 0 {
            actions.push(format!(
                "a branch-history loop of {}",
                plan.on_switch.bhb_loop
            ));
        }
        let on_switch = if actions.is_empty() {
            String::from("nothing")
        } else {
            actions.join(" and ")
        };
        format!(
            "speculation: cpu {cpu} ({name}, MIDR {midr:#x}): Spectre v2 {:?}, Spectre-BHB {:?}; \
             on a switch to another domain: {on_switch} (firmware workarounds 1/2/3: {}/{}/{})",
            plan.spectre_v2,
            plan.spectre_bhb,
            yes_no(firmware.workaround_1),
            yes_no(firmware.workaround_2),
            yes_no(firmware.workaround_3),
        )
    }

    fn yes_no(b: bool) -> &'static str {
        if b { "yes" } else { "no" }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        const A72: u64 = 0x410f_d083;
        const A53: u64 = 0x410f_d034;
        const N1: u64 = 0x413f_d0c1;

        #[test]
        fn known_models_are_found_by_implementer_and_part() {
            assert_eq!(model(A72).map(|m| m.name), Some("Cortex-A72"));
            assert_eq!(model(N1).map(|m| m.bhb_loop), Some(24));
            assert_eq!(
                model(0x510f_8000),
                None,
                "a Qualcomm part is not an Arm one"
            );
        }

        #[test]
        fn an_a72_without_firmware_help_runs_the_loop_and_stays_v2_vulnerable() {
            let p = plan(A72, Firmware::default());
            assert_eq!(p.on_switch.bhb_loop, 8);
            assert!(!p.on_switch.firmware_workaround_1);
            assert_eq!(p.spectre_bhb, State::Mitigated);
            assert_eq!(p.spectre_v2, State::Vulnerable);
        }

        #[test]
        fn firmware_workarounds_are_used_where_they_exist() {
            let w1 = Firmware {
                workaround_1: true,
                ..Firmware::default()
            };
            let p = plan(A72, w1);
            assert!(p.on_switch.firmware_workaround_1);
            assert_eq!(
                (p.spectre_v2, p.spectre_bhb),
                (State::Mitigated, State::Mitigated)
            );
            let w3 = Firmware {
                workaround_3: true,
                ..w1
            };
            let p = plan(A72, w3);
            assert_eq!(
                p.on_switch,
                OnDomainSwitch {
                    firmware_workaround_3: true,
                    ..OnDomainSwitch::default()
                }
            );
        }

        #[test]
        fn unaffected_cores_do_nothing_and_say_so_to_guests() {
            let p = plan(A53, Firmware::default());
            assert_eq!(p.on_switch, OnDomainSwitch::default());
            assert_eq!(workaround_feature(p.spectre_v2), 1);
            assert_eq!(workaround_feature(p.spectre_bhb), 1);
        }

        #[test]
        fn big_little_guests_hear_the_worst_core() {
            let little = plan(A53, Firmware::default());
            let big = plan(A72, Firmware::default());
            assert_eq!(
                worst([little.spectre_bhb, big.spectre_bhb]),
                State::Mitigated
            );
            assert_eq!(
                worst([little.spectre_v2, big.spectre_v2]),
                State::Vulnerable
            );
            assert_eq!(worst([]), State::Unaffected);
        }

        #[test]
        fn the_report_names_model_and_actions() {
            let line = describe(3, A72, &plan(A72, Firmware::default()), Firmware::default());
            assert!(line.contains("cpu 3 (Cortex-A72"), "{line}");
            assert!(line.contains("a branch-history loop of 8"), "{line}");
        }
    }
}

/// x86: what one CPU needs around guest entry, from CPUID and
/// IA32_ARCH_CAPABILITIES.
pub mod x86 {
    use super::*;

    /// What a CPU says of itself.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Features {
        /// AuthenticAMD (not affected by MDS or L1TF).
        pub amd: bool,
        /// IBPB through IA32_PRED_CMD (AMD CPUID 0x80000008 EBX bit 12, Intel
        /// CPUID 7 EDX bit 26).
        pub ibpb: bool,
        /// VERW clears the CPU buffers (CPUID 7 EDX bit 10, MD_CLEAR).
        pub md_clear: bool,
        /// IA32_FLUSH_CMD flushes the L1D (CPUID 7 EDX bit 28).
        pub l1d_flush: bool,
        /// IA32_ARCH_CAPABILITIES (CPUID 7 EDX bit 29), if readable.
        pub arch_capabilities: Option<u64>,
    }

    /// IA32_ARCH_CAPABILITIES: not affected by L1TF (RDCL_NO).
    const RDCL_NO: u64 = 1 << 0;
    /// IA32_ARCH_CAPABILITIES: no L1D flush needed on VM entry.
    const SKIP_L1DFL_VMENTRY: u64 = 1 << 3;
    /// IA32_ARCH_CAPABILITIES: not affected by MDS.
    const MDS_NO: u64 = 1 << 5;

    /// What runs around guest entry.
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Mitigations {
        /// IBPB when a CPU enters another domain than the one it ran last.
        pub ibpb_on_domain_switch: bool,
        /// VERW before every guest entry (MDS).
        pub verw_before_entry: bool,
        /// L1D flush before every guest entry (L1TF).
        pub l1d_flush_before_entry: bool,
        /// The return stack buffer is filled after every exit (32 calls),
        /// so the host never returns through a guest-trained entry.
        pub rsb_fill_after_exit: bool,
    }

    /// The mitigations for a CPU with `f`, and one boot log line for each.
    pub fn choose(f: Features) -> (Mitigations, [String; 4]) {
        let caps = f.arch_capabilities.unwrap_or(0);
        let mds_affected = !f.amd && caps & MDS_NO == 0;
        let l1tf_affected = !f.amd && caps & RDCL_NO == 0 && caps & SKIP_L1DFL_VMENTRY == 0;
        let m = Mitigations {
            ibpb_on_domain_switch: f.ibpb,
            verw_before_entry: mds_affected && f.md_clear,
            l1d_flush_before_entry: l1tf_affected && f.l1d_flush,
            rsb_fill_after_exit: true,
        };
        let ibpb = if m.ibpb_on_domain_switch {
            String::from("speculation: IBPB on a switch to another domain: yes")
        } else {
            String::from(
                "speculation: IBPB on a switch to another domain: NOT AVAILABLE (no IBPB in CPUID): branch predictors are not flushed between domains",
            )
        };
        let verw = if m.verw_before_entry {
            String::from("speculation: VERW before guest entry (MDS): yes")
        } else if f.amd {
            String::from("speculation: VERW before guest entry (MDS): not needed (AMD)")
        } else if !mds_affected {
            String::from("speculation: VERW before guest entry (MDS): not needed (MDS_NO)")
        } else {
            String::from(
                "speculation: VERW before guest entry (MDS): NOT AVAILABLE (no MD_CLEAR): CPU buffers are not cleared",
            )
        };
        let l1d = if m.l1d_flush_before_entry {
            String::from("speculation: L1D flush before guest entry (L1TF): yes")
        } else if f.amd {
            String::from("speculation: L1D flush before guest entry (L1TF): not needed (AMD)")
        } else if !l1tf_affected {
            String::from(
                "speculation: L1D flush before guest entry (L1TF): not needed (RDCL_NO or SKIP_L1DFL_VMENTRY)",
            )
        } else {
            String::from(
                "speculation: L1D flush before guest entry (L1TF): NOT AVAILABLE (no IA32_FLUSH_CMD)",
            )
        };
        let rsb = String::from("speculation: return stack buffer filled after every exit: yes");
        (m, [ibpb, verw, l1d, rsb])
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn amd_needs_ibpb_and_the_rsb_fill_only() {
            let (m, lines) = choose(Features {
                amd: true,
                ibpb: true,
                md_clear: true,
                l1d_flush: true,
                arch_capabilities: None,
            });
            assert_eq!(
                m,
                Mitigations {
                    ibpb_on_domain_switch: true,
                    verw_before_entry: false,
                    l1d_flush_before_entry: false,
                    rsb_fill_after_exit: true,
                }
            );
            assert!(lines[1].ends_with("not needed (AMD)"));
        }

        #[test]
        fn an_old_intel_part_gets_every_flush_it_can() {
            let (m, _) = choose(Features {
                amd: false,
                ibpb: true,
                md_clear: true,
                l1d_flush: true,
                arch_capabilities: None,
            });
            assert!(m.verw_before_entry && m.l1d_flush_before_entry && m.ibpb_on_domain_switch);
        }

        #[test]
        fn arch_capabilities_say_what_a_newer_part_does_not_need() {
            let (m, lines) = choose(Features {
                amd: false,
                ibpb: true,
                md_clear: true,
                l1d_flush: true,
                arch_capabilities: Some(MDS_NO | SKIP_L1DFL_VMENTRY),
            });
            assert!(!m.verw_before_entry && !m.l1d_flush_before_entry);
            assert!(lines[1].ends_with("not needed (MDS_NO)"));
        }

        #[test]
        fn a_missing_mitigation_is_said_loudly() {
            let (m, lines) = choose(Features::default());
            assert!(!m.ibpb_on_domain_switch);
            assert!(lines[0].contains("NOT AVAILABLE"));
            assert!(lines[1].contains("NOT AVAILABLE"));
        }
    }
}
