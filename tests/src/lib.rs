//! QEMU integration harness: boot an image with a timeout, capture its serial
//! console, and check what it printed.
#![forbid(unsafe_code)]
