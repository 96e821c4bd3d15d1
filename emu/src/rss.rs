//! Receive-side scaling as the NIC computes it for a TIR whose `rx_hash_fn` is Toeplitz: which
//! header fields go into the hash (`rx_hash_field_selector`), the Toeplitz hash of those bytes
//! under the TIR's 40-byte key, and the pick of an RQ table entry.
//!
//! The hash input is the selected fields in the order source address, destination address,
//! source port, destination port, each in wire byte order — the order of the published Microsoft
//! RSS verification vectors, which the tests check.

use core::ops::{BitOr, BitOrAssign};

use cxdirect_hw::tir::{
    self, RxHashFieldSelect, HASH_FIELD_SEL_DST_IP, HASH_FIELD_SEL_L4_DPORT,
    HASH_FIELD_SEL_L4_SPORT, HASH_FIELD_SEL_SRC_IP, RX_HASH_TOEPLITZ_KEY_LEN,
};

use crate::packet::{L3Kind, L4Kind, Parsed};

/// The TIR's L3 selector (`rx_hash_field_select.l3_prot_type`): IPv4 = 0, IPv6 = 1.
pub type L3Proto = tir::L3ProtType;

/// The TIR's L4 selector (`rx_hash_field_select.l4_prot_type`): TCP = 0, UDP = 1.
pub type L4Proto = tir::L4ProtType;

/// Longest hash input the NIC builds: two IPv6 addresses and two ports.
pub const MAX_HASH_INPUT_LEN: usize = 16 + 16 + 2 + 2;

/// The Toeplitz hash of `input` under `key`: for every set bit of `input` (most significant bit
/// of byte 0 first) at bit position `i`, XOR in the 32 key bits starting at key bit `i`.
///
/// Key bits past the 320 of the key read as zero, so input bytes past byte 36 only contribute
/// through the key's tail; the NIC never hashes more than [`MAX_HASH_INPUT_LEN`] bytes.
pub fn toeplitz(key: &[u8; RX_HASH_TOEPLITZ_KEY_LEN], input: &[u8]) -> u32 {
    let key_byte = |i: usize| u64::from(key.get(i).copied().unwrap_or(0));
    // `window` holds key bits [8*i, 8*i + 64) for input byte i, so the 32-bit subkey for each
    // bit of the byte is a shifted view of it, and one key byte slides in per input byte.
    let mut window = (0..8).fold(0u64, |w, i| (w << 8) | key_byte(i));
    let mut hash = 0u32;
    for (i, &byte) in input.iter().enumerate() {
        for bit in 0..8 {
            if byte & (0x80 >> bit) != 0 {
                // Keeping the top 32 bits of the shifted window is the intended truncation.
                hash ^= ((window << bit) >> 32) as u32;
            }
        }
        window = (window << 8) | key_byte(i + 8);
    }
    hash
}

/// Input bytes a Toeplitz key reaches: past them every key bit reads as zero.
const KEYED_INPUT_LEN: usize = RX_HASH_TOEPLITZ_KEY_LEN;

/// A TIR's Toeplitz key with its hash precomputed per input nibble (5 KiB), made once when the
/// TIR is created or its hash changed, so a frame's hash is two table reads and two XORs per
/// input byte instead of eight shifted key windows (646 of the model's 4,393 instructions per
/// packet under 4-queue RSS went to the bitwise hash). Equal to [`toeplitz`] for every input.
#[derive(Clone)]
pub struct ToeplitzKey {
    /// `nibbles[n][v]`: the XOR of the 32-bit subkeys of the set bits of `v` placed as input
    /// nibble `n` (the high nibble of byte `n / 2` when `n` is even).
    nibbles: Box<[[u32; 16]; 2 * KEYED_INPUT_LEN]>,
}

impl ToeplitzKey {
    /// The table of `key`.
    pub fn new(key: &[u8; RX_HASH_TOEPLITZ_KEY_LEN]) -> Self {
        let key_byte = |i: usize| u64::from(key.get(i).copied().unwrap_or(0));
        let mut nibbles = Box::new([[0u32; 16]; 2 * KEYED_INPUT_LEN]);
        // As in `toeplitz`: key bits [8*i, 8*i + 64) for input byte i.
        let mut window = (0..8).fold(0u64, |w, i| (w << 8) | key_byte(i));
        for i in 0..KEYED_INPUT_LEN {
            for half in 0..2 {
                let table = &mut nibbles[2 * i + half];
                for (value, entry) in table.iter_mut().enumerate() {
                    *entry = (0..4)
                        .filter(|bit| value & (0x8 >> bit) != 0)
                        // The top 32 bits of the shifted window: the intended truncation.
                        .fold(0, |h, bit| h ^ ((window << (4 * half + bit)) >> 32) as u32);
                }
            }
            window = (window << 8) | key_byte(i + 8);
        }
        Self { nibbles }
    }

