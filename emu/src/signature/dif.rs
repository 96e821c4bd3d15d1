//! The data path through a signature key: its address space is the wire domain (blocks of
//! data, each followed by its 8-byte protection field when the wire carries one), laid over
//! the memory the UMR attached (data alone, data and protection interleaved, or a strided
//! list of the two apart). Each domain has its own blocks (its data bytes, 512 to 4160); the
//! data is whole blocks of both. Each block of the input domain is checked, and each block of
//! the output domain given its protection: generated from the BSF's tags, or copied where the
//! copy mask says when both domains share one block structure.

use super::guard::{expected, words};
use super::SigError;
use crate::function::Core;
use crate::objects::signature::{Domain, Guard, Memory, SigKey};
use crate::translate::{translate, KeyFault, RemoteAccess};
use cxdirect_hw::sig::{copy, sig_err, sig_err_domain, DIF_SIZE};

/// Bytes of domain `d`'s protection field (8 for T10-DIF, 4 for a CRC32).
fn field(d: &Domain) -> u64 {
    d.guard.field()
}

/// One access through a signature key.
struct View<'a> {
    core: &'a Core,
    sig: &'a SigKey,
    /// The key's protection domain: its memory's keys are checked in it.
    pd: u32,
    /// The signature key itself (reported in SIG_ERR CQEs).
    mkey: u32,
}

/// Reads `out.len()` bytes at `addr` of signature key `mkey` (the wire view) for a queue of
/// protection domain `pd`: a local gather (`remote` none) or a peer's READ. Every memory
/// block the read touches is checked whole, and every wire block it touches is given its
/// protection, generated from the wire domain's tags or copied from memory's where the copy
/// mask says (the same block structure only).
pub(crate) fn read(
    core: &Core,
    mkey: u32,
    pd: u32,
    addr: u64,
    out: &mut [u8],
    remote: Option<RemoteAccess>,
) -> Result<(), KeyFault> {
    let (sig, offset) = open(core, mkey, pd, addr, out.len() as u64, false, remote)?;
    if out.is_empty() {
        return Ok(());
    }
    let v = View {
        core,
        sig: &sig,
        pd,
        mkey,
    };
    if sig.mem.is_none() && sig.wire.is_none() {
        return plain(&v, offset, Buf::Read(out));
    }
    let end = offset + out.len() as u64;
    // The data behind the wire blocks the read touches, widened to whole memory blocks.
    let (mut from, mut to) = match sig.wire {
        Some(w) => {
            let (block, unit) = wire_geometry(w);
            (offset / unit * block, end.div_ceil(unit) * block)
        }
        None => (offset, end),
    };
    if let Some(m) = sig.mem {
        let block = u64::from(m.block);
        (from, to) = (from / block * block, to.div_ceil(block) * block);
    }
    if to > sig.data {
        return Err(KeyFault::Bounds);
    }
    let mut data = vec![0u8; (to - from) as usize];
    read_data(&v, from, &mut data)?;
    // Memory's protection, checked block by block; kept for the copy mask.
    let mut found = Vec::new();
    if let Some(m) = sig.mem {
        let block = u64::from(m.block);
        for k in from / block..to / block {
            let mut pi = [0u8; DIF_SIZE];
            mem_io(&v, pi_at(&v, k)?, Buf::Read(&mut pi[..field(&m) as usize]))?;
            let at = (
                (k * block - from) as usize,
                ((k + 1) * block - from) as usize,
            );
            check(
                &v,
                &m,
                sig_err_domain::MEMORY,
                k,
                wire_offset(&sig, k * block),
                &data[at.0..at.1],
                pi,
            );
            found.push(pi);
        }
    }
    let Some(w) = sig.wire else {
        let at = (offset - from) as usize;
        out.copy_from_slice(&data[at..at + out.len()]);
        return Ok(());
    };
    let (block, unit) = wire_geometry(w);
    for j in offset / unit..end.div_ceil(unit) {
        let at = (j * block - from) as usize;
        let bytes = &data[at..at + block as usize];
        // One block structure: wire block j is memory block j, found at j - from / block.
        let copied = if sig.same_blocks {
            found.get((j - from / block) as usize).copied()
        } else {
            None
        };
        let pi = generate(&v, &w, j, bytes, copied);
        // The block as the wire carries it, cut to the part asked for.
        let start = j * unit;
        let pi = &pi[..field(&w) as usize];
        for (n, byte) in bytes.iter().chain(pi.iter()).enumerate() {
            let at = start + n as u64;
            if (offset..end).contains(&at) {
                out[(at - offset) as usize] = *byte;
            }
        }
    }
    Ok(())
}

