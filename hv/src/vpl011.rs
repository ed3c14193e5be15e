//! The emulated PL011 UART each domain sees, and console input switching.
