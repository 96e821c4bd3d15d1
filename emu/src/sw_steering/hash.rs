//! The hash-table index of a steering entry, as rdma-core computes it when it places a rule
//! (`dr_ste_calc_hash_index` in dr_ste.c) and as the device must compute it over a packet to
//! find the same slot: the 16 tag bytes with every byte the byte mask leaves out zeroed, a
//! CRC-32 over them (dr_crc32.c `dr_crc32_slice8_calc`), the result modulo the table size.

/// Bytes in a lookup tag and in its bit mask (`DR_STE_SIZE_TAG`, `DR_STE_SIZE_MASK`).
pub(crate) const TAG_SIZE: usize = 16;

/// The reflected CRC-32 polynomial dr_crc32.c uses (`DR_STE_CRC_POLY`).
const POLY: u32 = 0xedb8_8320;

/// The byte-at-a-time table for [`POLY`], built at compile time (`dr_crc32_init_table`'s
/// first slice; the other seven slices only speed the same sum up).
const TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// The 16-bit byte mask of a 16-byte bit mask (`dr_ste_conv_bit_to_byte_mask`): bit 15 - i is
/// set iff byte i is 0xff. Bytes only partly masked do not take part in hashing.
#[cfg(test)]
pub(crate) fn byte_mask(bit_mask: &[u8; TAG_SIZE]) -> u16 {
    bit_mask
        .iter()
        .fold(0u16, |acc, &b| (acc << 1) | u16::from(b == 0xff))
}

/// dr_crc32.c's sum: reflected CRC-32 over [`POLY`] starting from 0 with no final inversion,
/// bytes in order (the slice-by-8 loop reads little-endian words, which is the same order),
/// then the 32-bit result byte-swapped.
pub(crate) fn ste_crc32(data: &[u8]) -> u32 {
    let crc = data.iter().fold(0u32, |crc, &b| {
        (crc >> 8) ^ TABLE[usize::from((crc as u8) ^ b)]
    });
    crc.swap_bytes()
}

/// Index into a table of `entries` slots for `tag` under `byte_mask`: 0 for a table of one
/// slot, an empty byte mask, or (defensively) a table of 0 slots; otherwise the CRC of the tag
/// with every byte the mask leaves out zeroed, modulo `entries`.
pub(crate) fn hash_index(tag: &[u8; TAG_SIZE], byte_mask: u16, entries: u32) -> u32 {
    if entries <= 1 || byte_mask == 0 {
        return 0;
    }
    let mut masked = [0u8; TAG_SIZE];
    for (i, (out, &b)) in masked.iter_mut().zip(tag).enumerate() {
        if byte_mask & (0x8000 >> i) != 0 {
            *out = b;
        }
    }
    ste_crc32(&masked) % entries
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The textbook bit-at-a-time reflected CRC (init 0, no final xor), kept apart from the
    /// table the module builds.
    fn bitwise(data: &[u8]) -> u32 {
        let mut crc = 0u32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                let lsb = crc & 1;
                crc >>= 1;
                if lsb != 0 {
                    crc ^= 0xedb8_8320;
                }
            }
        }
        crc
    }

    #[test]
    fn crc_matches_bitwise_reference_then_swaps() {
        let mut data = [0u8; 64];
        let mut x = 0x1234_5678u32;
        for len in 0..=data.len() {
            for b in data.iter_mut() {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                *b = (x >> 16) as u8;
            }
            assert_eq!(ste_crc32(&data[..len]), bitwise(&data[..len]).swap_bytes());
        }
    }

    #[test]
    fn crc_fixed_vectors() {
        // One byte from a zero register is a bare table entry: 0x01 -> 0x77073096 and
        // 0x80 -> the polynomial itself, each then byte-swapped.
        assert_eq!(ste_crc32(&[0x01]), 0x9630_0777);
        assert_eq!(ste_crc32(&[0x80]), 0x2083_b8ed);
        // Zeros never leave a zero register.
        assert_eq!(ste_crc32(&[0; 16]), 0);
        // Against the standard CRC-32 (init and final xor all ones): the sum is affine, so the
        // zero-init sum of d is std(d) ^ std(zeros of d's length).
        let d = b"123456789";
        assert_eq!(crc32fast::hash(d), 0xcbf4_3926);
        let expect = crc32fast::hash(d) ^ crc32fast::hash(&[0; 9]);
        assert_eq!(ste_crc32(d), expect.swap_bytes());
    }

    #[test]
    fn byte_mask_takes_only_full_bytes() {
        let mut m = [0u8; 16];
        assert_eq!(byte_mask(&m), 0);
        m[0] = 0xff;
        m[15] = 0xff;
        m[7] = 0xfe;
        assert_eq!(byte_mask(&m), 0x8001);
        // An smac rule (ETHL2_SRC_O: smac in bytes 4..=9).
        let mut smac = [0u8; 16];
        smac[4..10].fill(0xff);
        assert_eq!(byte_mask(&smac), 0x0fc0);
    }

    #[test]
    fn index_zeroes_unmasked_bytes() {
        let mut tag = [0u8; 16];
        tag[4..10].copy_from_slice(&[0x02, 0, 0, 0, 0, 0x01]);
        let mut noisy = tag;
        noisy[0] = 0xaa;
        noisy[12] = 0x55;
        let mut masked = [0u8; 16];
        masked[4..10].copy_from_slice(&tag[4..10]);
        let want = bitwise(&masked).swap_bytes() % 64;
        assert_eq!(hash_index(&tag, 0x0fc0, 64), want);
        assert_eq!(hash_index(&noisy, 0x0fc0, 64), want);
        assert_eq!(hash_index(&noisy, 0, 64), 0);
        assert_eq!(hash_index(&noisy, 0x0fc0, 1), 0);
        assert_eq!(hash_index(&noisy, 0x0fc0, 0), 0);
    }
}
