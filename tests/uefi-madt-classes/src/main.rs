//! The UEFI application: finds edk2's MADT through the ACPI 2.0 RSDP, gives
//! its GICC entries two efficiency classes ([`uefi_madt_classes::little_then_big`]),
//! then loads and starts the hypervisor from `\EFI\hv\hv.efi` on its own
//! volume. Built for `aarch64-unknown-uefi` by `cargo xtask test` for the
//! `ampere-uefi-big-little` scenario; a stub on the host.
//!
//! Edits the table where the firmware keeps it (ACPI reclaim memory, mapped
//! and writable while boot services run), which is what the hypervisor then
//! reads: no protocol installs a replacement MADT on QEMU's tables, and
//! edk2's `EFI_ACPI_TABLE_PROTOCOL` can only uninstall a table by the key its
//! installer was given.

#![cfg_attr(target_os = "uefi", no_std, no_main)]

#[cfg(not(target_os = "uefi"))]
fn main() {
    eprintln!("uefi-madt-classes is a UEFI application: cargo xtask test builds it");
    std::process::exit(2);
}

#[cfg(target_os = "uefi")]
mod app {
    extern crate alloc;

    use alloc::format;
    use alloc::string::String;
    use uefi::boot::{self, LoadImageSource};
    use uefi::fs::FileSystem;
    use uefi::prelude::*;
    use uefi::system;
    use uefi::table::cfg::ConfigTableEntry;
    use uefi::{CStr16, println};
    use uefi_madt_classes::{
        HEADER_LEN, MADT_SIGNATURE, little_then_big, set_efficiency_classes, signature,
        table_length, xsdt_address, xsdt_entries,
    };

    /// Where the hypervisor's image lies on the tool's volume.
    const HYPERVISOR: &CStr16 = cstr16!("\\EFI\\hv\\hv.efi");
    /// The RSDP's length in ACPI 2.0+.
    const RSDP_LEN: usize = 36;

    /// `length` bytes of firmware memory at `address`.
    ///
    /// # Safety
    /// `address..address + length` is RAM the firmware maps (UEFI identity
    /// maps all of it while boot services run) and nothing else uses it for
    /// as long as the slice lives.
    unsafe fn firmware_bytes(address: u64, length: usize) -> &'static mut [u8] {
        // SAFETY: the caller's promise.
        unsafe { core::slice::from_raw_parts_mut(address as *mut u8, length) }
    }

    /// A whole ACPI table at `address`: its header first, then its length.
    ///
    /// # Safety
    /// As [`firmware_bytes`], for an address the firmware's RSDP or XSDT
    /// lists.
    unsafe fn firmware_table(address: u64) -> Result<&'static mut [u8], String> {
        // SAFETY: the caller's promise covers the header.
        let header = unsafe { firmware_bytes(address, HEADER_LEN) };
        let length = table_length(header).map_err(|e| format!("table at {address:#x}: {e}"))?;
        // SAFETY: the header just read says the table is this long.
        Ok(unsafe { firmware_bytes(address, length) })
    }

    /// Finds the MADT and gives it two efficiency classes; the line to print.
    fn edit_madt() -> Result<String, String> {
        let rsdp = system::with_config_table(|entries| {
            entries
                .iter()
                .find(|entry| entry.guid == ConfigTableEntry::ACPI2_GUID)
                .map(|entry| entry.address as u64)
        })
        .ok_or("no ACPI 2.0 RSDP in the configuration table")?;
        // SAFETY: the firmware's configuration table points at its RSDP.
        let xsdt = xsdt_address(unsafe { firmware_bytes(rsdp, RSDP_LEN) })
            .map_err(|e| format!("RSDP: {e}"))?;
        // SAFETY: the RSDP points at the XSDT.
        let xsdt = unsafe { firmware_table(xsdt) }?;
        for address in xsdt_entries(xsdt).map_err(|e| format!("XSDT: {e}"))? {
            // SAFETY: the XSDT lists this table; its header is read first.
            let header = unsafe { firmware_bytes(address, HEADER_LEN) };
            if signature(header) == Ok(MADT_SIGNATURE) {
                // SAFETY: as above; the table is edited before anything else
                // reads it (the hypervisor starts afterwards).
                let madt = unsafe { firmware_table(address) }?;
                let giccs = set_efficiency_classes(madt, little_then_big)
                    .map_err(|e| format!("MADT at {address:#x}: {e}"))?;
                let half = giccs / 2;
                return Ok(format!(
                    "uefi-madt-classes: {giccs} GICC entries: class 0 (LITTLE) for the first {half}, class 1 (big) for the other {}",
                    giccs - half
                ));
            }
        }
        Err("the XSDT lists no MADT".into())
    }

    /// Loads and starts the hypervisor; returns only if it returns.
    fn start_hypervisor() -> Result<Status, String> {
        let volume = boot::get_image_file_system(boot::image_handle())
            .map_err(|e| format!("the tool's volume: {e}"))?;
        let image = FileSystem::new(volume)
            .read(HYPERVISOR)
            .map_err(|e| format!("{HYPERVISOR}: {e}"))?;
        let handle = boot::load_image(
            boot::image_handle(),
            LoadImageSource::FromBuffer {
                buffer: &image,
                file_path: None,
            },
        )
        .map_err(|e| format!("LoadImage {HYPERVISOR}: {e}"))?;
        Ok(match boot::start_image(handle) {
            Ok(()) => Status::SUCCESS,
            Err(e) => e.status(),
        })
    }

    #[entry]
    fn main() -> Status {
        let outcome = edit_madt().and_then(|done| {
            println!("{done}");
            start_hypervisor()
        });
        match outcome {
            Ok(status) => status,
            Err(why) => {
                println!("uefi-madt-classes: {why}");
                Status::ABORTED
            }
        }
    }
}
