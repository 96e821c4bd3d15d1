//! Header-modify actions (SET, ADD, COPY) on the fields the device names by number: each field
//! is a 32-bit word of the packet's headers or of its metadata, and an action changes a run of
//! its bits. rdma-core converts the `set_action_in`/`add_action_in`/`copy_action_in` a user
//! writes into these (dr_action.c `dr_action_modify_sw_to_hw_set`/`_add`/`_copy`): the field
//! from `dr_ste_v1_action_modify_field_arr` (dr_ste_v1.c), the bit offset of the user's field in
//! the word plus `MLX5_MODIFY_HEADER_V1_QW_OFFSET` (0x20), the length (0 standing for 32).
//!
//! Where each word lies is read off that table: the bits it gives each user field are the only
//! ones modelled, and a word's other bits read as zero and ignore writes. After a change to an
//! IP or TCP/UDP field the IPv4 header checksum and the TCP or UDP checksum are computed again
//! (an inference: a device that rewrote addresses and ports without them would send frames
//! every receiver drops; a UDP checksum of 0, "none", stays 0).

use super::action::Action;
use super::lookup::Metadata;
use crate::packet::{self, L3Kind, L4Kind, Parsed};

/// `MLX5_MODIFY_HEADER_V1_QW_OFFSET`: added to every bit offset rdma-core writes.
const SHIFT_BASE: u8 = 0x20;

/// Field numbers (dr_ste_v1.h `DR_STE_V1_ACTION_MDFY_FLD_*`).
mod field {
    pub(super) const L2_OUT_0: u8 = 0x00;
    pub(super) const L2_OUT_1: u8 = 0x01;
    pub(super) const L2_OUT_2: u8 = 0x02;
    pub(super) const SRC_L2_OUT_0: u8 = 0x08;
    pub(super) const SRC_L2_OUT_1: u8 = 0x09;
    pub(super) const L3_OUT_0: u8 = 0x0e;
    pub(super) const L4_OUT_0: u8 = 0x18;
    pub(super) const L4_OUT_1: u8 = 0x19;
    pub(super) const IPV4_OUT_0: u8 = 0x40;
    pub(super) const IPV4_OUT_1: u8 = 0x41;
    pub(super) const IPV6_DST_OUT_0: u8 = 0x44;
    pub(super) const IPV6_DST_OUT_3: u8 = 0x47;
    pub(super) const IPV6_SRC_OUT_0: u8 = 0x4c;
    pub(super) const IPV6_SRC_OUT_3: u8 = 0x4f;
    pub(super) const TCP_MISC_0: u8 = 0x5e;
    pub(super) const TCP_MISC_1: u8 = 0x5f;
    pub(super) const METADATA_2_CQE: u8 = 0x7b;
    pub(super) const GNRL_PURPOSE: u8 = 0x7c;
    pub(super) const REGISTER_2_0: u8 = 0x8c;
    pub(super) const REGISTER_0_1: u8 = 0x91;
}

/// Why a modify action could not be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ModifyError {
    /// A field number the model does not place (flex parser, GTP-U, ...).
    Field(u8),
    /// A field of a header the packet lacks (an IP field of an ARP frame, a TCP field of UDP).
    Absent(u8),
    /// A bit range outside the 32-bit word.
    Bits,
    /// An action other than SET, ADD and COPY.
    NotModify,
}

/// A packet and its metadata, as a modify action changes them.
pub(crate) struct Target<'a> {
    /// The frame's bytes.
    pub(crate) frame: &'a mut [u8],
    /// Its metadata registers.
    pub(crate) meta: &'a mut Metadata,
    /// Whether an IP or TCP/UDP field changed, so the checksums must be computed again.
    pub(crate) l3_l4_changed: bool,
    /// The frame's parse: fields lie at fixed places in it, and only a new ethertype moves
    /// them, after which it is parsed again.
    parsed: Parsed,
}

/// Bits `[pos, pos + len)` of a word from a shifter and a length as rdma-core writes them.
fn bit_range(shift: u8, len: u8) -> Result<(u32, u32), ModifyError> {
    let pos = u32::from(shift.checked_sub(SHIFT_BASE).ok_or(ModifyError::Bits)?);
    let len = if len == 0 { 32 } else { u32::from(len) };
    if pos + len > 32 {
        return Err(ModifyError::Bits);
    }
    Ok((pos, len))
}

