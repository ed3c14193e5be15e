//! Hypercall dispatch: guest calls (see the `guest-abi` crate) to hypervisor actions.