/// Writes `data` at `addr` of signature key `mkey` (the wire view) for a queue of protection
/// domain `pd`: a local scatter (`remote` none) or a peer's WRITE. The data lands in memory
/// as it comes; a wire block is checked once its protection field has arrived (its data came
/// before it), and a memory block takes its protection once it is complete: at the wire
/// block's protection field when both domains share one block structure (the copy mask may
/// take bytes from it), else at its last data byte. A write that cuts a protection field in
/// two is refused (RDMA packets are multiples of 8 bytes, so the peers of the model never
/// do).
pub(crate) fn write(
    core: &Core,
    mkey: u32,
    pd: u32,
    addr: u64,
    data: &[u8],
    remote: Option<RemoteAccess>,
) -> Result<(), KeyFault> {
    let (sig, offset) = open(core, mkey, pd, addr, data.len() as u64, true, remote)?;
    if data.is_empty() {
        return Ok(());
    }
    let v = View {
        core,
        sig: &sig,
        pd,
        mkey,
    };
    if sig.mem.is_none() && sig.wire.is_none() {
        return plain(&v, offset, Buf::Write(data));
    }
    let end = offset + data.len() as u64;
    if data_floor(&sig, end - 1) >= sig.data {
        return Err(KeyFault::Bounds);
    }
    // The data bytes, and the wire's protection fields that arrived whole.
    let mut arrived = Vec::new();
    match sig.wire {
        Some(w) => {
            let (block, unit) = wire_geometry(w);
            for j in offset / unit..end.div_ceil(unit) {
                let start = j * unit;
                let (from, to) = (offset.max(start), end.min(start + block));
                if from < to {
                    let bytes = &data[(from - offset) as usize..(to - offset) as usize];
                    write_data(&v, j * block + (from - start), bytes)?;
                }
                let (from, to) = (offset.max(start + block), end.min(start + unit));
                if from >= to {
                    continue;
                }
                if to - from != field(&w) {
                    return Err(KeyFault::Access);
                }
                let mut pi = [0u8; DIF_SIZE];
                pi[..(to - from) as usize]
                    .copy_from_slice(&data[(from - offset) as usize..(to - offset) as usize]);
                arrived.push((j, pi));
            }
        }
        None => write_data(&v, offset, data)?,
    }
    let mut found = Vec::new();
    if let Some(w) = sig.wire {
        let (block, unit) = wire_geometry(w);
        let mut bytes = vec![0u8; block as usize];
        for &(j, pi) in &arrived {
            read_data(&v, j * block, &mut bytes)?;
            check(&v, &w, sig_err_domain::WIRE, j, j * unit, &bytes, pi);
            found.push((j, pi));
        }
    }
    let Some(m) = sig.mem else {
        return Ok(());
    };
    let block = u64::from(m.block);
    let mut bytes = vec![0u8; block as usize];
    let last = (data_floor(&sig, end - 1) / block).min(sig.data / block - 1);
    for k in data_floor(&sig, offset) / block..=last {
        let done_at = match (sig.same_blocks, sig.wire) {
            (true, Some(w)) => k * wire_geometry(w).1 + block + field(&w) - 1,
            _ => wire_offset(&sig, k * block + block - 1),
        };
        if !(offset..end).contains(&done_at) {
            continue;
        }
        read_data(&v, k * block, &mut bytes)?;
        let copied = found.iter().find(|(j, _)| *j == k).map(|(_, pi)| *pi);
        let pi = generate(&v, &m, k, &bytes, copied.filter(|_| sig.same_blocks));
        mem_io(&v, pi_at(&v, k)?, Buf::Write(&pi[..field(&m) as usize]))?;
    }
    Ok(())
}

/// A wire domain's data bytes a block, and bytes a block takes on the wire.
fn wire_geometry(w: Domain) -> (u64, u64) {
    let block = u64::from(w.block);
    (block, block + field(&w))
}

/// The wire offset of data byte `d`.
fn wire_offset(sig: &SigKey, d: u64) -> u64 {
    match sig.wire {
        Some(w) => {
            let (block, unit) = wire_geometry(w);
            d / block * unit + d % block
        }
        None => d,
    }
}

/// The data byte at wire offset `at`, or the last data byte before it when `at` falls in a
/// protection field.
fn data_floor(sig: &SigKey, at: u64) -> u64 {
    match sig.wire {
        Some(w) => {
            let (block, unit) = wire_geometry(w);
            at / unit * block + (at % unit).min(block - 1)
        }
        None => at,
    }
}

