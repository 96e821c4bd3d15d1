//! The vendor-specific capability's gateway (VSC): a window in configuration space through which
//! software reaches address spaces inside the device without BAR0, as Linux's mlx5_core does
//! to take the software-reset semaphore on a fatal error (`lock_sem_sw_reset`, health.c) and to
//! read the CR space for a crash dump (`mlx5_crdump_collect`). Registers (dwords after the
//! capability header, lib/pci_vsc.c):
//!
//! | offset | register | what the model does |
//! |---|---|---|
//! | 0x04 | control | bits 15:0 select a space; bits 31:29 read non-zero when it is served, bit 28 when its size is in the address register |
//! | 0x08 | counter | a value no earlier read returned since the last semaphore write: the gateway lock's ticket |
//! | 0x0c | semaphore | the gateway lock: a write of the counter takes it when free, a write of 0 frees it |
//! | 0x10 | address | bits 29:0 an address in the space; writing it with bit 31 (flag) clear reads the dword there into the data register and sets the flag, with it set writes the data register there and clears the flag; after a read bits 29:0 hold the next address; bit 30 (syndrome) set when the space is not served |
//! | 0x14 | data | the dword read or to write |
//!
//! Spaces served: the semaphore domain (0xa), whose dwords are semaphores: a write of a
//! non-zero value takes a free one, a write of 0 frees it, a read returns its holder (0 when
//! free). The CR space (7) is not served (its status reads 0): what a ConnectX keeps there is
//! not public, so Linux's crash dump finds it unsupported, as it allows
//! (`mlx5_crdump_enable` masks that error); Linux 6.12 does not enable crash dumps anyway.

/// Capability ID of a vendor-specific capability.
pub const CAP_ID_VENDOR: u8 = 0x09;
/// Length in bytes of the capability: its header dword and five registers (the length byte
/// of the header; a ConnectX's reads 0x18).
pub const VSC_CAP_LEN: u8 = 0x18;
/// Offset of the control register inside the capability.
pub const VSC_CTRL: u64 = 0x04;
/// Offset of the counter register inside the capability.
pub const VSC_COUNTER: u64 = 0x08;
/// Offset of the semaphore register inside the capability.
pub const VSC_SEMAPHORE: u64 = 0x0c;
/// Offset of the address register inside the capability.
pub const VSC_ADDR: u64 = 0x10;
/// Offset of the data register inside the capability.
pub const VSC_DATA: u64 = 0x14;
/// The semaphore domain space (Linux's `MLX5_SEMAPHORE_SPACE_DOMAIN`).
pub const SPACE_SEMAPHORE_DOMAIN: u16 = 0xa;
/// The CR space scan (Linux's `MLX5_VSC_SPACE_SCAN_CRSPACE`), not served.
pub const SPACE_SCAN_CRSPACE: u16 = 0x7;
/// Address register bit 31: the access's flag.
pub const ADDR_FLAG: u32 = 1 << 31;
/// Address register bit 30: the access failed.
pub const ADDR_SYNDROME: u32 = 1 << 30;
/// Address register bits 29:0.
pub const ADDR_MASK: u32 = (1 << 30) - 1;
/// Semaphores of the semaphore domain: dwords at addresses `0..4 * SEMAPHORES` (Linux takes
/// the software-reset one, `MLX5_SEMAPHORE_SW_RESET` 0x20); an access past them sets the
/// syndrome.
const SEMAPHORES: usize = 64;
/// Control register: the selected space is served (one of bits 31:29).
const CTRL_STATUS_OK: u32 = 1 << 29;

/// The gateway's state: its five registers and the semaphore domain behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VendorGateway {
    space: u16,
    counter: u32,
    lock: u32,
    addr: u32,
    data: u32,
    semaphores: [u32; SEMAPHORES],
}

impl Default for VendorGateway {
    fn default() -> Self {
        Self {
            space: 0,
            counter: 1,
            lock: 0,
            addr: 0,
            data: 0,
            semaphores: [0; SEMAPHORES],
        }
    }
}

impl VendorGateway {
    /// The register at `offset` inside the capability (one of `VSC_CTRL`..=`VSC_DATA`); 0 for
    /// any other offset.
    pub fn read(&self, offset: u64) -> u32 {
        match offset {
            VSC_CTRL => {
                let status = if self.space == SPACE_SEMAPHORE_DOMAIN {
                    CTRL_STATUS_OK
                } else {
                    0
                };
                u32::from(self.space) | status
            }
            VSC_COUNTER => self.counter,
            VSC_SEMAPHORE => self.lock,
            VSC_ADDR => self.addr,
            VSC_DATA => self.data,
            _ => 0,
        }
    }

