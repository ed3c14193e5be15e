//! The UEFI application entry (`efi_pe_entry` in boot.S calls
//! [`platform_efi_main`]): finds the ACPI RSDP in the configuration table,
//! takes the memory map, exits boot services (again with a fresh map when the
//! key went stale) and rejoins the Image entry with the MMU off
//! (`efi_leave_firmware`), which then finds [`handoff`] filled in.
//!
//! Runs on UEFI's stack with UEFI's identity map; until ExitBootServices
//! succeeds it may only talk to the firmware (no console, no heap, no logger:
//! those belong to the hypervisor proper, after `.bss` is cleared).

use core::cell::UnsafeCell;

use aarch64_cpu::registers::CurrentEL;
use tock_registers::interfaces::Readable;
use uefi_raw::table::boot::{BootServices, MemoryDescriptor};
use uefi_raw::table::system::SystemTable;
use uefi_raw::{Guid, Handle, Status, guid};

use crate::uefi::{HANDOFF_MAGIC, MAX_MEMORY_MAP_BYTES, UefiHandoff};

/// `EFI_ACPI_TABLE_GUID` (ACPI 2.0+ RSDP), UEFI spec 2.10 §4.6.1.1.
const ACPI_20_TABLE_GUID: Guid = guid!("8868e871-e4f1-11d3-bc22-0080c73c8881");

/// ExitBootServices attempts: a stale key means the map changed between
/// GetMemoryMap and the call (an event fired); one retry normally suffices.
const EXIT_ATTEMPTS: u32 = 8;

/// The hand-off, in `.data` (not `.bss`: the Image entry clears `.bss`).
struct HandoffCell(UnsafeCell<UefiHandoff>);

// SAFETY: written only by the boot CPU in the UEFI entry, before any other CPU
// runs this image; read-only afterwards.
unsafe impl Sync for HandoffCell {}

#[unsafe(link_section = ".data.uefi_handoff")]
static HANDOFF: HandoffCell = HandoffCell(UnsafeCell::new(UefiHandoff::EMPTY));

unsafe extern "C" {
    fn efi_leave_firmware() -> !;
}

/// What the UEFI entry handed over, if this boot came through it.
pub fn handoff() -> Option<&'static UefiHandoff> {
    // SAFETY: written only before the hypervisor proper runs (see HandoffCell).
    let handoff = unsafe { &*HANDOFF.0.get() };
    handoff.is_complete().then_some(handoff)
}

/// Writes `text` to the firmware console (UTF-16, `\n` as CR LF).
///
/// # Safety
/// `system` is the system table UEFI passed, boot services still running.
unsafe fn print(system: &SystemTable, text: &str) {
    if system.stdout.is_null() {
        return;
    }
    let mut buffer = [0u16; 128];
    let mut used = 0;
    let flush = |buffer: &mut [u16; 128], used: &mut usize| {
        buffer[*used] = 0;
        // SAFETY: the caller's promise: ConOut is the firmware's live protocol,
        // and the string is NUL-terminated.
        let _ = unsafe { ((*system.stdout).output_string)(system.stdout, buffer.as_ptr()) };
        *used = 0;
    };
    for unit in text.encode_utf16() {
        if unit == u16::from(b'\n') {
            buffer[used] = u16::from(b'\r');
            used += 1;
        }
        buffer[used] = unit;
        used += 1;
        if used >= buffer.len() - 2 {
            flush(&mut buffer, &mut used);
        }
    }
    flush(&mut buffer, &mut used);
}

/// The ACPI 2.0 RSDP from the configuration table.
///
/// # Safety
/// As [`print`].
unsafe fn find_rsdp(system: &SystemTable) -> Option<u64> {
    if system.configuration_table.is_null() {
        return None;
    }
    // SAFETY: the caller's promise: the firmware's table of
    // `number_of_configuration_table_entries` entries.
    let tables = unsafe {
        core::slice::from_raw_parts(
            system.configuration_table,
            system.number_of_configuration_table_entries,
        )
    };
    tables
        .iter()
        .find(|t| t.vendor_guid == ACPI_20_TABLE_GUID)
        .map(|t| t.vendor_table as u64)
        .filter(|&address| address != 0)
}