/// The mask of bits `[pos, pos + len)`.
fn mask(pos: u32, len: u32) -> u32 {
    (u32::MAX >> (32 - len)) << pos
}

impl<'a> Target<'a> {
    /// `frame` and its registers `meta`, nothing changed yet.
    pub(crate) fn new(frame: &'a mut [u8], meta: &'a mut Metadata) -> Self {
        let parsed = packet::parse(frame);
        Target {
            frame,
            meta,
            l3_l4_changed: false,
            parsed,
        }
    }

    /// Applies a SET, ADD or COPY action; any other action is refused
    /// ([`ModifyError::NotModify`]).
    pub(crate) fn act(&mut self, action: &Action) -> Result<(), ModifyError> {
        match *action {
            Action::Set {
                field,
                shift,
                len,
                data,
            } => self.set(field, shift, len, data),
            Action::Add {
                field,
                shift,
                len,
                data,
            } => self.add(field, shift, len, data),
            Action::Copy {
                dst_field,
                dst_shift,
                len,
                src_field,
                src_shift,
            } => self.copy(dst_field, dst_shift, len, src_field, src_shift),
            _ => Err(ModifyError::NotModify),
        }
    }

    /// SET: bits of `field` from the low `len` bits of `data`.
    pub(crate) fn set(
        &mut self,
        field: u8,
        shift: u8,
        len: u8,
        data: u32,
    ) -> Result<(), ModifyError> {
        let (pos, len) = bit_range(shift, len)?;
        let word = self.read(field)?;
        let m = mask(pos, len);
        self.write(field, (word & !m) | ((data << pos) & m))
    }

    /// ADD: `data` added to the bits of `field`, modulo their width.
    pub(crate) fn add(
        &mut self,
        field: u8,
        shift: u8,
        len: u8,
        data: u32,
    ) -> Result<(), ModifyError> {
        let (pos, len) = bit_range(shift, len)?;
        let word = self.read(field)?;
        let m = mask(pos, len);
        let sum = ((word & m) >> pos).wrapping_add(data);
        self.write(field, (word & !m) | ((sum << pos) & m))
    }

    /// COPY: `len` bits of `src_field` at its shifter into `dst_field` at its own.
    pub(crate) fn copy(
        &mut self,
        dst_field: u8,
        dst_shift: u8,
        len: u8,
        src_field: u8,
        src_shift: u8,
    ) -> Result<(), ModifyError> {
        let (src_pos, n) = bit_range(src_shift, len)?;
        let (dst_pos, _) = bit_range(dst_shift, len)?;
        let bits = (self.read(src_field)? & mask(src_pos, n)) >> src_pos;
        let word = self.read(dst_field)?;
        let m = mask(dst_pos, n);
        self.write(dst_field, (word & !m) | ((bits << dst_pos) & m))
    }

    /// Computes the checksums again after IP or TCP/UDP fields changed.
    pub(crate) fn finish(&mut self) {
        if !self.l3_l4_changed {
            return;
        }
        let p = packet::parse(self.frame);
        let ipv4 = p.l3 == L3Kind::Ipv4;
        let l4 = match p.l4 {
            L4Kind::Tcp => true,
            // A UDP datagram sent without a checksum keeps none.
            L4Kind::Udp => be16(self.frame, p.l4_offset + 6).is_some_and(|c| c != 0),
            _ => false,
        };
        // A frame whose lengths do not fit goes out as it is, as with checksum offload.
        let _ = packet::insert_checksums(self.frame, ipv4, l4 && !p.is_fragment());
    }

