//! Decoding guest exits (ESR_EL2 syndromes) into what the hypervisor must do.
