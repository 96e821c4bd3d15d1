//! The receive steering lookup: a received frame's match words, run through the NIC receive
//! flow tables the firmware's commands (`fw::steering`) built, to the TIRs that take it or a
//! drop. The receive engine (`engine::rq`) asks it for every frame.

mod match_words;
pub(crate) use match_words::{frame_match_words, match_words};
use match_words::{MISC2_WORD, MPLS_BYTES};

use crate::counters::add;
use crate::function::Core;
use crate::objects::match_parts::MatchParts;
use crate::objects::meter::FlowMeter;
use crate::objects::FlowEntry;
use crate::objects::MATCH_WORDS;
use crate::packet::Parsed;
use crate::sw_steering::lookup::Metadata;
use crate::sw_steering::receive::Next;
use cxdirect_hw::flow::{
    FteMatchSetMisc2, FLOW_CONTEXT_ACTION_DECAP, FLOW_CONTEXT_ACTION_FWD_DEST,
    FLOW_DESTINATION_TYPE_TIR, FLOW_TABLE_MISS_ACTION_FWD,
};
use cxdirect_hw::reformat::REFORMAT_TYPE_L2_TO_L3_TUNNEL;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// Longest walk a frame may take through the tables: every hop (a forwarding entry or a miss)
/// goes to a deeper level (`fw::steering` refuses anything else), so a walk visits at most
/// one table per level.
const MAX_HOPS: usize = crate::function::caps::MAX_FT_LEVEL as usize + 1;

/// Where steering sent a frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// To these TIRs, with the flow tag the receive CQE carries in `sop_drop_qpn` (24 bits;
    /// 0 when no entry on the way set one), and the frame as software steering entries
    /// rewrote it (VLAN pop or push), if they did.
    Tirs(TirList, u32, Option<Vec<u8>>),
    /// Dropped by a rule, by a miss, or for want of a root table.
    Drop,
}

/// TIR numbers a rule forwards to: the first few held in place, so steering a frame to a
/// handful of TIRs (the usual case) allocates nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TirList {
    first: [u32; TirList::IN_PLACE],
    len: usize,
    more: Vec<u32>,
}

impl TirList {
    const IN_PLACE: usize = 4;

    fn push(&mut self, tirn: u32) {
        match self.first.get_mut(self.len) {
            Some(slot) => *slot = tirn,
            None => self.more.push(tirn),
        }
        self.len += 1;
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The TIR numbers, in the rule's destination order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.first[..self.len.min(Self::IN_PLACE)]
            .iter()
            .chain(&self.more)
            .copied()
    }
}

/// Runs a frame's match parameter words ([`frame_match_words`]) through the NIC receive tables
/// from the root. Every entry it matches that counts adds the frame to its flow counters,
/// whatever the entry then does with it. A software-owned table on the way hands the frame
/// (`frame`, parsed as `parsed`) to the steering entries software wrote for it
/// ([`crate::sw_steering`]), which decide the rest. Entries' rewrites (a firmware entry's
/// modify-header context, a walk's actions) change the frame the next tables see and the one
/// every TIR it goes to receives. A flow sampler on the way copies one frame in its ratio to
/// its sample table: where each copy went is pushed to `copies` (nothing is allocated unless
/// a copy is taken).
pub(crate) fn steer(
    core: &Core,
    words: &[u64; MATCH_WORDS],
    parsed: &Parsed,
    frame: &[u8],
    copies: &mut Vec<Verdict>,
) -> Verdict {
    let Some(root) = core.res.rx_root else {
        return Verdict::Drop;
    };
    let now = Steered::new(frame, parsed, words, None, core.res.match_parts);
    through_tables(core, root, now, 0, frame.len(), Some(copies))
}

