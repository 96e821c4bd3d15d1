//! Signature (T10-DIF) state: PSVs, and what a signature UMR attached to a key (its memory
//! layout and the BSF's two domains), as the data path (`crate::signature`) reads them.

use std::sync::Mutex;

/// A block whose protection failed its check, waiting to be reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SigError {
    /// The signature key.
    pub mkey: u32,
    /// [`sig_err`](cxdirect_hw::sig::sig_err) bits.
    pub syndrome: u16,
    pub expected_sig: u32,
    pub actual_sig: u32,
    pub expected_ref: u32,
    pub actual_ref: u32,
    /// Wire offset of the block in the key.
    pub offset: u64,
    /// The domain that failed ([`sig_err_domain`](cxdirect_hw::sig::sig_err_domain)).
    pub domain: u8,
}

/// What the data path left to apply once it holds the function mutably: errors to report and
/// PSVs' new values. The data path translates through a shared view of the function.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    pub errors: Vec<SigError>,
    /// (PSV, transient signature, reference tag) of the last block of each domain.
    pub psvs: Vec<(u32, u32, u32)>,
}

/// The pending list of the function: taken by `crate::signature::report`.
pub(crate) type PendingCell = Mutex<Pending>;

/// A protection signature variable (CREATE_PSV): a domain's running tags, loaded by SET_PSV
/// and left by the data path at the last block it protected.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Psv {
    /// Its protection domain.
    pub pd: u32,
    /// Guard (high 16 bits) and application tag (low 16 bits).
    pub transient_sig: u32,
    /// Reference tag.
    pub ref_tag: u32,
}

/// Which guard a domain's blocks carry: T10-DIF's (`sig_type` of its inline BSF section) or
/// a CRC block signature (the block format selector above the domain's PSV, libmlx5's
/// `mlx5_umr_crc_bfs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// CRC16 T10-DIF (`MLX5_DIF_CRC`).
    Crc,
    /// IP checksum (`MLX5_DIF_IPCS`).
    IpChecksum,
    /// CRC32 (Ethernet CRC-32) in a 4-byte field.
    Crc32,
    /// CRC32C (Castagnoli) in a 4-byte field.
    Crc32c,
}

impl Guard {
    /// Bytes of the protection field a block of this guard carries.
    pub(crate) fn field(self) -> u64 {
        match self {
            Guard::Crc | Guard::IpChecksum => 8,
            Guard::Crc32 | Guard::Crc32c => 4,
        }
    }
}

/// One domain's T10-DIF protection, from its inline BSF section (`mlx5_fill_inl_bsf`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Domain {
    /// Data bytes a block (512, 520, 4096 or 4160: `bs_selector` of wr.c).
    pub block: u32,
    pub guard: Guard,
    /// The guard's register starts at all ones (a T10-DIF CRC with `MLX5_BSF_SEED`, a CRC
    /// signature without `MLX5_BFS_CRC_SEED_BIT`); else at zero.
    pub seed_ones: bool,
    /// Application tag of every block.
    pub app_tag: u16,
    /// Reference tag of the first block.
    pub ref_tag: u32,
    /// The reference tag grows by one a block (types 1 and 2).
    pub inc_ref: bool,
    /// A block whose application tag is 0xffff is not checked.
    pub app_escape: bool,
    /// ... only when its reference tag is 0xffffffff as well.
    pub ref_escape: bool,
    /// Application tag bits checked.
    pub app_mask: u16,
    /// The domain's PSV.
    pub psv: u32,
}

/// Where a signature key's memory lies (`set_sig_data_segment`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Memory {
    /// One KLM: `bytes` at `va` through `key`, data alone or data and protection interleaved.
    Klm { bytes: u32, key: u32, va: u64 },
    /// A strided block list: `repeat` blocks, data `data_bytes` a block at `data_va` +
    /// i * `data_stride` through `data_key`, protection at `prot_va` + i * `prot_stride`
    /// through `prot_key`.
    Strided {
        repeat: u32,
        data_key: u32,
        data_va: u64,
        data_bytes: u16,
        data_stride: u16,
        prot_key: u32,
        prot_va: u64,
        /// Protection bytes a block (8 for T10-DIF, 4 for a CRC32).
        prot_bytes: u16,
        prot_stride: u16,
    },
}

/// What a signature UMR attached to a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SigKey {
    pub memory: Memory,
    /// The memory domain's protection (none: data alone).
    pub mem: Option<Domain>,
    /// The wire domain's protection (none: data alone).
    pub wire: Option<Domain>,
    /// Protection bytes checked in the input domain (`check_byte_mask`).
    pub check_mask: u8,
    /// Protection bytes the output takes from the input (same block structure only).
    pub copy_mask: u8,
    /// The BSF says both domains have the same block structure (`bsf_size_sbs` bit 4): one
    /// block size, a wire block's protection copied into memory's as the copy mask says.
    pub same_blocks: bool,
    /// Data bytes (`raw_data_size`; all ones from libmlx5: as many as the memory holds).
    pub data_size: u32,
    /// Data bytes the key protects: whole blocks of each domain that has protection (0 when
    /// neither has).
    pub data: u64,
    /// The BSF as the UMR wrote it: a later UMR that loads a new layout without BSF_EN keeps
    /// it (libmlx5's block state SET, `umr_wqe_finalize`).
    pub bsf: [u8; 64],
}

impl SigKey {
    /// Bytes of the key's wire view: the data, with the wire's protection fields when it has
    /// them. A key's address space spans this or its length, the longer (mlx5_ib and libmlx5
    /// size the key by its memory: data alone when the wire inserts).
    pub(crate) fn wire_span(&self) -> u64 {
        match self.wire {
            Some(w) => {
                let block = u64::from(w.block);
                self.data / block * (block + w.guard.field())
            }
            None => self.data,
        }
    }
}
