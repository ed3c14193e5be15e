//! The one architecture switch of the platform crate.

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub mod aarch64;

#[cfg(all(target_arch = "x86_64", target_os = "none"))]
pub mod x86_64;
