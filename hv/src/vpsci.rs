//! PSCI for guests: the per-domain vCPU power state machine.
