//! Steering entries (STEv1) encoded the way rdma-core's dr_ste_v1.c setters write them (in the
//! library's own layout, control then tag then mask, swapped into the device layout at the end
//! as `dr_ste_v1_prepare_for_postsend` does), written independently of the model's decoder (`sw_steering::entry`) so
//! the tests check the decoder rather than mirror it.

/// `DEVX_SET`: `value`'s low `width` bits at bit `off` of `buf` (most significant bit first).
pub fn devx_set(buf: &mut [u8], off: usize, width: usize, value: u64) {
    for i in 0..width {
        let bit = (value >> (width - 1 - i)) & 1;
        let pos = off + i;
        let m = 0x80u8 >> (pos % 8);
        if bit != 0 {
            buf[pos / 8] |= m;
        } else {
            buf[pos / 8] &= !m;
        }
    }
}

/// One entry under construction, in rdma-core's software layout.
pub struct Builder(pub [u8; 64]);

impl Builder {
    /// `dr_ste_v1_init`: lookup type, gvmi (not on MATCH entries), next lookup type DONT_CARE,
    /// hit and miss gvmi.
    pub fn init(lu_type: u16, gvmi: u16) -> Self {
        let mut b = Builder([0; 64]);
        b.set(0x00, 8, u64::from(lu_type >> 8));
        b.set(0x30, 8, u64::from(lu_type & 0xff));
        if lu_type >> 8 != 4 {
            b.set(0xb2, 14, u64::from(gvmi));
        }
        b.next_lu_type(0x000f);
        b.set(0x60, 16, u64::from(gvmi));
        b.set(0x20, 16, u64::from(gvmi));
        b
    }

    /// A copy to change further.
    pub fn clone_raw(&self) -> Self {
        Builder(self.0)
    }

    fn set(&mut self, off: usize, width: usize, value: u64) {
        devx_set(&mut self.0, off, width, value);
    }

    fn is_match(&self) -> bool {
        self.0[0] == 4
    }

    /// `dr_ste_v1_set_next_lu_type`.
    pub fn next_lu_type(&mut self, lu: u16) -> &mut Self {
        if !self.is_match() {
            self.set(0xb0, 1, u64::from(lu >> 8));
        }
        self.set(0x70, 8, u64::from(lu & 0xff));
        self
    }

    /// `dr_ste_v1_set_byte_mask`.
    pub fn byte_mask(&mut self, bm: u16) -> &mut Self {
        if !self.is_match() {
            self.set(0xa0, 16, u64::from(bm));
        }
        self
    }

    /// `dr_ste_v1_set_miss_addr`.
    pub fn miss(&mut self, addr: u64) -> &mut Self {
        let index = addr >> 6;
        self.set(0x38, 8, index >> 26);
        self.set(0x40, 26, index);
        self
    }

    /// `dr_ste_v1_set_hit_addr`.
    pub fn hit(&mut self, addr: u64, entries: u64) -> &mut Self {
        let index = (addr >> 5) | entries;
        self.set(0x78, 8, index >> 27);
        self.set(0x80, 27, index);
        self
    }

    /// `dr_ste_v1_set_counter_id`.
    pub fn counter(&mut self, id: u32) -> &mut Self {
        self.set(0x08, 24, u64::from(id));
        self
    }

    /// `dr_ste_v1_set_reparse`.
    pub fn reparse(&mut self) -> &mut Self {
        self.set(0x5c, 1, 1);
        self
    }

    /// `dr_ste_v1_set_ctrl_always_hit_htbl` (BWC target) then `dr_ste_set_always_hit`.
    pub fn always_hit_htbl(&mut self, bm: u16, lu: u16, addr: u64, n: u64) -> &mut Self {
        self.set(0x00, 8, 0);
        self.byte_mask(bm);
        self.set(0xb1, 1, 0);
        self.next_lu_type(lu);
        self.hit(addr, n);
        self.0[32..].fill(0);
        self
    }

    /// `dr_ste_v1_set_ctrl_always_miss` then `dr_ste_set_always_miss` (tag byte 0 = 0xdc,
    /// mask byte 0 = 0).
    pub fn always_miss(&mut self, miss: u64) -> &mut Self {
        self.hit(u64::MAX, 0);
        self.next_lu_type(0x000f);
        self.miss(miss);
        self.0[32] = 0xdc;
        self.0[48] = 0;
        self
    }