    /// The Toeplitz hash of `input` under this key.
    pub fn hash(&self, input: &[u8]) -> u32 {
        // Bytes past the key's reach add nothing.
        input
            .iter()
            .zip(self.nibbles.chunks_exact(2))
            .fold(0, |h, (&byte, pair)| {
                h ^ pair[0][usize::from(byte >> 4)] ^ pair[1][usize::from(byte & 0xf)]
            })
    }
}

impl std::fmt::Debug for ToeplitzKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToeplitzKey").finish_non_exhaustive()
    }
}

/// Header fields a TIR hashes (`rx_hash_field_select.selected_fields`): an OR of the constants
/// below, whose bits are the device's `HASH_FIELD_SEL_*` bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct HashFields(u32);

impl HashFields {
    /// Source IP address (4 or 16 bytes of input).
    pub const SRC_IP: Self = Self(HASH_FIELD_SEL_SRC_IP);
    /// Destination IP address (4 or 16 bytes of input).
    pub const DST_IP: Self = Self(HASH_FIELD_SEL_DST_IP);
    /// TCP/UDP source port (2 bytes of input).
    pub const L4_SPORT: Self = Self(HASH_FIELD_SEL_L4_SPORT);
    /// TCP/UDP destination port (2 bytes of input).
    pub const L4_DPORT: Self = Self(HASH_FIELD_SEL_L4_DPORT);
    /// Both IP addresses.
    pub const IP: Self = Self(HASH_FIELD_SEL_SRC_IP | HASH_FIELD_SEL_DST_IP);
    /// Both ports.
    pub const L4_PORTS: Self = Self(HASH_FIELD_SEL_L4_SPORT | HASH_FIELD_SEL_L4_DPORT);
    /// Addresses and ports (the usual 4-tuple).
    pub const IP_AND_PORTS: Self = Self(Self::IP.0 | Self::L4_PORTS.0);

    /// No fields.
    pub const fn empty() -> Self {
        Self(0)
    }

    /// The raw `selected_fields` bits.
    pub const fn bits(self) -> u32 {
        self.0
    }

    /// Takes a raw `selected_fields` value, keeping only the four bits this model hashes (the
    /// IPsec SPI bit and reserved bits are dropped).
    pub const fn from_bits_truncate(bits: u32) -> Self {
        Self(bits & Self::IP_AND_PORTS.0)
    }

    /// All of `other`'s fields are selected in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Any of `other`'s fields is selected in `self`.
    pub const fn intersects(self, other: Self) -> bool {
        self.0 & other.0 != 0
    }

    /// No field is selected.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl BitOr for HashFields {
    type Output = Self;

    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl BitOrAssign for HashFields {
    fn bitor_assign(&mut self, rhs: Self) {
        self.0 |= rhs.0;
    }
}

/// A TIR's `rx_hash_field_selector`: the L3 protocol a packet must have, the L4 protocol it must
/// have when ports are selected, and the fields hashed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct HashSelector {
    /// Packets must be of this IP version to be hashed.
    pub l3: L3Proto,
    /// When [`HashSelector::fields`] selects a port, packets must be of this L4 protocol.
    pub l4: L4Proto,
    /// Fields hashed.
    pub fields: HashFields,
}

impl HashSelector {
    /// A selector from the raw context fields; `None` when `l3_prot_type` or `l4_prot_type` is
    /// not a known value (each field is one bit wide: 0 or 1).
    pub fn from_raw(l3_prot_type: u8, l4_prot_type: u8, selected_fields: u32) -> Option<Self> {
        Some(Self {
            l3: L3Proto::try_from(l3_prot_type).ok()?,
            l4: L4Proto::try_from(l4_prot_type).ok()?,
            fields: HashFields::from_bits_truncate(selected_fields),
        })
    }

    /// A selector from a TIR context's `rx_hash_field_select` layout.
    pub fn from_layout<T: AsRef<[u8]>>(select: &RxHashFieldSelect<T>) -> Option<Self> {
        Self::from_raw(
            select.l3_prot_type(),
            select.l4_prot_type(),
            select.selected_fields(),
        )
    }
}

/// The RSS hash the NIC computes for the frame `frame` (parsed into `parsed` by
/// [`crate::packet::parse`]) under a TIR's `key` and `selector`.
///
/// `None` — the NIC hashes nothing, and the CQE reports hash 0 with no RSS type — when no field
/// is selected, when the packet's IP version differs from `selector.l3`, or when a port is
/// selected and the packet is not a `selector.l4` segment (IP fragments after the first have no
/// ports). When only addresses are selected the packet's L4 does not matter. `None` too when
/// `parsed` does not describe `frame`.
pub fn rss_hash(
    key: &[u8; RX_HASH_TOEPLITZ_KEY_LEN],
    selector: HashSelector,
    frame: &[u8],
    parsed: &Parsed,
) -> Option<u32> {
    let (input, len) = hash_input(selector, HashOrder::AsCarried, frame, parsed)?;
    Some(toeplitz(key, input.get(..len)?))
}

