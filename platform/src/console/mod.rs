//! The hypervisor console: UART drivers and the `log` backend that tags each
//! line with the CPU it came from.

pub mod mini_uart;
pub mod pl011;