    /// A write of `value` to the register at `offset` inside the capability; writes to the
    /// counter or elsewhere are dropped.
    pub fn write(&mut self, offset: u64, value: u32) {
        match offset {
            VSC_CTRL => self.space = value as u16,
            VSC_SEMAPHORE => {
                if value == 0 || self.lock == 0 {
                    self.lock = value;
                }
                // The next ticket differs from every one handed out (0 means free).
                self.counter = self.counter.wrapping_add(1).max(1);
            }
            VSC_ADDR => self.access(value),
            VSC_DATA => self.data = value,
            _ => {}
        }
    }

    /// An access through the address register.
    fn access(&mut self, value: u32) {
        let address = value & ADDR_MASK;
        let write = value & ADDR_FLAG != 0;
        let slot = usize::try_from(address / 4)
            .ok()
            .filter(|&i| address % 4 == 0 && i < SEMAPHORES);
        let (Some(i), SPACE_SEMAPHORE_DOMAIN) = (slot, self.space) else {
            // Not served: done at once, with the syndrome, the flag where software waits for it.
            self.addr = address | ADDR_SYNDROME | if write { 0 } else { ADDR_FLAG };
            return;
        };
        if write {
            let held = &mut self.semaphores[i];
            if self.data == 0 || *held == 0 {
                *held = self.data;
            }
            self.addr = address;
        } else {
            self.data = self.semaphores[i];
            self.addr = (address.wrapping_add(4) & ADDR_MASK) | ADDR_FLAG;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Linux's `mlx5_vsc_gw_lock`: read the counter, write it to the semaphore, read it back.
    fn lock(g: &mut VendorGateway) -> bool {
        let ticket = g.read(VSC_COUNTER);
        if g.read(VSC_SEMAPHORE) != 0 {
            return false;
        }
        g.write(VSC_SEMAPHORE, ticket);
        g.read(VSC_SEMAPHORE) == ticket
    }

    #[test]
    fn the_gateway_lock_is_taken_once_and_freed_by_zero() {
        let mut g = VendorGateway::default();
        assert!(lock(&mut g));
        let held = g.read(VSC_SEMAPHORE);
        assert_ne!(held, 0);
        assert!(!lock(&mut g), "held");
        g.write(VSC_SEMAPHORE, held.wrapping_add(7));
        assert_eq!(
            g.read(VSC_SEMAPHORE),
            held,
            "another ticket does not take it"
        );
        g.write(VSC_SEMAPHORE, 0);
        assert!(lock(&mut g));
        assert_ne!(g.read(VSC_SEMAPHORE), held, "a new ticket");
    }

    #[test]
    fn the_semaphore_domain_serves_linux_sw_reset_semaphore() {
        let mut g = VendorGateway::default();
        g.write(VSC_CTRL, u32::from(SPACE_SEMAPHORE_DOMAIN));
        assert_ne!(g.read(VSC_CTRL) >> 29, 0, "served");
        // mlx5_vsc_sem_set_space(SW_RESET, LOCK): write the ticket, read it back.
        let id = g.read(VSC_COUNTER);
        g.write(VSC_DATA, id);
        g.write(VSC_ADDR, 0x20 | ADDR_FLAG);
        assert_eq!(g.read(VSC_ADDR) & ADDR_FLAG, 0, "write done");
        g.write(VSC_ADDR, 0x20);
        assert_ne!(g.read(VSC_ADDR) & ADDR_FLAG, 0, "read done");
        assert_eq!(g.read(VSC_ADDR) & ADDR_MASK, 0x24, "the next address");
        assert_eq!(g.read(VSC_DATA), id);
        // Another holder's ticket does not take it; 0 frees it.
        g.write(VSC_DATA, id + 1);
        g.write(VSC_ADDR, 0x20 | ADDR_FLAG);
        g.write(VSC_ADDR, 0x20);
        assert_eq!(g.read(VSC_DATA), id);
        g.write(VSC_DATA, 0);
        g.write(VSC_ADDR, 0x20 | ADDR_FLAG);
        g.write(VSC_ADDR, 0x20);
        assert_eq!(g.read(VSC_DATA), 0);
    }

    #[test]
    fn the_cr_space_and_far_addresses_are_refused_with_the_syndrome() {
        let mut g = VendorGateway::default();
        g.write(VSC_CTRL, u32::from(SPACE_SCAN_CRSPACE));
        assert_eq!(g.read(VSC_CTRL) >> 28, 0, "not served, no size");
        g.write(VSC_ADDR, 0);
        let a = g.read(VSC_ADDR);
        assert!(a & ADDR_SYNDROME != 0 && a & ADDR_FLAG != 0);
        g.write(VSC_CTRL, u32::from(SPACE_SEMAPHORE_DOMAIN));
        g.write(VSC_ADDR, 0x1000 | ADDR_FLAG);
        let a = g.read(VSC_ADDR);
        assert!(a & ADDR_SYNDROME != 0 && a & ADDR_FLAG == 0);
    }
}