/// The order a TIR hashes a packet's source and destination in (`tirc.rx_hash_symmetric`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashOrder {
    /// As the packet carries them: the two directions of a flow hash apart.
    AsCarried,
    /// Each pair sorted first, the smaller first (addresses compared as big-endian numbers,
    /// ports as numbers), so both directions of a flow hash alike: the symmetric hash a TIR
    /// with `rx_hash_symmetric` computes, which DPDK's mlx5 PMD offers as
    /// `RTE_ETH_HASH_FUNCTION_SYMMETRIC_TOEPLITZ_SORT` ("if src_ip > dst_ip, swap src_ip and
    /// dst_ip; if src_port > dst_port, swap", rte_ethdev.h) and mlx5e sets on every Toeplitz
    /// TIR (`mlx5e_tir_builder_build_rss`). A pair is sorted only when both its fields are
    /// selected.
    Sorted,
}

/// As [`rss_hash`], under a key whose table is made and in `order`: what the receive engine
/// uses.
pub fn rss_hash_keyed(
    key: &ToeplitzKey,
    selector: HashSelector,
    order: HashOrder,
    frame: &[u8],
    parsed: &Parsed,
) -> Option<u32> {
    let (input, len) = hash_input(selector, order, frame, parsed)?;
    Some(key.hash(input.get(..len)?))
}

/// The hash input `selector` takes from `frame` and its length; `None` as [`rss_hash`] says.
fn hash_input(
    selector: HashSelector,
    order: HashOrder,
    frame: &[u8],
    parsed: &Parsed,
) -> Option<([u8; MAX_HASH_INPUT_LEN], usize)> {
    let fields = selector.fields;
    if fields.is_empty() || parsed.frame_len != frame.len() {
        return None;
    }
    let (addr_len, src_at) = match (parsed.l3, selector.l3) {
        (L3Kind::Ipv4, L3Proto::Ipv4) => (4, parsed.l3_offset.saturating_add(12)),
        (L3Kind::Ipv6, L3Proto::Ipv6) => (16, parsed.l3_offset.saturating_add(8)),
        _ => return None,
    };
    if fields.intersects(HashFields::L4_PORTS) {
        match (parsed.l4, selector.l4) {
            (L4Kind::Tcp, L4Proto::Tcp) | (L4Kind::Udp, L4Proto::Udp) => {}
            _ => return None,
        }
    }

    // The bytes are taken from the frame at the parsed offsets, as the NIC's hash engine reads
    // them from the packet, in wire order. `Parsed` has public fields, so its offsets are not
    // trusted: sums saturate and reads are bounds-checked.
    let mut input = [0u8; MAX_HASH_INPUT_LEN];
    let mut len = 0;
    let mut push = |field: HashFields, at: usize, n: usize| -> Option<()> {
        if fields.contains(field) {
            let src = frame.get(at..at.checked_add(n)?)?;
            input.get_mut(len..len + n)?.copy_from_slice(src);
            len += n;
        }
        Some(())
    };
    let dst_at = src_at.saturating_add(addr_len);
    let (sport_at, dport_at) = (parsed.l4_offset, parsed.l4_offset.saturating_add(2));
    let sorted = order == HashOrder::Sorted;
    let ips = sorted_pair(
        frame,
        fields,
        HashFields::IP,
        (src_at, dst_at),
        addr_len,
        sorted,
    )?;
    let ports = sorted_pair(
        frame,
        fields,
        HashFields::L4_PORTS,
        (sport_at, dport_at),
        2,
        sorted,
    )?;
    push(HashFields::SRC_IP, ips.0, addr_len)?;
    push(HashFields::DST_IP, ips.1, addr_len)?;
    push(HashFields::L4_SPORT, ports.0, 2)?;
    push(HashFields::L4_DPORT, ports.1, 2)?;
    Some((input, len))
}

/// Where the first and second field of a source/destination pair (`pair`, both of them in
/// `fields`, at offsets `at`, `n` bytes each) are read from: swapped when `sort` asks for the
/// smaller first and the first is larger; as they are otherwise. `None` when a field it would
/// compare lies past the frame.
fn sorted_pair(
    frame: &[u8],
    fields: HashFields,
    pair: HashFields,
    (first, second): (usize, usize),
    n: usize,
    sort: bool,
) -> Option<(usize, usize)> {
    if !sort || !fields.contains(pair) {
        return Some((first, second));
    }
    let a = frame.get(first..first.checked_add(n)?)?;
    let b = frame.get(second..second.checked_add(n)?)?;
    // Big-endian bytes compare as the numbers they carry.
    Some(if a > b {
        (second, first)
    } else {
        (first, second)
    })
}

/// The RQ table entry a hash selects: `hash % table_len`, or 0 for an empty table (which the
/// caller must treat as "no RQ").
pub fn indirect(hash: u32, table_len: usize) -> usize {
    match table_len {
        0 => 0,
        // A u32 always fits in usize on the 32- and 64-bit targets the model runs on; on a
        // narrower one the truncation still yields an index below `table_len`.
        len => hash as usize % len,
    }
}
