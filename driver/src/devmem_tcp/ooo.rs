//! The out-of-order store: payload pieces ahead of `rcv_nxt`, each in its own dmabuf buffer,
//! kept sorted and disjoint in a fixed-capacity array. A piece that overlaps what is stored is
//! trimmed by offset (its dmabuf offset moves, no byte is copied); stored pieces it covers
//! whole are dropped in its favour, as Linux's `tcp_data_queue_ofo` does; a piece inside a
//! stored one is a duplicate. When the store is full the piece furthest ahead goes, as in
//! `tcp_prune_ofo_queue`.

use super::segment::SackBlock;
use super::seq::Seq;

/// One stored piece: `len` bytes from sequence `seq` at dmabuf offset `offset` of `buffer`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) struct Piece {
    pub(super) seq: Seq,
    pub(super) len: u32,
    pub(super) buffer: u32,
    pub(super) offset: u64,
}

impl Piece {
    pub(super) fn end(&self) -> Seq {
        self.seq.plus(self.len)
    }

    /// The piece less its first `n` bytes.
    pub(super) fn trim_front(mut self, n: u32) -> Piece {
        let n = n.min(self.len);
        self.seq = self.seq.plus(n);
        self.offset += u64::from(n);
        self.len -= n;
        self
    }
}

/// What became of a piece offered to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stored {
    /// Kept, trimmed to this many bytes.
    Kept(u32),
    /// Every byte of it is stored already.
    Duplicate,
    /// The store is full of pieces nearer `rcv_nxt`.
    Full,
}

/// Up to four SACK blocks, the first one holding the most recent arrival (RFC 2018 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SackBlocks {
    blocks: [SackBlock; 4],
    len: u8,
}

impl SackBlocks {
    /// The blocks.
    pub fn as_slice(&self) -> &[SackBlock] {
        &self.blocks[..usize::from(self.len)]
    }

    fn push(&mut self, b: SackBlock) {
        if usize::from(self.len) < self.blocks.len() {
            self.blocks[usize::from(self.len)] = b;
            self.len += 1;
        }
    }
}

/// The out-of-order store.
pub(super) struct OooStore {
    pieces: Box<[Piece]>,
    len: usize,
    bytes: u64,
}

impl OooStore {
    pub(super) fn new(capacity: u16) -> Self {
        Self {
            pieces: vec![Piece::default(); usize::from(capacity)].into_boxed_slice(),
            len: 0,
            bytes: 0,
        }
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(super) fn pieces(&self) -> &[Piece] {
        &self.pieces[..self.len]
    }

    /// Offers `new` (entirely after `rcv_nxt`); `release` gets each buffer the store lets go
    /// of (pieces `new` covers, or the one evicted for it). `new`'s own buffer is the caller's
    /// to release unless the answer is [`Stored::Kept`].
    pub(super) fn insert(
        &mut self,
        rcv_nxt: Seq,
        mut new: Piece,
        release: &mut impl FnMut(u32),
    ) -> Stored {
        let rel = |s: Seq| s.diff(rcv_nxt) as i64;
        let mut end = new.end();
        // The first stored piece that ends after the new one starts.
        let mut i = self
            .pieces()
            .partition_point(|p| rel(p.end()) <= rel(new.seq));
        if i < self.len && rel(self.pieces[i].seq) <= rel(new.seq) {
            let p = self.pieces[i];
            if rel(p.end()) >= rel(end) {
                return Stored::Duplicate;
            }
            new = new.trim_front(p.end().diff(new.seq) as u32);
            i += 1;
        }
        // Stored pieces the new one covers whole give way to it.
        while i < self.len && rel(self.pieces[i].end()) <= rel(end) {
            let gone = self.remove(i);
            release(gone.buffer);
        }
        if i < self.len && rel(self.pieces[i].seq) < rel(end) {
            end = self.pieces[i].seq;
        }
        new.len = end.diff(new.seq) as u32;
        if new.len == 0 {
            return Stored::Duplicate;
        }
        if self.len == self.pieces.len() {
            if i == self.len || self.len == 0 {
                return Stored::Full;
            }
            let gone = self.remove(self.len - 1);
            release(gone.buffer);
        }
        self.pieces.copy_within(i..self.len, i + 1);
        self.pieces[i] = new;
        self.len += 1;
        self.bytes += u64::from(new.len);
        Stored::Kept(new.len)
    }

    fn remove(&mut self, i: usize) -> Piece {
        let p = self.pieces[i];
        self.pieces.copy_within(i + 1..self.len, i);
        self.len -= 1;
        self.bytes -= u64::from(p.len);
        p
    }

    /// Takes the first piece if it starts at or before `rcv_nxt` (the caller trims what it
    /// already has).
    pub(super) fn pop_ready(&mut self, rcv_nxt: Seq) -> Option<Piece> {
        (self.len > 0 && self.pieces[0].seq.le(rcv_nxt)).then(|| self.remove(0))
    }

    /// Takes the last piece (the one furthest ahead).
    pub(super) fn pop_last(&mut self) -> Option<Piece> {
        (self.len > 0).then(|| self.remove(self.len - 1))
    }

    /// SACK blocks for the stored pieces, adjacent pieces merged, at most `most`; the block
    /// holding `latest` (the last piece stored) first, the rest in sequence order.
    pub(super) fn sack_blocks(&self, latest: Option<Seq>, most: usize) -> SackBlocks {
        let mut runs = SackBlocks::default();
        let mut out = SackBlocks::default();
        let most = most.min(4);
        let mut first: Option<SackBlock> = None;
        let mut i = 0;
        while i < self.len {
            let start = self.pieces[i].seq;
            let mut end = self.pieces[i].end();
            while i + 1 < self.len && self.pieces[i + 1].seq == end {
                i += 1;
                end = self.pieces[i].end();
            }
            let b = SackBlock {
                left: start.0,
                right: end.0,
            };
            match latest {
                Some(l) if first.is_none() && l.within(start, end.diff(start) as u32) => {
                    first = Some(b);
                }
                _ => runs.push(b),
            }
            i += 1;
        }
        if let Some(b) = first {
            out.push(b);
        }
        for b in runs.as_slice() {
            if usize::from(out.len) < most {
                out.push(*b);
            }
        }
        out.len = out.len.min(most as u8);
        out
    }
}
