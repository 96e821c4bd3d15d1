//! Connecting a queue pair: the peer's address ([`Endpoint`]), the attributes `ibv_modify_qp`
//! users set ([`ConnectParams`]), and the walk RST→INIT→RTR→RTS with what each step takes
//! (as Linux mlx5_ib and rdma-core's DevX RC tests fill the QP context).

use super::{QpState, RcQueuePair};
use crate::backend::Backend;
use crate::control::{input, Device};
use crate::error::DriverError;
use crate::rdma::wr::PathMtu;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::qp::{pm_state, Qpc, Rst2initQpIn};

/// Log2 of how many packets go between the requester's ACK requests: mlx5_ib's
/// MLX5_IB_ACK_REQ_FREQ, which __mlx5_ib_modify_qp writes, with the migrated path state, into
/// every transition.
pub(super) const LOG_ACK_REQ_FREQ: u8 = 8;

/// Where a queue pair is reached: what two sides exchange before connecting (as
/// `ibv_rc_pingpong` exchanges LID:QPN:PSN:GID, with the MAC that RoCE needs as well).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Endpoint {
    /// QP number (24 bits).
    pub qpn: u32,
    /// First PSN the QP sends with (24 bits).
    pub psn: u32,
    /// GID (16 bytes, network order).
    pub gid: [u8; 16],
    /// The port's MAC address.
    pub mac: [u8; 6],
}

/// Connection attributes (`ibv_qp_attr` fields of the RTR and RTS transitions).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectParams {
    /// Path MTU (at most [`crate::rdma::Roce::max_path_mtu`]).
    pub mtu: PathMtu,
    /// Local ACK timeout: 4.096 µs × 2^`ack_timeout` (0 to 31; 0 waits for ever).
    pub ack_timeout: u8,
    /// Retransmissions after an ACK timeout before a request fails (0 to 7).
    pub retry_count: u8,
    /// RNR NAK timer code this side sends as responder (0 to 31; 12 = 0.64 ms).
    pub rnr_timer: u8,
    /// Retries after an RNR NAK (0 to 6; 7 retries for ever).
    pub rnr_retry: u8,
    /// RDMA READs and atomics outstanding as requester (0 to the device's maximum).
    pub max_rd_atomic: u8,
    /// RDMA READs and atomics served at once as responder (0 to the device's maximum).
    pub max_dest_rd_atomic: u8,
    /// IP hop limit (TTL).
    pub hop_limit: u8,
    /// IP traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Service level: the Ethernet priority of the QP's packets, 0 to 7 (the path's
    /// `eth_prio`, where mlx5_ib's `mlx5_set_path` writes an address handle's SL). The port
    /// sends them in the traffic class its priority map gives that priority, within that
    /// class's rate limit (as set by Linux's `dcb ets` and `dcb maxrate`).
    pub sl: u8,
}

impl Default for ConnectParams {
    /// `ibv_rc_pingpong`'s and rdma-core's test values: MTU 1024, timeout 14 (67 ms), 7
    /// retries, RNR timer 12, RNR retry 7; 1 READ outstanding each way; hop limit 64; SL 0.
    fn default() -> Self {
        Self {
            mtu: PathMtu::Mtu1024,
            ack_timeout: 14,
            retry_count: 7,
            rnr_timer: 12,
            rnr_retry: 7,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
            hop_limit: 64,
            traffic_class: 0,
            sl: 0,
        }
    }
}

/// Port of the queue pair's path (the function's only port).
pub(super) const PORT: u8 = 1;

impl<B: Backend> RcQueuePair<B> {
    /// Where peers reach this QP (its QPN, its first PSN, the GID and MAC of its port).
    pub fn local_endpoint(&self) -> Endpoint {
        Endpoint {
            qpn: self.qpn,
            psn: self.psn,
            gid: self.roce.gid(),
            mac: self.roce.mac(),
        }
    }

