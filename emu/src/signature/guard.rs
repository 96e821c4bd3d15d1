//! The protection a block carries in a domain: T10-DIF's guard (CRC16, seeded or not, or IP
//! checksum), application and reference tags, or a CRC block signature (CRC32, CRC32C), and
//! the two words the PSV and a SIG_ERR CQE carry of it.

use crate::objects::signature::{Domain, Guard};
use cxdirect_hw::sig::{crc16_t10dif, crc16_t10dif_from, crc32c, ip_checksum, DIF_SIZE};

/// The T10-DIF guard of `data` in `dom`'s kind (a CRC16 seeded with all ones when the
/// domain says so).
fn guard_of(dom: &Domain, data: &[u8]) -> u16 {
    match dom.guard {
        Guard::IpChecksum => ip_checksum(data),
        _ if dom.seed_ones => crc16_t10dif_from(0xffff, data),
        _ => crc16_t10dif(data),
    }
}

/// The 32-bit CRC of a CRC signature domain over `data`: the register starts at the seed
/// (all ones or zero) and the result is inverted, as the Ethernet CRC-32 and CRC-32C are.
fn crc32_of(dom: &Domain, data: &[u8]) -> u32 {
    let seed = if dom.seed_ones { 0xffff_ffff } else { 0 };
    match dom.guard {
        // crc32fast takes the previous CRC, the register's complement.
        Guard::Crc32 => {
            let mut h = crc32fast::Hasher::new_with_initial(!seed);
            h.update(data);
            h.finalize()
        }
        _ => crc32c(seed, data),
    }
}

/// The protection field block `i` (data `data`) should carry in domain `dom`, and its
/// transient signature and reference tag (what the PSV and a SIG_ERR CQE carry: a T10-DIF
/// field's two words; a CRC32 in the high word, as libmlx5's `umr_transient_signature_crc`
/// and `mlx5_decode_sigerr` place it). CRC fields are stored big-endian.
pub(super) fn expected(dom: &Domain, i: u64, data: &[u8]) -> ([u8; DIF_SIZE], u32, u32) {
    let mut pi = [0u8; DIF_SIZE];
    match dom.guard {
        Guard::Crc32 | Guard::Crc32c => {
            let crc = crc32_of(dom, data);
            pi[..4].copy_from_slice(&crc.to_be_bytes());
            (pi, crc, 0)
        }
        Guard::Crc | Guard::IpChecksum => {
            let guard = guard_of(dom, data);
            let reference = ref_tag(dom, i);
            pi[0..2].copy_from_slice(&guard.to_be_bytes());
            pi[2..4].copy_from_slice(&dom.app_tag.to_be_bytes());
            pi[4..8].copy_from_slice(&reference.to_be_bytes());
            (
                pi,
                u32::from(guard) << 16 | u32::from(dom.app_tag),
                reference,
            )
        }
    }
}

/// The reference tag domain `dom` gives block `i`.
fn ref_tag(dom: &Domain, i: u64) -> u32 {
    if dom.inc_ref {
        dom.ref_tag.wrapping_add(i as u32)
    } else {
        dom.ref_tag
    }
}

/// The two words of a protection field as the PSV and a SIG_ERR CQE carry them.
pub(super) fn words(pi: &[u8; DIF_SIZE]) -> (u32, u32) {
    (
        u32::from_be_bytes([pi[0], pi[1], pi[2], pi[3]]),
        u32::from_be_bytes([pi[4], pi[5], pi[6], pi[7]]),
    )
}
