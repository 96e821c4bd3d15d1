//! The rules every event a side reports must keep (see the parent module's documentation).

use super::{Pair, Violation};
use crate::cm::wire::{parse, Mad, Message};
use crate::cm::{ConnId, Event};

impl Pair {
    /// Checks one event of `side`; `mad` is what `receive` took (`None`: from `poll`).
    pub(super) fn check(
        &mut self,
        side: usize,
        event: Event,
        mad: Option<&Mad>,
    ) -> Result<(), Violation> {
        let parsed = mad.map(|m| parse(m));
        let message = match parsed {
            Some(Ok(p)) => Some(p.message),
            Some(Err(e)) => {
                return Err(
                    self.violation(side, format_args!("{event:?} from a MAD it refuses: {e}"))
                )
            }
            None => None,
        };
        let state = |s: &Self, id: ConnId| s.sides[side].cm.state(id);
        match event {
            Event::ConnectRequest(r) => {
                if !matches!(message, Some(Message::Req(_))) {
                    return Err(self.violation(
                        side,
                        format_args!("connect request without a REQ: {event:?}"),
                    ));
                }
                let t = &mut self.sides[side].track;
                if !t.issued.insert(r.id.0) {
                    return Err(
                        self.violation(side, format_args!("connect request reused ID {:?}", r.id))
                    );
                }
                t.pending.push(r.id);
            }
            Event::Established { id, qp, .. } => {
                let t = &self.sides[side].track;
                if !t.issued.contains(&id.0) {
                    return Err(
                        self.violation(side, format_args!("established {id:?}, never issued"))
                    );
                }
                if t.established.contains(&id.0) {
                    return Err(self.violation(side, format_args!("{id:?} established twice")));
                }
                let valid = if t.active.contains(&id.0) {
                    matches!(message, Some(Message::Rep(rep))
                        if rep.remote_comm_id == id.0 && rep.local_qpn & 0x00ff_ffff == qp.remote_qpn)
                } else {
                    t.accepted.contains(&id.0)
                        && matches!(message, Some(Message::Rtu(rtu)) if rtu.remote_comm_id == id.0)
                };
                if !valid {
                    return Err(
                        self.violation(side, format_args!("{id:?} established by {message:?}"))
                    );
                }
                if state(self, id) != Some("ESTABLISHED") {
                    return Err(self.violation(
                        side,
                        format_args!("{id:?} reported up in {:?}", state(self, id)),
                    ));
                }
                self.sides[side].track.established.insert(id.0);
                self.outcome.established += 1;
            }
            Event::Rejected { id, .. } => {
                if !self.sides[side].track.issued.contains(&id.0) {
                    return Err(self.violation(side, format_args!("rejected {id:?}, never issued")));
                }
                if !matches!(message, Some(Message::Rej(_))) {
                    return Err(
                        self.violation(side, format_args!("{id:?} rejected by {message:?}"))
                    );
                }
                self.sides[side].track.pending.retain(|&p| p != id);
                self.outcome.rejected += 1;
            }
            Event::Disconnected { id, timed_out } => {
                // `cm_dreq_handler` takes a DREQ in REP_SENT too (the RTU was lost and the
                // peer hangs up): rdma_cm reports DISCONNECTED for the accepted connection.
                let t = &self.sides[side].track;
                if !(t.established.contains(&id.0) || t.accepted.contains(&id.0)) {
                    return Err(self.violation(
                        side,
                        format_args!("disconnected {id:?}, never accepted or established"),
                    ));
                }
                let from_dreq_or_drep =
                    matches!(message, Some(Message::Dreq(_) | Message::Drep(_))) && !timed_out;
                if !(from_dreq_or_drep || (message.is_none() && timed_out)) {
                    return Err(self.violation(side, format_args!("{event:?} from {message:?}")));
                }
                self.outcome.disconnected += 1;
            }
            Event::TimedOut(t) => {
                if message.is_some() {
                    return Err(self.violation(side, format_args!("a MAD reported {event:?}")));
                }
                if !self.sides[side].track.issued.contains(&t.id.0) {
                    return Err(
                        self.violation(side, format_args!("timed out {:?}, never issued", t.id))
                    );
                }
                if state(self, t.id).is_some() {
                    return Err(self.violation(side, format_args!("{:?} timed out but kept", t.id)));
                }
                self.sides[side].track.pending.retain(|&p| p != t.id);
                self.outcome.timed_out += 1;
            }
        }
        Ok(())
    }
}
