//! Receive steering: TIRs over the RQ table with Toeplitz RSS, the NIC receive flow tables
//! and their rules, built around the port's RQs and destroyed before them.

use super::config::PortConfig;
use crate::backend::Backend;
use crate::control::{destroy_input, input, output_too_short, Device};
use crate::error::DriverError;
use cxdirect_hw::cmd::Opcode;
use cxdirect_hw::flow::{
    self, CreateFlowGroupIn, CreateFlowGroupOut, CreateFlowTableIn, CreateFlowTableOut, SetFteIn,
};
use cxdirect_hw::tir::{self, CreateRqtIn, CreateRqtOut, CreateTirIn, CreateTirOut};

/// A port's receive steering: the RQ table, the TIRs over it, the NIC receive flow tables, and
/// their groups and rules. Each list holds the objects the device has that are not yet
/// destroyed.
#[derive(Default)]
pub(super) struct Steering {
    /// The root table, while it exists: flow rules ([`crate::Port::steer`]) go into its first
    /// [`FLOW_RULE_SLOTS`] entries.
    root: Option<u32>,
    rqt: Option<u32>,
    tirs: Vec<u32>,
    tables: Vec<u32>,
    groups: Vec<(u32, u32)>,
    entries: Vec<(u32, u32)>,
}

/// Log2 of the root table's entries.
const ROOT_LOG_SIZE: u8 = 10;

/// Root table entries kept for flow rules, from index 0: they match before the port's own
/// rules (the device takes the lowest matching index), which sit in the last two entries.
pub(super) const FLOW_RULE_SLOTS: u32 = (1 << ROOT_LOG_SIZE) - 2;

impl Steering {
    /// The root table, while the steering is built.
    pub(super) fn root(&self) -> Option<u32> {
        self.root
    }

