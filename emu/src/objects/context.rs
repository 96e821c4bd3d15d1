//! Where the firmware keeps an object's context: a slot of a firmware page the driver gave.

/// Size of one context slot in bytes.
pub(crate) const SLOT_SIZE: u64 = 256;

/// Where an object's context lives: a page and a slot in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Slot {
    pub page: u64,
    pub index: u32,
}

impl Slot {
    pub fn addr(self) -> u64 {
        self.page + u64::from(self.index) * SLOT_SIZE
    }
}
