//! The data path through a signature key: its address space is the wire domain (blocks of
//! data, each followed by its 8-byte protection field when the wire carries one), laid over
//! the memory the UMR attached (data alone, data and protection interleaved, or a strided
//! list of the two apart). Each block is checked in its input domain and given its output
//! domain's protection: generated from the BSF's tags, or copied where the copy mask says.

use super::SigError;
use crate::function::Core;
use crate::objects::signature::{Domain, Guard, Memory, SigKey};
use crate::translate::{translate, KeyFault, RemoteAccess};
use cxdirect_hw::sig::{copy, crc16_t10dif, ip_checksum, sig_err, DIF_SIZE};

/// Bytes of a protection field.
const PI: u64 = DIF_SIZE as u64;

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
/// protection domain `pd`: a local gather (`remote` none) or a peer's READ. The memory domain
/// is checked, the wire's protection generated or copied.
pub(crate) fn read(
    core: &Core,
    mkey: u32,
    pd: u32,
    addr: u64,
    out: &mut [u8],
    remote: Option<RemoteAccess>,
) -> Result<(), KeyFault> {
    let (sig, offset) = open(core, mkey, pd, addr, out.len() as u64, false, remote)?;
    let v = View {
        core,
        sig: &sig,
        pd,
        mkey,
    };
    if sig.blocks == 0 {
        return plain(&v, offset, Buf::Read(out));
    }
    let (block, unit) = geometry(&sig);
    let end = offset + out.len() as u64;
    let mut data = vec![0u8; block as usize];
    for i in offset / unit..end.div_ceil(unit) {
        if i >= u64::from(sig.blocks) {
            return Err(KeyFault::Bounds);
        }
        mem_io(&v, data_at(&v, i, 0)?, Buf::Read(&mut data))?;
        let input = match sig.mem {
            Some(dom) => {
                let mut pi = [0u8; DIF_SIZE];
                mem_io(&v, pi_at(&v, i)?, Buf::Read(&mut pi))?;
                Some((dom, pi))
            }
            None => None,
        };
        let pi = protect(&v, i, i * unit, &data, input, sig.wire);
        // The block as the wire carries it, cut to the part asked for.
        let start = i * unit;
        for (j, byte) in data.iter().chain(pi.iter().flatten()).enumerate() {
            let w = start + j as u64;
            if (offset..end).contains(&w) {
                out[(w - offset) as usize] = *byte;
            }
        }
    }
    Ok(())
}

/// Writes `data` at `addr` of signature key `mkey` (the wire view) for a queue of protection
/// domain `pd`: a local scatter (`remote` none) or a peer's WRITE. The wire domain is checked
/// once a block's protection field has arrived (its data came before it), and memory takes
/// the data and its own protection. A write that cuts a protection field in two is refused
/// (RDMA packets are multiples of 8 bytes, so the peers of the model never do).
pub(crate) fn write(
    core: &Core,
    mkey: u32,
    pd: u32,
    addr: u64,
    data: &[u8],
    remote: Option<RemoteAccess>,
) -> Result<(), KeyFault> {
    let (sig, offset) = open(core, mkey, pd, addr, data.len() as u64, true, remote)?;
    let v = View {
        core,
        sig: &sig,
        pd,
        mkey,
    };
    if sig.blocks == 0 {
        return plain(&v, offset, Buf::Write(data));
    }
    let (block, unit) = geometry(&sig);
    let end = offset + data.len() as u64;
    let mut back = vec![0u8; block as usize];
    for i in offset / unit..end.div_ceil(unit) {
        if i >= u64::from(sig.blocks) {
            return Err(KeyFault::Bounds);
        }
        let start = i * unit;
        // The block's data bytes in this write.
        let (from, to) = (offset.max(start), end.min(start + block));
        if from < to {
            let bytes = &data[(from - offset) as usize..(to - offset) as usize];
            mem_io(&v, data_at(&v, i, from - start)?, Buf::Write(bytes))?;
        }
        let input = match sig.wire {
            Some(dom) => {
                let (pfrom, pto) = (offset.max(start + block), end.min(start + block + PI));
                if pfrom >= pto {
                    continue;
                }
                if pto - pfrom != PI {
                    return Err(KeyFault::Access);
                }
                let mut pi = [0u8; DIF_SIZE];
                pi.copy_from_slice(&data[(pfrom - offset) as usize..(pto - offset) as usize]);
                Some((dom, pi))
            }
            // Memory protects what the wire does not: once the block's last byte is in.
            None if (offset..end).contains(&(start + block - 1)) => None,
            None => continue,
        };
        mem_io(&v, data_at(&v, i, 0)?, Buf::Read(&mut back))?;
        if let Some(pi) = protect(&v, i, start, &back, input, sig.mem) {
            mem_io(&v, pi_at(&v, i)?, Buf::Write(&pi))?;
        }
    }
    Ok(())
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
    let (_, unit) = geometry(sig);
    let span = key.len.max(u64::from(sig.blocks) * unit);
    let end = addr.checked_add(len).ok_or(KeyFault::Bounds)?;
    if addr < key.start || end > key.start.saturating_add(span) {
        return Err(KeyFault::Bounds);
    }
    Ok((*sig, addr - key.start))
}