    fn create_tir<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        rss_key: &[u8; 40],
        td: u32,
        kind: TirKind,
    ) -> Result<u32, DriverError> {
        let mut cmd = input(Opcode::CreateTir, 0, CreateTirIn::<&[u8]>::SIZE);
        {
            let mut c = CreateTirIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateTir, "input"))?;
            let mut ctx = c.ctx_mut();
            ctx.set_transport_domain(td);
            match kind {
                TirKind::Direct(rqn) => {
                    ctx.set_disp_type(0).set_inline_rqn(rqn);
                }
                TirKind::Hash { rqt, l3, l4 } => {
                    ctx.set_disp_type(1)
                        .set_indirect_table(rqt)
                        .set_rx_hash_fn(2);
                    ctx.set_rx_hash_toeplitz_key_bytes(rss_key);
                    let fields = tir::HASH_FIELD_SEL_SRC_IP
                        | tir::HASH_FIELD_SEL_DST_IP
                        | if l4.is_some() {
                            tir::HASH_FIELD_SEL_L4_SPORT | tir::HASH_FIELD_SEL_L4_DPORT
                        } else {
                            0
                        };
                    ctx.rx_hash_field_selector_outer_mut()
                        .set_l3_prot_type(l3)
                        .set_l4_prot_type(l4.unwrap_or(0))
                        .set_selected_fields(fields);
                }
            }
        }
        let out = dev.exec(&cmd, CreateTirOut::<&[u8]>::SIZE)?;
        let tirn = CreateTirOut::new(&out[..])
            .map_err(output_too_short)?
            .tirn();
        self.tirs.push(tirn);
        Ok(tirn)
    }

    fn create_table<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        level: u8,
        log_size: u8,
    ) -> Result<u32, DriverError> {
        let mut cmd = input(Opcode::CreateFlowTable, 0, CreateFlowTableIn::<&[u8]>::SIZE);
        CreateFlowTableIn::new(&mut cmd[..])
            .map(|mut c| {
                c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX);
                c.flow_table_context_mut()
                    .set_level(level)
                    .set_log_size(log_size);
            })
            .ok();
        let out = dev.exec(&cmd, CreateFlowTableOut::<&[u8]>::SIZE)?;
        let id = CreateFlowTableOut::new(&out[..])
            .map_err(output_too_short)?
            .table_id();
        self.tables.push(id);
        Ok(id)
    }

    /// A group of one entry at `index` matching `mask`/`value` (outer headers), forwarding to
    /// `dest` (a TIR, or a flow table).
    fn add_rule<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        table: u32,
        index: u32,
        fill: impl Fn(&mut cxdirect_hw::flow::FteMatchSetLyr24<&mut [u8]>, bool),
        dest: (u8, u32),
    ) -> Result<(), DriverError> {
        let mut cmd = input(Opcode::CreateFlowGroup, 0, CreateFlowGroupIn::<&[u8]>::SIZE);
        {
            let mut c = CreateFlowGroupIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::CreateFlowGroup, "input"))?;
            c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                .set_table_id(table)
                .set_start_flow_index(index)
                .set_end_flow_index(index)
                .set_match_criteria_enable(flow::MATCH_OUTER_HEADERS);
            fill(&mut c.match_criteria_mut().outer_headers_mut(), true);
        }
        let out = dev.exec(&cmd, CreateFlowGroupOut::<&[u8]>::SIZE)?;
        let group = CreateFlowGroupOut::new(&out[..])
            .map_err(output_too_short)?
            .group_id();
        self.groups.push((table, group));
        let mut cmd = input(Opcode::SetFlowTableEntry, 0, SetFteIn::<&[u8]>::SIZE + 8);
        {
            let mut c = SetFteIn::new(&mut cmd[..])
                .map_err(|_| DriverError::layout(Opcode::SetFlowTableEntry, "input"))?;
            c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                .set_table_id(table)
                .set_flow_index(index);
            let mut ctx = c.flow_context_all_mut();
            ctx.set_group_id(group)
                .set_action(flow::FLOW_CONTEXT_ACTION_FWD_DEST)
                .set_destination_list_size(1);
            fill(&mut ctx.match_value_mut().outer_headers_mut(), false);
            let _ = ctx.set_destination(0, flow::dest_format_entry(dest.0, dest.1));
        }
        dev.exec(&cmd, 16)?;
        self.entries.push((table, index));
        Ok(())
    }

    /// Builds the steering around `rqs` (in RSS order) in transport domain `td`: one TIR when
    /// there is one RQ, else an RQ table with TIRs hashing by traffic type (and per-port UDP
    /// rules when `config` asks for them), under a root table taking everything (promiscuous)
    /// or the port's MAC, broadcast and multicast.
    pub(super) fn build<B: Backend>(
        &mut self,
        dev: &mut Device<B>,
        config: &PortConfig,
        rqs: &[u32],
        td: u32,
    ) -> Result<(), DriverError> {
        // Where accepted frames go: one RQ, or RSS over all of them by traffic type.
        let classify = if rqs.len() == 1 {
            (
                flow::FLOW_DESTINATION_TYPE_TIR,
                self.create_tir(dev, &config.rss_key, td, TirKind::Direct(rqs[0]))?,
            )
        } else {
            let mut cmd = input(
                Opcode::CreateRqt,
                0,
                CreateRqtIn::<&[u8]>::SIZE + 4 * rqs.len(),
            );
            {
                let mut c = CreateRqtIn::new(&mut cmd[..])
                    .map_err(|_| DriverError::layout(Opcode::CreateRqt, "input"))?;
                c.rqt_context_mut()
                    .set_rqt_max_size(rqs.len() as u16)
                    .set_rqt_actual_size(rqs.len() as u16);
                for (i, &rqn) in rqs.iter().enumerate() {
                    let _ = c.set_rq_num(i, rqn);
                }
            }
            let out = dev.exec(&cmd, CreateRqtOut::<&[u8]>::SIZE)?;
            let rqt = CreateRqtOut::new(&out[..])
                .map_err(output_too_short)?
                .rqtn();
            self.rqt = Some(rqt);
            // Per-port UDP rules first (lower index matches first), then 7 RSS rules.
            let rules = rqs.len() * usize::from(config.udp_port_queues.is_some()) + 7;
            let table =
                self.create_table(dev, 1, rules.next_power_of_two().trailing_zeros() as u8)?;
            let mut index = 0;
            if let Some(base) = config.udp_port_queues {
                for (i, &rqn) in rqs.iter().enumerate() {
                    let tirn = self.create_tir(dev, &config.rss_key, td, TirKind::Direct(rqn))?;
                    let port = base + i as u16;
                    self.add_rule(
                        dev,
                        table,
                        index,
                        move |m, mask| {
                            m.set_ip_version(if mask { 0xf } else { 4 })
                                .set_ip_protocol(if mask { 0xff } else { 17 })
                                .set_udp_dport(if mask { 0xffff } else { port });
                        },
                        (flow::FLOW_DESTINATION_TYPE_TIR, tirn),
                    )?;
                    index += 1;
                }
            }
            for (version, l3) in [(4u8, 0u8), (6, 1)] {
                for (proto, l4) in [(17u8, 1u8), (6, 0)] {
                    let tirn = self.create_tir(
                        dev,
                        &config.rss_key,
                        td,
                        TirKind::Hash {
                            rqt,
                            l3,
                            l4: Some(l4),
                        },
                    )?;
                    self.add_rule(
                        dev,
                        table,
                        index,
                        move |m, mask| {
                            m.set_ip_version(if mask { 0xf } else { version })
                                .set_ip_protocol(if mask { 0xff } else { proto });
                        },
                        (flow::FLOW_DESTINATION_TYPE_TIR, tirn),
                    )?;
                    index += 1;
                }
                let tirn = self.create_tir(
                    dev,
                    &config.rss_key,
                    td,
                    TirKind::Hash { rqt, l3, l4: None },
                )?;
                self.add_rule(
                    dev,
                    table,
                    index,
                    move |m, mask| {
                        m.set_ip_version(if mask { 0xf } else { version });
                    },
                    (flow::FLOW_DESTINATION_TYPE_TIR, tirn),
                )?;
                index += 1;
            }
            let other = self.create_tir(dev, &config.rss_key, td, TirKind::Direct(rqs[0]))?;
            self.add_rule(
                dev,
                table,
                index,
                |_, _| {},
                (flow::FLOW_DESTINATION_TYPE_TIR, other),
            )?;
            (flow::FLOW_DESTINATION_TYPE_FLOW_TABLE, table)
        };
        // The root: everything (promiscuous), or the port's MAC plus broadcast and multicast.
        let root = self.create_table(dev, 0, ROOT_LOG_SIZE)?;
        let own = FLOW_RULE_SLOTS;
        if config.promiscuous {
            self.add_rule(dev, root, own, |_, _| {}, classify)?;
        } else {
            let mac = u64::from_be_bytes({
                let mut b = [0u8; 8];
                b[2..].copy_from_slice(&dev.info().mac);
                b
            });
            self.add_rule(
                dev,
                root,
                own,
                move |m, mask| {
                    m.set_dmac(if mask { 0xffff_ffff_ffff } else { mac });
                },
                classify,
            )?;
            // The group bit of the destination MAC covers broadcast and every multicast.
            self.add_rule(
                dev,
                root,
                own + 1,
                |m, _| {
                    m.set_dmac(0x0100_0000_0000);
                },
                classify,
            )?;
        }
        let mut cmd = input(
            Opcode::SetFlowTableRoot,
            0,
            flow::SetFlowTableRootIn::<&[u8]>::SIZE,
        );
        flow::SetFlowTableRootIn::new(&mut cmd[..])
            .map(|mut c| {
                c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                    .set_table_id(root);
            })
            .ok();
        dev.exec(&cmd, 16)?;
        self.root = Some(root);
        Ok(())
    }

    /// Destroys the port's steering (rules, groups, tables, TIRs, the RQ table): frames are
    /// dropped by the device from here on, and the RQs are named by nothing any more. An object
    /// the device refuses to destroy is kept, with what depends on it, and the next call tries
    /// it again (a recovery that failed here resumes here); the first refusal is returned.
    pub(super) fn destroy<B: Backend>(&mut self, dev: &mut Device<B>) -> Result<(), DriverError> {
        let mut first_err = None;
        let mut refused = |r: Result<(), DriverError>| match r {
            Ok(()) => false,
            Err(e) => {
                first_err.get_or_insert(e);
                true
            }
        };
        let mut entries = std::mem::take(&mut self.entries);
        entries.retain(|&(table, index)| {
            let mut cmd = input(
                Opcode::DeleteFlowTableEntry,
                0,
                flow::DeleteFteIn::<&[u8]>::SIZE,
            );
            flow::DeleteFteIn::new(&mut cmd[..])
                .map(|mut c| {
                    c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                        .set_table_id(table)
                        .set_flow_index(index);
                })
                .ok();
            refused(dev.exec(&cmd, 16).map(|_| ()))
        });
        self.entries = entries;
        let mut groups = std::mem::take(&mut self.groups);
        groups.retain(|&(table, group)| {
            let mut cmd = input(
                Opcode::DestroyFlowGroup,
                0,
                flow::DestroyFlowGroupIn::<&[u8]>::SIZE,
            );
            flow::DestroyFlowGroupIn::new(&mut cmd[..])
                .map(|mut c| {
                    c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                        .set_table_id(table)
                        .set_group_id(group);
                })
                .ok();
            refused(dev.exec(&cmd, 16).map(|_| ()))
        });
        self.groups = groups;
        // The root first: a table that is root cannot be destroyed; tables in creation order
        // reversed so forwarded-to tables go last.
        let mut tables = std::mem::take(&mut self.tables);
        for at in (0..tables.len()).rev() {
            let mut cmd = input(
                Opcode::DestroyFlowTable,
                0,
                flow::DestroyFlowTableIn::<&[u8]>::SIZE,
            );
            flow::DestroyFlowTableIn::new(&mut cmd[..])
                .map(|mut c| {
                    c.set_table_type(flow::FLOW_TABLE_TYPE_NIC_RX)
                        .set_table_id(tables[at]);
                })
                .ok();
            if !refused(dev.exec(&cmd, 16).map(|_| ())) {
                tables.remove(at);
            }
        }
        self.tables = tables;
        self.root = self.root.filter(|root| self.tables.contains(root));
        let mut tirs = std::mem::take(&mut self.tirs);
        tirs.retain(|&tirn| {
            refused(
                dev.exec(&destroy_input(Opcode::DestroyTir, tirn, 8), 16)
                    .map(|_| ()),
            )
        });
        self.tirs = tirs;
        if let Some(rqt) = self.rqt {
            if !refused(
                dev.exec(&destroy_input(Opcode::DestroyRqt, rqt, 8), 16)
                    .map(|_| ()),
            ) {
                self.rqt = None;
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// After a function reset: the device holds none of these objects any more.
    pub(super) fn forget(&mut self) {
        *self = Self::default();
    }
}

#[derive(Clone, Copy)]
enum TirKind {
    Direct(u32),
    Hash { rqt: u32, l3: u8, l4: Option<u8> },
}
