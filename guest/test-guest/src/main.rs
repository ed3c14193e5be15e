//! The test guest: a bare-metal ARM64 (later x86-64) program that runs as a
//! domain and reports what it sees. Built by xtask as a flat image.
#![cfg_attr(target_os = "none", no_std, no_main)]

#[cfg(not(target_os = "none"))]
fn main() {
    eprintln!("test-guest is a bare-metal image: xtask builds it for the guest target");
    std::process::exit(2);
}

#[cfg(target_os = "none")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {
        core::hint::spin_loop();
    }
}
