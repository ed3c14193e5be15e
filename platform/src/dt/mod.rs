//! Device-tree parsing: CPUs and topology (`/cpus`, `cpu-map`), memory, GIC, PSCI, console UART.