    /// The word `field` names.
    fn read(&self, field: u8) -> Result<u32, ModifyError> {
        let p = &self.parsed;
        Ok(match self.place(field, p)? {
            Place::Bytes(at) => be32(self.frame, at).ok_or(ModifyError::Absent(field))?,
            Place::HalfAndHalf { high, low } => {
                let hi = high.map_or(Some(0), |at| be16(self.frame, at));
                let lo = low.map_or(Some(0), |at| be16(self.frame, at));
                (u32::from(hi.ok_or(ModifyError::Absent(field))?) << 16)
                    | u32::from(lo.ok_or(ModifyError::Absent(field))?)
            }
            Place::IpClass { l3 } => {
                ip_class_word(self.frame, p, l3).ok_or(ModifyError::Absent(field))?
            }
            Place::TcpFlags(at) => {
                let ns = self.frame.get(at).ok_or(ModifyError::Absent(field))? & 1;
                let flags = self.frame.get(at + 1).ok_or(ModifyError::Absent(field))?;
                (u32::from(ns) << 24) | (u32::from(*flags) << 16)
            }
            Place::Register(r) => *self.register(r),
        })
    }

    /// Writes the word `field` names (its unmodelled bits are dropped).
    fn write(&mut self, field: u8, value: u32) -> Result<(), ModifyError> {
        let p = self.parsed;
        let place = self.place(field, &p)?;
        if !matches!(place, Place::Register(_)) && !is_l2(field) {
            self.l3_l4_changed = true;
        }
        let absent = ModifyError::Absent(field);
        match place {
            Place::Bytes(at) => put(self.frame, at, &value.to_be_bytes()).ok_or(absent)?,
            Place::HalfAndHalf { high, low } => {
                if let Some(at) = high {
                    put(self.frame, at, &((value >> 16) as u16).to_be_bytes()).ok_or(absent)?;
                }
                if let Some(at) = low {
                    put(self.frame, at, &(value as u16).to_be_bytes()).ok_or(absent)?;
                }
            }
            Place::IpClass { l3 } => set_ip_class_word(self.frame, &p, l3, value).ok_or(absent)?,
            Place::TcpFlags(at) => {
                let ns = self.frame.get_mut(at).ok_or(absent)?;
                *ns = (*ns & !1) | ((value >> 24) as u8 & 1);
                *self.frame.get_mut(at + 1).ok_or(absent)? = (value >> 16) as u8;
            }
            Place::Register(r) => *self.register_mut(r) = value,
        }
        if field == field::L2_OUT_1 {
            // The ethertype may have changed what follows.
            self.parsed = packet::parse(self.frame);
        }
        Ok(())
    }

    /// Where the word `field` lies in a packet parsed as `p`.
    fn place(&self, field: u8, p: &Parsed) -> Result<Place, ModifyError> {
        let absent = ModifyError::Absent(field);
        let ip = |kind: L3Kind| (p.l3 == kind).then_some(p.l3_offset).ok_or(absent);
        let l4 = || {
            matches!(p.l4, L4Kind::Tcp | L4Kind::Udp)
                .then_some(p.l4_offset)
                .ok_or(absent)
        };
        let tcp = || (p.l4 == L4Kind::Tcp).then_some(p.l4_offset).ok_or(absent);
        Ok(match field {
            field::L2_OUT_0 => Place::Bytes(0),
            // The destination MAC's low half, then the ethertype after the VLAN tags.
            field::L2_OUT_1 => Place::HalfAndHalf {
                high: Some(4),
                low: Some(p.ethertype.map(|_| p.l3_offset - 2).ok_or(absent)?),
            },
            // The first VLAN tag's TCI (`OUT_FIRST_VID` is its low bits).
            field::L2_OUT_2 => Place::HalfAndHalf {
                high: None,
                low: Some(p.vlan.or(p.outer_vlan).map(|_| 14).ok_or(absent)?),
            },
            field::SRC_L2_OUT_0 => Place::Bytes(6),
            field::SRC_L2_OUT_1 => Place::HalfAndHalf {
                high: Some(10),
                low: None,
            },
            field::L3_OUT_0 => Place::IpClass {
                l3: p.l3.ne(&L3Kind::None).then_some(p.l3).ok_or(absent)?,
            },
            field::L4_OUT_0 => Place::Bytes(l4()?),
            field::L4_OUT_1 => Place::TcpFlags(tcp()? + 12),
            field::IPV4_OUT_0 => Place::Bytes(ip(L3Kind::Ipv4)? + 12),
            field::IPV4_OUT_1 => Place::Bytes(ip(L3Kind::Ipv4)? + 16),
            f @ field::IPV6_DST_OUT_0..=field::IPV6_DST_OUT_3 => {
                Place::Bytes(ip(L3Kind::Ipv6)? + 24 + 4 * usize::from(f - field::IPV6_DST_OUT_0))
            }
            f @ field::IPV6_SRC_OUT_0..=field::IPV6_SRC_OUT_3 => {
                Place::Bytes(ip(L3Kind::Ipv6)? + 8 + 4 * usize::from(f - field::IPV6_SRC_OUT_0))
            }
            field::TCP_MISC_0 => Place::Bytes(tcp()? + 4),
            field::TCP_MISC_1 => Place::Bytes(tcp()? + 8),
            field::METADATA_2_CQE => Place::Register(Register::B),
            field::GNRL_PURPOSE => Place::Register(Register::A),
            // REGISTER_2_0 (0x8c) is reg_c_4, 2_1 reg_c_5, 1_0 reg_c_2, 1_1 reg_c_3, 0_0
            // reg_c_0, 0_1 reg_c_1: pairs counting down, low register first.
            f @ field::REGISTER_2_0..=field::REGISTER_0_1 => {
                let k = f - field::REGISTER_2_0;
                Place::Register(Register::C(4 - 2 * (k / 2) + (k % 2)))
            }
            other => return Err(ModifyError::Field(other)),
        })
    }