/// The walk of [`steer`] from table `table_id`, with the frame as `now` holds it and the flow
/// tag set so far. `copies` is where sampled copies go; `None` for a copy's own walk, which a
/// sampler hands on to its default table without copying again.
fn through_tables(
    core: &Core,
    mut table_id: u32,
    mut now: Steered<'_>,
    mut flow_tag: u32,
    frame_len: usize,
    mut copies: Option<&mut Vec<Verdict>>,
) -> Verdict {
    // TIRs an entry listed beside a table keep their copy while the walk goes on into the
    // table (a destination list replicates the frame to each destination: rdma-core's
    // destination arrays, `mlx5dv_dr_action_create_dest_array`).
    let mut tirs = TirList::default();
    // An entry that forwards with a non-zero tag sets it; later ones without leave it.
    let done = |tirs: TirList, flow_tag, now: Steered<'_>| {
        if tirs.is_empty() {
            Verdict::Drop
        } else {
            Verdict::Tirs(tirs, flow_tag, now.into_rewritten())
        }
    };
    for _ in 0..MAX_HOPS {
        let Some(table) = core.res.flow_tables.get(table_id) else {
            return done(tirs, flow_tag, now);
        };
        if let Some(root) = table.sw_root {
            let decision = crate::sw_steering::receive::receive(core, root, now.packet());
            count(core, &decision.counters, frame_len);
            flow_tag = decision.flow_tag.unwrap_or(flow_tag);
            now.set_meta(decision.meta);
            if let Some(bytes) = decision.rewritten {
                now.replace(bytes);
            }
            match decision.next {
                Next::Tir(tirn) => {
                    tirs.push(tirn);
                    return done(tirs, flow_tag, now);
                }
                Next::Table(id) => {
                    table_id = id;
                    continue;
                }
                Next::Sampler(id) => {
                    let Some(sampler) = core.res.samplers.get(id) else {
                        return done(tirs, flow_tag, now);
                    };
                    if sampler.take() {
                        if let Some(copies) = copies.as_deref_mut() {
                            let copy = through_tables(
                                core,
                                sampler.sample_table,
                                now.clone(),
                                flow_tag,
                                frame_len,
                                None,
                            );
                            if copy != Verdict::Drop {
                                copies.push(copy);
                            }
                        }
                    }
                    table_id = sampler.default_table;
                    continue;
                }
                Next::Meter(id) => {
                    let Some(meter) = core.res.meters.get(id) else {
                        return done(tirs, flow_tag, now);
                    };
                    now.meter(meter, Instant::now());
                    table_id = meter.destination_table;
                    continue;
                }
                Next::Drop => return done(tirs, flow_tag, now),
            }
        }
        let hit = table.hit(now.words());
        if let Some(entry) = hit {
            count(core, &entry.counters, frame_len);
            if now.apply_entry(core, entry).is_err() {
                add(&core.counters.rx_sw_steering_errors, 1);
                return Verdict::Drop;
            }
        }
        match hit {
            Some(entry) if entry.action & FLOW_CONTEXT_ACTION_FWD_DEST != 0 => {
                if entry.flow_tag != 0 {
                    flow_tag = entry.flow_tag;
                }
                let mut next = None;
                for &(kind, id) in &entry.dests {
                    if kind == FLOW_DESTINATION_TYPE_TIR {
                        tirs.push(id);
                    } else {
                        next = Some(id);
                    }
                }
                match next {
                    Some(id) => table_id = id,
                    None => return done(tirs, flow_tag, now),
                }
            }
            Some(_) => return done(tirs, flow_tag, now),
            None if table.miss_action == FLOW_TABLE_MISS_ACTION_FWD => table_id = table.miss_table,
            None => return done(tirs, flow_tag, now),
        }
    }
    Verdict::Drop
}

/// The bits of a meter's return register its color takes (DPDK's `MLX5_MTR_COLOR_BITS`, 8).
const COLOR_MASK: u32 = 0xff;

/// Adds one frame of `frame_len` bytes to each of `counters`.
pub(crate) fn count(core: &Core, counters: &[u32], frame_len: usize) {
    for &id in counters {
        if let Some(c) = core.res.flow_counters.get(id) {
            c.packets.fetch_add(1, Ordering::Relaxed);
            c.octets.fetch_add(frame_len as u64, Ordering::Relaxed);
        }
    }
}

/// A frame on its way through the flow tables, as their entries rewrite it: the frame as it
/// arrived until an entry changes it (a firmware entry's modify-header context, a software
/// steering walk's actions), then the rewritten copy, parsed and matched again, which the
/// next tables see and which is what is delivered or sent; and the metadata registers the
/// entries set (zero when it arrived or was sent), which the next tables match in
/// `misc_parameters_2` and the next walks read.
#[derive(Clone)]
pub(crate) struct Steered<'a> {
    original: &'a [u8],
    original_parsed: &'a Parsed,
    original_words: &'a [u64; MATCH_WORDS],
    /// The sending SQ, for a transmitted frame's `source_sqn`.
    sqn: Option<u32>,
    /// The parts of the match words built ([`frame_match_words`]).
    parts: MatchParts,
    rewritten: Option<(Vec<u8>, Parsed)>,
    meta: Metadata,
    /// The match words, once the frame or the registers changed.
    words: Option<[u64; MATCH_WORDS]>,
}

impl<'a> Steered<'a> {
    /// `frame` as it arrived or was sent, with its parse and match words.
    pub(crate) fn new(
        frame: &'a [u8],
        parsed: &'a Parsed,
        words: &'a [u64; MATCH_WORDS],
        sqn: Option<u32>,
        parts: MatchParts,
    ) -> Self {
        Steered {
            original: frame,
            original_parsed: parsed,
            original_words: words,
            sqn,
            parts,
            rewritten: None,
            meta: Metadata::default(),
            words: None,
        }
    }

    /// The frame now.
    pub(crate) fn frame(&self) -> &[u8] {
        self.rewritten.as_ref().map_or(self.original, |r| &r.0[..])
    }

    /// Its parse now.
    pub(crate) fn parsed(&self) -> &Parsed {
        self.rewritten
            .as_ref()
            .map_or(self.original_parsed, |r| &r.1)
    }

    /// Its match words now.
    pub(crate) fn words(&self) -> &[u64; MATCH_WORDS] {
        self.words.as_ref().unwrap_or(self.original_words)
    }

    /// The frame, its parse and its metadata registers, as a software steering walk takes
    /// them.
    pub(crate) fn packet(&self) -> (&Parsed, &[u8], Metadata) {
        (self.parsed(), self.frame(), self.meta)
    }

