//! The translation table of a KSM memory key, kept sparsely: only the blocks whose entry names
//! a key other than the null key are stored.
//!
//! Linux's mlx5_ib sizes an implicit ODP key by the process address space in 1 GiB blocks
//! (`mlx5_imr_ksm_entries` in odp.c: 2^17 entries under 4-level paging, 2^26 under 5-level),
//! loads every entry with the null key (`mlx5r_umr_update_xlt` with `MLX5_IB_UPD_XLT_ZAP`,
//! `mlx5_odp_populate_xlt`) and later points single blocks at child keys
//! (`pagefault_implicit_mr`). A dense table of 2^26 16-byte entries would be a gigabyte for a
//! key that maps nothing, so the model stores the non-null entries only and bounds their count.

use std::collections::BTreeMap;

/// The null memory key the model reports in QUERY_SPECIAL_CONTEXTS (`null_mkey`, with the
/// general `null_mkey` capability): an indirect key's entry naming it maps nothing, and an
/// access there is a page not present (`translate::KeyFault::NotPresent`). mlx5_ib reads it
/// with `mlx5r_cmd_query_special_mkeys` (cmd.c) and points every block of an implicit ODP key
/// not yet backed by a child key at it (`populate_klm` in odp.c). Memory key index 3 is never
/// handed out. A KSM table stores no entry naming it: writing one removes the block's entry.
pub const NULL_MKEY: u32 = 0x300;

/// Bytes of one KSM entry (`struct mlx5_ksm`: a reserved word, the key, the address; all
/// big-endian).
pub(crate) const KSM_ENTRY_BYTES: usize = 16;

/// A KSM key's entries: block index to (key, address) for every block whose entry names a key
/// other than [`NULL_MKEY`]. A block without an entry (never loaded, or loaded with the null
/// key) maps nothing.
#[derive(Debug, Clone)]
pub(crate) struct KsmTable {
    entries: BTreeMap<u64, (u32, u64)>,
    /// Non-null entries the table holds at most.
    limit: usize,
}

/// A write that would leave the table holding more non-null entries than its limit; the table
/// is left as it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooManyEntries;

impl KsmTable {
    /// An empty table (every block mapping nothing) holding at most `limit` non-null entries.
    pub fn new(limit: usize) -> Self {
        Self {
            entries: BTreeMap::new(),
            limit,
        }
    }

    /// Block `block`'s entry (key, address), or `None` where it maps nothing.
    pub fn get(&self, block: u64) -> Option<(u32, u64)> {
        self.entries.get(&block).copied()
    }

    /// Non-null entries stored.
    #[cfg(test)]
    pub fn stored(&self) -> usize {
        self.entries.len()
    }

    /// Writes `list`, entries (key, address) for blocks `first` onward, replacing what those
    /// blocks held; an entry naming [`NULL_MKEY`] removes the block's. The caller checked the
    /// blocks against the key's capacity. Refused, with nothing changed, when the table would
    /// then hold more than its limit.
    pub fn write<I>(&mut self, first: u64, list: I) -> Result<(), TooManyEntries>
    where
        I: Iterator<Item = (u32, u64)> + Clone,
    {
        let (mut count, mut added) = (0u64, 0usize);
        for (key, _) in list.clone() {
            count += 1;
            added += usize::from(key != NULL_MKEY);
        }
        let end = first.saturating_add(count);
        let replaced: Vec<u64> = self.entries.range(first..end).map(|(&b, _)| b).collect();
        if self.entries.len() - replaced.len() + added > self.limit {
            return Err(TooManyEntries);
        }
        for block in replaced {
            self.entries.remove(&block);
        }
        for (block, (key, address)) in (first..).zip(list) {
            if key != NULL_MKEY {
                self.entries.insert(block, (key, address));
            }
        }
        Ok(())
    }

    /// [`write`](Self::write) of a list of 16-byte KSM entries as a UMR carries them, read in
    /// place (a whole implicit key's zap never becomes a list of entries); a trailing partial
    /// entry is ignored.
    pub fn write_bytes(&mut self, first: u64, list: &[u8]) -> Result<(), TooManyEntries> {
        self.write(first, list.chunks_exact(KSM_ENTRY_BYTES).map(decode))
    }
}

/// One `struct mlx5_ksm`: its key (bytes 4..8) and address (bytes 8..16).
fn decode(entry: &[u8]) -> (u32, u64) {
    let key = u32::from_be_bytes([entry[4], entry[5], entry[6], entry[7]]);
    let mut address = [0u8; 8];
    address.copy_from_slice(&entry[8..16]);
    (key, u64::from_be_bytes(address))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: u32, address: u64) -> [u8; 16] {
        let mut e = [0u8; 16];
        e[4..8].copy_from_slice(&key.to_be_bytes());
        e[8..].copy_from_slice(&address.to_be_bytes());
        e
    }

    #[test]
    fn a_zap_stores_nothing_and_a_null_entry_removes_a_block() {
        let mut t = KsmTable::new(4);
        let zap: Vec<u8> = (0..1000).flat_map(|_| entry(NULL_MKEY, 0)).collect();
        t.write_bytes(1 << 25, &zap).expect("zap");
        assert_eq!(t.stored(), 0);
        t.write_bytes(7, &entry(0x1234, 0x4000_0000))
            .expect("one block");
        assert_eq!(
            (t.stored(), t.get(7), t.get(6)),
            (1, Some((0x1234, 0x4000_0000)), None)
        );
        t.write_bytes(4, &zap[..64]).expect("zap four blocks");
        assert_eq!((t.stored(), t.get(7)), (0, None));
    }

    #[test]
    fn a_write_past_the_limit_is_refused_and_changes_nothing() {
        let mut t = KsmTable::new(2);
        let two: Vec<u8> = [entry(0x500, 1), entry(0x600, 2)].concat();
        t.write_bytes(0, &two).expect("two");
        // Overwriting both with two others stays within the limit.
        t.write_bytes(0, &[entry(0x700, 3), entry(0x800, 4)].concat())
            .expect("replaced");
        let three: Vec<u8> = [entry(0x900, 5), entry(NULL_MKEY, 0), entry(0xa00, 6)].concat();
        assert_eq!(t.write_bytes(1, &three), Err(TooManyEntries));
        assert_eq!(
            (t.get(0), t.get(1), t.get(3)),
            (Some((0x700, 3)), Some((0x800, 4)), None)
        );
        // Block 1 nulled by the same write makes room.
        t.write_bytes(1, &three[16..]).expect("null then one");
        assert_eq!(
            (t.stored(), t.get(1), t.get(2)),
            (2, None, Some((0xa00, 6)))
        );
    }
}
