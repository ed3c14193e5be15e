//! Test-only fake MMIO: zeroed, 8-byte-aligned memory standing in for a
//! register frame, with accessors by byte offset so tests check register
//! placement against the spec independently of the register structs.

use std::vec::Vec;

/// A block of fake device memory.
pub struct FakeMmio {
    words: Vec<u64>,
}

impl FakeMmio {
    /// `bytes` of zeroed fake registers.
    pub fn new(bytes: usize) -> FakeMmio {
        FakeMmio {
            words: vec![0; bytes.div_ceil(8)],
        }
    }

    /// Address to hand to a driver constructor.
    pub fn base(&self) -> usize {
        self.words.as_ptr() as usize
    }

    fn check(&self, offset: usize, width: usize) {
        assert!(offset.is_multiple_of(width) && offset + width <= self.words.len() * 8);
    }

    /// Reads the 32-bit register at `offset`.
    pub fn read32(&self, offset: usize) -> u32 {
        self.check(offset, 4);
        // SAFETY: in bounds and aligned (checked above); volatile because the
        // driver writes the same memory through its own pointers.
        unsafe { core::ptr::read_volatile((self.base() + offset) as *const u32) }
    }

    /// Writes the 32-bit register at `offset`.
    pub fn write32(&self, offset: usize, value: u32) {
        self.check(offset, 4);
        // SAFETY: as in `read32`.
        unsafe { core::ptr::write_volatile((self.base() + offset) as *mut u32, value) }
    }

    /// Reads the 8-bit register at `offset`.
    pub fn read8(&self, offset: usize) -> u8 {
        self.check(offset, 1);
        // SAFETY: as in `read32`.
        unsafe { core::ptr::read_volatile((self.base() + offset) as *const u8) }
    }

    /// Reads the 64-bit register at `offset`.
    pub fn read64(&self, offset: usize) -> u64 {
        self.check(offset, 8);
        // SAFETY: as in `read32`.
        unsafe { core::ptr::read_volatile((self.base() + offset) as *const u64) }
    }

    /// Writes the 64-bit register at `offset`.
    pub fn write64(&self, offset: usize, value: u64) {
        self.check(offset, 8);
        // SAFETY: as in `read32`.
        unsafe { core::ptr::write_volatile((self.base() + offset) as *mut u64, value) }
    }
}
