//! The fields of each predefined definer format that the model does not project: a definer
//! whose mask selects one is refused at CREATE rather than matched wrongly.
//!
//! An IPv6 packet projects zero IPv4 addresses and an IPv4 packet zero IPv6 ones (inference:
//! rdma-core fills each for its own IP version only); a packet without a tunnel the model
//! parses projects zero inner fields. Fields the model does not project are refused in a
//! definer's mask at CREATE: format 22's bits at 0x60..0x63 (reserved, `sx_sniffer`,
//! `functional_loopback`) and 0x64..0x6a (`qp_type`, `encapsulation_type`, `port`), format
//! 24's and 28's `functional_lb` bits (0xef, 0xff), format 25's port numbers and reserved
//! words (0xa0..0xc2, 0xc8..0xca, 0xe0..0x100), format 28's GTP-U TEID
//! (0x20..0x40, a flex parser's), the `l2_ok` bit of format 26 (0xab: rdma-core fills no
//! definer's); format 0's sniffer, loopback, QP type, encapsulation type, port and
//! force-loopback bits; format 2's Ethernet packet length and IP payload length (0xa0..0xc0:
//! what the device counts in them is not public); format 16's tunnel header words, random
//! number, loopback bits, source GVMI, requester bit and SQ number; format 33's sniffer,
//! loopback, QP type, encapsulation type and port bits. The checksum and `*_ok` bits of
//! formats 0, 2, 6, 26 and 33 are projected (`integrity_bits`).

use super::formats::DefinerTag;
use crate::sw_steering::lookup::put;
use cxdirect_hw::definer::{format, DEFINER_TAG_BYTES};

/// Format 22's bits the model does not project: bits 0x60..=0x62 and 0x64..=0x69.
fn def22_unprojected() -> DefinerTag {
    let mut t = [0u8; DEFINER_TAG_BYTES];
    put(&mut t, 0x60, 3, 0b111);
    put(&mut t, 0x64, 6, 0b11_1111);
    t
}

/// Format 24's bits the model does not project: `functional_lb` and its duplicate.
fn def24_unprojected() -> DefinerTag {
    let mut t = [0u8; DEFINER_TAG_BYTES];
    put(&mut t, 0xef, 1, 1);
    put(&mut t, 0xff, 1, 1);
    t
}

/// Format 25's bits the model does not project: the reserved words and the port numbers.
fn def25_unprojected() -> DefinerTag {
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[20..24].fill(0xff);
    put(&mut t, 0xc0, 2, 0b11);
    put(&mut t, 0xc8, 2, 0b11);
    t[28..32].fill(0xff);
    t
}

/// Format 28's bits the model does not project: the GTP-U TEID and `functional_lb`.
fn def28_unprojected() -> DefinerTag {
    def24_unprojected()
}

/// Format 0's bits the model does not project.
fn def0_unprojected() -> DefinerTag {
    let mut t = [0u8; DEFINER_TAG_BYTES];
    put(&mut t, 0x80, 3, 0b111);
    put(&mut t, 0x84, 6, 0b11_1111);
    put(&mut t, 0xa0, 14, 0x3fff);
    t
}

/// Format 2's bits the model does not project.
fn def2_unprojected() -> DefinerTag {
    let mut t = [0u8; DEFINER_TAG_BYTES];
    t[20..24].fill(0xff);
    put(&mut t, 0xe4, 2, 0b11);
    put(&mut t, 0xf1, 7, 0x7f);
    t
}

/// Format 16's bits the model does not project: all but `metadata_reg_a`, the types and the
/// fragment bit.
fn def16_unprojected() -> DefinerTag {
    let mut t = [0xffu8; DEFINER_TAG_BYTES];
    t[20..24].fill(0);
    put(&mut t, 0xc8, 6, 0);
    put(&mut t, 0xe1, 1, 0);
    t
}

/// Format 33's bits the model does not project.
fn def33_unprojected() -> DefinerTag {
    let mut t = def22_unprojected();
    t[16..28].fill(0xff);
    t
}

/// Format 26's bit the model does not project: `l2_ok`.
fn def26_unprojected() -> DefinerTag {
    let mut t = [0u8; DEFINER_TAG_BYTES];
    put(&mut t, 0xab, 1, 1);
    t
}

/// The bits of `format`'s tag the model does not project, and what to say of a mask that
/// selects one; `None` for a format the model does not project at all.
pub(super) fn unprojected(format: u16) -> Option<(DefinerTag, &'static str)> {
    Some(match format {
        format::DEF22 => (
            def22_unprojected(),
            "a definer of format 22 masks sx_sniffer, functional_loopback, qp_type, \
             encapsulation_type, port or a reserved bit, which the model does not match",
        ),
        format::DEF24 => (
            def24_unprojected(),
            "a definer of format 24 masks functional_lb, which the model does not match",
        ),
        format::DEF0 | format::DEF2 | format::DEF16 | format::DEF33 => (
            match format {
                format::DEF0 => def0_unprojected(),
                format::DEF2 => def2_unprojected(),
                format::DEF16 => def16_unprojected(),
                _ => def33_unprojected(),
            },
            "the definer masks a field the model does not match (sniffer, loopback, QP type, \
             encapsulation type, port, packet or payload lengths, tunnel header words, random \
             number, source GVMI or SQ number)",
        ),
        format::DEF25 => (
            def25_unprojected(),
            "a definer of format 25 masks port numbers or reserved bits, which the model does \
             not match",
        ),
        format::DEF28 => (
            def28_unprojected(),
            "a definer of format 28 masks functional_lb, which the model does not match",
        ),
        format::DEF26 => (
            def26_unprojected(),
            "a definer of format 26 masks l2_ok, which the model does not match",
        ),
        format::DEF6 => ([0u8; DEFINER_TAG_BYTES], ""),
        _ => return None,
    })
}