    /// Sets the first PSN the QP sends with (24 bits), for a connection manager that chose
    /// it and told the peer (the starting PSN of a CM REQ or REP). The QP must be in
    /// [`QpState::Reset`]; [`RcQueuePair::local_endpoint`] reports it from then on.
    ///
    /// # Errors
    ///
    /// [`DriverError::WrongState`] after the QP left reset; a config error for a PSN past 24
    /// bits.
    pub fn set_send_psn(&mut self, psn: u32) -> Result<(), DriverError> {
        if self.state != QpState::Reset {
            return Err(DriverError::WrongState {
                what: "the queue pair",
                state: format!("{:?}", self.state()),
                needed: "in reset: the first PSN is set before connecting",
            });
        }
        if psn > 0xff_ffff {
            return Err(DriverError::config("psn", psn, "0 to 0xffffff"));
        }
        self.psn = psn;
        Ok(())
    }

    /// Connects to `remote`: RST2INIT (remote read, write and atomics allowed: the memory
    /// regions' rights decide), INIT2RTR (path MTU, the peer's QPN, PSN, GID and MAC), RTR2RTS
    /// (own PSN, timeout, retries). The QP must be in [`QpState::Reset`].
    ///
    /// # Errors
    ///
    /// [`DriverError::Config`] for a parameter out of range (nothing sent);
    /// [`DriverError::WrongState`] unless in reset; [`DriverError::Command`] when the device
    /// refuses a step (the QP is then reset again).
    pub fn connect(
        &mut self,
        dev: &mut Device<B>,
        remote: &Endpoint,
        params: ConnectParams,
    ) -> Result<(), DriverError> {
        if self.state != QpState::Reset {
            return Err(DriverError::WrongState {
                what: "the queue pair",
                state: format!("{:?}", self.state()),
                needed: "in reset: call reset() first",
            });
        }
        self.check(remote, &params)?;
        let walked = self.walk(dev, remote, &params);
        if walked.is_err() {
            let _ = self.modify_simple(dev, Opcode::Qp2rstQp);
            return walked;
        }
        self.state = QpState::ReadyToSend;
        Ok(())
    }

    fn check(&self, remote: &Endpoint, p: &ConnectParams) -> Result<(), DriverError> {
        let checks: [FieldCheck; 9] = [
            (
                "mtu",
                u64::from(p.mtu.bytes()),
                p.mtu <= self.roce.max_path_mtu(),
                "at most the port's path MTU (Roce::max_path_mtu)",
            ),
            at_most("ack_timeout", p.ack_timeout, 31, "0 to 31"),
            at_most("retry_count", p.retry_count, 7, "0 to 7"),
            at_most("rnr_timer", p.rnr_timer, 31, "0 to 31"),
            at_most("rnr_retry", p.rnr_retry, 7, "0 to 7"),
            at_most("sl", p.sl, 7, "0 to 7 (an Ethernet priority)"),
            (
                "max_rd_atomic",
                u64::from(p.max_rd_atomic),
                u32::from(p.max_rd_atomic) <= 1 << self.roce.log_max_rd_atomic().min(7),
                "at most 2^log_max_ra_req_qp",
            ),
            (
                "max_dest_rd_atomic",
                u64::from(p.max_dest_rd_atomic),
                u32::from(p.max_dest_rd_atomic) <= 1 << self.roce.log_max_dest_rd_atomic().min(7),
                "at most 2^log_max_ra_res_qp",
            ),
            (
                "remote.qpn",
                u64::from(remote.qpn),
                remote.qpn != 0 && remote.qpn <= 0x00ff_ffff && remote.psn <= 0x00ff_ffff,
                "a QPN of 1 to 2^24-1 and a 24-bit PSN",
            ),
        ];
        for (field, value, ok, allowed) in checks {
            if !ok {
                return Err(DriverError::config(field, value, allowed));
            }
        }
        if remote.gid.iter().all(|&b| b == 0) {
            return Err(DriverError::config(
                "remote.gid",
                0u64,
                "a GID (not all zero)",
            ));
        }
        Ok(())
    }