/// Data bytes a block, and bytes a block takes on the wire.
fn geometry(sig: &SigKey) -> (u64, u64) {
    let block = u64::from(sig.mem.or(sig.wire).map_or(0, |d| d.block));
    let unit = block + if sig.wire.is_some() { PI } else { 0 };
    (block, unit)
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

/// Where byte `at` of block `i`'s data lies in memory: (key, address).
fn data_at(v: &View, i: u64, at: u64) -> Result<(u32, u64), KeyFault> {
    let (block, _) = geometry(v.sig);
    Ok(match v.sig.memory {
        Memory::Klm { key, va, .. } => {
            let unit = block + if v.sig.mem.is_some() { PI } else { 0 };
            (key, va + i * unit + at)
        }
        Memory::Strided {
            data_key,
            data_va,
            data_stride,
            ..
        } => (data_key, data_va + i * u64::from(data_stride) + at),
    })
}

/// Where block `i`'s protection field lies in memory (a memory domain only).
fn pi_at(v: &View, i: u64) -> Result<(u32, u64), KeyFault> {
    let (block, _) = geometry(v.sig);
    match v.sig.memory {
        Memory::Klm { key, va, .. } if v.sig.mem.is_some() => {
            Ok((key, va + i * (block + PI) + block))
        }
        Memory::Strided {
            prot_key,
            prot_va,
            prot_stride,
            ..
        } => Ok((prot_key, prot_va + i * u64::from(prot_stride))),
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

/// The guard of `data` in `guard`'s kind.
fn guard_of(guard: Guard, data: &[u8]) -> u16 {
    match guard {
        Guard::Crc => crc16_t10dif(data),
        Guard::IpChecksum => ip_checksum(data),
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

/// Checks block `i` (wire offset `offset`, data `data`) against its input protection (`input`:
/// the domain and the field found), recording a failure, and returns its protection field in
/// the output domain `output` (none: the output carries no protection).
fn protect(
    v: &View,
    i: u64,
    offset: u64,
    data: &[u8],
    input: Option<(Domain, [u8; DIF_SIZE])>,
    output: Option<Domain>,
) -> Option<[u8; DIF_SIZE]> {
    let mut psvs = Vec::new();
    if let Some((dom, pi)) = input {
        let guard = u16::from_be_bytes([pi[0], pi[1]]);
        let app = u16::from_be_bytes([pi[2], pi[3]]);
        let reference = u32::from_be_bytes([pi[4], pi[5], pi[6], pi[7]]);
        psvs.push((dom.psv, u32::from(guard) << 16 | u32::from(app), reference));
        let escaped =
            dom.app_escape && app == 0xffff && (!dom.ref_escape || reference == 0xffff_ffff);
        let (want_guard, want_ref) = (guard_of(dom.guard, data), ref_tag(&dom, i));
        let check = v.sig.check_mask;
        let mut syndrome = 0;
        if check & copy::GUARD != 0 && guard != want_guard {
            syndrome |= sig_err::GUARD;
        }
        if check & copy::APP_TAG != 0 && (app ^ dom.app_tag) & dom.app_mask != 0 {
            syndrome |= sig_err::APP_TAG;
        }
        if check & copy::REF_TAG != 0 && reference != want_ref {
            syndrome |= sig_err::REF_TAG;
        }
        if syndrome != 0 && !escaped {
            let error = SigError {
                mkey: v.mkey,
                syndrome,
                expected_sig: u32::from(want_guard) << 16 | u32::from(dom.app_tag),
                actual_sig: u32::from(guard) << 16 | u32::from(app),
                expected_ref: want_ref,
                actual_ref: reference,
                offset,
            };
            pending(v, |p| p.errors.push(error));
        }
    }
    let out = output.map(|dom| {
        let mut pi = [0u8; DIF_SIZE];
        pi[0..2].copy_from_slice(&guard_of(dom.guard, data).to_be_bytes());
        pi[2..4].copy_from_slice(&dom.app_tag.to_be_bytes());
        pi[4..8].copy_from_slice(&ref_tag(&dom, i).to_be_bytes());
        if let Some((_, found)) = input {
            // One bit a byte, the guard's first byte the most significant.
            for (j, byte) in pi.iter_mut().enumerate() {
                if v.sig.copy_mask & (0x80 >> j) != 0 {
                    *byte = found[j];
                }
            }
        }
        let sig = u32::from_be_bytes([pi[0], pi[1], pi[2], pi[3]]);
        psvs.push((
            dom.psv,
            sig,
            u32::from_be_bytes([pi[4], pi[5], pi[6], pi[7]]),
        ));
        pi
    });
    pending(v, |p| p.psvs.extend(psvs));
    out
}

/// Runs `f` on the function's pending signature list.
fn pending(v: &View, f: impl FnOnce(&mut super::Pending)) {
    match v.core.sig_pending.lock() {
        Ok(mut p) => f(&mut p),
        Err(poisoned) => f(&mut poisoned.into_inner()),
    }
}
