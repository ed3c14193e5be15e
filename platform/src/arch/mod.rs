//! The one architecture switch of the platform crate.
//!
//! `current` names the module of the architecture being built, so code
//! that is the same on both (the hypervisor's entry, `park`) need not
//! repeat the `cfg`.

#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub mod aarch64;
#[cfg(all(target_arch = "aarch64", target_os = "none"))]
pub use aarch64 as current;

#[cfg(all(target_arch = "x86_64", target_os = "none"))]
pub mod x86_64;
#[cfg(all(target_arch = "x86_64", target_os = "none"))]
pub use x86_64 as current;

// Bare-metal builds exist for these two architectures only; hosted builds
// (tests, tools) get no arch module at all.
#[cfg(all(
    target_os = "none",
    not(any(target_arch = "aarch64", target_arch = "x86_64"))
))]
compile_error!("platform::arch supports bare-metal aarch64 and x86_64 only");