    /// The rule's tag (software layout: bytes 32..48).
    pub fn tag(&mut self, tag: [u8; 16]) -> &mut Self {
        self.0[32..48].copy_from_slice(&tag);
        self
    }

    /// A MATCH entry's 32-byte tag (bytes 32..64, the same in both layouts), as a definer
    /// builder's tag function writes it (`dr_ste_v1_build_def22_tag`).
    pub fn match_tag(&mut self, tag: [u8; 32]) -> &mut Self {
        self.0[32..].copy_from_slice(&tag);
        self
    }

    /// `dr_ste_set_bit_mask` (software layout: bytes 48..64).
    pub fn bit_mask(&mut self, mask: [u8; 16]) -> &mut Self {
        self.0[48..64].copy_from_slice(&mask);
        self
    }

    /// Raw action bytes at byte `at` of the action area (BWC: from byte 24; MATCH: from 20).
    pub fn action(&mut self, at: usize, bytes: &[u8]) -> &mut Self {
        let base = if self.is_match() { 20 } else { 24 };
        self.0[base + at..base + at + bytes.len()].copy_from_slice(bytes);
        self
    }

    /// `dr_ste_v1_prepare_for_postsend` for a full entry: tag and mask swapped, except in MATCH
    /// entries.
    pub fn post(&self) -> [u8; 64] {
        let mut out = self.0;
        if !self.is_match() {
            out[32..48].copy_from_slice(&self.0[48..64]);
            out[48..64].copy_from_slice(&self.0[32..48]);
        }
        out
    }
}

/// `dr_ste_v1_set_rx_flow_tag`.
pub fn flow_tag(tag: u32) -> [u8; 4] {
    let mut a = [0u8; 4];
    devx_set(&mut a, 0, 8, 0x0c);
    devx_set(&mut a, 8, 24, u64::from(tag));
    a
}

/// `dr_ste_v1_set_action_set` (shifter gets `MLX5_MODIFY_HEADER_V1_QW_OFFSET` added).
pub fn set_action(field: u8, shifter: u8, len: u8, data: u32) -> [u8; 8] {
    let mut a = [0u8; 8];
    devx_set(&mut a, 0, 8, 0x06);
    devx_set(&mut a, 8, 8, u64::from(field));
    devx_set(&mut a, 0x12, 6, u64::from(shifter + 0x20));
    devx_set(&mut a, 0x1a, 6, u64::from(len));
    devx_set(&mut a, 0x20, 32, u64::from(data));
    a
}

/// `dr_ste_v1_set_action_copy`.
pub fn copy_action(dst: u8, dst_shift: u8, len: u8, src: u8, src_shift: u8) -> [u8; 8] {
    let mut a = [0u8; 8];
    devx_set(&mut a, 0, 8, 0x05);
    devx_set(&mut a, 8, 8, u64::from(dst));
    devx_set(&mut a, 0x12, 6, u64::from(dst_shift + 0x20));
    devx_set(&mut a, 0x1a, 6, u64::from(len));
    devx_set(&mut a, 0x28, 8, u64::from(src));
    devx_set(&mut a, 0x32, 6, u64::from(src_shift + 0x20));
    a
}

/// `dr_ste_v1_set_push_vlan`: INSERT_INLINE at offset 12 bytes (6 words).
pub fn push_vlan(vlan_hdr: u32) -> [u8; 8] {
    let mut a = [0u8; 8];
    devx_set(&mut a, 0, 8, 0x0a);
    devx_set(&mut a, 0x10, 7, 6);
    devx_set(&mut a, 0x20, 32, u64::from(vlan_hdr));
    a
}

/// `dr_ste_v1_set_pop_vlan`: REMOVE_BY_SIZE from the first VLAN anchor (2), 2 words a tag.
pub fn pop_vlan(count: u8) -> [u8; 4] {
    let mut a = [0u8; 4];
    devx_set(&mut a, 0, 8, 0x08);
    devx_set(&mut a, 0x0a, 6, 2);
    devx_set(&mut a, 0x1a, 6, u64::from(2 * count));
    a
}

/// `dr_ste_v1_set_basic_rewrite_actions`: MODIFY_LIST.
pub fn modify_list(count: u8, index: u16) -> [u8; 4] {
    let mut a = [0u8; 4];
    devx_set(&mut a, 0, 8, 0x0f);
    devx_set(&mut a, 8, 8, u64::from(count));
    devx_set(&mut a, 0x10, 16, u64::from(index));
    a
}