    fn register(&self, r: Register) -> &u32 {
        match r {
            Register::A => &self.meta.reg_a,
            Register::B => &self.meta.reg_b,
            Register::C(i) => &self.meta.reg_c[usize::from(i)],
        }
    }

    fn register_mut(&mut self, r: Register) -> &mut u32 {
        match r {
            Register::A => &mut self.meta.reg_a,
            Register::B => &mut self.meta.reg_b,
            Register::C(i) => &mut self.meta.reg_c[usize::from(i)],
        }
    }
}

/// Where a field's word lies.
#[derive(Debug, Clone, Copy)]
enum Place {
    /// Four bytes of the frame from this offset.
    Bytes(usize),
    /// Two 16-bit halves from these offsets; a missing half reads zero and ignores writes.
    HalfAndHalf {
        high: Option<usize>,
        low: Option<usize>,
    },
    /// The IP class word: bits 23..16 the IPv4 TOS or IPv6 traffic class, 15..8 the TTL or hop
    /// limit.
    IpClass { l3: L3Kind },
    /// The TCP flags: bit 24 NS (the low bit of the byte at the offset), 23..16 the next byte.
    TcpFlags(usize),
    /// A metadata register.
    Register(Register),
}

/// A metadata register.
#[derive(Debug, Clone, Copy)]
enum Register {
    A,
    B,
    C(u8),
}

/// Fields of the Ethernet header, whose change needs no checksum.
fn is_l2(field: u8) -> bool {
    matches!(
        field,
        field::L2_OUT_0
            | field::L2_OUT_1
            | field::L2_OUT_2
            | field::SRC_L2_OUT_0
            | field::SRC_L2_OUT_1
    )
}

fn ip_class_word(frame: &[u8], p: &Parsed, l3: L3Kind) -> Option<u32> {
    let at = p.l3_offset;
    let (class, ttl) = match l3 {
        L3Kind::Ipv4 => (*frame.get(at + 1)?, *frame.get(at + 8)?),
        _ => {
            let (b0, b1) = (*frame.get(at)?, *frame.get(at + 1)?);
            ((b0 << 4) | (b1 >> 4), *frame.get(at + 7)?)
        }
    };
    Some((u32::from(class) << 16) | (u32::from(ttl) << 8))
}

fn set_ip_class_word(frame: &mut [u8], p: &Parsed, l3: L3Kind, value: u32) -> Option<()> {
    let at = p.l3_offset;
    let (class, ttl) = ((value >> 16) as u8, (value >> 8) as u8);
    frame.get(at + 8)?;
    match l3 {
        L3Kind::Ipv4 => {
            *frame.get_mut(at + 1)? = class;
            *frame.get_mut(at + 8)? = ttl;
        }
        _ => {
            let b0 = frame.get_mut(at)?;
            *b0 = (*b0 & 0xf0) | (class >> 4);
            let b1 = frame.get_mut(at + 1)?;
            *b1 = (*b1 & 0x0f) | (class << 4);
            *frame.get_mut(at + 7)? = ttl;
        }
    }
    Some(())
}

