//! Tests of the CM room: messages against Linux's layout, and two CMs talking through an
//! in-memory wire that may lose, replay or forge MADs.

mod exchange;
mod hostile;
mod sequence;
mod wire;

use super::*;
use std::net::Ipv4Addr;
use std::time::Duration;

pub(super) const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub(super) const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub(super) const PORT: u16 = 7174;
pub(super) const SRC_PORT: u16 = 40000;

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

pub(super) use crate::test_rng::TestRng as Rng;

/// A MAD of pseudo-random bytes from `rng`.
pub(super) fn random_mad(rng: &mut Rng) -> Mad {
    let mut m = [0u8; 256];
    rng.fill(&mut m);
    m
}

/// Two CMs and the wire between them. `drop` decides, per MAD, whether the wire loses it.
pub(super) struct Net {
    pub client: Cm,
    pub server: Cm,
    pub now: Duration,
    /// Every MAD delivered, as (to the server?, bytes).
    pub log: Vec<(bool, Mad)>,
    pub client_events: Vec<Event>,
    pub server_events: Vec<Event>,
}

impl Net {
    pub fn new() -> Self {
        let client = Cm::new(Identity::new(0x0002_c903_0000_0001, CLIENT_IP, 0x1234));
        let mut server = Cm::new(Identity::new(0x0002_c903_0000_0002, SERVER_IP, 0x9876));
        server.listen(PORT).unwrap();
        Self {
            client,
            server,
            now: Duration::ZERO,
            log: Vec::new(),
            client_events: Vec::new(),
            server_events: Vec::new(),
        }
    }

    /// Polls both sides and delivers what they send, until the wire is quiet, dropping what
    /// `drop(to_server, mad)` says.
    pub fn run(&mut self, mut drop: impl FnMut(bool, &Mad) -> bool) {
        for _ in 0..32 {
            let c = self.client.poll(self.now);
            let s = self.server.poll(self.now);
            self.client_events.extend(c.events);
            self.server_events.extend(s.events);
            if c.sends.is_empty() && s.sends.is_empty() {
                return;
            }
            for (to, mad) in c.sends {
                assert_eq!(to, CmAddress::ipv4(SERVER_IP));
                if drop(true, &mad) {
                    continue;
                }
                self.log.push((true, mad));
                let from = CmAddress::ipv4(CLIENT_IP);
                if let Ok(Some(e)) = self.server.receive(self.now, from, &mad) {
                    self.server_events.push(e);
                }
            }
            for (to, mad) in s.sends {
                assert_eq!(to, CmAddress::ipv4(CLIENT_IP));
                if drop(false, &mad) {
                    continue;
                }
                self.log.push((false, mad));
                let from = CmAddress::ipv4(SERVER_IP);
                if let Ok(Some(e)) = self.client.receive(self.now, from, &mad) {
                    self.client_events.push(e);
                }
            }
        }
        panic!("the wire never went quiet");
    }

    /// Advances the clock and runs the wire.
    pub fn advance(&mut self, by: Duration, drop: impl FnMut(bool, &Mad) -> bool) {
        self.now += by;
        self.run(drop);
    }

    pub fn connect(&mut self) -> ConnId {
        self.client
            .connect(SERVER_IP, PORT, SRC_PORT, &QpParams::rping(0x11), b"hello")
            .unwrap()
    }

    /// Accepts the first pending connect request on the server.
    pub fn accept(&mut self) -> (ConnId, QpAttributes) {
        let req = self
            .server_events
            .iter()
            .find_map(|e| match e {
                Event::ConnectRequest(r) => Some(*r),
                _ => None,
            })
            .expect("a connect request");
        let qp = req.negotiate(QpParams::rping(0x22));
        let attrs = self.server.accept(req.id, &qp, b"welcome").unwrap();
        (req.id, attrs)
    }

    /// A fully established pair, wire quiet.
    pub fn established() -> (Self, ConnId, ConnId) {
        let mut net = Self::new();
        let c = net.connect();
        net.run(|_, _| false);
        let (s, _) = net.accept();
        net.run(|_, _| false);
        assert_eq!(net.client.state(c), Some("ESTABLISHED"));
        assert_eq!(net.server.state(s), Some("ESTABLISHED"));
        net.client_events.clear();
        net.server_events.clear();
        net.log.clear();
        (net, c, s)
    }
}

pub(super) fn attr_of(mad: &Mad) -> u16 {
    u16::from_be_bytes([mad[16], mad[17]])
}

pub(super) fn lose(attr: u16, mut times: usize) -> impl FnMut(bool, &Mad) -> bool {
    move |_, mad| {
        if attr_of(mad) == attr && times > 0 {
            times -= 1;
            true
        } else {
            false
        }
    }
}
