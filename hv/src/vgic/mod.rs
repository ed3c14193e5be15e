//! Virtual GIC: distributor/redistributor emulation and list-register management (GICv2 and GICv3 hosts).