/// Entered from `efi_pe_entry` (boot.S). Returns a status to the firmware only
/// when the hypervisor cannot start here, after saying why on the console.
#[unsafe(no_mangle)]
extern "C" fn platform_efi_main(image: Handle, system: *const SystemTable) -> Status {
    if system.is_null() {
        return Status::INVALID_PARAMETER;
    }
    // SAFETY: UEFI passes its system table, valid while boot services run.
    let system = unsafe { &*system };
    // SAFETY: boot services are running.
    unsafe { print(system, "hv: UEFI application started\n") };
    let el = CurrentEL.read(CurrentEL::EL);
    if el != 2 {
        // SAFETY: as above.
        unsafe {
            print(
                system,
                "hv: UEFI runs this image at EL1, but the hypervisor needs EL2 \
                 (firmware setting, or QEMU -machine virt,virtualization=on); not starting\n",
            )
        };
        return Status::UNSUPPORTED;
    }
    // SAFETY: as above.
    let Some(rsdp) = (unsafe { find_rsdp(system) }) else {
        // SAFETY: as above.
        unsafe {
            print(
                system,
                "hv: UEFI hands over no ACPI 2.0 RSDP (no ACPI table in the configuration \
                 table; is the firmware set to device tree only?); the hypervisor needs ACPI \
                 here; not starting\n",
            )
        };
        return Status::UNSUPPORTED;
    };
    // SAFETY: as above.
    unsafe { print(system, "hv: exiting boot services\n") };
    // SAFETY: the firmware's boot services table, valid until ExitBootServices.
    let boot: &BootServices = unsafe { &*system.boot_services };
    // SAFETY: only this CPU runs (the others are held by the firmware), and
    // nothing else uses the hand-off until `handoff()` sees it complete.
    let handoff = unsafe { &mut *HANDOFF.0.get() };
    handoff.rsdp = rsdp;
    for attempt in 1..=EXIT_ATTEMPTS {
        let mut size = MAX_MEMORY_MAP_BYTES;
        let mut key = 0usize;
        let mut descriptor_size = 0usize;
        let mut version = 0u32;
        // SAFETY: the buffer is the hand-off's, `size` bytes, 8-byte aligned.
        let status = unsafe {
            (boot.get_memory_map)(
                &mut size,
                handoff.map.as_mut_ptr().cast::<MemoryDescriptor>(),
                &mut key,
                &mut descriptor_size,
                &mut version,
            )
        };
        if status != Status::SUCCESS {
            // After a failed ExitBootServices only GetMemoryMap and
            // ExitBootServices may be called: report only on the first round.
            if attempt == 1 {
                // SAFETY: boot services still run (no ExitBootServices call yet).
                unsafe {
                    print(
                        system,
                        "hv: GetMemoryMap failed (a map larger than the 32 KiB reserved?); not starting\n",
                    )
                };
            }
            return status;
        }
        handoff.map_size = size as u64;
        handoff.descriptor_size = descriptor_size as u64;
        handoff.descriptor_version = version;
        handoff.exit_attempts = attempt;
        // SAFETY: `image` is this application's handle, `key` the fresh map's.
        let status = unsafe { (boot.exit_boot_services)(image, key) };
        if status == Status::SUCCESS {
            handoff.magic = HANDOFF_MAGIC;
            // SAFETY: boot services are gone; the hand-off is complete, and the
            // assembly cleans it to memory before the MMU goes off.
            unsafe { efi_leave_firmware() }
        }
        if status != Status::INVALID_PARAMETER {
            return status;
        }
    }
    Status::ABORTED
}
