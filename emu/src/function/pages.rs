//! The firmware pages the driver has lent the device, and the context slots carved from them.
//! MANAGE_PAGES and the context writes that use them are the firmware's (`fw::pages`).

use crate::objects::context::{Slot, SLOT_SIZE};
use std::collections::BTreeMap;

/// Size of a firmware page in bytes.
pub(crate) const FW_PAGE_SIZE: u64 = 4096;
/// Context slots per page: the last slot's space holds the page's tag.
pub(crate) const SLOTS_PER_PAGE: u32 = (FW_PAGE_SIZE / SLOT_SIZE) as u32 - 1;
/// Where in each page the firmware keeps the tag it checks the page by.
pub(crate) const TAG_OFFSET: u64 = FW_PAGE_SIZE - SLOT_SIZE;
/// Every slot of a page in use.
pub(crate) const FULL: u16 = (1 << SLOTS_PER_PAGE) - 1;
/// When fewer free slots remain, the firmware asks for more pages.
pub(crate) const LOW_SLOTS: usize = 32;

#[derive(Debug, Default)]
pub(crate) struct PageUse {
    /// Bitmask of used slots.
    pub(crate) used: u16,
}

/// Pages the driver has given, and the regular page request outstanding.
#[derive(Debug, Default)]
pub(crate) struct Pages {
    pub(crate) given: BTreeMap<u64, PageUse>,
    /// Pages ever given since enable (boot and init demands count against this).
    pub total_given: u64,
    /// Outstanding regular request: positive = pages wanted, negative = pages to return.
    pub regular_request: i32,
    /// Live context slots, with the bytes last written there.
    pub(crate) live: BTreeMap<u64, Vec<u8>>,
}

impl Pages {
    /// Number of pages the device holds now.
    pub fn held(&self) -> usize {
        self.given.len()
    }

    pub(crate) fn free_slots(&self) -> usize {
        self.given
            .values()
            .map(|p| (SLOTS_PER_PAGE - p.used.count_ones()) as usize)
            .sum()
    }

    /// Context slots in use, over every page.
    pub(crate) fn used_slots(&self) -> usize {
        self.given
            .values()
            .map(|p| p.used.count_ones() as usize)
            .sum()
    }

    pub(crate) fn empty_pages(&self) -> usize {
        self.given.values().filter(|p| p.used == 0).count()
    }

    /// Takes a free slot, if any.
    pub fn alloc_slot(&mut self) -> Option<Slot> {
        for (&page, usage) in self.given.iter_mut() {
            if usage.used != FULL {
                let index = (!usage.used).trailing_zeros();
                usage.used |= 1 << index;
                return Some(Slot { page, index });
            }
        }
        None
    }

    /// Gives a slot back.
    pub fn free_slot(&mut self, slot: Slot) {
        if let Some(usage) = self.given.get_mut(&slot.page) {
            usage.used &= !(1 << slot.index);
        }
        self.live.remove(&slot.addr());
    }

    /// Forgets every page (function reset, DISABLE_HCA).
    pub fn clear(&mut self) {
        self.given.clear();
        self.live.clear();
        self.regular_request = 0;
        self.total_given = 0;
    }
}
