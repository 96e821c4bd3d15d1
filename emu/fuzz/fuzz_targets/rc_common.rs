//! What the RC fuzz targets share: the remote windows a responder offers (one with every
//! remote right, one read-only, one whose key lives in another PD), keys picked among them,
//! and the check that the device wrote host memory only where it may.

use cxdirect_emu::testkit::rc::RemoteRights;
use cxdirect_emu::testkit::{Host, IOVA_BASE};
use libfuzzer_sys::arbitrary::{Result as ArbResult, Unstructured};

/// Three windows of the same length on one host, each with its remote key.
pub struct Windows {
    /// The window with remote read, write and atomics, in the host's PD.
    pub window: u64,
    /// Its key.
    pub rkey: u32,
    /// The window whose key allows remote read only.
    pub read_only: u64,
    /// Its key.
    pub read_key: u32,
    /// The window whose key has every right but lives in another PD.
    pub foreign: u64,
    /// Its key.
    pub foreign_key: u32,
}

impl Windows {
    /// Allocates the three `len`-byte windows on `h` (page aligned, in this order) and their
    /// keys, whose low bytes are `variants` in the same order.
    pub fn new(h: &mut Host, len: u64, variants: [u8; 3]) -> Self {
        let pd = h.pd;
        let all = RemoteRights {
            read: true,
            write: true,
            atomic: true,
        };
        let window = h.alloc(len, 4096);
        let rkey = h.create_remote_mkey(pd, window, len, all, variants[0]);
        let read_only = h.alloc(len, 4096);
        let read_rights = RemoteRights {
            read: true,
            ..RemoteRights::default()
        };
        let read_key = h.create_remote_mkey(pd, read_only, len, read_rights, variants[1]);
        let other_pd = h.alloc_pd();
        let foreign = h.alloc(len, 4096);
        let foreign_key = h.create_remote_mkey(other_pd, foreign, len, all, variants[2]);
        Self {
            window,
            rkey,
            read_only,
            read_key,
            foreign,
            foreign_key,
        }
    }

    /// A remote key: one of the three, the full window's index with another variant, or
    /// anything.
    pub fn pick_key(&self, u: &mut Unstructured) -> ArbResult<u32> {
        Ok(match u.int_in_range(0..=5u8)? {
            0 | 1 => self.rkey,
            2 => self.read_key,
            3 => self.foreign_key,
            // The right index with another variant.
            4 => self.rkey ^ u32::from(u.int_in_range(1..=255u8)?),
            _ => u.arbitrary()?,
        })
    }
}

/// Every byte that differs between `before` and `after` (`side`'s host memory from
/// [`IOVA_BASE`]) lies in one of the `writable` regions (IOVA, length).
pub fn check_unchanged(before: &[u8], after: &[u8], writable: &[(u64, u64)], side: &str) {
    for (page, (x, y)) in before.chunks(4096).zip(after.chunks(4096)).enumerate() {
        if x == y {
            continue;
        }
        for (i, (a, b)) in x.iter().zip(y).enumerate() {
            let iova = IOVA_BASE + (page * 4096 + i) as u64;
            assert!(
                a == b
                    || writable
                        .iter()
                        .any(|&(start, len)| (start..start + len).contains(&iova)),
                "{side}: memory at {iova:#x} changed ({a:#04x} -> {b:#04x}) outside what the \
                 device may write"
            );
        }
    }
}
