//! Packet pacing driven as Linux drives it: SET_PP_RATE_LIMIT as `mlx5_set_pp_rate_limit_cmd`
//! lays it out (mlx5_core's rl.c, for mlx5e's `tx_maxrate` and libmlx5's `mlx5dv_pp_alloc`),
//! and the MODIFY_SQ that names an entry (`mlx5e_modify_sq` for `mlx5e_set_sq_maxrate`).

use super::{CmdFail, Cq, Host, Sq};
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::qos::SetPpRateLimitIn;
use cxdirect_hw::wq::{ModifySqIn, MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX};

impl Host {
    /// SET_PP_RATE_LIMIT of entry `index` under `uid`: `rate_kbps` kb/s (0 lets the entry
    /// go), bursts of at most `burst_bytes` (0: the device's default).
    pub fn set_pp_rate(
        &mut self,
        uid: u16,
        index: u16,
        rate_kbps: u32,
        burst_bytes: u32,
    ) -> Result<Vec<u8>, CmdFail> {
        let mut input = Self::input(Opcode::SetPpRateLimit, 0, 0x40);
        let mut cmd = SetPpRateLimitIn::new(&mut input[..]).expect("layout");
        cmd.set_uid(uid).set_rate_limit_index(index);
        cmd.ctx_mut()
            .set_rate_limit(rate_kbps)
            .set_burst_upper_bound(burst_bytes);
        self.exec(&input, 0x10)
    }

    /// The input of MODIFY_SQ RDY to RDY naming rate table entry `index` (0: unlimited), as
    /// `mlx5e_modify_sq` sends it with the rate limit bit (`rl_update`).
    pub fn sq_rate_input(sqn: u32, index: u16) -> Vec<u8> {
        let mut input = Self::input(Opcode::ModifySq, 0, 0x110);
        let mut m = ModifySqIn::new(&mut input[..]).expect("layout");
        m.set_sq_state(1)
            .set_sqn(sqn)
            .set_modify_bitmask(MODIFY_SQ_BITMASK_PACKET_PACING_RATE_LIMIT_INDEX);
        m.ctx_mut()
            .set_state(1)
            .set_packet_pacing_rate_limit_index(index);
        input
    }

    /// Writes `n` signalled sends of one UDP frame of `frame_bytes` on `sq` (its payload at
    /// `buf` under `key`) and rings the doorbell once, as a paced queue's sender does; nothing
    /// when `n` is 0.
    pub fn send_batch(&mut self, sq: &mut Sq, n: usize, frame_bytes: usize, key: u32, buf: u64) {
        if n == 0 {
            return;
        }
        let frame = super::udp_frame(frame_bytes - 42, 7);
        let mut last = Vec::new();
        for _ in 0..n {
            last = self.build_send(sq, &frame, buf, key, true);
            self.write_wqe(sq, &last);
        }
        self.ring(sq, &last, false);
    }

    /// Takes the completions waiting on `cq`; how many there were.
    pub fn take_completions(&self, cq: &mut Cq) -> usize {
        std::iter::from_fn(|| self.poll_cq(cq)).count()
    }
}