    fn walk(
        &mut self,
        dev: &mut Device<B>,
        remote: &Endpoint,
        p: &ConnectParams,
    ) -> Result<(), DriverError> {
        let gid_index = self.roce.gid_index();
        let log_max_msg = self.log_max_msg;
        let own_psn = self.psn;
        let sport = udp_source_port(self.qpn, remote.qpn);
        self.transition(dev, Opcode::Rst2initQp, |q| {
            q.set_pm_state(pm_state::MIGRATED)
                .set_log_ack_req_freq(LOG_ACK_REQ_FREQ)
                .set_rre(true)
                .set_rwe(true)
                .set_rae(true);
            q.primary_address_path_mut().set_vhca_port_num(PORT);
        })?;
        self.transition(dev, Opcode::Init2rtrQp, |q| {
            q.set_pm_state(pm_state::MIGRATED)
                .set_log_ack_req_freq(LOG_ACK_REQ_FREQ)
                .set_mtu(p.mtu as u8)
                .set_log_msg_max(log_max_msg)
                .set_remote_qpn(remote.qpn)
                .set_min_rnr_nak(p.rnr_timer)
                .set_next_rcv_psn(remote.psn)
                .set_log_rra_max(log2(p.max_dest_rd_atomic));
            q.primary_address_path_mut()
                .set_vhca_port_num(PORT)
                .set_src_addr_index(gid_index)
                .set_rgid(remote.gid)
                .set_rmac(remote.mac)
                .set_udp_sport(sport)
                .set_hop_limit(p.hop_limit)
                .set_tclass(p.traffic_class)
                .set_eth_prio(p.sl);
        })?;
        self.transition(dev, Opcode::Rtr2rtsQp, |q| {
            q.set_pm_state(pm_state::MIGRATED)
                .set_log_ack_req_freq(LOG_ACK_REQ_FREQ)
                .set_next_send_psn(own_psn)
                .set_retry_count(p.retry_count)
                .set_rnr_retry(p.rnr_retry)
                .set_log_sra_max(log2(p.max_rd_atomic));
            // Only the ack timeout of the path: mlx5_ib's __mlx5_ib_modify_qp writes the
            // whole path (mlx5_set_path, port included) only with IB_QP_AV, at INIT2RTR.
            q.primary_address_path_mut().set_ack_timeout(p.ack_timeout);
        })
    }

    /// One transition command with `fill` writing its attributes into the QP context.
    pub(super) fn transition(
        &mut self,
        dev: &mut Device<B>,
        op: Opcode,
        fill: impl FnOnce(&mut Qpc<&mut [u8]>),
    ) -> Result<(), DriverError> {
        // Every transition input has RST2INIT's layout: qpn, opt_param_mask, then the context.
        let mut cmd = input(op, 0, Rst2initQpIn::<&[u8]>::SIZE);
        {
            let mut c =
                Rst2initQpIn::new(&mut cmd[..]).map_err(|_| DriverError::layout(op, "input"))?;
            c.set_qpn(self.qpn);
            fill(&mut c.qpc_mut());
        }
        dev.exec(&cmd, 16).map(|_| ())
    }
}

/// ilog2 of a count of outstanding READs (0 for 0 and 1, as Linux sets it only when given).
fn log2(n: u8) -> u8 {
    if n <= 1 {
        0
    } else {
        (7 - n.leading_zeros()) as u8
    }
}

/// The RoCE v2 UDP source port of a connection, from the flow label both QPNs make (Linux
/// `rdma_calc_flow_label` and `rdma_flow_label_to_udp_sport`): 0xc000 to 0xffff.
fn udp_source_port(lqpn: u32, rqpn: u32) -> u16 {
    let mut v = u64::from(lqpn) * u64::from(rqpn);
    v ^= v >> 20;
    v ^= v >> 40;
    let fl = (v & 0xf_ffff) as u32;
    let mut low = fl & 0x3fff;
    low ^= (fl & 0xf_c000) >> 14;
    (low | 0xc000) as u16
}

/// One connect parameter checked: its name, its value, whether it is allowed, and what is.
type FieldCheck = (&'static str, u64, bool, &'static str);

/// The check of a field `value` that may be 0 to `max`.
fn at_most(field: &'static str, value: u8, max: u8, allowed: &'static str) -> FieldCheck {
    (field, u64::from(value), value <= max, allowed)
}

#[cfg(test)]
mod tests {
    use super::{log2, udp_source_port};

    #[test]
    fn source_ports_stay_in_the_roce_range_and_logs_round_down() {
        for (l, r) in [(1, 1), (0x12, 0x3456), (0xff_ffff, 0xff_fffe)] {
            assert!(udp_source_port(l, r) >= 0xc000);
        }
        assert_ne!(udp_source_port(5, 6), udp_source_port(5, 7));
        assert_eq!(
            [log2(0), log2(1), log2(2), log2(3), log2(16)],
            [0, 0, 1, 1, 4]
        );
    }
}