/// The key's signature and the access's offset in it, after the checks an access through any
/// key passes (variant, free, PD, access, bounds).
fn open(
    core: &Core,
    mkey: u32,
    pd: u32,
    addr: u64,
    len: u64,
    write: bool,
    remote: Option<RemoteAccess>,
) -> Result<(SigKey, u64), KeyFault> {
    let key = core.res.mkeys.get(mkey >> 8).ok_or(KeyFault::NoKey)?;
    if key.variant != mkey as u8 || key.free {
        return Err(KeyFault::NoKey);
    }
    if key.pd != pd {
        return Err(KeyFault::WrongPd);
    }
    let granted = match remote {
        Some(RemoteAccess::Read) => key.remote_read,
        Some(RemoteAccess::Write) => key.remote_write,
        Some(RemoteAccess::Atomic) => false,
        None => (write && key.local_write) || (!write && key.local_read),
    };
    if !granted {
        return Err(KeyFault::Access);
    }
    let sig = key.sig.as_deref().ok_or(KeyFault::NoKey)?;
    // The wire view spans the key's length, or its blocks with their protection where the
    // memory holds none (mlx5_ib sizes the key by the memory: data alone when it inserts).
    let span = key.len.max(sig.wire_span());
    let end = addr.checked_add(len).ok_or(KeyFault::Bounds)?;
    if addr < key.start || end > key.start.saturating_add(span) {
        return Err(KeyFault::Bounds);
    }
    Ok((*sig, addr - key.start))
}