fn be16(frame: &[u8], at: usize) -> Option<u16> {
    let b = frame.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([b[0], b[1]]))
}

fn be32(frame: &[u8], at: usize) -> Option<u32> {
    let b = frame.get(at..at.checked_add(4)?)?;
    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
}

fn put(frame: &mut [u8], at: usize, bytes: &[u8]) -> Option<()> {
    frame
        .get_mut(at..at.checked_add(bytes.len())?)?
        .copy_from_slice(bytes);
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An IPv4/UDP frame with a checksum, from 10.0.0.1:1000 to 10.0.0.2:2000.
    fn udp_frame() -> Vec<u8> {
        let mut f = vec![0x02, 0, 0, 0, 0, 0x02, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00];
        f.extend_from_slice(&[
            0x45, 0x00, 0x00, 0x20, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ]);
        f.extend_from_slice(&[0x03, 0xe8, 0x07, 0xd0, 0x00, 0x0c, 0, 0, 1, 2, 3, 4]);
        packet::insert_checksums(&mut f, true, true).unwrap();
        f
    }

    #[test]
    fn smac_set_as_rdma_core_writes_it_takes_both_words() {
        let mut frame = udp_frame();
        let mut meta = Metadata::default();
        let mut t = Target::new(&mut frame, &mut meta);
        // OUT_SMAC_47_16 (start 0, 32 bits) and OUT_SMAC_15_0 (start 16, 16 bits).
        t.set(field::SRC_L2_OUT_0, 0x20, 32, 0x8888_8888).unwrap();
        t.set(field::SRC_L2_OUT_1, 0x30, 16, 0x8888).unwrap();
        t.finish();
        assert_eq!(&frame[6..12], &[0x88; 6]);
        assert_eq!(&frame[..6], &udp_frame()[..6]);
        assert_eq!(&frame[12..], &udp_frame()[12..]);
    }

    #[test]
    fn ip_and_port_changes_keep_the_checksums_right() {
        let mut frame = udp_frame();
        let mut meta = Metadata::default();
        let mut t = Target::new(&mut frame, &mut meta);
        t.set(field::IPV4_OUT_1, 0x20, 0, 0x0a00_0063).unwrap();
        t.set(field::L4_OUT_0, 0x20, 16, 4791).unwrap();
        // TTL minus one, as a decrement is written: ADD 0xff to the 8 bits at 8.
        t.add(field::L3_OUT_0, 0x28, 8, 0xff).unwrap();
        t.finish();
        let p = packet::parse(&frame);
        assert_eq!(&frame[30..34], &[10, 0, 0, 0x63]);
        assert_eq!(p.dst_port, 4791);
        assert_eq!(frame[22], 63);
        assert!(packet::ipv4_header_checksum_ok(&frame, &p));
        assert!(packet::l4_checksum_ok(&frame, &p));
    }

    #[test]
    fn copies_reach_registers_and_absent_fields_are_refused() {
        let mut frame = udp_frame();
        let mut meta = Metadata::default();
        let mut t = Target::new(&mut frame, &mut meta);
        // The UDP source port into reg_c_1's low half, then reg_c_1 into reg_c_4.
        t.copy(field::REGISTER_0_1, 0x20, 16, field::L4_OUT_0, 0x30)
            .unwrap();
        t.copy(field::REGISTER_2_0, 0x20, 0, field::REGISTER_0_1, 0x20)
            .unwrap();
        assert_eq!(t.meta.reg_c[1], 1000);
        assert_eq!(t.meta.reg_c[4], 1000);
        assert_eq!(
            t.set(field::TCP_MISC_0, 0x20, 0, 1),
            Err(ModifyError::Absent(field::TCP_MISC_0))
        );
        assert_eq!(t.set(0x82, 0x20, 0, 1), Err(ModifyError::Field(0x82)));
        assert_eq!(t.set(field::L2_OUT_0, 0x10, 0, 1), Err(ModifyError::Bits));
        assert_eq!(t.set(field::L2_OUT_0, 0x30, 20, 1), Err(ModifyError::Bits));
        assert!(!t.l3_l4_changed);
    }
}