    /// The frame becomes `bytes`.
    pub(crate) fn replace(&mut self, bytes: Vec<u8>) {
        let parsed = crate::packet::parse(&bytes);
        let mut words = match_words(&parsed, &bytes, self.sqn, self.parts);
        put_registers(&mut words, &self.meta);
        self.rewritten = Some((bytes, parsed));
        self.words = Some(words);
    }

    /// The metadata registers become `meta`.
    pub(crate) fn set_meta(&mut self, meta: Metadata) {
        if meta != self.meta {
            let mut words = *self.words();
            put_registers(&mut words, &meta);
            self.meta = meta;
            self.words = Some(words);
        }
    }

    /// Colors the frame by `meter` at `at` and writes the color into the low 8 bits of the
    /// meter's return register (`reg_c_<return_reg>`), which the next tables match; the other
    /// 24 bits keep what they held, as DPDK's PMD relies on when `flow_meter` says the
    /// register may be shared (it keeps a meter's number there, `MLX5_MTR_COLOR_BITS`). An
    /// inactive meter writes nothing. In IP-length mode a frame without an IP header counts
    /// 0 bytes.
    pub(crate) fn meter(&mut self, meter: &FlowMeter, at: Instant) {
        let p = self.parsed();
        let ip_len = if p.l3_len > 0 {
            p.ip_end.min(p.frame_len).saturating_sub(p.l3_offset)
        } else {
            0
        };
        if let Some(color) = meter.color(ip_len as u64, self.frame().len() as u64, at) {
            let mut meta = self.meta;
            let reg = &mut meta.reg_c[usize::from(meter.return_reg & 7)];
            *reg = (*reg & !COLOR_MASK) | color;
            self.set_meta(meta);
        }
    }

    /// Applies a firmware entry's rewrites to the frame, in the device's order: on receive
    /// decapsulation (`FLOW_CONTEXT_ACTION_DECAP`, or an `L3_TUNNEL_TO_L2` reformat context)
    /// before the modify-header context, on transmit the modify-header context before
    /// encapsulation. `Err` when a context is gone or does not apply to the frame (no tunnel
    /// to remove, a field it lacks): the frame is then dropped and counted.
    pub(crate) fn apply_entry(&mut self, core: &Core, entry: &FlowEntry) -> Result<(), ()> {
        let receive = self.sqn.is_none();
        let reformat = match entry.reformat {
            Some(id) => Some(core.res.reformats.get(id).ok_or(())?),
            None => None,
        };
        if receive {
            if entry.action & FLOW_CONTEXT_ACTION_DECAP != 0 {
                let bytes = crate::tunnel::decapsulate_l2(self.frame()).ok_or(())?;
                self.replace(bytes);
            }
            if let Some(r) = reformat {
                let bytes = crate::tunnel::decapsulate_l3(self.frame(), &r.data).ok_or(())?;
                self.replace(bytes);
            }
        }
        if let Some(id) = entry.modify_header {
            let context = core.res.modify_headers.get(id).ok_or(())?;
            let mut bytes = self.frame().to_vec();
            let mut meta = self.meta;
            crate::header_modify::apply(&context.actions, &mut bytes, &mut meta).map_err(|_| ())?;
            self.set_meta(meta);
            if bytes != self.frame() {
                self.replace(bytes);
            }
        }
        if let (false, Some(r)) = (receive, reformat) {
            let l3 = r.reformat_type == REFORMAT_TYPE_L2_TO_L3_TUNNEL;
            let bytes = crate::tunnel::encapsulate(self.frame(), &r.data, l3).ok_or(())?;
            self.replace(bytes);
        }
        Ok(())
    }

    /// The rewritten frame, if anything rewrote it.
    pub(crate) fn into_rewritten(self) -> Option<Vec<u8>> {
        self.rewritten.map(|r| r.0)
    }
}

/// Writes the metadata registers `meta` into `misc_parameters_2` of the match words `words`
/// (`metadata_reg_c_7` .. `_0` and `metadata_reg_a`; the MPLS entries before them are the
/// frame's and stay as they are).
fn put_registers(words: &mut [u64; MATCH_WORDS], meta: &Metadata) {
    let mut misc2 = FteMatchSetMisc2::zeroed();
    let c = meta.reg_c;
    misc2
        .set_metadata_reg_c_0(c[0])
        .set_metadata_reg_c_1(c[1])
        .set_metadata_reg_c_2(c[2])
        .set_metadata_reg_c_3(c[3])
        .set_metadata_reg_c_4(c[4])
        .set_metadata_reg_c_5(c[5])
        .set_metadata_reg_c_6(c[6])
        .set_metadata_reg_c_7(c[7])
        .set_metadata_reg_a(meta.reg_a);
    for (word, chunk) in words[MISC2_WORD + MPLS_BYTES / 8..]
        .iter_mut()
        .zip(misc2.as_bytes()[MPLS_BYTES..].chunks_exact(8))
    {
        let mut b = [0u8; 8];
        b.copy_from_slice(chunk);
        *word = u64::from_ne_bytes(b);
    }
}