/// A buffer the memory is read into or written from.
enum Buf<'a> {
    Read(&'a mut [u8]),
    Write(&'a [u8]),
}

/// A key without protection in either domain: its one KLM, byte for byte.
fn plain(v: &View, offset: u64, buf: Buf) -> Result<(), KeyFault> {
    let Memory::Klm { bytes, key, va } = v.sig.memory else {
        return Err(KeyFault::Bounds);
    };
    let len = match &buf {
        Buf::Read(b) => b.len(),
        Buf::Write(b) => b.len(),
    } as u64;
    if offset + len > u64::from(bytes) {
        return Err(KeyFault::Bounds);
    }
    mem_io(v, (key, va + offset), buf)
}

/// Where data byte `d` lies in memory, and how many data bytes follow it there without a
/// break: (key, address, bytes).
fn data_at(v: &View, d: u64) -> (u32, u64, u64) {
    match (v.sig.memory, v.sig.mem) {
        (Memory::Klm { key, va, .. }, None) => (key, va + d, v.sig.data - d),
        (Memory::Klm { key, va, .. }, Some(m)) => {
            let block = u64::from(m.block);
            (
                key,
                va + d / block * (block + field(&m)) + d % block,
                block - d % block,
            )
        }
        (
            Memory::Strided {
                data_key,
                data_va,
                data_stride,
                ..
            },
            _,
        ) => {
            let block = v.sig.mem.map_or(1, |m| u64::from(m.block));
            let at = data_va + d / block * u64::from(data_stride) + d % block;
            (data_key, at, block - d % block)
        }
    }
}

/// Reads the data bytes from `d` on into `out`.
fn read_data(v: &View, mut d: u64, mut out: &mut [u8]) -> Result<(), KeyFault> {
    while !out.is_empty() {
        let (key, addr, run) = data_at(v, d);
        let n = (run as usize).min(out.len());
        let (now, later) = out.split_at_mut(n);
        mem_io(v, (key, addr), Buf::Read(now))?;
        (d, out) = (d + n as u64, later);
    }
    Ok(())
}

/// Writes `bytes` as the data bytes from `d` on.
fn write_data(v: &View, mut d: u64, mut bytes: &[u8]) -> Result<(), KeyFault> {
    while !bytes.is_empty() {
        let (key, addr, run) = data_at(v, d);
        let n = (run as usize).min(bytes.len());
        mem_io(v, (key, addr), Buf::Write(&bytes[..n]))?;
        (d, bytes) = (d + n as u64, &bytes[n..]);
    }
    Ok(())
}

/// Where memory block `k`'s protection field lies (a memory domain only).
fn pi_at(v: &View, k: u64) -> Result<(u32, u64), KeyFault> {
    let block = v.sig.mem.map_or(0, |m| u64::from(m.block));
    match v.sig.memory {
        Memory::Klm { key, va, .. } if v.sig.mem.is_some() => Ok((
            key,
            va + k * (block + v.sig.mem.map_or(0, |m| field(&m))) + block,
        )),
        Memory::Strided {
            prot_key,
            prot_va,
            prot_stride,
            ..
        } => Ok((prot_key, prot_va + k * u64::from(prot_stride))),
        Memory::Klm { .. } => Err(KeyFault::Bounds),
    }
}

/// Moves `buf` from or to `(key, address)` of memory, through that key in the signature key's
/// PD (mlx5_ib's internal data key, or its PD's DMA key).
fn mem_io(v: &View, (key, addr): (u32, u64), buf: Buf) -> Result<(), KeyFault> {
    let core = v.core;
    match buf {
        Buf::Read(out) => translate(
            core,
            key,
            v.pd,
            addr,
            out.len() as u64,
            false,
            |iova, at, n| {
                core.dma_read(iova, &mut out[at as usize..(at + n) as usize])
                    .map_err(|_| KeyFault::Bounds)
            },
        ),
        Buf::Write(data) => translate(
            core,
            key,
            v.pd,
            addr,
            data.len() as u64,
            true,
            |iova, at, n| {
                core.dma_write(iova, &data[at as usize..(at + n) as usize])
                    .map_err(|_| KeyFault::Bounds)
            },
        ),
    }
}

/// Checks block `i` of input domain `dom` (at wire offset `offset`, data `data`) against the
/// protection field `pi` found for it, recording a failure; the domain's PSV takes the field.
fn check(v: &View, dom: &Domain, domain: u8, i: u64, offset: u64, data: &[u8], pi: [u8; DIF_SIZE]) {
    let (want, want_sig, want_ref) = expected(dom, i, data);
    let (sig, reference) = words(&pi);
    let mask = v.sig.check_mask;
    let mut syndrome = 0;
    let mut escaped = false;
    match dom.guard {
        // The check mask names the field's bytes, one bit a byte from the most significant.
        Guard::Crc32 | Guard::Crc32c => {
            if (0..4).any(|j| mask & (0x80 >> j) != 0 && pi[j] != want[j]) {
                syndrome |= sig_err::GUARD;
            }
        }
        Guard::Crc | Guard::IpChecksum => {
            let guard = u16::from_be_bytes([pi[0], pi[1]]);
            let app = u16::from_be_bytes([pi[2], pi[3]]);
            escaped =
                dom.app_escape && app == 0xffff && (!dom.ref_escape || reference == 0xffff_ffff);
            if mask & copy::GUARD != 0 && guard != u16::from_be_bytes([want[0], want[1]]) {
                syndrome |= sig_err::GUARD;
            }
            if mask & copy::APP_TAG != 0 && (app ^ dom.app_tag) & dom.app_mask != 0 {
                syndrome |= sig_err::APP_TAG;
            }
            if mask & copy::REF_TAG != 0 && reference != want_ref {
                syndrome |= sig_err::REF_TAG;
            }
        }
    }
    let psv = (dom.psv, sig, reference);
    pending(v, |p| {
        p.psvs.push(psv);
        if syndrome != 0 && !escaped {
            p.errors.push(SigError {
                mkey: v.mkey,
                syndrome,
                expected_sig: want_sig,
                actual_sig: sig,
                expected_ref: want_ref,
                actual_ref: reference,
                offset,
                domain,
            });
        }
    });
}

/// The protection field block `i` (data `data`) takes in output domain `dom`: generated from
/// the domain's tags, with the bytes the copy mask names taken from `copied` (the input's
/// field, one block structure only); the domain's PSV takes it.
fn generate(
    v: &View,
    dom: &Domain,
    i: u64,
    data: &[u8],
    copied: Option<[u8; DIF_SIZE]>,
) -> [u8; DIF_SIZE] {
    let (mut pi, _, _) = expected(dom, i, data);
    if let Some(found) = copied {
        // One bit a byte, the field's first byte the most significant.
        for (j, byte) in pi.iter_mut().enumerate().take(field(dom) as usize) {
            if v.sig.copy_mask & (0x80 >> j) != 0 {
                *byte = found[j];
            }
        }
    }
    let (sig, reference) = words(&pi);
    pending(v, |p| p.psvs.push((dom.psv, sig, reference)));
    pi
}

/// Runs `f` on the function's pending signature list.
fn pending(v: &View, f: impl FnOnce(&mut super::Pending)) {
    match v.core.sig_pending.lock() {
        Ok(mut p) => f(&mut p),
        Err(poisoned) => f(&mut poisoned.into_inner()),
    }
}
